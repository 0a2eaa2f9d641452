/* ckpt_memory.h — the memory a checkpoint save or load costs, measured: this process's peak
 * resident size (the kernel's high-water mark VmHWM, which ckpt_peak_reset sets back to the
 * current resident size), the node's free memory, and the largest value over the ranks.
 * Owns: nothing. Uses: parallel/comm_host. Used by: train/checkpointing, train/trainer_setup. */
#ifndef LLMT_CKPT_MEMORY_H
#define LLMT_CKPT_MEMORY_H
/* This process's peak resident size since the last ckpt_peak_reset (VmHWM), in MiB; 0 when
 * unknown. */
double ckpt_hwm_mib(void);
/* From here the peak counts anew (/proc/self/clear_refs "5": VmHWM = the current VmRSS; Linux). */
void ckpt_peak_reset(void);
/* Collective over MPI_COMM_WORLD: the largest x of any rank. */
double ckpt_max_over_ranks(double x);
/* MemAvailable of /proc/meminfo in MiB (-1 when unknown). */
double ckpt_available_mib(void);
#endif
