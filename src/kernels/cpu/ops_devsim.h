/* ops_devsim.h — a test of device discipline without a device: the CPU backend whose memory
 * behaves like a GPU's to the host. ops->alloc hands out blocks of one reserved arena that is
 * PROT_NONE except while an op (or a transfer of the data path) runs, so host code in model/ or
 * train/ that reads or writes a tensor directly, instead of through to_host / to_device, faults
 * at once; the handler names the address and prints the call stack, exit 70. Every tensor
 * argument of every op must lie in the arena (a host pointer handed to an op is fatal, naming the
 * op and the argument). The numbers are the CPU backend's, bit for bit.
 * Selected by LLMT_DEVSIM=1 (a test hook, like LLMT_FAULT; LLMT_DEVSIM_MB sizes the arena,
 * default 4096 MiB of address space); main.c then also attaches parallel/comm_staged.c to every
 * group so the data path's floats travel as a device transport's would.
 * Owns: the arena and the SIGSEGV handler. Uses: kernels/ops.h, core/. Used by: main.c, tests. */
#ifndef LLMT_OPS_DEVSIM_H
#define LLMT_OPS_DEVSIM_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/ops.h"

/* The table (once per process; later calls return the same one). */
const ops_t *ops_devsim(const ops_t *cpu, size_t arena_bytes);
/* Whether p lies in the simulated device's memory. */
bool devsim_contains(const void *p);
/* Open / close the arena for code that stands for the device (a transport's copies); nests. */
void devsim_open(void);
void devsim_close(void);
/* (Re)install the fault handler (ops_devsim does; a test harness that installs its own SIGSEGV
 * handler, as cmocka does, calls it again). */
void devsim_catch_faults(void);
#endif
