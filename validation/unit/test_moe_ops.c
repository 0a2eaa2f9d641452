/* test_moe_ops.c — unit tests of the Mixture-of-Experts ops of the CPU backend (ops.h "Mixture of
 * Experts"), in test_ops_llama.c's style. References: central finite differences of a scalar
 * objective built from the forward — both in double from a softmax written here (step 1e-6,
 * tolerance 1e-5) and through the op's own float forward (test_numeric.h fd_check, step 1e-2,
 * tolerance 2e-3) —, a hand-made routing with ties, plain loops, and the kernels' own results
 * on another thread count. The finite-difference tolerance is max|numeric - analytic| /
 * max|numeric|. Needs no MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_RNG_SEED 0x452821E638D01377ull
#include "test_numeric.h"

static float *buf_rand(size_t n, float scale) {
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    for (size_t i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}

/* ---------------------------------------------------------------- router */

typedef struct {
    int N, E, k;
    float *logits, *probs, *lse, *gates, *dgates, *bias;
    int *idx;
    float dz;
} router_ctx;

/* Logits whose experts are at least 0.2 apart within a row (a shuffled ladder 0.3 apart plus
 * noise of +-0.05), so a finite-difference step of 1e-2 never changes the top-k. */
static void router_ctx_init(router_ctx *c, int N, int E, int k) {
    c->N = N, c->E = E, c->k = k, c->dz = 0.37f;
    c->logits = buf_fill((size_t)N * E, 0.0f);
    for (int i = 0; i < N; i++) {
        int *perm = malloc((size_t)E * sizeof *perm);
        for (int e = 0; e < E; e++) perm[e] = e;
        for (int e = E - 1; e > 0; e--) {
            const int s = (int)((frand() + 1.0f) * 0.5f * (float)(e + 1)) % (e + 1);
            const int t = perm[e];
            perm[e] = perm[s], perm[s] = t;
        }
        for (int e = 0; e < E; e++)
            c->logits[(size_t)i * E + e] = 0.3f * (float)perm[e] - 0.6f + 0.05f * frand();
        free(perm);
    }
    c->probs = buf_fill((size_t)N * E, NAN), c->lse = buf_fill(N, NAN);
    c->gates = buf_fill((size_t)N * k, NAN), c->dgates = buf_rand((size_t)N * k, 1.0f);
    c->bias = buf_rand(E, 0.5f);
    c->idx = malloc((size_t)N * k * sizeof *c->idx);
}

static void router_ctx_free(router_ctx *c) {
    ops->free(c->logits), ops->free(c->probs), ops->free(c->lse), ops->free(c->gates);
    ops->free(c->dgates), ops->free(c->bias), free(c->idx);
}

/* sum dg * gates + sum bias * probs + dz * sum lse^2, from the op's forward (float), in double */
static double router_objective(void *p) {
    router_ctx *c = p;
    ops->moe_softmax_topk(c->probs, c->lse, c->idx, c->gates, c->logits, c->N, c->E, c->k);
    double f = dot_double(c->dgates, c->gates, (size_t)c->N * c->k);
    for (int i = 0; i < c->N; i++) {
        f += dot_double(c->probs + (size_t)i * c->E, c->bias, c->E);
        f += (double)c->dz * (double)c->lse[i] * (double)c->lse[i];
    }
    return f;
}

/* The same objective in double from logits z[N, E], with the top-k of the op's idx (fixed:
 * the logits are far apart), written from the definitions of ops.h. */
static double router_objective_double(const router_ctx *c, const double *z) {
    double f = 0.0, p[16];
    for (int i = 0; i < c->N; i++) {
        const double *zi = z + (size_t)i * c->E;
        double m = zi[0], s = 0.0;
        for (int e = 1; e < c->E; e++) m = fmax(m, zi[e]);
        for (int e = 0; e < c->E; e++) s += exp(zi[e] - m);
        for (int e = 0; e < c->E; e++) p[e] = exp(zi[e] - m) / s;
        const double lse = m + log(s);
        const int *ix = c->idx + (size_t)i * c->k;
        double S = 0.0;
        for (int j = 0; j < c->k; j++) S += p[ix[j]];
        for (int j = 0; j < c->k; j++)
            f += c->dgates[(size_t)i * c->k + j] * (c->k > 1 ? p[ix[j]] / S : p[ix[j]]);
        for (int e = 0; e < c->E; e++) f += c->bias[e] * p[e];
        f += c->dz * lse * lse;
    }
    return f;
}

static void check_router_backward(int N, int E, int k) {
    router_ctx c;
    router_ctx_init(&c, N, E, k);
    const size_t n = (size_t)N * E;
    router_objective(&c);
    float *dlogits = buf_fill(n, NAN);
    ops->moe_router_backward(dlogits, c.probs, c.lse, c.idx, c.gates, c.dgates, c.bias, c.dz, N,
                             E, k);
    double *z = malloc(n * sizeof *z), *numeric = malloc(n * sizeof *numeric);
    for (size_t a = 0; a < n; a++) z[a] = c.logits[a];
    const double h = 1e-6;
    for (size_t a = 0; a < n; a++) {
        const double old = z[a];
        z[a] = old + h;
        const double hi = router_objective_double(&c, z);
        z[a] = old - h;
        const double lo = router_objective_double(&c, z);
        z[a] = old;
        numeric[a] = (hi - lo) / (2 * h);
    }
    char what[64];
    snprintf(what, sizeof what, "router dlogits (double fd) E=%d k=%d", E, k);
    assert_true(close_rel(what, dlogits, numeric, n, 1e-5));
    snprintf(what, sizeof what, "router dlogits (op fd) E=%d k=%d", E, k);
    assert_true(fd_check(what, router_objective, &c, c.logits, n, dlogits, 1e-2f, 2e-3));
    /* without the aux term: dprob_bias NULL is the same as zeros */
    float *no_bias = buf_fill(n, NAN), *zeros = buf_fill(n, NAN);
    float *zero_bias = buf_fill(E, 0.0f);
    ops->moe_router_backward(no_bias, c.probs, c.lse, c.idx, c.gates, c.dgates, NULL, c.dz, N, E,
                             k);
    ops->moe_router_backward(zeros, c.probs, c.lse, c.idx, c.gates, c.dgates, zero_bias, c.dz, N,
                             E, k);
    assert_true(equal_exact("router dprob_bias NULL = zeros", no_bias, zeros, n));
    free(z), free(numeric);
    ops->free(dlogits), ops->free(no_bias), ops->free(zeros), ops->free(zero_bias);
    router_ctx_free(&c);
}

static void router_backward_matches_finite_differences_k1_1e_5_and_2e_3(void **state) {
    (void)state;
    check_router_backward(7, 5, 1);
}

static void router_backward_matches_finite_differences_k2_1e_5_and_2e_3(void **state) {
    (void)state;
    check_router_backward(7, 5, 2);
}

static void router_backward_matches_finite_differences_k3_1e_5_and_2e_3(void **state) {
    (void)state;
    check_router_backward(7, 5, 3);
}

/* Hand-made rows: ties go to the lower expert; probs = softmax in double (1e-6); gates exact. */
static void softmax_topk_hand_made_ties_lower_index_first_exact(void **state) {
    (void)state;
    enum { N = 3, E = 4 };
    const float logits[N * E] = {1, 3, 3, 0, /* tie 1, 2 */ 2, 0, 1, 2, /* tie 0, 3 */
                                 0.5f, -1, 2, 0.5f /* 2, then tie 0, 3 */};
    double want_p[N * E], want_lse[N];
    for (int i = 0; i < N; i++) {
        double s = 0.0;
        for (int e = 0; e < E; e++) s += exp(logits[i * E + e]);
        for (int e = 0; e < E; e++) want_p[i * E + e] = exp(logits[i * E + e]) / s;
        want_lse[i] = log(s);
    }
    float probs[N * E], lse[N], gates[N * 3];
    int idx[N * 3];
    /* k = 2 */
    ops->moe_softmax_topk(probs, lse, idx, gates, logits, N, E, 2);
    assert_true(close_rel("softmax probs", probs, want_p, N * E, 1e-6));
    assert_true(close_rel("softmax lse", lse, want_lse, N, 1e-6));
    const int want_idx2[N * 2] = {1, 2, 0, 3, 2, 0};
    assert_memory_equal(idx, want_idx2, sizeof want_idx2);
    for (int i = 0; i < 2; i++) { /* equal probabilities: renormalised to exactly 1/2 each */
        assert_true(gates[2 * i] == 0.5f && gates[2 * i + 1] == 0.5f);
    }
    const double g20 = want_p[2 * E + 2] / (want_p[2 * E + 2] + want_p[2 * E + 0]);
    const double want_g2[2] = {g20, 1.0 - g20};
    assert_true(close_rel("gates renormalised", gates + 4, want_g2, 2, 1e-6));
    /* k = 3 */
    ops->moe_softmax_topk(probs, lse, idx, gates, logits, N, E, 3);
    const int want_idx3[N * 3] = {1, 2, 0, 0, 3, 2, 2, 0, 3};
    assert_memory_equal(idx, want_idx3, sizeof want_idx3);
    for (int i = 0; i < N; i++) {
        double s = 0.0, want_g[3];
        for (int j = 0; j < 3; j++) s += want_p[i * E + want_idx3[i * 3 + j]];
        for (int j = 0; j < 3; j++) want_g[j] = want_p[i * E + want_idx3[i * 3 + j]] / s;
        assert_true(close_rel("gates k=3", gates + 3 * i, want_g, 3, 1e-6));
    }
    /* k = 1: the probability itself, bit for bit */
    ops->moe_softmax_topk(probs, lse, idx, gates, logits, N, E, 1);
    const int want_idx1[N] = {1, 0, 2};
    assert_memory_equal(idx, want_idx1, sizeof want_idx1);
    for (int i = 0; i < N; i++) assert_true(gates[i] == probs[i * E + want_idx1[i]]);
}

/* ---------------------------------------------------------------- noise */

typedef struct {
    int N, E;
    float *base, *logits, *noise, *r, scale;
    uint32_t key[2];
    uint64_t row0;
} noise_ctx;

static double noise_objective(void *p) {
    noise_ctx *c = p;
    const size_t n = (size_t)c->N * c->E;
    memcpy(c->logits, c->base, n * sizeof *c->logits);
    ops->moe_noise_forward(c->logits, c->noise, c->N, c->E, c->scale, c->key, c->row0);
    return dot_double(c->logits, c->r, n);
}

static void noise_ctx_init(noise_ctx *c, int N, int E) {
    const size_t n = (size_t)N * E;
    c->N = N, c->E = E, c->scale = 0.7f, c->key[0] = 0x1234567u, c->key[1] = 0x89abcdefu;
    c->row0 = 1000;
    c->base = buf_rand(n, 1.0f), c->logits = buf_fill(n, NAN), c->noise = buf_rand(n, 3.0f);
    c->r = buf_rand(n, 1.0f);
}

static void noise_ctx_free(noise_ctx *c) {
    ops->free(c->base), ops->free(c->logits), ops->free(c->noise), ops->free(c->r);
}

/* logits += scale * eps * softplus(noise) against the formula in double with rng_normal's
 * numbers (1e-6), including softplus of +-30 (no overflow); a split at row 3 with row0 + 3
 * gives the same numbers as the whole (exact). */
static void noise_forward_matches_formula_1e_6_and_splits_exact(void **state) {
    (void)state;
    noise_ctx c;
    noise_ctx_init(&c, 6, 5);
    c.noise[0] = 30.0f, c.noise[1] = -30.0f;
    const size_t n = (size_t)c.N * c.E;
    noise_objective(&c);
    double *want = malloc(n * sizeof *want);
    const philox_key_t key = {{c.key[0], c.key[1]}};
    for (int i = 0; i < c.N; i++)
        for (int e = 0; e < c.E; e++) {
            const size_t a = (size_t)i * c.E + e;
            const double eps = rng_normal(key, (c.row0 + (uint64_t)i) * c.E + (uint64_t)e);
            want[a] = c.base[a] + c.scale * eps * log1p(exp((double)c.noise[a]));
        }
    assert_true(close_rel("noise forward", c.logits, want, n, 1e-6));
    float *split = buf_copy(c.base, n);
    ops->moe_noise_forward(split, c.noise, 3, c.E, c.scale, c.key, c.row0);
    ops->moe_noise_forward(split + 3 * c.E, c.noise + 3 * c.E, 3, c.E, c.scale, c.key,
                           c.row0 + 3);
    assert_true(equal_exact("noise split at row 3", split, c.logits, n));
    free(want);
    ops->free(split);
    noise_ctx_free(&c);
}

static void noise_backward_matches_finite_differences_1e_3(void **state) {
    (void)state;
    noise_ctx c;
    noise_ctx_init(&c, 6, 5);
    const size_t n = (size_t)c.N * c.E;
    float *dnoise = buf_fill(n, NAN);
    ops->moe_noise_backward(dnoise, c.r, c.noise, c.N, c.E, c.scale, c.key, c.row0);
    assert_true(fd_check("noise dnoise", noise_objective, &c, c.noise, n, dnoise, 1e-2f, 1e-3));
    ops->free(dnoise);
    noise_ctx_free(&c);
}

/* ---------------------------------------------------------------- dispatch and combine */

enum { ROWS_M = 120, ROWS_C = 300, ROWS_N = 50 }; /* M * C > CPU_PAR_MIN: threads really split */

typedef struct {
    float *x, *in, *w, *y0, *dy;
    int rows[ROWS_M];
} rows_ctx;

/* rows[] hits every token row at least twice and some many times, in no order. */
static void rows_ctx_init(rows_ctx *c) {
    c->x = buf_rand((size_t)ROWS_N * ROWS_C, 1.0f), c->in = buf_rand((size_t)ROWS_M * ROWS_C, 1.0f);
    c->w = buf_rand(ROWS_M, 1.0f), c->y0 = buf_rand((size_t)ROWS_N * ROWS_C, 1.0f);
    c->dy = buf_rand((size_t)ROWS_N * ROWS_C, 1.0f);
    for (int r = 0; r < ROWS_M; r++) c->rows[r] = r < 2 * ROWS_N ? (r * 7) % ROWS_N : 3;
}

static void rows_ctx_free(rows_ctx *c) {
    ops->free(c->x), ops->free(c->in), ops->free(c->w), ops->free(c->y0), ops->free(c->dy);
}

static void gather_rows_copies_rows_exact(void **state) {
    (void)state;
    rows_ctx c;
    rows_ctx_init(&c);
    float *out = buf_fill((size_t)ROWS_M * ROWS_C, NAN);
    ops->moe_gather_rows(out, c.x, c.rows, ROWS_M, ROWS_C);
    for (int r = 0; r < ROWS_M; r++)
        assert_true(equal_exact("gather row", out + (size_t)r * ROWS_C,
                                c.x + (size_t)c.rows[r] * ROWS_C, ROWS_C));
    ops->free(out);
    rows_ctx_free(&c);
}

/* y[rows[r]] += w[r] in[r] (repeated rows) against the plain loop in order (exact: the same
 * float operations in the same order), with w and with w NULL */
static void scatter_add_rows_matches_plain_loop_in_order_exact(void **state) {
    (void)state;
    rows_ctx c;
    rows_ctx_init(&c);
    const size_t n = (size_t)ROWS_N * ROWS_C;
    for (int weighted = 0; weighted < 2; weighted++) {
        const float *w = weighted ? c.w : NULL;
        float *y = buf_copy(c.y0, n), *want = buf_copy(c.y0, n);
        for (int r = 0; r < ROWS_M; r++) {
            const float wr = w ? w[r] : 1.0f;
            for (int col = 0; col < ROWS_C; col++) {
                const float prod = wr * c.in[(size_t)r * ROWS_C + col];
                want[(size_t)c.rows[r] * ROWS_C + col] += prod;
            }
        }
        ops->moe_scatter_add_rows(y, c.in, c.rows, w, ROWS_M, ROWS_C);
        assert_true(equal_exact(weighted ? "scatter w" : "scatter w NULL", y, want, n));
        ops->free(y), ops->free(want);
    }
    rows_ctx_free(&c);
}

/* din = w[r] dy[rows[r]] (exact), dw = dot(dy[rows[r]], in[r]) against a double dot (1e-6);
 * dw NULL leaves din the same; w NULL: din = dy[rows[r]] */
static void combine_backward_matches_plain_loop_1e_6(void **state) {
    (void)state;
    rows_ctx c;
    rows_ctx_init(&c);
    const size_t n = (size_t)ROWS_M * ROWS_C;
    float *din = buf_fill(n, NAN), *dw = buf_fill(ROWS_M, NAN), *want_din = buf_fill(n, NAN);
    double want_dw[ROWS_M];
    for (int r = 0; r < ROWS_M; r++) {
        const float *g = c.dy + (size_t)c.rows[r] * ROWS_C;
        for (int col = 0; col < ROWS_C; col++) want_din[(size_t)r * ROWS_C + col] = c.w[r] * g[col];
        want_dw[r] = dot_double(g, c.in + (size_t)r * ROWS_C, ROWS_C);
    }
    ops->moe_combine_backward(din, dw, c.dy, c.in, c.rows, c.w, ROWS_M, ROWS_C);
    assert_true(equal_exact("combine din", din, want_din, n));
    assert_true(close_rel("combine dw", dw, want_dw, ROWS_M, 1e-6));
    float *din2 = buf_fill(n, NAN);
    ops->moe_combine_backward(din2, NULL, c.dy, c.in, c.rows, c.w, ROWS_M, ROWS_C);
    assert_true(equal_exact("combine din, dw NULL", din2, want_din, n));
    ops->moe_combine_backward(din2, NULL, c.dy, c.in, c.rows, NULL, ROWS_M, ROWS_C);
    ops->moe_gather_rows(want_din, c.dy, c.rows, ROWS_M, ROWS_C);
    assert_true(equal_exact("combine din, w NULL", din2, want_din, n));
    ops->free(din), ops->free(dw), ops->free(want_din), ops->free(din2);
    rows_ctx_free(&c);
}

/* ---------------------------------------------------------------- thread count */

/* The scatter-add and the router ops on a shape large enough to split (1 vs 3 threads). */
static void run_moe_kernels(int n_threads, float *res[4]) {
    omp_set_num_threads(n_threads);
    rng_state = 0xA4093822299F31D0ull;
    rows_ctx c;
    rows_ctx_init(&c);
    res[0] = buf_copy(c.y0, (size_t)ROWS_N * ROWS_C);
    ops->moe_scatter_add_rows(res[0], c.in, c.rows, c.w, ROWS_M, ROWS_C);
    router_ctx r;
    router_ctx_init(&r, 2000, 8, 2);
    router_objective(&r);
    res[1] = buf_copy(r.probs, (size_t)r.N * r.E), res[2] = buf_copy(r.gates, (size_t)r.N * r.k);
    res[3] = buf_fill((size_t)r.N * r.E, NAN);
    ops->moe_router_backward(res[3], r.probs, r.lse, r.idx, r.gates, r.dgates, r.bias, r.dz, r.N,
                             r.E, r.k);
    router_ctx_free(&r);
    rows_ctx_free(&c);
}

static void moe_kernels_do_not_depend_on_thread_count_exact(void **state) {
    (void)state;
    const int saved = omp_get_max_threads();
    float *one[4], *three[4];
    run_moe_kernels(1, one);
    run_moe_kernels(3, three);
    const size_t n[4] = {ROWS_N * ROWS_C, 2000 * 8, 2000 * 2, 2000 * 8};
    const char *what[4] = {"scatter y", "router probs", "router gates", "router dlogits"};
    for (int i = 0; i < 4; i++) {
        assert_true(equal_exact(what[i], three[i], one[i], n[i]));
        ops->free(one[i]), ops->free(three[i]);
    }
    omp_set_num_threads(saved);
}

int main(void) {
    ops = ops_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(router_backward_matches_finite_differences_k1_1e_5_and_2e_3),
        cmocka_unit_test(router_backward_matches_finite_differences_k2_1e_5_and_2e_3),
        cmocka_unit_test(router_backward_matches_finite_differences_k3_1e_5_and_2e_3),
        cmocka_unit_test(softmax_topk_hand_made_ties_lower_index_first_exact),
        cmocka_unit_test(noise_forward_matches_formula_1e_6_and_splits_exact),
        cmocka_unit_test(noise_backward_matches_finite_differences_1e_3),
        cmocka_unit_test(gather_rows_copies_rows_exact),
        cmocka_unit_test(scatter_add_rows_matches_plain_loop_in_order_exact),
        cmocka_unit_test(combine_backward_matches_plain_loop_1e_6),
        cmocka_unit_test(moe_kernels_do_not_depend_on_thread_count_exact),
    };
    return cmocka_run_group_tests_name("ops_cpu_moe", tests, NULL, NULL);
}
