/* checkpoint.h — checkpoints and weight files in HDF5 (DESIGN.md). Layout of one file:
 *   /model/<param>                float32, the parameter's GLOBAL shape
 *   /optimizer/adamw/m/<param>    float32, AdamW first moment, GLOBAL shape   (checkpoints)
 *   /optimizer/adamw/v/<param>    float32, AdamW second moment, GLOBAL shape  (checkpoints)
 *   every dataset: attribute `checksum` (uint64) = sum mod 2^64 over its elements of
 *                  mix64(global index, float bits); ranks compute it on their own parts
 *   attributes on / : format ("llmtrain-checkpoint"), format_version (1), llmtrain_version,
 *                  kind ("weights" | "checkpoint"), step, seed, vocab_size, padded_vocab,
 *                  config (the effective namelist); checkpoints also: tokens_seen, sample_pos
 *                  (next global sample index), adam_t, skipped, global_batch, loss_scale,
 *                  grid_dp, grid_tp, grid_pp (the grid that wrote it)
 *   /config        : the namelist instead of the attribute when it is over 60000 bytes
 * Written collectively through parallel HDF5 (MPI-IO, collective transfers): each element by
 * one rank only (dp rank 0; replicated tensors by tp rank 0; the tied wte by the first stage).
 * Read likewise: each rank reads exactly its own hyperslabs, so a file written on one grid
 * loads on any other, and the checksums are verified over the elements read.
 * Written to "<path>.tmp", flushed, and renamed when complete. Uses: model/params, core/. */
#ifndef LLMT_CHECKPOINT_H
#define LLMT_CHECKPOINT_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include "model/params.h"

typedef struct ckpt_meta {
    int64_t step;
    int64_t seed;
    int vocab_size, padded_vocab;
    const char *config_text; /* effective namelist text (may be NULL) */
} ckpt_meta_t;

/* What a resume needs besides tensors. */
typedef struct ckpt_state {
    int64_t tokens_seen, sample_pos, adam_t, skipped;
    int64_t global_batch;
    double loss_scale;
    int64_t grid_dp, grid_tp, grid_pp;
} ckpt_state_t;

/* Collective over comm. params (and m, v for a checkpoint; NULL for a weights file) are host
 * copies of this rank's local flat buffers. `owner`: this rank's replica writes (dp rank 0).
 * `info`: MPI-IO hints (MPI_INFO_NULL for none). Returns the bytes of tensor data written. */
double ckpt_save(const char *path, MPI_Comm comm, MPI_Info info, const params_t *P,
                 const float *params, const float *m, const float *v, const ckpt_meta_t *meta,
                 const ckpt_state_t *state, int owner);
/* Collective: read this rank's hyperslabs of /model (and the moments when m, v are not NULL,
 * and state when not NULL) and verify every dataset's checksum. Returns 0, or -1 with one
 * message in err (missing, not HDF5, truncated, corrupt, wrong model) on every rank alike; never
 * exits, so a caller can fall back to an older file. meta_step receives the step. */
int ckpt_load(const char *path, MPI_Comm comm, const params_t *P, float *params, float *m,
              float *v, ckpt_state_t *state, int64_t *meta_step, int owner, char *err,
              size_t errlen);

/* Rank-local, cheap: the global_batch attribute of a checkpoint file, 0 if unreadable. */
int64_t ckpt_peek_global_batch(const char *path);

/* Weights only (mode eval/generate, &run init_from, weights_stepNNNNNN.h5 files). */
void ckpt_write_weights(const char *path, MPI_Comm comm, const params_t *P, const float *flat,
                        const ckpt_meta_t *meta, int writer);
/* Reads and verifies (checksums over the elements of the replicas with owner = 1, which must
 * together hold one copy: dp rank 0); any problem is a user error naming the file. Returns step. */
int64_t ckpt_read_weights(const char *path, MPI_Comm comm, const params_t *P, float *flat,
                          int owner);
#endif
