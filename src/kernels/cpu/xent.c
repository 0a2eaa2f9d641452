/* xent.c — cross-entropy over (possibly vocab-sharded, padded) logits, split into the local
 * pieces of ops.h so model/ can all-reduce between them under tensor parallelism:
 * row max -> row sum of exp -> target logit -> losses, and the in-place backward.
 * Rows in parallel; columns >= v_valid are padding and are never read for the loss.
 * An empty shard (v_valid <= 0) gives max -inf and sumexp 0, the identities of the all-reduces.
 * Uses: cpu_expf, libm. */
#include "kernels/cpu/cpu_kernels.h"
#include <math.h>

/* xent_row_max: logits[N, Vl] -> row_max[N] = max over columns [0, v_valid) */
void cpu_xent_row_max(float *row_max, const float *logits, int N, int Vl, int v_valid) {
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vl;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int v = 0; v < v_valid; v++) mx = l[v] > mx ? l[v] : mx;
        row_max[i] = mx;
    }
}

/* xent_row_sumexp: logits[N, Vl], row_max[N] -> row_sumexp[N] = sum_{v < v_valid} exp(l - max)
 * (accumulated in double: V is ~50k terms) */
void cpu_xent_row_sumexp(float *row_sumexp, const float *logits, const float *row_max, int N,
                         int Vl, int v_valid) {
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vl;
        const float mx = row_max[i];
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < v_valid; v++) sum += (double)cpu_expf(l[v] - mx);
        row_sumexp[i] = (float)sum;
    }
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

/* xent_backward_inplace: logits[N, Vl] -> dlogits = dloss * (softmax - onehot(target)),
 * padding columns [v_valid, Vl) = 0. row_max, row_sumexp are the global (all-reduced) values. */
void cpu_xent_backward_inplace(float *logits, const float *row_max, const float *row_sumexp,
                               const int *targets, float dloss, int N, int Vl, int v_valid,
                               int v_start) {
    const int valid = v_valid < 0 ? 0 : v_valid;
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float *l = logits + (size_t)i * Vl;
        const float mx = row_max[i], scale = dloss / row_sumexp[i];
#pragma omp simd
        for (int v = 0; v < valid; v++) l[v] = scale * cpu_expf(l[v] - mx);
        for (int v = valid; v < Vl; v++) l[v] = 0.0f;
        const int t = targets[i] - v_start;
        if (t >= 0 && t < valid) l[t] -= dloss;
    }
}
