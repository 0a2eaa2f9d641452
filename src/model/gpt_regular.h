/* gpt_regular.h — the GPT model's regularisers: dropout on the embedding, on each residual
 * branch's output and on the attention probabilities (&model embd_dropout, resid_dropout,
 * attn_dropout), label smoothing and z-loss in the vocab-parallel cross-entropy (&train
 * label_smoothing, z_loss). All of them act in training passes only (the trainer brackets them
 * with gpt_train_pass / gpt_eval_pass): validation, eval and generation see the plain model.
 *
 * Dropout masks are never stored. Each is a pure function of (seed, site, layer, step, global
 * token, feature) (attention: global head, query token, key position) through Philox
 * (kernels/ops.h dropout_mask_t), with the global token = (the sample's index in the step's
 * global batch) * seq_len + t: the same on every dp x tp x pp grid (tp ranks hold the full
 * [N, C] residual stream and draw identical masks; attention heads are numbered globally),
 * and drawn again when a block is recomputed or run backward.
 * A second header of the gpt module (implemented in model/regularize.c on gpt_t; gpt.h includes
 * it for gpt_regular_t): regularize.c reads gpt_t and calls nothing of gpt.c.
 * Owns: the regulariser state of a gpt_t (m->reg) and its head buffers. Uses: kernels/ops.h,
 * parallel/comm, core/rng. Used by: model/gpt.c (hooks), train/ (passes). */
#ifndef LLMT_GPT_REGULAR_H
#define LLMT_GPT_REGULAR_H
#include <stdbool.h>
#include <stdint.h>
#include "model/spec.h"
#include "kernels/ops.h"

struct gpt;

typedef struct gpt_regular {
    float attn_p, resid_p, embd_p;   /* drop probabilities */
    float label_smoothing, z_loss;   /* &train label_smoothing, z_loss (coefficient) */
    uint64_t seed;
    bool training;                   /* inside gpt_train_pass */
    int64_t step;                    /* the pass's optimizer step, 0-based */
    uint64_t sample_base;            /* the index in the step's global batch of this rank's
                                        micro-batch 0, sample 0 */
    int micro;                       /* the micro-batch being run (gpt.c, from the call's
                                        gpt_pass_t) */
    double z_loss_sum;               /* sum of the micro-batches' mean z-loss since the pass began */
    float *row_sum, *zloss;          /* [N] head buffers (smoothing or z-loss on, last stage) */
} gpt_regular_t;

/* Dropout sites: part of the mask's key. */
enum { REG_EMBD = 1, REG_ATTN_OUT = 2, REG_MLP_OUT = 3, REG_ATTN_PROBS = 4, REG_ROUTER_NOISE = 5 };

/* From the spec; allocates (or, planning, counts) the head buffers. */
void gpt_reg_setup(struct gpt *m, const model_spec_t *spec);
void gpt_reg_free(struct gpt *m);

/* A training pass of optimizer step `step` (0-based) whose micro-batch i on this rank starts at
 * sample sample_base + i * micro_batch of the step's global batch: dropout, smoothing and
 * z-loss on; z_loss_sum reset. gpt_eval_pass: all of them off. */
void gpt_train_pass(struct gpt *m, int64_t step, uint64_t sample_base);
void gpt_eval_pass(struct gpt *m);

/* Dropout at `site` of `layer` on a full-width [B*T, C] tensor of the current micro-batch:
 * out = in * mask and returns out; inactive (p = 0 or not training): returns in, nothing done.
 * out may alias in. */
const float *gpt_dropout(struct gpt *m, int site, int layer, int B, int T, float *out,
                         const float *in);
/* The attention-probability mask of `layer` for the current micro-batch in *mask, or NULL if
 * inactive. */
const dropout_mask_t *gpt_attn_mask(const struct gpt *m, int layer, int B, int T,
                                    dropout_mask_t *mask);

/* The router noise of MoE `layer` (model/moe.h) for the current micro-batch: its Philox key and the
 * global token of its row 0, keyed like the dropout masks. false (nothing set) outside
 * training passes: no noise in eval and generation. */
bool gpt_router_noise_key(const struct gpt *m, int layer, int B, int T, uint32_t key[2],
                          uint64_t *row0);

/* Whether the loss is regularised in this pass (smoothing or z-loss on, training). */
bool gpt_loss_regularized(const struct gpt *m);
/* Head forward, after row_max / row_sumexp / target_logit are all-reduced: the smoothed
 * losses into m->losses, the z-loss rows summed into z_loss_sum (their mean). */
void gpt_reg_losses(struct gpt *m, int N);
/* Head backward: m->logits becomes dlogits of the regularised loss. */
void gpt_reg_xent_backward(struct gpt *m, const int *targets, int N, float dloss);
#endif
