/* stop_signals.h — SIGUSR1 / SIGTERM (and the time limit's reason to stop): the flag the handler
 * sets, the one idle thread that takes the signals, and the collective check at a step boundary.
 * Owns: the flag and that thread. Uses: core/thread, parallel/comm_host. Used by:
 * train/checkpointing (its users include it from there), main. */
#ifndef LLMT_STOP_SIGNALS_H
#define LLMT_STOP_SIGNALS_H
#include <mpi.h>

/* SIGUSR1 / SIGTERM: remembered from the moment main installs the handlers (setup included),
 * acted on at the next step boundary by every rank together. Call before any thread is
 * started: the calling thread, and every thread it starts from then on, block the two signals,
 * and one idle thread takes them (a handler must never interrupt a GEMM; see the .c). A
 * program it runs (popen) inherits them blocked. */
void stop_signals_install(void);
/* The stop signal this process has received (SIGUSR1 / SIGTERM), 0 if none; not collective. */
int stop_signal_received(void);
/* Collective (watched): whether any rank received a stop signal (and which). 0 if none. */
int stop_signal_pending(MPI_Comm world);
/* The same check with another reason to stop from this rank (STOP_TIME_LIMIT, or 0): the
 * largest reason of any rank wins, and every rank gets it. */
#define STOP_TIME_LIMIT 1000
int stop_pending(MPI_Comm world, int also);
#endif
