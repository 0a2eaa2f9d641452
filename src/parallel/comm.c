/* comm.c — timed collectives and point-to-point transfers (see comm.h). */
#include "parallel/comm.h"
#include <limits.h>
#include <string.h>
#include "core/error.h"
#include "core/timer.h"
#include "parallel/watchdog.h"

static comm_stats_t stats;

/* What the watchdog reports for a wait of each kind, and on whom a pending wait depends
 * (comm_wait has no communicator: the last one started for that kind is remembered). */
static const char *phase_of[COMM_KINDS] = {"tp all-reduce", "pp send/recv", "dp all-reduce",
                                           "embedding all-reduce", "all-reduce"};
static const char *wait_peers[COMM_KINDS];

comm_stats_t *comm_stats(void) { return &stats; }
void comm_stats_reset(void) { memset(&stats, 0, sizeof stats); }

const char *comm_kind_name(comm_kind_t k) {
    static const char *names[COMM_KINDS] = {"tp", "pp", "dp", "embed", "other"};
    return names[k];
}

static int comm_size(MPI_Comm c) {
    int n = 1;
    MPI_CHECK(MPI_Comm_size(c, &n));
    return n;
}

/* MPI counts are int: a larger buffer would need chunking; our buckets never come close. */
static int as_count(size_t n) {
    ASSERT(n <= (size_t)INT_MAX);
    return (int)n;
}

static void charge(comm_kind_t kind, double t0, double bytes) {
    stats.seconds[kind] += now_sec() - t0;
    stats.bytes[kind] += bytes;
    stats.calls[kind]++;
}

/* One blocking in-place all-reduce, watched by the watchdog and charged to `kind`. */
static void allreduce(void *x, int count, MPI_Datatype type, size_t type_bytes, MPI_Op op,
                      MPI_Comm comm, comm_kind_t kind) {
    if (comm_size(comm) == 1) return;
    double t0 = now_sec();
    watchdog_enter(phase_of[kind], watchdog_peers_of(comm, comm_kind_name(kind)));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, count, type, op, comm));
    watchdog_leave();
    charge(kind, t0, (double)count * type_bytes);
}

void comm_allreduce_sum(float *x, size_t n, MPI_Comm comm, comm_kind_t kind) {
    allreduce(x, as_count(n), MPI_FLOAT, sizeof(float), MPI_SUM, comm, kind);
}

void comm_allreduce_max(float *x, size_t n, MPI_Comm comm, comm_kind_t kind) {
    allreduce(x, as_count(n), MPI_FLOAT, sizeof(float), MPI_MAX, comm, kind);
}

void comm_allreduce_sum_double(double *x, int n, MPI_Comm comm, comm_kind_t kind) {
    allreduce(x, n, MPI_DOUBLE, sizeof(double), MPI_SUM, comm, kind);
}

void comm_iallreduce_sum(float *x, size_t n, MPI_Comm comm, comm_kind_t kind, MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    if (comm_size(comm) == 1) return;
    double t0 = now_sec();
    wait_peers[kind] = watchdog_peers_of(comm, comm_kind_name(kind));
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, as_count(n), MPI_FLOAT, MPI_SUM, comm, req));
    charge(kind, t0, (double)n * sizeof(float));
}

void comm_isend(const float *x, size_t n, int peer, int tag, MPI_Comm comm, comm_kind_t kind,
                MPI_Request *req) {
    double t0 = now_sec();
    wait_peers[kind] = watchdog_peers_of(comm, comm_kind_name(kind));
    MPI_CHECK(MPI_Isend(x, as_count(n), MPI_FLOAT, peer, tag, comm, req));
    charge(kind, t0, (double)n * sizeof(float));
}

void comm_irecv(float *x, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request *req) {
    wait_peers[COMM_PP] = watchdog_peers_of(comm, comm_kind_name(COMM_PP));
    MPI_CHECK(MPI_Irecv(x, as_count(n), MPI_FLOAT, peer, tag, comm, req));
}

void comm_wait(MPI_Request *req, comm_kind_t kind) {
    if (*req == MPI_REQUEST_NULL) return;
    double t0 = now_sec();
    watchdog_enter(phase_of[kind], wait_peers[kind] ? wait_peers[kind] : "");
    MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
    watchdog_leave();
    stats.seconds[kind] += now_sec() - t0;
}
