/* gemm.h — the CPU backend's one interface to a GEMM library. Every matrix product of the CPU
 * kernels goes through these calls; one implementation is compiled in, chosen in Makefile.inc
 * (GEMM = onednn | cblas): gemm_onednn.c (oneDNN's dnnl_sgemm, and its matmul primitive for
 * bf16) or gemm_cblas.c (any CBLAS: OpenBLAS, MKL, BLIS).
 *
 * All products are row-major: C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, op = transpose
 * when the flag is set, leading dimensions in elements. gemm_f32 and gemm_bf16 run on the
 * CALLING thread only: the caller splits work over the OpenMP threads (matmul.c), so that the
 * result of every element never depends on the thread count.
 * Uses: the GEMM library. Used by: src/kernels/cpu/, and validation/bench/bench_gemm.c (one
 * library call, to compare with matmul.c's split). */
#ifndef LLMT_GEMM_H
#define LLMT_GEMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* fp32 inputs, fp32 accumulation, fp32 output. */
void gemm_f32(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* bf16 inputs (the upper 16 bits of fp32, precision.h bf16_bits), fp32 accumulation and output,
 * on the CPU's bf16 instructions. Only when gemm_native_bf16(). */
void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
               const uint16_t *B, int ldb, float beta, float *C, int ldc);

/* Whether gemm_bf16 runs on bf16 instructions (AVX512_BF16 or AMX-BF16) on this CPU. */
bool gemm_native_bf16(void);
/* Whether gemm_bf16 is expected to be faster than gemm_f32 here (a fixed rule per library and
 * ISA, from measurements; not a timing, so runs are reproducible). */
bool gemm_bf16_faster(void);

/* One line for the startup summary: the library, its version and the kernels it runs on this
 * CPU, e.g. "oneDNN 2.6.3, ISA avx512_core_bf16" or "OpenBLAS 0.3.21, core SkylakeX". */
const char *gemm_describe(void);

/* A warning for a known slow fallback (OpenBLAS without kernels for this CPU), or NULL. */
const char *gemm_slow_fallback(void);

/* Whether the library may start its own threads from inside an OpenMP region (OpenBLAS's
 * pthread build); callers that call gemm_* from a parallel region bracket it with
 * gemm_serial_begin/end on the main thread, outside the region. */
int gemm_serial_begin(void); /* returns the previous library thread count (0: untouched) */
void gemm_serial_end(int previous);
#endif
