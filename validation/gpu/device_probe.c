/* device_probe.c — opens the GPU exactly as llmtrain does for &run device = 'cuda' (placement,
 * then device_open agreed over MPI, then the GPU table), without a model. Exit 0 with the
 * table, or every rank exits 2 with the one message (no driver, no device, too old, more ranks
 * than GPUs, bf16 without support). Links only the CUDA runtime part of the backend, so it runs
 * before the kernels are all there. Used by validation/e2e/cuda_build.sh (on a machine without a
 * GPU: the refusal) and validation/gpu/run.sh (on the GPU: the table).
 *   mpirun -n 1 build-cuda/gpu/device_probe [fp32|bf16|fp16] */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "train/device_open.h"
#include "parallel/comm_host.h"
#include "parallel/topology.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const dtype_t precision = dtype_from_name(argc > 1 ? argv[1] : "fp32");
    topology_t topo;
    topology_place(&topo, MPI_COMM_WORLD, true);
    char err[512];
    const int rc = device_open(&topo, precision, err, sizeof err);
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "opening the GPU", rc ? err : NULL);
    device_print_table(MPI_COMM_WORLD);
    topology_destroy(&topo);
    MPI_Finalize();
    return 0;
}
