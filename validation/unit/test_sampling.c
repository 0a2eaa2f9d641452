/* test_sampling.c — token sampling for mode = 'generate': temperature 0 is argmax, top_k = 1 is
 * argmax at any temperature, top-k never returns a token outside the k largest, and the draw
 * frequencies follow softmax(logits / temperature) (chi-square-like bound, 20000 draws). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "core/rng.h"
#include "train/generate.h"

static const float base[8] = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 3.0f, -2.0f, 1.0f};

static int draw(double temp, int k, float u) {
    float l[8], scratch[8];
    memcpy(l, base, sizeof l);
    return sample_token(l, 8, temp, k, u, scratch);
}

static void temperature_0_and_top_k_1_are_argmax(void **state) {
    (void)state;
    for (int i = 1; i < 100; i++) {
        float u = (float)i / 100.0f;
        assert_int_equal(draw(0.0, 0, u), 5);
        assert_int_equal(draw(2.0, 1, u), 5);
    }
}

static void top_k_3_draws_only_the_3_largest(void **state) {
    (void)state;
    philox_key_t k = rng_key(3, 3);
    int seen[8] = {0};
    for (int i = 0; i < 5000; i++) seen[draw(1.5, 3, rng_uniform(k, (uint64_t)i, 0))]++;
    for (int t = 0; t < 8; t++) {
        bool allowed = t == 5 || t == 1 || t == 3;
        if (!allowed) assert_int_equal(seen[t], 0);
        else assert_true(seen[t] > 0);
    }
}

static void frequencies_follow_softmax_over_temperature_within_5_sigma(void **state) {
    (void)state;
    const int n = 20000;
    const double temp = 0.7;
    philox_key_t k = rng_key(11, 2);
    int seen[8] = {0};
    for (int i = 0; i < n; i++) seen[draw(temp, 0, rng_uniform(k, (uint64_t)i, 0))]++;
    double z = 0, p[8];
    for (int t = 0; t < 8; t++) z += exp(base[t] / temp);
    for (int t = 0; t < 8; t++) {
        p[t] = exp(base[t] / temp) / z;
        double sigma = sqrt(n * p[t] * (1 - p[t])) + 1;
        if (fabs(seen[t] - n * p[t]) > 5 * sigma)
            print_error("token %d: %d draws, expected %.1f\n", t, seen[t], n * p[t]);
        assert_true(fabs(seen[t] - n * p[t]) <= 5 * sigma);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(temperature_0_and_top_k_1_are_argmax),
        cmocka_unit_test(top_k_3_draws_only_the_3_largest),
        cmocka_unit_test(frequencies_follow_softmax_over_temperature_within_5_sigma),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
