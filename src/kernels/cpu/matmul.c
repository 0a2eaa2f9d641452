/* matmul.c — linear layer, forward and backward, straight on the row-major buffers with
 * cblas_sgemm (no transposing copies: the transposes are BLAS flags). The bias goes in by
 * pre-filling the output and calling sgemm with beta = 1 (the BLAS makes a beta pass over the
 * output anyway); dbias is a column sum vectorised over OC.
 *
 * Threading: each product is split over the OpenMP threads along one output dimension and every
 * thread calls a single-threaded sgemm on its slice (cpu_sgemm). The BLAS's own thread pool is
 * not used: on two cores, OpenMP workers that spin-wait after a parallel region (libgomp's
 * default) and OpenBLAS's pthreads would fight over the cores and halve sgemm speed.
 * Uses: CBLAS, OpenMP. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include <omp.h>

/* Column-sum block width: one block is a unit of OpenMP work and its double accumulators live
 * on the stack (1 KiB). */
#define COLSUM_BLOCK 128

/* Slices are multiples of this many rows/columns (the register blocking of sgemm kernels). */
#define SGEMM_SLICE_ALIGN 64

/* Row-major C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, split across the OpenMP threads.
 * The split is along N (each thread reads all of A) when A is the smaller operand, else along M
 * (each thread reads all of B), so the operand every thread packs is the small one. */
static void cpu_sgemm(bool ta, bool tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                      int ldc) {
    const int n_threads = omp_get_max_threads();
    const bool split_n = M <= N;
    const int dim = split_n ? N : M;
    if (n_threads == 1 || dim < 2 * SGEMM_SLICE_ALIGN) {
        gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
        return;
    }
    int slice = (dim + n_threads - 1) / n_threads;
    slice = (slice + SGEMM_SLICE_ALIGN - 1) / SGEMM_SLICE_ALIGN * SGEMM_SLICE_ALIGN;
    const int n_slices = (dim + slice - 1) / slice;
    const int blas_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static)
    for (int s = 0; s < n_slices; s++) {
        const int i0 = s * slice, len = dim - i0 < slice ? dim - i0 : slice;
        if (split_n) { /* columns [i0, i0+len) of op(B) and C */
            const float *Bs = B + (!tb ? (size_t)i0 : (size_t)i0 * ldb);
            gemm_f32(ta, tb, M, len, K, alpha, A, lda, Bs, ldb, beta, Cm + i0,
                        ldc);
        } else { /* rows [i0, i0+len) of op(A) and C */
            const float *As = A + (!ta ? (size_t)i0 * lda : (size_t)i0);
            gemm_f32(ta, tb, len, N, K, alpha, As, lda, B, ldb, beta,
                        Cm + (size_t)i0 * ldc, ldc);
        }
    }
    gemm_serial_end(blas_threads);
}

/* matmul_forward: out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC]  (bias may be NULL) */
void cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC) {
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PAR_MIN)
        for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cpu_sgemm(false, true, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

/* dbias[OC] (+)= sum over rows of dout[N, OC]; double accumulators, column blocks in parallel. */
static void colsum_accumulate(float *dbias, const float *dout, int N, int OC, bool overwrite) {
    const int n_blocks = (OC + COLSUM_BLOCK - 1) / COLSUM_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PAR_MIN)
    for (int blk = 0; blk < n_blocks; blk++) {
        const int o0 = blk * COLSUM_BLOCK;
        const int width = OC - o0 < COLSUM_BLOCK ? OC - o0 : COLSUM_BLOCK;
        double acc[COLSUM_BLOCK] = {0};
        for (int i = 0; i < N; i++) {
            const float *row = dout + (size_t)i * OC + o0;
#pragma omp simd
            for (int o = 0; o < width; o++) acc[o] += row[o];
        }
        for (int o = 0; o < width; o++)
            dbias[o0 + o] = (float)(overwrite ? acc[o] : acc[o] + dbias[o0 + o]);
    }
}

/* matmul_backward:
 *   dinp[N, C] = dout[N, OC] @ w[OC, C]   (overwritten, += if accumulate_dinp; skipped if NULL)
 *   dw[OC, C] += dout^T @ inp[N, C]       (= if overwrite_dw)
 *   dbias[OC] += colsum(dout)             (= if overwrite_dw; skipped if NULL) */
void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC,
                         bool accumulate_dinp, bool overwrite_dw) {
    if (dinp)
        cpu_sgemm(false, false, N, C, OC, 1.0f, dout, OC, w, C,
                  accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    cpu_sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C,
              overwrite_dw ? 0.0f : 1.0f, dw, C);
    if (dbias) colsum_accumulate(dbias, dout, N, OC, overwrite_dw);
}
