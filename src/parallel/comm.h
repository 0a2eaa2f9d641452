/* comm.h — the collectives and point-to-point transfers of training, each timed and counted
 * per kind so a step's time splits into compute / p2p wait / tp all-reduce / dp all-reduce.
 * Every timed call is also a PROF_COMM phase of core/prof.h (the timeline event, with bytes).
 * Owns: the per-kind statistics. Uses: MPI, core/. Used by: model/ (tensor parallel),
 * train/ (pipeline, data parallel). */
#ifndef LLMT_COMM_H
#define LLMT_COMM_H
#include <mpi.h>
#include <stddef.h>

typedef enum { COMM_TP, COMM_PP, COMM_DP, COMM_EMBED, COMM_OTHER, COMM_EP, COMM_KINDS } comm_kind_t;

typedef struct comm_stats {
    double seconds[COMM_KINDS]; /* time spent inside blocking calls / waits */
    double bytes[COMM_KINDS];   /* payload bytes this rank contributed (sent) */
    long calls[COMM_KINDS];
} comm_stats_t;

/* The statistics of this process (one set: a rank is one process). */
comm_stats_t *comm_stats(void);
void comm_stats_reset(void);
const char *comm_kind_name(comm_kind_t k);

/* In-place sum / max all-reduce of n floats over comm; no-op for a 1-rank communicator. */
void comm_allreduce_sum(float *x, size_t n, MPI_Comm comm, comm_kind_t kind);
void comm_allreduce_max(float *x, size_t n, MPI_Comm comm, comm_kind_t kind);
void comm_allreduce_sum_double(double *x, int n, MPI_Comm comm, comm_kind_t kind);
/* Non-blocking sum all-reduce (started now, finished by comm_wait). */
void comm_iallreduce_sum(float *x, size_t n, MPI_Comm comm, comm_kind_t kind, MPI_Request *req);
/* The same for n doubles (completed by comm_wait). */
void comm_iallreduce_sum_double(double *x, int n, MPI_Comm comm, comm_kind_t kind,
                                MPI_Request *req);
/* Non-blocking sum reduce-scatter of floats: x[0, sum(counts)) from every rank, summed; rank r
 * receives elements [displ_r, displ_r + counts[r]) into out (ZeRO-2/3 gradients). */
void comm_ireduce_scatter_sum(const float *x, float *out, const int *counts, MPI_Comm comm,
                              comm_kind_t kind, MPI_Request *req);
/* Blocking all-gather of variable-sized float pieces, in place: rank r's piece is already at
 * x + displs[r] (ZeRO parameter partitions). */
void comm_allgatherv_float(float *x, const int *counts, const int *displs, MPI_Comm comm,
                           comm_kind_t kind, const char *phase);
/* Non-blocking all-gather of variable-sized pieces: `mine` (counts[me] floats) into
 * all + displs[r] (ZeRO-3 layer gathers; finished by comm_wait). */
void comm_iallgatherv_float(const float *mine, float *all, const int *counts, const int *displs,
                            MPI_Comm comm, comm_kind_t kind, MPI_Request *req);
/* Blocking gather of variable-sized float pieces onto root (checkpoint writes under ZeRO). */
void comm_gatherv_float(const float *mine, int count, float *all, const int *counts,
                        const int *displs, int root, MPI_Comm comm, const char *phase);
/* Non-blocking point-to-point of n floats. */
void comm_isend(const float *x, size_t n, int peer, int tag, MPI_Comm comm, comm_kind_t kind,
                MPI_Request *req);
void comm_irecv(float *x, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request *req);
/* Wait for one request (MPI_REQUEST_NULL is fine), charging the wait to `kind`. */
void comm_wait(MPI_Request *req, comm_kind_t kind);
/* Wait for a receive of n floats started by comm_irecv (charged to COMM_PP; the timeline shows it
 * as "p2p recv wait" with its bytes). */
void comm_wait_recv(MPI_Request *req, size_t n);
/* Allgather of n floats per rank (generation's logits over tp), charged to `kind`. */
void comm_allgather_float(const float *mine, int n, float *all, MPI_Comm comm, comm_kind_t kind);

/* ---- setup and bookkeeping collectives ------------------------------------------------------
 * Every blocking MPI call of llmtrain goes through this file, so the watchdog sees every wait:
 * `phase` names it in the watchdog's message ("reading the namelist", "stop-signal check",
 * "resume", ...). Charged to COMM_OTHER. */
void comm_barrier(MPI_Comm comm, const char *phase);
/* Expert parallelism's token exchange (charged to COMM_EP, watched): every rank of comm sends
 * send_counts[r] items to rank r and receives recv_counts[r] from it. comm_alltoall_int:
 * n ints to each rank (the counts exchange, before the payload); comm_alltoallv_float: rows
 * of `width` floats, counts and displacements in rows. Every rank calls both even with
 * nothing to send, so no rank is left waiting. */
void comm_alltoall_int(const int *send, int *recv, int n, MPI_Comm comm);
void comm_alltoallv_float(const float *send, const int *send_counts, const int *send_displs,
                          float *recv, const int *recv_counts, const int *recv_displs, int width,
                          MPI_Comm comm);
void comm_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                const char *phase);
void comm_allreduce(void *x, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char *phase); /* in place */
void comm_gather(const void *mine, int count, MPI_Datatype type, void *all, int root,
                 MPI_Comm comm, const char *phase);
void comm_allgather(const void *mine, int count, MPI_Datatype type, void *all, MPI_Comm comm,
                    const char *phase);
void comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out, const char *phase);

/* How many ranks of comm share this rank's node (collective). */
int comm_node_size(MPI_Comm comm);
/* This rank's index among the ranks of comm on its node (collective; 0 = the node's first). */
int comm_node_rank(MPI_Comm comm);

/* ---- errors that one rank may see alone ------------------------------------------------------
 * A file only some nodes can see, a directory one rank cannot write, a tokenizer one rank cannot
 * read: every rank states its own outcome and all learn the same verdict, so no rank is left
 * waiting in the next collective while another exits.
 * comm_agree: collective over comm (watched as `phase`). `mine` is this rank's error message, or NULL when it is
 * fine. Returns the number of ranks that failed (0 on every rank when none did) and, when some
 * did, writes the lowest failing rank's message into out on every rank: as "rank R (host H):
 * <message>" when only some ranks failed (plus " [and other ranks]" when more than one did),
 * as "<message> (on all N ranks)" when every rank did. */
#define COMM_MSG_MAX 2048
int comm_agree(MPI_Comm comm, const char *phase, const char *mine, char *out, size_t outlen);
/* The same, fatal: when any rank failed, rank 0 prints "llmtrain: error: rank R (host H): ..."
 * once and every rank exits with exit_code (after MPI_Finalize). Returns when no rank failed. */
void comm_agree_or_exit(MPI_Comm comm, int exit_code, const char *phase, const char *mine);
#endif
