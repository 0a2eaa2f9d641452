/* perfplan.c — --plan --machine, --search, --json (perfplan.h). */
#include "train/perfplan.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/json.h"
#include "train/perfmodel.h"
#include "train/planner.h"
#include "train/schedule.h"

#define KEEP 5          /* the best that fit, printed and listed */
#define MAX_DIVISORS 64

/* ---- output ------------------------------------------------------------------------------- */

/* The fields of one prediction, without braces. */
static void json_fields(const perf_t *p, const char *indent) {
    printf("\"dp\": %d, \"cp\": %d, \"tp\": %d, \"pp\": %d, \"virtual_stages\": %d, \"micro_batch\": %d, "
           "\"accumulation\": %d, \"recompute\": \"%s\", \"zero_stage\": %d, \"schedule\": \"%s\", "
           "\"sequence_parallel\": %s,\n"
           "%s \"step_s\": %.6g, \"tokens_per_s\": %.6g, \"tflops_per_device\": %.6g, \"mfu\": %.6g, "
           "\"memory_gib_per_device\": %.6g, \"fits\": %s, \"oversubscribed\": %s,\n%s \"parts\": {",
           p->dp, p->cp, p->tp, p->pp, p->v, p->mb, p->accum, p->recompute, p->zero, p->schedule,
           p->sp ? "true" : "false", indent,
           p->step_s, p->tokens_per_s, p->tflops_per_device, p->mfu, p->memory_gib,
           p->fits ? "true" : "false", p->oversubscribed ? "true" : "false", indent);
    for (int i = 0; i < PERF_PARTS; i++)
        printf("%s\"%s\": %.6g", i ? ", " : "", perf_part_name((perf_part_t)i), p->part[i]);
    printf("}");
}

static void json_one(const perf_t *p, const char *indent) {
    printf("{");
    json_fields(p, indent);
    printf("}");
}

static void json_head(const config_t *cfg, const machine_t *mc) {
    printf("{\"namelist\": ");
    json_write_string(stdout, cfg->source_path);
    printf(", \"machine\": ");
    json_write_string(stdout, mc->name);
    printf(", \"precision\": \"%s\", \"global_batch\": %d, \"seq_len\": %d,\n ", cfg->precision,
           cfg->global_batch, cfg->seq_len);
}

static void print_parts(const perf_t *p) {
    printf("  %-12s %12s %7s\n", "part", "s per step", "share");
    for (int i = 0; i < PERF_PARTS; i++)
        if (p->part[i] > 0)
            printf("  %-12s %12.4g %6.1f%%\n", perf_part_name((perf_part_t)i), p->part[i],
                   100.0 * p->part[i] / p->step_s);
}

static void print_figures(const perf_t *p, const machine_t *mc) {
    printf("  step %.4g s | %.4g tokens/s | %.4g model TFLOP/s per device | MFU %.1f%% | "
           "%.2f GiB per device of %.2f: %s%s\n", p->step_s, p->tokens_per_s, p->tflops_per_device,
           100.0 * p->mfu, p->memory_gib, mc->memory_bytes / 1073741824.0,
           p->fits ? "fits" : "DOES NOT FIT",
           p->oversubscribed ? " (oversubscribed: more ranks than the machine's devices share them)" : "");
}

static const char *grid_text(const perf_t *p, char *buf, size_t len) {
    char v[16] = "", cp[24] = "";
    if (p->v > 1) snprintf(v, sizeof v, " (v %d)", p->v);
    if (p->cp > 1) snprintf(cp, sizeof cp, " x cp %d", p->cp);
    snprintf(buf, len, "dp %d%s x tp %d x pp %d%s, schedule %s%s, micro_batch %d x %d, recompute '%s', "
             "zero_stage %d", p->dp, cp, p->tp, p->pp, p->sp ? " (sequence parallel)" : "", p->schedule,
             v, p->mb, p->accum, p->recompute, p->zero);
    return buf;
}

/* cp > 1 on a GPU machine: the trainer's ring runs on device 'cpu' only (config/). */
static void cp_note(const perf_t *p, const machine_t *mc) {
    if (p->cp > 1 && mc->gpu)
        printf("  note: cp %d is the ring attention timed on %s's devices; the trainer runs it on "
               "device 'cpu' only (no CUDA kernel of the ring yet)\n", p->cp, mc->name);
}

/* ---- one configuration --------------------------------------------------------------------- */

int perfplan_print(const config_t *in, const machine_t *mc, bool json) {
    config_t cfg;
    perf_config_for(in, mc, &cfg);
    if (cfg.micro_batch == 0) {
        const int mb = plan_auto_micro_batch(&cfg, mc->memory_bytes);
        cfg.micro_batch = mb > 0 ? mb : 1;
    }
    char why[512];
    if (perf_grid_error(&cfg, mc, why, sizeof why)) fatal_user("%s on %s: %s", cfg.source_path, mc->name, why);
    perf_t p;
    perf_predict(&cfg, mc, &p);
    char g[256];
    if (json) {
        json_head(&cfg, mc);
        json_fields(&p, "");
        printf("}\n");
    } else {
        printf("perf: %s on %s (%d devices per node): %s, precision '%s'\n", cfg.source_path, mc->name,
               mc->devices_per_node, grid_text(&p, g, sizeof g), cfg.precision);
        print_parts(&p);
        print_figures(&p, mc);
        if (p.bubble_fraction > 0) printf("  pipeline bubble: %.1f%% of the step (schedule simulator)\n",
                                          100.0 * p.bubble_fraction);
        cp_note(&p, mc);
    }
    if (p.fits) return 0;
    char alt[256];
    if (plan_suggest(&cfg, mc->memory_bytes, alt, sizeof alt))
        fprintf(json ? stderr : stdout, "  does not fit %s: the fastest change that fits: %s\n", mc->name, alt);
    else
        fprintf(json ? stderr : stdout, "  does not fit %s with any zero_stage, recompute or micro_batch: "
                "more devices (llmtrain --plan ... --search N)\n", mc->name);
    return LLMT_EXIT_USER;
}

/* ---- the search ---------------------------------------------------------------------------- */

typedef struct cand {
    perf_t p;
    bool planned;        /* memory planned (fits known) */
    int reason;          /* why it loses: a REASON_ */
} cand_t;

enum { REASON_BEST, REASON_MEMORY, REASON_BUBBLE, REASON_COMM, REASON_RECOMPUTE, REASON_COMPUTE,
       REASON_OPTIMIZER, N_REASONS };
static const char *const reason_names[N_REASONS] = {
    "best", "memory (does not fit)", "pipeline bubble", "communication (tp, cp, dp, ZeRO, p2p, MoE)",
    "recomputation", "compute (smaller, slower products)", "optimizer step"};

typedef struct cands {
    cand_t *c;
    int n, cap;
    long tried;          /* configurations enumerated, valid or not */
    int grids, grids_out;/* valid grids; those whose least-memory setup does not fit */
    perf_t least;        /* the least-memory setup of all grids */
} cands_t;

static void push(cands_t *cs, const perf_t *p) {
    if (cs->n == cs->cap) {
        cs->cap = cs->cap ? 2 * cs->cap : 1024;
        cs->c = xrealloc_small(cs->c, (size_t)cs->cap * sizeof *cs->c);
    }
    cs->c[cs->n++] = (cand_t){*p, false, REASON_BEST};
}

static int divisors(int n, int *out, int cap) {
    int k = 0;
    for (int d = 1; d <= n && k < cap; d++)
        if (n % d == 0) out[k++] = d;
    return k;
}

/* The schedules of a pp: 1f1b, gpipe, zb-h1, interleaved with v = 2 and 4 (pp > 1). */
static int schedules(int pp, const char **name, int *v) {
    if (pp == 1) return name[0] = "1f1b", v[0] = 1, 1;
    static const char *const all[] = {"1f1b", "gpipe", "zb-h1", "interleaved", "interleaved"};
    static const int vs[] = {1, 1, 1, 2, 4};
    for (int i = 0; i < 5; i++) name[i] = all[i], v[i] = vs[i];
    return 5;
}

/* Whether micro_batch mb on c0's grid (cp > 1) is beaten by the same rows on a grid with less
 * cp: k > 1 dividing mb and cp, and dp x k dividing the global batch. Then dp x k, cp / k and
 * mb / k give every rank the same rows, accumulation, replica group and memory, the attention
 * in fewer, longer query blocks (no slower at machine_gemm_rate), K/V messages of the same size
 * on fewer ring steps (the cp part's terms grow with cp): never slower, never more memory. */
static bool cp_dominated(const config_t *c0, int mb) {
    for (int k = 2; k <= mb && k <= c0->cp; k++)
        if (mb % k == 0 && c0->cp % k == 0 && c0->global_batch % (c0->dp * k) == 0) return true;
    return false;
}

/* Every (micro_batch, schedule, recompute, zero_stage, sequence_parallel) of one grid, timed;
 * with cp > 1 the micro-batches cp_dominated leaves out are not tried. */
static void grid_candidates(const config_t *c0, const machine_t *mc, double params, double fpt,
                            cands_t *cs) {
    static const char *const rec[] = {"none", "selective", "full"};
    int mbs[MAX_DIVISORS], v[5];
    const char *sn[5];
    const int n_mb = divisors(c0->global_batch / c0->dp, mbs, MAX_DIVISORS), n_s = schedules(c0->pp, sn, v);
    for (int i = 0; i < n_mb; i++)
        for (int s = 0; s < n_s && !cp_dominated(c0, mbs[i]); s++)
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < 2 * (c0->dp * c0->cp > 1 ? 4 : 1); q++) {
                    const int z = q / 2;
                    config_t c = *c0;
                    c.sequence_parallel = q % 2;
                    char why[400];
                    if (config_sp_error(&c, why, sizeof why)) continue;
                    c.micro_batch = mbs[i], c.zero_stage = z, c.virtual_stages = v[s];
                    c.recompute_layers = -1;
                    ASSERT(config_set_choice(&c, "parallel", "schedule", sn[s]) == 0);
                    ASSERT(config_set_choice(&c, "parallel", "recompute", rec[r]) == 0);
                    cs->tried++;
                    if (perf_grid_error(&c, mc, why, sizeof why)) continue;
                    perf_t p;
                    memset(&p, 0, sizeof p);
                    perf_time(&c, mc, params, fpt, &p);
                    push(cs, &p);
                }
}

/* The configuration of candidate p (cfg's model and batch, p's grid and choices). */
static void config_of(const config_t *base, const perf_t *p, config_t *c) {
    *c = *base;
    c->dp = p->dp, c->cp = p->cp, c->tp = p->tp, c->pp = p->pp, c->micro_batch = p->mb;
    c->zero_stage = p->zero;
    c->virtual_stages = p->v, c->recompute_layers = -1, c->sequence_parallel = p->sp;
    ASSERT(config_set_choice(c, "parallel", "schedule", p->pp > 1 ? p->schedule : "1f1b") == 0);
    ASSERT(config_set_choice(c, "parallel", "recompute", p->recompute) == 0);
}

/* The grid's least-memory setup: micro_batch 1, recompute 'full', the highest ZeRO stage (over
 * dp x cp), sequence parallelism where it can, 1f1b; with the rank's parameters and the FLOPs
 * per token. False when it cannot be scheduled. */
static bool least_memory(const config_t *c0, const machine_t *mc, perf_t *p, double *params,
                         double *fpt) {
    config_t c = *c0;
    c.micro_batch = 1, c.zero_stage = c.dp * c.cp > 1 ? 3 : 0, c.recompute_layers = -1;
    ASSERT(config_set_choice(&c, "parallel", "recompute", "full") == 0);
    char why[400];
    c.sequence_parallel = true; /* where the parser's rules (the ring's with cp) let it run */
    c.sequence_parallel = !config_sp_error(&c, why, sizeof why) && !config_cp_error(&c, true, why, sizeof why);
    if (perf_grid_error(&c, mc, why, sizeof why)) return false;
    memset(p, 0, sizeof *p);
    perf_memory(&c, mc, p, params, fpt);
    perf_time(&c, mc, *params, *fpt, p);
    return true;
}

/* cfg on n devices as tp x pp x cp, dp the rest: micro_batch 1, 1f1b, no sequence parallelism. */
static void grid_config(const config_t *cfg, int n, int tp, int pp, int cp, config_t *c) {
    *c = *cfg;
    c->tp = tp, c->pp = pp, c->cp = cp, c->dp = n / (tp * pp * cp);
    c->micro_batch = 1, c->virtual_stages = 1, c->sequence_parallel = false;
    ASSERT(config_set_choice(c, "parallel", "schedule", "1f1b") == 0);
}

/* The grids of n devices, tp x pp x cp dividing it and dp the rest, as (tp, pp, cp) in out, at
 * most cap of them: those whose dp divides the global batch and the experts' ep, pp at most
 * n_layer and cp the ring allows (config_cp_error, any device). */
static int grids_of(const config_t *cfg, int n, int (*out)[3], int cap) {
    int tps[MAX_DIVISORS], k = 0;
    const int n_tp = divisors(n, tps, MAX_DIVISORS);
    for (int a = 0; a < n_tp; a++) {
        int pps[MAX_DIVISORS];
        const int n_pp = divisors(n / tps[a], pps, MAX_DIVISORS);
        for (int b = 0; b < n_pp; b++) {
            int cps[MAX_DIVISORS];
            const int n_cp = divisors(n / (tps[a] * pps[b]), cps, MAX_DIVISORS);
            for (int d = 0; d < n_cp && k < cap; d++) {
                config_t c;
                grid_config(cfg, n, tps[a], pps[b], cps[d], &c);
                char why[400];
                if (c.pp > c.n_layer || c.global_batch % c.dp || (c.ep > 1 && c.dp % c.ep) ||
                    config_cp_error(&c, true, why, sizeof why))
                    continue;
                out[k][0] = tps[a], out[k][1] = pps[b], out[k][2] = cps[d], k++;
            }
        }
    }
    return k;
}

#define MAX_GRIDS 4096

/* Every valid grid of `devices`: tp x pp x cp dividing it, dp the rest. */
static void enumerate(const config_t *cfg, const machine_t *mc, int devices, cands_t *cs) {
    int (*grids)[3] = xmalloc(MAX_GRIDS * sizeof *grids);
    const int n = grids_of(cfg, devices, grids, MAX_GRIDS);
    for (int g = 0; g < n; g++) {
        config_t c;
        grid_config(cfg, devices, grids[g][0], grids[g][1], grids[g][2], &c);
        char why[400];
        if (perf_grid_error(&c, mc, why, sizeof why)) continue;
        const int first = cs->n;
        perf_t least;
        double params, fpt;
        if (!least_memory(&c, mc, &least, &params, &fpt)) continue;
        cs->grids++;
        if (cs->least.memory_gib == 0 || least.memory_gib < cs->least.memory_gib) cs->least = least;
        grid_candidates(&c, mc, params, fpt, cs);
        if (least.fits) continue;
        cs->grids_out++; /* nothing of this grid fits: no plan of its own needed */
        for (int i = first; i < cs->n; i++) {
            cs->c[i].planned = true, cs->c[i].reason = REASON_MEMORY;
            cs->c[i].p.memory_gib = least.memory_gib; /* at least */
        }
    }
    xfree(grids);
}

static int by_step(const void *a, const void *b) {
    const double x = ((const cand_t *)a)->p.step_s, y = ((const cand_t *)b)->p.step_s;
    return x < y ? -1 : x > y;
}

/* Memory of the fastest candidates, in order, until KEEP fit; returns how many fit. */
static int plan_fastest(const config_t *cfg, const machine_t *mc, cands_t *cs) {
    int fit = 0;
    for (int i = 0; i < cs->n && fit < KEEP; i++) {
        cand_t *k = &cs->c[i];
        if (k->planned) continue;
        config_t c;
        config_of(cfg, &k->p, &c);
        perf_memory(&c, mc, &k->p, NULL, NULL);
        k->planned = true;
        k->reason = k->p.fits ? REASON_BEST : REASON_MEMORY;
        fit += k->p.fits;
    }
    return fit;
}

/* Why a slower candidate loses to the best: the overhead where it exceeds the best most. */
static int loss_reason(const perf_t *p, const perf_t *best) {
    const double *a = p->part, *b = best->part;
    double d[N_REASONS] = {0};
    d[REASON_BUBBLE] = a[PERF_BUBBLE] - b[PERF_BUBBLE];
    d[REASON_COMM] = a[PERF_TP] + a[PERF_CP] + a[PERF_DP] + a[PERF_ZERO] + a[PERF_P2P] + a[PERF_MOE] -
                     (b[PERF_TP] + b[PERF_CP] + b[PERF_DP] + b[PERF_ZERO] + b[PERF_P2P] + b[PERF_MOE]);
    d[REASON_RECOMPUTE] = a[PERF_RECOMPUTE] - b[PERF_RECOMPUTE];
    d[REASON_COMPUTE] = a[PERF_GEMM] + a[PERF_ATTENTION] + a[PERF_ELEMENTWISE] -
                        (b[PERF_GEMM] + b[PERF_ATTENTION] + b[PERF_ELEMENTWISE]);
    d[REASON_OPTIMIZER] = a[PERF_OPTIMIZER] - b[PERF_OPTIMIZER];
    int r = REASON_COMPUTE;
    for (int i = REASON_BUBBLE; i < N_REASONS; i++)
        if (d[i] > d[r]) r = i;
    return r;
}

static void print_best(const cands_t *cs, const machine_t *mc, int devices) {
    printf("search: %d devices of %s (%d per node): %ld configurations, %d valid on %d grids; the "
           "fastest that fit (memory planned in order of predicted time):\n", devices, mc->name,
           mc->devices_per_node, cs->tried, cs->n, cs->grids);
    printf("  %3s %5s %4s %4s %3s %4s %2s %12s %4s %6s %10s %4s %10s %11s %8s %6s %8s\n", "#", "dp",
           "cp", "tp", "sp", "pp", "v", "schedule", "mb", "accum", "recompute", "zero", "step s", "tokens/s", "TFLOP/s", "MFU",
           "GiB");
    int shown = 0;
    for (int i = 0; i < cs->n && shown < KEEP; i++) {
        const perf_t *p = &cs->c[i].p;
        if (!cs->c[i].planned || !p->fits) continue;
        printf("  %3d %5d %4d %4d %3s %4d %2d %12s %4d %6d %10s %4d %10.4g %11.4g %8.4g %5.1f%% %8.2f\n",
               ++shown, p->dp, p->cp, p->tp, p->sp ? "yes" : "no", p->pp, p->v, p->schedule, p->mb, p->accum, p->recompute, p->zero,
               p->step_s, p->tokens_per_s, p->tflops_per_device, 100 * p->mfu, p->memory_gib);
    }
}

/* Why the others lose: a count per reason, and the fastest of each. */
static void print_losers(cands_t *cs, const perf_t *best) {
    int count[N_REASONS] = {0}, first[N_REASONS];
    for (int r = 0; r < N_REASONS; r++) first[r] = -1;
    int shown = 0;
    for (int i = 0; i < cs->n; i++) {
        cand_t *k = &cs->c[i];
        if (k->planned && k->p.fits && shown < KEEP) { shown++; continue; }
        if (!k->planned || k->p.fits) k->reason = loss_reason(&k->p, best);
        count[k->reason]++;
        if (first[k->reason] < 0) first[k->reason] = i;
    }
    printf("why the others lose (each by the part where it exceeds #1 most; memory: planned, or "
           "the grid's least-memory setup does not fit):\n");
    for (int r = REASON_MEMORY; r < N_REASONS; r++) {
        if (!count[r]) continue;
        const perf_t *p = &cs->c[first[r]].p;
        char g[256];
        printf("  %-40s %7d  e.g. %s: %.4g s%s\n", reason_names[r], count[r], grid_text(p, g, sizeof g),
               p->step_s, r == REASON_MEMORY ? "" : " per step");
        if (r == REASON_MEMORY) printf("  %-40s %7s  (%.2f GiB per device)\n", "", "", p->memory_gib);
    }
}

/* The fewest devices, N x 2^k (k = 1..10), on which some grid's least-memory setup fits; 0 when
 * none does. */
static int devices_that_fit(const config_t *cfg, const machine_t *mc, int devices, perf_t *found) {
    int (*grids)[3] = xmalloc(MAX_GRIDS * sizeof *grids);
    int fit = 0;
    for (int k = 1; k <= 10 && (long)devices << k <= 1 << 20 && !fit; k++) {
        const int n = devices << k, count = grids_of(cfg, n, grids, MAX_GRIDS);
        for (int g = 0; g < count && !fit; g++) {
            config_t c;
            grid_config(cfg, n, grids[g][0], grids[g][1], grids[g][2], &c);
            double params, fpt;
            if (least_memory(&c, mc, found, &params, &fpt) && found->fits)
                fit = n;
        }
    }
    xfree(grids);
    return fit;
}

/* Nothing fits (or nothing is valid): the message and the smallest change, exit 2. */
static int nothing_fits(const config_t *cfg, const machine_t *mc, int devices, const cands_t *cs) {
    if (cs->n == 0)
        fatal_user("%s: --search %d on %s: no valid grid: tp must divide &model n_head, d_ff and the "
                   "padded vocabulary, pp at most n_layer, cp as the ring allows (seq_len / 2 divisible "
                   "by it), dp = %d / (tp x pp x cp) must divide &train global_batch = %d, and %d devices per node must divide the device count or be a "
                   "multiple of it", cfg->source_path, devices, mc->name, devices, cfg->global_batch,
                   mc->devices_per_node);
    char g[256], more[320] = "no power-of-two multiple up to 1024x fits either";
    perf_t f;
    const int n = devices_that_fit(cfg, mc, devices, &f);
    if (n) snprintf(more, sizeof more, "the smallest change: %d devices (--search %d; e.g. %s: %.2f GiB)",
                    n, n, grid_text(&f, g, sizeof g), f.memory_gib);
    fatal_user("%s: --search %d on %s: no configuration fits %.2f GiB per device; the least memory of "
               "any (micro_batch 1, recompute 'full', ZeRO 3 where dp x cp > 1, sequence parallelism where tp > 1) is %.2f GiB (%s); %s",
               cfg->source_path, devices, mc->name, mc->memory_bytes / 1073741824.0,
               cs->least.memory_gib, grid_text(&cs->least, g, sizeof g), more);
}

static void json_search(const config_t *cfg, const machine_t *mc, const cands_t *cs, int devices) {
    json_head(cfg, mc);
    printf("\"devices\": %d, \"tried\": %ld, \"valid\": %d,\n \"candidates\": [", devices, cs->tried, cs->n);
    int shown = 0;
    for (int i = 0; i < cs->n && shown < KEEP; i++) {
        if (!cs->c[i].planned || !cs->c[i].p.fits) continue;
        printf("%s\n  ", shown++ ? "," : "");
        json_one(&cs->c[i].p, "  ");
    }
    printf("]}\n");
}

int perfplan_search(const config_t *in, const machine_t *mc, int devices, bool json) {
    config_t cfg;
    perf_config_for(in, mc, &cfg);
    if (mc->max_nodes > 0 && devices > mc->max_nodes * mc->devices_per_node)
        fatal_user("--search %d: &machine %s has %d devices (max_nodes %d x devices_per_node %d)",
                   devices, mc->name, mc->max_nodes * mc->devices_per_node, mc->max_nodes,
                   mc->devices_per_node);
    cands_t cs = {0};
    enumerate(&cfg, mc, devices, &cs);
    qsort(cs.c, (size_t)cs.n, sizeof *cs.c, by_step);
    const int fit = plan_fastest(&cfg, mc, &cs);
    if (fit == 0) return nothing_fits(&cfg, mc, devices, &cs);
    const perf_t *best = NULL;
    for (int i = 0; i < cs.n && !best; i++)
        if (cs.c[i].planned && cs.c[i].p.fits) best = &cs.c[i].p;
    if (json) {
        json_search(&cfg, mc, &cs, devices);
    } else {
        print_best(&cs, mc, devices);
        char g[256];
        printf("#1: %s\n", grid_text(best, g, sizeof g));
        print_parts(best);
        print_figures(best, mc);
        cp_note(best, mc);
        print_losers(&cs, best);
    }
    free(cs.c);
    return 0;
}
