/* gpt.h — the GPT-2 style decoder: embeddings, n_layer pre-LayerNorm blocks (causal multi-head
 * attention, GELU MLP), final LayerNorm, LM head tied to wte, cross-entropy over the real
 * vocabulary (padding columns masked). Forward and backward through the op interface only, so
 * the same code runs on every backend. Owns: the flat parameter and gradient buffers, the
 * activation arena (allocated once for the largest micro-batch). Uses: model/params,
 * kernels/ops.h, config/, core/. Used by: train/, main. */
#ifndef LLMT_GPT_H
#define LLMT_GPT_H
#include <stdbool.h>
#include "config/config.h"
#include "kernels/ops.h"
#include "model/params.h"

typedef struct gpt_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* [N,C], [N], [N] */
    float *qkv;                       /* [N, 3C] */
    float *atty;                      /* [N, C] attention output before the projection */
    float *att;                       /* [B, NH, T, T] softmax probabilities */
    float *res2;                      /* [N, C] residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* [N,C], [N], [N] */
    float *fch, *fch_gelu;            /* [N, F] */
    float *res3;                      /* [N, C] block output */
} gpt_layer_acts_t;

/* Pointers to one block's tensors inside a flat buffer (parameters or gradients). */
typedef struct gpt_layer_w {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *mprojw, *mprojb;
} gpt_layer_w_t;

/* The non-block tensors inside a flat buffer. */
typedef struct gpt_global_w {
    float *wte, *wpe, *lnfw, *lnfb;
} gpt_global_w_t;

typedef struct gpt {
    int L, C, NH, hs, F, V, Vp;       /* layers, width, heads, head size, MLP width, vocab, padded */
    int B, T;                         /* the largest micro-batch the arena holds */
    const ops_t *ops;
    params_t P;
    float *params, *grads;            /* flat local buffers [P.total] (backend memory) */
    gpt_layer_w_t *lw, *lg;           /* [L] views of params and grads, resolved once by name */
    gpt_global_w_t gw, gg;
    /* activations */
    int *tokens, *targets;            /* [N] backend copies of the batch */
    float *encoded;                   /* [N, C] */
    gpt_layer_acts_t *layer;          /* [L] */
    float *lnf, *lnf_mean, *lnf_rstd; /* [N, C], [N], [N] */
    float *logits;                    /* [N, Vp]; becomes dlogits in backward */
    float *row_max, *row_sumexp, *target_logit, *losses; /* [N] */
    /* gradient scratch */
    float *dres, *dC, *dC2, *dbig, *datt; /* [N,C] x3, [N, max(3C, F)], [B,NH,T,T] */
    float *host_losses;               /* [N] host copy */
    size_t act_bytes;                 /* activation arena size, for the memory plan */
} gpt_t;

/* Allocate parameters (not initialised), gradients and activations for micro-batches up to B x T. */
void gpt_create(gpt_t *m, const config_t *cfg, const ops_t *ops, int B, int T);
void gpt_destroy(gpt_t *m);
/* Grid-invariant init of the parameters from (seed, name, global index). */
void gpt_init_params(gpt_t *m, uint64_t seed);
/* Forward on inputs[B*T] (host); with targets (host) returns the mean loss over B*T tokens,
 * without targets returns 0 and leaves logits for gpt_logits_row. B <= m->B, T <= m->T. */
float gpt_forward(gpt_t *m, const int *inputs, const int *targets, int B, int T);
/* Backward of the last forward (which must have had targets). dloss scales every token's loss
 * gradient (1 / tokens in the global batch). first_micro: overwrite instead of accumulating into
 * the gradient buffer. */
void gpt_backward(gpt_t *m, int B, int T, float dloss, bool first_micro);
/* Copy the logits of row (b, t) of the last forward to host out[V] (real vocabulary only). */
void gpt_logits_row(const gpt_t *m, int b, int t, int T, float *out);
/* Model FLOPs per token for forward + backward (6N + attention), for MFU. */
double gpt_flops_per_token(const gpt_t *m, int T);
#endif
