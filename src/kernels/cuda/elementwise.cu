/* elementwise.cu — the CUDA backend's element-wise ops and whole-tensor reductions: zero, GELU
 * forward/backward, add, scale, the precision stores (quantize, quantize_copy; store_as, load_as of
 * 16-bit storage), the overflow check (any_nonfinite), the sum of squares of the gradient norm, and
 * dropout. Formulas as kernels/cpu/gelu.c, quantize.c (bit for bit), adamw.c (sumsq), dropout.c
 * (the same mask: philox.cuh). Grid-stride loops; all on the default stream; sumsq and
 * any_nonfinite copy their result to the host (which waits for the stream).
 * Owns: the kernels and their launchers; one static device buffer each for sumsq and
 * any_nonfinite. Uses: cuda_common.cuh, philox.cuh. Used by: ops_cuda.cu (the ops table). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/philox.cuh"
#include "kernels/cuda/cuda_kernels.h"

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

/* the grid-stride loop over [0, n) */
#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* ---------------------------------------------------------------- zero, add, scale */

void cuda_zero(float *x, size_t n) {
    if (n) CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof *x, 0));
}

/* add: out[n] = a + b (out may alias a or b: each element read before it is written) */
static __global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

void cuda_add(float *out, const float *a, const float *b, size_t n) {
    if (!n) return;
    add_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(out, a, b, n);
    CUDA_CHECK_LAUNCH();
}

/* scale: x[n] *= s */
static __global__ void scale_kernel(float *x, float s, size_t n) {
    GRID_STRIDE(i, n) x[i] *= s;
}

void cuda_scale(float *x, float s, size_t n) {
    if (!n) return;
    scale_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(x, s, n);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- GELU (tanh approximation)
 * As gelu.c: 0.5 (1 + tanh(u)) = s = 1 / (1 + e), e = exp(-2u); 1 - tanh^2 = 4 e s^2, with
 * e s = e / (1 + e) taken as e * s for s >= 1/2 and as 1 - s below (right also for e = +Inf). */

/* gelu_forward: out[n] = x * s */
static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        const float x = inp[i];
        const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        out[i] = x / (1.0f + expf(-2.0f * u));
    }
}

void cuda_gelu_forward(float *out, const float *inp, size_t n) {
    if (!n) return;
    gelu_forward_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(out, inp, n);
    CUDA_CHECK_LAUNCH();
}

/* gelu_backward: dinp[n] = dout * (s + 2 x e s^2 u'), u' = sqrt(2/pi)(1 + 3 k x^2); dinp may
 * alias dout (each element read before it is written) */
static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                            size_t n) {
    GRID_STRIDE(i, n) {
        const float x = inp[i];
        const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
        const float e = expf(-2.0f * u);
        const float s = 1.0f / (1.0f + e);
        const float es = s < 0.5f ? 1.0f - s : e * s;
        dinp[i] = dout[i] * (s + 2.0f * x * du * (es * s));
    }
}

void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (!n) return;
    gelu_backward_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(dinp, inp,
                                                                                        dout, n);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- precision stores */

/* dst[n] = src[n] as stored in type t (dst may be src) */
static __global__ void round_kernel(float *dst, const float *src, size_t n, dtype_t t) {
    GRID_STRIDE(i, n) dst[i] = round_to_dev(t, src[i]);
}

/* quantize: x[n] rounded in place to type t (nothing for fp32) */
void cuda_quantize(float *x, size_t n, dtype_t t) {
    if (!n || t == DT_FP32) return;
    round_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(x, x, n, t);
    CUDA_CHECK_LAUNCH();
}

/* quantize_copy: dst[n] = src[n] as type t (a plain device copy for fp32) */
void cuda_quantize_copy(float *dst, const float *src, size_t n, dtype_t t) {
    if (!n) return;
    if (t == DT_FP32) {
        if (dst != src)
            CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice, 0));
        return;
    }
    round_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(dst, src, n, t);
    CUDA_CHECK_LAUNCH();
}

/* store_as: dst[n] of type t = src[n] rounded to t (ops.h) */
static __global__ void store_as_kernel(unsigned short *dst, const float *src, size_t n, dtype_t t) {
    GRID_STRIDE(i, n) dst[i] = store_elem_bits_dev(src[i], t);
}

void cuda_store_as(void *dst, const float *src, size_t n, dtype_t t) {
    if (!n) return;
    if (t == DT_FP32) {
        cuda_quantize_copy((float *)dst, src, n, DT_FP32);
        return;
    }
    store_as_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(
        (unsigned short *)dst, src, n, t);
    CUDA_CHECK_LAUNCH();
}

/* load_as: dst[n] = the fp32 values of src[n] of type t (exact) */
static __global__ void load_as_kernel(float *dst, const void *src, size_t n, dtype_t t) {
    GRID_STRIDE(i, n) dst[i] = load_elem_dev(src, i, t);
}

void cuda_load_as(float *dst, const void *src, size_t n, dtype_t t) {
    if (!n) return;
    if (t == DT_FP32) {
        cuda_quantize_copy(dst, (const float *)src, n, DT_FP32);
        return;
    }
    load_as_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(dst, src, n, t);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- any_nonfinite */

/* *flag = 1 if any of x[n] has all exponent bits set (Inf, NaN). Only ever stores 1, so the
 * racing stores agree. */
static __global__ void nonfinite_kernel(int *flag, const float *x, size_t n) {
    bool bad = false;
    GRID_STRIDE(i, n) bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
    if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

static int *nonfinite_flag; /* the op's one device buffer: 1 int, allocated on first use */
static size_t nonfinite_flag_bytes;

bool cuda_any_nonfinite(const float *x, size_t n) {
    if (!n) return false;
    int *flag =
        (int *)cuda_grow_buffer((void **)&nonfinite_flag, &nonfinite_flag_bytes, sizeof(int));
    CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof *flag, 0));
    nonfinite_kernel<<<cuda_elem_blocks(n, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(flag, x, n);
    CUDA_CHECK_LAUNCH();
    int host = 0;
    CUDA_CHECK(cudaMemcpy(&host, flag, sizeof host, cudaMemcpyDeviceToHost));
    return host != 0;
}

/* ---------------------------------------------------------------- sumsq
 * Two passes, deterministic: SUMSQ_BLOCKS (or fewer, a function of n only) blocks each write the
 * double sum of their grid-stride share; one block then adds those partials in a fixed tree.
 * The result depends on n and the data only, never on the GPU. */
#define SUMSQ_BLOCKS 1024
#define SUMSQ_THREADS 256

static __global__ void sumsq_partial_kernel(double *partial, const float *x, size_t n) {
    double s = 0.0;
    GRID_STRIDE(i, n) {
        const double v = (double)x[i];
        s += v * v;
    }
    s = block_sum_double(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* partial[n_part] -> *out, one block of SUMSQ_THREADS (the partials in a fixed order) */
static __global__ void sumsq_final_kernel(double *out, const double *partial, int n_part) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n_part; i += blockDim.x) s += partial[i];
    s = block_sum_double(s);
    if (threadIdx.x == 0) *out = s;
}

static double *sumsq_buf; /* the op's one device buffer: SUMSQ_BLOCKS partials + the result */
static size_t sumsq_buf_bytes;

/* sumsq: x[n] -> sum x^2, in double on the device; 8 bytes come back */
double cuda_sumsq(const float *x, size_t n) {
    if (!n) return 0.0;
    double *buf = (double *)cuda_grow_buffer((void **)&sumsq_buf, &sumsq_buf_bytes,
                                             (SUMSQ_BLOCKS + 1) * sizeof(double));
    size_t blocks = (n + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    blocks = blocks < SUMSQ_BLOCKS ? blocks : SUMSQ_BLOCKS;
    sumsq_partial_kernel<<<(unsigned)blocks, SUMSQ_THREADS>>>(buf + 1, x, n);
    CUDA_CHECK_LAUNCH();
    sumsq_final_kernel<<<1, SUMSQ_THREADS>>>(buf, buf + 1, (int)blocks);
    CUDA_CHECK_LAUNCH();
    double host = 0.0;
    CUDA_CHECK(cudaMemcpy(&host, buf, sizeof host, cudaMemcpyDeviceToHost));
    return host;
}

/* ---------------------------------------------------------------- dropout
 * out[rows, cols] = in * mask (ops.h dropout_mask_t; out may alias in). One thread per (row,
 * group of four GLOBAL columns): one Philox block gives the four words of global columns
 * 4q .. 4q + 3, so each block is drawn once; the local columns of the group that fall inside
 * [col0, col0 + cols) are written. */
static __global__ void dropout_kernel(float *out, const float *in, size_t rows, int cols,
                                      dropout_mask_t m) {
    const uint64_t g_first = (uint64_t)m.col0 >> 2;
    const uint64_t g_last = ((uint64_t)m.col0 + (uint64_t)cols - 1) >> 2;
    const size_t groups = (size_t)(g_last - g_first + 1), n = rows * groups;
    GRID_STRIDE(w, n) {
        const size_t r = w / groups;
        const uint64_t g = g_first + (uint64_t)(w % groups), row = m.row0 + r;
        const philox4 b = philox4x32_10_dev((uint32_t)g, (uint32_t)row, (uint32_t)(row >> 32),
                                            m.word3, m.key[0], m.key[1]);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int64_t c = (int64_t)(4 * g + (uint64_t)k) - (int64_t)m.col0; /* local */
            if (c < 0 || c >= cols) continue;
            const size_t at = r * (size_t)cols + (size_t)c;
            out[at] = in[at] * (b.v[k] >= m.threshold ? m.scale : 0.0f);
        }
    }
}

void cuda_dropout_apply(float *out, const float *in, size_t rows, int cols,
                        const dropout_mask_t *mask) {
    if (!rows || cols <= 0) return;
    const size_t groups =
        (((uint64_t)mask->col0 + (uint64_t)cols - 1) >> 2) - ((uint64_t)mask->col0 >> 2) + 1;
    dropout_kernel<<<cuda_elem_blocks(rows * groups, CUDA_ELEM_THREADS), CUDA_ELEM_THREADS>>>(
        out, in, rows, cols, *mask);
    CUDA_CHECK_LAUNCH();
}
