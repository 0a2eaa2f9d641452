/* test_lr.c — learning-rate schedules against values worked out by hand (abs. tol 1e-12). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "config/config.h"
#include "train/lr.h"

static config_t schedule(const char *name) {
    config_t c;
    config_defaults(&c);
    assert_int_equal(config_set_choice(&c, "train", "lr_schedule", name), 0);
    c.lr = 1.0, c.min_lr = 0.1, c.warmup_steps = 10, c.max_steps = 110, c.decay_fraction = 0.2;
    return c;
}

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-12)

static void warmup_is_linear_from_lr_over_warmup_to_lr(void **state) {
    (void)state;
    const char *names[] = {"constant", "cosine", "linear", "wsd"};
    for (int i = 0; i < 4; i++) {
        config_t c = schedule(names[i]);
        NEAR(lr_at(&c, 0), 0.1);  /* (0+1)/10 */
        NEAR(lr_at(&c, 4), 0.5);
        NEAR(lr_at(&c, 9), 1.0);
    }
}

static void constant_stays_at_lr(void **state) {
    (void)state;
    config_t c = schedule("constant");
    NEAR(lr_at(&c, 10), 1.0);
    NEAR(lr_at(&c, 109), 1.0);
}

static void cosine_halfway_is_mean_of_lr_and_min_lr_and_ends_at_min_lr(void **state) {
    (void)state;
    config_t c = schedule("cosine");
    NEAR(lr_at(&c, 10), 1.0);
    NEAR(lr_at(&c, 60), 0.55);                                   /* p = 0.5 */
    NEAR(lr_at(&c, 35), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.25))); /* p = 0.25 */
    NEAR(lr_at(&c, 110), 0.1);
    NEAR(lr_at(&c, 500), 0.1); /* clamped past the end */
}

static void linear_decays_in_equal_steps_to_min_lr(void **state) {
    (void)state;
    config_t c = schedule("linear");
    NEAR(lr_at(&c, 10), 1.0);
    NEAR(lr_at(&c, 60), 0.55);
    NEAR(lr_at(&c, 85), 1.0 - 0.9 * 0.75);
    NEAR(lr_at(&c, 110), 0.1);
}

static void wsd_is_stable_then_decays_over_last_fraction(void **state) {
    (void)state;
    config_t c = schedule("wsd");
    /* decay starts at 110 * 0.8 = 88 and reaches min_lr at 110 */
    NEAR(lr_at(&c, 50), 1.0);
    NEAR(lr_at(&c, 87), 1.0);
    NEAR(lr_at(&c, 88), 1.0);
    NEAR(lr_at(&c, 99), 1.0 - 0.9 * 0.5);
    NEAR(lr_at(&c, 110), 0.1);
}

static void no_warmup_starts_at_lr(void **state) {
    (void)state;
    config_t c = schedule("cosine");
    c.warmup_steps = 0;
    NEAR(lr_at(&c, 0), 1.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(warmup_is_linear_from_lr_over_warmup_to_lr),
        cmocka_unit_test(constant_stays_at_lr),
        cmocka_unit_test(cosine_halfway_is_mean_of_lr_and_min_lr_and_ends_at_min_lr),
        cmocka_unit_test(linear_decays_in_equal_steps_to_min_lr),
        cmocka_unit_test(wsd_is_stable_then_decays_over_last_fraction),
        cmocka_unit_test(no_warmup_starts_at_lr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
