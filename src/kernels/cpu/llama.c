/* llama.c — the Llama family's element-wise and row ops, forward and backward side by side:
 * RMSNorm, rotary position embedding (RoPE), SwiGLU. (Grouped-query attention is in
 * attention.c, which serves both layouts.)
 *
 * Thread-count independence: RMSNorm's dw sums over rows; it is taken by column chunks, each
 * chunk summing its rows in ascending order (in double), so the bits do not depend on
 * OMP_NUM_THREADS. Everything else is per row or per element. Uses: cpu_expf, libm (sqrtf once
 * per row). */
#include "kernels/cpu/cpu_kernels.h"

#define RMS_COL_CHUNK 64 /* dw columns per unit of work */

/* ---------------------------------------------------------------- RMSNorm */

/* rmsnorm_forward: out[N, C] = inp * rstd * w; rstd[N] = 1 / sqrt(mean(inp^2) + eps) */
void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        const float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = r;
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = x[c] * r * w[c];
    }
}

/* rmsnorm_backward, with xhat = inp * rstd and g = dout * w:
 *   dinp = rstd * (g - xhat * mean_c(g * xhat));   dw += sum_n dout * xhat. */
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C, bool accumulate_dinp,
                          bool overwrite_dw) {
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            float *d = dinp + (size_t)n * C;
            const float r = rstd[n];
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += g[c] * w[c] * x[c] * r;
            const float m = dot / (float)C;
            if (accumulate_dinp) {
#pragma omp simd
                for (int c = 0; c < C; c++) d[c] += r * (g[c] * w[c] - x[c] * r * m);
            } else {
#pragma omp simd
                for (int c = 0; c < C; c++) d[c] = r * (g[c] * w[c] - x[c] * r * m);
            }
        }
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += RMS_COL_CHUNK) {
            const int c1 = c0 + RMS_COL_CHUNK < C ? c0 + RMS_COL_CHUNK : C;
            double acc[RMS_COL_CHUNK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
                const float r = rstd[n];
                for (int c = c0; c < c1; c++) acc[c - c0] += (double)(g[c] * x[c] * r);
            }
            for (int c = c0; c < c1; c++)
                dw[c] = overwrite_dw ? (float)acc[c - c0] : dw[c] + (float)acc[c - c0];
        }
    }
}

/* ---------------------------------------------------------------- RoPE */

/* One rotation of every head of every row by angle (sign * angle): forward sign +1, backward
 * -1 (the transpose of a rotation is the rotation back). */
static void rope_rotate(float *x, const float *cos, const float *sin, int B, int T, int NH,
                        int hs, float sign) {
    const int half = hs / 2;
#pragma omp parallel for schedule(static) if ((size_t)B * T * NH * hs > CPU_PAR_MIN)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = bt % T;
        const float *ct = cos + (size_t)t * half, *st = sin + (size_t)t * half;
        for (int h = 0; h < NH; h++) {
            float *a = x + ((size_t)bt * NH + h) * hs, *b = a + half;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                const float c = ct[i], s = sign * st[i], x1 = a[i], x2 = b[i];
                a[i] = x1 * c - x2 * s;
                b[i] = x2 * c + x1 * s;
            }
        }
    }
}

/* rope_forward: x[B, T, NH*hs] rotated in place, pairs (i, i + hs/2) by angle[t, i] */
void cpu_rope_forward(float *x, const float *cos, const float *sin, int B, int T, int NH, int hs) {
    rope_rotate(x, cos, sin, B, T, NH, hs, 1.0f);
}

/* rope_backward: d[B, T, NH*hs] rotated back in place (R^T d) */
void cpu_rope_backward(float *d, const float *cos, const float *sin, int B, int T, int NH, int hs) {
    rope_rotate(d, cos, sin, B, T, NH, hs, -1.0f);
}

/* ---------------------------------------------------------------- SwiGLU */

static void swiglu_forward_range(float *out, const float *gate, const float *up, size_t i0,
                                 size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + cpu_expf(-g)) * up[i];
    }
}

/* swiglu_forward: out[n] = silu(gate) * up */
void cpu_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        swiglu_forward_range(out, gate, up, i0, i1);
    }
}

/* With s = sigmoid(g): silu(g) = g s, silu'(g) = s (1 + g (1 - s)). s is 1 / (1 + exp(-g)),
 * which is 0 (not NaN) when exp(-g) overflows. */
static void swiglu_backward_range(float *dgate, float *dup, const float *dout,
                                  const float *gate, const float *up, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        const float g = gate[i], u = up[i], d = dout[i];
        const float s = 1.0f / (1.0f + cpu_expf(-g));
        dup[i] = d * g * s;
        dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    }
}

/* swiglu_backward: dgate[n] = dout * up * silu'(gate), dup[n] = dout * silu(gate) */
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        swiglu_backward_range(dgate, dup, dout, gate, up, i0, i1);
    }
}
