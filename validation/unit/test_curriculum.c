/* test_curriculum.c — data mixtures and &stage groups:
 *  - mixture_pick proportions over 200,000 samples within 5 binomial sigma of the weights (0.7 /
 *    0.3; 0.5 / 0 / 0.2 / 0.3 with a zero-weight source never drawn), the draw a pure function of
 *    (seed, sample) and different for another seed; mixture_assign hands out consecutive
 *    per-source positions (checked against a direct count);
 *  - mixture_parse: sources, blanks, several patterns per source, and each error;
 *  - &stage groups parsed in order (repeated groups accepted), keys recorded as set or not, the
 *    echo holds the set keys only and reads back to the same stages; each bad input a one-line
 *    message naming file:line:col and the key: until_step going backwards, both until kinds,
 *    mixed kinds, a missing until before the last stage, seq_len above &model seq_len,
 *    global_batch not divisible, mixture weights summing to 0, train_files with mixture,
 *    &stage on the command line;
 *  - lr pieces: lr_at equals lr_piece_at of lr_piece_from (the refactoring), exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/stages.h"
#include "core/error.h"
#include "test_fatal.h"
#include "io/mixture.h"
#include "train/lr.h"

#define PATH "t.nml"
#define BASE "&model seq_len = 32 /\n&train micro_batch = 2, global_batch = 4 /\n" \
             "&data train_files = 'x.bin' /\n"

/* ---- the draw ---------------------------------------------------------------------------- */

static void check_proportions(const double *w, int n, uint64_t seed) {
    enum { N = 200000 };
    double cum[MIX_MAX_SOURCES], sum = 0;
    long count[MIX_MAX_SOURCES] = {0};
    mixture_cumulative(w, n, cum);
    for (int k = 0; k < n; k++) sum += w[k];
    for (uint64_t s = 0; s < N; s++) count[mixture_pick(cum, n, seed, s)]++;
    for (int k = 0; k < n; k++) {
        const double p = w[k] / sum, sigma = sqrt(N * p * (1 - p));
        if (p == 0) {
            assert_int_equal(count[k], 0);
            continue;
        }
        const double z = (count[k] - N * p) / sigma;
        if (fabs(z) > 5) fail_msg("source %d: %ld of %d, expected %.0f (sigma %.1f, z %.2f)", k, count[k], N, N * p, sigma, z);
    }
}

static void mixture_proportions_within_5_binomial_sigma(void **state) {
    (void)state;
    const double a[] = {0.7, 0.3}, b[] = {0.5, 0, 0.2, 0.3}, c[] = {7, 3}; /* c: not normalised */
    check_proportions(a, 2, 1337);
    check_proportions(b, 4, 42);
    check_proportions(c, 2, 7);
}

static void mixture_draw_is_pure_in_seed_and_sample(void **state) {
    (void)state;
    const double w[] = {0.5, 0.5};
    double cum[2];
    mixture_cumulative(w, 2, cum);
    int differ = 0;
    for (uint64_t s = 0; s < 1000; s++) {
        const int k = mixture_pick(cum, 2, 9, s);
        assert_int_equal(k, mixture_pick(cum, 2, 9, s)); /* no state */
        differ += k != mixture_pick(cum, 2, 10, s);
    }
    if (differ < 400 || differ > 600) fail_msg("seeds 9 and 10 differ on %d of 1000 draws, expected ~500", differ);
    assert_int_equal(mixture_pick(cum, 1, 9, 5), 0);
}

static void mixture_assign_hands_out_consecutive_positions(void **state) {
    (void)state;
    const double w[] = {0.6, 0.4};
    double cum[2];
    mixture_cumulative(w, 2, cum);
    int64_t pos[2] = {10, 100}, index[64];
    int src[64];
    mixture_assign(cum, 2, 3, 500, 64, pos, src, index);
    int64_t next[2] = {10, 100};
    for (int i = 0; i < 64; i++) {
        assert_int_equal(src[i], mixture_pick(cum, 2, 3, 500 + (uint64_t)i));
        assert_int_equal(index[i], next[src[i]]++);
    }
    assert_int_equal(pos[0], next[0]);
    assert_int_equal(pos[1], next[1]);
    /* in two halves: the same as at once (a step's slices, a resumed run) */
    int64_t p2[2] = {10, 100}, i2[64];
    int s2[64];
    mixture_assign(cum, 2, 3, 500, 20, p2, s2, i2);
    mixture_assign(cum, 2, 3, 520, 44, p2, s2 + 20, i2 + 20);
    assert_memory_equal(i2, index, sizeof index);
}

/* ---- syntax ------------------------------------------------------------------------------ */

static void mixture_parse_accepts_sources_and_refuses_errors(void **state) {
    (void)state;
    mix_spec_t m;
    char err[256];
    assert_int_equal(mixture_parse(" a*.bin : 0.7 ,b.bin c.bin:3", &m, err, sizeof err), 0);
    assert_int_equal(m.n, 2);
    assert_string_equal(m.patterns[0], "a*.bin");
    assert_string_equal(m.patterns[1], "b.bin c.bin");
    assert_true(m.weight[0] == 0.7 && m.weight[1] == 3);
    assert_int_equal(mixture_parse("a.bin", &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "no ':WEIGHT'"));
    assert_int_equal(mixture_parse("a.bin:x", &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "weight 'x' is not a number >= 0"));
    assert_int_equal(mixture_parse(":1", &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "no file pattern"));
    assert_int_equal(mixture_parse("a:0, b:0", &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "sum to 0"));
    assert_int_equal(mixture_parse("a:1,", &m, err, sizeof err), -1);
}

/* ---- &stage in the namelist -------------------------------------------------------------- */

static void stages_parse_in_order_and_echo_reads_back(void **state) {
    (void)state;
    const char *text = BASE "&stage until_step = 10, seq_len = 16 /\n"
                            "&stage until_step = 20, mixture = 'a.bin:1, b.bin:2', lr = 1e-3 /\n"
                            "&stage global_batch = 8 /\n";
    config_t cfg, again;
    if (setjmp(fatal_jump) != 0) fail_msg("unexpected error: %s", fatal_message);
    config_parse(PATH, text, &cfg);
    assert_int_equal(cfg.n_stages, 3);
    assert_int_equal(cfg.stages[0].until_step, 10);
    assert_int_equal(cfg.stages[0].seq_len, 16);
    assert_true(stage_sets(&cfg.stages[0], STAGE_SEQ_LEN) && !stage_sets(&cfg.stages[0], STAGE_GLOBAL_BATCH));
    assert_int_equal(cfg.stages[1].key_line[STAGE_MIXTURE], 5);
    assert_string_equal(cfg.stages[1].mixture, "a.bin:1, b.bin:2");
    assert_true(cfg.stages[1].lr == 1e-3);
    assert_int_equal(cfg.stages[2].global_batch, 8);
    assert_false(stage_sets(&cfg.stages[2], STAGE_UNTIL_STEP));
    char buf[32768];
    config_to_namelist(&cfg, buf, sizeof buf);
    assert_non_null(strstr(buf, "&stage ! 2 of 3\n  until_step      = 20\n  mixture         = 'a.bin:1, b.bin:2'\n"
                                "  lr              = 0.001\n/\n"));
    config_parse(PATH, buf, &again);
    assert_int_equal(again.n_stages, 3);
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < CFG_STAGE_KEYS; k++)
            assert_int_equal(stage_sets(&again.stages[s], k), stage_sets(&cfg.stages[s], k));
    assert_int_equal(again.stages[1].until_step, 20);
    assert_int_equal(again.stages[0].seq_len, 16);
    config_destroy(&cfg);
    config_destroy(&again);
}

static const char *parse_error(const char *text, const config_args_t *args) {
    config_t cfg;
    fatal_message[0] = '\0';
    if (setjmp(fatal_jump) == 0) {
        config_parse_overrides(PATH, text, args, &cfg);
        config_destroy(&cfg);
        fail_msg("expected an error, but this parsed:\n%s", text);
    }
    return caught_user_error();
}

#define EXPECT(text, want)                                                                        \
    do {                                                                                          \
        const char *got = parse_error(text, NULL);                                                \
        if (!strstr(got, want)) fail_msg("message\n  %s\nlacks\n  %s", got, want);                 \
    } while (0)

static void bad_stages_are_one_message_at_file_line(void **state) {
    (void)state;
    EXPECT(BASE "&stage until_step = 10 /\n&stage\n until_step = 10 /\n",
           "t.nml:6:2: &stage until_step (stage 2 of 2): until_step = 10 goes backwards");
    EXPECT(BASE "&stage until_step = 10, until_tokens = 5 /\n", "t.nml:4:25: &stage until_tokens (stage 1 of 1): "
           "set until_step or until_tokens, not both");
    EXPECT(BASE "&stage until_step = 10 /\n&stage until_tokens = 500 /\n", "t.nml:5:8: &stage until_tokens "
           "(stage 2 of 2): all stages end by the same measure");
    EXPECT(BASE "&stage seq_len = 8 /\n&stage until_step = 3 /\n", "t.nml:4:1: &stage until_step (stage 1 of 2): "
           "every stage but the last needs until_step or until_tokens");
    EXPECT(BASE "&stage seq_len = 33 /\n", "t.nml:4:8: &stage seq_len (stage 1 of 1): seq_len = 33 is above "
           "&model seq_len = 32");
    EXPECT(BASE "&stage global_batch = 5 /\n", "t.nml:4:8: &stage global_batch (stage 1 of 1): global_batch = 5 "
           "must be a multiple of &train micro_batch * &parallel dp = 2");
    EXPECT(BASE "&stage mixture = 'a:0, b:0' /\n", "t.nml:4:8: &stage mixture (stage 1 of 1): the weights sum to 0");
    EXPECT(BASE "&stage mixture = 'a:1', train_files = 'b' /\n", "&stage mixture (stage 1 of 1): set train_files "
           "or mixture, not both");
    EXPECT(BASE "&stage until_step = 0 /\n", "&stage until_step: must be >= 1, got 0");
    EXPECT(BASE "&stage lr = 1e-4, min_lr = 1e-3 /\n", "&stage min_lr (stage 1 of 1): min_lr = 0.001 must be <= lr");
    EXPECT("&train micro_batch = 2 /\n&data mixture = 'a:1', train_files = 'b' /\n",
           "t.nml:2:7: &data mixture: set train_files (line 2) or mixture, not both");
    EXPECT("&data mixture = 'a:-2' /\n", "t.nml:1:7: &data mixture: source 'a:-2': weight '-2' is not a number >= 0");
    const char *arg[] = {"stage.seq_len=8"};
    config_args_t args = {.args = arg, .n = 1, .first_argno = 2};
    const char *got = parse_error(BASE, &args);
    if (!strstr(got, "command line argument 2 'stage.seq_len=8': &stage keys cannot be overridden"))
        fail_msg("override message: %s", got);
}

static void data_mixture_or_stage_data_replaces_train_files(void **state) {
    (void)state;
    config_t cfg;
    if (setjmp(fatal_jump) != 0) fail_msg("unexpected error: %s", fatal_message);
    config_parse(PATH, "&data mixture = 'a:1, b:1' /\n", &cfg);
    assert_int_equal(cfg.mixture_line, 1);
    config_destroy(&cfg);
    config_parse(PATH, "&stage train_files = 'a' /\n", &cfg);
    assert_true(stages_have_data(&cfg));
    config_destroy(&cfg);
}

static void lr_at_is_lr_piece_at_of_train(void **state) {
    (void)state;
    config_t cfg;
    config_defaults(&cfg);
    const char *sched[] = {"cosine", "constant", "linear", "wsd"};
    for (int s = 0; s < 4; s++) {
        assert_int_equal(config_set_choice(&cfg, "train", "lr_schedule", sched[s]), 0);
        cfg.warmup_steps = 7, cfg.max_steps = 50, cfg.min_lr = 1e-5;
        const lr_piece_t p = lr_piece_from(&cfg);
        for (int i = 0; i < 60; i++) assert_true(lr_at(&cfg, i) == lr_piece_at(&p, i));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mixture_proportions_within_5_binomial_sigma),
        cmocka_unit_test(mixture_draw_is_pure_in_seed_and_sample),
        cmocka_unit_test(mixture_assign_hands_out_consecutive_positions),
        cmocka_unit_test(mixture_parse_accepts_sources_and_refuses_errors),
        cmocka_unit_test(stages_parse_in_order_and_echo_reads_back),
        cmocka_unit_test(bad_stages_are_one_message_at_file_line),
        cmocka_unit_test(data_mixture_or_stage_data_replaces_train_files),
        cmocka_unit_test(lr_at_is_lr_piece_at_of_train),
    };
    return cmocka_run_group_tests(tests, install_hook, NULL);
}
