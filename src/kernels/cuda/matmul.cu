/* matmul.cu — the linear layer on the GPU through cuBLASLt, forward and backward, and the type of
 * its products (ops.h set_product_type / products_native / products_faster).
 *
 * Row-major tensors seen by column-major cuBLAS: a row-major [R, C] matrix is the column-major
 * [C, R] matrix (its transpose) with leading dimension C, so no copy is ever made. With PyTorch's
 * w[OC, C] (column-major: W = w^T, C x OC, ld C):
 *   forward  out[N, OC] = inp[N, C] w^T + bias      as   out^T (OC x N, ld OC)
 *            = op_T(w: C x OC, ld C) * op_N(inp^T: C x N, ld C)       m = OC, n = N,  k = C
 *            + bias[OC] broadcast over the columns (CUBLASLT_EPILOGUE_BIAS: bias[m])
 *   dinp     dinp[N, C] = dout[N, OC] w               as   dinp^T (C x N, ld C)
 *            = op_N(w: C x OC, ld C) * op_N(dout^T: OC x N, ld OC)    m = C,  n = N,  k = OC
 *   dw       dw[OC, C] = dout^T inp                   as   dw^T (C x OC, ld C)
 *            = op_N(inp^T: C x N, ld C) * op_T(dout^T: OC x N, ld OC) m = C,  n = OC, k = N
 *   dbias    dbias[OC] = colsum(dout): a small deterministic kernel (the BGRADB epilogue can only
 *            overwrite, and ops.h needs += as well).
 * Every operand is dense, so a stored operand's leading dimension is its stored row count.
 *
 * Products of type bf16 / fp16 (set_product_type): the fp32 inputs already hold bf16 / fp16
 * values (precision.h), so converting them to 16-bit copies is exact; cuBLASLt then multiplies
 * the copies with fp32 accumulation (A, B CUDA_R_16BF / CUDA_R_16F; C, D, bias CUDA_R_32F;
 * CUBLAS_COMPUTE_32F). A weight already stored as 16-bit values (matmul_forward_w / _backward_w:
 * the model's weights copy, gpt.h weights_type) is multiplied as it is, with no copy. The copies
 * live in ONE static device buffer grown on demand (the largest
 * product's operands; it stops growing after the first step). fp32 products run in fp32
 * (CUBLAS_COMPUTE_32F) unless llmt_cuda_allow_tf32 (cuda_matmul.h) allows TF32.
 * One cuBLASLt handle and a 32 MiB workspace, created on first use; the descriptors and the
 * heuristic's algorithm of each product shape are cached (the shapes of a step repeat).
 * All work is on the legacy default stream 0.
 * Uses: cuBLASLt, cuda_check.h. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_matmul.h"
#include "core/cuda_check.h"
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

bool llmt_cuda_allow_tf32 = false;

static dtype_t product_type = DT_FP32;

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define LT_PLANS 64 /* distinct product shapes cached (a model has about a dozen) */

static cublasLtHandle_t lt_handle;
static void *lt_workspace;

static void lt_init(void) {
    if (lt_handle) return;
    CUBLAS_CHECK(cublasLtCreate(&lt_handle));
    CUDA_CHECK(cudaMalloc(&lt_workspace, LT_WORKSPACE_BYTES));
}

/* ---------------------------------------------------------------- the product type */

void cuda_set_product_type(dtype_t t) { product_type = t; }

/* Compute capability major of the current device (bf16 tensor cores: 8.0 and later). */
static int device_major(void) {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major;
}

bool cuda_products_native(dtype_t t) {
    if (t == DT_FP32) return true;
    return t == DT_BF16 ? device_major() >= 8 : device_major() >= 7;
}

/* 16-bit tensor-core products are several times fp32's wherever they are native. */
bool cuda_products_faster(dtype_t t) { return t != DT_FP32 && cuda_products_native(t); }

/* ---------------------------------------------------------------- 16-bit operand copies */

/* dst[n] = src[n] as bf16 / fp16 (exact: src already holds such values). */
__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void to_fp16_kernel(__half *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

static int grid_for(size_t n, int threads) {
    const size_t blocks = (n + threads - 1) / threads;
    return blocks > 4096 ? 4096 : blocks ? (int)blocks : 1;
}

/* The 16-bit copy of src[n] (product_type) into dst. */
static void to_half(void *dst, const float *src, size_t n) {
    const int threads = 256;
    if (product_type == DT_BF16)
        to_bf16_kernel<<<grid_for(n, threads), threads>>>((__nv_bfloat16 *)dst, src, n);
    else
        to_fp16_kernel<<<grid_for(n, threads), threads>>>((__half *)dst, src, n);
    CUDA_CHECK_LAUNCH();
}

/* A grow-only device buffer of at least `bytes`. Growing frees the old buffer only after the
 * device is idle: kernels queued earlier may still read it (this happens in the first step
 * only). */
static void *grow_device(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        if (*buf) {
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(*buf));
        }
        CUDA_CHECK(cudaMalloc(buf, bytes));
        *cap = bytes;
    }
    return *buf;
}

/* Three slots of 16-bit elements in the one grow-only buffer; slot i holds n[i] elements and
 * starts 256-byte aligned. */
static void half_slots(const size_t n[3], void *slot[3]) {
    static void *buf;
    static size_t cap;
    size_t off[3], total = 0;
    for (int i = 0; i < 3; i++) {
        off[i] = total;
        total += (n[i] * 2 + 255) / 256 * 256;
    }
    char *base = (char *)grow_device(&buf, &cap, total);
    for (int i = 0; i < 3; i++) slot[i] = base + off[i];
}

/* ---------------------------------------------------------------- cuBLASLt products */

/* One cached product: its shape, types and alignments, descriptors and chosen algorithm. */
typedef struct lt_plan {
    bool used, ta, tb, bias;
    int m, n, k, align_a, align_b, align_d, align_bias;
    const float *bias_at; /* the bias of the call that built the plan (its alignment counts) */
    cudaDataType_t ab_type;
    cublasComputeType_t compute;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} lt_plan_t;

/* The largest power of two (at most 256) that divides the address: the heuristic must only
 * pick kernels whose alignment needs the pointers meet. */
static int ptr_align(const void *p) {
    const uintptr_t u = (uintptr_t)p;
    int a = 1;
    while (a < 256 && !(u & (uintptr_t)a)) a *= 2;
    return a;
}

static void plan_destroy(lt_plan_t *p) {
    if (!p->used) return;
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    p->used = false;
}

static void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                     uint32_t value) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
}

/* Descriptors and the heuristic's best algorithm for p's shape (fields set by the caller). */
static void plan_build(lt_plan_t *p) {
    const cublasOperation_t opa = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, p->compute, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    const cublasLtEpilogue_t epi = p->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (p->bias) /* the heuristic reads the pointer's alignment from it */
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &p->bias_at, sizeof p->bias_at));
    /* stored shapes (column-major, dense): A is m x k or (ta) k x m, B is k x n or (tb) n x k */
    const uint64_t a_rows = p->ta ? p->k : p->m, a_cols = p->ta ? p->m : p->k;
    const uint64_t b_rows = p->tb ? p->n : p->k, b_cols = p->tb ? p->k : p->n;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, p->ab_type, a_rows, a_cols, (int64_t)a_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, p->ab_type, b_rows, b_cols, (int64_t)b_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, p->m, p->n, p->m));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = LT_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ws, sizeof ws));
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, (uint32_t)p->align_a);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, (uint32_t)p->align_b);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, (uint32_t)p->align_d);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, (uint32_t)p->align_d);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_handle, p->desc, p->a, p->b, p->d, p->d, pref,
                                                1, &res, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1) {
        char what[160];
        snprintf(what, sizeof what, "m=%d n=%d k=%d ta=%d tb=%d type=%d bias=%d", p->m, p->n,
                 p->k, p->ta, p->tb, (int)p->ab_type, p->bias);
        die_call(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", what);
    }
    p->algo = res.algo;
    p->used = true;
}

/* The cached plan of this product, built on first sight (a full cache evicts round-robin). */
static lt_plan_t *plan_get(const lt_plan_t *key) {
    static lt_plan_t plans[LT_PLANS];
    static int next_evict;
    for (int i = 0; i < LT_PLANS; i++) {
        const lt_plan_t *p = &plans[i];
        if (p->used && p->ta == key->ta && p->tb == key->tb && p->bias == key->bias &&
            p->m == key->m && p->n == key->n && p->k == key->k && p->align_a == key->align_a &&
            p->align_b == key->align_b && p->align_d == key->align_d &&
            p->align_bias == key->align_bias &&
            p->ab_type == key->ab_type && p->compute == key->compute)
            return &plans[i];
    }
    lt_plan_t *slot = NULL;
    for (int i = 0; i < LT_PLANS && !slot; i++)
        if (!plans[i].used) slot = &plans[i];
    if (!slot) {
        slot = &plans[next_evict];
        next_evict = (next_evict + 1) % LT_PLANS;
        plan_destroy(slot);
    }
    *slot = *key;
    slot->used = false;
    plan_build(slot);
    return slot;
}

/* Column-major D[m, n] = op(A) op(B) + beta D (+ bias[m] per column if bias), A and B of the
 * current product type (16-bit copies or the fp32 tensors themselves). */
static void lt_matmul(bool ta, bool tb, int m, int n, int k, const void *A, const void *B,
                      float *D, float beta, const float *bias) {
    lt_init();
    const bool half = product_type != DT_FP32;
    lt_plan_t key = {};
    key.ta = ta, key.tb = tb, key.bias = bias != NULL, key.m = m, key.n = n, key.k = k;
    key.align_a = ptr_align(A), key.align_b = ptr_align(B), key.align_d = ptr_align(D);
    key.bias_at = bias, key.align_bias = bias ? ptr_align(bias) : 0;
    key.ab_type = !half ? CUDA_R_32F : product_type == DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    key.compute = !half && llmt_cuda_allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    lt_plan_t *p = plan_get(&key);
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof bias));
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt_handle, p->desc, &alpha, A, p->a, B, p->b, &beta, D, p->d, D,
                                p->d, &p->algo, lt_workspace, LT_WORKSPACE_BYTES, 0));
}

/* ---------------------------------------------------------------- forward */

/* A weight stored as 16-bit values that the products do not take as they are (a 16-bit type
 * other than the products'): widened to fp32 into one grow-only buffer (the largest such
 * weight). */
static const float *widened_weight(const void *w, dtype_t wt, size_t n) {
    static void *buf;
    static size_t cap;
    float *wide = (float *)grow_device(&buf, &cap, n * sizeof(float));
    cuda_load_as(wide, w, n, wt);
    return wide;
}

/* The product operand of a weight w[n] stored as type wt: the stored elements themselves where
 * they are of the product type; else (fp32, or widened first) w itself for fp32 products, or
 * its 16-bit copy in slot, made here. */
static const void *weight_operand(const void *w, dtype_t wt, size_t n, void *slot) {
    if (wt == product_type) return w;
    const float *w32 = wt == DT_FP32 ? (const float *)w : widened_weight(w, wt, n);
    if (product_type == DT_FP32) return w32;
    to_half(slot, w32, n);
    return slot;
}

/* matmul_forward_w: out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC], w stored as type wt */
void cuda_matmul_forward_w(float *out, const float *inp, const void *w, dtype_t wt,
                           const float *bias, int N, int C, int OC) {
    const void *A = w, *B = inp;
    if (product_type != DT_FP32) {
        const size_t n[3] = {wt == product_type ? 0 : (size_t)OC * C, (size_t)N * C, 0};
        void *slot[3];
        half_slots(n, slot);
        A = weight_operand(w, wt, (size_t)OC * C, slot[0]);
        to_half(slot[1], inp, n[1]);
        B = slot[1];
    } else {
        A = weight_operand(w, wt, (size_t)OC * C, NULL);
    }
    lt_matmul(true, false, OC, N, C, A, B, out, 0.0f, bias);
}

/* matmul_forward: out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC]  (bias may be NULL) */
void cuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                         int C, int OC) {
    cuda_matmul_forward_w(out, inp, w, DT_FP32, bias, N, C, OC);
}

/* ---------------------------------------------------------------- backward */

#define COLSUM_COLS 32 /* columns of dout per block (one warp wide: coalesced row reads) */
#define COLSUM_ROWS 16 /* row groups per block, reduced in a fixed order */

/* dbias[OC] (+)= sum over rows of dout[N, OC], in double (as the CPU backend): thread (x, y)
 * sums rows y, y + COLSUM_ROWS, ... of column blockIdx.x * COLSUM_COLS + x; the row groups are
 * then added in ascending order, so the result does not depend on scheduling. */
__global__ void colsum_kernel(float *dbias, const float *dout, int N, int OC, bool overwrite) {
    __shared__ double part[COLSUM_ROWS][COLSUM_COLS];
    const int o = blockIdx.x * COLSUM_COLS + threadIdx.x;
    double acc = 0.0;
    if (o < OC)
        for (int i = threadIdx.y; i < N; i += COLSUM_ROWS) acc += dout[(size_t)i * OC + o];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || o >= OC) return;
    double s = 0.0;
    for (int g = 0; g < COLSUM_ROWS; g++) s += part[g][threadIdx.x];
    dbias[o] = (float)(overwrite ? s : s + dbias[o]);
}

/* matmul_backward:
 *   dinp[N, C] = dout[N, OC] @ w[OC, C]   (overwritten, += if accumulate_dinp; skipped if NULL)
 *   dw[OC, C] += dout^T @ inp[N, C]       (= if overwrite_dw)
 *   dbias[OC] += colsum(dout)             (= if overwrite_dw; skipped if NULL)
 * dw NULL: dw and dbias skipped (the input gradient only). */
void cuda_matmul_backward_w(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const void *w, dtype_t wt, int N, int C, int OC,
                            bool accumulate_dinp, bool overwrite_dw) {
    const void *dout_p = dout, *w_p = w, *inp_p = inp;
    if (product_type != DT_FP32) { /* slots: dout, w (for dinp), inp (for dw) */
        const size_t n[3] = {(size_t)N * OC, dinp && wt != product_type ? (size_t)OC * C : 0,
                             dw ? (size_t)N * C : 0};
        void *slot[3];
        half_slots(n, slot);
        to_half(slot[0], dout, n[0]);
        dout_p = slot[0];
        if (dinp) w_p = weight_operand(w, wt, (size_t)OC * C, slot[1]);
        if (dw) to_half(slot[2], inp, n[2]), inp_p = slot[2];
    } else if (dinp) {
        w_p = weight_operand(w, wt, (size_t)OC * C, NULL);
    }
    if (dinp) lt_matmul(false, false, C, N, OC, w_p, dout_p, dinp, accumulate_dinp ? 1.0f : 0.0f, NULL);
    if (!dw) return;
    lt_matmul(false, true, C, OC, N, inp_p, dout_p, dw, overwrite_dw ? 0.0f : 1.0f, NULL);
    if (dbias) {
        const dim3 block(COLSUM_COLS, COLSUM_ROWS);
        colsum_kernel<<<(OC + COLSUM_COLS - 1) / COLSUM_COLS, block>>>(dbias, dout, N, OC, overwrite_dw);
        CUDA_CHECK_LAUNCH();
    }
}

void cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, const float *w, int N, int C, int OC,
                          bool accumulate_dinp, bool overwrite_dw) {
    cuda_matmul_backward_w(dinp, dw, dbias, dout, inp, w, DT_FP32, N, C, OC, accumulate_dinp,
                           overwrite_dw);
}
