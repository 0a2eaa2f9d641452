/* test_comm_chunks.c — transfers larger than one MPI call takes (parallel/comm.h, comm_max_count)
 * are made of several calls and give bit for bit what one unchunked MPI call gives.
 * The chunk size is lowered to 7 elements through the developer's knob LLMT_COMM_MAX_COUNT
 * (set here before the first group is made, unless the caller set it), so pieces of a few
 * dozen elements take every chunked path: all-reduce, reduce-scatter (uneven pieces, one rank
 * with none), all-gather (in place, not in place, 16-bit), gather onto a root, point-to-point.
 * Reference: the plain MPI call with int counts on MPI_COMM_WORLD, bit-identical (tolerance 0).
 * The values are multiples of 1/4 below 2^12, so every sum is exact whatever order MPI adds in
 * (a chunked reduce-scatter is a reduce per piece, whose algorithm may differ); on 2 ranks
 * they are also arbitrary floats (a + b == b + a in any order).
 * Run alone (1 rank: the groups' calls are no-ops or copies) and by
 * validation/e2e/comm_chunks_ranks.sh on 2 and 4 ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <mpi.h>
#include "parallel/comm.h"
#include "parallel/comm_host.h"

static int size, rank;
static comm_group_t *world;

/* x[i]: particular to (rank, i, salt); exact multiples of 1/4, or arbitrary floats on 2 ranks */
static void fill(float *x, size_t n, int r, int salt) {
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(r * 100 + (int)(i * 7 % 97) - 40 + salt) * 0.25f;
        if (size == 2) x[i] = x[i] * 1.0001f + 1e-3f * (float)(i % 13) / 3.0f;
    }
}

static void assert_bits(const float *a, const float *b, size_t n, const char *what) {
    if (n && memcmp(a, b, n * sizeof(float)) != 0)
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
                fail_msg("%s, rank %d, element %zu: %.9g chunked, %.9g by one MPI call", what,
                         rank, i, a[i], b[i]);
}

/* uneven pieces of total: rank r gets 9r + 11, rank 1 none when size > 2, the last the rest */
static void pieces(size_t total, size_t *counts, size_t *displs, int *ic, int *id) {
    size_t at = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r == size - 1 ? total - at : (size > 2 && r == 1 ? 0 : 9 * (size_t)r + 11);
        displs[r] = at;
        ic[r] = (int)counts[r];
        id[r] = (int)at;
        at += counts[r];
    }
}

static void the_knob_sets_the_chunk_size(void **state) {
    (void)state;
    assert_int_equal(comm_max_count(), atoi(getenv("LLMT_COMM_MAX_COUNT")));
}

static void allreduce_in_chunks_equals_one_call(void **state) {
    (void)state;
    enum { N = 1000 };
    float a[N], b[N];
    fill(a, N, rank, 1);
    memcpy(b, a, sizeof a);
    comm_allreduce_sum(a, N, world, COMM_TP);
    MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    assert_bits(a, b, N, "all-reduce sum");
    fill(a, N, rank, 2);
    memcpy(b, a, sizeof a);
    comm_allreduce_max(a, N, world, COMM_TP);
    MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    assert_bits(a, b, N, "all-reduce max");
}

/* A chunked non-blocking call is one request: pending until all its calls finished, counted
 * once with all its bytes. */
static void nonblocking_allreduce_is_one_request(void **state) {
    (void)state;
    enum { N = 997 };
    float a[N], b[N];
    fill(a, N, rank, 3);
    memcpy(b, a, sizeof a);
    const long calls = comm_stats()->calls[COMM_DP];
    const double bytes = comm_stats()->bytes[COMM_DP];
    comm_req_t r = COMM_REQ_NULL;
    comm_iallreduce_sum(a, N, world, COMM_DP, &r);
    assert_int_equal(comm_stats()->calls[COMM_DP], calls + (size > 1));
    assert_true(comm_stats()->bytes[COMM_DP] == bytes + (size > 1 ? N * sizeof(float) : 0));
    assert_true(comm_req_pending(&r) == (size > 1));
    while (!comm_test(&r)) {
    }
    assert_false(comm_req_pending(&r));
    MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    assert_bits(a, b, N, "non-blocking all-reduce");
    /* and finished by comm_wait */
    fill(a, N, rank, 4);
    memcpy(b, a, sizeof a);
    comm_iallreduce_sum(a, N, world, COMM_DP, &r);
    comm_wait(&r, COMM_DP);
    assert_false(comm_req_pending(&r));
    MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    assert_bits(a, b, N, "non-blocking all-reduce (waited)");
}

static void reduce_scatter_in_chunks_equals_one_call(void **state) {
    (void)state;
    enum { TOTAL = 233 };
    size_t counts[16] = {0}, displs[16] = {0};
    int ic[16] = {0}, id[16] = {0};
    pieces(TOTAL, counts, displs, ic, id);
    float x[TOTAL], a[TOTAL], b[TOTAL];
    fill(x, TOTAL, rank, 5);
    comm_req_t r;
    comm_ireduce_scatter_sum(x, a, counts, world, COMM_DP, &r);
    comm_wait(&r, COMM_DP);
    MPI_Reduce_scatter(x, b, ic, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    assert_bits(a, b, counts[rank], "reduce-scatter");
    /* the blocking one of equal pieces */
    enum { PIECE = 23 };
    float y[PIECE * 16], c[PIECE], d[PIECE];
    fill(y, PIECE * (size_t)size, rank, 6);
    if (size > 1) {
        comm_reduce_scatter_block_sum(y, c, PIECE, world, COMM_TP, "test reduce-scatter");
        MPI_Reduce_scatter_block(y, d, PIECE, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        assert_bits(c, d, PIECE, "reduce-scatter block");
    }
}

static void allgatherv_in_chunks_equals_one_call(void **state) {
    (void)state;
    enum { TOTAL = 301 };
    size_t counts[16] = {0}, displs[16] = {0};
    int ic[16] = {0}, id[16] = {0};
    pieces(TOTAL, counts, displs, ic, id);
    float a[TOTAL], b[TOTAL], mine[TOTAL], c[TOTAL];
    for (size_t i = 0; i < TOTAL; i++) a[i] = b[i] = c[i] = -1.0f;
    fill(a + displs[rank], counts[rank], rank, 7);
    memcpy(b + displs[rank], a + displs[rank], counts[rank] * sizeof(float));
    comm_allgatherv_float(a, counts, displs, world, COMM_DP, "test gather");
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, ic, id, MPI_FLOAT, MPI_COMM_WORLD);
    assert_bits(a, b, TOTAL, "all-gather in place");
    /* not in place, non-blocking */
    fill(mine, counts[rank], rank, 8);
    comm_req_t r;
    comm_iallgatherv_float(mine, c, counts, displs, world, COMM_DP, &r);
    comm_wait(&r, COMM_DP);
    MPI_Allgatherv(mine, ic[rank], MPI_FLOAT, b, ic, id, MPI_FLOAT, MPI_COMM_WORLD);
    assert_bits(c, b, TOTAL, "non-blocking all-gather");
    /* equal pieces in place */
    enum { PIECE = 19 };
    float e[PIECE * 16], f[PIECE * 16];
    fill(e + PIECE * rank, PIECE, rank, 9);
    memcpy(f + PIECE * rank, e + PIECE * rank, PIECE * sizeof(float));
    comm_allgather_inplace(e, PIECE, world, COMM_TP, "test gather");
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, f, PIECE, MPI_FLOAT, MPI_COMM_WORLD);
    assert_bits(e, f, PIECE * (size_t)size, "all-gather of equal pieces");
}

/* 16-bit elements travel in pairs: even pieces, compared as the bits they are */
static void allgatherv_half_in_chunks_equals_one_call(void **state) {
    (void)state;
    enum { TOTAL = 160 };
    size_t counts[16] = {0}, displs[16] = {0};
    size_t at = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r == size - 1 ? TOTAL - at : 16 * ((size_t)r + 1);
        displs[r] = at;
        at += counts[r];
    }
    uint16_t a[TOTAL], b[TOTAL];
    for (size_t i = 0; i < TOTAL; i++) a[i] = b[i] = 0xffff;
    for (size_t i = 0; i < counts[rank]; i++)
        a[displs[rank] + i] = b[displs[rank] + i] = (uint16_t)(rank * 4099 + i * 31);
    comm_allgatherv_half(a, counts, displs, world, COMM_DP, "test gather");
    int ic[16] = {0}, id[16] = {0};
    for (int r = 0; r < size; r++) ic[r] = (int)counts[r], id[r] = (int)displs[r];
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, ic, id, MPI_UINT16_T, MPI_COMM_WORLD);
    assert_memory_equal(a, b, sizeof a);
}

static void gatherv_in_chunks_equals_one_call(void **state) {
    (void)state;
    enum { TOTAL = 211 };
    size_t counts[16] = {0}, displs[16] = {0};
    int ic[16] = {0}, id[16] = {0};
    pieces(TOTAL, counts, displs, ic, id);
    float mine[TOTAL], a[TOTAL], b[TOTAL];
    fill(mine, counts[rank], rank, 10);
    for (size_t i = 0; i < TOTAL; i++) a[i] = b[i] = -2.0f;
    const int root = size - 1;
    comm_gatherv_float(mine, counts[rank], a, counts, displs, root, world, "test gatherv");
    MPI_Gatherv(mine, ic[rank], MPI_FLOAT, b, ic, id, MPI_FLOAT, root, MPI_COMM_WORLD);
    if (rank == root) assert_bits(a, b, TOTAL, "gather onto a root");
}

/* A ring: each rank sends N floats to the next, in several messages, and receives the previous
 * rank's; two transfers in flight between the same ranks keep their order. */
static void send_recv_in_chunks_arrive_whole(void **state) {
    (void)state;
    if (size == 1) return;
    enum { N = 100, M = 15 };
    float out[N], in[N], out2[M], in2[M], want[N], want2[M];
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    fill(out, N, rank, 11);
    fill(out2, M, rank, 12);
    comm_req_t s1, s2, r1, r2;
    comm_irecv(in, N, prev, 3, world, &r1);
    comm_irecv(in2, M, prev, 3, world, &r2);
    comm_isend(out, N, next, 3, world, COMM_PP, &s1);
    comm_isend(out2, M, next, 3, world, COMM_PP, &s2);
    comm_wait_recv(&r2, M);
    comm_wait_recv(&r1, N);
    comm_wait(&s1, COMM_PP);
    comm_wait(&s2, COMM_PP);
    fill(want, N, prev, 11);
    fill(want2, M, prev, 12);
    assert_bits(in, want, N, "chunked receive");
    assert_bits(in2, want2, M, "chunked receive (second)");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size > 16) {
        fprintf(stderr, "test_comm_chunks: at most 16 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    setenv("LLMT_COMM_MAX_COUNT", "7", 0); /* read when the first group is made, just below */
    world = comm_group_create(MPI_COMM_WORLD, "test group");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_knob_sets_the_chunk_size),
        cmocka_unit_test(allreduce_in_chunks_equals_one_call),
        cmocka_unit_test(nonblocking_allreduce_is_one_request),
        cmocka_unit_test(reduce_scatter_in_chunks_equals_one_call),
        cmocka_unit_test(allgatherv_in_chunks_equals_one_call),
        cmocka_unit_test(allgatherv_half_in_chunks_equals_one_call),
        cmocka_unit_test(gatherv_in_chunks_equals_one_call),
        cmocka_unit_test(send_recv_in_chunks_arrive_whole),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    comm_group_destroy(&world);
    MPI_Finalize();
    return failed;
}
