/* trainer_report.c — what the trainer prints and records (trainer_report.h), from report_t:
 * the startup summary, the step line and its metrics record, the stragglers, the end-of-run
 * communication and memory tables. */
#include "train/trainer_report.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "core/alloc.h"
#include "core/json.h"
#include "core/fault.h"
#include "parallel/comm_host.h"

static bool is_root(const report_ctx_t *in) { return in->grid->world_rank == 0; }

/* The model's FLOPs per token at the current stage's sequence length (attention grows with T). */
static double flops_per_token(const report_ctx_t *in) {
    return gpt_flops_per_token(in->model, in->shape->T);
}

/* Where the limit comes from, for the messages: "&run memory_limit_gb", or what it is unset. */
const char *report_limit_source(const config_t *cfg) {
    if (cfg->memory_limit_gb > 0) return "&run memory_limit_gb";
    return cfg->device_memory ? "&run memory_limit_gb unset: the device's memory: its free memory at startup less a reserve"
                              : "&run memory_limit_gb unset: this node's memory shared by its ranks";
}

/* How the weights copy is kept (gpt.h wtype), and why, for the startup summary. */
static void print_weights_storage(const report_ctx_t *in) {
    const config_t *cfg = in->cfg;
    const gpt_t *m = in->model;
    const dtype_t p = in->precision;
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
static void print_activations_storage(const report_ctx_t *in) {
    const config_t *cfg = in->cfg;
    const gpt_t *m = in->model;
    if (m->atype != DT_FP32) {
        printf("activations: %s storage, %zu bytes per element, for the tensors each block saves "
               "for its backward (&train activations_storage = '%s'; one block's fp32 working "
               "set, %.1f MiB, shared by all); the residual stream, norm statistics and "
               "attention log-sum-exp stay fp32\n", dtype_name(m->atype), dtype_bytes(m->atype),
               cfg->activations_storage, (double)m->shared_bytes / 1048576.0);
        return;
    }
    printf("activations: %s values in fp32 arrays (%s)\n", dtype_name(in->precision),
           cfg->choice.activations_storage == CFG_STORAGE_FP32
               ? "&train activations_storage = 'fp32'"
               : "activations_storage = 'auto' keeps 16-bit storage for GPUs: its packing pass "
                 "costs time on a CPU");
}

void report_print_plan(const report_t *rp) {
    const report_ctx_t *in = &rp->ctx;
    const gpt_t *m = in->model;
    const batch_shape_t *b = in->shape;
    const double MiB = 1024.0 * 1024.0;
    printf("model: GPT L=%d C=%d heads=%d d_ff=%d vocab=%d (padded %d) seq_len=%d: %.2fM "
           "parameters\n", m->L, m->C, m->NH, m->F, m->V,
           m->Vp, in->cfg->seq_len, m->P.n_global / 1e6);
    if (m->moe) moe_print_summary(m->moe, &m->P, MODEL_SPEC_OF(in->cfg));
    printf("batch: global %d sequences = micro_batch %d x accumulation %d x dp %d "
           "(%d tokens per step)\n", b->global_batch, b->micro_batch, b->accum,
           in->grid->dp, b->global_batch * b->T);
    printf("memory plan (rank 0, planner):");
    for (int c = 0; c < MEM_CATEGORIES; c++)
        printf(" %s %.1f%s", mem_category_name((mem_category_t)c), in->plan->bytes[c] / MiB,
               c + 1 < MEM_CATEGORIES ? "," : "");
    printf(" MiB; total %.1f MiB of %.2f GiB per rank (%s)\n", in->plan->total / MiB,
           in->memory_limit / 1073741824.0, report_limit_source(in->cfg));
    if (in->cfg->device_memory)
        printf("memory plan, host memory beside the device's (rank 0): %.1f MiB of %.2f GiB\n",
               in->plan->host_total / MiB, in->host_limit / 1073741824.0);
    printf("activations (rank 0): %d slot%s x %.1f MiB + head/scratch %.1f MiB\n",
           m->par.n_slots, m->par.n_slots > 1 ? "s" : "", m->slot_bytes / MiB,
           m->head_bytes / MiB);
    if (in->grid->pp > 1) {
        int *first = xmalloc(sizeof(int) * ((size_t)in->grid->pp + 1));
        params_partition_layers(MODEL_SPEC_OF(in->cfg), in->grid->pp, first);
        printf("pipeline: schedule %s, %d micro-batches per step, layers per stage:",
               in->cfg->schedule, b->accum);
        const int v = m->n_chunks, per = m->chunk_layers;
        for (int s = 0; s < in->grid->pp; s++) /* interleaved: stage s holds chunks c*pp + s */
            for (int c = 0; c < v; c++)
                if (v > 1) printf("%s[%d,%d)", c ? "+" : " ", (c * in->grid->pp + s) * per,
                                  (c * in->grid->pp + s + 1) * per);
                else printf(" [%d,%d)", first[s], first[s + 1]);
        printf(" (embedding on stage 0, head on stage %d)\n", in->grid->pp - 1);
        xfree(first);
    }
    const dtype_t p = in->precision;
    printf("compute: %s backend, GEMM %s; %d OpenMP thread%s per rank\n", m->ops->name,
           m->ops->describe(), omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "");
    if (p != DT_FP32) { /* what choose_products chose, and from what */
        const bool can = m->ops->products_native(p) &&
                         !(p == DT_BF16 && (in->cfg->products_missing & CFG_MISSING_BF16_NATIVE));
        printf("precision: %s products %s%s", dtype_name(p),
               in->products == DT_FP32 ? "emulated: fp32 products of the rounded values"
               : in->cfg->choice.device != CFG_DEVICE_CUDA
                   ? "native (the CPU's bf16 instructions, fp32 accumulation)"
                   : "native (tensor cores, fp32 accumulation)",
               can ? "" : m->ops->products_native(p)
                              ? " (another rank's CPU has no native products of this type: every rank "
                                "emulates, so that all choose alike)"
                              : " (no native products of this type here)");
        if (can && p == DT_BF16 && in->cfg->choice.bf16_products == CFG_BF16_AUTO)
            printf(" (&train bf16_products = 'auto': the GEMM library's bf16 kernels are %s than "
                   "its fp32 ones on this CPU)", in->products == DT_BF16 ? "faster" : "not faster");
        printf("\n");
        print_weights_storage(in);
        print_activations_storage(in);
    }
    printf("MFU reference: hardware peak %.1f GFLOP/s per rank (%s); best GEMM %.1f GFLOP/s per "
           "rank (the model's matmul, measured); %.4f GFLOP per token\n", rp->peak_flops / 1e9,
           rp->peak_how, rp->gemm_flops / 1e9, flops_per_token(in) / 1e9);
    printf("MFU and GEMM in the step lines are per rank: each rank's FLOP/s against the rates "
           "above, measured on rank 0's %s with %d OpenMP thread%s\n", rp->cores,
           omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "");
}

static void format_hms(char *buf, size_t len, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

void report_step(report_t *rp, const step_result_t *r, double dt, double eta,
                 const comm_stats_t *c, long faults) {
    const report_ctx_t *in = &rp->ctx;
    const batch_shape_t *b = in->shape;
    const double tok_s = (double)b->global_batch * b->T / dt;
    const double achieved = flops_per_token(in) * tok_s / in->grid->world_size; /* per rank */
    const double mfu = achieved / rp->peak_flops, gemm_util = achieved / rp->gemm_flops;
    const double mem = (double)alloc_rss_bytes() / (1024.0 * 1024.0);
    const double peak = (double)in->ops->memory_peak(MEM_CATEGORIES) / (1024.0 * 1024.0);
    char e[32], n1[32], n2[32], scale[48] = "";
    format_hms(e, sizeof e, eta);
    if (in->scaler->enabled) snprintf(scale, sizeof scale, " | scale %g", r->loss_scale);
    char event[96] = "", zl[256] = "";
    int zn = 0;
    if (in->cfg->z_loss > 0) zn = snprintf(zl, sizeof zl, ",\"z_loss\":%.9g", r->z_loss);
    if (in->model->moe) /* the experts' token exchange (all-to-all over the ep group) */
        zn += snprintf(zl + zn, sizeof zl - (size_t)zn, ",\"ms_ep\":%.3f,\"bytes_ep\":%.0f",
                       c->seconds[COMM_EP] * 1e3, c->bytes[COMM_EP]);
    if (in->grid->cp > 1) /* ring attention's block exchange around the cp group */
        zn += snprintf(zl + zn, sizeof zl - (size_t)zn, ",\"ms_cp\":%.3f,\"bytes_cp\":%.0f",
                       c->seconds[COMM_CP] * 1e3, c->bytes[COMM_CP]);
    if (in->opt->off) { /* the step's forwards waiting for the previous step's host update */
        int ready, units;
        const double w = adamw_offload_wait(in->opt, &ready, &units);
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
    if (is_root(in) && (r->step % in->cfg->log_every == 0 || r->step == in->cfg->max_steps ||
                        r->anomaly))
        printf("step %*lld/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | "
               "MFU %4.1f%% (GEMM %3.0f%%) | peak %.0f MiB | ETA %s%s%s%s%s\n",
               (int)log10(in->cfg->max_steps) + 1, (long long)r->step, in->cfg->max_steps,
               r->loss, r->lr, r->norm, dt * 1e3, tok_s, 100.0 * mfu, 100.0 * gemm_util, peak, e, scale,
               in->moelog->line, rp->strag_line, event);
    metrics_write(in->metrics,
                  "\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"ms\":%.3f,"
                  "\"tokens_per_s\":%.1f,\"mfu\":%.5f,\"gemm_util\":%.5f,\"minor_faults\":%ld,\"rss_mib\":%.1f,\"peak_mib\":%.1f,\"tokens\":%lld,"
                  "\"skipped\":%lld,\"applied\":%s,\"ms_tp\":%.3f,\"ms_pp_wait\":%.3f,"
                  "\"ms_dp_wait\":%.3f,\"bytes_tp\":%.0f,\"bytes_pp\":%.0f,\"bytes_dp\":%.0f,"
                  "\"loss_scale\":%.9g,\"overflow\":%s,\"stage\":%d,\"seq_len\":%d,\"global_batch\":%d%s%s%s%s",
                  (long long)r->step, metrics_num(n1, sizeof n1, r->loss), r->lr,
                  metrics_num(n2, sizeof n2, r->norm), dt * 1e3, tok_s, mfu, gemm_util, faults, mem, peak,
                  (long long)in->prog->tokens_seen, (long long)in->prog->skipped,
                  r->applied ? "true" : "false", c->seconds[COMM_TP] * 1e3,
                  c->seconds[COMM_PP] * 1e3, c->seconds[COMM_DP] * 1e3, c->bytes[COMM_TP],
                  c->bytes[COMM_PP], c->bytes[COMM_DP], r->loss_scale,
                  r->overflow ? "true" : "false", in->curric->cur + 1, b->T, b->global_batch,
                  zl, in->prof->record, in->moelog->record ? in->moelog->record : "", rp->strag_record);
    fflush(stdout);
}

/* ---------------------------------------------------------------- stragglers */

/* Peers do the same work: the ranks of one pipeline stage (straggler.h). */
void report_stragglers_setup(report_t *rp) {
    const report_ctx_t *in = &rp->ctx;
    const grid_t *g = in->grid;
    const double threshold = g->world_size >= 2 ? in->cfg->straggler_ratio : 0.0;
    if (threshold <= 0) return; /* off: no gather at all, on every rank alike */
    if (in->cfg->link_probe_every > 0) {
        linkprobe_init(&rp->probe, MPI_COMM_WORLD, (size_t)in->cfg->link_probe_kib * 1024);
        link_watch_init(&rp->linkw, rp->probe.n_nodes, threshold);
    }
    int *stage = xrealloc_small(NULL, sizeof(int) * (size_t)g->world_size);
    comm_allgather(&g->rank_pp, 1, MPI_INT, stage, MPI_COMM_WORLD, "straggler peer groups");
    straggler_init(&rp->strag, g->world_size, stage, threshold);
    free(stage);
    rp->busy_all = xrealloc_small(NULL, sizeof(double) * (size_t)g->world_size);
}

/* Rank r's host, short (the provenance's rank_hosts, gathered at startup). */
static void host_of(const report_ctx_t *in, int r, char *out, size_t len) {
    const provenance_field_t *f = provenance_find(in->provenance, "rank_hosts");
    straggler_host_of(f ? f->text : NULL, r, out, len);
}

/* Every link_probe_every steps on 3 nodes or more: the nodes' link times (all ranks take part),
 * a slow link named after two probes in a row; appended to the step line and record. */
static void watch_links(report_t *rp, int64_t step) {
    const report_ctx_t *in = &rp->ctx;
    linkprobe_t *p = &rp->probe;
    if (!p->active || step % in->cfg->link_probe_every != 0) return;
    double *t = xrealloc_small(NULL, sizeof(double) * (size_t)p->n_nodes);
    linkprobe_run(p, MPI_COMM_WORLD, t);
    link_watch_t *w = &rp->linkw;
    const int k = link_watch_push(w, t);
    free(t);
    size_t n = strlen(rp->strag_record);
    char esc[160];
    json_escape(esc, sizeof esc, p->host[w->worst]);
    snprintf(rp->strag_record + n, sizeof rp->strag_record - n,
             ",\"link_probe_worst_host\":\"%s\",\"link_probe_worst_ratio\":%.4f,"
             "\"link_probe_worst_ms\":%.3f,\"link_probe_median_ms\":%.3f",
             esc, w->worst_ratio, w->worst_s * 1e3, w->median_s * 1e3);
    if (k < 0) return;
    n = strlen(rp->strag_record);
    json_escape(esc, sizeof esc, p->host[k]);
    snprintf(rp->strag_record + n, sizeof rp->strag_record - n,
             ",\"straggler_link_rank\":%d,\"straggler_link_host\":\"%s\",\"straggler_link_ratio\":%.4f",
             p->first_rank[k], esc, w->worst_ratio);
    n = strlen(rp->strag_line);
    snprintf(rp->strag_line + n, sizeof rp->strag_line - n, " | slow link %s x%.1f", p->host[k],
             w->worst_ratio);
    if (link_watch_first_time(w, k) && is_root(in)) {
        fprintf(stderr, "llmtrain: warning: step %lld: node %s (its first rank %d) is on a slow link: "
                "exchanging %d KiB with its ring neighbours took %.1f ms, %.1f x the median of the "
                "other nodes (%.1f ms), in two probes in a row (&log link_probe_every = %d, "
                "straggler_ratio = %g)\n",
                (long long)step, p->host[k], p->first_rank[k], in->cfg->link_probe_kib,
                w->worst_s * 1e3, w->worst_ratio, w->median_s * 1e3, in->cfg->link_probe_every,
                w->threshold);
        fflush(stderr);
    }
}

void report_watch_stragglers(report_t *rp, int64_t step, double dt, const comm_stats_t *c) {
    const report_ctx_t *in = &rp->ctx;
    rp->strag_line[0] = rp->strag_record[0] = '\0';
    if (!rp->busy_all) return;
    watch_links(rp, step);
    double waited = 0.0;
    for (int k = 0; k < COMM_KINDS; k++) waited += c->seconds[k];
    const double busy = dt > waited ? dt - waited : 0.0;
    comm_allgather(&busy, 1, MPI_DOUBLE, rp->busy_all, MPI_COMM_WORLD, "straggler check");
    const int r = straggler_push(&rp->strag, rp->busy_all);
    if (r < 0) return;
    char host[64], esc[160];
    host_of(in, r, host, sizeof host);
    json_escape(esc, sizeof esc, host);
    const double x = rp->strag.value;
    snprintf(rp->strag_line, sizeof rp->strag_line, " | straggler r%d@%s x%.1f", r, host, x);
    snprintf(rp->strag_record, sizeof rp->strag_record,
             ",\"straggler_rank\":%d,\"straggler_host\":\"%s\",\"straggler_ratio\":%.4f", r, esc, x);
    if (straggler_first_time(&rp->strag, r) && is_root(in)) {
        fprintf(stderr, "llmtrain: warning: step %lld: rank %d (host %s) is a straggler: its busy "
                "time (step time less its waits for other ranks) is %.2f x the median of its "
                "peers' (%s), the median over the last %d steps (&log straggler_ratio = %g)\n",
                (long long)step, r, host, x,
                in->grid->pp > 1 && in->grid->world_size > in->grid->pp ? "the ranks of its pipeline stage"
                                                                         : "the other ranks",
                STRAGGLER_WINDOW, rp->strag.threshold);
        fflush(stderr);
    }
}

/* One line: the probes of the links between nodes, and the largest node ratio seen. */
static void print_links(const report_t *rp) {
    const report_ctx_t *in = &rp->ctx;
    const link_watch_t *w = &rp->linkw;
    if (!rp->probe.active || w->probes == 0 || w->max_node < 0) return;
    int named = 0;
    for (int k = 0; k < w->n; k++) named += w->warned[k];
    printf("links: %ld probe%s of %d KiB between %d nodes, %d slow node%s named; largest ratio to "
           "the other nodes' median %.2f (node %s; named at &log straggler_ratio = %g, two probes "
           "in a row, %.0f ms above the median)\n",
           w->probes, w->probes == 1 ? "" : "s", in->cfg->link_probe_kib, w->n, named,
           named == 1 ? "" : "s", w->max_ratio, rp->probe.host[w->max_node], w->threshold,
           LINK_MIN_EXCESS_S * 1e3);
}

/* One line: the largest windowed ratio of the run, named or not (a healthy run's margin). */
void report_print_stragglers(const report_t *rp) {
    const report_ctx_t *in = &rp->ctx;
    print_links(rp);
    const straggler_t *s = &rp->strag;
    if (!rp->busy_all || s->max_rank < 0) return;
    int named = 0;
    for (int r = 0; r < s->n; r++) named += s->warned[r];
    char host[64];
    host_of(in, s->max_rank, host, sizeof host);
    printf("stragglers: %d rank%s named; largest busy-time ratio to the peers' median %.2f "
           "(rank %d@%s, step %ld of this start, %.1f ms a step above them; medians of %d steps; "
           "named at &log straggler_ratio = %g and %.0f ms)\n",
           named, named == 1 ? "" : "s", s->max_seen, s->max_rank, host, s->max_step,
           s->max_excess * 1e3, STRAGGLER_WINDOW, s->threshold, STRAGGLER_MIN_EXCESS_S * 1e3);
}

/* The communication summary of the run, one row per rank (gathered to rank 0): where the
 * time went and what each pipeline stage held. Per step averages over the whole run. */
void report_time_split(const report_t *rp) {
    const report_ctx_t *in = &rp->ctx;
    enum { NV = 9 };
    const comm_stats_t *c = comm_stats();
    const double steps = in->prog->step > 0 ? (double)in->prog->step : 1.0;
    const double MiB = 1024.0 * 1024.0;
    double mine[NV] = {in->grid->rank_pp, c->seconds[COMM_TP] / steps * 1e3,
                       c->seconds[COMM_PP] / steps * 1e3, c->seconds[COMM_DP] / steps * 1e3,
                       c->bytes[COMM_TP] / steps / MiB, c->bytes[COMM_PP] / steps / MiB,
                       c->bytes[COMM_DP] / steps / MiB, in->pipe->max_inflight,
                       in->pipe->max_inflight * in->model->slot_bytes / MiB};
    double *all = is_root(in) ? xmalloc(sizeof(double) * NV * (size_t)in->grid->world_size) : NULL;
    fault_point("stats", in->grid->world_rank);
    comm_gather(mine, NV, MPI_DOUBLE, all, 0, MPI_COMM_WORLD, "end-of-run statistics");
    if (is_root(in) && in->grid->world_size > 1) {
        printf("time split per step (ms, mean over %lld steps) and bytes sent (MiB/step):\n"
               "  %4s %5s %8s %11s %11s %8s %8s %8s %9s %13s\n", (long long)in->prog->step, "rank",
               "stage", "tp ar ms", "p2p wait ms", "dp wait ms", "tp MiB", "pp MiB", "dp MiB",
               "in flight", "act. peak MiB");
        for (int r = 0; r < in->grid->world_size; r++) {
            const double *v = all + NV * r;
            printf("  %4d %5.0f %8.2f %11.2f %11.2f %8.2f %8.2f %8.2f %9.0f %13.2f\n", r, v[0],
                   v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
        }
    }
    if (is_root(in) && in->grid->dp > 1) {
        double waited = c->seconds[COMM_DP] / steps * 1e3;
        double hidden = 1.0 - waited / rp->dp_blocking_ms;
        printf("dp all-reduce: %.2f ms when blocking (measured at startup), %.2f ms waited per "
               "step with %d buckets: %.0f%% hidden behind backward\n", rp->dp_blocking_ms,
               waited, in->dps->n, 100.0 * (hidden < 0 ? 0 : hidden));
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

void report_memory_table(const report_t *rp) {
    const report_ctx_t *in = &rp->ctx;
    const grid_t *g = in->grid;
    double mine[MEMROW_N];
    mine[MEMROW_DP] = g->rank_dp;
    mine[MEMROW_TP] = g->rank_tp;
    mine[MEMROW_PP] = g->rank_pp;
    for (int c = 0; c < MEM_CATEGORIES; c++) { /* the backend's memory: a device's, or the host's */
        mine[MEMROW_CAT + 2 * c] = (double)in->ops->memory_peak(c);
        mine[MEMROW_CAT + 2 * c + 1] = in->plan->bytes[c];
    }
    mine[MEMROW_PEAK] = (double)in->ops->memory_peak(MEM_CATEGORIES);
    mine[MEMROW_PLANNED] = in->plan->total;
    mine[MEMROW_RSS] = (double)alloc_rss_bytes();
    mine[MEMROW_HOST] = (double)alloc_bytes_peak(); /* beside a device: the host's tracked peak */
    mine[MEMROW_HOST_PLANNED] = in->plan->host_total;
    double *all = is_root(in) ? xmalloc(sizeof(double) * MEMROW_N * (size_t)g->world_size) : NULL;
    comm_gather(mine, MEMROW_N, MPI_DOUBLE, all, 0, MPI_COMM_WORLD, "the memory table");
    if (!is_root(in)) return;
    printf("memory per rank, MiB, measured peak / planned (tracked buffers by category%s; rss = "
           "resident size):\n  %-14s", in->cfg->device_memory ? " in device memory" : "",
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
    if (in->cfg->device_memory)
        printf("host memory beside the device's, MiB, measured peak / planned (largest rank): "
               "%.1f/%.1f\n", most[MEMROW_HOST] / 1048576.0, most[MEMROW_HOST_PLANNED] / 1048576.0);
    xfree(all);
}

void report_destroy(report_t *rp) {
    straggler_destroy(&rp->strag);
    free(rp->busy_all);
    rp->busy_all = NULL;
    link_watch_destroy(&rp->linkw);
    linkprobe_free(&rp->probe);
}
