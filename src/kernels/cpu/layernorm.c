/* layernorm.c — layer normalisation over the last dimension (eps 1e-5), forward and backward.
 * Rows in parallel; mean and variance in two passes over the (cached) row, so the variance is
 * not the difference of two large numbers. Backward computes dinp by rows and dw/db by column
 * blocks (a second pass over dout and inp, still in cache), so no per-thread partial sums are
 * needed and the result does not depend on the thread count. Uses: nothing but libm. */
#include "kernels/cpu/cpu_kernels.h"
#include <math.h>

#define LN_EPS 1e-5f
#define LN_COL_BLOCK 128 /* column block of the dw/db reduction (2 KiB of double accumulators) */

/* one row: y[C] = (x - mean) * rstd * w + b; returns mean and rstd */
static void layernorm_row(float *y, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int C) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++) sum += x[c];
    const float m = sum / (float)C;
    float ssq = 0.0f;
#pragma omp simd reduction(+ : ssq)
    for (int c = 0; c < C; c++) ssq += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / sqrtf(ssq / (float)C + LN_EPS);
    for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m, *rstd = s;
}

/* layernorm_forward: out[N, C] = (inp - mean) * rstd * w[C] + b[C]; saves mean[N], rstd[N] */
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++)
        layernorm_row(out + (size_t)i * C, &mean[i], &rstd[i], inp + (size_t)i * C, w, b, C);
}

/* one row: dx[C] (+)= rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w */
static void layernorm_row_backward(float *dx, const float *dy, const float *x, const float *w,
                                   float m, float s, int C, bool accumulate) {
    float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
#pragma omp simd reduction(+ : sum_dnorm, sum_dnorm_norm)
    for (int c = 0; c < C; c++) {
        const float dnorm = dy[c] * w[c];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * (x[c] - m) * s;
    }
    const float a = sum_dnorm / (float)C, bn = sum_dnorm_norm / (float)C;
    if (accumulate) {
        for (int c = 0; c < C; c++) dx[c] += (dy[c] * w[c] - a - (x[c] - m) * s * bn) * s;
    } else {
        for (int c = 0; c < C; c++) dx[c] = (dy[c] * w[c] - a - (x[c] - m) * s * bn) * s;
    }
}

static void layernorm_backward_inputs(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd,
                                      int N, int C, bool accumulate) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++)
        layernorm_row_backward(dinp + (size_t)i * C, dout + (size_t)i * C, inp + (size_t)i * C,
                               w, mean[i], rstd[i], C, accumulate);
}

/* dw[C] (+)= sum_i dout[i] * norm[i];  db[C] (+)= sum_i dout[i]  (column blocks in parallel) */
static void layernorm_backward_params(float *dw, float *db, const float *dout, const float *inp,
                                      const float *mean, const float *rstd, int N, int C,
                                      bool overwrite) {
    const int n_blocks = (C + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int blk = 0; blk < n_blocks; blk++) {
        const int c0 = blk * LN_COL_BLOCK;
        const int width = C - c0 < LN_COL_BLOCK ? C - c0 : LN_COL_BLOCK;
        double acc_w[LN_COL_BLOCK] = {0}, acc_b[LN_COL_BLOCK] = {0};
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C + c0, *dy = dout + (size_t)i * C + c0;
            const float m = mean[i], s = rstd[i];
#pragma omp simd
            for (int c = 0; c < width; c++) {
                acc_w[c] += dy[c] * ((x[c] - m) * s);
                acc_b[c] += dy[c];
            }
        }
        for (int c = 0; c < width; c++) {
            dw[c0 + c] = (float)(overwrite ? acc_w[c] : acc_w[c] + dw[c0 + c]);
            db[c0 + c] = (float)(overwrite ? acc_b[c] : acc_b[c] + db[c0 + c]);
        }
    }
}

/* layernorm_backward: dout[N, C], inp[N, C], w[C], mean[N], rstd[N] ->
 * dinp[N, C] (overwritten, or += if accumulate_dinp), dw[C], db[C] (+=, or = if overwrite_dw).
 * dinp must not alias dout or inp. */
void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C, bool accumulate_dinp,
                            bool overwrite_dw) {
    layernorm_backward_params(dw, db, dout, inp, mean, rstd, N, C, overwrite_dw);
    layernorm_backward_inputs(dinp, dout, inp, w, mean, rstd, N, C, accumulate_dinp);
}
