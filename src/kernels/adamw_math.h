/* adamw_math.h — the AdamW update's math, shared by kernels/cpu/adamw.c and
 * kernels/cuda/adamw.cu: the per-step constants (bias corrections in double, then rounded to
 * float; the step size; the decoupled decay factor) and the update of one element, evaluated in
 * the order of PyTorch's single-tensor AdamW (m by lerp, decay first, sqrt(v) / sqrt(1-b2^t) + eps)
 * so rounding stays close to the reference:
 *   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p = p - lr * ( m_hat / (sqrt(v_hat) + eps) + wd * p ),
 *   m_hat = m / (1-b1^t),  v_hat = v / (1-b2^t),  t counted from 1.
 * Owns: adamw_coef_t, adamw_step_coef, adamw_element. Uses: host_device.h, libm. */
#ifndef LLMT_ADAMW_MATH_H
#define LLMT_ADAMW_MATH_H
#include <math.h>
#include "kernels/host_device.h"

/* per-step constants of the update */
typedef struct adamw_coef {
    float one_m_b1, beta2, one_m_b2, eps, decay, step_size, sqrt_bc2, grad_scale;
} adamw_coef_t;

/* The constants of step t (computed on the host, once per call). */
static inline adamw_coef_t adamw_step_coef(float lr, float beta1, float beta2, float eps,
                                           float weight_decay, float grad_scale, int t) {
    const double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    adamw_coef_t k;
    k.one_m_b1 = 1.0f - beta1;
    k.beta2 = beta2;
    k.one_m_b2 = 1.0f - beta2;
    k.eps = eps;
    k.decay = 1.0f - lr * weight_decay;
    k.step_size = (float)((double)lr / bc1);
    k.sqrt_bc2 = (float)sqrt(bc2);
    k.grad_scale = grad_scale;
    return k;
}

/* One element: *param, *m, *v updated from its gradient grad. */
KERNEL_FN void adamw_element(float *param, float *m, float *v, float grad, adamw_coef_t k) {
    const float g = grad * k.grad_scale;
    const float mi = *m + k.one_m_b1 * (g - *m); /* torch: m.lerp_(g, 1-b1) */
    const float vi = k.beta2 * *v + k.one_m_b2 * g * g;
    const float denom = sqrtf(vi) / k.sqrt_bc2 + k.eps;
    *param = *param * k.decay - k.step_size * mi / denom;
    *m = mi;
    *v = vi;
}
#endif
