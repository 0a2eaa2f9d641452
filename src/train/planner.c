/* planner.c — the memory plan and the fit search (see planner.h). */
#include "train/planner.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "train/pipeline.h"
#include "train/postval.h"

#define ALIGN_FLOATS 16           /* ZeRO partitions (zero.c) */
#define DEFAULT_FLOPS 1e11        /* per rank, when &log peak_flops is 0 */
#define LINK_BYTES_PER_S 1e10     /* per rank */
#define MEMORY_BYTES_PER_S 2e10   /* per rank: the element-wise passes that are modelled (the
                                     16-bit activations' packing) */

static double fl(size_t n) { return (double)(n ? n : 1) * sizeof(float); } /* alloc(max(n,1)) */

/* The largest block range of a stage, and the sum over its blocks (ZeRO-3 / staging buffers). */
static void block_ranges(const gpt_t *m, size_t *biggest, size_t *embed, size_t *final) {
    size_t lo, hi;
    *biggest = 0;
    for (int l = 0; l < m->L; l++) { /* every chunk's blocks (interleaved) */
        if (!params_holds_layer(&m->P, l)) continue;
        gpt_unit_range(m, l, &lo, &hi);
        if (hi - lo > *biggest) *biggest = hi - lo;
    }
    gpt_unit_range(m, GPT_UNIT_EMBED, &lo, &hi);
    *embed = hi - lo;
    gpt_unit_range(m, GPT_UNIT_FINAL, &lo, &hi);
    *final = hi - lo;
}

/* Model FLOPs of one rank per step, with what recomputation repeats. */
static double rank_flops(const config_t *cfg, const gpt_t *m, int T) {
    const double C = cfg->d_model, L = cfg->n_layer;
    const double tokens = (double)cfg->global_batch * T;
    const double per_token = gpt_flops_per_token(m, T);
    /* per layer and token: forward matmuls 2 x the block's matrices (GPT-2: 4C^2 + 2CF),
     * attention 4TC; the attention
     * backward recomputes the scores q k^T (2TC) instead of keeping a T x T matrix, whatever
     * &parallel recompute says (activations and their memory are linear in T, kernels/ops.h) */
    const double fwd_mat = 2.0 * m->block_matrix, fwd_att = 4.0 * T * C;
    double extra = 2.0 * T * C;
    const int n_rec = cfg->recompute_layers < 0 || cfg->recompute_layers > cfg->n_layer
                          ? cfg->n_layer : cfg->recompute_layers;
    if (cfg->choice.recompute == CFG_RECOMPUTE_FULL) extra += (fwd_mat + fwd_att) * n_rec / L;
    else if (cfg->choice.recompute == CFG_RECOMPUTE_SELECTIVE) extra += fwd_att * n_rec / L;
    const double world = (double)cfg->dp * cfg->tp * cfg->pp;
    return tokens * (per_token + extra * L) / world;
}

static double step_seconds(const config_t *cfg, const gpt_t *m, int mb, int accum, int T,
                           int zero, double total_floats) {
    const double flops = cfg->peak_flops > 0 ? cfg->peak_flops : DEFAULT_FLOPS;
    const double bubble = cfg->pp > 1 ? (double)(cfg->pp - 1) / (accum + cfg->pp - 1) : 0;
    /* matrix products of n rows run at n / (n + 128) of the peak (small products are slow) */
    const double rows = (double)mb * T, efficiency = rows / (rows + 128.0);
    double t = rank_flops(cfg, m, T) / (flops * efficiency) / (1.0 - bubble);
    const double grads = total_floats * 4, dpf = cfg->dp > 1 ? (cfg->dp - 1.0) / cfg->dp : 0;
    double dp_bytes = zero == 0 ? 2 * grads * dpf                 /* all-reduce */
                      : zero == 1 ? 3 * grads * dpf               /* all-reduce + all-gather */
                      : zero == 2 ? 2 * grads * dpf               /* reduce-scatter + all-gather */
                      : grads * dpf + (cfg->zero3_resident ? 1 : 2.0 * accum) * grads * dpf;
    const double tpf = cfg->tp > 1 ? 2.0 * (cfg->tp - 1) / cfg->tp : 0;
    const double layers = (double)cfg->n_layer / cfg->pp;
    const double tp_bytes = 4.0 * layers * accum * mb * T * cfg->d_model * 4.0 * tpf;
    t += (dp_bytes + tp_bytes) / LINK_BYTES_PER_S;
    /* 16-bit activations (gpt.h atype): each micro-batch packs every chunk's saved tensors (4
     * bytes read, 2 written per element) and unpacks them (2 read, 4 written) */
    const int chunks = m->n_chunks > 1 ? m->n_chunks : 1;
    t += 6.0 * (double)m->packed_bytes * accum * chunks / MEMORY_BYTES_PER_S;
    return t;
}

/* One linear layer out[N, OC] = in[N, Cin] w^T of the model: its operands of each product in
 * the order kernels/cpu/matmul.c hands them to the GEMM (forward: in, w; input gradient: dout,
 * w; weight gradient: dout, in), as the largest first and second operand so far. */
static void product_operands(double N, double Cin, double OC, double *a, double *b) {
    *a = fmax(*a, fmax(N * Cin, N * OC));
    *b = fmax(*b, fmax(OC * Cin, N * Cin));
}

/* The CPU backend's bf16 operand buffers (kernels/cpu/matmul.c: two grow-only buffers, the
 * largest first and second operand of any product, kept to the end) when its products run in
 * bf16: the MFU measurement's products and every linear layer of the rank's shard (MoE experts
 * at their capacity or, dropless, every token on one expert: a bound). */
static double bf16_operand_bytes(const config_t *cfg, int mb) {
    const double N = (double)mb * cfg->seq_len, C = cfg->d_model, tp = cfg->tp;
    const double F = cfg->d_ff, hs = C / cfg->n_head, kv = config_kv_heads(cfg);
    double a = 0, b = 0;
    if (cfg->peak_flops <= 0) { /* kernels/ops_rate.c ops_best_gemm_rate: 1024^3 and the MLP's product */
        product_operands(1024, 1024, 1024, &a, &b);
        product_operands(N, C, F, &a, &b);
    }
    if (params_fused_qkv(MODEL_SPEC_OF(cfg))) {
        product_operands(N, C, 3 * C / tp, &a, &b);
    } else { /* q, then k and v (replicated k/v: one head per rank) */
        product_operands(N, C, C / tp, &a, &b);
        product_operands(N, C, (kv >= tp ? kv / tp : 1) * hs, &a, &b);
    }
    product_operands(N, C / tp, C, &a, &b);                       /* attention output */
    product_operands(N, C, F / tp, &a, &b);                       /* fc (SwiGLU: gate, up) */
    product_operands(N, F / tp, C, &a, &b);                       /* mlp projection */
    product_operands(N, C, config_padded_vocab(cfg) / tp, &a, &b); /* the head */
    if (cfg->n_experts > 0) {
        const double k = cfg->top_k_moe, E = cfg->n_experts, Fe = cfg->d_ff_expert;
        const double M = cfg->capacity_factor > 0 ? ceil(cfg->capacity_factor * N * k / E) : N;
        product_operands(N, C, E, &a, &b);                        /* the router */
        product_operands(M, C, Fe, &a, &b);
        product_operands(M, Fe, C, &a, &b);
    }
    return 2.0 * (a + b);
}

/* 16-bit weights that the products do not read as they are (weights_storage = '16bit' with fp32
 * products): the backend widens each to fp32 in a buffer of the largest matrix */
static double widened_weights_bytes(const config_t *cfg, const gpt_t *m) {
    if (m->wtype == DT_FP32 || gpt_product_type(MODEL_SPEC_OF(cfg), ops_cpu()) == m->wtype) return 0;
    size_t widest = 0;
    for (int i = 0; i < m->P.n; i++)
        if (m->P.p[i].decay && m->P.p[i].numel > widest) widest = m->P.p[i].numel;
    return fl(widest);
}

/* train/ckpt_async.c: the background writer's snapshot of the partition (parameters, m, v) over
 * the ranks ZeRO partitions among (dp x cp, or that / ep with expert parallelism), host memory
 * held from setup to the end (a missing MPI_THREAD_MULTIPLE leaves it unallocated: an
 * overestimate), and beside it the staging of a synchronous save (the final one: at most
 * staging_mb of the partition `part`). It is allocated at the end of setup, after setup's
 * transients are gone: it adds to the steps' memory, not to theirs. */
static double async_held_bytes(const config_t *cfg, size_t total, size_t part) {
    if (!cfg->ckpt_async || cfg->ckpt_every <= 0 || cfg->choice.mode != CFG_MODE_TRAIN) return 0;
    const int dp = cfg->dp * cfg->cp; /* ZeRO shards over dp x cp */
    const size_t ranks = (size_t)(cfg->ep > 1 ? dp / cfg->ep : dp);
    const size_t s = ((total + ranks - 1) / ranks + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    return 3 * fl(s < total ? s : total) + fmin(cfg->ckpt_staging_mb * 1048576.0, fl(part));
}

void plan_rank(const config_t *cfg, int tp_rank, int pp_rank, int mb, int accum, mem_plan_t *out) {
    memset(out, 0, sizeof *out);
    out->tp_rank = tp_rank;
    out->pp_rank = pp_rank;
    out->micro_batch = mb;
    out->accum = accum;
    /* context parallelism: a rank holds T / cp tokens of each sequence; the weights are
     * replicated (and ZeRO shards) over dp x cp */
    const int T = cfg->seq_len / cfg->cp, dp = cfg->dp * cfg->cp;
    const int zero = dp > 1 ? cfg->zero_stage : 0;
    const pipe_schedule_t sched = sched_kind_of(cfg->choice.schedule);
    const bool staged = zero >= 2 && cfg->pp == 1 && sched == SCHED_1F1B;
    const int v = sched == SCHED_INTERLEAVED ? cfg->virtual_stages : 1;
    gpt_parallel_t par = {cfg->tp, tp_rank, cfg->pp, pp_rank, comm_group_self(),
                          pipe_slots_needed(sched, cfg->pp, v, pp_rank, accum), v,
                          sched == SCHED_ZBH1, cfg->ep, 0, comm_group_self(), cfg->cp, 0,
                          comm_group_self()};
    gpt_t m;
    gpt_plan(&m, MODEL_SPEC_OF(cfg), ops_cpu(), mb, T, &par, zero >= 3, staged);
    double *b = out->bytes;
    for (int c = 0; c < MEM_CATEGORIES; c++) b[c] = m.planned[c];
    const size_t total = m.P.total;
    size_t shard = ((total + (size_t)dp - 1) / (size_t)dp + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    const size_t part = shard < total ? shard : total; /* dp rank 0's */
    size_t biggest, embed, final;
    block_ranges(&m, &biggest, &embed, &final);
    /* train/zero.c */
    if (zero >= 2) b[MEM_GRADIENTS] += fl(part);
    if (zero >= 3) {
        const int layers = gpt_held_blocks(&m);
        const int blocks = cfg->zero3_resident ? layers : layers < 2 ? layers : 2;
        /* the partition and the gather buffers hold the weights copy's type (gpt.h wtype) */
        const double wb = (double)dtype_bytes(m.wtype) / sizeof(float);
        b[MEM_PARAMETERS] += wb * (fl(part) + fl(embed) + fl(final) + blocks * fl(biggest));
    }
    if (staged) {
        b[MEM_GRADIENTS] += fl(embed) + fl(final) + 2 * fl(biggest);
        b[MEM_COMM] += fl(embed) + fl(final) + 2 * fl(biggest);
    }
    /* Host buffers: in b too when the backend computes in host memory, else in out->host */
    double *h = cfg->device_memory ? out->host : b;
    /* train/optimizer.c: moments (and the master copy) over the optimizer's elements, in host
     * memory when offloaded */
    const size_t state = zero == 0 ? total : part;
    const bool offload = cfg->choice.offload == CFG_OFFLOAD_OPTIMIZER;
    double *opt = offload ? h : b;
    opt[MEM_OPTIMIZER] += 2 * fl(state);
    if (sched == SCHED_ZBH1) b[MEM_OPTIMIZER] += fl(postval_floats(state)); /* train/postval.c */
    if (cfg->choice.precision != CFG_PRECISION_FP32 || offload) opt[MEM_MASTER] += fl(state);
    if (offload) h[MEM_OPTIMIZER] += 2 * fl(state); /* the gradients' and weights' host staging */
    /* train/trainer.c: the step's batches (host), the largest transient buffer: the MFU matrices
     * (the backend's), or what setup and a load stage on the host: the seeded init, init_from
     * and a checkpoint's load move the rank's range (its ZeRO partition, all without ZeRO)
     * through one staging buffer, with 16-bit weights beside the master's values of that range
     * (train/flat.c; init_from's crop of a longer position table adds that small table) */
    h[MEM_WORKSPACE] += 2.0 * accum * mb * T * sizeof(int);
    const double N = (double)mb * T, C = cfg->d_model, F = cfg->d_ff;
    const double range = 4.0 * (double)(zero >= 1 ? part : total);
    const double staged_load = fmin(cfg->ckpt_staging_mb * 1048576.0, range) + (m.wtype != DT_FP32 ? range : 0);
    double mfu = 0, copies = staged_load;
    if (cfg->peak_flops <= 0) /* the MFU reference: 1024^3 and the MLP's product */
        mfu = fmax(3.0 * 1024 * 1024 * 4, (N * C + F * C + N * F) * 4);
    const double held = async_held_bytes(cfg, total, part); /* after those transients */
    if (cfg->device_memory) /* two memories: each holds its own largest */
        b[MEM_WORKSPACE] += mfu, h[MEM_WORKSPACE] += fmax(copies, held);
    else
        b[MEM_WORKSPACE] += fmax(fmax(mfu, copies), held);
    /* kernels/cpu/matmul.c's bf16 operands, host memory (beside a GPU: its products are on the
     * device and these are not made; a small overestimate of the host's share) */
    if (gpt_product_type(MODEL_SPEC_OF(cfg), ops_cpu()) == DT_BF16) h[MEM_WORKSPACE] += bf16_operand_bytes(cfg, mb);
    b[MEM_WORKSPACE] += widened_weights_bytes(cfg, &m);
    for (int c = 0; c < MEM_CATEGORIES; c++) out->total += b[c];
    if (cfg->device_memory)
        for (int c = 0; c < MEM_CATEGORIES; c++) out->host_total += out->host[c];
    out->step_seconds = step_seconds(cfg, &m, mb, accum, T, zero, (double)total);
    /* the model FLOPs per token of the whole sequence (seq_len, not the rank's T / cp), as the
     * trainer's step line counts them (trainer_setup.c) */
    out->params = (double)total, out->flops_per_token = gpt_flops_per_token(&m, cfg->seq_len);
    gpt_destroy(&m);
}

void plan_worst(const config_t *cfg, int mb, int accum, mem_plan_t *worst, mem_plan_t *max_cat) {
    memset(worst, 0, sizeof *worst);
    memset(max_cat, 0, sizeof *max_cat);
    for (int s = 0; s < cfg->pp; s++)
        for (int t = 0; t < cfg->tp; t++) {
            mem_plan_t p;
            plan_rank(cfg, t, s, mb, accum, &p);
            if (p.total > worst->total) *worst = p;
            for (int c = 0; c < MEM_CATEGORIES; c++) {
                if (p.bytes[c] > max_cat->bytes[c]) max_cat->bytes[c] = p.bytes[c];
                if (p.host[c] > max_cat->host[c]) max_cat->host[c] = p.host[c];
            }
            if (p.step_seconds > max_cat->step_seconds) max_cat->step_seconds = p.step_seconds;
        }
    max_cat->total = max_cat->host_total = 0;
    for (int c = 0; c < MEM_CATEGORIES; c++) {
        max_cat->total += max_cat->bytes[c];
        max_cat->host_total += max_cat->host[c];
    }
    worst->step_seconds = max_cat->step_seconds; /* the slowest rank sets the step */
}

/* MemTotal of this node from /proc/meminfo, in bytes (0 if unknown). */
static double node_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    double kib = 0;
    if (f) {
        char line[128];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %lf kB", &kib) == 1) break;
        fclose(f);
    }
    return kib * 1024.0;
}

double plan_node_share_bytes(int ranks_per_node) {
    return node_memory() / (ranks_per_node > 0 ? ranks_per_node : 1);
}

double plan_limit_bytes(const config_t *cfg, int ranks_per_node) {
    if (cfg->memory_limit_gb > 0) return cfg->memory_limit_gb * 1073741824.0;
    return plan_node_share_bytes(ranks_per_node);
}

/* The micro-batches a global batch allows on dp ranks: divisors of global_batch / dp. */
static int micro_batches(const config_t *cfg, int *out, int cap) {
    const int per_rank = cfg->global_batch / cfg->dp;
    int n = 0;
    for (int d = 1; d <= per_rank && n < cap; d++)
        if (per_rank % d == 0) out[n++] = d;
    return n;
}

int plan_auto_micro_batch(const config_t *cfg, double limit) {
    int mbs[64];
    const int n = micro_batches(cfg, mbs, 64);
    for (int i = n - 1; i >= 0; i--) {
        mem_plan_t w, c;
        plan_worst(cfg, mbs[i], cfg->global_batch / cfg->dp / mbs[i], &w, &c);
        if (w.total <= limit) return mbs[i];
    }
    return 0;
}

/* One alternative of the table. */
typedef struct alt {
    int zero;
    const char *recompute;
    int mb, accum;
    const char *acts; /* &train activations_storage */
    mem_plan_t worst;
} alt_t;

/* The activation storages to try: the configuration's own, and 16-bit storage where a bf16/fp16
 * run keeps fp32 arrays (activations_storage 'auto' on a CPU, or 'fp32'). */
static int activation_storages(const config_t *cfg, const char *out[2]) {
    int n = 0;
    out[n++] = cfg->activations_storage;
    if (config_weights_16bit_possible(cfg) && gpt_activations_type(MODEL_SPEC_OF(cfg)) == DT_FP32)
        out[n++] = "16bit";
    return n;
}

/* How an alternative keeps its activations: "16bit" or "fp32" (arrays). */
static const char *acts_label(const config_t *cfg, const char *acts) {
    config_t c = *cfg;
    ASSERT(config_set_choice(&c, "train", "activations_storage", acts) == 0);
    return gpt_activations_type(MODEL_SPEC_OF(&c)) == DT_FP32 ? "fp32" : "16bit";
}

static int by_time(const void *a, const void *b) {
    double x = ((const alt_t *)a)->worst.step_seconds, y = ((const alt_t *)b)->worst.step_seconds;
    if (x != y) return x < y ? -1 : 1;
    x = ((const alt_t *)a)->worst.total, y = ((const alt_t *)b)->worst.total; /* then smaller */
    return x < y ? -1 : x > y;
}

/* Every (zero_stage, recompute, micro_batch) that fits, fastest first; returns how many fit, and
 * how many were tried in *tried. */
static int alternatives(const config_t *cfg, double limit, alt_t *out, int cap, int *tried) {
    static const char *recompute[] = {"none", "selective", "full"};
    int mbs[64], n = 0;
    const int k = micro_batches(cfg, mbs, 64);
    const char *acts[2];
    const int na = activation_storages(cfg, acts);
    *tried = 0;
    for (int z = 0; z <= (cfg->dp > 1 ? 3 : 0); z++)
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < k; i++) {
                double own_total = 0; /* the configuration's own storage (a = 0) */
                for (int a = 0; a < na; a++) {
                    config_t c = *cfg;
                    c.zero_stage = z;
                    ASSERT(config_set_choice(&c, "parallel", "recompute", recompute[r]) == 0);
                    c.recompute_layers = -1;
                    ASSERT(config_set_choice(&c, "train", "activations_storage", acts[a]) == 0);
                    const int accum = cfg->global_batch / cfg->dp / mbs[i];
                    mem_plan_t w, mc;
                    plan_worst(&c, mbs[i], accum, &w, &mc);
                    /* 16-bit storage that saves nothing (full recomputation keeps no packable
                     * tensor) is no alternative */
                    if (a == 0) own_total = w.total;
                    else if (w.total >= own_total) continue;
                    (*tried)++;
                    if (w.total > limit || n == cap) continue;
                    out[n++] = (alt_t){z, recompute[r], mbs[i], accum, acts[a], w};
                }
            }
    qsort(out, (size_t)n, sizeof *out, by_time);
    return n;
}

bool plan_suggest(const config_t *cfg, double limit, char *buf, size_t len) {
    alt_t alts[640];
    int tried;
    int n = alternatives(cfg, limit, alts, 640, &tried);
    if (n == 0) return false;
    /* the storage only where it is not the configuration's own */
    char acts[48] = "";
    if (alts[0].acts != cfg->activations_storage)
        snprintf(acts, sizeof acts, ", activations_storage = '%s'", alts[0].acts);
    snprintf(buf, len, "&parallel zero_stage = %d, recompute = '%s' and &train micro_batch = %d%s "
             "(accumulation %d): %.2f GiB per rank", alts[0].zero, alts[0].recompute, alts[0].mb,
             acts, alts[0].accum, alts[0].worst.total / 1073741824.0);
    return true;
}

static void print_categories(const char *title, const mem_plan_t *p) {
    printf("%s", title);
    for (int c = 0; c < MEM_CATEGORIES; c++)
        printf(" %s %.1f%s", mem_category_name((mem_category_t)c), p->bytes[c] / 1048576.0,
               c + 1 < MEM_CATEGORIES ? "," : "");
    printf("; total %.1f MiB\n", p->total / 1048576.0);
}

/* The logits of one micro-batch: the head's one fp32 buffer (model/gpt.c, its activations
 * category on the last pipeline stage), which a large vocabulary makes the largest single one. */
static void plan_print_logits(const config_t *cfg, int mb) {
    const int Vp = config_padded_vocab(cfg);
    const double bytes = (double)mb * cfg->seq_len * (Vp / cfg->tp) * sizeof(float);
    printf("  logits per micro-batch (fp32, the last stage's activations): micro_batch x seq_len x "
           "padded vocabulary / tp = %d x %d x %d / %d = %.1f MiB per rank\n", mb, cfg->seq_len, Vp,
           cfg->tp, bytes / 1048576.0);
}

/* The pipeline schedule of the grid: its lists (one line of compute actions per rank, the first
 * 24), the simulator's verdict, peak activations, bubble and messages under F = 1, B = 1, W = 1
 * (a chunk's actions 1/v of that). */
static void plan_print_schedule(const config_t *cfg, int accum) {
    if (cfg->pp == 1) return;
    const pipe_schedule_t kind = sched_kind_of(cfg->choice.schedule);
    const int v = kind == SCHED_INTERLEAVED ? cfg->virtual_stages : 1;
    char why[400];
    if (sched_constraint_error(kind, cfg->pp, v, accum, cfg->n_layer, why, sizeof why)) {
        printf("schedule: %s\n", why);
        return;
    }
    schedule_t s;
    sched_build(&s, kind, cfg->pp, v, accum, true);
    const sched_cost_t unit = {1, 1, 1};
    sched_sim_t sim;
    sched_simulate(&s, &unit, &sim);
    printf("schedule: %s, pp %d, v %d, %d micro-batches: %s; peak in-flight activations %d "
           "(chunk, micro-batch) per rank; bubble %.3f of the step (simulated, F = B = W = 1); %zu "
           "point-to-point messages per step\n", cfg->schedule, cfg->pp, v, accum,
           sim.ok ? "no deadlock" : sim.err, sim.peak_inflight_max, sim.bubble, sim.messages);
    sched_print(&s, stdout, 24);
    sched_destroy(&s);
}

/* Sequence parallelism on: what it saves, the fullest rank's activations and workspace against
 * the same plan without it. */
static void plan_print_sp(const config_t *cfg, int mb, int accum, const mem_plan_t *w) {
    if (!cfg->sequence_parallel) return;
    config_t *off = xmalloc(sizeof *off);
    *off = *cfg;
    off->sequence_parallel = false;
    mem_plan_t wo, co;
    plan_worst(off, mb, accum, &wo, &co);
    xfree(off);
    printf("  sequence parallel on (tp %d): the residual stream, the norms and dropout hold "
           "seq_len / tp = %d of each sequence's %d token rows per rank; fullest rank "
           "activations %.2f MiB, workspace %.2f MiB (without sequence parallel: %.2f, %.2f)\n",
           cfg->tp, cfg->seq_len / cfg->tp, cfg->seq_len,
           w->bytes[MEM_ACTIVATIONS] / 1048576.0, w->bytes[MEM_WORKSPACE] / 1048576.0,
           wo.bytes[MEM_ACTIVATIONS] / 1048576.0, wo.bytes[MEM_WORKSPACE] / 1048576.0);
}

bool plan_print(const config_t *cfg, double limit, int ranks_per_node) {
    int mb = cfg->micro_batch;
    if (mb == 0) mb = plan_auto_micro_batch(cfg, limit);
    if (mb == 0) {
        printf("plan: %s: micro_batch = 0 and not even micro_batch = 1 fits %.2f GiB per rank\n",
               cfg->source_path, limit / 1073741824.0);
        mb = 1;
    } else if (cfg->micro_batch == 0) {
        printf("plan: micro_batch = 0: the largest that fits is %d\n", mb);
    }
    const int accum = cfg->global_batch / (mb * cfg->dp) > 0 ? cfg->global_batch / (mb * cfg->dp) : 1;
    mem_plan_t w, c;
    char cp[32] = "";
    if (cfg->cp > 1) snprintf(cp, sizeof cp, " x cp %d", cfg->cp);
    printf("plan: %s on dp %d%s x tp %d x pp %d, zero_stage %d, recompute '%s', precision '%s', "
           "micro_batch %d x accumulation %d\n", cfg->source_path, cfg->dp, cp, cfg->tp, cfg->pp,
           cfg->zero_stage, cfg->recompute, cfg->precision, mb, accum);
    if (cfg->cp > 1)
        printf("  context parallel: cp %d, each rank %d of each sequence's %d tokens (activations "
               "1/cp), ZeRO over dp x cp = %d\n", cfg->cp, cfg->seq_len / cfg->cp, cfg->seq_len,
               cfg->dp * cfg->cp);
    plan_worst(cfg, mb, accum, &w, &c);
    char title[160];
    snprintf(title, sizeof title, "  per rank, the largest of each category (MiB):");
    print_categories(title, &c);
    snprintf(title, sizeof title, "  the fullest rank (tp %d, pp stage %d):", w.tp_rank, w.pp_rank);
    print_categories(title, &w);
    plan_print_logits(cfg, mb);
    plan_print_sp(cfg, mb, accum, &w);
    if (cfg->device_memory)
        printf("  device = 'cuda': the categories are device memory; beside it in host memory "
               "(batches, transient copies%s) %.1f MiB on the fullest rank\n",
               cfg->choice.offload != CFG_OFFLOAD_OPTIMIZER ? "" : ", the offloaded optimizer",
               w.host_total / 1048576.0);
    printf("  memory limit per rank: %.2f GiB (%s)%s\n", limit / 1073741824.0,
           cfg->memory_limit_gb > 0 ? "&run memory_limit_gb"
                                    : "this node's memory shared by the ranks of a node",
           w.total <= limit ? ": fits" : ": DOES NOT FIT");
    if (cfg->memory_limit_gb <= 0)
        printf("  (assumed %d rank%s per node; set &run memory_limit_gb for the %s you run on)\n",
               ranks_per_node, ranks_per_node > 1 ? "s" : "",
               cfg->device_memory ? "GPUs (their memory): here the node's is assumed" : "nodes");
    plan_print_schedule(cfg, accum);
    alt_t alts[640];
    int tried, n = alternatives(cfg, limit, alts, 640, &tried);
    const char *na[2];
    const bool two = activation_storages(cfg, na) > 1;
    printf("alternatives that fit (%d of %d; zero_stage x recompute x micro_batch%s), fastest first "
           "by the cost model (planner.h: %.3g FLOP/s per rank%s, 10 GB/s links%s):\n", n, tried,
           two ? " x activation storage" : "", cfg->peak_flops > 0 ? cfg->peak_flops : DEFAULT_FLOPS,
           cfg->peak_flops > 0 ? " from &log peak_flops" : " assumed; set &log peak_flops",
           two ? ", 20 GB/s for packing the activations" : "");
    printf("  %4s %10s %6s %6s %12s %10s %11s\n", "zero", "recompute", "mb", "accum", "GiB/rank",
           "step s", "activations");
    for (int i = 0; i < n && i < 15; i++)
        printf("  %4d %10s %6d %6d %12.3f %10.3f %11s\n", alts[i].zero, alts[i].recompute,
               alts[i].mb, alts[i].accum, alts[i].worst.total / 1073741824.0,
               alts[i].worst.step_seconds, acts_label(cfg, alts[i].acts));
    if (n > 15) printf("  ... and %d more\n", n - 15);
    return w.total <= limit;
}
