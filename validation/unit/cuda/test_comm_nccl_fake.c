/* test_comm_nccl_fake.c — src/parallel/comm_nccl.c's own logic without a GPU: the cases of
 * validation/unit/test_comm_seam.c (every data-path call against the MPI path: uneven and equal
 * pieces, in-place gathers, a ring of sends and receives over both directions' communicators,
 * all-to-all rows) with NCCL attached to the group, NCCL and the CUDA runtime being
 * validation/unit/cuda/fake_nccl.c (MPI on host memory). A comm_nccl.c that reduced onto the
 * wrong root, broadcast the wrong piece, put a transfer on the other direction's communicator
 * (the receive would never match: the run times out) or released an event early gives other
 * numbers. Built in the CUDA build (the headers), linked without libnccl and libcudart;
 * validation/e2e/cuda_build.sh runs it on 3 ranks. */
#include <stdbool.h>
#include "parallel/comm.h"
#include "parallel/comm_nccl.h"

static void nccl_attach(comm_group_t *g, bool p2p);
#define SEAM_ATTACH nccl_attach
#include "../test_comm_seam.c"

static void nccl_attach(comm_group_t *g, bool p2p) {
    char err[512] = "";
    if (comm_nccl_attach(g, p2p ? COMM_NCCL_P2P : COMM_NCCL_COLLECTIVE, err, sizeof err) != 0)
        fail_msg("comm_nccl_attach: %s", err);
}
