/* host_device.h — one marker for the functions both backends compile from the same text: plain
 * `static inline` in C (the CPU backend), `__host__ __device__ static inline` under nvcc (the
 * CUDA backend's kernels call them on the device). Such a function is the one definition of a
 * piece of kernel math (adamw_math.h, moe_router_math.h): each backend's numbers are those of
 * its own compiler and math library, from one source.
 * Owns: KERNEL_FN. Uses: nothing. Used by: kernels/ headers shared by cpu/ and cuda/. */
#ifndef LLMT_HOST_DEVICE_H
#define LLMT_HOST_DEVICE_H
#ifdef __CUDACC__
#define KERNEL_FN __host__ __device__ static inline
#else
#define KERNEL_FN static inline
#endif
#endif
