/* ops_devsim.c — the CPU backend behind a simulated device (see ops_devsim.h). The wrappers
 * below were written from ops.h's table, one per op: each checks that every tensor argument is
 * device memory (the arena), opens the arena, runs the CPU op, closes it. */
#include "kernels/cpu/ops_devsim.h"
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"

/* ---- the arena: one reserved range, PROT_NONE while closed ---------------------------------- */

#define ALIGN 256 /* cudaMalloc's */

typedef struct hole {
    char *p;
    size_t bytes;
} hole_t;

static const ops_t *base;
static char *arena, *top; /* [arena, arena + reserved): reserved; [arena, top): handed out */
static size_t reserved;
static int opened;    /* nesting depth of open (ops inside ops, transfers) */
static hole_t *holes; /* freed blocks, reused first fit */
static size_t n_holes, cap_holes;
static const char *current_op = "-";
static mem_tally_t tally; /* the arena's blocks per category, as a GPU's */

/* The block header in front of each block (ALIGN bytes, read only while the arena is open). */
typedef struct block_head {
    size_t need;
    int category;
} block_head_t;

/* The simulated device's memory: the arena, counted per category as a GPU's would be. */
static size_t g_memory_capacity(void) { return reserved; }
static size_t g_memory_peak(int category) { return mem_tally_peak(&tally, category); }

bool devsim_contains(const void *p) {
    return arena && (const char *)p >= arena && (const char *)p < arena + reserved;
}

static void protect(int prot) {
    if (top > arena)
        SYS_CHECK(mprotect(arena, (size_t)(top - arena), prot));
}

void devsim_open(void) {
    if (opened++ == 0)
        protect(PROT_READ | PROT_WRITE);
}

void devsim_close(void) {
    ASSERT(opened > 0);
    if (--opened == 0)
        protect(PROT_NONE);
}

/* A touch of the closed arena: host code read or wrote device memory without a copy. */
static void on_fault(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (!devsim_contains(si->si_addr)) { /* not ours: the default action */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    char msg[256];
    const int n = snprintf(msg, sizeof msg,
                           "llmtrain: devsim: host code touched device memory at %p (offset %zu of "
                           "the arena) outside an op (the last op: %s); the call stack "
                           "(addr2line -f -e <program> <+offset> names each frame):\n",
                           si->si_addr, (size_t)((char *)si->si_addr - arena), current_op);
    if (write(2, msg, (size_t)n) < 0)
        _exit(70);
    void *frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
    _exit(70);
}

void devsim_catch_faults(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    SYS_CHECK(sigaction(SIGSEGV, &sa, NULL));
}

static void arena_create(size_t bytes) {
    reserved = bytes;
    void *p = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        die_call(__FILE__, __LINE__, "mmap", strerror(errno));
    arena = top = p;
    devsim_catch_faults();
}

static void *g_alloc(size_t bytes, int category) {
    if (category < 0 || category >= MEM_CATEGORIES) category = MEM_WORKSPACE;
    _Static_assert(sizeof(block_head_t) <= ALIGN, "the block header fits in front of the block");
    const size_t need = (bytes + ALIGN - 1) / ALIGN * ALIGN + ALIGN;
    char *p = NULL;
    for (size_t i = 0; i < n_holes && !p; i++)
        if (holes[i].bytes == need) {
            p = holes[i].p;
            holes[i] = holes[--n_holes];
        }
    if (!p) {
        if ((size_t)(top - arena) + need > reserved)
            fatal_user("devsim: the simulated device is full (%zu MiB; LLMT_DEVSIM_MB)",
                       reserved >> 20);
        p = top;
        top += need;
        if (opened) /* the new block's pages open like the rest */
            SYS_CHECK(mprotect(arena, (size_t)(top - arena), PROT_READ | PROT_WRITE));
    }
    const block_head_t head = {need, category};
    devsim_open(); /* the header, where only g_free reads it */
    memcpy(p, &head, sizeof head);
    devsim_close();
    mem_tally_add(&tally, category, need - ALIGN);
    return p + ALIGN;
}

static void g_free(void *p) {
    if (!p)
        return;
    ASSERT(devsim_contains(p));
    block_head_t head;
    devsim_open();
    memcpy(&head, (char *)p - ALIGN, sizeof head);
    devsim_close();
    mem_tally_sub(&tally, head.category, head.need - ALIGN);
    if (n_holes == cap_holes) {
        cap_holes = cap_holes ? 2 * cap_holes : 64;
        holes = xrealloc_small(holes, cap_holes * sizeof *holes);
    }
    holes[n_holes++] = (hole_t){(char *)p - ALIGN, head.need};
}

/* Every tensor an op gets must be device memory (NULL: an optional argument left out). */
static void enter(const char *op, const void *const *ptrs, const char *const *names, int n) {
    current_op = op;
    for (int i = 0; i < n; i++)
        if (ptrs[i] && !devsim_contains(ptrs[i])) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "devsim: argument '%s' = %p is host memory, not device memory", names[i],
                     ptrs[i]);
            die_call(__FILE__, __LINE__, op, msg);
        }
    devsim_open();
}

static void leave(void) { devsim_close(); }

static void g_to_device(void *dst, const void *src_host, size_t bytes) {
    const void *ptrs[] = {dst};
    static const char *const names[] = {"dst"};
    enter("to_device", ptrs, names, 1);
    ASSERT(!devsim_contains(src_host) || bytes == 0);
    base->to_device(dst, src_host, bytes);
    leave();
}

static void g_to_host(void *dst_host, const void *src, size_t bytes) {
    const void *ptrs[] = {src};
    static const char *const names[] = {"src"};
    enter("to_host", ptrs, names, 1);
    ASSERT(!devsim_contains(dst_host) || bytes == 0);
    base->to_host(dst_host, src, bytes);
    leave();
}

/* ---- one wrapper per op ---------------------------------------------------------------------- */

static void g_zero(float *x, size_t n) {
    const void *ptrs[] = {x};
    static const char *const names[] = {"x"};
    enter("zero", ptrs, names, 1);
    base->zero(x, n);
    leave();
}

static void g_embed_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                            int B, int T, int C, int v_start, int v_count, bool add_pos) {
    const void *ptrs[] = {out, tokens, wte, wpe};
    static const char *const names[] = {"out", "tokens", "wte", "wpe"};
    enter("embed_forward", ptrs, names, 4);
    base->embed_forward(out, tokens, wte, wpe, B, T, C, v_start, v_count, add_pos);
    leave();
}

static void g_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                             int T, int C, int v_start, int v_count, bool add_pos) {
    const void *ptrs[] = {dwte, dwpe, dout, tokens};
    static const char *const names[] = {"dwte", "dwpe", "dout", "tokens"};
    enter("embed_backward", ptrs, names, 4);
    base->embed_backward(dwte, dwpe, dout, tokens, B, T, C, v_start, v_count, add_pos);
    leave();
}

static void g_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
    const void *ptrs[] = {out, mean, rstd, inp, w, b};
    static const char *const names[] = {"out", "mean", "rstd", "inp", "w", "b"};
    enter("layernorm_forward", ptrs, names, 6);
    base->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    leave();
}

static void g_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C, bool accumulate_dinp,
                                 bool overwrite_dw) {
    const void *ptrs[] = {dinp, dw, db, dout, inp, w, mean, rstd};
    static const char *const names[] = {"dinp", "dw", "db", "dout", "inp", "w", "mean", "rstd"};
    enter("layernorm_backward", ptrs, names, 8);
    base->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, accumulate_dinp,
                             overwrite_dw);
    leave();
}

static void g_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                             int C, int OC) {
    const void *ptrs[] = {out, inp, w, bias};
    static const char *const names[] = {"out", "inp", "w", "bias"};
    enter("matmul_forward", ptrs, names, 4);
    base->matmul_forward(out, inp, w, bias, N, C, OC);
    leave();
}

static void g_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int C, int OC,
                              bool accumulate_dinp, bool overwrite_dw) {
    const void *ptrs[] = {dinp, dw, dbias, dout, inp, w};
    static const char *const names[] = {"dinp", "dw", "dbias", "dout", "inp", "w"};
    enter("matmul_backward", ptrs, names, 6);
    base->matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp, overwrite_dw);
    leave();
}

static void g_attention_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                                const float *qkv, int B, int T, int NH, int hs) {
    const void *ptrs[] = {out, lse, scratch, qkv};
    static const char *const names[] = {"out", "lse", "scratch", "qkv"};
    enter("attention_forward", ptrs, names, 4);
    base->attention_forward(out, lse, scratch, scratch_floats, qkv, B, T, NH, hs);
    leave();
}

static void g_attention_backward(float *dqkv, float *scratch, size_t scratch_floats,
                                 const float *dout, const float *qkv, const float *out,
                                 const float *lse, int B, int T, int NH, int hs) {
    const void *ptrs[] = {dqkv, scratch, dout, qkv, out, lse};
    static const char *const names[] = {"dqkv", "scratch", "dout", "qkv", "out", "lse"};
    enter("attention_backward", ptrs, names, 6);
    base->attention_backward(dqkv, scratch, scratch_floats, dout, qkv, out, lse, B, T, NH, hs);
    leave();
}

static void g_gelu_forward(float *out, const float *inp, size_t n) {
    const void *ptrs[] = {out, inp};
    static const char *const names[] = {"out", "inp"};
    enter("gelu_forward", ptrs, names, 2);
    base->gelu_forward(out, inp, n);
    leave();
}

static void g_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    const void *ptrs[] = {dinp, inp, dout};
    static const char *const names[] = {"dinp", "inp", "dout"};
    enter("gelu_backward", ptrs, names, 3);
    base->gelu_backward(dinp, inp, dout, n);
    leave();
}

static void g_add(float *out, const float *a, const float *b, size_t n) {
    const void *ptrs[] = {out, a, b};
    static const char *const names[] = {"out", "a", "b"};
    enter("add", ptrs, names, 3);
    base->add(out, a, b, n);
    leave();
}

static void g_xent_row_max(float *row_max, const float *logits, int N, int Vl, int v_valid) {
    const void *ptrs[] = {row_max, logits};
    static const char *const names[] = {"row_max", "logits"};
    enter("xent_row_max", ptrs, names, 2);
    base->xent_row_max(row_max, logits, N, Vl, v_valid);
    leave();
}

static void g_xent_row_sumexp(float *row_sumexp, const float *logits, const float *row_max, int N,
                              int Vl, int v_valid) {
    const void *ptrs[] = {row_sumexp, logits, row_max};
    static const char *const names[] = {"row_sumexp", "logits", "row_max"};
    enter("xent_row_sumexp", ptrs, names, 3);
    base->xent_row_sumexp(row_sumexp, logits, row_max, N, Vl, v_valid);
    leave();
}

static void g_xent_target_logit(float *target_logit, const float *logits, const int *targets, int N,
                                int Vl, int v_start) {
    const void *ptrs[] = {target_logit, logits, targets};
    static const char *const names[] = {"target_logit", "logits", "targets"};
    enter("xent_target_logit", ptrs, names, 3);
    base->xent_target_logit(target_logit, logits, targets, N, Vl, v_start);
    leave();
}

static void g_xent_losses(float *losses, const float *row_max, const float *row_sumexp,
                          const float *target_logit, int N) {
    const void *ptrs[] = {losses, row_max, row_sumexp, target_logit};
    static const char *const names[] = {"losses", "row_max", "row_sumexp", "target_logit"};
    enter("xent_losses", ptrs, names, 4);
    base->xent_losses(losses, row_max, row_sumexp, target_logit, N);
    leave();
}

static void g_xent_backward_inplace(float *logits, const float *row_max, const float *row_sumexp,
                                    const int *targets, float dloss, int N, int Vl, int v_valid,
                                    int v_start) {
    const void *ptrs[] = {logits, row_max, row_sumexp, targets};
    static const char *const names[] = {"logits", "row_max", "row_sumexp", "targets"};
    enter("xent_backward_inplace", ptrs, names, 4);
    base->xent_backward_inplace(logits, row_max, row_sumexp, targets, dloss, N, Vl, v_valid,
                                v_start);
    leave();
}

static double g_sumsq(const float *x, size_t n) {
    const void *ptrs[] = {x};
    static const char *const names[] = {"x"};
    enter("sumsq", ptrs, names, 1);
    const double r = base->sumsq(x, n);
    leave();
    return r;
}

static void g_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay,
                           float grad_scale, int t) {
    const void *ptrs[] = {param, grad, m, v};
    static const char *const names[] = {"param", "grad", "m", "v"};
    enter("adamw_update", ptrs, names, 4);
    base->adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    leave();
}

static void g_scale(float *x, float s, size_t n) {
    const void *ptrs[] = {x};
    static const char *const names[] = {"x"};
    enter("scale", ptrs, names, 1);
    base->scale(x, s, n);
    leave();
}

static void g_quantize(float *x, size_t n, dtype_t t) {
    const void *ptrs[] = {x};
    static const char *const names[] = {"x"};
    enter("quantize", ptrs, names, 1);
    base->quantize(x, n, t);
    leave();
}

static void g_quantize_copy(float *dst, const float *src, size_t n, dtype_t t) {
    const void *ptrs[] = {dst, src};
    static const char *const names[] = {"dst", "src"};
    enter("quantize_copy", ptrs, names, 2);
    base->quantize_copy(dst, src, n, t);
    leave();
}

static void g_store_as(void *dst, const float *src, size_t n, dtype_t t) {
    const void *ptrs[] = {dst, src};
    static const char *const names[] = {"dst", "src"};
    enter("store_as", ptrs, names, 2);
    base->store_as(dst, src, n, t);
    leave();
}

static void g_load_as(float *dst, const void *src, size_t n, dtype_t t) {
    const void *ptrs[] = {dst, src};
    static const char *const names[] = {"dst", "src"};
    enter("load_as", ptrs, names, 2);
    base->load_as(dst, src, n, t);
    leave();
}

static void g_matmul_forward_w(float *out, const float *inp, const void *w, dtype_t wt,
                               const float *bias, int N, int C, int OC) {
    const void *ptrs[] = {out, inp, w, bias};
    static const char *const names[] = {"out", "inp", "w", "bias"};
    enter("matmul_forward_w", ptrs, names, 4);
    base->matmul_forward_w(out, inp, w, wt, bias, N, C, OC);
    leave();
}

static void g_matmul_backward_w(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const void *w, dtype_t wt, int N, int C,
                                int OC, bool accumulate_dinp, bool overwrite_dw) {
    const void *ptrs[] = {dinp, dw, dbias, dout, inp, w};
    static const char *const names[] = {"dinp", "dw", "dbias", "dout", "inp", "w"};
    enter("matmul_backward_w", ptrs, names, 6);
    base->matmul_backward_w(dinp, dw, dbias, dout, inp, w, wt, N, C, OC, accumulate_dinp,
                            overwrite_dw);
    leave();
}

static void g_embed_forward_w(float *out, const int *tokens, const void *wte, const void *wpe,
                              dtype_t wt, int B, int T, int C, int v_start, int v_count,
                              bool add_pos) {
    const void *ptrs[] = {out, tokens, wte, wpe};
    static const char *const names[] = {"out", "tokens", "wte", "wpe"};
    enter("embed_forward_w", ptrs, names, 4);
    base->embed_forward_w(out, tokens, wte, wpe, wt, B, T, C, v_start, v_count, add_pos);
    leave();
}

static bool g_any_nonfinite(const float *x, size_t n) {
    const void *ptrs[] = {x};
    static const char *const names[] = {"x"};
    enter("any_nonfinite", ptrs, names, 1);
    const bool r = base->any_nonfinite(x, n);
    leave();
    return r;
}

static void g_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                              int C, float eps) {
    const void *ptrs[] = {out, rstd, inp, w};
    static const char *const names[] = {"out", "rstd", "inp", "w"};
    enter("rmsnorm_forward", ptrs, names, 4);
    base->rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    leave();
}

static void g_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                               const float *w, const float *rstd, int N, int C,
                               bool accumulate_dinp, bool overwrite_dw) {
    const void *ptrs[] = {dinp, dw, dout, inp, w, rstd};
    static const char *const names[] = {"dinp", "dw", "dout", "inp", "w", "rstd"};
    enter("rmsnorm_backward", ptrs, names, 6);
    base->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, accumulate_dinp, overwrite_dw);
    leave();
}

static void g_rope_forward(float *x, const float *cos, const float *sin, int B, int T, int NH,
                           int hs) {
    const void *ptrs[] = {x, cos, sin};
    static const char *const names[] = {"x", "cos", "sin"};
    enter("rope_forward", ptrs, names, 3);
    base->rope_forward(x, cos, sin, B, T, NH, hs);
    leave();
}

static void g_rope_backward(float *d, const float *cos, const float *sin, int B, int T, int NH,
                            int hs) {
    const void *ptrs[] = {d, cos, sin};
    static const char *const names[] = {"d", "cos", "sin"};
    enter("rope_backward", ptrs, names, 3);
    base->rope_backward(d, cos, sin, B, T, NH, hs);
    leave();
}

static void g_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    const void *ptrs[] = {out, gate, up};
    static const char *const names[] = {"out", "gate", "up"};
    enter("swiglu_forward", ptrs, names, 3);
    base->swiglu_forward(out, gate, up, n);
    leave();
}

static void g_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                              const float *up, size_t n) {
    const void *ptrs[] = {dgate, dup, dout, gate, up};
    static const char *const names[] = {"dgate", "dup", "dout", "gate", "up"};
    enter("swiglu_backward", ptrs, names, 5);
    base->swiglu_backward(dgate, dup, dout, gate, up, n);
    leave();
}

static void g_attention_gqa_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                                    const float *q, const float *k, const float *v, int B, int T,
                                    int NH, int NKV, int hs) {
    const void *ptrs[] = {out, lse, scratch, q, k, v};
    static const char *const names[] = {"out", "lse", "scratch", "q", "k", "v"};
    enter("attention_gqa_forward", ptrs, names, 6);
    base->attention_gqa_forward(out, lse, scratch, scratch_floats, q, k, v, B, T, NH, NKV, hs);
    leave();
}

static void g_attention_gqa_backward(float *dq, float *dk, float *dv, float *scratch,
                                     size_t scratch_floats, const float *dout, const float *q,
                                     const float *k, const float *v, const float *out,
                                     const float *lse, int B, int T, int NH, int NKV, int hs) {
    const void *ptrs[] = {dq, dk, dv, scratch, dout, q, k, v, out, lse};
    static const char *const names[] = {"dq", "dk", "dv", "scratch", "dout",
                                        "q",  "k",  "v",  "out",     "lse"};
    enter("attention_gqa_backward", ptrs, names, 10);
    base->attention_gqa_backward(dq, dk, dv, scratch, scratch_floats, dout, q, k, v, out, lse, B, T,
                                 NH, NKV, hs);
    leave();
}

static void g_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd,
                                         const float *a, const float *b, const float *w,
                                         const float *bias, int N, int C, dtype_t t) {
    const void *ptrs[] = {res, out, mean, rstd, a, b, w, bias};
    static const char *const names[] = {"res", "out", "mean", "rstd", "a", "b", "w", "bias"};
    enter("residual_layernorm_forward", ptrs, names, 8);
    base->residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, C, t);
    leave();
}

static void g_dropout_apply(float *out, const float *in, size_t rows, int cols,
                            const dropout_mask_t *mask) {
    const void *ptrs[] = {out, in};
    static const char *const names[] = {"out", "in"};
    enter("dropout_apply", ptrs, names, 2);
    base->dropout_apply(out, in, rows, cols, mask);
    leave();
}

static void g_attention_forward_dropout(float *out, float *lse, float *scratch,
                                        size_t scratch_floats, const float *qkv, int B, int T,
                                        int NH, int hs, const dropout_mask_t *mask) {
    const void *ptrs[] = {out, lse, scratch, qkv};
    static const char *const names[] = {"out", "lse", "scratch", "qkv"};
    enter("attention_forward_dropout", ptrs, names, 4);
    base->attention_forward_dropout(out, lse, scratch, scratch_floats, qkv, B, T, NH, hs, mask);
    leave();
}

static void g_attention_backward_dropout(float *dqkv, float *scratch, size_t scratch_floats,
                                         const float *dout, const float *qkv, const float *out,
                                         const float *lse, int B, int T, int NH, int hs,
                                         const dropout_mask_t *mask) {
    const void *ptrs[] = {dqkv, scratch, dout, qkv, out, lse};
    static const char *const names[] = {"dqkv", "scratch", "dout", "qkv", "out", "lse"};
    enter("attention_backward_dropout", ptrs, names, 6);
    base->attention_backward_dropout(dqkv, scratch, scratch_floats, dout, qkv, out, lse, B, T, NH,
                                     hs, mask);
    leave();
}

static void g_attention_gqa_forward_dropout(float *out, float *lse, float *scratch,
                                            size_t scratch_floats, const float *q, const float *k,
                                            const float *v, int B, int T, int NH, int NKV, int hs,
                                            const dropout_mask_t *mask) {
    const void *ptrs[] = {out, lse, scratch, q, k, v};
    static const char *const names[] = {"out", "lse", "scratch", "q", "k", "v"};
    enter("attention_gqa_forward_dropout", ptrs, names, 6);
    base->attention_gqa_forward_dropout(out, lse, scratch, scratch_floats, q, k, v, B, T, NH, NKV,
                                        hs, mask);
    leave();
}

static void g_attention_gqa_backward_dropout(float *dq, float *dk, float *dv, float *scratch,
                                             size_t scratch_floats, const float *dout,
                                             const float *q, const float *k, const float *v,
                                             const float *out, const float *lse, int B, int T,
                                             int NH, int NKV, int hs, const dropout_mask_t *mask) {
    const void *ptrs[] = {dq, dk, dv, scratch, dout, q, k, v, out, lse};
    static const char *const names[] = {"dq", "dk", "dv", "scratch", "dout",
                                        "q",  "k",  "v",  "out",     "lse"};
    enter("attention_gqa_backward_dropout", ptrs, names, 10);
    base->attention_gqa_backward_dropout(dq, dk, dv, scratch, scratch_floats, dout, q, k, v, out,
                                         lse, B, T, NH, NKV, hs, mask);
    leave();
}

static void g_xent_row_sum(float *row_sum, const float *logits, int N, int Vl, int v_valid) {
    const void *ptrs[] = {row_sum, logits};
    static const char *const names[] = {"row_sum", "logits"};
    enter("xent_row_sum", ptrs, names, 2);
    base->xent_row_sum(row_sum, logits, N, Vl, v_valid);
    leave();
}

static void g_xent_losses_regularized(float *losses, float *zloss, const float *row_max,
                                      const float *row_sumexp, const float *target_logit,
                                      const float *row_sum, int N, int V, float e, float zc) {
    const void *ptrs[] = {losses, zloss, row_max, row_sumexp, target_logit, row_sum};
    static const char *const names[] = {"losses",     "zloss",        "row_max",
                                        "row_sumexp", "target_logit", "row_sum"};
    enter("xent_losses_regularized", ptrs, names, 6);
    base->xent_losses_regularized(losses, zloss, row_max, row_sumexp, target_logit, row_sum, N, V,
                                  e, zc);
    leave();
}

static void g_xent_backward_regularized_inplace(float *logits, const float *row_max,
                                                const float *row_sumexp, const int *targets,
                                                float dloss, int N, int Vl, int v_valid,
                                                int v_start, int V, float e, float zc) {
    const void *ptrs[] = {logits, row_max, row_sumexp, targets};
    static const char *const names[] = {"logits", "row_max", "row_sumexp", "targets"};
    enter("xent_backward_regularized_inplace", ptrs, names, 4);
    base->xent_backward_regularized_inplace(logits, row_max, row_sumexp, targets, dloss, N, Vl,
                                            v_valid, v_start, V, e, zc);
    leave();
}

static void g_moe_noise_forward(float *logits, const float *noise, int N, int E, float scale,
                                const uint32_t key[2], uint64_t row0) {
    const void *ptrs[] = {logits, noise};
    static const char *const names[] = {"logits", "noise"};
    enter("moe_noise_forward", ptrs, names, 2);
    base->moe_noise_forward(logits, noise, N, E, scale, key, row0);
    leave();
}

static void g_moe_noise_backward(float *dnoise, const float *dlogits, const float *noise, int N,
                                 int E, float scale, const uint32_t key[2], uint64_t row0) {
    const void *ptrs[] = {dnoise, dlogits, noise};
    static const char *const names[] = {"dnoise", "dlogits", "noise"};
    enter("moe_noise_backward", ptrs, names, 3);
    base->moe_noise_backward(dnoise, dlogits, noise, N, E, scale, key, row0);
    leave();
}

static void g_moe_softmax_topk(float *probs, float *lse, int *idx, float *gates,
                               const float *logits, int N, int E, int k) {
    const void *ptrs[] = {probs, lse, idx, gates, logits};
    static const char *const names[] = {"probs", "lse", "idx", "gates", "logits"};
    enter("moe_softmax_topk", ptrs, names, 5);
    base->moe_softmax_topk(probs, lse, idx, gates, logits, N, E, k);
    leave();
}

static void g_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                  const int *idx, const float *gates, const float *dgates,
                                  const float *dprob_bias, float dz, int N, int E, int k) {
    const void *ptrs[] = {dlogits, probs, lse, idx, gates, dgates, dprob_bias};
    static const char *const names[] = {"dlogits", "probs",  "lse",       "idx",
                                        "gates",   "dgates", "dprob_bias"};
    enter("moe_router_backward", ptrs, names, 7);
    base->moe_router_backward(dlogits, probs, lse, idx, gates, dgates, dprob_bias, dz, N, E, k);
    leave();
}

static void g_moe_gather_rows(float *out, const float *x, const int *rows, int M, int C) {
    const void *ptrs[] = {out, x, rows};
    static const char *const names[] = {"out", "x", "rows"};
    enter("moe_gather_rows", ptrs, names, 3);
    base->moe_gather_rows(out, x, rows, M, C);
    leave();
}

static void g_moe_scatter_add_rows(float *y, const float *in, const int *rows, const float *w,
                                   int M, int C) {
    const void *ptrs[] = {y, in, rows, w};
    static const char *const names[] = {"y", "in", "rows", "w"};
    enter("moe_scatter_add_rows", ptrs, names, 4);
    base->moe_scatter_add_rows(y, in, rows, w, M, C);
    leave();
}

static void g_moe_combine_backward(float *din, float *dw, const float *dy, const float *in,
                                   const int *rows, const float *w, int M, int C) {
    const void *ptrs[] = {din, dw, dy, in, rows, w};
    static const char *const names[] = {"din", "dw", "dy", "in", "rows", "w"};
    enter("moe_combine_backward", ptrs, names, 6);
    base->moe_combine_backward(din, dw, dy, in, rows, w, M, C);
    leave();
}

static void g_block(const char *op, const attn_block_t *b, const float *scratch) {
    const void *ptrs[] = {b->q, b->k, b->v, b->dout, b->dq, b->dk, b->dv, b->out, b->m, b->l, b->lse, scratch};
    static const char *const names[] = {"q", "k", "v", "dout", "dq", "dk", "dv", "out", "m", "l", "lse", "scratch"};
    enter(op, ptrs, names, 12);
}
static void g_attention_block_forward(const attn_block_t *b, float *scratch, size_t sf) {
    g_block("attention_block_forward", b, scratch);
    base->attention_block_forward(b, scratch, sf);
    leave();
}
static void g_attention_block_backward(const attn_block_t *b, float *scratch, size_t sf) {
    g_block("attention_block_backward", b, scratch);
    base->attention_block_backward(b, scratch, sf);
    leave();
}
static void g_attention_block_finish(float *out, float *m_lse, const float *l, int B, int T, int NH, int hs) {
    const void *ptrs[] = {out, m_lse, l};
    static const char *const names[] = {"out", "m_lse", "l"};
    enter("attention_block_finish", ptrs, names, 3);
    base->attention_block_finish(out, m_lse, l, B, T, NH, hs);
    leave();
}
static void g_copy_rows(float *dst, int ld_dst, const float *src, int ld_src, size_t rows, int cols, bool acc) {
    const void *ptrs[] = {dst, src};
    static const char *const names[] = {"dst", "src"};
    enter("copy_rows", ptrs, names, 2);
    base->copy_rows(dst, ld_dst, src, ld_src, rows, cols, acc);
    leave();
}

/* ---- the table ------------------------------------------------------------------------------- */

/* The name and 70 ops: an op added to ops.h needs its wrapper here, or it would run unchecked. */
_Static_assert(sizeof(ops_t) == 71 * sizeof(void *), "ops.h has a new op: wrap it in ops_devsim.c");

/* Host memory to lock must be host memory. */
static void g_host_register(void *host, size_t bytes) {
    ASSERT(!devsim_contains(host));
    base->host_register(host, bytes);
}

const ops_t *ops_devsim(const ops_t *cpu, size_t arena_bytes) {
    static ops_t t;
    if (base)
        return &t;
    base = cpu;
    arena_create(arena_bytes);
    t = *cpu;
    t.name = "cpu-devsim";
    t.alloc = g_alloc;
    t.free = g_free;
    t.to_device = g_to_device;
    t.to_host = g_to_host;
    t.host_register = g_host_register;
    t.memory_capacity = g_memory_capacity;
    t.memory_peak = g_memory_peak;
    t.zero = g_zero;
    t.embed_forward = g_embed_forward;
    t.embed_backward = g_embed_backward;
    t.layernorm_forward = g_layernorm_forward;
    t.layernorm_backward = g_layernorm_backward;
    t.matmul_forward = g_matmul_forward;
    t.matmul_backward = g_matmul_backward;
    t.attention_scratch_floats = base->attention_scratch_floats;
    t.attention_forward = g_attention_forward;
    t.attention_backward = g_attention_backward;
    t.gelu_forward = g_gelu_forward;
    t.gelu_backward = g_gelu_backward;
    t.add = g_add;
    t.xent_row_max = g_xent_row_max;
    t.xent_row_sumexp = g_xent_row_sumexp;
    t.xent_target_logit = g_xent_target_logit;
    t.xent_losses = g_xent_losses;
    t.xent_backward_inplace = g_xent_backward_inplace;
    t.sumsq = g_sumsq;
    t.adamw_update = g_adamw_update;
    t.scale = g_scale;
    t.quantize = g_quantize;
    t.quantize_copy = g_quantize_copy;
    t.store_as = g_store_as;
    t.load_as = g_load_as;
    t.matmul_forward_w = g_matmul_forward_w;
    t.matmul_backward_w = g_matmul_backward_w;
    t.embed_forward_w = g_embed_forward_w;
    t.any_nonfinite = g_any_nonfinite;
    t.set_product_type = base->set_product_type;
    t.products_native = base->products_native;
    t.products_faster = base->products_faster;
    t.describe = base->describe;
    t.hardware_peak = base->hardware_peak;
    t.rmsnorm_forward = g_rmsnorm_forward;
    t.rmsnorm_backward = g_rmsnorm_backward;
    t.rope_forward = g_rope_forward;
    t.rope_backward = g_rope_backward;
    t.swiglu_forward = g_swiglu_forward;
    t.swiglu_backward = g_swiglu_backward;
    t.attention_gqa_forward = g_attention_gqa_forward;
    t.attention_gqa_backward = g_attention_gqa_backward;
    t.residual_layernorm_forward = g_residual_layernorm_forward;
    t.dropout_apply = g_dropout_apply;
    t.attention_forward_dropout = g_attention_forward_dropout;
    t.attention_backward_dropout = g_attention_backward_dropout;
    t.attention_gqa_forward_dropout = g_attention_gqa_forward_dropout;
    t.attention_gqa_backward_dropout = g_attention_gqa_backward_dropout;
    t.xent_row_sum = g_xent_row_sum;
    t.xent_losses_regularized = g_xent_losses_regularized;
    t.xent_backward_regularized_inplace = g_xent_backward_regularized_inplace;
    t.moe_noise_forward = g_moe_noise_forward;
    t.moe_noise_backward = g_moe_noise_backward;
    t.moe_softmax_topk = g_moe_softmax_topk;
    t.moe_router_backward = g_moe_router_backward;
    t.moe_gather_rows = g_moe_gather_rows;
    t.moe_scatter_add_rows = g_moe_scatter_add_rows;
    t.moe_combine_backward = g_moe_combine_backward;
    t.attention_block_forward = g_attention_block_forward;
    t.attention_block_backward = g_attention_block_backward;
    t.attention_block_finish = g_attention_block_finish;
    t.copy_rows = g_copy_rows;
    return &t;
}
