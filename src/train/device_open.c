/* device_open.c — the MPI side of opening this rank's GPU (see device_open.h). */
#include "train/device_open.h"
#include <stdio.h>
#include "core/alloc.h"
#include "core/error.h"
#include "kernels/cuda/device.h"
#include "parallel/comm_host.h"

int device_open(const topology_t *topo, dtype_t precision, char *err, size_t len) {
    const int ranks_on_node = topo->me.local_size;
    /* Every rank takes part in the gather, also one that will find no device, so none waits. */
    int *nearest = xmalloc(sizeof *nearest * (size_t)ranks_on_node);
    comm_allgather(&topo->gpu_index, 1, MPI_INT, nearest, topo->node_comm, "sharing the nearest GPUs");
    const int rc = cuda_device_open(topo->me.local_rank, ranks_on_node, nearest, precision, err, len);
    xfree(nearest);
    return rc;
}

void device_print_table(MPI_Comm world) {
    int rank = 0, size = 1, host_len = 0;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_CHECK(MPI_Comm_size(world, &size));
    char host[MPI_MAX_PROCESSOR_NAME], mine[CUDA_DEVICE_LINE];
    MPI_CHECK(MPI_Get_processor_name(host, &host_len));
    cuda_device_describe(rank, host, mine, sizeof mine);
    char *all = rank == 0 ? xmalloc((size_t)size * CUDA_DEVICE_LINE) : NULL;
    comm_gather(mine, CUDA_DEVICE_LINE, MPI_CHAR, all, 0, world, "gathering the GPU table");
    if (rank == 0) {
        printf("GPUs (CUDA backend):\n");
        for (int r = 0; r < size; r++) printf("  %s\n", all + (size_t)r * CUDA_DEVICE_LINE);
        fflush(stdout);
    }
    xfree(all);
}
