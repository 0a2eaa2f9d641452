/* comm.c — timed collectives and point-to-point transfers (see comm.h). */
#include "parallel/comm.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "core/error.h"
#include "core/prof.h"
#include "core/timer.h"
#include "parallel/watchdog.h"

static comm_stats_t stats;

/* What the watchdog reports for a wait of each kind, and on whom a pending wait depends
 * (comm_wait has no communicator: the last one started for that kind is remembered). */
static const char *phase_of[COMM_KINDS] = {"tp all-reduce", "pp send/recv", "dp all-reduce",
                                           "embedding all-reduce", "all-reduce",
                                           "expert all-to-all"};
static const char *wait_peers[COMM_KINDS];
/* Timeline names (core/prof.h): a non-blocking start, and the wait that finishes it. */
static const char *start_of[COMM_KINDS] = {"tp start", "p2p send start", "dp all-reduce start",
                                           "embedding all-reduce start", "start", "ep start"};
static const char *wait_of[COMM_KINDS] = {"tp wait", "p2p send wait", "dp all-reduce wait",
                                          "embedding all-reduce wait", "wait", "ep wait"};
static void watch(const char *phase, MPI_Comm comm);
static void unwatch(double t0);

comm_stats_t *comm_stats(void) { return &stats; }
void comm_stats_reset(void) { memset(&stats, 0, sizeof stats); }

const char *comm_kind_name(comm_kind_t k) {
    static const char *names[COMM_KINDS] = {"tp", "pp", "dp", "embed", "other", "ep"};
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

/* Every timed call begins with enter (a timeline phase and the start time) and ends with
 * charge or unwatch. */
static double enter(const char *name) {
    prof_begin(PROF_COMM, name, -1, -1);
    return now_sec();
}

static void charge(comm_kind_t kind, double t0, double bytes) {
    stats.seconds[kind] += now_sec() - t0;
    prof_end(PROF_COMM, bytes);
    stats.bytes[kind] += bytes;
    stats.calls[kind]++;
}

/* One blocking in-place all-reduce, watched by the watchdog and charged to `kind`. */
static void allreduce(void *x, int count, MPI_Datatype type, size_t type_bytes, MPI_Op op,
                      MPI_Comm comm, comm_kind_t kind) {
    if (comm_size(comm) == 1) return;
    double t0 = enter(phase_of[kind]);
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

void comm_iallreduce_sum_double(double *x, int n, MPI_Comm comm, comm_kind_t kind,
                                MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    if (comm_size(comm) == 1) return;
    double t0 = enter(start_of[kind]);
    wait_peers[kind] = watchdog_peers_of(comm, comm_kind_name(kind));
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, comm, req));
    charge(kind, t0, (double)n * sizeof(double));
}

void comm_iallreduce_sum(float *x, size_t n, MPI_Comm comm, comm_kind_t kind, MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    if (comm_size(comm) == 1) return;
    double t0 = enter(start_of[kind]);
    wait_peers[kind] = watchdog_peers_of(comm, comm_kind_name(kind));
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, as_count(n), MPI_FLOAT, MPI_SUM, comm, req));
    charge(kind, t0, (double)n * sizeof(float));
}

void comm_ireduce_scatter_sum(const float *x, float *out, const int *counts, MPI_Comm comm,
                              comm_kind_t kind, MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    const int size = comm_size(comm);
    double t0 = enter(start_of[kind]), n = 0;
    for (int r = 0; r < size; r++) n += counts[r];
    wait_peers[kind] = watchdog_peers_of(comm, comm_kind_name(kind));
    MPI_CHECK(MPI_Ireduce_scatter(x, out, counts, MPI_FLOAT, MPI_SUM, comm, req));
    charge(kind, t0, n * sizeof(float));
}

void comm_allgatherv_float(float *x, const int *counts, const int *displs, MPI_Comm comm,
                           comm_kind_t kind, const char *phase) {
    if (comm_size(comm) == 1) return;
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    double t0 = enter(phase);
    watchdog_enter(phase, watchdog_peers_of(comm, comm_kind_name(kind)));
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, MPI_FLOAT, comm));
    watchdog_leave();
    charge(kind, t0, (double)counts[rank] * sizeof(float));
}

void comm_iallgatherv_float(const float *mine, float *all, const int *counts, const int *displs,
                            MPI_Comm comm, comm_kind_t kind, MPI_Request *req) {
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    double t0 = enter(start_of[kind]);
    wait_peers[kind] = watchdog_peers_of(comm, comm_kind_name(kind));
    MPI_CHECK(MPI_Iallgatherv(mine, counts[rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, comm,
                              req));
    charge(kind, t0, (double)counts[rank] * sizeof(float));
}

void comm_gatherv_float(const float *mine, int count, float *all, const int *counts,
                        const int *displs, int root, MPI_Comm comm, const char *phase) {
    double t0 = enter(phase);
    watch(phase, comm);
    MPI_CHECK(MPI_Gatherv(mine, count, MPI_FLOAT, all, counts, displs, MPI_FLOAT, root, comm));
    unwatch(t0);
}

void comm_isend(const float *x, size_t n, int peer, int tag, MPI_Comm comm, comm_kind_t kind,
                MPI_Request *req) {
    double t0 = enter(start_of[kind]);
    wait_peers[kind] = watchdog_peers_of(comm, comm_kind_name(kind));
    MPI_CHECK(MPI_Isend(x, as_count(n), MPI_FLOAT, peer, tag, comm, req));
    charge(kind, t0, (double)n * sizeof(float));
}

void comm_irecv(float *x, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request *req) {
    wait_peers[COMM_PP] = watchdog_peers_of(comm, comm_kind_name(COMM_PP));
    MPI_CHECK(MPI_Irecv(x, as_count(n), MPI_FLOAT, peer, tag, comm, req));
}

/* A wait charged to `kind` (time, not bytes: those were counted when it started). */
static void wait_named(MPI_Request *req, comm_kind_t kind, const char *name, double bytes) {
    if (*req == MPI_REQUEST_NULL) return;
    double t0 = enter(name);
    watchdog_enter(phase_of[kind], wait_peers[kind] ? wait_peers[kind] : "");
    MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
    watchdog_leave();
    stats.seconds[kind] += now_sec() - t0;
    prof_end(PROF_COMM, bytes);
}

void comm_wait(MPI_Request *req, comm_kind_t kind) { wait_named(req, kind, wait_of[kind], 0); }

void comm_wait_recv(MPI_Request *req, size_t n) {
    wait_named(req, COMM_PP, "p2p recv wait", (double)n * sizeof(float));
}

void comm_allgather_float(const float *mine, int n, float *all, MPI_Comm comm, comm_kind_t kind) {
    double t0 = enter("all-gather");
    watchdog_enter("all-gather", watchdog_peers_of(comm, comm_kind_name(kind)));
    MPI_CHECK(MPI_Allgather(mine, n, MPI_FLOAT, all, n, MPI_FLOAT, comm));
    watchdog_leave();
    charge(kind, t0, (double)n * sizeof(float));
}

/* ---- setup and bookkeeping collectives ---------------------------------------------------- */

static void watch(const char *phase, MPI_Comm comm) {
    watchdog_enter(phase, watchdog_peers_of(comm, ""));
}

static void unwatch(double t0) {
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

void comm_alltoall_int(const int *send, int *recv, int n, MPI_Comm comm) {
    const int size = comm_size(comm);
    if (size == 1) {
        memcpy(recv, send, (size_t)n * sizeof(int));
        return;
    }
    double t0 = enter("ep counts");
    watchdog_enter(phase_of[COMM_EP], watchdog_peers_of(comm, comm_kind_name(COMM_EP)));
    MPI_CHECK(MPI_Alltoall(send, n, MPI_INT, recv, n, MPI_INT, comm));
    watchdog_leave();
    charge(COMM_EP, t0, (double)size * n * sizeof(int));
}

void comm_alltoallv_float(const float *send, const int *send_counts, const int *send_displs,
                          float *recv, const int *recv_counts, const int *recv_displs, int width,
                          MPI_Comm comm) {
    const int size = comm_size(comm);
    if (size == 1) {
        if (send_counts[0] > 0 && recv != send)
            memmove(recv + (size_t)recv_displs[0] * width, send + (size_t)send_displs[0] * width,
                    (size_t)send_counts[0] * width * sizeof(float));
        return;
    }
    /* one derived type of `width` floats keeps the counts in rows (no int overflow for wide
     * rows times many tokens) */
    MPI_Datatype row;
    MPI_CHECK(MPI_Type_contiguous(width, MPI_FLOAT, &row));
    MPI_CHECK(MPI_Type_commit(&row));
    double t0 = enter(phase_of[COMM_EP]), rows = 0;
    for (int r = 0; r < size; r++) rows += send_counts[r];
    watchdog_enter(phase_of[COMM_EP], watchdog_peers_of(comm, comm_kind_name(COMM_EP)));
    MPI_CHECK(MPI_Alltoallv(send, send_counts, send_displs, row, recv, recv_counts, recv_displs,
                            row, comm));
    watchdog_leave();
    charge(COMM_EP, t0, rows * width * sizeof(float));
    MPI_CHECK(MPI_Type_free(&row));
}
