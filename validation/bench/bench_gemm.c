/* bench_gemm.c — the best GEMM rate on a GPT-2 model's own matrix products (part of `make bench`,
 * not a test): the five linear layers of one block (qkv C->3C, attn proj C->C, fc C->4C,
 * mproj 4C->C) and the LM head (C->Vp, no bias) at N = B*T rows, forward and both backward
 * products, timed two ways side by side:
 *   ops  through the CPU backend, ops_cpu()->matmul_forward / matmul_backward: llmtrain's real
 *        threading (each product split over the OpenMP threads, one single-threaded GEMM per
 *        slice, matmul.c), bias pre-fill and dbias column sum included, as in training;
 *   raw  gemm_f32 called once per product from outside any parallel region, so the library
 *        threads it itself (oneDNN: all OpenMP threads; OpenBLAS pthread: its own pool), with
 *        the same transposes and beta as matmul.c issues.
 * Each product: WARMUP runs, then the median of REPS; ops and raw interleaved in every
 * repetition so load from other jobs hits both alike. Per shape and in total (weighted as in the
 * model: L blocks and one head), GFLOP/s (2*N*C*OC per product); the total also from each
 * product's fastest repetition (on a machine shared with other work, the one least disturbed).
 * Where gemm_native_bf16(), the raw products are also timed with gemm_bf16 (bf16 inputs, fp32
 * accumulation).
 *
 * usage: bench_gemm L C N V [REPS]      e.g. OMP_NUM_THREADS=2 bench_gemm 12 768 256 50257
 * Output: the library line, one Markdown table (a row per shape, the total of the medians and the
 *   total of the fastest repetitions), then for run_bench.sh the lines
 *   "total: ops X raw Y best Z bf16 W GFLOP/s" and "fastest: ops X raw Y best Z bf16 W GFLOP/s"
 *   (best = the better of ops and raw; W = n/a without bf16 instructions). Uses gemm.h directly (otherwise private to kernels/cpu/) for the raw rows. */
#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"
#include "kernels/precision.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP 2
#define DEFAULT_REPS 7
#define MAX_REPS 64

enum { P_FWD, P_DINP, P_DW, N_PRODUCTS }; /* the three products of a linear layer */
/* timed series per repetition: ops fwd, ops bwd (dinp + dW + dbias), raw fp32 x 3, raw bf16 x 3 */
enum { S_OPS_FWD, S_OPS_BWD, S_RAW, S_BF16 = S_RAW + N_PRODUCTS, N_SERIES = S_BF16 + N_PRODUCTS };

typedef struct shape {
    const char *name;
    int in, out;  /* C and OC of the layer */
    bool bias;
    int count;    /* how many times the model has it (L for block layers, 1 for the head) */
} shape_t;

typedef struct timing { /* seconds, median or fastest of the repetitions */
    double ops_fwd, ops_bwd;
    double raw[N_PRODUCTS], bf16[N_PRODUCTS];
} timing_t;

typedef struct totals { /* the model's products (L blocks + head): FLOP and seconds */
    double flop, ops, raw, bf16;
} totals_t;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double fastest(const double *t, int n) {
    double m = t[0];
    for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
    return m;
}

/* The median (or fastest) of every timed series. */
static timing_t summarize(double t[][MAX_REPS], int reps, bool bf16, bool use_fastest) {
    double tmp[MAX_REPS]; /* median() sorts: a copy, so both summaries read the same series */
    timing_t out = {0};
#define SUMMARY(series) (memcpy(tmp, t[series], sizeof(double) * reps), \
                         use_fastest ? fastest(tmp, reps) : median(tmp, reps))
    out.ops_fwd = SUMMARY(S_OPS_FWD);
    out.ops_bwd = SUMMARY(S_OPS_BWD);
    for (int p = 0; p < N_PRODUCTS; p++) {
        out.raw[p] = SUMMARY(S_RAW + p);
        out.bf16[p] = bf16 ? SUMMARY(S_BF16 + p) : 0.0;
    }
#undef SUMMARY
    return out;
}

/* n floats in [-scale/2, scale/2), rounded to bf16 values (exact in fp32, so the same buffers
 * serve the fp32 and the bf16 products). */
static float *random_buffer(const ops_t *ops, size_t n, float scale, unsigned seed) {
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float v = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
        unsigned bits;
        memcpy(&bits, &v, sizeof bits);
        bits &= 0xffff0000u;
        memcpy(&p[i], &bits, sizeof bits);
    }
    return p;
}

/* bf16 storage of x[n] (exact: random_buffer made bf16 values) */
static uint16_t *bf16_copy(const float *x, size_t n) {
    uint16_t *h = xmalloc_in(n * sizeof *h, MEM_WORKSPACE);
    for (size_t i = 0; i < n; i++) h[i] = bf16_bits(x[i]);
    return h;
}

/* One product of the layer as matmul.c issues it, as a single library call: gemm_f32 on the
 * fp32 operands, or gemm_bf16 on their bf16 copies (x16, w16, dy16) when bf16 is set. */
static void raw_product(bool bf16, int product, int N, int C, int OC, bool bias, const float *x,
                        const float *w, float *y, const float *dy, float *dx, float *dw,
                        const uint16_t *x16, const uint16_t *w16, const uint16_t *dy16) {
    switch (product) {
    case P_FWD:
        if (bf16) gemm_bf16(false, true, N, OC, C, 1.0f, x16, C, w16, C, bias ? 1.0f : 0.0f, y, OC);
        else gemm_f32(false, true, N, OC, C, 1.0f, x, C, w, C, bias ? 1.0f : 0.0f, y, OC);
        break;
    case P_DINP:
        if (bf16) gemm_bf16(false, false, N, C, OC, 1.0f, dy16, OC, w16, C, 0.0f, dx, C);
        else gemm_f32(false, false, N, C, OC, 1.0f, dy, OC, w, C, 0.0f, dx, C);
        break;
    default:
        if (bf16) gemm_bf16(true, false, OC, C, N, 1.0f, dy16, OC, x16, C, 0.0f, dw, C);
        else gemm_f32(true, false, OC, C, N, 1.0f, dy, OC, x, C, 0.0f, dw, C);
        break;
    }
}

static double seconds_of(double t0) { return now_sec() - t0; }

/* Times one shape; the medians go to *med, the fastest repetitions to *fast. */
static void time_shape(const ops_t *ops, const shape_t *s, int N, int reps, bool bf16,
                       timing_t *med, timing_t *fast) {
    const int C = s->in, OC = s->out;
    float *x = random_buffer(ops, (size_t)N * C, 2.0f, 1u), *w = random_buffer(ops, (size_t)OC * C, 0.1f, 2u);
    float *b = s->bias ? random_buffer(ops, (size_t)OC, 0.1f, 3u) : NULL;
    float *db = s->bias ? random_buffer(ops, (size_t)OC, 0.0f, 4u) : NULL;
    float *y = random_buffer(ops, (size_t)N * OC, 0.0f, 5u);
    float *dy = random_buffer(ops, (size_t)N * OC, 0.02f, 6u);
    float *dx = random_buffer(ops, (size_t)N * C, 0.0f, 7u), *dw = random_buffer(ops, (size_t)OC * C, 0.0f, 8u);
    uint16_t *x16 = bf16 ? bf16_copy(x, (size_t)N * C) : NULL, *w16 = bf16 ? bf16_copy(w, (size_t)OC * C) : NULL;
    uint16_t *dy16 = bf16 ? bf16_copy(dy, (size_t)N * OC) : NULL;
    static double t[N_SERIES][MAX_REPS];
    for (int r = -WARMUP; r < reps; r++) {
        double t0 = now_sec(), dt[N_SERIES] = {0};
        ops->matmul_forward(y, x, w, b, N, C, OC);
        dt[S_OPS_FWD] = seconds_of(t0);
        t0 = now_sec();
        ops->matmul_backward(dx, dw, db, dy, x, w, N, C, OC, false, true);
        dt[S_OPS_BWD] = seconds_of(t0);
        for (int p = 0; p < N_PRODUCTS; p++) {
            t0 = now_sec();
            raw_product(false, p, N, C, OC, s->bias, x, w, y, dy, dx, dw, x16, w16, dy16);
            dt[S_RAW + p] = seconds_of(t0);
            if (!bf16) continue;
            t0 = now_sec();
            raw_product(true, p, N, C, OC, s->bias, x, w, y, dy, dx, dw, x16, w16, dy16);
            dt[S_BF16 + p] = seconds_of(t0);
        }
        if (r >= 0)
            for (int k = 0; k < N_SERIES; k++) t[k][r] = dt[k];
    }
    *med = summarize(t, reps, bf16, false);
    *fast = summarize(t, reps, bf16, true);
    float *bufs[] = {x, w, b, db, y, dy, dx, dw};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) ops->free(bufs[i]);
    xfree(x16), xfree(w16), xfree(dy16);
}

static double gflops(double flop, double sec) { return sec > 0 ? flop / sec * 1e-9 : 0.0; }

static double ops_seconds(const timing_t *t) { return t->ops_fwd + t->ops_bwd; }
static double raw_seconds(const timing_t *t) { return t->raw[P_FWD] + t->raw[P_DINP] + t->raw[P_DW]; }
static double bf16_seconds(const timing_t *t) { return t->bf16[P_FWD] + t->bf16[P_DINP] + t->bf16[P_DW]; }

static void accumulate(totals_t *sum, const timing_t *t, double flop_per_product, int count) {
    sum->flop += count * 3 * flop_per_product;
    sum->ops += count * ops_seconds(t);
    sum->raw += count * raw_seconds(t);
    sum->bf16 += count * bf16_seconds(t);
}

/* A total row of the table and its machine-readable line ("total:" or "fastest:"). */
static void print_total(const char *label, const char *key, const totals_t *sum, bool bf16,
                        char *line, size_t size) {
    const double g_ops = gflops(sum->flop, sum->ops), g_raw = gflops(sum->flop, sum->raw);
    printf("| **%s** | | | | **%.1f** | | | | **%.1f** | %.2f |", label, g_ops, g_raw, sum->ops / sum->raw);
    if (bf16) printf(" **%.1f** |", gflops(sum->flop, sum->bf16));
    printf("\n");
    char b16[32] = "n/a";
    if (bf16) snprintf(b16, sizeof b16, "%.1f", gflops(sum->flop, sum->bf16));
    snprintf(line, size, "%s ops %.1f raw %.1f best %.1f bf16 %s GFLOP/s", key, g_ops, g_raw,
             g_ops > g_raw ? g_ops : g_raw, b16);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s L C N V [REPS]   (N = B*T rows; V is padded to a multiple of 128)\n",
                argv[0]);
        return 2;
    }
    const int L = atoi(argv[1]), C = atoi(argv[2]), N = atoi(argv[3]), V = atoi(argv[4]);
    const int reps = argc > 5 ? atoi(argv[5]) : DEFAULT_REPS;
    if (L < 1 || C < 1 || N < 1 || V < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "bench_gemm: L, C, N, V must be positive and 1 <= REPS <= %d\n", MAX_REPS);
        return 2;
    }
    const int Vp = (V + 127) / 128 * 128;
    const shape_t shapes[] = {{"qkv", C, 3 * C, true, L}, {"attn proj", C, C, true, L},
                              {"fc", C, 4 * C, true, L},  {"mproj", 4 * C, C, true, L},
                              {"head", C, Vp, false, 1}};
    const int n_shapes = (int)(sizeof shapes / sizeof *shapes);
    const ops_t *ops = ops_cpu();
    const bool bf16 = gemm_native_bf16();
    printf("library: %s\n", gemm_describe());
    printf("GEMM rates (GFLOP/s), L=%d C=%d N=%d Vp=%d, %d threads, median of %d after %d warm-up; "
           "ops = llmtrain's split over threads, raw = one library call threaded by the library\n",
           L, C, N, Vp, omp_get_max_threads(), reps, WARMUP);
    printf("| shape | N x C -> OC | ops fwd | ops bwd (dinp+dW) | ops all | raw fwd | raw dinp | "
           "raw dW | raw all | raw/ops |%s\n", bf16 ? " bf16 raw all |" : "");
    printf("|---|---|---|---|---|---|---|---|---|---|%s\n", bf16 ? "---|" : "");
    totals_t sum_med = {0}, sum_fast = {0};
    for (int i = 0; i < n_shapes; i++) {
        const shape_t *s = &shapes[i];
        timing_t t, tf;
        time_shape(ops, s, N, reps, bf16, &t, &tf);
        const double f = 2.0 * N * (double)s->in * s->out; /* one product */
        printf("| %s | %d x %d -> %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |",
               s->name, N, s->in, s->out, gflops(f, t.ops_fwd), gflops(2 * f, t.ops_bwd),
               gflops(3 * f, ops_seconds(&t)), gflops(f, t.raw[P_FWD]), gflops(f, t.raw[P_DINP]),
               gflops(f, t.raw[P_DW]), gflops(3 * f, raw_seconds(&t)), ops_seconds(&t) / raw_seconds(&t));
        if (bf16) printf(" %.1f |", gflops(3 * f, bf16_seconds(&t)));
        printf("\n");
        fflush(stdout);
        accumulate(&sum_med, &t, f, s->count);
        accumulate(&sum_fast, &tf, f, s->count);
    }
    char label[64], line_med[160], line_fast[160];
    snprintf(label, sizeof label, "total (%d x block + head)", L);
    print_total(label, "total:", &sum_med, bf16, line_med, sizeof line_med);
    print_total("total, fastest repetitions", "fastest:", &sum_fast, bf16, line_fast, sizeof line_fast);
    printf("%s\n%s\n", line_med, line_fast);
    return 0;
}
