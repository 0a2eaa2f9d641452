/* watchdog.h — turns a hang into an error: a blocking MPI wait (collective or point-to-point)
 * that lasts longer than timeout_s ends the job with one message naming the phase, the step
 * and the peers waited on, instead of hanging until the scheduler's time limit.
 * Owns: one background thread and the record of the wait in progress. Uses: pthreads, MPI (only
 * in watchdog_group_peers, from the main thread), core/. Used by: parallel/comm.c, train/, io/.
 *
 * The main thread marks each blocking wait with watchdog_enter(phase, peers) right before it
 * and watchdog_leave() right after. Both are cheap enough for thousands of calls per step: a
 * coarse monotonic clock read, a bounded copy into a fixed buffer and a few atomic stores (a
 * seqlock; no allocation, no lock, no system call). The watchdog thread polls the record a few
 * times per second; when the wait in progress is older than its timeout it writes
 *   llmtrain: watchdog: rank 3 waited 61.2 s in 'dp all-reduce' at step 17 for dp group ranks
 *   1,3,5,7 (timeout_s = 60): a peer is dead or hung; ending the job
 * to stderr and ends the process with _exit(LLMT_EXIT_HANG); the launcher then ends the other
 * ranks. Before that it runs the hang hook, if the environment has one at watchdog_start:
 * LLMT_HANG_HOOK, a command for /bin/sh -c, with LLMT_HANG_RANK = the world rank, waited for at
 * most LLMT_HANG_HOOK_S seconds (default 60; then SIGKILLed). jobscripts/elastic.sbatch uses it
 * to requeue the job when the node of its batch script died (docs/cluster.md). The thread never calls MPI (of llmtrain's threads only the main thread and the
 * background checkpoint writer do, the latter unwatched: comm_thread_unwatched).
 *
 * One writer: only the thread that called watchdog_start (the main thread) may call
 * enter/leave/set_step. Waits nest: an enter inside a wait in progress (a collective inside a
 * checkpoint write) is counted but the outer wait stays the one watched, with its phase and
 * timeout, until the matching outermost leave. */
#ifndef LLMT_WATCHDOG_H
#define LLMT_WATCHDOG_H
#include <mpi.h>
#include <stddef.h>

#define LLMT_EXIT_HANG 4 /* the watchdog ended the job: a wait exceeded its timeout */

#define WATCHDOG_PHASE_LEN 64  /* longer phase / peers texts are cut (with "...") */
#define WATCHDOG_PEERS_LEN 128

/* Start the watchdog thread with the default timeout of every wait. timeout_s <= 0 disables
 * it (enter/leave stay valid and cheap). world_rank is only used in the message. */
void watchdog_start(double timeout_s, int world_rank);
/* Change the default timeout (main starts the watchdog before the namelist is read, with the
 * startup timeout, then sets the namelist's &checkpoint timeout_s). Waits that start later use
 * it; <= 0 disables the default. */
void watchdog_set_timeout(double timeout_s);
/* Stop and join the thread (promptly, not after a poll period). Safe when not started. */
void watchdog_stop(void);
/* The training step the message will name (before the first call: "at startup"). */
void watchdog_set_step(long step);
/* A blocking wait starts / ends. phase: "dp all-reduce", "p2p recv from stage 2", ...;
 * peers: "dp group ranks 0,2,4,6", "rank 5", ... Both are copied (the caller's buffers may
 * change afterwards). */
void watchdog_enter(const char *phase, const char *peers);
void watchdog_leave(void);
/* The same with a timeout for this wait only (e.g. a checkpoint write, which may legitimately
 * take longer than one all-reduce); timeout_s <= 0 means this wait is never timed out. */
void watchdog_enter_for(const char *phase, const char *peers, double timeout_s);

/* Describe the members of `comm` by their ranks in `world` for the peers text:
 * "<label> ranks 1,3,5,7" (long lists shortened: "<label> ranks 0,2,4,...,62 (32 ranks)").
 * Collective-free (local MPI group calls only); call it once at setup, not per wait. */
void watchdog_group_peers(MPI_Comm comm, MPI_Comm world, const char *label, char *buf,
                          size_t len);
/* The same text for `comm` against MPI_COMM_WORLD, computed on the first call for that
 * communicator and kept in a fixed table (32 communicators; no allocation), so comm.c can
 * name the peers of every wait: watchdog_enter("dp all-reduce", watchdog_peers_of(c, "dp group")).
 * After ~10 ns lookups. Main thread only. The table keys on the handle: call
 * watchdog_forget_peers() when communicators are freed and new ones created (grid_destroy). */
const char *watchdog_peers_of(MPI_Comm comm, const char *label);
void watchdog_forget_peers(void);
/* The text itself, from a list of world ranks (pure; for tests and for callers that already
 * hold the list). */
void watchdog_format_ranks(const int *ranks, int n, const char *label, char *buf, size_t len);
#endif
