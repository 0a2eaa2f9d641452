/* topology.c — hwloc placement of the ranks of a node (see topology.h). */
#include "parallel/topology.h"
#include <errno.h>
#include <hwloc.h>
#include <omp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "parallel/comm_host.h"

/* hwloc calls return -1 (or NULL) and set errno: report file:line, the call, and errno. */
static const char *errno_text(int err) {
    static char buf[160];
    snprintf(buf, sizeof buf, "errno %d: %s", err, strerror(err));
    return buf;
}
#define HWLOC_CHECK(call)                                                                  \
    do {                                                                                   \
        if ((call) < 0) {                                                                  \
            int hwloc_errno_ = errno;                                                      \
            die_call(__FILE__, __LINE__, #call, errno_text(hwloc_errno_));                 \
        }                                                                                  \
    } while (0)
#define HWLOC_PTR_CHECK(ptr)                                                               \
    do {                                                                                   \
        if ((ptr) == NULL) {                                                               \
            int hwloc_errno_ = errno;                                                      \
            die_call(__FILE__, __LINE__, #ptr, errno_text(hwloc_errno_ ? hwloc_errno_ : ENOMEM)); \
        }                                                                                  \
    } while (0)

static hwloc_bitmap_t bitmap_new(void) {
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    HWLOC_PTR_CHECK(b);
    return b;
}

int topology_split_cores(int local_rank, int local_size, int n_cores, int *first, int *count) {
    ASSERT(local_size > 0 && n_cores > 0 && local_rank >= 0 && local_rank < local_size);
    if (local_size > n_cores) {
        *first = local_rank % n_cores;
        *count = 1;
        return 1;
    }
    /* 64-bit products: r*n overflows int on no real machine, but costs nothing to avoid */
    long lo = (long)local_rank * n_cores / local_size;
    long hi = (long)(local_rank + 1) * n_cores / local_size;
    *first = (int)lo;
    *count = (int)(hi - lo);
    return 0;
}

/* Cores are the unit of placement; a topology without CORE objects (some VMs) uses PUs. */
static hwloc_obj_type_t core_type(hwloc_topology_t hw) {
    return hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

/* Node-local rank and size, the node's index among nodes and the number of nodes. */
static void find_node(topology_t *t, MPI_Comm world) {
    topology_place_info_t *me = &t->me;
    MPI_CHECK(MPI_Comm_rank(world, &me->world_rank));
    MPI_CHECK(MPI_Comm_size(world, &t->world_size));
    MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, me->world_rank, MPI_INFO_NULL,
                                  &t->node_comm));
    MPI_CHECK(MPI_Comm_rank(t->node_comm, &me->local_rank));
    MPI_CHECK(MPI_Comm_size(t->node_comm, &me->local_size));
    me->io_aggregator = me->local_rank == 0;
    /* the node leaders, ordered by world rank, number the nodes */
    int node[2] = {0, 0};
    MPI_Comm leaders;
    comm_split(world, me->io_aggregator ? 0 : MPI_UNDEFINED, me->world_rank, &leaders, "placement (hwloc)");
    if (leaders != MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_rank(leaders, &node[0]));
        MPI_CHECK(MPI_Comm_size(leaders, &node[1]));
        MPI_CHECK(MPI_Comm_free(&leaders));
    }
    comm_bcast(node, 2, MPI_INT, 0, t->node_comm, "placement (hwloc)");
    me->node_index = node[0];
    t->n_nodes = node[1];
    char host[256] = {0}; /* HOST_NAME_MAX is 64: gethostname fails on a shorter buffer */
    SYS_CHECK(gethostname(host, sizeof host - 1));
    snprintf(me->host, sizeof me->host, "%s", host);
}

/* ---- the launcher's binding and this rank's ------------------------------------------------- */

/* The OS indices of the PUs of OpenMP place `p` into `set`. */
static void or_place(int p, hwloc_bitmap_t set) {
    const int n = omp_get_place_num_procs(p);
    if (n <= 0) return;
    int *ids = xmalloc(sizeof *ids * (size_t)n);
    omp_get_place_proc_ids(p, ids);
    for (int i = 0; i < n; i++) HWLOC_CHECK(hwloc_bitmap_set(set, (unsigned)ids[i]));
    xfree(ids);
}

/* The binding the process had at load (`at_load`) and has now (`now`); returns whether this
 * thread was bound again after load. Without OpenMP binding the two are the process's affinity
 * now. With OMP_PLACES / OMP_PROC_BIND set, libgomp built its places from the affinity at load
 * (before main) and pinned the initial thread to place 0, so the affinity now is one place while
 * the union of the places is what the process had at load. If this (the initial) thread is no
 * longer on exactly the place the runtime put it on, something bound it after load (an MPI
 * library binding its ranks in MPI_Init). */
static bool launcher_binding(hwloc_topology_t hw, hwloc_bitmap_t at_load, hwloc_bitmap_t now) {
    if (hwloc_get_cpubind(hw, now, HWLOC_CPUBIND_PROCESS) < 0)
        HWLOC_CHECK(hwloc_bitmap_copy(now, hwloc_topology_get_topology_cpuset(hw)));
    HWLOC_CHECK(hwloc_bitmap_copy(at_load, now));
    const int n_places = omp_get_num_places(), here = omp_get_place_num();
    if (omp_get_proc_bind() == omp_proc_bind_false || n_places <= 0 || here < 0) return false;
    hwloc_bitmap_t places = bitmap_new(), pinned = bitmap_new(), thread = bitmap_new();
    for (int p = 0; p < n_places; p++) or_place(p, places);
    or_place(here, pinned);
    const bool rebound = hwloc_get_cpubind(hw, thread, HWLOC_CPUBIND_THREAD) == 0 &&
                         !hwloc_bitmap_isequal(thread, pinned);
    if (!hwloc_bitmap_iszero(places)) HWLOC_CHECK(hwloc_bitmap_copy(at_load, places));
    hwloc_bitmap_free(thread);
    hwloc_bitmap_free(pinned);
    hwloc_bitmap_free(places);
    return rebound;
}

/* Bind the process to `set` unless every thread is on it already (so a launcher binding that
 * nothing narrowed costs no call the system might refuse). 0 or -1 with errno. */
static int bind_process_to(hwloc_topology_t hw, hwloc_const_cpuset_t set) {
    hwloc_bitmap_t proc = bitmap_new(), thread = bitmap_new();
    bool there = hwloc_get_cpubind(hw, proc, HWLOC_CPUBIND_PROCESS) == 0 &&
                 hwloc_get_cpubind(hw, thread, HWLOC_CPUBIND_THREAD) == 0 &&
                 hwloc_bitmap_isequal(proc, set) && hwloc_bitmap_isequal(thread, set);
    hwloc_bitmap_free(thread);
    hwloc_bitmap_free(proc);
    return there ? 0 : hwloc_set_cpubind(hw, set, HWLOC_CPUBIND_PROCESS);
}

int topology_launcher_request(char *buf, size_t n) {
    /* Open MPI 4's mpirun puts an option on the command line (or its MCA variable in mpirun's
     * environment) into the ranks' environment as OMPI_MCA_<name>; its defaults it does not */
    static const struct { const char *var, *option; } ompi[] = {
        {"OMPI_MCA_hwloc_base_binding_policy", "--bind-to"},
        {"OMPI_MCA_hwloc_base_cpu_set", "--cpu-set"},
        {"OMPI_MCA_rmaps_base_cpus_per_rank", "--cpus-per-proc"},
        {"OMPI_MCA_rmaps_base_cpus_per_proc", "--cpus-per-proc"},
        {"OMPI_MCA_rmaps_rank_file_path", "--rankfile"},
        {"OMPI_MCA_orte_rankfile", "--rankfile"},
    };
    if (n) buf[0] = '\0';
    for (size_t i = 0; i < sizeof ompi / sizeof ompi[0]; i++) {
        const char *v = getenv(ompi[i].var);
        if (v && v[0]) {
            snprintf(buf, n, "mpirun %s %s", ompi[i].option, v);
            return 1;
        }
    }
    const char *map = getenv("OMPI_MCA_rmaps_base_mapping_policy"); /* --map-by x:PE=n binds */
    if (map && (strstr(map, "PE=") || strstr(map, "pe="))) {
        snprintf(buf, n, "mpirun --map-by %s", map);
        return 1;
    }
    if (getenv("OMPI_MCA_orte_launch") == NULL && getenv("SLURM_STEP_ID") != NULL) {
        const char *b = getenv("SLURM_CPU_BIND");
        snprintf(buf, n, "srun --cpu-bind=%s", b && b[0] ? b : "(the site's default)");
        return 1;
    }
    return 0;
}

/* The cores (logical indices) whose objects intersect `set`, as a new bitmap. */
static hwloc_bitmap_t cores_of(hwloc_topology_t hw, hwloc_const_bitmap_t set) {
    const hwloc_obj_type_t type = core_type(hw);
    hwloc_bitmap_t cores = bitmap_new();
    hwloc_obj_t obj = NULL;
    while ((obj = hwloc_get_next_obj_by_type(hw, type, obj)) != NULL)
        if (hwloc_bitmap_intersects(obj->cpuset, set))
            HWLOC_CHECK(hwloc_bitmap_set(cores, obj->logical_index));
    return cores;
}

/* Bind to this rank's share of the node's cores, or keep a binding the user asked the launcher
 * for (undoing what the OpenMP runtime narrowed); a binding the launcher made on its own is
 * replaced by the share. Sets the binding status and `binding`, the CPUs the rank now runs on.
 * Never fatal: a refused binding is recorded and the run carries on. Returns whether the process
 * is bound as `binding` says (so its threads can be pinned within it). */
static bool bind_process(topology_t *t, bool bind_cores, hwloc_bitmap_t binding) {
    topology_place_info_t *me = &t->me;
    hwloc_topology_t hw = t->hw;
    hwloc_const_cpuset_t machine = hwloc_topology_get_topology_cpuset(hw);
    /* The launcher's binding is the one at load, unless the node's ranks were bound after load:
     * then a rank still on its first OpenMP place was bound there too, so the node decides
     * together (one rank keeping a late binding while its neighbour rebinds would share cores). */
    hwloc_bitmap_t now = bitmap_new();
    int rebound = launcher_binding(hw, binding, now);
    comm_allreduce(&rebound, 1, MPI_INT, MPI_LOR, t->node_comm, "placement (hwloc)");
    if (rebound) HWLOC_CHECK(hwloc_bitmap_copy(binding, now));
    hwloc_bitmap_free(now);
    const bool launcher_bound = !hwloc_bitmap_isincluded(machine, binding); /* narrower */
    if (launcher_bound) {
        hwloc_bitmap_t lc = cores_of(hw, binding);
        me->launcher_cores = hwloc_bitmap_weight(lc);
        hwloc_bitmap_free(lc);
        me->launcher_asked = topology_launcher_request(me->asked, sizeof me->asked);
    }
    /* keep the launcher's binding only where every rank of the node has one that was asked for:
     * one rank keeping its binding while a neighbour takes its share could share cores */
    int keep = launcher_bound && me->launcher_asked;
    comm_allreduce(&keep, 1, MPI_INT, MPI_LAND, t->node_comm, "placement (hwloc)");

    const hwloc_obj_type_t type = core_type(hw);
    const int n = hwloc_get_nbobjs_by_type(hw, type);
    ASSERT(n > 0);
    int first, count;
    me->oversubscribed = topology_split_cores(me->local_rank, me->local_size, n, &first, &count);
    me->share = count;
    bool bound = false;
    if (!bind_cores) {
        snprintf(me->binding, sizeof me->binding, "%s (bind_mode = none)",
                 launcher_bound ? "bound by launcher" : "not bound");
    } else if (keep) {
        bound = bind_process_to(hw, binding) == 0;
        if (bound)
            snprintf(me->binding, sizeof me->binding, "kept launcher binding");
        else
            snprintf(me->binding, sizeof me->binding, "not permitted: %s", strerror(errno));
    } else {
        hwloc_bitmap_t want = bitmap_new();
        for (int i = first; i < first + count; i++)
            HWLOC_CHECK(hwloc_bitmap_or(want, want, hwloc_get_obj_by_type(hw, type, i)->cpuset));
        me->launcher_same = launcher_bound && hwloc_bitmap_isequal(binding, want);
        bound = hwloc_set_cpubind(hw, want, HWLOC_CPUBIND_PROCESS) == 0;
        if (bound) {
            if (me->launcher_same)
                snprintf(me->binding, sizeof me->binding, "bound by llmtrain (as the launcher had)");
            else if (launcher_bound)
                snprintf(me->binding, sizeof me->binding,
                         "bound by llmtrain (the launcher's %s binding, %d core%s, replaced)",
                         me->launcher_asked ? "asked-for" : "default", me->launcher_cores,
                         me->launcher_cores == 1 ? "" : "s");
            else
                snprintf(me->binding, sizeof me->binding, "bound by llmtrain");
            HWLOC_CHECK(hwloc_bitmap_copy(binding, want));
        } else {
            snprintf(me->binding, sizeof me->binding, "not permitted: %s", strerror(errno));
        }
        hwloc_bitmap_free(want);
    }
    if (me->oversubscribed && strncmp(me->binding, "bound by llmtrain", 17) == 0) {
        size_t len = strlen(me->binding);
        snprintf(me->binding + len, sizeof me->binding - len,
                 " (oversubscribed: %d ranks on %d cores, core = local rank mod %d)",
                 me->local_size, n, n);
    }
    HWLOC_CHECK(hwloc_bitmap_and(binding, binding, machine));
    return bound;
}

/* The node's cores that none of its ranks is bound to (collective over the node; cores past
 * IDLE_WORDS * 64 are not counted). */
#define IDLE_WORDS 64
static int count_idle(const topology_t *t, hwloc_const_bitmap_t cores) {
    uint64_t mask[IDLE_WORDS] = {0};
    for (int c = hwloc_bitmap_first(cores); c >= 0; c = hwloc_bitmap_next(cores, c))
        if (c < IDLE_WORDS * 64) mask[c / 64] |= 1ull << (c % 64);
    comm_allreduce(mask, IDLE_WORDS, MPI_UINT64_T, MPI_BOR, t->node_comm, "placement (hwloc)");
    int used = 0, all = t->me.node_cores < IDLE_WORDS * 64 ? t->me.node_cores : IDLE_WORDS * 64;
    for (int w = 0; w < IDLE_WORDS; w++) used += __builtin_popcountll(mask[w]);
    return all > used ? all - used : 0;
}

/* Record the binding: its cores (logical indices), NUMA nodes (OS indices), and the node's idle
 * cores (collective over the node). */
static void describe_binding(topology_t *t, hwloc_const_bitmap_t binding) {
    topology_place_info_t *me = &t->me;
    hwloc_topology_t hw = t->hw;
    hwloc_bitmap_t cores = cores_of(hw, binding);
    me->n_cores = hwloc_bitmap_weight(cores);
    me->node_idle = count_idle(t, cores);
    HWLOC_CHECK(hwloc_bitmap_list_snprintf(me->cores, sizeof me->cores, cores));
    hwloc_bitmap_t nodes = bitmap_new();
    HWLOC_CHECK(hwloc_cpuset_to_nodeset(hw, binding, nodes));
    HWLOC_CHECK(hwloc_bitmap_list_snprintf(me->numa, sizeof me->numa, nodes));
    if (me->numa[0] == '\0') snprintf(me->numa, sizeof me->numa, "-");
    hwloc_bitmap_free(nodes);
    hwloc_bitmap_free(cores);
}

/* ---- OpenMP threads --------------------------------------------------------------------------- */

/* The cores of `binding` in logical order, each as its PUs within the binding; *sets is
 * allocated (free it with free_sets). */
static int core_sets(hwloc_topology_t hw, hwloc_const_cpuset_t binding, hwloc_bitmap_t **sets) {
    const hwloc_obj_type_t type = core_type(hw);
    const int n_all = hwloc_get_nbobjs_by_type(hw, type);
    *sets = xmalloc(sizeof **sets * (size_t)(n_all > 0 ? n_all : 1));
    int n = 0;
    hwloc_obj_t obj = NULL;
    while ((obj = hwloc_get_next_obj_by_type(hw, type, obj)) != NULL && n < n_all)
        if (hwloc_bitmap_intersects(obj->cpuset, binding)) {
            hwloc_bitmap_t s = bitmap_new();
            HWLOC_CHECK(hwloc_bitmap_and(s, obj->cpuset, binding));
            (*sets)[n++] = s;
        }
    return n;
}

static void free_sets(hwloc_bitmap_t *sets, int n) {
    for (int i = 0; i < n; i++) hwloc_bitmap_free(sets[i]);
    xfree(sets);
}

/* OpenMP runs one thread per core of the binding (`choose`, bind_cores) unless
 * OMP_NUM_THREADS is set: that is respected, and the table warns when it exceeds the cores. */
static void set_thread_count(topology_place_info_t *me, bool choose) {
    const char *env = getenv("OMP_NUM_THREADS");
    me->threads_explicit = env != NULL && env[0] != '\0';
    if (choose && !me->threads_explicit && me->n_cores > 0) omp_set_num_threads(me->n_cores);
}

/* Pin OpenMP thread i to core i mod n of the binding. The pinning is per thread, so it holds in
 * every later region that reuses the runtime's pool (see topology.h); it overrides the places
 * libgomp chose from OMP_PLACES, which it cut from the affinity at load (the whole machine when
 * the launcher binds nothing). Returns 0 or the errno of a refused pin. */
static int pin_threads(hwloc_topology_t hw, hwloc_const_cpuset_t binding) {
    hwloc_bitmap_t *core;
    const int n = core_sets(hw, binding, &core);
    int refused = 0;
    if (n > 0) {
#pragma omp parallel
        {
            if (hwloc_set_cpubind(hw, core[omp_get_thread_num() % n], HWLOC_CPUBIND_THREAD) < 0) {
#pragma omp atomic write
                refused = errno ? errno : EINVAL;
            }
        }
    }
    free_sets(core, n);
    return refused;
}

/* Append to buf[size] at *len; false (and *len = size) once the text no longer fits. */
__attribute__((format(printf, 4, 5)))
static bool appendf(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    if (*len >= size) return false;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= size - *len) {
        *len = size;
        return false;
    }
    *len += (size_t)w;
    return true;
}

/* "N on cores LIST": thread i's cores in thread order; a run of 3 or more threads on single,
 * consecutive cores as "a-b", a thread on several cores as "[list]"; "..." when it is cut. */
static void format_threads(char *buf, size_t size, hwloc_bitmap_t *cores, int n) {
    size_t len = 0;
    bool fits = appendf(buf, size, &len, "%d on core%s ", n,
                        n == 1 && hwloc_bitmap_weight(cores[0]) == 1 ? "" : "s");
    for (int i = 0; i < n && fits; i++) {
        const char *sep = i ? "," : "";
        if (hwloc_bitmap_weight(cores[i]) != 1) {
            char list[TOPO_THREADS];
            if (hwloc_bitmap_list_snprintf(list, sizeof list, cores[i]) < 0) list[0] = '\0';
            fits = appendf(buf, size, &len, "%s[%s]", sep, list);
            continue;
        }
        const int c = hwloc_bitmap_first(cores[i]);
        int j = i;
        while (j + 1 < n && hwloc_bitmap_weight(cores[j + 1]) == 1 &&
               hwloc_bitmap_first(cores[j + 1]) == c + (j + 1 - i))
            j++;
        if (j - i >= 2) {
            fits = appendf(buf, size, &len, "%s%d-%d", sep, c, c + (j - i));
            i = j;
        } else {
            fits = appendf(buf, size, &len, "%s%d", sep, c);
        }
    }
    if (!fits) snprintf(buf + size - 4, 4, "...");
}

/* Where the OpenMP threads are, as the OS says (sched_getaffinity of each thread inside one
 * parallel region), as logical core indices: fills n_threads and threads. */
static void describe_threads(topology_t *t) {
    topology_place_info_t *me = &t->me;
    hwloc_topology_t hw = t->hw;
    const hwloc_obj_type_t type = core_type(hw);
    const int max = omp_get_max_threads();
    int n_cpus = hwloc_bitmap_last(hwloc_topology_get_complete_cpuset(hw)) + 1;
    if (n_cpus < CPU_SETSIZE) n_cpus = CPU_SETSIZE;
    const size_t set_size = CPU_ALLOC_SIZE(n_cpus);
    hwloc_bitmap_t *cores = xmalloc(sizeof *cores * (size_t)max);
    for (int i = 0; i < max; i++) cores[i] = bitmap_new();
    int team = 1, failed = 0;
#pragma omp parallel
    {
        const int id = omp_get_thread_num();
#pragma omp single
        team = omp_get_num_threads();
        cpu_set_t *set = CPU_ALLOC(n_cpus);
        if (set == NULL || sched_getaffinity(0, set_size, set) < 0) {
#pragma omp atomic write
            failed = errno ? errno : ENOMEM;
        } else {
            for (int cpu = 0; cpu < n_cpus; cpu++) {
                if (!CPU_ISSET_S(cpu, set_size, set)) continue;
                hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(hw, (unsigned)cpu);
                hwloc_obj_t core = pu && type != HWLOC_OBJ_PU
                                       ? hwloc_get_ancestor_obj_by_type(hw, type, pu) : pu;
                if (core && id < max && hwloc_bitmap_set(cores[id], core->logical_index) < 0) {
#pragma omp atomic write
                    failed = ENOMEM;
                }
            }
        }
        if (set) CPU_FREE(set);
    }
    if (failed) die_call(__FILE__, __LINE__, "sched_getaffinity (each OpenMP thread)",
                         errno_text(failed));
    me->n_threads = team < max ? team : max;
    format_threads(me->threads, sizeof me->threads, cores, me->n_threads);
    for (int i = 0; i < max; i++) hwloc_bitmap_free(cores[i]);
    xfree(cores);
}

/* Why the rank has the cores it has, in words, for the startup summary. */
static void explain_cores(topology_place_info_t *me, bool bind_cores) {
    const int n = me->n_cores;
    const char *s = n == 1 ? "" : "s";
    char *w = me->why;
    const size_t len = sizeof me->why;
    if (!bind_cores)
        snprintf(w, len, "&run bind = 'none': the launcher's binding and the OMP_* variables decide (%d core%s)", n, s);
    else if (strncmp(me->binding, "not permitted", 13) == 0)
        snprintf(w, len, "the system refused llmtrain's binding: %d core%s, as the launcher left the rank", n, s);
    else if (strcmp(me->binding, "kept launcher binding") == 0)
        snprintf(w, len, "the binding asked of the launcher (%s), kept: %d core%s (the rank's even share "
                 "of the node would be %d)", me->asked, n, s, me->share);
    else if (me->oversubscribed)
        snprintf(w, len, "%d ranks on the node's %d cores (oversubscribed): one core each", me->local_size,
                 me->node_cores);
    else if (me->launcher_same)
        snprintf(w, len, "the rank's even share of the node's %d cores among %d rank%s, where the "
                 "launcher had bound it", me->node_cores, me->local_size, me->local_size == 1 ? "" : "s");
    else if (me->launcher_cores > 0 && !me->launcher_asked)
        snprintf(w, len, "the rank's even share of the node's %d cores among %d rank%s; the launcher's own "
                 "default binding (%d core%s, not asked for) replaced", me->node_cores, me->local_size,
                 me->local_size == 1 ? "" : "s", me->launcher_cores, me->launcher_cores == 1 ? "" : "s");
    else if (me->launcher_cores > 0)
        snprintf(w, len, "the rank's even share of the node's %d cores among %d rank%s; the binding asked "
                 "of the launcher (%s) replaced: other ranks of the node had none asked for",
                 me->node_cores, me->local_size, me->local_size == 1 ? "" : "s", me->asked);
    else
        snprintf(w, len, "the rank's even share of the node's %d cores among %d rank%s (the launcher bound "
                 "nothing)", me->node_cores, me->local_size, me->local_size == 1 ? "" : "s");
}

void topology_cores_text(const topology_t *t, char *buf, size_t n) {
    snprintf(buf, n, "%d core%s (%s)", t->me.n_cores, t->me.n_cores == 1 ? "" : "s", t->me.cores);
}

/* ---- nearest GPU ------------------------------------------------------------------------------ */

typedef struct gpu_candidate {
    hwloc_obj_t osdev, pci; /* pci may be NULL (a GPU hwloc did not attach to a PCI device) */
    int preference;         /* lower is better: the name the CUDA backend can use directly */
    bool near;              /* its locality intersects this rank's binding */
} gpu_candidate_t;

#define MAX_GPUS 64

static int name_preference(const char *name) {
    if (strncmp(name, "cuda", 4) == 0) return 0;
    if (strncmp(name, "nvml", 4) == 0 || strncmp(name, "rsmi", 4) == 0) return 1;
    if (strncmp(name, "opencl", 6) == 0 || strncmp(name, "ze", 2) == 0) return 2;
    if (strncmp(name, "card", 4) == 0) return 3;
    return 4; /* renderD128 and other names */
}

static hwloc_obj_t pci_ancestor(hwloc_obj_t obj) {
    while (obj && obj->type != HWLOC_OBJ_PCI_DEVICE) obj = obj->parent;
    return obj;
}

/* One candidate per physical GPU: a GPU appears as several OS devices (card0, renderD128,
 * nvml0, cuda0) under the same PCI device; keep the best-named one. */
static int list_gpus(hwloc_topology_t hw, hwloc_const_cpuset_t binding, gpu_candidate_t *c) {
    int n = 0;
    hwloc_obj_t os = NULL;
    while ((os = hwloc_get_next_osdev(hw, os)) != NULL) {
        if (os->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU &&
            os->attr->osdev.type != HWLOC_OBJ_OSDEV_COPROC)
            continue;
        if (os->name == NULL) continue;
        hwloc_obj_t pci = pci_ancestor(os);
        int pref = name_preference(os->name), i = 0;
        while (i < n && (pci == NULL || c[i].pci != pci)) i++;
        if (i == n) {
            if (n == MAX_GPUS) break;
            n++;
        } else if (c[i].preference <= pref) {
            continue;
        }
        hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(hw, os);
        c[i] = (gpu_candidate_t){os, pci, pref,
                                 local && hwloc_bitmap_intersects(local->cpuset, binding)};
    }
    return n;
}

/* The GPUs near this rank's binding (all of them when none is near: a GPU across the socket
 * beats none) are shared among the node's ranks that have the same near set, in local-rank
 * order and contiguously: m ranks on n GPUs give GPU p*n/m to the p-th of them. So two ranks
 * bound one per socket get one GPU each from their own socket, four ranks on four GPUs get one
 * each, and eight get two per GPU. Collective over the node. */
static void find_gpu(topology_t *t, hwloc_const_cpuset_t binding) {
    topology_place_info_t *me = &t->me;
    gpu_candidate_t c[MAX_GPUS];
    int n = list_gpus(t->hw, binding, c);
    uint64_t near = 0;
    for (int i = 0; i < n; i++)
        if (c[i].near) near |= 1ull << i;
    if (near == 0 && n > 0) near = n == 64 ? ~0ull : (1ull << n) - 1;
    /* every rank of the node sees the same GPU list, so the masks compare across ranks */
    uint64_t *all = xmalloc(sizeof *all * (size_t)me->local_size);
    comm_allgather(&near, 1, MPI_UINT64_T, all, t->node_comm, "placement (hwloc)");
    int p = 0, m = 0;
    for (int r = 0; r < me->local_size; r++)
        if (all[r] == near) {
            if (r < me->local_rank) p++;
            m++;
        }
    xfree(all);
    snprintf(me->gpu, sizeof me->gpu, "none");
    me->gpu_pci[0] = '\0';
    t->gpu_index = -1;
    if (n == 0) return;
    int n_near = __builtin_popcountll(near), pick = (int)((long)p * n_near / m), i = -1;
    for (int seen = -1; seen < pick;)
        if (near & (1ull << ++i)) seen++;
    const gpu_candidate_t *g = &c[i];
    snprintf(me->gpu, sizeof me->gpu, "%s", g->osdev->name);
    if (g->pci) {
        const struct hwloc_pcidev_attr_s *a = &g->pci->attr->pcidev;
        snprintf(me->gpu_pci, sizeof me->gpu_pci, "%04x:%02x:%02x.%01x", a->domain, a->bus,
                 a->dev, a->func);
    }
    if (strncmp(g->osdev->name, "cuda", 4) == 0) t->gpu_index = atoi(g->osdev->name + 4);
}

/* ---- the public API --------------------------------------------------------------------------- */

void topology_place(topology_t *t, MPI_Comm world, bool bind_cores) {
    memset(t, 0, sizeof *t);
    t->node_comm = MPI_COMM_NULL;
    hwloc_topology_t hw;
    HWLOC_CHECK(hwloc_topology_init(&hw));
    t->hw = hw;
    /* keep GPUs, NICs and their PCI devices: the nearest GPU needs them */
    HWLOC_CHECK(hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT));
    HWLOC_CHECK(hwloc_topology_load(hw));
    find_node(t, world);
    t->me.node_cores = hwloc_get_nbobjs_by_type(hw, core_type(hw));
    hwloc_bitmap_t binding = bitmap_new();
    const bool bound = bind_process(t, bind_cores, binding);
    describe_binding(t, binding);
    set_thread_count(&t->me, bind_cores);
    const int refused = bind_cores && bound ? pin_threads(hw, binding) : 0;
    if (refused) {
        size_t len = strlen(t->me.binding);
        snprintf(t->me.binding + len, sizeof t->me.binding - len, "; threads not pinned: %s",
                 strerror(refused));
    }
    describe_threads(t);
    explain_cores(&t->me, bind_cores);
    find_gpu(t, binding);
    hwloc_bitmap_free(binding);
}

/* The GPU column: the OS device name, with its PCI bus id when hwloc knows it. */
static void gpu_text(const topology_place_info_t *p, char *buf, size_t len) {
    if (p->gpu_pci[0])
        snprintf(buf, len, "%s (%s)", p->gpu, p->gpu_pci);
    else
        snprintf(buf, len, "%s", p->gpu);
}

/* Column width: the longest of `field` over all ranks, at least the header's. */
static int col_width(const topology_place_info_t *all, int n, size_t offset, const char *head) {
    size_t w = strlen(head);
    for (int r = 0; r < n; r++) {
        size_t len = strlen((const char *)&all[r] + offset);
        if (len > w) w = len;
    }
    return (int)w;
}

/* The first rank whose explicit OMP_NUM_THREADS is below (sign < 0) or above (sign > 0) its
 * cores, or -1; `others` gets " (and N more ranks)" for the rest of them. */
static int first_explicit(const topology_place_info_t *all, int n, int sign, char *others, size_t len) {
    int first = -1, more = 0;
    for (int r = 0; r < n; r++)
        if (all[r].threads_explicit && (all[r].n_threads - all[r].n_cores) * sign > 0) {
            if (first < 0) first = r;
            else more++;
        }
    others[0] = '\0';
    if (more) snprintf(others, len, " (and %d more rank%s)", more, more == 1 ? "" : "s");
    return first;
}

/* One note for the ranks whose OMP_NUM_THREADS leaves some of their cores without a thread. */
static void note_spare_cores(const topology_place_info_t *all, int n, FILE *out) {
    char others[48];
    const int first = first_explicit(all, n, -1, others, sizeof others);
    if (first < 0) return;
    const topology_place_info_t *p = &all[first];
    fprintf(out, "  note: OMP_NUM_THREADS = %d runs %d pinned thread%s on rank %d's %d cores%s: %d "
            "core%s without a thread (unset OMP_NUM_THREADS for one thread per core)\n", p->n_threads,
            p->n_threads, p->n_threads == 1 ? "" : "s", p->world_rank, p->n_cores, others,
            p->n_cores - p->n_threads, p->n_cores - p->n_threads == 1 ? "" : "s");
}

/* One warning for the ranks whose OMP_NUM_THREADS exceeds their cores, named by the first. */
static void warn_threads(const topology_place_info_t *all, int n, FILE *out) {
    char others[48];
    const int first = first_explicit(all, n, +1, others, sizeof others);
    if (first < 0) return;
    const topology_place_info_t *p = &all[first];
    fprintf(out, "  warning: OMP_NUM_THREADS asks for %d threads, more than the %d core%s bound to "
            "rank %d%s: threads share cores (unset OMP_NUM_THREADS for one thread per core)\n",
            p->n_threads, p->n_cores, p->n_cores == 1 ? "" : "s", p->world_rank, others);
}

static void print_table(const topology_place_info_t *all, int n, int n_nodes, FILE *out) {
    char gpu[2 * TOPO_STR + 4];
    int wh = col_width(all, n, offsetof(topology_place_info_t, host), "host");
    int wc = col_width(all, n, offsetof(topology_place_info_t, cores), "cores");
    int wn = col_width(all, n, offsetof(topology_place_info_t, numa), "numa");
    int wt = col_width(all, n, offsetof(topology_place_info_t, threads), "threads");
    int wg = 3;
    for (int r = 0; r < n; r++) {
        gpu_text(&all[r], gpu, sizeof gpu);
        if ((int)strlen(gpu) > wg) wg = (int)strlen(gpu);
    }
    fprintf(out, "placement: %d rank%s on %d node%s\n", n, n == 1 ? "" : "s", n_nodes,
            n_nodes == 1 ? "" : "s");
    fprintf(out, "  %5s  %-*s  %5s  %-*s  %-*s  %-*s  %4s  %-*s  %s\n", "rank", wh, "host", "local",
            wc, "cores", wn, "numa", wg, "gpu", "aggr", wt, "threads", "binding");
    for (int r = 0; r < n; r++) {
        const topology_place_info_t *p = &all[r];
        gpu_text(p, gpu, sizeof gpu);
        fprintf(out, "  %5d  %-*s  %5d  %-*s  %-*s  %-*s  %4s  %-*s  %s\n", p->world_rank, wh,
                p->host, p->local_rank, wc, p->cores, wn, p->numa, wg, gpu,
                p->io_aggregator ? "yes" : "-", wt, p->threads, p->binding);
    }
    /* one note per oversubscribed node, named by its aggregator's record */
    for (int r = 0; r < n; r++)
        if (all[r].io_aggregator && all[r].oversubscribed)
            fprintf(out, "  note: %s runs %d ranks on %d cores (oversubscribed): ranks share cores "
                    "and steps run slower than on a full allocation\n", all[r].host,
                    all[r].local_size, all[r].node_cores);
    warn_threads(all, n, out);
    note_spare_cores(all, n, out);
    /* how many cores each rank uses and why: one line per distinct reason */
    for (int r = 0; r < n; r++) {
        bool seen = false;
        for (int q = 0; q < r && !seen; q++) seen = strcmp(all[q].why, all[r].why) == 0;
        if (seen) continue;
        int more = 0;
        for (int q = r + 1; q < n; q++) more += strcmp(all[q].why, all[r].why) == 0;
        char others[48] = "";
        if (more) snprintf(others, sizeof others, " and %d more", more);
        fprintf(out, "  cores: %d per rank (rank %d%s): %s\n", all[r].n_cores, r, others, all[r].why);
    }
    /* a kept binding that leaves cores of its node idle: the flag that fixes it */
    for (int r = 0; r < n; r++) {
        if (!all[r].io_aggregator || all[r].node_idle <= 0) continue;
        int kept = -1;
        for (int q = 0; q < n && kept < 0; q++)
            if (all[q].node_index == all[r].node_index && !strcmp(all[q].binding, "kept launcher binding"))
                kept = q;
        if (kept < 0) continue;
        const bool srun = strncmp(all[kept].asked, "srun", 4) == 0;
        fprintf(out, "  warning: %s: %d of its %d cores idle: the binding asked of the launcher (%s) is "
                "kept; launch with %s and llmtrain binds each rank to its even share of the node, one "
                "OpenMP thread per core\n", all[r].host, all[r].node_idle, all[r].node_cores,
                all[kept].asked, srun ? "srun --cpu-bind=none" : "mpirun --bind-to none");
    }
}

void topology_fprint(const topology_t *t, MPI_Comm world, FILE *out) {
    const int n = t->world_size;
    const bool root = t->me.world_rank == 0;
    topology_place_info_t *all = root ? xmalloc(sizeof *all * (size_t)n) : NULL;
    comm_gather(&t->me, (int)sizeof t->me, MPI_BYTE, all, 0, world, "printing the placement");
    if (root) {
        print_table(all, n, t->n_nodes, out);
        fflush(out);
    }
    xfree(all);
}

void topology_print(const topology_t *t, MPI_Comm world) { topology_fprint(t, world, stdout); }

MPI_Info topology_io_hints(const topology_t *t, MPI_Comm world, int striping_factor,
                           long striping_unit) {
    int size = 0;
    MPI_CHECK(MPI_Comm_size(world, &size));
    ASSERT(size == t->world_size);
    MPI_Info info;
    char value[32];
    MPI_CHECK(MPI_Info_create(&info));
    snprintf(value, sizeof value, "%d", t->n_nodes);
    MPI_CHECK(MPI_Info_set(info, "cb_nodes", value));
    MPI_CHECK(MPI_Info_set(info, "cb_config_list", "*:1")); /* one aggregator per node */
    MPI_CHECK(MPI_Info_set(info, "romio_cb_write", "enable"));
    MPI_CHECK(MPI_Info_set(info, "romio_cb_read", "enable"));
    if (striping_factor > 0) {
        snprintf(value, sizeof value, "%d", striping_factor);
        MPI_CHECK(MPI_Info_set(info, "striping_factor", value));
    }
    if (striping_unit > 0) {
        snprintf(value, sizeof value, "%ld", striping_unit);
        MPI_CHECK(MPI_Info_set(info, "striping_unit", value));
    }
    return info;
}

void topology_destroy(topology_t *t) {
    if (t->hw) hwloc_topology_destroy(t->hw);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && t->node_comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&t->node_comm));
    memset(t, 0, sizeof *t);
    t->node_comm = MPI_COMM_NULL;
}
