/* linkprobe.c — a slow link between nodes, measured (see linkprobe.h). */
#include "parallel/linkprobe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "parallel/comm_host.h"

void linkprobe_init(linkprobe_t *p, MPI_Comm world, size_t bytes) {
    memset(p, 0, sizeof *p);
    p->leaders = MPI_COMM_NULL;
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_CHECK(MPI_Comm_size(world, &size));
    const int my_first = comm_node_first(world); /* this rank's node: its first rank's */
    p->leader = my_first == rank;
    /* node index: leaders counted in world-rank order; each rank learns its leader's */
    int *lead = xrealloc_small(NULL, sizeof(int) * (size_t)size);
    comm_allgather(&p->leader, 1, MPI_INT, lead, world, "link probe setup");
    for (int r = 0; r < size; r++) p->n_nodes += lead[r];
    p->first_rank = xrealloc_small(NULL, sizeof(int) * (size_t)p->n_nodes);
    for (int r = 0, k = 0; r < size; r++)
        if (lead[r]) p->first_rank[k++] = r;
    free(lead);
    for (int k = 0; k < p->n_nodes; k++)
        if (p->first_rank[k] == my_first) p->node = k;
    /* hosts of the leaders, for the messages */
    char mine[LINKPROBE_HOST] = {0}, *all = xrealloc_small(NULL, (size_t)size * LINKPROBE_HOST);
    if (gethostname(mine, sizeof mine - 1) != 0) snprintf(mine, sizeof mine, "?");
    comm_allgather(mine, LINKPROBE_HOST, MPI_CHAR, all, world, "link probe setup");
    p->host = xrealloc_small(NULL, (size_t)p->n_nodes * LINKPROBE_HOST);
    for (int k = 0; k < p->n_nodes; k++) {
        memcpy(p->host[k], all + (size_t)p->first_rank[k] * LINKPROBE_HOST, LINKPROBE_HOST);
        p->host[k][LINKPROBE_HOST - 1] = '\0';
    }
    free(all);
    p->active = p->n_nodes >= 3 && bytes > 0;
    if (!p->active) return;
    p->bytes = (int)bytes;
    comm_split(world, p->leader ? 0 : MPI_UNDEFINED, rank, &p->leaders, "link probe setup");
    if (p->leader) {
        p->buf = xrealloc_small(NULL, bytes); /* small, untracked: not in the memory plan */
        memset(p->buf, 0x5a, bytes);
    }
}

void linkprobe_free(linkprobe_t *p) {
    if (p->active && p->leaders != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&p->leaders));
    free(p->buf);
    free(p->first_rank);
    free(p->host);
    memset(p, 0, sizeof *p);
    p->leaders = MPI_COMM_NULL;
}

/* The fastest of LINKPROBE_REPS round trips with peer after one untimed one (seconds at the
 * initiator, 0 at the other end). */
static double time_edge(linkprobe_t *p, int peer, int initiator) {
    comm_pingpong_bytes(p->buf, p->bytes, peer, initiator, p->leaders, "link probe");
    double best = 1e30;
    for (int i = 0; i < LINKPROBE_REPS; i++) {
        const double t = comm_pingpong_bytes(p->buf, p->bytes, peer, initiator, p->leaders,
                                             "link probe");
        if (t < best) best = t;
    }
    return best;
}

/* Edge e joins nodes e and e+1 (mod n), node e times it. Round 0 times the even edges, round 1
 * the odd ones; for an odd n the last edge (n-1, 0) shares node 0 with edge 0 and gets round 2. */
static int edge_round(int e, int n) { return (n % 2 && e == n - 1) ? 2 : e % 2; }

void linkprobe_run(linkprobe_t *p, MPI_Comm world, double *node_s) {
    if (!p->active) return;
    const int n = p->n_nodes, k = p->node;
    double mine = 0.0; /* the time of my right edge (k, k+1), which I time */
    if (p->leader) {
        const int rounds = n % 2 ? 3 : 2;
        const int right = k, left = (k + n - 1) % n; /* my two edges */
        for (int round = 0; round < rounds; round++) {
            if (edge_round(right, n) == round) mine = time_edge(p, (k + 1) % n, 1);
            if (edge_round(left, n) == round) time_edge(p, left, 0);
        }
    }
    /* every rank learns every edge's time (the leaders' values, by world rank); a node's time
     * is its faster edge's */
    int size;
    MPI_CHECK(MPI_Comm_size(world, &size));
    double *all = xrealloc_small(NULL, sizeof(double) * (size_t)size);
    comm_allgather(&mine, 1, MPI_DOUBLE, all, world, "link probe result");
    for (int j = 0; j < n; j++) {
        const double right = all[p->first_rank[j]], left = all[p->first_rank[(j + n - 1) % n]];
        node_s[j] = right < left ? right : left;
    }
    free(all);
}
