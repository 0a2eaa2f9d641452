/* flat.h — the flat parameter buffer of this rank as files see it: the registry it is laid
 * out by; sharded checkpoint I/O (each rank its ZeRO partition of the parameters and moments,
 * piece by piece, from and to where they live: saves, weights files, resumes, rollbacks,
 * init_from); a gathered host copy (the gradient dump) and putting a full host copy back (the
 * seeded initialisation: into the model, or the fp32 master and its rounded copy, or this
 * rank's ZeRO-3 partition).
 * Owns: nothing (it works on the model, the optimizer and the ZeRO map it is given).
 * Uses: model/params, model/gpt, train/optimizer, train/zero, train/pipeline (the schedule),
 * parallel/grid, io/checkpoint (ckpt_io_t). Used by: train/trainer, train/checkpointing. */
#ifndef LLMT_FLAT_H
#define LLMT_FLAT_H
#include <stdbool.h>
#include "config/config.h"
#include "io/checkpoint.h"
#include "model/gpt.h"
#include "parallel/grid.h"
#include "train/optimizer.h"
#include "train/zero.h"

/* The parameter registry this rank's model has (its tp shard, its pipeline stage's layers — the
 * interleaved schedule's virtual_stages chunks of them —, its experts): the one layout of the
 * flat buffers that the model, ZeRO and a resume's host copies share. */
void flat_rank_registry(params_t *P, const config_t *cfg, const grid_t *grid);
/* A host copy of a flat buffer for a file writer (the gradient dump of &train dump_grads_step):
 * the full buffer (in `from`'s memory), or (sharded: ZeRO partitions) the partitions gathered on
 * z's rank 0 (NULL on the other ranks,
 * which write nothing). Collective over z's group when sharded. Free with xfree. */
float *flat_host_copy(const zero_t *z, const ops_t *from, const float *full, const float *shard,
                      bool sharded);
/* The parameters from a full host copy of the flat buffer (fp32): into the model (bf16/fp16:
 * the master and the rounded copy), or (ZeRO-3) this rank's partition of them. */
void flat_set_params_from_host(zero_t *z, adamw_t *opt, gpt_t *m, const ops_t *ops,
                               const float *host);

/* Sharded checkpoint I/O (io/checkpoint.h's ckpt_io_t) of the run's flat buffers: every rank moves
 * only its ZeRO partition of the parameters (the fp32 master with bf16/fp16) and of the AdamW
 * moments, piece by piece through the staging buffer, straight from and to where they live (the
 * device, or the host when offloaded). */
typedef struct flat_io {
    zero_t *z;
    adamw_t *opt;
    gpt_t *m;
    const ops_t *ops;
    float *host_params; /* load with 16-bit weights: the master's values (only the partition is
                           touched), handed to the optimizer at the end */
} flat_io_t;
/* The seeded grid-invariant init (params_init's values) into the model and optimizer as a load
 * places a checkpoint's: ZeRO >= 1 draws the rank's partition only, in pieces of `piece` floats,
 * then the replicas follow (flat_load_finish); no host copy of the stage. `staging` holds `piece`
 * floats. */
void flat_init_params(flat_io_t *f, uint64_t seed, float *staging, size_t piece);
/* The flat elements [*lo, *hi) a load (or the seeded init) places on this rank: its ZeRO
 * partition with ZeRO >= 1 (the moments and master exist for it only), else all of them. */
void flat_load_range(const zero_t *z, size_t *lo, size_t *hi);
/* A save: every rank its partition [lo, hi) of each buffer, the tensors `owner` gives it. */
void flat_save_io(ckpt_io_t *io, flat_io_t *f, int owner, float *staging, size_t staging_floats);
/* A load into the model and optimizer (ckpt_load_io, then flat_load_finish): ZeRO >= 1 reads the
 * partition (dp_comm: the group that together holds one copy), else all of the buffer. */
void flat_load_io(ckpt_io_t *io, flat_io_t *f, MPI_Comm dp_comm, float *staging, size_t staging_floats);
/* After a load of the parameters: the replicas and derived copies (ZeRO-1/2 all-gather, ZeRO-3
 * gathered copies invalidated, the master or the 16-bit copy) follow. */
void flat_load_finish(flat_io_t *f);
#endif
