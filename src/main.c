/* main.c — llmtrain: init -> config -> grid -> model -> train / eval / generate -> finalize.
 * Usage: srun ./llmtrain input.nml   (or mpirun -np N ./llmtrain input.nml) */
#include <hdf5.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config/config.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/version.h"
#include "kernels/ops.h"
#include "parallel/grid.h"
#include "parallel/topology.h"
#include "parallel/watchdog.h"
#include "train/checkpointing.h"
#include "train/planner.h"
#include "train/trainer.h"


static void usage(int rank) {
    if (rank == 0)
        printf("llmtrain %s — MPI-native GPT training\n"
               "usage: srun ./llmtrain input.nml\n"
               "       mpirun -np N ./llmtrain input.nml\n"
               "       ./llmtrain --plan input.nml   (memory per rank and what fits; one process)\n"
               "The namelist groups and keys are listed in README.md; examples in inputs/.\n",
               LLMT_VERSION);
}

/* Name each communicator once for the watchdog's messages. */
static void name_communicators(const grid_t *g) {
    watchdog_peers_of(g->dp_comm, "dp group");
    watchdog_peers_of(g->tp_comm, "tp group");
    watchdog_peers_of(g->pp_comm, "pp group");
    watchdog_peers_of(g->mp_comm, "model-parallel group");
    if (g->embed_comm != MPI_COMM_NULL) watchdog_peers_of(g->embed_comm, "embedding group");
}

/* Before the namelist is read the ranks wait for each other with this timeout (the namelist's
 * &checkpoint timeout_s takes over once it is known). */
static double startup_timeout_s(void) {
    const char *e = getenv("LLMT_STARTUP_TIMEOUT_S");
    double t = e ? atof(e) : 0;
    return t > 0 ? t : 600.0;
}

/* MPI with the thread level the program needs: OpenMP threads compute and a watchdog thread
 * watches, but only the main thread calls MPI (FUNNELED). */
static void init_mpi(int *argc, char ***argv) {
    int provided = MPI_THREAD_SINGLE;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    if (provided < MPI_THREAD_FUNNELED)
        die_call(__FILE__, __LINE__, "MPI_Init_thread(MPI_THREAD_FUNNELED)",
                 "this MPI library provides no thread support; llmtrain's OpenMP and watchdog "
                 "threads need MPI_THREAD_FUNNELED");
    /* MPI errors come back as codes to MPI_CHECK (file:line and the MPI message), not as the
     * library's own abort. */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* HDF5 would print its whole diagnostic stack for every failed call: our one message
     * (with the library's reason, see die_h5) replaces it. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
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

/* llmtrain --plan input.nml: on one process (a login node), no grid, no model buffers, no data:
 * the planner's per-rank prediction for the namelist's grid and the alternatives that fit.
 * Without &run memory_limit_gb the limit is this node's memory shared by min(ranks, cores)
 * ranks. Exit 0 when the namelist's setup fits, 2 when it does not. */
static int plan_only(const char *path, int rank) {
    config_t cfg;
    config_load(path, &cfg);
    int code = 0;
    if (rank == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int ranks = cfg.dp * cfg.tp * cfg.pp;
        int per_node = cores > 0 && cores < ranks ? (int)cores : ranks;
        code = plan_print(&cfg, plan_limit_bytes(&cfg, per_node), per_node) ? 0 : LLMT_EXIT_USER;
    }
    config_destroy(&cfg);
    return code;
}

int main(int argc, char **argv) {
    init_mpi(&argc, &argv);
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    if ((argc != 2 && !(argc == 3 && strcmp(argv[1], "--plan") == 0)) || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(rank);
        MPI_Finalize();
        return argc == 2 ? 0 : LLMT_EXIT_USER;
    }
    if (argc == 3 && strcmp(argv[1], "--plan") == 0) {
        int code = plan_only(argv[2], rank);
        MPI_Finalize();
        return code;
    }
    if (strcmp(argv[1], "--version") == 0) {
        if (rank == 0) printf("llmtrain %s\n", LLMT_VERSION);
        MPI_Finalize();
        return 0;
    }
    /* From here on a signal is remembered (and acted on collectively), and no wait for a peer
     * goes unwatched, setup included. */
    stop_signals_install();
    watchdog_peers_of(MPI_COMM_WORLD, "all");
    watchdog_start(startup_timeout_s(), rank);
    fault_point("startup", rank);
    config_t cfg;
    watchdog_enter("reading the namelist", "all ranks");
    config_load(argv[1], &cfg); /* also refuses the keys of features not in this version */
    ckpt_resume_default(&cfg, rank); /* a requeued job continues */
    watchdog_leave();
    watchdog_set_timeout(cfg.timeout_s);
    fault_point("setup", rank);
    grid_t grid;
    watchdog_enter("building the process grid", "all ranks");
    grid_create(&grid, &cfg, MPI_COMM_WORLD);
    watchdog_leave();
    name_communicators(&grid);
    topology_t topo;
    watchdog_enter("placement (hwloc)", "all ranks");
    topology_place(&topo, MPI_COMM_WORLD, cfg.bind); /* sets the OpenMP thread count too */
    if (rank == 0) print_banner(&cfg, world);
    topology_print(&topo, MPI_COMM_WORLD);
    grid_print(&grid, MPI_COMM_WORLD);
    watchdog_leave();
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
    watchdog_enter("finishing", "all ranks");
    topology_destroy(&topo);
    grid_destroy(&grid);
    watchdog_leave();
    watchdog_stop();
    watchdog_forget_peers();
    config_destroy(&cfg);
    MPI_CHECK(MPI_Finalize());
    return code;
}
