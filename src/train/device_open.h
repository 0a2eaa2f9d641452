/* device_open.h — opening this rank's GPU in a CUDA build (&run device = 'cuda'): the MPI side
 * of kernels/cuda/device.h, which knows no MPI. The node's ranks share their nearest GPUs
 * (topology) before each chooses, and rank 0 prints the GPU table gathered from every rank.
 * Built only with make CUDA=1 (LLMT_CUDA).
 * Owns: nothing but the two collectives. Uses: kernels/cuda/device.h, parallel/topology.h,
 * parallel/comm_host.h, core/. Used by: main.c, validation/gpu/device_probe.c. */
#ifndef LLMT_DEVICE_OPEN_H
#define LLMT_DEVICE_OPEN_H
#include <mpi.h>
#include <stddef.h>
#include "kernels/precision.h"
#include "parallel/topology.h"

/* Choose and open this rank's device for a run storing tensors as `precision`. Collective over
 * the node (topo->node_comm: each rank's nearest GPU is shared, so the choice is one GPU per
 * rank or none from the topology). Returns 0, or -1 with err[len] set to the one message to
 * show (the caller agrees it over MPI: comm_agree_or_exit). */
int device_open(const topology_t *topo, dtype_t precision, char *err, size_t len);

/* Rank 0 prints one line per rank (kernels/cuda/device.h cuda_device_describe). Collective over
 * world; after device_open. */
void device_print_table(MPI_Comm world);
#endif
