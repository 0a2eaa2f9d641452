/* bench_ops.c — micro-benchmark of the CPU backend's ops at GPT-2 124M shapes
 * (12 layers, C = 768, 12 heads, V = 50257 padded to 50304, B = 4, T = 64: N = 256 rows).
 * Prints, per op, the median time of REPS runs (after WARMUP runs) and GFLOP/s for the matrix
 * products or GB/s of compulsory memory traffic for the rest; then times one whole training
 * step made of these ops (forward, backward, AdamW) and reports tokens/s.
 * Not a test. Build (from the repository root):
 *   mpicc -std=c11 -D_GNU_SOURCE -fopenmp -O3 -march=native -fno-math-errno -Isrc \
 *     $(pkg-config --cflags openblas) -o /tmp/bench_ops validation/bench/bench_ops.c \
 *     src/kernels/cpu/[a-z]*.c src/core/alloc.c src/core/error.c $(pkg-config --libs openblas) -lm
 *   OMP_NUM_THREADS=2 /tmp/bench_ops            (optional argument: number of step repetitions) */
#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/ops.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 12, C = 768, NH = 12, HS = 64, B = 4, T = 64, N = B * T, V = 50257, VP = 50304 };
#define REPS 7
#define WARMUP 2
#define N_PARAMS_124M 124439808ull /* GPT-2 124M with the padded vocabulary */

static const ops_t *ops;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* Runs `stmt` WARMUP + REPS times and stores the median seconds of the last REPS in `out`.
 * A macro so each op is timed with its real call, without one wrapper function per op. */
#define TIME_MEDIAN(out, stmt)                                              \
    do {                                                                    \
        double t_[REPS];                                                    \
        for (int r_ = -WARMUP; r_ < REPS; r_++) {                           \
            double t0_ = now_sec();                                         \
            stmt;                                                           \
            if (r_ >= 0) t_[r_] = now_sec() - t0_;                          \
        }                                                                   \
        (out) = median(t_, REPS);                                           \
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

static void report_flops(const char *name, double sec, double flops) {
    printf("%-34s %9.3f ms %9.1f GFLOP/s\n", name, sec * 1e3, flops / sec * 1e-9);
}

static void report_bytes(const char *name, double sec, double bytes) {
    printf("%-34s %9.3f ms %9.1f GB/s\n", name, sec * 1e3, bytes / sec * 1e-9);
}

/* one linear layer: forward, backward (dinp + dw + dbias) */
static void bench_matmul(const char *name, int in, int out_ch, bool bias) {
    float *x = buf((size_t)N * in, 1), *w = buf((size_t)out_ch * in, 0.1f);
    float *b = bias ? buf(out_ch, 0.1f) : NULL, *y = buf((size_t)N * out_ch, 0);
    float *dx = buf((size_t)N * in, 0), *dw = buf((size_t)out_ch * in, 0);
    float *db = bias ? buf(out_ch, 0) : NULL;
    double t_f, t_b, flops = 2.0 * N * in * out_ch;
    char label[64];
    TIME_MEDIAN(t_f, ops->matmul_forward(y, x, w, b, N, in, out_ch));
    TIME_MEDIAN(t_b, ops->matmul_backward(dx, dw, db, y, x, w, N, in, out_ch, false, false));
    snprintf(label, sizeof label, "%s fwd %dx%dx%d", name, N, in, out_ch);
    report_flops(label, t_f, flops);
    snprintf(label, sizeof label, "%s bwd", name);
    report_flops(label, t_b, 2 * flops);
    ops->free(x), ops->free(w), ops->free(b), ops->free(y), ops->free(dx), ops->free(dw);
    ops->free(db);
}

static void bench_attention(void) {
    float *qkv = buf((size_t)N * 3 * C, 1), *out = buf((size_t)N * C, 0);
    float *att = buf((size_t)B * NH * T * T, 0), *scratch = buf((size_t)B * NH * T * T, 0);
    float *dqkv = buf((size_t)N * 3 * C, 0), *dout = buf((size_t)N * C, 1);
    double t_f, t_b, flops = 4.0 * B * NH * T * T * HS; /* full (unmasked) products */
    TIME_MEDIAN(t_f, ops->attention_forward(out, att, qkv, B, T, NH, HS));
    TIME_MEDIAN(t_b, ops->attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, HS));
    report_flops("attention fwd (B4 T64 NH12 hs64)", t_f, flops);
    report_flops("attention bwd", t_b, 2 * flops);
    ops->free(qkv), ops->free(out), ops->free(att), ops->free(scratch), ops->free(dqkv);
    ops->free(dout);
}

static void bench_elementwise(void) {
    const size_t nc = (size_t)N * C, nh = 4 * nc;
    float *x = buf(nc, 2), *y = buf(nc, 0), *dy = buf(nc, 1), *dx = buf(nc, 0);
    float *w = buf(C, 1), *b = buf(C, 1), *dw = buf(C, 0), *db = buf(C, 0);
    float *mean = buf(N, 0), *rstd = buf(N, 0);
    float *h = buf(nh, 4), *g = buf(nh, 0), *dh = buf(nh, 1);
    double t;
    TIME_MEDIAN(t, ops->layernorm_forward(y, mean, rstd, x, w, b, N, C));
    report_bytes("layernorm fwd 256x768", t, 8.0 * nc);
    TIME_MEDIAN(t, ops->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C, true, false));
    report_bytes("layernorm bwd (accumulate)", t, 16.0 * nc);
    TIME_MEDIAN(t, ops->gelu_forward(g, h, nh));
    report_bytes("gelu fwd 256x3072", t, 8.0 * nh);
    TIME_MEDIAN(t, ops->gelu_backward(g, h, dh, nh));
    report_bytes("gelu bwd", t, 12.0 * nh);
    TIME_MEDIAN(t, ops->add(y, x, dy, nc));
    report_bytes("residual add 256x768", t, 12.0 * nc);
    ops->free(x), ops->free(y), ops->free(dy), ops->free(dx), ops->free(w), ops->free(b);
    ops->free(dw), ops->free(db), ops->free(mean), ops->free(rstd), ops->free(h), ops->free(g);
    ops->free(dh);
}

static void bench_embed(void) {
    float *wte = buf((size_t)VP * C, 1), *wpe = buf((size_t)T * C, 1), *out = buf((size_t)N * C, 0);
    float *dwte = buf((size_t)VP * C, 0), *dwpe = buf((size_t)T * C, 0);
    int tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = (i * 7919) % V;
    double t;
    TIME_MEDIAN(t, ops->embed_forward(out, tokens, wte, wpe, B, T, C, 0, VP, true));
    report_bytes("embed fwd", t, 12.0 * N * C);
    TIME_MEDIAN(t, ops->embed_backward(dwte, dwpe, out, tokens, B, T, C, 0, VP, true));
    report_bytes("embed bwd", t, 20.0 * N * C);
    ops->free(wte), ops->free(wpe), ops->free(out), ops->free(dwte), ops->free(dwpe);
}

static void bench_xent(void) {
    const size_t n = (size_t)N * VP;
    float *logits = buf(n, 8), mx[N], se[N], tl[N], losses[N];
    int targets[N];
    for (int i = 0; i < N; i++) targets[i] = (i * 104729) % V;
    double t_max, t_sum, t_bwd;
    TIME_MEDIAN(t_max, ops->xent_row_max(mx, logits, N, VP, V));
    TIME_MEDIAN(t_sum, ops->xent_row_sumexp(se, logits, mx, N, VP, V);
                ops->xent_target_logit(tl, logits, targets, N, VP, 0);
                ops->xent_losses(losses, mx, se, tl, N));
    report_bytes("xent row_max 256x50304", t_max, 4.0 * n);
    report_bytes("xent sumexp+target+losses", t_sum, 4.0 * n);
    /* backward overwrites the logits: re-time it on its own output (values stay finite) */
    TIME_MEDIAN(t_bwd, ops->xent_backward_inplace(logits, mx, se, targets, 1.0f / N, N, VP, V, 0));
    report_bytes("xent backward in place", t_bwd, 8.0 * n);
    ops->free(logits);
}

static void bench_optimizer(void) {
    const size_t n = N_PARAMS_124M;
    float *p = buf(n, 0.1f), *g = buf(n, 0.01f), *m = buf(n, 0), *v = buf(n, 0);
    double t;
    TIME_MEDIAN(t, ops->adamw_update(p, g, m, v, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 10));
    report_bytes("adamw 124M params", t, 28.0 * n);
    volatile double s;
    TIME_MEDIAN(t, s = ops->sumsq(g, n));
    (void)s;
    report_bytes("sumsq 124M", t, 4.0 * n);
    TIME_MEDIAN(t, ops->zero(g, n));
    report_bytes("zero 124M", t, 4.0 * n);
    ops->free(p), ops->free(g), ops->free(m), ops->free(v);
}

/* ---- one whole GPT-2 124M training step from these ops (no communication) ---- */

typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcpw, *fcpb;
} layer_params_t;

/* activations kept for backward, per layer */
typedef struct {
    float *res, *ln1, *mean1, *rstd1, *qkv, *att, *atty, *res2, *ln2, *mean2, *rstd2, *fch, *gelu;
} layer_acts_t;

typedef struct {
    float *params, *grads, *m, *v; /* one flat buffer each */
    layer_params_t p[L], g[L];
    layer_acts_t a[L];
    float *wte, *wpe, *dwte, *dwpe, *lnfw, *lnfb, *dlnfw, *dlnfb;
    float *res_out, *lnf, *meanf, *rstdf, *logits, *mx, *se, *tl, *losses;
    float *dres, *dres2, *dln, *dqkv, *datty, *dfch, *scratch;
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
    m->n_params = carve_params(m, NULL, false);
    m->params = buf(m->n_params, 0.04f), m->grads = buf(m->n_params, 0);
    m->m = buf(m->n_params, 0), m->v = buf(m->n_params, 0);
    carve_params(m, m->params, false);
    carve_params(m, m->grads, true);
    for (int l = 0; l < L; l++) {
        layer_acts_t *a = &m->a[l];
        a->res = buf((size_t)N * C, 0), a->ln1 = buf((size_t)N * C, 0);
        a->mean1 = buf(N, 0), a->rstd1 = buf(N, 0), a->qkv = buf((size_t)N * 3 * C, 0);
        a->att = buf((size_t)B * NH * T * T, 0), a->atty = buf((size_t)N * C, 0);
        a->res2 = buf((size_t)N * C, 0), a->ln2 = buf((size_t)N * C, 0);
        a->mean2 = buf(N, 0), a->rstd2 = buf(N, 0), a->fch = buf((size_t)N * 4 * C, 0);
        a->gelu = buf((size_t)N * 4 * C, 0);
        for (int c = 0; c < C; c++) m->p[l].ln1w[c] = m->p[l].ln2w[c] = 1.0f;
    }
    for (int c = 0; c < C; c++) m->lnfw[c] = 1.0f;
    m->res_out = buf((size_t)N * C, 0), m->lnf = buf((size_t)N * C, 0);
    m->meanf = buf(N, 0), m->rstdf = buf(N, 0), m->logits = buf((size_t)N * VP, 0);
    m->mx = buf(N, 0), m->se = buf(N, 0), m->tl = buf(N, 0), m->losses = buf(N, 0);
    m->dres = buf((size_t)N * C, 0), m->dres2 = buf((size_t)N * C, 0);
    m->dln = buf((size_t)N * C, 0), m->dqkv = buf((size_t)N * 3 * C, 0);
    m->datty = buf((size_t)N * C, 0), m->dfch = buf((size_t)N * 4 * C, 0);
    m->scratch = buf((size_t)B * NH * T * T, 0);
    for (int i = 0; i < N; i++) m->tokens[i] = (i * 7919) % V, m->targets[i] = (i * 104729) % V;
}

static void layer_forward(model_t *m, int l, const float *in, float *out) {
    layer_params_t *p = &m->p[l];
    layer_acts_t *a = &m->a[l];
    memcpy(a->res, in, sizeof(float) * N * C);
    ops->layernorm_forward(a->ln1, a->mean1, a->rstd1, in, p->ln1w, p->ln1b, N, C);
    ops->matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
    ops->attention_forward(a->atty, a->att, a->qkv, B, T, NH, HS);
    ops->matmul_forward(a->res2, a->atty, p->projw, p->projb, N, C, C);
    ops->add(a->res2, a->res2, in, (size_t)N * C);
    ops->layernorm_forward(a->ln2, a->mean2, a->rstd2, a->res2, p->ln2w, p->ln2b, N, C);
    ops->matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
    ops->gelu_forward(a->gelu, a->fch, (size_t)N * 4 * C);
    ops->matmul_forward(out, a->gelu, p->fcpw, p->fcpb, N, 4 * C, C);
    ops->add(out, out, a->res2, (size_t)N * C);
}

/* dres holds d(out) on entry and d(in) on return */
static void layer_backward(model_t *m, int l, bool first_micro) {
    layer_params_t *p = &m->p[l], *g = &m->g[l];
    layer_acts_t *a = &m->a[l];
    ops->matmul_backward(m->dfch, g->fcpw, g->fcpb, m->dres, a->gelu, p->fcpw, N, 4 * C, C,
                         false, first_micro);
    ops->gelu_backward(m->dfch, a->fch, m->dfch, (size_t)N * 4 * C);
    ops->matmul_backward(m->dln, g->fcw, g->fcb, m->dfch, a->ln2, p->fcw, N, C, 4 * C, false,
                         first_micro);
    ops->layernorm_backward(m->dres, g->ln2w, g->ln2b, m->dln, a->res2, p->ln2w, a->mean2,
                            a->rstd2, N, C, true, first_micro);
    ops->matmul_backward(m->datty, g->projw, g->projb, m->dres, a->atty, p->projw, N, C, C,
                         false, first_micro);
    ops->attention_backward(m->dqkv, m->scratch, m->datty, a->qkv, a->att, B, T, NH, HS);
    ops->matmul_backward(m->dln, g->qkvw, g->qkvb, m->dqkv, a->ln1, p->qkvw, N, C, 3 * C,
                         false, first_micro);
    ops->layernorm_backward(m->dres, g->ln1w, g->ln1b, m->dln, a->res, p->ln1w, a->mean1,
                            a->rstd1, N, C, true, first_micro);
}

static double model_step(model_t *m, int step, double *t_phase) {
    double t0 = now_sec();
    ops->embed_forward(m->dres2, m->tokens, m->wte, m->wpe, B, T, C, 0, VP, true);
    float *x = m->dres2;
    for (int l = 0; l < L; l++) {
        layer_forward(m, l, x, m->res_out);
        x = m->res_out;
    }
    ops->layernorm_forward(m->lnf, m->meanf, m->rstdf, x, m->lnfw, m->lnfb, N, C);
    ops->matmul_forward(m->logits, m->lnf, m->wte, NULL, N, C, VP);
    ops->xent_row_max(m->mx, m->logits, N, VP, V);
    ops->xent_row_sumexp(m->se, m->logits, m->mx, N, VP, V);
    ops->xent_target_logit(m->tl, m->logits, m->targets, N, VP, 0);
    ops->xent_losses(m->losses, m->mx, m->se, m->tl, N);
    double t1 = now_sec();
    ops->xent_backward_inplace(m->logits, m->mx, m->se, m->targets, 1.0f / N, N, VP, V, 0);
    ops->matmul_backward(m->dln, m->dwte, NULL, m->logits, m->lnf, m->wte, N, C, VP, false, true);
    ops->layernorm_backward(m->dres, m->dlnfw, m->dlnfb, m->dln, x, m->lnfw, m->meanf, m->rstdf,
                            N, C, false, true);
    for (int l = L - 1; l >= 0; l--) layer_backward(m, l, true);
    ops->zero(m->dwpe, (size_t)T * C);
    ops->embed_backward(m->dwte, m->dwpe, m->dres, m->tokens, B, T, C, 0, VP, true);
    double t2 = now_sec();
    double norm = sqrt(ops->sumsq(m->grads, m->n_params)); /* clip at 1.0 */
    ops->adamw_update(m->params, m->grads, m->m, m->v, m->n_params, 1e-5f, 0.9f, 0.95f, 1e-8f,
                      0.1f, norm > 1.0 ? (float)(1.0 / norm) : 1.0f, step);
    double t3 = now_sec();
    t_phase[0] += t1 - t0, t_phase[1] += t2 - t1, t_phase[2] += t3 - t2;
    return t3 - t0;
}

static void bench_step(int reps) {
    model_t m;
    model_alloc(&m);
    double t_phase[3] = {0}, t[64], dummy[3] = {0};
    if (reps > 64) reps = 64;
    model_step(&m, 1, dummy); /* warm-up: first touch of every buffer */
    for (int r = 0; r < reps; r++) t[r] = model_step(&m, r + 2, t_phase);
    double med = median(t, reps), flops = 6.0 * N * (double)(m.n_params - (size_t)T * C) +
                                          12.0 * L * N * T * C; /* matmuls + attention */
    printf("\nfull step, %zu params, %d tokens: median %.1f ms -> %.1f tokens/s, %.1f GFLOP/s\n",
           m.n_params, N, med * 1e3, N / med, flops / med * 1e-9);
    printf("  mean split: forward+loss %.1f ms, backward %.1f ms, sumsq+adamw %.1f ms\n",
           t_phase[0] / reps * 1e3, t_phase[1] / reps * 1e3, t_phase[2] / reps * 1e3);
}

/* ~0.5 s of sgemm first: the first timed op otherwise pays for clocks ramping up and the BLAS
 * allocating its buffers (seen as 2x slower first results on the VMs). */
static void warm_up(void) {
    float *a = buf((size_t)N * C, 1), *w = buf((size_t)4 * C * C, 1);
    float *y = buf((size_t)N * 4 * C, 0);
    for (double t0 = now_sec(); now_sec() - t0 < 0.5;)
        ops->matmul_forward(y, a, w, NULL, N, C, 4 * C);
    ops->free(a), ops->free(w), ops->free(y);
}

int main(int argc, char **argv) {
    ops = ops_cpu();
    const int step_reps = argc > 1 ? atoi(argv[1]) : 5;
#if defined(OPENBLAS_VERSION)
    printf("ops_%s: %d OpenMP threads, BLAS%s(%s kernels), medians of %d runs\n", ops->name,
           omp_get_max_threads(), OPENBLAS_VERSION, openblas_get_corename(), REPS);
#else
    printf("ops_%s: %d OpenMP threads, medians of %d runs\n", ops->name, omp_get_max_threads(),
           REPS);
#endif
    warm_up();
    bench_matmul("qkv", C, 3 * C, true);
    bench_matmul("attn proj", C, C, true);
    bench_matmul("fc", C, 4 * C, true);
    bench_matmul("fc proj", 4 * C, C, true);
    bench_matmul("lm head", C, VP, false);
    bench_attention();
    bench_elementwise();
    bench_embed();
    bench_xent();
    bench_optimizer();
    bench_step(step_reps);
    return 0;
}
