/* adamw.c — the optimizer's element-wise kernels: the fused AdamW update (one pass over param,
 * grad, m, v: 28 bytes of traffic per parameter, memory bound) and the sum of squares used for
 * the global gradient norm. Uses: libm. */
#include "kernels/cpu/cpu_kernels.h"
#include <math.h>

/* sumsq: x[n] -> sum x^2, accumulated in double */
double cpu_sumsq(const float *x, size_t n) {
    double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

/* adamw_update: param[n], grad[n], m[n], v[n] updated in one pass, t counted from 1:
 *   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p = p - lr * ( m_hat / (sqrt(v_hat) + eps) + wd * p ),  m_hat = m / (1-b1^t), v_hat = v / (1-b2^t)
 * evaluated in the order of PyTorch's single-tensor AdamW (m by lerp, decay first,
 * sqrt(v) / sqrt(1-b2^t) + eps), so rounding stays close to the reference. sqrtf vectorises only with -fno-math-errno (set in Makefile.inc). */
void cpu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                      int t) {
    const double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    const float step_size = (float)((double)lr / bc1);
    const float sqrt_bc2 = (float)sqrt(bc2);
    const float decay = 1.0f - lr * weight_decay;
    const float one_m_b1 = 1.0f - beta1, one_m_b2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float g = grad[i] * grad_scale;
        const float mi = m[i] + one_m_b1 * (g - m[i]); /* torch: m.lerp_(g, 1-b1) */
        const float vi = beta2 * v[i] + one_m_b2 * g * g;
        const float denom = sqrtf(vi) / sqrt_bc2 + eps;
        param[i] = param[i] * decay - step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}
