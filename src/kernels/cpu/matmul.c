/* matmul.c — linear layer, forward and backward, straight on the row-major buffers through
 * gemm.h (no transposing copies: the transposes are GEMM flags). The bias goes in by pre-filling
 * the output and calling the GEMM with beta = 1 (it makes a beta pass over the output anyway);
 * dbias is a column sum vectorised over OC.
 *
 * Threading: each product is split over the OpenMP threads along one output dimension and every
 * thread calls a single-threaded GEMM on its slice (cpu_gemm), so no element's result depends
 * on the thread count. The library's own thread pool is not used: on two cores, OpenMP workers
 * that spin-wait after a parallel region (libgomp's default) and OpenBLAS's pthreads would fight
 * over the cores and halve its speed.
 *
 * Products of type bf16 (cpu_set_product_type, &train precision = 'bf16'): where the GEMM
 * library has native bf16 products (gemm_native_bf16), both operands are converted to bf16
 * storage once per product (exact: the model has already rounded them, precision.h) into
 * buffers that grow to the largest product and are then reused, and every slice runs gemm_bf16;
 * elsewhere the fp32 GEMM multiplies the bf16 values (the same products, exactly).
 * Weights stored as 16-bit values (matmul_forward_w / matmul_backward_w, ops.h) go into native
 * bf16 products as they are, with no conversion; elsewhere they are first widened to fp32 into
 * a grow-only buffer of the largest weight.
 * Uses: gemm.h, OpenMP, core/alloc. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"

/* Column-sum block width: one block is a unit of OpenMP work and its double accumulators live
 * on the stack (1 KiB). */
#define COLSUM_BLOCK 128

/* Slices are multiples of this many rows/columns (the register blocking of sgemm kernels). */
#define SGEMM_SLICE_ALIGN 64

static bool native_bf16; /* products run as bf16 (cpu_set_product_type) */

/* Native bf16 products here: the GEMM library's, unless the test hook LLMT_CPU_NO_BF16=1 makes
 * this process answer as a CPU without them would (a job whose nodes differ, on one machine). */
static bool have_bf16(void) {
    static int hidden = -1;
    if (hidden < 0) {
        const char *e = getenv("LLMT_CPU_NO_BF16");
        hidden = e && strcmp(e, "1") == 0;
    }
    return !hidden && gemm_native_bf16();
}

void cpu_set_product_type(dtype_t t) { native_bf16 = t == DT_BF16 && have_bf16(); }
bool cpu_products_native(dtype_t t) { return t == DT_BF16 ? have_bf16() : t == DT_FP32; }
bool cpu_products_faster(dtype_t t) { return t == DT_BF16 && have_bf16() && gemm_bf16_faster(); }

/* A grow-only buffer (operand copies): reallocated only when a larger product comes (the first
 * step), kept to the end. */
typedef struct {
    void *p;
    size_t bytes;
} grow_buf_t;

static void *grow_buf_reserve(grow_buf_t *b, size_t bytes) {
    if (bytes > b->bytes) {
        xfree(b->p);
        b->p = xmalloc_in(bytes, MEM_WORKSPACE);
        b->bytes = bytes;
    }
    return b->p;
}

/* dst[rows, cols] (dense) = bf16 storage of src[rows, cols] with leading dimension ld. */
static void to_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld) {
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *s = src + (size_t)i * ld;
        uint16_t *d = dst + (size_t)i * cols;
#pragma omp simd
        for (int j = 0; j < cols; j++) d[j] = cpu_bf16_bits(s[j]); /* branch-free: vectorises */
    }
}

/* Row-major C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, split across the OpenMP threads.
 * The split is along N (each thread reads all of A) when A is the smaller operand, else along M
 * (each thread reads all of B), so the operand every thread packs is the small one. With bf16
 * products, A and B are first converted (dense: leading dimension = stored columns). B is of
 * type bt: fp32, or a weight stored as 16-bit elements (dense), which native bf16 products take
 * as it is and the others widen to fp32 first. */
static void cpu_gemm_typed(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                           int lda, const void *Bt, dtype_t bt, int ldb, float beta, float *Cm,
                           int ldc) {
    static grow_buf_t buf_a, buf_b, wide_b; /* bf16 copies of A and B; B widened to fp32 */
    const uint16_t *Ah = NULL, *Bh = NULL;
    const int b_rows = tb ? N : K, b_cols = tb ? K : N; /* stored shapes: B [K, N] or [N, K] */
    const float *B = bt == DT_FP32 ? Bt : NULL;       /* fp32 B, or NULL: Bs holds it */
    const void *Bs = bt == DT_FP32 ? NULL : Bt;
    if (Bs && !(native_bf16 && bt == DT_BF16)) { /* widen the stored weight to fp32 */
        float *wide = grow_buf_reserve(&wide_b, (size_t)b_rows * b_cols * sizeof(float));
        cpu_load_as(wide, Bs, (size_t)b_rows * b_cols, bt);
        B = wide, Bs = NULL, ldb = b_cols;
    }
    if (native_bf16) { /* stored shapes: A is [M, K] or [K, M] */
        const int a_rows = ta ? K : M, a_cols = ta ? M : K;
        uint16_t *a16 = grow_buf_reserve(&buf_a, (size_t)a_rows * a_cols * sizeof(uint16_t));
        to_bf16(a16, A, a_rows, a_cols, lda);
        if (Bs) {
            Bh = Bs;
        } else {
            uint16_t *b16 = grow_buf_reserve(&buf_b, (size_t)b_rows * b_cols * sizeof(uint16_t));
            to_bf16(b16, B, b_rows, b_cols, ldb);
            Bh = b16;
        }
        Ah = a16, lda = a_cols, ldb = b_cols;
    }
    const int n_threads = omp_get_max_threads();
    const bool split_n = M <= N;
    const int dim = split_n ? N : M;
    if (n_threads == 1 || dim < 2 * SGEMM_SLICE_ALIGN) {
        /* one call, on this thread only: a library that threaded it itself could split K over
         * its threads, and the sums would then depend on the thread count */
        const int lib_threads = gemm_serial_begin();
        if (n_threads > 1) omp_set_num_threads(1);
        if (Ah) gemm_bf16(ta, tb, M, N, K, alpha, Ah, lda, Bh, ldb, beta, Cm, ldc);
        else gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
        if (n_threads > 1) omp_set_num_threads(n_threads);
        gemm_serial_end(lib_threads);
        return;
    }
    int slice = (dim + n_threads - 1) / n_threads;
    slice = (slice + SGEMM_SLICE_ALIGN - 1) / SGEMM_SLICE_ALIGN * SGEMM_SLICE_ALIGN;
    const int n_slices = (dim + slice - 1) / slice;
    const int lib_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static)
    for (int s = 0; s < n_slices; s++) {
        const int i0 = s * slice, len = dim - i0 < slice ? dim - i0 : slice;
        /* split_n: columns [i0, i0+len) of op(B) and C; else rows [i0, i0+len) of op(A) and C */
        const size_t b_off = !split_n ? 0 : !tb ? (size_t)i0 : (size_t)i0 * ldb;
        const size_t a_off = split_n ? 0 : !ta ? (size_t)i0 * lda : (size_t)i0;
        const size_t c_off = split_n ? (size_t)i0 : (size_t)i0 * ldc;
        const int m = split_n ? M : len, n = split_n ? len : N;
        if (Ah) gemm_bf16(ta, tb, m, n, K, alpha, Ah + a_off, lda, Bh + b_off, ldb, beta, Cm + c_off, ldc);
        else gemm_f32(ta, tb, m, n, K, alpha, A + a_off, lda, B + b_off, ldb, beta, Cm + c_off, ldc);
    }
    gemm_serial_end(lib_threads);
}

/* The product of two fp32 operands. */
static void cpu_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *Cm, int ldc) {
    cpu_gemm_typed(ta, tb, M, N, K, alpha, A, lda, B, DT_FP32, ldb, beta, Cm, ldc);
}

/* matmul_forward_w: out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC], w of type wt */
void cpu_matmul_forward_w(float *out, const float *inp, const void *w, dtype_t wt,
                          const float *bias, int N, int C, int OC) {
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PAR_MIN)
        for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cpu_gemm_typed(false, true, N, OC, C, 1.0f, inp, C, w, wt, C, beta, out, OC);
}

/* matmul_forward: out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC]  (bias may be NULL) */
void cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC) {
    cpu_matmul_forward_w(out, inp, w, DT_FP32, bias, N, C, OC);
}

/* dbias[OC] (+)= sum over rows of dout[N, OC]; double accumulators, column blocks in parallel. */
static void colsum_accumulate(float *dbias, const float *dout, int N, int OC, bool overwrite) {
    const int n_blocks = (OC + COLSUM_BLOCK - 1) / COLSUM_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PAR_MIN)
    for (int blk = 0; blk < n_blocks; blk++) {
        const int o0 = blk * COLSUM_BLOCK;
        const int width = OC - o0 < COLSUM_BLOCK ? OC - o0 : COLSUM_BLOCK;
        double acc[COLSUM_BLOCK] = {0};
        for (int i = 0; i < N; i++) {
            const float *row = dout + (size_t)i * OC + o0;
#pragma omp simd
            for (int o = 0; o < width; o++) acc[o] += row[o];
        }
        for (int o = 0; o < width; o++)
            dbias[o0 + o] = (float)(overwrite ? acc[o] : acc[o] + dbias[o0 + o]);
    }
}

/* matmul_backward:
 *   dinp[N, C] = dout[N, OC] @ w[OC, C]   (overwritten, += if accumulate_dinp; skipped if NULL)
 *   dw[OC, C] += dout^T @ inp[N, C]       (= if overwrite_dw)
 *   dbias[OC] += colsum(dout)             (= if overwrite_dw; skipped if NULL)
 * dw NULL: dw and dbias skipped (the input gradient only). */
void cpu_matmul_backward_w(float *dinp, float *dw, float *dbias, const float *dout,
                           const float *inp, const void *w, dtype_t wt, int N, int C, int OC,
                           bool accumulate_dinp, bool overwrite_dw) {
    if (dinp)
        cpu_gemm_typed(false, false, N, C, OC, 1.0f, dout, OC, w, wt, C,
                       accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    if (!dw) return; /* the input gradient only (a split backward's B) */
    cpu_gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C,
              overwrite_dw ? 0.0f : 1.0f, dw, C);
    if (dbias) colsum_accumulate(dbias, dout, N, OC, overwrite_dw);
}

void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC,
                         bool accumulate_dinp, bool overwrite_dw) {
    cpu_matmul_backward_w(dinp, dw, dbias, dout, inp, w, DT_FP32, N, C, OC, accumulate_dinp,
                          overwrite_dw);
}
