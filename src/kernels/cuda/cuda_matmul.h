/* cuda_matmul.h — switches of the CUDA products (kernels/cuda/matmul.cu) that are not part of
 * the ops table.
 * Owns: llmt_cuda_allow_tf32. Uses: nothing. Used by: kernels/cuda/ (and whoever sets it). */
#ifndef LLMT_CUDA_MATMUL_H
#define LLMT_CUDA_MATMUL_H
#include <stdbool.h>
#ifdef __cplusplus
extern "C" {
#endif

/* fp32 products may run on TF32 tensor cores (10-bit mantissa inputs) when set; default false:
 * fp32 products are exact fp32 (CUBLAS_COMPUTE_32F), matching the CPU backend to rounding. */
extern bool llmt_cuda_allow_tf32;

#ifdef __cplusplus
}
#endif
#endif
