/* optimizer.h — AdamW over the parameter registry (decoupled weight decay, only on tensors the
 * registry marks `decay`: matrices and embeddings, not biases or norm weights) and the global
 * gradient norm used for clipping. Owns: the first and second moment buffers and the fp32 master
 * weights (backend memory, or host memory with &train offload = 'optimizer'), and the offload
 * thread. Uses: model/, kernels/ops.h (the model's backend, and the CPU backend for an offloaded
 * update), core/thread. Used by: train/trainer, train/checkpointing, train/postval.
 *
 * Offload (&train offload = 'optimizer', for models whose optimizer state does not fit on the
 * device): m, v and an fp32 master copy of the weights (kept also for fp32 runs) live in host
 * memory, page-locked by the backend (ops->host_register). A step copies this rank's gradients
 * out (to_host), the CPU backend applies AdamW to the host state (the same kernel and order as
 * the CPU backend's own update: the same numbers) and the rounded weights go back (to_device).
 * Without ZeRO the host update runs on a thread of its own, unit by unit in the forward's order
 * (embeddings, blocks, final norm), while the next step's forward goes on: before a unit's
 * weights are used (gpt_t on_unit_use) the main thread waits for that unit and uploads it. With
 * ZeRO 1/2/3 the partitions are all-gathered after the update, so the update is done in place of
 * the step (not overlapped). */
#ifndef LLMT_OPTIMIZER_H
#define LLMT_OPTIMIZER_H
#include <stdbool.h>
#include <stdint.h>
#include "model/gpt.h"
#include "train/zero.h"

typedef struct adamw_offload adamw_offload_t;

typedef struct adamw {
    const ops_t *ops;       /* the model's backend (gradients, weights) */
    const ops_t *state_ops; /* where m, v, master live: ops, or the CPU backend when offloaded */
    float *m, *v;  /* [n]: the whole flat buffer (ZeRO 0) or this rank's partition (ZeRO >= 1) */
    float *master; /* [n] fp32 master weights when the model's weights are a low-precision copy
                      (bf16/fp16) or the state is offloaded, else NULL */
    dtype_t weights; /* the type of the model's weights copy */
    size_t n;
    int64_t t;     /* updates applied so far (bias correction uses t + 1) */
    adamw_offload_t *off; /* offload = 'optimizer', else NULL */
} adamw_t;

/* The model's weights copy of flat elements [a, a + n) from the fp32 values src[n] (backend
 * memory: the master's): rounded to the weights type, into the model's storage of it (gpt.h
 * wtype: the 16-bit store, or the fp32 array `params`). */
void adamw_write_weights(const adamw_t *opt, gpt_t *m, zero_t *z, size_t a, const float *src,
                         size_t n);
/* A model whose weights copy is 16-bit storage (gpt.h wstore): the fp32 master from host[]
 * (the full flat buffer's values: initialisation, a checkpoint), and the rounded copy from it.
 * (adamw_take_params does the same for a copy kept as fp32 arrays, from the values put there.) */
void adamw_take_host_params(adamw_t *opt, gpt_t *m, zero_t *z, const float *host);

/* n: the optimizer's elements (zero_state_floats); weights: the model's weights type (a master
 * copy is kept when it is not fp32, or when offloaded). offload: the state in host memory. */
void adamw_create(adamw_t *opt, const ops_t *ops, size_t n, dtype_t weights, bool offload);
/* Offloaded: hook the update into the model's forward (m->on_unit_use), so the next forward
 * waits per unit instead of for the whole update (without ZeRO). Call once the model and the
 * ZeRO partition exist. Nothing to do otherwise. */
void adamw_attach(adamw_t *opt, gpt_t *m, zero_t *z);
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
 * grad_scale first (clipping). Offloaded without ZeRO it returns once the gradients are copied
 * out: the update finishes during the next forward, or in adamw_finish. */
void adamw_step(adamw_t *opt, gpt_t *m, zero_t *z, const config_t *cfg, float lr,
                float grad_scale);
/* An offloaded update still in flight: every unit updated and uploaded. Called before anything
 * reads the weights or the state outside a forward (checkpoints, the end of training, a
 * rollback); returns at once otherwise. */
void adamw_finish(adamw_t *opt);
/* Seconds the forwards since the last call waited for the offloaded update (0 without), and the
 * units the forward found already updated / all units uploaded since then. */
double adamw_offload_wait(adamw_t *opt, int *ready_on_arrival, int *units);
/* Host bytes the offload holds (moments, master, the two staging buffers); 0 without. */
size_t adamw_offload_bytes(const adamw_t *opt);
#endif
