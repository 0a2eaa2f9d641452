/* watchdog.c — a background thread that ends the job when a blocking wait hangs (see watchdog.h).
 *
 * The wait in progress is one record written by the main thread and read by the watchdog
 * thread through a seqlock: the writer makes the sequence number odd, stores the fields, makes
 * it even again; the reader copies the fields and keeps the copy only when the number was even
 * and unchanged around the copy. Every field is an atomic accessed with relaxed order between
 * the fences (Boehm's seqlock recipe), so the race is defined C11 and costs plain moves on x86. */
#include "parallel/watchdog.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/thread.h"

#define TEXT_WORDS ((WATCHDOG_PHASE_LEN + WATCHDOG_PEERS_LEN) / 8)
#define PEERS_WORD (WATCHDOG_PHASE_LEN / 8) /* the peers text starts at this word */

static struct {
    atomic_uint seq;                /* odd while the main thread writes the record */
    atomic_int active;              /* a wait is in progress */
    atomic_llong t_enter_ns;        /* when it started (coarse monotonic clock) */
    atomic_llong timeout_ns;        /* its timeout; <= 0: never */
    atomic_uint_least64_t text[TEXT_WORDS]; /* phase then peers, NUL-terminated */
    atomic_long step;
} rec = {.step = -1};

static struct {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    bool running;                   /* under mutex */
    bool started;                   /* main thread only */
    long long default_timeout_ns;   /* main thread only */
    atomic_llong poll_ns;           /* written by the main thread (set_timeout), read by the dog */
    int world_rank;
    int depth;                      /* main thread only: nesting of enter/leave pairs */
} dog = {.mutex = PTHREAD_MUTEX_INITIALIZER};

extern char **environ;

/* The hang hook (LLMT_HANG_HOOK), prepared by watchdog_start so that fire() only spawns and
 * waits: the command, the environment it gets (this process's, plus LLMT_HANG_RANK), and how
 * long fire() waits for it (LLMT_HANG_HOOK_S). */
static struct {
    char *cmd;      /* NULL: no hook */
    char **env;
    char *rank_var; /* "LLMT_HANG_RANK=r", the one string of env allocated here */
    long long limit_ns;
} hook;

/* A coarse clock is a plain memory read in the vDSO (no system call even where the clock
 * source makes CLOCK_MONOTONIC one); its few-millisecond resolution is ample for timeouts. */
static inline long long coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the writer side (main thread, hot path) ------------------------------------------------- */

static inline void seq_begin(void) {
    unsigned s = atomic_load_explicit(&rec.seq, memory_order_relaxed);
    atomic_store_explicit(&rec.seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static inline void seq_end(void) {
    unsigned s = atomic_load_explicit(&rec.seq, memory_order_relaxed);
    atomic_store_explicit(&rec.seq, s + 1, memory_order_release);
}

/* Copy at most cap-1 bytes of src into dst (cut texts end in "...") and store them as words.
 * Only the words up to the terminating NUL are stored. */
static inline void store_text(int word0, int cap, const char *src) {
    union {
        char c[WATCHDOG_PEERS_LEN];
        uint64_t w[WATCHDOG_PEERS_LEN / 8];
    } buf;
    int i = 0;
    if (src)
        for (; i < cap - 1 && src[i]; i++) buf.c[i] = src[i];
    if (src && src[i] != '\0' && i == cap - 1) memcpy(buf.c + cap - 4, "...", 3);
    buf.c[i] = '\0';
    for (int w = 0; w <= i / 8; w++)
        atomic_store_explicit(&rec.text[word0 + w], buf.w[w], memory_order_relaxed);
}

static inline void record_wait(const char *phase, const char *peers, long long timeout_ns) {
    long long t0 = coarse_ns();
    seq_begin();
    atomic_store_explicit(&rec.t_enter_ns, t0, memory_order_relaxed);
    atomic_store_explicit(&rec.timeout_ns, timeout_ns, memory_order_relaxed);
    store_text(0, WATCHDOG_PHASE_LEN, phase);
    store_text(PEERS_WORD, WATCHDOG_PEERS_LEN, peers);
    atomic_store_explicit(&rec.active, 1, memory_order_relaxed);
    seq_end();
}

/* An enter inside a wait already in progress (a collective inside a checkpoint save) only
 * counts: the outer wait, with its phase and its (longer) timeout, stays the one watched. */
void watchdog_enter(const char *phase, const char *peers) {
    if (dog.depth++ == 0) record_wait(phase, peers, dog.default_timeout_ns);
}

void watchdog_enter_for(const char *phase, const char *peers, double timeout_s) {
    if (dog.depth++ == 0) record_wait(phase, peers, timeout_s > 0 ? (long long)(timeout_s * 1e9) : 0);
}

void watchdog_leave(void) {
    if (dog.depth > 0 && --dog.depth > 0) return;
    seq_begin();
    atomic_store_explicit(&rec.active, 0, memory_order_relaxed);
    seq_end();
}

void watchdog_set_timeout(double timeout_s) {
    dog.default_timeout_ns = timeout_s > 0 ? (long long)(timeout_s * 1e9) : 0;
    if (dog.started) {
        /* poll often enough for the new timeout too */
        double poll = timeout_s / 10;
        poll = poll < 0.05 ? 0.05 : poll > 1.0 ? 1.0 : poll;
        pthread_mutex_lock(&dog.mutex);
        if ((long long)(poll * 1e9) < dog.poll_ns) dog.poll_ns = (long long)(poll * 1e9);
        pthread_cond_signal(&dog.wake);
        pthread_mutex_unlock(&dog.mutex);
    }
}

void watchdog_set_step(long step) { atomic_store_explicit(&rec.step, step, memory_order_relaxed); }

/* ---- the reader side (watchdog thread) ------------------------------------------------------- */

typedef struct snapshot {
    int active;
    long long t_enter_ns, timeout_ns;
    unsigned seq;
    union {
        char c[TEXT_WORDS * 8];
        uint64_t w[TEXT_WORDS];
    } text;
} snapshot_t;

static void read_record(snapshot_t *s) {
    for (;;) {
        unsigned s1 = atomic_load_explicit(&rec.seq, memory_order_acquire);
        if (s1 & 1u) {
            sched_yield(); /* a write is in progress: it takes nanoseconds */
            continue;
        }
        s->active = atomic_load_explicit(&rec.active, memory_order_relaxed);
        s->t_enter_ns = atomic_load_explicit(&rec.t_enter_ns, memory_order_relaxed);
        s->timeout_ns = atomic_load_explicit(&rec.timeout_ns, memory_order_relaxed);
        for (int w = 0; w < TEXT_WORDS; w++)
            s->text.w[w] = atomic_load_explicit(&rec.text[w], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&rec.seq, memory_order_relaxed) == s1) {
            s->seq = s1;
            s->text.c[WATCHDOG_PHASE_LEN - 1] = '\0';
            s->text.c[TEXT_WORDS * 8 - 1] = '\0';
            return;
        }
    }
}

static void write_all(int fd, const char *text, int n) {
    for (ssize_t off = 0, w; off < n; off += w)
        if ((w = write(fd, text + off, (size_t)(n - off))) <= 0) break;
}

/* One line about the hang hook to stderr, from the watchdog thread (no stdio lock). */
static void hook_say(const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    write_all(STDERR_FILENO, msg, n < (int)sizeof msg ? n : (int)sizeof msg - 1);
}

/* Read LLMT_HANG_HOOK and LLMT_HANG_HOOK_S (main thread, at start: getenv and allocation are
 * not for the moment the watchdog fires). */
static void hook_setup(int world_rank) {
    const char *cmd = getenv("LLMT_HANG_HOOK"), *limit = getenv("LLMT_HANG_HOOK_S");
    if (!cmd || !cmd[0] || hook.cmd) return;
    char *end = NULL;
    double limit_s = limit && limit[0] ? strtod(limit, &end) : 60;
    if (limit && limit[0] && (*end != '\0' || !(limit_s > 0) || limit_s > 86400)) {
        fprintf(stderr, "llmtrain: warning: LLMT_HANG_HOOK_S=%s is not a number of seconds in "
                        "(0, 86400]: the hang hook gets 60 s\n", limit);
        limit_s = 60;
    }
    int n = 0;
    while (environ[n]) n++;
    hook.env = xcalloc((size_t)n + 2, sizeof *hook.env);
    memcpy(hook.env, environ, (size_t)n * sizeof *hook.env);
    char rank[32];
    snprintf(rank, sizeof rank, "LLMT_HANG_RANK=%d", world_rank);
    hook.env[n] = hook.rank_var = xstrdup(rank);
    hook.limit_ns = (long long)(limit_s * 1e9);
    hook.cmd = xstrdup(cmd);
}

/* Run the hang hook (sh -c "$LLMT_HANG_HOOK") and wait for it, at most LLMT_HANG_HOOK_S;
 * one still running then is killed. Its signals are the defaults (this thread blocks them
 * all). Nothing here may wait on a lock another thread could hold: spawn, waitpid, write. */
static void run_hang_hook(void) {
    if (!hook.cmd) return;
    char sh[] = "sh", dash_c[] = "-c", *argv[] = {sh, dash_c, hook.cmd, NULL};
    posix_spawnattr_t attr;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    pid_t pid;
    int rc = posix_spawnattr_init(&attr);
    if (rc == 0) rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (rc == 0) rc = posix_spawnattr_setsigmask(&attr, &none);
    if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &all);
    if (rc == 0) rc = posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, hook.env);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        hook_say("llmtrain: watchdog: rank %d: the hang hook (LLMT_HANG_HOOK) could not be "
                 "started: %s\n", dog.world_rank, strerror(rc));
        return;
    }
    long long deadline = coarse_ns() + hook.limit_ns;
    for (;;) {
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) return;
        if (coarse_ns() > deadline) break;
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    hook_say("llmtrain: watchdog: rank %d: the hang hook (LLMT_HANG_HOOK) still ran after %g s "
             "(LLMT_HANG_HOOK_S): killed\n", dog.world_rank, (double)hook.limit_ns * 1e-9);
}

/* The wait named in `s` is over its timeout: say so, run the hang hook, end the process. No MPI (not
 * initialised for threads) and no stdio lock we might wait on forever. */
_Noreturn static void fire(const snapshot_t *s, long long now) {
    char msg[512], step_text[48];
    long step = atomic_load_explicit(&rec.step, memory_order_relaxed);
    if (step >= 0)
        snprintf(step_text, sizeof step_text, "at step %ld", step);
    else
        snprintf(step_text, sizeof step_text, "at startup (before the first step)");
    const char *peers = s->text.c + WATCHDOG_PHASE_LEN;
    int n = snprintf(msg, sizeof msg,
                     "llmtrain: watchdog: rank %d waited %.1f s in '%s' %s for %s (timeout "
                     "%g s): a peer is dead or hung; ending the job\n",
                     dog.world_rank, (double)(now - s->t_enter_ns) * 1e-9, s->text.c, step_text,
                     peers[0] ? peers : "its peers", (double)s->timeout_ns * 1e-9);
    if (n < 0 || n >= (int)sizeof msg) n = (int)strlen(msg);
    /* the main thread is blocked in MPI; if it happened to hold stdout's lock, skip the flush */
    if (ftrylockfile(stdout) == 0) {
        fflush_unlocked(stdout);
        funlockfile(stdout);
    }
    write_all(STDERR_FILENO, msg, n);
    run_hang_hook();
    _exit(LLMT_EXIT_HANG);
}

/* Look at the wait in progress; end the process if it is over its timeout. Returns how long
 * to sleep before the next look: the poll period, or less when the wait's deadline is nearer
 * (a wait with a timeout shorter than the default is then caught on time, once seen). */
static long long check_once(void) {
    snapshot_t s;
    read_record(&s);
    if (!s.active || s.timeout_ns <= 0) return dog.poll_ns;
    long long now = coarse_ns(), left = s.t_enter_ns + s.timeout_ns - now;
    if (left >= 0) return left + 5000000LL < dog.poll_ns ? left + 5000000LL : dog.poll_ns;
    /* still the same wait? (it may have ended while we looked) */
    if (atomic_load_explicit(&rec.seq, memory_order_acquire) != s.seq) return dog.poll_ns;
    fire(&s, now);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    long long sleep_ns = dog.poll_ns;
    pthread_mutex_lock(&dog.mutex);
    while (dog.running) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        long long ns = until.tv_nsec + sleep_ns;
        until.tv_sec += ns / 1000000000LL;
        until.tv_nsec = ns % 1000000000LL;
        while (dog.running && pthread_cond_timedwait(&dog.wake, &dog.mutex, &until) == 0) {
        }
        if (!dog.running) break;
        pthread_mutex_unlock(&dog.mutex);
        sleep_ns = check_once();
        pthread_mutex_lock(&dog.mutex);
    }
    pthread_mutex_unlock(&dog.mutex);
    return NULL;
}

/* ---- start / stop ---------------------------------------------------------------------------- */

void watchdog_start(double timeout_s, int world_rank) {
    ASSERT(!dog.started);
    dog.world_rank = world_rank;
    dog.default_timeout_ns = timeout_s > 0 ? (long long)(timeout_s * 1e9) : 0;
    hook_setup(world_rank);
    if (timeout_s <= 0) return; /* disabled: enter/leave still record, nobody reads */
    /* poll ten times per timeout, between every 50 ms and every second */
    double poll = timeout_s / 10;
    poll = poll < 0.05 ? 0.05 : poll > 1.0 ? 1.0 : poll;
    dog.poll_ns = (long long)(poll * 1e9);

    pthread_condattr_t attr;
    PTHREAD_CHECK(pthread_condattr_init(&attr));
    PTHREAD_CHECK(pthread_condattr_setclock(&attr, CLOCK_MONOTONIC));
    PTHREAD_CHECK(pthread_cond_init(&dog.wake, &attr));
    PTHREAD_CHECK(pthread_condattr_destroy(&attr));
    dog.running = true;
    /* the thread takes no signal: SIGTERM / SIGUSR1 have a thread of their own
     * (train/checkpointing.c), and the watchdog must not be the one a signal interrupts */
    sigset_t all;
    sigfillset(&all);
    thread_start_masked(&dog.thread, watchdog_main, NULL, &all, "watchdog");
    dog.started = true;
}

static void hook_free(void) {
    if (!hook.cmd) return;
    free(hook.rank_var); /* xstrdup's strings are plain malloc ones */
    xfree(hook.env);
    free(hook.cmd);
    hook.cmd = NULL;
    hook.env = NULL;
}

void watchdog_stop(void) {
    if (!dog.started) {
        dog.default_timeout_ns = 0;
        hook_free();
        return;
    }
    pthread_mutex_lock(&dog.mutex);
    dog.running = false;
    pthread_cond_signal(&dog.wake);
    pthread_mutex_unlock(&dog.mutex);
    PTHREAD_CHECK(pthread_join(dog.thread, NULL));
    PTHREAD_CHECK(pthread_cond_destroy(&dog.wake));
    dog.started = false;
    hook_free();
    dog.default_timeout_ns = 0;
    dog.depth = 0;
    watchdog_leave();
}

/* ---- peers text ------------------------------------------------------------------------------ */

/* snprintf at buf + *used, never past len (the text is cut, not overrun). */
__attribute__((format(printf, 4, 5))) static void append(char *buf, size_t len, size_t *used,
                                                        const char *fmt, ...) {
    if (*used >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, len - *used, fmt, ap);
    va_end(ap);
    if (n > 0) *used += (size_t)n;
}

void watchdog_format_ranks(const int *ranks, int n, const char *label, char *buf, size_t len) {
    ASSERT(len > 0);
    /* up to 8 ranks in full; longer groups as the first three, "...", the last, and a count */
    const bool shorten = n > 8;
    size_t used = 0;
    buf[0] = '\0';
    append(buf, len, &used, "%s%s%s", label, label[0] ? " " : "", n == 1 ? "rank " : "ranks ");
    for (int i = 0; i < n; i++) {
        if (shorten && i >= 3 && i < n - 1) {
            if (i == 3) append(buf, len, &used, ",...");
            continue;
        }
        append(buf, len, &used, "%s%d", i ? "," : "", ranks[i]);
    }
    if (shorten) append(buf, len, &used, " (%d ranks)", n);
}

void watchdog_group_peers(MPI_Comm comm, MPI_Comm world, const char *label, char *buf,
                          size_t len) {
    MPI_Group g, gw;
    int n = 0;
    MPI_CHECK(MPI_Comm_size(comm, &n));
    MPI_CHECK(MPI_Comm_group(comm, &g));
    MPI_CHECK(MPI_Comm_group(world, &gw));
    int *mine = xmalloc(sizeof(int) * 2 * (size_t)n), *theirs = mine + n;
    for (int i = 0; i < n; i++) mine[i] = i;
    MPI_CHECK(MPI_Group_translate_ranks(g, n, mine, gw, theirs));
    MPI_CHECK(MPI_Group_free(&g));
    MPI_CHECK(MPI_Group_free(&gw));
    watchdog_format_ranks(theirs, n, label, buf, len);
    xfree(mine);
}

#define PEERS_CACHE 32

static struct {
    MPI_Comm comm;
    char text[WATCHDOG_PEERS_LEN];
} peers_cache[PEERS_CACHE];
static int peers_cached;

const char *watchdog_peers_of(MPI_Comm comm, const char *label) {
    for (int i = 0; i < peers_cached; i++)
        if (peers_cache[i].comm == comm) return peers_cache[i].text;
    /* a full table reuses its last slot: more than 32 live communicators is not our case */
    int i = peers_cached < PEERS_CACHE ? peers_cached++ : PEERS_CACHE - 1;
    peers_cache[i].comm = comm;
    watchdog_group_peers(comm, MPI_COMM_WORLD, label, peers_cache[i].text,
                         sizeof peers_cache[i].text);
    return peers_cache[i].text;
}

void watchdog_forget_peers(void) { peers_cached = 0; }
