/* ckpt_async.c — the background checkpoint writer (see ckpt_async.h). */
#include "train/ckpt_async.h"
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/thread.h"
#include "core/timer.h"
#include "parallel/comm_host.h"
#include "parallel/watchdog.h"
#include "train/ckpt_memory.h"
#include "train/flat.h"

struct ckpt_async {
    MPI_Comm comm;              /* MPI_COMM_WORLD duplicated: the writer's collectives and MPI-IO */
    float *snap[3];             /* the partition [lo, hi) of the parameters (or master), m and v */
    size_t lo, hi;
    pthread_t thread;
    bool running;               /* main thread: a write started and not yet collected */
    bool joined;                /* main thread: the writer of that write joined */
    atomic_int done;            /* the writer: its write has finished (either way) */
    /* the write in flight: set by the main thread before the thread starts, by the writer
     * until `done`, read by the main thread after it */
    ckpt_save_t save;
    const ckpt_tensors_t *P;
    MPI_Info info;
    int owner;
    size_t piece;               /* floats per collective write: &checkpoint staging_mb's */
    int rc;
    double sampled_rss;         /* the writer's largest resident size between pieces */
    char msg[COMM_MSG_MAX + 64];
};

static int world_rank(void) { return error_world_rank(); }

struct ckpt_async *ckpt_async_create(const ckpt_ctx_t *ck) {
    const config_t *cfg = ck->cfg;
    if (!cfg->ckpt_async || cfg->ckpt_every <= 0 || cfg->choice.mode != CFG_MODE_TRAIN) return NULL;
    int level = MPI_THREAD_SINGLE;
    MPI_CHECK(MPI_Query_thread(&level));
    if (level < MPI_THREAD_MULTIPLE) {
        if (world_rank() == 0)
            printf("checkpoint: &checkpoint async = .true. needs MPI_THREAD_MULTIPLE, which this MPI "
                   "library does not provide: every save is synchronous\n");
        return NULL;
    }
    struct ckpt_async *a = xcalloc(1, sizeof *a);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &a->comm));
    a->lo = ck->zero->lo;
    a->hi = ck->zero->hi;
    const size_t n = a->hi > a->lo ? a->hi - a->lo : 1;
    for (int g = 0; g < 3; g++) {
        a->snap[g] = xmalloc(n * sizeof(float));
        memset(a->snap[g], 0, n * sizeof(float)); /* resident from now on: training's memory */
    }
    a->P = &ck->model->P.ckpt;
    a->owner = ckpt_save_owner(ck->zero);
    a->piece = ck->staging_floats;
    return a;
}

/* The writer's ckpt_io_t fetch: views into the snapshot, no copy. */
static const float *snap_fetch(void *ctx, int g, size_t a, size_t b, float *staging) {
    (void)b, (void)staging;
    const struct ckpt_async *w = ctx;
    return w->snap[g] + (a - w->lo);
}

/* Rank 0 reads the published file's attributes back and checks them against their checksum
 * (ckpt_peek); every rank learns the verdict. A file that fails is removed. */
static int verify_published(struct ckpt_async *a) {
    char why[COMM_MSG_MAX / 2] = "";
    if (world_rank() == 0) {
        ckpt_peek_t info;
        if (ckpt_peek(a->save.path, &info, why, sizeof why) != 0 || info.step != a->save.step) {
            if (!why[0]) snprintf(why, sizeof why, "it names step %lld", (long long)info.step);
            unlink(a->save.path);
        }
    }
    char text[COMM_MSG_MAX / 2];
    if (comm_agree(a->comm, "checkpoint verify", why[0] ? why : NULL, text, sizeof text) == 0) return 0;
    snprintf(a->msg, sizeof a->msg, "%s did not verify after writing: %s", a->save.path, text);
    return -1;
}

static void *writer_main(void *arg) {
    struct ckpt_async *a = arg;
    comm_thread_unwatched();
    const double t0 = now_sec();
    ckpt_io_t io;
    memset(&io, 0, sizeof io);
    for (int g = 0; g < 3; g++) io.lo[g] = a->lo, io.hi[g] = a->hi, io.part_comm[g] = MPI_COMM_SELF;
    io.owner = a->owner;
    io.staging_floats = a->piece;
    io.fetch = snap_fetch;
    io.ctx = a;
    a->rc = ckpt_save_io(a->save.path, a->comm, a->info, a->P, &io, &a->save.meta, &a->save.st,
                         &a->save.written, a->msg, sizeof a->msg);
    if (a->rc == 0) a->rc = verify_published(a);
    a->save.write_s = now_sec() - t0;
    a->sampled_rss = io.peak_rss_mib;
    atomic_store(&a->done, 1);
    return NULL;
}

/* The partition as a save would write it, into the snapshot: one copy per group (from the device
 * where the state lives there). */
static void take_snapshot(ckpt_ctx_t *ck, struct ckpt_async *a) {
    fault_point("snapshot", world_rank());
    adamw_finish(ck->opt); /* an offloaded update still in flight: done and uploaded */
    flat_io_t f = {.z = ck->zero, .opt = ck->opt, .m = ck->model, .ops = ck->ops};
    ckpt_io_t io;
    flat_save_io(&io, &f, a->owner, NULL, 0);
    if (a->hi <= a->lo) return;
    for (int g = 0; g < 3; g++) {
        const float *x = io.fetch(io.ctx, g, a->lo, a->hi, a->snap[g]);
        if (x != a->snap[g]) memcpy(a->snap[g], x, (a->hi - a->lo) * sizeof(float));
    }
}

int ckpt_async_start(ckpt_ctx_t *ck, const ckpt_save_t *s, double t0) {
    struct ckpt_async *a = ck->async;
    ASSERT(a && !a->running);
    const double before = ckpt_max_over_ranks(ckpt_hwm_mib());
    ck->train_peak_mib = before > ck->train_peak_mib ? before : ck->train_peak_mib;
    take_snapshot(ck, a);
    a->save = *s;
    a->save.async = true;
    a->save.peak[0] = ck->train_peak_mib;
    a->info = *ck->io_hints;
    a->rc = 0;
    a->msg[0] = '\0';
    atomic_store(&a->done, 0);
    a->joined = false;
    sigset_t mask; /* the caller's: the stop signals stay blocked (train/stop_signals.c) */
    PTHREAD_CHECK(pthread_sigmask(SIG_BLOCK, NULL, &mask));
    a->save.stall_s = now_sec() - t0;
    thread_start_masked(&a->thread, writer_main, a, &mask, "checkpoint writer");
    a->running = true;
    return 0;
}

bool ckpt_async_pending(const ckpt_ctx_t *ck) { return ck->async && ck->async->running; }

/* The write's outcome, on every rank (the writer agreed on it over its communicator), its thread
 * joined (already by ckpt_async_wait, or here once `done` says it has ended). */
static int collect(ckpt_ctx_t *ck) {
    struct ckpt_async *a = ck->async;
    if (!a->joined) PTHREAD_CHECK(pthread_join(a->thread, NULL));
    a->running = false;
    if (a->rc != 0) {
        ckpt_save_failed(ck, &a->save, a->msg);
        return -1;
    }
    a->save.peak[1] = ckpt_max_over_ranks(a->sampled_rss);
    ckpt_save_commit(ck, &a->save);
    return 1;
}

int ckpt_async_poll(ckpt_ctx_t *ck) {
    if (!ckpt_async_pending(ck)) return 0;
    int done = atomic_load(&ck->async->done);
    comm_allreduce(&done, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "background checkpoint check");
    return done ? collect(ck) : 0;
}

int ckpt_async_wait(ckpt_ctx_t *ck) {
    if (!ckpt_async_pending(ck)) return 0;
    /* the caller's stall counts this wait: ckpt_write_now's stall_s starts before it. The thread
     * is joined under the watchdog (a hung writer ends the job naming it); collect's join is
     * then immediate */
    struct ckpt_async *a = ck->async;
    if (!atomic_load(&a->done)) {
        watchdog_enter_for("waiting for the background checkpoint write", "this rank's writer thread",
                           ck->cfg->io_timeout_s);
        PTHREAD_CHECK(pthread_join(a->thread, NULL));
        watchdog_leave();
        a->joined = true;
    }
    return collect(ck);
}

void ckpt_async_destroy(ckpt_ctx_t *ck) {
    struct ckpt_async *a = ck->async;
    if (!a) return;
    ckpt_async_wait(ck);
    MPI_CHECK(MPI_Comm_free(&a->comm));
    for (int g = 0; g < 3; g++) xfree(a->snap[g]);
    xfree(a);
    ck->async = NULL;
}

int ckpt_write_now(ckpt_ctx_t *ck, const char *why) {
    const double t0 = now_sec();
    ckpt_async_wait(ck); /* the previous save first: nothing overtakes it */
    ckpt_save_t s;
    if (ckpt_save_prepare(ck, why, &s) != 0) return -1;
    if (ck->async && strcmp(why, "every") == 0) return ckpt_async_start(ck, &s, t0);
    char msg[COMM_MSG_MAX + 64];
    const double t1 = now_sec();
    int rc = ckpt_save_sharded(ck, s.path, &s.meta, &s.st, &s.written, s.peak, msg, sizeof msg);
    s.write_s = now_sec() - t1;
    s.stall_s = now_sec() - t0;
    if (rc != 0) {
        ckpt_save_failed(ck, &s, msg);
        return -1;
    }
    ckpt_save_commit(ck, &s);
    return 0;
}
