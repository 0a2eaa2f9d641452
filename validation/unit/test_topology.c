/* test_topology.c — hwloc placement. Reference: the placement rule computed by hand (cores
 * [r*n/k, (r+1)*n/k), core r mod n when oversubscribed), the binding hwloc reports before and
 * after, the node-local ranks MPI_Comm_split_type gives independently, each OpenMP thread's
 * affinity as sched_getaffinity reports it, and what MPI-IO reports for a file opened with the
 * hints; exact.
 * Runs on 1 rank (make check) and under mpirun (validation/e2e/placement.sh, 4 ranks;
 * validation/e2e/thread_binding.sh, with OMP_PLACES / OMP_PROC_BIND and without
 * OMP_NUM_THREADS): every rank checks its own record, rank 0 checks the table has one row per
 * rank. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hwloc.h>
#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/topology.h"

static int world_rank, world_size;

/* The process's binding as hwloc reports it (the caller frees it). */
static hwloc_bitmap_t binding_now(const topology_t *t) {
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    assert_non_null(b);
    assert_int_equal(hwloc_get_cpubind(t->hw, b, HWLOC_CPUBIND_PROCESS), 0);
    return b;
}

/* The logical indices of the cores (PUs without cores) that `set` touches, as a list "0-3". */
static const char *cores_text(hwloc_topology_t hw, hwloc_const_bitmap_t set) {
    static char text[256];
    hwloc_obj_type_t type =
        hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    hwloc_bitmap_t cores = hwloc_bitmap_alloc();
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_obj_by_type(hw, type, o)) != NULL;)
        if (hwloc_bitmap_intersects(o->cpuset, set)) hwloc_bitmap_set(cores, o->logical_index);
    hwloc_bitmap_list_snprintf(text, sizeof text, cores);
    hwloc_bitmap_free(cores);
    return text;
}

/* The binding the launcher gave, worked out independently: with OpenMP binding active the
 * union of the runtime's places (libgomp cut them from the affinity at load and has pinned this
 * thread to one of them), else the binding as it was before placement. */
static hwloc_bitmap_t launcher_binding_expected(hwloc_const_bitmap_t before) {
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    assert_non_null(b);
    if (omp_get_proc_bind() == omp_proc_bind_false || omp_get_num_places() <= 0) {
        hwloc_bitmap_copy(b, before);
        return b;
    }
    for (int p = 0; p < omp_get_num_places(); p++) {
        int ids[1024], n = omp_get_place_num_procs(p);
        assert_true(n <= 1024);
        omp_get_place_proc_ids(p, ids);
        for (int i = 0; i < n; i++) hwloc_bitmap_set(b, (unsigned)ids[i]);
    }
    return b;
}

static void topology_split_cores_is_even_contiguous_and_mod_n_when_oversubscribed(void **state) {
    (void)state;
    int first, count;
    /* 2 ranks on 8 cores: 0-3, 4-7 */
    assert_int_equal(topology_split_cores(0, 2, 8, &first, &count), 0);
    assert_int_equal(first, 0), assert_int_equal(count, 4);
    assert_int_equal(topology_split_cores(1, 2, 8, &first, &count), 0);
    assert_int_equal(first, 4), assert_int_equal(count, 4);
    /* 3 ranks on 8 cores: [0,2), [2,5), [5,8) — every core used once */
    int want_first[3] = {0, 2, 5}, want_count[3] = {2, 3, 3};
    for (int r = 0; r < 3; r++) {
        assert_int_equal(topology_split_cores(r, 3, 8, &first, &count), 0);
        assert_int_equal(first, want_first[r]);
        assert_int_equal(count, want_count[r]);
    }
    /* 8 ranks on 2 cores (our tests): oversubscribed, core r mod 2 */
    for (int r = 0; r < 8; r++) {
        assert_int_equal(topology_split_cores(r, 8, 2, &first, &count), 1);
        assert_int_equal(first, r % 2);
        assert_int_equal(count, 1);
    }
    /* 1 rank takes the whole node */
    assert_int_equal(topology_split_cores(0, 1, 2, &first, &count), 0);
    assert_int_equal(first, 0), assert_int_equal(count, 2);
}

/* What the launcher was asked for, from the variables Open MPI 4's mpirun and srun set (seen on
 * Open MPI 4.1.4: `mpirun -np 1` sets OMPI_MCA_orte_bound_at_launch and no policy; `--bind-to
 * core` adds OMPI_MCA_hwloc_base_binding_policy=core; `--map-by core` only the mapping policy). */
static void topology_launcher_request_names_only_what_was_asked_for(void **state) {
    (void)state;
    static const char *vars[] = {"OMPI_MCA_hwloc_base_binding_policy", "OMPI_MCA_hwloc_base_cpu_set",
                                 "OMPI_MCA_rmaps_base_cpus_per_rank", "OMPI_MCA_rmaps_base_cpus_per_proc",
                                 "OMPI_MCA_rmaps_rank_file_path", "OMPI_MCA_orte_rankfile",
                                 "OMPI_MCA_rmaps_base_mapping_policy", "OMPI_MCA_orte_launch",
                                 "SLURM_STEP_ID", "SLURM_CPU_BIND"};
    enum { NV = sizeof vars / sizeof vars[0] };
    char *saved[NV];
    for (int i = 0; i < NV; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    char buf[TOPO_STR];
    assert_int_equal(topology_launcher_request(buf, sizeof buf), 0); /* a default binding */
    assert_string_equal(buf, "");
    setenv("OMPI_MCA_orte_launch", "1", 1);
    setenv("OMPI_MCA_rmaps_base_mapping_policy", "core", 1); /* mapping alone binds nothing */
    assert_int_equal(topology_launcher_request(buf, sizeof buf), 0);
    setenv("OMPI_MCA_rmaps_base_mapping_policy", "socket:PE=2", 1);
    assert_int_equal(topology_launcher_request(buf, sizeof buf), 1);
    assert_string_equal(buf, "mpirun --map-by socket:PE=2");
    unsetenv("OMPI_MCA_rmaps_base_mapping_policy");
    setenv("OMPI_MCA_hwloc_base_binding_policy", "core", 1);
    assert_int_equal(topology_launcher_request(buf, sizeof buf), 1);
    assert_string_equal(buf, "mpirun --bind-to core");
    unsetenv("OMPI_MCA_hwloc_base_binding_policy");
    setenv("OMPI_MCA_hwloc_base_cpu_set", "1", 1);
    assert_int_equal(topology_launcher_request(buf, sizeof buf), 1);
    assert_string_equal(buf, "mpirun --cpu-set 1");
    unsetenv("OMPI_MCA_hwloc_base_cpu_set");
    setenv("SLURM_STEP_ID", "0", 1); /* mpirun inside an allocation: Open MPI's rules */
    assert_int_equal(topology_launcher_request(buf, sizeof buf), 0);
    unsetenv("OMPI_MCA_orte_launch"); /* a step started by srun keeps srun's binding */
    setenv("SLURM_CPU_BIND", "quiet,cores", 1);
    assert_int_equal(topology_launcher_request(buf, sizeof buf), 1);
    assert_string_equal(buf, "srun --cpu-bind=quiet,cores");
    for (int i = 0; i < NV; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
}

static void topology_bind_none_leaves_binding_unchanged(void **state) {
    (void)state;
    topology_t t;
    hwloc_topology_t hw;
    assert_int_equal(hwloc_topology_init(&hw), 0);
    assert_int_equal(hwloc_topology_load(hw), 0);
    /* placement runs a parallel region, and with OMP_PLACES the runtime binds each thread it
     * starts to a place: start them first, so what is compared is what placement did */
    int threads = 0;
#pragma omp parallel
    if (omp_get_thread_num() == 0) threads = omp_get_num_threads();
    hwloc_bitmap_t before = hwloc_bitmap_alloc();
    assert_int_equal(hwloc_get_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    topology_place(&t, MPI_COMM_WORLD, false);
    assert_int_equal(t.me.n_threads, threads); /* the count is left to OMP_NUM_THREADS */
    hwloc_bitmap_t after = binding_now(&t);
    char b[64], a[64];
    hwloc_bitmap_list_snprintf(b, sizeof b, before);
    hwloc_bitmap_list_snprintf(a, sizeof a, after);
    printf("  rank %d: binding before %s, after %s; status \"%s\"\n", world_rank, b, a,
           t.me.binding);
    assert_true(hwloc_bitmap_isequal(before, after));
    assert_non_null(strstr(t.me.binding, "(bind_mode = none)"));
    assert_true(t.me.cores[0] != '\0');
    hwloc_bitmap_free(before);
    hwloc_bitmap_free(after);
    hwloc_topology_destroy(hw);
    topology_destroy(&t);
}

static void topology_place_cores_gives_nonempty_core_list_and_one_aggregator(void **state) {
    (void)state;
    topology_t t;
    hwloc_topology_t hw;
    assert_int_equal(hwloc_topology_init(&hw), 0);
    assert_int_equal(hwloc_topology_load(hw), 0);
    hwloc_bitmap_t before = hwloc_bitmap_alloc();
    assert_int_equal(hwloc_get_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    topology_place(&t, MPI_COMM_WORLD, true);
    hwloc_bitmap_t after = binding_now(&t);
    /* node-local rank, independently */
    MPI_Comm node;
    int local_rank, local_size;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    printf("  rank %d: host %s local %d/%d cores %s (%d) numa %s gpu %s %s aggregator %d: %s\n",
           world_rank, t.me.host, t.me.local_rank, t.me.local_size, t.me.cores, t.me.n_cores,
           t.me.numa, t.me.gpu, t.me.gpu_pci, t.me.io_aggregator, t.me.binding);
    assert_string_equal(t.me.host, host);
    assert_int_equal(t.me.world_rank, world_rank);
    assert_int_equal(t.me.local_rank, local_rank);
    assert_int_equal(t.me.local_size, local_size);
    assert_int_equal(t.me.io_aggregator, local_rank == 0);
    assert_true(t.me.cores[0] != '\0' && t.me.n_cores > 0);
    assert_true(t.me.numa[0] != '\0' && t.me.gpu[0] != '\0');
    assert_int_equal(t.me.oversubscribed, local_size > t.me.node_cores);
    int aggregators = t.me.io_aggregator, nodes = 0;
    MPI_Allreduce(&aggregators, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    assert_int_equal(t.n_nodes, nodes);
    if (strncmp(t.me.binding, "bound by llmtrain", 17) == 0) {
        /* the binding is exactly this rank's share of the node's cores */
        int first, count;
        topology_split_cores(local_rank, local_size, t.me.node_cores, &first, &count);
        hwloc_obj_type_t type =
            hwloc_get_nbobjs_by_type(t.hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
        hwloc_bitmap_t want = hwloc_bitmap_alloc();
        for (int i = first; i < first + count; i++)
            hwloc_bitmap_or(want, want, hwloc_get_obj_by_type(t.hw, type, i)->cpuset);
        /* every thread is within it (OpenMP threads each on one of its cores) */
        assert_true(hwloc_bitmap_isincluded(after, want));
        assert_string_equal(t.me.cores, cores_text(t.hw, want));
        assert_int_equal(t.me.n_cores, count);
        assert_int_equal(strstr(t.me.binding, "oversubscribed") != NULL, t.me.oversubscribed);
        hwloc_bitmap_free(want);
    } else {
        /* kept only when asked for: a launcher's default binding is replaced by the share */
        if (strncmp(t.me.binding, "kept launcher binding", 21) == 0) assert_int_equal(t.me.launcher_asked, 1);
        assert_true(strncmp(t.me.binding, "kept launcher binding", 21) == 0 ||
                    strncmp(t.me.binding, "not permitted: ", 15) == 0);
        if (strncmp(t.me.binding, "kept launcher binding", 21) == 0) {
            /* kept as the launcher made it, not as the OpenMP runtime narrowed it */
            hwloc_bitmap_t want = launcher_binding_expected(before);
            char w[64], a[64];
            hwloc_bitmap_list_snprintf(w, sizeof w, want);
            hwloc_bitmap_list_snprintf(a, sizeof a, after);
            printf("  rank %d: launcher binding %s, after placement %s\n", world_rank, w, a);
            assert_true(hwloc_bitmap_isincluded(after, want));
            assert_string_equal(t.me.cores, cores_text(t.hw, want));
            hwloc_bitmap_free(want);
        }
    }
    topology_print(&t, MPI_COMM_WORLD);
    /* undo the binding (every thread) so later tests start from the binding they found */
    if (strncmp(t.me.binding, "not permitted", 13) != 0)
        assert_int_equal(hwloc_set_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    hwloc_bitmap_free(before);
    hwloc_bitmap_free(after);
    hwloc_topology_destroy(hw);
    topology_destroy(&t);
}

/* Which of the binding's cores `core[0..n)` (each as its PUs within the binding) the calling
 * thread is on: the index of the one that is exactly its sched_getaffinity mask, or -1. */
static int this_thread_core(hwloc_bitmap_t *core, int n_cores) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int k = 0; k < n_cores; k++) {
        bool same = true;
        for (int cpu = 0; cpu < CPU_SETSIZE && same; cpu++)
            same = (CPU_ISSET(cpu, &set) != 0) == (hwloc_bitmap_isset(core[k], (unsigned)cpu) != 0);
        if (same) return k;
    }
    return -1;
}

/* core_of[thread] for the threads of a parallel region (`loop`: a static work-shared loop, as
 * the kernels run); returns the team size. */
static int thread_cores(hwloc_bitmap_t *core, int n_cores, int *core_of, int max, bool loop) {
    int team = 0;
    if (loop) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < max; i++) {
            if (i == 0) team = omp_get_num_threads();
            if (omp_get_thread_num() < max)
                core_of[omp_get_thread_num()] = this_thread_core(core, n_cores);
        }
    } else {
#pragma omp parallel
        {
            if (omp_get_thread_num() == 0) team = omp_get_num_threads();
            if (omp_get_thread_num() < max)
                core_of[omp_get_thread_num()] = this_thread_core(core, n_cores);
        }
    }
    return team;
}

/* After placement with bind_mode "cores", OpenMP runs one thread per core of the binding (the
 * value of OMP_NUM_THREADS when it is set), and thread i is on exactly core i mod n of the
 * binding as sched_getaffinity reports it, in a new region and in a work-shared loop like the
 * kernels'; the record's thread column says the same. */
static void topology_place_cores_pins_openmp_thread_i_to_core_i_mod_n_of_the_binding(void **state) {
    (void)state;
    hwloc_topology_t hw;
    assert_int_equal(hwloc_topology_init(&hw), 0);
    assert_int_equal(hwloc_topology_load(hw), 0);
    hwloc_bitmap_t before = hwloc_bitmap_alloc();
    assert_int_equal(hwloc_get_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    topology_t t;
    topology_place(&t, MPI_COMM_WORLD, true);
    if (strncmp(t.me.binding, "not permitted", 13) == 0) {
        printf("  rank %d: binding refused, no threads to check\n", world_rank);
    } else {
        /* the binding's cores, in logical order, from the record (checked in the test above) */
        hwloc_bitmap_t list = hwloc_bitmap_alloc();
        assert_int_equal(hwloc_bitmap_list_sscanf(list, t.me.cores), 0);
        hwloc_obj_type_t type =
            hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
        hwloc_bitmap_t within = hwloc_bitmap_alloc(), core[256];
        assert_int_equal(hwloc_get_cpubind(hw, within, HWLOC_CPUBIND_PROCESS), 0);
        unsigned logical[256];
        int n_cores = 0, l;
        hwloc_bitmap_foreach_begin(l, list) {
            assert_true(n_cores < 256);
            hwloc_obj_t obj = hwloc_get_obj_by_type(hw, type, (unsigned)l);
            logical[n_cores] = obj->logical_index;
            core[n_cores] = hwloc_bitmap_alloc();
            hwloc_bitmap_and(core[n_cores++], obj->cpuset, within);
        }
        hwloc_bitmap_foreach_end();
        hwloc_bitmap_free(list);
        hwloc_bitmap_free(within);
        assert_int_equal(n_cores, t.me.n_cores);
        const char *env = getenv("OMP_NUM_THREADS");
        const int want = env && env[0] ? atoi(env) : n_cores;
        printf("  rank %d: OMP_NUM_THREADS %s, cores %s: want %d threads; record \"%s\"\n",
               world_rank, env ? env : "(unset)", t.me.cores, want, t.me.threads);
        assert_int_equal(omp_get_max_threads(), want);
        int core_of[256];
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < 256; i++) core_of[i] = -3;
            int team = thread_cores(core, n_cores, core_of, 256, pass == 1);
            assert_int_equal(team, want);
            assert_int_equal(t.me.n_threads, team);
            for (int i = 0; i < team && i < 256; i++) {
                if (core_of[i] != i % n_cores)
                    printf("  rank %d %s: thread %d is on binding core #%d, want #%d (L#%u)\n",
                           world_rank, pass ? "loop" : "region", i, core_of[i], i % n_cores,
                           logical[i % n_cores]);
                assert_int_equal(core_of[i], i % n_cores);
            }
        }
        char head[32];
        snprintf(head, sizeof head, "%d on core", want);
        assert_int_equal(strncmp(t.me.threads, head, strlen(head)), 0);
        if (want <= 2) { /* short enough to spell out: "1 on core L", "2 on cores L0,L1" */
            char text[64];
            if (want == 1)
                snprintf(text, sizeof text, "1 on core %u", logical[0]);
            else
                snprintf(text, sizeof text, "2 on cores %u,%u", logical[0], logical[1 % n_cores]);
            assert_string_equal(t.me.threads, text);
        }
        for (int k = 0; k < n_cores; k++) hwloc_bitmap_free(core[k]);
        assert_int_equal(hwloc_set_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    }
    hwloc_bitmap_free(before);
    hwloc_topology_destroy(hw);
    topology_destroy(&t);
}

/* The value of `key` in `info` ("" when absent). */
static const char *info_value(MPI_Info info, const char *key) {
    static char value[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    value[0] = '\0';
    MPI_Info_get(info, key, MPI_MAX_INFO_VAL, value, &flag);
    if (!flag) value[0] = '\0';
    return value;
}

/* Open `path` collectively with `hints`, write each rank's block and read its neighbour's back
 * (collective calls), then check every key of `keys` that MPI_File_get_info reports has the
 * value in `want`. Returns the number of those keys the implementation reported. */
static int open_with_hints(const char *path, MPI_Info hints, const char *const *keys,
                           const char *const *want, int n_keys) {
    MPI_File fh;
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, hints, &fh);
    if (rc != MPI_SUCCESS) {
        MPI_Error_string(rc, err, &len);
        printf("  rank %d: MPI_File_open(%s) with the hints failed: %s\n", world_rank, path, err);
    }
    assert_int_equal(rc, MPI_SUCCESS);
    enum { N = 4096 };
    static int block[N], back[N];
    for (int i = 0; i < N; i++) block[i] = world_rank * N + i;
    const int next = (world_rank + 1) % world_size;
    assert_int_equal(MPI_File_write_at_all(fh, (MPI_Offset)world_rank * N * (MPI_Offset)sizeof(int),
                                           block, N, MPI_INT, MPI_STATUS_IGNORE), MPI_SUCCESS);
    assert_int_equal(MPI_File_sync(fh), MPI_SUCCESS); /* sync-barrier-sync: see the others' data */
    MPI_Barrier(MPI_COMM_WORLD);
    assert_int_equal(MPI_File_sync(fh), MPI_SUCCESS);
    assert_int_equal(MPI_File_read_at_all(fh, (MPI_Offset)next * N * (MPI_Offset)sizeof(int), back,
                                          N, MPI_INT, MPI_STATUS_IGNORE), MPI_SUCCESS);
    for (int i = 0; i < N; i++)
        if (back[i] != next * N + i) {
            printf("  rank %d: read back element %d of rank %d's block: %d, want %d\n", world_rank,
                   i, next, back[i], next * N + i);
            fail();
        }
    MPI_Info got;
    assert_int_equal(MPI_File_get_info(fh, &got), MPI_SUCCESS);
    int n_got = 0, reported = 0;
    MPI_Info_get_nkeys(got, &n_got);
    if (world_rank == 0) {
        printf("  %s: MPI_File_get_info reports %d keys:", path, n_got);
        for (int i = 0; i < n_got; i++) {
            char key[MPI_MAX_INFO_KEY + 1];
            MPI_Info_get_nthkey(got, i, key);
            printf(" %s=%s", key, info_value(got, key));
        }
        printf("\n");
    }
    for (int i = 0; i < n_keys; i++) {
        int vlen = 0, flag = 0;
        MPI_Info_get_valuelen(got, keys[i], &vlen, &flag);
        if (!flag) {
            if (world_rank == 0) printf("  %s: not reported by this MPI-IO\n", keys[i]);
            continue;
        }
        reported++;
        if (strcmp(info_value(got, keys[i]), want[i]) != 0)
            printf("  rank %d: MPI-IO reports %s = %s, asked for %s\n", world_rank, keys[i],
                   info_value(got, keys[i]), want[i]);
        assert_string_equal(info_value(got, keys[i]), want[i]);
    }
    MPI_Info_free(&got);
    assert_int_equal(MPI_File_close(&fh), MPI_SUCCESS);
    return reported;
}

/* Whether this MPI-IO reports back a key it cannot know: then what it reports is the hints as
 * given, not what it applied (Open MPI 4.1 does this, for OMPIO and its ROMIO component alike). */
static bool mpi_io_echoes_unknown_keys(const char *path) {
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "llmtrain_no_such_hint", "1");
    MPI_File fh;
    assert_int_equal(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, info,
                                   &fh), MPI_SUCCESS);
    MPI_Info got;
    assert_int_equal(MPI_File_get_info(fh, &got), MPI_SUCCESS);
    int vlen = 0, flag = 0;
    MPI_Info_get_valuelen(got, "llmtrain_no_such_hint", &vlen, &flag);
    MPI_Info_free(&got);
    MPI_Info_free(&info);
    assert_int_equal(MPI_File_close(&fh), MPI_SUCCESS);
    return flag != 0;
}

/* The hints a checkpoint is opened with do not make a collective open, write or read fail, and
 * every hint the MPI-IO layer reports for the open file has the value topology_io_hints meant:
 * cb_nodes = number of nodes (1: every test rank is on this host), cb_config_list "*:1" (one
 * aggregator per node), romio_cb_read/write "enable", and the Lustre striping when asked. Which
 * keys are reported is the implementation's choice (ROMIO-based MPIs report the values they use,
 * so a hint they changed would show as a difference; Open MPI 4.1 reports every key given); the
 * test prints them and the conclusion. */
static void topology_io_hints_open_write_read_collectively_and_mpi_io_reports_them(void **state) {
    (void)state;
    topology_t t;
    topology_place(&t, MPI_COMM_WORLD, false);
    assert_int_equal(t.n_nodes, 1);
    char tmp[256] = "/tmp/llmt_test_topology_XXXXXX";
    if (world_rank == 0) assert_non_null(mkdtemp(tmp));
    MPI_Bcast(tmp, sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
    char path[3][300];
    for (int i = 0; i < 3; i++) snprintf(path[i], sizeof path[i], "%s/hints%d.bin", tmp, i);

    const char *keys[] = {"cb_nodes", "cb_config_list", "romio_cb_write", "romio_cb_read",
                          "striping_factor", "striping_unit"};
    const char *want[] = {"1", "*:1", "enable", "enable", "8", "4194304"};
    MPI_Info info = topology_io_hints(&t, MPI_COMM_WORLD, 0, 0);
    int n_plain = open_with_hints(path[0], info, keys, want, 4);
    MPI_Info_free(&info);
    info = topology_io_hints(&t, MPI_COMM_WORLD, 8, 4L << 20);
    int n_striped = open_with_hints(path[1], info, keys, want, 6);
    MPI_Info_free(&info);
    bool echoes = mpi_io_echoes_unknown_keys(path[2]);
    if (world_rank == 0)
        printf("  MPI-IO reported %d of 4 hints (%d of 6 with striping); it %s\n", n_plain,
               n_striped, echoes ? "also reports an unknown key, so it reports the hints as "
                                   "given, not what it applied" : "drops unknown keys");
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 0) {
        for (int i = 0; i < 3; i++) unlink(path[i]);
        rmdir(tmp);
    }
    topology_destroy(&t);
}

static void topology_print_table_has_a_header_and_one_row_per_rank(void **state) {
    (void)state;
    topology_t t;
    topology_place(&t, MPI_COMM_WORLD, false);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    topology_fprint(&t, MPI_COMM_WORLD, out);
    fclose(out);
    if (world_rank == 0) {
        fputs(text, stdout);
        assert_non_null(strstr(text, "rank"));
        const char *cols[] = {"host", "local", "cores", "numa", "gpu", "aggr", "binding"};
        for (int i = 0; i < 7; i++) assert_non_null(strstr(text, cols[i]));
        /* rows are the lines that start with a rank number, in rank order */
        int rows = 0, r;
        for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
            if (sscanf(p, "%d", &r) == 1) {
                assert_int_equal(r, rows);
                rows++;
            }
        assert_int_equal(rows, world_size);
    } else {
        assert_int_equal(len, 0);
    }
    free(text);
    topology_destroy(&t);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(topology_split_cores_is_even_contiguous_and_mod_n_when_oversubscribed),
        cmocka_unit_test(topology_launcher_request_names_only_what_was_asked_for),
        cmocka_unit_test(topology_bind_none_leaves_binding_unchanged),
        cmocka_unit_test(topology_place_cores_gives_nonempty_core_list_and_one_aggregator),
        cmocka_unit_test(topology_place_cores_pins_openmp_thread_i_to_core_i_mod_n_of_the_binding),
        cmocka_unit_test(topology_io_hints_open_write_read_collectively_and_mpi_io_reports_them),
        cmocka_unit_test(topology_print_table_has_a_header_and_one_row_per_rank),
    };
    int failed = cmocka_run_group_tests_name("topology", tests, NULL, NULL);
    MPI_Finalize();
    return failed ? 1 : 0;
}
