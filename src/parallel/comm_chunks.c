/* comm_chunks.c — MPI calls of any size (comm_chunks.h). */
#include "parallel/comm_chunks.h"
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"

static size_t max_count = (size_t)INT_MAX;

size_t comm_chunks_limit(void) { return max_count; }

void comm_chunks_init(void) {
    static bool read;
    if (read) return;
    read = true;
    const char *v = getenv("LLMT_COMM_MAX_COUNT");
    if (!v || !*v) return;
    char *end;
    errno = 0;
    const long long c = strtoll(v, &end, 10);
    if (errno || *end || c < 1 || c > INT_MAX)
        fatal_user_here("LLMT_COMM_MAX_COUNT must be an element count in [1, %d] (got '%s')",
                        INT_MAX, v);
    max_count = (size_t)c;
}

MPI_Request *comm_calls_next(mpi_calls_t *l) {
    if (!l) return NULL;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->r = xrealloc_small(l->r, (size_t)l->cap * sizeof(MPI_Request));
    }
    l->r[l->n] = MPI_REQUEST_NULL;
    return &l->r[l->n++];
}

mpi_calls_t *comm_calls_new(void) {
    mpi_calls_t *l = xrealloc_small(NULL, sizeof *l);
    *l = (mpi_calls_t){0};
    return l;
}

void comm_calls_free(mpi_calls_t *l) {
    free(l->r);
    free(l->ints);
    free(l);
}

/* Elements [at, at + run) of a piece of n: the run of the chunk starting at `at`. */
static int run_at(size_t n, size_t at) { return (int)(n - at < max_count ? n - at : max_count); }

bool comm_pieces_fit(const size_t *counts, const size_t *displs, int size) {
    size_t total = 0;
    for (int r = 0; r < size; r++) {
        if (displs && (displs[r] > max_count || counts[r] > max_count - displs[r])) return false;
        total += counts[r];
    }
    return total <= max_count;
}

/* int copies of pieces that fit: counts into ints[0, size), displacements (or the prefix sums)
 * into ints[size, 2 size). */
int *comm_int_pieces(const size_t *counts, const size_t *displs, int size, int *ints) {
    size_t at = 0;
    for (int r = 0; r < size; r++) {
        ints[r] = (int)counts[r];
        ints[size + r] = (int)(displs ? displs[r] : at);
        at += counts[r];
    }
    return ints;
}

/* In-place all-reduce of x[0, n) in consecutive runs. */
void comm_chunked_allreduce(float *x, size_t n, MPI_Op op, MPI_Comm comm, mpi_calls_t *l) {
    for (size_t at = 0; at < n; at += max_count) {
        MPI_Request *q = comm_calls_next(l);
        if (q)
            MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x + at, run_at(n, at), MPI_FLOAT, op, comm, q));
        else
            MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + at, run_at(n, at), MPI_FLOAT, op, comm));
    }
}

/* Reduce-scatter as reduces: rank r's piece (at the prefix sum of counts in x) summed onto r,
 * into out, in runs. */
void comm_chunked_reduce_scatter(const float *x, float *out, const size_t *counts, MPI_Comm comm,
                                 int size, int rank, mpi_calls_t *l) {
    size_t displ = 0;
    for (int r = 0; r < size; r++) {
        for (size_t at = 0; at < counts[r]; at += max_count) {
            float *into = r == rank ? out + at : NULL; /* read on the root only */
            MPI_Request *q = comm_calls_next(l);
            const int k = run_at(counts[r], at);
            if (q)
                MPI_CHECK(MPI_Ireduce(x + displ + at, into, k, MPI_FLOAT, MPI_SUM, r, comm, q));
            else
                MPI_CHECK(MPI_Reduce(x + displ + at, into, k, MPI_FLOAT, MPI_SUM, r, comm));
        }
        displ += counts[r];
    }
}

/* All-gather as broadcasts: rank r's piece (mine on r, copied to all + displs[r] first) from r
 * to every rank, in runs. */
void comm_chunked_allgatherv(const float *mine, float *all, const size_t *counts,
                             const size_t *displs, MPI_Comm comm, int size, int rank,
                             mpi_calls_t *l) {
    float *own = all + displs[rank];
    if (mine != own && counts[rank] > 0) memcpy(own, mine, counts[rank] * sizeof(float));
    for (int r = 0; r < size; r++)
        for (size_t at = 0; at < counts[r]; at += max_count) {
            MPI_Request *q = comm_calls_next(l);
            float *x = all + displs[r] + at;
            if (q)
                MPI_CHECK(MPI_Ibcast(x, run_at(counts[r], at), MPI_FLOAT, r, comm, q));
            else
                MPI_CHECK(MPI_Bcast(x, run_at(counts[r], at), MPI_FLOAT, r, comm));
        }
}

/* Consecutive messages of at most max_count floats (MPI keeps messages between two ranks with
 * the same tag in order, so the receiver's runs match the sender's). */
void comm_chunked_send(const float *x, size_t n, int peer, int tag, MPI_Comm comm,
                       mpi_calls_t *l) {
    for (size_t at = 0; at < n; at += max_count)
        MPI_CHECK(MPI_Isend(x + at, run_at(n, at), MPI_FLOAT, peer, tag, comm, comm_calls_next(l)));
}

void comm_chunked_recv(float *x, size_t n, int peer, int tag, MPI_Comm comm, mpi_calls_t *l) {
    for (size_t at = 0; at < n; at += max_count)
        MPI_CHECK(MPI_Irecv(x + at, run_at(n, at), MPI_FLOAT, peer, tag, comm, comm_calls_next(l)));
}

/* Waits for every call of l and frees it. */
void comm_calls_wait(mpi_calls_t *l) {
    MPI_CHECK(MPI_Waitall(l->n, l->r, MPI_STATUSES_IGNORE));
    comm_calls_free(l);
}
