/* main.c — llmtrain: init -> config -> grid -> model -> train / eval / generate -> finalize.
 * Usage: srun ./llmtrain input.nml   (or mpirun -np N ./llmtrain input.nml) */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/config.h"
#include "core/error.h"
#include "core/version.h"
#include "kernels/ops.h"
#include "parallel/grid.h"
#include "parallel/topology.h"
#include "parallel/watchdog.h"
#include "train/trainer.h"


static void usage(int rank) {
    if (rank == 0)
        printf("llmtrain %s — MPI-native GPT training\n"
               "usage: srun ./llmtrain input.nml\n"
               "       mpirun -np N ./llmtrain input.nml\n"
               "The namelist groups and keys are listed in README.md; examples in inputs/.\n",
               LLMT_VERSION);
}

/* Name each communicator once for the watchdog's messages, then start it. */
static void start_watchdog(const grid_t *g, double timeout_s) {
    watchdog_peers_of(g->dp_comm, "dp group");
    watchdog_peers_of(g->tp_comm, "tp group");
    watchdog_peers_of(g->pp_comm, "pp group");
    watchdog_peers_of(g->mp_comm, "model-parallel group");
    if (g->embed_comm != MPI_COMM_NULL) watchdog_peers_of(g->embed_comm, "embedding group");
    watchdog_peers_of(MPI_COMM_WORLD, "all ranks");
    watchdog_start(timeout_s, g->world_rank);
}

static void print_banner(const config_t *cfg, int world) {
    printf("llmtrain %s | %d MPI rank%s x %d OpenMP thread%s | input %s | mode %s\n",
           LLMT_VERSION, world, world > 1 ? "s" : "", omp_get_max_threads(),
           omp_get_max_threads() > 1 ? "s" : "", cfg->source_path, cfg->mode);
    int n = config_to_namelist(cfg, NULL, 0);
    char *text = malloc((size_t)n + 1);
    if (text) {
        config_to_namelist(cfg, text, n + 1);
        printf("---- effective configuration ----\n%s---------------------------------\n", text);
        free(text);
    }
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    if (argc != 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(rank);
        MPI_Finalize();
        return argc == 2 ? 0 : LLMT_EXIT_USER;
    }
    if (strcmp(argv[1], "--version") == 0) {
        if (rank == 0) printf("llmtrain %s\n", LLMT_VERSION);
        MPI_Finalize();
        return 0;
    }
    config_t cfg;
    config_load(argv[1], &cfg); /* also refuses the keys of features not in this version */
    grid_t grid;
    grid_create(&grid, &cfg, MPI_COMM_WORLD);
    if (rank == 0) print_banner(&cfg, world);
    topology_t topo;
    topology_place(&topo, MPI_COMM_WORLD, cfg.bind);
    topology_print(&topo, MPI_COMM_WORLD);
    grid_print(&grid, MPI_COMM_WORLD);
    start_watchdog(&grid, cfg.timeout_s);
    trainer_t tr;
    trainer_setup(&tr, &cfg, &grid, ops_cpu());
    tr.io_hints = topology_io_hints(&topo, MPI_COMM_WORLD, cfg.striping_factor, cfg.striping_unit);
    int code = 0;
    if (strcmp(cfg.mode, "train") == 0) {
        code = trainer_train(&tr);
    } else if (strcmp(cfg.mode, "eval") == 0) {
        double v = trainer_validate(&tr);
        if (rank == 0) printf("eval: val_loss %.6f over %d batches\n", v, cfg.val_batches);
    } else {
        trainer_generate(&tr);
    }
    MPI_CHECK(MPI_Info_free(&tr.io_hints));
    trainer_destroy(&tr);
    watchdog_stop();
    watchdog_forget_peers();
    topology_destroy(&topo);
    grid_destroy(&grid);
    config_destroy(&cfg);
    MPI_CHECK(MPI_Finalize());
    return code;
}
