/* topology.h — where each rank runs: hwloc placement of the ranks of one node on its cores, one
 * core per OpenMP thread within that placement, the NUMA node(s) and nearest GPU of that
 * placement, the node's I/O aggregator, and the MPI-IO hints that make collective I/O use one
 * aggregator per node.
 * Owns: this rank's binding (process and OpenMP threads) and its placement record. Uses: hwloc,
 * OpenMP, MPI, core/. Used by: main (placement table at startup), io/ (MPI-IO hints for HDF5
 * checkpoints), the CUDA backend (which device to open).
 *
 * Placement rule: the node's cores (hwloc CORE objects; PUs when the topology has no cores) are
 * split evenly and contiguously among the node-local ranks: local rank r of k gets the cores
 * [r*n/k, (r+1)*n/k). With more ranks than cores (oversubscription) rank r gets core r mod n.
 * A binding the user asked the launcher for (narrower than the cores the process may use) is
 * kept, with a warning when the node's ranks then leave cores idle that names the flag that fixes
 * it; a binding the launcher made on its own (Open MPI binds a job of <= 2 ranks to one core each
 * by default, larger ones to a socket) is replaced by the rank's share, as when nothing bound it.
 * Open MPI says what was asked for in the ranks' environment (topology_launcher_request); a
 * binding the system refuses (containers) is recorded, not fatal.
 *
 * The launcher's binding is the affinity the process had when it started. With OMP_PLACES or
 * OMP_PROC_BIND set, the OpenMP runtime has already pinned the initial thread to its first place
 * before main (libgomp does so at load), so that binding is read from the runtime's places (their
 * union is the affinity at load), not from the process's affinity, which is one place by then.
 * When a node's ranks were bound after load (an MPI library binding its ranks in MPI_Init: the
 * initial thread is no longer on the runtime's place), their binding as it is now counts.
 *
 * Threads: once the process is bound, OpenMP runs one thread per core of the binding (unless
 * OMP_NUM_THREADS is set: it is respected, and the table warns when it exceeds the cores), and
 * OpenMP thread i is pinned to core i mod n of the binding, whatever OMP_PLACES / OMP_PROC_BIND
 * say. Later parallel regions reuse those threads (libgomp keeps its pool while the team size
 * stays the same; a region with a smaller num_threads clause would end the surplus threads and
 * start unpinned ones). bind_cores false (&parallel bind = 'none') leaves the binding and the
 * threads to the launcher and the OMP_* variables. */
#ifndef LLMT_TOPOLOGY_H
#define LLMT_TOPOLOGY_H
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>

struct hwloc_topology; /* hwloc_topology_t without making every includer see hwloc.h */

#define TOPO_STR 64
#define TOPO_STATUS 128
#define TOPO_THREADS 192
#define TOPO_WHY 320

/* One rank's placement, fixed-size so rank 0 can gather every rank's record as bytes. */
typedef struct topology_place_info {
    int world_rank;
    int local_rank, local_size;  /* within the node (MPI_COMM_TYPE_SHARED) */
    int node_index;              /* 0 .. n_nodes-1, in the order of the nodes' lowest rank */
    int io_aggregator;           /* 1 on node-local rank 0: the node's MPI-IO aggregator */
    int n_cores;                 /* cores in the binding as it is now (what OpenMP can use) */
    int n_threads;               /* OpenMP threads of a parallel region, after pinning */
    int threads_explicit;        /* 1 when OMP_NUM_THREADS chose n_threads, 0 when llmtrain did */
    int oversubscribed;          /* node-local ranks outnumber the node's cores */
    int node_cores;              /* cores of the node (PUs when hwloc sees no cores) */
    char host[TOPO_STR];
    char cores[TOPO_STR];        /* logical core indices (lstopo's L#) of the binding: "0-3" */
    char numa[TOPO_STR];         /* OS indices of the NUMA nodes the binding touches: "0" */
    char gpu[TOPO_STR];          /* nearest GPU: "cuda0", "nvml1", "card0", ... or "none" */
    char gpu_pci[TOPO_STR];      /* its PCI bus id "0000:65:00.0" (cudaDeviceGetByPCIBusId), or "" */
    char threads[TOPO_THREADS];  /* the OpenMP threads where the OS has them (sched_getaffinity of
                                    each, in thread order; logical core indices, a run of 3 or
                                    more as a range, a thread on several cores in brackets):
                                    "1 on core 0", "2 on cores 2,3", "8 on cores 0-7",
                                    "2 on cores [0-1],[0-1]" */
    int share;                   /* cores of the rank's even share of the node (1 oversubscribed) */
    int launcher_cores;          /* cores of the launcher's binding; 0 when it bound nothing */
    int launcher_asked;          /* 1 when the user asked the launcher for that binding */
    int launcher_same;           /* 1 when the launcher's binding was the rank's share already */
    int node_idle;               /* cores of the node that no rank of it is bound to */
    char asked[TOPO_STR];        /* what was asked for: "--bind-to core", "--cpu-bind=cores" */
    char why[TOPO_WHY];            /* why the rank has the cores it has, for the startup summary */
    char binding[TOPO_STATUS];   /* "bound by llmtrain", "kept launcher binding", "not bound
                                    (bind_mode = none)", "bound by launcher (bind_mode = none)",
                                    "not permitted: <strerror>" */
} topology_place_info_t;

typedef struct topology {
    struct hwloc_topology *hw;   /* the loaded hwloc topology (with I/O devices) */
    MPI_Comm node_comm;          /* the ranks sharing this node */
    int world_size;
    int n_nodes;
    int gpu_index;               /* the CUDA device index when the GPU is a "cudaN" device, else -1 */
    topology_place_info_t me;
} topology_t;

/* Load the topology, find the node-local rank, bind this process (bind_cores, &parallel bind =
 * 'cores') or leave it alone ('none'), set the OpenMP thread count and pin each thread to its
 * core (bind_cores), and record the placement (this runs OpenMP parallel regions). Collective
 * over world. Call it from the thread that runs the parallel regions (main's), before any of
 * them. */
void topology_place(topology_t *t, MPI_Comm world, bool bind_cores);
/* Rank 0 prints one line per rank: rank, host, local rank, cores, NUMA, GPU, aggregator,
 * threads, binding status; a note per oversubscribed node and a warning when OMP_NUM_THREADS
 * exceeds a rank's cores. Collective over world. topology_fprint writes the table to `out` (rank 0). */
void topology_print(const topology_t *t, MPI_Comm world);
void topology_fprint(const topology_t *t, MPI_Comm world, FILE *out);
/* MPI-IO hints for collective buffering with one aggregator per node (cb_nodes = number of
 * nodes, cb_config_list "*:1", romio_cb_read/write "enable"); Lustre striping_factor /
 * striping_unit when > 0. Local (no communication). The caller frees the MPI_Info. */
MPI_Info topology_io_hints(const topology_t *t, MPI_Comm world, int striping_factor,
                           long striping_unit);
void topology_destroy(topology_t *t);

/* What the user asked the launcher for, from the environment it gave this process: Open MPI's
 * --bind-to, --cpu-set, --map-by ...:PE=n, --cpus-per-proc, --rankfile (as OMPI_MCA_* variables,
 * which mpirun sets only when asked), or any Slurm step (srun binds as its options and the
 * site's defaults say). Returns 1 and writes the option to buf[n] ("--bind-to core") when a
 * binding was asked for; 0 (buf "") when the launcher's binding, if any, is its own default. */
int topology_launcher_request(char *buf, size_t n);
/* "N core(s) C" for the summary and the MFU line: this rank's cores as the table shows them. */
void topology_cores_text(const topology_t *t, char *buf, size_t n);

/* The placement rule on its own (pure; for tests): the cores [*first, *first + *count) of
 * local rank `local_rank` of `local_size` on a node of `n_cores` cores. Returns 1 when the node
 * is oversubscribed (then *count = 1 and *first = local_rank mod n_cores), else 0. */
int topology_split_cores(int local_rank, int local_size, int n_cores, int *first, int *count);
#endif
