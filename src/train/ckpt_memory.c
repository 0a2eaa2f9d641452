/* ckpt_memory.c — the memory a checkpoint costs, measured (see ckpt_memory.h). */
#include "train/ckpt_memory.h"
#include <stdio.h>
#include "parallel/comm_host.h"

/* This process's peak resident size since the last ckpt_peak_reset (VmHWM), in MiB; 0 when
 * unknown. */
double ckpt_hwm_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib / 1024.0;
}

void ckpt_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5": VmHWM = the current VmRSS (Linux) */
    if (!f) return;
    fputs("5", f);
    fclose(f);
}

double ckpt_max_over_ranks(double x) {
    comm_allreduce(&x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "checkpoint memory");
    return x;
}

/* MemAvailable of /proc/meminfo in MiB (-1 when unknown). */
double ckpt_available_mib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = -1024;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib / 1024.0;
}

