/* test_comm_nccl_fake.c — src/parallel/comm_nccl.c's own logic without a GPU: the cases of
 * validation/unit/test_comm_seam.c (every data-path call against the MPI path: uneven and equal
 * pieces, in-place gathers, a ring of sends and receives over both directions' communicators,
 * all-to-all rows) with NCCL attached to the group, NCCL and the CUDA runtime being
 * validation/unit/cuda/fake_nccl.c (MPI on host memory). A comm_nccl.c that reduced onto the
 * wrong root, broadcast the wrong piece, put a transfer on the other direction's communicator
 * (the receive would never match: the run times out) or released an event early gives other
 * numbers; and (its own case) a group's events all die with it. Built in the CUDA build (the headers), linked without libnccl and libcudart;
 * validation/e2e/cuda_build.sh runs it on 3 ranks. */
#include <stdbool.h>
#include "parallel/comm.h"
#include "parallel/comm_nccl.h"

static void nccl_attach(comm_group_t *g, bool p2p);
static void events_die_with_their_group(void **state);
#define SEAM_ATTACH nccl_attach
#define SEAM_EXTRA_TESTS cmocka_unit_test(events_die_with_their_group),
#include "../test_comm_seam.c"

int fake_cuda_live_events(void); /* fake_nccl.c */

/* A request dropped without its wait (a send whose completion nobody needs) still has its
 * event destroyed with the group, as do the idle ones and the compute-stream marker. */
static void events_die_with_their_group(void **state) {
    (void)state;
    const int before = fake_cuda_live_events();
    pair_t p = pair_make_for(true);
    enum { N = 64 };
    float out[N], in[N];
    fill(out, N, p.rank, 5);
    comm_req_t send = COMM_REQ_NULL, recv = COMM_REQ_NULL;
    for (int round = 0; round < 3; round++) {
        comm_isend(out, N, (p.rank + 1) % p.size, round, p.dev, COMM_PP, &send);
        comm_irecv(in, N, (p.rank + p.size - 1) % p.size, round, p.dev, &recv);
        comm_wait_recv(&recv, N); /* the sends are never waited for */
    }
    assert_true(fake_cuda_live_events() > before);
    MPI_Barrier(MPI_COMM_WORLD); /* every receive posted: the dropped sends can complete */
    pair_free(&p);
    assert_int_equal(fake_cuda_live_events(), before);
}

static void nccl_attach(comm_group_t *g, bool p2p) {
    char err[512] = "";
    if (comm_nccl_attach(g, p2p ? COMM_NCCL_P2P : COMM_NCCL_COLLECTIVE, err, sizeof err) != 0)
        fail_msg("comm_nccl_attach: %s", err);
}
