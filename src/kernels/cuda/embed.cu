/* embed.cu — the CUDA backend's token + position embedding over a (possibly vocab-sharded) wte,
 * forward and backward (kernels/cpu/embed.c's contract and order of additions).
 * Forward: one thread per output element. Backward, deterministically (no float atomics):
 *  - dwpe[t, :] += dout[b, t, :] for b = 0 .. B-1 in order, a thread per (t, c);
 *  - dwte: the same token occurs in many rows, so the rows are grouped by token with a stable
 *    sort on the device and each token's rows are added in ascending row order
 *    (cuda_segments.cuh): the CPU's order, so the same sums, run after run.
 * Owns: the kernels, their launchers and one static device buffer (the sort's). Uses:
 * cuda_common.cuh, cuda_segments.cuh. Used by: ops_cuda.cu. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_segments.cuh"
#include "kernels/cuda/cuda_kernels.h"

static void *embed_sort_buf; /* the file's one device buffer: the token sort of the backward */
static size_t embed_sort_bytes;

/* embed_forward: out[B*T, C] = wte[tok - v_start] (0 if not in the shard) + wpe[t] (if add_pos),
 * wte and wpe stored as type wt (ops.h embed_forward_w; fp32: embed_forward). wpe may be NULL
 * when add_pos is false. */
static __global__ void embed_forward_kernel(float *out, const int *tokens, const void *wte,
                                            const void *wpe, dtype_t wt, int T, int C,
                                            int v_start, int v_count, bool add_pos, size_t n) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t i = e / (size_t)C;
        const int c = (int)(e % (size_t)C), id = tokens[i] - v_start;
        const bool owned = id >= 0 && id < v_count;
        const float te = owned ? load_elem_dev(wte, (size_t)id * C + c, wt) : 0.0f;
        if (owned && add_pos)
            out[e] = te + load_elem_dev(wpe, (i % (size_t)T) * C + c, wt);
        else if (add_pos)
            out[e] = load_elem_dev(wpe, (i % (size_t)T) * C + c, wt);
        else
            out[e] = te;
    }
}

void cuda_embed_forward_w(float *out, const int *tokens, const void *wte, const void *wpe,
                          dtype_t wt, int B, int T, int C, int v_start, int v_count,
                          bool add_pos) {
    const size_t n = (size_t)B * T * C;
    if (!n) return;
    embed_forward_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(
        out, tokens, wte, wpe, wt, T, C, v_start, v_count, add_pos, n);
    CUDA_CHECK_LAUNCH();
}

void cuda_embed_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v_start, int v_count, bool add_pos) {
    cuda_embed_forward_w(out, tokens, wte, wpe, DT_FP32, B, T, C, v_start, v_count, add_pos);
}

/* dwpe[T, C] += sum over b of dout[b, t, :], b ascending (embed.c's row order for each t) */
static __global__ void embed_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    const size_t n = (size_t)T * C;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[e];
        for (int b = 0; b < B; b++) acc = __fadd_rn(acc, dout[(size_t)b * n + e]);
        dwpe[e] = acc;
    }
}

/* embed_backward: dout[B*T, C] -> dwte[v_count, C] += dout rows of owned tokens (row order);
 * dwpe[T, C] += sum over b (if add_pos). Accumulates, never overwrites. */
void cuda_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                         int T, int C, int v_start, int v_count, bool add_pos) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    segments_scatter_add(&embed_sort_buf, &embed_sort_bytes, dwte, dout, NULL, tokens, B * T, C,
                         v_start, v_count);
    if (add_pos) {
        const size_t n = (size_t)T * C;
        embed_dwpe_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(dwpe, dout,
                                                                                         B, T, C);
        CUDA_CHECK_LAUNCH();
    }
}
