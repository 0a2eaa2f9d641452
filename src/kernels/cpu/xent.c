/* xent.c — cross-entropy over (possibly vocab-sharded, padded) logits, split into the local
 * pieces of ops.h so model/ can all-reduce between them under tensor parallelism:
 * row max -> row sum of exp -> target logit -> losses, and the in-place backward.
 * Rows in parallel; columns >= v_valid are padding and are never read.
 * An empty shard (v_valid <= 0) gives max -inf and sumexp 0, the identities of the all-reduces.
 * Uses: cpu_expf, libm. */
#include "kernels/cpu/cpu_kernels.h"
#include <math.h>

/* Sums of exp are taken in float over blocks of this many columns (16 SIMD lanes of 64 terms:
 * relative error <= 64 ulp) and the block sums are added in double. */
#define XENT_SUM_BLOCK 1024

/* max of l[n], four accumulators (one per quarter of the row) so consecutive vector maxima do
 * not wait on each other; -inf for n <= 0 */
static float row_max_valid(const float *l, int n) {
    const int q = n > 0 ? n / 4 : 0;
    const float *l1 = l + q, *l2 = l + 2 * q, *l3 = l + 3 * q;
    float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
#pragma omp simd reduction(max : m0, m1, m2, m3)
    for (int v = 0; v < q; v++) {
        m0 = l[v] > m0 ? l[v] : m0;
        m1 = l1[v] > m1 ? l1[v] : m1;
        m2 = l2[v] > m2 ? l2[v] : m2;
        m3 = l3[v] > m3 ? l3[v] : m3;
    }
    for (int v = 4 * q; v < n; v++) m0 = l[v] > m0 ? l[v] : m0;
    m0 = m1 > m0 ? m1 : m0;
    m2 = m3 > m2 ? m3 : m2;
    return m2 > m0 ? m2 : m0;
}

static float sum_exp_block(const float *l, int n, float mx) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < n; v++) s += cpu_expf(l[v] - mx);
    return s;
}

static float row_sum_exp(const float *l, int n, float mx) {
    double s = 0.0;
    for (int v0 = 0; v0 < n; v0 += XENT_SUM_BLOCK)
        s += sum_exp_block(l + v0, n - v0 < XENT_SUM_BLOCK ? n - v0 : XENT_SUM_BLOCK, mx);
    return (float)s;
}

/* xent_row_max: logits[N, Vl] -> row_max[N] = max over columns [0, v_valid) */
void cpu_xent_row_max(float *row_max, const float *logits, int N, int Vl, int v_valid) {
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) row_max[i] = row_max_valid(logits + (size_t)i * Vl, v_valid);
}

/* xent_row_sumexp: logits[N, Vl], row_max[N] -> row_sumexp[N] = sum_{v < v_valid} exp(l - max) */
void cpu_xent_row_sumexp(float *row_sumexp, const float *logits, const float *row_max, int N,
                         int Vl, int v_valid) {
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++)
        row_sumexp[i] = row_sum_exp(logits + (size_t)i * Vl, v_valid, row_max[i]);
}

/* xent_target_logit: logits[N, Vl], targets[N] -> target_logit[N] = logits[i, targets[i] - v_start]
 * when the target is in this shard, else 0 */
void cpu_xent_target_logit(float *target_logit, const float *logits, const int *targets, int N,
                           int Vl, int v_start) {
    for (int i = 0; i < N; i++) {
        const int t = targets[i] - v_start;
        target_logit[i] = (t >= 0 && t < Vl) ? logits[(size_t)i * Vl + t] : 0.0f;
    }
}

/* xent_losses: losses[N] = log(row_sumexp) + row_max - target_logit */
void cpu_xent_losses(float *losses, const float *row_max, const float *row_sumexp,
                     const float *target_logit, int N) {
    for (int i = 0; i < N; i++)
        losses[i] = (float)(log((double)row_sumexp[i]) + (double)row_max[i] -
                            (double)target_logit[i]);
}

/* one row in place: l[v] = scale * exp(l[v] - mx) for v < n_valid, 0 for padding up to Vl */
static void softmax_scaled_row(float *l, int n_valid, int Vl, float mx, float scale) {
    for (int v = 0; v < n_valid; v++) l[v] = scale * cpu_expf(l[v] - mx);
    for (int v = n_valid; v < Vl; v++) l[v] = 0.0f;
}

/* xent_backward_inplace: logits[N, Vl] -> dlogits = dloss * (softmax - onehot(target)),
 * padding columns [v_valid, Vl) = 0. row_max, row_sumexp are the global (all-reduced) values. */
void cpu_xent_backward_inplace(float *logits, const float *row_max, const float *row_sumexp,
                               const int *targets, float dloss, int N, int Vl, int v_valid,
                               int v_start) {
    const int valid = v_valid < 0 ? 0 : v_valid;
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float *l = logits + (size_t)i * Vl;
        softmax_scaled_row(l, valid, Vl, row_max[i], dloss / row_sumexp[i]);
        const int t = targets[i] - v_start;
        if (t >= 0 && t < valid) l[t] -= dloss;
    }
}
