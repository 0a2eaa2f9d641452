/* moe.c — the Mixture-of-Experts ops of the CPU backend (ops.h "Mixture of Experts"), forward
 * and backward side by side: noisy top-k gating, the router's softmax + top-k and its backward
 * (gates, load-balancing and z-loss terms), and the row moves of dispatch and combine.
 *
 * Rows are independent everywhere except in moe_scatter_add_rows, where several dispatch rows
 * may add into one token row: it is split over COLUMN blocks and every block applies r = 0 .. M-1
 * in order, so the sums do not depend on OMP_NUM_THREADS. The router rows are short (E
 * experts), so their sums are accumulated in double and exp/log are libm's; the per-row math is
 * kernels/moe_router_math.h, the one the CUDA backend runs.
 * Uses: kernels/moe_router_math.h, core/rng.h (the noise), libm. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/moe_router_math.h"
#include "core/rng.h"
#include <math.h>

#define MOE_COL_BLOCK 64 /* columns per unit of work of moe_scatter_add_rows */

static inline philox_key_t noise_key(const uint32_t key[2]) {
    return (philox_key_t){{key[0], key[1]}};
}

/* ---------------------------------------------------------------- noisy gating */

/* The noise ops' walk over [N, E], eps(i, e) = rng_normal(key, (row0 + i) * E + e):
 * forward  (dlogits NULL): out = logits, out += scale * eps * softplus(noise);
 * backward:                out = dnoise,  out  = dlogits * scale * eps * sigmoid(noise). */
static void noise_walk(float *out, const float *dlogits, const float *noise, int N, int E,
                       float scale, const uint32_t key[2], uint64_t row0) {
    const philox_key_t k = noise_key(key);
#pragma omp parallel for schedule(static) if ((size_t)N * E > CPU_PAR_MIN / 16)
    for (int i = 0; i < N; i++) {
        const uint64_t base = (row0 + (uint64_t)i) * (uint64_t)E;
        for (int e = 0; e < E; e++) {
            const size_t at = (size_t)i * E + e;
            const float eps = rng_normal(k, base + (uint64_t)e);
            if (dlogits)
                out[at] = dlogits[at] * scale * eps * moe_sigmoid(noise[at]);
            else
                out[at] += scale * eps * moe_softplus(noise[at]);
        }
    }
}

/* moe_noise_forward: logits[N, E] += scale * eps(i, e) * softplus(noise[N, E]) */
void cpu_moe_noise_forward(float *logits, const float *noise, int N, int E, float scale,
                           const uint32_t key[2], uint64_t row0) {
    noise_walk(logits, NULL, noise, N, E, scale, key, row0);
}

/* moe_noise_backward: dnoise[N, E] = dlogits * scale * eps(i, e) * sigmoid(noise) */
void cpu_moe_noise_backward(float *dnoise, const float *dlogits, const float *noise, int N,
                            int E, float scale, const uint32_t key[2], uint64_t row0) {
    noise_walk(dnoise, dlogits, noise, N, E, scale, key, row0);
}

/* ---------------------------------------------------------------- router: softmax + top-k */

/* moe_softmax_topk: probs[N, E] = softmax(logits) per row (max subtracted, sum in double),
 * lse[N] = logsumexp; idx[N, k], gates[N, k] the top k (renormalised over the k when k > 1) */
void cpu_moe_softmax_topk(float *probs, float *lse, int *idx, float *gates, const float *logits,
                          int N, int E, int k) {
#pragma omp parallel for schedule(static) if ((size_t)N * E > CPU_PAR_MIN / 4)
    for (int i = 0; i < N; i++)
        moe_row_softmax_topk(probs + (size_t)i * E, &lse[i], idx + (size_t)i * k,
                             gates + (size_t)i * k, logits + (size_t)i * E, E, k);
}

/* moe_router_backward: dlogits[N, E] = d/dlogits of sum dgates * gates + sum dprob_bias * probs
 * + dz * sum lse^2 (ops.h). Each row of dlogits holds d/dprobs first, then is turned into
 * d/dlogits in place: no buffer, any E. */
void cpu_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                             const int *idx, const float *gates, const float *dgates,
                             const float *dprob_bias, float dz, int N, int E, int k) {
#pragma omp parallel for schedule(static) if ((size_t)N * E > CPU_PAR_MIN / 4)
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * E;
        float *d = dlogits + (size_t)i * E;
        moe_row_dprobs(d, p, idx + (size_t)i * k, gates + (size_t)i * k, dgates + (size_t)i * k,
                       dprob_bias, E, k);
        moe_row_dlogits(d, p, lse[i], dz, E);
    }
}

/* ---------------------------------------------------------------- dispatch and combine */

/* moe_gather_rows: out[M, C] row r = x[rows[r], :] */
void cpu_moe_gather_rows(float *out, const float *x, const int *rows, int M, int C) {
#pragma omp parallel for schedule(static) if ((size_t)M * C > CPU_PAR_MIN)
    for (int r = 0; r < M; r++)
        memcpy(out + (size_t)r * C, x + (size_t)rows[r] * C, (size_t)C * sizeof *out);
}

/* moe_scatter_add_rows: y[rows[r], :] += w[r] * in[r, :], r = 0 .. M-1 in order (w NULL: 1).
 * Threads take column blocks, so no two write the same element and each element's additions
 * happen in the order of r. */
void cpu_moe_scatter_add_rows(float *y, const float *in, const int *rows, const float *w, int M,
                              int C) {
    const int n_blocks = (C + MOE_COL_BLOCK - 1) / MOE_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)M * C > CPU_PAR_MIN)
    for (int b = 0; b < n_blocks; b++) {
        const int c0 = b * MOE_COL_BLOCK;
        const int c1 = c0 + MOE_COL_BLOCK < C ? c0 + MOE_COL_BLOCK : C;
        for (int r = 0; r < M; r++) {
            const float wr = w ? w[r] : 1.0f;
            float *yr = y + (size_t)rows[r] * C;
            const float *xr = in + (size_t)r * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) yr[c] += wr * xr[c];
        }
    }
}

/* moe_combine_backward: din[M, C] = w[r] * dy[rows[r], :] (w NULL: 1);
 * dw[M] = dot(dy[rows[r], :], in[r, :]) (dw NULL: skipped) */
void cpu_moe_combine_backward(float *din, float *dw, const float *dy, const float *in,
                              const int *rows, const float *w, int M, int C) {
#pragma omp parallel for schedule(static) if ((size_t)M * C > CPU_PAR_MIN)
    for (int r = 0; r < M; r++) {
        const float *g = dy + (size_t)rows[r] * C, *xr = in + (size_t)r * C;
        float *d = din + (size_t)r * C;
        const float wr = w ? w[r] : 1.0f;
#pragma omp simd
        for (int c = 0; c < C; c++) d[c] = wr * g[c];
        if (dw) {
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += g[c] * xr[c];
            dw[r] = dot;
        }
    }
}
