/* comm_transport.h — what a device transport gives comm.c so a group's float buffers can be
 * device memory: the data-path operations, enqueued on the transport's stream for the group and
 * each ending in an event, and a poll of that event. NCCL implements it (parallel/comm_nccl.c,
 * CUDA build); validation/unit/test_comm_seam.c implements a host one to test comm.c's side.
 * Every operation is called on all ranks of the group in the same order (as MPI's collectives).
 * `ctx` is the transport's state for one group (given to comm_group_attach).
 * Owns: nothing. Uses: nothing. Used by: parallel/comm.c, parallel/comm_nccl.c. */
#ifndef LLMT_COMM_TRANSPORT_H
#define LLMT_COMM_TRANSPORT_H
#include <stddef.h>
#include "parallel/comm.h"

typedef enum { COMM_SUM, COMM_MAX } comm_op_t;

typedef struct comm_transport {
    const char *name; /* "nccl" */
    /* Each returns the event that completes when the operation has (never NULL). */
    void *(*allreduce)(void *ctx, float *x, size_t n, comm_op_t op);
    /* rank r's elements [displ_r, displ_r + counts[r]) of the sum into out (displ = prefix sums) */
    void *(*reduce_scatter)(void *ctx, const float *x, float *out, const size_t *counts);
    /* `mine` (counts[me] floats; may be all + displs[me]) into all + displs[r] for every r */
    void *(*allgatherv)(void *ctx, const float *mine, float *all, const size_t *counts,
                        const size_t *displs);
    void *(*send)(void *ctx, const float *x, size_t n, int peer);
    void *(*recv)(void *ctx, float *x, size_t n, int peer);
    /* rows of `width` floats (counts, displacements in rows) */
    void *(*alltoallv)(void *ctx, const float *send, const int *send_counts,
                       const int *send_displs, float *recv, const int *recv_counts,
                       const int *recv_displs, int width);
    /* 1: the event has completed (and is released: never polled again), 0: not yet */
    int (*poll)(void *ctx, void *event);
    /* the group ends: release ctx (after every event was polled to completion) */
    void (*detach)(void *ctx);
} comm_transport_t;

/* Attach a transport to g (once, at setup): from now on g's float buffers are device memory and
 * travel by t. */
void comm_group_attach(comm_group_t *g, const comm_transport_t *t, void *ctx);
#endif
