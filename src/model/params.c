/* params.c — the parameter registry (see params.h). */
#include "model/params.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"

#define PARAM_ALIGN_FLOATS 16 /* each parameter starts on a 64-byte boundary in the flat buffer */
#define PARAMS_PER_BLOCK_MAX 28 /* layernorm, q, k, v, an MoE MLP with router, noise, SwiGLU
                                  experts and shared experts, all with biases */

typedef struct param_spec {
    const char *suffix;
    int ndim;
    int64_t d0, d1;
    int split_dim, split_blocks;
    bool decay;
    param_init_t init;
    float std;
    int64_t d2;  /* expert tensors: [d0 = n_experts, d1, d2] */
    int experts; /* n_experts for an expert tensor, else 0 */
} param_spec_t;

static param_t *add_param(params_t *P, int cap, const char *name, const param_spec_t *s,
                          int layer) {
    ASSERT(P->n < cap);
    param_t *p = &P->p[P->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = s->ndim;
    p->shape[0] = s->d0;
    p->shape[1] = s->ndim >= 2 ? s->d1 : 1;
    p->shape[2] = s->ndim == 3 ? s->d2 : 1;
    p->experts = s->experts;
    p->split_dim = s->split_dim;
    p->split_blocks = s->split_blocks;
    p->layer = layer;
    p->decay = s->decay;
    p->init = s->init;
    p->init_std = s->std;
    p->init_rows = p->shape[0];
    return p;
}

/* The attention's input projection is GPT-2's fused qkv (rows q | k | v) for multi-head
 * attention with learned positions; otherwise separate q, k, v tensors (grouped-query
 * attention, RoPE: Hugging Face Llama's q_proj, k_proj, v_proj as they are). */
bool params_fused_qkv(const model_spec_t *spec) {
    return spec->n_kv_head == spec->n_head && !spec->rope;
}

bool params_moe_layer(const model_spec_t *spec, int layer) {
    return spec->n_experts > 0 && layer % spec->moe_every == spec->moe_every - 1;
}

/* An MoE block's MLP (model/moe.h): router (and its hidden layer, noise projection), the
 * experts as [n_experts, ...] tensors (column / row parallel inside each expert, like the dense
 * MLP), and the always-on shared experts as one dense MLP of width n_shared_experts * Fe. */
static int moe_specs(const model_spec_t *spec, param_spec_t *out, int n, float std, float std_resid) {
    const int64_t C = spec->d_model, E = spec->n_experts, Fe = spec->d_ff_expert;
    const int64_t S = (int64_t)spec->n_shared_experts * Fe;
    const bool bias = spec->bias, swiglu = spec->swiglu;
#define PUT(...)                                        \
    do {                                                \
        ASSERT(n < PARAMS_PER_BLOCK_MAX);               \
        out[n++] = __VA_ARGS__;                         \
    } while (0)
#define ADD(...) PUT(((param_spec_t){__VA_ARGS__, 0, 0}))
#define EXPERT(sfx, a, b, split, dec, in, sd) \
    PUT((param_spec_t){.suffix = sfx, .ndim = 3, .d0 = E, .d1 = a, .d2 = b, .split_dim = split, .split_blocks = 1, \
        .decay = dec, .init = in, .std = sd, .experts = (int)E})
#define EXPERT_BIAS(sfx, a, split) \
    PUT((param_spec_t){.suffix = sfx, .ndim = 2, .d0 = E, .d1 = a, .split_dim = split, .split_blocks = 1, \
        .init = INIT_ZEROS, .experts = (int)E})
    if (spec->router_mlp) ADD("moe.router.fc.w", 2, C, C, -1, 1, true, INIT_NORMAL, std);
    ADD("moe.router.w", 2, E, C, -1, 1, true, INIT_NORMAL, std);
    if (spec->router_noise > 0) ADD("moe.noise.w", 2, E, C, -1, 1, true, INIT_ZEROS, 0);
    const char *in_w[2] = {swiglu ? "moe.experts.gate.w" : "moe.experts.fc.w", "moe.experts.up.w"};
    const char *in_b[2] = {swiglu ? "moe.experts.gate.b" : "moe.experts.fc.b", "moe.experts.up.b"};
    for (int i = 0; i < (swiglu ? 2 : 1); i++) {
        EXPERT(in_w[i], Fe, C, 1, true, INIT_NORMAL, std);
        if (bias) EXPERT_BIAS(in_b[i], Fe, 1);
    }
    EXPERT("moe.experts.proj.w", C, Fe, 2, true, INIT_NORMAL, std_resid);
    if (bias) EXPERT_BIAS("moe.experts.proj.b", C, -1);
    if (S > 0) {
        const char *sw[2] = {swiglu ? "moe.shared.gate.w" : "moe.shared.fc.w", "moe.shared.up.w"};
        const char *sb[2] = {swiglu ? "moe.shared.gate.b" : "moe.shared.fc.b", "moe.shared.up.b"};
        for (int i = 0; i < (swiglu ? 2 : 1); i++) {
            ADD(sw[i], 2, S, C, 0, 1, true, INIT_NORMAL, std);
            if (bias) ADD(sb[i], 1, S, 0, 0, 1, false, INIT_ZEROS, 0);
        }
        ADD("moe.shared.proj.w", 2, C, S, 1, 1, true, INIT_NORMAL, std_resid);
        if (bias) ADD("moe.shared.proj.b", 1, C, 0, -1, 1, false, INIT_ZEROS, 0);
    }
#undef EXPERT_BIAS
#undef EXPERT
#undef ADD
#undef PUT
    return n;
}

/* One block's tensors for spec, in registry order (names after "h.N."). */
static int moe_specs(const model_spec_t *spec, param_spec_t *out, int n, float std, float std_resid);

static int block_specs(const model_spec_t *spec, int tp, int layer, param_spec_t *out) {
    const int64_t C = spec->d_model, F = spec->d_ff, hs = C / spec->n_head;
    const int64_t KV = (int64_t)spec->n_kv_head * hs;
    const float std = 0.02f, std_resid = 0.02f / sqrtf(2.0f * (float)spec->n_layer);
    const bool ln = !spec->rmsnorm, bias = spec->bias, qkv_bias = spec->bias || spec->qkv_bias;
    /* k/v heads split over tp when there are at least tp of them, else replicated */
    const int kv_split = spec->n_kv_head >= tp ? 0 : -1;
    int n = 0;
#define SPEC(...)                                       \
    do {                                                \
        ASSERT(n < PARAMS_PER_BLOCK_MAX);               \
        out[n++] = (param_spec_t){__VA_ARGS__, 0, 0};   \
    } while (0)
    SPEC("ln1.w", 1, C, 0, -1, 1, false, INIT_ONES, 0);
    if (ln) SPEC("ln1.b", 1, C, 0, -1, 1, false, INIT_ZEROS, 0);
    if (params_fused_qkv(spec)) {
        SPEC("attn.qkv.w", 2, 3 * C, C, 0, 3, true, INIT_NORMAL, std);
        if (qkv_bias) SPEC("attn.qkv.b", 1, 3 * C, 0, 0, 3, false, INIT_ZEROS, 0);
    } else {
        SPEC("attn.q.w", 2, C, C, 0, 1, true, INIT_NORMAL, std);
        if (qkv_bias) SPEC("attn.q.b", 1, C, 0, 0, 1, false, INIT_ZEROS, 0);
        SPEC("attn.k.w", 2, KV, C, kv_split, 1, true, INIT_NORMAL, std);
        if (qkv_bias) SPEC("attn.k.b", 1, KV, 0, kv_split, 1, false, INIT_ZEROS, 0);
        SPEC("attn.v.w", 2, KV, C, kv_split, 1, true, INIT_NORMAL, std);
        if (qkv_bias) SPEC("attn.v.b", 1, KV, 0, kv_split, 1, false, INIT_ZEROS, 0);
    }
    SPEC("attn.proj.w", 2, C, C, 1, 1, true, INIT_NORMAL, std_resid);
    if (bias) SPEC("attn.proj.b", 1, C, 0, -1, 1, false, INIT_ZEROS, 0);
    SPEC("ln2.w", 1, C, 0, -1, 1, false, INIT_ONES, 0);
    if (ln) SPEC("ln2.b", 1, C, 0, -1, 1, false, INIT_ZEROS, 0);
    if (params_moe_layer(spec, layer)) return moe_specs(spec, out, n, std, std_resid);
    if (spec->swiglu) {
        SPEC("mlp.gate.w", 2, F, C, 0, 1, true, INIT_NORMAL, std);
        if (bias) SPEC("mlp.gate.b", 1, F, 0, 0, 1, false, INIT_ZEROS, 0);
        SPEC("mlp.up.w", 2, F, C, 0, 1, true, INIT_NORMAL, std);
        if (bias) SPEC("mlp.up.b", 1, F, 0, 0, 1, false, INIT_ZEROS, 0);
    } else {
        SPEC("mlp.fc.w", 2, F, C, 0, 1, true, INIT_NORMAL, std);
        if (bias) SPEC("mlp.fc.b", 1, F, 0, 0, 1, false, INIT_ZEROS, 0);
    }
    SPEC("mlp.proj.w", 2, C, F, 1, 1, true, INIT_NORMAL, std_resid);
    if (bias) SPEC("mlp.proj.b", 1, C, 0, -1, 1, false, INIT_ZEROS, 0);
#undef SPEC
    return n;
}

/* The model's parameters: embeddings (wpe only with learned positions), n_layer pre-norm
 * blocks, final norm, and the LM head when it is not tied to wte. Shard rules are Megatron's:
 * qkv / q, k, v and mlp.fc / gate, up column-parallel (split output rows; qkv as 3 blocks so
 * each rank owns whole heads of q, k and v; k, v replicated when n_kv_head < tp), attn.proj
 * and mlp.proj row-parallel (split the input columns), wte and lm_head vocab-parallel;
 * everything else replicated. */
static void register_model(params_t *P, int cap, const model_spec_t *spec) {
    const int64_t C = spec->d_model, Vp = spec->padded_vocab;
    const float std = 0.02f;
    param_spec_t wte = {"", 2, Vp, C, 0, 1, true, INIT_NORMAL, std, 0, 0};
    param_spec_t wpe = {"", 2, spec->seq_len, C, -1, 1, true, INIT_NORMAL, std, 0, 0};
    param_t *p = add_param(P, cap, "wte", &wte, -1);
    p->init_rows = spec->vocab_size; /* padding rows start at 0 and are masked out of the loss */
    if (!spec->rope) add_param(P, cap, "wpe", &wpe, -1);
    param_spec_t block[PARAMS_PER_BLOCK_MAX];
    for (int l = 0; l < spec->n_layer; l++) {
        const int nb = block_specs(spec, P->tp, l, block);
        for (int i = 0; i < nb; i++) {
            char name[PARAM_NAME_MAX];
            snprintf(name, sizeof name, "h.%d.%s", l, block[i].suffix);
            add_param(P, cap, name, &block[i], l);
        }
    }
    const param_spec_t lnf_w = {"", 1, C, 0, -1, 1, false, INIT_ONES, 0, 0, 0};
    const param_spec_t lnf_b = {"", 1, C, 0, -1, 1, false, INIT_ZEROS, 0, 0, 0};
    add_param(P, cap, "lnf.w", &lnf_w, spec->n_layer);
    if (!spec->rmsnorm) add_param(P, cap, "lnf.b", &lnf_b, spec->n_layer);
    if (!spec->tie_embeddings) {
        p = add_param(P, cap, "lm_head.w", &wte, spec->n_layer); /* the last stage's */
        p->init_rows = spec->vocab_size;
    }
}

/* Local shape of p for tp ranks (and ep ranks, for an expert tensor); the split dimensions
 * must divide evenly (validated by config and the grid). */
static void shard_one(param_t *p, int tp, int ep, int ep_rank) {
    for (int d = 0; d < 3; d++) p->local_shape[d] = p->shape[d];
    if (p->experts > 0) {
        ASSERT(p->experts % ep == 0);
        p->local_shape[0] = p->experts / ep;
        p->expert0 = (int64_t)ep_rank * p->local_shape[0];
    }
    if (p->split_dim >= 0) {
        int64_t per_block = p->shape[p->split_dim] / p->split_blocks;
        ASSERT(per_block * p->split_blocks == p->shape[p->split_dim]);
        ASSERT(per_block % tp == 0);
        p->local_shape[p->split_dim] = p->split_blocks * (per_block / tp);
    }
    p->numel = (size_t)(p->local_shape[0] * p->local_shape[1] * p->local_shape[2]);
}

int64_t param_global_numel(const param_t *p) { return p->shape[0] * p->shape[1] * p->shape[2]; }

double params_block_matrix(const model_spec_t *spec) {
    const double C = spec->d_model, F = spec->d_ff;
    const double kv = (double)spec->n_kv_head * (C / spec->n_head);
    const double mlp = spec->swiglu ? 3.0 : 2.0;
    return 2.0 * C * C + 2.0 * C * kv + mlp * C * F;
}

void params_partition_layers(const model_spec_t *spec, int pp, int *first) {
    const int L = spec->n_layer;
    const double layer = params_block_matrix(spec) + 2.0 * spec->seq_len * (double)spec->d_model;
    const double head = (double)spec->padded_vocab * spec->d_model;
    /* best[s][i]: the smallest possible maximum stage cost placing layers [0, i) on stages
     * [0, s); cut[s][i] the start of stage s-1 in that placement. O(pp L^2), tiny. */
    double *best = xcalloc((size_t)(pp + 1) * (L + 1), sizeof(double));
    int *cut = xcalloc((size_t)(pp + 1) * (L + 1), sizeof(int));
#define BEST(s, i) best[(size_t)(s) * (L + 1) + (i)]
#define CUT(s, i) cut[(size_t)(s) * (L + 1) + (i)]
    for (int i = 0; i <= L; i++) BEST(0, i) = i == 0 ? 0 : 1e300;
    for (int s = 1; s <= pp; s++)
        for (int i = 0; i <= L; i++) {
            BEST(s, i) = 1e300;
            for (int j = s - 1; j < i; j++) { /* stage s-1 holds layers [j, i) */
                double c = (i - j) * layer + (s == pp && i == L ? head : 0.0);
                double m = BEST(s - 1, j) > c ? BEST(s - 1, j) : c;
                if (m < BEST(s, i)) BEST(s, i) = m, CUT(s, i) = j;
            }
        }
    first[pp] = L;
    for (int s = pp, i = L; s > 0; s--) i = first[s - 1] = CUT(s, i);
#undef BEST
#undef CUT
    xfree(best);
    xfree(cut);
}

/* Which parameters the stage holds: its blocks; wte and wpe on the first stage; lnf (and an
 * untied lm_head) on the last, which also holds a copy of wte for a tied LM head. */
static void mark_held(params_t *P, int n_layer, bool tied) {
    for (int i = 0; i < P->n; i++) {
        param_t *p = &P->p[i];
        bool is_wte = tied && strcmp(p->name, "wte") == 0;
        if (p->layer < 0) p->held = P->has_embed || (is_wte && P->has_head);
        else if (p->layer >= n_layer) p->held = P->has_head; /* final norm */
        else p->held = params_holds_layer(P, p->layer);
        p->tied_copy = is_wte && P->has_head && !P->has_embed;
    }
}

bool params_holds_layer(const params_t *P, int layer) {
    if (P->chunks > 1) return layer / P->chunk_layers % P->pp == P->pp_rank;
    return layer >= P->first_layer && layer < P->end_layer;
}

void params_create_stage(params_t *P, const model_spec_t *spec, int tp, int tp_rank, int pp,
                         int pp_rank) {
    params_create_chunks(P, spec, tp, tp_rank, pp, pp_rank, 1);
}

void params_create_chunks(params_t *P, const model_spec_t *spec, int tp, int tp_rank, int pp,
                          int pp_rank, int chunks) {
    params_create_experts(P, spec, tp, tp_rank, pp, pp_rank, chunks, 1, 0);
}

static void checkpoint_global_index(const ckpt_tensors_t *T, const ckpt_tensor_t *t, size_t j0,
                                    size_t n, int64_t *g) {
    param_global_indices(t->src, T->tp, T->tp_rank, j0, n, g);
}

/* P->ckpt: the registry in io/checkpoint.h's terms (io knows no param_t). */
static void describe_for_checkpoints(params_t *P) {
    ckpt_tensors_t *T = &P->ckpt;
    T->t = xcalloc((size_t)(P->n > 0 ? P->n : 1), sizeof *T->t);
    T->n = P->n;
    T->n_global = P->n_global;
    T->tp = P->tp;
    T->tp_rank = P->tp_rank;
    T->global_index = checkpoint_global_index;
    for (int i = 0; i < P->n; i++) {
        const param_t *p = &P->p[i];
        ckpt_tensor_t *t = &T->t[i];
        t->name = p->name;
        t->ndim = p->ndim;
        for (int d = 0; d < 3; d++) t->shape[d] = p->shape[d];
        t->split_dim = p->split_dim;
        t->experts = p->experts;
        t->held = p->held;
        t->tied_copy = p->tied_copy;
        t->numel = p->numel;
        t->offset = p->offset;
        t->nblk = param_hyperslabs(p, P->tp, P->tp_rank, t->start, t->count);
        t->src = p;
    }
}

void params_create_experts(params_t *P, const model_spec_t *spec, int tp, int tp_rank, int pp,
                           int pp_rank, int chunks, int ep, int ep_rank) {
    memset(P, 0, sizeof *P);
    P->ep = ep;
    P->ep_rank = ep_rank;
    int cap = 5 + PARAMS_PER_BLOCK_MAX * spec->n_layer;
    P->p = xcalloc((size_t)cap, sizeof(param_t));
    P->tp = tp;
    P->tp_rank = tp_rank;
    P->pp = pp;
    P->pp_rank = pp_rank;
    int *first = xcalloc((size_t)pp + 1, sizeof(int));
    params_partition_layers(spec, pp, first);
    P->first_layer = first[pp_rank];
    P->end_layer = first[pp_rank + 1];
    xfree(first);
    P->chunks = chunks > 1 ? chunks : 1;
    if (P->chunks > 1) { /* equal chunks: the balanced partition is for one range per stage */
        ASSERT(spec->n_layer % (pp * chunks) == 0);
        P->chunk_layers = spec->n_layer / (pp * chunks);
        P->first_layer = pp_rank * P->chunk_layers;
        P->end_layer = P->first_layer + P->chunk_layers;
    }
    P->has_embed = pp_rank == 0;
    P->has_head = pp_rank == pp - 1;
    register_model(P, cap, spec);
    params_apply_init_scheme(P, spec);
    mark_held(P, spec->n_layer, spec->tie_embeddings);
    size_t off = 0;
    for (int i = 0; i < P->n; i++) {
        param_t *p = &P->p[i];
        shard_one(p, tp, ep, ep_rank);
        if (!p->held) p->numel = 0;
        p->offset = off;
        off += (p->numel + PARAM_ALIGN_FLOATS - 1) / PARAM_ALIGN_FLOATS * PARAM_ALIGN_FLOATS;
        P->n_global += param_global_numel(p);
    }
    P->total = off;
    describe_for_checkpoints(P);
}

void params_create(params_t *P, const model_spec_t *spec, int tp, int tp_rank) {
    params_create_stage(P, spec, tp, tp_rank, 1, 0);
}

void params_destroy(params_t *P) {
    xfree(P->ckpt.t);
    xfree(P->p);
    memset(P, 0, sizeof *P);
}

const param_t *params_find(const params_t *P, const char *name) {
    for (int i = 0; i < P->n; i++)
        if (strcmp(P->p[i].name, name) == 0) return &P->p[i];
    return NULL;
}

/* Map a local coordinate along the split dimension to its global coordinate. */
static int64_t global_coord(const param_t *p, int tp, int tp_rank, int64_t local) {
    int64_t per_block = p->shape[p->split_dim] / p->split_blocks;
    int64_t per_rank = per_block / tp;
    int64_t blk = local / per_rank, within = local % per_rank;
    return blk * per_block + (int64_t)tp_rank * per_rank + within;
}

/* An expert tensor's element: expert, then row and column inside the expert (tp-split). */
static int64_t expert_global_index(const param_t *p, int tp, int tp_rank, size_t local_i) {
    const int64_t per = p->local_shape[1] * p->local_shape[2];
    const int64_t e = (int64_t)local_i / per, rest = (int64_t)local_i % per;
    int64_t r = rest / p->local_shape[2], c = rest % p->local_shape[2];
    if (p->split_dim == 1) r = global_coord(p, tp, tp_rank, r);
    if (p->split_dim == 2) c = global_coord(p, tp, tp_rank, c);
    return ((p->expert0 + e) * p->shape[1] + r) * p->shape[2] + c;
}

int64_t param_global_index(const param_t *p, int tp, int tp_rank, size_t local_i) {
    if (p->experts > 0) return expert_global_index(p, tp, tp_rank, local_i);
    int64_t r = (int64_t)local_i / p->local_shape[1], c = (int64_t)local_i % p->local_shape[1];
    if (p->split_dim == 0) r = global_coord(p, tp, tp_rank, r);
    if (p->split_dim == 1) c = global_coord(p, tp, tp_rank, c);
    return r * p->shape[1] + c;
}

void param_global_indices(const param_t *p, int tp, int tp_rank, size_t j0, size_t n, int64_t *g) {
    /* along the last dimension consecutive local elements are consecutive global ones, up to the
     * end of the local row or, split on that dimension, of the rank's stretch of a block */
    const int last = p->experts > 0 ? 2 : 1;
    const int64_t width = p->local_shape[last];
    const int64_t run = p->split_dim == last && tp > 1 ? width / p->split_blocks : width;
    for (size_t k = 0; k < n;) {
        const int64_t c = (int64_t)((j0 + k) % (size_t)width) % run;
        const size_t m = (size_t)(run - c) < n - k ? (size_t)(run - c) : n - k;
        const int64_t g0 = param_global_index(p, tp, tp_rank, j0 + k);
        for (size_t q = 0; q < m; q++) g[k + q] = g0 + (int64_t)q;
        k += m;
    }
}

int param_hyperslabs(const param_t *p, int tp, int tp_rank, int64_t start[3][3],
                     int64_t count[3][3]) {
    const int d = p->split_dim;
    const int nblk = d < 0 ? 1 : p->split_blocks;
    for (int b = 0; b < nblk; b++)
        for (int k = 0; k < 3; k++) {
            start[b][k] = k == 0 && p->experts > 0 ? p->expert0 : 0;
            count[b][k] = k == 0 && p->experts > 0 ? p->local_shape[0] : p->shape[k];
        }
    if (d < 0) return 1;
    int64_t per_block = p->shape[d] / p->split_blocks, per_rank = per_block / tp;
    for (int b = 0; b < p->split_blocks; b++) {
        start[b][d] = b * per_block + (int64_t)tp_rank * per_rank;
        count[b][d] = per_rank;
    }
    return p->split_blocks;
}

void params_init(const params_t *P, float *flat, uint64_t seed) {
    params_init_range(P, seed, 0, P->total, flat);
}

void params_init_range(const params_t *P, uint64_t seed, size_t lo, size_t hi, float *dst) {
    memset(dst, 0, (hi - lo) * sizeof(float)); /* the alignment gaps between tensors */
    for (int i = 0; i < P->n; i++) {
        const param_t *p = &P->p[i];
        const size_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b) continue;
        float *x = dst + (a - lo);
        philox_key_t key = rng_key(seed, rng_hash_str(p->name));
        #pragma omp parallel for schedule(static)
        for (size_t j = a - p->offset; j < b - p->offset; j++) {
            int64_t g = param_global_index(p, P->tp, P->tp_rank, j);
            int64_t row = p->experts > 0 ? 0 : g / p->shape[1]; /* init_rows: wte's padding */
            float *out = x + (j - (a - p->offset));
            if (p->init == INIT_ONES) *out = 1.0f;
            else if (p->init == INIT_ZEROS || row >= p->init_rows) *out = 0.0f;
            else *out = p->init_std * rng_normal(key, (uint64_t)g);
        }
    }
}
