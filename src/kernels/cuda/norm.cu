/* norm.cu — the CUDA backend's normalisations: layernorm forward/backward (eps 1e-5), the fused
 * residual + layernorm forward, RMSNorm forward/backward. Formulas and orders as
 * kernels/cpu/layernorm.c and llama.c.
 *
 * Forward: one block per row; mean, then the variance as the mean of squared deviations (two
 * passes over the row, which stays in L1/L2), then the output.
 * Backward: the input gradient one block per row; the parameter gradients (dw, db: sums over
 * rows) deterministically in two stages, no atomics: stage 1 splits the rows into NORM_PARTS
 * groups (a function of N only), a thread per (column, group) adds its group's rows in order in
 * double into a partial; stage 2 adds the groups' partials in group order per column and
 * overwrites or adds to dw, db. Same bits on every run and every GPU.
 * Owns: the kernels, their launchers and one static device buffer (the partials, grown on
 * demand: 2 * groups * C doubles). Uses: cuda_common.cuh. Used by: ops_cuda.cu. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

#define LN_EPS 1e-5f
/* row groups of the dw/db partials: at most NORM_MAX_PARTS groups of at least NORM_MIN_ROWS rows */
#define NORM_MAX_PARTS 128
#define NORM_MIN_ROWS 32
#define NORM_COL_THREADS 128 /* columns per block of the partial and final kernels */

static double *norm_partials; /* the file's one device buffer (see above) */
static size_t norm_partials_bytes;

/* row groups for N rows: a function of N alone, so the sums never depend on the device */
static int norm_parts(int N) {
    int g = (N + NORM_MIN_ROWS - 1) / NORM_MIN_ROWS;
    g = g < NORM_MAX_PARTS ? g : NORM_MAX_PARTS;
    return g > 0 ? g : 1;
}

/* ---------------------------------------------------------------- layernorm forward */

/* One row, the whole block: y[C] = (x - m) * r * w + b stored as type t; returns m and r. */
__device__ __forceinline__ void layernorm_row_dev(float *y, float *m_out, float *r_out,
                                                  const float *x, const float *w, const float *b,
                                                  int C, dtype_t t) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
    const float m = block_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = x[c] - m;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(block_sum(v) / (float)C + LN_EPS);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        y[c] = round_to_dev(t, (x[c] - m) * r * w[c] + b[c]);
    *m_out = m, *r_out = r;
}

/* layernorm_forward: out[N, C] = (inp - mean) * rstd * w[C] + b[C]; mean[N], rstd[N]. Grid N. */
static __global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd,
                                                const float *inp, const float *w, const float *b,
                                                int C) {
    const size_t off = (size_t)blockIdx.x * C;
    float m, r;
    layernorm_row_dev(out + off, &m, &r, inp + off, w, b, C, DT_FP32);
    if (threadIdx.x == 0) mean[blockIdx.x] = m, rstd[blockIdx.x] = r;
}

void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, int N, int C) {
    if (N <= 0 || C <= 0) return;
    layernorm_forward_kernel<<<N, CUDA_ROW_THREADS>>>(out, mean, rstd, inp, w, b, C);
    CUDA_CHECK_LAUNCH();
}

/* residual_layernorm_forward: res[N, C] = a + b stored as t, then out = layernorm(res) stored
 * as t. Each thread reads back only the res elements it wrote itself (same column stride), so
 * res may alias a or b and no barrier is needed before the mean (block_sum has them anyway). */
static __global__ void residual_layernorm_forward_kernel(float *res, float *out, float *mean,
                                                         float *rstd, const float *a,
                                                         const float *b, const float *w,
                                                         const float *bias, int C, dtype_t t) {
    const size_t off = (size_t)blockIdx.x * C;
    float *r_row = res + off;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        r_row[c] = round_to_dev(t, a[off + c] + b[off + c]);
    float m, r;
    layernorm_row_dev(out + off, &m, &r, r_row, w, bias, C, t);
    if (threadIdx.x == 0) mean[blockIdx.x] = m, rstd[blockIdx.x] = r;
}

void cuda_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd,
                                     const float *a, const float *b, const float *w,
                                     const float *bias, int N, int C, dtype_t t) {
    if (N <= 0 || C <= 0) return;
    residual_layernorm_forward_kernel<<<N, CUDA_ROW_THREADS>>>(res, out, mean, rstd, a, b, w, bias,
                                                               C, t);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- layernorm backward */

/* dinp row: dx (+)= (dy w - mean(dy w) - norm * mean(dy w norm)) * rstd, norm = (x - m) rstd.
 * Grid N. dinp does not alias dout or inp (ops.h). */
static __global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout,
                                                      const float *inp, const float *w,
                                                      const float *mean, const float *rstd, int C,
                                                      bool accumulate) {
    const size_t off = (size_t)blockIdx.x * C;
    const float *dy = dout + off, *x = inp + off;
    float *dx = dinp + off;
    const float m = mean[blockIdx.x], s = rstd[blockIdx.x];
    float sum_dn = 0.0f, sum_dn_n = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = dy[c] * w[c];
        sum_dn += d;
        sum_dn_n += d * ((x[c] - m) * s);
    }
    const float a = block_sum(sum_dn) / (float)C, bn = block_sum(sum_dn_n) / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float norm = (x[c] - m) * s;
        const float g = (dy[c] * w[c] - a - norm * bn) * s;
        dx[c] = accumulate ? dx[c] + g : g;
    }
}

/* Stage 1: partial[2 g][c] = sum over the rows of group g of dy * norm, partial[2 g + 1][c] =
 * sum of dy; rows in order, in double. Grid (ceil(C / NORM_COL_THREADS), groups). */
static __global__ void layernorm_dwdb_partial_kernel(double *partial, const float *dout,
                                                     const float *inp, const float *mean,
                                                     const float *rstd, int N, int C,
                                                     int rows_per) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
    if (c >= C) return;
    const int i0 = g * rows_per, i1 = min(N, i0 + rows_per);
    double pw = 0.0, pb = 0.0;
    for (int i = i0; i < i1; i++) {
        const size_t at = (size_t)i * C + c;
        const float dy = dout[at];
        pw += (double)(dy * ((inp[at] - mean[i]) * rstd[i]));
        pb += (double)dy;
    }
    partial[(size_t)(2 * g) * C + c] = pw;
    partial[(size_t)(2 * g + 1) * C + c] = pb;
}

/* Stage 2: dw[c], db[c] = (+=) the groups' partials in group order. Grid ceil(C / threads). */
static __global__ void layernorm_dwdb_final_kernel(float *dw, float *db, const double *partial,
                                                   int parts, int C, bool overwrite) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double aw = 0.0, ab = 0.0;
    for (int g = 0; g < parts; g++) {
        aw += partial[(size_t)(2 * g) * C + c];
        ab += partial[(size_t)(2 * g + 1) * C + c];
    }
    dw[c] = (float)(overwrite ? aw : aw + dw[c]);
    db[c] = (float)(overwrite ? ab : ab + db[c]);
}

void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, const float *mean, const float *rstd, int N, int C,
                             bool accumulate_dinp, bool overwrite_dw) {
    if (C <= 0) return;
    const int parts = norm_parts(N), rows_per = (N + parts - 1) / parts;
    const unsigned col_blocks = (unsigned)((C + NORM_COL_THREADS - 1) / NORM_COL_THREADS);
    if (N > 0) {
        layernorm_backward_dinp_kernel<<<N, CUDA_ROW_THREADS>>>(dinp, dout, inp, w, mean, rstd, C,
                                                                accumulate_dinp);
        CUDA_CHECK_LAUNCH();
    }
    double *partial = (double *)cuda_grow_buffer((void **)&norm_partials, &norm_partials_bytes,
                                                 2 * (size_t)parts * C * sizeof(double));
    layernorm_dwdb_partial_kernel<<<dim3(col_blocks, parts), NORM_COL_THREADS>>>(
        partial, dout, inp, mean, rstd, N, C, rows_per);
    CUDA_CHECK_LAUNCH();
    layernorm_dwdb_final_kernel<<<col_blocks, NORM_COL_THREADS>>>(dw, db, partial, parts, C,
                                                                  overwrite_dw);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- RMSNorm */

/* rmsnorm_forward: out[N, C] = inp * rstd * w, rstd[N] = 1 / sqrt(mean(inp^2) + eps). Grid N. */
static __global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp,
                                              const float *w, int C, float eps) {
    const size_t off = (size_t)blockIdx.x * C;
    const float *x = inp + off;
    float *y = out + off;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    const float r = 1.0f / sqrtf(block_sum(ss) / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = x[c] * r * w[c];
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

void cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                          float eps) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_forward_kernel<<<N, CUDA_ROW_THREADS>>>(out, rstd, inp, w, C, eps);
    CUDA_CHECK_LAUNCH();
}

/* dinp row: dx (+)= r (g w - x r mean(g w x r)), g = dout. Grid N. */
static __global__ void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout,
                                                    const float *inp, const float *w,
                                                    const float *rstd, int C, bool accumulate) {
    const size_t off = (size_t)blockIdx.x * C;
    const float *g = dout + off, *x = inp + off;
    float *d = dinp + off;
    const float r = rstd[blockIdx.x];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dot += g[c] * w[c] * x[c] * r;
    const float m = block_sum(dot) / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = r * (g[c] * w[c] - x[c] * r * m);
        d[c] = accumulate ? d[c] + v : v;
    }
}

/* Stage 1: partial[g][c] = sum over the rows of group g of dout * x * rstd, in double, rows in
 * order. Grid (ceil(C / NORM_COL_THREADS), groups). */
static __global__ void rmsnorm_dw_partial_kernel(double *partial, const float *dout,
                                                 const float *inp, const float *rstd, int N, int C,
                                                 int rows_per) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
    if (c >= C) return;
    const int i0 = g * rows_per, i1 = min(N, i0 + rows_per);
    double acc = 0.0;
    for (int i = i0; i < i1; i++) {
        const size_t at = (size_t)i * C + c;
        acc += (double)(dout[at] * inp[at] * rstd[i]);
    }
    partial[(size_t)g * C + c] = acc;
}

/* Stage 2: dw[c] (+)= the groups' partials in group order */
static __global__ void rmsnorm_dw_final_kernel(float *dw, const double *partial, int parts, int C,
                                               bool overwrite) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double acc = 0.0;
    for (int g = 0; g < parts; g++) acc += partial[(size_t)g * C + c];
    dw[c] = overwrite ? (float)acc : dw[c] + (float)acc;
}

void cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C, bool accumulate_dinp,
                           bool overwrite_dw) {
    if (C <= 0) return;
    const int parts = norm_parts(N), rows_per = (N + parts - 1) / parts;
    const unsigned col_blocks = (unsigned)((C + NORM_COL_THREADS - 1) / NORM_COL_THREADS);
    if (N > 0) {
        rmsnorm_backward_dinp_kernel<<<N, CUDA_ROW_THREADS>>>(dinp, dout, inp, w, rstd, C,
                                                              accumulate_dinp);
        CUDA_CHECK_LAUNCH();
    }
    double *partial = (double *)cuda_grow_buffer((void **)&norm_partials, &norm_partials_bytes,
                                                 (size_t)parts * C * sizeof(double));
    rmsnorm_dw_partial_kernel<<<dim3(col_blocks, parts), NORM_COL_THREADS>>>(partial, dout, inp,
                                                                             rstd, N, C, rows_per);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dw_final_kernel<<<col_blocks, NORM_COL_THREADS>>>(dw, partial, parts, C, overwrite_dw);
    CUDA_CHECK_LAUNCH();
}
