/* profiling.h — what the phase seam (core/prof.h) measured, for the run: the timeline
 * <run dir>/trace.json (&log profile, profile_steps), hardware counts per phase (&log
 * papi_events) and energy per step, phase and run (RAPL; &log carbon_intensity for the
 * emissions). Setup agrees on the event names over all ranks and says once at startup what is
 * measured and what is not here, and why; per step it gives log_step the step record's members;
 * at the end it merges the timeline and prints the counts and energy tables.
 * The timeline: every rank writes its events to <run dir>/trace.rank<R>.part and rank 0 merges
 * them into trace.json (then removes the parts). Chosen over gathering the events by MPI because
 * rank 0 then holds one rank's events at a time, not all of them, and a rank's part stays on
 * disk for a post-mortem when the merge never happens; the run directory is on a file system all
 * ranks see anyway (checkpoints are written there collectively).
 * Owns: the counter set, the energy counters, the clock offset to rank 0. Uses: core/prof,
 * core/counters, core/energy, parallel/comm, io/metrics, config/. Used by: train/trainer. */
#ifndef LLMT_PROFILING_H
#define LLMT_PROFILING_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"
#include "core/counters.h"
#include "core/energy.h"
#include "io/metrics.h"
#include "parallel/grid.h"

typedef struct profiling {
    const config_t *cfg;
    const grid_t *grid;
    bool trace;                /* &log profile */
    int64_t first, last;       /* steps in the timeline (inclusive) */
    bool papi;                 /* &log papi_events set */
    counters_t ctr;
    bool energy;               /* every rank can read its node's energy counters */
    bool node_leader;          /* the node's first rank: counts its node's joules in totals */
    energy_t en;
    double clock_offset;       /* add to now_sec() for rank 0's clock */
    char clock_how[64];
    double t_origin;           /* rank 0's clock at setup: ts 0 of the timeline */
    double run_j0, step_j0;    /* node joules at setup / at the step's start (node leaders) */
    double step_j, steps_j;    /* joules of all nodes: the last step, all steps so far */
    long long ctr0[COUNTERS_SLOTS][COUNTERS_MAX]; /* counts at the step's start */
    char record[4096];         /* the step record's members from here (",\"energy_j\":...") */
} profiling_t;

/* Collective. Unknown papi event names end the run (exit 2, one message); counters or energy
 * that this machine lacks are said once and the run goes on. accum and n_layer size the event
 * buffer (allocated here, never during a step). */
void profiling_setup(profiling_t *pf, const config_t *cfg, const grid_t *g, int accum);
/* Before step `step` (1-based) on every rank. */
void profiling_step_begin(profiling_t *pf, int64_t step);
/* After it, on every rank (collective when energy is measured); fills pf->record. */
void profiling_step_end(profiling_t *pf);
/* End of run, collective: trace.json, the counts table, energy and emissions, their metrics
 * records (rank 0 writes mx). */
void profiling_finish(profiling_t *pf, const char *run_dir, metrics_t *mx, int64_t steps);
void profiling_destroy(profiling_t *pf);
#endif
