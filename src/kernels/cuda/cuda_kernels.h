/* cuda_kernels.h — the CUDA backend's implementation of every op of kernels/ops.h: each function
 * cuda_<op> has exactly the signature of the ops_t member <op> and the same contract (ops.h says
 * what each computes; pointers are device memory unless ops.h says host). ops_cuda.cu puts them
 * in the table. Declared extern "C" so the C side and the CUDA files link together.
 * Owns: nothing (declarations). Used by: kernels/cuda/ops_cuda.cu, validation/gpu/. */
#ifndef LLMT_CUDA_KERNELS_H
#define LLMT_CUDA_KERNELS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/ops.h"
#ifdef __cplusplus
extern "C" {
#endif

void *cuda_alloc(size_t bytes, int category);
void cuda_free(void *p);
void cuda_to_device(void *dst, const void *src_host, size_t bytes);
void cuda_to_host(void *dst_host, const void *src, size_t bytes);
void cuda_zero(float *x, size_t n);
void cuda_embed_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v_start, int v_count, bool add_pos);
void cuda_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                         int T, int C, int v_start, int v_count, bool add_pos);
void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, int N, int C);
void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, const float *mean, const float *rstd, int N, int C,
                             bool accumulate_dinp, bool overwrite_dw);
void cuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                         int C, int OC);
void cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC, bool accumulate_dinp,
                          bool overwrite_dw);
size_t cuda_attention_scratch_floats(int B, int T, int NH, int hs);
void cuda_attention_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                            const float *qkv, int B, int T, int NH, int hs);
void cuda_attention_backward(float *dqkv, float *scratch, size_t scratch_floats, const float *dout,
                             const float *qkv, const float *out, const float *lse, int B, int T,
                             int NH, int hs);
void cuda_gelu_forward(float *out, const float *inp, size_t n);
void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void cuda_add(float *out, const float *a, const float *b, size_t n);
void cuda_xent_row_max(float *row_max, const float *logits, int N, int Vl, int v_valid);
void cuda_xent_row_sumexp(float *row_sumexp, const float *logits, const float *row_max, int N,
                          int Vl, int v_valid);
void cuda_xent_target_logit(float *target_logit, const float *logits, const int *targets, int N,
                            int Vl, int v_start);
void cuda_xent_losses(float *losses, const float *row_max, const float *row_sumexp,
                      const float *target_logit, int N);
void cuda_xent_backward_inplace(float *logits, const float *row_max, const float *row_sumexp,
                                const int *targets, float dloss, int N, int Vl, int v_valid,
                                int v_start);
double cuda_sumsq(const float *x, size_t n);
void cuda_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                       int t);
void cuda_scale(float *x, float s, size_t n);
void cuda_quantize(float *x, size_t n, dtype_t t);
void cuda_quantize_copy(float *dst, const float *src, size_t n, dtype_t t);
void cuda_store_as(void *dst, const float *src, size_t n, dtype_t t);
void cuda_load_as(float *dst, const void *src, size_t n, dtype_t t);
void cuda_matmul_forward_w(float *out, const float *inp, const void *w, dtype_t wt,
                           const float *bias, int N, int C, int OC);
void cuda_matmul_backward_w(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const void *w, dtype_t wt, int N, int C, int OC,
                            bool accumulate_dinp, bool overwrite_dw);
void cuda_embed_forward_w(float *out, const int *tokens, const void *wte, const void *wpe,
                          dtype_t wt, int B, int T, int C, int v_start, int v_count,
                          bool add_pos);
bool cuda_any_nonfinite(const float *x, size_t n);
void cuda_set_product_type(dtype_t t);
bool cuda_products_native(dtype_t t);
bool cuda_products_faster(dtype_t t);
const char * cuda_describe(void);
double cuda_hardware_peak(dtype_t t, char *how, size_t len);
void cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                          float eps);
void cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C, bool accumulate_dinp,
                           bool overwrite_dw);
void cuda_rope_forward(float *x, const float *cos, const float *sin, int B, int T, int NH, int hs);
void cuda_rope_backward(float *d, const float *cos, const float *sin, int B, int T, int NH, int hs);
void cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                          const float *up, size_t n);
void cuda_attention_gqa_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                                const float *q, const float *k, const float *v, int B, int T,
                                int NH, int NKV, int hs);
void cuda_attention_gqa_backward(float *dq, float *dk, float *dv, float *scratch,
                                 size_t scratch_floats, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out, const float *lse,
                                 int B, int T, int NH, int NKV, int hs);
void cuda_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd,
                                     const float *a, const float *b, const float *w,
                                     const float *bias, int N, int C, dtype_t t);
void cuda_dropout_apply(float *out, const float *in, size_t rows, int cols,
                        const dropout_mask_t *mask);
void cuda_attention_forward_dropout(float *out, float *lse, float *scratch, size_t scratch_floats,
                                    const float *qkv, int B, int T, int NH, int hs,
                                    const dropout_mask_t *mask);
void cuda_attention_backward_dropout(float *dqkv, float *scratch, size_t scratch_floats,
                                     const float *dout, const float *qkv, const float *out,
                                     const float *lse, int B, int T, int NH, int hs,
                                     const dropout_mask_t *mask);
void cuda_attention_gqa_forward_dropout(float *out, float *lse, float *scratch,
                                        size_t scratch_floats, const float *q, const float *k,
                                        const float *v, int B, int T, int NH, int NKV, int hs,
                                        const dropout_mask_t *mask);
void cuda_attention_gqa_backward_dropout(float *dq, float *dk, float *dv, float *scratch,
                                         size_t scratch_floats, const float *dout, const float *q,
                                         const float *k, const float *v, const float *out,
                                         const float *lse, int B, int T, int NH, int NKV, int hs,
                                         const dropout_mask_t *mask);
void cuda_xent_row_sum(float *row_sum, const float *logits, int N, int Vl, int v_valid);
void cuda_xent_losses_regularized(float *losses, float *zloss, const float *row_max,
                                  const float *row_sumexp, const float *target_logit,
                                  const float *row_sum, int N, int V, float e, float zc);
void cuda_xent_backward_regularized_inplace(float *logits, const float *row_max,
                                            const float *row_sumexp, const int *targets,
                                            float dloss, int N, int Vl, int v_valid, int v_start,
                                            int V, float e, float zc);
void cuda_moe_noise_forward(float *logits, const float *noise, int N, int E, float scale,
                            const uint32_t key[2], uint64_t row0);
void cuda_moe_noise_backward(float *dnoise, const float *dlogits, const float *noise, int N, int E,
                             float scale, const uint32_t key[2], uint64_t row0);
void cuda_moe_softmax_topk(float *probs, float *lse, int *idx, float *gates, const float *logits,
                           int N, int E, int k);
void cuda_moe_router_backward(float *dlogits, const float *probs, const float *lse, const int *idx,
                              const float *gates, const float *dgates, const float *dprob_bias,
                              float dz, int N, int E, int k);
void cuda_moe_gather_rows(float *out, const float *x, const int *rows, int M, int C);
void cuda_moe_scatter_add_rows(float *y, const float *in, const int *rows, const float *w, int M,
                               int C);
void cuda_moe_combine_backward(float *din, float *dw, const float *dy, const float *in,
                               const int *rows, const float *w, int M, int C);

#ifdef __cplusplus
}
#endif
#endif
