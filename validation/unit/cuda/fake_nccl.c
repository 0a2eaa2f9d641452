/* fake_nccl.c — the NCCL and CUDA runtime calls of src/parallel/comm_nccl.c, done by MPI on host
 * memory, so that file's own logic (which lane a transfer takes, the uneven pieces as per-root
 * reduces and broadcasts, the in-place gathers, the events and their polling) runs on a machine
 * without a GPU (test_comm_nccl_fake.c). Linked instead of libnccl and libcudart.
 * What it keeps of the real semantics: every operation is non-blocking and finishes when its
 * stream's event says so (cudaEventQuery), collectives on one communicator in the same order on
 * every rank, receives matched to sends by order per peer (no tags). What it does not: a send does
 * not hold its stream until the peer receives (MPI buffers it), and stream order is not enforced
 * between operations (each event waits only for the operations recorded into it).
 * ncclCommInitRank turns the unique id into an MPI_Comm_split of the world, so every world rank
 * must make its communicators in the same sequence (comm_nccl_attach_grid does). */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct CUstream_st { /* the requests enqueued since the last event was recorded */
    MPI_Request *req;
    int n, cap;
};
struct CUevent_st {
    MPI_Request *req;
    int n;
};
struct ncclComm {
    MPI_Comm comm;
    int size, rank;
};

static void push(cudaStream_t s, MPI_Request r) {
    if (!s) return; /* the compute stream: nothing of ours runs there */
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->req = realloc(s->req, (size_t)s->cap * sizeof *s->req);
    }
    s->req[s->n++] = r;
}

static MPI_Datatype type_of(ncclDataType_t t) { return t == ncclFloat32 ? MPI_FLOAT : MPI_BYTE; }
static MPI_Op op_of(ncclRedOp_t op) { return op == ncclMax ? MPI_MAX : MPI_SUM; }

/* ---- CUDA runtime ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = calloc(1, sizeof **s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s && s->n) MPI_Waitall(s->n, s->req, MPI_STATUSES_IGNORE);
    if (s) s->n = 0;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (s) free(s->req);
    free(s);
    return cudaSuccess;
}
static int live_events; /* made and not yet destroyed: fake_cuda_live_events() */
int fake_cuda_live_events(void) { return live_events; }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    live_events++;
    return cudaSuccess;
}
/* As CUDA's: the work recorded in it still completes (here: its requests are waited for). */
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return cudaSuccess;
    if (e->n) MPI_Waitall(e->n, e->req, MPI_STATUSES_IGNORE);
    free(e->req);
    free(e);
    live_events--;
    return cudaSuccess;
}
/* The event takes the stream's requests so far (the compute stream has none). */
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    free(e->req);
    e->req = NULL;
    e->n = 0;
    if (s && s->n) {
        e->req = s->req;
        e->n = s->n;
        s->req = NULL;
        s->n = s->cap = 0;
    }
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    int done = 1;
    if (e->n) MPI_Testall(e->n, e->req, &done, MPI_STATUSES_IGNORE);
    return done ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)s, (void)e, (void)flags; /* host memory: the compute before it is already done */
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake CUDA error"; }

/* ---- NCCL ---- */

const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "fake NCCL error"; }
const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return "";
}
ncclResult_t ncclGetVersion(int *v) {
    *v = 22809;
    return ncclSuccess;
}
/* An id names the communicator to be: its maker's world rank and a count, as the split color. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int made;
    int world_rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    memset(id, 0, sizeof *id);
    const int color = world_rank * 4096 + ++made;
    memcpy(id->internal, &color, sizeof color);
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank) {
    int color;
    memcpy(&color, id.internal, sizeof color);
    *c = calloc(1, sizeof **c);
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &(*c)->comm);
    MPI_Comm_size((*c)->comm, &(*c)->size);
    MPI_Comm_rank((*c)->comm, &(*c)->rank);
    return (*c)->size == nranks && (*c)->rank == rank ? ncclSuccess : ncclInvalidUsage;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    MPI_Comm_free(&c->comm);
    free(c);
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    (void)c;
    *r = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) { return ncclSuccess; } /* every operation is non-blocking */
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    MPI_Request r;
    MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, type_of(t), op_of(op),
                   c->comm, &r);
    push(s, r);
    return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    MPI_Request r;
    MPI_Ireduce_scatter_block(send, recv, (int)count, type_of(t), op_of(op), c->comm, &r);
    push(s, r);
    return ncclSuccess;
}
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                        ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s) {
    MPI_Request r;
    MPI_Ireduce(send, c->rank == root ? recv : NULL, (int)count, type_of(t), op_of(op), root,
                c->comm, &r);
    push(s, r);
    return ncclSuccess;
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclComm_t c, cudaStream_t s) {
    MPI_Request r;
    const bool in_place = (const float *)send == (const float *)recv + (size_t)c->rank * count;
    MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, type_of(t), recv, (int)count,
                   type_of(t), c->comm, &r);
    push(s, r);
    return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t s) {
    if (c->rank == root && send != recv) memcpy(recv, send, count * sizeof(float));
    MPI_Request r;
    MPI_Ibcast(recv, (int)count, type_of(t), root, c->comm, &r);
    push(s, r);
    return ncclSuccess;
}
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
    MPI_Request r;
    MPI_Isend(send, (int)count, type_of(t), peer, 0, c->comm, &r);
    push(s, r);
    return ncclSuccess;
}
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
    MPI_Request r;
    MPI_Irecv(recv, (int)count, type_of(t), peer, 0, c->comm, &r);
    push(s, r);
    return ncclSuccess;
}
