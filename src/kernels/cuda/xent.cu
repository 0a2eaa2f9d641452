/* xent.cu — the CUDA backend's cross-entropy over (possibly vocab-sharded, padded) logits in the
 * local pieces of ops.h (row max -> row sum of exp -> target logit -> losses, the in-place
 * backward) and the regularised pieces (row sum for label smoothing, losses with z-loss, their
 * in-place backward). Formulas as kernels/cpu/xent.c and xent_reg.c: columns >= v_valid are
 * padding (never read; 0 in the gradient); an empty shard (v_valid <= 0) gives row max -inf and
 * sum of exp 0, the neutral elements of model/'s all-reduces.
 * Row reductions: one block per row, a fixed tree (deterministic); each thread's float partial
 * of a sum enters the tree in double (like the CPU's double over float blocks). Per-row scalar
 * pieces: one thread per row, in double as the CPU.
 * Owns: the kernels and their launchers. Uses: cuda_common.cuh. Used by: ops_cuda.cu. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

#define XENT_THREADS 512 /* per row block: a 50k-column row is ~100 columns per thread */

static inline unsigned rows_blocks(int N) {
    return (unsigned)((N + CUDA_ELEM_THREADS - 1) / CUDA_ELEM_THREADS);
}

/* ---------------------------------------------------------------- forward pieces */

/* row_max[N] = max over columns [0, v_valid) of logits[N, Vl]; -inf if none. Grid N. */
static __global__ void xent_row_max_kernel(float *row_max, const float *logits, int Vl,
                                           int v_valid) {
    const float *l = logits + (size_t)blockIdx.x * Vl;
    float m = -INFINITY;
    for (int v = threadIdx.x; v < v_valid; v += blockDim.x) m = fmaxf(m, l[v]);
    m = block_max(m);
    if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

void cuda_xent_row_max(float *row_max, const float *logits, int N, int Vl, int v_valid) {
    if (N <= 0) return;
    xent_row_max_kernel<<<N, XENT_THREADS>>>(row_max, logits, Vl, v_valid);
    CUDA_CHECK_LAUNCH();
}

/* row_sumexp[N] = sum_{v < v_valid} exp(l - row_max); 0 if no column. Grid N. */
static __global__ void xent_row_sumexp_kernel(float *row_sumexp, const float *logits,
                                              const float *row_max, int Vl, int v_valid) {
    const float *l = logits + (size_t)blockIdx.x * Vl;
    const float mx = row_max[blockIdx.x];
    float s = 0.0f;
    for (int v = threadIdx.x; v < v_valid; v += blockDim.x) s += expf(l[v] - mx);
    const double total = block_sum_double((double)s);
    if (threadIdx.x == 0) row_sumexp[blockIdx.x] = (float)total;
}

void cuda_xent_row_sumexp(float *row_sumexp, const float *logits, const float *row_max, int N,
                          int Vl, int v_valid) {
    if (N <= 0) return;
    xent_row_sumexp_kernel<<<N, XENT_THREADS>>>(row_sumexp, logits, row_max, Vl, v_valid);
    CUDA_CHECK_LAUNCH();
}

/* target_logit[N] = logits[i, targets[i] - v_start] when in [0, Vl), else 0 (as xent.c) */
static __global__ void xent_target_logit_kernel(float *target_logit, const float *logits,
                                                const int *targets, int N, int Vl, int v_start) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const int t = targets[i] - v_start;
    target_logit[i] = (t >= 0 && t < Vl) ? logits[(size_t)i * Vl + t] : 0.0f;
}

void cuda_xent_target_logit(float *target_logit, const float *logits, const int *targets, int N,
                            int Vl, int v_start) {
    if (N <= 0) return;
    xent_target_logit_kernel<<<rows_blocks(N), CUDA_ELEM_THREADS>>>(target_logit, logits, targets,
                                                                    N, Vl, v_start);
    CUDA_CHECK_LAUNCH();
}

/* losses[N] = log(row_sumexp) + row_max - target_logit, in double */
static __global__ void xent_losses_kernel(float *losses, const float *row_max,
                                          const float *row_sumexp, const float *target_logit,
                                          int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    losses[i] = (float)(log((double)row_sumexp[i]) + (double)row_max[i] - (double)target_logit[i]);
}

void cuda_xent_losses(float *losses, const float *row_max, const float *row_sumexp,
                      const float *target_logit, int N) {
    if (N <= 0) return;
    xent_losses_kernel<<<rows_blocks(N), CUDA_ELEM_THREADS>>>(losses, row_max, row_sumexp,
                                                              target_logit, N);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- backward */

/* IN PLACE, one row per block: l[v] = dloss / sumexp * exp(l[v] - max) (- dloss at the owned
 * target) for v < valid, 0 for padding. The thread of the target column subtracts, after its
 * own softmax term, as xent.c does. Grid N. */
static __global__ void xent_backward_kernel(float *logits, const float *row_max,
                                            const float *row_sumexp, const int *targets,
                                            float dloss, int Vl, int valid, int v_start) {
    float *l = logits + (size_t)blockIdx.x * Vl;
    const float mx = row_max[blockIdx.x], scale = dloss / row_sumexp[blockIdx.x];
    const int t = targets[blockIdx.x] - v_start;
    for (int v = threadIdx.x; v < Vl; v += blockDim.x) {
        float g = 0.0f;
        if (v < valid) {
            g = scale * expf(l[v] - mx);
            if (v == t) g -= dloss;
        }
        l[v] = g;
    }
}

void cuda_xent_backward_inplace(float *logits, const float *row_max, const float *row_sumexp,
                                const int *targets, float dloss, int N, int Vl, int v_valid,
                                int v_start) {
    if (N <= 0 || Vl <= 0) return;
    xent_backward_kernel<<<N, XENT_THREADS>>>(logits, row_max, row_sumexp, targets, dloss, Vl,
                                              v_valid < 0 ? 0 : v_valid, v_start);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- regularised pieces */

/* row_sum[N] = sum over [0, v_valid) of logits[N, Vl], in double. Grid N. */
static __global__ void xent_row_sum_kernel(float *row_sum, const float *logits, int Vl,
                                           int v_valid) {
    const float *l = logits + (size_t)blockIdx.x * Vl;
    double s = 0.0;
    for (int v = threadIdx.x; v < v_valid; v += blockDim.x) s += (double)l[v];
    s = block_sum_double(s);
    if (threadIdx.x == 0) row_sum[blockIdx.x] = (float)s;
}

void cuda_xent_row_sum(float *row_sum, const float *logits, int N, int Vl, int v_valid) {
    if (N <= 0) return;
    xent_row_sum_kernel<<<N, XENT_THREADS>>>(row_sum, logits, Vl, v_valid);
    CUDA_CHECK_LAUNCH();
}

__device__ __forceinline__ double row_lse_dev(const float *row_max, const float *row_sumexp,
                                              int i) {
    return log((double)row_sumexp[i]) + (double)row_max[i];
}

/* losses[i] = lse - (1 - e) target_logit - (e / V) row_sum; zloss[i] = zc lse^2 (xent_reg.c) */
static __global__ void xent_losses_regularized_kernel(float *losses, float *zloss,
                                                      const float *row_max, const float *row_sumexp,
                                                      const float *target_logit,
                                                      const float *row_sum, int N, int V, float e,
                                                      float zc) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const double lse = row_lse_dev(row_max, row_sumexp, i);
    losses[i] = (float)(lse - (1.0 - e) * target_logit[i] - (double)e / V * row_sum[i]);
    zloss[i] = (float)(zc * lse * lse);
}

void cuda_xent_losses_regularized(float *losses, float *zloss, const float *row_max,
                                  const float *row_sumexp, const float *target_logit,
                                  const float *row_sum, int N, int V, float e, float zc) {
    if (N <= 0) return;
    xent_losses_regularized_kernel<<<rows_blocks(N), CUDA_ELEM_THREADS>>>(
        losses, zloss, row_max, row_sumexp, target_logit, row_sum, N, V, e, zc);
    CUDA_CHECK_LAUNCH();
}

/* IN PLACE, one row per block: l[v] = s exp(l[v] - max) - dloss e / V, s = dloss (1 + 2 zc lse)
 * / sumexp, minus dloss (1 - e) at the owned target; padding 0. Grid N. */
static __global__ void xent_backward_regularized_kernel(float *logits, const float *row_max,
                                                        const float *row_sumexp, const int *targets,
                                                        float dloss, int Vl, int valid, int v_start,
                                                        int V, float e, float zc) {
    const int i = blockIdx.x;
    float *l = logits + (size_t)i * Vl;
    const double lse = row_lse_dev(row_max, row_sumexp, i);
    const float mx = row_max[i];
    const float s = (float)(dloss * (1.0 + 2.0 * zc * lse) / row_sumexp[i]);
    const float uniform = dloss * e / (float)V, target_part = dloss * (1.0f - e);
    const int t = targets[i] - v_start;
    for (int v = threadIdx.x; v < Vl; v += blockDim.x) {
        float g = 0.0f;
        if (v < valid) {
            g = s * expf(l[v] - mx) - uniform;
            if (v == t) g -= target_part;
        }
        l[v] = g;
    }
}

void cuda_xent_backward_regularized_inplace(float *logits, const float *row_max,
                                            const float *row_sumexp, const int *targets,
                                            float dloss, int N, int Vl, int v_valid, int v_start,
                                            int V, float e, float zc) {
    if (N <= 0 || Vl <= 0) return;
    xent_backward_regularized_kernel<<<N, XENT_THREADS>>>(logits, row_max, row_sumexp, targets,
                                                          dloss, Vl, v_valid < 0 ? 0 : v_valid,
                                                          v_start, V, e, zc);
    CUDA_CHECK_LAUNCH();
}
