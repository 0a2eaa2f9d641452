/* bench_ops.c — micro-benchmark of the CPU backend's ops at GPT-2 124M shapes
 * (12 layers, C = 768, 12 heads, V = 50257 padded to 50304, B = 4, T = 64: N = 256 rows).
 * Prints the memory bandwidth of plain copy and triad loops at three working-set sizes (the
 * yardsticks), the median time of each matrix product (GFLOP/s) and of each non-GEMM op (GB/s of
 * compulsory memory traffic: every input read once, every output written once), then times whole
 * training steps made of these ops the way model/gpt.c calls them (forward, loss, backward,
 * sumsq + AdamW; tp = 1, fp32) with the time split by kind of op: GEMM, attention, layernorm
 * (with the residual add it is fused with), GELU, the other residual add, cross-entropy,
 * embedding, sumsq + AdamW, and the non-GEMM total.
 *
 * Two kernel sets side by side: `make build/bench/bench_ops_vs BASE=<commit>` (Makefile) builds
 * that commit's non-GEMM kernels next to this tree's (bench_kset.h), and every op and step is
 * then timed for both, interleaved rep by rep in the one process (alternating which goes first),
 * so a shared, noisy machine slows both alike; the ratio new/base is the result to read.
 * Not a test. Build and run (from the repository root):
 *   make build/bench/bench_ops && OMP_NUM_THREADS=2 build/bench/bench_ops [step_reps] [op_reps]
 *   make build/bench/bench_ops_vs BASE=8329552 && OMP_NUM_THREADS=2 build/bench/bench_ops_vs
 * (defaults: 5 steps, 15 runs per op after 2 warm-up runs; op_reps 0 runs the steps alone,
 * step_reps 0 the ops alone; BENCH_NO_GEMM=1 skips the matrix products' own lines). Each op line
 * shows the median and, in parentheses, the fastest run: on a shared machine the median holds
 * the waits for a descheduled OpenMP thread, the fastest run what the kernel itself costs. */
#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"
#include "bench_kset.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 12, C = 768, NH = 12, HS = 64, B = 4, T = 64, N = B * T, V = 50257, VP = 50304 };
#define MAX_REPS 101
#define WARMUP 2
#define N_PARAMS_124M 124439808ull /* GPT-2 124M with the padded vocabulary */

static const ops_t *ops; /* matrix products, attention, memory */
static kset_t K[2];      /* the kernel sets compared: [base,] new */
static int n_sets = 1, reps = 15;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* Runs `stmt` WARMUP + reps times: `out` the median seconds of the last reps, `best` the
 * fastest of them. */
#define TIME_MEDIAN(out, best, stmt)                                                           \
    do {                                                                                       \
        double t_[MAX_REPS];                                                                   \
        for (int r_ = -WARMUP; r_ < reps; r_++) {                                              \
            double t0_ = now_sec();                                                            \
            stmt;                                                                              \
            if (r_ >= 0) t_[r_] = now_sec() - t0_;                                             \
        }                                                                                      \
        (out) = median(t_, reps);                                                              \
        (best) = t_[0];                                                                        \
    } while (0)

/* The same for every kernel set, interleaved: in each rep every set runs once, the order
 * alternating between reps. `stmt` sees the set as `k`; out[s] is set s's median and
 * out[2 + s] its fastest run (out has 4 elements). */
#define TIME_SETS(out, stmt)                                                                   \
    do {                                                                                       \
        double t_[2][MAX_REPS];                                                                \
        for (int r_ = -WARMUP; r_ < reps; r_++)                                                \
            for (int i_ = 0; i_ < n_sets; i_++) {                                              \
                const int s_ = (r_ & 1) ? n_sets - 1 - i_ : i_;                                \
                const kset_t *k = &K[s_];                                                      \
                double t0_ = now_sec();                                                        \
                stmt;                                                                          \
                if (r_ >= 0) t_[s_][r_] = now_sec() - t0_;                                     \
            }                                                                                  \
        for (int s_ = 0; s_ < n_sets; s_++) {                                                 \
            (out)[s_] = median(t_[s_], reps);                                                  \
            (out)[2 + s_] = t_[s_][0]; /* sorted by median(): the fastest run */              \
        }                                                                                      \
    } while (0)

static float *buf(size_t n, float scale) {
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    unsigned s = 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

static void report_flops(const char *name, double sec, double best, double flops) {
    printf("%-36s %9.3f (%8.3f) ms %7.1f GFLOP/s\n", name, sec * 1e3, best * 1e3,
           flops / sec * 1e-9);
}

/* one line per op: each set's median (fastest run) and GB/s of the median; new/base of the
 * medians and of the fastest runs */
static void report_sets(const char *name, const double *sec, double bytes) {
    printf("%-36s", name);
    for (int s = 0; s < n_sets; s++)
        printf(" %9.3f (%8.3f) ms %6.1f GB/s", sec[s] * 1e3, sec[2 + s] * 1e3,
               bytes / sec[s] * 1e-9);
    if (n_sets == 2) printf("  x%.2f (x%.2f)", sec[1] / sec[0], sec[3] / sec[2]);
    printf("\n");
}

static void print_set_header(const char *what) {
    printf("\n%-36s", what);
    for (int s = 0; s < n_sets; s++) printf(" %-34s", K[s].name);
    if (n_sets == 2) printf("  new/base");
    printf("\n");
}

/* ---- yardsticks: copy (8 bytes per element) and triad a = b + s c (12 bytes) ---- */

static void copy_par(float *dst, const float *src, size_t n) {
#pragma omp parallel
    {
        const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        const size_t i0 = n * id / nt, i1 = n * (id + 1) / nt;
        memcpy(dst + i0, src + i0, (i1 - i0) * sizeof *dst);
    }
}

static void triad_par(float *a, const float *b, const float *c, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
}

static void bench_bandwidth(void) {
    const size_t sizes[3] = {(size_t)N * C, (size_t)12 << 20, (size_t)124 << 20};
    const char *where[3] = {"0.75 MiB arrays (cache)", "48 MiB arrays", "496 MiB arrays (DRAM)"};
    printf("\nbandwidth yardsticks (%d threads): median (fastest run)\n", omp_get_max_threads());
    for (int k = 0; k < 3; k++) {
        const size_t n = sizes[k];
        float *a = buf(n, 1), *b = buf(n, 1), *c = buf(n, 1);
        double t_copy, b_copy, t_triad, b_triad;
        TIME_MEDIAN(t_copy, b_copy, copy_par(a, b, n));
        TIME_MEDIAN(t_triad, b_triad, triad_par(a, b, c, n));
        printf("  %-24s copy %6.1f (%6.1f) GB/s   triad %6.1f (%6.1f) GB/s\n", where[k],
               8.0 * n / t_copy * 1e-9, 8.0 * n / b_copy * 1e-9, 12.0 * n / t_triad * 1e-9,
               12.0 * n / b_triad * 1e-9);
        ops->free(a), ops->free(b), ops->free(c);
    }
}

/* ---- matrix products and attention (one implementation: not compared) ---- */

/* one linear layer: forward, backward (dinp + dw + dbias) */
static void bench_matmul(const char *name, int in, int out_ch, bool bias) {
    float *x = buf((size_t)N * in, 1), *w = buf((size_t)out_ch * in, 0.1f);
    float *b = bias ? buf(out_ch, 0.1f) : NULL, *y = buf((size_t)N * out_ch, 0);
    float *dx = buf((size_t)N * in, 0), *dw = buf((size_t)out_ch * in, 0);
    float *db = bias ? buf(out_ch, 0) : NULL;
    double t_f, b_f, t_b, b_b, flops = 2.0 * N * in * out_ch;
    char label[64];
    TIME_MEDIAN(t_f, b_f, ops->matmul_forward(y, x, w, b, N, in, out_ch));
    TIME_MEDIAN(t_b, b_b, ops->matmul_backward(dx, dw, db, y, x, w, N, in, out_ch, false, false));
    snprintf(label, sizeof label, "%s fwd %dx%dx%d", name, N, in, out_ch);
    report_flops(label, t_f, b_f, flops);
    snprintf(label, sizeof label, "%s bwd", name);
    report_flops(label, t_b, b_b, 2 * flops);
    ops->free(x), ops->free(w), ops->free(b), ops->free(y), ops->free(dx), ops->free(dw);
    ops->free(db);
}

static void bench_attention(void) {
    float *qkv = buf((size_t)N * 3 * C, 1), *out = buf((size_t)N * C, 0);
    const size_t sf = ops->attention_scratch_floats(B, T, NH, HS);
    float *att = buf((size_t)B * NH * T, 0), *scratch = buf(sf, 0); /* att: the log-sum-exp rows */
    float *dqkv = buf((size_t)N * 3 * C, 0), *dout = buf((size_t)N * C, 1);
    double t_f, b_f, t_b, b_b, flops = 4.0 * B * NH * T * T * HS; /* full (unmasked) products */
    TIME_MEDIAN(t_f, b_f, ops->attention_forward(out, att, scratch, sf, qkv, B, T, NH, HS));
    TIME_MEDIAN(t_b, b_b, ops->attention_backward(dqkv, scratch, sf, dout, qkv, out, att, B, T, NH, HS));
    report_flops("attention fwd (B4 T64 NH12 hs64)", t_f, b_f, flops);
    report_flops("attention bwd", t_b, b_b, 2 * flops);
    ops->free(qkv), ops->free(out), ops->free(att), ops->free(scratch), ops->free(dqkv);
    ops->free(dout);
}

/* ---- the non-GEMM ops, every kernel set ---- */

/* res = a + b; out = layernorm(res): the fused op where the set has it, else add + layernorm */
static void residual_layernorm(const kset_t *k, float *res, float *out, float *mean, float *rstd,
                               const float *a, const float *b, const float *w, const float *bias,
                               int n_rows, int c) {
    if (k->residual_layernorm_forward) {
        k->residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, n_rows, c, DT_FP32);
    } else {
        k->add(res, a, b, (size_t)n_rows * c);
        k->layernorm_forward(out, mean, rstd, res, w, bias, n_rows, c);
    }
}

static void bench_elementwise(void) {
    const size_t nc = (size_t)N * C, nh = 4 * nc;
    float *x = buf(nc, 2), *y = buf(nc, 0), *dy = buf(nc, 1), *dx = buf(nc, 0), *r = buf(nc, 0);
    float *w = buf(C, 1), *b = buf(C, 1), *dw = buf(C, 0), *db = buf(C, 0);
    float *mean = buf(N, 0), *rstd = buf(N, 0);
    float *h = buf(nh, 4), *g = buf(nh, 0), *dh = buf(nh, 1), *dg = buf(nh, 0);
    double t[4];
    TIME_SETS(t, k->layernorm_forward(y, mean, rstd, x, w, b, N, C));
    report_sets("layernorm fwd 256x768", t, 8.0 * nc);
    TIME_SETS(t, k->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C, true, false));
    report_sets("layernorm bwd (accumulate)", t, 16.0 * nc);
    TIME_SETS(t, k->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C, false, true));
    report_sets("layernorm bwd (overwrite)", t, 12.0 * nc);
    TIME_SETS(t, k->add(r, x, dy, nc));
    report_sets("residual add 256x768", t, 12.0 * nc);
    TIME_SETS(t, k->add(r, x, dy, nc); k->layernorm_forward(y, mean, rstd, r, w, b, N, C));
    report_sets("add + layernorm fwd (unfused)", t, 16.0 * nc);
    TIME_SETS(t, residual_layernorm(k, r, y, mean, rstd, x, dy, w, b, N, C));
    report_sets("residual+layernorm fwd (fused if any)", t, 16.0 * nc);
    TIME_SETS(t, k->gelu_forward(g, h, nh));
    report_sets("gelu fwd 256x3072", t, 8.0 * nh);
    TIME_SETS(t, k->gelu_backward(dg, h, dh, nh));
    report_sets("gelu bwd", t, 12.0 * nh);
    TIME_SETS(t, k->scale(g, 1.0f, nh));
    report_sets("scale 256x3072", t, 8.0 * nh);
    ops->free(x), ops->free(y), ops->free(dy), ops->free(dx), ops->free(r), ops->free(w);
    ops->free(b), ops->free(dw), ops->free(db), ops->free(mean), ops->free(rstd), ops->free(h);
    ops->free(g), ops->free(dh), ops->free(dg);
}

static void bench_embed(void) {
    float *wte = buf((size_t)VP * C, 1), *wpe = buf((size_t)T * C, 1), *out = buf((size_t)N * C, 0);
    float *dwte = buf((size_t)VP * C, 0), *dwpe = buf((size_t)T * C, 0);
    int tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = (i * 7919) % V;
    double t[4];
    TIME_SETS(t, k->embed_forward(out, tokens, wte, wpe, B, T, C, 0, VP, true));
    report_sets("embed fwd", t, 12.0 * N * C);
    TIME_SETS(t, k->embed_backward(dwte, dwpe, out, tokens, B, T, C, 0, VP, true));
    report_sets("embed bwd", t, 20.0 * N * C);
    ops->free(wte), ops->free(wpe), ops->free(out), ops->free(dwte), ops->free(dwpe);
}

static void bench_xent(void) {
    const size_t n = (size_t)N * VP;
    float *logits = buf(n, 8), mx[N], se[N], tl[N], losses[N];
    int targets[N];
    for (int i = 0; i < N; i++) targets[i] = (i * 104729) % V;
    double t[4];
    TIME_SETS(t, k->xent_row_max(mx, logits, N, VP, V));
    report_sets("xent row_max 256x50304", t, 4.0 * n);
    TIME_SETS(t, k->xent_row_sumexp(se, logits, mx, N, VP, V));
    report_sets("xent row_sumexp", t, 4.0 * n);
    TIME_SETS(t, k->xent_target_logit(tl, logits, targets, N, VP, 0);
              k->xent_losses(losses, mx, se, tl, N));
    report_sets("xent target + losses", t, 4.0 * N);
    /* backward overwrites the logits: re-timed on its own output (values stay finite) */
    TIME_SETS(t, k->xent_backward_inplace(logits, mx, se, targets, 1.0f / N, N, VP, V, 0));
    report_sets("xent backward in place", t, 8.0 * n);
    ops->free(logits);
}

static void bench_optimizer(void) {
    const size_t n = N_PARAMS_124M;
    float *p = buf(n, 0.1f), *g = buf(n, 0.01f), *m = buf(n, 0), *v = buf(n, 0);
    double t[4];
    TIME_SETS(t, k->adamw_update(p, g, m, v, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 10));
    report_sets("adamw 124M params", t, 28.0 * n);
    volatile double s;
    TIME_SETS(t, s = k->sumsq(g, n));
    (void)s;
    report_sets("sumsq 124M", t, 4.0 * n);
    TIME_SETS(t, k->zero(m, n));
    report_sets("zero 124M", t, 4.0 * n);
    TIME_SETS(t, k->quantize_copy(m, p, n, DT_BF16));
    report_sets("quantize_copy bf16 124M", t, 8.0 * n);
    TIME_SETS(t, k->quantize(m, n, DT_BF16));
    report_sets("quantize bf16 in place 124M", t, 8.0 * n);
    TIME_SETS(t, k->quantize(m, n, DT_FP16));
    report_sets("quantize fp16 in place 124M", t, 8.0 * n);
    volatile bool bad;
    TIME_SETS(t, bad = k->any_nonfinite(g, n));
    (void)bad;
    report_sets("any_nonfinite 124M", t, 4.0 * n);
    ops->free(p), ops->free(g), ops->free(m), ops->free(v);
}

/* ---- whole GPT-2 124M training steps from these ops, as model/gpt.c calls them ---- */

typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcpw, *fcpb;
} layer_params_t;

/* a block's activations kept for backward (gpt_layer_acts_t) */
typedef struct {
    float *ln1, *mean1, *rstd1, *qkv, *att, *atty, *res2, *ln2, *mean2, *rstd2, *fch, *gelu, *res3;
} layer_acts_t;

typedef struct {
    float *params, *grads, *m, *v; /* one flat buffer each */
    layer_params_t p[L], g[L];
    layer_acts_t a[L];
    float *wte, *wpe, *dwte, *dwpe, *lnfw, *lnfb, *dlnfw, *dlnfb;
    float *input, *dout, *lnf, *meanf, *rstdf, *logits, *mx, *se, *tl, *losses;
    float *dC, *dC2, *dbig, *datt;
    int tokens[N], targets[N];
    size_t n_params;
} model_t;

/* Parameters live in one flat buffer; `take` hands out the next n floats (rounded up to 16 to
 * keep 64-byte alignment). With base NULL it only counts. */
static float *take(float *base, size_t *off, size_t n) {
    float *p = base ? base + *off : NULL;
    *off += (n + 15) & ~(size_t)15;
    return p;
}

static void carve_layer(layer_params_t *lp, float *base, size_t *off) {
    lp->ln1w = take(base, off, C), lp->ln1b = take(base, off, C);
    lp->qkvw = take(base, off, (size_t)3 * C * C), lp->qkvb = take(base, off, 3 * C);
    lp->projw = take(base, off, (size_t)C * C), lp->projb = take(base, off, C);
    lp->ln2w = take(base, off, C), lp->ln2b = take(base, off, C);
    lp->fcw = take(base, off, (size_t)4 * C * C), lp->fcb = take(base, off, 4 * C);
    lp->fcpw = take(base, off, (size_t)4 * C * C), lp->fcpb = take(base, off, C);
}

/* wte, wpe, the layers, ln_f: into m's parameter pointers (or gradient pointers) */
static size_t carve_params(model_t *m, float *base, bool grads) {
    size_t off = 0;
    layer_params_t *layers = grads ? m->g : m->p;
    float **wte = grads ? &m->dwte : &m->wte, **wpe = grads ? &m->dwpe : &m->wpe;
    float **lnfw = grads ? &m->dlnfw : &m->lnfw, **lnfb = grads ? &m->dlnfb : &m->lnfb;
    *wte = take(base, &off, (size_t)VP * C), *wpe = take(base, &off, (size_t)T * C);
    for (int l = 0; l < L; l++) carve_layer(&layers[l], base, &off);
    *lnfw = take(base, &off, C), *lnfb = take(base, &off, C);
    return off;
}

static void model_alloc(model_t *m) {
    const size_t nc = (size_t)N * C;
    m->n_params = carve_params(m, NULL, false);
    m->params = buf(m->n_params, 0.04f), m->grads = buf(m->n_params, 0);
    m->m = buf(m->n_params, 0), m->v = buf(m->n_params, 0);
    carve_params(m, m->params, false);
    carve_params(m, m->grads, true);
    for (int l = 0; l < L; l++) {
        layer_acts_t *a = &m->a[l];
        a->ln1 = buf(nc, 0), a->mean1 = buf(N, 0), a->rstd1 = buf(N, 0);
        a->qkv = buf(3 * nc, 0), a->att = buf((size_t)B * NH * T, 0), a->atty = buf(nc, 0);
        a->res2 = buf(nc, 0), a->ln2 = buf(nc, 0), a->mean2 = buf(N, 0), a->rstd2 = buf(N, 0);
        a->fch = buf(4 * nc, 0), a->gelu = buf(4 * nc, 0), a->res3 = buf(nc, 0);
        for (int c = 0; c < C; c++) m->p[l].ln1w[c] = m->p[l].ln2w[c] = 1.0f;
    }
    for (int c = 0; c < C; c++) m->lnfw[c] = 1.0f;
    m->input = buf(nc, 0), m->dout = buf(nc, 0), m->lnf = buf(nc, 0);
    m->meanf = buf(N, 0), m->rstdf = buf(N, 0), m->logits = buf((size_t)N * VP, 0);
    m->mx = buf(N, 0), m->se = buf(N, 0), m->tl = buf(N, 0), m->losses = buf(N, 0);
    m->dC = buf(nc, 0), m->dC2 = buf(nc, 0), m->dbig = buf(4 * nc, 0);
    m->datt = buf(ops->attention_scratch_floats(B, T, NH, HS), 0);
    for (int i = 0; i < N; i++) m->tokens[i] = (i * 7919) % V, m->targets[i] = (i * 104729) % V;
}

/* time of a step by kind of op */
enum { PH_GEMM, PH_ATTN, PH_LN, PH_GELU, PH_ADD, PH_XENT, PH_EMBED, PH_ADAMW, N_PH };
static double ph[N_PH];

#define OP(kind, stmt)                                                                         \
    do {                                                                                       \
        double t0_ = now_sec();                                                                \
        stmt;                                                                                  \
        ph[kind] += now_sec() - t0_;                                                           \
    } while (0)

/* gpt.c's block_forward on one rank (tp = 1, fp32 activations) */
static void block_forward(const kset_t *k, model_t *m, int l, const float *res_in) {
    layer_params_t *p = &m->p[l];
    layer_acts_t *a = &m->a[l];
    const size_t nc = (size_t)N * C;
    OP(PH_LN, k->layernorm_forward(a->ln1, a->mean1, a->rstd1, res_in, p->ln1w, p->ln1b, N, C));
    OP(PH_GEMM, ops->matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C));
    OP(PH_ATTN, ops->attention_forward(a->atty, a->att, m->datt, ops->attention_scratch_floats(B, T, NH, HS), a->qkv, B, T, NH, HS));
    OP(PH_GEMM, ops->matmul_forward(a->res2, a->atty, p->projw, p->projb, N, C, C));
    OP(PH_LN, residual_layernorm(k, a->res2, a->ln2, a->mean2, a->rstd2, a->res2, res_in,
                                    p->ln2w, p->ln2b, N, C));
    OP(PH_GEMM, ops->matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C));
    OP(PH_GELU, k->gelu_forward(a->gelu, a->fch, 4 * nc));
    OP(PH_GEMM, ops->matmul_forward(a->res3, a->gelu, p->fcpw, p->fcpb, N, 4 * C, C));
    OP(PH_ADD, k->add(a->res3, a->res3, a->res2, nc));
}

/* gpt.c's block_backward: m->dout holds d(res3) on entry and d(res_in) on return */
static void block_backward(const kset_t *k, model_t *m, int l, const float *res_in) {
    layer_params_t *p = &m->p[l], *g = &m->g[l];
    layer_acts_t *a = &m->a[l];
    OP(PH_GEMM, ops->matmul_backward(m->dbig, g->fcpw, g->fcpb, m->dout, a->gelu, p->fcpw, N,
                                     4 * C, C, false, true));
    OP(PH_GELU, k->gelu_backward(m->dbig, a->fch, m->dbig, (size_t)N * 4 * C));
    OP(PH_GEMM, ops->matmul_backward(m->dC, g->fcw, g->fcb, m->dbig, a->ln2, p->fcw, N, C, 4 * C,
                                     false, true));
    OP(PH_LN, k->layernorm_backward(m->dout, g->ln2w, g->ln2b, m->dC, a->res2, p->ln2w,
                                       a->mean2, a->rstd2, N, C, true, true));
    OP(PH_GEMM, ops->matmul_backward(m->dC2, g->projw, g->projb, m->dout, a->atty, p->projw, N, C,
                                     C, false, true));
    OP(PH_ATTN, ops->attention_backward(m->dbig, m->datt, ops->attention_scratch_floats(B, T, NH, HS), m->dC2, a->qkv, a->atty, a->att, B, T, NH, HS));
    OP(PH_GEMM, ops->matmul_backward(m->dC, g->qkvw, g->qkvb, m->dbig, a->ln1, p->qkvw, N, C,
                                     3 * C, false, true));
    OP(PH_LN, k->layernorm_backward(m->dout, g->ln1w, g->ln1b, m->dC, res_in, p->ln1w,
                                       a->mean1, a->rstd1, N, C, true, true));
}

/* one step: embedding, blocks, head and loss, backward, sumsq + AdamW; times added to ph[] */
static void model_step(const kset_t *k, model_t *m, int step) {
    OP(PH_EMBED, k->embed_forward(m->input, m->tokens, m->wte, m->wpe, B, T, C, 0, VP, true));
    for (int l = 0; l < L; l++) block_forward(k, m, l, l ? m->a[l - 1].res3 : m->input);
    const float *x = m->a[L - 1].res3;
    OP(PH_LN, k->layernorm_forward(m->lnf, m->meanf, m->rstdf, x, m->lnfw, m->lnfb, N, C));
    OP(PH_GEMM, ops->matmul_forward(m->logits, m->lnf, m->wte, NULL, N, C, VP));
    OP(PH_XENT, k->xent_row_max(m->mx, m->logits, N, VP, V));
    OP(PH_XENT, k->xent_row_sumexp(m->se, m->logits, m->mx, N, VP, V));
    OP(PH_XENT, k->xent_target_logit(m->tl, m->logits, m->targets, N, VP, 0));
    OP(PH_XENT, k->xent_losses(m->losses, m->mx, m->se, m->tl, N));
    OP(PH_XENT, k->xent_backward_inplace(m->logits, m->mx, m->se, m->targets, 1.0f / N, N, VP, V,
                                          0));
    OP(PH_GEMM, ops->matmul_backward(m->dC, m->dwte, NULL, m->logits, m->lnf, m->wte, N, C, VP,
                                     false, true));
    OP(PH_LN, k->layernorm_backward(m->dout, m->dlnfw, m->dlnfb, m->dC, x, m->lnfw, m->meanf,
                                       m->rstdf, N, C, false, true));
    for (int l = L - 1; l >= 0; l--) block_backward(k, m, l, l ? m->a[l - 1].res3 : m->input);
    OP(PH_EMBED, k->zero(m->dwpe, (size_t)T * C));
    OP(PH_EMBED, k->embed_backward(m->dwte, m->dwpe, m->dout, m->tokens, B, T, C, 0, VP, true));
    double norm = 0.0;
    OP(PH_ADAMW, norm = sqrt(k->sumsq(m->grads, m->n_params))); /* clip at 1.0 */
    OP(PH_ADAMW, k->adamw_update(m->params, m->grads, m->m, m->v, m->n_params, 1e-5f, 0.9f, 0.95f,
                                 1e-8f, 0.1f, norm > 1.0 ? (float)(1.0 / norm) : 1.0f, step));
}

static void bench_step(int step_reps) {
    model_t m;
    model_alloc(&m);
    if (step_reps > MAX_REPS) step_reps = MAX_REPS;
    double tot[2][MAX_REPS], part[2][N_PH][MAX_REPS];
    for (int s = 0; s < n_sets; s++) model_step(&K[s], &m, 1); /* warm-up, first touch */
    for (int r = 0; r < step_reps; r++)
        for (int i = 0; i < n_sets; i++) {
            const int s = (r & 1) ? n_sets - 1 - i : i;
            memset(ph, 0, sizeof ph);
            double t0 = now_sec();
            model_step(&K[s], &m, r + 2);
            tot[s][r] = now_sec() - t0;
            for (int p = 0; p < N_PH; p++) part[s][p][r] = ph[p];
        }
    const double flops = 6.0 * N * (double)(m.n_params - (size_t)T * C) + 12.0 * L * N * T * C;
    printf("\nwhole steps, %zu params, %d tokens, medians of %d (interleaved)\n", m.n_params, N,
           step_reps);
    const char *names[N_PH] = {"GEMM (matmul fwd+bwd)", "attention fwd+bwd",
                               "layernorm (+ fused residual)", "gelu fwd+bwd", "residual add",
                               "cross-entropy fwd+bwd", "embedding fwd+bwd", "sumsq + adamw"};
    print_set_header("");
    double med[2][N_PH + 1];
    for (int s = 0; s < n_sets; s++) {
        med[s][N_PH] = median(tot[s], step_reps);
        for (int p = 0; p < N_PH; p++) med[s][p] = median(part[s][p], step_reps);
    }
    for (int p = 0; p <= N_PH; p++) {
        printf("%-36s", p < N_PH ? names[p] : "whole step");
        for (int s = 0; s < n_sets; s++) printf(" %9.1f ms %-21s", med[s][p] * 1e3, "");
        if (n_sets == 2) printf("   x%.2f", med[1][p] / med[0][p]);
        printf("\n");
    }
    double non_gemm[2][MAX_REPS], med_ng[2];
    for (int s = 0; s < n_sets; s++) {
        for (int r = 0; r < step_reps; r++) {
            non_gemm[s][r] = 0.0;
            for (int p = PH_ATTN; p < N_PH; p++) non_gemm[s][r] += part[s][p][r];
        }
        med_ng[s] = median(non_gemm[s], step_reps);
    }
    printf("%-36s", "non-GEMM (all but matmul)");
    for (int s = 0; s < n_sets; s++) printf(" %9.1f ms %-21s", med_ng[s] * 1e3, "");
    if (n_sets == 2) printf("   x%.2f", med_ng[1] / med_ng[0]);
    printf("\n");
    for (int s = 0; s < n_sets; s++)
        printf("%s: %.1f tokens/s, %.1f GFLOP/s; non-GEMM %.0f%% of the step\n", K[s].name,
               N / med[s][N_PH], flops / med[s][N_PH] * 1e-9, 100.0 * med_ng[s] / med[s][N_PH]);
}

/* ~0.5 s of sgemm first: the first timed op otherwise pays for clocks ramping up and the GEMM
 * library allocating its buffers (seen as 2x slower first results on the VMs). */
static void warm_up(void) {
    float *a = buf((size_t)N * C, 1), *w = buf((size_t)4 * C * C, 1);
    float *y = buf((size_t)N * 4 * C, 0);
    for (double t0 = now_sec(); now_sec() - t0 < 0.5;)
        ops->matmul_forward(y, a, w, NULL, N, C, 4 * C);
    ops->free(a), ops->free(w), ops->free(y);
}

int main(int argc, char **argv) {
    ops = ops_cpu();
#ifdef BENCH_VS
    K[0] = kset_base();
    K[0].name = "base " BENCH_VS;
    n_sets = 2;
#endif
    K[n_sets - 1] = kset_new();
    const int step_reps = argc > 1 ? atoi(argv[1]) : 5;
    const bool op_benches = argc <= 2 || atoi(argv[2]) > 0; /* op_reps 0: the steps alone */
    if (argc > 2) reps = atoi(argv[2]);
    if (reps < 1 || reps > MAX_REPS) reps = 15;
    printf("ops_%s: %d OpenMP threads, %s, medians of %d runs\n", ops->name,
           omp_get_max_threads(), gemm_describe(), reps);
    warm_up();
    bench_bandwidth();
    const char *no_gemm = getenv("BENCH_NO_GEMM");
    if (op_benches && (!no_gemm || !*no_gemm || *no_gemm == '0')) {
        printf("\n");
        bench_matmul("qkv", C, 3 * C, true);
        bench_matmul("attn proj", C, C, true);
        bench_matmul("fc", C, 4 * C, true);
        bench_matmul("fc proj", 4 * C, C, true);
        bench_matmul("lm head", C, VP, false);
        bench_attention();
    }
    if (op_benches) {
        print_set_header("non-GEMM ops (GB/s: compulsory traffic)");
        bench_elementwise();
        bench_embed();
        bench_xent();
        bench_optimizer();
    }
    if (step_reps > 0) bench_step(step_reps);
    return 0;
}
