/* profiling.c — the run's timeline, counts and energy (see profiling.h). */
#include "train/profiling.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/prof.h"
#include "core/timer.h"
#include "parallel/comm_host.h"

#define MAX_EVENTS_PER_RANK ((size_t)1 << 20) /* 48 MiB per rank at most */

static bool is_root(const profiling_t *pf) { return pf->grid->world_rank == 0; }

/* ---------------------------------------------------------------- setup */

/* Events one rank records in a step, generously: per micro-batch a forward, a backward, four
 * p2p waits or starts, the data and per layer four tp all-reduces and ZeRO-3 gathers; per step
 * the buckets, the optimizer and the bookkeeping collectives; doubled for validation and
 * checkpoints. */
static size_t event_capacity(const profiling_t *pf, int accum) {
    const config_t *cfg = pf->cfg;
    const double per_step = 2.0 * (accum * (8.0 + 8.0 * cfg->n_layer) + 8.0 * cfg->n_layer + 64);
    const double want = per_step * (double)(pf->last - pf->first + 1);
    return want < (double)MAX_EVENTS_PER_RANK ? (size_t)want : MAX_EVENTS_PER_RANK;
}

/* The median of the offsets to rank 0's clock seen just after 5 barriers (the barrier's exit
 * skew is the error). */
static double offset_by_barriers(void) {
    double est[5];
    for (int i = 0; i < 5; i++) {
        comm_barrier(MPI_COMM_WORLD, "aligning the timeline clocks");
        const double mine = now_sec();
        double root = mine;
        comm_bcast(&root, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, "aligning the timeline clocks");
        est[i] = root - mine;
    }
    for (int i = 1; i < 5; i++) /* insertion sort of five */
        for (int j = i; j > 0 && est[j] < est[j - 1]; j--) {
            double t = est[j];
            est[j] = est[j - 1];
            est[j - 1] = t;
        }
    return est[2];
}

/* Timestamps are now_sec() (CLOCK_MONOTONIC): one clock for all ranks of a node, so a rank on
 * rank 0's host needs no offset. Elsewhere: MPI_Wtime when MPI says it is global (the offset of
 * the two clocks on each rank), else the barrier estimate. Collective. */
static void align_clocks(profiling_t *pf) {
    char host[64] = "", root_host[64];
    gethostname(host, sizeof host - 1);
    memcpy(root_host, host, sizeof host);
    comm_bcast(root_host, (int)sizeof root_host, MPI_CHAR, 0, MPI_COMM_WORLD,
               "aligning the timeline clocks");
    int *global = NULL, found = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &global, &found));
    double wtime_offset = MPI_Wtime() - now_sec(), root_wtime_offset = wtime_offset;
    comm_bcast(&root_wtime_offset, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, "aligning the timeline clocks");
    const double by_barriers = offset_by_barriers();
    if (!strcmp(host, root_host)) {
        pf->clock_offset = 0;
        snprintf(pf->clock_how, sizeof pf->clock_how, "the clock of rank 0's host");
    } else if (found && *global) {
        pf->clock_offset = wtime_offset - root_wtime_offset;
        snprintf(pf->clock_how, sizeof pf->clock_how, "MPI_Wtime (global)");
    } else {
        pf->clock_offset = by_barriers;
        snprintf(pf->clock_how, sizeof pf->clock_how, "offset to rank 0 after barriers");
    }
    pf->t_origin = now_sec();
    comm_bcast(&pf->t_origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, "aligning the timeline clocks");
}

static void setup_counters(profiling_t *pf) {
    const config_t *cfg = pf->cfg;
    pf->papi = cfg->papi_events[0] != '\0';
    if (!pf->papi) return;
    char err[1024] = "", msg[1200];
    const int rc = counters_open(&pf->ctr, &counters_papi, cfg->papi_events, err, sizeof err);
    if (rc != 0) snprintf(msg, sizeof msg, "%s: %s", cfg->source_path, err);
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "checking &log papi_events",
                       rc != 0 ? msg : NULL);
    /* counted on every rank or on none, so the tables and records are alike everywhere */
    int counting = pf->ctr.counting;
    comm_allreduce(&counting, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "checking &log papi_events");
    const bool here = pf->ctr.counting;
    if (!counting) counters_close(&pf->ctr);
    if (is_root(pf) && counting)
        printf("papi: counting %s per phase on every rank (the main thread of each rank)\n",
               cfg->papi_events);
    else if (is_root(pf))
        printf("papi: %s not counted: hardware counters are not available on this machine (%s); "
               "the run goes on without them\n", cfg->papi_events,
               here ? "some ranks cannot count them" : pf->ctr.why);
}

static void setup_energy(profiling_t *pf) {
    char why[sizeof pf->en.why + 32], agreed[COMM_MSG_MAX + 200];
    const bool mine = energy_open(&pf->en, NULL) == 0;
    if (!mine) snprintf(why, sizeof why, "%s", pf->en.why);
    pf->node_leader = comm_node_rank(MPI_COMM_WORLD) == 0;
    const int failed = comm_agree(MPI_COMM_WORLD, "checking the energy counters",
                                  mine ? NULL : why, agreed, sizeof agreed);
    pf->energy = failed == 0;
    if (!pf->energy) pf->en.available = false;
    pf->run_j0 = energy_read_j(&pf->en);
    if (!is_root(pf)) return;
    if (pf->energy)
        printf("energy: RAPL %s per node (%s), read every step%s; GPU (NVML): not built\n",
               pf->en.zones, getenv("LLMT_POWERCAP_ROOT") ? "$LLMT_POWERCAP_ROOT" : "powercap",
               pf->cfg->profile ? " and at every phase boundary" : "");
    else
        printf("energy: not available on this machine (%s); GPU (NVML): not built\n", agreed);
}

void profiling_setup(profiling_t *pf, const config_t *cfg, const grid_t *g, int accum) {
    memset(pf, 0, sizeof *pf);
    pf->cfg = cfg;
    pf->grid = g;
    pf->trace = cfg->profile;
    pf->first = cfg->profile_first > 0 ? cfg->profile_first : 1;
    pf->last = cfg->profile_last > 0 ? cfg->profile_last : cfg->max_steps;
    if (pf->last > cfg->max_steps) pf->last = cfg->max_steps;
    setup_counters(pf);
    setup_energy(pf);
    if (pf->trace) align_clocks(pf);
    prof_config_t pc = {pf->trace && pf->last >= pf->first ? event_capacity(pf, accum) : 0,
                        pf->ctr.counting ? &pf->ctr : NULL,
                        pf->energy && cfg->profile ? &pf->en : NULL};
    prof_start(&pc);
    if (is_root(pf) && pf->trace && pc.capacity == 0)
        printf("profile: &log profile_steps = '%s' starts after max_steps = %d: no timeline\n",
               cfg->profile_steps, cfg->max_steps);
    else if (is_root(pf) && pf->trace)
        printf("profile: timeline of steps %lld..%lld into trace.json (at most %zu events per "
               "rank, %.1f MiB); clocks: %s\n", (long long)pf->first, (long long)pf->last,
               pc.capacity, pc.capacity * sizeof(prof_event_t) / 1048576.0, pf->clock_how);
}

void profiling_destroy(profiling_t *pf) {
    prof_free();
    if (pf->papi) counters_close(&pf->ctr);
}

/* ---------------------------------------------------------------- per step */

void profiling_step_begin(profiling_t *pf, int64_t step) {
    prof_set_step((int32_t)step, pf->trace && step >= pf->first && step <= pf->last);
    memcpy(pf->ctr0, pf->ctr.sum, sizeof pf->ctr0);
    if (pf->energy && pf->node_leader) pf->step_j0 = energy_read_j(&pf->en);
}

void profiling_step_end(profiling_t *pf) {
    char *r = pf->record;
    size_t used = 0;
    r[0] = '\0';
    if (pf->energy) {
        pf->step_j = pf->node_leader ? energy_read_j(&pf->en) - pf->step_j0 : 0.0;
        comm_allreduce(&pf->step_j, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, "energy per step");
        pf->steps_j += pf->step_j;
        used += (size_t)snprintf(r + used, sizeof pf->record - used, ",\"energy_j\":%.9g",
                                 pf->step_j);
    }
    const counters_t *c = &pf->ctr;
    for (int s = 0; c->counting && s < PROF_SLOTS; s++)
        for (int i = 0; i < c->n && used < sizeof pf->record; i++)
            used += (size_t)snprintf(r + used, sizeof pf->record - used, ",\"papi_%s_%s\":%lld",
                                     prof_slot_name(s), c->names[i], c->sum[s][i] - pf->ctr0[s][i]);
}

/* ---------------------------------------------------------------- the timeline */

static void write_event(FILE *f, const profiling_t *pf, const prof_event_t *e) {
    const double ts = (e->t0 + pf->clock_offset - pf->t_origin) * 1e6;
    fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
            "\"dur\":%.3f,\"args\":{\"step\":%d", e->name, prof_phase_name((prof_phase_t)e->phase),
            pf->grid->world_rank, ts, (e->t1 - e->t0) * 1e6, (int)e->step);
    if (e->mb >= 0) fprintf(f, ",\"mb\":%d", (int)e->mb);
    if (e->stage >= 0) fprintf(f, ",\"stage\":%d", (int)e->stage);
    if (e->bytes > 0) fprintf(f, ",\"bytes\":%.0f", e->bytes);
    fprintf(f, "}}\n");
}

/* This rank's metadata and events, one JSON object per line; NULL or the error. */
static const char *write_part(const profiling_t *pf, const char *path, char *err, size_t len) {
    FILE *f = fopen(path, "w");
    if (!f) return errf(err, len, "%s: %s", path, strerror(errno)), err;
    const grid_t *g = pf->grid;
    const int r = g->world_rank;
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d "
            "(dp %d, tp %d, pp %d)\"}}\n", r, r, g->rank_dp, g->rank_tp, g->rank_pp);
    fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\""
            ":%d}}\n", r, r);
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
            "\"rank %d (%s)\"}}\n", r, r, pf->clock_how);
    size_t n, dropped;
    const prof_event_t *ev = prof_events(&n, &dropped);
    for (size_t i = 0; i < n; i++) write_event(f, pf, &ev[i]);
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) return errf(err, len, "%s: %s", path, strerror(errno)), err;
    return NULL;
}

static void part_path(char *out, size_t len, const char *run_dir, int rank) {
    snprintf(out, len, "%s/trace.rank%d.part", run_dir, rank);
}

/* Rank 0: the parts, in rank order, into one JSON document; 0 or -1 with err. */
static int merge_parts(const profiling_t *pf, const char *run_dir, char *err, size_t len) {
    char path[1024], part[1024];
    snprintf(path, sizeof path, "%s/trace.json", run_dir);
    atomic_file_t af;
    if (atomic_file_open(&af, path) != 0) return errf(err, len, "%s: %s", path, strerror(errno));
    fprintf(af.f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"program\":\"llmtrain\","
            "\"steps\":\"%lld:%lld\",\"clock\":\"CLOCK_MONOTONIC, microseconds since setup\"},"
            "\"traceEvents\":[\n", (long long)pf->first, (long long)pf->last);
    char *line = NULL;
    size_t cap = 0;
    bool first = true;
    for (int r = 0; r < pf->grid->world_size; r++) {
        part_path(part, sizeof part, run_dir, r);
        FILE *in = fopen(part, "r");
        if (!in) {
            atomic_file_abort(&af);
            free(line);
            return errf(err, len, "%s: %s", part, strerror(errno));
        }
        for (ssize_t k; (k = getline(&line, &cap, in)) > 0; first = false) {
            if (line[k - 1] == '\n') line[--k] = '\0';
            fprintf(af.f, "%s%s", first ? "" : ",\n", line);
        }
        fclose(in);
    }
    free(line);
    fprintf(af.f, "\n]}\n");
    if (atomic_file_commit(&af) != 0) return errf(err, len, "%s: %s", path, strerror(errno));
    for (int r = 0; r < pf->grid->world_size; r++) {
        part_path(part, sizeof part, run_dir, r);
        unlink(part);
    }
    return 0;
}

/* Collective: every rank's part, then rank 0's merge. A failure is a warning (the training is
 * done and saved; the timeline is a by-product). */
static void write_timeline(profiling_t *pf, const char *run_dir) {
    char part[1024], err[1200], agreed[COMM_MSG_MAX + 200];
    part_path(part, sizeof part, run_dir, pf->grid->world_rank);
    const char *mine = write_part(pf, part, err, sizeof err);
    if (comm_agree(MPI_COMM_WORLD, "writing the timeline", mine, agreed, sizeof agreed) != 0) {
        if (is_root(pf)) fprintf(stderr, "llmtrain: warning: timeline not written: %s\n", agreed);
        return;
    }
    size_t n, dropped;
    prof_events(&n, &dropped);
    double counts[2] = {(double)n, (double)dropped};
    comm_allreduce(counts, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, "writing the timeline");
    if (!is_root(pf)) return;
    if (merge_parts(pf, run_dir, err, sizeof err) != 0) {
        fprintf(stderr, "llmtrain: warning: timeline not written: %s\n", err);
        return;
    }
    printf("profile: wrote %s/trace.json: %.0f events of steps %lld..%lld (chrome://tracing or "
           "ui.perfetto.dev)", run_dir, counts[0], (long long)pf->first, (long long)pf->last);
    if (counts[1] > 0)
        printf("; %.0f events dropped: a rank's buffer was full (narrow &log profile_steps)",
               counts[1]);
    printf("\n");
}

/* ---------------------------------------------------------------- counts and energy */

enum { CT_SLOT_VALUES = 1 + COUNTERS_MAX, CT_N = PROF_SLOTS * CT_SLOT_VALUES };

static void print_counts_row(const profiling_t *pf, int rank, int slot, const double *v) {
    const counters_t *c = &pf->ctr;
    printf("  %4d %-10s %9.3f", rank, prof_slot_name(slot), v[0]);
    for (int i = 0; i < c->n; i++) printf(" %14.4g", v[1 + i]);
    const int ins = counters_find(c, "PAPI_TOT_INS"), cyc = counters_find(c, "PAPI_TOT_CYC");
    int fp = counters_find(c, "PAPI_FP_OPS");
    if (fp < 0) fp = counters_find(c, "PAPI_SP_OPS");
    if (ins >= 0 && cyc >= 0) printf(" %6.2f", v[1 + cyc] > 0 ? v[1 + ins] / v[1 + cyc] : 0.0);
    if (fp >= 0) printf(" %9.2f", v[0] > 0 ? v[1 + fp] / v[0] / 1e9 : 0.0);
    printf("\n");
}

/* Every rank's seconds and counts per phase (gathered to rank 0): a table, and one metrics
 * record per rank. */
static void report_counts(profiling_t *pf, metrics_t *mx, int64_t steps) {
    const counters_t *c = &pf->ctr;
    double mine[CT_N];
    const double *sec = prof_seconds_per_slot();
    for (int s = 0; s < PROF_SLOTS; s++) {
        mine[s * CT_SLOT_VALUES] = sec[s];
        for (int i = 0; i < COUNTERS_MAX; i++)
            mine[s * CT_SLOT_VALUES + 1 + i] = i < c->n ? (double)c->sum[s][i] : 0.0;
    }
    const int W = pf->grid->world_size;
    double *all = is_root(pf) ? xmalloc(sizeof(double) * CT_N * (size_t)W) : NULL;
    comm_gather(mine, CT_N, MPI_DOUBLE, all, 0, MPI_COMM_WORLD, "the counts table");
    if (!is_root(pf)) return;
    printf("counts per phase, summed over %lld steps (seconds exclusive of nested phases):\n"
           "  %4s %-10s %9s", (long long)steps, "rank", "phase", "seconds");
    for (int i = 0; i < c->n; i++) printf(" %14s", c->names[i]);
    if (counters_find(c, "PAPI_TOT_INS") >= 0 && counters_find(c, "PAPI_TOT_CYC") >= 0)
        printf(" %6s", "IPC");
    if (counters_find(c, "PAPI_FP_OPS") >= 0 || counters_find(c, "PAPI_SP_OPS") >= 0)
        printf(" %9s", "GFLOP/s");
    printf("\n");
    for (int r = 0; r < W && r < 16; r++)
        for (int s = 0; s < PROF_SLOTS; s++) print_counts_row(pf, r, s, all + r * CT_N + s * CT_SLOT_VALUES);
    if (W > 16) printf("  ... %d more ranks in metrics.jsonl\n", W - 16);
    for (int r = 0; r < W; r++) {
        char rec[4096];
        size_t used = 0;
        for (int s = 0; s < PROF_SLOTS; s++)
            for (int i = 0; i < c->n && used < sizeof rec; i++)
                used += (size_t)snprintf(rec + used, sizeof rec - used, ",\"papi_%s_%s\":%.0f",
                                         prof_slot_name(s), c->names[i],
                                         all[r * CT_N + s * CT_SLOT_VALUES + 1 + i]);
        metrics_write(mx, "\"step\":%lld,\"papi_totals_rank\":%d%s", (long long)steps, r, rec);
    }
    xfree(all);
}

static void report_energy(profiling_t *pf, metrics_t *mx, int64_t steps) {
    double run_j = pf->node_leader ? energy_read_j(&pf->en) - pf->run_j0 : 0.0;
    comm_allreduce(&run_j, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, "energy of the run");
    if (!is_root(pf)) return;
    const double ci = pf->cfg->carbon_intensity, g = energy_emissions_g(run_j, ci);
    printf("energy: %.4g J in the run (%.4g kWh), %.4g J in %lld steps (%.4g J per step)\n",
           run_j, run_j / 3.6e6, pf->steps_j, (long long)steps, steps ? pf->steps_j / steps : 0.0);
    char rec[1024] = "";
    size_t used = 0;
    if (pf->cfg->profile) {
        const double *j = prof_energy_per_slot();
        printf("energy per phase (rank 0's node while rank 0 was in the phase):");
        for (int s = 0; s < PROF_SLOTS; s++) {
            printf(" %s %.3f J%s", prof_slot_name(s), j[s], s + 1 < PROF_SLOTS ? "," : "\n");
            used += (size_t)snprintf(rec + used, sizeof rec - used, ",\"energy_%s_j\":%.9g",
                                     prof_slot_name(s), j[s]);
        }
    }
    if (ci > 0)
        printf("emissions: %.4g g CO2 (%.4g kWh at &log carbon_intensity = %g gCO2/kWh)\n", g,
               run_j / 3.6e6, ci);
    else
        printf("emissions: not reported (&log carbon_intensity = 0)\n");
    metrics_write(mx, "\"step\":%lld,\"energy_run_j\":%.9g,\"energy_steps_j\":%.9g,"
                  "\"carbon_intensity\":%g,\"emissions_g\":%.9g%s", (long long)steps, run_j,
                  pf->steps_j, ci, ci > 0 ? g : 0.0, rec);
}

void profiling_finish(profiling_t *pf, const char *run_dir, metrics_t *mx, int64_t steps) {
    prof_stop();
    if (pf->trace && pf->last >= pf->first) write_timeline(pf, run_dir);
    if (pf->ctr.counting) report_counts(pf, mx, steps);
    if (pf->energy) report_energy(pf, mx, steps);
}
