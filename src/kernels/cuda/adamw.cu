/* adamw.cu — the CUDA backend's fused AdamW update: one pass over param, grad, m, v (28 bytes
 * per parameter: memory bound), a grid-stride loop. The per-step constants (computed on the host)
 * and the element's update are kernels/adamw_math.h's, the ones kernels/cpu/adamw.c uses
 * (PyTorch's single-tensor AdamW order: m by lerp, decoupled decay first,
 * sqrt(v) / sqrt(1 - b2^t) + eps).
 * Owns: the kernel and its launcher. Uses: cuda_common.cuh, adamw_math.h. Used by: ops_cuda.cu. */
#include <math.h>
#include "kernels/adamw_math.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

/* param[n], m[n], v[n] updated from grad[n] */
static __global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n,
                                    adamw_coef_t k) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adamw_element(&param[i], &m[i], &v[i], grad[i], k);
}

/* adamw_update: t counted from 1 (ops.h; the formula in kernels/adamw_math.h) */
void cuda_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                       int t) {
    if (!n) return;
    const adamw_coef_t k = adamw_step_coef(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    adamw_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(param, grad, m, v,
                                                                                n, k);
    CUDA_CHECK_LAUNCH();
}
