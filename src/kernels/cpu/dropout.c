/* dropout.c — dropout masks drawn from Philox-4x32-10 on global indices (ops.h dropout_mask_t),
 * and dropout on a [rows, cols] tensor. No mask is stored: forward, backward and any
 * recomputation draw it again from (key, global row, global column).
 * One Philox block gives four 32-bit words: the mask of four consecutive global columns.
 * Rows in parallel (static schedule), so the result never depends on the thread count.
 * Uses: core/rng.h. */
#include "kernels/cpu/cpu_kernels.h"
#include "core/rng.h"

/* f[0, n) = the mask's factors (0 or scale) of global columns [col, col + n) of global row
 * `row`, with counter word 3 = word3. */
void cpu_dropout_factors(float *f, const dropout_mask_t *m, uint64_t row, uint64_t col, int n,
                         uint32_t word3) {
    const philox_key_t key = {{m->key[0], m->key[1]}};
    philox_ctr_t r = {{0, 0, 0, 0}};
    uint64_t group = UINT64_MAX;
    for (int j = 0; j < n; j++) {
        const uint64_t g = col + (uint64_t)j;
        if (g >> 2 != group) {
            group = g >> 2;
            philox_ctr_t c = {{(uint32_t)group, (uint32_t)row, (uint32_t)(row >> 32), word3}};
            r = philox4x32_10(c, key);
        }
        f[j] = r.v[g & 3] >= m->threshold ? m->scale : 0.0f;
    }
}

/* dropout_apply: out[rows, cols] = in * mask; out may alias in. */
void cpu_dropout_apply(float *out, const float *in, size_t rows, int cols,
                       const dropout_mask_t *mask) {
#pragma omp parallel if (rows * (size_t)cols > CPU_PAR_MIN)
    {
        float f[256];
#pragma omp for schedule(static)
        for (size_t i = 0; i < rows; i++)
            for (int c0 = 0; c0 < cols; c0 += 256) {
                const int n = cols - c0 < 256 ? cols - c0 : 256;
                const float *x = in + i * (size_t)cols + c0;
                float *y = out + i * (size_t)cols + c0;
                cpu_dropout_factors(f, mask, mask->row0 + i, (uint64_t)mask->col0 + c0, n,
                                    mask->word3);
                for (int j = 0; j < n; j++) y[j] = x[j] * f[j];
            }
    }
}
