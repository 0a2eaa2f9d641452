/* matmul.c — linear layer, forward and backward, straight on the row-major buffers with
 * cblas_sgemm (no transposing copies: the transposes are BLAS flags). The bias goes in by
 * pre-filling the output and calling sgemm with beta = 1 (the BLAS makes a beta pass over the
 * output anyway); dbias is a column sum vectorised over OC. Uses: CBLAS. */
#include "kernels/cpu/cpu_kernels.h"
#include <cblas.h>

/* Column-sum block width: one block is a unit of OpenMP work and its double accumulators live
 * on the stack (1 KiB). */
#define COLSUM_BLOCK 128

/* matmul_forward: out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC]  (bias may be NULL) */
void cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC) {
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PAR_MIN)
        for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out,
                OC);
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
 *   dinp[N, C]  = dout[N, OC] @ w[OC, C]      (overwritten, or += if accumulate_dinp; skipped if NULL)
 *   dw[OC, C]  += dout^T @ inp[N, C]          (= if overwrite_dw)
 *   dbias[OC]  += colsum(dout)                (= if overwrite_dw; skipped if NULL) */
void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC,
                         bool accumulate_dinp, bool overwrite_dw) {
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                overwrite_dw ? 0.0f : 1.0f, dw, C);
    if (dbias) colsum_accumulate(dbias, dout, N, OC, overwrite_dw);
}
