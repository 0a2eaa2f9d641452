/* comm_host.h — the MPI side of communication: making a group (comm.h) from an MPI communicator,
 * and the setup and bookkeeping collectives on host data (namelist broadcast, agreement on
 * errors, node counts, communicator splits).
 * Every blocking MPI call of llmtrain goes through comm.c, so the watchdog sees every wait:
 * `phase` names it in the watchdog's message ("reading the namelist", "stop-signal check",
 * "resume", ...). Charged to COMM_OTHER.
 * Owns: nothing beyond comm.c's. Uses: MPI. Used by: main, parallel/, train/, io/. */
#ifndef LLMT_COMM_HOST_H
#define LLMT_COMM_HOST_H
#include <mpi.h>
#include <stddef.h>
#include "parallel/comm.h"

/* ---- groups ----------------------------------------------------------------------------------
 * A group over comm (collective-free: local MPI calls only), its data on MPI. label names its
 * members in the watchdog's messages ("dp group" -> "dp group ranks 1,3,5,7"). The group keeps
 * the handle, not a duplicate: comm must outlive it. comm_group_destroy detaches a transport
 * (comm_transport.h) first and sets *g to NULL; NULL is fine. */
comm_group_t *comm_group_create(MPI_Comm comm, const char *label);
void comm_group_destroy(comm_group_t **g);
MPI_Comm comm_group_mpi(const comm_group_t *g);
/* "dp group ranks 1,3,5,7": the members by world rank. */
const char *comm_group_peers(const comm_group_t *g);

/* ---- setup and bookkeeping collectives ------------------------------------------------------ */
/* The calling thread is a helper with a communicator of its own (train/ckpt_async's background
 * checkpoint writer): its collectives below are made but neither watched (the watchdog has one
 * writer, the main thread, which watches its own wait for the helper instead), put on the
 * timeline nor counted in comm_stats. Needs MPI_THREAD_MULTIPLE. */
void comm_thread_unwatched(void);
void comm_barrier(MPI_Comm comm, const char *phase);
void comm_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                const char *phase);
void comm_allreduce(void *x, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char *phase); /* in place */
/* comm_allreduce whose wait sleeps (backing off to 1 ms) instead of polling: for the waits of
 * I/O phases where ranks arrive far apart (others still writing their share), so that on
 * oversubscribed cores the waiting ranks leave the CPU to the working ones. */
void comm_allreduce_idle(void *x, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                         const char *phase);
void comm_gather(const void *mine, int count, MPI_Datatype type, void *all, int root,
                 MPI_Comm comm, const char *phase);
void comm_allgather(const void *mine, int count, MPI_Datatype type, void *all, MPI_Comm comm,
                    const char *phase);
void comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out, const char *phase);
/* A round trip of `bytes` bytes between this rank and `peer` of comm (parallel/linkprobe.c's
 * probe of a link): the initiator sends, then receives the same size back, and gets the wall time
 * in seconds; the other side receives, then sends back, and gets 0. Timed at the initiator, the
 * time covers both directions' transfers (a send alone completes when the bytes are in the
 * kernel's socket buffer, long before a slow link delivers them). */
double comm_pingpong_bytes(void *buf, int bytes, int peer, int initiator, MPI_Comm comm,
                           const char *phase);

/* How many ranks of comm share this rank's node (collective). */
int comm_node_size(MPI_Comm comm);
/* This rank's index among the ranks of comm on its node (collective; 0 = the node's first). */
int comm_node_rank(MPI_Comm comm);
/* The rank in comm of the first rank of this rank's node (collective). */
int comm_node_first(MPI_Comm comm);

/* ---- errors that one rank may see alone ------------------------------------------------------
 * A file only some nodes can see, a directory one rank cannot write, a tokenizer one rank cannot
 * read: every rank states its own outcome and all learn the same verdict, so no rank is left
 * waiting in the next collective while another exits.
 * comm_agree: collective over comm (watched as `phase`). `mine` is this rank's error message, or NULL when it is
 * fine. Returns the number of ranks that failed (0 on every rank when none did) and, when some
 * did, writes the lowest failing rank's message into out on every rank: as "rank R (host H):
 * <message>" when only some ranks failed (plus " [and other ranks]" when more than one did),
 * as "<message> (on all N ranks)" when every rank did. */
#define COMM_MSG_MAX 2048
int comm_agree(MPI_Comm comm, const char *phase, const char *mine, char *out, size_t outlen);
/* The same, fatal: when any rank failed, rank 0 prints "llmtrain: error: rank R (host H): ..."
 * once and every rank exits with exit_code (after MPI_Finalize). Returns when no rank failed. */
void comm_agree_or_exit(MPI_Comm comm, int exit_code, const char *phase, const char *mine);
#endif
