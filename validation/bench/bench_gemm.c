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
 * model: L blocks and one head), GFLOP/s (2*N*C*OC per product). Where gemm_native_bf16(), the
 * raw products are also timed with gemm_bf16 (bf16 inputs, fp32 accumulation).
 *
 * usage: bench_gemm L C N V [REPS]      e.g. OMP_NUM_THREADS=2 bench_gemm 12 768 256 50257
 * Output: the library line, one Markdown table (a row per shape and a total row), then one line
 *   "total: ops X raw Y best Z bf16 W GFLOP/s" (W = n/a without bf16 instructions) for
 *   run_bench.sh. Uses gemm.h directly (otherwise private to kernels/cpu/) for the raw rows. */
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

typedef struct timing {
    double ops_fwd, ops_bwd;             /* median seconds */
    double raw[N_PRODUCTS], bf16[N_PRODUCTS];
} timing_t;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
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

static timing_t time_shape(const ops_t *ops, const shape_t *s, int N, int reps, bool bf16) {
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
    timing_t out = {.ops_fwd = median(t[S_OPS_FWD], reps), .ops_bwd = median(t[S_OPS_BWD], reps)};
    for (int p = 0; p < N_PRODUCTS; p++) {
        out.raw[p] = median(t[S_RAW + p], reps);
        out.bf16[p] = bf16 ? median(t[S_BF16 + p], reps) : 0.0;
    }
    float *bufs[] = {x, w, b, db, y, dy, dx, dw};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) ops->free(bufs[i]);
    xfree(x16), xfree(w16), xfree(dy16);
    return out;
}

static double gflops(double flop, double sec) { return sec > 0 ? flop / sec * 1e-9 : 0.0; }

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
    double sum_flop = 0, sum_ops = 0, sum_raw = 0, sum_bf16 = 0;
    for (int i = 0; i < n_shapes; i++) {
        const shape_t *s = &shapes[i];
        timing_t t = time_shape(ops, s, N, reps, bf16);
        const double f = 2.0 * N * (double)s->in * s->out; /* one product */
        const double ops_all = t.ops_fwd + t.ops_bwd;
        const double raw_all = t.raw[P_FWD] + t.raw[P_DINP] + t.raw[P_DW];
        const double bf16_all = t.bf16[P_FWD] + t.bf16[P_DINP] + t.bf16[P_DW];
        printf("| %s | %d x %d -> %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |",
               s->name, N, s->in, s->out, gflops(f, t.ops_fwd), gflops(2 * f, t.ops_bwd),
               gflops(3 * f, ops_all), gflops(f, t.raw[P_FWD]), gflops(f, t.raw[P_DINP]),
               gflops(f, t.raw[P_DW]), gflops(3 * f, raw_all), ops_all / raw_all);
        if (bf16) printf(" %.1f |", gflops(3 * f, bf16_all));
        printf("\n");
        fflush(stdout);
        sum_flop += s->count * 3 * f;
        sum_ops += s->count * ops_all;
        sum_raw += s->count * raw_all;
        sum_bf16 += s->count * bf16_all;
    }
    const double g_ops = gflops(sum_flop, sum_ops), g_raw = gflops(sum_flop, sum_raw);
    printf("| **total** (%d x block + head) | | | | **%.1f** | | | | **%.1f** | %.2f |", L, g_ops,
           g_raw, sum_ops / sum_raw);
    if (bf16) printf(" **%.1f** |", gflops(sum_flop, sum_bf16));
    printf("\n");
    char b16[32] = "n/a";
    if (bf16) snprintf(b16, sizeof b16, "%.1f", gflops(sum_flop, sum_bf16));
    printf("total: ops %.1f raw %.1f best %.1f bf16 %s GFLOP/s\n", g_ops, g_raw,
           g_ops > g_raw ? g_ops : g_raw, b16);
    return 0;
}
