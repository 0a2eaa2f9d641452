/* llama.cu — the CUDA backend's Llama-family element-wise ops, forward and backward side by
 * side: rotary position embedding (RoPE, rotate-half pairing) and SwiGLU (kernels/cpu/llama.c's
 * formulas and orders; RMSNorm is in norm.cu). One thread per element (SwiGLU) or per rotated
 * pair (RoPE), grid-stride loops.
 * Owns: the kernels and their launchers. Uses: cuda_common.cuh. Used by: ops_cuda.cu. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* ---------------------------------------------------------------- RoPE */

/* x[B, T, NH*hs] in place, pairs (i, i + hs/2) of every head rotated by sign * angle[t, i]
 * (cos, sin tables [T, hs/2]); n = B*T*NH*(hs/2) pairs, pair p = ((bt * NH + h) * half + i). */
static __global__ void rope_kernel(float *x, const float *cos_t, const float *sin_t, int T, int NH,
                                   int hs, int half, float sign, size_t n) {
    GRID_STRIDE(p, n) {
        const int i = (int)(p % (size_t)half);
        const size_t head = p / (size_t)half; /* bt * NH + h */
        const int t = (int)((head / (size_t)NH) % (size_t)T);
        float *a = x + head * (size_t)hs, *b = a + half;
        const float c = cos_t[(size_t)t * half + i], s = sign * sin_t[(size_t)t * half + i];
        const float x1 = a[i], x2 = b[i];
        a[i] = x1 * c - x2 * s;
        b[i] = x2 * c + x1 * s;
    }
}

static void rope_rotate(float *x, const float *cos_t, const float *sin_t, int B, int T, int NH,
                        int hs, float sign) {
    const int half = hs / 2;
    const size_t n = (size_t)B * T * NH * half;
    if (!n) return;
    rope_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(
        x, cos_t, sin_t, T, NH, hs, half, sign, n);
    CUDA_CHECK_LAUNCH();
}

/* rope_forward: x[B, T, NH*hs] rotated in place by angle[t, i] */
void cuda_rope_forward(float *x, const float *cos, const float *sin, int B, int T, int NH, int hs) {
    rope_rotate(x, cos, sin, B, T, NH, hs, 1.0f);
}

/* rope_backward: d[B, T, NH*hs] rotated back in place (the transpose: rotation by -angle) */
void cuda_rope_backward(float *d, const float *cos, const float *sin, int B, int T, int NH,
                        int hs) {
    rope_rotate(d, cos, sin, B, T, NH, hs, -1.0f);
}

/* ---------------------------------------------------------------- SwiGLU */

/* swiglu_forward: out[n] = silu(gate) * up, silu(g) = g / (1 + exp(-g)) */
static __global__ void swiglu_forward_kernel(float *out, const float *gate, const float *up,
                                             size_t n) {
    GRID_STRIDE(i, n) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    if (!n) return;
    swiglu_forward_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(out, gate,
                                                                                         up, n);
    CUDA_CHECK_LAUNCH();
}

/* swiglu_backward, s = sigmoid(g) = 1 / (1 + exp(-g)) (0, not NaN, when exp(-g) overflows):
 * dup[n] = dout * g * s;  dgate[n] = dout * up * s * (1 + g (1 - s)). dgate may alias dout:
 * every input of an element is read before its outputs are written. */
static __global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dout,
                                              const float *gate, const float *up, size_t n) {
    GRID_STRIDE(i, n) {
        const float g = gate[i], u = up[i], d = dout[i];
        const float s = 1.0f / (1.0f + expf(-g));
        dup[i] = d * g * s;
        dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    }
}

void cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                          const float *up, size_t n) {
    if (!n) return;
    swiglu_backward_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(
        dgate, dup, dout, gate, up, n);
    CUDA_CHECK_LAUNCH();
}
