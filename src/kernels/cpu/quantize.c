/* quantize.c — low-precision stores emulated in fp32 (see kernels/precision.h): round in place,
 * or round while copying (the weights copy of the master weights); and the overflow check of
 * loss scaling. Element-wise, split over the OpenMP threads with cpu_thread_range.
 *
 * The rounding here is bit for bit precision.h's round_bf16 / round_fp16 (test_ops checks it
 * over a sweep of all bit patterns), written branch-free with integer operations so the loops
 * vectorise: round_fp16's (_Float16) cast is one scalar conversion per element that waits on
 * its destination register (~3.5 ns per element, 2.3 GB/s in place on the 2-core VMs), and
 * round_bf16's Inf/NaN branch keeps its loop scalar. The same values in 16-bit storage
 * (store_as / load_as: the weights copy kept as bf16 or fp16). Uses: nothing. */
#include <math.h>
#include "kernels/cpu/cpu_kernels.h"

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* round_bf16: cpu_kernels.h's cpu_bf16_round (matmul.c's bf16 operands use its bits too) */
static inline float bf16_round(float x) { return cpu_bf16_round(x); }

/* round_fp16: IEEE binary16, round to nearest even, as the x86 conversion does it:
 *  - |x| >= 2^-14 (binary16 normals): 10 mantissa bits, the same trick as bf16 at bit 13;
 *  - |x| >= 65520 (halfway between 65504 and 65536, a tie that rounds to the even 65536): Inf;
 *  - |x| < 2^-14 (binary16 subnormals, spacing 2^-24): (|x| + 0.5) - 0.5 rounds |x| to a
 *    multiple of ulp(0.5) = 2^-24, nearest even, in the float addition itself (ISO C mode: the
 *    pair is not folded away); that includes rounding up to 2^-14 and down to 0;
 *  - NaN: quiet, the payload cut to binary16's 10 bits; the sign is kept throughout. */
static inline float fp16_round(float x) {
    const uint32_t u = f32_bits(x), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    uint32_t r = (a + 0x0fffu + ((a >> 13) & 1u)) & 0xffffe000u;
    r = a >= 0x477ff000u ? 0x7f800000u : r;
    r = a > 0x7f800000u ? (a | 0x00400000u) & 0xffffe000u : r;
    const uint32_t sub = f32_bits((f32_from_bits(a) + 0.5f) - 0.5f);
    r = a < 0x38800000u ? sub : r;
    return f32_from_bits(r | sign);
}

/* dst[n] = src[n] rounded to type t, on the calling thread (dst may be src) */
void cpu_round_range(float *dst, const float *src, size_t n, dtype_t t) {
    if (t == DT_BF16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) dst[i] = bf16_round(src[i]);
    } else if (t == DT_FP16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) dst[i] = fp16_round(src[i]);
    } else if (dst != src) {
        memcpy(dst, src, n * sizeof *dst);
    }
}

/* quantize: x[n] rounded in place to the nearest value of type t (nothing for fp32) */
void cpu_quantize(float *x, size_t n, dtype_t t) {
    if (t == DT_FP32) return;
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        cpu_round_range(x + lo, x + lo, hi - lo, t);
    }
}

/* quantize_copy: dst[n] = src[n] rounded to type t (a plain copy for fp32) */
void cpu_quantize_copy(float *dst, const float *src, size_t n, dtype_t t) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        cpu_round_range(dst + lo, src + lo, hi - lo, t);
    }
}

/* whether any of x[lo, hi) is Inf or NaN: exponent bits all ones */
static int nonfinite_range(const float *x, size_t lo, size_t hi) {
    uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
    for (size_t i = lo; i < hi; i++) bad |= (f32_bits(x[i]) & 0x7f800000u) == 0x7f800000u;
    return bad != 0;
}

/* any_nonfinite: whether x[n] holds an Inf or NaN */
bool cpu_any_nonfinite(const float *x, size_t n) {
    int bad = 0;
#pragma omp parallel reduction(| : bad) if (n > CPU_PAR_MIN)
    {
        size_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        bad |= nonfinite_range(x, lo, hi);
    }
    return bad != 0;
}

/* ---- 16-bit storage (ops.h store_as / load_as) ---- */

static inline uint16_t fp16_bits(float x) {
    const _Float16 h = (_Float16)fp16_round(x); /* exact: already a binary16 value */
    uint16_t b;
    memcpy(&b, &h, sizeof b);
    return b;
}

/* store_as: dst[n] of type t = src[n] rounded to t (a plain copy for fp32) */
void cpu_store_as(void *dst, const float *src, size_t n, dtype_t t) {
    if (t == DT_FP32) {
        cpu_quantize_copy(dst, src, n, DT_FP32);
        return;
    }
    uint16_t *d = dst;
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        if (t == DT_BF16) {
#pragma omp simd
            for (size_t i = lo; i < hi; i++) d[i] = cpu_bf16_bits(src[i]);
        } else {
            for (size_t i = lo; i < hi; i++) d[i] = fp16_bits(src[i]);
        }
    }
}

/* load_as: dst[n] = the fp32 values of src[n] of type t (exact) */
void cpu_load_as(float *dst, const void *src, size_t n, dtype_t t) {
    if (t == DT_FP32) {
        cpu_quantize_copy(dst, src, n, DT_FP32);
        return;
    }
    const uint16_t *s = src;
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        if (t == DT_BF16) {
#pragma omp simd
            for (size_t i = lo; i < hi; i++) dst[i] = cpu_half_to_float(s[i], DT_BF16);
        } else {
            for (size_t i = lo; i < hi; i++) dst[i] = cpu_half_to_float(s[i], DT_FP16);
        }
    }
}
