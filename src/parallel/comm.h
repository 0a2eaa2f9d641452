/* comm.h — the data path's collectives and point-to-point transfers, each timed and counted per
 * kind so a step's time splits into compute / p2p wait / tp all-reduce / dp all-reduce. Every
 * timed call is also a PROF_COMM phase of core/prof.h (the timeline event, with bytes).
 *
 * No MPI type appears here: a call names a communication group (comm_group_t, made from an MPI
 * communicator by comm_host.h) and returns a request (comm_req_t). A group carries its data one
 * of two ways, chosen once when it is made:
 *  - MPI (the CPU backend): the buffers are host memory, the calls are MPI's.
 *  - a device transport (comm_transport.h; NCCL in the CUDA build, parallel/comm_nccl.c): the
 *    float buffers are device memory; each operation is enqueued on the group's own stream
 *    after the work already enqueued on the compute stream (so it sees the results computed so
 *    far), and a request is an event on that stream. Blocking calls and waits poll the event
 *    (never a blocking device synchronisation), under the watchdog like every MPI wait.
 * Host scalars and counts (the _double and _int calls, comm_gatherv_float's gradient dump)
 * always travel by MPI, whichever way the group's floats travel.
 *
 * Owns: the per-kind statistics and the groups. Uses: MPI (comm.c), core/, parallel/watchdog.
 * Used by: model/ (tensor and expert parallelism), train/ (pipeline, data parallel, ZeRO). */
#ifndef LLMT_COMM_H
#define LLMT_COMM_H
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    COMM_TP, COMM_PP, COMM_DP, COMM_EMBED, COMM_OTHER, COMM_EP,
    COMM_CP, /* ring attention's K/V and dK/dV blocks around the cp group */
    COMM_KINDS
} comm_kind_t;

typedef struct comm_stats {
    double seconds[COMM_KINDS]; /* time spent inside blocking calls / waits */
    double bytes[COMM_KINDS];   /* payload bytes this rank contributed (sent) */
    long calls[COMM_KINDS];
} comm_stats_t;

/* The statistics of this process (one set: a rank is one process). */
comm_stats_t *comm_stats(void);
void comm_stats_reset(void);
const char *comm_kind_name(comm_kind_t k);

/* A communication group: its ranks, the watchdog's text for them, and how its data travels. */
typedef struct comm_group comm_group_t;
int comm_group_size(const comm_group_t *g);
int comm_group_rank(const comm_group_t *g);
/* Whether the group's float buffers are device memory (a device transport is attached). */
bool comm_group_on_device(const comm_group_t *g);
/* The 1-rank group of this process alone (made on first use; data on MPI). */
const comm_group_t *comm_group_self(void);

/* A transfer in flight. Zero-initialised (COMM_REQ_NULL) = nothing to wait for; comm_wait
 * leaves it so. The handle is an MPI request or the transport's event. A transfer MPI makes in
 * several calls (more elements than one MPI call takes: comm_max_count), or whose MPI call
 * reads int counts until it finishes, keeps its requests and those counts in `calls` instead
 * (comm.c's, freed when it finishes). A pending request is not copied: the copy waited for
 * would free what the other still names. */
typedef struct comm_req {
    const comm_group_t *group; /* NULL: nothing pending */
    int on_device;             /* 1: handle.ptr is the transport's event */
    void *calls;               /* non-NULL: MPI's requests are there, not in the handle */
    union {
        void *ptr;
        long long word; /* an MPI_Request is a pointer in Open MPI, an int in MPICH */
    } handle;
} comm_req_t;
#define COMM_REQ_NULL ((comm_req_t){0})
static inline bool comm_req_pending(const comm_req_t *r) { return r->group != 0; }

/* The most elements one MPI call moves (MPI 3 counts and displacements are int): INT_MAX, or
 * the value of the environment variable LLMT_COMM_MAX_COUNT, read when the first group is made
 * (a developer's test knob: a tiny model then goes through every chunked path). A transfer of
 * more elements is made as several MPI calls, each on a contiguous run of at most this many:
 * an all-reduce as consecutive chunks; a reduce-scatter as a reduce of each rank's piece onto
 * it, chunked; an all-gather as a broadcast of each rank's piece from it, chunked; a
 * point-to-point transfer as consecutive messages. The chunks are started in the same order on
 * every rank; one request (comm_req_t) holds them all, so comm_wait and comm_test see the whole
 * transfer, and the bytes and calls are counted once for it. A device transport takes size_t
 * counts itself. */
size_t comm_max_count(void);

/* In-place sum / max all-reduce of n floats over g; no-op for a 1-rank group. */
void comm_allreduce_sum(float *x, size_t n, const comm_group_t *g, comm_kind_t kind);
void comm_allreduce_max(float *x, size_t n, const comm_group_t *g, comm_kind_t kind);
/* n host doubles (loss sums, norms, statistics): always MPI. */
void comm_allreduce_sum_double(double *x, int n, const comm_group_t *g, comm_kind_t kind);
/* Non-blocking sum all-reduce (started now, finished by comm_wait). */
void comm_iallreduce_sum(float *x, size_t n, const comm_group_t *g, comm_kind_t kind,
                         comm_req_t *req);
/* The same for n host doubles (MPI). */
void comm_iallreduce_sum_double(double *x, int n, const comm_group_t *g, comm_kind_t kind,
                                comm_req_t *req);
/* Non-blocking sum reduce-scatter of floats: x[0, sum(counts)) from every rank, summed; rank r
 * receives elements [displ_r, displ_r + counts[r]) into out (ZeRO-2/3 gradients). */
void comm_ireduce_scatter_sum(const float *x, float *out, const size_t *counts,
                              const comm_group_t *g, comm_kind_t kind, comm_req_t *req);
/* Blocking all-gather of variable-sized float pieces, in place: rank r's piece is already at
 * x + displs[r] (ZeRO parameter partitions). */
void comm_allgatherv_float(float *x, const size_t *counts, const size_t *displs,
                           const comm_group_t *g, comm_kind_t kind, const char *phase);
/* Blocking all-gather of equal pieces, in place: rank r's n floats are already at all + r n
 * (sequence parallelism's gather of token rows before a column-parallel product). */
void comm_allgather_inplace(float *all, size_t n, const comm_group_t *g, comm_kind_t kind,
                            const char *phase);
/* Blocking sum reduce-scatter of equal pieces: x[size n] from every rank summed, rank r keeps
 * elements [r n, (r + 1) n) in out[n] (sequence parallelism, after a row-parallel product).
 * The group has more than one rank. */
void comm_reduce_scatter_block_sum(const float *x, float *out, size_t n, const comm_group_t *g,
                                   comm_kind_t kind, const char *phase);
/* The same for 16-bit elements (a 16-bit weights copy): counts and displs count 16-bit elements
 * and must be even (ZeRO's pieces are multiples of 16); the pieces travel as pairs packed in
 * floats, which every transport copies bit for bit. */
void comm_allgatherv_half(void *x, const size_t *counts, const size_t *displs,
                          const comm_group_t *g, comm_kind_t kind, const char *phase);
/* Pieces of 16-bit elements (counts, displs; n ranks; each even) as the pieces of floats that
 * carry them in pairs (for the float calls, as comm_allgatherv_half does). */
void comm_half_pieces(const size_t *counts, const size_t *displs, int n, size_t *fcounts,
                      size_t *fdispls);
/* Non-blocking all-gather of variable-sized pieces: `mine` (counts[me] floats) into
 * all + displs[r] (ZeRO-3 layer gathers; finished by comm_wait). */
void comm_iallgatherv_float(const float *mine, float *all, const size_t *counts,
                            const size_t *displs, const comm_group_t *g, comm_kind_t kind,
                            comm_req_t *req);
/* Blocking gather of variable-sized float pieces onto root (the gradient dump under ZeRO): host
 * buffers, MPI. */
void comm_gatherv_float(const float *mine, size_t count, float *all, const size_t *counts,
                        const size_t *displs, int root, const comm_group_t *g, const char *phase);
/* Non-blocking point-to-point of n floats to / from group rank `peer`. */
void comm_isend(const float *x, size_t n, int peer, int tag, const comm_group_t *g,
                comm_kind_t kind, comm_req_t *req);
void comm_irecv(float *x, size_t n, int peer, int tag, const comm_group_t *g, comm_req_t *req);
/* Wait for one request (COMM_REQ_NULL is fine), charging the wait to `kind`. */
void comm_wait(comm_req_t *req, comm_kind_t kind);
/* Whether the request has finished, without waiting (it is then as after comm_wait). Also
 * lets MPI progress a non-blocking collective while the caller computes. */
bool comm_test(comm_req_t *req);
/* Wait for a receive of n floats started by comm_irecv (charged to COMM_PP; the timeline shows it
 * as "p2p recv wait" with its bytes). */
void comm_wait_recv(comm_req_t *req, size_t n);
/* Allgather of n floats per rank (generation's logits over tp), charged to `kind`. */
void comm_allgather_float(const float *mine, int n, float *all, const comm_group_t *g,
                          comm_kind_t kind);
/* Expert parallelism's token exchange (charged to COMM_EP, watched): every rank of g sends
 * send_counts[r] items to rank r and receives recv_counts[r] from it. comm_alltoall_int:
 * n host ints to each rank (the counts exchange, before the payload; MPI); comm_alltoallv_float:
 * rows of `width` floats, counts and displacements in rows. Every rank calls both even with
 * nothing to send, so no rank is left waiting. */
void comm_alltoall_int(const int *send, int *recv, int n, const comm_group_t *g);
void comm_alltoallv_float(const float *send, const int *send_counts, const int *send_displs,
                          float *recv, const int *recv_counts, const int *recv_displs, int width,
                          const comm_group_t *g);
#endif
