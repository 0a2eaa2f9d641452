/* stop_signals.c — the SIGUSR1 / SIGTERM flag and the one thread that takes the stop signals
 * (see stop_signals.h). */
#include "train/stop_signals.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/thread.h"
#include "parallel/comm_host.h"

/* ---------------------------------------------------------------- stop signals */

/* Set by the handler on whichever thread took the signal, read by the main thread: a lock-free
 * atomic (async-signal-safe), not a volatile. */
static atomic_int stop_signal = 0;

/* The thread that installed the handlers (main), which the SIGTERM handler wakes. */
static pthread_t main_thread;

/* After SIGTERM the launcher may stop reading our output: Open MPI's mpirun does as soon as it is
 * told to terminate, and a rank whose next step line meets a full pipe would block there until
 * it is killed, its checkpoint unwritten. So stdout and stderr stop blocking (fcntl is
 * async-signal-safe): a line nobody reads any more is dropped, the checkpoint and
 * metrics.jsonl (files) are complete. A write already blocked on the pipe does not see the flag:
 * the main thread gets SIGURG (pthread_kill is async-signal-safe), whose empty handler, installed
 * without SA_RESTART, ends that write with EINTR. SIGUSR1 leaves the output alone: mpirun
 * forwards it and goes on reading. */
static void on_stop_signal(int sig) {
    int saved = errno;
    atomic_store_explicit(&stop_signal, sig, memory_order_relaxed);
    if (sig == SIGTERM) {
        for (int fd = 1; fd <= 2; fd++) {
            int flags = fcntl(fd, F_GETFL);
            if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        }
        pthread_kill(main_thread, SIGURG);
    }
    errno = saved;
}

static void on_wake(int sig) { (void)sig; }

static void stop_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGTERM);
}

/* The one thread that takes the stop signals: it only waits, so the handler's frame lands on a
 * stack nobody computes on. */
static void *signal_thread_main(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

/* The main thread's alternate signal stack, for SIGURG: a wake-up may arrive in a GEMM. */
static void main_thread_signal_stack(void) {
    static char *stack;
    long size = 64 * 1024;
#ifdef _SC_SIGSTKSZ
    const long need = sysconf(_SC_SIGSTKSZ); /* AVX-512 / AMX state makes frames large */
    if (need > size / 4) size = 4 * need;
#endif
    if (!stack) stack = xrealloc_small(NULL, (size_t)size);
    stack_t ss = {.ss_sp = stack, .ss_size = (size_t)size, .ss_flags = 0};
    SYS_CHECK(sigaltstack(&ss, NULL));
}

/* A signal handler must not run on a thread's own stack while that thread is inside a GEMM. The
 * kernel writes the signal frame just below the interrupted stack pointer (past the 128-byte
 * red zone), and oneDNN 2.6's JIT sgemm keeps live data there: a SIGUSR1 arriving mid-product
 * corrupted the heap ("corrupted size vs. prev_size": the rank aborted with 134 instead of
 * checkpointing, 2 runs in 8 of run_directory.sh, and within seconds under a signal storm,
 * validation/unit/test_stop_signals.c). So the main thread blocks the stop signals before it
 * starts any thread (OpenMP workers, the watchdog, the heartbeat inherit the mask, also those
 * the OpenMP runtime creates later) and one idle thread takes them instead (threads Open MPI
 * started inside MPI_Init may take them too: they never run a GEMM). The one signal the main
 * thread takes, SIGURG (a wake-up from that handler), runs on its alternate stack. */
void stop_signals_install(void) {
    main_thread = pthread_self();
    main_thread_signal_stack();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_wake;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK; /* no SA_RESTART: the point is the EINTR */
    SYS_CHECK(sigaction(SIGURG, &sa, NULL));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    SYS_CHECK(sigaction(SIGUSR1, &sa, NULL));
    SYS_CHECK(sigaction(SIGTERM, &sa, NULL));
    /* A file-size limit (ulimit -f) makes write() fail with EFBIG, which a save reports and
     * survives; the default action of SIGXFSZ would kill the rank instead. */
    signal(SIGXFSZ, SIG_IGN);
    sigset_t stop, takes;
    stop_set(&stop);
    PTHREAD_CHECK(pthread_sigmask(SIG_BLOCK, &stop, &takes));
    sigdelset(&takes, SIGUSR1); /* the caller's mask, the stop signals open */
    sigdelset(&takes, SIGTERM);
    static pthread_t signal_thread; /* never joined: it waits until the process ends */
    thread_start_masked(&signal_thread, signal_thread_main, NULL, &takes, "stop-signal thread");
}

int stop_signal_received(void) { return atomic_load_explicit(&stop_signal, memory_order_relaxed); }

int stop_pending(MPI_Comm world, int also) {
    const int got = stop_signal_received();
    int sig = got > also ? got : also;
    comm_allreduce(&sig, 1, MPI_INT, MPI_MAX, world, "stop-signal check");
    return sig;
}

int stop_signal_pending(MPI_Comm world) { return stop_pending(world, 0); }
