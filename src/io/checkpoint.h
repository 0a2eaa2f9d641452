/* checkpoint.h — model weights in HDF5 (first version of the checkpoint format, DESIGN.md).
 * Layout of one file:
 *   /model/<param name>   float32 dataset in the parameter's GLOBAL shape
 *   attributes on /      : format ("llmtrain-checkpoint"), format_version (1), llmtrain_version,
 *                          step, seed, vocab_size, padded_vocab, config (the effective namelist)
 *   /config              : the namelist instead of the attribute when it is over 60000 bytes
 *                          (an attribute must fit the 64 KiB object header)
 * Written through parallel HDF5 (MPI-IO driver): each rank writes the hyperslabs of the shards it
 * owns (replicated parameters: only tp rank 0 of the dp rank 0 writes). Read likewise: each rank
 * reads exactly its own hyperslabs, so a file written on one grid loads on any other.
 * Written to "<path>.tmp" and renamed when complete. Uses: model/params, core/. */
#ifndef LLMT_CHECKPOINT_H
#define LLMT_CHECKPOINT_H
#include <mpi.h>
#include <stdint.h>
#include "model/params.h"

typedef struct ckpt_meta {
    int64_t step;
    int64_t seed;
    int vocab_size, padded_vocab;
    const char *config_text; /* effective namelist text (may be NULL) */
} ckpt_meta_t;

/* Collective over `comm`. `flat` is the host copy of this rank's local parameters.
 * `writer` says whether this rank writes its shard (one replica per shard writes). */
void ckpt_write_weights(const char *path, MPI_Comm comm, const params_t *P, const float *flat,
                        const ckpt_meta_t *meta, int writer);
/* Collective over `comm`: every rank reads its own hyperslabs into `flat`. A missing file, a
 * missing dataset or a shape that does not match the registry is a user error naming the file
 * and dataset (fatal_user). Returns the step stored in the file. */
int64_t ckpt_read_weights(const char *path, MPI_Comm comm, const params_t *P, float *flat);
#endif
