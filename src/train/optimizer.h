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
    float *master; /* [n] fp32 master weights when the model's weights are a low-precision copy
                      (bf16/fp16), NULL when they are fp32 themselves */
    dtype_t weights; /* the type of the model's weights copy */
    size_t n;
    int64_t t;     /* updates applied so far (bias correction uses t + 1) */
} adamw_t;

/* n: the optimizer's elements (zero_state_floats); weights: the model's weights type (a master
 * copy is kept when it is not fp32). */
void adamw_create(adamw_t *opt, const ops_t *ops, size_t n, dtype_t weights);
/* The model's parameters were set (init, a load): the master copy takes them in full precision
 * and the model keeps them rounded to its weights type (then the replicas gather, ZeRO 1/2). */
void adamw_take_params(adamw_t *opt, gpt_t *m, zero_t *z);
/* Where the fp32 values of the parameters live for a file writer: the master copy (and whether
 * it is a partition), or the model's own buffers. */
const float *adamw_master_or(const adamw_t *opt, const float *params);
void adamw_destroy(adamw_t *opt);
/* Clip factor for a global norm: grad_clip / norm when norm exceeds grad_clip (> 0), else 1. */
float clip_scale(double norm, double grad_clip);
/* One AdamW update with learning rate lr of the parameters this rank updates (all of them, or
 * its ZeRO partition, then all-gathered over the replicas); gradients are multiplied by
 * grad_scale first (clipping). */
void adamw_step(adamw_t *opt, gpt_t *m, zero_t *z, const config_t *cfg, float lr,
                float grad_scale);
#endif
