/* test_ops_llama.c — unit tests of the Llama-family ops of the CPU backend (RMSNorm, RoPE,
 * SwiGLU, grouped-query attention), in test_ops.c's style. References: central finite
 * differences of each op's forward (objective L = sum(out * R) with a fixed random R, in
 * double), naive double-precision loops, the multi-head attention op (NKV = NH), and the
 * kernels' own results on another thread count. Each test's name states its tolerance; the
 * finite-difference tolerance is max|numeric - analytic| / max|numeric|. Needs no MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_RNG_SEED 0x243F6A8885A308D3ull
#include "test_numeric.h"

/* ---------------------------------------------------------------- helpers */

static float *buf_rand(size_t n, float scale) {
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    for (size_t i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}

/* ---------------------------------------------------------------- RMSNorm */

typedef struct {
    float *out, *rstd, *inp, *w, *r;
    int N, C;
    float eps;
} rms_ctx;

static double rms_objective(void *p) {
    rms_ctx *c = p;
    ops->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps);
    return dot_double(c->out, c->r, (size_t)c->N * c->C);
}

static void rms_ctx_init(rms_ctx *c, int N, int C) {
    c->N = N, c->C = C, c->eps = 1e-5f;
    const size_t n = (size_t)N * C;
    c->out = buf_fill(n, NAN), c->rstd = buf_fill(N, NAN);
    c->inp = buf_rand(n, 2.0f), c->w = buf_rand(C, 1.0f), c->r = buf_rand(n, 1.0f);
}

static void rms_ctx_free(rms_ctx *c) {
    ops->free(c->out), ops->free(c->rstd), ops->free(c->inp), ops->free(c->w), ops->free(c->r);
}

static void rmsnorm_forward_matches_naive_double_1e_6(void **state) {
    (void)state;
    rms_ctx c;
    rms_ctx_init(&c, 9, 70);
    rms_objective(&c);
    const size_t n = (size_t)c.N * c.C;
    double *want = malloc(n * sizeof *want), want_rstd[9];
    for (int i = 0; i < c.N; i++) {
        double ss = 0;
        for (int k = 0; k < c.C; k++) ss += (double)c.inp[i * c.C + k] * c.inp[i * c.C + k];
        const double r = 1.0 / sqrt(ss / c.C + 1e-5);
        for (int k = 0; k < c.C; k++) want[i * c.C + k] = c.inp[i * c.C + k] * r * c.w[k];
        want_rstd[i] = r;
    }
    assert_true(close_rel("rmsnorm out", c.out, want, n, 1e-6));
    assert_true(close_rel("rmsnorm rstd", c.rstd, want_rstd, c.N, 1e-6));
    free(want);
    rms_ctx_free(&c);
}

static void rmsnorm_backward_matches_finite_differences_2e_3(void **state) {
    (void)state;
    rms_ctx c;
    rms_ctx_init(&c, 7, 12);
    rms_objective(&c);
    const size_t n = (size_t)c.N * c.C;
    float *dinp = buf_fill(n, NAN), *dw = buf_fill(c.C, NAN);
    ops->rmsnorm_backward(dinp, dw, c.r, c.inp, c.w, c.rstd, c.N, c.C, false, true);
    assert_true(fd_check("rmsnorm dinp", rms_objective, &c, c.inp, n, dinp, 1e-2f, 2e-3));
    assert_true(fd_check("rmsnorm dw", rms_objective, &c, c.w, c.C, dw, 1e-2f, 2e-3));
    ops->free(dinp), ops->free(dw);
    rms_ctx_free(&c);
}

/* accumulate_dinp adds the same dinp to what is there; without overwrite_dw dw adds up */
static void rmsnorm_backward_flags_accumulate_and_overwrite_1e_6(void **state) {
    (void)state;
    rms_ctx c;
    rms_ctx_init(&c, 5, 150); /* C > two column chunks of the dw reduction */
    rms_objective(&c);
    const size_t n = (size_t)c.N * c.C;
    float *dinp = buf_fill(n, NAN), *dw = buf_fill(c.C, NAN);
    ops->rmsnorm_backward(dinp, dw, c.r, c.inp, c.w, c.rstd, c.N, c.C, false, true);
    float *dinp2 = buf_rand(n, 1.0f), *base = buf_copy(dinp2, n), *dw2 = buf_copy(dw, c.C);
    ops->rmsnorm_backward(dinp2, dw2, c.r, c.inp, c.w, c.rstd, c.N, c.C, true, false);
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = (double)base[i] + dinp[i];
    assert_true(close_rel("rmsnorm accumulated dinp", dinp2, want, n, 1e-6));
    for (int k = 0; k < c.C; k++) want[k] = 2.0 * dw[k];
    assert_true(close_rel("rmsnorm accumulated dw", dw2, want, c.C, 1e-6));
    free(want);
    ops->free(dinp), ops->free(dw), ops->free(dinp2), ops->free(base), ops->free(dw2);
    rms_ctx_free(&c);
}

/* ---------------------------------------------------------------- RoPE */

typedef struct {
    float *x0, *x, *cos, *sin, *r;
    int B, T, NH, hs;
} rope_ctx;

static size_t rope_n(const rope_ctx *c) { return (size_t)c->B * c->T * c->NH * c->hs; }

static double rope_objective(void *p) {
    rope_ctx *c = p;
    memcpy(c->x, c->x0, rope_n(c) * sizeof(float));
    ops->rope_forward(c->x, c->cos, c->sin, c->B, c->T, c->NH, c->hs);
    return dot_double(c->x, c->r, rope_n(c));
}

static void rope_ctx_init(rope_ctx *c, int B, int T, int NH, int hs, double theta) {
    c->B = B, c->T = T, c->NH = NH, c->hs = hs;
    const size_t n = rope_n(c), half = (size_t)hs / 2;
    c->x0 = buf_rand(n, 1.0f), c->x = buf_fill(n, NAN), c->r = buf_rand(n, 1.0f);
    c->cos = buf_fill((size_t)T * half, NAN), c->sin = buf_fill((size_t)T * half, NAN);
    for (int t = 0; t < T; t++)
        for (size_t i = 0; i < half; i++) {
            const double a = t * pow(theta, -2.0 * (double)i / hs);
            c->cos[t * half + i] = (float)cos(a), c->sin[t * half + i] = (float)sin(a);
        }
}

static void rope_ctx_free(rope_ctx *c) {
    ops->free(c->x0), ops->free(c->x), ops->free(c->r), ops->free(c->cos), ops->free(c->sin);
}

/* rotate-half as Hugging Face writes it: x * cos + rotate_half(x) * sin with cos, sin of the
 * doubled angle table cat(freqs, freqs) and rotate_half(x) = cat(-x2, x1) */
static void rotate_half_reference(double *out, const rope_ctx *c) {
    const int half = c->hs / 2;
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int h = 0; h < c->NH; h++)
            for (int d = 0; d < c->hs; d++) {
                const size_t row = ((size_t)bt * c->NH + h) * c->hs;
                const int i = d % half, t = bt % c->T;
                const double x = c->x0[row + d];
                const double rot = d < half ? -(double)c->x0[row + d + half] : c->x0[row + d - half];
                out[row + d] = x * c->cos[t * half + i] + rot * c->sin[t * half + i];
            }
}

static void rope_forward_matches_rotate_half_reference_1e_6(void **state) {
    (void)state;
    rope_ctx c;
    rope_ctx_init(&c, 2, 9, 3, 8, 10000.0);
    rope_objective(&c);
    double *want = malloc(rope_n(&c) * sizeof *want);
    rotate_half_reference(want, &c);
    assert_true(close_rel("rope forward", c.x, want, rope_n(&c), 1e-6));
    /* position 0 is the identity */
    assert_true(equal_exact("rope at t = 0", c.x, c.x0, (size_t)c.NH * c.hs));
    free(want);
    rope_ctx_free(&c);
}

static void rope_backward_matches_finite_differences_1e_3(void **state) {
    (void)state;
    rope_ctx c;
    rope_ctx_init(&c, 2, 5, 2, 6, 500.0);
    float *d = buf_copy(c.r, rope_n(&c));
    ops->rope_backward(d, c.cos, c.sin, c.B, c.T, c.NH, c.hs);
    assert_true(fd_check("rope dx", rope_objective, &c, c.x0, rope_n(&c), d, 1e-2f, 1e-3));
    /* backward undoes forward (a rotation's transpose is its inverse) */
    rope_objective(&c);
    ops->rope_backward(c.x, c.cos, c.sin, c.B, c.T, c.NH, c.hs);
    assert_true(close_rel_f("rope backward of forward", c.x, c.x0, rope_n(&c), 1e-6));
    ops->free(d);
    rope_ctx_free(&c);
}

/* ---------------------------------------------------------------- SwiGLU */

typedef struct {
    float *out, *gate, *up, *r;
    size_t n;
} swiglu_ctx;

static double swiglu_objective(void *p) {
    swiglu_ctx *c = p;
    ops->swiglu_forward(c->out, c->gate, c->up, c->n);
    return dot_double(c->out, c->r, c->n);
}

static void swiglu_ctx_init(swiglu_ctx *c, size_t n) {
    c->n = n;
    c->out = buf_fill(n, NAN), c->gate = buf_rand(n, 4.0f), c->up = buf_rand(n, 2.0f);
    c->r = buf_rand(n, 1.0f);
}

static void swiglu_ctx_free(swiglu_ctx *c) {
    ops->free(c->out), ops->free(c->gate), ops->free(c->up), ops->free(c->r);
}

static void swiglu_forward_matches_formula_in_double_1e_6(void **state) {
    (void)state;
    swiglu_ctx c;
    swiglu_ctx_init(&c, 40000); /* above CPU_PAR_MIN: the threaded path */
    c.gate[0] = -200.0f, c.gate[1] = 200.0f; /* exp overflow and its saturation */
    swiglu_objective(&c);
    double *want = malloc(c.n * sizeof *want);
    for (size_t i = 0; i < c.n; i++)
        want[i] = (double)c.gate[i] / (1.0 + exp(-(double)c.gate[i])) * c.up[i];
    assert_true(close_rel("swiglu out", c.out, want, c.n, 1e-6));
    assert_true(isfinite(c.out[0]) && c.out[0] == 0.0f);
    free(want);
    swiglu_ctx_free(&c);
}

static void swiglu_backward_matches_finite_differences_1e_3(void **state) {
    (void)state;
    swiglu_ctx c;
    swiglu_ctx_init(&c, 64);
    float *dgate = buf_fill(c.n, NAN), *dup = buf_fill(c.n, NAN);
    ops->swiglu_backward(dgate, dup, c.r, c.gate, c.up, c.n);
    assert_true(fd_check("swiglu dgate", swiglu_objective, &c, c.gate, c.n, dgate, 1e-2f, 1e-3));
    assert_true(fd_check("swiglu dup", swiglu_objective, &c, c.up, c.n, dup, 1e-2f, 1e-3));
    /* dgate may alias dout */
    float *d = buf_copy(c.r, c.n), *dup2 = buf_fill(c.n, NAN);
    ops->swiglu_backward(d, dup2, d, c.gate, c.up, c.n);
    assert_true(equal_exact("swiglu dgate in place", d, dgate, c.n));
    ops->free(dgate), ops->free(dup), ops->free(d), ops->free(dup2);
    swiglu_ctx_free(&c);
}

/* ---------------------------------------------------------------- grouped-query attention */

typedef struct {
    float *out, *lse, *q, *k, *v, *r, *scratch;
    size_t scratch_floats;
    int B, T, NH, NKV, hs;
} gqa_ctx;

static size_t q_n(const gqa_ctx *c) { return (size_t)c->B * c->T * c->NH * c->hs; }
static size_t kv_n(const gqa_ctx *c) { return (size_t)c->B * c->T * c->NKV * c->hs; }

static double gqa_objective(void *p) {
    gqa_ctx *c = p;
    ops->attention_gqa_forward(c->out, c->lse, c->scratch, c->scratch_floats, c->q, c->k, c->v,
                               c->B, c->T, c->NH, c->NKV, c->hs);
    return dot_double(c->out, c->r, q_n(c));
}

static void gqa_ctx_init(gqa_ctx *c, int B, int T, int NH, int NKV, int hs) {
    c->B = B, c->T = T, c->NH = NH, c->NKV = NKV, c->hs = hs;
    c->out = buf_fill(q_n(c), NAN), c->lse = buf_fill((size_t)B * NH * T, NAN);
    c->q = buf_rand(q_n(c), 2.0f), c->k = buf_rand(kv_n(c), 2.0f), c->v = buf_rand(kv_n(c), 1.0f);
    c->r = buf_rand(q_n(c), 1.0f);
    c->scratch_floats = ops->attention_scratch_floats(B, T, NH, hs);
    c->scratch = buf_fill(c->scratch_floats, NAN);
}

static void gqa_ctx_free(gqa_ctx *c) {
    ops->free(c->out), ops->free(c->lse), ops->free(c->q), ops->free(c->k), ops->free(c->v);
    ops->free(c->r), ops->free(c->scratch);
}

/* naive double: query head h attends with k/v head h / (NH / NKV) */
static void gqa_naive(double *out, const gqa_ctx *c) {
    const int T = c->T, hs = c->hs, g = c->NH / c->NKV;
    double *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = c->q + ((size_t)b * T + t) * c->NH * hs + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = c->k + ((size_t)b * T + j) * c->NKV * hs + (h / g) * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    p[j] = s / sqrt((double)hs);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
                for (int d = 0; d < hs; d++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++)
                        o += p[j] * c->v[((size_t)b * T + j) * c->NKV * hs + (h / g) * hs + d];
                    out[((size_t)b * T + t) * c->NH * hs + h * hs + d] = o / sum;
                }
            }
    free(p);
}

static void check_gqa_forward(int B, int T, int NH, int NKV, int hs, const char *what) {
    gqa_ctx c;
    gqa_ctx_init(&c, B, T, NH, NKV, hs);
    gqa_objective(&c);
    double *want = malloc(q_n(&c) * sizeof *want);
    gqa_naive(want, &c);
    assert_true(close_rel(what, c.out, want, q_n(&c), 1e-5));
    free(want);
    gqa_ctx_free(&c);
}

static void attention_gqa_forward_matches_naive_double_1e_5(void **state) {
    (void)state;
    check_gqa_forward(2, 7, 4, 2, 4, "gqa out NH=4 NKV=2 T=7");
    check_gqa_forward(1, 140, 6, 2, 4, "gqa out NH=6 NKV=2 T=140 (two tiles)");
    check_gqa_forward(2, 5, 4, 1, 8, "gqa out NH=4 NKV=1 (multi-query)");
}

static void check_gqa_backward(int B, int T, int NH, int NKV, int hs, const char *what) {
    gqa_ctx c;
    gqa_ctx_init(&c, B, T, NH, NKV, hs);
    gqa_objective(&c);
    float *dq = buf_fill(q_n(&c), NAN), *dk = buf_fill(kv_n(&c), NAN), *dv = buf_fill(kv_n(&c), NAN);
    ops->attention_gqa_backward(dq, dk, dv, c.scratch, c.scratch_floats, c.r, c.q, c.k, c.v,
                                c.out, c.lse, B, T, NH, NKV, hs);
    char w[128];
    snprintf(w, sizeof w, "%s: dq", what);
    assert_true(fd_check(w, gqa_objective, &c, c.q, q_n(&c), dq, 1e-2f, 2e-3));
    snprintf(w, sizeof w, "%s: dk", what);
    assert_true(fd_check(w, gqa_objective, &c, c.k, kv_n(&c), dk, 1e-2f, 2e-3));
    snprintf(w, sizeof w, "%s: dv", what);
    assert_true(fd_check(w, gqa_objective, &c, c.v, kv_n(&c), dv, 1e-2f, 2e-3));
    ops->free(dq), ops->free(dk), ops->free(dv);
    gqa_ctx_free(&c);
}

static void attention_gqa_backward_matches_finite_differences_2e_3(void **state) {
    (void)state;
    check_gqa_backward(2, 5, 4, 2, 4, "gqa NH=4 NKV=2 T=5");
    check_gqa_backward(1, 133, 2, 1, 3, "gqa NH=2 NKV=1 T=133 (2 x 2 tiles)");
}

/* NKV = NH on separate q, k, v is the fused multi-head op on [q | k | v] rows (to 1e-6: the
 * same products through other leading dimensions) */
static void attention_gqa_with_nkv_nh_equals_fused_attention_1e_6(void **state) {
    (void)state;
    const int B = 2, T = 130, NH = 3, hs = 8, C = NH * hs;
    gqa_ctx c;
    gqa_ctx_init(&c, B, T, NH, NH, hs);
    float *qkv = buf_fill((size_t)B * T * 3 * C, NAN), *dqkv = buf_fill((size_t)B * T * 3 * C, NAN);
    for (size_t row = 0; row < (size_t)B * T; row++) {
        memcpy(qkv + row * 3 * C, c.q + row * C, C * sizeof(float));
        memcpy(qkv + row * 3 * C + C, c.k + row * C, C * sizeof(float));
        memcpy(qkv + row * 3 * C + 2 * C, c.v + row * C, C * sizeof(float));
    }
    float *out = buf_fill(q_n(&c), NAN), *lse = buf_fill((size_t)B * NH * T, NAN);
    ops->attention_forward(out, lse, c.scratch, c.scratch_floats, qkv, B, T, NH, hs);
    ops->attention_backward(dqkv, c.scratch, c.scratch_floats, c.r, qkv, out, lse, B, T, NH, hs);
    gqa_objective(&c);
    float *dq = buf_fill(q_n(&c), NAN), *dk = buf_fill(q_n(&c), NAN), *dv = buf_fill(q_n(&c), NAN);
    ops->attention_gqa_backward(dq, dk, dv, c.scratch, c.scratch_floats, c.r, c.q, c.k, c.v,
                                c.out, c.lse, B, T, NH, NH, hs);
    assert_true(close_rel_f("gqa = fused: out", c.out, out, q_n(&c), 1e-6));
    for (size_t row = 0; row < (size_t)B * T; row++) {
        assert_true(close_rel_f("gqa = fused: dq", dq + row * C, dqkv + row * 3 * C, C, 1e-5));
        assert_true(close_rel_f("gqa = fused: dk", dk + row * C, dqkv + row * 3 * C + C, C, 1e-5));
        assert_true(close_rel_f("gqa = fused: dv", dv + row * C, dqkv + row * 3 * C + 2 * C, C, 1e-5));
    }
    ops->free(qkv), ops->free(dqkv), ops->free(out), ops->free(lse);
    ops->free(dq), ops->free(dk), ops->free(dv);
    gqa_ctx_free(&c);
}

/* ---------------------------------------------------------------- thread-count independence */

/* The new kernels on 1 and 3 threads: bitwise equal (B * NKV = 2 < 3 threads takes the
 * attention backward's two-pass form, 1 thread the one-pass form). */
static void run_llama_kernels(int n_threads, float **res) {
    omp_set_num_threads(n_threads);
    rng_state = 0x13198A2E03707344ull;
    gqa_ctx c;
    gqa_ctx_init(&c, 1, 300, 4, 2, 8);
    gqa_objective(&c);
    float *dq = buf_fill(q_n(&c), NAN), *dk = buf_fill(kv_n(&c), NAN), *dv = buf_fill(kv_n(&c), NAN);
    ops->attention_gqa_backward(dq, dk, dv, c.scratch, c.scratch_floats, c.r, c.q, c.k, c.v,
                                c.out, c.lse, c.B, c.T, c.NH, c.NKV, c.hs);
    rms_ctx r;
    rms_ctx_init(&r, 300, 100);
    rms_objective(&r);
    float *dinp = buf_fill((size_t)r.N * r.C, NAN), *dw = buf_fill(r.C, NAN);
    ops->rmsnorm_backward(dinp, dw, r.r, r.inp, r.w, r.rstd, r.N, r.C, false, true);
    res[0] = buf_copy(c.out, q_n(&c)), res[1] = dq, res[2] = dk, res[3] = dv;
    res[4] = buf_copy(r.out, (size_t)r.N * r.C), res[5] = dinp, res[6] = dw;
    gqa_ctx_free(&c);
    rms_ctx_free(&r);
}

static void llama_kernels_do_not_depend_on_thread_count_exact(void **state) {
    (void)state;
    const int saved = omp_get_max_threads();
    float *one[7], *three[7];
    run_llama_kernels(1, one);
    run_llama_kernels(3, three);
    const size_t n[7] = {300 * 32, 300 * 32, 300 * 16, 300 * 16, 300 * 100, 300 * 100, 100};
    const char *what[7] = {"gqa out", "gqa dq", "gqa dk", "gqa dv", "rmsnorm out",
                           "rmsnorm dinp", "rmsnorm dw"};
    for (int i = 0; i < 7; i++) {
        assert_true(equal_exact(what[i], three[i], one[i], n[i]));
        ops->free(one[i]), ops->free(three[i]);
    }
    omp_set_num_threads(saved);
}

int main(void) {
    ops = ops_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rmsnorm_forward_matches_naive_double_1e_6),
        cmocka_unit_test(rmsnorm_backward_matches_finite_differences_2e_3),
        cmocka_unit_test(rmsnorm_backward_flags_accumulate_and_overwrite_1e_6),
        cmocka_unit_test(rope_forward_matches_rotate_half_reference_1e_6),
        cmocka_unit_test(rope_backward_matches_finite_differences_1e_3),
        cmocka_unit_test(swiglu_forward_matches_formula_in_double_1e_6),
        cmocka_unit_test(swiglu_backward_matches_finite_differences_1e_3),
        cmocka_unit_test(attention_gqa_forward_matches_naive_double_1e_5),
        cmocka_unit_test(attention_gqa_backward_matches_finite_differences_2e_3),
        cmocka_unit_test(attention_gqa_with_nkv_nh_equals_fused_attention_1e_6),
        cmocka_unit_test(llama_kernels_do_not_depend_on_thread_count_exact),
    };
    return cmocka_run_group_tests_name("ops_cpu_llama", tests, NULL, NULL);
}
