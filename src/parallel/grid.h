/* grid.h — the process grid: world = pp x dp x cp x tp ranks, tp varying fastest (tensor-parallel
 * peers share a node), then cp (context parallelism: the ranks that share one sequence), pp
 * slowest; the dp ranks further split into ep x edp for the experts.
 * Every rank of a (tp, pp) coordinate holds the same weights, whether it differs in dp or in cp:
 * `dp`, `rank_dp` and dp_comm are that replica group, dp x cp ranks (rank_dp = data rank x cp +
 * cp rank), over which gradients are summed and ZeRO shards. The data-parallel coordinate alone
 * (which samples a rank reads) is data_dp, rank_data; cp_comm joins a sequence's cp ranks.
 * Owns: the communicators, their data-path groups (parallel/comm.h) and this rank's coordinates.
 * Uses: core/, config/ (dp, tp, pp, ep), parallel/comm. The rules that tie the model's shape to
 * the grid are the model's (model/spec.c model_spec_check_grid).
 * Used by: model/, train/, io/, main. */
#ifndef LLMT_GRID_H
#define LLMT_GRID_H
#include <mpi.h>
#include "config/config.h"
#include "parallel/comm.h"

typedef struct grid {
    int world_size, world_rank;
    int dp, tp, pp;                /* dp: the replica group, &parallel dp x cp */
    int rank_dp, rank_tp, rank_pp;
    int data_dp, rank_data;        /* &parallel dp and this rank's coordinate in it */
    int cp, rank_cp;               /* &parallel cp and this rank's place in the sequence */
    MPI_Comm cp_comm;
    comm_group_t *cp_group;        /* a 1-rank group when cp = 1 */
    MPI_Comm dp_comm, tp_comm, pp_comm, mp_comm; /* mp = model parallel (tp x pp) */
    /* first and last pipeline stage of the same (dp, tp) coordinate, which both hold the tied
     * wte; MPI_COMM_NULL on middle stages (a 1-rank communicator when pp = 1) */
    MPI_Comm embed_comm;
    /* expert parallelism (&parallel ep): dp rank d is rank_ep = d % ep of its ep group (the ep
     * consecutive dp ranks d - d % ep ...) and rank_edp = d / ep among the edp = dp / ep ranks
     * that hold the same experts; ep_comm, edp_comm: 1-rank groups when ep = 1 / ep = dp */
    int ep, edp, rank_ep, rank_edp;
    MPI_Comm ep_comm, edp_comm;
    /* The same ranks as groups for the data path (comm.h): what model/ and train/ pass to the
     * collectives. embed_group is NULL on middle stages; world_group spans MPI_COMM_WORLD. */
    comm_group_t *dp_group, *tp_group, *pp_group, *embed_group, *ep_group, *edp_group;
    comm_group_t *world_group;
} grid_t;

/* Validate the shape against the world size and the model (fatal_user on every rank with one
 * message naming the keys), then split the communicators and make their groups (data on MPI;
 * the CUDA build attaches NCCL to them afterwards: parallel/comm_nccl.h). */
void grid_create(grid_t *g, const config_t *cfg, MPI_Comm world);
void grid_destroy(grid_t *g);
/* The data-path groups this rank belongs to, in the same order on every rank, for attaching a
 * device transport to each (NCCL, or the staged one of LLMT_DEVSIM): dp, tp, pp, ep, expert
 * replicas, then the embedding group on the end stages. 1-rank groups too, so that every float
 * call on device memory goes through the transport. p2p[i]: the group only sends and receives
 * (the pipeline). The world group carries only host values and is not listed. Returns the count. */
#define GRID_DATA_GROUPS 6
int grid_data_groups(const grid_t *g, comm_group_t *out[GRID_DATA_GROUPS],
                     bool p2p[GRID_DATA_GROUPS], const char *names[GRID_DATA_GROUPS]);
/* Print the table of every rank's coordinates and host (rank 0 prints; collective). */
void grid_print(const grid_t *g, MPI_Comm world);
#endif
