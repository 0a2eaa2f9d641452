/* main.c — llmtrain: init -> config -> grid -> model -> train / eval / generate -> finalize.
 * Usage: srun ./llmtrain input.nml [group.key=value ...]   (or mpirun -np N ...); --help
 * says more. */
#include <hdf5.h>
#include <mpi.h>
#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config/config.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/buildinfo.h"
#include "core/version.h"
#include "kernels/ops.h"
#include "kernels/cpu/ops_devsim.h"
#include "model/spec.h"
#ifdef LLMT_CUDA
#include "kernels/cuda/cuda_matmul.h"
#include "train/device_open.h"
#include "parallel/comm_nccl.h"
#include "parallel/comm_host.h"
#endif
#include "parallel/comm_staged.h"
#include "parallel/grid.h"
#include "parallel/topology.h"
#include "parallel/watchdog.h"
#include "train/calibrate.h"
#include "train/checkpointing.h"
#include "train/machine.h"
#include "train/perfplan.h"
#include "train/planner.h"
#include "train/trainer.h"


/* llmtrain --help; docs/running.md says the same. */
static void usage(void) {
    printf(
        "llmtrain %s - MPI-native GPT training\n"
        "\n"
        "usage: srun ./llmtrain input.nml [group.key=value ...]\n"
        "       mpirun -np N ./llmtrain input.nml [group.key=value ...]\n"
        "       ./llmtrain --plan input.nml [group.key=value ...]\n"
        "       ./llmtrain --plan input.nml --machine M.nml [--search N] [--json] [group.key=value ...]\n"
        "       mpirun -np 2 ./llmtrain --calibrate [local.nml]\n"
        "       ./llmtrain --grid input.nml [group.key=value ...]\n"
        "       ./llmtrain --keys | --version | --help\n"
        "\n"
        "  input.nml        a Fortran namelist: &run &model &parallel &train &data &checkpoint &log\n"
        "                   (keys in docs/namelist.md, examples in inputs/). &run mode says what runs:\n"
        "                   'train' (default), 'eval' (the validation loss of &run init_from),\n"
        "                   'generate' (samples after &run prompt or prompt_ids)\n"
        "  group.key=value  replaces one key of the file, checked like the file's keys (type,\n"
        "                   range, choices); a later one wins; a string may omit its quotes:\n"
        "                     train.max_steps=20 run.name=short parallel.dp=2 'data.train_files=a*.bin'\n"
        "  --plan           on one process: the memory per rank and the setups that fit; trains nothing\n"
        "  --machine M.nml  with --plan: the step time on the machine M describes (inputs/machines/),\n"
        "                   part by part, tokens/s, TFLOP/s per device, MFU, memory; no GPU needed\n"
        "  --search N       with --machine: the best dp x tp x pp, schedule, micro_batch, recompute\n"
        "                   and zero_stage for N devices, and why the others lose\n"
        "  --json           with --machine: one JSON object instead of the table\n"
        "  --calibrate      measure this machine (products, memory, MPI between 2 ranks) and write\n"
        "                   its machine file (default local.nml); docs/planning.md\n"
        "  --grid           print the grid and run directory as shell assignments LLMT_RANKS=..\n"
        "                   LLMT_DP=.. LLMT_TP=.. LLMT_PP=.. LLMT_RUN_DIR=.. (for jobscripts: the\n"
        "                   allocation is checked against it)\n"
        "  --keys           every namelist key as JSON: group, name, type, default, range, choices,\n"
        "                   whether it is a path, array length (for tools; the fuzzer reads it)\n"
        "  --version        the version, commit, build date, compiler and flags, and libraries\n"
        "  -h, --help       this text\n"
        "Options come before input.nml; the effective configuration, overrides applied, is printed\n"
        "at startup and stored in every checkpoint and weights file.\n"
        "\n"
        "exit codes: 0 done (--plan: the setup fits); 2 bad input (namelist, override, option,\n"
        "  data, grid; --plan: it does not fit); 3 internal error (a library call failed);\n"
        "  4 the watchdog ended a hung job; 5 a checkpoint that had to be written could not be;\n"
        "  75 stopped by SIGUSR1/SIGTERM after writing a checkpoint (requeue; resume = 'auto')\n",
        LLMT_VERSION);
}

/* What the command line asks for. */
typedef enum cli_action {
    CLI_RUN, CLI_PLAN, CLI_GRID, CLI_HELP, CLI_VERSION, CLI_KEYS, CLI_CALIBRATE
} cli_action_t;

typedef struct cli {
    cli_action_t action;
    const char *namelist;
    config_args_t overrides; /* the arguments after the namelist */
    const char *machine;     /* --plan --machine M.nml: the performance model on that machine */
    int search;              /* --search N: the best grids of N devices (0: none) */
    bool json;               /* --json */
} cli_t;

/* The value of option argv[i] (the next argument), or a refusal naming it. */
static const char *option_value(int argc, char **argv, int i, const char *what) {
    if (i + 1 >= argc || argv[i + 1][0] == '-')
        fatal_user("option '%s' (command line argument %d) needs %s; see llmtrain --help", argv[i], i, what);
    return argv[i + 1];
}

/* The options from argv[i] on, up to the first argument that is not one; returns its index. */
static int parse_options(int argc, char **argv, int i, cli_t *cli) {
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--plan") || !strcmp(a, "--grid")) {
            cli->action = !strcmp(a, "--plan") ? CLI_PLAN : CLI_GRID;
        } else if (!strcmp(a, "--machine")) {
            cli->machine = option_value(argc, argv, i++, "a machine file (inputs/machines/*.nml)");
        } else if (!strcmp(a, "--search")) {
            const char *v = option_value(argc, argv, i++, "a device count");
            char *end;
            const long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1 << 20)
                fatal_user("option '--search %s': expected a device count from 1 to %d", v, 1 << 20);
            cli->search = (int)n;
        } else if (!strcmp(a, "--json")) {
            cli->json = true;
        } else if (!strcmp(a, "--calibrate")) {
            cli->action = CLI_CALIBRATE;
        } else {
            fatal_user("unknown option '%s' (command line argument %d); see llmtrain --help", a, i);
        }
    }
    return i;
}

/* The performance model's options go with --plan, and --search and --json with --machine. */
static void check_options(const cli_t *cli) {
    if ((cli->machine || cli->search || cli->json) && cli->action != CLI_PLAN)
        fatal_user("--machine, --search and --json go with --plan: llmtrain --plan input.nml --machine "
                   "M.nml [--search N] [--json]; see llmtrain --help");
    if ((cli->search || cli->json) && !cli->machine)
        fatal_user("--search and --json need --machine M.nml (the devices to plan for, "
                   "inputs/machines/); see llmtrain --help");
}

/* Options, then the namelist file, then overrides. --help, --version and --keys win wherever they are;
 * any other argument starting with '-' that is not an option is an error naming it (every rank
 * sees the same argv and reaches the same error: fatal_user prints it once). */
static cli_t parse_command_line(int argc, char **argv) {
    cli_t cli = {.action = CLI_RUN};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return (cli_t){.action = CLI_HELP};
        if (!strcmp(argv[i], "--version")) return (cli_t){.action = CLI_VERSION};
        if (!strcmp(argv[i], "--keys")) return (cli_t){.action = CLI_KEYS};
    }
    int i = parse_options(argc, argv, 1, &cli);
    if (cli.action == CLI_CALIBRATE) { /* llmtrain --calibrate [OUT.nml] */
        if (argc > i + 1) fatal_user("--calibrate takes one output file at most; see llmtrain --help");
        cli.namelist = i < argc ? argv[i] : "local.nml";
        return cli;
    }
    if (i == argc) fatal_user("no namelist file given: llmtrain [--plan|--grid] input.nml [group.key=value ...]; "
                              "see llmtrain --help");
    cli.namelist = argv[i++];
    /* --plan input.nml --machine M.nml --search N --json: these may follow the namelist too */
    for (; i < argc && (!strcmp(argv[i], "--machine") || !strcmp(argv[i], "--search") ||
                        !strcmp(argv[i], "--json")); i++)
        i = parse_options(argc, argv, i, &cli) - 1;
    check_options(&cli);
    for (int j = i; j < argc; j++) {
        if (argv[j][0] != '-') continue;
        if (!strcmp(argv[j], "--plan") || !strcmp(argv[j], "--grid"))
            fatal_user("option '%s' (command line argument %d) comes before the namelist file; "
                       "see llmtrain --help", argv[j], j);
        if (!strcmp(argv[j], "--machine") || !strcmp(argv[j], "--search") || !strcmp(argv[j], "--json"))
            fatal_user("option '%s' (command line argument %d) comes before the overrides; "
                       "see llmtrain --help", argv[j], j);
        fatal_user("unknown option '%s' (command line argument %d); see llmtrain --help", argv[j], j);
    }
    cli.overrides = (config_args_t){.args = (const char *const *)argv + i, .n = argc - i, .first_argno = i,
                                    .plan_devices = cli.machine != NULL};
    return cli;
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

/* ---- stdout into a closed pipe -------------------------------------------------------------
 * `llmtrain x.nml | head -1`: once the reader is gone, the next write to stdout raises SIGPIPE,
 * whose default action ends the process, before the run's final checkpoint. The run's records
 * are in metrics.jsonl; the lines on stdout are a view of them, so losing the view must not cost
 * the run. SIGPIPE gets a handler that does nothing (rather than SIG_IGN, which programs started
 * with popen would inherit), so a write into a closed pipe fails with EPIPE instead; and stdout
 * becomes a stream that forwards to descriptor 1 until such a failure, then says so once on
 * stderr and drops everything written after it (no write attempted, no error to anyone). */
typedef struct stdout_guard {
    bool closed; /* the reader has gone: drop everything */
} stdout_guard_t;

static void sigpipe_ignore(int sig) { (void)sig; }

static ssize_t guarded_stdout_write(void *cookie, const char *buf, size_t n) {
    stdout_guard_t *g = cookie;
    for (size_t done = 0; done < n && !g->closed;) {
        ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EPIPE) {
            g->closed = true;
            fprintf(stderr, "llmtrain: rank %d: warning: stdout was closed by its reader (EPIPE): "
                    "nothing more is printed there; the run goes on, its records are in "
                    "metrics.jsonl\n", error_world_rank());
        } else if (w < 0) {
            return done ? (ssize_t)done : -1; /* any other error: stdio's usual report */
        } else {
            done += (size_t)w;
        }
    }
    return (ssize_t)n;
}

static void stdout_guard_install(void) {
    static stdout_guard_t guard; /* lives as long as the stream, to the end of the process */
    struct sigaction sa = {.sa_handler = sigpipe_ignore, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    SYS_CHECK(sigaction(SIGPIPE, &sa, NULL));
    FILE *f = fopencookie(&guard, "w", (cookie_io_functions_t){.write = guarded_stdout_write});
    if (!f) return; /* keep the plain stdout: writes into a closed pipe then fail with EPIPE */
    /* the buffering glibc gives stdout: by line on a terminal, in blocks otherwise */
    setvbuf(f, NULL, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);
    fflush(stdout);
    stdout = f; /* glibc's stdout is an ordinary variable, meant to be assignable */
}

static void print_banner(const config_t *cfg, int world) {
    printf("llmtrain %s | %d MPI rank%s x %d OpenMP thread%s | input %s | mode %s\n",
           LLMT_VERSION, world, world > 1 ? "s" : "", omp_get_max_threads(),
           omp_get_max_threads() > 1 ? "s" : "", cfg->source_path, cfg->mode);
    if (cfg->overrides[0]) printf("overrides: %s\n", cfg->overrides);
    int n = config_to_namelist(cfg, NULL, 0);
    char *text = malloc((size_t)n + 1);
    if (text) {
        config_to_namelist(cfg, text, n + 1);
        printf("---- effective configuration ----\n%s---------------------------------\n", text);
        free(text);
    }
}

/* llmtrain --plan input.nml [overrides]: on one process (a login node), no grid, no model
 * buffers, no data: the planner's per-rank prediction for the namelist's grid (overrides
 * applied) and the alternatives that fit.
 * Without &run memory_limit_gb the limit is this node's memory shared by min(ranks, cores)
 * ranks. Exit 0 when the namelist's setup fits, 2 when it does not. */
static int plan_only(const cli_t *cli, int rank) {
    config_t cfg;
    config_load_overrides(cli->namelist, &cli->overrides, &cfg);
    model_spec_check(MODEL_SPEC_OF(&cfg), cfg.ep, &cfg.where);
    int code = 0;
    if (cli->machine) { /* the performance model on the described machine (train/perfplan.h) */
        machine_t mc;
        char err[1024];
        if (machine_load(cli->machine, &mc, err, sizeof err) != 0) fatal_user("%s", err);
        if (rank == 0 && cfg.overrides[0] && !cli->json) printf("overrides: %s\n", cfg.overrides);
        if (rank == 0)
            code = cli->search ? perfplan_search(&cfg, &mc, cli->search, cli->json)
                               : perfplan_print(&cfg, &mc, cli->json);
    } else if (rank == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int ranks = cfg.dp * cfg.cp * cfg.tp * cfg.pp;
        int per_node = cores > 0 && cores < ranks ? (int)cores : ranks;
        if (cfg.overrides[0]) printf("overrides: %s\n", cfg.overrides);
        code = plan_print(&cfg, plan_limit_bytes(&cfg, per_node), per_node) ? 0 : LLMT_EXIT_USER;
    }
    config_destroy(&cfg);
    return code;
}

/* llmtrain --grid input.nml [overrides]: the process grid the namelist asks for, its &run elastic
 * policy and its run directory, as shell assignments (the jobscripts check the allocation against
 * the grid before starting anything, shrink it after a lost node, and find the run's outputs). */
static int grid_only(const cli_t *cli, int rank) {
    config_t cfg;
    config_load_overrides(cli->namelist, &cli->overrides, &cfg);
    model_spec_check(MODEL_SPEC_OF(&cfg), cfg.ep, &cfg.where);
    if (rank == 0) {
        printf("LLMT_RANKS=%d LLMT_DP=%d LLMT_TP=%d LLMT_PP=%d LLMT_ELASTIC=%s LLMT_MIN_NODES=%d LLMT_RUN_DIR='",
               cfg.dp * cfg.tp * cfg.pp, cfg.dp, cfg.tp, cfg.pp, cfg.elastic, cfg.min_nodes);
        char dir[2 * CFG_STR + 2];
        snprintf(dir, sizeof dir, "%s/%s", cfg.out_dir, cfg.name); /* as train/rundir names it */
        for (const char *c = dir; *c; c++) fputs(*c == '\'' ? "'\\''" : (char[2]){*c, 0}, stdout);
        printf("'\n");
    }
    config_destroy(&cfg);
    return 0;
}

/* LLMT_DEVSIM=1 (a test hook): the CPU backend behind a simulated device (kernels/cpu/ops_devsim.h)
 * and the staged transport on every data-path group, as a CUDA run has NCCL on them, so host code
 * that touches device memory or hands a host buffer to an op or a collective fails at once. */
static bool devsim_on;

static const ops_t *open_devsim(grid_t *grid) {
    devsim_on = true;
    const char *mb = getenv("LLMT_DEVSIM_MB");
    const size_t bytes = (size_t)(mb && atol(mb) > 0 ? atol(mb) : 4096) << 20;
    const ops_t *ops = ops_devsim(ops_cpu(), bytes);
    comm_group_t *groups[GRID_DATA_GROUPS];
    bool p2p[GRID_DATA_GROUPS];
    const char *names[GRID_DATA_GROUPS];
    const comm_staged_hooks_t hooks = {devsim_open, devsim_close, 2};
    const int n = grid_data_groups(grid, groups, p2p, names);
    for (int i = 0; i < n; i++) comm_staged_attach(groups[i], &hooks);
    if (grid->world_rank == 0)
        printf("devsim: LLMT_DEVSIM=1: the CPU backend behind a simulated device (%zu MiB arena, "
               "closed outside ops); the data path staged through host copies\n",
               bytes >> 20);
    return ops;
}

/* The backend of &run device: the CPU's or, in a CUDA build, this rank's GPU, opened after the
 * placement so the GPU nearest the bound cores is known; a GPU that cannot be used (no driver, no
 * device, too old, fewer GPUs than ranks, no bf16) ends every rank with one message, exit 2. */
static const ops_t *open_backend(const config_t *cfg, const topology_t *topo, grid_t *grid) {
#ifdef LLMT_CUDA
    if (cfg->choice.device == CFG_DEVICE_CUDA) {
        char err[512];
        watchdog_enter("opening the GPU", "all ranks");
        const int rc = device_open(topo, model_dtype_of(cfg->choice.precision), err, sizeof err);
        comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "opening the GPU", rc ? err : NULL);
        device_print_table(MPI_COMM_WORLD);
        watchdog_leave();
        llmt_cuda_allow_tf32 = cfg->allow_tf32; /* fp32 products on TF32 tensor cores */
        comm_nccl_attach_grid(grid); /* the data path's floats now travel by NCCL */
        return ops_cuda();
    }
#endif
    (void)cfg; /* a CPU-only build has refused device = 'cuda' in config */
    (void)topo;
    const char *sim = getenv("LLMT_DEVSIM");
    if (sim && strcmp(sim, "1") == 0) return open_devsim(grid);
    return ops_cpu();
}

/* Decisions that follow from each rank's CPU (native bf16 products, whether they are faster;
 * from those weights_storage = 'auto' and the planner's buffers) are made alike on every rank:
 * what any rank lacks counts as missing everywhere (cfg->products_missing), so a job whose nodes
 * have different CPUs computes, stores and exchanges the same types. Collective. */
static void agree_products(config_t *cfg, const ops_t *ops, int rank) {
    unsigned mine = (ops->products_native(DT_BF16) ? 0 : CFG_MISSING_BF16_NATIVE) |
                    (ops->products_faster(DT_BF16) ? 0 : CFG_MISSING_BF16_FASTER) |
                    (ops->products_faster(DT_FP16) ? 0 : CFG_MISSING_FP16_FASTER);
    unsigned v[2] = {mine, ~mine}; /* one OR: what any rank lacks, and (negated) what all lack */
    comm_allreduce(v, 2, MPI_UNSIGNED, MPI_BOR, MPI_COMM_WORLD, "agreeing on the products");
    const unsigned any = v[0], all = ~v[1];
    cfg->products_missing = any;
    if (rank == 0 && any != all && cfg->choice.precision != CFG_PRECISION_FP32) {
        static const char *const what[] = {"native bf16 products", "bf16 products faster than fp32",
                                           "fp16 products faster than fp32"};
        char list[160] = "";
        for (int b = 0; b < 3; b++)
            if ((any ^ all) & (1u << b))
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", what[b]);
        printf("products: the ranks' CPUs differ (%s on some ranks only): every rank chooses its "
               "products and weights storage as the least capable one must\n", list);
    }
}

int main(int argc, char **argv) {
    init_mpi(&argc, &argv);
    stdout_guard_install();
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    cli_t cli = parse_command_line(argc, argv);
    if (cli.action != CLI_RUN) {
        int code = 0;
        if (cli.action == CLI_PLAN) code = plan_only(&cli, rank);
        else if (cli.action == CLI_CALIBRATE) code = calibrate_run(cli.namelist);
        else if (cli.action == CLI_GRID) code = grid_only(&cli, rank);
        else if (rank == 0 && cli.action == CLI_HELP) usage();
        else if (rank == 0 && cli.action == CLI_KEYS) config_keys_json(stdout);
        else if (rank == 0) buildinfo_print_version(stdout);
        MPI_CHECK(MPI_Finalize());
        return code;
    }
    /* From here on a signal is remembered (and acted on collectively), and no wait for a peer
     * goes unwatched, setup included. */
    stop_signals_install();
    watchdog_peers_of(MPI_COMM_WORLD, "all");
    watchdog_start(startup_timeout_s(), rank);
    fault_point("startup", rank);
    config_t cfg;
    watchdog_enter("reading the namelist", "all ranks");
    /* also refuses the keys of features not in this version, from the file or the overrides */
    config_load_overrides(cli.namelist, &cli.overrides, &cfg);
    model_spec_check(MODEL_SPEC_OF(&cfg), cfg.ep, &cfg.where); /* the model's shape rules */
    ckpt_resume_default(&cfg, rank); /* a requeued job continues */
    watchdog_leave();
    watchdog_set_timeout(cfg.timeout_s);
    fault_point("setup", rank);
    grid_t grid;
    watchdog_enter("building the process grid", "all ranks");
    grid_create(&grid, &cfg, MPI_COMM_WORLD);
    const model_spec_t spec = model_spec_from_config(&cfg);
    model_spec_check_grid(&spec, grid.tp, grid.pp, &cfg.where);
    watchdog_leave();
    name_communicators(&grid);
    topology_t topo;
    watchdog_enter("placement (hwloc)", "all ranks");
    topology_place(&topo, MPI_COMM_WORLD, cfg.choice.bind == CFG_BIND_CORES); /* sets the OpenMP thread count too */
    if (rank == 0) print_banner(&cfg, world);
    topology_print(&topo, MPI_COMM_WORLD);
    grid_print(&grid, MPI_COMM_WORLD);
    watchdog_leave();
    trainer_t tr;
    const ops_t *ops = open_backend(&cfg, &topo, &grid);
    cfg.device_memory = ops->memory_capacity() > 0; /* the planner's two memories (planner.h) */
    agree_products(&cfg, ops, rank);
    char cores[80];
    topology_cores_text(&topo, cores, sizeof cores);
    trainer_setup(&tr, &cfg, &grid, ops, cores);
    tr.io_hints = topology_io_hints(&topo, MPI_COMM_WORLD, cfg.striping_factor, cfg.striping_unit);
    int code = 0;
    if (cfg.choice.mode == CFG_MODE_TRAIN) {
        code = trainer_train(&tr);
    } else if (cfg.choice.mode == CFG_MODE_EVAL) {
        double v = trainer_validate(&tr);
        if (rank == 0) printf("eval: val_loss %.6f over %d batches\n", v, cfg.val_batches);
    } else {
        trainer_generate(&tr);
    }
    MPI_CHECK(MPI_Info_free(&tr.io_hints));
    trainer_destroy(&tr);
    if (devsim_on) /* every rank: what its data path sent through the staged transport */
        printf("devsim: rank %d: %ld transfers staged, %ld completed\n", rank, comm_staged_started(),
               comm_staged_completed());
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
