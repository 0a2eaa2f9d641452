/* calibrate.h — `llmtrain --calibrate [OUT.nml]`: measures this machine and writes its &machine
 * file (train/machine.h) for the performance model: the CPU backend's fp32 product rates on
 * square products from 32 to 1024 (the asymptote and the half size of machine.h's efficiency
 * model, fitted to them), the memory bandwidth of one rank's copy, and the MPI latency and
 * bandwidth between ranks 0 and 1 (ping-pong; needs 2 ranks); a device is one rank with its
 * OpenMP threads, devices_per_node what all ranks computing at once deliver in units of one
 * rank's rate (rounded; at most the cores over the threads: other load on a shared machine
 * counts), max_nodes 1 (more ranks than that share cores: oversubscribed). Collective over MPI_COMM_WORLD; rank 0 writes the file.
 * Owns: nothing. Uses: train/machine, kernels/ (ops_cpu), core/. Used by: main. */
#ifndef LLMT_CALIBRATE_H
#define LLMT_CALIBRATE_H

/* Measure and write `out_path`; returns an exit code (0). */
int calibrate_run(const char *out_path);
#endif
