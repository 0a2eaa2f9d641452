/* moe.c — Mixture-of-Experts blocks and expert parallelism (see moe.h).
 * Notation: N = B*T token rows, C = d_model, E experts (El on this ep rank), k choices,
 * M dispatch rows (kept assignments of this rank's tokens), R rows received by this rank's
 * experts, Fel = d_ff_expert / tp, Sl = n_shared_experts * d_ff_expert / tp. */
#include "model/moe.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "model/ring.h"
#include "parallel/comm.h"

/* ---------------------------------------------------------------- setup */

static float *fbuf(moe_t *q, size_t n, size_t *bytes, mem_category_t cat) {
    if (bytes) *bytes += n * sizeof(float);
    return q->ctx.alloc(q->ctx.model, n * sizeof(float), cat);
}

static int *ibuf(moe_t *q, size_t n, size_t *bytes) {
    if (bytes) *bytes += n * sizeof(int);
    return q->ctx.alloc(q->ctx.model, n * sizeof(int), MEM_ACTIVATIONS);
}

static void *host(const moe_t *q, size_t n, size_t size) {
    return q->ctx.dry_run ? NULL : xcalloc(n ? n : 1, size);
}

moe_t *moe_setup(const moe_ctx_t *ctx, const model_spec_t *spec, int ep, int ep_rank,
                 const comm_group_t *ep_group) {
    moe_t *q = xcalloc(1, sizeof *q);
    q->ctx = *ctx;
    const int tp = ctx->tp;
    q->E = spec->n_experts;
    q->k = spec->top_k_moe;
    q->ep = ep;
    q->ep_rank = ep_rank;
    q->ep_group = ep_group;
    q->El = q->E / ep;
    q->Fe = spec->d_ff_expert;
    q->Fel = q->Fe / tp;
    q->Sl = spec->n_shared_experts * q->Fe / tp;
    /* generation is dropless: a token's next-token logits must not depend on which other
     * tokens of the window competed for its experts */
    q->cf = !spec->generate ? spec->capacity_factor : 0.0;
    q->mlp_matrix = moe_block_mlp_matrix(spec);
    q->policy = spec->drop_by_position ? MOE_DROP_POSITION : MOE_DROP_PROBS;
    q->noise = (float)spec->router_noise;
    q->aux_coef = (float)spec->aux_loss_coef;
    q->z_coef = (float)spec->z_loss_coef;
    q->mlp_router = spec->router_mlp;
    q->swiglu = q->ctx.swiglu;
    q->collapse_share = spec->moe_collapse_share;
    q->collapse_steps = spec->moe_collapse_steps;
    const int N = q->N_max = ctx->N_max, E = q->E, k = q->k, C = q->ctx.C;
    /* each source rank sends an expert at most min(N, cap) rows (one per token); the capacity
     * is the whole micro-batch's (cp N tokens) */
    const int cap = moe_capacity(N * ctx->cp, k, E, q->cf);
    const long per_src = (long)q->El * (cap < N ? cap : N);
    q->R_max = (int)(ep * (per_src < (long)N * k ? per_src : (long)N * k));
    const size_t Rm = (size_t)q->R_max, Nk = (size_t)N * k;
    size_t *none = NULL;
    q->logits = fbuf(q, (size_t)N * E, none, MEM_WORKSPACE);
    q->dlogits = fbuf(q, (size_t)N * E, none, MEM_WORKSPACE);
    q->dnoise = fbuf(q, (size_t)N * E, none, MEM_WORKSPACE);
    q->dgates = fbuf(q, Nk, none, MEM_WORKSPACE);
    q->dbias = fbuf(q, (size_t)E, none, MEM_WORKSPACE);
    q->drin = fbuf(q, (size_t)N * C, none, MEM_WORKSPACE);
    const size_t big = Rm > Nk ? Rm : Nk;
    q->sendbuf = fbuf(q, big * C, none, MEM_WORKSPACE);
    q->recvbuf = fbuf(q, big * C, none, MEM_WORKSPACE);
    q->eout = fbuf(q, Rm * C, none, MEM_WORKSPACE);
    const size_t wide = (size_t)(q->Fel > q->Sl ? q->Fel : q->Sl);
    const size_t rows = Rm > (size_t)N ? Rm : (size_t)N;
    q->dh = fbuf(q, rows * wide, none, MEM_WORKSPACE);
    q->du = fbuf(q, rows * wide, none, MEM_WORKSPACE);
    q->dw = fbuf(q, Nk, none, MEM_WORKSPACE);
    q->h_idx = host(q, Nk, sizeof(int));
    q->h_probs = host(q, (size_t)N * E, sizeof(float));
    q->h_gates = host(q, Nk, sizeof(float));
    q->h_lse = host(q, (size_t)N, sizeof(float));
    q->h_w = host(q, Nk, sizeof(float));
    q->h_rows = host(q, Nk, sizeof(int));
    q->h_perm = host(q, 2 * Rm, sizeof(int));
    q->h_dgates = host(q, Nk, sizeof(float));
    q->h_bias = host(q, (size_t)E, sizeof(float));
    q->h_start = host(q, (size_t)ep * q->El, sizeof(int));
    if (ctx->cp > 1) {
        const size_t Na = (size_t)N * ctx->cp;
        q->h_pack = host(q, (size_t)N * (k + E), sizeof(float));
        q->h_packall = host(q, Na * (k + E), sizeof(float));
        q->h_gidx = host(q, Na * k, sizeof(int));
        q->h_local_of = host(q, Na, sizeof(int));
        q->h_gprobs = host(q, Na * E, sizeof(float));
        if (!ctx->dry_run) moe_plan_create(&q->gplan, (int)Na, E, k);
    }
    q->stats = xcalloc((size_t)q->ctx.L, sizeof(moe_stats_t));
    q->collapsed_for = xcalloc((size_t)q->ctx.L, sizeof(int));
    for (int l = 0; l < q->ctx.L; l++)
        if (params_moe_layer(spec, l)) q->stats[l].load = xcalloc((size_t)E, sizeof(double));
    return q;
}

void moe_free(moe_t *q) {
    if (!q) return;
    float *dev[] = {q->logits, q->dlogits, q->dnoise, q->dgates, q->dbias, q->drin,
                    q->sendbuf, q->recvbuf, q->eout, q->dh, q->du, q->dw};
    if (!q->ctx.dry_run)
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) q->ctx.ops->free(dev[i]);
    void *hostp[] = {q->h_idx, q->h_probs, q->h_gates, q->h_lse, q->h_w, q->h_rows, q->h_perm,
                     q->h_dgates, q->h_bias, q->h_start, q->h_pack, q->h_packall, q->h_gidx,
                     q->h_local_of, q->h_gprobs};
    for (size_t i = 0; i < sizeof hostp / sizeof hostp[0]; i++) xfree(hostp[i]);
    if (q->gplan.load) moe_plan_destroy(&q->gplan);
    for (int l = 0; l < q->ctx.L; l++) xfree(q->stats[l].load);
    xfree(q->stats);
    xfree(q->collapsed_for);
    xfree(q);
}

moe_acts_t *moe_alloc_acts(moe_t *q, size_t *bytes) {
    moe_acts_t *a = xcalloc(1, sizeof *a);
    const size_t N = (size_t)q->N_max, E = q->E, k = q->k, C = q->ctx.C, R = q->R_max;
    a->probs = fbuf(q, N * E, bytes, MEM_ACTIVATIONS);
    a->lse = fbuf(q, N, bytes, MEM_ACTIVATIONS);
    a->gates = fbuf(q, N * k, bytes, MEM_ACTIVATIONS);
    a->idx = ibuf(q, N * k, bytes);
    if (q->noise > 0) a->noise = fbuf(q, N * E, bytes, MEM_ACTIVATIONS);
    if (q->mlp_router) {
        a->rpre = fbuf(q, N * C, bytes, MEM_ACTIVATIONS);
        a->rhid = fbuf(q, N * C, bytes, MEM_ACTIVATIONS);
    }
    a->rows = ibuf(q, N * k, bytes);
    a->wr = fbuf(q, N * k, bytes, MEM_ACTIVATIONS);
    a->yd = fbuf(q, N * k * C, bytes, MEM_ACTIVATIONS);
    a->perm = ibuf(q, R, bytes);
    a->iperm = ibuf(q, R, bytes);
    a->xe = fbuf(q, R * C, bytes, MEM_ACTIVATIONS);
    a->eh = fbuf(q, R * q->Fel, bytes, MEM_ACTIVATIONS);
    a->ea = fbuf(q, R * q->Fel, bytes, MEM_ACTIVATIONS);
    if (q->swiglu) a->eu = fbuf(q, R * q->Fel, bytes, MEM_ACTIVATIONS);
    if (q->Sl > 0) {
        a->sh = fbuf(q, N * q->Sl, bytes, MEM_ACTIVATIONS);
        a->sa = fbuf(q, N * q->Sl, bytes, MEM_ACTIVATIONS);
        if (q->swiglu) a->su = fbuf(q, N * q->Sl, bytes, MEM_ACTIVATIONS);
    }
    a->send = host(q, (size_t)q->ep, sizeof(int));
    a->recv = host(q, (size_t)q->ep, sizeof(int));
    a->ecnt = host(q, (size_t)q->ep * q->El, sizeof(int));
    if (!q->ctx.dry_run) moe_plan_create(&a->plan, q->N_max, q->E, q->k);
    return a;
}

void moe_free_acts(moe_t *q, moe_acts_t *a) {
    if (!a) return;
    if (!q->ctx.dry_run) {
        float *f[] = {a->probs, a->lse, a->gates, a->noise, a->rpre, a->rhid, a->wr, a->yd,
                      a->xe, a->eh, a->eu, a->ea, a->sh, a->su, a->sa};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            if (f[i]) q->ctx.ops->free(f[i]);
        int *n[] = {a->idx, a->rows, a->perm, a->iperm};
        for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) q->ctx.ops->free(n[i]);
        moe_plan_destroy(&a->plan);
    }
    xfree(a->send);
    xfree(a->recv);
    xfree(a->ecnt);
    xfree(a);
}

/* ---------------------------------------------------------------- the exchange */

static void displs_of(const int *counts, int n, int *displs) {
    for (int r = 0, d = 0; r < n; r++) {
        displs[r] = d;
        d += counts[r];
    }
}

/* After routing: rows per destination ep rank and per (source, local expert), exchanged; the
 * expert-major permutation of the rows received. Collective over the ep group. */
static void exchange_counts(moe_t *q, moe_acts_t *a) {
    const int ep = q->ep, El = q->El;
    /* experts are dealt out in order: ep rank r owns experts [r El, (r+1) El), so the kept
     * counts of the plan are already laid out by destination */
    for (int r = 0; r < ep; r++) {
        a->send[r] = 0;
        for (int e = 0; e < El; e++) a->send[r] += a->plan.kept[r * El + e];
    }
    comm_alltoall_int(a->plan.kept, a->ecnt, El, q->ep_group);
    a->R = 0;
    for (int s = 0; s < ep; s++) {
        a->recv[s] = 0;
        for (int e = 0; e < El; e++) a->recv[s] += a->ecnt[s * El + e];
        a->R += a->recv[s];
    }
    ASSERT(a->R <= q->R_max);
    /* received order: source by source, each source's rows expert by expert; expert-major
     * order: expert by expert, each expert's rows source by source */
    int *start = q->h_start;
    for (int s = 0, at = 0; s < ep; s++)
        for (int e = 0; e < El; e++) {
            start[s * El + e] = at;
            at += a->ecnt[s * El + e];
        }
    int *perm = q->h_perm, *iperm = q->h_perm + q->R_max, r = 0;
    for (int e = 0; e < El; e++)
        for (int s = 0; s < ep; s++)
            for (int i = 0; i < a->ecnt[s * El + e]; i++, r++) {
                perm[r] = start[s * El + e] + i;
                iperm[perm[r]] = r;
            }
    q->ctx.ops->to_device(a->perm, perm, (size_t)a->R * sizeof(int));
    q->ctx.ops->to_device(a->iperm, iperm, (size_t)a->R * sizeof(int));
}

/* rows[M, C] of this rank (dispatch order) to the experts' owners; lands expert-major in out. */
static void send_to_experts(moe_t *q, moe_acts_t *a, const float *rows, float *out) {
    if (q->ep == 1) { /* what would arrive is what was sent: no copy through the host */
        if (a->R > 0) q->ctx.ops->moe_gather_rows(out, rows, a->perm, a->R, q->ctx.C);
        return;
    }
    int sd[q->ep], rd[q->ep];
    displs_of(a->send, q->ep, sd);
    displs_of(a->recv, q->ep, rd);
    comm_alltoallv_float(rows, a->send, sd, q->recvbuf, a->recv, rd, q->ctx.C, q->ep_group);
    if (a->R > 0) q->ctx.ops->moe_gather_rows(out, q->recvbuf, a->perm, a->R, q->ctx.C);
}

/* The reverse: expert-major rows[R, C] back to the ranks whose tokens they are, in their
 * dispatch order, into out[M, C]. */
static void return_from_experts(moe_t *q, moe_acts_t *a, const float *rows, float *out) {
    if (q->ep == 1) {
        if (a->R > 0) q->ctx.ops->moe_gather_rows(out, rows, a->iperm, a->R, q->ctx.C);
        return;
    }
    int sd[q->ep], rd[q->ep];
    if (a->R > 0) q->ctx.ops->moe_gather_rows(q->sendbuf, rows, a->iperm, a->R, q->ctx.C);
    displs_of(a->recv, q->ep, rd);
    displs_of(a->send, q->ep, sd);
    comm_alltoallv_float(q->sendbuf, a->recv, rd, out, a->send, sd, q->ctx.C, q->ep_group);
}

/* ---------------------------------------------------------------- experts */

/* Local expert e's weights (or gradients) inside the expert tensors. */
typedef struct expert_w {
    float *in, *in_b, *up, *up_b, *proj, *proj_b;
} expert_w_t;

/* Local expert e of the weights (matrices stored as the model's weights type: gpt_weight_at)
 * or, with grads, of the gradients (fp32). */
static expert_w_t expert_view(const moe_t *q, const gpt_layer_w_t *w, int e, bool grads) {
    const size_t C = q->ctx.C, F = q->Fel;
    const dtype_t mt = grads ? DT_FP32 : q->ctx.wtype;
    expert_w_t x = {gpt_weight_at(w->e_inw, mt, e * F * C), w->e_inb ? w->e_inb + e * F : NULL,
                    w->e_upw ? gpt_weight_at(w->e_upw, mt, e * F * C) : NULL,
                    w->e_upb ? w->e_upb + e * F : NULL, gpt_weight_at(w->e_projw, mt, e * C * F),
                    w->e_projb ? w->e_projb + e * C : NULL};
    return x;
}

/* An MLP on n rows: h = x Win^T (+b); SwiGLU: u = x Wup^T (+b), act = silu(h) * u; GELU:
 * act = gelu(h); out = act Wproj^T (+ bias on tp rank 0). */
static void mlp_rows_forward(moe_t *q, const expert_w_t *w, const float *x, int n, int F,
                             float *h, float *u, float *act, float *out) {
    const ops_t *o = q->ctx.ops;
    const int C = q->ctx.C;
    o->matmul_forward_w(h, x, w->in, q->ctx.wtype, w->in_b, n, C, F);
    if (q->ctx.swiglu) {
        o->matmul_forward_w(u, x, w->up, q->ctx.wtype, w->up_b, n, C, F);
        o->swiglu_forward(act, h, u, (size_t)n * F);
    } else {
        o->gelu_forward(act, h, (size_t)n * F);
    }
    o->matmul_forward_w(out, act, w->proj, q->ctx.wtype, q->ctx.tp_rank == 0 ? w->proj_b : NULL, n, F,
                        C);
}

/* Its backward from dout[n, C]: dx[n, C] OVERWRITTEN (partial over tp), gradients in g. */
static void mlp_rows_backward(moe_t *q, const expert_w_t *w, const expert_w_t *g,
                              const float *x, const float *h, const float *u, const float *act,
                              const float *dout, int n, int F, bool first, float *dx) {
    const ops_t *o = q->ctx.ops;
    const int C = q->ctx.C;
    o->matmul_backward_w(q->dh, g->proj, g->proj_b, dout, act, w->proj, q->ctx.wtype, n, F, C, false,
                         first);
    if (q->ctx.swiglu) {
        o->swiglu_backward(q->dh, q->du, q->dh, h, u, (size_t)n * F);
        o->matmul_backward_w(dx, g->in, g->in_b, q->dh, x, w->in, q->ctx.wtype, n, C, F, false, first);
        o->matmul_backward_w(dx, g->up, g->up_b, q->du, x, w->up, q->ctx.wtype, n, C, F, true, first);
    } else {
        o->gelu_backward(q->dh, h, q->dh, (size_t)n * F);
        o->matmul_backward_w(dx, g->in, g->in_b, q->dh, x, w->in, q->ctx.wtype, n, C, F, false, first);
    }
}

/* An expert with no rows this micro-batch: on the first micro-batch its gradients still have
 * to be overwritten (with zeros). */
static void zero_expert_grads(moe_t *q, const expert_w_t *g) {
    const size_t C = q->ctx.C, F = q->Fel;
    q->ctx.ops->zero(g->in, F * C);
    q->ctx.ops->zero(g->proj, C * F);
    if (g->up) q->ctx.ops->zero(g->up, F * C);
    if (g->in_b) q->ctx.ops->zero(g->in_b, F);
    if (g->up_b) q->ctx.ops->zero(g->up_b, F);
    if (g->proj_b) q->ctx.ops->zero(g->proj_b, C);
}

/* Expert-major row range of local expert e. */
static int expert_rows(const moe_acts_t *a, int ep, int El, int e, int *first_row) {
    int before = 0, n = 0;
    for (int x = 0; x < e; x++)
        for (int s = 0; s < ep; s++) before += a->ecnt[s * El + x];
    for (int s = 0; s < ep; s++) n += a->ecnt[s * El + e];
    *first_row = before;
    return n;
}

static expert_w_t shared_view(const gpt_layer_w_t *w) {
    expert_w_t x = {w->s_inw, w->s_inb, w->s_upw, w->s_upb, w->s_projw, w->s_projb};
    return x;
}

/* ---------------------------------------------------------------- routing */

/* The router noise of the N = B T rows (forward: logits += ...; backward: dnoise from dlogits),
 * keyed by global token: row0 + row, or with context parallelism each chunk's rows at their
 * global positions (model/ring.h), one call per chunk. */
static void noise_rows(const moe_t *q, const moe_acts_t *a, int B, int T, float *out,
                       const float *in, bool forward) {
    const ops_t *o = q->ctx.ops;
    const int E = q->E, cp = q->ctx.cp, runs = cp > 1 ? 2 * B : 1, n = cp > 1 ? T / 2 : B * T;
    for (int u = 0; u < runs; u++) { /* run u: rows [u n, (u + 1) n), batch row u / 2 */
        const size_t r0 = (size_t)u * n * E;
        const uint64_t row = cp == 1 ? a->row0 : a->row0 + (uint64_t)(u / 2) * T * cp +
                             (uint64_t)ring_position(u % 2 * n, T, cp, q->ctx.cp_rank);
        if (forward) o->moe_noise_forward(out + r0, a->noise + r0, n, E, q->noise, a->key, row);
        else o->moe_noise_backward(out + r0, in + r0, a->noise + r0, n, E, q->noise, a->key, row);
    }
}

/* Context parallelism: the plan of the whole micro-batch (its B sequences of cp T tokens, two
 * chunks of each on every cp rank), as one rank builds it, cut to this rank's tokens. Every cp
 * rank gathers every rank's choices and probabilities, lays them out in the sequences' token
 * order and builds the same plan. */
static void plan_over_cp(moe_t *q, moe_acts_t *a, int B, int T) {
    const int cp = q->ctx.cp, N = B * T, E = q->E, k = q->k, w = k + E;
    const size_t Tg = (size_t)T * cp;
    for (int i = 0; i < N; i++) {
        float *row = q->h_pack + (size_t)i * w;
        for (int j = 0; j < k; j++) row[j] = (float)q->h_idx[(size_t)i * k + j]; /* exact: E < 2^24 */
        memcpy(row + k, q->h_probs + (size_t)i * E, (size_t)E * sizeof(float));
    }
    comm_allgather_float(q->h_pack, N * w, q->h_packall, q->ctx.cp_group, COMM_CP);
    for (int r = 0; r < cp; r++)
        for (int i = 0; i < N; i++) {
            const size_t t = (size_t)(i / T) * Tg + (size_t)ring_position(i % T, T, cp, r);
            const float *row = q->h_packall + ((size_t)r * N + i) * w;
            for (int j = 0; j < k; j++) q->h_gidx[t * k + j] = (int)row[j];
            memcpy(q->h_gprobs + t * E, row + k, (size_t)E * sizeof(float));
            q->h_local_of[t] = r == q->ctx.cp_rank ? i : -1;
        }
    moe_plan_build(&q->gplan, q->h_gidx, q->h_gprobs, N * cp, q->cf, q->policy);
    moe_plan_restrict(&a->plan, &q->gplan, q->h_local_of, N);
}

static void route(moe_t *q, int layer, moe_acts_t *a, const gpt_layer_w_t *w, const float *x,
                  int B, int T) {
    const ops_t *o = q->ctx.ops;
    const int N = B * T, C = q->ctx.C, E = q->E, k = q->k;
    const float *rin = x;
    if (q->mlp_router) {
        o->matmul_forward_w(a->rpre, x, w->r_fcw, q->ctx.wtype, NULL, N, C, C);
        o->gelu_forward(a->rhid, a->rpre, (size_t)N * C);
        rin = a->rhid;
    }
    o->matmul_forward_w(q->logits, rin, w->routerw, q->ctx.wtype, NULL, N, C, E);
    a->noisy = q->noise > 0 && q->ctx.noise_key(q->ctx.model, layer, B, T, a->key, &a->row0);
    if (a->noisy) {
        o->matmul_forward_w(a->noise, x, w->noisew, q->ctx.wtype, NULL, N, C, E);
        noise_rows(q, a, B, T, q->logits, NULL, true);
    }
    o->moe_softmax_topk(a->probs, a->lse, a->idx, a->gates, q->logits, N, E, k);
    o->to_host(q->h_idx, a->idx, (size_t)N * k * sizeof(int));
    o->to_host(q->h_probs, a->probs, (size_t)N * E * sizeof(float));
    o->to_host(q->h_gates, a->gates, (size_t)N * k * sizeof(float));
    if (q->ctx.cp > 1) plan_over_cp(q, a, B, T);
    else moe_plan_build(&a->plan, q->h_idx, q->h_probs, N, q->cf, q->policy);
    for (int r = 0; r < a->plan.M; r++) {
        q->h_rows[r] = a->plan.token[r];
        q->h_w[r] = q->h_gates[a->plan.token[r] * k + a->plan.choice[r]];
    }
    o->to_device(a->rows, q->h_rows, (size_t)a->plan.M * sizeof(int));
    o->to_device(a->wr, q->h_w, (size_t)a->plan.M * sizeof(float));
}

/* The micro-batch's aux loss (the whole micro-batch's: with cp from the gathered
 * probabilities, every cp rank the same value), and this rank's tokens' loads, z-loss and
 * router entropy (host, from the probabilities): summed over the world, each token counts once
 * and each micro-batch's aux cp times in cp counted micro-batches. */
static void count_stats(moe_t *q, int layer, const moe_acts_t *a, int N) {
    if (!*q->ctx.training || q->ctx.tp_rank != 0) return;
    moe_stats_t *s = &q->stats[layer];
    q->ctx.ops->to_host(q->h_lse, a->lse, (size_t)N * sizeof(float));
    const int Na = N * q->ctx.cp;
    const float *pa = q->ctx.cp > 1 ? q->h_gprobs : q->h_probs;
    double fp = 0, z = 0, ent = 0;
    for (int e = 0; e < q->E; e++) {
        double P = 0;
        for (int i = 0; i < Na; i++) P += pa[(size_t)i * q->E + e];
        fp += (double)a->plan.load[e] / ((double)Na * q->k) * (P / Na);
    }
    for (size_t i = 0; i < (size_t)N * q->k; i++) s->load[q->h_idx[i]] += 1;
    for (int i = 0; i < N; i++) {
        z += (double)q->h_lse[i] * q->h_lse[i];
        for (int e = 0; e < q->E; e++) {
            const double p = q->h_probs[(size_t)i * q->E + e];
            if (p > 0) ent -= p * log(p);
        }
    }
    s->aux += q->aux_coef * q->E * fp;
    s->z += q->z_coef * z / N;
    s->entropy += ent / N;
    s->assigned += (double)N * q->k;
    s->dropped += a->plan.dropped;
    s->micro += 1;
}

/* ---------------------------------------------------------------- forward and backward */

void moe_forward(moe_t *q, int layer, moe_acts_t *a, const gpt_layer_w_t *w, const float *x,
                 int B, int T, float *y) {
    const ops_t *o = q->ctx.ops;
    const int N = B * T, C = q->ctx.C;
    route(q, layer, a, w, x, B, T);
    count_stats(q, layer, a, N);
    const int M = a->plan.M;
    if (M > 0) o->moe_gather_rows(q->sendbuf, x, a->rows, M, C);
    exchange_counts(q, a);
    send_to_experts(q, a, q->sendbuf, a->xe);
    for (int e = 0; e < q->El; e++) {
        int r0;
        const int n = expert_rows(a, q->ep, q->El, e, &r0);
        if (n == 0) continue;
        const expert_w_t ew = expert_view(q, w, e, false);
        const size_t F = q->Fel;
        mlp_rows_forward(q, &ew, a->xe + (size_t)r0 * C, n, q->Fel, a->eh + r0 * F,
                         a->eu ? a->eu + r0 * F : NULL, a->ea + r0 * F, q->eout + (size_t)r0 * C);
    }
    return_from_experts(q, a, q->eout, a->yd);
    o->zero(y, (size_t)N * C);
    if (M > 0) o->moe_scatter_add_rows(y, a->yd, a->rows, a->wr, M, C);
    if (q->Sl > 0) {
        const expert_w_t sw = shared_view(w);
        mlp_rows_forward(q, &sw, x, N, q->Sl, a->sh, a->su, a->sa, q->drin);
        o->add(y, y, q->drin, (size_t)N * C);
    }
}

/* The router's share of backward: dlogits from the gates' gradient, the aux loss and the
 * z-loss; the router (and noise) weight gradients; on tp rank 0 its input gradient added to
 * dx (every tp rank computes the same replicated router). */
static void router_backward(moe_t *q, moe_acts_t *a, const gpt_layer_w_t *w,
                            const gpt_layer_w_t *g, const float *x, int B, int T, bool first,
                            float *dx) {
    const ops_t *o = q->ctx.ops;
    const int C = q->ctx.C, E = q->E, k = q->k, N = B * T;
    /* the aux loss weighs each micro-batch like its mean cross-entropy: dloss * N (f_e: the
     * whole micro-batch's share, cp N tokens with context parallelism) */
    for (int e = 0; e < E; e++)
        q->h_bias[e] = q->dloss * q->aux_coef * E * (float)a->plan.load[e] / ((float)N * q->ctx.cp * k);
    o->to_device(q->dbias, q->h_bias, (size_t)E * sizeof(float));
    o->moe_router_backward(q->dlogits, a->probs, a->lse, a->idx, a->gates, q->dgates, q->dbias,
                           q->dloss * q->z_coef, N, E, k);
    const bool input_grad = q->ctx.tp_rank == 0;
    if (a->noisy) {
        noise_rows(q, a, B, T, q->dnoise, q->dlogits, false);
        o->matmul_backward_w(input_grad ? dx : NULL, g->noisew, NULL, q->dnoise, x, w->noisew,
                             q->ctx.wtype, N, C, E, true, first);
    }
    if (!q->mlp_router) {
        o->matmul_backward_w(input_grad ? dx : NULL, g->routerw, NULL, q->dlogits, x, w->routerw,
                             q->ctx.wtype, N, C, E, true, first);
        return;
    }
    o->matmul_backward_w(q->drin, g->routerw, NULL, q->dlogits, a->rhid, w->routerw, q->ctx.wtype, N, C,
                         E, false, first);
    o->gelu_backward(q->drin, a->rpre, q->drin, (size_t)N * C);
    o->matmul_backward_w(input_grad ? dx : NULL, g->r_fcw, NULL, q->drin, x, w->r_fcw, q->ctx.wtype, N,
                         C, C, true, first);
}

void moe_backward(moe_t *q, int layer, moe_acts_t *a, const gpt_layer_w_t *w,
                  const gpt_layer_w_t *g, const float *x, const float *dy, int B, int T,
                  bool first, float *dx) {
    (void)layer; /* the forward's key for the noise is kept in the slot (a->key, a->row0) */
    const ops_t *o = q->ctx.ops;
    const int N = B * T, C = q->ctx.C, M = a->plan.M, k = q->k;
    if (q->Sl > 0) {
        const expert_w_t sw = shared_view(w), sg = shared_view(g);
        mlp_rows_backward(q, &sw, &sg, x, a->sh, a->su, a->sa, dy, N, q->Sl, first, dx);
    } else {
        o->zero(dx, (size_t)N * C);
    }
    /* combine: y[token] += gate * yd: d(yd) to the experts, d(gate) = dy . yd summed over tp */
    if (M > 0) o->moe_combine_backward(q->sendbuf, q->dw, dy, a->yd, a->rows, a->wr, M, C);
    comm_allreduce_sum(q->dw, (size_t)M, q->ctx.tp_group, COMM_TP);
    send_to_experts(q, a, q->sendbuf, q->eout);
    for (int e = 0; e < q->El; e++) {
        int r0;
        const int n = expert_rows(a, q->ep, q->El, e, &r0);
        const expert_w_t ew = expert_view(q, w, e, false), eg = expert_view(q, g, e, true);
        if (n == 0) {
            if (first) zero_expert_grads(q, &eg);
            continue;
        }
        const size_t F = q->Fel;
        float *dxe = q->eout + (size_t)r0 * C; /* overwritten in place: dout is read first */
        mlp_rows_backward(q, &ew, &eg, a->xe + (size_t)r0 * C, a->eh + r0 * F,
                          a->eu ? a->eu + r0 * F : NULL, a->ea + r0 * F, dxe, n, q->Fel, first,
                          q->recvbuf);
        o->quantize_copy(dxe, q->recvbuf, (size_t)n * C, DT_FP32); /* a device copy */
    }
    return_from_experts(q, a, q->eout, q->recvbuf);
    if (M > 0) o->moe_scatter_add_rows(dx, q->recvbuf, a->rows, NULL, M, C);
    /* the gates' gradient [N, k]: dropped assignments get none */
    float *hdg = q->h_dgates;
    memset(hdg, 0, (size_t)N * k * sizeof(float));
    o->to_host(q->h_w, q->dw, (size_t)M * sizeof(float));
    for (int r = 0; r < M; r++) hdg[a->plan.token[r] * k + a->plan.choice[r]] = q->h_w[r];
    o->to_device(q->dgates, hdg, (size_t)N * k * sizeof(float));
    router_backward(q, a, w, g, x, B, T, first, dx);
}

/* ---------------------------------------------------------------- about the model */

double moe_block_mlp_matrix(const model_spec_t *spec) {
    const double C = spec->d_model, Fe = spec->d_ff_expert, E = spec->n_experts;
    const double mlp = spec->swiglu ? 3.0 : 2.0;
    const double router = E * C + (spec->router_mlp ? C * C : 0.0) +
                          (spec->router_noise > 0 ? E * C : 0.0);
    return router + (spec->top_k_moe + spec->n_shared_experts) * mlp * C * Fe;
}

void moe_print_summary(const moe_t *q, const params_t *P, const model_spec_t *spec) {
    int blocks = 0;
    for (int l = 0; l < q->ctx.L; l++) blocks += q->stats[l].load != NULL;
    double expert = 0, all = (double)P->n_global;
    for (int i = 0; i < P->n; i++)
        if (P->p[i].experts > 0) expert += (double)param_global_numel(&P->p[i]);
    const double active = all - expert * (1.0 - (double)q->k / q->E);
    char cap[64];
    if (q->cf > 0) snprintf(cap, sizeof cap, "capacity factor %.2f (drop by %s)", q->cf,
                            spec->drop_by_position ? "position" : "probs");
    else snprintf(cap, sizeof cap, "dropless");
    printf("moe: %d of %d blocks (every %d): top-%d of %d experts, d_ff_expert %d, %d shared, "
           "router %s%s, %s, aux %g, z %g; ep %d (%d experts per rank); %.2fM parameters, "
           "%.2fM active per token\n", blocks, q->ctx.L, spec->moe_every, q->k, q->E, q->Fe,
           spec->n_shared_experts, spec->router_mlp ? "mlp" : "linear", q->noise > 0 ? " + noise" : "", cap, q->aux_coef,
           q->z_coef, q->ep, q->El, all / 1e6, active / 1e6);
}

/* ---------------------------------------------------------------- statistics */

void moe_stats_reset(moe_t *q) {
    if (!q) return;
    for (int l = 0; l < q->ctx.L; l++) {
        moe_stats_t *s = &q->stats[l];
        if (!s->load) continue;
        memset(s->load, 0, (size_t)q->E * sizeof(double));
        s->assigned = s->dropped = s->aux = s->z = s->entropy = s->micro = 0;
    }
}

int moe_stats_floats(const moe_t *q) {
    return q ? q->ctx.L * (q->E + MOE_STAT_SCALARS) : 0;
}

void moe_stats_reduce(moe_t *q, const comm_group_t *g, double *out) {
    const int per = q->E + MOE_STAT_SCALARS, n = moe_stats_floats(q);
    memset(out, 0, (size_t)n * sizeof(double));
    for (int l = 0; l < q->ctx.L; l++) {
        const moe_stats_t *s = &q->stats[l];
        if (!s->load) continue;
        double *o = out + (size_t)l * per;
        memcpy(o, s->load, (size_t)q->E * sizeof(double));
        const double v[MOE_STAT_SCALARS] = {
            [MOE_STAT_ASSIGNED] = s->assigned, [MOE_STAT_DROPPED] = s->dropped,
            [MOE_STAT_AUX] = s->aux,           [MOE_STAT_Z] = s->z,
            [MOE_STAT_ENTROPY] = s->entropy,   [MOE_STAT_MICRO] = s->micro};
        memcpy(o + q->E, v, sizeof v);
    }
    comm_allreduce_sum_double(out, n, g, COMM_OTHER);
}
