/* philox.cuh — core/rng.c's Philox-4x32-10 and the draws built on it, on the device, bit for bit:
 * a dropout mask or router noise drawn on the GPU equals the CPU backend's (the same global
 * counters: kernels/ops.h dropout_mask_t, moe_noise_forward).
 * Owns: device functions. Uses: nothing. Used by: the kernels/cuda .cu files. */
#ifndef LLMT_PHILOX_CUH
#define LLMT_PHILOX_CUH
#include <stdint.h>

struct philox4 {
    uint32_t v[4];
};

/* 10 rounds, constants of core/rng.c */
__device__ __forceinline__ philox4 philox4x32_10_dev(uint32_t c0, uint32_t c1, uint32_t c2,
                                                     uint32_t c3, uint32_t k0, uint32_t k1) {
#pragma unroll
    for (int r = 0; r < 10; r++) {
        const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    philox4 out = {{c0, c1, c2, c3}};
    return out;
}

/* core/rng.c rng_normal(key, index): Box-Muller in double from words 0 and 1 of the block at
 * counter {index, index >> 32, "NORM", 0}. */
__device__ __forceinline__ float rng_normal_dev(uint32_t k0, uint32_t k1, uint64_t index) {
    const philox4 r = philox4x32_10_dev((uint32_t)index, (uint32_t)(index >> 32), 0x4e4f524du, 0u,
                                        k0, k1);
    const double u1 = ((double)r.v[0] + 0.5) / 4294967296.0;
    const double u2 = ((double)r.v[1] + 0.5) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* The dropout factor of global (row, col) with counter word 3 (kernels/ops.h dropout_mask_t):
 * kept iff word col % 4 of the block at {col / 4, row, row >> 32, word3} >= threshold. */
__device__ __forceinline__ float dropout_factor_dev(uint32_t k0, uint32_t k1, uint32_t threshold,
                                                    float scale, uint64_t row, uint64_t col,
                                                    uint32_t word3) {
    const philox4 r = philox4x32_10_dev((uint32_t)(col >> 2), (uint32_t)row, (uint32_t)(row >> 32),
                                        word3, k0, k1);
    return r.v[col & 3] >= threshold ? scale : 0.0f;
}
#endif
