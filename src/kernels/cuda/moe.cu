/* moe.cu — the CUDA backend's Mixture-of-Experts ops (ops.h "Mixture of Experts"), forward and
 * backward side by side: noisy top-k gating (the noise drawn with philox.cuh's rng_normal_dev:
 * the CPU's numbers), the router's softmax + top-k and its backward, and the row moves of
 * dispatch (gather) and combine (scatter-add and its backward). Formulas as kernels/cpu/moe.c.
 *  - Router rows are short (E experts): one thread per row running kernels/moe_router_math.h,
 *    the CPU's per-row code (sums in double, exp/log in double; top-k by repeated selection with
 *    the CPU's total order: larger probability first, ties to the lower index).
 *  - moe_scatter_add_rows: several dispatch rows may add into one token row; done without
 *    atomics by cuda_segments.cuh (stable sort of r by destination row, each row's additions in
 *    r = 0 .. M-1 order: the CPU's order and rounding).
 * Owns: the kernels, their launchers and one static device buffer (the scatter's sort).
 * Uses: moe_router_math.h, cuda_common.cuh, cuda_segments.cuh, philox.cuh. Used by: ops_cuda.cu. */
#include <limits.h>
#include "kernels/moe_router_math.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_segments.cuh"
#include "kernels/cuda/philox.cuh"
#include "kernels/cuda/cuda_kernels.h"

#define MOE_ROW_THREADS 128 /* one thread per router row */

static void *moe_sort_buf; /* the file's one device buffer: moe_scatter_add_rows's sort */
static size_t moe_sort_bytes;

static inline unsigned moe_blocks(size_t n, int threads) {
    return (unsigned)((n + (size_t)threads - 1) / (size_t)threads);
}

/* ---------------------------------------------------------------- noisy gating */

/* logits[N, E] += scale * eps(i, e) * softplus(noise), eps = rng_normal(key, (row0 + i) E + e) */
static __global__ void moe_noise_forward_kernel(float *logits, const float *noise, size_t n, int E,
                                                float scale, uint32_t k0, uint32_t k1,
                                                uint64_t row0) {
    for (size_t at = (size_t)blockIdx.x * blockDim.x + threadIdx.x; at < n;
         at += (size_t)gridDim.x * blockDim.x) {
        const uint64_t i = at / (size_t)E, e = at % (size_t)E;
        const float eps = rng_normal_dev(k0, k1, (row0 + i) * (uint64_t)E + e);
        logits[at] += scale * eps * moe_softplus(noise[at]);
    }
}

/* key: a host array (model/ derives it on the host); its two words go in as arguments */
void cuda_moe_noise_forward(float *logits, const float *noise, int N, int E, float scale,
                            const uint32_t key[2], uint64_t row0) {
    const size_t n = (size_t)N * E;
    if (!n) return;
    moe_noise_forward_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(
        logits, noise, n, E, scale, key[0], key[1], row0);
    CUDA_CHECK_LAUNCH();
}

/* dnoise[N, E] = dlogits * scale * eps(i, e) * sigmoid(noise) (OVERWRITTEN) */
static __global__ void moe_noise_backward_kernel(float *dnoise, const float *dlogits,
                                                 const float *noise, size_t n, int E, float scale,
                                                 uint32_t k0, uint32_t k1, uint64_t row0) {
    for (size_t at = (size_t)blockIdx.x * blockDim.x + threadIdx.x; at < n;
         at += (size_t)gridDim.x * blockDim.x) {
        const uint64_t i = at / (size_t)E, e = at % (size_t)E;
        const float eps = rng_normal_dev(k0, k1, (row0 + i) * (uint64_t)E + e);
        dnoise[at] = dlogits[at] * scale * eps * moe_sigmoid(noise[at]);
    }
}

void cuda_moe_noise_backward(float *dnoise, const float *dlogits, const float *noise, int N, int E,
                             float scale, const uint32_t key[2], uint64_t row0) {
    const size_t n = (size_t)N * E;
    if (!n) return;
    moe_noise_backward_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(
        dnoise, dlogits, noise, n, E, scale, key[0], key[1], row0);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- router: softmax + top-k */

/* probs[N, E] = softmax(logits) (max subtracted, sum in double), lse[N]; idx[N, k], gates[N, k]
 * the top k, renormalised over the k when k > 1. One thread per row. */
static __global__ void moe_softmax_topk_kernel(float *probs, float *lse, int *idx, float *gates,
                                               const float *logits, int N, int E, int k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    moe_row_softmax_topk(probs + (size_t)i * E, &lse[i], idx + (size_t)i * k, gates + (size_t)i * k,
                         logits + (size_t)i * E, E, k);
}

void cuda_moe_softmax_topk(float *probs, float *lse, int *idx, float *gates, const float *logits,
                           int N, int E, int k) {
    if (N <= 0) return;
    moe_softmax_topk_kernel<<<moe_blocks((size_t)N, MOE_ROW_THREADS), MOE_ROW_THREADS>>>(
        probs, lse, idx, gates, logits, N, E, k);
    CUDA_CHECK_LAUNCH();
}

/* dlogits[N, E] OVERWRITTEN (ops.h moe_router_backward); the row of dlogits holds dL/dprobs
 * first. One thread per row. */
static __global__ void moe_router_backward_kernel(float *dlogits, const float *probs,
                                                  const float *lse, const int *idx,
                                                  const float *gates, const float *dgates,
                                                  const float *dprob_bias, float dz, int N, int E,
                                                  int k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *p = probs + (size_t)i * E;
    float *d = dlogits + (size_t)i * E;
    moe_row_dprobs(d, p, idx + (size_t)i * k, gates + (size_t)i * k, dgates + (size_t)i * k,
                   dprob_bias, E, k);
    moe_row_dlogits(d, p, lse[i], dz, E);
}

void cuda_moe_router_backward(float *dlogits, const float *probs, const float *lse, const int *idx,
                              const float *gates, const float *dgates, const float *dprob_bias,
                              float dz, int N, int E, int k) {
    if (N <= 0) return;
    moe_router_backward_kernel<<<moe_blocks((size_t)N, MOE_ROW_THREADS), MOE_ROW_THREADS>>>(
        dlogits, probs, lse, idx, gates, dgates, dprob_bias, dz, N, E, k);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- dispatch and combine */

/* out[M, C] row r = x[rows[r], :] */
static __global__ void moe_gather_kernel(float *out, const float *x, const int *rows, int C,
                                         size_t n) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t r = e / (size_t)C, c = e % (size_t)C;
        out[e] = x[(size_t)rows[r] * C + c];
    }
}

void cuda_moe_gather_rows(float *out, const float *x, const int *rows, int M, int C) {
    const size_t n = (size_t)M * (C > 0 ? C : 0);
    if (!n) return;
    moe_gather_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(out, x, rows,
                                                                                     C, n);
    CUDA_CHECK_LAUNCH();
}

/* moe_scatter_add_rows: y[rows[r], :] += w[r] * in[r, :], r = 0 .. M-1 in order (w NULL: 1).
 * y's row count is not passed: every non-negative row index is a key (a 31-bit sort). */
void cuda_moe_scatter_add_rows(float *y, const float *in, const int *rows, const float *w, int M,
                               int C) {
    segments_scatter_add(&moe_sort_buf, &moe_sort_bytes, y, in, w, rows, M, C, 0, INT_MAX);
}

/* din[M, C] = w[r] * dy[rows[r], :] (w NULL: 1); dw[M] = dot(dy[rows[r], :], in[r, :]) (dw NULL:
 * skipped). One block per r; the dot by the block's fixed tree. */
static __global__ void moe_combine_backward_kernel(float *din, float *dw, const float *dy,
                                                   const float *in, const int *rows, const float *w,
                                                   int C) {
    const int r = blockIdx.x;
    const float *g = dy + (size_t)rows[r] * C, *xr = in ? in + (size_t)r * C : NULL;
    float *d = din + (size_t)r * C;
    const float wr = w ? w[r] : 1.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) d[c] = wr * g[c];
    if (dw) { /* uniform over the block: every thread takes part in block_sum; in is read only
               * here (it may be NULL without dw) */
        float dot = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) dot += g[c] * xr[c];
        dot = block_sum(dot);
        if (threadIdx.x == 0) dw[r] = dot;
    }
}

void cuda_moe_combine_backward(float *din, float *dw, const float *dy, const float *in,
                               const int *rows, const float *w, int M, int C) {
    if (M <= 0) return; /* C = 0 still writes dw = 0, as moe.c */
    moe_combine_backward_kernel<<<M, CUDA_ROW_THREADS>>>(din, dw, dy, in, rows, w, C);
    CUDA_CHECK_LAUNCH();
}
