/* embed.c — token + position embedding over a (possibly vocab-sharded) wte, forward and backward.
 * Forward: rows in parallel. Backward: the same token can occur in many rows, so instead of
 * atomics or per-thread copies of dwte the threads split the COLUMNS: each thread adds every
 * row's slice of its column block, in row order (deterministic, race-free). Uses: nothing. */
#include "kernels/cpu/cpu_kernels.h"

#define EMBED_COL_BLOCK 64

/* embed_forward_w: wte and wpe stored as type wt (ops.h): each row is first loaded as fp32
 * (exact), then added as embed_forward does. */
void cpu_embed_forward_w(float *out, const int *tokens, const void *wte, const void *wpe,
                         dtype_t wt, int B, int T, int C, int v_start, int v_count,
                         bool add_pos) {
    if (wt == DT_FP32) {
        cpu_embed_forward(out, tokens, wte, wpe, B, T, C, v_start, v_count, add_pos);
        return;
    }
    const uint16_t *te = wte, *pe = wpe;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int i = 0; i < B * T; i++) {
        const int id = tokens[i] - v_start;
        const bool owned = id >= 0 && id < v_count;
        const uint16_t *e = owned ? te + (size_t)id * C : NULL;
        const uint16_t *p = add_pos ? pe + (size_t)(i % T) * C : NULL;
        float *y = out + (size_t)i * C;
        for (int c = 0; c < C; c++) { /* embed_forward's cases: a missing term is not added */
            const float te = e ? cpu_half_to_float(e[c], wt) : 0.0f;
            const float pe_c = p ? cpu_half_to_float(p[c], wt) : 0.0f;
            y[c] = e && p ? te + pe_c : e ? te : pe_c;
        }
    }
}

/* embed_forward: tokens[B*T], wte[v_count, C] (ids [v_start, v_start+v_count)), wpe[T, C] ->
 * out[B*T, C] = wte[tok - v_start] (0 if not in the shard) + wpe[t] (if add_pos) */
void cpu_embed_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                       int B, int T, int C, int v_start, int v_count, bool add_pos) {
#pragma omp parallel for schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int i = 0; i < B * T; i++) {
        const int id = tokens[i] - v_start;
        const bool owned = id >= 0 && id < v_count;
        const float *e = owned ? wte + (size_t)id * C : NULL;
        const float *p = add_pos ? wpe + (size_t)(i % T) * C : NULL; /* wpe may be NULL */
        float *y = out + (size_t)i * C;
        if (owned && add_pos) {
#pragma omp simd
            for (int c = 0; c < C; c++) y[c] = e[c] + p[c];
        } else if (owned) {
            memcpy(y, e, (size_t)C * sizeof *y);
        } else if (add_pos) {
            memcpy(y, p, (size_t)C * sizeof *y);
        } else {
            memset(y, 0, (size_t)C * sizeof *y);
        }
    }
}

/* embed_backward: dout[B*T, C] -> dwte[v_count, C] += dout rows of owned tokens;
 * dwpe[T, C] += sum over b of dout[b, t] (if add_pos). Accumulates, never overwrites. */
void cpu_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                        int T, int C, int v_start, int v_count, bool add_pos) {
    const int n_blocks = (C + EMBED_COL_BLOCK - 1) / EMBED_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int blk = 0; blk < n_blocks; blk++) {
        const int c0 = blk * EMBED_COL_BLOCK;
        const int width = C - c0 < EMBED_COL_BLOCK ? C - c0 : EMBED_COL_BLOCK;
        for (int i = 0; i < B * T; i++) {
            const float *dy = dout + (size_t)i * C + c0;
            const int id = tokens[i] - v_start;
            if (id >= 0 && id < v_count) {
                float *dw = dwte + (size_t)id * C + c0;
#pragma omp simd
                for (int c = 0; c < width; c++) dw[c] += dy[c];
            }
            if (add_pos) {
                float *dp = dwpe + (size_t)(i % T) * C + c0;
#pragma omp simd
                for (int c = 0; c < width; c++) dp[c] += dy[c];
            }
        }
    }
}
