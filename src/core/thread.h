/* thread.h — the one way llmtrain starts a helper thread (the watchdog, the run directory's
 * heartbeat, the stop-signal thread, the offloaded optimizer): with the signal mask the caller asks for, so which thread
 * may take a signal is decided where the thread is made. Owns nothing. Uses: pthreads, core/error.
 * Used by: parallel/watchdog, train/rundir, train/checkpointing, train/optimizer. */
#ifndef LLMT_THREAD_H
#define LLMT_THREAD_H
#include <pthread.h>
#include <signal.h>

/* Start fn(arg) on a new thread whose signal mask is `mask` (the caller's own mask is left as
 * it was); dies with the error convention, naming `what`, if the thread cannot be made. */
void thread_start_masked(pthread_t *thread, void *(*fn)(void *), void *arg, const sigset_t *mask,
                         const char *what);
#endif
