/* comm_nccl.c — NCCL as the device transport of the data-path groups (see comm_nccl.h and
 * comm_transport.h). Plain C on the NCCL and CUDA runtime APIs (mpicc with the CUDA headers). */
#include "parallel/comm_nccl.h"
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "parallel/comm_transport.h"
#include "parallel/watchdog.h"

_Static_assert(sizeof(ncclUniqueId) == COMM_NCCL_ID_BYTES, "COMM_NCCL_ID_BYTES");

/* The CUDA backend's kernels run on the legacy default stream (kernels/cuda/): every transfer
 * waits for what was enqueued there before it started. */
#define COMPUTE_STREAM ((cudaStream_t)0)

/* One direction of traffic: a communicator and the stream its operations run on. */
typedef struct lane {
    ncclComm_t comm;
    cudaStream_t stream;
} lane_t;

typedef struct nccl_group {
    comm_nccl_use_t use;
    int size, rank;
    lane_t coll;          /* COMM_NCCL_COLLECTIVE: every operation */
    lane_t up, down;      /* COMM_NCCL_P2P: sends to higher ranks (and their receives), lower;
                             one stream for both would deadlock 1F1B, and with these two every
                             schedule's lists run in order (train/schedule.c
                             sched_check_ordered, checked before each pipeline runs) */
    cudaEvent_t computed; /* recorded on the compute stream as each operation starts */
    cudaEvent_t *idle;    /* events free for the next operation (a stack) */
    int n_idle, cap_idle;
    cudaEvent_t *made;    /* every event made, idle or still in a request (destroyed at detach:
                             a request dropped without its wait does not leak its event) */
    int n_made, cap_made;
} nccl_group_t;

/* ---- events --------------------------------------------------------------------------------- */

/* Append e to a grow-only stack of events (xrealloc_small: plain malloc memory). */
static void push_event(cudaEvent_t **v, int *n, int *cap, cudaEvent_t e) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *v = xrealloc_small(*v, (size_t)*cap * sizeof **v);
    }
    (*v)[(*n)++] = e;
}

static cudaEvent_t take_event(nccl_group_t *q) {
    if (q->n_idle > 0) return q->idle[--q->n_idle];
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    push_event(&q->made, &q->n_made, &q->cap_made, e);
    return e;
}

static void give_event(nccl_group_t *q, cudaEvent_t e) {
    push_event(&q->idle, &q->n_idle, &q->cap_idle, e);
}

/* Before an operation on lane l: l's stream waits for the compute stream's work so far (the
 * operation reads results computed by it, or overwrites buffers its kernels still read). */
static void after_compute(nccl_group_t *q, const lane_t *l) {
    CUDA_CHECK(cudaEventRecord(q->computed, COMPUTE_STREAM));
    CUDA_CHECK(cudaStreamWaitEvent(l->stream, q->computed, 0));
}

/* After it: the event its request waits for. */
static void *finished(nccl_group_t *q, const lane_t *l) {
    cudaEvent_t e = take_event(q);
    CUDA_CHECK(cudaEventRecord(e, l->stream));
    return (void *)e;
}

static lane_t *collective_lane(nccl_group_t *q) {
    ASSERT(q->use == COMM_NCCL_COLLECTIVE);
    return &q->coll;
}

/* ---- the transport -------------------------------------------------------------------------- */

static void *t_allreduce(void *ctx, float *x, size_t n, comm_op_t op) {
    nccl_group_t *q = ctx;
    lane_t *l = collective_lane(q);
    after_compute(q, l);
    NCCL_CHECK(ncclAllReduce(x, x, n, ncclFloat32, op == COMM_SUM ? ncclSum : ncclMax, l->comm,
                             l->stream));
    return finished(q, l);
}

/* Whether the pieces are the equal, consecutive ones NCCL's own collectives take. */
static bool equal_pieces(const nccl_group_t *q, const size_t *counts, const size_t *displs) {
    for (int r = 0; r < q->size; r++)
        if (counts[r] != counts[0] || (displs && displs[r] != (size_t)r * counts[0])) return false;
    return true;
}

static void *t_reduce_scatter(void *ctx, const float *x, float *out, const size_t *counts) {
    nccl_group_t *q = ctx;
    lane_t *l = collective_lane(q);
    after_compute(q, l);
    if (equal_pieces(q, counts, NULL)) {
        NCCL_CHECK(ncclReduceScatter(x, out, counts[0], ncclFloat32, ncclSum, l->comm,
                                     l->stream));
    } else { /* ZeRO's last partition is shorter: one reduce onto each owner */
        size_t displ = 0;
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < q->size; r++) {
            if (counts[r] > 0) /* out is only written on the root */
                NCCL_CHECK(ncclReduce(x + displ, out, counts[r], ncclFloat32, ncclSum, r,
                                      l->comm, l->stream));
            displ += counts[r];
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    return finished(q, l);
}

static void *t_allgatherv(void *ctx, const float *mine, float *all, const size_t *counts,
                          const size_t *displs) {
    nccl_group_t *q = ctx;
    lane_t *l = collective_lane(q);
    after_compute(q, l);
    if (equal_pieces(q, counts, displs)) {
        NCCL_CHECK(ncclAllGather(mine, all, counts[0], ncclFloat32, l->comm, l->stream));
    } else { /* one broadcast from each rank of its piece */
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < q->size; r++)
            if (counts[r] > 0)
                NCCL_CHECK(ncclBroadcast(r == q->rank ? (const void *)mine : all + displs[r],
                                         all + displs[r], counts[r], ncclFloat32, r,
                                         l->comm, l->stream));
        NCCL_CHECK(ncclGroupEnd());
    }
    return finished(q, l);
}

/* The lane of a transfer between this rank and peer: `up` carries the traffic from lower ranks
 * to higher ones. */
static lane_t *p2p_lane(nccl_group_t *q, int peer, bool sending) {
    ASSERT(q->use == COMM_NCCL_P2P && peer >= 0 && peer < q->size && peer != q->rank);
    const bool upward = sending ? peer > q->rank : peer < q->rank;
    return upward ? &q->up : &q->down;
}

static void *t_send(void *ctx, const float *x, size_t n, int peer) {
    nccl_group_t *q = ctx;
    lane_t *l = p2p_lane(q, peer, true);
    after_compute(q, l);
    NCCL_CHECK(ncclSend(x, n, ncclFloat32, peer, l->comm, l->stream));
    return finished(q, l);
}

static void *t_recv(void *ctx, float *x, size_t n, int peer) {
    nccl_group_t *q = ctx;
    lane_t *l = p2p_lane(q, peer, false);
    after_compute(q, l);
    NCCL_CHECK(ncclRecv(x, n, ncclFloat32, peer, l->comm, l->stream));
    return finished(q, l);
}

static void *t_alltoallv(void *ctx, const float *send, const int *send_counts,
                         const int *send_displs, float *recv, const int *recv_counts,
                         const int *recv_displs, int width) {
    nccl_group_t *q = ctx;
    lane_t *l = collective_lane(q);
    after_compute(q, l);
    const size_t w = (size_t)width;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < q->size; r++) {
        if (send_counts[r] > 0)
            NCCL_CHECK(ncclSend(send + (size_t)send_displs[r] * w, (size_t)send_counts[r] * w,
                                ncclFloat32, r, l->comm, l->stream));
        if (recv_counts[r] > 0)
            NCCL_CHECK(ncclRecv(recv + (size_t)recv_displs[r] * w, (size_t)recv_counts[r] * w,
                                ncclFloat32, r, l->comm, l->stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    return finished(q, l);
}

/* A failure NCCL found on its own (a peer gone, a network error) ends the job here, with its
 * words, instead of leaving the event pending until the watchdog's timeout. */
static void check_async(const lane_t *l) {
    if (!l->comm) return;
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(l->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress)
        die_call(__FILE__, __LINE__, "ncclCommGetAsyncError", ncclGetErrorString(async));
}

static int t_poll(void *ctx, void *event) {
    nccl_group_t *q = ctx;
    const cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaSuccess) {
        give_event(q, (cudaEvent_t)event);
        return 1;
    }
    if (e != cudaErrorNotReady) CUDA_CHECK(e);
    check_async(&q->coll);
    check_async(&q->up);
    check_async(&q->down);
    return 0;
}

static void lane_destroy(lane_t *l) {
    if (!l->comm) return;
    CUDA_CHECK(cudaStreamSynchronize(l->stream));
    NCCL_CHECK(ncclCommDestroy(l->comm));
    CUDA_CHECK(cudaStreamDestroy(l->stream));
}

static void t_detach(void *ctx) {
    nccl_group_t *q = ctx;
    lane_destroy(&q->coll);
    lane_destroy(&q->up);
    lane_destroy(&q->down);
    for (int i = 0; i < q->n_made; i++) CUDA_CHECK(cudaEventDestroy(q->made[i]));
    CUDA_CHECK(cudaEventDestroy(q->computed));
    free(q->idle); /* xrealloc_small's: plain malloc memory */
    free(q->made);
    xfree(q);
}

static const comm_transport_t nccl_transport = {
    "nccl",         t_allreduce, t_reduce_scatter, t_allgatherv, t_send, t_recv, t_alltoallv,
    t_poll,         t_detach};

/* ---- setup ---------------------------------------------------------------------------------- */

int comm_nccl_unique_id(MPI_Comm comm, unsigned char *id, const char *phase, char *err,
                        size_t errlen) {
    int rank = 0, rc = 0;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    ncclUniqueId u;
    memset(&u, 0, sizeof u);
    if (rank == 0) {
        const ncclResult_t r = ncclGetUniqueId(&u);
        if (r != ncclSuccess) {
            snprintf(err, errlen, "ncclGetUniqueId: %s (%s)", ncclGetErrorString(r),
                     ncclGetLastError(NULL));
            memset(&u, 0, sizeof u);
            rc = -1;
        }
    }
    comm_bcast(&u, (int)sizeof u, MPI_BYTE, 0, comm, phase);
    memcpy(id, &u, sizeof u);
    return rc;
}

/* One communicator and its stream (collective over the group). */
static int lane_create(lane_t *l, MPI_Comm comm, int size, int rank, const char *phase, char *err,
                       size_t errlen) {
    unsigned char id[COMM_NCCL_ID_BYTES];
    const int id_rc = comm_nccl_unique_id(comm, id, phase, err, errlen);
    int bad = id_rc != 0, any_bad = 0;
    comm_allreduce(&bad, 1, MPI_INT, MPI_MAX, comm, phase); /* rank 0's failure, known to all */
    any_bad = bad;
    if (any_bad) {
        if (id_rc == 0) snprintf(err, errlen, "rank 0 of the group could not make a NCCL id");
        return -1;
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    watchdog_enter(phase, "");
    const ncclResult_t r = ncclCommInitRank(&l->comm, size, u, rank);
    watchdog_leave();
    if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclCommInitRank: %s (%s)", ncclGetErrorString(r),
                 ncclGetLastError(NULL));
        l->comm = NULL;
        return -1;
    }
    const cudaError_t e = cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
        (void)ncclCommDestroy(l->comm);
        l->comm = NULL;
        return -1;
    }
    return 0;
}

int comm_nccl_attach(comm_group_t *g, comm_nccl_use_t use, char *err, size_t errlen) {
    nccl_group_t *q = xcalloc(1, sizeof *q);
    q->use = use;
    q->size = comm_group_size(g);
    q->rank = comm_group_rank(g);
    MPI_Comm comm = comm_group_mpi(g);
    const char *phase = "creating the NCCL communicators";
    int rc = 0;
    if (use == COMM_NCCL_COLLECTIVE) {
        rc = lane_create(&q->coll, comm, q->size, q->rank, phase, err, errlen);
    } else {
        rc = lane_create(&q->up, comm, q->size, q->rank, phase, err, errlen);
        if (rc == 0) rc = lane_create(&q->down, comm, q->size, q->rank, phase, err, errlen);
    }
    if (rc == 0) {
        const cudaError_t e = cudaEventCreateWithFlags(&q->computed, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            snprintf(err, errlen, "cudaEventCreateWithFlags: %s", cudaGetErrorString(e));
            rc = -1;
        }
    }
    if (rc != 0) {
        if (q->coll.comm) (void)ncclCommDestroy(q->coll.comm);
        if (q->up.comm) (void)ncclCommDestroy(q->up.comm);
        if (q->down.comm) (void)ncclCommDestroy(q->down.comm);
        xfree(q);
        return rc;
    }
    comm_group_attach(g, &nccl_transport, q);
    return 0;
}

void comm_nccl_attach_grid(grid_t *grid) {
    comm_group_t *groups[GRID_DATA_GROUPS];
    bool p2p[GRID_DATA_GROUPS];
    const char *names[GRID_DATA_GROUPS];
    const int n = grid_data_groups(grid, groups, p2p, names);
    /* every group is tried even after a failure, so no member of a later group waits in its
     * init for this rank; the first failure is agreed on once all are done */
    char err[COMM_MSG_MAX] = "", first[COMM_MSG_MAX + 64] = "";
    for (int i = 0; i < n; i++)
        if (comm_nccl_attach(groups[i], p2p[i] ? COMM_NCCL_P2P : COMM_NCCL_COLLECTIVE, err,
                             sizeof err) != 0 &&
            !first[0])
            snprintf(first, sizeof first, "&run device = 'cuda': NCCL for the %s group: %s",
                     names[i], err);
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "creating the NCCL communicators",
                       first[0] ? first : NULL);
    int world_rank = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    if (world_rank == 0)
        printf("data path: %s for dp %d, tp %d, pp %d (one communicator per direction), ep %d; "
               "each group on a stream of its own, host values by MPI\n",
               comm_nccl_version(), grid->dp, grid->tp, grid->pp, grid->ep);
}

const char *comm_nccl_version(void) {
    static char text[32];
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
    snprintf(text, sizeof text, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return text;
}
