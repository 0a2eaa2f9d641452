/* prof.c — the phase seam (see prof.h). */
#include "core/prof.h"
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/timer.h"

bool prof_armed_;

typedef struct frame {
    prof_phase_t phase;
    const char *name;
    int mb, stage;
    double t0;
} frame_t;

static struct {
    bool tracing;
    int32_t step;
    prof_event_t *ev;
    size_t n, cap, dropped;
    frame_t stack[PROF_DEPTH];
    int depth, too_deep;  /* frames beyond PROF_DEPTH are not kept (counted instead) */
    counters_t *counters;
    energy_t *energy;
    double joules_last;
    double joules[PROF_SLOTS];
    double t_last, seconds[PROF_SLOTS];
} P;

const char *prof_phase_name(prof_phase_t p) {
    static const char *names[PROF_PHASES] = {"step", "data", "forward", "backward", "optimizer",
                                              "comm", "checkpoint"};
    return names[p];
}

const char *prof_slot_name(int slot) {
    return slot == PROF_SLOT_OTHER ? "other" : prof_phase_name((prof_phase_t)slot);
}

void prof_start(const prof_config_t *pc) {
    prof_free();
    P.cap = pc->capacity;
    P.ev = P.cap ? xmalloc(P.cap * sizeof *P.ev) : NULL;
    P.counters = pc->counters;
    P.energy = pc->energy;
    if (P.energy) P.joules_last = energy_read_j(P.energy);
    P.t_last = now_sec();
    prof_armed_ = P.cap > 0 || P.counters || P.energy;
}

void prof_set_step(int32_t step, bool tracing) {
    P.step = step;
    P.tracing = tracing && P.cap > 0;
}

void prof_stop(void) {
    prof_armed_ = false;
    P.tracing = false;
}

void prof_free(void) {
    prof_stop();
    xfree(P.ev);
    memset(&P, 0, sizeof P);
}

const prof_event_t *prof_events(size_t *n, size_t *dropped) {
    *n = P.n;
    *dropped = P.dropped;
    return P.ev;
}

const double *prof_energy_per_slot(void) { return P.joules; }
const double *prof_seconds_per_slot(void) { return P.seconds; }

/* The counts and joules since the previous boundary go to the phase running until now. */
static void charge_running_phase(void) {
    const int slot = P.depth > 0 ? (int)P.stack[P.depth - 1].phase : PROF_SLOT_OTHER;
    const double t = now_sec();
    P.seconds[slot] += t - P.t_last;
    P.t_last = t;
    if (P.counters) counters_charge(P.counters, slot);
    if (P.energy) {
        const double j = energy_read_j(P.energy);
        P.joules[slot] += j - P.joules_last;
        P.joules_last = j;
    }
}

void prof_begin_(prof_phase_t phase, const char *name, int mb, int stage) {
    if (P.depth + P.too_deep >= PROF_DEPTH) {
        P.too_deep++;
        return;
    }
    charge_running_phase();
    P.stack[P.depth++] = (frame_t){phase, name, mb, stage, now_sec()};
}

void prof_end_(prof_phase_t phase, double bytes) {
    if (P.too_deep > 0) {
        P.too_deep--;
        return;
    }
    ASSERT(P.depth > 0 && P.stack[P.depth - 1].phase == phase); /* begin/end pairs match */
    const double t1 = now_sec();
    charge_running_phase();
    const frame_t *f = &P.stack[--P.depth];
    if (!P.tracing) return;
    if (P.n == P.cap) {
        P.dropped++;
        return;
    }
    P.ev[P.n++] = (prof_event_t){f->t0, t1, bytes, f->name, P.step, f->mb, (int16_t)f->stage,
                                 (int16_t)phase};
}
