/* gpt.h — the GPT-2 style decoder: embeddings, n_layer pre-LayerNorm blocks (causal multi-head
 * attention, GELU MLP), final LayerNorm, LM head tied to wte, cross-entropy over the real
 * vocabulary (padding columns masked). Forward and backward through the op interface only, so
 * the same code runs on every backend.
 *
 * Parallelism inside the model (Megatron style), over the grid's tp communicator:
 *   qkv, mlp.fc   column-parallel (each rank computes its heads / its d_ff/tp columns);
 *   attn.proj, mlp.proj row-parallel (partial sums all-reduced; bias added by tp rank 0);
 *   wte           vocab-parallel embedding (rows summed over tp) and vocab-parallel
 *                 cross-entropy (row max / sum-exp / target logit all-reduced: the full logits
 *                 are never gathered).
 *   sequence parallelism (&parallel sequence_parallel, gpt_t sp): the residual stream, norms
 *                 and dropout on the rank's N/tp token rows; all-gather before the column-
 *                 parallel products, reduce-scatter after the row-parallel ones.
 * A pipeline stage holds layers [first_layer, end_layer) (or, interleaved, n_chunks such
 * chunks: gpt_pass_t chunk); the first stage embeds, the last runs
 * the head and the loss. `n_slots` micro-batches can be in flight at once (pipeline schedules),
 * each with its own activations. Which slot, micro-batch and chunk a call works on, and what
 * the caller wants around it, come with each call (gpt_pass_t), never set on gpt_t.
 * Activation recomputation (&parallel recompute, for the first recompute_layers blocks of each
 * stage): 'selective' keeps no attention output, attention log-sum-exp or GELU output per
 * layer and recomputes them in backward from the kept qkv and fch; 'full' keeps only each
 * block's output (the next block's input) and re-runs the block's forward in backward. What a
 * layer does not keep lives in one scratch set shared by every layer and slot (m->shared); the
 * recomputation runs the same kernels on the same inputs, so the gradients are bit-identical.
 * Regularisers (model/gpt_regular.h, training passes only): dropout on the embedding, on each
 * residual branch before its add and on the attention probabilities, with masks drawn again
 * (never stored) in backward and recomputation; label smoothing and z-loss in the head.
 * Owns: the flat parameter and gradient buffers, the activation arena (allocated once).
 * Uses: model/spec (never config_t), model/params, kernels/ops.h, parallel/comm, core/. Used by:
 * train/, main. */
#ifndef LLMT_GPT_H
#define LLMT_GPT_H
#include <stdbool.h>
#include "model/spec.h"
#include "core/alloc.h"
#include "kernels/ops.h"
#include "model/params.h"
#include "model/layer_w.h"
#include "model/moe.h"
#include "model/gpt_regular.h"
#include "model/ring.h"
#include "parallel/comm.h"

/* How this rank takes part in the model: its tensor-parallel shard and pipeline stage. */
typedef struct gpt_parallel {
    int tp, tp_rank, pp, pp_rank;
    const comm_group_t *tp_group; /* a 1-rank group when tp = 1 */
    int n_slots;      /* micro-batches whose activations are held at once */
    int chunks;       /* interleaved pipeline: chunks of layers on this stage (0 or 1: one) */
    bool split_backward; /* ZB-H1: the blocks' backward split into B and a deferred W */
    int ep, ep_rank;     /* expert parallelism (model/moe.h): 1, 0 without */
    const comm_group_t *ep_group; /* a 1-rank group when ep = 1 */
    /* context parallelism (model/ring.h): the T rows a call gets are this rank's two chunks of
     * each sequence; cp 0 or 1: none (cp_group unused) */
    int cp, cp_rank;
    const comm_group_t *cp_group;
} gpt_parallel_t;

/* One process, one micro-batch in flight. */
gpt_parallel_t gpt_serial(void);

/* &parallel recompute */
typedef enum gpt_recompute {
    GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_FULL
} gpt_recompute_t;

/* One block's activations. Under recompute, the tensors the block does not keep point into the
 * shared scratch set (valid only between their computation and their use in one block call). */
typedef struct gpt_layer_acts {
    gpt_recompute_t recompute;        /* what backward recomputes for this block */
    float *ln1, *ln1_mean, *ln1_rstd; /* [N,C], [N], [N] (RMSNorm: no mean, NULL) */
    float *qkv;                       /* fused: [N, 3C/tp] rows q | k | v; separate q, k, v:
                                         q [N, NHl hs], then k, v [N, KVl hs] one after the
                                         other (after RoPE) */
    float *atty;                      /* [N, C/tp] attention output before the projection */
    float *lse;                       /* [B, NH/tp, T] log-sum-exp of each attention row (fp32
                                         in every precision; the backward recomputes the
                                         probabilities from it) */
    float *res2;                      /* [N, C] residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* [N,C], [N], [N] */
    float *fch, *fch_gelu;            /* [N, d_ff/tp] MLP input projection (SwiGLU: gate) and
                                         the activation's output */
    float *fcu;                       /* [N, d_ff/tp] SwiGLU's up projection (else NULL) */
    float *res3;                      /* [N, C] block output; NULL: stop after the GELU (a
                                         re-run for backward, which needs nothing later) */
    moe_acts_t *moe;                  /* an MoE block's MLP (fch, fch_gelu, fcu unused, NULL);
                                         always kept per slot, whatever the recompute mode */
    /* 16-bit activation storage (gpt_t atype): packed[k] holds the elements of the block's
     * tensor k (gpt.c's list: ln1, qkv, atty, res2, ln2, fch, fch_gelu, fcu where kept) as
     * atype; the float pointer above then points into the shared fp32 working set, filled by
     * the block's forward and packed after it, unpacked again before the block's backward.
     * NULL (and every tensor an fp32 array) when atype is DT_FP32. */
    void **packed;
} gpt_layer_acts_t;


/* The non-block tensors inside a flat buffer. */
typedef struct gpt_global_w {
    float *wte, *wpe, *lnfw, *lnfb;
    float *lm_head;                   /* untied LM head (last stage), else NULL */
} gpt_global_w_t;

/* Split backward (ZB-H1): the weight gradients of a micro-batch's linear layers, deferred from
 * its B to its W. One item per weight tensor: dw[OC, C] (+)= dy^T x, db (+)= colsum dy.
 * dy is always a copy (the gradient scratch is reused at once); x is the slot's own saved
 * activation (it stays until W releases the slot), or a copy where recomputation does not keep
 * it per slot (selective: the attention output and the MLP activation; full: also ln1, ln2). */
typedef struct gpt_wgrad {
    int layer;
    float *dw, *db;
    const float *dy, *x, *x_src; /* x_src: the tensor x copies (or is): one copy per tensor */
    const void *x_packed;        /* x kept in 16-bit storage (gpt_layer_acts_t packed): W
                                    unpacks it into x, a buffer of the working set, first */
    int N, C, OC;
} gpt_wgrad_t;

typedef struct gpt_wqueue {
    gpt_wgrad_t *item;        /* [cap] in B's order (last layer first) */
    int n, cap;
    float *store;             /* [floats] the copies of dy (and x) */
    size_t used, floats;
} gpt_wqueue_t;

/* Everything one in-flight micro-batch needs between its forward and its backward. */
typedef struct gpt_slot {
    int *tokens, *targets;    /* [N] backend copies */
    float *input;             /* [N, C] stage input: the embedding, or received from stage - 1 */
    gpt_layer_acts_t *layer;  /* [end_layer - first_layer] */
    float *dout;              /* [N, C] gradient flowing backward through the stage: received
                                 from stage + 1 (or made by the head); on exit, d(input) */
    gpt_wqueue_t wq;          /* split backward: the W pending after this slot's B */
} gpt_slot_t;

typedef void (*gpt_layer_hook_t)(void *ctx, int layer);

/* One call of the stage or whole-model interface below, passed by const pointer: which slot,
 * micro-batch and chunk it works on and what the caller wants around it. Callers set nothing
 * per call on gpt_t; what the model derives from the pass (the chunk's blocks, the micro-batch
 * its masks are keyed by, the MoE loss weight) it sets itself at the start of each call. */
typedef struct gpt_pass {
    int slot;            /* the activation slot holding the micro-batch (whole model: 0) */
    int micro;           /* the micro-batch's index in the pass: dropout masks and router noise
                            are keyed by its samples (model/gpt_regular.h) */
    int chunk;           /* interleaved pipeline: the stage's chunk of layers (0 with one) */
    bool forward_only;   /* no backward follows (eval, generation): 16-bit storage packs
                            nothing and the head computes no gradient */
    float dloss;         /* with a backward: the loss gradient per token (the head's, and the
                            weight of the MoE aux and z losses) */
    gpt_layer_hook_t on_layer_done; /* if set, called after each block's backward (split
                                       backward: after its W) */
    void *hook_ctx;
} gpt_pass_t;

/* Weights that are not resident (ZeRO-3): a provider binds a unit's weights before each use.
 * Units: a block (0 .. n_layer-1), the embedding tensors wte + wpe, the final norm lnf. */
enum { GPT_UNIT_EMBED = -1, GPT_UNIT_FINAL = -2 };
typedef struct gpt_weight_provider {
    /* bind the unit's weight views (gpt_bind_weights) before it is used; `next` is the unit the
     * caller expects to use after it (a hint for prefetching; GPT_UNIT_NONE when unknown) */
    void (*need)(void *ctx, int unit, int next);
    void *ctx;
} gpt_weight_provider_t;
#define GPT_UNIT_NONE (-100)

/* Gradients that are not resident (ZeRO-2/3 with pp = 1): a provider binds a unit's gradient
 * views to a staging buffer before the unit's backward writes them (`begin`) and takes the
 * result away when the micro-batch's backward of the unit is complete (`end`); every micro-batch
 * then overwrites the staging instead of accumulating into it (the provider accumulates). */
typedef struct gpt_grad_provider {
    void (*begin)(void *ctx, int unit);
    void (*end)(void *ctx, int unit);
    void *ctx;
} gpt_grad_provider_t;

typedef struct gpt {
    int L, C, NH, hs, F, V, Vp;       /* global: layers, width, heads, head size, d_ff, vocab */
    int NHl, Fl, Vl;                  /* local under tp: heads, d_ff columns, vocab rows */
    /* architecture (&model norm, pos, mlp, n_kv_head, tie_embeddings), chosen once */
    bool rmsnorm, rope, swiglu, fused_qkv, tied, learned_pos;
    float norm_eps;
    int KV, KVl;                      /* k/v heads: global, and the ones this rank computes */
    bool kv_replicated;               /* n_kv_head < tp: every tp rank holds all of k, v and
                                         computes head kv_head0 (its query heads' one) */
    int kv_head0;
    float *rope_cos, *rope_sin;       /* [T, hs/2] RoPE angle tables */
    rope_freq_t rope_freq;            /* their frequencies; rope_T: the rows a call has that
                                         they were filled for (cp > 1: a row's position depends
                                         on the call's T, a &stage's seq_len / cp) */
    int rope_T;
    double block_matrix;              /* multiply-adds per token of a block's matrices */
    float *kv_grad;                   /* replicated k/v: one tensor's gradient [KV hs, C + 1]
                                         of a micro-batch, summed over tp */
    int v_start, v_valid;             /* first vocab id of the local shard, real ids in it */
    /* sequence parallelism (&parallel sequence_parallel, tp > 1): the residual stream (stage
     * input, res2, res3, dout), the norms (ln1, ln2 and their statistics) and dropout hold tp
     * rank r's token rows [r N/tp, (r + 1) N/tp) of the micro-batch's N = B T; a norm's output
     * is gathered to all N rows in sp_ln [N, C] before the column-parallel products (again in
     * backward, for their weight gradients); the row-parallel products' partial sums go to
     * sp_full [N, C] and are reduce-scattered, and a gradient into them is gathered there. The
     * head's lnf (one buffer, not per slot) is kept gathered. norm_grad [2C]: a norm's weight
     * (and bias) gradient of the local rows, summed over tp before it is added. */
    bool sp;
    float *sp_full, *sp_ln, *norm_grad;
    /* context parallelism (par.cp > 1): the ring's buffers; positions (RoPE's tables, wpe's
     * rows) are the global ones of the local rows (ring_position) */
    ring_t ring;
    int first_layer, end_layer;       /* this stage's blocks (of the chunk in use) */
    bool has_embed, has_head;         /* ... and whether that chunk embeds / runs the head */
    /* interleaved pipeline: the stage holds n_chunks chunks of chunk_layers blocks (chunk c is
     * model chunk c * pp + pp_rank); each call selects the one it and the slots work on (the
     * pass's chunk). n_chunks = 1: one contiguous range. */
    int n_chunks, chunk_layers;
    bool stage_embed, stage_head;     /* the stage embeds / runs the head in some chunk */
    gpt_parallel_t par;
    int B, T;                         /* the largest micro-batch the arena holds */
    const ops_t *ops;
    params_t P;
    float *params, *grads;            /* flat local buffers [P.total] (backend memory) */
    /* The storage of the weights copy (gpt_weights_type). DT_FP32: every tensor in `params`
     * (float arrays; in a bf16/fp16 run they hold the rounded values). bf16/fp16: `params` is
     * NULL and the copy is `wstore`, P.total elements of that type at the registry's offsets;
     * products and embeddings read its matrices (the tensors with weight decay: p->decay) as
     * they are (ops.h matmul_forward_w, ...), and the other tensors (norms, biases) are also
     * kept widened to fp32 in `wvec` (wvec_at[i]: tensor i's offset there), where their views
     * point. A matrix view then points at 16-bit elements: use it only through the _w ops and
     * gpt_weight_at, never as floats. */
    dtype_t wtype;
    void *wstore;
    float *wvec;
    size_t *wvec_at;                  /* [P.n]; SIZE_MAX for a matrix */
    char *bind_origin;                /* gpt_bind_weights of a 16-bit unit, while it binds */
    gpt_layer_w_t *lw, *lg;           /* [L] views of params and grads (held layers valid) */
    gpt_global_w_t gw, gg;
    gpt_slot_t *slot;                 /* [n_slots] */
    gpt_recompute_t recompute;        /* &parallel recompute ... */
    int n_recomputed;                 /* ... for the stage's first n_recomputed blocks */
    gpt_layer_acts_t shared;          /* recompute scratch shared by all layers and slots, and
                                         the fp32 working set of 16-bit storage (NULL where
                                         every layer keeps the tensor as an fp32 array) */
    /* head (last stage): one micro-batch at a time, loss and backward fused */
    float *lnf, *lnf_mean, *lnf_rstd; /* [N, C], [N], [N] */
    float *logits;                    /* [N, Vl]; becomes dlogits */
    float *row_max, *row_sumexp, *target_logit, *losses; /* [N] */
    /* gradient scratch */
    float *dres;                      /* points at the current slot's dout during backward */
    float *dC, *dC2, *dbig;           /* [N,C] x2, [N, max(3C, F)/tp] */
    float *attn_scratch;              /* the attention kernels' tiles, shared by forward and */
    size_t attn_scratch_floats;       /* backward (ops_t attention_scratch_floats) */
    float *host_losses;               /* [N] host copy */
    size_t slot_bytes, head_bytes;    /* activation memory of one slot / of the head */
    size_t shared_bytes;              /* ... of which the shared set (in head_bytes) */
    size_t packed_bytes;              /* one slot's tensors in 16-bit storage (in slot_bytes) */
    /* called with the unit (a block, GPT_UNIT_EMBED, GPT_UNIT_FINAL) before its weights are
     * used, resident or not, if set: an offloaded optimizer update still running for them ends
     * first (train/optimizer.h) */
    gpt_layer_hook_t on_unit_use;
    void *unit_hook_ctx;
    /* NULL: the weights live in `params` (bound once); else a provider binds them per use and
     * `params` is not allocated (ZeRO-3). */
    const gpt_weight_provider_t *weights;
    /* NULL: the gradients accumulate in `grads` over a step's micro-batches; else a provider
     * stages them per unit and micro-batch and `grads` is not allocated. */
    const gpt_grad_provider_t *grad_stage;
    dtype_t act_dtype;                /* saved activations are rounded to this type (precision.h) */
    /* ... and kept in this storage (gpt_activations_type): DT_FP32, fp32 arrays of the rounded
     * values; act_dtype, 2 bytes per element for the tensors a block saves for its backward
     * (gpt_layer_acts_t packed); the residual stream (block outputs, stage input), the norms'
     * statistics and the attention log-sum-exp stay fp32 arrays */
    dtype_t atype;
    gpt_layer_acts_t *bwd_acts;       /* the block whose backward runs (split backward: W reads
                                         its packed inputs) */
    bool recomputing;                 /* a block's forward is being re-run inside the backward */
    gpt_wqueue_t *wq;                 /* split backward: the slot queue B is filling, else NULL */
    bool dry_run;                     /* gpt_plan: buffers counted, not allocated */
    gpt_regular_t reg;                /* dropout, label smoothing, z-loss (model/gpt_regular.h) */
    double planned[MEM_CATEGORIES];   /* bytes of the model's buffers per memory category */
    moe_t *moe;                       /* Mixture of Experts (n_experts > 0), else NULL */
} gpt_t;


/* The type of the products (ops.h set_product_type) for this configuration on this backend:
 * bf16 for &train precision = 'bf16' where the backend has native bf16 products and
 * &train bf16_products asks for them ('native', or 'auto' where they are faster); fp16 for
 * precision = 'fp16' where the backend's fp16 products are faster (a GPU); else fp32. A CUDA
 * run answers as its GPU also when planned with the CPU's ops. */
dtype_t gpt_product_type(const model_spec_t *spec, const ops_t *ops);
/* The storage of the activations a block saves for its backward (gpt_t atype): 16-bit for a
 * bf16/fp16 run where &train activations_storage asks for it: '16bit', or 'auto' on a GPU
 * (device = 'cuda': memory is what is short there; on the CPU the extra packing pass costs time
 * and host memory is larger); else fp32 arrays of the rounded values. */
dtype_t gpt_activations_type(const model_spec_t *spec);
/* The storage type of the weights copy gpt_create gives a model of this configuration (gpt_t
 * wtype). 16-bit where the run is bf16/fp16 (a 16-bit weights copy is possible) and &train
 * weights_storage asks for it: '16bit',
 * or 'auto' where the products run in that type (gpt_product_type). */
dtype_t gpt_weights_type(const model_spec_t *spec, const ops_t *ops);

/* The weights copy of flat elements [lo, lo + n) from the fp32 values src[n] (backend memory):
 * rounded to the weights type and stored (wtype 16-bit only; with DT_FP32 the caller writes
 * `params` itself). */
void gpt_store_weights(gpt_t *m, size_t lo, const float *src, size_t n);
/* Elements [lo, lo + n) of the 16-bit store were written another way (a gather, an upload):
 * the norms and biases among them widened again into wvec. */
void gpt_weights_written(gpt_t *m, size_t lo, size_t n);


/* Allocate parameters (not initialised), gradients and activations for micro-batches up to
 * B x T on this rank's shard and stage. With `provider` the parameters are not allocated: the
 * provider binds each unit's weights before its use. */
void gpt_create(gpt_t *m, const model_spec_t *spec, const ops_t *ops, int B, int T,
                const gpt_parallel_t *par, const gpt_weight_provider_t *provider,
                const gpt_grad_provider_t *grad_stage);
/* The memory gpt_create would allocate, without allocating it (the planner): m->planned holds
 * the bytes per category (core/alloc.h), the registry and unit ranges can be queried; release
 * with gpt_destroy. weights_provided / grads_staged: as with a weight / gradient provider. */
void gpt_plan(gpt_t *m, const model_spec_t *spec, const ops_t *ops, int B, int T,
              const gpt_parallel_t *par, bool weights_provided, bool grads_staged);
/* The flat range [*lo, *hi) of a unit's parameters in the local buffer (empty when the stage
 * does not hold it). */
void gpt_unit_range(const gpt_t *m, int unit, size_t *lo, size_t *hi);
/* Point the unit's weight (gradient) views at `base`, which holds the flat range starting at
 * `base_lo`. */
void gpt_bind_weights(gpt_t *m, int unit, float *base, size_t base_lo);
void gpt_bind_grads(gpt_t *m, int unit, float *base, size_t base_lo);
void gpt_destroy(gpt_t *m);
/* Grid-invariant init of the parameters from (seed, name, global index). */
void gpt_init_params(gpt_t *m, uint64_t seed);

/* ---- pipeline-stage interface (the schedules in train/ drive these) ----
 * Each call works on the pass's slot, micro-batch and chunk (gpt_pass_t). Interleaved: every
 * slot holds one chunk's activations, so a slot serves whichever (chunk, micro-batch) the
 * schedule puts there. */
/* The blocks this stage holds over all its chunks (ZeRO-3's gather buffers are sized by them),
 * and the place of held block `layer` among them (chunk by chunk, ascending). */
int gpt_held_blocks(const gpt_t *m);
int gpt_held_index(const gpt_t *m, int layer);
/* First stage: embed tokens[B*T] (host) into the slot's input. */
void gpt_embed(gpt_t *m, const gpt_pass_t *pass, const int *tokens, int B, int T);
/* The stage's blocks on the slot's input; returns the stage output [N, C]. */
const float *gpt_stage_forward(gpt_t *m, const gpt_pass_t *pass, int B, int T);
/* Last stage: final norm, LM head and cross-entropy on the slot's stage output against
 * targets[B*T] (host); returns the mean loss over B*T tokens. Unless the pass is forward
 * only, also the head's backward with loss gradient pass->dloss per token, leaving d(stage
 * output) in the slot's dout.
 * first: this micro-batch is the step's first (overwrite instead of accumulate gradients). */
float gpt_head(gpt_t *m, const gpt_pass_t *pass, const int *targets, int B, int T, bool first);
/* The stage's blocks backward from the slot's dout; on return dout holds d(stage input)
 * (sent to stage - 1); on the first stage the embedding gradients are accumulated too. Calls
 * the pass's on_layer_done after each block (without a split backward). */
void gpt_stage_backward(gpt_t *m, const gpt_pass_t *pass, int B, int T, bool first);
/* Split backward (par.split_backward, ZB-H1): gpt_stage_backward is then B, the input
 * gradients and everything else (norms, attention core, activations, tp all-reduces, the
 * embedding, replicated k/v), and queues the linear layers' weight gradients; this is W: they
 * are computed (first: overwritten, else accumulated), calling the pass's on_layer_done after each
 * block's. The head's gradients are computed with the loss (gpt_head) in either case. */
void gpt_stage_weight_grad(gpt_t *m, const gpt_pass_t *pass, bool first);

/* Floats of the tensor a stage sends to the next (and its gradient back): B T C, or under
 * sequence parallelism the rank's B T / tp rows. */
size_t gpt_stage_floats(const gpt_t *m, int B, int T);

/* ---- whole model on one stage (pp = 1): training references, eval, generation ---- */
/* Forward on inputs[B*T] (host); with targets returns the mean loss, without them leaves the
 * logits for gpt_logits_row. B <= m->B, T <= m->T. */
float gpt_forward(gpt_t *m, const gpt_pass_t *pass, const int *inputs, const int *targets, int B,
                  int T);
/* Backward of the last gpt_forward with targets, the same pass (first as in gpt_head). */
void gpt_backward(gpt_t *m, const gpt_pass_t *pass, int B, int T, bool first_micro);
/* Logits of row (b, t) of the last forward, real vocabulary, gathered over tp: out[V] (host). */
void gpt_logits_row(gpt_t *m, int b, int t, int T, float *out);
/* Model FLOPs per token for forward + backward (6N + attention), for MFU. */
double gpt_flops_per_token(const gpt_t *m, int T);
#endif
