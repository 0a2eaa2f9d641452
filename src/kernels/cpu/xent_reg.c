/* xent_reg.c — the regularised cross-entropy pieces of ops.h: label smoothing over the real
 * vocabulary (padding columns excluded) and PaLM's z-loss, on (possibly vocab-sharded) logits.
 * With lse_i = log(sum_v exp(z_iv)) over the real vocabulary V and smoothing e, the loss is
 * PyTorch's cross_entropy(label_smoothing = e): the cross-entropy against the target
 * distribution (1 - e) onehot + e / V,
 *   loss_i = lse_i - (1 - e) z_i,target - (e / V) sum_v z_iv,
 * and the z-loss zc * lse_i^2, whose gradient is 2 zc lse_i softmax_i. The row sum of the logits
 * is a local piece (all-reduced over tp by model/) like xent.c's max and sum of exp.
 * Rows in parallel. Uses: cpu_expf, libm. */
#include "kernels/cpu/cpu_kernels.h"
#include <math.h>

/* xent_row_sum: row_sum[N] = sum over columns [0, v_valid) of logits[N, Vl], in double */
void cpu_xent_row_sum(float *row_sum, const float *logits, int N, int Vl, int v_valid) {
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vl;
        double s = 0.0;
        for (int v = 0; v < v_valid; v++) s += l[v];
        row_sum[i] = (float)s;
    }
}

static double row_lse(const float *row_max, const float *row_sumexp, int i) {
    return log((double)row_sumexp[i]) + (double)row_max[i];
}

void cpu_xent_losses_regularized(float *losses, float *zloss, const float *row_max,
                                 const float *row_sumexp, const float *target_logit,
                                 const float *row_sum, int N, int V, float e, float zc) {
    for (int i = 0; i < N; i++) {
        const double lse = row_lse(row_max, row_sumexp, i);
        losses[i] = (float)(lse - (1.0 - e) * target_logit[i] - (double)e / V * row_sum[i]);
        zloss[i] = (float)(zc * lse * lse);
    }
}

void cpu_xent_backward_regularized_inplace(float *logits, const float *row_max,
                                           const float *row_sumexp, const int *targets,
                                           float dloss, int N, int Vl, int v_valid, int v_start,
                                           int V, float e, float zc) {
    const int valid = v_valid < 0 ? 0 : v_valid;
    const float uniform = dloss * e / (float)V;
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float *l = logits + (size_t)i * Vl;
        const double lse = row_lse(row_max, row_sumexp, i);
        const float mx = row_max[i];
        const float s = (float)(dloss * (1.0 + 2.0 * zc * lse) / row_sumexp[i]);
        for (int v = 0; v < valid; v++) l[v] = s * cpu_expf(l[v] - mx) - uniform;
        for (int v = valid; v < Vl; v++) l[v] = 0.0f;
        const int t = targets[i] - v_start;
        if (t >= 0 && t < valid) l[t] -= dloss * (1.0f - e);
    }
}
