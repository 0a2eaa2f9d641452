/* gpt.c — GPT-2 forward and backward over the op interface, with Megatron tensor and sequence
 * parallelism and pipeline stages (see gpt.h).
 * Notation: N = B*T rows, C = d_model, F = d_ff, NH heads of size hs, Vp padded vocabulary;
 * an `l` suffix means the local part under tensor parallelism (NHl = NH/tp, Fl = F/tp, ...).
 * Why one file of ~1,400 lines: each block's forward and its backward stand side by side, with the
 * slot and recomputation bookkeeping they share, so that one can be read against the other;
 * the MoE blocks (moe.c), the regularisers (regularize.c), the registry (params.c) and the
 * spec (spec.c) are already their own files. */
#include "model/gpt.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"

gpt_parallel_t gpt_serial(void) {
    gpt_parallel_t p = {1, 0, 1, 0, comm_group_self(), 1, 1, false, 1, 0,
                         comm_group_self(), 1, 0, comm_group_self()};
    return p;
}

/* ---------------------------------------------------------------- views into the flat buffers */

/* Tensor p inside a flat buffer; flat NULL: inside the weights copy in 16-bit storage (gpt.h
 * wtype): a matrix's 16-bit elements at m->wstore, or at m->bind_origin while a weight
 * provider's unit is bound (gpt_bind_weights), or another tensor's fp32 values in wvec. */
static float *tensor_at(const gpt_t *m, float *flat, const param_t *p) {
    if (flat) return flat + p->offset;
    if (!p->decay) return m->wvec + m->wvec_at[p - m->P.p];
    return gpt_weight_at(m->bind_origin ? m->bind_origin : m->wstore, m->wtype, p->offset);
}

/* Pointer to a named parameter (or its gradient) inside a flat buffer. Looked up by name once
 * at create time, so the registry stays the single source of truth for the layout. */
static float *gpt_param(const gpt_t *m, float *flat, const char *fmt, int layer) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    const param_t *p = params_find(&m->P, name);
    ASSERT(p != NULL);
    return tensor_at(m, flat, p);
}

/* The same for a tensor the architecture may not have (biases, wpe, ...): NULL then. */
static float *gpt_param_opt(const gpt_t *m, float *flat, const char *fmt, int layer) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    const param_t *p = params_find(&m->P, name);
    return p ? tensor_at(m, flat, p) : NULL;
}

static gpt_layer_w_t layer_weights(const gpt_t *m, float *flat, int l) {
    const bool sw = m->swiglu;
    gpt_layer_w_t w = {
        gpt_param(m, flat, "h.%d.ln1.w", l),           gpt_param_opt(m, flat, "h.%d.ln1.b", l),
        gpt_param_opt(m, flat, "h.%d.attn.qkv.w", l),  gpt_param_opt(m, flat, "h.%d.attn.qkv.b", l),
        gpt_param(m, flat, "h.%d.attn.proj.w", l),     gpt_param_opt(m, flat, "h.%d.attn.proj.b", l),
        gpt_param(m, flat, "h.%d.ln2.w", l),           gpt_param_opt(m, flat, "h.%d.ln2.b", l),
        gpt_param_opt(m, flat, sw ? "h.%d.mlp.up.w" : "h.%d.mlp.fc.w", l),
        gpt_param_opt(m, flat, sw ? "h.%d.mlp.up.b" : "h.%d.mlp.fc.b", l),
        gpt_param_opt(m, flat, "h.%d.mlp.proj.w", l),  gpt_param_opt(m, flat, "h.%d.mlp.proj.b", l),
        gpt_param_opt(m, flat, "h.%d.attn.q.w", l),    gpt_param_opt(m, flat, "h.%d.attn.q.b", l),
        gpt_param_opt(m, flat, "h.%d.attn.k.w", l),    gpt_param_opt(m, flat, "h.%d.attn.k.b", l),
        gpt_param_opt(m, flat, "h.%d.attn.v.w", l),    gpt_param_opt(m, flat, "h.%d.attn.v.b", l),
        gpt_param_opt(m, flat, "h.%d.mlp.gate.w", l),  gpt_param_opt(m, flat, "h.%d.mlp.gate.b", l),
        gpt_param_opt(m, flat, "h.%d.moe.router.fc.w", l), gpt_param_opt(m, flat, "h.%d.moe.router.w", l),
        gpt_param_opt(m, flat, "h.%d.moe.noise.w", l),
        gpt_param_opt(m, flat, sw ? "h.%d.moe.experts.gate.w" : "h.%d.moe.experts.fc.w", l),
        gpt_param_opt(m, flat, sw ? "h.%d.moe.experts.gate.b" : "h.%d.moe.experts.fc.b", l),
        gpt_param_opt(m, flat, "h.%d.moe.experts.up.w", l), gpt_param_opt(m, flat, "h.%d.moe.experts.up.b", l),
        gpt_param_opt(m, flat, "h.%d.moe.experts.proj.w", l), gpt_param_opt(m, flat, "h.%d.moe.experts.proj.b", l),
        gpt_param_opt(m, flat, sw ? "h.%d.moe.shared.gate.w" : "h.%d.moe.shared.fc.w", l),
        gpt_param_opt(m, flat, sw ? "h.%d.moe.shared.gate.b" : "h.%d.moe.shared.fc.b", l),
        gpt_param_opt(m, flat, "h.%d.moe.shared.up.w", l), gpt_param_opt(m, flat, "h.%d.moe.shared.up.b", l),
        gpt_param_opt(m, flat, "h.%d.moe.shared.proj.w", l), gpt_param_opt(m, flat, "h.%d.moe.shared.proj.b", l),
    };
    return w;
}

static gpt_global_w_t global_weights(const gpt_t *m, float *flat) {
    gpt_global_w_t w = {gpt_param(m, flat, "wte", 0), gpt_param_opt(m, flat, "wpe", 0),
                        gpt_param(m, flat, "lnf.w", 0), gpt_param_opt(m, flat, "lnf.b", 0),
                        gpt_param_opt(m, flat, "lm_head.w", 0)};
    return w;
}

static void resolve_views(gpt_t *m) {
    m->lw = xcalloc((size_t)m->L, sizeof(gpt_layer_w_t));
    m->lg = xcalloc((size_t)m->L, sizeof(gpt_layer_w_t));
    const bool weights = m->params || m->wstore; /* wstore: views from tensor_at(NULL) */
    for (int l = 0; l < m->L; l++) {
        if (weights) m->lw[l] = layer_weights(m, m->params, l);
        if (m->grads) m->lg[l] = layer_weights(m, m->grads, l);
    }
    if (weights) m->gw = global_weights(m, m->params);
    if (m->grads) m->gg = global_weights(m, m->grads);
}

/* Which unit a parameter belongs to (see gpt.h). */
static int unit_of(const gpt_t *m, const param_t *p) {
    if (p->layer < 0) return GPT_UNIT_EMBED;
    return p->layer >= m->L ? GPT_UNIT_FINAL : p->layer;
}

void gpt_unit_range(const gpt_t *m, int unit, size_t *lo, size_t *hi) {
    *lo = *hi = 0;
    bool any = false;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        if (!p->held || unit_of(m, p) != unit) continue;
        size_t a = p->offset, b = i + 1 < m->P.n ? m->P.p[i + 1].offset : m->P.total;
        if (!any || a < *lo) *lo = a;
        if (!any || b > *hi) *hi = b;
        any = true;
    }
}

/* The unit's views inside `lw` / `gw` (weights or gradients) pointed at base (see gpt.h). */
static void bind_views(gpt_t *m, gpt_layer_w_t *lw, gpt_global_w_t *gw, int unit, float *base,
                       size_t base_lo) {
    /* views are computed as if base were the whole flat buffer shifted by base_lo; only the
     * unit's own pointers are kept */
    float *origin = base ? base - base_lo : NULL; /* NULL: the 16-bit copy (tensor_at) */
    if (unit >= 0) {
        lw[unit] = layer_weights(m, origin, unit);
        return;
    }
    gpt_global_w_t g = global_weights(m, origin);
    if (unit == GPT_UNIT_EMBED) {
        gw->wte = g.wte;
        gw->wpe = g.wpe;
    } else {
        gw->lnfw = g.lnfw;
        gw->lnfb = g.lnfb;
        gw->lm_head = g.lm_head;
    }
}

void gpt_bind_weights(gpt_t *m, int unit, float *base, size_t base_lo) {
    if (m->wtype == DT_FP32) {
        bind_views(m, m->lw, &m->gw, unit, base, base_lo);
        return;
    }
    /* base holds the unit's 16-bit elements: matrices viewed there, norms and biases widened */
    m->bind_origin = (char *)base - base_lo * dtype_bytes(m->wtype);
    bind_views(m, m->lw, &m->gw, unit, NULL, 0);
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        if (p->decay || !p->held || unit_of(m, p) != unit) continue;
        m->ops->load_as(m->wvec + m->wvec_at[i],
                        gpt_weight_at(m->bind_origin, m->wtype, p->offset), p->numel, m->wtype);
    }
    m->bind_origin = NULL;
}

void gpt_bind_grads(gpt_t *m, int unit, float *base, size_t base_lo) {
    bind_views(m, m->lg, &m->gg, unit, base, base_lo);
}

/* A unit's backward writes its gradients / has written them (staging providers only). */
static void begin_grads(gpt_t *m, int unit) {
    if (m->grad_stage) m->grad_stage->begin(m->grad_stage->ctx, unit);
}

static void end_grads(gpt_t *m, int unit) {
    if (m->grad_stage) m->grad_stage->end(m->grad_stage->ctx, unit);
}

/* The unit's weights are about to be used: an update still in flight for them ends first, then
 * the provider binds them (nothing to do when they are resident). */
static void need_weights(gpt_t *m, int unit, int next) {
    if (m->on_unit_use) m->on_unit_use(m->unit_hook_ctx, unit);
    if (m->weights) m->weights->need(m->weights->ctx, unit, next);
}

/* ---------------------------------------------------------------- activation arena */

/* Every buffer of the model comes from here: counted (per slot, per category) and allocated, or
 * in a planning run (gpt_plan_memory) only counted. */
static void *balloc(gpt_t *m, size_t bytes, mem_category_t cat) {
    m->planned[cat] += (double)bytes;
    return m->dry_run ? NULL : m->ops->alloc(bytes, cat);
}

/* The MoE blocks' view of this model (model/moe.h moe_ctx_t): its arena and its noise keys. */
static void *moe_alloc_cb(void *model, size_t bytes, mem_category_t cat) {
    return balloc(model, bytes, cat);
}

static bool moe_noise_key_cb(const void *model, int layer, int B, int T, uint32_t key[2],
                             uint64_t *row0) {
    return gpt_router_noise_key(model, layer, B, T, key, row0);
}

static void setup_moe(gpt_t *m, const model_spec_t *spec, const gpt_parallel_t *par) {
    const moe_ctx_t ctx = {
        .ops = m->ops, .C = m->C, .L = m->L, .N_max = m->B * m->T, .wtype = m->wtype,
        .swiglu = m->swiglu, .dry_run = m->dry_run, .tp = m->par.tp, .tp_rank = m->par.tp_rank,
        .tp_group = m->par.tp_group, .training = &m->reg.training, .model = m,
        .alloc = moe_alloc_cb, .noise_key = moe_noise_key_cb, .cp = m->ring.cp,
        .cp_rank = m->ring.rank, .cp_group = m->ring.group};
    m->moe = moe_setup(&ctx, spec, par->ep, par->ep_rank, par->ep_group);
}

static float *falloc_in(gpt_t *m, size_t n, size_t *counter, mem_category_t cat) {
    *counter += n * sizeof(float);
    return balloc(m, n * sizeof(float), cat);
}

static float *falloc(gpt_t *m, size_t n, size_t *counter) {
    return falloc_in(m, n, counter, MEM_ACTIVATIONS);
}

/* One block's tensors, in the order of gpt_layer_acts_t's pointers: one list for allocating,
 * sharing and freeing them. */
enum { A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_LSE, A_RES2, A_LN2, A_LN2_MEAN, A_LN2_RSTD,
       A_FCH, A_FCH_GELU, A_RES3, A_FCU, N_ACTS };

static float **act_ptr(gpt_layer_acts_t *a, int k) {
    float **p[N_ACTS] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv,      &a->atty,
                         &a->lse, &a->res2,     &a->ln2,      &a->ln2_mean, &a->ln2_rstd,
                         &a->fch, &a->fch_gelu, &a->res3,     &a->fcu};
    return p[k];
}

/* Floats of one block's tensor k; 0 where the architecture has no such tensor (RMSNorm keeps no
 * mean, GELU no up projection): it is not allocated and stays NULL. */
static size_t act_numel(const gpt_t *m, int k) {
    const size_t N = (size_t)m->B * m->T, Cl = (size_t)m->NHl * m->hs;
    const size_t Nl = m->sp ? N / (size_t)m->par.tp : N; /* the rank's token rows (gpt.h sp) */
    switch (k) {
    case A_LN1_MEAN: case A_LN2_MEAN: return m->rmsnorm ? 0 : Nl;
    case A_LN1_RSTD: case A_LN2_RSTD: return Nl;
    case A_QKV: return m->fused_qkv ? N * 3 * Cl : N * (Cl + 2 * (size_t)m->KVl * m->hs);
    case A_FCU: return m->swiglu ? N * (size_t)m->Fl : 0;
    case A_ATTY: return N * Cl;
    case A_LSE: return (size_t)m->B * m->NHl * m->T; /* one per query row and head */
    case A_FCH: case A_FCH_GELU: return N * (size_t)m->Fl;
    default: return Nl * (size_t)m->C; /* ln1, res2, ln2, res3 */
    }
}

/* Whether a block under recompute mode r keeps tensor k per slot (else it uses m->shared's):
 * selective drops the attention core's outputs and the GELU's, full all but the block output
 * (the next block's input, or the stage output that the head reads and stage + 1 receives). */
static bool act_kept(gpt_recompute_t r, int k) {
    switch (r) {
    case GPT_RECOMPUTE_SELECTIVE: return k != A_ATTY && k != A_LSE && k != A_FCH_GELU;
    case GPT_RECOMPUTE_FULL: return k == A_RES3;
    default: return true;
    }
}

/* Whether tensor k is kept in 16-bit storage where the activations are (gpt_t atype): what a
 * block saves for its backward, except the block output (the residual stream: the next block's
 * input, the head's, the tensor sent to stage + 1) and the fp32 statistics (norms' mean and
 * rstd, the attention log-sum-exp: ops.h says why lse stays fp32). */
static bool act_packable(int k) {
    return k == A_LN1 || k == A_QKV || k == A_ATTY || k == A_RES2 || k == A_LN2 || k == A_FCH ||
           k == A_FCH_GELU || k == A_FCU;
}

/* Whether block l's MLP is the MoE one (model/moe.h). */
static bool is_moe(const gpt_t *m, int l) { return m->moe && m->moe->stats[l].load; }

static bool dense_mlp_act(int k) { return k == A_FCH || k == A_FCH_GELU || k == A_FCU; }

/* The first block of the stage's chunk c (interleaved: model chunk c * pp + pp_rank). */
static int chunk_first_layer(const gpt_t *m, int c) {
    return m->P.chunks > 1 ? (c * m->par.pp + m->par.pp_rank) * m->P.chunk_layers : m->P.first_layer;
}

/* Which MLPs the blocks at place i of a slot can have: the i-th block of any of the stage's
 * chunks (one chunk: the stage's block first_layer + i). */
static void slot_layer_kinds(const gpt_t *m, int i, bool *dense, bool *moe) {
    *dense = *moe = false;
    for (int c = 0; c < m->P.chunks; c++) {
        if (is_moe(m, chunk_first_layer(m, c) + i)) *moe = true;
        else *dense = true;
    }
}

/* A kept tensor is an fp32 array of the slot's own, or with 16-bit storage its elements in
 * a->packed[k] and its float view in the working set (m->shared). */
static void alloc_layer_acts(gpt_t *m, int i, gpt_layer_acts_t *a, gpt_recompute_t r, size_t *c) {
    a->recompute = r;
    bool dense, moe;
    slot_layer_kinds(m, i, &dense, &moe);
    if (m->atype != DT_FP32) a->packed = xcalloc(N_ACTS, sizeof *a->packed);
    for (int k = 0; k < N_ACTS; k++) {
        const size_t n = act_numel(m, k);
        float **t = act_ptr(a, k);
        if (n == 0 || (!dense && dense_mlp_act(k))) *t = NULL;
        else if (!act_kept(r, k)) *t = *act_ptr(&m->shared, k);
        else if (m->atype == DT_FP32 || !act_packable(k)) *t = falloc(m, n, c);
        else {
            *c += n * dtype_bytes(m->atype);
            m->packed_bytes += n * dtype_bytes(m->atype);
            a->packed[k] = balloc(m, n * dtype_bytes(m->atype), MEM_ACTIVATIONS);
            *t = *act_ptr(&m->shared, k);
        }
    }
    a->moe = moe ? moe_alloc_acts(m->moe, c) : NULL;
}

static void free_layer_acts(gpt_t *m, gpt_layer_acts_t *a) {
    moe_free_acts(m->moe, a->moe);
    a->moe = NULL;
    for (int k = 0; k < N_ACTS && !m->dry_run; k++) {
        if (a->packed && a->packed[k]) m->ops->free(a->packed[k]);
        else if (act_kept(a->recompute, k) && *act_ptr(a, k)) m->ops->free(*act_ptr(a, k));
    }
    xfree(a->packed);
    a->packed = NULL;
}

/* The elements of a block's packed tensor k for a micro-batch of B x T (act_numel is for the
 * arena's largest; every packable tensor has B*T rows). */
static size_t act_numel_rows(const gpt_t *m, int k, int B, int T) {
    return act_numel(m, k) / ((size_t)m->B * m->T) * ((size_t)B * T);
}

/* After block l's forward: its kept tensors from the working set into their 16-bit storage
 * (exact: the forward stored them rounded to act_dtype = atype). The dense MLP's tensors of an
 * MoE block were not computed. */
static void pack_layer(const gpt_t *m, int l, gpt_layer_acts_t *a, int B, int T) {
    for (int k = 0; a->packed && k < N_ACTS; k++)
        if (a->packed[k] && !(dense_mlp_act(k) && is_moe(m, l)))
            m->ops->store_as(a->packed[k], *act_ptr(a, k), act_numel_rows(m, k, B, T), m->atype);
}

/* Before block l's backward (and its recomputation, which reads them): the kept tensors back
 * into the working set. */
static void unpack_layer(const gpt_t *m, int l, gpt_layer_acts_t *a, int B, int T) {
    for (int k = 0; a->packed && k < N_ACTS; k++)
        if (a->packed[k] && !(dense_mlp_act(k) && is_moe(m, l)))
            m->ops->load_as(*act_ptr(a, k), a->packed[k], act_numel_rows(m, k, B, T), m->atype);
}

/* &parallel recompute for the first recompute_layers (-1: all) blocks of this stage. */
static void set_recompute(gpt_t *m, const model_spec_t *spec) {
    const int nl = m->end_layer - m->first_layer;
    m->recompute = spec->recompute == MODEL_RECOMPUTE_SELECTIVE ? GPT_RECOMPUTE_SELECTIVE
                   : spec->recompute == MODEL_RECOMPUTE_FULL    ? GPT_RECOMPUTE_FULL
                                                                : GPT_RECOMPUTE_NONE;
    const int r = spec->recompute_layers;
    m->n_recomputed = m->recompute == GPT_RECOMPUTE_NONE ? 0 : r < 0 || r > nl ? nl : r;
}

/* The one scratch set of what recomputed blocks do not keep, and the working set of what they
 * keep in 16-bit storage (counted with the head/scratch). */
static void alloc_shared_acts(gpt_t *m) {
    for (int k = 0; k < N_ACTS; k++)
        if (((m->n_recomputed > 0 && !act_kept(m->recompute, k)) ||
             (m->atype != DT_FP32 && act_packable(k))) && act_numel(m, k) > 0)
            *act_ptr(&m->shared, k) = falloc_in(m, act_numel(m, k), &m->shared_bytes, MEM_WORKSPACE);
    m->head_bytes += m->shared_bytes;
}

/* Split backward: floats of one block's W queue entries (every dy, and the x that recompute
 * mode r does not keep per slot; gpt.h says which). */
static size_t wq_layer_floats(const gpt_t *m, int i, gpt_recompute_t r) {
    bool dense, moe;
    slot_layer_kinds(m, i, &dense, &moe);
    const size_t N = (size_t)m->B * m->T, C = m->C, Cl = (size_t)m->NHl * m->hs, Fl = m->Fl;
    const size_t kv = m->kv_replicated ? 0 : 2 * (size_t)m->KVl * m->hs; /* replicated: in B */
    /* an MoE block computes its MLP's weight gradients in B: only the attention's are queued */
    const size_t mlp = dense ? C + Fl * (m->swiglu ? 2 : 1) : 0;
    const size_t dy = C + mlp + (m->fused_qkv ? 3 * Cl : Cl + kv);
    static const int xs[] = {A_LN1, A_ATTY, A_LN2, A_FCH_GELU};
    size_t x = 0;
    for (int j = 0; j < (dense ? 4 : 2); j++)
        if (m->sp && (xs[j] == A_LN1 || xs[j] == A_LN2)) x += N * C; /* sp_ln's copy (gpt.h sp) */
        else if (!act_kept(r, xs[j])) x += act_numel(m, xs[j]);
    return N * dy + x;
}

static void alloc_wqueue(gpt_t *m, gpt_slot_t *sl, int nl, size_t *bytes) {
    gpt_wqueue_t *q = &sl->wq;
    q->cap = 7 * (nl > 0 ? nl : 1); /* mproj, gate, up, proj, q, k, v */
    q->item = xcalloc((size_t)q->cap, sizeof(gpt_wgrad_t));
    for (int l = 0; l < nl; l++)
        q->floats += wq_layer_floats(m, l, l < m->n_recomputed ? m->recompute : GPT_RECOMPUTE_NONE);
    q->store = q->floats ? falloc(m, q->floats, bytes) : NULL;
}

static void alloc_slots(gpt_t *m) {
    const size_t N = (size_t)m->B * m->T;
    const int nl = m->end_layer - m->first_layer;
    m->slot = xcalloc((size_t)m->par.n_slots, sizeof(gpt_slot_t));
    for (int s = 0; s < m->par.n_slots; s++) {
        gpt_slot_t *sl = &m->slot[s];
        size_t bytes = 0;
        m->packed_bytes = 0; /* every slot holds the same: one slot's is kept */
        sl->tokens = balloc(m, N * sizeof(int), MEM_ACTIVATIONS);
        sl->targets = balloc(m, N * sizeof(int), MEM_ACTIVATIONS);
        sl->input = falloc(m, gpt_stage_floats(m, m->B, m->T), &bytes);
        sl->dout = falloc(m, gpt_stage_floats(m, m->B, m->T), &bytes);
        sl->layer = xcalloc((size_t)(nl > 0 ? nl : 1), sizeof(gpt_layer_acts_t));
        for (int l = 0; l < nl; l++) {
            gpt_recompute_t r = l < m->n_recomputed ? m->recompute : GPT_RECOMPUTE_NONE;
            alloc_layer_acts(m, l, &sl->layer[l], r, &bytes);
        }
        if (m->par.split_backward) alloc_wqueue(m, sl, nl, &bytes);
        m->slot_bytes = bytes;
    }
}

static void alloc_head_and_scratch(gpt_t *m) {
    const size_t N = (size_t)m->B * m->T, C = m->C, Cl = (size_t)m->NHl * m->hs;
    size_t *c = &m->head_bytes;
    if (m->has_head) {
        m->lnf = falloc(m, N * C, c);
        m->lnf_mean = falloc(m, m->sp ? N / (size_t)m->par.tp : N, c);
        m->lnf_rstd = falloc(m, m->sp ? N / (size_t)m->par.tp : N, c);
        m->logits = falloc(m, N * (size_t)m->Vl, c);
        m->row_max = falloc(m, N, c);
        m->row_sumexp = falloc(m, N, c);
        m->target_logit = falloc(m, N, c);
        m->losses = falloc(m, N, c);
    }
    m->dC = falloc_in(m, N * C, c, MEM_WORKSPACE);
    m->dC2 = falloc_in(m, N * C, c, MEM_WORKSPACE);
    if (m->sp) {
        m->sp_full = falloc_in(m, N * C, c, MEM_WORKSPACE);
        m->sp_ln = falloc_in(m, N * C, c, MEM_WORKSPACE);
        m->norm_grad = falloc_in(m, 2 * C, c, MEM_WORKSPACE);
    }
    /* dbig: d(qkv) or d(q | k | v), d(fch) or SwiGLU's d(gate) | d(up) */
    const size_t mlp_in = (size_t)m->Fl * (m->swiglu ? 2 : 1);
    m->dbig = falloc_in(m, N * (3 * Cl > mlp_in ? 3 * Cl : mlp_in), c, MEM_WORKSPACE);
    if (m->rope) {
        m->rope_cos = falloc_in(m, (size_t)m->T * (m->hs / 2), c, MEM_WORKSPACE);
        m->rope_sin = falloc_in(m, (size_t)m->T * (m->hs / 2), c, MEM_WORKSPACE);
    }
    if (m->kv_replicated) m->kv_grad = falloc_in(m, (size_t)m->KV * m->hs * (m->C + 1), c, MEM_WORKSPACE);
    /* the attention kernels' tiles: a few per thread, not T x T (ops.h) */
    m->attn_scratch_floats = m->ops->attention_scratch_floats(m->B, m->T, m->NHl, m->hs);
    if (m->ring.cp > 1) {
        float *mem = falloc_in(m, ring_floats(m->B, m->T, m->NHl, m->KVl, m->hs), c, MEM_WORKSPACE);
        if (mem) ring_bind(&m->ring, mem, m->B, m->T, m->NHl, m->KVl, m->hs);
    }
    m->attn_scratch = falloc_in(m, m->attn_scratch_floats, c, MEM_WORKSPACE);
    m->planned[MEM_WORKSPACE] += (double)N * sizeof(float);
    if (!m->dry_run) m->host_losses = xmalloc(N * sizeof(float));
}

static void set_dims(gpt_t *m, const model_spec_t *spec, const gpt_parallel_t *par) {
    m->L = spec->n_layer;
    m->C = spec->d_model;
    m->NH = spec->n_head;
    m->hs = spec->d_model / spec->n_head;
    m->F = spec->d_ff;
    m->V = spec->vocab_size;
    m->Vp = spec->padded_vocab;
    m->par = *par;
    m->sp = spec->sequence_parallel && par->tp > 1;
    m->ring = (ring_t){.cp = par->cp > 1 ? par->cp : 1, .rank = par->cp > 1 ? par->cp_rank : 0,
                       .group = par->cp > 1 ? par->cp_group : NULL};
    m->NHl = m->NH / par->tp;
    m->Fl = m->F / par->tp;
    m->Vl = m->Vp / par->tp;
    m->v_start = par->tp_rank * m->Vl;
    int valid = m->V - m->v_start;
    m->v_valid = valid < 0 ? 0 : valid > m->Vl ? m->Vl : valid;
    m->rmsnorm = spec->rmsnorm;
    m->norm_eps = (float)spec->norm_eps;
    m->rope = spec->rope;
    m->learned_pos = !m->rope;
    m->swiglu = spec->swiglu;
    m->tied = spec->tie_embeddings;
    m->fused_qkv = params_fused_qkv(spec);
    m->KV = spec->n_kv_head;
    /* k/v heads: split over tp, or (fewer than tp) replicated, each rank computing the one its
     * NHl query heads read (grid.c checks that n_kv_head divides tp then) */
    m->kv_replicated = m->KV < par->tp;
    m->KVl = m->kv_replicated ? 1 : m->KV / par->tp;
    m->kv_head0 = m->kv_replicated ? par->tp_rank / (par->tp / m->KV) : 0;
    m->block_matrix = params_block_matrix(spec);
}

/* The global position of local row t of a sequence of T local rows (model/ring.h; t without
 * cp). */
static int ring_position_of(const gpt_t *m, int t, int T) {
    return m->ring.cp > 1 ? ring_position(t, T, m->ring.cp, m->ring.rank) : t;
}

/* RoPE's angle tables for calls of T rows a sequence ([T, hs/2] of the [m->T, hs/2] held):
 * angle (global position of row t) * inv_i in fp32, inv_i from kernels/rope_math.h (theta and
 * Llama 3.1's rope_scaling), the way Hugging Face's LlamaRotaryEmbedding does it. */
static void fill_rope_tables(gpt_t *m, int T) {
    const int half = m->hs / 2;
    float *c = xmalloc((size_t)T * half * sizeof(float)), *s = xmalloc((size_t)T * half * sizeof(float));
    for (int i = 0; i < half; i++) {
        const float inv = rope_inv_freq(&m->rope_freq, i, m->hs);
        for (int t = 0; t < T; t++) { /* the global position (context parallelism) */
            const float a = (float)ring_position_of(m, t, T) * inv;
            c[(size_t)t * half + i] = cosf(a);
            s[(size_t)t * half + i] = sinf(a);
        }
    }
    m->ops->to_device(m->rope_cos, c, (size_t)T * half * sizeof(float));
    m->ops->to_device(m->rope_sin, s, (size_t)T * half * sizeof(float));
    xfree(c);
    xfree(s);
    m->rope_T = T;
}

/* The tables for a call of T rows: without cp row t is position t whatever T is (filled once
 * for m->T); with cp a shorter sequence (a &stage's seq_len) has its chunks elsewhere, so the
 * tables are filled again when T changes (at a stage's boundary, and around validation). */
static void rope_tables_for(gpt_t *m, int T) {
    if (m->rope && m->ring.cp > 1 && T != m->rope_T && !m->dry_run) fill_rope_tables(m, T);
}

/* ---------------------------------------------------------------- the weights copy's storage */

dtype_t gpt_product_type(const model_spec_t *spec, const ops_t *ops) {
    const model_products_t want = spec->bf16_products;
    /* a CUDA run's products are those of its GPU even where the host plans it with the CPU's
     * ops (train/planner.c): native bf16, and faster, on every GPU it runs bf16 on (sm_80 and
     * later; main.c refuses older ones) */
    const bool cuda = spec->cuda;
    /* fp16: the products of a backend whose fp16 products are faster (a GPU's tensor cores;
     * the CPU backend has none), by the same rule; bf16_products is the bf16 key only */
    /* what this backend can do, less what some other rank's cannot (spec->products_missing) */
    const unsigned miss = spec->products_missing;
    if (spec->precision == DT_FP16)
        return (cuda || ops->products_faster(DT_FP16)) && !(miss & CFG_MISSING_FP16_FASTER) ? DT_FP16
                                                                                          : DT_FP32;
    const bool native = (cuda || ops->products_native(DT_BF16)) && !(miss & CFG_MISSING_BF16_NATIVE);
    const bool faster = (cuda || ops->products_faster(DT_BF16)) && !(miss & CFG_MISSING_BF16_FASTER);
    const bool bf16 = spec->precision == DT_BF16 && native &&
                      (want == MODEL_PRODUCTS_NATIVE || (want == MODEL_PRODUCTS_AUTO && faster));
    return bf16 ? DT_BF16 : DT_FP32;
}

dtype_t gpt_activations_type(const model_spec_t *spec) {
    const dtype_t t = spec->precision;
    if (t == DT_FP32 || spec->activations_storage == MODEL_STORE_FP32) return DT_FP32;
    if (spec->activations_storage == MODEL_STORE_16BIT) return t;
    return spec->cuda ? t : DT_FP32; /* auto */
}

dtype_t gpt_weights_type(const model_spec_t *spec, const ops_t *ops) {
    const dtype_t t = spec->precision;
    /* a 16-bit weights copy needs a bf16/fp16 run */
    if (!(t == DT_BF16 || t == DT_FP16) || spec->weights_storage == MODEL_STORE_FP32)
        return DT_FP32;
    if (spec->weights_storage == MODEL_STORE_16BIT) return t;
    return gpt_product_type(spec, ops) == t ? t : DT_FP32; /* auto */
}

/* wstore [P.total] of wtype (zeroed; with_store false: a weight provider binds the units' 16-bit
 * matrices), and wvec with the other tensors' fp32 values. */
static void alloc_weights_store(gpt_t *m, bool with_store) {
    m->wvec_at = xcalloc((size_t)m->P.n, sizeof *m->wvec_at);
    size_t n_vec = 0;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        m->wvec_at[i] = p->decay ? SIZE_MAX : n_vec;
        if (!p->decay) n_vec += (p->numel + 15) / 16 * 16; /* 64-byte aligned, as the registry */
    }
    const size_t bytes = m->P.total * dtype_bytes(m->wtype);
    if (with_store) m->wstore = balloc(m, bytes, MEM_PARAMETERS);
    m->wvec = balloc(m, (n_vec ? n_vec : 1) * sizeof(float), MEM_PARAMETERS);
    if (m->dry_run) return;
    if (with_store) m->ops->zero(m->wstore, bytes / sizeof(float));
    m->ops->zero(m->wvec, n_vec ? n_vec : 1);
}

void gpt_weights_written(gpt_t *m, size_t lo, size_t n) {
    ASSERT(m->wstore);
    for (int i = 0; i < m->P.n; i++) { /* the norms and biases inside [lo, lo + n) */
        const param_t *p = &m->P.p[i];
        const size_t a = p->offset > lo ? p->offset : lo;
        const size_t b = p->offset + p->numel < lo + n ? p->offset + p->numel : lo + n;
        if (p->decay || a >= b) continue;
        m->ops->load_as(m->wvec + m->wvec_at[i] + (a - p->offset),
                        gpt_weight_at(m->wstore, m->wtype, a), b - a, m->wtype);
    }
}

void gpt_store_weights(gpt_t *m, size_t lo, const float *src, size_t n) {
    ASSERT(m->wstore);
    m->ops->store_as(gpt_weight_at(m->wstore, m->wtype, lo), src, n, m->wtype);
    gpt_weights_written(m, lo, n);
}

/* Interleaved pipeline: the blocks, embedding and head of chunk c are the ones in use (no-op
 * with one chunk). */
static void use_chunk(gpt_t *m, int c) {
    if (m->n_chunks <= 1) return;
    ASSERT(c >= 0 && c < m->n_chunks);
    m->first_layer = chunk_first_layer(m, c);
    m->end_layer = m->first_layer + m->chunk_layers;
    m->has_embed = m->stage_embed && c == 0;
    m->has_head = m->stage_head && c == m->n_chunks - 1;
}

/* What a call derives from its pass before it runs: the chunk in use and the micro-batch the
 * regularisers key their masks by. Returns the pass's slot. */
static gpt_slot_t *begin_call(gpt_t *m, const gpt_pass_t *pass) {
    ASSERT(pass && pass->slot >= 0 && pass->slot < m->par.n_slots);
    use_chunk(m, pass->chunk);
    m->reg.micro = pass->micro;
    return &m->slot[pass->slot];
}

/* gpt_create and gpt_plan: the same steps, allocating or only counting (dry_run). */
static void build(gpt_t *m, const model_spec_t *spec, const ops_t *ops, int B, int T,
                  const gpt_parallel_t *par, const gpt_weight_provider_t *provider,
                  const gpt_grad_provider_t *grad_stage, bool dry_run) {
    memset(m, 0, sizeof *m);
    m->dry_run = dry_run;
    set_dims(m, spec, par);
    m->B = B;
    m->T = T;
    m->ops = ops;
    params_create_experts(&m->P, spec, par->tp, par->tp_rank, par->pp, par->pp_rank, par->chunks,
                          par->ep, par->ep_rank);
    m->first_layer = m->P.first_layer;
    m->end_layer = m->P.end_layer;
    m->stage_embed = m->has_embed = m->P.has_embed;
    m->stage_head = m->has_head = m->P.has_head;
    m->n_chunks = m->P.chunks;
    m->chunk_layers = m->P.chunk_layers;
    m->weights = provider;
    m->wtype = gpt_weights_type(spec, ops);
    if (m->wtype != DT_FP32) alloc_weights_store(m, !provider); /* a provider holds the rest */
    else if (!provider) {
        m->params = balloc(m, m->P.total * sizeof(float), MEM_PARAMETERS);
        if (!m->dry_run) ops->zero(m->params, m->P.total);
    }
    m->grad_stage = grad_stage;
    if (!grad_stage) {
        m->grads = balloc(m, m->P.total * sizeof(float), MEM_GRADIENTS);
        if (!m->dry_run) ops->zero(m->grads, m->P.total);
    }
    resolve_views(m);
    if (spec->n_experts > 0) setup_moe(m, spec, par);
    set_recompute(m, spec);
    m->act_dtype = spec->precision;
    m->atype = gpt_activations_type(spec);
    alloc_shared_acts(m);
    alloc_slots(m);
    alloc_head_and_scratch(m);
    gpt_reg_setup(m, spec);
    m->rope_freq = spec->rope_freq;
    if (m->rope && !dry_run) fill_rope_tables(m, m->T);
    use_chunk(m, 0);
}

int gpt_held_blocks(const gpt_t *m) {
    return m->n_chunks > 1 ? m->n_chunks * m->chunk_layers : m->P.end_layer - m->P.first_layer;
}

int gpt_held_index(const gpt_t *m, int layer) {
    ASSERT(params_holds_layer(&m->P, layer));
    if (m->n_chunks <= 1) return layer - m->P.first_layer;
    const int cl = m->chunk_layers; /* layer is in model chunk layer / cl = c * pp + pp_rank */
    return layer / cl / m->par.pp * cl + layer % cl;
}

void gpt_create(gpt_t *m, const model_spec_t *spec, const ops_t *ops, int B, int T,
                const gpt_parallel_t *par, const gpt_weight_provider_t *provider,
                const gpt_grad_provider_t *grad_stage) {
    build(m, spec, ops, B, T, par, provider, grad_stage, false);
}

void gpt_plan(gpt_t *m, const model_spec_t *spec, const ops_t *ops, int B, int T,
              const gpt_parallel_t *par, bool weights_provided, bool grads_staged) {
    /* stand-ins: only whether a provider exists matters to what is allocated */
    static const gpt_weight_provider_t some_weights;
    static const gpt_grad_provider_t some_grads;
    build(m, spec, ops, B, T, par, weights_provided ? &some_weights : NULL,
          grads_staged ? &some_grads : NULL, true);
}

void gpt_destroy(gpt_t *m) {
    const ops_t *o = m->ops;
    for (int s = 0; s < m->par.n_slots; s++) {
        gpt_slot_t *sl = &m->slot[s];
        for (int l = 0; l < m->end_layer - m->first_layer; l++) free_layer_acts(m, &sl->layer[l]);
        xfree(sl->layer);
        o->free(sl->tokens);
        o->free(sl->targets);
        o->free(sl->input);
        o->free(sl->dout);
        if (sl->wq.store) o->free(sl->wq.store);
        xfree(sl->wq.item);
    }
    xfree(m->slot);
    for (int k = 0; k < N_ACTS; k++)
        if (*act_ptr(&m->shared, k)) o->free(*act_ptr(&m->shared, k));
    if (m->wstore) o->free(m->wstore);
    if (m->wvec) o->free(m->wvec);
    xfree(m->wvec_at);
    float *bufs[] = {m->params, m->grads, m->lnf, m->lnf_mean, m->lnf_rstd, m->logits,
                     m->row_max, m->row_sumexp, m->target_logit, m->losses, m->dC, m->dC2,
                     m->dbig, m->attn_scratch, m->rope_cos, m->rope_sin, m->kv_grad,
                     m->sp_full, m->sp_ln, m->norm_grad};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) o->free(bufs[i]);
    moe_free(m->moe);
    m->moe = NULL;
    xfree(m->lw);
    xfree(m->lg);
    xfree(m->host_losses);
    gpt_reg_free(m);
    params_destroy(&m->P);
    memset(m, 0, sizeof *m);
}

void gpt_init_params(gpt_t *m, uint64_t seed) {
    /* with a weight provider the caller initialises what the provider holds */
    ASSERT(m->params || m->wstore);
    float *host = xcalloc(m->P.total, sizeof(float));
    params_init(&m->P, host, seed);
    if (m->params) {
        m->ops->to_device(m->params, host, m->P.total * sizeof(float));
    } else { /* through an fp32 device copy, rounded into the 16-bit store */
        float *dev = m->ops->alloc(m->P.total * sizeof(float), MEM_WORKSPACE);
        m->ops->to_device(dev, host, m->P.total * sizeof(float));
        gpt_store_weights(m, 0, dev, m->P.total);
        m->ops->free(dev);
    }
    xfree(host);
}

/* ---------------------------------------------------------------- forward */

/* Row-parallel output: partial products summed over tp (the bias was added by tp rank 0). */
static void tp_sum(gpt_t *m, float *x, size_t n) {
    comm_allreduce_sum(x, n, m->par.tp_group, COMM_TP);
}

static const float *tp_bias(const gpt_t *m, const float *b) { return m->par.tp_rank == 0 ? b : NULL; }

/* ---- sequence parallelism (gpt.h sp): the rank's token rows of N, and the collectives that
 * take the place of the all-reduces. Without sp every row is the rank's and the row-parallel
 * sums are the all-reduce, as before. */

static int sp_rows(const gpt_t *m, int N) { return m->sp ? N / m->par.tp : N; }

/* The rank's rows inside a tensor of all N rows [N, C]. */
static float *my_rows(const gpt_t *m, float *full, int N) {
    return m->sp ? full + (size_t)m->par.tp_rank * sp_rows(m, N) * m->C : full;
}

/* After a norm wrote the rank's rows of full [N, C]: every rank's rows into every rank's. */
static void sp_gather(gpt_t *m, float *full, int N) {
    if (m->sp)
        comm_allgather_inplace(full, (size_t)sp_rows(m, N) * m->C, m->par.tp_group, COMM_TP,
                               "sp all-gather");
}

/* The rank's rows local [N/tp, C] gathered to all N rows in full [N, C] (without sp: local). */
static const float *sp_gather_to(gpt_t *m, float *full, const float *local, int N) {
    if (!m->sp) return local;
    m->ops->quantize_copy(my_rows(m, full, N), local, (size_t)sp_rows(m, N) * m->C,
                          DT_FP32); /* a plain copy */
    sp_gather(m, full, N);
    return full;
}

/* A gradient of the rank's rows gathered (into sp_full), for a row-parallel product's backward. */
static const float *sp_gathered(gpt_t *m, const float *local, int N) {
    return sp_gather_to(m, m->sp_full, local, N);
}

/* Where a row-parallel product (or the vocab-parallel embedding) writes its partial sum of the
 * block output dst: dst itself, or under sp all N rows in sp_full ... */
static float *row_out(const gpt_t *m, float *dst) { return m->sp ? m->sp_full : dst; }

/* ... summed over tp: the all-reduce, or the reduce-scatter of the rank's rows into dst. */
static void row_reduce(gpt_t *m, float *dst, int N) {
    if (!m->sp) {
        tp_sum(m, dst, (size_t)N * m->C);
        return;
    }
    comm_reduce_scatter_block_sum(m->sp_full, dst, (size_t)sp_rows(m, N) * m->C, m->par.tp_group,
                                  COMM_TP, "sp reduce-scatter");
}

/* A column-parallel input gradient dC [N, C] (partial over tp) summed: in place, or under sp
 * the rank's rows reduce-scattered into local. Returns the summed rows. */
static const float *col_grad(gpt_t *m, float *dC, float *local, int N) {
    if (!m->sp) {
        tp_sum(m, dC, (size_t)N * m->C);
        return dC;
    }
    comm_reduce_scatter_block_sum(dC, local, (size_t)sp_rows(m, N) * m->C, m->par.tp_group,
                                  COMM_TP, "sp reduce-scatter");
    return local;
}

/* An activation saved for backward is now stored as the model's activation type (bf16/fp16:
 * rounded as a GPU would keep it; nothing for fp32). */
static void store(const gpt_t *m, float *x, size_t n) {
    if (m->act_dtype != DT_FP32) m->ops->quantize(x, n, m->act_dtype);
}

/* ---- split backward (ZB-H1): a linear layer's weight gradient queued for the slot's W ---- */

static const float *wq_copy(gpt_t *m, const float *src, size_t n) {
    gpt_wqueue_t *q = m->wq;
    ASSERT(q->used + n <= q->floats);
    float *dst = q->store + q->used;
    q->used += n;
    m->ops->quantize_copy(dst, src, n, DT_FP32); /* a plain copy */
    return dst;
}

/* Whether x is one of the slot's own tensors (else it is in the recompute scratch, which the
 * next block's recomputation overwrites). */
static bool kept_per_slot(gpt_t *m, const float *x) {
    if (m->sp && x == m->sp_ln) return false; /* a norm's output gathered (gpt.h sp) */
    for (int k = 0; k < N_ACTS; k++)
        if (x == *act_ptr(&m->shared, k)) return false;
    return true;
}

/* The 16-bit storage of x when x is the working-set view of a tensor that the block in
 * backward keeps packed, else NULL. */
static const void *packed_of(const gpt_t *m, const float *x) {
    const gpt_layer_acts_t *a = m->bwd_acts;
    for (int k = 0; a && a->packed && k < N_ACTS; k++)
        if (a->packed[k] && *act_ptr((gpt_layer_acts_t *)a, k) == x) return a->packed[k];
    return NULL;
}

static void wq_push(gpt_t *m, float *dw, float *db, const float *dy, const float *x, int N, int C,
                    int OC) {
    gpt_wqueue_t *q = m->wq;
    ASSERT(q->n < q->cap);
    const gpt_wgrad_t *prev = q->n > 0 ? &q->item[q->n - 1] : NULL;
    gpt_wgrad_t *it = &q->item[q->n++];
    it->layer = GPT_UNIT_NONE; /* set when the block's B ends */
    it->dw = dw;
    it->db = db;
    it->x_src = x;
    /* x in 16-bit storage: W unpacks it into its working-set buffer x; else q, k, v (and gate,
     * up) read the same input, queued one after the other: one copy */
    it->x_packed = packed_of(m, x);
    it->x = it->x_packed || kept_per_slot(m, x)       ? x
            : prev && prev->layer == GPT_UNIT_NONE && prev->x_src == x ? prev->x
                                                      : wq_copy(m, x, (size_t)N * C);
    it->dy = wq_copy(m, dy, (size_t)N * OC);
    it->N = N;
    it->C = C;
    it->OC = OC;
}

/* A linear layer's backward: the input gradient now; the weight gradient now, or in a split
 * backward queued for W. The two halves are matmul_backward's own two products, so the
 * numbers are the same either way. */
static void linear_backward(gpt_t *m, float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC, bool acc,
                            bool first) {
    if (!m->wq) {
        m->ops->matmul_backward_w(dinp, dw, db, dout, inp, w, m->wtype, N, C, OC, acc, first);
        return;
    }
    m->ops->matmul_backward_w(dinp, NULL, NULL, dout, inp, w, m->wtype, N, C, OC, acc, false);
    wq_push(m, dw, db, dout, inp, N, C, OC);
}

/* ---- the block's variants (&model norm, pos, n_kv_head, mlp), chosen by the flags set once
 * in set_dims; each pair forward / backward side by side ---- */

/* Pre-norm: layernorm (saves mean and rstd) or RMSNorm (rstd; mean is NULL). */
static void norm_forward(const gpt_t *m, float *out, float *mean, float *rstd, const float *inp,
                         const float *w, const float *b, int N) {
    if (m->rmsnorm) m->ops->rmsnorm_forward(out, rstd, inp, w, N, m->C, m->norm_eps);
    else m->ops->layernorm_forward(out, mean, rstd, inp, w, b, N, m->C);
}

static void norm_backward(const gpt_t *m, float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean, const float *rstd,
                          int N, bool accumulate_dinp, bool first) {
    if (m->rmsnorm)
        m->ops->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, m->C, accumulate_dinp, first);
    else
        m->ops->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, m->C,
                                   accumulate_dinp, first);
}

/* norm_backward on the rank's rows (N: the micro-batch's rows). Under sp the weight (and
 * bias) gradient of those rows is partial: made in norm_grad, summed over tp, then added
 * (overwritten on the first micro-batch), so every tp rank holds the replicated tensor's. */
static void norm_backward_rows(gpt_t *m, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, bool accumulate_dinp, bool first) {
    if (!m->sp) {
        norm_backward(m, dinp, dw, db, dout, inp, w, mean, rstd, N, accumulate_dinp, first);
        return;
    }
    const size_t C = m->C;
    float *sw = m->norm_grad, *sb = db ? m->norm_grad + C : NULL;
    norm_backward(m, dinp, sw, sb, dout, inp, w, mean, rstd, sp_rows(m, N), accumulate_dinp,
                  true);
    tp_sum(m, m->norm_grad, db ? 2 * C : C);
    if (first) m->ops->zero(dw, C);
    m->ops->add(dw, dw, sw, C);
    if (!db) return;
    if (first) m->ops->zero(db, C);
    m->ops->add(db, db, sb, C);
}

/* res = a + b, then out = norm(res), both stored (layernorm: the one fused pass). */
static void residual_norm_forward(const gpt_t *m, float *res, float *out, float *mean,
                                  float *rstd, const float *a, const float *b, const float *w,
                                  const float *bias, int N) {
    if (!m->rmsnorm) {
        m->ops->residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, m->C,
                                           m->act_dtype);
        return;
    }
    m->ops->add(res, a, b, (size_t)N * m->C);
    store(m, res, (size_t)N * m->C);
    norm_forward(m, out, mean, rstd, res, w, bias, N);
    store(m, out, (size_t)N * m->C);
}

/* Separate q, k, v inside a->qkv (or the gradient buffer): q [N, NHl hs], k and v [N, KVl hs]. */
static void qkv_views(const gpt_t *m, float *base, int N, float **q, float **k, float **v) {
    *q = base;
    *k = *q + (size_t)N * m->NHl * m->hs;
    *v = *k + (size_t)N * m->KVl * m->hs;
}

/* The rows of a k or v weight (or bias) this rank uses: its shard, or with replicated k/v the
 * rows of head kv_head0 (row length C for weights, 1 for biases). */
static float *kv_rows(const gpt_t *m, float *w, int row_len) {
    return w ? w + (size_t)m->kv_head0 * m->hs * row_len : NULL;
}

/* The same rows of a k or v weight matrix (stored as the model's weights type). */
static const float *kv_weight_rows(const gpt_t *m, const float *w) {
    return gpt_weight_at(w, m->wtype, (size_t)m->kv_head0 * m->hs * m->C);
}

/* x = ln1 (all N rows) -> qkv (fused), or q, k, v (RoPE applied to q and k), stored. */
static void qkv_forward(const gpt_t *m, gpt_layer_acts_t *a, const float *x,
                        const gpt_layer_w_t *w, int B, int T) {
    const ops_t *o = m->ops;
    const int N = B * T, C = m->C, Cl = m->NHl * m->hs, KVl = m->KVl * m->hs;
    if (m->fused_qkv) {
        o->matmul_forward_w(a->qkv, x, w->qkvw, m->wtype, w->qkvb, N, C, 3 * Cl);
        store(m, a->qkv, (size_t)N * 3 * Cl);
        return;
    }
    float *q, *k, *v;
    qkv_views(m, a->qkv, N, &q, &k, &v);
    o->matmul_forward_w(q, x, w->qw, m->wtype, w->qb, N, C, Cl);
    o->matmul_forward_w(k, x, kv_weight_rows(m, w->kw), m->wtype, kv_rows(m, w->kb, 1), N, C,
                        KVl);
    o->matmul_forward_w(v, x, kv_weight_rows(m, w->vw), m->wtype, kv_rows(m, w->vb, 1), N, C,
                        KVl);
    if (m->rope) {
        o->rope_forward(q, m->rope_cos, m->rope_sin, B, T, m->NHl, m->hs);
        o->rope_forward(k, m->rope_cos, m->rope_sin, B, T, m->KVl, m->hs);
    }
    store(m, a->qkv, (size_t)N * (Cl + 2 * KVl));
}

/* Gradient of one replicated k or v weight (and bias): this rank's rows of head kv_head0 into
 * the zeroed scratch, summed over tp (every rank's query heads add to the k/v heads they read),
 * then added to the gradient (overwritten on the first micro-batch), equal on every tp rank. */
static void kv_replicated_backward(gpt_t *m, float *dC, float *gw, float *gb, const float *dkv,
                                   const float *ln1, const float *w, int N, bool first) {
    const ops_t *o = m->ops;
    const size_t KVC = (size_t)m->KV * m->hs * m->C, KVn = (size_t)m->KV * m->hs;
    float *sw = m->kv_grad, *sb = m->kv_grad + KVC;
    o->zero(m->kv_grad, KVC + KVn);
    o->matmul_backward_w(dC, kv_rows(m, sw, m->C), gb ? kv_rows(m, sb, 1) : NULL, dkv, ln1,
                         kv_weight_rows(m, w), m->wtype, N, m->C, m->hs, true, true);
    tp_sum(m, m->kv_grad, KVC + (gb ? KVn : 0));
    if (first) o->zero(gw, KVC);
    o->add(gw, gw, sw, KVC);
    if (!gb) return;
    if (first) o->zero(gb, KVn);
    o->add(gb, gb, sb, KVn);
}

/* Backward of qkv_forward from d(qkv) in m->dbig (RoPE undone in place): dC = d(ln1), partial
 * over tp (the caller sums it), and the weight gradients. */
static void qkv_backward(gpt_t *m, const float *x,
                         const gpt_layer_w_t *w, const gpt_layer_w_t *g, int B, int T, bool first) {
    const ops_t *o = m->ops;
    const int N = B * T, C = m->C, Cl = m->NHl * m->hs, KVl = m->KVl * m->hs;
    if (m->fused_qkv) {
        linear_backward(m, m->dC, g->qkvw, g->qkvb, m->dbig, x, w->qkvw, N, C, 3 * Cl,
                        false, first);
        return;
    }
    float *dq, *dk, *dv;
    qkv_views(m, m->dbig, N, &dq, &dk, &dv);
    if (m->rope) {
        o->rope_backward(dq, m->rope_cos, m->rope_sin, B, T, m->NHl, m->hs);
        o->rope_backward(dk, m->rope_cos, m->rope_sin, B, T, m->KVl, m->hs);
    }
    linear_backward(m, m->dC, g->qw, g->qb, dq, x, w->qw, N, C, Cl, false, first);
    if (m->kv_replicated) {
        kv_replicated_backward(m, m->dC, g->kw, g->kb, dk, x, w->kw, N, first);
        kv_replicated_backward(m, m->dC, g->vw, g->vb, dv, x, w->vw, N, first);
        return;
    }
    linear_backward(m, m->dC, g->kw, g->kb, dk, x, w->kw, N, C, KVl, true, first);
    linear_backward(m, m->dC, g->vw, g->vb, dv, x, w->vw, N, C, KVl, true, first);
}

/* The views ring attention reads and writes: inside the fused qkv [N, 3 C/tp] (and d(qkv)), or
 * the separate q, k, v planes (GQA). */
static ring_layout_t ring_layout_of(const gpt_t *m, float *qkv, float *dqkv, int B, int T) {
    const int Cl = m->NHl * m->hs, N = B * T;
    ring_layout_t L = {.B = B, .T = T, .NH = m->NHl, .NKV = m->fused_qkv ? m->NHl : m->KVl,
                       .hs = m->hs};
    if (m->fused_qkv) {
        L.q = qkv, L.k = qkv + Cl, L.v = qkv + 2 * Cl, L.ldq = L.ldkv = 3 * Cl;
        if (dqkv) L.dq = dqkv, L.dk = dqkv + Cl, L.dv = dqkv + 2 * Cl;
        return L;
    }
    float *q, *k, *v;
    qkv_views(m, qkv, N, &q, &k, &v);
    L.q = q, L.k = k, L.v = v, L.ldq = Cl, L.ldkv = m->KVl * m->hs;
    if (dqkv) qkv_views(m, dqkv, N, &L.dq, &L.dk, &L.dv);
    return L;
}

/* The attention core and the MLP activation, with their outputs stored: the forward and the
 * selective recomputation call the same two, so a recomputed tensor is bit-identical also in
 * bf16/fp16. */
static void attention_stored(const gpt_t *m, int l, gpt_layer_acts_t *a, int B, int T) {
    const size_t N = (size_t)B * T;
    dropout_mask_t mk; /* attn_dropout: the probabilities' mask, keyed by global query head */
    const dropout_mask_t *drop = gpt_attn_mask(m, l, B, T, &mk);
    if (m->ring.cp > 1) { /* context parallelism: the mask drawn at global positions */
        ring_layout_t L = ring_layout_of(m, a->qkv, NULL, B, T);
        L.drop = drop;
        ring_attention_forward(&m->ring, m->ops, &L, a->atty, a->lse, m->attn_scratch,
                               m->attn_scratch_floats);
    } else if (m->fused_qkv) {
        m->ops->attention_forward_dropout(a->atty, a->lse, m->attn_scratch,
                                          m->attn_scratch_floats, a->qkv, B, T, m->NHl, m->hs,
                                          drop);
    } else {
        float *q, *k, *v;
        qkv_views(m, a->qkv, B * T, &q, &k, &v);
        m->ops->attention_gqa_forward_dropout(a->atty, a->lse, m->attn_scratch,
                                              m->attn_scratch_floats, q, k, v, B, T, m->NHl,
                                              m->KVl, m->hs, drop);
    }
    store(m, a->atty, N * m->NHl * m->hs); /* lse stays fp32 (ops.h says why) */
}

static void attention_core_backward(const gpt_t *m, int l, gpt_layer_acts_t *a, int B, int T) {
    dropout_mask_t mk; /* the forward's mask, drawn again */
    const dropout_mask_t *drop = gpt_attn_mask(m, l, B, T, &mk);
    if (m->ring.cp > 1) { /* d(qkv): dq accumulates over the ring's blocks */
        const size_t N = (size_t)B * T, row = (size_t)m->NHl * m->hs + 2 * (size_t)m->KVl * m->hs;
        m->ops->zero(m->dbig, N * (m->fused_qkv ? 3 * (size_t)m->NHl * m->hs : row));
        ring_layout_t L = ring_layout_of(m, a->qkv, m->dbig, B, T);
        L.drop = drop;
        ring_attention_backward(&m->ring, m->ops, &L, m->dC2, a->atty, a->lse, m->attn_scratch,
                                m->attn_scratch_floats);
        return;
    }
    if (m->fused_qkv) {
        m->ops->attention_backward_dropout(m->dbig, m->attn_scratch, m->attn_scratch_floats,
                                           m->dC2, a->qkv, a->atty, a->lse, B, T, m->NHl, m->hs,
                                           drop);
        return;
    }
    float *q, *k, *v, *dq, *dk, *dv;
    qkv_views(m, a->qkv, B * T, &q, &k, &v);
    qkv_views(m, m->dbig, B * T, &dq, &dk, &dv);
    m->ops->attention_gqa_backward_dropout(dq, dk, dv, m->attn_scratch, m->attn_scratch_floats,
                                           m->dC2, q, k, v, a->atty, a->lse, B, T, m->NHl,
                                           m->KVl, m->hs, drop);
}

static void mlp_act_stored(const gpt_t *m, gpt_layer_acts_t *a, int N) {
    const size_t n = (size_t)N * m->Fl;
    if (m->swiglu) m->ops->swiglu_forward(a->fch_gelu, a->fch, a->fcu, n);
    else m->ops->gelu_forward(a->fch_gelu, a->fch, n);
    store(m, a->fch_gelu, n);
}

/* ln2 -> fch (GELU: fc; SwiGLU: gate, and up into fcu) -> the activation, stored. */
static void mlp_in_forward(const gpt_t *m, gpt_layer_acts_t *a, const float *x,
                           const gpt_layer_w_t *w, int N) {
    const int C = m->C, Fl = m->Fl;
    if (m->swiglu) {
        m->ops->matmul_forward_w(a->fch, x, w->gatew, m->wtype, w->gateb, N, C, Fl);
        store(m, a->fch, (size_t)N * Fl);
        m->ops->matmul_forward_w(a->fcu, x, w->fcw, m->wtype, w->fcb, N, C, Fl);
        store(m, a->fcu, (size_t)N * Fl);
    } else {
        m->ops->matmul_forward_w(a->fch, x, w->fcw, m->wtype, w->fcb, N, C, Fl);
        store(m, a->fch, (size_t)N * Fl);
    }
    mlp_act_stored(m, a, N);
}

/* Backward of mlp_in_forward from d(activation output) in m->dbig: dC = d(ln2), partial over
 * tp (the caller sums it). */
static void mlp_in_backward(gpt_t *m, gpt_layer_acts_t *a, const float *x,
                            const gpt_layer_w_t *w, const gpt_layer_w_t *g, int N, bool first) {
    const ops_t *o = m->ops;
    const int C = m->C, Fl = m->Fl;
    if (!m->swiglu) {
        o->gelu_backward(m->dbig, a->fch, m->dbig, (size_t)N * Fl);
        linear_backward(m, m->dC, g->fcw, g->fcb, m->dbig, x, w->fcw, N, C, Fl, false, first);
        return;
    }
    float *dgate = m->dbig, *dup = m->dbig + (size_t)N * Fl;
    o->swiglu_backward(dgate, dup, m->dbig, a->fch, a->fcu, (size_t)N * Fl);
    linear_backward(m, m->dC, g->gatew, g->gateb, dgate, x, w->gatew, N, C, Fl, false, first);
    linear_backward(m, m->dC, g->fcw, g->fcb, dup, x, w->fcw, N, C, Fl, true, first);
}

/* The embedding of B x T rows, each sequence's positions its own: 0 .. T-1, or with context
 * parallelism (model/ring.h) the global positions of its two chunks, one call per chunk. */
static void embed_rows_forward(gpt_t *m, float *out, const int *tokens, int B, int T) {
    const bool pos = m->learned_pos && m->par.tp_rank == 0;
    if (m->ring.cp == 1) {
        m->ops->embed_forward_w(out, tokens, m->gw.wte, m->gw.wpe, m->wtype, B, T, m->C,
                                m->v_start, m->Vl, pos);
        return;
    }
    const int c = T / 2;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            const size_t row = (size_t)b * T + (size_t)h * c;
            const float *wpe = pos ? gpt_weight_at(m->gw.wpe, m->wtype,
                                                   (size_t)ring_position_of(m, h * c, T) * m->C)
                                   : NULL;
            m->ops->embed_forward_w(out + row * m->C, tokens + row, m->gw.wte, wpe, m->wtype, 1,
                                    c, m->C, m->v_start, m->Vl, pos);
        }
}

static void embed_rows_backward(gpt_t *m, const float *dout, const int *tokens, int B, int T) {
    if (m->ring.cp == 1) {
        m->ops->embed_backward(m->gg.wte, m->gg.wpe, dout, tokens, B, T, m->C, m->v_start, m->Vl,
                               m->learned_pos);
        return;
    }
    const int c = T / 2;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            const size_t row = (size_t)b * T + (size_t)h * c;
            float *dwpe = m->learned_pos ? m->gg.wpe + (size_t)ring_position_of(m, h * c, T) * m->C
                                         : NULL;
            m->ops->embed_backward(m->gg.wte, dwpe, dout + row * m->C, tokens + row, 1, c, m->C,
                                   m->v_start, m->Vl, m->learned_pos);
        }
}

void gpt_embed(gpt_t *m, const gpt_pass_t *pass, const int *tokens, int B, int T) {
    gpt_slot_t *sl = begin_call(m, pass);
    ASSERT(m->has_embed && B <= m->B && T <= m->T);
    m->ops->to_device(sl->tokens, tokens, (size_t)B * T * sizeof(int));
    need_weights(m, GPT_UNIT_EMBED, m->first_layer < m->end_layer ? m->first_layer : GPT_UNIT_NONE);
    /* vocab-parallel: each rank adds the rows it owns; rank 0 adds the positions (if learned) */
    embed_rows_forward(m, row_out(m, sl->input), sl->tokens, B, T);
    row_reduce(m, sl->input, B * T);
    gpt_dropout(m, REG_EMBD, 0, B, T, sl->input, sl->input);
    store(m, sl->input, gpt_stage_floats(m, B, T));
}

/* One pre-norm block: res2 = res_in + attn(ln1(res_in)); res3 = res2 + mlp(ln2(res2)). */
static void block_forward(gpt_t *m, int l, gpt_layer_acts_t *a, const float *res_in, int B,
                          int T) {
    const ops_t *o = m->ops;
    const int N = B * T, Nl = sp_rows(m, N), C = m->C, Fl = m->Fl, Cl = m->NHl * m->hs;
    /* the next block this rank needs: the one after in a forward, the one before when the
     * forward is re-run inside the backward (recomputation) */
    const int next = m->recomputing ? l - 1 : l + 1;
    need_weights(m, l, next >= m->first_layer && next < m->end_layer ? next : GPT_UNIT_NONE);
    const gpt_layer_w_t w = m->lw[l];
    norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, res_in, w.ln1w, w.ln1b, Nl);
    store(m, a->ln1, (size_t)Nl * C);
    qkv_forward(m, a, sp_gather_to(m, m->sp_ln, a->ln1, N), &w, B, T); /* all N rows */
    attention_stored(m, l, a, B, T);
    o->matmul_forward_w(row_out(m, a->res2), a->atty, w.projw, m->wtype, tp_bias(m, w.projb), N,
                        Cl, C);
    row_reduce(m, a->res2, N);
    gpt_dropout(m, REG_ATTN_OUT, l, B, T, a->res2, a->res2);
    /* res2 += res_in and ln2 = norm(res2), both stored */
    residual_norm_forward(m, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, res_in, w.ln2w,
                          w.ln2b, Nl);
    const float *ln2 = sp_gather_to(m, m->sp_ln, a->ln2, N); /* all N rows */
    /* a re-run for backward (recompute = 'full') needs nothing later; an MoE block's MLP keeps
     * its activations per slot, so its re-run ends here */
    const bool moe = is_moe(m, l);
    if (moe && !a->res3) return;
    if (moe) {
        moe_forward(m->moe, l, a->moe, &w, ln2, B, T, row_out(m, a->res3));
    } else {
        mlp_in_forward(m, a, ln2, &w, N);
        if (!a->res3) return;
        o->matmul_forward_w(row_out(m, a->res3), a->fch_gelu, w.mprojw, m->wtype,
                            tp_bias(m, w.mprojb), N, Fl, C);
    }
    row_reduce(m, a->res3, N);
    gpt_dropout(m, REG_MLP_OUT, l, B, T, a->res3, a->res3);
    o->add(a->res3, a->res3, a->res2, (size_t)Nl * C);
    store(m, a->res3, (size_t)Nl * C);
}

static const float *stage_output(const gpt_t *m, int s) {
    const gpt_slot_t *sl = &m->slot[s];
    int nl = m->end_layer - m->first_layer;
    return nl > 0 ? sl->layer[nl - 1].res3 : sl->input;
}

const float *gpt_stage_forward(gpt_t *m, const gpt_pass_t *pass, int B, int T) {
    ASSERT(B <= m->B && T <= m->T);
    gpt_slot_t *sl = begin_call(m, pass);
    rope_tables_for(m, T);
    const float *res = sl->input;
    for (int l = m->first_layer; l < m->end_layer; l++) {
        gpt_layer_acts_t *a = &sl->layer[l - m->first_layer];
        block_forward(m, l, a, res, B, T);
        if (!pass->forward_only) pack_layer(m, l, a, B, T); /* nothing kept without a backward */
        res = a->res3;
    }
    return res;
}

/* Final norm, LM head (vocab-parallel) and the loss of each row; returns the mean loss. */
static float head_forward(gpt_t *m, int s, const int *targets, int B, int T) {
    const ops_t *o = m->ops;
    const int N = B * T;
    gpt_slot_t *sl = &m->slot[s];
    if (m->tied) {
        need_weights(m, GPT_UNIT_FINAL, GPT_UNIT_EMBED);
        need_weights(m, GPT_UNIT_EMBED, GPT_UNIT_NONE);
    } else {
        need_weights(m, GPT_UNIT_FINAL, GPT_UNIT_NONE);
    }
    /* the head reads all N rows (gathered under sp): its vocab-parallel loss needs every row's
     * logits of the rank's vocabulary shard */
    norm_forward(m, my_rows(m, m->lnf, N), m->lnf_mean, m->lnf_rstd, stage_output(m, s),
                 m->gw.lnfw, m->gw.lnfb, sp_rows(m, N));
    store(m, my_rows(m, m->lnf, N), (size_t)sp_rows(m, N) * m->C); /* logits, loss stay fp32 */
    sp_gather(m, m->lnf, N);
    o->matmul_forward_w(m->logits, m->lnf, m->tied ? m->gw.wte : m->gw.lm_head, m->wtype, NULL, N,
                        m->C, m->Vl);
    if (!targets) return 0.0f;
    o->to_device(sl->targets, targets, (size_t)N * sizeof(int));
    o->xent_row_max(m->row_max, m->logits, N, m->Vl, m->v_valid);
    comm_allreduce_max(m->row_max, (size_t)N, m->par.tp_group, COMM_TP);
    o->xent_row_sumexp(m->row_sumexp, m->logits, m->row_max, N, m->Vl, m->v_valid);
    o->xent_target_logit(m->target_logit, m->logits, sl->targets, N, m->Vl, m->v_start);
    tp_sum(m, m->row_sumexp, (size_t)N);
    tp_sum(m, m->target_logit, (size_t)N);
    if (gpt_loss_regularized(m)) gpt_reg_losses(m, N); /* label smoothing, z-loss */
    else o->xent_losses(m->losses, m->row_max, m->row_sumexp, m->target_logit, N);
    o->to_host(m->host_losses, m->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->host_losses[i];
    return (float)(sum / N);
}

/* ---------------------------------------------------------------- backward */

/* Backward of the head: dlogits in place, dwte (local rows), d(lnf input) into the slot's dout. */
static void head_backward(gpt_t *m, int s, int B, int T, float dloss, bool first) {
    const ops_t *o = m->ops;
    const int N = B * T, C = m->C;
    gpt_slot_t *sl = &m->slot[s];
    first = first || m->grad_stage; /* staged: every micro-batch overwrites */
    const int last = m->end_layer - 1 >= m->first_layer ? m->end_layer - 1 : GPT_UNIT_NONE;
    begin_grads(m, GPT_UNIT_FINAL);
    if (m->tied) {
        begin_grads(m, GPT_UNIT_EMBED); /* wte's head part now, its embedding part at the end */
        need_weights(m, GPT_UNIT_FINAL, GPT_UNIT_EMBED);
        need_weights(m, GPT_UNIT_EMBED, last);
    } else {
        need_weights(m, GPT_UNIT_FINAL, last);
    }
    if (gpt_loss_regularized(m)) gpt_reg_xent_backward(m, sl->targets, N, dloss);
    else o->xent_backward_inplace(m->logits, m->row_max, m->row_sumexp, sl->targets, dloss, N,
                                  m->Vl, m->v_valid, m->v_start);
    o->matmul_backward_w(m->dC, m->tied ? m->gg.wte : m->gg.lm_head, NULL, m->logits, m->lnf,
                         m->tied ? m->gw.wte : m->gw.lm_head, m->wtype, N, C, m->Vl, false, first);
    const float *dn = col_grad(m, m->dC, m->dC2, N);
    norm_backward_rows(m, sl->dout, m->gg.lnfw, m->gg.lnfb, dn, stage_output(m, s), m->gw.lnfw,
                       m->lnf_mean, m->lnf_rstd, N, false, first);
    end_grads(m, GPT_UNIT_FINAL);
}

float gpt_head(gpt_t *m, const gpt_pass_t *pass, const int *targets, int B, int T, bool first) {
    begin_call(m, pass);
    ASSERT(m->has_head);
    float loss = head_forward(m, pass->slot, targets, B, T);
    if (!pass->forward_only) head_backward(m, pass->slot, B, T, pass->dloss, first);
    return loss;
}

/* Backward of one block. On entry m->dres holds dL/d(res3); on exit dL/d(res_in). */
static void block_backward(gpt_t *m, int l, gpt_layer_acts_t *a, const float *res_in, int B,
                           int T, bool first) {
    const int N = B * T, C = m->C, Fl = m->Fl, Cl = m->NHl * m->hs;
    need_weights(m, l, l - 1 >= m->first_layer ? l - 1 : GPT_UNIT_NONE);
    begin_grads(m, l);
    first = first || m->grad_stage; /* staged: every micro-batch overwrites */
    const gpt_layer_w_t w = m->lw[l], g = m->lg[l];
    /* MLP: res3 = res2 + dropout(proj(act(fc(ln2(res2))))) (SwiGLU: act(gate(.), up(.))) */
    const float *dmlp = sp_gathered(m, gpt_dropout(m, REG_MLP_OUT, l, B, T, m->dC2, m->dres), N);
    const float *ln2 = sp_gather_to(m, m->sp_ln, a->ln2, N); /* all N rows again */
    if (is_moe(m, l)) {
        moe_backward(m->moe, l, a->moe, &w, &g, ln2, dmlp, B, T, first, m->dC);
    } else {
        linear_backward(m, m->dbig, g.mprojw, g.mprojb, dmlp, a->fch_gelu, w.mprojw, N, Fl, C,
                        false, first);
        mlp_in_backward(m, a, ln2, &w, &g, N, first);
    }
    /* column-parallel input gradient: partial over tp */
    const float *dn = col_grad(m, m->dC, m->dC2, N);
    norm_backward_rows(m, m->dres, g.ln2w, g.ln2b, dn, a->res2, w.ln2w, a->ln2_mean,
                       a->ln2_rstd, N, true, first);
    /* attention: res2 = res_in + dropout(proj(attn(qkv(ln1(res_in))))) */
    const float *dattn = sp_gathered(m, gpt_dropout(m, REG_ATTN_OUT, l, B, T, m->dC, m->dres), N);
    linear_backward(m, m->dC2, g.projw, g.projb, dattn, a->atty, w.projw, N, Cl, C, false,
                    first);
    attention_core_backward(m, l, a, B, T);
    qkv_backward(m, sp_gather_to(m, m->sp_ln, a->ln1, N), &w, &g, B, T, first);
    dn = col_grad(m, m->dC, m->dC2, N);
    norm_backward_rows(m, m->dres, g.ln1w, g.ln1b, dn, res_in, w.ln1w, a->ln1_mean, a->ln1_rstd,
                       N, true, first);
    end_grads(m, l);
}

/* What the block did not keep, made again by the forward's kernels on the forward's inputs with
 * the same sizes (so the same OpenMP partition): bit-identical to what the forward computed.
 * Full: the block's forward re-run into the shared set, its tp all-reduces included (every tp
 * rank re-runs it, in the same order); the kept output is not rewritten (on a pipeline stage it
 * may still be in flight to stage + 1). Dropout masks are pure functions of (seed, step, layer,
 * global token, feature) (model/gpt_regular.h), so a re-run draws the same. */
static void block_recompute(gpt_t *m, int l, gpt_layer_acts_t *a, const float *res_in, int B,
                            int T) {
    if (a->recompute == GPT_RECOMPUTE_FULL) {
        gpt_layer_acts_t run = *a;
        run.res3 = NULL;
        m->recomputing = true;
        block_forward(m, l, &run, res_in, B, T);
        m->recomputing = false;
    } else if (a->recompute == GPT_RECOMPUTE_SELECTIVE) {
        attention_stored(m, l, a, B, T);
        if (!is_moe(m, l)) mlp_act_stored(m, a, B * T);
    }
}

/* Split backward: the queue entries of block l's B get their layer (W reports it done). */
static void wq_end_layer(gpt_t *m, int l) {
    for (int k = m->wq->n - 1; k >= 0 && m->wq->item[k].layer == GPT_UNIT_NONE; k--)
        m->wq->item[k].layer = l;
}

void gpt_stage_backward(gpt_t *m, const gpt_pass_t *pass, int B, int T, bool first) {
    gpt_slot_t *sl = begin_call(m, pass);
    rope_tables_for(m, T);
    if (m->moe) m->moe->dloss = pass->dloss; /* the aux and z losses' weight */
    m->dres = sl->dout;
    ASSERT(!m->par.split_backward || !m->grad_stage); /* W writes the resident gradients */
    m->wq = m->par.split_backward ? &sl->wq : NULL;
    if (m->wq) m->wq->n = 0, m->wq->used = 0;
    for (int l = m->end_layer - 1; l >= m->first_layer; l--) {
        const int i = l - m->first_layer;
        const float *res_in = i > 0 ? sl->layer[i - 1].res3 : sl->input;
        m->bwd_acts = &sl->layer[i];
        unpack_layer(m, l, &sl->layer[i], B, T);
        block_recompute(m, l, &sl->layer[i], res_in, B, T);
        block_backward(m, l, &sl->layer[i], res_in, B, T, first);
        m->bwd_acts = NULL;
        if (m->wq) wq_end_layer(m, l);
        else if (pass->on_layer_done) pass->on_layer_done(pass->hook_ctx, l);
    }
    m->wq = NULL;
    if (!m->has_embed) return;
    /* With the head on this stage (pp = 1) wte already holds this micro-batch's LM-head
     * gradient and the embedding adds to it; otherwise the embedding is wte's only source.
     * Every tp rank computes the (replicated) wpe gradient so the replicas stay equal. */
    first = first || m->grad_stage; /* staged: every micro-batch overwrites */
    const bool head_began = m->has_head && m->tied; /* the tied head's wte gradient is in */
    if (!head_began) begin_grads(m, GPT_UNIT_EMBED);
    if (first && m->learned_pos) m->ops->zero(m->gg.wpe, params_find(&m->P, "wpe")->numel);
    if (first && !head_began) m->ops->zero(m->gg.wte, params_find(&m->P, "wte")->numel);
    gpt_dropout(m, REG_EMBD, 0, B, T, m->dres, m->dres);
    embed_rows_backward(m, sp_gathered(m, m->dres, B * T), sl->tokens, B, T);
    end_grads(m, GPT_UNIT_EMBED);
}

void gpt_stage_weight_grad(gpt_t *m, const gpt_pass_t *pass, bool first) {
    gpt_wqueue_t *q = &begin_call(m, pass)->wq;
    ASSERT(m->par.split_backward);
    for (int i = 0; i < q->n; i++) {
        const gpt_wgrad_t *it = &q->item[i];
        /* a packed input into the working set (once for the items that share it); nothing else
         * uses the working set between block calls */
        if (it->x_packed && (i == 0 || q->item[i - 1].x_packed != it->x_packed))
            m->ops->load_as((float *)it->x, it->x_packed, (size_t)it->N * it->C, m->atype);
        m->ops->matmul_backward_w(NULL, it->dw, it->db, it->dy, it->x, NULL, m->wtype, it->N, it->C,
                                  it->OC, false, first);
        const bool layer_done = i + 1 == q->n || q->item[i + 1].layer != it->layer;
        if (layer_done && pass->on_layer_done) pass->on_layer_done(pass->hook_ctx, it->layer);
    }
    q->n = 0;
    q->used = 0;
}

/* ---------------------------------------------------------------- whole model, one stage */

float gpt_forward(gpt_t *m, const gpt_pass_t *pass, const int *inputs, const int *targets, int B,
                  int T) {
    begin_call(m, pass);
    ASSERT(m->has_embed && m->has_head);
    gpt_embed(m, pass, inputs, B, T);
    gpt_stage_forward(m, pass, B, T);
    return head_forward(m, pass->slot, targets, B, T);
}

void gpt_backward(gpt_t *m, const gpt_pass_t *pass, int B, int T, bool first_micro) {
    begin_call(m, pass);
    if (m->moe) m->moe->dloss = pass->dloss; /* before the head: as gpt_stage_backward sets it */
    head_backward(m, pass->slot, B, T, pass->dloss, first_micro);
    gpt_stage_backward(m, pass, B, T, first_micro);
}

void gpt_logits_row(gpt_t *m, int b, int t, int T, float *out) {
    const float *row = m->logits + ((size_t)b * T + t) * m->Vl;
    if (m->par.tp == 1) {
        m->ops->to_host(out, row, (size_t)m->V * sizeof(float));
        return;
    }
    /* gather the vocab shards of one row: Vl floats from each tp rank, in rank order */
    float *local = xmalloc((size_t)m->Vl * sizeof(float));
    float *full = xmalloc((size_t)m->Vp * sizeof(float));
    m->ops->to_host(local, row, (size_t)m->Vl * sizeof(float));
    comm_allgather_float(local, m->Vl, full, m->par.tp_group, COMM_TP);
    memcpy(out, full, (size_t)m->V * sizeof(float));
    xfree(local);
    xfree(full);
}

size_t gpt_stage_floats(const gpt_t *m, int B, int T) {
    ASSERT(!m->sp || (B * T) % m->par.tp == 0); /* config/ checks seq_len against tp */
    return (size_t)sp_rows(m, B * T) * m->C;
}

double gpt_flops_per_token(const gpt_t *m, int T) {
    /* 6 FLOPs per parameter per token (2 forward, 4 backward) for every matrix product,
     * counting the LM head once (tied or not; the embedding lookup is no product), plus
     * attention scores and weighted sums:
     * 2 * 2 * T * C per layer forward (QK^T and AV), times 3 for forward + backward.
     * Whole model, all ranks together. */
    double mat = (double)m->L * m->block_matrix + (double)m->Vp * m->C;
    if (m->moe) { /* an MoE block's MLP: the router, the k chosen and the shared experts */
        const double dense_mlp = (m->swiglu ? 3.0 : 2.0) * m->C * m->F;
        for (int l = 0; l < m->L; l++)
            if (is_moe(m, l)) mat += m->moe->mlp_matrix - dense_mlp;
    }
    double attn = (double)m->L * 2.0 * 2.0 * T * m->C;
    return 6.0 * mat + 3.0 * attn;
}
