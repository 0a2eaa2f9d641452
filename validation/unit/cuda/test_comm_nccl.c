/* test_comm_nccl.c — the parts of parallel/comm_nccl.c that run without a GPU, on the build
 * machine (CUDA build; validation/e2e/cuda_build.sh runs it on 4 ranks): the NCCL unique id made
 * by each group's rank 0 and broadcast over the group's MPI communicator reaches every member
 * intact, and different groups get different ids; attaching NCCL where no GPU can be used fails
 * with NCCL's or CUDA's own words and leaves the group on MPI. Where a GPU is usable (the GPU
 * machine), the attach succeeds instead and a sum all-reduce over device memory is checked against
 * the exact sum. Reference: rank 0's id bytes gathered to every rank; the version NCCL reports. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include "parallel/comm.h"
#include "parallel/comm_host.h"
#include "parallel/comm_nccl.h"

static int world_rank, world_size;

/* Groups of two consecutive world ranks (a last group of one when the size is odd). */
static MPI_Comm pairs(void) {
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank / 2, world_rank, &c);
    return c;
}

static void unique_id_reaches_every_member_and_differs_between_groups(void **state) {
    (void)state;
    MPI_Comm c = pairs();
    unsigned char id[COMM_NCCL_ID_BYTES];
    char err[256] = "";
    memset(id, 0xAB, sizeof id);
    assert_int_equal(comm_nccl_unique_id(c, id, "test id", err, sizeof err), 0);
    unsigned char *all = malloc((size_t)world_size * COMM_NCCL_ID_BYTES);
    MPI_Allgather(id, COMM_NCCL_ID_BYTES, MPI_BYTE, all, COMM_NCCL_ID_BYTES, MPI_BYTE,
                  MPI_COMM_WORLD);
    int nonzero = 0;
    for (int i = 0; i < COMM_NCCL_ID_BYTES; i++) nonzero |= id[i] != 0 && id[i] != 0xAB;
    assert_true(nonzero); /* an id was made, not left as it was */
    for (int r = 0; r < world_size; r++) {
        const bool same_group = r / 2 == world_rank / 2;
        const int cmp = memcmp(all + (size_t)r * COMM_NCCL_ID_BYTES, id, COMM_NCCL_ID_BYTES);
        if (same_group && cmp != 0) fail_msg("rank %d of my group holds another id", r);
        if (!same_group && cmp == 0) fail_msg("rank %d of another group holds my group's id", r);
    }
    free(all);
    MPI_Comm_free(&c);
}

static void version_is_nccls(void **state) {
    (void)state;
    int v = 0;
    assert_int_equal(ncclGetVersion(&v), ncclSuccess);
    char want[32];
    snprintf(want, sizeof want, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    assert_string_equal(comm_nccl_version(), want);
    assert_true(v >= 21800); /* 2.18: ncclCommGetAsyncError with ncclInProgress, ncclGetLastError */
}

static bool gpu_usable(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static void attach_fails_clearly_without_a_gpu_and_reduces_with_one(void **state) {
    (void)state;
    MPI_Comm c = pairs();
    comm_group_t *g = comm_group_create(c, "test pair");
    char err[1024] = "";
    if (!gpu_usable()) {
        const int rc = comm_nccl_attach(g, COMM_NCCL_COLLECTIVE, err, sizeof err);
        assert_int_not_equal(rc, 0);
        if (!strstr(err, "ncclCommInitRank") && !strstr(err, "cuda"))
            fail_msg("the error does not say which call failed: '%s'", err);
        assert_false(comm_group_on_device(g)); /* still on MPI */
        if (world_rank == 0) printf("no GPU: comm_nccl_attach says: %s\n", err);
    } else {
        int n = 0;
        cudaGetDeviceCount(&n);
        cudaSetDevice(world_rank % n);
        assert_int_equal(comm_nccl_attach(g, COMM_NCCL_COLLECTIVE, err, sizeof err), 0);
        assert_true(comm_group_on_device(g));
        enum { N = 4096 };
        float h[N], *d = NULL;
        for (int i = 0; i < N; i++) h[i] = (float)(world_rank + 1) * (float)(i % 17);
        assert_int_equal(cudaMalloc((void **)&d, sizeof h), cudaSuccess);
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
        comm_allreduce_sum(d, N, g, COMM_DP);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        const int m = comm_group_size(g), ranks_sum = world_rank / 2 * 2 * m + m * (m + 1) / 2;
        for (int i = 0; i < N; i++)
            if (h[i] != (float)ranks_sum * (float)(i % 17)) fail_msg("element %d: %g", i, h[i]);
        cudaFree(d);
    }
    comm_group_destroy(&g);
    MPI_Comm_free(&c);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unique_id_reaches_every_member_and_differs_between_groups),
        cmocka_unit_test(version_is_nccls),
        cmocka_unit_test(attach_fails_clearly_without_a_gpu_and_reduces_with_one),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
