/* adamw.cu — the CUDA backend's fused AdamW update: one pass over param, grad, m, v (28 bytes
 * per parameter: memory bound), a grid-stride loop. The per-step constants are computed on the
 * host exactly as kernels/cpu/adamw.c does (bias corrections in double, then rounded to float),
 * and the update is evaluated in the same order (PyTorch's single-tensor AdamW: m by lerp,
 * decoupled decay first, sqrt(v) / sqrt(1 - b2^t) + eps).
 * Owns: the kernel and its launcher. Uses: cuda_common.cuh. Used by: ops_cuda.cu. */
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

/* per-step constants of the update (adamw.c's adamw_coef_t) */
struct adamw_coef {
    float one_m_b1, beta2, one_m_b2, eps, decay, step_size, sqrt_bc2, grad_scale;
};

/* param[n], m[n], v[n] updated from grad[n] */
static __global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n,
                                    adamw_coef k) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float g = grad[i] * k.grad_scale;
        const float mi = m[i] + k.one_m_b1 * (g - m[i]); /* torch: m.lerp_(g, 1-b1) */
        const float vi = k.beta2 * v[i] + k.one_m_b2 * g * g;
        const float denom = sqrtf(vi) / k.sqrt_bc2 + k.eps;
        param[i] = param[i] * k.decay - k.step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

/* adamw_update: t counted from 1 (ops.h):
 *   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p = p - lr * ( m_hat / (sqrt(v_hat) + eps) + wd * p ) */
void cuda_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                       int t) {
    if (!n) return;
    const double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    adamw_coef k;
    k.one_m_b1 = 1.0f - beta1;
    k.beta2 = beta2;
    k.one_m_b2 = 1.0f - beta2;
    k.eps = eps;
    k.decay = 1.0f - lr * weight_decay;
    k.step_size = (float)((double)lr / bc1);
    k.sqrt_bc2 = (float)sqrt(bc2);
    k.grad_scale = grad_scale;
    adamw_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(param, grad, m, v,
                                                                                n, k);
    CUDA_CHECK_LAUNCH();
}
