/* grid.c — process grid and communicators (see grid.h). */
#include "parallel/grid.h"
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "parallel/comm_host.h"

/* Every check here runs on every rank with the same inputs, so fatal_user is collective. The
 * model's shape against tp and pp is the model's rule: model/spec.c model_spec_check_grid. */
static void grid_validate(const config_t *cfg, int world) {
    const int dp = cfg->dp, tp = cfg->tp, pp = cfg->pp, cp = cfg->cp;
    const long long ranks = (long long)dp * tp * pp * cp; /* four ints: no overflow in 64 bits */
    if (ranks == world) return;
    char names[16], factors[64]; /* cp named only where it is used */
    if (cp > 1) {
        snprintf(names, sizeof names, "dp*cp*tp*pp");
        snprintf(factors, sizeof factors, "%d*%d*%d*%d", dp, cp, tp, pp);
    } else {
        snprintf(names, sizeof names, "dp*tp*pp");
        snprintf(factors, sizeof factors, "%d*%d*%d", dp, tp, pp);
    }
    fatal_user("%s: &parallel %s = %s = %lld does not equal the %d MPI ranks started; change dp, "
               "%stp, pp or the rank count", cfg->source_path, names, factors, ranks, world,
               cp > 1 ? "cp, " : "");
}

void grid_create(grid_t *g, const config_t *cfg, MPI_Comm world) {
    memset(g, 0, sizeof *g);
    MPI_CHECK(MPI_Comm_size(world, &g->world_size));
    MPI_CHECK(MPI_Comm_rank(world, &g->world_rank));
    grid_validate(cfg, g->world_size);
    g->data_dp = cfg->dp;
    g->cp = cfg->cp;
    g->dp = cfg->dp * cfg->cp; /* the replica group (grid.h) */
    g->tp = cfg->tp;
    g->pp = cfg->pp;
    const int r = g->world_rank;
    g->rank_tp = r % g->tp;
    g->rank_dp = (r / g->tp) % g->dp;
    g->rank_pp = r / (g->tp * g->dp);
    g->rank_cp = g->rank_dp % g->cp;
    g->rank_data = g->rank_dp / g->cp;
    /* Ranks that share a color form a group; the key orders them by their coordinate. */
    const char *phase = "building the process grid";
    comm_split(world, g->rank_pp * g->dp + g->rank_dp, g->rank_tp, &g->tp_comm, phase);
    comm_split(world, g->rank_pp * g->tp + g->rank_tp, g->rank_dp, &g->dp_comm, phase);
    comm_split(world, g->rank_dp * g->tp + g->rank_tp, g->rank_pp, &g->pp_comm, phase);
    comm_split(world, g->rank_dp, g->rank_pp * g->tp + g->rank_tp, &g->mp_comm, phase);
    comm_split(world, (g->rank_pp * g->data_dp + g->rank_data) * g->tp + g->rank_tp, g->rank_cp,
               &g->cp_comm, phase);
    /* expert parallelism: ep consecutive dp ranks share out the experts (ep_comm); the ranks
     * holding the same experts (same rank_ep) are the experts' replicas (edp_comm) */
    g->ep = cfg->ep;
    g->edp = g->dp / g->ep;
    g->rank_ep = g->rank_dp % g->ep;
    g->rank_edp = g->rank_dp / g->ep;
    const int mp_coord = g->rank_pp * g->tp + g->rank_tp;
    comm_split(world, mp_coord * g->edp + g->rank_edp, g->rank_ep, &g->ep_comm, phase);
    comm_split(world, mp_coord * g->ep + g->rank_ep, g->rank_edp, &g->edp_comm, phase);
    bool end_stage = g->rank_pp == 0 || g->rank_pp == g->pp - 1;
    int color = end_stage ? g->rank_dp * g->tp + g->rank_tp : MPI_UNDEFINED;
    comm_split(world, color, g->rank_pp, &g->embed_comm, phase);
    g->dp_group = comm_group_create(g->dp_comm, "dp group");
    g->tp_group = comm_group_create(g->tp_comm, "tp group");
    g->pp_group = comm_group_create(g->pp_comm, "pp group");
    g->ep_group = comm_group_create(g->ep_comm, "ep group");
    g->edp_group = comm_group_create(g->edp_comm, "expert replica group");
    g->embed_group = end_stage ? comm_group_create(g->embed_comm, "embedding group") : NULL;
    g->world_group = comm_group_create(world, "world");
    g->cp_group = comm_group_create(g->cp_comm, "cp group");
}

void grid_destroy(grid_t *g) {
    comm_group_t **groups[] = {&g->dp_group,  &g->tp_group,    &g->pp_group,   &g->ep_group,
                               &g->edp_group, &g->embed_group, &g->world_group, &g->cp_group};
    for (int i = 0; i < 8; i++) comm_group_destroy(groups[i]);
    MPI_Comm *comms[] = {&g->dp_comm, &g->tp_comm, &g->pp_comm, &g->mp_comm, &g->embed_comm,
                         &g->ep_comm, &g->edp_comm, &g->cp_comm};
    for (int i = 0; i < 8; i++)
        if (*comms[i] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(comms[i]));
}

int grid_data_groups(const grid_t *g, comm_group_t *out[GRID_DATA_GROUPS],
                     bool p2p[GRID_DATA_GROUPS], const char *names[GRID_DATA_GROUPS]) {
    comm_group_t *all[] = {g->dp_group, g->tp_group,  g->pp_group,
                           g->ep_group, g->edp_group, g->embed_group};
    static const char *const all_names[] = {"dp", "tp", "pp", "ep", "expert replica", "embedding"};
    int n = 0;
    for (int i = 0; i < GRID_DATA_GROUPS; i++) {
        if (!all[i]) continue; /* the embedding group on a middle stage */
        out[n] = all[i];
        p2p[n] = all[i] == g->pp_group;
        names[n] = all_names[i];
        n++;
    }
    return n;
}

void grid_print(const grid_t *g, MPI_Comm world) {
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    int mine[3] = {g->rank_dp, g->rank_tp, g->rank_pp};
    int *all = g->world_rank == 0 ? xmalloc(sizeof(int) * 3 * (size_t)g->world_size) : NULL;
    char *hosts = g->world_rank == 0 ? xmalloc(64 * (size_t)g->world_size) : NULL;
    comm_gather(mine, 3, MPI_INT, all, 0, world, "printing the grid");
    comm_gather(host, 64, MPI_CHAR, hosts, 0, world, "printing the grid");
    if (g->world_rank == 0) {
        if (g->cp > 1)
            printf("grid: %d ranks = dp %d x cp %d x tp %d x pp %d (weights replicated over dp x "
                   "cp = %d; column dp below: data rank x cp + cp rank)", g->world_size,
                   g->data_dp, g->cp, g->tp, g->pp, g->dp);
        else
            printf("grid: %d ranks = dp %d x tp %d x pp %d", g->world_size, g->dp, g->tp, g->pp);
        if (g->ep > 1) printf(" (experts over ep %d, each expert on %d dp ranks)", g->ep, g->edp);
        printf("\n");
        printf("  %5s %4s %4s %4s  %s\n", "rank", "dp", "tp", "pp", "host");
        for (int r = 0; r < g->world_size; r++)
            printf("  %5d %4d %4d %4d  %s\n", r, all[3 * r], all[3 * r + 1], all[3 * r + 2],
                   hosts + 64 * r);
    }
    xfree(all);
    xfree(hosts);
}
