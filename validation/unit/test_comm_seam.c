/* test_comm_seam.c — the data path's two ways (parallel/comm.h): every call on a group with a
 * device transport attached (comm_transport.h) gives what the same call gives on the same ranks
 * by MPI, and its requests behave (pending until the transport's event completes, comm_test,
 * comm_wait, statistics). The transport is the staged one (parallel/comm_staged.c: host copies
 * and non-blocking MPI on a duplicate communicator), its events completed only at the third
 * poll (a device event is not ready at once). A comm.c that handed a transport the wrong piece,
 * peer, count or pointer, or forgot to wait, gives different numbers.
 * Reference: the MPI path of the same call (itself checked by every multi-rank e2e test).
 * Run alone (1 rank) and by validation/e2e/comm_seam_ranks.sh on 3 ranks (uneven pieces).
 * validation/unit/cuda/test_comm_nccl_fake.c runs the same cases through parallel/comm_nccl.c
 * (over a fake NCCL made of MPI) by defining SEAM_ATTACH before including this file; the cases
 * that know the staged transport's counters and its late events are SEAM_STAGED only. */
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
#include "parallel/comm_staged.h"
#include "parallel/comm_transport.h"

#ifndef SEAM_ATTACH /* the staged transport, its events complete at the third poll */
#define SEAM_STAGED 1
static void staged_attach(comm_group_t *g, bool p2p) {
    (void)p2p;
    const comm_staged_hooks_t hooks = {NULL, NULL, 3};
    comm_staged_attach(g, &hooks);
}
#define SEAM_ATTACH staged_attach
#else
#define SEAM_STAGED 0
#endif

/* Two groups over the same ranks: data by MPI, and data by the staged transport (its events
 * complete only at the third poll). */
typedef struct pair {
    comm_group_t *mpi, *dev;
    int size, rank;
} pair_t;

/* p2p: the group will carry sends and receives (the pipeline's kind of group) */
static pair_t pair_make_for(bool p2p) {
    pair_t p;
    p.mpi = comm_group_create(MPI_COMM_WORLD, "test group");
    p.dev = comm_group_create(MPI_COMM_WORLD, "test group");
    SEAM_ATTACH(p.dev, p2p);
    MPI_Comm_size(MPI_COMM_WORLD, &p.size);
    MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
    return p;
}

static pair_t pair_make(void) { return pair_make_for(false); }

static void pair_free(pair_t *p) {
    comm_group_destroy(&p->mpi);
    comm_group_destroy(&p->dev);
}

/* x[i] = a value particular to (rank, i, salt), exact in float */
static void fill(float *x, size_t n, int rank, int salt) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rank * 1000 + (int)(i * 7 % 97) - 40 + salt) * 0.25f;
}

static void assert_same(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) fail_msg("element %zu: %g by the transport, %g by MPI", i, a[i], b[i]);
}

/* uneven pieces: rank r gets 2r + 1 (+ the remainder on the last), one rank may get 0 */
static void pieces(int size, size_t total, size_t *counts, size_t *displs) {
    size_t at = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r == size - 1 ? total - at : (size > 2 && r == 1 ? 0 : 2 * (size_t)r + 1);
        displs[r] = at;
        at += counts[r];
    }
}

/* ---- the cases --------------------------------------------------------------------------------- */

static void groups_say_how_their_data_travels(void **state) {
    (void)state;
    pair_t p = pair_make();
    assert_false(comm_group_on_device(p.mpi));
    assert_true(comm_group_on_device(p.dev));
    assert_int_equal(comm_group_size(p.dev), p.size);
    assert_int_equal(comm_group_rank(p.dev), p.rank);
    assert_non_null(strstr(comm_group_peers(p.dev), "test group rank"));
    assert_int_equal(comm_group_size(comm_group_self()), 1);
    pair_free(&p);
    assert_null(p.dev);
}

static void allreduce_sum_and_max_equal_mpis(void **state) {
    (void)state;
    pair_t p = pair_make();
    enum { N = 37 };
    float a[N], b[N];
    fill(a, N, p.rank, 1);
    memcpy(b, a, sizeof a);
    comm_allreduce_sum(a, N, p.dev, COMM_TP);
    comm_allreduce_sum(b, N, p.mpi, COMM_TP);
    assert_same(a, b, N);
    fill(a, N, p.rank, 2);
    memcpy(b, a, sizeof a);
    comm_allreduce_max(a, N, p.dev, COMM_TP);
    comm_allreduce_max(b, N, p.mpi, COMM_TP);
    assert_same(a, b, N);
    /* a blocking call returns only after the transport's event completed */
    if (SEAM_STAGED) assert_int_equal(comm_staged_started(), comm_staged_completed());
    pair_free(&p);
}

static void nonblocking_allreduce_is_pending_until_waited(void **state) {
    (void)state;
    pair_t p = pair_make();
    enum { N = 1000 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    fill(a, N, p.rank, 3);
    memcpy(b, a, N * sizeof(float));
    comm_req_t ra = COMM_REQ_NULL, rb = COMM_REQ_NULL;
    const long calls = comm_stats()->calls[COMM_DP];
    comm_iallreduce_sum(a, N, p.dev, COMM_DP, &ra);
    comm_iallreduce_sum(b, N, p.mpi, COMM_DP, &rb);
    if (p.size > 1) {
        assert_true(comm_req_pending(&ra));
        assert_true(ra.on_device);
        assert_int_equal(comm_stats()->calls[COMM_DP], calls + 2);
        /* the first test cannot see it done: the staged event needs three polls */
        if (SEAM_STAGED) assert_false(comm_test(&ra));
        if (SEAM_STAGED) assert_true(comm_req_pending(&ra));
    }
    comm_wait(&ra, COMM_DP);
    comm_wait(&rb, COMM_DP);
    assert_false(comm_req_pending(&ra));
    comm_wait(&ra, COMM_DP); /* waiting again (COMM_REQ_NULL) is fine */
    assert_same(a, b, N);
    if (SEAM_STAGED) /* every event polled to the end */
        assert_int_equal(comm_staged_started(), comm_staged_completed());
    free(a);
    free(b);
    pair_free(&p);
}

static void reduce_scatter_uneven_pieces_equal_mpis(void **state) {
    (void)state;
    pair_t p = pair_make();
    enum { TOTAL = 29 };
    size_t counts[16], displs[16];
    pieces(p.size, TOTAL, counts, displs);
    float x[TOTAL], oa[TOTAL] = {0}, ob[TOTAL] = {0};
    fill(x, TOTAL, p.rank, 4);
    comm_req_t ra, rb;
    comm_ireduce_scatter_sum(x, oa, counts, p.dev, COMM_DP, &ra);
    comm_ireduce_scatter_sum(x, ob, counts, p.mpi, COMM_DP, &rb);
    comm_wait(&ra, COMM_DP);
    comm_wait(&rb, COMM_DP);
    assert_same(oa, ob, counts[p.rank]);
    pair_free(&p);
}

static void allgatherv_in_place_and_not_equal_mpis(void **state) {
    (void)state;
    pair_t p = pair_make();
    enum { TOTAL = 23 };
    size_t counts[16], displs[16];
    pieces(p.size, TOTAL, counts, displs);
    float a[TOTAL], b[TOTAL];
    fill(a, TOTAL, -1, 0); /* what other ranks' pieces hold before: garbage */
    memcpy(b, a, sizeof a);
    fill(a + displs[p.rank], counts[p.rank], p.rank, 5);
    fill(b + displs[p.rank], counts[p.rank], p.rank, 5);
    comm_allgatherv_float(a, counts, displs, p.dev, COMM_DP, "test gather");
    comm_allgatherv_float(b, counts, displs, p.mpi, COMM_DP, "test gather");
    assert_same(a, b, TOTAL);
    /* not in place: mine from elsewhere into a fresh buffer */
    float mine[TOTAL], ca[TOTAL] = {0}, cb[TOTAL] = {0};
    fill(mine, TOTAL, p.rank, 6); /* all of it: the equal-pieces gather below sends 8 */
    comm_req_t ra, rb;
    comm_iallgatherv_float(mine, ca, counts, displs, p.dev, COMM_DP, &ra);
    comm_iallgatherv_float(mine, cb, counts, displs, p.mpi, COMM_DP, &rb);
    comm_wait(&ra, COMM_DP);
    comm_wait(&rb, COMM_DP);
    assert_same(ca, cb, TOTAL);
    /* the equal-pieces gather of generation's logits */
    float la[8 * 16], lb[8 * 16];
    comm_allgather_float(mine, 8, la, p.dev, COMM_TP);
    comm_allgather_float(mine, 8, lb, p.mpi, COMM_TP);
    assert_same(la, lb, 8 * (size_t)p.size);
    pair_free(&p);
}

/* A ring: every rank sends to the next and receives from the previous, sends started first
 * (as the pipeline's sends are) and the receive waited before the sends. */
static void ring_send_recv_equals_mpis(void **state) {
    (void)state;
    pair_t p = pair_make_for(true);
    if (p.size < 2) {
        pair_free(&p);
        skip();
    }
    enum { N = 300 };
    const int next = (p.rank + 1) % p.size, prev = (p.rank + p.size - 1) % p.size;
    float out[N], ia[N], ib[N];
    fill(out, N, p.rank, 7);
    comm_req_t sa, sb, ra, rb;
    comm_isend(out, N, next, 11, p.dev, COMM_PP, &sa);
    comm_isend(out, N, next, 11, p.mpi, COMM_PP, &sb);
    comm_irecv(ia, N, prev, 11, p.dev, &ra);
    comm_irecv(ib, N, prev, 11, p.mpi, &rb);
    comm_wait_recv(&ra, N);
    comm_wait_recv(&rb, N);
    comm_wait(&sa, COMM_PP);
    comm_wait(&sb, COMM_PP);
    assert_same(ia, ib, N);
    float want[N];
    fill(want, N, prev, 7);
    assert_same(ia, want, N); /* and it is the previous rank's data */
    pair_free(&p);
}

static void alltoallv_rows_equal_mpis(void **state) {
    (void)state;
    pair_t p = pair_make();
    enum { W = 5, MAXR = 64 };
    int sc[16], sd[16], rc[16], rd[16];
    int at = 0;
    for (int r = 0; r < p.size; r++) { /* rank q sends (q + r) % 3 rows to rank r */
        sc[r] = (p.rank + r) % 3;
        sd[r] = at;
        at += sc[r];
    }
    comm_alltoall_int(sc, rc, 1, p.mpi);
    at = 0;
    for (int r = 0; r < p.size; r++) {
        rd[r] = at;
        at += rc[r];
    }
    float send[MAXR * W], ra[MAXR * W] = {0}, rb[MAXR * W] = {0};
    fill(send, MAXR * W, p.rank, 8);
    comm_alltoallv_float(send, sc, sd, ra, rc, rd, W, p.dev);
    comm_alltoallv_float(send, sc, sd, rb, rc, rd, W, p.mpi);
    assert_same(ra, rb, (size_t)at * W);
    pair_free(&p);
}

static void host_scalars_always_travel_by_mpi(void **state) {
    (void)state;
    pair_t p = pair_make();
    double d[2] = {1.5 + p.rank, -2.0};
    const long started = comm_staged_started();
    comm_allreduce_sum_double(d, 2, p.dev, COMM_OTHER);
    comm_req_t r;
    double e = 0.5;
    comm_iallreduce_sum_double(&e, 1, p.dev, COMM_OTHER, &r);
    comm_wait(&r, COMM_OTHER);
    if (SEAM_STAGED) assert_int_equal(comm_staged_started(), started); /* never the transport's */
    const double n = p.size;
    assert_true(d[0] == 1.5 * n + n * (n - 1) / 2 && d[1] == -2.0 * n && e == 0.5 * n);
    pair_free(&p);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(groups_say_how_their_data_travels),
        cmocka_unit_test(allreduce_sum_and_max_equal_mpis),
        cmocka_unit_test(nonblocking_allreduce_is_pending_until_waited),
        cmocka_unit_test(reduce_scatter_uneven_pieces_equal_mpis),
        cmocka_unit_test(allgatherv_in_place_and_not_equal_mpis),
        cmocka_unit_test(ring_send_recv_equals_mpis),
        cmocka_unit_test(alltoallv_rows_equal_mpis),
        cmocka_unit_test(host_scalars_always_travel_by_mpi),
#ifdef SEAM_EXTRA_TESTS /* the including file's own cases */
        SEAM_EXTRA_TESTS
#endif
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
