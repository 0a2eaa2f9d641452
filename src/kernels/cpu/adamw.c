/* adamw.c — the optimizer's element-wise kernels: the fused AdamW update (one pass over param,
 * grad, m, v: 28 bytes of traffic per parameter, memory bound) and the sum of squares used for
 * the global gradient norm. Uses: kernels/adamw_math.h (the update's math, one definition for
 * both backends), libm. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/adamw_math.h"
#include <math.h>

/* Reads the range as four interleaved streams: one sequential stream per core reaches ~16 GB/s
 * on the 2-core VMs, four reach ~22 GB/s (more misses in flight). */
static double sumsq_range(const float *x, size_t i0, size_t i1) {
    const size_t q = (i1 - i0) / 4;
    const float *a = x + i0, *b = a + q, *c = b + q, *d = c + q;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < q; i++)
        s += ((double)a[i] * a[i] + (double)b[i] * b[i]) +
             ((double)c[i] * c[i] + (double)d[i] * d[i]);
    for (size_t i = i0 + 4 * q; i < i1; i++) s += (double)x[i] * x[i];
    return s;
}

/* sumsq: x[n] -> sum x^2, accumulated in double */
double cpu_sumsq(const float *x, size_t n) {
    double s = 0.0;
#pragma omp parallel reduction(+ : s) if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        s += sumsq_range(x, i0, i1);
    }
    return s;
}

static void adamw_range(float *param, const float *grad, float *m, float *v,
                        const adamw_coef_t *k_ptr, size_t i0, size_t i1) {
    const adamw_coef_t k = *k_ptr;
    for (size_t i = i0; i < i1; i++) adamw_element(&param[i], &m[i], &v[i], grad[i], k);
}

/* adamw_update: param[n], grad[n], m[n], v[n] updated in one pass, t counted from 1; the
 * constants and the element's formula in kernels/adamw_math.h (shared with the CUDA backend).
 * (sqrtf vectorises only with -fno-math-errno, which Makefile.inc sets.) */
void cpu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                      int t) {
    const adamw_coef_t k = adamw_step_coef(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        adamw_range(param, grad, m, v, &k, i0, i1);
    }
}
