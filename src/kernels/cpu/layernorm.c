/* layernorm.c — layer normalisation over the last dimension (eps 1e-5), forward and backward,
 * and the fused residual + layernorm forward.
 *
 * Forward: rows in parallel; per row the mean, then the variance as the mean of squared
 * deviations (two passes over the row while it is in L1, so the variance is not the
 * difference of two large numbers), then the output. The fused form adds the residual into
 * the row first and normalises it from L1, which saves the pass over res that a separate
 * layernorm makes.
 *
 * Backward in ONE pass over dout and inp: each row's two reductions (sum dnorm, sum dnorm*norm)
 * and its dinp, and, while the row is in L1, its terms of dw and db. dw/db sum over rows; to
 * keep the result independent of the thread count, rows are taken in blocks that depend on N
 * alone (at most LN_MAX_BLOCKS, so the partials fit on the stack); each block's sums are float
 * partials, and after a barrier the partials are added in block order, in double, by column
 * chunks in parallel. Same bits on 1, 2, 3, ... threads; one parallel region (the previous
 * version made two passes over dout and inp, in two regions). Not an `ordered` loop over the
 * blocks (which would need no partials): libgomp hands each block over through a semaphore
 * (a futex sleep and wake-up), and on the shared 2-core VMs a call then took up to 100 ms.
 *
 * Reductions over a row use four accumulators (one per quarter of the row): consecutive vector
 * additions then do not wait on each other (one `omp simd` accumulator is bound by the add
 * latency). Uses: libm (sqrtf, once per row). */
#include "kernels/cpu/cpu_kernels.h"
#include <math.h>

#define LN_EPS 1e-5f
/* dw/db partials: rows in at most LN_MAX_BLOCKS blocks of at least LN_MIN_ROWS rows (for
 * N = 256: 16 blocks of 16); combined by chunks of LN_COL_CHUNK columns */
#define LN_MAX_BLOCKS 16
#define LN_MIN_ROWS 16
#define LN_COL_CHUNK 128

/* An overwritten dinp is prefetched for writing one row ahead: a store that misses waits for
 * its line in the store buffer, which then fills and stalls the loop (overwriting dinp ran 35%
 * slower than adding to it, whose loads fetch the lines early; with the prefetch both take the
 * same time). The forward's out rows, tried the same way, got 10-20% slower: not there.
 * A hint only: nothing where the compiler has no builtin. */
static inline void prefetch_row_for_write(float *row, int C) {
#if defined(__GNUC__)
    for (int c = 0; c < C; c += 16) __builtin_prefetch(row + c, 1);
#else
    (void)row, (void)C;
#endif
}

/* sum of x[C], four accumulators */
static float row_sum(const float *x, int C) {
    const int q = C / 4;
    const float *x1 = x + q, *x2 = x + 2 * q, *x3 = x + 3 * q;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int c = 0; c < q; c++) {
        s0 += x[c];
        s1 += x1[c];
        s2 += x2[c];
        s3 += x3[c];
    }
    for (int c = 4 * q; c < C; c++) s0 += x[c];
    return (s0 + s1) + (s2 + s3);
}

/* sum of (x[c] - m)^2 over x[C], four accumulators */
static float row_sum_sq_dev(const float *x, float m, int C) {
    const int q = C / 4;
    const float *x1 = x + q, *x2 = x + 2 * q, *x3 = x + 3 * q;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int c = 0; c < q; c++) {
        const float d0 = x[c] - m, d1 = x1[c] - m, d2 = x2[c] - m, d3 = x3[c] - m;
        s0 += d0 * d0;
        s1 += d1 * d1;
        s2 += d2 * d2;
        s3 += d3 * d3;
    }
    for (int c = 4 * q; c < C; c++) s0 += (x[c] - m) * (x[c] - m);
    return (s0 + s1) + (s2 + s3);
}

/* one row: y[C] = (x - mean) * rstd * w + b; returns mean and rstd */
static void layernorm_row(float *restrict y, float *mean, float *rstd, const float *x,
                          const float *w, const float *b, int C) {
    const float m = row_sum(x, C) / (float)C;
    const float s = 1.0f / sqrtf(row_sum_sq_dev(x, m, C) / (float)C + LN_EPS);
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m, *rstd = s;
}

/* y[C] rounded in place to type t, as quantize does to a stored tensor */
static void round_row(float *y, int C, dtype_t t) {
    if (t != DT_FP32) cpu_round_range(y, y, (size_t)C, t);
}

/* layernorm_forward: out[N, C] = (inp - mean) * rstd * w[C] + b[C]; saves mean[N], rstd[N] */
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        layernorm_row(out + (size_t)i * C, &mean[i], &rstd[i], inp + (size_t)i * C, w, b, C);
    }
}

/* residual_layernorm_forward: res[N, C] = a + b (stored as t), out[N, C] = layernorm(res) with
 * w[C], bias[C] (stored as t); saves mean[N], rstd[N]. res may alias a or b. */
void cpu_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd,
                                    const float *a, const float *b, const float *w,
                                    const float *bias, int N, int C, dtype_t t) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const size_t off = (size_t)i * C;
        float *r = res + off;
        const float *ra = a + off, *rb = b + off;
#pragma omp simd
        for (int c = 0; c < C; c++) r[c] = ra[c] + rb[c];
        round_row(r, C, t);
        layernorm_row(out + off, &mean[i], &rstd[i], r, w, bias, C);
        round_row(out + off, C, t);
    }
}

/* The two reductions of one row's backward, four accumulators each:
 * *sum_dn = sum dy*w,  *sum_dn_n = sum dy*w*norm  (norm = (x - m) * s) */
static void row_backward_sums(float *sum_dn, float *sum_dn_n, const float *dy, const float *x,
                              const float *w, float m, float s, int C) {
    const int q = C / 4;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, b0 = 0.0f, b1 = 0.0f, b2 = 0.0f, b3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3, b0, b1, b2, b3)
    for (int c = 0; c < q; c++) {
        const float d0 = dy[c] * w[c], d1 = dy[c + q] * w[c + q];
        const float d2 = dy[c + 2 * q] * w[c + 2 * q], d3 = dy[c + 3 * q] * w[c + 3 * q];
        a0 += d0, a1 += d1, a2 += d2, a3 += d3;
        b0 += d0 * ((x[c] - m) * s);
        b1 += d1 * ((x[c + q] - m) * s);
        b2 += d2 * ((x[c + 2 * q] - m) * s);
        b3 += d3 * ((x[c + 3 * q] - m) * s);
    }
    for (int c = 4 * q; c < C; c++) {
        const float d = dy[c] * w[c];
        a0 += d;
        b0 += d * ((x[c] - m) * s);
    }
    *sum_dn = (a0 + a1) + (a2 + a3);
    *sum_dn_n = (b0 + b1) + (b2 + b3);
}

/* One row: dx[C] (+)= rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w;
 * and its terms of dw, db added to the block's partials pw[C], pb[C]. */
static void layernorm_row_backward(float *restrict dx, float *restrict pw, float *restrict pb,
                                   const float *dy, const float *x, const float *w, float m,
                                   float s, int C, bool accumulate) {
    float sum_dn, sum_dn_n;
    row_backward_sums(&sum_dn, &sum_dn_n, dy, x, w, m, s, C);
    const float a = sum_dn / (float)C, bn = sum_dn_n / (float)C;
    if (accumulate) {
#pragma omp simd
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * s;
            dx[c] += (dy[c] * w[c] - a - norm * bn) * s;
            pw[c] += dy[c] * norm;
            pb[c] += dy[c];
        }
    } else {
#pragma omp simd
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * s;
            dx[c] = (dy[c] * w[c] - a - norm * bn) * s;
            pw[c] += dy[c] * norm;
            pb[c] += dy[c];
        }
    }
}

/* layernorm_backward: dout[N, C], inp[N, C], w[C], mean[N], rstd[N] ->
 * dinp[N, C] (overwritten, or += if accumulate_dinp), dw[C], db[C] (+=, or = if overwrite_dw).
 * dinp must not alias dout or inp. Uses LN_MAX_BLOCKS * 2 C floats of the caller's stack for the
 * blocks' partial dw/db (C = 768: 96 KiB). */
void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C, bool accumulate_dinp,
                            bool overwrite_dw) {
    if (C <= 0) return;
    /* row blocks: a function of N only, so the partial sums are the same on any thread count */
    int n_blocks = (N + LN_MIN_ROWS - 1) / LN_MIN_ROWS;
    n_blocks = n_blocks < LN_MAX_BLOCKS ? n_blocks : LN_MAX_BLOCKS;
    n_blocks = n_blocks > 0 ? n_blocks : 1;
    const int rows_per_block = (N + n_blocks - 1) / n_blocks;
    float partial[n_blocks][2 * C]; /* per block: dw terms, then db terms */
#pragma omp parallel if ((size_t)N * C > CPU_PAR_MIN)
    {
#pragma omp for schedule(static)
        for (int blk = 0; blk < n_blocks; blk++) {
            const int i0 = blk * rows_per_block;
            const int i1 = i0 + rows_per_block < N ? i0 + rows_per_block : N;
            float *pw = partial[blk], *pb = partial[blk] + C;
            memset(partial[blk], 0, 2 * (size_t)C * sizeof(float));
            for (int i = i0; i < i1; i++) {
                const size_t off = (size_t)i * C;
                if (!accumulate_dinp && i + 1 < N) prefetch_row_for_write(dinp + off + C, C);
                layernorm_row_backward(dinp + off, pw, pb, dout + off, inp + off, w, mean[i],
                                       rstd[i], C, accumulate_dinp);
            }
        }
        /* dw, db: the blocks' partials in block order, in double (implicit barrier above) */
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += LN_COL_CHUNK) {
            const int width = C - c0 < LN_COL_CHUNK ? C - c0 : LN_COL_CHUNK;
            double acc_w[LN_COL_CHUNK] = {0}, acc_b[LN_COL_CHUNK] = {0};
            for (int blk = 0; blk < n_blocks; blk++) {
                const float *pw = partial[blk] + c0, *pb = partial[blk] + C + c0;
#pragma omp simd
                for (int c = 0; c < width; c++) acc_w[c] += pw[c], acc_b[c] += pb[c];
            }
            for (int c = 0; c < width; c++) {
                dw[c0 + c] = (float)(overwrite_dw ? acc_w[c] : acc_w[c] + dw[c0 + c]);
                db[c0 + c] = (float)(overwrite_dw ? acc_b[c] : acc_b[c] + db[c0 + c]);
            }
        }
    }
}
