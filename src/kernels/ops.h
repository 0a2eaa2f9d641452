/* ops.h — the backend-neutral op interface: every numerical operation of the model, forward and
 * backward side by side. A backend (cpu/ now, cuda/ later) fills an ops_t table; model/ calls
 * only through it, so model/ never knows which backend runs it. Nothing here knows about MPI:
 * operations that need a reduction across ranks (vocab-parallel cross-entropy, row-parallel
 * matmul) are split into local pieces and model/ does the communication in between.
 *
 * Conventions (all tensors fp32, row-major, contiguous; pointers are backend memory):
 *  - Linear layers follow PyTorch: w[OC, C], y = x w^T + b.
 *  - In backward, gradients of INPUTS (dinp) are OVERWRITTEN unless the name says _acc;
 *    gradients of PARAMETERS (dw, db) are ACCUMULATED (+=) so micro-batches add up, unless
 *    `overwrite_dw` is set (first micro-batch: saves zeroing the gradient buffer).
 *  - No allocation inside an op: scratch buffers are passed in.
 *  - N = B*T rows. */
#ifndef LLMT_OPS_H
#define LLMT_OPS_H
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include "kernels/precision.h"

/* A dropout mask, never stored: element (row, col) of a tensor is kept iff the 32-bit word
 * (col % 4) of Philox-4x32-10(key, counter {col / 4, row, row >> 32, word3}) is >= threshold,
 * where row and col are GLOBAL indices (row: the token's index in the step's global batch, col:
 * the feature, or for attention the key position with word3 the global head), so every grid
 * draws the same mask for the same element, and a re-run (recomputation, backward) draws it
 * again. Kept elements are scaled by `scale` = 1 / (1 - p), dropped ones become 0. */
typedef struct dropout_mask {
    uint32_t key[2];      /* from (seed, site, layer, step): model/regularize.c */
    uint32_t threshold;   /* round(p * 2^32): the drop probability is threshold / 2^32 */
    float scale;          /* 1 / (1 - p) */
    uint64_t row0;        /* global row of local row 0 (attention: of batch row 0, query 0) */
    uint32_t col0;        /* global column of local column 0 (not used by attention) */
    uint32_t word3;       /* attention: global index of local head 0 (head h uses word3 + h) */
} dropout_mask_t;

/* One block of ring attention (context parallelism, model/ring.c): the query rows of one
 * sequence chunk against the keys of one chunk, `rows` rows each. Pointers are at the chunk's
 * first row of batch 0; rows of q / dq have stride ldq and batch stride bq (floats), of k, v,
 * dk, dv ldkv and bkv, of out, dout ldo = NH*hs and bo. The per-row statistics m, l (forward)
 * and lse (backward) are [B, NH, stat_ld] arrays, pointed at the chunk's first row. diag: the
 * query and key chunks are the same positions (causal inside); otherwise every key is visible
 * (the key chunk comes earlier in the sequence). Query head h reads k/v head h / (NH / NKV). */
typedef struct attn_block {
    const float *q, *k, *v, *dout;
    float *dq, *dk, *dv, *out, *m, *l;
    const float *lse;
    int B, NH, NKV, hs, rows, ldq, ldkv, ldo, stat_ld;
    size_t bq, bkv, bo;
    bool diag;
    /* attention dropout (NULL: none), as attention_forward_dropout's mask at global positions:
     * query row t of batch b, key j, local head h masked at (drop->row0 + b seq + q_pos + t,
     * k_pos + j, drop->word3 + h); q_pos, k_pos: the chunks' first global positions, seq: the
     * tokens of a whole sequence */
    const dropout_mask_t *drop;
    uint64_t q_pos, k_pos, seq;
} attn_block_t;

typedef struct ops {
    const char *name;

    /* ---- memory (device memory for GPU backends; plain aligned host memory on CPU) ----
     * alloc: `category` is a mem_category_t (core/alloc.h): the memory plan's accounting. */
    void *(*alloc)(size_t bytes, int category);
    void (*free)(void *p);
    void (*to_device)(void *dst, const void *src_host, size_t bytes);
    void (*to_host)(void *dst_host, const void *src, size_t bytes);
    /* Page-lock host memory that to_device / to_host copy often (the offloaded optimizer's
     * buffers), so the copies run at the link's full rate: cudaHostRegister on a GPU, nothing on
     * the CPU. host_unregister before the memory is freed. */
    void (*host_register)(void *host, size_t bytes);
    void (*host_unregister)(void *host);
    /* The backend's own memory, for the memory plan and the end-of-run table: the bytes its
     * tracked buffers may take (a GPU's free memory at the first call less a reserve for the
     * libraries' own buffers; 0: the backend computes in host memory, as the CPU's), and the
     * high-water mark of what alloc handed out under a category (MEM_CATEGORIES: of the total). */
    size_t (*memory_capacity)(void);
    size_t (*memory_peak)(int category);
    void (*zero)(float *x, size_t n);

    /* ---- embedding: out[N, C] = wte[tok - v_start, :] + wpe[t, :] ----
     * tokens[B*T]; wte is the local vocab shard [v_count, C] covering ids [v_start, v_start+v_count);
     * a token outside the shard contributes 0 (vocab-parallel: model/ sums over tp).
     * add_pos: add wpe (only one tp rank adds it under vocab parallelism). */
    void (*embed_forward)(float *out, const int *tokens, const float *wte, const float *wpe,
                          int B, int T, int C, int v_start, int v_count, bool add_pos);
    /* dwte[v_count, C] += dout rows for owned tokens; dwpe[T, C] += sum over b (if add_pos). */
    void (*embed_backward)(float *dwte, float *dwpe, const float *dout, const int *tokens,
                           int B, int T, int C, int v_start, int v_count, bool add_pos);

    /* ---- layernorm: out[N, C] = (x - mean) * rstd * w + b; saves mean[N], rstd[N] (eps 1e-5) ---- */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    /* dinp[N, C] OVERWRITTEN, or += if accumulate_dinp (pre-LN blocks add into the residual
     * gradient); dw, db accumulated (overwritten with overwrite_dw). dinp must not alias dout
     * or inp. */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C, bool accumulate_dinp,
                               bool overwrite_dw);

    /* ---- linear: out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC] (bias may be NULL) ---- */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC);
    /* dinp[N, C] = dout @ w (OVERWRITTEN, or += if accumulate_dinp; skipped if dinp NULL);
     * dw[OC, C] += dout^T @ inp; dbias[OC] += colsum(dout) (skipped if NULL); with
     * overwrite_dw both dw and dbias are overwritten instead. dw NULL: dw and dbias skipped
     * (the input gradient alone: a split backward's B; its W calls with dinp NULL, w unused). */
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC,
                            bool accumulate_dinp, bool overwrite_dw);

    /* ---- causal self-attention over NH local heads of size hs, without the T x T matrix ----
     * qkv[B, T, 3*NH*hs] laid out as [q heads | k heads | v heads], each head hs wide;
     * out[B, T, NH*hs]; lse[B, NH, T] saves each query row's log-sum-exp of its scaled scores
     * (log sum_{j<=t} exp(q_t k_j / sqrt(hs))) for backward, which recomputes the softmax from
     * q, k and lse instead of keeping the probabilities: memory linear in T. Scale 1/sqrt(hs).
     * lse stays fp32 in every precision (as on a GPU: rounded to bf16, an lse of 7 = log 1100
     * would be off by up to 7 * 2^-9, scaling every probability recomputed from it by up to
     * 1.4%); out is stored (rounded) like any other activation.
     * scratch[scratch_floats] is clobbered by forward and backward alike: at least
     * attention_scratch_floats(B, T, NH, hs) floats, which is a few tiles per thread (CPU:
     * 130 KiB per OpenMP thread that can have work, whatever T is). A backend runs on at most
     * as many threads as the scratch has room for. */
    size_t (*attention_scratch_floats)(int B, int T, int NH, int hs);
    void (*attention_forward)(float *out, float *lse, float *scratch, size_t scratch_floats,
                              const float *qkv, int B, int T, int NH, int hs);
    /* dqkv[B, T, 3*NH*hs] OVERWRITTEN, from dout[B, T, NH*hs] and the forward's qkv, out, lse
     * (out because the softmax backward's sum_j P_tj (dout v^T)_tj is rowsum(dout * out)). */
    void (*attention_backward)(float *dqkv, float *scratch, size_t scratch_floats,
                               const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int NH, int hs);

    /* ---- GELU, tanh approximation: out[n] = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) ---- */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    /* dinp[n] = gelu'(inp) * dout  (OVERWRITTEN; dinp may alias dout) */
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

    /* ---- residual: out[n] = a[n] + b[n] (out may alias a) ---- */
    void (*add)(float *out, const float *a, const float *b, size_t n);

    /* ---- cross-entropy over (possibly vocab-sharded) logits[N, Vl] ----
     * Columns >= v_valid of the local shard are padding and are ignored (masked out).
     * Forward in three local pieces so model/ can all-reduce between them under tp:
     *   row_max[N]   = max over valid columns                    (tp: all-reduce MAX)
     *   row_sumexp[N]= sum exp(logit - row_max)                  (tp: all-reduce SUM)
     *   target_logit[N] = logits[i, targets[i]-v_start] if owned else 0 (tp: all-reduce SUM)
     * loss_i = log(row_sumexp) + row_max - target_logit.
     * A shard with no valid column (v_valid <= 0) gives row_max = -inf and row_sumexp = 0, the
     * neutral elements of the two all-reduces. */
    void (*xent_row_max)(float *row_max, const float *logits, int N, int Vl, int v_valid);
    void (*xent_row_sumexp)(float *row_sumexp, const float *logits, const float *row_max,
                            int N, int Vl, int v_valid);
    void (*xent_target_logit)(float *target_logit, const float *logits, const int *targets,
                              int N, int Vl, int v_start);
    /* losses[N] = log(sumexp) + max - target_logit */
    void (*xent_losses)(float *losses, const float *row_max, const float *row_sumexp,
                        const float *target_logit, int N);
    /* IN PLACE: logits[N, Vl] becomes dlogits = dloss * (softmax - onehot(target));
     * padding columns get 0. dloss is the same for every row (1/(tokens in the global batch)). */
    void (*xent_backward_inplace)(float *logits, const float *row_max, const float *row_sumexp,
                                  const int *targets, float dloss, int N, int Vl, int v_valid,
                                  int v_start);

    /* ---- optimizer and reductions ---- */
    /* sum of squares of x[n] in double (for the global gradient norm) */
    double (*sumsq)(const float *x, size_t n);
    /* AdamW on one parameter tensor (decoupled decay; bias-corrected):
     *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
     * t = step counted from 1. */
    void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale, int t);
    /* x[n] *= s */
    void (*scale)(float *x, float s, size_t n);

    /* ---- precision ---- */
    /* x[n] was just computed (fp32) and is now stored as type t: the CPU backend rounds it in
     * place to the nearest t value (precision.h); nothing for DT_FP32. */
    void (*quantize)(float *x, size_t n, dtype_t t);
    /* dst[n] = src[n] stored as type t (the low-precision weights copy of fp32 master weights) */
    void (*quantize_copy)(float *dst, const float *src, size_t n, dtype_t t);
    /* whether x[n] holds an Inf or NaN (fp16 overflow, found before a step is applied) */
    bool (*any_nonfinite)(const float *x, size_t n);
    /* Products (matmul_forward/backward) take their inputs as type t from now on: bf16 runs on
     * native bf16 instructions where the backend has them (the inputs already hold bf16 values,
     * so only the order of the fp32 additions changes). Set once, before the first step. */
    void (*set_product_type)(dtype_t t);
    /* Whether products of type t can run natively here (false: fp32 products of the rounded
     * values), and whether native ones are expected to be faster than fp32 products here. */
    bool (*products_native)(dtype_t t);
    bool (*products_faster)(dtype_t t);

    /* ---- weights stored as 16-bit values (the weights copy of a mixed-precision run) ----
     * A tensor "of type wt" holds n elements of dtype_bytes(wt) bytes each (bf16: the upper
     * half of the fp32 bits; fp16: IEEE binary16); wt = DT_FP32 is a plain float array.
     * store_as: dst[n] of type t = src[n] rounded to t (quantize_copy's values, in t's own
     * storage); load_as: dst[n] = the fp32 values of src[n] of type t (exact). */
    void (*store_as)(void *dst, const float *src, size_t n, dtype_t t);
    void (*load_as)(float *dst, const void *src, size_t n, dtype_t t);
    /* matmul_forward / matmul_backward with w[OC, C] of type wt: the same numbers as the fp32
     * ops given load_as(w) (products of type wt read the stored elements directly). */
    void (*matmul_forward_w)(float *out, const float *inp, const void *w, dtype_t wt,
                             const float *bias, int N, int C, int OC);
    void (*matmul_backward_w)(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const void *w, dtype_t wt, int N, int C, int OC,
                              bool accumulate_dinp, bool overwrite_dw);
    /* embed_forward with wte and wpe of type wt (wpe may be NULL, as there) */
    void (*embed_forward_w)(float *out, const int *tokens, const void *wte, const void *wpe,
                            dtype_t wt, int B, int T, int C, int v_start, int v_count,
                            bool add_pos);

    /* ---- about the backend, for the startup summary and MFU ---- */
    /* One line: the GEMM library, its version and the kernels it runs on this machine. */
    const char *(*describe)(void);
    /* Peak FLOP/s of this rank's hardware for products of type t; how[len] says how it was
     * found (measured, or from the device's properties). */
    double (*hardware_peak)(dtype_t t, char *how, size_t len);

    /* ---- Llama-family ops (&model norm, pos, mlp, n_kv_head) ---- */
    /* RMSNorm: out[N, C] = inp * rstd * w with rstd[N] = 1 / sqrt(mean_c(inp^2) + eps), saved. */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N,
                            int C, float eps);
    /* dinp[N, C] OVERWRITTEN, or += if accumulate_dinp; dw[C] accumulated (overwritten with
     * overwrite_dw). dinp must not alias dout or inp. */
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C,
                             bool accumulate_dinp, bool overwrite_dw);
    /* Rotary position embedding IN PLACE on x[B, T, NH*hs] (q or k), rotate-half pairing (as
     * GPT-NeoX and Hugging Face Llama): for each head and i < hs/2, with c = cos[t, i],
     * s = sin[t, i] (tables [T, hs/2] of the angle t * theta^(-2i/hs), made once by model/):
     *   x[i] <- x[i] c - x[i + hs/2] s;   x[i + hs/2] <- x[i + hs/2] c + x[i] s.  */
    void (*rope_forward)(float *x, const float *cos, const float *sin, int B, int T, int NH,
                         int hs);
    /* The transposed rotation IN PLACE on the gradient d[B, T, NH*hs] (rotation by -angle). */
    void (*rope_backward)(float *d, const float *cos, const float *sin, int B, int T, int NH,
                          int hs);
    /* SwiGLU: out[n] = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
    void (*swiglu_forward)(float *out, const float *gate, const float *up, size_t n);
    /* dgate[n] = dout * up * silu'(gate), dup[n] = dout * silu(gate) (OVERWRITTEN; dgate may
     * alias dout, dup may not). */
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, size_t n);
    /* Grouped-query causal attention: q[B, T, NH*hs], k, v[B, T, NKV*hs] (separate tensors);
     * query head h reads k/v head h / (NH / NKV). out, lse, scratch, scale as
     * attention_forward (NKV = NH is multi-head attention, the same numbers). */
    void (*attention_gqa_forward)(float *out, float *lse, float *scratch, size_t scratch_floats,
                                  const float *q, const float *k, const float *v, int B, int T,
                                  int NH, int NKV, int hs);
    /* dq[B, T, NH*hs], dk, dv[B, T, NKV*hs] OVERWRITTEN (dk, dv summed over the group's query
     * heads), from dout and the forward's q, k, v, out, lse. */
    void (*attention_gqa_backward)(float *dq, float *dk, float *dv, float *scratch,
                                   size_t scratch_floats, const float *dout, const float *q,
                                   const float *k, const float *v, const float *out,
                                   const float *lse, int B, int T, int NH, int NKV, int hs);

    /* ---- ring attention's blocks (attn_block_t above; dropout on the probabilities as
     * attention_forward_dropout's, drawn at the block's global positions) ----
     * forward: the online softmax over one more key block: with running max m, running sum l
     * (l = 0: the row has seen no key yet) and the unnormalised output out, all updated in place
     * (zero out and l before the first block). finish: out[B, T, NH*hs] /= l and lse = m +
     * log(l) in place of m ([B, NH, T]), once every key block has been seen.
     * backward: dq, dk, dv += the block's share, from lse (the finished forward's), out, dout.
     * scratch as attention_forward's. */
    void (*attention_block_forward)(const attn_block_t *blk, float *scratch, size_t scratch_floats);
    void (*attention_block_finish)(float *out, float *m_lse, const float *l, int B, int T, int NH,
                                   int hs);
    void (*attention_block_backward)(const attn_block_t *blk, float *scratch,
                                     size_t scratch_floats);
    /* dst rows [rows, cols] with row stride ld_dst = src rows (stride ld_src), or += them with
     * accumulate (packing the k | v columns of a layout for the ring, and back). */
    void (*copy_rows)(float *dst, int ld_dst, const float *src, int ld_src, size_t rows, int cols,
                      bool accumulate);

    /* ---- fused ops (each equals the composition of the ops above that it replaces) ----
     * residual + layernorm forward: res[N, C] = a + b, then out[N, C] = layernorm(res) with w, bias
     * as layernorm_forward (saves mean[N], rstd[N]); both res and out stored as type t (rounded
     * as quantize does; res before it is normalised). Equals add, quantize(res), layernorm_forward,
     * quantize(out), with one pass fewer over res. res may alias a or b; out aliases nothing.
     * Backward: layernorm_backward with accumulate_dinp into the residual's gradient (the add
     * passes its gradient through unchanged to a and b). */
    void (*residual_layernorm_forward)(float *res, float *out, float *mean, float *rstd,
                                       const float *a, const float *b, const float *w,
                                       const float *bias, int N, int C, dtype_t t);

    /* ---- regularisation: dropout, label smoothing, z-loss ----
     * dropout: out[rows, cols] = in * mask (ops.h dropout_mask_t; out may alias in). The same
     * call is its own backward: the gradient of in is dout * mask. */
    void (*dropout_apply)(float *out, const float *in, size_t rows, int cols,
                          const dropout_mask_t *mask);
    /* attention_forward / attention_backward with dropout on the probabilities: the softmax
     * statistics (lse) are those of the undropped probabilities P; out = (P * mask) v, row t of
     * batch b, key j, local head h masked at (row0 + b T + t, j, word3 + h). Backward recomputes
     * P per tile and draws the same mask. mask NULL: exactly attention_forward/backward. */
    void (*attention_forward_dropout)(float *out, float *lse, float *scratch,
                                      size_t scratch_floats, const float *qkv, int B, int T,
                                      int NH, int hs, const dropout_mask_t *mask);
    void (*attention_backward_dropout)(float *dqkv, float *scratch, size_t scratch_floats,
                                       const float *dout, const float *qkv, const float *out,
                                       const float *lse, int B, int T, int NH, int hs,
                                       const dropout_mask_t *mask);
    /* attention_gqa_forward / attention_gqa_backward with dropout on the probabilities, as
     * above: query head h (local) masked with word3 + h, whichever k/v head it reads. */
    void (*attention_gqa_forward_dropout)(float *out, float *lse, float *scratch,
                                          size_t scratch_floats, const float *q, const float *k,
                                          const float *v, int B, int T, int NH, int NKV, int hs,
                                          const dropout_mask_t *mask);
    void (*attention_gqa_backward_dropout)(float *dq, float *dk, float *dv, float *scratch,
                                           size_t scratch_floats, const float *dout,
                                           const float *q, const float *k, const float *v,
                                           const float *out, const float *lse, int B, int T,
                                           int NH, int NKV, int hs, const dropout_mask_t *mask);
    /* row_sum[N] = sum of logits over valid columns [0, v_valid) (tp: all-reduce SUM) */
    void (*xent_row_sum)(float *row_sum, const float *logits, int N, int Vl, int v_valid);
    /* With lse = log(row_sumexp) + row_max (all-reduced), V the real vocabulary, e the label
     * smoothing and zc the z-loss coefficient:
     *   losses[i] = lse - (1 - e) target_logit - (e / V) row_sum      (smoothed cross-entropy)
     *   zloss[i]  = zc * lse^2                                         (PaLM's z-loss) */
    void (*xent_losses_regularized)(float *losses, float *zloss, const float *row_max,
                                    const float *row_sumexp, const float *target_logit,
                                    const float *row_sum, int N, int V, float e, float zc);
    /* IN PLACE: logits[N, Vl] becomes the gradient of dloss * (losses + zloss):
     *   dloss * ((1 + 2 zc lse) softmax - (1 - e) onehot(target) - e / V), padding columns 0. */
    void (*xent_backward_regularized_inplace)(float *logits, const float *row_max,
                                              const float *row_sumexp, const int *targets,
                                              float dloss, int N, int Vl, int v_valid,
                                              int v_start, int V, float e, float zc);
    /* ---- Mixture of Experts (model/moe.c drives these; E experts, k choices per token) ----
     * Noisy top-k gating (Shazeer et al. 2017), IN PLACE on the router logits[N, E]:
     *   logits[i, e] += scale * eps(i, e) * softplus(noise[i, e]),
     * eps(i, e) = rng_normal(key, (row0 + i) * E + e) (core/rng.h), row0 the global token of
     * local row 0: the same noise on every grid, drawn again in backward. */
    void (*moe_noise_forward)(float *logits, const float *noise, int N, int E, float scale,
                              const uint32_t key[2], uint64_t row0);
    /* dnoise[N, E] OVERWRITTEN = dlogits * scale * eps * sigmoid(noise) (d softplus = sigmoid);
     * the logits' own gradient passes through unchanged. */
    void (*moe_noise_backward)(float *dnoise, const float *dlogits, const float *noise, int N,
                               int E, float scale, const uint32_t key[2], uint64_t row0);
    /* probs[N, E] = softmax(logits) per row; lse[N] = logsumexp of the row (the router z-loss
     * is mean(lse^2)); idx[N, k] the k experts of largest probability, in descending order
     * (ties: the lower expert index first); gates[N, k] their probabilities, renormalised to
     * sum 1 over the k when k > 1 (k = 1: the probability itself, as Switch). */
    void (*moe_softmax_topk)(float *probs, float *lse, int *idx, float *gates,
                             const float *logits, int N, int E, int k);
    /* dlogits[N, E] OVERWRITTEN: the gradient of
     *   sum_{i,j} dgates[i, j] gates[i, j]      (through the renormalisation when k > 1)
     * + sum_{i,e} dprob_bias[e] probs[i, e]     (the load-balancing loss: dprob_bias[e] =
     *                                            dL_aux / dP_e / N, the same for every row)
     * + dz * sum_i lse[i]^2                     (the router z-loss, dz its weight)
     * with respect to the logits. dprob_bias may be NULL (no aux loss). */
    void (*moe_router_backward)(float *dlogits, const float *probs, const float *lse,
                                const int *idx, const float *gates, const float *dgates,
                                const float *dprob_bias, float dz, int N, int E, int k);
    /* out[M, C] row r = x[rows[r], :] (dispatch: the tokens of each expert, one after another) */
    void (*moe_gather_rows)(float *out, const float *x, const int *rows, int M, int C);
    /* y[rows[r], :] += w[r] * in[r, :] for r = 0 .. M-1 in this order (combine; w NULL: 1; a row
     * of y may be hit several times: deterministic, same order on every run) */
    void (*moe_scatter_add_rows)(float *y, const float *in, const int *rows, const float *w,
                                 int M, int C);
    /* Backward of moe_scatter_add_rows: din[M, C] OVERWRITTEN = w[r] * dy[rows[r], :] (w NULL: 1);
     * dw[M] OVERWRITTEN = dot(dy[rows[r], :], in[r, :]) (dw NULL: skipped). */
    void (*moe_combine_backward)(float *din, float *dw, const float *dy, const float *in,
                                 const int *rows, const float *w, int M, int C);
} ops_t;

#ifdef __cplusplus
extern "C" {
#endif
/* The CPU backend (C + OpenMP + CBLAS). */
const ops_t *ops_cpu(void);
/* The CUDA backend (kernels/cuda/; cuBLASLt). Defined only in a CUDA build (make CUDA=1, which
 * compiles everything with -DLLMT_CUDA); callers guard it with #ifdef LLMT_CUDA. */
const ops_t *ops_cuda(void);
#ifdef __cplusplus
}
#endif
#endif
