/* comm_nccl.h — NCCL under the data-path groups (comm.h) of the CUDA build: each group's float
 * collectives and transfers become NCCL operations on a stream of the group's own, ordered after
 * the compute stream's work (comm_transport.h), so the dp gradient reduction overlaps the rest
 * of backward and the pipeline's transfers overlap compute.
 *
 * A group gets NCCL communicators made from its MPI communicator: rank 0 of the group makes the
 * unique id, MPI broadcasts it (watched), every rank joins with ncclCommInitRank. Collective
 * groups (dp, tp, ep, expert replicas, embedding) get one communicator. The pipeline group,
 * which only sends and receives, gets two, one per direction (sends to higher ranks and the
 * matching receives on one, toward lower ranks on the other), each on its own stream: an
 * activation going up never queues behind a gradient going down, so two stages that send to each
 * other before receiving cannot wait on each other (NCCL's send, unlike MPI_Isend, occupies its
 * stream until the peer receives).
 * Owns: the NCCL communicators, their streams and events. Uses: NCCL, the CUDA runtime, MPI (the
 * id), parallel/comm.c. Used by: main.c (device = 'cuda'). CUDA build only. */
#ifndef LLMT_COMM_NCCL_H
#define LLMT_COMM_NCCL_H
#include <stddef.h>
#include "parallel/comm_host.h"
#include "parallel/grid.h"

#define COMM_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */

/* Rank 0 of comm makes a NCCL unique id (no GPU needed), every rank of comm receives it in
 * id[COMM_NCCL_ID_BYTES] (collective over comm, watched as `phase`). Returns 0, or non-zero
 * with NCCL's message in err on rank 0 (the other ranks then hold zeros: the caller agrees). */
int comm_nccl_unique_id(MPI_Comm comm, unsigned char *id, const char *phase, char *err,
                        size_t errlen);

typedef enum { COMM_NCCL_COLLECTIVE, COMM_NCCL_P2P } comm_nccl_use_t;
/* Attach NCCL to g (collective over g's ranks; this rank's GPU already current). Returns 0, or
 * non-zero with NCCL's or CUDA's message in err (g unchanged). */
int comm_nccl_attach(comm_group_t *g, comm_nccl_use_t use, char *err, size_t errlen);
/* Every group of the grid, in the same order on every rank (so no init waits on another);
 * a rank that fails ends the job on every rank with its message (exit 2). */
void comm_nccl_attach_grid(grid_t *grid);
/* "NCCL 2.28.9" for the startup summary and the provenance. */
const char *comm_nccl_version(void);
#endif
