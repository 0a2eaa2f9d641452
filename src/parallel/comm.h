/* comm.h — the collectives and point-to-point transfers of training, each timed and counted
 * per kind so a step's time splits into compute / p2p wait / tp all-reduce / dp all-reduce.
 * Owns: the per-kind statistics. Uses: MPI, core/. Used by: model/ (tensor parallel),
 * train/ (pipeline, data parallel). */
#ifndef LLMT_COMM_H
#define LLMT_COMM_H
#include <mpi.h>
#include <stddef.h>

typedef enum { COMM_TP, COMM_PP, COMM_DP, COMM_EMBED, COMM_OTHER, COMM_KINDS } comm_kind_t;

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
/* Non-blocking point-to-point of n floats. */
void comm_isend(const float *x, size_t n, int peer, int tag, MPI_Comm comm, comm_kind_t kind,
                MPI_Request *req);
void comm_irecv(float *x, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request *req);
/* Wait for one request (MPI_REQUEST_NULL is fine), charging the wait to `kind`. */
void comm_wait(MPI_Request *req, comm_kind_t kind);
#endif
