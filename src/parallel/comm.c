/* comm.c — timed collectives and point-to-point transfers over communication groups, by MPI or
 * by a group's device transport (comm.h, comm_transport.h), and the MPI bookkeeping collectives
 * (comm_host.h). */
#include "parallel/comm.h"
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include "core/alloc.h"
#include "parallel/comm_host.h"
#include "parallel/comm_chunks.h"
#include "parallel/comm_transport.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "core/error.h"
#include "core/prof.h"
#include "core/timer.h"
#include "parallel/watchdog.h"

static comm_stats_t stats;

/* What the watchdog reports for a wait of each kind (the peers are the request's group's). */
static const char *phase_of[COMM_KINDS] = {"tp all-reduce", "pp send/recv", "dp all-reduce",
                                           "embedding all-reduce", "all-reduce",
                                           "expert all-to-all", "cp ring send/recv"};
/* Timeline names (core/prof.h): a non-blocking start, and the wait that finishes it. */
static const char *start_of[COMM_KINDS] = {"tp start", "p2p send start", "dp all-reduce start",
                                           "embedding all-reduce start", "start", "ep start",
                                           "cp ring start"};
static const char *wait_of[COMM_KINDS] = {"tp wait", "p2p send wait", "dp all-reduce wait",
                                          "embedding all-reduce wait", "wait", "ep wait",
                                          "cp ring wait"};
static void watch(const char *phase, MPI_Comm comm);
static void unwatch(double t0);

comm_stats_t *comm_stats(void) { return &stats; }
void comm_stats_reset(void) { memset(&stats, 0, sizeof stats); }

const char *comm_kind_name(comm_kind_t k) {
    static const char *names[COMM_KINDS] = {"tp", "pp", "dp", "embed", "other", "ep", "cp"};
    return names[k];
}

/* ---- groups --------------------------------------------------------------------------------- */

struct comm_group {
    MPI_Comm mpi;
    int size, rank;
    char peers[WATCHDOG_PEERS_LEN]; /* the watchdog's text for the members */
    const comm_transport_t *t;      /* NULL: the floats travel by MPI */
    void *ctx;
};

comm_group_t *comm_group_create(MPI_Comm comm, const char *label) {
    ASSERT(comm != MPI_COMM_NULL);
    comm_group_t *g = xcalloc(1, sizeof *g);
    comm_chunks_init();
    g->mpi = comm;
    MPI_CHECK(MPI_Comm_size(comm, &g->size));
    MPI_CHECK(MPI_Comm_rank(comm, &g->rank));
    watchdog_group_peers(comm, MPI_COMM_WORLD, label, g->peers, sizeof g->peers);
    return g;
}

void comm_group_destroy(comm_group_t **g) {
    if (!*g) return;
    if ((*g)->t) (*g)->t->detach((*g)->ctx);
    xfree(*g);
    *g = NULL;
}

void comm_group_attach(comm_group_t *g, const comm_transport_t *t, void *ctx) {
    ASSERT(g->t == NULL && t != NULL);
    g->t = t;
    g->ctx = ctx;
}

const comm_group_t *comm_group_self(void) {
    static comm_group_t *self = NULL; /* freed at exit by the OS: it outlives every user */
    if (!self) self = comm_group_create(MPI_COMM_SELF, "this rank");
    return self;
}

MPI_Comm comm_group_mpi(const comm_group_t *g) { return g->mpi; }
const char *comm_group_peers(const comm_group_t *g) { return g->peers; }
int comm_group_size(const comm_group_t *g) { return g->size; }
int comm_group_rank(const comm_group_t *g) { return g->rank; }
bool comm_group_on_device(const comm_group_t *g) { return g->t != NULL; }

/* ---- requests ---------------------------------------------------------------------------------
 * An MPI request is kept in the request's handle word (a pointer in Open MPI, an int in MPICH). */
_Static_assert(sizeof(MPI_Request) <= sizeof(((comm_req_t *)0)->handle),
               "comm_req_t's handle holds an MPI_Request");

static MPI_Request *mpi_request(comm_req_t *r) { return (MPI_Request *)(void *)&r->handle; }

/* A request for an MPI operation about to start (the caller passes mpi_request(req) to MPI). */
static MPI_Request *mpi_start(comm_req_t *req, const comm_group_t *g) {
    *req = COMM_REQ_NULL;
    req->group = g;
    *mpi_request(req) = MPI_REQUEST_NULL;
    return mpi_request(req);
}

static void device_started(comm_req_t *req, const comm_group_t *g, void *event) {
    *req = COMM_REQ_NULL;
    req->group = g;
    req->on_device = 1;
    req->handle.ptr = event;
}

/* Until a device event has completed: polled (a few polls spinning, for the short tp
 * all-reduces of the forward pass, then yielding the core), never a blocking synchronisation,
 * so the watchdog's timeout applies as to an MPI wait. */
static void device_wait(const comm_group_t *g, void *event) {
    for (long polls = 0; !g->t->poll(g->ctx, event); polls++)
        if (polls > 256) sched_yield();
}

size_t comm_max_count(void) { return comm_chunks_limit(); }

/* req now stands for the calls in l (none started: nothing pending). */
static void calls_started(comm_req_t *req, const comm_group_t *g, mpi_calls_t *l) {
    *req = COMM_REQ_NULL;
    if (l->n == 0) {
        comm_calls_free(l);
        return;
    }
    req->group = g;
    req->calls = l;
}

/* MPI counts are int: a count that reaches here fits one call (the callers chunk the rest). */
static int as_count(size_t n) {
    ASSERT(n <= comm_max_count());
    return (int)n;
}

/* Set on a helper thread that makes collectives of its own (comm_thread_unwatched): the
 * watchdog, the timeline and the per-kind counts belong to the main thread. */
static _Thread_local bool unwatched;

void comm_thread_unwatched(void) { unwatched = true; }

/* Every timed call begins with enter (a timeline phase and the start time) and ends with
 * charge or unwatch. */
static double enter(const char *name) {
    if (!unwatched) prof_begin(PROF_COMM, name, -1, -1);
    return now_sec();
}

static void charge(comm_kind_t kind, double t0, double bytes) {
    stats.seconds[kind] += now_sec() - t0;
    prof_end(PROF_COMM, bytes);
    stats.bytes[kind] += bytes;
    stats.calls[kind]++;
}

/* A blocking operation started on the device: waited for under the watchdog. */
static void device_finish(const comm_group_t *g, void *event, comm_kind_t kind) {
    watchdog_enter(phase_of[kind], g->peers);
    device_wait(g, event);
    watchdog_leave();
}

/* One blocking in-place all-reduce by MPI, watched by the watchdog and charged to `kind`. */
static void mpi_allreduce(void *x, int count, MPI_Datatype type, size_t type_bytes, MPI_Op op,
                          const comm_group_t *g, comm_kind_t kind) {
    if (g->size == 1) return;
    double t0 = enter(phase_of[kind]);
    watchdog_enter(phase_of[kind], g->peers);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, count, type, op, g->mpi));
    watchdog_leave();
    charge(kind, t0, (double)count * type_bytes);
}

static void float_allreduce(float *x, size_t n, comm_op_t op, const comm_group_t *g,
                            comm_kind_t kind) {
    if (g->size == 1) return;
    const MPI_Op mop = op == COMM_SUM ? MPI_SUM : MPI_MAX;
    if (!g->t && n <= comm_max_count()) {
        mpi_allreduce(x, (int)n, MPI_FLOAT, sizeof(float), mop, g, kind);
        return;
    }
    double t0 = enter(phase_of[kind]);
    if (g->t) {
        device_finish(g, g->t->allreduce(g->ctx, x, n, op), kind);
    } else {
        watchdog_enter(phase_of[kind], g->peers);
        comm_chunked_allreduce(x, n, mop, g->mpi, NULL);
        watchdog_leave();
    }
    charge(kind, t0, (double)n * sizeof(float));
}

void comm_allreduce_sum(float *x, size_t n, const comm_group_t *g, comm_kind_t kind) {
    float_allreduce(x, n, COMM_SUM, g, kind);
}

void comm_allreduce_max(float *x, size_t n, const comm_group_t *g, comm_kind_t kind) {
    float_allreduce(x, n, COMM_MAX, g, kind);
}

void comm_allreduce_sum_double(double *x, int n, const comm_group_t *g, comm_kind_t kind) {
    mpi_allreduce(x, n, MPI_DOUBLE, sizeof(double), MPI_SUM, g, kind);
}

void comm_iallreduce_sum_double(double *x, int n, const comm_group_t *g, comm_kind_t kind,
                                comm_req_t *req) {
    *req = COMM_REQ_NULL;
    if (g->size == 1) return;
    double t0 = enter(start_of[kind]);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, g->mpi, mpi_start(req, g)));
    charge(kind, t0, (double)n * sizeof(double));
}

void comm_iallreduce_sum(float *x, size_t n, const comm_group_t *g, comm_kind_t kind,
                         comm_req_t *req) {
    *req = COMM_REQ_NULL;
    if (g->size == 1) return;
    double t0 = enter(start_of[kind]);
    if (g->t) {
        device_started(req, g, g->t->allreduce(g->ctx, x, n, COMM_SUM));
    } else if (n <= comm_max_count()) {
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, g->mpi,
                                 mpi_start(req, g)));
    } else {
        mpi_calls_t *l = comm_calls_new();
        comm_chunked_allreduce(x, n, MPI_SUM, g->mpi, l);
        calls_started(req, g, l);
    }
    charge(kind, t0, (double)n * sizeof(float));
}

void comm_ireduce_scatter_sum(const float *x, float *out, const size_t *counts,
                              const comm_group_t *g, comm_kind_t kind, comm_req_t *req) {
    *req = COMM_REQ_NULL;
    double t0 = enter(start_of[kind]), n = 0;
    for (int r = 0; r < g->size; r++) n += (double)counts[r];
    if (g->t) {
        device_started(req, g, g->t->reduce_scatter(g->ctx, x, out, counts));
    } else {
        mpi_calls_t *l = comm_calls_new();
        if (comm_pieces_fit(counts, NULL, g->size)) {
            l->ints = xrealloc_small(NULL, 2 * (size_t)g->size * sizeof(int));
            MPI_CHECK(MPI_Ireduce_scatter(x, out, comm_int_pieces(counts, NULL, g->size, l->ints),
                                          MPI_FLOAT, MPI_SUM, g->mpi, comm_calls_next(l)));
        } else {
            comm_chunked_reduce_scatter(x, out, counts, g->mpi, g->size, g->rank, l);
        }
        calls_started(req, g, l);
    }
    charge(kind, t0, n * sizeof(float));
}

void comm_allgatherv_float(float *x, const size_t *counts, const size_t *displs,
                           const comm_group_t *g, comm_kind_t kind, const char *phase) {
    if (g->size == 1) return;
    double t0 = enter(phase);
    if (g->t) {
        void *ev = g->t->allgatherv(g->ctx, x + displs[g->rank], x, counts, displs);
        watchdog_enter(phase, g->peers);
        device_wait(g, ev);
    } else if (comm_pieces_fit(counts, displs, g->size)) {
        int small[2 * 16];
        int *ints = g->size <= 16 ? small : xrealloc_small(NULL, 2 * (size_t)g->size * sizeof(int));
        comm_int_pieces(counts, displs, g->size, ints);
        watchdog_enter(phase, g->peers);
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, ints, ints + g->size,
                                 MPI_FLOAT, g->mpi));
        if (ints != small) free(ints);
    } else {
        watchdog_enter(phase, g->peers);
        comm_chunked_allgatherv(x + displs[g->rank], x, counts, displs, g->mpi, g->size, g->rank,
                                NULL);
    }
    watchdog_leave();
    charge(kind, t0, (double)counts[g->rank] * sizeof(float));
}

/* Equal pieces of n floats per rank of g (counts and displacements, freed by the caller). */
static size_t *equal_pieces(size_t n, const comm_group_t *g) {
    size_t *c = xrealloc_small(NULL, 2 * (size_t)g->size * sizeof(size_t));
    for (int r = 0; r < g->size; r++) c[r] = n, c[g->size + r] = n * (size_t)r;
    return c;
}

void comm_allgather_inplace(float *all, size_t n, const comm_group_t *g, comm_kind_t kind,
                            const char *phase) {
    if (g->size == 1) return;
    size_t *c = equal_pieces(n, g);
    comm_allgatherv_float(all, c, c + g->size, g, kind, phase);
    free(c);
}

void comm_reduce_scatter_block_sum(const float *x, float *out, size_t n, const comm_group_t *g,
                                   comm_kind_t kind, const char *phase) {
    ASSERT(g->size > 1);
    double t0 = enter(phase);
    if (g->t) {
        size_t *c = equal_pieces(n, g);
        void *ev = g->t->reduce_scatter(g->ctx, x, out, c);
        free(c);
        watchdog_enter(phase, g->peers);
        device_wait(g, ev);
    } else if (n <= comm_max_count() / (size_t)g->size) {
        watchdog_enter(phase, g->peers);
        MPI_CHECK(MPI_Reduce_scatter_block(x, out, (int)n, MPI_FLOAT, MPI_SUM, g->mpi));
    } else {
        size_t *c = equal_pieces(n, g);
        watchdog_enter(phase, g->peers);
        comm_chunked_reduce_scatter(x, out, c, g->mpi, g->size, g->rank, NULL);
        free(c);
    }
    watchdog_leave();
    charge(kind, t0, (double)n * g->size * sizeof(float));
}

void comm_half_pieces(const size_t *counts, const size_t *displs, int n, size_t *fcounts,
                      size_t *fdispls) {
    for (int r = 0; r < n; r++) {
        ASSERT(counts[r] % 2 == 0 && displs[r] % 2 == 0); /* whole floats */
        fcounts[r] = counts[r] / 2;
        fdispls[r] = displs[r] / 2;
    }
}

void comm_allgatherv_half(void *x, const size_t *counts, const size_t *displs,
                          const comm_group_t *g, comm_kind_t kind, const char *phase) {
    if (g->size == 1) return;
    size_t *pc = xrealloc_small(NULL, 2 * (size_t)g->size * sizeof(size_t)), *pd = pc + g->size;
    comm_half_pieces(counts, displs, g->size, pc, pd);
    comm_allgatherv_float(x, pc, pd, g, kind, phase);
    free(pc);
}

void comm_iallgatherv_float(const float *mine, float *all, const size_t *counts,
                            const size_t *displs, const comm_group_t *g, comm_kind_t kind,
                            comm_req_t *req) {
    *req = COMM_REQ_NULL;
    double t0 = enter(start_of[kind]);
    if (g->t) {
        device_started(req, g, g->t->allgatherv(g->ctx, mine, all, counts, displs));
    } else {
        mpi_calls_t *l = comm_calls_new();
        if (comm_pieces_fit(counts, displs, g->size)) {
            l->ints = xrealloc_small(NULL, 2 * (size_t)g->size * sizeof(int));
            comm_int_pieces(counts, displs, g->size, l->ints);
            MPI_CHECK(MPI_Iallgatherv(mine, l->ints[g->rank], MPI_FLOAT, all, l->ints,
                                      l->ints + g->size, MPI_FLOAT, g->mpi, comm_calls_next(l)));
        } else {
            comm_chunked_allgatherv(mine, all, counts, displs, g->mpi, g->size, g->rank, l);
        }
        calls_started(req, g, l);
    }
    charge(kind, t0, (double)counts[g->rank] * sizeof(float));
}

/* The tag of comm_gatherv_float's chunked messages (no other point-to-point traffic uses it). */
#define GATHER_TAG 0x4c47

void comm_gatherv_float(const float *mine, size_t count, float *all, const size_t *counts,
                        const size_t *displs, int root, const comm_group_t *g, const char *phase) {
    double t0 = enter(phase);
    watch(phase, g->mpi);
    if (comm_pieces_fit(counts, displs, g->size)) {
        int *ints = xrealloc_small(NULL, 2 * (size_t)g->size * sizeof(int));
        comm_int_pieces(counts, displs, g->size, ints);
        MPI_CHECK(MPI_Gatherv(mine, as_count(count), MPI_FLOAT, all, ints, ints + g->size,
                              MPI_FLOAT, root, g->mpi));
        free(ints);
    } else { /* each rank's piece sent to the root in runs */
        mpi_calls_t *l = comm_calls_new();
        if (g->rank != root) {
            comm_chunked_send(mine, count, root, GATHER_TAG, g->mpi, l);
        } else {
            for (int r = 0; r < g->size; r++)
                if (r != root)
                    comm_chunked_recv(all + displs[r], counts[r], r, GATHER_TAG, g->mpi, l);
            if (count > 0) memcpy(all + displs[root], mine, count * sizeof(float));
        }
        comm_calls_wait(l);
    }
    unwatch(t0);
}

void comm_isend(const float *x, size_t n, int peer, int tag, const comm_group_t *g,
                comm_kind_t kind, comm_req_t *req) {
    double t0 = enter(start_of[kind]);
    if (g->t) { /* stream order matches sends to receives: the tag is not needed */
        device_started(req, g, g->t->send(g->ctx, x, n, peer));
    } else if (n <= comm_max_count()) {
        MPI_CHECK(MPI_Isend(x, (int)n, MPI_FLOAT, peer, tag, g->mpi, mpi_start(req, g)));
    } else {
        mpi_calls_t *l = comm_calls_new();
        comm_chunked_send(x, n, peer, tag, g->mpi, l);
        calls_started(req, g, l);
    }
    charge(kind, t0, (double)n * sizeof(float));
}

void comm_irecv(float *x, size_t n, int peer, int tag, const comm_group_t *g, comm_req_t *req) {
    if (g->t) {
        device_started(req, g, g->t->recv(g->ctx, x, n, peer));
    } else if (n <= comm_max_count()) {
        MPI_CHECK(MPI_Irecv(x, (int)n, MPI_FLOAT, peer, tag, g->mpi, mpi_start(req, g)));
    } else {
        mpi_calls_t *l = comm_calls_new();
        comm_chunked_recv(x, n, peer, tag, g->mpi, l);
        calls_started(req, g, l);
    }
}

/* A wait charged to `kind` (time, not bytes: those were counted when it started). */
static void wait_named(comm_req_t *req, comm_kind_t kind, const char *name, double bytes) {
    if (!comm_req_pending(req)) return;
    const comm_group_t *g = req->group;
    double t0 = enter(name);
    watchdog_enter(phase_of[kind], g->peers);
    if (req->on_device)
        device_wait(g, req->handle.ptr);
    else if (req->calls)
        comm_calls_wait(req->calls);
    else
        MPI_CHECK(MPI_Wait(mpi_request(req), MPI_STATUS_IGNORE));
    watchdog_leave();
    *req = COMM_REQ_NULL;
    stats.seconds[kind] += now_sec() - t0;
    prof_end(PROF_COMM, bytes);
}

void comm_wait(comm_req_t *req, comm_kind_t kind) { wait_named(req, kind, wait_of[kind], 0); }

void comm_wait_recv(comm_req_t *req, size_t n) {
    wait_named(req, COMM_PP, "p2p recv wait", (double)n * sizeof(float));
}

bool comm_test(comm_req_t *req) {
    if (!comm_req_pending(req)) return true;
    int done = 0;
    if (req->on_device) {
        done = req->group->t->poll(req->group->ctx, req->handle.ptr);
    } else if (req->calls) {
        mpi_calls_t *l = req->calls;
        MPI_CHECK(MPI_Testall(l->n, l->r, &done, MPI_STATUSES_IGNORE));
        if (done) comm_calls_free(l);
    } else {
        MPI_CHECK(MPI_Test(mpi_request(req), &done, MPI_STATUS_IGNORE));
    }
    if (done) *req = COMM_REQ_NULL;
    return done;
}

void comm_allgather_float(const float *mine, int n, float *all, const comm_group_t *g,
                          comm_kind_t kind) {
    double t0 = enter("all-gather");
    if (g->t) {
        size_t *c = equal_pieces((size_t)n, g);
        void *ev = g->t->allgatherv(g->ctx, mine, all, c, c + g->size);
        free(c);
        watchdog_enter("all-gather", g->peers);
        device_wait(g, ev);
    } else {
        watchdog_enter("all-gather", g->peers);
        MPI_CHECK(MPI_Allgather(mine, n, MPI_FLOAT, all, n, MPI_FLOAT, g->mpi));
    }
    watchdog_leave();
    charge(kind, t0, (double)n * sizeof(float));
}

/* ---- setup and bookkeeping collectives ---------------------------------------------------- */

static void watch(const char *phase, MPI_Comm comm) {
    if (!unwatched) watchdog_enter(phase, watchdog_peers_of(comm, ""));
}

static void unwatch(double t0) {
    if (unwatched) return;
    watchdog_leave();
    stats.seconds[COMM_OTHER] += now_sec() - t0;
    stats.calls[COMM_OTHER]++;
    prof_end(PROF_COMM, 0);
}

void comm_barrier(MPI_Comm comm, const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_CHECK(MPI_Barrier(comm));
    unwatch(t0);
}

void comm_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_CHECK(MPI_Bcast(buf, count, type, root, comm));
    unwatch(t0);
}

void comm_allreduce(void *x, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, count, type, op, comm));
    unwatch(t0);
}

void comm_allreduce_idle(void *x, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                         const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, count, type, op, comm, &req));
    long ns = 20000; /* 20 us, doubling to 1 ms: a late rank is seen within 1 ms */
    for (int done = 0;;) {
        MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) break;
        nanosleep(&(struct timespec){.tv_nsec = ns}, NULL);
        if (ns < 1000000) ns *= 2;
    }
    unwatch(t0);
}

void comm_gather(const void *mine, int count, MPI_Datatype type, void *all, int root,
                 MPI_Comm comm, const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_CHECK(MPI_Gather(mine, count, type, all, count, type, root, comm));
    unwatch(t0);
}

void comm_allgather(const void *mine, int count, MPI_Datatype type, void *all, MPI_Comm comm,
                    const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_CHECK(MPI_Allgather(mine, count, type, all, count, type, comm));
    unwatch(t0);
}

double comm_pingpong_bytes(void *buf, int bytes, int peer, int initiator, MPI_Comm comm,
                           const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    if (initiator) {
        MPI_CHECK(MPI_Send(buf, bytes, MPI_BYTE, peer, 0, comm));
        MPI_CHECK(MPI_Recv(buf, bytes, MPI_BYTE, peer, 0, comm, MPI_STATUS_IGNORE));
    } else {
        MPI_CHECK(MPI_Recv(buf, bytes, MPI_BYTE, peer, 0, comm, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(buf, bytes, MPI_BYTE, peer, 0, comm));
    }
    const double dt = now_sec() - t0;
    unwatch(t0);
    return initiator ? dt : 0.0;
}

void comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out, const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_CHECK(MPI_Comm_split(comm, color, key, out));
    unwatch(t0);
}

/* The size of, and this rank's index in, the ranks of comm on its node. */
static void node_rank_size(MPI_Comm comm, int *rank, int *size) {
    MPI_Comm node;
    double t0 = enter("counting the ranks of a node");
    watch("counting the ranks of a node", comm);
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, size));
    MPI_CHECK(MPI_Comm_rank(node, rank));
    MPI_CHECK(MPI_Comm_free(&node));
    unwatch(t0);
}

int comm_node_size(MPI_Comm comm) {
    int rank, size;
    node_rank_size(comm, &rank, &size);
    return size;
}

int comm_node_first(MPI_Comm comm) {
    MPI_Comm node;
    int me, first;
    double t0 = enter("finding a node's first rank");
    watch("finding a node's first rank", comm);
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    first = me;
    MPI_CHECK(MPI_Bcast(&first, 1, MPI_INT, 0, node));
    MPI_CHECK(MPI_Comm_free(&node));
    unwatch(t0);
    return first;
}

int comm_node_rank(MPI_Comm comm) {
    int rank, size;
    node_rank_size(comm, &rank, &size);
    return rank;
}

/* ---- errors that one rank may see alone -------------------------------------------------- */

int comm_agree(MPI_Comm comm, const char *phase, const char *mine, char *out, size_t outlen) {
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    /* how many failed (every call), then who failed first (only when someone did) */
    int counted = mine ? 1 : 0, first = mine ? rank : size;
    comm_allreduce(&counted, 1, MPI_INT, MPI_SUM, comm, phase);
    if (counted == 0) return 0;
    comm_allreduce(&first, 1, MPI_INT, MPI_MIN, comm, phase);
    /* the first failing rank's own words, with where it runs */
    struct {
        int world_rank;
        char host[64];
        char text[COMM_MSG_MAX];
    } first_msg = {0, "?", ""};
    if (rank == first) {
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &first_msg.world_rank));
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        snprintf(first_msg.host, sizeof first_msg.host, "%.63s", host);
        snprintf(first_msg.text, sizeof first_msg.text, "%s", mine);
    }
    comm_bcast(&first_msg, (int)sizeof first_msg, MPI_BYTE, first, comm, phase);
    first_msg.host[sizeof first_msg.host - 1] = first_msg.text[sizeof first_msg.text - 1] = '\0';
    /* every rank saw it (the same file everywhere): the message alone says it; some ranks did:
     * which one, where, and how many others */
    if (out && outlen) {
        if (counted == size && size > 1)
            snprintf(out, outlen, "%s (on all %d ranks)", first_msg.text, size);
        else if (counted == size)
            snprintf(out, outlen, "%s", first_msg.text);
        else
            snprintf(out, outlen, "rank %d (host %s): %s%s", first_msg.world_rank, first_msg.host,
                     first_msg.text, counted > 1 ? " [and other ranks]" : "");
    }
    return counted;
}

void comm_agree_or_exit(MPI_Comm comm, int exit_code, const char *phase, const char *mine) {
    char msg[COMM_MSG_MAX + 160];
    if (comm_agree(comm, phase, mine, msg, sizeof msg) == 0) return;
    fatal_agreed(exit_code, msg);
}

void comm_alltoall_int(const int *send, int *recv, int n, const comm_group_t *g) {
    if (g->size == 1) {
        memcpy(recv, send, (size_t)n * sizeof(int));
        return;
    }
    double t0 = enter("ep counts");
    watchdog_enter(phase_of[COMM_EP], g->peers);
    MPI_CHECK(MPI_Alltoall(send, n, MPI_INT, recv, n, MPI_INT, g->mpi));
    watchdog_leave();
    charge(COMM_EP, t0, (double)g->size * n * sizeof(int));
}

void comm_alltoallv_float(const float *send, const int *send_counts, const int *send_displs,
                          float *recv, const int *recv_counts, const int *recv_displs, int width,
                          const comm_group_t *g) {
    if (g->size == 1 && !g->t) { /* a device group's own copy goes through its transport */
        if (send_counts[0] > 0 && recv != send)
            memmove(recv + (size_t)recv_displs[0] * width, send + (size_t)send_displs[0] * width,
                    (size_t)send_counts[0] * width * sizeof(float));
        return;
    }
    double t0 = enter(phase_of[COMM_EP]), rows = 0;
    for (int r = 0; r < g->size; r++) rows += send_counts[r];
    if (g->t) {
        void *ev = g->t->alltoallv(g->ctx, send, send_counts, send_displs, recv, recv_counts,
                                   recv_displs, width);
        device_finish(g, ev, COMM_EP);
    } else {
        /* one derived type of `width` floats keeps the counts in rows (no int overflow for
         * wide rows times many tokens) */
        MPI_Datatype row;
        MPI_CHECK(MPI_Type_contiguous(width, MPI_FLOAT, &row));
        MPI_CHECK(MPI_Type_commit(&row));
        watchdog_enter(phase_of[COMM_EP], g->peers);
        MPI_CHECK(MPI_Alltoallv(send, send_counts, send_displs, row, recv, recv_counts,
                                recv_displs, row, g->mpi));
        watchdog_leave();
        MPI_CHECK(MPI_Type_free(&row));
    }
    charge(COMM_EP, t0, rows * width * sizeof(float));
}
