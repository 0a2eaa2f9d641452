/* cuda_common.cuh — device helpers shared by the CUDA kernels: warp and block reductions (fixed
 * order: the same bits on every run for a given block size), the bf16/fp16 rounding of a
 * low-precision store (bit for bit kernels/cpu/quantize.c, hence kernels/precision.h), launch
 * sizes for grid-stride loops, and the one growable device buffer an op may keep.
 * Owns: inline functions only (no state). Uses: core/cuda_check.h, kernels/precision.h.
 * Used by: the kernels/cuda .cu files. Kept stable: other CUDA files include it read-only. */
#ifndef LLMT_CUDA_COMMON_CUH
#define LLMT_CUDA_COMMON_CUH
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include "core/cuda_check.h" /* and core/error.h, which has C linkage for C++ itself */
#include "kernels/precision.h"

/* Threads per block of the element-wise kernels and of the one-block-per-row kernels. */
#define CUDA_ELEM_THREADS 256
#define CUDA_ROW_THREADS 256
/* Grid-stride loops stop growing the grid here (enough blocks to fill any current GPU; the
 * result of an element-wise kernel never depends on the grid). */
#define CUDA_MAX_ELEM_BLOCKS 8192

/* Blocks for n independent work items of `threads` each, capped: a grid-stride loop covers
 * the rest. At least 1 so a launch with n = 0 stays a valid (empty) launch. */
static inline unsigned cuda_elem_blocks(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    b = b < CUDA_MAX_ELEM_BLOCKS ? b : CUDA_MAX_ELEM_BLOCKS;
    return (unsigned)(b > 0 ? b : 1);
}

/* The one static device buffer of an op (cuda_kernels.h ops may not allocate per call):
 * grown with cudaMalloc on first use and whenever a call needs more; cudaFree of the old one
 * waits for the device, so no kernel still reads it. Returns *buf. */
static inline void *cuda_grow_buffer(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        if (*buf) CUDA_CHECK(cudaFree(*buf));
        *buf = NULL;
        CUDA_CHECK(cudaMalloc(buf, bytes));
        *cap = bytes;
    }
    return *buf;
}

/* ---------------------------------------------------------------- reductions
 * warp_*: over the 32 lanes of a full warp (all lanes must call), result in every lane.
 * block_*: over the whole block (blockDim.x a multiple of 32, at most 1024; every thread
 * must call), result in every thread. The tree is fixed, so a sum is deterministic. */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* block_reduce: warp_op over the block, `none` the value of a lane past the last warp. The
 * per-warp values are parked in shared memory (one array per instantiation); the first
 * __syncthreads protects them from a previous call's readers. Every warp then reduces the parked
 * values itself (the same tree in every warp), which gives every thread the result without a
 * third barrier. */
template <typename T, T (*warp_op)(T)>
__device__ __forceinline__ T block_reduce(T v, T none) {
    __shared__ T part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_op(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    return warp_op(lane < n_warps ? part[lane] : none);
}

__device__ __forceinline__ float block_sum(float v) {
    return block_reduce<float, warp_sum>(v, 0.0f);
}

__device__ __forceinline__ double block_sum_double(double v) {
    return block_reduce<double, warp_sum_double>(v, 0.0);
}

/* max; -INFINITY for a block that saw nothing. NaN: fmaxf drops it (the CPU's comparison
 * form keeps a leading NaN out as well; a NaN logit is reported by the anomaly check). */
__device__ __forceinline__ float block_max(float v) {
    return block_reduce<float, warp_max>(v, -INFINITY);
}

/* ---------------------------------------------------------------- low-precision stores
 * Bit for bit kernels/cpu/quantize.c's bf16_round / fp16_round (= precision.h round_bf16 /
 * round_fp16). Integer forms rather than __float2bfloat16_rn / __float2half_rn: those give a
 * canonical NaN, where the CPU keeps the (quieted, cut) payload. */

/* bf16: the upper 16 bits, nearest even (a carry past the largest finite value gives Inf);
 * Inf stays Inf, NaN stays NaN with the quiet bit set. */
__device__ __forceinline__ float bf16_round_dev(float x) {
    const uint32_t u = __float_as_uint(x);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t special = (u & 0x007fffffu) ? (u | 0x00400000u) & 0xffff0000u : u;
    return __uint_as_float((u & 0x7f800000u) == 0x7f800000u ? special : rounded);
}

/* fp16 (IEEE binary16, nearest even): normals by the bf16 trick at bit 13; |x| >= 65520 is
 * Inf; binary16 subnormals (|x| < 2^-14) by (|x| + 0.5) - 0.5, which rounds to a multiple of
 * 2^-24 in the additions themselves (__fadd_rn: never contracted or reassociated); NaN quiet
 * with the payload cut to 10 bits; the sign kept. */
__device__ __forceinline__ float fp16_round_dev(float x) {
    const uint32_t u = __float_as_uint(x), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    uint32_t r = (a + 0x0fffu + ((a >> 13) & 1u)) & 0xffffe000u;
    r = a >= 0x477ff000u ? 0x7f800000u : r;
    r = a > 0x7f800000u ? (a | 0x00400000u) & 0xffffe000u : r;
    const uint32_t sub = __float_as_uint(__fadd_rn(__fadd_rn(__uint_as_float(a), 0.5f), -0.5f));
    r = a < 0x38800000u ? sub : r;
    return __uint_as_float(r | sign);
}

/* x as stored in type t (fp32: unchanged) */
__device__ __forceinline__ float round_to_dev(dtype_t t, float x) {
    return t == DT_BF16 ? bf16_round_dev(x) : t == DT_FP16 ? fp16_round_dev(x) : x;
}

/* One element of a tensor stored as type t (ops.h store_as), as fp32 (exact). */
__device__ __forceinline__ float load_elem_dev(const void *p, size_t i, dtype_t t) {
    if (t == DT_FP32) return ((const float *)p)[i];
    const unsigned short b = ((const unsigned short *)p)[i];
    if (t == DT_BF16) return __uint_as_float((unsigned)b << 16);
    return __half2float(__ushort_as_half(b));
}

/* x rounded to type t, stored in t's own bits (the upper half of bf16's fp32 bits). */
__device__ __forceinline__ unsigned short store_elem_bits_dev(float x, dtype_t t) {
    const float r = round_to_dev(t, x);
    if (t == DT_BF16) return (unsigned short)(__float_as_uint(r) >> 16);
    return __half_as_ushort(__float2half_rn(r));
}
#endif
