/* rope_math.h — RoPE's inverse frequencies, the one definition for every backend (the angle
 * tables [T, hs/2] are computed from it on the host, model/gpt.c, and copied to the device, so
 * the CPU and CUDA backends rotate by the same fp32 angles).
 *
 *   inv_i = 1 / theta^(2i/hs)                                   (Hugging Face's LlamaRotaryEmbedding)
 *
 * With rope_scaling = 'llama3' (Llama 3.1's long-context adjustment), as Hugging Face's
 * _compute_llama3_parameters (transformers >= 4.43, modeling_rope_utils.py) and Meta's
 * apply_scaling define it, in fp32 like theirs: with wavelength w = 2 pi / inv_i, L =
 * original_max_positions, lo = L / low_freq_factor, hi = L / high_freq_factor:
 *   w < hi:  inv_i unchanged;   w > lo:  inv_i / factor;
 *   otherwise, with s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor):
 *            (1 - s) inv_i / factor + s inv_i.
 * (No attention scaling: llama3's attention factor is 1.)
 * Owns: rope_freq_t, rope_inv_freq. Uses: host_device.h, libm. Used by: model/gpt.c, spec.h. */
#ifndef LLMT_ROPE_MATH_H
#define LLMT_ROPE_MATH_H
#include <math.h>
#include <stdbool.h>
#include "kernels/host_device.h"

typedef struct rope_freq {
    double theta;                 /* &model rope_theta */
    bool llama3;                  /* &model rope_scaling = 'llama3' */
    double factor, low_freq_factor, high_freq_factor; /* rope_scaling_factor, rope_*_freq_factor */
    int original_max_positions;   /* rope_original_max_positions */
} rope_freq_t;

/* The inverse frequency of pair i (0 <= i < hs/2) of a head of size hs. */
KERNEL_FN float rope_inv_freq(const rope_freq_t *r, int i, int hs) {
    const float inv = 1.0f / powf((float)r->theta, (float)(2 * i) / (float)hs);
    if (!r->llama3) return inv;
    const float L = (float)r->original_max_positions, factor = (float)r->factor;
    const float lo_wl = (float)((double)r->original_max_positions / r->low_freq_factor);
    const float hi_wl = (float)((double)r->original_max_positions / r->high_freq_factor);
    const float wavelen = (float)(2.0 * 3.14159265358979323846) / inv;
    if (wavelen < hi_wl) return inv;
    if (wavelen > lo_wl) return inv / factor;
    const float s = (L / wavelen - (float)r->low_freq_factor) /
                    (float)(r->high_freq_factor - r->low_freq_factor);
    return (1.0f - s) * inv / factor + s * inv;
}
#endif
