/* test_straggler.c — the straggler detector (train/straggler.c) on synthetic busy times, against
 * references computed here from the definitions: the median of the peers without the rank by
 * qsort (exact, rel. 1e-12), the windowed median of the ratios; verdicts on healthy noisy ranks
 * (none over 2000 steps, the largest ratio printed), a rank slowed from some step on (named
 * within WINDOW steps, not before the warm-up and a full window), one- and two-step hiccups
 * (never named), peers by pipeline stage (an unbalanced stage is no straggler), the floor on the
 * excess busy time (a 3x ratio of 1 ms steps is not named, of 100 ms steps it is), threshold 0
 * (off), and the host list. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "train/straggler.h"

static uint64_t lcg_state;
static double uniform(void) { /* [0, 1) */
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg_state >> 11) / 9007199254740992.0;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The reference: the median of busy[q] over q != r with group[q] == group[r], by qsort. */
static double ref_peer_median(const double *busy, const int *group, int n, int r) {
    double v[64];
    int m = 0;
    for (int q = 0; q < n; q++)
        if (q != r && group[q] == group[r]) v[m++] = busy[q];
    if (m == 0) return 0;
    qsort(v, (size_t)m, sizeof *v, cmp);
    return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

static void ratios_match_the_median_of_the_other_peers_1e_12(void **state) {
    (void)state;
    enum { N = 12 };
    lcg_state = 7;
    const int groups[3][N] = {{0}, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1},
                              {2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1}};
    straggler_entry_t scratch[N];
    for (int g = 0; g < 3; g++)
        for (int trial = 0; trial < 200; trial++) {
            double busy[N], ratio[N];
            for (int r = 0; r < N; r++) busy[r] = 0.1 + uniform();
            if (trial % 3 == 0) busy[3] = busy[5]; /* ties */
            straggler_ratios(busy, groups[g], N, ratio, NULL, scratch);
            for (int r = 0; r < N; r++) {
                const double want = busy[r] / ref_peer_median(busy, groups[g], N, r);
                if (fabs(ratio[r] - want) > 1e-12 * want)
                    fail_msg("grouping %d trial %d rank %d: ratio %.17g, reference %.17g", g, trial,
                             r, ratio[r], want);
            }
        }
}

static void two_peers_compare_with_each_other_and_no_peer_is_1(void **state) {
    (void)state;
    const int group[3] = {0, 0, 1};
    const double busy[3] = {1.0, 3.0, 5.0};
    double ratio[3], excess[3];
    straggler_entry_t scratch[3];
    straggler_ratios(busy, group, 3, ratio, excess, scratch);
    assert_float_equal(ratio[0], 1.0 / 3.0, 1e-15);
    assert_float_equal(ratio[1], 3.0, 1e-15);
    assert_float_equal(ratio[2], 1.0, 0); /* alone in its group: no evidence */
    assert_float_equal(excess[0], -2.0, 1e-15);
    assert_float_equal(excess[1], 2.0, 1e-15);
    assert_float_equal(excess[2], 0.0, 0);
}

/* n ranks with uniform noise of +-amp around 1; rank `slow` times `factor` from step `from`. */
static void fill(double *busy, int n, double amp, int slow, double factor, int step, int from) {
    for (int r = 0; r < n; r++) busy[r] = 1.0 + amp * (2 * uniform() - 1);
    if (slow >= 0 && step >= from) busy[slow] *= factor;
}

static void healthy_noisy_ranks_are_never_named_over_2000_steps(void **state) {
    (void)state;
    enum { N = 8 };
    int group[N] = {0};
    straggler_t s;
    straggler_init(&s, N, group, 1.5);
    lcg_state = 11;
    for (int t = 0; t < 2000; t++) {
        double busy[N];
        fill(busy, N, 0.2, -1, 1, t, 0); /* +-20% per step */
        if (t % 7 == 0) busy[t % N] *= 3; /* a hiccup: one step, one rank */
        assert_int_equal(straggler_push(&s, busy), -1);
    }
    printf("healthy, 2000 steps of +-20%% noise and one-step 3x hiccups: largest windowed ratio %.3f "
           "(rank %d), threshold 1.5\n", s.max_seen, s.max_rank);
    assert_true(s.max_seen < 1.5);
    straggler_destroy(&s);
}

static void a_rank_slowed_is_named_within_the_window(void **state) {
    (void)state;
    enum { N = 4, FROM = 20 };
    int group[N] = {0};
    straggler_t s;
    straggler_init(&s, N, group, 1.5);
    lcg_state = 5;
    int named_at = -1;
    for (int t = 0; t < 40 && named_at < 0; t++) {
        double busy[N];
        fill(busy, N, 0.05, 2, 2.0, t, FROM);
        const int r = straggler_push(&s, busy);
        if (r >= 0) {
            assert_int_equal(r, 2);
            named_at = t;
        }
    }
    printf("rank 2 slowed 2x from step %d: named at step %d, ratio %.3f\n", FROM, named_at, s.value);
    assert_true(named_at >= FROM && named_at < FROM + STRAGGLER_WINDOW);
    assert_true(s.value > 1.7 && s.value < 2.3);
    assert_true(straggler_first_time(&s, 2));
    assert_false(straggler_first_time(&s, 2));
    straggler_destroy(&s);
}

static void slowed_from_the_start_is_named_after_warm_up_and_a_full_window(void **state) {
    (void)state;
    enum { N = 4 };
    int group[N] = {0};
    straggler_t s;
    straggler_init(&s, N, group, 1.5);
    const double busy[N] = {1, 1, 3, 1};
    for (int t = 1; t < STRAGGLER_WARMUP + STRAGGLER_WINDOW; t++)
        assert_int_equal(straggler_push(&s, busy), -1);
    assert_int_equal(straggler_push(&s, busy), 2); /* step WARMUP + WINDOW */
    assert_float_equal(s.value, 3.0, 1e-15);
    straggler_destroy(&s);
}

static void two_slow_steps_in_five_never_name(void **state) {
    (void)state;
    enum { N = 4 };
    int group[N] = {0};
    straggler_t s;
    straggler_init(&s, N, group, 1.5);
    for (int t = 0; t < 100; t++) {
        double busy[N] = {1, 1, 1, 1};
        if (t % 5 < 2) busy[1] = 10; /* 2 of every 5 steps */
        assert_int_equal(straggler_push(&s, busy), -1);
    }
    straggler_destroy(&s);
}

static void an_unbalanced_pipeline_stage_is_no_straggler(void **state) {
    (void)state;
    enum { N = 4 };
    /* dp 2 x pp 2: ranks 0,1 stage 0; ranks 2,3 the last stage, 3x busier (the head) */
    int stage[N] = {0, 0, 1, 1};
    straggler_t s, all;
    straggler_init(&s, N, stage, 1.5);
    int one[N] = {0};
    straggler_init(&all, N, one, 1.5);
    int named_all = -1;
    for (int t = 0; t < 20; t++) {
        double busy[N] = {1, 1, 3, 3.1};
        assert_int_equal(straggler_push(&s, busy), -1);
        const int r = straggler_push(&all, busy);
        if (r >= 0) named_all = r;
    }
    assert_int_equal(named_all, 3); /* compared with every rank, the busy stage would be named */
    /* one rank per stage (pp = world size): every rank is a peer */
    int lonely[N] = {0, 1, 2, 3};
    straggler_t p;
    straggler_init(&p, N, lonely, 1.5);
    for (int r = 0; r < N; r++) assert_int_equal(p.group[r], 0);
    straggler_destroy(&p);
    straggler_destroy(&s);
    straggler_destroy(&all);
}

static void an_excess_below_the_floor_is_not_named_1ms_vs_100ms(void **state) {
    (void)state;
    int group[4] = {0};
    straggler_t small, large;
    straggler_init(&small, 4, group, 1.5);
    straggler_init(&large, 4, group, 1.5);
    const double ms[4] = {1e-3, 1e-3, 3e-3, 1e-3}, s100[4] = {0.1, 0.1, 0.3, 0.1};
    int named_small = -1, named_large = -1;
    for (int t = 0; t < 20; t++) {
        const int a = straggler_push(&small, ms), b = straggler_push(&large, s100);
        if (a >= 0) named_small = a;
        if (b >= 0) named_large = b;
    }
    /* ratio 3 both times: 2 ms a step is under the floor (STRAGGLER_MIN_EXCESS_S), 200 ms is not */
    assert_int_equal(named_small, -1);
    assert_float_equal(small.max_seen, 3.0, 1e-12);
    assert_float_equal(small.max_excess, 2e-3, 1e-12);
    assert_int_equal(named_large, 2);
    straggler_destroy(&small);
    straggler_destroy(&large);
}

static void threshold_0_and_one_rank_are_off(void **state) {
    (void)state;
    int group[2] = {0, 0};
    straggler_t s;
    straggler_init(&s, 2, group, 0.0);
    const double busy[2] = {1, 100};
    for (int t = 0; t < 20; t++) assert_int_equal(straggler_push(&s, busy), -1);
    assert_int_equal(s.max_rank, -1);
    straggler_destroy(&s);
    straggler_init(&s, 1, group, 1.5);
    for (int t = 0; t < 20; t++) assert_int_equal(straggler_push(&s, busy), -1);
    straggler_destroy(&s);
}

static void host_of_reads_the_ranks_field_short(void **state) {
    (void)state;
    char h[16];
    straggler_host_of("n1.cluster,n1.cluster,n2,n3", 2, h, sizeof h);
    assert_string_equal(h, "n2");
    straggler_host_of("n1.cluster,n1.cluster,n2,n3", 0, h, sizeof h);
    assert_string_equal(h, "n1");
    straggler_host_of("n1,n2", 5, h, sizeof h);
    assert_string_equal(h, "?");
    straggler_host_of(NULL, 0, h, sizeof h);
    assert_string_equal(h, "?");
    straggler_host_of("averyveryverylonghostname", 0, h, 8);
    assert_string_equal(h, "averyve");
}

/* ---- slow links: node times from parallel/linkprobe.c, named after two probes in a row */
static void a_slow_link_is_named_at_the_second_probe_and_not_before(void **state) {
    (void)state;
    link_watch_t w;
    link_watch_init(&w, 4, 2.0);
    const double t[4] = {0.003, 0.0031, 0.040, 0.0029}; /* node 2: 13 x the others' median */
    assert_int_equal(link_watch_push(&w, t), -1);        /* one probe names nobody */
    assert_int_equal(w.worst, 2);
    assert_float_equal(w.worst_ratio, 0.040 / 0.003, 1e-12);
    assert_int_equal(link_watch_push(&w, t), 2);
    assert_true(link_watch_first_time(&w, 2));
    assert_false(link_watch_first_time(&w, 2));
    link_watch_destroy(&w);
}

static void one_slow_probe_between_healthy_ones_names_nobody(void **state) {
    (void)state;
    link_watch_t w;
    link_watch_init(&w, 5, 2.0);
    const double ok[5] = {0.003, 0.0032, 0.0029, 0.0031, 0.003};
    const double bad[5] = {0.003, 0.0032, 0.0029, 0.030, 0.003};
    for (int i = 0; i < 50; i++) assert_int_equal(link_watch_push(&w, i % 2 ? bad : ok), -1);
    assert_int_equal(w.max_node, 3);
    link_watch_destroy(&w);
}

static void a_ratio_below_the_excess_floor_is_not_named(void **state) {
    (void)state;
    link_watch_t w;
    link_watch_init(&w, 3, 2.0);
    const double t[3] = {0.0001, 0.0001, 0.0009}; /* 9 x, but 0.8 ms above: below the floor */
    for (int i = 0; i < 5; i++) assert_int_equal(link_watch_push(&w, t), -1);
    link_watch_destroy(&w);
}

static void two_nodes_or_threshold_0_are_off(void **state) {
    (void)state;
    link_watch_t w;
    const double t[3] = {0.003, 0.003, 0.100};
    link_watch_init(&w, 2, 2.0);
    for (int i = 0; i < 3; i++) assert_int_equal(link_watch_push(&w, t), -1);
    link_watch_destroy(&w);
    link_watch_init(&w, 3, 0.0);
    for (int i = 0; i < 3; i++) assert_int_equal(link_watch_push(&w, t), -1);
    link_watch_destroy(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ratios_match_the_median_of_the_other_peers_1e_12),
        cmocka_unit_test(two_peers_compare_with_each_other_and_no_peer_is_1),
        cmocka_unit_test(healthy_noisy_ranks_are_never_named_over_2000_steps),
        cmocka_unit_test(a_rank_slowed_is_named_within_the_window),
        cmocka_unit_test(slowed_from_the_start_is_named_after_warm_up_and_a_full_window),
        cmocka_unit_test(two_slow_steps_in_five_never_name),
        cmocka_unit_test(an_unbalanced_pipeline_stage_is_no_straggler),
        cmocka_unit_test(an_excess_below_the_floor_is_not_named_1ms_vs_100ms),
        cmocka_unit_test(threshold_0_and_one_rank_are_off),
        cmocka_unit_test(host_of_reads_the_ranks_field_short),
        cmocka_unit_test(a_slow_link_is_named_at_the_second_probe_and_not_before),
        cmocka_unit_test(one_slow_probe_between_healthy_ones_names_nobody),
        cmocka_unit_test(a_ratio_below_the_excess_floor_is_not_named),
        cmocka_unit_test(two_nodes_or_threshold_0_are_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
