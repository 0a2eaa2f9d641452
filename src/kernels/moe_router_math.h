/* moe_router_math.h — the Mixture-of-Experts router's per-row math, shared by kernels/cpu/moe.c
 * and kernels/cuda/moe.cu (one thread per row there): the gating noise's softplus and sigmoid,
 * the softmax + top-k of one row and its backward. Router rows are short (E experts): sums in
 * double, exp/log in double. Each backend compiles this text with its own math library.
 * Owns: moe_softplus, moe_sigmoid, moe_row_softmax_topk, moe_row_dprobs, moe_row_dlogits.
 * Uses: host_device.h, libm. */
#ifndef LLMT_MOE_ROUTER_MATH_H
#define LLMT_MOE_ROUTER_MATH_H
#include <math.h>
#include <stdbool.h>
#include "kernels/host_device.h"

/* log(1 + e^x) without overflow for large x or loss of precision for very negative x */
KERNEL_FN float moe_softplus(float x) { return log1pf(expf(-fabsf(x))) + fmaxf(x, 0.0f); }

/* 1 / (1 + e^-x), never computing e^(large) */
KERNEL_FN float moe_sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

/* Whether expert a ranks before expert b: larger probability, ties to the lower index. */
KERNEL_FN bool moe_ranks_before(const float *p, int a, int b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

/* idx[k] = the k first experts of row p[E] in ranking order. Each pick is the best expert that
 * ranks after the previous pick (the ranking is a total order), so no "taken" marks are needed.
 * NaN probabilities (non-finite logits: the anomaly check reports them) rank nowhere: such a
 * pick falls back to expert j, so idx stays a valid expert index. */
KERNEL_FN void moe_row_topk(int *idx, const float *p, int E, int k) {
    int prev = -1;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if ((prev < 0 || moe_ranks_before(p, prev, e)) &&
                (best < 0 || moe_ranks_before(p, e, best)))
                best = e;
        idx[j] = best >= 0 ? best : j;
        prev = idx[j];
    }
}

/* One row of moe_softmax_topk: p[E] = softmax(z) (max subtracted, sum in double), *lse =
 * logsumexp; ix[k], g[k] the top k (renormalised over the k when k > 1). */
KERNEL_FN void moe_row_softmax_topk(float *p, float *lse, int *ix, float *g, const float *z, int E,
                                    int k) {
    float m = -INFINITY;
    for (int e = 0; e < E; e++) m = z[e] > m ? z[e] : m;
    double sum = 0.0;
    for (int e = 0; e < E; e++) sum += exp((double)z[e] - (double)m);
    for (int e = 0; e < E; e++) p[e] = (float)(exp((double)z[e] - (double)m) / sum);
    *lse = (float)((double)m + log(sum));
    moe_row_topk(ix, p, E, k);
    double chosen = 0.0;
    for (int j = 0; j < k; j++) chosen += p[ix[j]];
    for (int j = 0; j < k; j++) g[j] = k > 1 ? (float)(p[ix[j]] / chosen) : p[ix[j]];
}

/* d[E] = dL/dprobs of one row: dprob_bias[e] (or 0) plus the gates' part at the chosen experts.
 * k > 1, g_j = p_j / S with S = sum_j p_j:  dL/dp_{e_j} += (dg_j - sum_j' dg_j' g_j') / S;
 * k = 1, g = p:                             dL/dp_{e_1} += dg_1.
 * (The sum over j' is the renormalisation's share; each term is computed in double.) */
KERNEL_FN void moe_row_dprobs(float *d, const float *p, const int *ix, const float *g,
                              const float *dg, const float *dprob_bias, int E, int k) {
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
KERNEL_FN void moe_row_dlogits(float *d, const float *p, float lse, float dz, int E) {
    double pd = 0.0;
    for (int e = 0; e < E; e++) pd += (double)p[e] * d[e];
    const double zterm = 2.0 * (double)dz * (double)lse;
    for (int e = 0; e < E; e++) d[e] = (float)((double)p[e] * ((double)d[e] - pd + zterm));
}
#endif
