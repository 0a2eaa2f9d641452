/* moe.c — the Mixture-of-Experts ops of the CPU backend (ops.h "Mixture of Experts"), forward
 * and backward side by side: noisy top-k gating, the router's softmax + top-k and its backward
 * (gates, load-balancing and z-loss terms), and the row moves of dispatch and combine.
 *
 * Rows are independent everywhere except in moe_scatter_add_rows, where several dispatch rows
 * may add into one token row: it is split over COLUMN blocks and every block applies r = 0 .. M-1
 * in order, so the sums do not depend on OMP_NUM_THREADS. The router rows are short (E
 * experts), so their sums are accumulated in double and exp/log are libm's.
 * Uses: core/rng.h (the noise), libm. */
#include "kernels/cpu/cpu_kernels.h"
#include "core/rng.h"
#include <math.h>

#define MOE_COL_BLOCK 64 /* columns per unit of work of moe_scatter_add_rows */

/* log(1 + e^x) without overflow for large x or loss of precision for very negative x */
static inline float softplus(float x) { return log1pf(expf(-fabsf(x))) + fmaxf(x, 0.0f); }

/* 1 / (1 + e^-x), never computing e^(large) */
static inline float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

static inline philox_key_t noise_key(const uint32_t key[2]) {
    return (philox_key_t){{key[0], key[1]}};
}

/* ---------------------------------------------------------------- noisy gating */

/* moe_noise_forward: logits[N, E] += scale * eps(i, e) * softplus(noise[N, E]),
 * eps(i, e) = rng_normal(key, (row0 + i) * E + e) */
void cpu_moe_noise_forward(float *logits, const float *noise, int N, int E, float scale,
                           const uint32_t key[2], uint64_t row0) {
    const philox_key_t k = noise_key(key);
#pragma omp parallel for schedule(static) if ((size_t)N * E > CPU_PAR_MIN / 16)
    for (int i = 0; i < N; i++) {
        const uint64_t base = (row0 + (uint64_t)i) * (uint64_t)E;
        for (int e = 0; e < E; e++) {
            const size_t at = (size_t)i * E + e;
            logits[at] += scale * rng_normal(k, base + (uint64_t)e) * softplus(noise[at]);
        }
    }
}

/* moe_noise_backward: dnoise[N, E] = dlogits * scale * eps(i, e) * sigmoid(noise) */
void cpu_moe_noise_backward(float *dnoise, const float *dlogits, const float *noise, int N,
                            int E, float scale, const uint32_t key[2], uint64_t row0) {
    const philox_key_t k = noise_key(key);
#pragma omp parallel for schedule(static) if ((size_t)N * E > CPU_PAR_MIN / 16)
    for (int i = 0; i < N; i++) {
        const uint64_t base = (row0 + (uint64_t)i) * (uint64_t)E;
        for (int e = 0; e < E; e++) {
            const size_t at = (size_t)i * E + e;
            dnoise[at] = dlogits[at] * scale * rng_normal(k, base + (uint64_t)e) * sigmoid(noise[at]);
        }
    }
}

/* ---------------------------------------------------------------- router: softmax + top-k */

/* Whether expert a ranks before expert b: larger probability, ties to the lower index. */
static inline bool ranks_before(const float *p, int a, int b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

/* idx[k] = the k first experts of row p[E] in ranking order. Each pick is the best expert that
 * ranks after the previous pick (the ranking is a total order), so no "taken" marks are needed.
 * NaN probabilities (non-finite logits: the anomaly check reports them) rank nowhere: such a
 * pick falls back to expert j, so idx stays a valid expert index. */
static void row_topk(int *idx, const float *p, int E, int k) {
    int prev = -1;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if ((prev < 0 || ranks_before(p, prev, e)) && (best < 0 || ranks_before(p, e, best)))
                best = e;
        idx[j] = best >= 0 ? best : j;
        prev = idx[j];
    }
}

/* moe_softmax_topk: probs[N, E] = softmax(logits) per row (max subtracted, sum in double),
 * lse[N] = logsumexp; idx[N, k], gates[N, k] the top k (renormalised over the k when k > 1) */
void cpu_moe_softmax_topk(float *probs, float *lse, int *idx, float *gates, const float *logits,
                          int N, int E, int k) {
#pragma omp parallel for schedule(static) if ((size_t)N * E > CPU_PAR_MIN / 4)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * E;
        float *p = probs + (size_t)i * E;
        float m = -INFINITY;
        for (int e = 0; e < E; e++) m = z[e] > m ? z[e] : m;
        double sum = 0.0;
        for (int e = 0; e < E; e++) sum += exp((double)z[e] - (double)m);
        for (int e = 0; e < E; e++) p[e] = (float)(exp((double)z[e] - (double)m) / sum);
        lse[i] = (float)((double)m + log(sum));
        int *ix = idx + (size_t)i * k;
        float *g = gates + (size_t)i * k;
        row_topk(ix, p, E, k);
        double chosen = 0.0;
        for (int j = 0; j < k; j++) chosen += p[ix[j]];
        for (int j = 0; j < k; j++) g[j] = k > 1 ? (float)(p[ix[j]] / chosen) : p[ix[j]];
    }
}

/* d[E] = dL/dprobs of one row: dprob_bias[e] (or 0) plus the gates' part at the chosen experts.
 * k > 1, g_j = p_j / S with S = sum_j p_j:  dL/dp_{e_j} += (dg_j - sum_j' dg_j' g_j') / S;
 * k = 1, g = p:                             dL/dp_{e_1} += dg_1.
 * (The sum over j' is the renormalisation's share; each term is computed in double.) */
static void row_dprobs(float *d, const float *p, const int *ix, const float *g, const float *dg,
                       const float *dprob_bias, int E, int k) {
    for (int e = 0; e < E; e++) d[e] = dprob_bias ? dprob_bias[e] : 0.0f;
    if (k == 1) {
        d[ix[0]] += dg[0];
        return;
    }
    double S = 0.0, dot = 0.0;
    for (int j = 0; j < k; j++) S += p[ix[j]], dot += (double)dg[j] * g[j];
    for (int j = 0; j < k; j++) d[ix[j]] = (float)((double)d[ix[j]] + ((double)dg[j] - dot) / S);
}

/* d[E] := dL/dlogits of one row, in place, from d = dL/dprobs: the softmax Jacobian
 * p * (d - sum_e p d), plus the z-loss dz * d(lse^2)/dz_e = dz * 2 lse p. */
static void row_dlogits(float *d, const float *p, float lse, float dz, int E) {
    double pd = 0.0;
    for (int e = 0; e < E; e++) pd += (double)p[e] * d[e];
    const double zterm = 2.0 * (double)dz * (double)lse;
    for (int e = 0; e < E; e++) d[e] = (float)((double)p[e] * ((double)d[e] - pd + zterm));
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
        row_dprobs(d, p, idx + (size_t)i * k, gates + (size_t)i * k, dgates + (size_t)i * k,
                   dprob_bias, E, k);
        row_dlogits(d, p, lse[i], dz, E);
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
