/* test_ops.c — unit tests of the CPU backend of the op interface (src/kernels/cpu/).
 * References: central finite differences of each op's forward (objective L = sum(out * R) with a
 * fixed random R, accumulated in double), naive double-precision loops, whole-vocabulary results
 * for the vocab-shard arguments, and hand-computed AdamW steps. Each test's name states its
 * tolerance; the finite-difference tolerance is max|numeric - analytic| / max|numeric|.
 * A failing comparison prints the worst element. Needs no MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_numeric.h"

/* ---------------------------------------------------------------- helpers */

static float *buf_rand(size_t n) {
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* ---------------------------------------------------------------- matmul */

typedef struct {
    float *out, *inp, *w, *bias, *r;
    int N, C, OC;
} matmul_ctx;

static double matmul_objective(void *p) {
    matmul_ctx *c = p;
    ops->matmul_forward(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dot_double(c->out, c->r, (size_t)c->N * c->OC);
}

static void matmul_ctx_init(matmul_ctx *c, int N, int C, int OC, bool with_bias) {
    c->N = N, c->C = C, c->OC = OC;
    c->out = buf_fill((size_t)N * OC, NAN); /* forward must overwrite */
    c->inp = buf_rand((size_t)N * C);
    c->w = buf_rand((size_t)OC * C);
    c->bias = with_bias ? buf_rand((size_t)OC) : NULL;
    c->r = buf_rand((size_t)N * OC);
}

static void matmul_ctx_free(matmul_ctx *c) {
    ops->free(c->out), ops->free(c->inp), ops->free(c->w), ops->free(c->bias), ops->free(c->r);
}

static void matmul_forward_matches_naive_loop_1e_5(void **state) {
    (void)state;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        matmul_ctx c;
        matmul_ctx_init(&c, 7, 13, 5, with_bias);
        matmul_objective(&c);
        double *want = malloc((size_t)c.N * c.OC * sizeof *want);
        for (int i = 0; i < c.N; i++)
            for (int o = 0; o < c.OC; o++) {
                double s = c.bias ? c.bias[o] : 0.0;
                for (int k = 0; k < c.C; k++)
                    s += (double)c.inp[i * c.C + k] * (double)c.w[o * c.C + k];
                want[i * c.OC + o] = s;
            }
        assert_true(close_rel(with_bias ? "matmul out (bias)" : "matmul out", c.out, want,
                              (size_t)c.N * c.OC, 1e-5));
        free(want);
        matmul_ctx_free(&c);
    }
}

static void matmul_backward_matches_finite_differences_1e_3(void **state) {
    (void)state;
    matmul_ctx c;
    matmul_ctx_init(&c, 10, 8, 6, true);
    size_t nin = (size_t)c.N * c.C, nw = (size_t)c.OC * c.C;
    float *dinp = buf_fill(nin, NAN), *dw = buf_fill(nw, NAN), *db = buf_fill(c.OC, NAN);
    ops->matmul_backward(dinp, dw, db, c.r, c.inp, c.w, c.N, c.C, c.OC, false, true);
    /* the objective is linear in each input, so a large eps has no truncation error */
    assert_true(fd_check("matmul dinp", matmul_objective, &c, c.inp, nin, dinp, 0.1f, 1e-3));
    assert_true(fd_check("matmul dw", matmul_objective, &c, c.w, nw, dw, 0.1f, 1e-3));
    assert_true(fd_check("matmul dbias", matmul_objective, &c, c.bias, c.OC, db, 0.1f, 1e-3));
    ops->free(dinp), ops->free(dw), ops->free(db);
    matmul_ctx_free(&c);
}

/* accumulate_dinp adds to old dinp; without overwrite_dw, dw/dbias add to old values;
 * overwrite_dw ignores old contents (even NaN); dinp == NULL and bias == NULL are skipped. */
static void matmul_backward_flags_accumulate_and_overwrite_1e_6(void **state) {
    (void)state;
    const int N = 9, C = 6, OC = 11;
    matmul_ctx c;
    matmul_ctx_init(&c, N, C, OC, false);
    size_t nin = (size_t)N * C, nw = (size_t)OC * C;
    float *dinp_ref = buf_fill(nin, 0), *dw_ref = buf_fill(nw, NAN), *db_ref = buf_fill(OC, NAN);
    ops->matmul_backward(dinp_ref, dw_ref, db_ref, c.r, c.inp, c.w, N, C, OC, false, true);

    float *old_in = buf_rand(nin), *old_w = buf_rand(nw), *old_b = buf_rand(OC);
    float *dinp = buf_copy(old_in, nin), *dw = buf_copy(old_w, nw), *db = buf_copy(old_b, OC);
    ops->matmul_backward(dinp, dw, db, c.r, c.inp, c.w, N, C, OC, true, false);
    double *want = malloc(nw * sizeof *want);
    for (size_t i = 0; i < nin; i++) want[i] = (double)old_in[i] + dinp_ref[i];
    assert_true(close_rel("dinp accumulated", dinp, want, nin, 1e-6));
    for (size_t i = 0; i < nw; i++) want[i] = (double)old_w[i] + dw_ref[i];
    assert_true(close_rel("dw accumulated", dw, want, nw, 1e-6));
    for (int i = 0; i < OC; i++) want[i] = (double)old_b[i] + db_ref[i];
    assert_true(close_rel("dbias accumulated", db, want, OC, 1e-6));

    /* overwrite_dw on NaN-filled buffers; dinp NULL is skipped */
    float *dw2 = buf_fill(nw, NAN), *db2 = buf_fill(OC, NAN);
    ops->matmul_backward(NULL, dw2, db2, c.r, c.inp, c.w, N, C, OC, false, true);
    assert_true(close_rel_f("dw overwritten", dw2, dw_ref, nw, 1e-6));
    assert_true(close_rel_f("dbias overwritten", db2, db_ref, OC, 1e-6));
    /* dbias NULL: dw still computed */
    float *dw3 = buf_fill(nw, NAN);
    ops->matmul_backward(NULL, dw3, NULL, c.r, c.inp, c.w, N, C, OC, false, true);
    assert_true(close_rel_f("dw without dbias", dw3, dw_ref, nw, 1e-6));

    free(want);
    ops->free(dinp_ref), ops->free(dw_ref), ops->free(db_ref), ops->free(old_in);
    ops->free(old_w), ops->free(old_b), ops->free(dinp), ops->free(dw), ops->free(db);
    ops->free(dw2), ops->free(db2), ops->free(dw3);
    matmul_ctx_free(&c);
}

/* The split backward (ZB-H1): B with dw NULL computes dinp alone (dw and dbias untouched, here
 * NaN sentinels), W with dinp NULL and no weights (w NULL) computes dw and dbias alone; together
 * they are bit-identical to the one call, overwriting and accumulating. */
static void matmul_backward_split_equals_unsplit_exact(void **state) {
    (void)state;
    const int N = 9, C = 6, OC = 11;
    matmul_ctx c;
    matmul_ctx_init(&c, N, C, OC, true);
    size_t nin = (size_t)N * C, nw = (size_t)OC * C;
    float *dinp_ref = buf_rand(nin), *dw_ref = buf_rand(nw), *db_ref = buf_rand(OC);
    float *dinp = buf_copy(dinp_ref, nin), *dw = buf_copy(dw_ref, nw), *db = buf_copy(db_ref, OC);
    float *sentinel = buf_fill(nw, NAN);
    for (int overwrite = 0; overwrite < 2; overwrite++) {
        ops->matmul_backward(dinp_ref, dw_ref, db_ref, c.r, c.inp, c.w, N, C, OC, true, overwrite);
        ops->matmul_backward(dinp, NULL, sentinel, c.r, c.inp, c.w, N, C, OC, true, false);
        for (size_t i = 0; i < nw; i++) assert_true(isnan(sentinel[i])); /* B: no dbias either */
        ops->matmul_backward(NULL, dw, db, c.r, c.inp, NULL, N, C, OC, false, overwrite);
        assert_memory_equal(dinp, dinp_ref, nin * sizeof(float));
        assert_memory_equal(dw, dw_ref, nw * sizeof(float));
        assert_memory_equal(db, db_ref, (size_t)OC * sizeof(float));
    }
    ops->free(dinp_ref), ops->free(dw_ref), ops->free(db_ref), ops->free(dinp), ops->free(dw);
    ops->free(db), ops->free(sentinel);
    matmul_ctx_free(&c);
}

/* ---------------------------------------------------------------- layernorm */

typedef struct {
    float *out, *mean, *rstd, *inp, *w, *b, *r;
    int N, C;
} ln_ctx;

static double ln_objective(void *p) {
    ln_ctx *c = p;
    ops->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot_double(c->out, c->r, (size_t)c->N * c->C);
}

static void ln_ctx_init(ln_ctx *c, int N, int C) {
    c->N = N, c->C = C;
    size_t n = (size_t)N * C;
    c->out = buf_fill(n, NAN), c->mean = buf_fill(N, NAN), c->rstd = buf_fill(N, NAN);
    c->inp = buf_rand(n), c->w = buf_rand(C), c->b = buf_rand(C), c->r = buf_rand(n);
    for (size_t i = 0; i < n; i++) c->inp[i] = 3.0f * c->inp[i] + 0.5f; /* nonzero mean */
}

static void ln_ctx_free(ln_ctx *c) {
    ops->free(c->out), ops->free(c->mean), ops->free(c->rstd), ops->free(c->inp);
    ops->free(c->w), ops->free(c->b), ops->free(c->r);
}

static void layernorm_forward_matches_naive_double_1e_5(void **state) {
    (void)state;
    ln_ctx c;
    ln_ctx_init(&c, 10, 8);
    ln_objective(&c);
    size_t n = (size_t)c.N * c.C;
    double *want = malloc(n * sizeof *want), want_mean[10], want_rstd[10];
    for (int i = 0; i < c.N; i++) {
        double m = 0, v = 0;
        for (int k = 0; k < c.C; k++) m += c.inp[i * c.C + k];
        m /= c.C;
        for (int k = 0; k < c.C; k++) v += (c.inp[i * c.C + k] - m) * (c.inp[i * c.C + k] - m);
        double s = 1.0 / sqrt(v / c.C + 1e-5);
        for (int k = 0; k < c.C; k++)
            want[i * c.C + k] = (c.inp[i * c.C + k] - m) * s * c.w[k] + c.b[k];
        want_mean[i] = m, want_rstd[i] = s;
    }
    assert_true(close_rel("layernorm out", c.out, want, n, 1e-5));
    assert_true(close_rel("layernorm mean", c.mean, want_mean, c.N, 1e-5));
    assert_true(close_rel("layernorm rstd", c.rstd, want_rstd, c.N, 1e-5));
    free(want);
    ln_ctx_free(&c);
}

static void layernorm_backward_matches_finite_differences_2e_3(void **state) {
    (void)state;
    ln_ctx c;
    ln_ctx_init(&c, 10, 8);
    ln_objective(&c);
    size_t n = (size_t)c.N * c.C;
    float *dinp = buf_fill(n, NAN), *dw = buf_fill(c.C, NAN), *db = buf_fill(c.C, NAN);
    ops->layernorm_backward(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, c.N, c.C, false, true);
    assert_true(fd_check("layernorm dinp", ln_objective, &c, c.inp, n, dinp, 1e-2f, 2e-3));
    assert_true(fd_check("layernorm dw", ln_objective, &c, c.w, c.C, dw, 1e-2f, 2e-3));
    assert_true(fd_check("layernorm db", ln_objective, &c, c.b, c.C, db, 1e-2f, 2e-3));
    ops->free(dinp), ops->free(dw), ops->free(db);
    ln_ctx_free(&c);
}

static void layernorm_backward_flags_accumulate_and_overwrite_1e_6(void **state) {
    (void)state;
    ln_ctx c;
    ln_ctx_init(&c, 6, 200); /* C > one column block of the dw/db reduction */
    ln_objective(&c);
    const int N = c.N, C = c.C;
    size_t n = (size_t)N * C;
    float *dinp_ref = buf_fill(n, NAN), *dw_ref = buf_fill(C, NAN), *db_ref = buf_fill(C, NAN);
    ops->layernorm_backward(dinp_ref, dw_ref, db_ref, c.r, c.inp, c.w, c.mean, c.rstd, N, C,
                            false, true);
    float *old_in = buf_rand(n), *old_w = buf_rand(C), *old_b = buf_rand(C);
    float *dinp = buf_copy(old_in, n), *dw = buf_copy(old_w, C), *db = buf_copy(old_b, C);
    ops->layernorm_backward(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, N, C, true, false);
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = (double)old_in[i] + dinp_ref[i];
    assert_true(close_rel("layernorm dinp accumulated", dinp, want, n, 1e-6));
    for (int i = 0; i < C; i++) want[i] = (double)old_w[i] + dw_ref[i];
    assert_true(close_rel("layernorm dw accumulated", dw, want, C, 1e-6));
    for (int i = 0; i < C; i++) want[i] = (double)old_b[i] + db_ref[i];
    assert_true(close_rel("layernorm db accumulated", db, want, C, 1e-6));
    free(want);
    ops->free(dinp_ref), ops->free(dw_ref), ops->free(db_ref), ops->free(old_in);
    ops->free(old_w), ops->free(old_b), ops->free(dinp), ops->free(dw), ops->free(db);
    ln_ctx_free(&c);
}

/* double references of layernorm at (N, C): forward from inp, backward from the double
 * mean and rstd (the kernel uses its saved float ones: a difference of ~1e-7) */
static void layernorm_naive(double *out, double *mean, double *rstd, const float *inp,
                            const float *w, const float *b, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        double m = 0, v = 0;
        for (int k = 0; k < C; k++) m += x[k];
        m /= C;
        for (int k = 0; k < C; k++) v += (x[k] - m) * (x[k] - m);
        mean[i] = m, rstd[i] = 1.0 / sqrt(v / C + 1e-5);
        for (int k = 0; k < C; k++) out[(size_t)i * C + k] = (x[k] - m) * rstd[i] * w[k] + b[k];
    }
}

static void layernorm_backward_naive(double *dinp, double *dw, double *db, const float *dout,
                                     const float *inp, const float *w, const double *mean,
                                     const double *rstd, int N, int C) {
    for (int k = 0; k < C; k++) dw[k] = db[k] = 0;
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        double a = 0, bn = 0;
        for (int k = 0; k < C; k++) {
            const double norm = (x[k] - mean[i]) * rstd[i];
            a += (double)dy[k] * w[k], bn += (double)dy[k] * w[k] * norm;
            dw[k] += dy[k] * norm, db[k] += dy[k];
        }
        a /= C, bn /= C;
        for (int k = 0; k < C; k++) {
            const double norm = (x[k] - mean[i]) * rstd[i];
            dinp[(size_t)i * C + k] = ((double)dy[k] * w[k] - a - norm * bn) * rstd[i];
        }
    }
}

/* Shapes the vector loops and the backward's row blocks do not divide: C not a multiple of 4
 * (C = 3: no full quarter at all), N not a multiple of the blocks (300 rows: 16 blocks of 19,
 * the last one 15), N below one block; forward and backward against double loops. */
static void layernorm_odd_shapes_match_naive_double_1e_5(void **state) {
    (void)state;
    const int shapes[4][2] = {{300, 37}, {3, 3}, {17, 5}, {40, 1030}};
    for (int k = 0; k < 4; k++) {
        const int N = shapes[k][0], C = shapes[k][1];
        ln_ctx c;
        ln_ctx_init(&c, N, C);
        ln_objective(&c);
        const size_t n = (size_t)N * C;
        double *want = malloc(n * sizeof *want), *want_dinp = malloc(n * sizeof *want_dinp);
        double *want_mean = malloc(N * sizeof(double)), *want_rstd = malloc(N * sizeof(double));
        double *want_dw = malloc(C * sizeof(double)), *want_db = malloc(C * sizeof(double));
        layernorm_naive(want, want_mean, want_rstd, c.inp, c.w, c.b, N, C);
        char what[64];
        snprintf(what, sizeof what, "layernorm out %dx%d", N, C);
        assert_true(close_rel(what, c.out, want, n, 1e-5));
        assert_true(close_rel("layernorm mean", c.mean, want_mean, N, 1e-5));
        assert_true(close_rel("layernorm rstd", c.rstd, want_rstd, N, 1e-5));
        float *dinp = buf_fill(n, NAN), *dw = buf_fill(C, NAN), *db = buf_fill(C, NAN);
        ops->layernorm_backward(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, N, C, false,
                                true);
        layernorm_backward_naive(want_dinp, want_dw, want_db, c.r, c.inp, c.w, want_mean,
                                 want_rstd, N, C);
        snprintf(what, sizeof what, "layernorm dinp %dx%d", N, C);
        assert_true(close_rel(what, dinp, want_dinp, n, 1e-5));
        assert_true(close_rel("layernorm dw", dw, want_dw, C, 1e-5));
        assert_true(close_rel("layernorm db", db, want_db, C, 1e-5));
        free(want), free(want_dinp), free(want_mean), free(want_rstd), free(want_dw);
        free(want_db);
        ops->free(dinp), ops->free(dw), ops->free(db);
        ln_ctx_free(&c);
    }
}

/* residual_layernorm_forward gives the bits of add, quantize(res), layernorm_forward,
 * quantize(out) in fp32, bf16 and fp16, with res aliasing a (as model/ calls it) or not. */
static void residual_layernorm_forward_equals_add_then_layernorm_exact(void **state) {
    (void)state;
    const int shapes[2][2] = {{100, 200}, {5, 13}}; /* threaded; one thread, C % 4 != 0 */
    for (int k = 0; k < 2; k++)
        for (int t = DT_FP32; t <= DT_FP16; t++)
            for (int alias = 0; alias < 2; alias++) {
                const int N = shapes[k][0], C = shapes[k][1];
                const size_t n = (size_t)N * C;
                float *a = buf_rand(n), *b = buf_rand(n), *w = buf_rand(C), *bias = buf_rand(C);
                for (size_t i = 0; i < n; i++) a[i] = 3.0f * a[i] + 0.5f;
                float *ref_res = buf_fill(n, NAN), *ref_out = buf_fill(n, NAN);
                float *ref_mean = buf_fill(N, NAN), *ref_rstd = buf_fill(N, NAN);
                ops->add(ref_res, a, b, n);
                ops->quantize(ref_res, n, (dtype_t)t);
                ops->layernorm_forward(ref_out, ref_mean, ref_rstd, ref_res, w, bias, N, C);
                ops->quantize(ref_out, n, (dtype_t)t);
                float *res = alias ? buf_copy(a, n) : buf_fill(n, NAN);
                float *out = buf_fill(n, NAN), *mean = buf_fill(N, NAN), *rstd = buf_fill(N, NAN);
                ops->residual_layernorm_forward(res, out, mean, rstd, alias ? res : a, b, w, bias,
                                                N, C, (dtype_t)t);
                char what[96];
                snprintf(what, sizeof what, "fused res %dx%d %s%s", N, C, dtype_name((dtype_t)t),
                         alias ? " (res aliases a)" : "");
                assert_true(equal_exact(what, res, ref_res, n));
                assert_true(equal_exact("fused layernorm out", out, ref_out, n));
                assert_true(equal_exact("fused mean", mean, ref_mean, N));
                assert_true(equal_exact("fused rstd", rstd, ref_rstd, N));
                ops->free(a), ops->free(b), ops->free(w), ops->free(bias), ops->free(ref_res);
                ops->free(ref_out), ops->free(ref_mean), ops->free(ref_rstd), ops->free(res);
                ops->free(out), ops->free(mean), ops->free(rstd);
            }
}

/* ---------------------------------------------------------------- attention */

typedef struct {
    float *out, *lse, *qkv, *r, *scratch;
    size_t scratch_floats;
    int B, T, NH, hs;
} att_ctx;

static double att_objective(void *p) {
    att_ctx *c = p;
    ops->attention_forward(c->out, c->lse, c->scratch, c->scratch_floats, c->qkv, c->B, c->T,
                           c->NH, c->hs);
    return dot_double(c->out, c->r, (size_t)c->B * c->T * c->NH * c->hs);
}

static void att_ctx_init(att_ctx *c, int B, int T, int NH, int hs) {
    c->B = B, c->T = T, c->NH = NH, c->hs = hs;
    size_t C = (size_t)NH * hs;
    c->out = buf_fill((size_t)B * T * C, NAN);
    c->lse = buf_fill((size_t)B * NH * T, NAN);
    c->qkv = buf_rand((size_t)B * T * 3 * C);
    c->r = buf_rand((size_t)B * T * C);
    c->scratch_floats = ops->attention_scratch_floats(B, T, NH, hs);
    c->scratch = buf_fill(c->scratch_floats, NAN); /* scratch contents must never matter */
    for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) c->qkv[i] *= 2.0f; /* peakier softmax */
}

static void att_ctx_free(att_ctx *c) {
    ops->free(c->out), ops->free(c->lse), ops->free(c->qkv), ops->free(c->r);
    ops->free(c->scratch);
}

/* naive double reference of out[B, T, NH*hs] and lse[B, NH, T] = log sum_{j<=t} exp(s_tj) */
static void attention_naive(double *out, double *lse, const att_ctx *c) {
    const int T = c->T, hs = c->hs, C = c->NH * hs;
    double *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = c->qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    p[j] = s / sqrt((double)hs);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
                lse[((size_t)b * c->NH + h) * T + t] = mx + log(sum);
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0;
                for (int j = 0; j <= t; j++) {
                    const float *v = c->qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int d = 0; d < hs; d++) o[d] += p[j] / sum * v[d];
                }
            }
    free(p);
}

/* ---- the reference T x T kernel: src/kernels/cpu/attention.c as it was before the tiled
 * kernel (commit 8329552), which saved att[B, NH, T, T] and took a [B, NH, T, T] scratch in
 * backward. Kept here, verbatim but for the names, as the reference the tiled kernel replaces. */
enum { REF_TXT_BLOCK = 128 };

static void ref_txt_softmax_causal_row(float *p, int t, int T) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j <= t; j++) mx = p[j] > mx ? p[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; j++) {
        p[j] = cpu_expf(p[j] - mx);
        sum += p[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= t; j++) p[j] *= inv;
    for (int j = t + 1; j < T; j++) p[j] = 0.0f;
}

static void ref_txt_head_forward(float *out, float *att, const float *q, const float *k,
                                 const float *v, int T, int hs, int ld, int ldo) {
    const float scale = 1.0f / sqrtf((float)hs);
    for (int r0 = 0; r0 < T; r0 += REF_TXT_BLOCK) {
        const int r1 = T < r0 + REF_TXT_BLOCK ? T : r0 + REF_TXT_BLOCK, rows = r1 - r0;
        gemm_f32(false, true, rows, r1, hs, scale, q + (size_t)r0 * ld, ld, k, ld, 0.0f,
                 att + (size_t)r0 * T, T);
        for (int t = r0; t < r1; t++) ref_txt_softmax_causal_row(att + (size_t)t * T, t, T);
        gemm_f32(false, false, rows, hs, r1, 1.0f, att + (size_t)r0 * T, T, v, ld, 0.0f,
                 out + (size_t)r0 * ldo, ldo);
    }
}

/* out[B, T, NH*hs], att[B, NH, T, T] from qkv[B, T, 3*NH*hs] */
static void reference_txt_attention_forward(float *out, float *att, const float *qkv, int B,
                                            int T, int NH, int hs) {
    const int C = NH * hs, ld = 3 * C;
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs;
        ref_txt_head_forward(out + (size_t)b * T * C + (size_t)h * hs, att + (size_t)bh * T * T,
                             q, q + C, q + 2 * C, T, hs, ld, C);
    }
}

static void ref_txt_softmax_causal_row_backward(float *d, const float *p, int t, int end,
                                                float scale) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= t; j++) dot += p[j] * d[j];
#pragma omp simd
    for (int j = 0; j <= t; j++) d[j] = scale * p[j] * (d[j] - dot);
    for (int j = t + 1; j < end; j++) d[j] = 0.0f;
}

static void ref_txt_head_backward(float *dq, float *dk, float *dv, float *ds, const float *dout,
                                  const float *q, const float *k, const float *v,
                                  const float *att, int T, int hs, int ld, int ldo) {
    const float scale = 1.0f / sqrtf((float)hs);
    for (int r0 = 0; r0 < T; r0 += REF_TXT_BLOCK) {
        const int r1 = T < r0 + REF_TXT_BLOCK ? T : r0 + REF_TXT_BLOCK, rows = r1 - r0;
        gemm_f32(false, true, rows, r1, hs, 1.0f, dout + (size_t)r0 * ldo, ldo, v, ld, 0.0f,
                 ds + (size_t)r0 * T, T);
        for (int t = r0; t < r1; t++)
            ref_txt_softmax_causal_row_backward(ds + (size_t)t * T, att + (size_t)t * T, t, r1,
                                                scale);
        gemm_f32(false, false, rows, hs, r1, 1.0f, ds + (size_t)r0 * T, T, k, ld, 0.0f,
                 dq + (size_t)r0 * ld, ld);
    }
    for (int c0 = 0; c0 < T; c0 += REF_TXT_BLOCK) {
        const int cols = (T < c0 + REF_TXT_BLOCK ? T : c0 + REF_TXT_BLOCK) - c0;
        const size_t diag = (size_t)c0 * T + c0;
        gemm_f32(true, false, cols, hs, T - c0, 1.0f, ds + diag, T, q + (size_t)c0 * ld, ld,
                 0.0f, dk + (size_t)c0 * ld, ld);
        gemm_f32(true, false, cols, hs, T - c0, 1.0f, att + diag, T, dout + (size_t)c0 * ldo,
                 ldo, 0.0f, dv + (size_t)c0 * ld, ld);
    }
}

/* dqkv[B, T, 3*NH*hs] from dout, qkv, att; scratch[B, NH, T, T] */
static void reference_txt_attention_backward(float *dqkv, float *scratch, const float *dout,
                                             const float *qkv, const float *att, int B, int T,
                                             int NH, int hs) {
    const int C = NH * hs, ld = 3 * C;
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const size_t head = (size_t)b * T * ld + (size_t)h * hs;
        float *dq = dqkv + head;
        const float *q = qkv + head;
        ref_txt_head_backward(dq, dq + C, dq + 2 * C, scratch + (size_t)bh * T * T,
                              dout + (size_t)b * T * C + (size_t)h * hs, q, q + C, q + 2 * C,
                              att + (size_t)bh * T * T, T, hs, ld, C);
    }
}

static void check_attention_forward(int B, int T, int NH, int hs, const char *what) {
    att_ctx c;
    att_ctx_init(&c, B, T, NH, hs);
    att_objective(&c);
    size_t n_out = (size_t)B * T * NH * hs, n_lse = (size_t)B * NH * T;
    double *out = malloc(n_out * sizeof *out), *lse = malloc(n_lse * sizeof *lse);
    attention_naive(out, lse, &c);
    char lse_what[96];
    snprintf(lse_what, sizeof lse_what, "%s: lse", what);
    assert_true(close_rel(what, c.out, out, n_out, 1e-5));
    assert_true(close_rel(lse_what, c.lse, lse, n_lse, 1e-5));
    free(out), free(lse);
    att_ctx_free(&c);
}

/* T = 5 (one partial tile of the kernel's 128 x 128), 128 (one whole tile), 129 (a whole
 * tile and a 1-row one), 300 (three query blocks x up to three key blocks, the last partial) */
static void attention_forward_matches_naive_double_1e_5(void **state) {
    (void)state;
    check_attention_forward(2, 5, 2, 4, "attention out T=5");
    check_attention_forward(1, 128, 2, 4, "attention out T=128 (one whole tile)");
    check_attention_forward(1, 129, 2, 4, "attention out T=129");
    check_attention_forward(1, 300, 2, 4, "attention out T=300 (several tiles)");
}

static void check_attention_backward(int B, int T, int NH, int hs, const char *what) {
    att_ctx c;
    att_ctx_init(&c, B, T, NH, hs);
    att_objective(&c);
    size_t n_qkv = (size_t)B * T * 3 * NH * hs;
    float *dqkv = buf_fill(n_qkv, NAN);
    ops->attention_backward(dqkv, c.scratch, c.scratch_floats, c.r, c.qkv, c.out, c.lse, B, T,
                            NH, hs);
    assert_true(fd_check(what, att_objective, &c, c.qkv, n_qkv, dqkv, 1e-2f, 2e-3));
    ops->free(dqkv);
    att_ctx_free(&c);
}

static void attention_backward_matches_finite_differences_2e_3(void **state) {
    (void)state;
    check_attention_backward(2, 5, 2, 4, "attention dqkv T=5");
    check_attention_backward(1, 150, 1, 3, "attention dqkv T=150 (2 x 2 tiles, one partial)");
}

/* The tiled kernel against the T x T kernel it replaced, at T = 200 (not a multiple of the
 * tile), hs = 64, NH = 3, B = 2: the same mathematics with the sums in another order
 * (online-softmax rescaling, division by the row sum after the product), so fp32 rounding
 * apart: out within 2e-6 and dqkv within 5e-6 of the largest element (measured: 3.0e-7 and
 * 5.2e-7 with oneDNN). */
static void attention_tiled_matches_txt_reference_kernel_2e_6_out_5e_6_dqkv(void **state) {
    (void)state;
    const int B = 2, T = 200, NH = 3, hs = 64;
    att_ctx c;
    att_ctx_init(&c, B, T, NH, hs);
    att_objective(&c);
    const size_t n_out = (size_t)B * T * NH * hs, n_qkv = 3 * n_out, n_tt = (size_t)B * NH * T * T;
    float *dqkv = buf_fill(n_qkv, NAN);
    ops->attention_backward(dqkv, c.scratch, c.scratch_floats, c.r, c.qkv, c.out, c.lse, B, T,
                            NH, hs);
    float *ref_out = buf_fill(n_out, NAN), *ref_att = buf_fill(n_tt, NAN);
    float *ref_scratch = buf_fill(n_tt, NAN), *ref_dqkv = buf_fill(n_qkv, NAN);
    const int blas_threads = gemm_serial_begin();
    reference_txt_attention_forward(ref_out, ref_att, c.qkv, B, T, NH, hs);
    reference_txt_attention_backward(ref_dqkv, ref_scratch, c.r, c.qkv, ref_att, B, T, NH, hs);
    gemm_serial_end(blas_threads);
    assert_true(close_rel_f("tiled vs T x T reference: out", c.out, ref_out, n_out, 2e-6));
    assert_true(close_rel_f("tiled vs T x T reference: dqkv", dqkv, ref_dqkv, n_qkv, 5e-6));
    ops->free(dqkv), ops->free(ref_out), ops->free(ref_att), ops->free(ref_scratch);
    ops->free(ref_dqkv);
    att_ctx_free(&c);
}

/* changing the last token's q, k, v leaves every earlier output and log-sum-exp bitwise
 * unchanged; at T = 7 (one tile) and T = 150 (the last token in the partial second tile, whose
 * query block and key block it shares with 21 earlier tokens) */
static void check_causal_mask(int B, int T, int NH, int hs) {
    att_ctx c;
    att_ctx_init(&c, B, T, NH, hs);
    const int C = c.NH * c.hs;
    att_objective(&c);
    float *before = buf_copy(c.out, (size_t)c.B * T * C);
    float *lse_before = buf_copy(c.lse, (size_t)c.B * c.NH * T);
    for (int b = 0; b < c.B; b++)
        for (int k = 0; k < 3 * C; k++) c.qkv[((size_t)b * T + T - 1) * 3 * C + k] += 5.0f;
    att_objective(&c);
    for (int b = 0; b < c.B; b++)
        assert_true(equal_exact("attention out before the changed token",
                                c.out + (size_t)b * T * C, before + (size_t)b * T * C,
                                (size_t)(T - 1) * C));
    for (int bh = 0; bh < c.B * c.NH; bh++)
        assert_true(equal_exact("attention lse before the changed token", c.lse + (size_t)bh * T,
                                lse_before + (size_t)bh * T, (size_t)T - 1));
    ops->free(before), ops->free(lse_before);
    att_ctx_free(&c);
}

static void attention_causal_mask_future_token_does_not_change_past_exact(void **state) {
    (void)state;
    check_causal_mask(2, 7, 2, 4);
    check_causal_mask(1, 150, 2, 8);
}

/* A scratch sized for one thread only (attention_scratch_floats of a single tile's problem)
 * makes the kernels use one thread: the same bits as the full scratch on three threads. */
static void attention_scratch_for_one_thread_gives_same_bits_exact(void **state) {
    (void)state;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(3);
    att_ctx c;
    att_ctx_init(&c, 2, 150, 2, 8);
    const size_t n_out = (size_t)c.B * c.T * c.NH * c.hs, n_lse = (size_t)c.B * c.NH * c.T;
    float *dqkv = buf_fill(3 * n_out, NAN), *dqkv1 = buf_fill(3 * n_out, NAN);
    att_objective(&c);
    ops->attention_backward(dqkv, c.scratch, c.scratch_floats, c.r, c.qkv, c.out, c.lse, c.B,
                            c.T, c.NH, c.hs);
    float *out = buf_copy(c.out, n_out), *lse = buf_copy(c.lse, n_lse);
    const size_t one = ops->attention_scratch_floats(1, 1, 1, c.hs);
    assert_true(one < c.scratch_floats);
    ops->attention_forward(c.out, c.lse, c.scratch, one, c.qkv, c.B, c.T, c.NH, c.hs);
    ops->attention_backward(dqkv1, c.scratch, one, c.r, c.qkv, c.out, c.lse, c.B, c.T, c.NH,
                            c.hs);
    assert_true(equal_exact("attention out, one thread's scratch", c.out, out, n_out));
    assert_true(equal_exact("attention lse, one thread's scratch", c.lse, lse, n_lse));
    assert_true(equal_exact("attention dqkv, one thread's scratch", dqkv1, dqkv, 3 * n_out));
    omp_set_num_threads(saved);
    ops->free(dqkv), ops->free(dqkv1), ops->free(out), ops->free(lse);
    att_ctx_free(&c);
}

/* ---------------------------------------------------------------- gelu */

typedef struct {
    float *out, *inp, *r;
    size_t n;
} gelu_ctx;

static double gelu_objective(void *p) {
    gelu_ctx *c = p;
    ops->gelu_forward(c->out, c->inp, c->n);
    return dot_double(c->out, c->r, c->n);
}

static void gelu_ctx_init(gelu_ctx *c, size_t n) {
    c->n = n, c->out = buf_fill(n, NAN), c->inp = buf_rand(n), c->r = buf_rand(n);
    for (size_t i = 0; i < n; i++) c->inp[i] *= 6.0f; /* both tails and the middle */
}

static void gelu_forward_matches_tanh_formula_in_double_1e_6(void **state) {
    (void)state;
    gelu_ctx c;
    gelu_ctx_init(&c, 1000);
    c.inp[0] = -30.0f, c.inp[1] = 30.0f, c.inp[2] = 0.0f, c.inp[3] = -9.5f; /* extremes */
    gelu_objective(&c);
    double want[1000];
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i];
        want[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    assert_true(close_rel("gelu out", c.out, want, c.n, 1e-6));
    /* elementwise too, so the tiny outputs of the negative tail are held to a relative
     * standard: float rounding of u = sqrt(2/pi)(x + 0.044715 x^3) alone gives ~|u| 1e-7 */
    for (size_t i = 0; i < c.n; i++) {
        double u = fabs(sqrt(2.0 / M_PI) * (c.inp[i] + 0.044715 * pow(c.inp[i], 3)));
        double tol = 1e-6 * (1.0 + u) * fabs(want[i]) + 1e-30;
        if (!(fabs(c.out[i] - want[i]) <= tol)) {
            print_error("gelu(%.9g) = %.9g, want %.9g (rel tol %.2g)\n", (double)c.inp[i],
                        (double)c.out[i], want[i], tol / (fabs(want[i]) + 1e-300));
            fail();
        }
    }
    ops->free(c.out), ops->free(c.inp), ops->free(c.r);
}

static void gelu_backward_matches_finite_differences_1e_3(void **state) {
    (void)state;
    gelu_ctx c;
    gelu_ctx_init(&c, 200);
    float *dinp = buf_fill(c.n, NAN);
    ops->gelu_backward(dinp, c.inp, c.r, c.n);
    assert_true(fd_check("gelu dinp", gelu_objective, &c, c.inp, c.n, dinp, 1e-2f, 1e-3));
    /* in place: dinp aliasing dout gives the same result */
    float *inplace = buf_copy(c.r, c.n);
    ops->gelu_backward(inplace, c.inp, inplace, c.n);
    assert_true(equal_exact("gelu backward in place", inplace, dinp, c.n));
    ops->free(dinp), ops->free(inplace), ops->free(c.out), ops->free(c.inp), ops->free(c.r);
}

/* Large |x|: exp(-2u) overflows to +Inf for x < -10; the backward must give the limit 0, not
 * Inf * 0 = NaN, and the forward -0 / x (gelu(x) -> 0 and x). */
static void gelu_is_finite_where_exp_overflows_exact(void **state) {
    (void)state;
    const float x[6] = {-1e4f, -100.0f, -30.0f, -10.5f, 30.0f, 1e4f}; /* x^3 stays finite */
    float out[6], dinp[6], dout[6] = {1, 1, 1, 1, 1, 1};
    ops->gelu_forward(out, x, 6);
    ops->gelu_backward(dinp, x, dout, 6);
    for (int i = 0; i < 6; i++) {
        if (!isfinite(out[i]) || !isfinite(dinp[i]))
            fail_msg("gelu(%g) = %g, gelu'(%g) = %g: not finite", (double)x[i], (double)out[i], (double)x[i],
                     (double)dinp[i]);
        double want = x[i] > 0 ? 1.0 : 0.0, want_out = x[i] > 0 ? x[i] : 0.0;
        if (fabs(dinp[i] - want) > 1e-6 || fabs(out[i] - want_out) > 1e-6 * fabs(want_out))
            fail_msg("x = %g: gelu %g (want %g), gelu' %g (want %g)", (double)x[i], (double)out[i], want_out,
                     (double)dinp[i], want);
    }
}

/* ---------------------------------------------------------------- exp */

/* Both the scalar and a vectorised loop: the compiler may build them differently. */
__attribute__((noinline)) static void expf_array(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = cpu_expf(x[i]);
}

/* One comparison with libm: relative 2.5e-7 where libm's result is at least 2.5e-38 (the
 * flush-to-zero threshold), else an absolute 2.5e-38; overflow where libm overflows (and only
 * within 4 ulp of FLT_MAX otherwise); NaN for NaN. */
static bool expf_close(float x, float got) {
    float want = expf(x);
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    if (isinf(got)) return want >= FLT_MAX * (1.0f - 5e-7f);
    double tol = want >= 2.5e-38f ? 2.5e-7 * (double)want : 2.5e-38;
    return fabs((double)got - (double)want) <= tol && got >= 0.0f;
}

/* cpu_expf against libm expf: IEEE special values and overflow/underflow exactly, and a strided
 * sweep over every 97th float in [-120, 100] (both signs, all exponents) to 2.5e-7. */
static void cpu_expf_matches_libm_ieee_special_values_and_sweep_2_5e_7(void **state) {
    (void)state;
    const float special[] = {NAN, -NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e30f, -1e30f,
                             88.8f, 88.73f, 88.7228f, 88.72283f, 88.72284f, 88.0f, 0.0f, -0.0f,
                             FLT_MIN, -FLT_MIN, 1e-30f, -1e-30f, 1.0f, -1.0f, 0.5f * 0.6931472f,
                             -86.59f, -86.6f, -86.61f, -87.3f, -87.34f, -100.0f, -103.97f, -104.0f,
                             -1000.0f, 1000.0f, 12582912.0f, -12582912.0f, 3e9f, -3e9f};
    const size_t ns = sizeof special / sizeof special[0];
    float vec[sizeof special / sizeof special[0]];
    expf_array(vec, special, ns);
    for (size_t i = 0; i < ns; i++) {
        volatile float x = special[i];
        float scalar = cpu_expf(x);
        if (!expf_close(special[i], scalar) || !expf_close(special[i], vec[i]))
            fail_msg("cpu_expf(%.9g) = %.9g (vector loop %.9g), libm %.9g", (double)special[i], (double)scalar,
                     (double)vec[i], (double)expf(special[i]));
    }
    assert_true(isnan(cpu_expf(NAN)) && cpu_expf(INFINITY) == INFINITY);
    assert_true(cpu_expf(-INFINITY) == 0.0f && !signbit(cpu_expf(-INFINITY)));
    assert_true(cpu_expf(89.0f) == INFINITY && cpu_expf(-90.0f) == 0.0f && cpu_expf(0.0f) == 1.0f);
    /* the sweep, through the vectorised loop */
    enum { BATCH = 4096 };
    float xs[BATCH], ys[BATCH];
    size_t n = 0, checked = 0;
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int sign = 0; sign < 2; sign++) {
        const uint32_t top = sign ? 0xC2F00000u /* -120 */ : 0x42C80000u /* 100 */;
        for (uint32_t bits = sign ? 0x80000000u : 0u; bits <= top; bits += 97u) {
            memcpy(&xs[n++], &bits, sizeof bits);
            if (n < BATCH && bits + 97u <= top) continue;
            expf_array(ys, xs, n);
            for (size_t i = 0; i < n; i++) {
                if (!expf_close(xs[i], ys[i]))
                    fail_msg("cpu_expf(%.9g) = %.9g, libm %.9g", (double)xs[i], (double)ys[i], (double)expf(xs[i]));
                double want = expf(xs[i]);
                if (want >= 2.5e-38 && isfinite(want) && fabs(ys[i] - want) / want > worst)
                    worst = fabs(ys[i] - want) / want, worst_x = xs[i];
            }
            checked += n;
            n = 0;
        }
    }
    printf("    %zu values, worst relative error %.3g at x = %.9g\n", checked, worst, (double)worst_x);
}

/* ---------------------------------------------------------------- embedding */

enum { EB = 2, ET = 5, EC = 8, EV = 37 };

typedef struct {
    float *out, *wte, *wpe, *r;
    int tokens[EB * ET];
} embed_ctx;

static double embed_objective(void *p) {
    embed_ctx *c = p;
    ops->embed_forward(c->out, c->tokens, c->wte, c->wpe, EB, ET, EC, 0, EV, true);
    return dot_double(c->out, c->r, EB * ET * EC);
}

static void embed_ctx_init(embed_ctx *c) {
    c->out = buf_fill(EB * ET * EC, NAN), c->wte = buf_rand(EV * EC), c->wpe = buf_rand(ET * EC);
    c->r = buf_rand(EB * ET * EC);
    const int tokens[EB * ET] = {3, 36, 3, 0, 20, 19, 3, 21, 36, 7}; /* repeats, both shards */
    memcpy(c->tokens, tokens, sizeof tokens);
}

static void embed_ctx_free(embed_ctx *c) {
    ops->free(c->out), ops->free(c->wte), ops->free(c->wpe), ops->free(c->r);
}

static void embed_backward_matches_finite_differences_1e_4(void **state) {
    (void)state;
    embed_ctx c;
    embed_ctx_init(&c);
    float *dwte = buf_fill(EV * EC, 0), *dwpe = buf_fill(ET * EC, 0);
    ops->embed_backward(dwte, dwpe, c.r, c.tokens, EB, ET, EC, 0, EV, true);
    assert_true(fd_check("embed dwte", embed_objective, &c, c.wte, EV * EC, dwte, 0.1f, 1e-4));
    assert_true(fd_check("embed dwpe", embed_objective, &c, c.wpe, ET * EC, dwpe, 0.1f, 1e-4));
    /* accumulates: a second call doubles the gradient */
    ops->embed_backward(dwte, dwpe, c.r, c.tokens, EB, ET, EC, 0, EV, true);
    double want[EV * EC];
    float *once = buf_fill(EV * EC, 0), *once_pe = buf_fill(ET * EC, 0);
    ops->embed_backward(once, once_pe, c.r, c.tokens, EB, ET, EC, 0, EV, true);
    for (int i = 0; i < EV * EC; i++) want[i] = 2.0 * once[i];
    assert_true(close_rel("embed dwte accumulated twice", dwte, want, EV * EC, 1e-6));
    ops->free(dwte), ops->free(dwpe), ops->free(once), ops->free(once_pe);
    embed_ctx_free(&c);
}

/* two vocab shards [0, 20) (adds wpe) and [20, 37): summed outputs equal the whole-vocab output
 * bitwise; the shards' dwte are the whole dwte's rows; dwpe comes only from the add_pos shard */
static void embed_vocab_shards_sum_to_whole_vocab_exact(void **state) {
    (void)state;
    embed_ctx c;
    embed_ctx_init(&c);
    embed_objective(&c);
    const int split = 20, n = EB * ET * EC;
    float *out0 = buf_fill(n, NAN), *out1 = buf_fill(n, NAN);
    ops->embed_forward(out0, c.tokens, c.wte, c.wpe, EB, ET, EC, 0, split, true);
    ops->embed_forward(out1, c.tokens, c.wte + split * EC, NULL, EB, ET, EC, split, EV - split,
                       false);
    ops->add(out0, out0, out1, n);
    assert_true(equal_exact("embed shard sum", out0, c.out, n));

    float *dwte = buf_fill(EV * EC, 0), *dwpe = buf_fill(ET * EC, 0);
    float *dwte_s = buf_fill(EV * EC, 0), *dwpe_s = buf_fill(ET * EC, 0);
    ops->embed_backward(dwte, dwpe, c.r, c.tokens, EB, ET, EC, 0, EV, true);
    ops->embed_backward(dwte_s, dwpe_s, c.r, c.tokens, EB, ET, EC, 0, split, true);
    ops->embed_backward(dwte_s + split * EC, NULL, c.r, c.tokens, EB, ET, EC, split, EV - split,
                        false);
    assert_true(equal_exact("embed shard dwte", dwte_s, dwte, EV * EC));
    assert_true(equal_exact("embed shard dwpe", dwpe_s, dwpe, ET * EC));
    ops->free(out0), ops->free(out1), ops->free(dwte), ops->free(dwpe), ops->free(dwte_s);
    ops->free(dwpe_s);
    embed_ctx_free(&c);
}

/* ---------------------------------------------------------------- cross-entropy */

enum { XN = 10, XV = 37, XVP = 40 }; /* rows, valid vocabulary, padded vocabulary */

typedef struct {
    float *logits; /* [XN, XVP], padding columns hold NaN: they must never be read */
    int targets[XN];
    float losses[XN];
} xent_ctx;

/* the whole-vocabulary forward: losses[N] */
static void xent_forward(float *losses, const float *logits, const int *targets, int N, int Vl,
                         int v_valid) {
    float mx[XN], se[XN], tl[XN];
    ops->xent_row_max(mx, logits, N, Vl, v_valid);
    ops->xent_row_sumexp(se, logits, mx, N, Vl, v_valid);
    ops->xent_target_logit(tl, logits, targets, N, Vl, 0);
    ops->xent_losses(losses, mx, se, tl, N);
}

/* objective: mean loss (dloss = 1/N) */
static double xent_objective(void *p) {
    xent_ctx *c = p;
    xent_forward(c->losses, c->logits, c->targets, XN, XVP, XV);
    double s = 0;
    for (int i = 0; i < XN; i++) s += c->losses[i];
    return s / XN;
}

static void xent_ctx_init(xent_ctx *c) {
    c->logits = buf_rand(XN * XVP);
    for (int i = 0; i < XN; i++) {
        for (int v = 0; v < XVP; v++) c->logits[i * XVP + v] *= 4.0f;
        for (int v = XV; v < XVP; v++) c->logits[i * XVP + v] = NAN;
        c->targets[i] = (i * 11 + 3) % XV;
    }
    c->targets[0] = XV - 1, c->targets[1] = 0; /* the edges of the vocabulary */
}

static void xent_loss_matches_naive_double_1e_6(void **state) {
    (void)state;
    xent_ctx c;
    xent_ctx_init(&c);
    xent_objective(&c);
    double want[XN];
    for (int i = 0; i < XN; i++) {
        const float *l = c.logits + i * XVP;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < XV; v++) mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < XV; v++) s += exp(l[v] - mx);
        want[i] = log(s) + mx - l[c.targets[i]];
    }
    assert_true(close_rel("xent losses (padding is NaN)", c.losses, want, XN, 1e-6));
    ops->free(c.logits);
}

static void xent_backward_matches_finite_differences_1e_3(void **state) {
    (void)state;
    xent_ctx c;
    xent_ctx_init(&c);
    float mx[XN], se[XN];
    float *dlogits = buf_copy(c.logits, XN * XVP);
    ops->xent_row_max(mx, dlogits, XN, XVP, XV);
    ops->xent_row_sumexp(se, dlogits, mx, XN, XVP, XV);
    ops->xent_backward_inplace(dlogits, mx, se, c.targets, 1.0f / XN, XN, XVP, XV, 0);
    for (int i = 0; i < XN; i++) /* padding columns: gradient exactly 0 */
        for (int v = XV; v < XVP; v++)
            if (dlogits[i * XVP + v] != 0.0f) {
                print_error("dlogits[%d][%d] = %g in padding\n", i, v,
                            (double)dlogits[i * XVP + v]);
                fail();
            }
    /* finite differences over the valid columns only (padding holds NaN) */
    for (int i = 0; i < XN; i++) {
        char what[64];
        snprintf(what, sizeof what, "xent dlogits row %d", i);
        assert_true(fd_check(what, xent_objective, &c, c.logits + i * XVP, XV,
                             dlogits + i * XVP, 1e-2f, 1e-3));
    }
    ops->free(dlogits), ops->free(c.logits);
}

/* two vocab shards [0, 20) and [20, 40) (the second holds the padding: v_valid 17) combined
 * by max / sum / sum as ops.h describes give the whole-vocab loss and gradient */
static void xent_vocab_shards_combine_to_whole_vocab_1e_6(void **state) {
    (void)state;
    xent_ctx c;
    xent_ctx_init(&c);
    xent_objective(&c);
    const int S = 20, valid[2] = {20, XV - S};
    float *shard[2], mx[2][XN], se[2][XN], tl[2][XN], gmx[XN], gse[XN], gtl[XN], loss[XN];
    for (int s = 0; s < 2; s++) {
        shard[s] = ops->alloc(XN * S * sizeof(float), MEM_WORKSPACE);
        for (int i = 0; i < XN; i++)
            memcpy(shard[s] + i * S, c.logits + i * XVP + s * S, S * sizeof(float));
        ops->xent_row_max(mx[s], shard[s], XN, S, valid[s]);
    }
    for (int i = 0; i < XN; i++) gmx[i] = fmaxf(mx[0][i], mx[1][i]);
    for (int s = 0; s < 2; s++) {
        ops->xent_row_sumexp(se[s], shard[s], gmx, XN, S, valid[s]);
        ops->xent_target_logit(tl[s], shard[s], c.targets, XN, S, s * S);
    }
    for (int i = 0; i < XN; i++) gse[i] = se[0][i] + se[1][i], gtl[i] = tl[0][i] + tl[1][i];
    ops->xent_losses(loss, gmx, gse, gtl, XN);
    assert_true(close_rel_f("xent sharded losses", loss, c.losses, XN, 1e-6));

    float *whole = buf_copy(c.logits, XN * XVP), wmx[XN], wse[XN];
    ops->xent_row_max(wmx, whole, XN, XVP, XV);
    ops->xent_row_sumexp(wse, whole, wmx, XN, XVP, XV);
    ops->xent_backward_inplace(whole, wmx, wse, c.targets, 0.1f, XN, XVP, XV, 0);
    for (int s = 0; s < 2; s++) {
        ops->xent_backward_inplace(shard[s], gmx, gse, c.targets, 0.1f, XN, S, valid[s], s * S);
        for (int i = 0; i < XN; i++)
            assert_true(close_rel_f("xent sharded dlogits", shard[s] + i * S,
                                    whole + i * XVP + s * S, S, 1e-6));
        ops->free(shard[s]);
    }
    ops->free(whole), ops->free(c.logits);
}

/* a shard holding only padding (v_valid 0) contributes the identities: max -inf, sumexp 0,
 * target 0, and a zero gradient */
static void xent_empty_shard_gives_identities_exact(void **state) {
    (void)state;
    float *pad = buf_fill(XN * 8, NAN), mx[XN], se[XN], tl[XN], gmx[XN];
    int targets[XN];
    for (int i = 0; i < XN; i++) targets[i] = i, gmx[i] = 1.0f;
    ops->xent_row_max(mx, pad, XN, 8, 0);
    ops->xent_row_sumexp(se, pad, gmx, XN, 8, 0);
    ops->xent_target_logit(tl, pad, targets, XN, 8, 40); /* ids 40..47 are not targets */
    ops->xent_backward_inplace(pad, gmx, se, targets, 0.1f, XN, 8, 0, 40);
    for (int i = 0; i < XN; i++) {
        assert_true(isinf(mx[i]) && mx[i] < 0);
        assert_true(se[i] == 0.0f && tl[i] == 0.0f);
        for (int v = 0; v < 8; v++) assert_true(pad[i * 8 + v] == 0.0f);
    }
    ops->free(pad);
}

/* ---------------------------------------------------------------- optimizer, reductions */

/* p0 = {1, -2, 0.5}, grads scaled by 0.5, lr 0.1, b1 0.9, b2 0.99, eps 1e-8, wd 0.1.
 * Step 1 by hand: m_hat = g, v_hat = g^2, so the update is sign(g) (0 where g = 0):
 *   p = 1 - 0.1 (0.99999995 + 0.1) = 0.890000005;  -2 - 0.1 (-1 - 0.2) = -1.88;
 *   0.5 - 0.1 (0 + 0.05) = 0.495.
 * Steps 2, 3: the ops.h formula evaluated in double (9 significant digits below). */
static void adamw_three_steps_match_hand_computed_1e_6(void **state) {
    (void)state;
    const float grads[3][3] = {{0.4f, -1.0f, 0.0f}, {0.2f, 0.6f, -0.8f}, {-0.4f, 1.2f, 0.3f}};
    const double want_p[3][3] = {{0.890000005, -1.88, 0.495},
                                 {0.787755211, -1.84202977, 0.564295976},
                                 {0.768799414, -1.8591031, 0.590052047}};
    const double want_m[3] = {0.0052, 0.0465, -0.021};
    const double want_v[3] = {0.00089104, 0.00694125, 0.001809};
    float p[3] = {1.0f, -2.0f, 0.5f}, m[3] = {0}, v[3] = {0};
    for (int t = 1; t <= 3; t++) {
        ops->adamw_update(p, grads[t - 1], m, v, 3, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.5f, t);
        char what[32];
        snprintf(what, sizeof what, "adamw param step %d", t);
        assert_true(close_rel(what, p, want_p[t - 1], 3, 1e-6));
    }
    assert_true(close_rel("adamw m after 3 steps", m, want_m, 3, 1e-6));
    assert_true(close_rel("adamw v after 3 steps", v, want_v, 3, 1e-6));
}

/* many elements: the vectorised, threaded path equals a scalar double loop */
static void adamw_large_matches_scalar_loop_1e_6(void **state) {
    (void)state;
    const size_t n = 100003;
    float *p = buf_rand(n), *g = buf_rand(n), *m = buf_rand(n), *v = buf_rand(n);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]) * 1e-3f, m[i] *= 1e-2f;
    double *wp = malloc(n * sizeof *wp);
    const double b1 = 0.9, b2 = 0.95, lr = 3e-4, eps = 1e-8, wd = 0.1, gs = 0.25;
    const int t = 7;
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * gs, mi = b1 * m[i] + (1 - b1) * gi;
        double vi = b2 * v[i] + (1 - b2) * gi * gi;
        double upd = (mi / (1 - pow(b1, t))) / (sqrt(vi / (1 - pow(b2, t))) + eps);
        wp[i] = p[i] - lr * (upd + wd * p[i]);
    }
    ops->adamw_update(p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
                      (float)gs, t);
    assert_true(close_rel("adamw large", p, wp, n, 1e-6));
    free(wp);
    ops->free(p), ops->free(g), ops->free(m), ops->free(v);
}

static void sumsq_matches_double_loop_1e_12(void **state) {
    (void)state;
    const size_t n = 1000003;
    float *x = buf_rand(n);
    double want = 0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    double got = ops->sumsq(x, n);
    if (!(fabs(got - want) <= 1e-12 * want)) {
        print_error("sumsq = %.17g, want %.17g\n", got, want);
        fail();
    }
    assert_true(ops->sumsq(x, 0) == 0.0);
    ops->free(x);
}

static void elementwise_add_scale_zero_and_copies_exact(void **state) {
    (void)state;
    const size_t n = 70001;
    float *a = buf_rand(n), *b = buf_rand(n), *out = buf_fill(n, NAN), *want = buf_fill(n, 0);
    for (size_t i = 0; i < n; i++) want[i] = a[i] + b[i];
    ops->add(out, a, b, n);
    assert_true(equal_exact("add", out, want, n));
    ops->add(a, a, b, n); /* out aliases a */
    assert_true(equal_exact("add in place", a, want, n));
    for (size_t i = 0; i < n; i++) want[i] = out[i] * 0.375f;
    ops->scale(out, 0.375f, n);
    assert_true(equal_exact("scale", out, want, n));
    ops->to_host(b, out, n * sizeof *out);
    assert_true(equal_exact("to_host", b, out, n));
    ops->to_device(a, b, n * sizeof *b);
    assert_true(equal_exact("to_device", a, b, n));
    ops->zero(out, n);
    for (size_t i = 0; i < n; i++) want[i] = 0.0f;
    assert_true(equal_exact("zero", out, want, n));
    assert_int_equal((uintptr_t)out % 64, 0);
    ops->free(a), ops->free(b), ops->free(out), ops->free(want);
}

/* ---------------------------------------------------------------- precision */

/* Float bit patterns: every 4093rd (all signs, exponents, NaN payloads) and the edges of the
 * two formats: ties, the overflow thresholds, the subnormal ranges, signalling NaNs. */
static float *rounding_inputs(size_t *n_out) {
    static const uint32_t edges[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu,
        0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
        0xffbfffffu, 0x7fc00000u, 0xffc00001u, 0x7fffffffu, 0x3f808000u, 0x3f818000u,
        0x3f801000u, 0x3f803000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u,
        0x47800000u, 0x38800000u, 0x387fffffu, 0x387ff000u, 0x33800000u, 0x33000000u,
        0x33000001u, 0x32ffffffu, 0x33c00000u, 0x34400000u, 0x80000001u, 0xb3000000u};
    const size_t n_edges = sizeof edges / sizeof edges[0], n_sweep = (1ull << 32) / 4093 + 1;
    float *x = ops->alloc((n_sweep + n_edges) * sizeof *x, MEM_WORKSPACE);
    size_t n = 0;
    for (uint64_t bits = 0; bits < (1ull << 32); bits += 4093) {
        const uint32_t u = (uint32_t)bits;
        memcpy(&x[n++], &u, sizeof u);
    }
    for (size_t i = 0; i < n_edges; i++) memcpy(&x[n++], &edges[i], sizeof edges[i]);
    *n_out = n;
    return x;
}

/* The ops table's quantize and quantize_copy give precision.h's round_bf16 / round_fp16 bit
 * for bit (NaN payloads included); fp32 leaves the values alone / copies them. */
static void quantize_matches_precision_h_rounding_exact(void **state) {
    (void)state;
    size_t n;
    float *x = rounding_inputs(&n);
    float *want = buf_fill(n, 0), *got = buf_fill(n, 0), *inplace = buf_fill(n, 0);
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        for (size_t i = 0; i < n; i++) want[i] = round_to((dtype_t)t, x[i]);
        ops->quantize_copy(got, x, n, (dtype_t)t);
        char what[48];
        snprintf(what, sizeof what, "quantize_copy %s", dtype_name((dtype_t)t));
        assert_true(equal_exact(what, got, want, n));
        memcpy(inplace, x, n * sizeof *x);
        ops->quantize(inplace, n, (dtype_t)t);
        snprintf(what, sizeof what, "quantize %s in place", dtype_name((dtype_t)t));
        assert_true(equal_exact(what, inplace, want, n));
        for (size_t len = 0; len < 40; len++) { /* short tensors, every tail length */
            memcpy(inplace, x + 1000, len * sizeof *x);
            ops->quantize(inplace, len, (dtype_t)t);
            assert_true(equal_exact("quantize short", inplace, want + 1000, len));
        }
    }
    ops->free(x), ops->free(want), ops->free(got), ops->free(inplace);
}

/* store_as keeps exactly quantize_copy's values in the type's own 16 bits (bf16: the upper half
 * of the fp32 pattern; fp16: IEEE binary16), load_as gives them back, over every rounding case;
 * fp32 is a plain copy. */
static void store_as_and_load_as_keep_quantize_values_exact(void **state) {
    (void)state;
    size_t n;
    float *x = rounding_inputs(&n);
    float *want = buf_fill(n, 0), *back = buf_fill(n, 0);
    uint16_t *bits = ops->alloc(n * sizeof(float), MEM_WORKSPACE);
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        ops->quantize_copy(want, x, n, (dtype_t)t);
        ops->store_as(bits, x, n, (dtype_t)t);
        ops->load_as(back, bits, n, (dtype_t)t);
        char what[48];
        snprintf(what, sizeof what, "store_as/load_as %s", dtype_name((dtype_t)t));
        assert_true(equal_exact(what, back, want, n));
        if (t == DT_BF16) /* the stored bits are bf16's: the value's upper 16 */
            for (size_t i = 0; i < n; i += 97)
                if (!isnan(want[i])) assert_int_equal(bits[i], bf16_bits(want[i]));
        if (t == DT_FP16)
            for (size_t i = 0; i < n; i += 97) {
                _Float16 h = (_Float16)want[i];
                uint16_t hb;
                memcpy(&hb, &h, sizeof hb);
                if (!isnan(want[i])) assert_int_equal(bits[i], hb);
            }
    }
    ops->free(x), ops->free(want), ops->free(back), ops->free(bits);
}

/* The products and the embedding with weights stored as bf16 / fp16 (matmul_forward_w,
 * matmul_backward_w, embed_forward_w) give the bits of the fp32 ops on the same values, with fp32
 * products (the stored weights widened) and, for bf16 where the GEMM library has them, native
 * bf16 products (the stored weights read as they are; the fp32 reference converts them). */
static void weights_stored_as_16bit_give_the_fp32_ops_bits_exact(void **state) {
    (void)state;
    const int N = 37, C = 48, OC = 70, B = 3, T = 7, V = 29;
    const size_t nw = (size_t)OC * C, nin = (size_t)N * C, nout = (size_t)N * OC;
    float *inp = buf_rand(nin), *dout = buf_rand(nout), *bias = buf_rand(OC), *w = buf_rand(nw);
    float *wr = buf_fill(nw, 0), *y_ref = buf_fill(nout, 0), *y = buf_fill(nout, 0);
    float *dx_ref = buf_rand(nin), *dx = buf_copy(dx_ref, nin);
    float *dw_ref = buf_fill(nw, 0), *dw = buf_fill(nw, 0), *db_ref = buf_fill(OC, 0), *db = buf_fill(OC, 0);
    uint16_t *ws = ops->alloc(nw * sizeof(float), MEM_WORKSPACE);
    int *tok = ops->alloc((size_t)B * T * sizeof(int), MEM_WORKSPACE);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % (V + 4) - 2; /* some outside the shard */
    for (int t = DT_BF16; t <= DT_FP16; t++)
        for (int native = 0; native < 2; native++) {
            const dtype_t dt = (dtype_t)t;
            if (native && !(dt == DT_BF16 && ops->products_native(DT_BF16))) continue;
            ops->set_product_type(native ? DT_BF16 : DT_FP32);
            /* the model rounds what it stores: inputs and the weights alike */
            ops->quantize(inp, nin, dt), ops->quantize(dout, nout, dt);
            ops->quantize_copy(wr, w, nw, dt);
            ops->store_as(ws, w, nw, dt);
            ops->matmul_forward(y_ref, inp, wr, bias, N, C, OC);
            ops->matmul_forward_w(y, inp, ws, dt, bias, N, C, OC);
            assert_true(equal_exact("matmul_forward_w", y, y_ref, nout));
            ops->matmul_backward(dx_ref, dw_ref, db_ref, dout, inp, wr, N, C, OC, true, true);
            ops->matmul_backward_w(dx, dw, db, dout, inp, ws, dt, N, C, OC, true, true);
            assert_true(equal_exact("matmul_backward_w dinp", dx, dx_ref, nin));
            assert_true(equal_exact("matmul_backward_w dw", dw, dw_ref, nw));
            /* embedding: wte [V, C] and wpe [T, C] are the first rows of the same weight */
            for (int pos = 0; pos < 2; pos++) {
                float *e_ref = buf_fill((size_t)B * T * C, 0), *e = buf_fill((size_t)B * T * C, 1);
                ops->embed_forward(e_ref, tok, wr, wr + (size_t)V * C, B, T, C, 0, V, pos);
                ops->embed_forward_w(e, tok, ws, ws + (size_t)V * C, dt, B, T, C, 0, V, pos);
                assert_true(equal_exact("embed_forward_w", e, e_ref, (size_t)B * T * C));
                ops->free(e_ref), ops->free(e);
            }
        }
    ops->set_product_type(DT_FP32);
    ops->free(inp), ops->free(dout), ops->free(bias), ops->free(w), ops->free(wr);
    ops->free(y_ref), ops->free(y), ops->free(dx_ref), ops->free(dx), ops->free(dw_ref);
    ops->free(dw), ops->free(db_ref), ops->free(db), ops->free(ws), ops->free(tok);
}

/* any_nonfinite finds one Inf or NaN wherever it is (first, middle, last element, in a short
 * tail) and nothing in finite data with the largest finite values and subnormals. */
static void any_nonfinite_finds_each_inf_and_nan_exact(void **state) {
    (void)state;
    const size_t n = 100003;
    float *x = buf_rand(n);
    x[5] = FLT_MAX, x[6] = -FLT_MAX, x[7] = 1e-45f, x[8] = -0.0f;
    assert_false(ops->any_nonfinite(x, n));
    assert_false(ops->any_nonfinite(x, 0));
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    const size_t where[4] = {0, n / 2 + 3, n - 1, 17};
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < 4; k++) {
            const float old = x[where[k]];
            x[where[k]] = bad[b];
            const size_t len = k == 3 ? 18 : n;
            if (!ops->any_nonfinite(x, len))
                fail_msg("any_nonfinite missed %g at [%zu] of %zu", (double)bad[b], where[k], len);
            x[where[k]] = old;
        }
    ops->free(x);
}

/* ---------------------------------------------------------------- threading */

/* The kernels' own reductions (dw/db of layernorm, dbias, dwte, softmax and xent sums) are split
 * by columns or rows, or summed from partials over row blocks that depend on the shape alone,
 * never by partial sums per thread: 1, 2 and 3 threads give the same bits.
 * Shapes are above the size where kernels go parallel. (sgemm results are the BLAS's business.) */
typedef struct {
    float ln_dx[64 * 300], ln_dw[300], ln_db[300], dbias[300], dwte[50 * 300], dwpe[16 * 300];
    float att_out[4 * 16 * 2 * 8], att_lse[4 * 2 * 16], att_dqkv[4 * 16 * 3 * 2 * 8];
    float att2_out[150 * 2 * 8], att2_lse[2 * 150], att2_dqkv[150 * 3 * 2 * 8];
    float att3_out[128 * 64], att3_lse[128], att3_dqkv[128 * 3 * 64];
    float xent_se[20], xent_d[20 * 1000];
    float gelu_dx[20000];
    float ln_odd_dx[300 * 64], ln_odd_dw[64], ln_odd_db[64], fused_res[64 * 300];
    float fused_out[64 * 300], fused_mean[64], fused_rstd[64];
} thread_outputs;

static void run_kernels(thread_outputs *o, int n_threads) {
    omp_set_num_threads(n_threads);
    rng_state = 0x1234567ull;
    const int N = 64, C = 300, B = 4, T = 16, NH = 2, hs = 8, XR = 20, XC = 1000;
    float *x = buf_rand((size_t)N * C), *dy = buf_rand((size_t)N * C), *w = buf_rand(C);
    float *b = buf_rand(C), *y = buf_fill((size_t)N * C, 0), mean[64], rstd[64];
    ops->layernorm_forward(y, mean, rstd, x, w, b, N, C);
    memset(o, 0, sizeof *o);
    ops->layernorm_backward(o->ln_dx, o->ln_dw, o->ln_db, dy, x, w, mean, rstd, N, C, false, true);
    float *dw = buf_fill((size_t)C * C, 0);
    ops->matmul_backward(NULL, dw, o->dbias, dy, x, y, N, C, C, false, true);
    int tokens[64];
    for (int i = 0; i < B * T; i++) tokens[i] = (i * 7) % 50;
    ops->embed_backward(o->dwte, o->dwpe, dy, tokens, B, T, C, 0, 50, true);
    /* attention: 8 (batch, head) pairs in one tile; then 2 pairs of two query blocks each,
     * which 3 threads split by key and query blocks (the two-pass backward) */
    float *qkv = buf_rand((size_t)B * T * 3 * NH * hs), *qkv2 = buf_rand((size_t)150 * 3 * NH * hs);
    const size_t sf = ops->attention_scratch_floats(1, 150, NH, hs);
    float *scratch = buf_fill(sf, NAN);
    assert_true(sf >= ops->attention_scratch_floats(B, T, NH, hs));
    ops->attention_forward(o->att_out, o->att_lse, scratch, sf, qkv, B, T, NH, hs);
    ops->attention_backward(o->att_dqkv, scratch, sf, o->att_out, qkv, o->att_out, o->att_lse, B,
                            T, NH, hs);
    ops->attention_forward(o->att2_out, o->att2_lse, scratch, sf, qkv2, 1, 150, NH, hs);
    ops->attention_backward(o->att2_dqkv, scratch, sf, o->att2_out, qkv2, o->att2_out,
                            o->att2_lse, 1, 150, NH, hs);
    /* and one pair in one tile (hs 64): one unit of work, whatever the thread count */
    float *qkv3 = buf_rand((size_t)128 * 3 * 64);
    const size_t sf3 = ops->attention_scratch_floats(1, 128, 1, 64);
    ops->attention_forward(o->att3_out, o->att3_lse, scratch, sf3, qkv3, 1, 128, 1, 64);
    ops->attention_backward(o->att3_dqkv, scratch, sf3, o->att3_out, qkv3, o->att3_out,
                            o->att3_lse, 1, 128, 1, 64);
    ops->free(qkv3);
    float *logits = buf_rand((size_t)XR * XC), mx[20];
    int targets[20];
    for (int i = 0; i < XR; i++) targets[i] = i * 37;
    ops->xent_row_max(mx, logits, XR, XC, XC - 3);
    ops->xent_row_sumexp(o->xent_se, logits, mx, XR, XC, XC - 3);
    ops->xent_backward_inplace(logits, mx, o->xent_se, targets, 0.05f, XR, XC, XC - 3, 0);
    memcpy(o->xent_d, logits, sizeof o->xent_d);
    float *g = buf_rand(20000);
    ops->gelu_backward(o->gelu_dx, g, g, 20000);
    /* layernorm backward over 300 rows (16 row blocks of 19 and 15) and the fused forward */
    float *x2 = buf_rand(300 * 64), *dy2 = buf_rand(300 * 64), mean2[300], rstd2[300];
    float *y2 = buf_fill(300 * 64, 0);
    ops->layernorm_forward(y2, mean2, rstd2, x2, w, b, 300, 64);
    ops->layernorm_backward(o->ln_odd_dx, o->ln_odd_dw, o->ln_odd_db, dy2, x2, w, mean2, rstd2,
                            300, 64, false, true);
    ops->residual_layernorm_forward(o->fused_res, o->fused_out, o->fused_mean, o->fused_rstd, x,
                                    dy, w, b, N, C, DT_BF16);
    ops->free(x2), ops->free(dy2), ops->free(y2);
    ops->free(x), ops->free(dy), ops->free(w), ops->free(b), ops->free(y), ops->free(dw);
    ops->free(qkv), ops->free(qkv2), ops->free(scratch), ops->free(logits), ops->free(g);
}

static void kernels_do_not_depend_on_thread_count_exact(void **state) {
    (void)state;
    const int saved = omp_get_max_threads();
    thread_outputs *one = malloc(sizeof *one), *more = malloc(sizeof *more);
    run_kernels(one, 1);
    for (int n_threads = 2; n_threads <= 3; n_threads++) {
        run_kernels(more, n_threads);
        const float *a = (const float *)one, *b = (const float *)more;
        assert_true(equal_exact("kernel outputs, 1 thread vs more", b, a,
                                sizeof *one / sizeof(float)));
    }
    omp_set_num_threads(saved);
    free(one), free(more);
}

int main(void) {
    ops = ops_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matmul_forward_matches_naive_loop_1e_5),
        cmocka_unit_test(matmul_backward_matches_finite_differences_1e_3),
        cmocka_unit_test(matmul_backward_flags_accumulate_and_overwrite_1e_6),
        cmocka_unit_test(matmul_backward_split_equals_unsplit_exact),
        cmocka_unit_test(layernorm_forward_matches_naive_double_1e_5),
        cmocka_unit_test(layernorm_backward_matches_finite_differences_2e_3),
        cmocka_unit_test(layernorm_backward_flags_accumulate_and_overwrite_1e_6),
        cmocka_unit_test(layernorm_odd_shapes_match_naive_double_1e_5),
        cmocka_unit_test(residual_layernorm_forward_equals_add_then_layernorm_exact),
        cmocka_unit_test(attention_forward_matches_naive_double_1e_5),
        cmocka_unit_test(attention_backward_matches_finite_differences_2e_3),
        cmocka_unit_test(attention_tiled_matches_txt_reference_kernel_2e_6_out_5e_6_dqkv),
        cmocka_unit_test(attention_causal_mask_future_token_does_not_change_past_exact),
        cmocka_unit_test(attention_scratch_for_one_thread_gives_same_bits_exact),
        cmocka_unit_test(gelu_forward_matches_tanh_formula_in_double_1e_6),
        cmocka_unit_test(gelu_backward_matches_finite_differences_1e_3),
        cmocka_unit_test(gelu_is_finite_where_exp_overflows_exact),
        cmocka_unit_test(cpu_expf_matches_libm_ieee_special_values_and_sweep_2_5e_7),
        cmocka_unit_test(embed_backward_matches_finite_differences_1e_4),
        cmocka_unit_test(embed_vocab_shards_sum_to_whole_vocab_exact),
        cmocka_unit_test(xent_loss_matches_naive_double_1e_6),
        cmocka_unit_test(xent_backward_matches_finite_differences_1e_3),
        cmocka_unit_test(xent_vocab_shards_combine_to_whole_vocab_1e_6),
        cmocka_unit_test(xent_empty_shard_gives_identities_exact),
        cmocka_unit_test(adamw_three_steps_match_hand_computed_1e_6),
        cmocka_unit_test(adamw_large_matches_scalar_loop_1e_6),
        cmocka_unit_test(sumsq_matches_double_loop_1e_12),
        cmocka_unit_test(elementwise_add_scale_zero_and_copies_exact),
        cmocka_unit_test(quantize_matches_precision_h_rounding_exact),
        cmocka_unit_test(store_as_and_load_as_keep_quantize_values_exact),
        cmocka_unit_test(weights_stored_as_16bit_give_the_fp32_ops_bits_exact),
        cmocka_unit_test(any_nonfinite_finds_each_inf_and_nan_exact),
        cmocka_unit_test(kernels_do_not_depend_on_thread_count_exact),
    };
    return cmocka_run_group_tests_name("ops_cpu", tests, NULL, NULL);
}
