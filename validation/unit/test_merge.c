/* test_merge.c — llmmerge's merge methods (tools/merge_methods.h) on hand-made and random
 * tensors. References: closed forms computed here in double (slerp, linear, task arithmetic),
 * hand-worked cases (TIES trim and sign election), and invariants (DARE: the same mask for the
 * same seed, another for another seed, the kept fraction within 5 sigma of density, the L1
 * norm kept exactly by the 'l1' rescale). Tolerances are in the test names; a failing check
 * prints the numbers that differ. The e2e test merge_matches_mergekit compares whole models
 * with mergekit's own kernels. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "core/rng.h"
#include "tools/merge_methods.h"

#define N 1000

static void fill_normal(float *x, size_t n, uint64_t seed) {
    philox_key_t k = rng_key(seed, 7);
    for (size_t j = 0; j < n; j++) x[j] = rng_normal(k, j);
}

static void expect_close(const char *what, const float *got, const double *want, size_t n, double tol) {
    double worst = 0;
    size_t at = 0;
    for (size_t j = 0; j < n; j++) {
        double e = fabs(got[j] - want[j]) / fmax(1.0, fabs(want[j]));
        if (e > worst) worst = e, at = j;
    }
    if (worst > tol)
        print_error("%s: element %zu got %.9g want %.9g (error %.3g > %.3g)\n", what, at, got[at], want[at], worst, tol);
    assert_true(worst <= tol);
}

/* ---- slerp ------------------------------------------------------------------------------------ */

static void slerp_matches_closed_form_in_double_1e6(void **state) {
    (void)state;
    static float a[N], b[N], out[N];
    static double want[N];
    fill_normal(a, N, 1);
    fill_normal(b, N, 2);
    for (int i = 0; i < 3; i++) {
        double t = (double[]){0.0, 0.3, 1.0}[i];
        double aa = 0, bb = 0, ab = 0;
        for (int j = 0; j < N; j++) aa += (double)a[j] * a[j], bb += (double)b[j] * b[j], ab += (double)a[j] * b[j];
        double th = acos(ab / sqrt(aa * bb));
        for (int j = 0; j < N; j++) want[j] = sin((1 - t) * th) / sin(th) * a[j] + sin(t * th) / sin(th) * b[j];
        double dot;
        int lerp = merge_slerp(out, a, b, t, N, &dot);
        assert_int_equal(lerp, 0);
        expect_close("slerp", out, want, N, 1e-6);
    }
}

/* |dot| > 0.9995 (parallel or antiparallel): the lerp of the unnormalised originals. */
static void slerp_parallel_vectors_fall_back_to_lerp_1e6(void **state) {
    (void)state;
    static float a[N], b[N], out[N];
    static double want[N];
    fill_normal(a, N, 3);
    for (int sign = -1; sign <= 1; sign += 2) {
        for (int j = 0; j < N; j++) b[j] = (float)sign * 3.0f * a[j];
        double dot;
        int lerp = merge_slerp(out, a, b, 0.25, N, &dot);
        if (!lerp) print_error("dot %.9f: expected the lerp fallback\n", dot);
        assert_int_equal(lerp, 1);
        for (int j = 0; j < N; j++) want[j] = 0.75 * a[j] + 0.25 * b[j];
        expect_close("lerp fallback", out, want, N, 1e-6);
    }
    /* nearly parallel (dot just above the threshold) still falls back; below it does not */
    for (int j = 0; j < N; j++) b[j] = a[j];
    b[0] += 0.02f * sqrtf((float)N); /* a small tilt */
    double dot;
    int lerp = merge_slerp(out, a, b, 0.5, N, &dot);
    assert_int_equal(lerp, fabs(dot) > 0.9995);
    /* a zero vector: its norm counts as 1, dot = 0, no NaN */
    memset(b, 0, sizeof b);
    merge_slerp(out, a, b, 0.5, N, &dot);
    for (int j = 0; j < N; j++) assert_false(isnan(out[j]));
}

/* ---- TIES ---------------------------------------------------------------------------------------- */

static void ties_trim_keeps_top_k_by_magnitude_ties_in_index_order(void **state) {
    (void)state;
    float d[8] = {0.5f, -3.0f, 1.0f, -1.0f, 2.0f, 0.0f, 1.0f, -0.25f}, s[8];
    size_t k = merge_trim(d, 8, 0.5, s); /* k = 4: |-3|, |2|, then two of the three 1s */
    assert_int_equal(k, 4);
    const float want[8] = {0, -3.0f, 1.0f, -1.0f, 2.0f, 0, 0, 0};
    for (int j = 0; j < 8; j++) {
        if (d[j] != want[j]) print_error("element %d: %g, want %g\n", j, d[j], want[j]);
        assert_true(d[j] == want[j]);
    }
    float e[5] = {1, 2, 3, 4, 5};
    assert_int_equal(merge_trim(e, 5, 0.01, s), 1); /* at least one kept */
    assert_true(e[4] == 5 && e[0] == 0 && e[3] == 0);
    float f[3] = {1, -2, 3};
    assert_int_equal(merge_trim(f, 3, 1.0, s), 3); /* density 1: untouched */
    assert_true(f[0] == 1 && f[1] == -2 && f[2] == 3);
}

/* Three task vectors on a base of 0, weights 1, 1, 2, density 1: the elected sign is that of
 * Σ wᵢδᵢ (0 counts as +), the mean runs over the agreeing entries only, weighted. */
static void ties_sign_election_hand_made_case_exact(void **state) {
    (void)state;
    enum { M = 5 };
    const float delta[3][M] = {{2, -1, 0.5f, -3, 0}, {-1, -1, 1, 2, 0}, {1, 1, -0.25f, 0.5f, 0}};
    const float w[3] = {1, 1, 2};
    /* Σ wδ = {3, 0, 1, 0, 0}: signs +, + (0), +, + (0), +
     * agreeing: e0 {2, 1·… } -> entries 2 (w1), 2 (w2·1) -> (2 + 2) / (1 + 2) = 4/3
     *           e1 only 2·1 = 2 (w 2) -> 1;  e2 0.5, 1 (w 1, 1) -> 0.75;
     *           e3 2 (w 1), 1 (2·0.5, w 2) -> 3 / 3 = 1;  e4 nothing agrees -> 0 / 1 = 0 */
    const float want[M] = {4.0f / 3.0f, 1.0f, 0.75f, 1.0f, 0.0f};
    float sum[M] = {0}, mixed[M] = {0}, div[M] = {0}, base[M] = {0}, out[M];
    for (int i = 0; i < 3; i++) merge_axpy(sum, delta[i], w[i], M);
    for (int i = 0; i < 3; i++) merge_elect_add(mixed, div, delta[i], w[i], sum, M);
    merge_finish(out, base, mixed, div, 4.0, true, 1.0, M);
    for (int j = 0; j < M; j++) {
        if (fabsf(out[j] - want[j]) > 1e-7f) print_error("entry %d: %.8g, want %.8g\n", j, out[j], want[j]);
        assert_true(fabsf(out[j] - want[j]) <= 1e-7f);
    }
    /* a negative elected sign: Σ wδ < 0 keeps only the negative entries */
    const float d2[2][1] = {{-3}, {1}};
    float s2[1] = {0}, m2[1] = {0}, v2[1] = {0}, b2[1] = {10}, o2[1];
    for (int i = 0; i < 2; i++) merge_axpy(s2, d2[i], 1, 1);
    for (int i = 0; i < 2; i++) merge_elect_add(m2, v2, d2[i], 1, s2, 1);
    merge_finish(o2, b2, m2, v2, 2.0, true, 1.0, 1);
    assert_true(o2[0] == 7.0f);
}

/* ---- DARE ------------------------------------------------------------------------------------------ */

static void dare_fixed_seed_reproducible_other_seed_differs(void **state) {
    (void)state;
    static float x[N], y[N], z[N], orig[N];
    fill_normal(orig, N, 4);
    memcpy(x, orig, sizeof x), memcpy(y, orig, sizeof y), memcpy(z, orig, sizeof z);
    merge_dare(x, N, 0.3, merge_dare_key(42, "h.0.mlp.fc.w"), 1, MERGE_RESCALE_L1);
    merge_dare(y, N, 0.3, merge_dare_key(42, "h.0.mlp.fc.w"), 1, MERGE_RESCALE_L1);
    merge_dare(z, N, 0.3, merge_dare_key(43, "h.0.mlp.fc.w"), 1, MERGE_RESCALE_L1);
    assert_memory_equal(x, y, sizeof x);
    assert_memory_not_equal(x, z, sizeof x);
    /* another tensor name or input index: another mask */
    memcpy(y, orig, sizeof y);
    merge_dare(y, N, 0.3, merge_dare_key(42, "h.0.mlp.fc.w"), 2, MERGE_RESCALE_L1);
    assert_memory_not_equal(x, y, sizeof x);
}

static void dare_keeps_density_within_5_sigma_and_rescales_l1_1e6(void **state) {
    (void)state;
    enum { BIG = 100000 };
    static float x[BIG], orig[BIG];
    fill_normal(orig, BIG, 5);
    const double p = 0.3;
    memcpy(x, orig, sizeof x);
    double scale = merge_dare(x, BIG, p, merge_dare_key(7, "wte"), 0, MERGE_RESCALE_L1);
    double kept = 0, l1_before = 0, l1_after = 0;
    for (int j = 0; j < BIG; j++) kept += x[j] != 0, l1_before += fabs(orig[j]), l1_after += fabs(x[j]);
    double sigma = sqrt(BIG * p * (1 - p));
    if (fabs(kept - BIG * p) > 5 * sigma) print_error("kept %.0f of %d (p %.2f, sigma %.1f)\n", kept, BIG, p, sigma);
    assert_true(fabs(kept - BIG * p) <= 5 * sigma);
    if (fabs(l1_after / l1_before - 1) > 1e-6) print_error("L1 %.9g -> %.9g\n", l1_before, l1_after);
    assert_true(fabs(l1_after / l1_before - 1) <= 1e-6);
    assert_true(scale > 1);
    /* the classic rule: kept entries / density, dropped entries 0, the same mask */
    static float y[BIG];
    memcpy(y, orig, sizeof y);
    assert_true(merge_dare(y, BIG, p, merge_dare_key(7, "wte"), 0, MERGE_RESCALE_INV_DENSITY) == 1 / p);
    for (int j = 0; j < BIG; j++) {
        assert_true((x[j] == 0) == (y[j] == 0));
        if (y[j] != 0) assert_true(y[j] == orig[j] * (float)(1 / p));
    }
    /* density 1: nothing dropped, nothing rescaled */
    memcpy(y, orig, sizeof y);
    assert_true(merge_dare(y, BIG, 1.0, merge_dare_key(7, "wte"), 0, MERGE_RESCALE_L1) == 1);
    assert_memory_equal(y, orig, sizeof y);
}

/* The mask is word j % 4 of one Philox block per four entries (what merge_reference.py
 * reimplements): merge_dare and merge_dare_uniform agree. */
static void dare_mask_is_merge_dare_uniform_exact(void **state) {
    (void)state;
    float x[37];
    for (int j = 0; j < 37; j++) x[j] = 1.0f;
    philox_key_t k = merge_dare_key(1337, "h.1.attn.qkv.b");
    merge_dare(x, 37, 0.5, k, 3, MERGE_RESCALE_NONE);
    for (int j = 0; j < 37; j++) assert_int_equal(x[j] != 0, merge_dare_uniform(k, (uint64_t)j, 3) < 0.5);
}

/* ---- linear and task arithmetic ----------------------------------------------------------------------- */

static void linear_and_task_arithmetic_match_closed_form_1e6(void **state) {
    (void)state;
    static float a[N], b[N], base[N], acc[N], x[N], out[N];
    static double want[N];
    fill_normal(a, N, 8), fill_normal(b, N, 9), fill_normal(base, N, 10);
    memset(acc, 0, sizeof acc);
    merge_axpy(acc, a, 0.25f, N);
    merge_axpy(acc, b, 0.5f, N);
    merge_scale(acc, 1 / 0.75f, N);
    for (int j = 0; j < N; j++) want[j] = (0.25 * a[j] + 0.5 * b[j]) / 0.75;
    expect_close("linear", acc, want, N, 1e-6);
    /* base + λ (0.5 (a - base) - 1.5 (b - base)), not normalised */
    memset(acc, 0, sizeof acc);
    memcpy(x, a, sizeof x), merge_delta(x, base, N), merge_axpy(acc, x, 0.5f, N);
    memcpy(x, b, sizeof x), merge_delta(x, base, N), merge_axpy(acc, x, -1.5f, N);
    merge_finish(out, base, acc, NULL, -1.0, false, 0.7, N);
    for (int j = 0; j < N; j++) want[j] = base[j] + 0.7 * (0.5 * (a[j] - base[j]) - 1.5 * (b[j] - base[j]));
    expect_close("task arithmetic", out, want, N, 1e-6);
    /* normalised by Σw, and a Σw under 1e-8 counts as 1 (mergekit) */
    merge_finish(out, base, acc, NULL, 2.0, true, 1.0, N);
    for (int j = 0; j < N; j++) want[j] = base[j] + acc[j] / 2.0;
    expect_close("task arithmetic normalised", out, want, N, 1e-6);
    merge_finish(out, base, acc, NULL, 1e-9, true, 1.0, N);
    for (int j = 0; j < N; j++) want[j] = base[j] + acc[j];
    expect_close("divisor under 1e-8", out, want, N, 1e-6);
}

static void method_names_round_trip(void **state) {
    (void)state;
    for (int m = 0; m < MERGE_N_METHODS; m++)
        assert_int_equal(merge_method_from_name(merge_method_name((merge_method_t)m)), m);
    assert_int_equal(merge_method_from_name("Linear"), -1);
    assert_int_equal(merge_method_from_name("dare"), -1);
    assert_true(merge_method_normalizes(MERGE_LINEAR) && merge_method_normalizes(MERGE_TIES));
    assert_false(merge_method_normalizes(MERGE_DARE_TIES) || merge_method_normalizes(MERGE_TASK_ARITHMETIC));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(slerp_matches_closed_form_in_double_1e6),
        cmocka_unit_test(slerp_parallel_vectors_fall_back_to_lerp_1e6),
        cmocka_unit_test(ties_trim_keeps_top_k_by_magnitude_ties_in_index_order),
        cmocka_unit_test(ties_sign_election_hand_made_case_exact),
        cmocka_unit_test(dare_fixed_seed_reproducible_other_seed_differs),
        cmocka_unit_test(dare_keeps_density_within_5_sigma_and_rescales_l1_1e6),
        cmocka_unit_test(dare_mask_is_merge_dare_uniform_exact),
        cmocka_unit_test(linear_and_task_arithmetic_match_closed_form_1e6),
        cmocka_unit_test(method_names_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
