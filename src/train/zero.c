/* zero.c — the ZeRO partition map and its collectives (see zero.h). */
#include "train/zero.h"
#include <limits.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "parallel/comm.h"

/* Partitions start on 16-float (64-byte) boundaries like the parameters themselves. */
#define ZERO_ALIGN 16

/* Floats per partition: total / dp rounded up to the alignment. */
static size_t partition_floats(size_t total, int dp) {
    size_t s = (total + (size_t)dp - 1) / (size_t)dp;
    return (s + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN;
}

void zero_partition(size_t total, int dp, int rank, size_t *lo, size_t *hi) {
    const size_t shard = partition_floats(total, dp);
    *lo = (size_t)rank * shard, *hi = *lo + shard;
    if (*lo > total) *lo = total;
    if (*hi > total) *hi = total;
}

void zero_create(zero_t *z, int stage, int dp, int rank, const comm_group_t *dp_group, size_t total,
                 const ops_t *ops) {
    memset(z, 0, sizeof *z);
    z->stage = dp > 1 ? stage : 0;
    z->dp = dp;
    z->rank = rank;
    z->dp_group = dp_group;
    z->total = total;
    z->ops = ops;
    z->shard = partition_floats(total, dp);
    z->counts = xcalloc((size_t)dp, sizeof(size_t));
    z->displs = xcalloc((size_t)dp, sizeof(size_t));
    for (int r = 0; r < dp; r++) {
        size_t lo, hi;
        zero_partition(total, dp, r, &lo, &hi);
        z->counts[r] = hi - lo;
        z->displs[r] = lo;
    }
    z->lo = z->displs[rank];
    z->hi = z->lo + z->counts[rank];
    const size_t n = z->hi - z->lo > 0 ? z->hi - z->lo : 1;
    if (z->stage >= 2) {
        z->grad_shard = ops->alloc(n * sizeof(float), MEM_GRADIENTS);
        ops->zero(z->grad_shard, n);
    }
}

void zero_set_experts(zero_t *z, int ep, int rank_ep, const comm_group_t *ep_group) {
    z->ep = ep;
    z->rank_ep = rank_ep;
    z->ep_group = ep_group;
}

static void gbuf_free(zero_t *z, zero_gbuf_t *g) {
    if (comm_req_pending(&g->req)) comm_wait(&g->req, COMM_DP);
    if (g->buf) z->ops->free(g->buf);
    xfree(g->counts);
    xfree(g->displs);
    xfree(g->hcounts);
    xfree(g->hdispls);
    memset(g, 0, sizeof *g);
}

static void gstage_free(zero_t *z, zero_gstage_t *g) {
    if (comm_req_pending(&g->req)) comm_wait(&g->req, COMM_DP);
    if (g->buf) z->ops->free(g->buf);
    if (g->recv) z->ops->free(g->recv);
    xfree(g->counts);
    memset(g, 0, sizeof *g);
}

void zero_destroy(zero_t *z) {
    if (z->staged) {
        gstage_free(z, &z->sembed);
        gstage_free(z, &z->sfinal);
        gstage_free(z, &z->sblocks[0]);
        gstage_free(z, &z->sblocks[1]);
    }
    if (z->m && z->stage >= 3) {
        gbuf_free(z, &z->embed);
        gbuf_free(z, &z->final);
        for (int i = 0; i < z->n_blocks; i++) gbuf_free(z, &z->blocks[i]);
        xfree(z->blocks);
    }
    if (z->grad_shard) z->ops->free(z->grad_shard);
    if (z->param_shard) z->ops->free(z->param_shard);
    xfree(z->counts);
    xfree(z->displs);
    memset(z, 0, sizeof *z);
}

bool zero_my_range(const zero_t *z, size_t off, size_t n, size_t *a, size_t *b) {
    size_t lo = z->stage == 0 ? 0 : z->lo, hi = z->stage == 0 ? z->total : z->hi;
    *a = off > lo ? off : lo;
    *b = off + n < hi ? off + n : hi;
    return *a < *b;
}

size_t zero_state_floats(const zero_t *z) { return z->stage == 0 ? z->total : z->hi - z->lo; }

float *zero_grad_at(const zero_t *z, float *grads, size_t i) {
    return z->stage >= 2 ? z->grad_shard + (i - z->lo) : grads + i;
}

float *zero_param_at(const zero_t *z, float *params, size_t i) {
    return z->stage >= 3 ? z->param_shard + (i - z->lo) : params + i;
}

size_t zero_state_index(const zero_t *z, size_t i) { return z->stage == 0 ? i : i - z->lo; }

void zero_allgather_weights(zero_t *z, gpt_t *m) {
    if (!m->wstore) { /* fp32 arrays, or ZeRO-3 (its units are gathered when used) */
        zero_allgather_params(z, m->params);
        return;
    }
    zero3_invalidate(z);
    if (z->stage != 1 && z->stage != 2) return;
    comm_allgatherv_half(m->wstore, z->counts, z->displs, z->dp_group, COMM_DP,
                         "ZeRO parameter all-gather (16-bit)");
    gpt_weights_written(m, 0, m->P.total); /* the other ranks' norms and biases */
}

void *zero_weights_at(const zero_t *z, const gpt_t *m, size_t a) {
    ASSERT(m->wtype != DT_FP32);
    if (z->stage >= 3) return gpt_weight_at(z->param_shard, m->wtype, a - z->lo);
    return gpt_weight_at(m->wstore, m->wtype, a);
}

void zero_allgather_params(zero_t *z, float *params) {
    zero3_invalidate(z); /* stage 3: the next use gathers the updated partitions */
    if (z->stage != 1 && z->stage != 2) return;
    comm_allgatherv_float(params, z->counts, z->displs, z->dp_group, COMM_DP,
                          "ZeRO parameter all-gather");
}

double zero_grad_sumsq_owned(const zero_t *z, const gpt_t *m) {
    double sum = 0.0;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        bool owned = p->held && !p->tied_copy && (p->split_dim >= 0 || m->par.tp_rank == 0);
        if (z->ep > 1 && p->experts == 0 && z->rank_ep != 0) continue; /* counted on ep rank 0 */
        size_t a, b;
        /* every stage sums only its own partition: the dp ranks together count each element once */
        zero_t part = *z;
        part.stage = 1; /* the partition, also for stage 0 */
        if (!owned || !zero_my_range(&part, p->offset, p->numel, &a, &b)) continue;
        sum += m->ops->sumsq(zero_grad_at(z, m->grads, a), b - a);
    }
    return sum;
}

void zero_gather_to_root(const zero_t *z, const float *part, float *full) {
    comm_gatherv_float(part, z->counts[z->rank], full, z->counts, z->displs, 0, z->dp_group,
                       "ZeRO checkpoint gather");
}


/* ---- ZeRO-3: gathering the weights of a unit before its use --------------------------------- */

/* A buffer for flat ranges of up to `floats` floats, with its piece table. */
static void gbuf_init(zero_t *z, zero_gbuf_t *g, size_t floats) {
    memset(g, 0, sizeof *g);
    g->unit = GPT_UNIT_NONE;
    g->req = COMM_REQ_NULL;
    g->buf = z->ops->alloc((floats ? floats : 1) * dtype_bytes(z->m->wtype), MEM_PARAMETERS);
    g->counts = xcalloc((size_t)z->dp, sizeof(size_t));
    g->displs = xcalloc((size_t)z->dp, sizeof(size_t));
    g->hcounts = xcalloc((size_t)z->dp, sizeof(size_t));
    g->hdispls = xcalloc((size_t)z->dp, sizeof(size_t));
}

/* Start gathering unit u (flat range [lo, hi)) into g: every dp rank contributes the part of the
 * range inside its partition. Non-blocking; g->req finishes it. */
static void gbuf_start(zero_t *z, zero_gbuf_t *g, int u) {
    if (comm_req_pending(&g->req)) comm_wait(&g->req, COMM_DP); /* the buffer is reused */
    gpt_unit_range(z->m, u, &g->lo, &g->hi);
    g->unit = u;
    g->ready = false;
    for (int r = 0; r < z->dp; r++) {
        size_t lo = z->displs[r], hi = lo + z->counts[r];
        size_t a = g->lo > lo ? g->lo : lo, b = g->hi < hi ? g->hi : hi;
        g->counts[r] = a < b ? b - a : 0;
        g->displs[r] = a < b ? a - g->lo : 0;
    }
    size_t mine = g->lo > z->lo ? g->lo : z->lo;
    const dtype_t t = z->m->wtype;
    const float *src = gpt_weight_at(z->param_shard, t, mine < z->hi ? mine - z->lo : 0);
    if (t == DT_FP32) {
        comm_iallgatherv_float(src, g->buf, g->counts, g->displs, z->dp_group, COMM_DP, &g->req);
    } else { /* 16-bit elements in pairs (unit and partition bounds are multiples of 16) */
        comm_half_pieces(g->counts, g->displs, z->dp, g->hcounts, g->hdispls);
        comm_iallgatherv_float(src, g->buf, g->hcounts, g->hdispls, z->dp_group, COMM_DP, &g->req);
    }
    z->gathers++;
}

static void gbuf_finish(zero_gbuf_t *g) {
    if (comm_req_pending(&g->req)) comm_wait(&g->req, COMM_DP);
    g->ready = true;
}

/* The buffer of unit u: the fixed one of the embedding, the final norm or a resident block;
 * for the rotating blocks the one that holds (or is gathering) u, or NULL. */
static zero_gbuf_t *find_unit(zero_t *z, int u) {
    if (u == GPT_UNIT_EMBED) return &z->embed;
    if (u == GPT_UNIT_FINAL) return &z->final;
    if (z->resident) return &z->blocks[gpt_held_index(z->m, u)];
    for (int i = 0; i < z->n_blocks; i++)
        if (z->blocks[i].unit == u) return &z->blocks[i];
    return NULL;
}

/* Where to gather block u when no buffer holds it: a rotating buffer other than `keep` (the one
 * in use). The dp replicas run the same schedule, so they all choose alike and start their
 * collectives in the same order. */
static zero_gbuf_t *victim(zero_t *z, const zero_gbuf_t *keep) {
    return z->n_blocks > 1 && &z->blocks[0] == keep ? &z->blocks[1] : &z->blocks[0];
}

/* Unit u into its buffer (started now unless it holds or is gathering u already). */
static zero_gbuf_t *gather(zero_t *z, int u, const zero_gbuf_t *keep) {
    zero_gbuf_t *g = find_unit(z, u);
    if (g && g->unit == u) return g;
    if (!g) g = victim(z, keep);
    gbuf_start(z, g, u);
    return g;
}

/* The model names the next block of the chunk in use (ascending in a forward, descending in a
 * backward), or none at the chunk's end: an interleaved stage's next chunk is the schedule's
 * choice, so its first block is gathered when used. */
static void provider_need(void *ctx, int u, int next) {
    zero_t *z = ctx;
    zero_gbuf_t *g = gather(z, u, z->in_use);
    gbuf_finish(g);
    gpt_bind_weights(z->m, u, g->buf, g->lo);
    if (u >= 0) z->in_use = g;
    /* the next block is gathered while this one computes */
    if (next >= z->m->first_layer && next < z->m->end_layer && next != u) gather(z, next, g);
}

const gpt_weight_provider_t *zero3_provider(zero_t *z) {
    if (z->stage < 3) return NULL;
    z->provider.need = provider_need;
    z->provider.ctx = z;
    return &z->provider;
}

/* ---- ZeRO-2/3 with pp = 1: gradients staged per unit and micro-batch ------------------------ */

static void gstage_init(zero_t *z, zero_gstage_t *g, size_t floats) {
    memset(g, 0, sizeof *g);
    g->unit = GPT_UNIT_NONE;
    g->req = COMM_REQ_NULL;
    g->buf = z->ops->alloc((floats ? floats : 1) * sizeof(float), MEM_GRADIENTS);
    g->recv = z->ops->alloc((floats ? floats : 1) * sizeof(float), MEM_COMM);
    g->counts = xcalloc((size_t)z->dp, sizeof(size_t));
}

/* The pending reduce-scatter of g finished: its part joins the partition's gradient. */
static void gstage_settle(zero_t *z, zero_gstage_t *g) {
    if (!comm_req_pending(&g->req)) return;
    comm_wait(&g->req, COMM_DP);
    const size_t n = g->counts[z->rank];
    if (n > 0) z->ops->add(z->grad_shard + g->part_lo, z->grad_shard + g->part_lo, g->recv, n);
}

static zero_gstage_t *gstage_of(zero_t *z, int u) {
    if (u == GPT_UNIT_EMBED) return &z->sembed;
    if (u == GPT_UNIT_FINAL) return &z->sfinal;
    return &z->sblocks[0] == z->s_in_use ? &z->sblocks[1] : &z->sblocks[0];
}

static void grads_begin(void *ctx, int u) {
    zero_t *z = ctx;
    zero_gstage_t *g = gstage_of(z, u);
    gstage_settle(z, g); /* the buffer is reused: its last reduce-scatter must be done */
    gpt_unit_range(z->m, u, &g->lo, &g->hi);
    g->unit = u;
    for (int r = 0; r < z->dp; r++) {
        size_t lo = z->displs[r], hi = lo + z->counts[r];
        size_t a = g->lo > lo ? g->lo : lo, b = g->hi < hi ? g->hi : hi;
        g->counts[r] = a < b ? b - a : 0;
        if (r == z->rank) g->part_lo = a < b ? a - z->lo : 0;
    }
    gpt_bind_grads(z->m, u, g->buf, g->lo);
    if (u >= 0) z->s_in_use = g;
}

static void grads_end(void *ctx, int u) {
    zero_t *z = ctx;
    zero_gstage_t *g = u >= 0 ? (zero_gstage_t *)z->s_in_use : gstage_of(z, u);
    z->ops->quantize(g->buf, g->hi - g->lo, z->grad_dtype);
    comm_ireduce_scatter_sum(g->buf, g->recv, g->counts, z->dp_group, COMM_DP, &g->req);
}

const gpt_grad_provider_t *zero_stage_grads(zero_t *z, bool possible) {
    z->staged = z->stage >= 2 && possible;
    if (!z->staged) return NULL;
    z->grad_provider.begin = grads_begin;
    z->grad_provider.end = grads_end;
    z->grad_provider.ctx = z;
    return &z->grad_provider;
}

void zero_grads_begin_step(zero_t *z) {
    if (z->staged && z->hi > z->lo) z->ops->zero(z->grad_shard, z->hi - z->lo);
}

void zero_grads_finish_step(zero_t *z) {
    if (!z->staged) return;
    zero_gstage_t *all[4] = {&z->sembed, &z->sfinal, &z->sblocks[0], &z->sblocks[1]};
    for (int i = 0; i < 4; i++) gstage_settle(z, all[i]);
}

/* Floats of the largest block this stage holds, in any of its chunks. */
static size_t biggest_block(const gpt_t *m) {
    size_t lo, hi, biggest = 0;
    for (int l = 0; l < m->L; l++) {
        if (!params_holds_layer(&m->P, l)) continue;
        gpt_unit_range(m, l, &lo, &hi);
        if (hi - lo > biggest) biggest = hi - lo;
    }
    return biggest;
}

static void gstages_attach(zero_t *z, gpt_t *m) {
    size_t lo, hi;
    const size_t biggest = biggest_block(m);
    gpt_unit_range(m, GPT_UNIT_EMBED, &lo, &hi);
    gstage_init(z, &z->sembed, hi - lo);
    gpt_unit_range(m, GPT_UNIT_FINAL, &lo, &hi);
    gstage_init(z, &z->sfinal, hi - lo);
    gstage_init(z, &z->sblocks[0], biggest);
    gstage_init(z, &z->sblocks[1], biggest);
}

void zero_attach(zero_t *z, gpt_t *m, bool resident) {
    z->m = m;
    if (z->staged) gstages_attach(z, m);
    if (z->stage < 3) return;
    const size_t n = z->hi > z->lo ? z->hi - z->lo : 1, bytes = n * dtype_bytes(m->wtype);
    z->param_shard = z->ops->alloc(bytes, MEM_PARAMETERS);
    z->ops->zero(z->param_shard, bytes / sizeof(float));
    z->resident = resident;
    size_t lo, hi;
    const size_t biggest = biggest_block(m);
    gpt_unit_range(m, GPT_UNIT_EMBED, &lo, &hi);
    gbuf_init(z, &z->embed, hi - lo);
    gpt_unit_range(m, GPT_UNIT_FINAL, &lo, &hi);
    gbuf_init(z, &z->final, hi - lo);
    const int layers = gpt_held_blocks(m); /* all chunks' (interleaved) */
    z->n_blocks = resident ? layers : (layers < 2 ? layers : 2);
    z->blocks = xcalloc((size_t)(z->n_blocks > 0 ? z->n_blocks : 1), sizeof(zero_gbuf_t));
    for (int i = 0; i < z->n_blocks; i++) gbuf_init(z, &z->blocks[i], biggest);
}

void zero3_invalidate(zero_t *z) {
    if (z->stage < 3 || !z->m) return;
    z->in_use = NULL;
    zero_gbuf_t *all[2] = {&z->embed, &z->final};
    for (int i = 0; i < 2; i++) {
        if (comm_req_pending(&all[i]->req)) comm_wait(&all[i]->req, COMM_DP);
        all[i]->ready = false;
        all[i]->unit = GPT_UNIT_NONE;
    }
    for (int i = 0; i < z->n_blocks; i++) {
        if (comm_req_pending(&z->blocks[i].req)) comm_wait(&z->blocks[i].req, COMM_DP);
        z->blocks[i].ready = false;
        z->blocks[i].unit = GPT_UNIT_NONE;
    }
}
