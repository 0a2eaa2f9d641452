/* zero.h — ZeRO over the data-parallel group, and the one ownership map of the run.
 * The flat local buffer of a rank (its tensor-parallel shard of its pipeline stage: P.total
 * floats, laid out alike on every dp replica) is cut into dp contiguous partitions of `shard`
 * floats: dp rank r owns [r*shard, min((r+1)*shard, total)). Every element of every global tensor
 * thus has exactly one owner on every grid and stage: the tp rank whose shard holds it (tp rank
 * 0 for a replicated tensor), the first pipeline stage for the tied wte, and the dp rank whose
 * partition holds its flat position. The gradient norm, the optimizer update and checkpoint
 * writes all use this map.
 *   stage 0: every replica holds, reduces (all-reduce) and updates everything;
 *   stage 1: the AdamW moments exist for the partition only; each rank updates its partition of
 *            the parameters and the replicas all-gather them;
 *   stage 2: also the reduced gradient: the buckets are reduce-scattered instead of all-reduced
 *            (still overlapped with the last micro-batch's backward; once per step);
 *   stage 3: also the parameters: a rank keeps only its partition, and each layer's weights are
 *            all-gathered into a buffer before its forward and its backward (see gpt.h's
 *            weight hooks), the next layer's gather started while the current one computes.
 * With dp = 1 every stage is stage 0 (said once at startup).
 * Owns: the partition table and the partition-sized buffers. Uses: model/gpt, parallel/comm.
 * Used by: train/ (optimizer, dp_sync, trainer, checkpointing). */
#ifndef LLMT_ZERO_H
#define LLMT_ZERO_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/ops.h"
#include "model/gpt.h"
#include "parallel/comm.h"

/* ZeRO-3: a gathered copy of one unit's weights (gpt.h units: a block, the embedding, the final
 * norm), filled by an all-gather of the unit's pieces from every dp partition. */
typedef struct zero_gbuf {
    float *buf;              /* [hi - lo] */
    size_t lo, hi;           /* the unit's flat range */
    int unit;                /* GPT_UNIT_NONE when empty */
    bool ready;              /* holds this step's values */
    comm_req_t req;          /* a gather in flight into buf */
    size_t *counts, *displs;   /* [dp] the pieces of the unit's range */
    size_t *hcounts, *hdispls; /* [dp] the same in pairs of 16-bit elements (a 16-bit copy) */
} zero_gbuf_t;

/* ZeRO-2/3 with pp = 1: one unit's gradient of one micro-batch, reduce-scattered as soon as its
 * backward is done and added to the partition's gradient. */
typedef struct zero_gstage {
    float *buf;              /* [hi - lo] the unit's local gradient of this micro-batch */
    size_t lo, hi;
    int unit;
    float *recv;             /* this rank's part of the reduced unit gradient */
    size_t part_lo;          /* ... which is grad_shard[part_lo, part_lo + counts[rank]) */
    size_t *counts;          /* [dp] */
    comm_req_t req;
} zero_gstage_t;

typedef struct zero {
    int stage;              /* effective stage (0 when dp = 1) */
    int dp, rank;           /* the dp group and this rank's place in it */
    const comm_group_t *dp_group;
    size_t total;           /* floats in the flat local buffer */
    size_t shard;           /* floats per partition (the last one may be shorter) */
    size_t lo, hi;          /* this rank's partition [lo, hi) */
    size_t *counts, *displs; /* [dp] every partition's size and start */
    float *grad_shard;      /* stage >= 2: the reduced gradient of [lo, hi) */
    float *param_shard;     /* stage 3: the parameters of [lo, hi), of the model's weights
                               type (gpt.h wtype: 16-bit elements for a 16-bit copy; allocated
                               by zero_attach) */
    const ops_t *ops;
    /* stage 3: the weight provider of the model */
    gpt_t *m;
    gpt_weight_provider_t provider;
    bool resident;          /* gathered blocks stay until the next update (else 2 rotate) */
    zero_gbuf_t embed, final, *blocks;
    int n_blocks;
    const zero_gbuf_t *in_use; /* the block buffer bound last */
    /* stage >= 2 with pp = 1 and 1F1B: gradients staged per unit and micro-batch (the model
     * keeps no full gradient buffer) */
    bool staged;
    dtype_t grad_dtype;     /* staged gradients are stored as this type before their reduction */
    gpt_grad_provider_t grad_provider;
    zero_gstage_t sembed, sfinal, sblocks[2];
    const zero_gstage_t *s_in_use;
    long gathers;           /* unit gathers made (for the end-of-run report) */
    /* expert parallelism (ep > 1): the group above is the experts' replicas (edp), so the
     * expert tensors are partitioned among the ranks that hold them; the dense tensors, the
     * same on every ep rank, are owned (norm) on ep rank 0 and their gradients summed over
     * ep_group too (ZeRO >= 2) */
    int ep, rank_ep;
    const comm_group_t *ep_group;
} zero_t;

/* Partition a flat buffer of `total` floats over the dp group; allocates the shard buffers the
 * stage needs. `stage` as configured (0..3). */
void zero_create(zero_t *z, int stage, int dp, int rank, const comm_group_t *dp_group, size_t total,
                 const ops_t *ops);
/* The partition [*lo, *hi) of dp rank `rank` of a flat buffer of `total` floats over dp ranks
 * (what zero_create gives that rank). */
void zero_partition(size_t total, int dp, int rank, size_t *lo, size_t *hi);
/* Expert parallelism (ep > 1): the ep group and this rank's place in it (the fields above). */
void zero_set_experts(zero_t *z, int ep, int rank_ep, const comm_group_t *ep_group);
/* Stage >= 2: stage the gradients per micro-batch (possible when every micro-batch's backward
 * ends before the next one's begins: pp = 1 with 1F1B); call before zero_attach / the model.
 * Returns the provider gpt_create takes (NULL when not staged). */
const gpt_grad_provider_t *zero_stage_grads(zero_t *z, bool possible);
/* Staged gradients: before a step's first micro-batch (the partition's sum starts at 0) and
 * after its last (every reduce-scatter finished and added). */
void zero_grads_begin_step(zero_t *z);
void zero_grads_finish_step(zero_t *z);
void zero_destroy(zero_t *z);
/* The part [*a, *b) of the flat range [off, off + n) this rank updates (stage 0: all of it;
 * else its partition). Returns false when it is empty. */
bool zero_my_range(const zero_t *z, size_t off, size_t n, size_t *a, size_t *b);
/* Floats the optimizer state holds on this rank: total (stage 0) or the partition. */
size_t zero_state_floats(const zero_t *z);
/* Where the optimizer reads the reduced gradient and updates the parameters of flat element i
 * (i inside zero_my_range): the full buffers for low stages, the shards for high ones. */
float *zero_grad_at(const zero_t *z, float *grads, size_t i);
float *zero_param_at(const zero_t *z, float *params, size_t i);
size_t zero_state_index(const zero_t *z, size_t i); /* index into m, v */
/* After the update: stage 1/2 replicas get every partition (in place); stage 3 marks its
 * gathered copies stale. */
void zero_allgather_params(zero_t *z, float *params);
/* The same for the model's weights copy in whatever storage it has (gpt.h wtype: a 16-bit store
 * is gathered as 16-bit elements, its norms and biases widened again). */
void zero_allgather_weights(zero_t *z, gpt_t *m);
/* Element a (flat index, this rank's to write) of the model's 16-bit weights copy: in the model's
 * store, or with ZeRO-3 in this rank's partition. */
void *zero_weights_at(const zero_t *z, const gpt_t *m, size_t a);
/* Sum of squared reduced gradients over the elements this rank owns in the ownership map
 * (summed over dp and the model-parallel group by the caller: every element counted once). */
double zero_grad_sumsq_owned(const zero_t *z, const gpt_t *m);
/* Stage 3: the provider gpt_create takes (its model is attached later with zero_attach). */
const gpt_weight_provider_t *zero3_provider(zero_t *z);
/* The model exists: allocate the buffers for its units — stage 3's gather buffers (resident: one
 * per block of the stage, in all its chunks; else two that rotate, the next block gathered while
 * the current one computes) and the gradient staging buffers (the embedding, the final norm, two
 * blocks). */
void zero_attach(zero_t *z, gpt_t *m, bool resident);
/* Stage 3: the parameters changed (an update, a load): every gathered copy is stale. */
void zero3_invalidate(zero_t *z);
/* The gradient dump (&train dump_grads_step): assemble a full flat host buffer on dp rank 0 from
 * every rank's partition (`part` holds [lo, hi) of this rank, host memory); `full` is written on
 * dp rank 0 only (may be NULL elsewhere). Checkpoints never gather (train/flat.h's sharded I/O). */
void zero_gather_to_root(const zero_t *z, const float *part, float *full);
#endif
