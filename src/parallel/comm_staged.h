/* comm_staged.h — a device transport (comm_transport.h) made of MPI and host copies, for tests of
 * the device path without a GPU: each operation copies the group's device buffers into host
 * staging buffers (with the device memory opened by the caller's hooks for just those copies),
 * starts the matching non-blocking MPI call on a duplicate of the group's communicator, and its
 * event completes when MPI has finished and the results are copied back, no earlier than after
 * `min_polls` polls (a device event is not ready at once). With LLMT_DEVSIM=1 main.c attaches it
 * to every group, the hooks opening the simulated device's arena (kernels/cpu/ops_devsim.h);
 * validation/unit/test_comm_seam.c attaches it without hooks.
 * Owns: the duplicate communicators and staging buffers. Uses: MPI, parallel/comm.c.
 * Used by: main.c (LLMT_DEVSIM), tests. */
#ifndef LLMT_COMM_STAGED_H
#define LLMT_COMM_STAGED_H
#include "parallel/comm_host.h"

typedef struct comm_staged_hooks {
    void (*open)(void);  /* device memory readable and writable from the host until close */
    void (*close)(void);
    int min_polls;       /* polls before an event can be seen complete (>= 1) */
} comm_staged_hooks_t;

/* Attach the staged transport to g (collective over g: it duplicates g's communicator). hooks
 * may be NULL (host memory throughout, events ready at the first poll after MPI's). */
void comm_staged_attach(comm_group_t *g, const comm_staged_hooks_t *hooks);
/* Operations started and events polled to completion, over every group so far. */
long comm_staged_started(void);
long comm_staged_completed(void);
#endif
