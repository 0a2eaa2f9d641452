/* perfmodel.c — the step-time model (perfmodel.h). */
#include "train/perfmodel.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/precision.h"
#include "model/gpt.h"
#include "model/params.h"
#include "model/spec.h"
#include "train/planner.h"
#include "train/schedule.h"

#define GRAD_BYTES 4.0       /* the collectives carry fp32 floats (comm.h) */
#define ADAMW_BYTES 32.0     /* per element: weights, master, gradient, m, v read; m, v, master
                                written (fp32), the weights copy written */

static const char *const part_names[PERF_PARTS] = {
    "gemm", "attention", "elementwise", "tp", "cp", "recompute", "p2p", "bubble", "dp", "zero",
    "optimizer", "moe"};

const char *perf_part_name(perf_part_t p) { return part_names[p]; }

double perf_allreduce_s(machine_collective_t alg, double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0;
    if (alg == MACHINE_TREE) return 2.0 * bytes / bw + 2.0 * ceil(log2((double)n)) * lat;
    return 2.0 * (n - 1.0) / n * bytes / bw + 2.0 * (n - 1.0) * lat;
}

double perf_allgather_s(double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0;
    return (n - 1.0) / n * bytes / bw + (n - 1.0) * lat;
}

void perf_config_for(const config_t *cfg, const machine_t *mc, config_t *out) {
    *out = *cfg;
    out->choice.device = mc->gpu ? CFG_DEVICE_CUDA : CFG_DEVICE_CPU;
    snprintf(out->device, sizeof out->device, "%s", mc->gpu ? "cuda" : "cpu");
    out->device_memory = mc->gpu;
    if (mc->gpu) out->products_missing = 0; /* a GPU's products, whatever this host's CPU has */
}

/* The model's shape rules against tp and pp (model_spec_check_grid's, as a message). */
static const char *shape_error(const config_t *cfg, const model_spec_t *s, char *buf, size_t len) {
    const int tp = cfg->tp, pp = cfg->pp, kv = s->n_kv_head;
    if (s->n_head % tp || s->d_ff % tp || s->padded_vocab % tp)
        snprintf(buf, len, "&parallel tp = %d must divide &model n_head (%d), d_ff (%d) and the padded "
                 "vocabulary (%d)", tp, s->n_head, s->d_ff, s->padded_vocab);
    else if (kv >= tp ? kv % tp != 0 : tp % kv != 0)
        snprintf(buf, len, "&model n_kv_head = %d and &parallel tp = %d: tp must divide it, or it tp",
                 kv, tp);
    else if (s->n_experts > 0 && s->d_ff_expert % tp)
        snprintf(buf, len, "&parallel tp = %d must divide &model d_ff_expert (%d)", tp, s->d_ff_expert);
    else if (pp > s->n_layer)
        snprintf(buf, len, "&parallel pp = %d exceeds &model n_layer = %d", pp, s->n_layer);
    else
        return NULL;
    return buf;
}

/* The grid's ranks (dp x cp x tp x pp) and the ranks that hold the same weights (dp x cp: the
 * gradient reduction's and ZeRO's group, parallel/grid.c). */
static int ranks_of(const config_t *c) { return c->dp * c->cp * c->tp * c->pp; }
static int replicas_of(const config_t *c) { return c->dp * c->cp; }

const char *perf_grid_error(const config_t *cfg, const machine_t *mc, char *buf, size_t len) {
    const model_spec_t spec = model_spec_from_config(cfg);
    if (shape_error(cfg, &spec, buf, len)) return buf;
    /* the ring's rules are the parser's; the device's is not: the model times the ring on the
     * machine's devices (the trainer runs it on device 'cpu' only, docs/planning.md) */
    if (config_cp_error(cfg, true, buf, len)) return buf;
    const int world = ranks_of(cfg), dpn = mc->devices_per_node;
    if (world % dpn != 0 && dpn % world != 0) {
        char cp[32] = "";
        if (cfg->cp > 1) snprintf(cp, sizeof cp, " x cp %d", cfg->cp);
        snprintf(buf, len, "&machine devices_per_node = %d and the grid's %d ranks (dp %d%s x tp %d x "
                 "pp %d): one must divide the other (whole nodes, or a part of one)", dpn, world,
                 cfg->dp, cp, cfg->tp, cfg->pp);
        return buf;
    }
    if (cfg->global_batch % cfg->dp != 0) {
        snprintf(buf, len, "&train global_batch = %d is not a multiple of &parallel dp = %d",
                 cfg->global_batch, cfg->dp);
        return buf;
    }
    if (cfg->pp > 1) {
        const sched_kind_t k = sched_kind_of(cfg->choice.schedule);
        const int v = k == SCHED_INTERLEAVED ? cfg->virtual_stages : 1;
        const int mb = cfg->micro_batch > 0 ? cfg->micro_batch : 1;
        const int m = cfg->global_batch / cfg->dp / mb;
        if (sched_constraint_error(k, cfg->pp, v, m, cfg->n_layer, buf, len)) return buf;
    }
    return NULL;
}

/* ---- the pieces of one micro-batch on one rank -------------------------------------------- */

typedef struct pm {
    const config_t *cfg;
    const machine_t *mc;
    model_spec_t spec;
    double peak, over;      /* the products' peak; oversubscription factor (>= 1) */
    double N, T, Tl, C, F, hs, tp, cp, abytes;  /* N: the rank's rows, mb x Tl; T: seq_len;
                                                 * Tl: the rank's tokens a sequence, T / cp */
    double rows;            /* the rows of the residual stream, norms and dropout (N / tp with
                             * sequence parallelism) */
    double bw[4], lat[4];   /* the links of the groups LINK_ */
} pm_t;

/* The groups whose links pm_t holds: tp, the replica group dp x cp (gradients, ZeRO), pp, cp. */
enum { LINK_TP, LINK_DP, LINK_PP, LINK_CP };

/* Seconds of one product out[M, N] = a[M, K] b[K, N]. */
static double gemm_s(const pm_t *p, double M, double N, double K) {
    return 2.0 * M * N * K / machine_gemm_rate(p->mc, p->peak, M, N, K) * p->over;
}

/* A linear layer of `rows` rows, in -> out (shard sizes): forward, input and weight gradient. */
static void linear(const pm_t *p, double rows, double in, double out, double t[3]) {
    t[0] += gemm_s(p, rows, out, in);
    t[1] += gemm_s(p, rows, in, out);
    t[2] += gemm_s(p, out, in, rows);
}

/* The link of a group of n ranks, `stride` apart in the world order (parallel/grid.c: tp
 * fastest, then cp, then dp, then pp): inside a node, or through the node's adapters shared by
 * its devices. */
static void group_link(const pm_t *p, int n, int stride, double *bw, double *lat) {
    const machine_t *mc = p->mc;
    const int world = ranks_of(p->cfg), dpn = mc->devices_per_node;
    const bool one_node = (double)n * stride <= dpn || (mc->max_nodes == 1);
    if (one_node) {
        *bw = mc->intra_bw, *lat = mc->intra_lat;
        return;
    }
    const int sharing = world < dpn ? world : dpn;
    *bw = fmin(mc->intra_bw, mc->inter_bw / sharing);
    *lat = mc->inter_lat;
}

static void pm_init(pm_t *p, const config_t *cfg, const machine_t *mc, int mb) {
    memset(p, 0, sizeof *p);
    p->cfg = cfg, p->mc = mc;
    p->spec = model_spec_from_config(cfg);
    const dtype_t prod = gpt_product_type(&p->spec, ops_cpu());
    p->peak = prod == DT_BF16 ? mc->peak_bf16 : prod == DT_FP16 ? mc->peak_fp16 : mc->peak_fp32;
    const double world = ranks_of(cfg);
    const double devices = mc->max_nodes > 0 ? (double)mc->max_nodes * mc->devices_per_node : world;
    p->over = world > devices ? world / devices : 1.0;
    p->T = cfg->seq_len, p->cp = cfg->cp, p->Tl = p->T / p->cp, p->N = (double)mb * p->Tl;
    p->C = cfg->d_model, p->F = p->spec.d_ff, p->hs = p->C / cfg->n_head, p->tp = cfg->tp;
    p->rows = cfg->sequence_parallel ? p->N / cfg->tp : p->N;
    p->abytes = (double)dtype_bytes(gpt_activations_type(&p->spec));
    const int replica = replicas_of(cfg);
    group_link(p, cfg->tp, 1, &p->bw[LINK_TP], &p->lat[LINK_TP]);
    group_link(p, replica, cfg->tp, &p->bw[LINK_DP], &p->lat[LINK_DP]);
    group_link(p, cfg->pp, cfg->tp * replica, &p->bw[LINK_PP], &p->lat[LINK_PP]);
    group_link(p, cfg->cp, cfg->tp, &p->bw[LINK_CP], &p->lat[LINK_CP]);
}

/* One block's costs per micro-batch: [0] forward, [1] backward (input gradient), [2] weight
 * gradient, by part. */
typedef struct block_cost {
    double gemm[3], att[2], elt[2], tp[2], cp[2], moe[2];
} block_cost_t;

/* The MLP of an MoE block: router, the k chosen experts' products on the rows the rank's experts
 * receive on average (N k ep / E each), shared experts; the all-to-all each way. With cp > 1
 * the routing's all-gather over cp (model/moe.c: N (k + E) floats from each cp rank, once per
 * block's forward) is left out: k + E floats a token, next to the C-wide rows exchanged. */
static void moe_mlp(const pm_t *p, block_cost_t *b) {
    const model_spec_t *s = &p->spec;
    const double N = p->N, C = p->C, Fe = s->d_ff_expert / p->tp, k = s->top_k_moe;
    const double ep = p->cfg->ep > 0 ? p->cfg->ep : 1, E = s->n_experts;
    const double rows = N * k * ep / E, local = E / ep, mats = s->swiglu ? 2 : 1;
    linear(p, N, C, E, b->gemm);
    double e[3] = {0, 0, 0};
    for (int i = 0; i < mats; i++) linear(p, rows, C, Fe, e);
    linear(p, rows, Fe, C, e);
    for (int i = 0; i < 3; i++) b->gemm[i] += local * e[i];
    for (int j = 0; j < s->n_shared_experts; j++) {
        for (int i = 0; i < mats; i++) linear(p, N, C, Fe, b->gemm);
        linear(p, N, Fe, C, b->gemm);
    }
    double bw, lat;
    group_link(p, (int)ep, p->cfg->tp, &bw, &lat);
    const double a2a = 2.0 * perf_allgather_s(N * k * C * GRAD_BYTES, (int)ep, bw, lat);
    b->moe[0] += a2a, b->moe[1] += a2a;
}

/* Ring attention's exchange (model/ring.c) beyond the block work it overlaps with: cp steps a
 * pass, each on a 1 / cp share of the attention. Forward: the next K/V block (the rank's Tl
 * tokens of kv heads, fp32) is sent while the current one is worked on, cp - 1 sends: what
 * exceeds the step's work shows. Backward: the K/V blocks travel the same way, and after each
 * step's work its dK/dV accumulator (as large) is sent and waited for, cp hops, not overlapped.
 * Both passes pack K and V into the ring's buffer (a read and a write); the backward also zeroes
 * the accumulator and copies it home. */
static void ring_exchange(const pm_t *p, double kv, block_cost_t *b) {
    const double cp = p->cp, bw = p->bw[LINK_CP], lat = p->lat[LINK_CP];
    const double floats = p->N * 2.0 * kv * p->hs, bytes = floats * GRAD_BYTES;
    const double msg = lat + bytes / bw, pass = bytes / p->mc->memory_bw * p->over;
    b->cp[0] = (cp - 1) * fmax(msg - b->att[0] / cp, 0.0) + 2.0 * pass;
    b->cp[1] = (cp - 1) * fmax(msg - b->att[1] / cp, 0.0) + cp * msg + 5.0 * pass;
}

static void block_cost(const pm_t *p, bool moe, block_cost_t *b) {
    memset(b, 0, sizeof *b);
    const model_spec_t *s = &p->spec;
    const double N = p->N, C = p->C, tp = p->tp, hs = p->hs, T = p->T;
    const double kv = s->n_kv_head >= tp ? s->n_kv_head / tp : 1;
    linear(p, N, C, C / tp + 2.0 * kv * hs, b->gemm);     /* q, k, v */
    linear(p, N, C / tp, C, b->gemm);                     /* attention output */
    if (moe) {
        moe_mlp(p, b);
    } else {
        for (int i = 0; i < (s->swiglu ? 2 : 1); i++) linear(p, N, C, p->F / tp, b->gemm);
        linear(p, N, p->F / tp, C, b->gemm);
    }
    /* QK^T and AV per head: (Tl, T, hs) products, mb x heads of them: the rank's T / cp queries
     * over the sequence's keys, the balanced 1 / cp share of the causal work (model/ring.h) */
    const double heads = s->n_head / tp, per = N / p->Tl * heads;
    b->att[0] = 2.0 * per * gemm_s(p, p->Tl, T, hs);
    b->att[1] = 2.5 * b->att[0];
    if (p->cp > 1) ring_exchange(p, kv, b);
    /* two norms (read, write), two residual adds (two reads, a write) on the rank's rows of the
     * residual stream, the activation function (read, write of the MLP's width) */
    const double bytes = p->abytes * (10.0 * C * p->rows + 2.0 * N * (moe ? 0 : p->F / tp));
    b->elt[0] = bytes / p->mc->memory_bw * p->over;
    b->elt[1] = 2.0 * b->elt[0];
    if (tp > 1) { /* two all-reduces a pass; sequence parallelism: two all-gather/reduce-scatter
                   * pairs of the same N x C activation */
        const double x = N * C * GRAD_BYTES;
        const double ar = p->cfg->sequence_parallel
                              ? 4.0 * perf_allgather_s(x, (int)tp, p->bw[LINK_TP], p->lat[LINK_TP])
                              : 2.0 * perf_allreduce_s(p->mc->collective, x, (int)tp, p->bw[LINK_TP],
                                                       p->lat[LINK_TP]);
        b->tp[0] = ar, b->tp[1] = ar;
    }
}

/* A stage's costs per micro-batch (all its chunks), by part and phase. */
typedef struct stage_cost {
    double part[PERF_PARTS];
    double f, b, w;
} stage_cost_t;

static void add_block(stage_cost_t *st, const block_cost_t *b, const pm_t *p, double recompute) {
    st->part[PERF_GEMM] += b->gemm[0] + b->gemm[1] + b->gemm[2];
    st->part[PERF_ATTENTION] += b->att[0] + b->att[1];
    st->part[PERF_ELEMENTWISE] += b->elt[0] + b->elt[1];
    st->part[PERF_TP] += b->tp[0] + b->tp[1];
    st->part[PERF_CP] += b->cp[0] + b->cp[1];
    st->part[PERF_MOE] += b->moe[0] + b->moe[1];
    const cfg_recompute_t r = p->cfg->choice.recompute;
    const double fwd = b->gemm[0] + b->att[0] + b->elt[0] + b->tp[0] + b->cp[0] + b->moe[0];
    double rec = 0; /* the recomputed attention forward is the ring's again, exchange included */
    if (r == CFG_RECOMPUTE_FULL) rec = fwd;
    else if (r == CFG_RECOMPUTE_SELECTIVE) rec = b->att[0] + b->cp[0];
    st->part[PERF_RECOMPUTE] += rec * recompute;
    st->f += fwd;
    st->b += b->gemm[1] + b->att[1] + b->elt[1] + b->tp[1] + b->cp[1] + b->moe[1] + rec * recompute;
    st->w += b->gemm[2];
}

/* Stage s of first[]: its blocks, the embedding on the first, the head and loss on the last,
 * the activation messages of its chunk boundaries. */
static void stage_cost(const pm_t *p, const int *first, int s, int v, stage_cost_t *st) {
    memset(st, 0, sizeof *st);
    const config_t *cfg = p->cfg;
    /* &parallel recompute_layers: the first n of each stage's blocks (-1: all) */
    const int n_rec = cfg->recompute_layers < 0 ? cfg->n_layer : cfg->recompute_layers;
    block_cost_t dense, moe;
    block_cost(p, false, &dense);
    if (p->spec.n_experts > 0) block_cost(p, true, &moe);
    for (int l = first[s]; l < first[s + 1]; l++) {
        const bool is_moe = p->spec.n_experts > 0 && params_moe_layer(&p->spec, l);
        add_block(st, is_moe ? &moe : &dense, p, l - first[s] < n_rec ? 1.0 : 0.0);
    }
    const double N = p->N, C = p->C, Vp = p->spec.padded_vocab / p->tp;
    if (s == 0) { /* the embedding: gather, and its gradient's scatter */
        const double e = 2.0 * N * C * p->abytes / p->mc->memory_bw * p->over;
        st->part[PERF_ELEMENTWISE] += 2 * e, st->f += e, st->b += e;
    }
    if (s == cfg->pp - 1) { /* LM head, and the cross-entropy over fp32 logits (3 passes) */
        double h[3] = {0, 0, 0};
        linear(p, N, C, Vp, h);
        const double x = 3.0 * N * Vp * 4.0 / p->mc->memory_bw * p->over;
        st->part[PERF_GEMM] += h[0] + h[1] + h[2];
        st->part[PERF_ELEMENTWISE] += x;
        st->f += h[0] + x, st->b += h[1], st->w += h[2];
    }
    if (cfg->pp > 1) { /* each chunk receives and sends one activation (its rows) each way */
        /* without sequence parallelism the activation is replicated over tp: each tp rank sends
         * its 1/tp and the receiver all-gathers it over tp (pipeline.c's scatter/gather) */
        const double gathered = p->rows == N && p->tp > 1 ? p->tp : 1.0;
        double msg = p->lat[LINK_PP] + p->rows * C * GRAD_BYTES / gathered / p->bw[LINK_PP];
        if (gathered > 1)
            msg += perf_allgather_s(N * C * GRAD_BYTES, (int)p->tp, p->bw[LINK_TP], p->lat[LINK_TP]);
        st->part[PERF_P2P] += 2.0 * v * msg;
        st->f += v * msg, st->b += v * msg;
    }
}

/* ---- the step ---------------------------------------------------------------------------- */

/* The slowest stage's costs per micro-batch. */
static void slowest_stage(const pm_t *p, int v, stage_cost_t *out) {
    const int pp = p->cfg->pp, L = p->cfg->n_layer;
    int first[1025];
    if (v > 1) /* interleaved: L / pp blocks on every rank, in v chunks of equal size */
        for (int s = 0; s <= pp; s++) first[s] = s * (L / pp);
    else
        params_partition_layers(&p->spec, pp, first);
    memset(out, 0, sizeof *out);
    for (int s = 0; s < pp; s++) {
        stage_cost_t st;
        stage_cost(p, first, s, v, &st);
        if (st.f + st.b + st.w > out->f + out->b + out->w) *out = st;
    }
}

/* The micro-batches the simulator runs for m: m itself up to 6 p; beyond, 4 p + (m mod p) (a
 * multiple of p where m is), the step's steady state then repeats one micro-batch's F, B and W
 * per further micro-batch on every stage (test_perfmodel.c checks the extrapolation against
 * the full simulation). */
static int simulated_micro(int p, int m) {
    return m <= 6 * p ? m : 4 * p + m % p;
}

static double simulate(sched_kind_t k, int p, int v, int m, const stage_cost_t *st) {
    schedule_t s;
    sched_build(&s, k, p, v, m, true);
    const sched_cost_t cost = {st->f, st->b, st->w};
    sched_sim_t sim;
    sched_simulate(&s, &cost, &sim);
    sched_destroy(&s);
    ASSERT(sim.ok);
    return sim.makespan;
}

/* The pipeline's makespan: the schedule's own action lists under the stage's F, B, W. */
static double pipeline_makespan(const config_t *cfg, int v, int accum, const stage_cost_t *st) {
    if (cfg->pp == 1) return accum * (st->f + st->b + st->w);
    const sched_kind_t k = sched_kind_of(cfg->choice.schedule);
    const int m = simulated_micro(cfg->pp, accum);
    return simulate(k, cfg->pp, v, m, st) + (accum - m) * (st->f + st->b + st->w);
}

double perf_pipeline_s(sched_kind_t kind, int p, int v, int m, double f, double b, double w,
                       bool extrapolate) {
    const stage_cost_t st = {.f = f, .b = b, .w = w};
    const int ms = extrapolate ? simulated_micro(p, m) : m;
    return simulate(kind, p, v, ms, &st) + (m - ms) * (f + b + w);
}

/* Data-parallel reduction and ZeRO's gathers of the rank's `params` elements over the replica
 * group dp x cp (parallel/grid.c); `window`: the backward the reduction overlaps with,
 * `compute`: the step's compute the gathers hide behind. Both go over the same link: ZeRO-3's
 * gathers hide only in the compute the reduction leaves the link free for. */
static void dp_and_zero(const pm_t *p, double params, double window, double compute, int accum,
                        double *dp, double *zero) {
    const config_t *cfg = p->cfg;
    const int n = replicas_of(cfg), z = n > 1 ? cfg->zero_stage : 0;
    *dp = *zero = 0;
    if (n == 1) return;
    const double g = params * GRAD_BYTES, bw = p->bw[LINK_DP], lat = p->lat[LINK_DP];
    const double reduce = z >= 2 ? perf_allgather_s(g, n, bw, lat)
                                 : perf_allreduce_s(p->mc->collective, g, n, bw, lat);
    const double hidden = fmin(reduce, window);
    *dp = reduce - hidden;
    const double wbytes = params * (double)dtype_bytes(gpt_weights_type(&p->spec, ops_cpu()));
    const double gather = perf_allgather_s(wbytes, n, bw, lat);
    if (z == 1 || z == 2) *zero = gather;
    if (z == 3)
        *zero = fmax((cfg->zero3_resident ? 1.0 : 2.0 * accum) * gather - fmax(compute - hidden, 0.0), 0.0);
}

/* The fullest of the first and last stages' plans (tp rank 0, dp rank 0). */
static void memory_of(const config_t *cfg, int mb, int accum, mem_plan_t *worst) {
    plan_rank(cfg, 0, 0, mb, accum, worst);
    if (cfg->pp > 1) {
        mem_plan_t last;
        plan_rank(cfg, 0, cfg->pp - 1, mb, accum, &last);
        if (last.total > worst->total) *worst = last;
    }
}

/* The step's time parts for a rank of `params` elements of a model of flops_per_token. */
void perf_time(const config_t *cfg, const machine_t *mc, double params, double flops_per_token,
               perf_t *out) {
    const int mb = cfg->micro_batch, accum = cfg->global_batch / cfg->dp / mb;
    const sched_kind_t kind = sched_kind_of(cfg->choice.schedule);
    const int v = cfg->pp > 1 && kind == SCHED_INTERLEAVED ? cfg->virtual_stages : 1;
    pm_t p;
    pm_init(&p, cfg, mc, mb);
    stage_cost_t st;
    slowest_stage(&p, v, &st);
    const double busy = accum * (st.f + st.b + st.w);
    double makespan = pipeline_makespan(cfg, v, accum, &st);
    /* ranks sharing a core (over > 1) fill each other's bubbles: the core runs its ranks' work
     * back to back (busy, the times already scaled by over), but never faster than the schedule
     * allows one rank alone (the makespan at full speed) */
    if (p.over > 1) makespan = fmax(busy, makespan / p.over);
    for (int i = 0; i < PERF_PARTS; i++) out->part[i] = accum * st.part[i];
    out->part[PERF_BUBBLE] = makespan - busy;
    dp_and_zero(&p, params, st.b + st.w, busy, accum, &out->part[PERF_DP], &out->part[PERF_ZERO]);
    const int replica = replicas_of(cfg), z = replica > 1 ? cfg->zero_stage : 0;
    const double elements = z >= 1 ? params / replica : params;
    out->part[PERF_OPTIMIZER] = elements * ADAMW_BYTES / mc->memory_bw * p.over;
    out->step_s = makespan + out->part[PERF_DP] + out->part[PERF_ZERO] + out->part[PERF_OPTIMIZER];
    const double world = ranks_of(cfg);
    const double tokens = (double)cfg->global_batch * cfg->seq_len;
    out->tokens_per_s = tokens / out->step_s;
    out->tflops_per_device = flops_per_token * tokens / out->step_s / world / 1e12;
    out->mfu = out->tflops_per_device * 1e12 / p.peak;
    out->bubble_fraction = out->part[PERF_BUBBLE] / out->step_s;
    out->oversubscribed = p.over > 1;
    out->dp = cfg->dp, out->cp = cfg->cp, out->tp = cfg->tp, out->pp = cfg->pp, out->v = v;
    out->mb = mb, out->accum = accum, out->zero = z, out->sp = cfg->sequence_parallel;
    snprintf(out->schedule, sizeof out->schedule, "%s", cfg->pp > 1 ? sched_kind_name(kind) : "none");
    snprintf(out->recompute, sizeof out->recompute, "%s", cfg->recompute);
}

void perf_memory(const config_t *cfg, const machine_t *mc, perf_t *out, double *params,
                 double *flops_per_token) {
    const int mb = cfg->micro_batch, accum = cfg->global_batch / cfg->dp / mb;
    mem_plan_t mem;
    memory_of(cfg, mb, accum, &mem); /* plan_rank: T / cp tokens, ZeRO over dp x cp */
    const double world = ranks_of(cfg);
    const double devices = mc->max_nodes > 0 ? (double)mc->max_nodes * mc->devices_per_node : world;
    const double share = world > devices ? devices / world : 1.0; /* ranks sharing a device */
    out->memory_gib = mem.total / 1073741824.0;
    out->fits = mem.total <= mc->memory_bytes * share;
    if (params) *params = mem.params;
    if (flops_per_token) *flops_per_token = mem.flops_per_token;
}

void perf_predict(const config_t *cfg, const machine_t *mc, perf_t *out) {
    memset(out, 0, sizeof *out);
    double params, fpt;
    perf_memory(cfg, mc, out, &params, &fpt);
    perf_time(cfg, mc, params, fpt, out);
}
