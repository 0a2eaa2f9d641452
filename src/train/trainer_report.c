/* trainer_report.c — what the trainer prints and records: the startup summary (model, batch,
 * memory plan, pipeline layout, precision and storage, MFU reference), the step line and its
 * metrics record, the stragglers (train/straggler.h: the busy times gathered, the mark, the
 * warning), and the end-of-run communication and memory tables. */
#include "train/trainer_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "core/alloc.h"
#include "core/json.h"
#include "core/fault.h"
#include "parallel/comm_host.h"

/* How the weights copy is kept (gpt.h wtype), and why, for the startup summary. */
static void print_weights_storage(const trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const gpt_t *m = &tr->model;
    const dtype_t p = tr->precision;
    if (m->wtype != DT_FP32) {
        printf("weights copy: %s storage, %zu bytes per element (&train weights_storage = '%s'); "
               "norms and biases also kept as fp32 values; products read the matrices %s\n",
               dtype_name(m->wtype), dtype_bytes(m->wtype), cfg->weights_storage,
               gpt_product_type(MODEL_SPEC_OF(cfg), m->ops) == m->wtype ? "as they are"
                                                         : "widened to fp32 one at a time");
        return;
    }
    const char *why = cfg->choice.weights_storage == CFG_STORAGE_FP32
                          ? "&train weights_storage = 'fp32'"
                          : "weights_storage = 'auto' and the products are not of this type here";
    printf("weights copy: %s values in fp32 arrays (%s)\n", dtype_name(p), why);
}

/* How the activations saved for backward are kept (gpt.h atype), and why. */
static void print_activations_storage(const trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const gpt_t *m = &tr->model;
    if (m->atype != DT_FP32) {
        printf("activations: %s storage, %zu bytes per element, for the tensors each block saves "
               "for its backward (&train activations_storage = '%s'; one block's fp32 working "
               "set, %.1f MiB, shared by all); the residual stream, norm statistics and "
               "attention log-sum-exp stay fp32\n", dtype_name(m->atype), dtype_bytes(m->atype),
               cfg->activations_storage, (double)m->shared_bytes / 1048576.0);
        return;
    }
    printf("activations: %s values in fp32 arrays (%s)\n", dtype_name(tr->precision),
           cfg->choice.activations_storage == CFG_STORAGE_FP32
               ? "&train activations_storage = 'fp32'"
               : "activations_storage = 'auto' keeps 16-bit storage for GPUs: its packing pass "
                 "costs time on a CPU");
}

void trainer_print_plan(const trainer_t *tr) {
    const double MiB = 1024.0 * 1024.0;
    printf("model: GPT L=%d C=%d heads=%d d_ff=%d vocab=%d (padded %d) seq_len=%d: %.2fM "
           "parameters\n", tr->model.L, tr->model.C, tr->model.NH, tr->model.F, tr->model.V,
           tr->model.Vp, tr->cfg->seq_len, tr->model.P.n_global / 1e6);
    if (tr->model.moe) moe_print_summary(tr->model.moe, &tr->model.P, MODEL_SPEC_OF(tr->cfg));
    printf("batch: global %d sequences = micro_batch %d x accumulation %d x dp %d "
           "(%d tokens per step)\n", tr->global_batch, tr->micro_batch, tr->accum,
           tr->grid->dp, tr->global_batch * tr->T);
    printf("memory plan (rank 0, planner):");
    for (int c = 0; c < MEM_CATEGORIES; c++)
        printf(" %s %.1f%s", mem_category_name((mem_category_t)c), tr->plan.bytes[c] / MiB,
               c + 1 < MEM_CATEGORIES ? "," : "");
    printf(" MiB; total %.1f MiB of %.2f GiB per rank (%s)\n", tr->plan.total / MiB,
           tr->memory_limit / 1073741824.0, trainer_limit_source(tr->cfg));
    if (tr->cfg->device_memory)
        printf("memory plan, host memory beside the device's (rank 0): %.1f MiB of %.2f GiB\n",
               tr->plan.host_total / MiB, tr->host_limit / 1073741824.0);
    printf("activations (rank 0): %d slot%s x %.1f MiB + head/scratch %.1f MiB\n",
           tr->model.par.n_slots, tr->model.par.n_slots > 1 ? "s" : "", tr->model.slot_bytes / MiB,
           tr->model.head_bytes / MiB);
    if (tr->grid->pp > 1) {
        int *first = xmalloc(sizeof(int) * ((size_t)tr->grid->pp + 1));
        params_partition_layers(MODEL_SPEC_OF(tr->cfg), tr->grid->pp, first);
        printf("pipeline: schedule %s, %d micro-batches per step, layers per stage:",
               tr->cfg->schedule, tr->accum);
        const int v = tr->model.n_chunks, per = tr->model.chunk_layers;
        for (int s = 0; s < tr->grid->pp; s++) /* interleaved: stage s holds chunks c*pp + s */
            for (int c = 0; c < v; c++)
                if (v > 1) printf("%s[%d,%d)", c ? "+" : " ", (c * tr->grid->pp + s) * per,
                                  (c * tr->grid->pp + s + 1) * per);
                else printf(" [%d,%d)", first[s], first[s + 1]);
        printf(" (embedding on stage 0, head on stage %d)\n", tr->grid->pp - 1);
        xfree(first);
    }
    const dtype_t p = tr->precision;
    printf("compute: %s backend, GEMM %s; %d OpenMP thread%s per rank\n", tr->model.ops->name,
           tr->model.ops->describe(), omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "");
    if (p != DT_FP32) { /* what choose_products chose, and from what */
        const bool can = tr->model.ops->products_native(p) &&
                         !(p == DT_BF16 && (tr->cfg->products_missing & CFG_MISSING_BF16_NATIVE));
        printf("precision: %s products %s%s", dtype_name(p),
               tr->products == DT_FP32 ? "emulated: fp32 products of the rounded values"
               : tr->cfg->choice.device != CFG_DEVICE_CUDA
                   ? "native (the CPU's bf16 instructions, fp32 accumulation)"
                   : "native (tensor cores, fp32 accumulation)",
               can ? "" : tr->model.ops->products_native(p)
                              ? " (another rank's CPU has no native products of this type: every rank "
                                "emulates, so that all choose alike)"
                              : " (no native products of this type here)");
        if (can && p == DT_BF16 && tr->cfg->choice.bf16_products == CFG_BF16_AUTO)
            printf(" (&train bf16_products = 'auto': the GEMM library's bf16 kernels are %s than "
                   "its fp32 ones on this CPU)", tr->products == DT_BF16 ? "faster" : "not faster");
        printf("\n");
        print_weights_storage(tr);
        print_activations_storage(tr);
    }
    printf("MFU reference: hardware peak %.1f GFLOP/s per rank (%s); best GEMM %.1f GFLOP/s per "
           "rank (the model's matmul, measured); %.4f GFLOP per token\n", tr->peak_flops / 1e9,
           tr->peak_how, tr->gemm_flops / 1e9, tr->flops_per_token / 1e9);
    printf("MFU and GEMM in the step lines are per rank: each rank's FLOP/s against the rates "
           "above, measured on rank 0's %s with %d OpenMP thread%s\n", tr->cores,
           omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "");
}

static void format_hms(char *buf, size_t len, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

void trainer_log_step(trainer_t *tr, const step_result_t *r, double dt, double eta,
                     const comm_stats_t *c, long faults) {
    const double tok_s = (double)tr->global_batch * tr->T / dt;
    const double achieved = tr->flops_per_token * tok_s / tr->grid->world_size; /* per rank */
    const double mfu = achieved / tr->peak_flops, gemm_util = achieved / tr->gemm_flops;
    const double mem = (double)alloc_rss_bytes() / (1024.0 * 1024.0);
    const double peak = (double)tr->ops->memory_peak(MEM_CATEGORIES) / (1024.0 * 1024.0);
    char e[32], n1[32], n2[32], scale[48] = "";
    format_hms(e, sizeof e, eta);
    if (tr->scaler.enabled) snprintf(scale, sizeof scale, " | scale %g", r->loss_scale);
    char event[96] = "", zl[256] = "";
    int zn = 0;
    if (tr->cfg->z_loss > 0) zn = snprintf(zl, sizeof zl, ",\"z_loss\":%.9g", r->z_loss);
    if (tr->model.moe) /* the experts' token exchange (all-to-all over the ep group) */
        zn += snprintf(zl + zn, sizeof zl - (size_t)zn, ",\"ms_ep\":%.3f,\"bytes_ep\":%.0f",
                       c->seconds[COMM_EP] * 1e3, c->bytes[COMM_EP]);
    if (tr->grid->cp > 1) /* ring attention's block exchange around the cp group */
        zn += snprintf(zl + zn, sizeof zl - (size_t)zn, ",\"ms_cp\":%.3f,\"bytes_cp\":%.0f",
                       c->seconds[COMM_CP] * 1e3, c->bytes[COMM_CP]);
    if (tr->opt.off) { /* the step's forwards waiting for the previous step's host update */
        int ready, units;
        const double w = adamw_offload_wait(&tr->opt, &ready, &units);
        snprintf(zl + zn, sizeof zl - (size_t)zn,
                 ",\"ms_offload_wait\":%.3f,\"offload_units_ready\":%d,\"offload_units\":%d",
                 w * 1e3, ready, units);
    }
    if (r->anomaly && r->event.to_step >= 0)
        snprintf(event, sizeof event, " | %s: ROLLBACK to step %lld",
                 anom_detector_name(r->event.v.detector), (long long)r->event.to_step);
    else if (r->anomaly)
        snprintf(event, sizeof event, " | %s: %s", anom_detector_name(r->event.v.detector),
                 r->applied ? "applied (warn)" : "SKIPPED");
    else if (!r->applied)
        snprintf(event, sizeof event, " | SKIPPED%s", r->overflow ? " (overflow)" : "");
    if (is_root(tr) && (r->step % tr->cfg->log_every == 0 || r->step == tr->cfg->max_steps ||
                        r->anomaly))
        printf("step %*lld/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | "
               "MFU %4.1f%% (GEMM %3.0f%%) | peak %.0f MiB | ETA %s%s%s%s%s\n",
               (int)log10(tr->cfg->max_steps) + 1, (long long)r->step, tr->cfg->max_steps,
               r->loss, r->lr, r->norm, dt * 1e3, tok_s, 100.0 * mfu, 100.0 * gemm_util, peak, e, scale,
               tr->moelog.line, tr->strag_line, event);
    metrics_write(&tr->metrics,
                  "\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"ms\":%.3f,"
                  "\"tokens_per_s\":%.1f,\"mfu\":%.5f,\"gemm_util\":%.5f,\"minor_faults\":%ld,\"rss_mib\":%.1f,\"peak_mib\":%.1f,\"tokens\":%lld,"
                  "\"skipped\":%lld,\"applied\":%s,\"ms_tp\":%.3f,\"ms_pp_wait\":%.3f,"
                  "\"ms_dp_wait\":%.3f,\"bytes_tp\":%.0f,\"bytes_pp\":%.0f,\"bytes_dp\":%.0f,"
                  "\"loss_scale\":%.9g,\"overflow\":%s,\"stage\":%d,\"seq_len\":%d,\"global_batch\":%d%s%s%s%s",
                  (long long)r->step, metrics_num(n1, sizeof n1, r->loss), r->lr,
                  metrics_num(n2, sizeof n2, r->norm), dt * 1e3, tok_s, mfu, gemm_util, faults, mem, peak,
                  (long long)tr->prog.tokens_seen, (long long)tr->prog.skipped,
                  r->applied ? "true" : "false", c->seconds[COMM_TP] * 1e3,
                  c->seconds[COMM_PP] * 1e3, c->seconds[COMM_DP] * 1e3, c->bytes[COMM_TP],
                  c->bytes[COMM_PP], c->bytes[COMM_DP], r->loss_scale,
                  r->overflow ? "true" : "false", tr->curric.cur + 1, tr->T, tr->global_batch,
                  zl, tr->prof.record, tr->moelog.record ? tr->moelog.record : "", tr->strag_record);
    fflush(stdout);
}

/* ---------------------------------------------------------------- stragglers */

/* Peers do the same work: the ranks of one pipeline stage (straggler.h). */
void trainer_stragglers_setup(trainer_t *tr) {
    const grid_t *g = tr->grid;
    const double threshold = g->world_size >= 2 ? tr->cfg->straggler_ratio : 0.0;
    if (threshold <= 0) return; /* off: no gather at all, on every rank alike */
    if (tr->cfg->link_probe_every > 0) {
        linkprobe_init(&tr->probe, MPI_COMM_WORLD, (size_t)tr->cfg->link_probe_kib * 1024);
        link_watch_init(&tr->linkw, tr->probe.n_nodes, threshold);
    }
    int *stage = xrealloc_small(NULL, sizeof(int) * (size_t)g->world_size);
    comm_allgather(&g->rank_pp, 1, MPI_INT, stage, MPI_COMM_WORLD, "straggler peer groups");
    straggler_init(&tr->strag, g->world_size, stage, threshold);
    free(stage);
    tr->busy_all = xrealloc_small(NULL, sizeof(double) * (size_t)g->world_size);
}

/* Rank r's host, short (the provenance's rank_hosts, gathered at startup). */
static void host_of(const trainer_t *tr, int r, char *out, size_t len) {
    const provenance_field_t *f = provenance_find(&tr->provenance, "rank_hosts");
    straggler_host_of(f ? f->text : NULL, r, out, len);
}

/* Every link_probe_every steps on 3 nodes or more: the nodes' link times (all ranks take part),
 * a slow link named after two probes in a row; appended to the step line and record. */
static void watch_links(trainer_t *tr, int64_t step) {
    linkprobe_t *p = &tr->probe;
    if (!p->active || step % tr->cfg->link_probe_every != 0) return;
    double *t = xrealloc_small(NULL, sizeof(double) * (size_t)p->n_nodes);
    linkprobe_run(p, MPI_COMM_WORLD, t);
    link_watch_t *w = &tr->linkw;
    const int k = link_watch_push(w, t);
    free(t);
    size_t n = strlen(tr->strag_record);
    char esc[160];
    json_escape(esc, sizeof esc, p->host[w->worst]);
    snprintf(tr->strag_record + n, sizeof tr->strag_record - n,
             ",\"link_probe_worst_host\":\"%s\",\"link_probe_worst_ratio\":%.4f,"
             "\"link_probe_worst_ms\":%.3f,\"link_probe_median_ms\":%.3f",
             esc, w->worst_ratio, w->worst_s * 1e3, w->median_s * 1e3);
    if (k < 0) return;
    n = strlen(tr->strag_record);
    json_escape(esc, sizeof esc, p->host[k]);
    snprintf(tr->strag_record + n, sizeof tr->strag_record - n,
             ",\"straggler_link_rank\":%d,\"straggler_link_host\":\"%s\",\"straggler_link_ratio\":%.4f",
             p->first_rank[k], esc, w->worst_ratio);
    n = strlen(tr->strag_line);
    snprintf(tr->strag_line + n, sizeof tr->strag_line - n, " | slow link %s x%.1f", p->host[k],
             w->worst_ratio);
    if (link_watch_first_time(w, k) && is_root(tr)) {
        fprintf(stderr, "llmtrain: warning: step %lld: node %s (its first rank %d) is on a slow link: "
                "exchanging %d KiB with its ring neighbours took %.1f ms, %.1f x the median of the "
                "other nodes (%.1f ms), in two probes in a row (&log link_probe_every = %d, "
                "straggler_ratio = %g)\n",
                (long long)step, p->host[k], p->first_rank[k], tr->cfg->link_probe_kib,
                w->worst_s * 1e3, w->worst_ratio, w->median_s * 1e3, tr->cfg->link_probe_every,
                w->threshold);
        fflush(stderr);
    }
}

void trainer_watch_stragglers(trainer_t *tr, int64_t step, double dt, const comm_stats_t *c) {
    tr->strag_line[0] = tr->strag_record[0] = '\0';
    if (!tr->busy_all) return;
    watch_links(tr, step);
    double waited = 0.0;
    for (int k = 0; k < COMM_KINDS; k++) waited += c->seconds[k];
    const double busy = dt > waited ? dt - waited : 0.0;
    comm_allgather(&busy, 1, MPI_DOUBLE, tr->busy_all, MPI_COMM_WORLD, "straggler check");
    const int r = straggler_push(&tr->strag, tr->busy_all);
    if (r < 0) return;
    char host[64], esc[160];
    host_of(tr, r, host, sizeof host);
    json_escape(esc, sizeof esc, host);
    const double x = tr->strag.value;
    snprintf(tr->strag_line, sizeof tr->strag_line, " | straggler r%d@%s x%.1f", r, host, x);
    snprintf(tr->strag_record, sizeof tr->strag_record,
             ",\"straggler_rank\":%d,\"straggler_host\":\"%s\",\"straggler_ratio\":%.4f", r, esc, x);
    if (straggler_first_time(&tr->strag, r) && is_root(tr)) {
        fprintf(stderr, "llmtrain: warning: step %lld: rank %d (host %s) is a straggler: its busy "
                "time (step time less its waits for other ranks) is %.2f x the median of its "
                "peers' (%s), the median over the last %d steps (&log straggler_ratio = %g)\n",
                (long long)step, r, host, x,
                tr->grid->pp > 1 && tr->grid->world_size > tr->grid->pp ? "the ranks of its pipeline stage"
                                                                         : "the other ranks",
                STRAGGLER_WINDOW, tr->strag.threshold);
        fflush(stderr);
    }
}

/* One line: the largest windowed ratio of the run, named or not (a healthy run's margin). */
/* One line: the probes of the links between nodes, and the largest node ratio seen. */
static void print_links(const trainer_t *tr) {
    const link_watch_t *w = &tr->linkw;
    if (!tr->probe.active || w->probes == 0 || w->max_node < 0) return;
    int named = 0;
    for (int k = 0; k < w->n; k++) named += w->warned[k];
    printf("links: %ld probe%s of %d KiB between %d nodes, %d slow node%s named; largest ratio to "
           "the other nodes' median %.2f (node %s; named at &log straggler_ratio = %g, two probes "
           "in a row, %.0f ms above the median)\n",
           w->probes, w->probes == 1 ? "" : "s", tr->cfg->link_probe_kib, w->n, named,
           named == 1 ? "" : "s", w->max_ratio, tr->probe.host[w->max_node], w->threshold,
           LINK_MIN_EXCESS_S * 1e3);
}

void trainer_print_stragglers(const trainer_t *tr) {
    print_links(tr);
    const straggler_t *s = &tr->strag;
    if (!tr->busy_all || s->max_rank < 0) return;
    int named = 0;
    for (int r = 0; r < s->n; r++) named += s->warned[r];
    char host[64];
    host_of(tr, s->max_rank, host, sizeof host);
    printf("stragglers: %d rank%s named; largest busy-time ratio to the peers' median %.2f "
           "(rank %d@%s, step %ld of this start, %.1f ms a step above them; medians of %d steps; "
           "named at &log straggler_ratio = %g and %.0f ms)\n",
           named, named == 1 ? "" : "s", s->max_seen, s->max_rank, host, s->max_step,
           s->max_excess * 1e3, STRAGGLER_WINDOW, s->threshold, STRAGGLER_MIN_EXCESS_S * 1e3);
}

/* The communication summary of the run, one row per rank (gathered to rank 0): where the
 * time went and what each pipeline stage held. Per step averages over the whole run. */
void trainer_print_time_split(trainer_t *tr) {
    enum { NV = 9 };
    const comm_stats_t *c = comm_stats();
    const double steps = tr->prog.step > 0 ? (double)tr->prog.step : 1.0;
    const double MiB = 1024.0 * 1024.0;
    double mine[NV] = {tr->grid->rank_pp, c->seconds[COMM_TP] / steps * 1e3,
                       c->seconds[COMM_PP] / steps * 1e3, c->seconds[COMM_DP] / steps * 1e3,
                       c->bytes[COMM_TP] / steps / MiB, c->bytes[COMM_PP] / steps / MiB,
                       c->bytes[COMM_DP] / steps / MiB, tr->pipe.max_inflight,
                       tr->pipe.max_inflight * tr->model.slot_bytes / MiB};
    double *all = is_root(tr) ? xmalloc(sizeof(double) * NV * (size_t)tr->grid->world_size) : NULL;
    fault_point("stats", tr->grid->world_rank);
    comm_gather(mine, NV, MPI_DOUBLE, all, 0, MPI_COMM_WORLD, "end-of-run statistics");
    if (is_root(tr) && tr->grid->world_size > 1) {
        printf("time split per step (ms, mean over %lld steps) and bytes sent (MiB/step):\n"
               "  %4s %5s %8s %11s %11s %8s %8s %8s %9s %13s\n", (long long)tr->prog.step, "rank",
               "stage", "tp ar ms", "p2p wait ms", "dp wait ms", "tp MiB", "pp MiB", "dp MiB",
               "in flight", "act. peak MiB");
        for (int r = 0; r < tr->grid->world_size; r++) {
            const double *v = all + NV * r;
            printf("  %4d %5.0f %8.2f %11.2f %11.2f %8.2f %8.2f %8.2f %9.0f %13.2f\n", r, v[0],
                   v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
        }
    }
    if (is_root(tr) && tr->grid->dp > 1) {
        double waited = c->seconds[COMM_DP] / steps * 1e3;
        double hidden = 1.0 - waited / tr->dp_blocking_ms;
        printf("dp all-reduce: %.2f ms when blocking (measured at startup), %.2f ms waited per "
               "step with %d buckets: %.0f%% hidden behind backward\n", tr->dp_blocking_ms,
               waited, tr->dps.n, 100.0 * (hidden < 0 ? 0 : hidden));
    }
    xfree(all);
}

/* The end-of-run table: each rank's measured peak per category beside the planner's prediction
 * (measured/planned MiB), its tracked peak in all and its resident size. With many ranks, the
 * first 16 and then the largest of each column. */
enum { MEMROW_DP, MEMROW_TP, MEMROW_PP, MEMROW_CAT, MEMROW_PEAK = MEMROW_CAT + 2 * MEM_CATEGORIES,
       MEMROW_PLANNED, MEMROW_RSS, MEMROW_HOST, MEMROW_HOST_PLANNED, MEMROW_N };

static void print_memory_row(const char *label, const double *r) {
    const double MiB = 1048576.0;
    printf("  %-14s", label);
    for (int c = 0; c < MEM_CATEGORIES; c++)
        printf(" %7.1f/%-7.1f", r[MEMROW_CAT + 2 * c] / MiB, r[MEMROW_CAT + 2 * c + 1] / MiB);
    printf(" %7.1f/%-7.1f %8.1f\n", r[MEMROW_PEAK] / MiB, r[MEMROW_PLANNED] / MiB, r[MEMROW_RSS] / MiB);
}

void trainer_print_memory_table(const trainer_t *tr) {
    const grid_t *g = tr->grid;
    double mine[MEMROW_N];
    mine[MEMROW_DP] = g->rank_dp;
    mine[MEMROW_TP] = g->rank_tp;
    mine[MEMROW_PP] = g->rank_pp;
    for (int c = 0; c < MEM_CATEGORIES; c++) { /* the backend's memory: a device's, or the host's */
        mine[MEMROW_CAT + 2 * c] = (double)tr->ops->memory_peak(c);
        mine[MEMROW_CAT + 2 * c + 1] = tr->plan.bytes[c];
    }
    mine[MEMROW_PEAK] = (double)tr->ops->memory_peak(MEM_CATEGORIES);
    mine[MEMROW_PLANNED] = tr->plan.total;
    mine[MEMROW_RSS] = (double)alloc_rss_bytes();
    mine[MEMROW_HOST] = (double)alloc_bytes_peak(); /* beside a device: the host's tracked peak */
    mine[MEMROW_HOST_PLANNED] = tr->plan.host_total;
    double *all = is_root(tr) ? xmalloc(sizeof(double) * MEMROW_N * (size_t)g->world_size) : NULL;
    comm_gather(mine, MEMROW_N, MPI_DOUBLE, all, 0, MPI_COMM_WORLD, "the memory table");
    if (!is_root(tr)) return;
    printf("memory per rank, MiB, measured peak / planned (tracked buffers by category%s; rss = "
           "resident size):\n  %-14s", tr->cfg->device_memory ? " in device memory" : "",
           "rank (dp,tp,pp)");
    for (int c = 0; c < MEM_CATEGORIES; c++) printf(" %15s", mem_category_name((mem_category_t)c));
    printf(" %15s %8s\n", "total", "rss");
    double most[MEMROW_N] = {0};
    for (int r = 0; r < g->world_size; r++) {
        const double *row = all + (size_t)r * MEMROW_N;
        for (int k = 0; k < MEMROW_N; k++) most[k] = row[k] > most[k] ? row[k] : most[k];
        if (r >= 16) continue;
        char label[48];
        snprintf(label, sizeof label, "%d (%d,%d,%d)", r, (int)row[MEMROW_DP], (int)row[MEMROW_TP],
                 (int)row[MEMROW_PP]);
        print_memory_row(label, row);
    }
    if (g->world_size > 16) {
        printf("  ... %d more ranks\n", g->world_size - 16);
        print_memory_row("largest", most);
    }
    if (tr->cfg->device_memory)
        printf("host memory beside the device's, MiB, measured peak / planned (largest rank): "
               "%.1f/%.1f\n", most[MEMROW_HOST] / 1048576.0, most[MEMROW_HOST_PLANNED] / 1048576.0);
    xfree(all);
}
