/* linkprobe.h — a slow link between nodes, measured: the nodes' first ranks (their leaders)
 * exchange a probe of fixed size with their neighbours on a ring of the nodes, and each node's
 * time is that of its faster edge.
 *
 * Why a probe: a node whose network is slow (a degraded link, a congested switch port, tc's rate
 * limit in validation/cluster/) makes every rank wait in the collectives that cross it, so both
 * the step times and the busy times (train/straggler.h) are alike on every rank and name nobody.
 * Timing one transfer per link does: the ring's edges (k, k+1 mod N) are timed in two rounds of
 * disjoint pairs (three for an odd N), each a round trip of the probe (node k sends to k+1, which
 * sends it back; timed at k: a send alone completes once the bytes are in the socket buffer, long
 * before a slow link delivers them), LINKPROBE_REPS times after one untimed round trip (which
 * opens the connection), the fastest kept.
 * A node on a slow link is slow on both of its edges; its neighbours are slow on one of theirs
 * only, so the faster edge of each node (its time) points at the slow node alone. Two nodes have
 * one edge: the probe cannot tell which end is slow and is off below three nodes. Cost: each leader sends
 * and receives the probe 2 x (LINKPROBE_REPS + 1) times per probe, in two or three rounds,
 * whatever the node count.
 * Owns: the leaders' communicator and the probe buffers. Uses: parallel/comm_host, core.
 * Used by: train/trainer_report.c. */
#ifndef LLMT_LINKPROBE_H
#define LLMT_LINKPROBE_H
#include <mpi.h>
#include <stddef.h>

#define LINKPROBE_REPS 3
#define LINKPROBE_HOST 64

typedef struct linkprobe {
    int n_nodes;        /* nodes of the job (each rank knows) */
    int node;           /* this rank's node, 0 .. n_nodes-1 in the order of the nodes' first ranks */
    int leader;         /* 1 on the node's first rank */
    int active;         /* 1 when probing (n_nodes >= 3 and bytes > 0), on every rank alike */
    int bytes;
    MPI_Comm leaders;   /* the leaders, by node index (MPI_COMM_NULL elsewhere) */
    char *buf;          /* [bytes]: the probe, there and back (leaders) */
    int *first_rank;    /* [n_nodes]: each node's first world rank (every rank) */
    char (*host)[LINKPROBE_HOST]; /* [n_nodes]: each node's host name (every rank) */
} linkprobe_t;

/* Collective over world: finds the nodes (MPI_COMM_TYPE_SHARED), their leaders and hosts.
 * bytes 0 = off. */
void linkprobe_init(linkprobe_t *p, MPI_Comm world, size_t bytes);
void linkprobe_free(linkprobe_t *p);
/* Collective over world when active (the leaders exchange; the other ranks only receive the
 * result): node_s[n_nodes] = each node's faster edge time in seconds, on every rank. */
void linkprobe_run(linkprobe_t *p, MPI_Comm world, double *node_s);
#endif
