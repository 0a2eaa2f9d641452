/* precision.h — storage types of tensors: fp32, bf16, fp16. Precision is a property of the
 * tensors a backend stores, not of the code that computes them: the model records which type
 * its weights copy, saved activations and gradients have (gpt_t), and calls the backend's
 * `quantize` op at exactly the points where it stores such a tensor. The CPU backend computes in
 * fp32 and emulates a low-precision store by rounding in place (bf16: round to nearest even,
 * keeping fp32's range; fp16: IEEE binary16, round to nearest even, overflow to +-Inf,
 * subnormals kept), so the numbers are those a GPU would keep; a CUDA backend stores the type
 * itself. Master weights and AdamW state are always fp32. Uses: nothing. Used by: kernels/,
 * model/, train/. */
#ifndef LLMT_PRECISION_H
#define LLMT_PRECISION_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { DT_FP32 = 0, DT_BF16 = 1, DT_FP16 = 2 } dtype_t;

static inline const char *dtype_name(dtype_t t) {
    return t == DT_BF16 ? "bf16" : t == DT_FP16 ? "fp16" : "fp32";
}
/* "fp32" | "bf16" | "fp16" (the &train precision values); DT_FP32 for anything else. */
static inline dtype_t dtype_from_name(const char *s) {
    return !strcmp(s, "bf16") ? DT_BF16 : !strcmp(s, "fp16") ? DT_FP16 : DT_FP32;
}
/* Bytes a GPU stores per element (the CPU backend keeps fp32 and counts 4). */
static inline size_t dtype_bytes(dtype_t t) { return t == DT_FP32 ? 4 : 2; }

/* One value as it would be stored: bf16 rounds the fp32 bits to the upper 16 (nearest even;
 * NaN stays a quiet NaN, Inf stays Inf, values past bf16's largest finite round to Inf); fp16
 * goes through the compiler's IEEE binary16 conversion. */
static inline float round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) { /* Inf or NaN: keep (NaN made quiet) */
        if (u & 0x007fffffu) u |= 0x00400000u;
        u &= 0xffff0000u | (u & 0x00400000u);
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
    }
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
}
/* The bf16 storage of x: the upper 16 bits of round_bf16(x) (exact for a value already rounded). */
static inline uint16_t bf16_bits(float x) {
    const float r = round_bf16(x);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}
static inline float round_fp16(float x) { return (float)(_Float16)x; }
static inline float round_to(dtype_t t, float x) {
    return t == DT_BF16 ? round_bf16(x) : t == DT_FP16 ? round_fp16(x) : x;
}
#endif
