/* optimizer.h — AdamW over the parameter registry (decoupled weight decay, only on tensors the
 * registry marks `decay`: matrices and embeddings, not biases or norm weights) and the global
 * gradient norm used for clipping. Owns: the first and second moment buffers (fp32, backend
 * memory). Uses: model/, kernels/ops.h. Used by: train/trainer. */
#ifndef LLMT_OPTIMIZER_H
#define LLMT_OPTIMIZER_H
#include <stdint.h>
#include "model/gpt.h"
#include "train/zero.h"

typedef struct adamw {
    const ops_t *ops;
    float *m, *v;  /* [n]: the whole flat buffer (ZeRO 0) or this rank's partition (ZeRO >= 1) */
    size_t n;
    int64_t t;     /* updates applied so far (bias correction uses t + 1) */
} adamw_t;

void adamw_create(adamw_t *opt, const ops_t *ops, size_t n);
void adamw_destroy(adamw_t *opt);
/* Clip factor for a global norm: grad_clip / norm when norm exceeds grad_clip (> 0), else 1. */
float clip_scale(double norm, double grad_clip);
/* One AdamW update with learning rate lr of the parameters this rank updates (all of them, or
 * its ZeRO partition, then all-gathered over the replicas); gradients are multiplied by
 * grad_scale first (clipping). */
void adamw_step(adamw_t *opt, gpt_t *m, zero_t *z, const config_t *cfg, float lr,
                float grad_scale);
#endif
