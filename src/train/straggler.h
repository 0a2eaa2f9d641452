/* straggler.h — naming a straggler: the rank whose busy time stands out from its peers' for
 * several steps in a row (a slow node, a CPU-hungry neighbour, a throttled core).
 *
 * What is compared: each rank's busy time of a step, its wall time minus the time it spent
 * waiting in collectives and point-to-point transfers (parallel/comm.h's per-step split). A
 * slow rank makes the others wait, so the step's wall time is the same on every rank and says
 * nothing about who was slow; the busy time does: the slow rank's grows, the others' waits grow
 * instead. Each rank is compared with its peers, the ranks that do the same work (the same
 * pipeline stage: its dp and tp ranks run the same layers on batches of the same size); where a
 * stage has one rank (pp = world size) every other rank is a peer, which is only as good as the
 * stages are balanced. A step's ratio for a rank is its busy time over the median of its peers'
 * (the others of the group: with two peers, the slow one is compared with the fast one).
 *
 * Persistence: the first STRAGGLER_WARMUP steps of a start are not judged (their one-time costs,
 * page faults and library warm-up, differ between ranks: a healthy 4-rank run saw 1.9 there);
 * after them a rank is named when the median of its last STRAGGLER_WINDOW step ratios (a full
 * window) reaches the threshold (&log straggler_ratio). A median of 5 needs the rank slow in 3
 * of the last 5 steps: one or two bad steps (a process descheduled on shared cores, a
 * rollback's reload) never name anyone, and a rank slowed from some step on is named at most 3
 * steps later (at the earliest at step WARMUP + WINDOW = 7 of a start).
 * Floor: the rank's excess busy time over its peers' median (the time they wait for it, per
 * step), as the median over the same window, must also reach STRAGGLER_MIN_EXCESS_S. On shared,
 * oversubscribed cores the scheduler's slices (a few ms) made healthy 6 ms steps of a 4-rank run
 * reach a ratio of 2.1; a rank that costs the others less than 10 ms a step is not worth a
 * warning, and real steps (0.1 s and more) are far above the floor.
 *
 * Pure functions on a small state struct, unit-tested (validation/unit/test_straggler.c); the
 * trainer gathers the busy times (one all-gather of a double per step) and reports.
 * Owns: the window of ratios. Uses: core/alloc. Used by: train/trainer_report.c. */
#ifndef LLMT_STRAGGLER_H
#define LLMT_STRAGGLER_H
#include <stdbool.h>
#include <stddef.h>

#define STRAGGLER_WARMUP 2 /* the first steps of a start, not judged */
#define STRAGGLER_WINDOW 5 /* steps whose median ratio decides (a full window) */
#define STRAGGLER_MIN_EXCESS_S 0.010 /* seconds a step the others wait for it, at least */

typedef struct straggler {
    int n;              /* ranks */
    double threshold;   /* &log straggler_ratio; 0 = off */
    int *group;         /* [n] each rank's peer group (0 .. n-1) */
    double *ratio;      /* [STRAGGLER_WINDOW][n]: the last steps' ratios, a ring */
    double *excess;     /* [STRAGGLER_WINDOW][n]: busy time less the peers' median, a ring */
    struct straggler_entry *scratch; /* [n] */
    unsigned char *warned; /* [n]: named before (the warning is said once per rank) */
    long pushed;        /* steps pushed, warm-up included */
    long steps;         /* steps judged (after the warm-up) */
    /* the verdict of the last step pushed */
    int rank;           /* the rank named, or -1 */
    double value;       /* its windowed ratio */
    int worst_rank;     /* the largest windowed ratio, named or not (-1 before a full window) */
    double worst_excess; /* its windowed excess (seconds) */
    double worst;
    /* over the run: the largest windowed ratio seen, for the end-of-run line */
    int max_rank;
    double max_seen;
    double max_excess;  /* its windowed excess (seconds) */
    long max_step;      /* the push (1-based, warm-up included) that saw it */
} straggler_t;

/* group[n]: ranks with the same value are peers; when some group has one rank only, all ranks
 * are one group (see above). threshold 0 (or n < 2) = off: straggler_push names nobody. */
void straggler_init(straggler_t *s, int n, const int *group, double threshold);
void straggler_destroy(straggler_t *s);
/* One step's ratios: ratio[r] = busy[r] / the median of busy over r's peers (group[r] equal,
 * r excluded); 1 where r has no peer or that median is not positive (no evidence); and, when
 * excess is not NULL, excess[r] = busy[r] less that median (0 without peers). O(n log n):
 * each group sorted once, the median without one element read off the sorted order. */
typedef struct straggler_entry {
    int group, rank;
    double busy;
} straggler_entry_t;
void straggler_ratios(const double *busy, const int *group, int n, double *ratio, double *excess,
                      straggler_entry_t *scratch);
/* Push one step's busy times (seconds, [n], the same on every rank): updates the verdict and
 * returns the rank named (the largest windowed ratio at or above the threshold whose windowed
 * excess reaches the floor), or -1. */
int straggler_push(straggler_t *s, const double *busy);
/* Whether rank r is named for the first time (then it is remembered: true once per rank). */
bool straggler_first_time(straggler_t *s, int r);
/* The median of x[n] (sorted in place); 0 for n = 0. */
double straggler_median(double *x, int n);
/* Rank `rank`'s field of a comma-joined list ("n1,n1,n2,n2": the provenance's rank_hosts), the
 * part before its first '.' (a short host name), into out; "?" when the list has no such field. */
void straggler_host_of(const char *joined, int rank, char *out, size_t len);

/* ---- slow links (parallel/linkprobe.h measures each node's time, its faster ring edge) ------
 * A probe's node ratio is the node's time over the median of the other nodes'; the largest ratio
 * is picked when it reaches the threshold and the node's excess over that median reaches
 * LINK_MIN_EXCESS_S (exchanges of a few hundred KiB take milliseconds; a loaded host's jitter is
 * below that). A node is named when two probes in a row pick it: one slow probe (a burst of other
 * traffic) names nobody. Off (names nobody) below three nodes or with threshold 0. */
#define LINK_MIN_EXCESS_S 0.002
typedef struct link_watch {
    int n;                  /* nodes */
    double threshold;       /* &log straggler_ratio */
    int prev;               /* the node the previous probe picked, or -1 */
    long probes;
    /* the last probe: the node with the largest ratio, picked or not, and the node named (-1) */
    int worst, node;
    double worst_ratio, worst_s, median_s;
    /* over the run */
    int max_node;
    double max_ratio;
    unsigned char *warned;  /* [n]: named before */
} link_watch_t;
void link_watch_init(link_watch_t *w, int n_nodes, double threshold);
void link_watch_destroy(link_watch_t *w);
/* One probe's node times (seconds, [n]): returns the node named, or -1. */
int link_watch_push(link_watch_t *w, const double *node_s);
/* Whether node k is named for the first time (then remembered). */
bool link_watch_first_time(link_watch_t *w, int k);
#endif
