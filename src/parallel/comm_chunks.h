/* comm_chunks.h — MPI calls of any size, for parallel/comm.c. MPI 3's counts and displacements
 * are int (Open MPI 4.1 has no MPI 4 large-count calls): one call moves at most
 * comm_chunks_limit() elements (comm.h's comm_max_count), and a larger transfer is made of
 * several calls on contiguous runs, started in the same order on every rank. The calls of a
 * non-blocking transfer are collected in an mpi_calls_t (its comm_req_t keeps it); with a NULL
 * list the calls are MPI's blocking ones, made one after the other (the algorithms the unchunked
 * blocking call uses).
 * Owns: the chunk size (LLMT_COMM_MAX_COUNT). Uses: MPI, core/. Used by: parallel/comm.c and
 * parallel/comm_staged.c (the simulated device's transport). */
#ifndef LLMT_COMM_CHUNKS_H
#define LLMT_COMM_CHUNKS_H
#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

/* The calls of one non-blocking transfer: their requests, and the int counts and displacements
 * an MPI vector call reads until it finishes. Plain (untracked) allocations: a few words. */
typedef struct mpi_calls {
    MPI_Request *r;
    int n, cap;
    int *ints;
} mpi_calls_t;

/* The most elements one MPI call moves (comm.h's comm_max_count). */
size_t comm_chunks_limit(void);
/* Reads LLMT_COMM_MAX_COUNT, once (comm_group_create: the first group is made on the main thread
 * before any helper thread); a value outside [1, INT_MAX] is fatal, naming it. */
void comm_chunks_init(void);
/* The next request slot of l; NULL for a blocking transfer (l == NULL). */
MPI_Request *comm_calls_next(mpi_calls_t *l);
mpi_calls_t *comm_calls_new(void);
void comm_calls_free(mpi_calls_t *l);
/* Waits for every call of l and frees it. */
void comm_calls_wait(mpi_calls_t *l);
/* Whether pieces (counts, displs; NULL displs: consecutive) fit one MPI call: every displacement
 * and the total within comm_chunks_limit() (Open MPI sums the counts in an int). */
bool comm_pieces_fit(const size_t *counts, const size_t *displs, int size);
/* int copies of pieces that fit: counts into ints[0, size), displacements (or the prefix sums)
 * into ints[size, 2 size); returns ints. */
int *comm_int_pieces(const size_t *counts, const size_t *displs, int size, int *ints);
/* In-place all-reduce of x[0, n) in consecutive runs. */
void comm_chunked_allreduce(float *x, size_t n, MPI_Op op, MPI_Comm comm, mpi_calls_t *l);
/* Reduce-scatter as reduces: rank r's piece (at the prefix sum of counts in x) summed onto r,
 * into out, in runs. */
void comm_chunked_reduce_scatter(const float *x, float *out, const size_t *counts, MPI_Comm comm,
                                 int size, int rank, mpi_calls_t *l);
/* All-gather as broadcasts: rank r's piece (mine on r, copied to all + displs[r] first) from r
 * to every rank, in runs. */
void comm_chunked_allgatherv(const float *mine, float *all, const size_t *counts,
                             const size_t *displs, MPI_Comm comm, int size, int rank,
                             mpi_calls_t *l);
/* Consecutive messages of at most comm_chunks_limit() floats (MPI keeps messages between two ranks
 * with the same tag in order, so the receiver's runs match the sender's). */
void comm_chunked_send(const float *x, size_t n, int peer, int tag, MPI_Comm comm, mpi_calls_t *l);
void comm_chunked_recv(float *x, size_t n, int peer, int tag, MPI_Comm comm, mpi_calls_t *l);
#endif
