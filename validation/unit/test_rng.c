/* test_rng.c — the counter-based generator: Philox-4x32-10 known-answer vectors from the
 * Random123 distribution (kat_vectors), purity, and the moments of the normal draws. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "core/rng.h"

static void check_kat(philox_ctr_t c, philox_key_t k, const uint32_t expect[4]) {
    philox_ctr_t r = philox4x32_10(c, k);
    for (int i = 0; i < 4; i++) {
        if (r.v[i] != expect[i])
            print_error("word %d: got %08x expected %08x\n", i, r.v[i], expect[i]);
        assert_int_equal(r.v[i], expect[i]);
    }
}

static void philox_matches_random123_known_answers(void **state) {
    (void)state;
    const uint32_t e0[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    check_kat((philox_ctr_t){{0, 0, 0, 0}}, (philox_key_t){{0, 0}}, e0);
    const uint32_t e1[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
    check_kat((philox_ctr_t){{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
              (philox_key_t){{0xffffffff, 0xffffffff}}, e1);
    const uint32_t e2[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    check_kat((philox_ctr_t){{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
              (philox_key_t){{0xa4093822, 0x299f31d0}}, e2);
}

static void draws_are_pure_functions_of_key_and_index(void **state) {
    (void)state;
    philox_key_t k = rng_key(1337, rng_hash_str("h.0.attn.qkv.w"));
    philox_key_t k2 = rng_key(1337, rng_hash_str("h.0.attn.qkv.w"));
    for (uint64_t i = 0; i < 1000; i += 37) {
        assert_true(rng_normal(k, i) == rng_normal(k2, i));
        assert_true(rng_uniform(k, i, 3) == rng_uniform(k2, i, 3));
    }
    /* different names and seeds give different streams */
    philox_key_t other = rng_key(1337, rng_hash_str("h.1.attn.qkv.w"));
    philox_key_t seed2 = rng_key(1338, rng_hash_str("h.0.attn.qkv.w"));
    assert_true(rng_normal(k, 5) != rng_normal(other, 5));
    assert_true(rng_normal(k, 5) != rng_normal(seed2, 5));
}

static void normal_draws_have_mean_0_and_variance_1_within_4_sigma(void **state) {
    (void)state;
    const int n = 200000;
    philox_key_t k = rng_key(42, 7);
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(k, (uint64_t)i);
        s += x;
        s2 += x * x;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    /* standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032 */
    print_message("mean %.5f variance %.5f\n", mean, var);
    assert_true(fabs(mean) < 4 * 0.0023);
    assert_true(fabs(var - 1.0) < 4 * 0.0032);
}

static void uniform_draws_stay_inside_open_interval(void **state) {
    (void)state;
    philox_key_t k = rng_key(0, 0);
    double s = 0;
    for (int i = 0; i < 100000; i++) {
        float u = rng_uniform(k, (uint64_t)i, 0);
        assert_true(u > 0.0f && u < 1.0f);
        s += u;
    }
    assert_true(fabs(s / 100000 - 0.5) < 0.005);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_matches_random123_known_answers),
        cmocka_unit_test(draws_are_pure_functions_of_key_and_index),
        cmocka_unit_test(normal_draws_have_mean_0_and_variance_1_within_4_sigma),
        cmocka_unit_test(uniform_draws_stay_inside_open_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
