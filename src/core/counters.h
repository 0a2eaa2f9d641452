/* counters.h — hardware event counts (instructions, cycles, FLOPs, ...) per phase of a step,
 * behind a small table of functions so the library is replaceable: counters_papi is PAPI,
 * and a unit test drives the same logic with a mock.
 * A counter set is opened from &log papi_events ('PAPI_TOT_INS,PAPI_TOT_CYC'): names the
 * library does not know are an error listing what this machine offers; known events that this
 * machine cannot count (no PMU exposed, e.g. in a VM) leave the set open but not counting, with
 * the reason in `why`, and the run goes on. counters_charge adds the counts since its previous
 * call to one slot (core/prof.c calls it at every phase boundary).
 * Owns: the event list, the per-slot sums. Uses: core/error; PAPI in counters_papi.c. */
#ifndef LLMT_COUNTERS_H
#define LLMT_COUNTERS_H
#include <stdbool.h>
#include <stddef.h>

#define COUNTERS_MAX 8        /* events per set */
#define COUNTERS_SLOTS 8      /* phases a count can go to */
#define COUNTERS_NAME_MAX 64

typedef struct counters_backend {
    const char *name;
    /* Start the library: 0, or -1 with the reason in why (the set then does not count). */
    int (*init)(char *why, size_t len);
    /* 0 and the library's code of an event name, or -1 when the library knows no such event. */
    int (*lookup)(const char *event, int *code);
    /* The event names this machine can count, comma-separated ("" when none), into out. */
    void (*list_available)(char *out, size_t len);
    /* Start counting n events: 0, or -1 with the reason this machine cannot count them. */
    int (*start)(const int *codes, int n, char *why, size_t len);
    /* The running totals since start, one per event. */
    void (*read)(long long *values);
    void (*stop)(void);
} counters_backend_t;

typedef struct counters {
    const counters_backend_t *be;
    int n;
    char names[COUNTERS_MAX][COUNTERS_NAME_MAX];
    int codes[COUNTERS_MAX];
    bool counting;     /* false: known events this machine cannot count (see why) */
    char why[512];
    long long last[COUNTERS_MAX];
    long long sum[COUNTERS_SLOTS][COUNTERS_MAX]; /* counts per slot since open */
} counters_t;

/* Parse the comma-separated `list` and open the set. 0 (c->counting says whether it counts), or
 * -1 with a message in err for a malformed list or an unknown name, e.g. "unknown event
 * 'PAPI_FOO'; this machine offers: PAPI_TOT_INS, ..." (c is then closed). */
int counters_open(counters_t *c, const counters_backend_t *be, const char *list, char *err,
                  size_t errlen);
/* Read the counters and add what was counted since the previous read to sum[slot]. */
void counters_charge(counters_t *c, int slot);
/* Index of an event name in the set, or -1. */
int counters_find(const counters_t *c, const char *name);
void counters_close(counters_t *c);

/* PAPI (libpapi). */
extern const counters_backend_t counters_papi;
#endif
