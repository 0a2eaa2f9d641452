/* device.h — opening this rank's GPU: which device (the one nearest its cores, else by node-local
 * rank), whether it is usable (driver, compute capability, bf16), and its line in the startup
 * table (name, memory, peers over NVLink or PCIe). Plain C on the CUDA runtime API, built only
 * with make CUDA=1 (LLMT_CUDA).
 * Owns: the choice of device and the CUDA context of the process. Uses: the CUDA runtime,
 * parallel/topology.h and comm.h (the node's ranks), kernels/cuda/device_plan.h (the rules).
 * Used by: main.c (device = 'cuda'). */
#ifndef LLMT_CUDA_DEVICE_H
#define LLMT_CUDA_DEVICE_H
#include <mpi.h>
#include <stddef.h>
#include "kernels/precision.h"
#include "parallel/topology.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Choose and open this rank's device for a run storing tensors as `precision`. Collective over
 * the node (topo->node_comm: each rank's nearest GPU is shared, so the choice is one GPU per
 * rank or none from the topology). Returns 0, or -1 with err[len] set to the one message to
 * show (the caller agrees it over MPI: comm_agree_or_exit). */
int cuda_device_setup(const topology_t *topo, dtype_t precision, char *err, size_t len);

/* Rank 0 prints one line per rank: "rank R host: GPU d NAME (cc X.Y, N SMs, M GiB, PCI id),
 * peers: NVLink 1,2 | PCIe P2P 3 | no P2P 4". Collective over world; after cuda_device_setup. */
void cuda_device_print(MPI_Comm world);

/* The device this process opened (-1 before cuda_device_setup succeeded). */
int cuda_device_index(void);
#ifdef __cplusplus
}
#endif
#endif
