/* params.h — the parameter registry: every parameter of the model, registered once with its
 * stable name, GLOBAL shape, shard rule over the tensor-parallel group, pipeline stage (layer),
 * and whether it takes weight decay. From the registry and a rank's coordinates each rank derives
 * the local shard it holds. Initialisation, gradient buckets, the optimizer and checkpoints are
 * all driven from here; checkpoints see it through P->ckpt, the registry described in io's own
 * tensor type. Uses: core/, model/spec, io/checkpoint (its tensor type). Used by: model/, train/. */
#ifndef LLMT_PARAMS_H
#define LLMT_PARAMS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model/spec.h"
#include "io/checkpoint.h"

#define PARAM_NAME_MAX 48

typedef enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS } param_init_t;

typedef struct param {
    char name[PARAM_NAME_MAX]; /* "wte", "h.3.attn.qkv.w", "lnf.b" */
    int ndim;                  /* 1, 2, or 3 for an expert tensor [n_experts, rows, cols] */
    int64_t shape[3];          /* GLOBAL shape (1 past ndim) */
    /* Shard rule: split dimension `split_dim` (-1 = replicated) over the tp group. The
     * dimension is seen as `split_blocks` equal blocks (qkv: 3 = q|k|v) and each block is split
     * evenly, so each rank holds whole heads of q, k and v. */
    int split_dim, split_blocks;
    /* Expert tensor (MoE): dim 0 indexes the n_experts experts, dealt out over the ep group in
     * contiguous blocks (ep rank e holds experts [e El, (e+1) El), El = n_experts / ep); the tp
     * split then applies inside every expert (split_dim 1 or 2). 0: not an expert tensor. */
    int experts;
    int layer;                 /* -1 embeddings, 0..n_layer-1 blocks, n_layer final norm */
    bool decay;                /* weight decay applies (matrices yes; biases, norms no) */
    param_init_t init;
    float init_std;            /* INIT_NORMAL */
    int64_t init_rows;         /* rows >= init_rows are initialised to 0 (vocabulary padding) */

    /* pipeline: whether this rank's stage holds the parameter (numel = 0 when not), and whether
     * this is the last stage's copy of the tied wte (held, but written by the first stage) */
    bool held;
    bool tied_copy;

    /* local shard on this rank (filled by params_shard) */
    int64_t local_shape[3];
    int64_t expert0;           /* expert tensor: the first (global) expert of the local shard */
    size_t numel;              /* local elements */
    size_t offset;             /* into the flat local buffer (in floats, 16-float aligned) */
} param_t;

typedef struct params {
    param_t *p;
    int n;
    size_t total;              /* floats in the flat local buffer (with alignment padding) */
    int64_t n_global;          /* global parameter count, padding rows of wte included */
    int tp, tp_rank;           /* the sharding this registry was set up for */
    int ep, ep_rank;           /* ... and the experts' (1, 0 without expert parallelism) */
    int pp, pp_rank;           /* pipeline stages and this rank's stage */
    int first_layer, end_layer;/* the stage's blocks: [first_layer, end_layer) (its first
                                  chunk's with chunks > 1) */
    int chunks, chunk_layers;  /* interleaved pipeline: the stage holds `chunks` chunks of
                                  chunk_layers blocks, chunk c = model chunk c * pp + pp_rank
                                  (chunks = 1: one contiguous range, chunk_layers unused) */
    bool has_embed, has_head;  /* first stage: wte, wpe; last stage: lnf and the tied head */
    ckpt_tensors_t ckpt;       /* the registry as io/checkpoint.h describes tensors (its
                                  ckpt_save / ckpt_load / ckpt_write_weights take &P->ckpt) */
} params_t;

/* Register the model's parameters for spec and compute local shards for (tp, tp_rank), every layer held
 * (no pipeline). */
void params_create(params_t *P, const model_spec_t *spec, int tp, int tp_rank);
/* The same for pipeline stage pp_rank of pp: every parameter is still registered (checkpoints
 * create every dataset collectively), but only the stage's own are `held` and get storage. */
void params_create_stage(params_t *P, const model_spec_t *spec, int tp, int tp_rank, int pp,
                         int pp_rank);
/* The same for an interleaved pipeline (virtual stages): the stage holds `chunks` chunks of
 * n_layer / (pp * chunks) blocks each (Megatron's layout; n_layer divisible, validated by config);
 * the embedding on stage 0, the head on stage pp - 1. chunks = 1 is params_create_stage. */
void params_create_chunks(params_t *P, const model_spec_t *spec, int tp, int tp_rank, int pp,
                          int pp_rank, int chunks);
/* The same with the experts of every MoE block dealt out over ep ranks (this one ep_rank). */
void params_create_experts(params_t *P, const model_spec_t *spec, int tp, int tp_rank, int pp,
                           int pp_rank, int chunks, int ep, int ep_rank);
/* Whether block `layer` is a Mixture-of-Experts block (model/moe.h). */
bool params_moe_layer(const model_spec_t *spec, int layer);
/* Elements of p's global tensor. */
int64_t param_global_numel(const param_t *p);
/* Whether the stage holds block `layer`. */
bool params_holds_layer(const params_t *P, int layer);
/* Whether the attention's input projection is the fused attn.qkv (GPT-2: n_kv_head = n_head,
 * learned positions) rather than attn.q, attn.k, attn.v. */
bool params_fused_qkv(const model_spec_t *spec);
/* Multiply-adds per token of one block's matrices: q, proj (C^2 each), k, v (C n_kv_head hs
 * each), the MLP (2 C F for GELU, 3 C F for SwiGLU): 12 C^2 for GPT-2 with d_ff = 4 C. */
double params_block_matrix(const model_spec_t *spec);
/* Contiguous layer ranges for pp stages, balanced by cost (a block ~ params_block_matrix + 2 T C
 * multiply-adds per token, the LM head ~ Vp C on the last stage), each stage at least one layer:
 * stage s holds [first[s], first[s+1]); first[] has pp + 1 entries. */
void params_partition_layers(const model_spec_t *spec, int pp, int *first);
void params_destroy(params_t *P);
const param_t *params_find(const params_t *P, const char *name);

/* Global index of local element (i) of parameter p on this rank, for RNG and checksums, and the
 * hyperslab this rank owns: for each dim, a list of `split_blocks` runs. Local element order is
 * row-major over the local shape. */
int64_t param_global_index(const param_t *p, int tp, int tp_rank, size_t local_i);
/* The same for local elements j0 .. j0+n-1 into g[0..n), a run along the last dimension at a time
 * (the checkpoint checksums' indices). */
void param_global_indices(const param_t *p, int tp, int tp_rank, size_t j0, size_t n, int64_t *g);
/* The local shard as `nblk` hyperslab blocks: start[b][dim], count[b][dim] (nblk <= 3; dims
 * past ndim unused). An expert tensor's shard is one block (its experts, its tp part of each). */
int param_hyperslabs(const param_t *p, int tp, int tp_rank, int64_t start[3][3],
                     int64_t count[3][3]);

/* Set init_std of every normally initialised parameter from &model init, init_std and
 * init_depth_scaled (model/init_scheme.c says which formula each uses). */
void params_apply_init_scheme(params_t *P, const model_spec_t *spec);

/* Fill the flat local buffer with the grid-invariant init: N(0, std) keyed by
 * (seed, name, global element index); ones; zeros. Host memory. */
void params_init(const params_t *P, float *flat, uint64_t seed);
/* The same values for elements [lo, hi) of the flat local buffer only, into dst[0, hi - lo) (a
 * ZeRO partition drawn piece by piece: no rank draws or holds more than its range). */
void params_init_range(const params_t *P, uint64_t seed, size_t lo, size_t hi, float *dst);
#endif
