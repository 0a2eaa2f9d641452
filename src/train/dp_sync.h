/* dp_sync.h — data-parallel gradient synchronisation in buckets.
 * The flat gradient buffer is cut at parameter boundaries into buckets of about bucket_mb.
 * During the backward of a step's last micro-batch, a bucket's all-reduce over the dp group is
 * started (non-blocking) as soon as every parameter in it has its final gradient, so the
 * communication overlaps the rest of the backward; dp_sync_finish starts the rest (after the
 * tied-embedding all-reduce between the first and last pipeline stage) and waits for all.
 * With ZeRO stage 2 or 3 a bucket is reduce-scattered instead: each dp rank receives the summed
 * gradient of the bucket's part inside its partition, in the zero_t's grad_shard.
 * Owns: the buckets and their requests. Uses: model/gpt, parallel/comm. Used by: train/trainer. */
#ifndef LLMT_DP_SYNC_H
#define LLMT_DP_SYNC_H
#include <stdbool.h>
#include "model/gpt.h"
#include "train/zero.h"

typedef struct dp_bucket {
    size_t begin, end;  /* float range of the flat gradient buffer */
    int ready_layer;    /* final once the backward of this layer is done (-1: at the very end) */
    bool started;
    bool experts;       /* expert tensors only: reduced over their replicas (edp_group) */
    comm_req_t req;
    size_t *counts;     /* ZeRO >= 2: [dp] the bucket's part in each dp rank's partition */
    float *recv;        /* ZeRO >= 2: where this rank's part lands in grad_shard */
} dp_bucket_t;

typedef struct dp_sync {
    gpt_t *m;
    zero_t *z;
    const comm_group_t *dp_group, *embed_group; /* embed_group: NULL on middle stages */
    const comm_group_t *edp_group; /* expert parallelism: the ranks holding the same experts */
    int dp;
    dtype_t grad_dtype;  /* gradients are stored as this type before their reduction */
    dp_bucket_t *b;
    int n;
    int started_early; /* buckets started inside the backward in the last step (for reports) */
} dp_sync_t;

/* edp_group: the ranks that hold the same experts (dp_group without expert parallelism): expert
 * tensors get buckets of their own, reduced over it. */
void dp_sync_create(dp_sync_t *d, gpt_t *m, zero_t *z, const comm_group_t *dp_group,
                    const comm_group_t *embed_group, const comm_group_t *edp_group, int dp,
                    double bucket_mb);
void dp_sync_destroy(dp_sync_t *d);
/* A gpt_layer_hook_t: after `layer`'s backward of the last micro-batch. ctx is the dp_sync_t. */
void dp_sync_layer_done(void *ctx, int layer);
/* Tied-embedding all-reduce, then every bucket not yet started, then wait for all. */
void dp_sync_finish(dp_sync_t *d);
#endif
