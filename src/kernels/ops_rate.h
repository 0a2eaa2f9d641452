/* ops_rate.h — the measured rate of a backend's matrix products, the yardstick of the GEMM
 * utilisation in the step lines (and of MFU when the hardware peak measures less). Timed on
 * this rank alone: kernels/ knows no MPI, any agreement between ranks is the caller's.
 * Owns: nothing (buffers live for one measurement). Uses: kernels/ops.h, core/alloc.h (the
 * memory category), core/timer.h.
 * Used by: train/. */
#ifndef LLMT_OPS_RATE_H
#define LLMT_OPS_RATE_H
#include "kernels/ops.h"

/* FLOP/s of one matrix product out[N, OC] = in[N, C] w[OC, C]^T: one warm-up, best of 3.
 * Allocates its three operands as MEM_WORKSPACE for the measurement. */
double ops_gemm_rate(const ops_t *ops, int N, int C, int OC);
/* Achievable FLOP/s of this backend's matrix products: the better of a square 1024^3 product
 * and the model's own MLP product in[rows, C] w[F, C]^T, so MFU stays a fraction of what the
 * hardware and BLAS really deliver here. */
double ops_best_gemm_rate(const ops_t *ops, int rows, int C, int F);
#endif
