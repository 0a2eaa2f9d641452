/* device.h — opening this rank's GPU: which device (the one nearest its cores, else by node-local
 * rank), whether it is usable (driver, compute capability, bf16), and its line in the startup
 * table (name, memory, peers over NVLink or PCIe). Plain C on the CUDA runtime API, built only
 * with make CUDA=1 (LLMT_CUDA).
 * No MPI here (kernels/ knows none): what the node's ranks share (each one's nearest GPU) and
 * the table's gather are train/device_open.c's, which calls these with plain values.
 * Owns: the choice of device and the CUDA context of the process. Uses: the CUDA runtime,
 * kernels/cuda/device_plan.h (the rules). Used by: train/device_open.c. */
#ifndef LLMT_CUDA_DEVICE_H
#define LLMT_CUDA_DEVICE_H
#include <stddef.h>
#include "kernels/precision.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Choose and open this rank's device for a run storing tensors as `precision`: node-local rank
 * local_rank of ranks_on_node, nearest[ranks_on_node] every node-local rank's nearest GPU (-1:
 * none known), so the choice is one GPU per rank or none from the topology. Returns 0, or -1
 * with err[len] set to the one message to show (the caller agrees it over MPI). */
int cuda_device_open(int local_rank, int ranks_on_node, const int *nearest, dtype_t precision,
                     char *err, size_t len);

/* This rank's line of the GPU table: "rank R host: GPU d NAME (cc X.Y, N SMs, M GiB, PCI id),
 * peers: NVLink 1,2 | PCIe P2P 3 | no P2P 4"; after cuda_device_open. */
#define CUDA_DEVICE_LINE 1536 /* name 256, peers up to 1024 */
void cuda_device_describe(int world_rank, const char *host, char *line, size_t len);

/* The device this process opened (-1 before cuda_device_open succeeded). */
int cuda_device_index(void);
#ifdef __cplusplus
}
#endif
#endif
