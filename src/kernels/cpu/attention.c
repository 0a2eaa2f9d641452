/* attention.c — causal multi-head self-attention, forward and backward.
 * One (batch, head) pair is one unit of OpenMP work; inside it every product is a gemm_f32
 * that reads the q/k/v heads straight out of qkv[B, T, 3*NH*hs] through the leading dimension
 * 3*NH*hs (no copies). The T x T products are done in row blocks of ATT_BLOCK that stop at the
 * diagonal block, so the masked upper triangle costs at most one block of wasted work.
 * The GEMM runs single-threaded inside the parallel region (gemm_serial_begin/end).
 * Uses: gemm.h. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include <math.h>

#define ATT_BLOCK 128

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* p[0..T) for query t: softmax of p[0..t] in place, p(t..T) = 0 (causal mask) */
static void softmax_causal_row(float *p, int t, int T) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j <= t; j++) mx = p[j] > mx ? p[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; j++) {
        p[j] = cpu_expf(p[j] - mx);
        sum += p[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= t; j++) p[j] *= inv;
    for (int j = t + 1; j < T; j++) p[j] = 0.0f;
}

/* One head. q, k, v: [T, hs] with row stride ld; att: [T, T]; out: [T, hs] with row stride ldo.
 *   att = softmax_causal(q k^T * scale);  out = att v */
static void attention_head_forward(float *out, float *att, const float *q, const float *k,
                                   const float *v, int T, int hs, int ld, int ldo) {
    const float scale = 1.0f / sqrtf((float)hs);
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        const int r1 = min_int(T, r0 + ATT_BLOCK), rows = r1 - r0;
        gemm_f32(false, true, rows, r1, hs, scale,
                    q + (size_t)r0 * ld, ld, k, ld, 0.0f, att + (size_t)r0 * T, T);
        for (int t = r0; t < r1; t++) softmax_causal_row(att + (size_t)t * T, t, T);
        gemm_f32(false, false, rows, hs, r1, 1.0f,
                    att + (size_t)r0 * T, T, v, ld, 0.0f, out + (size_t)r0 * ldo, ldo);
    }
}

/* attention_forward: qkv[B, T, 3*NH*hs] ([q heads | k heads | v heads]) ->
 * out[B, T, NH*hs], att[B, NH, T, T] (softmax probabilities, 0 above the diagonal) */
void cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                           int hs) {
    const int C = NH * hs, ld = 3 * C;
    const int blas_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static) if (B * NH > 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs;
        attention_head_forward(out + (size_t)b * T * C + (size_t)h * hs,
                               att + (size_t)bh * T * T, q, q + C, q + 2 * C, T, hs, ld, C);
    }
    gemm_serial_end(blas_threads);
}

/* Row t of the softmax backward, in place on d (= datt on entry):
 *   d[j] = scale * p[j] * (d[j] - sum_k p[k] d[k])  for j <= t;  d[j] = 0 for t < j < end.
 * The scale of the scores is folded in here so the dq/dk products need no alpha. */
static void softmax_causal_row_backward(float *d, const float *p, int t, int end, float scale) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= t; j++) dot += p[j] * d[j];
#pragma omp simd
    for (int j = 0; j <= t; j++) d[j] = scale * p[j] * (d[j] - dot);
    for (int j = t + 1; j < end; j++) d[j] = 0.0f;
}

/* One head, same strides as forward; dout: [T, hs] stride ldo; ds: [T, T] scratch.
 *   ds = softmax_backward(dout v^T) * scale;  dq = ds k;  dk = ds^T q;  dv = att^T dout */
static void attention_head_backward(float *dq, float *dk, float *dv, float *ds,
                                    const float *dout, const float *q, const float *k,
                                    const float *v, const float *att, int T, int hs, int ld,
                                    int ldo) {
    const float scale = 1.0f / sqrtf((float)hs);
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        const int r1 = min_int(T, r0 + ATT_BLOCK), rows = r1 - r0;
        gemm_f32(false, true, rows, r1, hs, 1.0f,
                    dout + (size_t)r0 * ldo, ldo, v, ld, 0.0f, ds + (size_t)r0 * T, T);
        for (int t = r0; t < r1; t++)
            softmax_causal_row_backward(ds + (size_t)t * T, att + (size_t)t * T, t, r1, scale);
        gemm_f32(false, false, rows, hs, r1, 1.0f,
                    ds + (size_t)r0 * T, T, k, ld, 0.0f, dq + (size_t)r0 * ld, ld);
    }
    /* key/value block [c0, c1) only receives from queries t >= c0 */
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
        const int cols = min_int(T, c0 + ATT_BLOCK) - c0;
        const size_t diag = (size_t)c0 * T + c0;
        gemm_f32(true, false, cols, hs, T - c0, 1.0f, ds + diag,
                    T, q + (size_t)c0 * ld, ld, 0.0f, dk + (size_t)c0 * ld, ld);
        gemm_f32(true, false, cols, hs, T - c0, 1.0f, att + diag,
                    T, dout + (size_t)c0 * ldo, ldo, 0.0f, dv + (size_t)c0 * ld, ld);
    }
}

/* attention_backward: dout[B, T, NH*hs], qkv[B, T, 3*NH*hs], att[B, NH, T, T] ->
 * dqkv[B, T, 3*NH*hs] (overwritten); scratch[B, NH, T, T] is clobbered. */
void cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *att, int B, int T, int NH, int hs) {
    const int C = NH * hs, ld = 3 * C;
    const int blas_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static) if (B * NH > 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const size_t head = (size_t)b * T * ld + (size_t)h * hs;
        float *dq = dqkv + head;
        const float *q = qkv + head;
        attention_head_backward(dq, dq + C, dq + 2 * C, scratch + (size_t)bh * T * T,
                                dout + (size_t)b * T * C + (size_t)h * hs, q, q + C, q + 2 * C,
                                att + (size_t)bh * T * T, T, hs, ld, C);
    }
    gemm_serial_end(blas_threads);
}
