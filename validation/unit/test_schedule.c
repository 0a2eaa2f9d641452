/* test_schedule.c — pipeline schedules as data (train/schedule.c): every generated schedule
 * passes the simulator; its peak in-flight activations per rank equal the analytic counts
 * (GPipe m; 1F1B min(p - r, m); interleaved Megatron min(warm-up + 1, m v) with warm-up
 * (p - r - 1) 2 + (v - 1) p; ZB-H1 p); the simulated bubble under F = B = W = 1 equals
 * (p-1)/(m+p-1), (p-1)/(v m+p-1) and (p-1)/(3m+p-1) within 1e-12; broken lists are rejected. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "core/alloc.h"
#include "train/schedule.h"

static const sched_cost_t unit = {1, 1, 1};

static int analytic_peak(sched_kind_t k, int p, int v, int m, int r) {
    int n;
    switch (k) {
    case SCHED_GPIPE: return m;
    case SCHED_1F1B: return p - r < m ? p - r : m;
    case SCHED_ZBH1: return p < m ? p : m;
    default:
        n = (p - r - 1) * 2 + (v - 1) * p + 1;
        return n < m * v ? n : m * v;
    }
}

static double analytic_bubble(sched_kind_t k, int p, int v, int m) {
    if (k == SCHED_INTERLEAVED) return (p - 1.0) / (v * m + p - 1.0);
    if (k == SCHED_ZBH1) return (p - 1.0) / (3.0 * m + p - 1.0);
    return (p - 1.0) / (m + p - 1.0);
}

static void every_schedule_simulates_with_analytic_peaks_and_bubbles(void **state) {
    (void)state;
    for (int p = 2; p <= 8; p++)
        for (int mm = 1; mm <= 3; mm++)
            for (int k = 0; k < 4; k++)
                for (int v = k == SCHED_INTERLEAVED ? 2 : 1; v <= (k == SCHED_INTERLEAVED ? 4 : 1); v++) {
                    const int m = mm * p;
                    schedule_t s;
                    sched_build(&s, (sched_kind_t)k, p, v, m, true);
                    sched_sim_t o;
                    sched_simulate(&s, &unit, &o);
                    if (!o.ok) fail_msg("%s p=%d v=%d m=%d: %s", sched_kind_name(k), p, v, m, o.err);
                    for (int r = 0; r < p; r++) {
                        int got = sched_peak_inflight(&s, r), want = analytic_peak(k, p, v, m, r);
                        if (got != want || s.rank[r].n_slots != want)
                            fail_msg("%s p=%d v=%d m=%d rank %d: peak %d, slots %d, analytic %d",
                                     sched_kind_name(k), p, v, m, r, got, s.rank[r].n_slots, want);
                    }
                    const double want = analytic_bubble(k, p, v, m);
                    if (fabs(o.bubble - want) > 1e-12)
                        fail_msg("%s p=%d v=%d m=%d: bubble %.15f, theory %.15f", sched_kind_name(k),
                                 p, v, m, o.bubble, want);
                    sched_destroy(&s);
                }
}

/* Small m (fewer micro-batches than stages, torchtitan #775's hang) and forward-only lists. */
static void few_micro_batches_and_forward_only_do_not_deadlock(void **state) {
    (void)state;
    for (int p = 2; p <= 6; p++)
        for (int m = 1; m < p; m++)
            for (int k = 0; k < 4; k++)
                for (int bw = 0; bw < 2; bw++) {
                    if (k == SCHED_INTERLEAVED && bw) continue; /* needs m % p == 0 */
                    schedule_t s;
                    sched_build(&s, (sched_kind_t)k, p, 2, m, bw);
                    sched_sim_t o;
                    sched_simulate(&s, &unit, &o);
                    if (!o.ok) fail_msg("%s p=%d m=%d backward=%d: %s", sched_kind_name(k), p, m, bw, o.err);
                    sched_destroy(&s);
                }
}

static void custom(schedule_t *s, int p, int m) {
    memset(s, 0, sizeof *s);
    s->kind = SCHED_1F1B, s->p = p, s->v = 1, s->m = m, s->backward = true;
    s->rank = xcalloc((size_t)p, sizeof(sched_rank_t)); /* sched_destroy frees it */
}

/* Rank 0 runs one micro-batch at a time, rank 1 wants both forwards first: rank 0 waits for
 * gradient 0, which rank 1 sends only after forward 1, which rank 0 never sends. */
static void simulator_rejects_a_cyclic_wait(void **state) {
    (void)state;
    schedule_t s;
    custom(&s, 2, 2);
    const act_op_t r0[] = {ACT_F, ACT_B, ACT_F, ACT_B}, r1[] = {ACT_F, ACT_F, ACT_B, ACT_B};
    const int i0[] = {0, 0, 1, 1}, i1[] = {0, 1, 0, 1};
    for (int i = 0; i < 4; i++) sched_push(&s, 0, r0[i], 0, i0[i]), sched_push(&s, 1, r1[i], 0, i1[i]);
    sched_finish(&s);
    sched_sim_t o;
    sched_simulate(&s, &unit, &o);
    assert_false(o.ok);
    if (!strstr(o.err, "deadlock")) fail_msg("expected a deadlock, got: %s", o.err);
    sched_destroy(&s);
}

static void simulator_rejects_mismatched_tag_and_missing_backward(void **state) {
    (void)state;
    schedule_t s;
    sched_build(&s, SCHED_1F1B, 3, 1, 3, true);
    for (int i = 0; i < s.rank[1].n; i++) /* rank 1 sends forward 2 under the wrong tag */
        if (s.rank[1].act[i].op == ACT_SEND_F && s.rank[1].act[i].micro == 2) s.rank[1].act[i].tag += 2;
    sched_sim_t o;
    sched_simulate(&s, &unit, &o);
    assert_false(o.ok);
    if (!strstr(o.err, "deadlock") && !strstr(o.err, "never received")) fail_msg("got: %s", o.err);
    sched_destroy(&s);
    custom(&s, 2, 2);
    const act_op_t r0[] = {ACT_F, ACT_F, ACT_B}, r1[] = {ACT_F, ACT_B, ACT_F, ACT_B};
    const int i0[] = {0, 1, 0}, i1[] = {0, 0, 1, 1};
    for (int i = 0; i < 3; i++) sched_push(&s, 0, r0[i], 0, i0[i]);
    for (int i = 0; i < 4; i++) sched_push(&s, 1, r1[i], 0, i1[i]);
    sched_finish(&s);
    sched_simulate(&s, &unit, &o);
    assert_false(o.ok);
    if (!strstr(o.err, "not completed")) fail_msg("expected a missing backward, got: %s", o.err);
    sched_destroy(&s);
}

static void constraints_name_the_nearest_valid_settings(void **state) {
    (void)state;
    char buf[400];
    assert_null(sched_constraint_error(SCHED_INTERLEAVED, 4, 2, 8, 8, buf, sizeof buf));
    assert_non_null(sched_constraint_error(SCHED_INTERLEAVED, 4, 2, 6, 8, buf, sizeof buf));
    if (!strstr(buf, "nearest valid: 4 or 8")) fail_msg("%s", buf);
    assert_non_null(sched_constraint_error(SCHED_INTERLEAVED, 2, 3, 4, 8, buf, sizeof buf));
    if (!strstr(buf, "n_layer = 6 or 12") || !strstr(buf, "{2, 4}")) fail_msg("%s", buf);
    assert_non_null(sched_constraint_error(SCHED_INTERLEAVED, 1, 2, 4, 8, buf, sizeof buf));
    assert_null(sched_constraint_error(SCHED_1F1B, 3, 1, 5, 7, buf, sizeof buf));
}

/* NCCL (no tags, one stream per direction, rendezvous sends): every schedule the trainer can
 * run, for training and evaluation, delivers each message into its own receive and completes. */
static void every_schedule_runs_on_an_ordered_transport(void **state) {
    (void)state;
    int checked = 0;
    for (int p = 2; p <= 8; p++)
        for (int m = 1; m <= 3 * p; m++)
            for (int k = 0; k < 4; k++)
                for (int v = 1; v <= (k == SCHED_INTERLEAVED ? 4 : 1); v++)
                    for (int bw = 0; bw < 2; bw++) {
                        if (k == SCHED_INTERLEAVED && (v < 2 || (bw && m % p)))
                            continue; /* interleaved training needs m % p == 0 */
                        schedule_t s;
                        sched_build(&s, (sched_kind_t)k, p, v, m, bw);
                        sched_sim_t o;
                        sched_check_ordered(&s, &o);
                        if (!o.ok)
                            fail_msg("%s p=%d v=%d m=%d backward=%d: %s", sched_kind_name(k), p,
                                     v, m, bw, o.err);
                        sched_destroy(&s);
                        checked++;
                    }
    assert_true(checked > 400);
}

/* Rank 1 sends gradient 1 before gradient 0, rank 0 receives 0 first: MPI matches them by tag,
 * an ordered transport would put gradient 1 into micro-batch 0's buffer. And a cyclic wait
 * (simulator_rejects_a_cyclic_wait's lists) deadlocks there too, with the waits named. */
static void ordered_check_rejects_swapped_messages_and_deadlocks(void **state) {
    (void)state;
    schedule_t s;
    custom(&s, 2, 2);
    const act_op_t r0[] = {ACT_F, ACT_F, ACT_B, ACT_B}, r1[] = {ACT_F, ACT_F, ACT_B, ACT_B};
    const int i0[] = {0, 1, 0, 1}, i1[] = {0, 1, 1, 0};
    for (int i = 0; i < 4; i++) sched_push(&s, 0, r0[i], 0, i0[i]), sched_push(&s, 1, r1[i], 0, i1[i]);
    sched_finish(&s);
    sched_sim_t o;
    sched_simulate(&s, &unit, &o);
    if (!o.ok) fail_msg("matched by tag: %s", o.err);
    sched_check_ordered(&s, &o);
    assert_false(o.ok);
    if (!strstr(o.err, "rank 1's send (gradient of micro-batch 1 chunk 0) would land in rank 0's "
                       "receive for the gradient of micro-batch 0 chunk 0"))
        fail_msg("got: %s", o.err);
    sched_destroy(&s);
    custom(&s, 2, 2);
    const act_op_t c0[] = {ACT_F, ACT_B, ACT_F, ACT_B}, c1[] = {ACT_F, ACT_F, ACT_B, ACT_B};
    const int j0[] = {0, 0, 1, 1}, j1[] = {0, 1, 0, 1};
    for (int i = 0; i < 4; i++) sched_push(&s, 0, c0[i], 0, j0[i]), sched_push(&s, 1, c1[i], 0, j1[i]);
    sched_finish(&s);
    sched_check_ordered(&s, &o);
    assert_false(o.ok);
    if (!strstr(o.err, "deadlock on an ordered transport") || !strstr(o.err, "rank 0 waits at recv-B"))
        fail_msg("got: %s", o.err);
    sched_destroy(&s);
}

/* Each &parallel schedule value's enum maps to the kind of the same name (exact). */
static void config_schedule_enum_is_the_kind_of_its_name(void **state) {
    (void)state;
    const char *names[] = {"1f1b", "gpipe", "interleaved", "zb-h1"};
    for (int i = 0; i < 4; i++) {
        config_t c;
        config_defaults(&c);
        assert_int_equal(config_set_choice(&c, "parallel", "schedule", names[i]), 0);
        if ((int)sched_kind_of(c.choice.schedule) != sched_kind_from_name(names[i]))
            fail_msg("schedule '%s': enum %d maps to kind %d, its name to %d", names[i],
                     (int)c.choice.schedule, (int)sched_kind_of(c.choice.schedule),
                     sched_kind_from_name(names[i]));
        config_destroy(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_schedule_enum_is_the_kind_of_its_name),
        cmocka_unit_test(every_schedule_simulates_with_analytic_peaks_and_bubbles),
        cmocka_unit_test(few_micro_batches_and_forward_only_do_not_deadlock),
        cmocka_unit_test(simulator_rejects_a_cyclic_wait),
        cmocka_unit_test(simulator_rejects_mismatched_tag_and_missing_backward),
        cmocka_unit_test(constraints_name_the_nearest_valid_settings),
        cmocka_unit_test(every_schedule_runs_on_an_ordered_transport),
        cmocka_unit_test(ordered_check_rejects_swapped_messages_and_deadlocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
