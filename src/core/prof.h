/* prof.h — the one phase-instrumentation seam of llmtrain. prof_begin / prof_end bracket every
 * phase of a step: the step itself, data loading, forward and backward of each micro-batch on
 * its pipeline stage, each collective and each wait (parallel/comm.c), the optimizer and the
 * checkpoint I/O. From the same calls come three things:
 *   - timeline events ("X" events of trace.json; train/profiling.c merges and writes them),
 *   - hardware counts per phase (core/counters.h: the counts since the previous boundary go to
 *     the phase that was running, so nested phases are counted exclusively),
 *   - energy per phase (core/energy.h, read at the same boundaries).
 * Off (the default) each call is one test of a flag; on, nothing is allocated: events go into a
 * buffer preallocated by prof_start, and when it is full further events are counted as dropped.
 * Owns: the phase stack and this process's event buffer. One per process, like comm.c's
 * statistics (a rank is one process, and the calls come from layers that share no context).
 * Uses: core/counters, core/energy, core/timer. Used by: parallel/comm, train/. */
#ifndef LLMT_PROF_H
#define LLMT_PROF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/counters.h"
#include "core/energy.h"

typedef enum {
    PROF_STEP, PROF_DATA, PROF_FORWARD, PROF_BACKWARD, PROF_OPTIMIZER, PROF_COMM,
    PROF_CHECKPOINT, PROF_PHASES
} prof_phase_t;

/* Where counts and joules go: a phase's own slot; the step's time outside its sub-phases and
 * everything outside a step go to PROF_SLOT_OTHER. */
enum { PROF_SLOT_OTHER = PROF_STEP, PROF_SLOTS = PROF_PHASES };
const char *prof_slot_name(int slot); /* "other", "data", "forward", ..., "checkpoint" */
const char *prof_phase_name(prof_phase_t p); /* "step", "data", "forward", ... */

typedef struct prof_event {
    double t0, t1;      /* now_sec() of begin and end (this process's clock) */
    double bytes;       /* payload of a transfer (0 when none) */
    const char *name;   /* a string literal: "forward", "tp all-reduce", "stop-signal check" */
    int32_t step;       /* the step being taken (1-based) */
    int32_t mb;         /* micro-batch, -1 when none */
    int16_t stage;      /* pipeline stage, -1 when none */
    int16_t phase;      /* prof_phase_t */
} prof_event_t;

#define PROF_DEPTH 8 /* deepest nesting: step > backward > tp all-reduce, with room */

/* What is recorded; prof_begin/prof_end do nothing while all three are off. */
typedef struct prof_config {
    size_t capacity;      /* events the buffer holds (0: no timeline) */
    counters_t *counters; /* counting counters, or NULL */
    energy_t *energy;     /* available energy counters read at every boundary, or NULL */
} prof_config_t;

/* Allocates the event buffer (the only allocation) and arms the seam; tracing of events starts
 * with prof_set_tracing(true). */
void prof_start(const prof_config_t *pc);
/* Events recorded from now on (the &log profile_steps window), tagged with `step`. */
void prof_set_step(int32_t step, bool tracing);
/* Disarms the seam (the buffer stays readable until prof_free). */
void prof_stop(void);
void prof_free(void);

/* The recorded events, and how many did not fit. */
const prof_event_t *prof_events(size_t *n, size_t *dropped);
/* Joules per slot so far (all zeros without energy per phase). */
const double *prof_energy_per_slot(void);
/* Seconds per slot since prof_start (exclusive of nested phases, like the counts). */
const double *prof_seconds_per_slot(void);

extern bool prof_armed_; /* read by the inline fast path only */
void prof_begin_(prof_phase_t phase, const char *name, int mb, int stage);
void prof_end_(prof_phase_t phase, double bytes);

/* Begin a phase: `name` must be a string literal (it is stored, not copied); mb / stage -1 when
 * they do not apply. Phases nest; every prof_begin has its prof_end with the same phase. */
static inline void prof_begin(prof_phase_t phase, const char *name, int mb, int stage) {
    if (prof_armed_) prof_begin_(phase, name, mb, stage);
}
/* End the innermost phase (which must be `phase`); bytes: payload of a transfer, else 0. */
static inline void prof_end(prof_phase_t phase, double bytes) {
    if (prof_armed_) prof_end_(phase, bytes);
}
#endif
