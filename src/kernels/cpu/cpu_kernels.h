/* cpu_kernels.h — internal header of the CPU backend (C11 + OpenMP + a GEMM library, gemm.h).
 * Owns: the declarations of the CPU kernels that ops_cpu.c puts in the ops_t table, a
 * vectorisable expf. Matrix products go through gemm.h.
 * Uses: kernels/ops.h, core/. Used by: the files of src/kernels/cpu/ only (model/ goes through
 * ops_t).
 *
 * Threading: OpenMP only, static schedules. Row kernels use `parallel for` over rows;
 * element-wise kernels split [0, n) with cpu_thread_range; matrix products split the output
 * over the threads, each calling a single-threaded GEMM (matmul.c says why). Reductions over
 * rows (dbias, dwte) are split by COLUMN blocks instead of per-thread partial sums, or (the
 * layernorm's dw, db, reduced in the same pass as its dinp) summed from partials over row
 * blocks that depend on the shape alone, in a fixed order: the results do not depend on
 * OMP_NUM_THREADS. */
#ifndef LLMT_CPU_KERNELS_H
#define LLMT_CPU_KERNELS_H
#include "kernels/ops.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- matmul.c ---- */
void cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC);
void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC,
                         bool accumulate_dinp, bool overwrite_dw);
/* The same with w stored as type wt (ops.h matmul_forward_w / matmul_backward_w). */
void cpu_matmul_forward_w(float *out, const float *inp, const void *w, dtype_t wt,
                          const float *bias, int N, int C, int OC);
void cpu_matmul_backward_w(float *dinp, float *dw, float *dbias, const float *dout,
                           const float *inp, const void *w, dtype_t wt, int N, int C, int OC,
                           bool accumulate_dinp, bool overwrite_dw);
/* Products of type t from now on (bf16: native bf16 GEMMs where the library has them). */
void cpu_set_product_type(dtype_t t);
/* Whether products of type t run on native instructions of this CPU and library. */
bool cpu_products_native(dtype_t t);
/* Whether native products of type t are expected to beat fp32 products here (gemm_bf16_faster). */
bool cpu_products_faster(dtype_t t);

/* ---- peak.c ---- */
double cpu_hardware_peak(dtype_t t, char *how, size_t len);

/* ---- llama.c: RMSNorm, RoPE, SwiGLU ---- */
void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps);
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C, bool accumulate_dinp,
                          bool overwrite_dw);
void cpu_rope_forward(float *x, const float *cos, const float *sin, int B, int T, int NH, int hs);
void cpu_rope_backward(float *d, const float *cos, const float *sin, int B, int T, int NH, int hs);
void cpu_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n);

/* ---- layernorm.c ---- */
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C);
void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C, bool accumulate_dinp,
                            bool overwrite_dw);
void cpu_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd,
                                    const float *a, const float *b, const float *w,
                                    const float *bias, int N, int C, dtype_t t);

/* ---- attention.c ---- */
size_t cpu_attention_scratch_floats(int B, int T, int NH, int hs);
void cpu_attention_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                           const float *qkv, int B, int T, int NH, int hs);
void cpu_attention_backward(float *dqkv, float *scratch, size_t scratch_floats,
                            const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int NH, int hs);
void cpu_attention_forward_dropout(float *out, float *lse, float *scratch, size_t scratch_floats,
                                   const float *qkv, int B, int T, int NH, int hs,
                                   const dropout_mask_t *mask);
void cpu_attention_backward_dropout(float *dqkv, float *scratch, size_t scratch_floats,
                                    const float *dout, const float *qkv, const float *out,
                                    const float *lse, int B, int T, int NH, int hs,
                                    const dropout_mask_t *mask);
void cpu_attention_gqa_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                               const float *q, const float *k, const float *v, int B, int T,
                               int NH, int NKV, int hs);
void cpu_attention_gqa_backward(float *dq, float *dk, float *dv, float *scratch,
                                size_t scratch_floats, const float *dout, const float *q,
                                const float *k, const float *v, const float *out,
                                const float *lse, int B, int T, int NH, int NKV, int hs);
void cpu_attention_gqa_forward_dropout(float *out, float *lse, float *scratch,
                                       size_t scratch_floats, const float *q, const float *k,
                                       const float *v, int B, int T, int NH, int NKV, int hs,
                                       const dropout_mask_t *mask);
void cpu_attention_gqa_backward_dropout(float *dq, float *dk, float *dv, float *scratch,
                                        size_t scratch_floats, const float *dout, const float *q,
                                        const float *k, const float *v, const float *out,
                                        const float *lse, int B, int T, int NH, int NKV, int hs,
                                        const dropout_mask_t *mask);

void cpu_attention_block_forward(const attn_block_t *blk, float *scratch, size_t scratch_floats);
void cpu_attention_block_finish(float *out, float *m_lse, const float *l, int B, int T, int NH,
                                int hs);
void cpu_attention_block_backward(const attn_block_t *blk, float *scratch, size_t scratch_floats);
void cpu_copy_rows(float *dst, int ld_dst, const float *src, int ld_src, size_t rows, int cols,
                   bool accumulate);

/* ---- gelu.c ---- */
void cpu_gelu_forward(float *out, const float *inp, size_t n);
void cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* ---- quantize.c ---- */
void cpu_quantize(float *x, size_t n, dtype_t t);
void cpu_quantize_copy(float *dst, const float *src, size_t n, dtype_t t);
void cpu_store_as(void *dst, const float *src, size_t n, dtype_t t);
void cpu_load_as(float *dst, const void *src, size_t n, dtype_t t);
bool cpu_any_nonfinite(const float *x, size_t n);
/* dst[n] = src[n] rounded to type t (bit for bit precision.h's round_to), on the calling
 * thread; dst may be src. For kernels that store a low-precision tensor they computed. */
void cpu_round_range(float *dst, const float *src, size_t n, dtype_t t);

/* ---- embed.c ---- */
void cpu_embed_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                       int B, int T, int C, int v_start, int v_count, bool add_pos);
/* The same with wte and wpe stored as type wt (ops.h embed_forward_w). */
void cpu_embed_forward_w(float *out, const int *tokens, const void *wte, const void *wpe,
                         dtype_t wt, int B, int T, int C, int v_start, int v_count,
                         bool add_pos);
void cpu_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                        int T, int C, int v_start, int v_count, bool add_pos);

/* ---- xent.c ---- */
void cpu_xent_row_max(float *row_max, const float *logits, int N, int Vl, int v_valid);
void cpu_xent_row_sumexp(float *row_sumexp, const float *logits, const float *row_max, int N,
                         int Vl, int v_valid);
void cpu_xent_target_logit(float *target_logit, const float *logits, const int *targets, int N,
                           int Vl, int v_start);
void cpu_xent_losses(float *losses, const float *row_max, const float *row_sumexp,
                     const float *target_logit, int N);
void cpu_xent_backward_inplace(float *logits, const float *row_max, const float *row_sumexp,
                               const int *targets, float dloss, int N, int Vl, int v_valid,
                               int v_start);

/* ---- dropout.c ---- */
/* f[0, n) = the mask factors (0 or scale) of global columns [col, col + n) of global row `row`,
 * counter word 3 = word3 (ops.h dropout_mask_t); attention.c draws its tiles' masks with it. */
#define DROP_MAX_COLS 256 /* the most factors one cpu_dropout_factors call draws */
void cpu_dropout_factors(float *f, const dropout_mask_t *m, uint64_t row, uint64_t col, int n,
                         uint32_t word3);
void cpu_dropout_apply(float *out, const float *in, size_t rows, int cols,
                       const dropout_mask_t *mask);

/* ---- xent_reg.c ---- */
void cpu_xent_row_sum(float *row_sum, const float *logits, int N, int Vl, int v_valid);
void cpu_xent_losses_regularized(float *losses, float *zloss, const float *row_max,
                                 const float *row_sumexp, const float *target_logit,
                                 const float *row_sum, int N, int V, float e, float zc);
void cpu_xent_backward_regularized_inplace(float *logits, const float *row_max,
                                           const float *row_sumexp, const int *targets,
                                           float dloss, int N, int Vl, int v_valid, int v_start,
                                           int V, float e, float zc);

/* ---- moe.c: noisy gating, router softmax + top-k, dispatch and combine ---- */
void cpu_moe_noise_forward(float *logits, const float *noise, int N, int E, float scale,
                           const uint32_t key[2], uint64_t row0);
void cpu_moe_noise_backward(float *dnoise, const float *dlogits, const float *noise, int N,
                            int E, float scale, const uint32_t key[2], uint64_t row0);
void cpu_moe_softmax_topk(float *probs, float *lse, int *idx, float *gates, const float *logits,
                          int N, int E, int k);
void cpu_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                             const int *idx, const float *gates, const float *dgates,
                             const float *dprob_bias, float dz, int N, int E, int k);
void cpu_moe_gather_rows(float *out, const float *x, const int *rows, int M, int C);
void cpu_moe_scatter_add_rows(float *y, const float *in, const int *rows, const float *w, int M,
                              int C);
void cpu_moe_combine_backward(float *din, float *dw, const float *dy, const float *in,
                              const int *rows, const float *w, int M, int C);

/* ---- adamw.c ---- */
double cpu_sumsq(const float *x, size_t n);
void cpu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                      int t);

/* Below this many elements an element-wise loop runs on one thread (fork/join costs ~1 us). */
#define CPU_PAR_MIN 16384

/* This thread's contiguous share [*i0, *i1) of [0, n), in multiples of 16 elements (one cache
 * line) so threads never write the same line. Element-wise kernels use it inside
 * `#pragma omp parallel` and run a plain loop over the range in a static helper: GCC reliably
 * auto-vectorises such loops, while `parallel for simd` with reductions stays scalar (GCC 12). */
#include <omp.h>
static inline void cpu_thread_range(size_t n, size_t *i0, size_t *i1) {
    const size_t n_threads = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
    size_t share = (n + n_threads - 1) / n_threads;
    share = (share + 15) & ~(size_t)15;
    *i0 = id * share < n ? id * share : n;
    *i1 = *i0 + share < n ? *i0 + share : n;
}

/* expf that GCC vectorises (glibc's expf stays a scalar call unless -ffast-math).
 * Cephes range reduction x = n ln2 + r with ln2 split in two (n*C1 is exact), |r| <= ln2/2,
 * then e^r by a degree-7 polynomial: relative error <= 2e-7 against libm for results above
 * 2.5e-38. n is rounded with the 1.5*2^23 trick (exact in ISO C mode: no -ffast-math, so the
 * add/subtract is not folded away), which also leaves n in the low mantissa bits of the sum:
 * 2^(n-1) is built from those bits with unsigned integer operations (no float-to-int
 * conversion anywhere: converting a NaN or out-of-range float is undefined behaviour in C),
 * then doubled, so n = 128 works and the last multiply overflows to +Inf the IEEE way.
 * The IEEE special cases, as libm gives them:
 *   exp(NaN) = NaN (quieted: it flows through the arithmetic), exp(+Inf) = +Inf,
 *   exp(x > 88.72284) = +Inf (overflow), exp(-Inf) = 0,
 *   exp(x < -86.6) = 0 (underflow: results below 2.5e-38, which libm rounds into the
 *   subnormals from 1.2e-38 down, are flushed to zero, so no lane ever computes a subnormal,
 *   each of which would cost a microcode assist).
 * Branch-free (two clamps and one select), so loops over it vectorise.
 * Where the target has a fused multiply-add (FP_FAST_FMAF: -march with FMA), the reduction and
 * the polynomial are written as fmaf, which GCC emits as one instruction: ISO C mode does not
 * contract a * b + c by itself (-ffp-contract=off), and each separate multiply and add is one
 * more vector operation. One core, 16 Ki floats in L1, best of 3000: y[i] = exp(x[i])
 * 0.446 -> 0.313 ns per element; worst relative error against exp in double over the test's
 * sweep 8.1e-8 -> 8.4e-8. Without FMA hardware fmaf would be a library call: the plain
 * multiply-add form is kept there. */
#define CPU_EXPF_LO -86.6f /* below: 0. n >= -125 here, so 2^(n-1) is a normal float */
#define CPU_EXPF_HI 88.8f  /* above: +Inf (ln(FLT_MAX) = 88.7228 overflows already) */
#ifdef FP_FAST_FMAF
#define CPU_MADD(a, b, c) fmaf(a, b, c)
#else
#define CPU_MADD(a, b, c) ((a) * (b) + (c))
#endif
static inline float cpu_expf(float x) {
    float xc = x < CPU_EXPF_LO ? CPU_EXPF_LO : x; /* a NaN compares false and stays */
    xc = xc > CPU_EXPF_HI ? CPU_EXPF_HI : xc;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: n sits in the low mantissa bits */
    const float n_magic = CPU_MADD(xc, 1.44269504088896341f, round_magic);
    const float n = n_magic - round_magic; /* round(xc / ln2), in [-125, 128] */
    float r = CPU_MADD(n, -0.693359375f, xc);
    r = CPU_MADD(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = CPU_MADD(p, r, 1.3981999507e-3f);
    p = CPU_MADD(p, r, 8.3334519073e-3f);
    p = CPU_MADD(p, r, 4.1665795894e-2f);
    p = CPU_MADD(p, r, 1.6666665459e-1f);
    p = CPU_MADD(p, r, 5.0000001201e-1f);
    const float y = CPU_MADD(p * r, r, r) + 1.0f;
    /* bits(n_magic) = 0x4B400000 + n: the low 9 bits of + 126 are n - 1 + 127, the biased
     * exponent of 2^(n-1) (1..254), and the shift drops the rest. */
    uint32_t bits;
    memcpy(&bits, &n_magic, sizeof bits);
    bits = (bits + 126u) << 23;
    float two_n_minus_1;
    memcpy(&two_n_minus_1, &bits, sizeof two_n_minus_1);
    const float e = (y * two_n_minus_1) * 2.0f; /* the first product is exact */
    return x < CPU_EXPF_LO ? 0.0f : e;
}

/* precision.h's round_bf16, bit for bit (test_ops sweeps every bit pattern), written branch-free
 * with integer operations so that loops over it vectorise (round_bf16's Inf/NaN branch keeps a
 * loop scalar): the upper 16 bits rounded to nearest even (a carry into the exponent rounds past
 * the largest finite value to Inf); Inf stays Inf, NaN stays NaN with the quiet bit set.
 * cpu_bf16_bits: the 16-bit storage of the same (kernels/cpu/matmul.c's bf16 operands). */
static inline uint32_t cpu_bf16_round_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t special = (u & 0x007fffffu) ? (u | 0x00400000u) & 0xffff0000u : u;
    return (u & 0x7f800000u) == 0x7f800000u ? special : rounded;
}
static inline float cpu_bf16_round(float x) {
    const uint32_t r = cpu_bf16_round_bits(x);
    float y;
    memcpy(&y, &r, sizeof y);
    return y;
}
static inline uint16_t cpu_bf16_bits(float x) { return (uint16_t)(cpu_bf16_round_bits(x) >> 16); }
/* The fp32 value of one stored 16-bit element of type t (DT_BF16 or DT_FP16; exact). */
static inline float cpu_half_to_float(uint16_t b, dtype_t t) {
    if (t == DT_FP16) {
        _Float16 h;
        memcpy(&h, &b, sizeof h);
        return (float)h;
    }
    const uint32_t u = (uint32_t)b << 16;
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
}

#endif
