/* comm_staged.c — the staged MPI transport (see comm_staged.h). */
#include "parallel/comm_staged.h"
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "parallel/comm_chunks.h"
#include "parallel/comm_transport.h"

typedef struct staged_group {
    MPI_Comm comm; /* a duplicate: the transport's traffic never meets MPI's own on the group */
    int size, rank;
    comm_staged_hooks_t hooks;
} staged_group_t;

/* One operation in flight: its MPI requests (one call, or a transfer too large for one made of
 * several: calls) and where its results go. */
typedef struct staged_op {
    MPI_Request req[2];
    int n_req, polls;
    mpi_calls_t *calls;
    float *in, *out;    /* host staging (NULL: none) */
    float *dest;        /* device memory that receives out[0, dest_n) on completion */
    size_t dest_n;
    MPI_Datatype row;   /* alltoallv's rows */
    int *ints;          /* the int counts and displacements MPI reads until the end */
} staged_op_t;

static long started, completed;
long comm_staged_started(void) { return started; }
long comm_staged_completed(void) { return completed; }

/* memcpy with the device memory open, for the transport's copies only. */
static void device_copy(const staged_group_t *s, void *dst, const void *src, size_t floats) {
    if (floats == 0) return;
    if (s->hooks.open) s->hooks.open();
    memcpy(dst, src, floats * sizeof(float));
    if (s->hooks.close) s->hooks.close();
}

static staged_op_t *op_new(void) {
    staged_op_t *o = xcalloc(1, sizeof *o);
    o->row = MPI_DATATYPE_NULL;
    started++;
    return o;
}

/* A host copy of n device floats (at least one float, so MPI never sees NULL). */
static float *stage(const staged_group_t *s, const float *device, size_t n) {
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    device_copy(s, h, device, n);
    return h;
}

static size_t extent(const int *counts, const int *displs, int size) {
    size_t e = 0;
    for (int r = 0; r < size; r++)
        if (counts[r] > 0 && (size_t)displs[r] + (size_t)counts[r] > e)
            e = (size_t)displs[r] + (size_t)counts[r];
    return e;
}

/* Whether n elements go in one MPI call (comm_chunks_limit: MPI 3's int counts, or the test
 * knob LLMT_COMM_MAX_COUNT); a larger transfer is made of several (parallel/comm_chunks.h), as
 * comm.c makes what travels by MPI on the host. */
static bool one_call(size_t n) { return n <= comm_chunks_limit(); }

/* The int counts and displacements of pieces that fit one call, kept by o until it finishes. */
static int *op_ints(staged_op_t *o, const size_t *counts, const size_t *displs, int size) {
    o->ints = xmalloc(2 * (size_t)size * sizeof(int));
    return comm_int_pieces(counts, displs, size, o->ints);
}

static size_t extent_of(const size_t *counts, const size_t *displs, int size) {
    size_t e = 0;
    for (int r = 0; r < size; r++)
        if (counts[r] > 0 && displs[r] + counts[r] > e) e = displs[r] + counts[r];
    return e;
}

static void *s_allreduce(void *ctx, float *x, size_t n, comm_op_t op) {
    staged_group_t *s = ctx;
    staged_op_t *o = op_new();
    o->out = stage(s, x, n);
    o->dest = x;
    o->dest_n = n;
    const MPI_Op mop = op == COMM_SUM ? MPI_SUM : MPI_MAX;
    if (one_call(n))
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, o->out, (int)n, MPI_FLOAT, mop, s->comm, &o->req[o->n_req++]));
    else
        comm_chunked_allreduce(o->out, n, mop, s->comm, o->calls = comm_calls_new());
    return o;
}

static void *s_reduce_scatter(void *ctx, const float *x, float *out, const size_t *counts) {
    staged_group_t *s = ctx;
    staged_op_t *o = op_new();
    size_t total = 0;
    for (int r = 0; r < s->size; r++) total += counts[r];
    o->in = stage(s, x, total);
    o->out = xmalloc((counts[s->rank] + 1) * sizeof(float));
    o->dest = out;
    o->dest_n = counts[s->rank];
    if (comm_pieces_fit(counts, NULL, s->size))
        MPI_CHECK(MPI_Ireduce_scatter(o->in, o->out, op_ints(o, counts, NULL, s->size), MPI_FLOAT,
                                      MPI_SUM, s->comm, &o->req[o->n_req++]));
    else
        comm_chunked_reduce_scatter(o->in, o->out, counts, s->comm, s->size, s->rank,
                                    o->calls = comm_calls_new());
    return o;
}

static void *s_allgatherv(void *ctx, const float *mine, float *all, const size_t *counts,
                          const size_t *displs) {
    staged_group_t *s = ctx;
    staged_op_t *o = op_new();
    o->in = stage(s, mine, counts[s->rank]);
    /* what lies between the pieces stays as it was: the staging starts as a copy */
    o->dest_n = extent_of(counts, displs, s->size);
    o->out = stage(s, all, o->dest_n);
    o->dest = all;
    if (comm_pieces_fit(counts, displs, s->size)) {
        const int *c = op_ints(o, counts, displs, s->size);
        MPI_CHECK(MPI_Iallgatherv(o->in, c[s->rank], MPI_FLOAT, o->out, c, c + s->size, MPI_FLOAT,
                                  s->comm, &o->req[o->n_req++]));
    } else {
        comm_chunked_allgatherv(o->in, o->out, counts, displs, s->comm, s->size, s->rank,
                                o->calls = comm_calls_new());
    }
    return o;
}

static void *s_send(void *ctx, const float *x, size_t n, int peer) {
    staged_group_t *s = ctx;
    staged_op_t *o = op_new();
    o->in = stage(s, x, n);
    if (one_call(n)) MPI_CHECK(MPI_Isend(o->in, (int)n, MPI_FLOAT, peer, 0, s->comm, &o->req[o->n_req++]));
    else comm_chunked_send(o->in, n, peer, 0, s->comm, o->calls = comm_calls_new());
    return o;
}

static void *s_recv(void *ctx, float *x, size_t n, int peer) {
    staged_group_t *s = ctx;
    staged_op_t *o = op_new();
    o->out = xmalloc((n ? n : 1) * sizeof(float));
    o->dest = x;
    o->dest_n = n;
    if (one_call(n)) MPI_CHECK(MPI_Irecv(o->out, (int)n, MPI_FLOAT, peer, 0, s->comm, &o->req[o->n_req++]));
    else comm_chunked_recv(o->out, n, peer, 0, s->comm, o->calls = comm_calls_new());
    return o;
}

static void *s_alltoallv(void *ctx, const float *send, const int *send_counts,
                         const int *send_displs, float *recv, const int *recv_counts,
                         const int *recv_displs, int width) {
    staged_group_t *s = ctx;
    staged_op_t *o = op_new();
    const size_t w = (size_t)width;
    o->in = stage(s, send, extent(send_counts, send_displs, s->size) * w);
    o->dest_n = extent(recv_counts, recv_displs, s->size) * w;
    o->out = stage(s, recv, o->dest_n);
    o->dest = recv;
    MPI_CHECK(MPI_Type_contiguous(width, MPI_FLOAT, &o->row));
    MPI_CHECK(MPI_Type_commit(&o->row));
    MPI_CHECK(MPI_Ialltoallv(o->in, send_counts, send_displs, o->row, o->out, recv_counts,
                             recv_displs, o->row, s->comm, &o->req[o->n_req++]));
    return o;
}

static int s_poll(void *ctx, void *event) {
    staged_group_t *s = ctx;
    staged_op_t *o = event;
    int done = 0;
    if (o->calls) MPI_CHECK(MPI_Testall(o->calls->n, o->calls->r, &done, MPI_STATUSES_IGNORE));
    else MPI_CHECK(MPI_Testall(o->n_req, o->req, &done, MPI_STATUSES_IGNORE));
    if (!done || ++o->polls < s->hooks.min_polls) return 0;
    if (o->calls) comm_calls_free(o->calls);
    if (o->dest) device_copy(s, o->dest, o->out, o->dest_n);
    if (o->row != MPI_DATATYPE_NULL) MPI_CHECK(MPI_Type_free(&o->row));
    xfree(o->in);
    xfree(o->out);
    xfree(o->ints);
    xfree(o);
    completed++;
    return 1;
}

static void s_detach(void *ctx) {
    staged_group_t *s = ctx;
    MPI_CHECK(MPI_Comm_free(&s->comm));
    xfree(s);
}

static const comm_transport_t staged_transport = {"staged MPI", s_allreduce, s_reduce_scatter,
                                                  s_allgatherv, s_send, s_recv, s_alltoallv,
                                                  s_poll, s_detach};

void comm_staged_attach(comm_group_t *g, const comm_staged_hooks_t *hooks) {
    staged_group_t *s = xcalloc(1, sizeof *s);
    MPI_CHECK(MPI_Comm_dup(comm_group_mpi(g), &s->comm));
    s->size = comm_group_size(g);
    s->rank = comm_group_rank(g);
    if (hooks) s->hooks = *hooks;
    if (s->hooks.min_polls < 1) s->hooks.min_polls = 1;
    comm_group_attach(g, &staged_transport, s);
}
