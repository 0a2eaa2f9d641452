/* test_moe_route.c — unit tests of the MoE routing plan (model/moe_route.h): capacity, the
 * 'position' and 'probs' drop policies, the dispatch order and a plan cut to one rank's tokens
 * (context parallelism). References: routings worked out by hand (every field checked
 * exactly), and on random routings a brute-force rule written from
 * the header (an assignment is kept iff fewer than cap assignments of its expert go before it).
 * Needs no MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/moe_route.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a plan must hold, written out by hand. */
typedef struct {
    int cap, M, dropped;
    const int *load, *kept, *offset, *token, *choice;
} want_plan_t;

static void check_plan(const moe_plan_t *p, const want_plan_t *w) {
    assert_int_equal(p->cap, w->cap);
    assert_int_equal(p->M, w->M);
    assert_int_equal(p->dropped, w->dropped);
    assert_memory_equal(p->load, w->load, (size_t)p->E * sizeof *p->load);
    assert_memory_equal(p->kept, w->kept, (size_t)p->E * sizeof *p->kept);
    assert_memory_equal(p->offset, w->offset, ((size_t)p->E + 1) * sizeof *p->offset);
    assert_memory_equal(p->token, w->token, (size_t)w->M * sizeof *p->token);
    assert_memory_equal(p->choice, w->choice, (size_t)w->M * sizeof *p->choice);
}

static void capacity_is_ceil_of_n_k_cf_over_e_exact(void **state) {
    (void)state;
    assert_int_equal(moe_capacity(8, 2, 4, 1.0), 4);
    assert_int_equal(moe_capacity(6, 2, 3, 1.0), 4);
    assert_int_equal(moe_capacity(6, 2, 3, 1.25), 5);   /* 5.0 */
    assert_int_equal(moe_capacity(7, 1, 2, 1.0), 4);    /* 3.5 */
    assert_int_equal(moe_capacity(5, 1, 2, 1.0), 3);    /* 2.5 */
    assert_int_equal(moe_capacity(100, 2, 20, 1.1), 11); /* 11.000000000000002 in double */
    assert_int_equal(moe_capacity(10, 1, 11, 1.1), 1);
    assert_int_equal(moe_capacity(4, 2, 4, 0.5), 1);
    assert_int_equal(moe_capacity(64, 2, 8, 1.25), 20);
    assert_int_equal(moe_capacity(64, 2, 8, 1.26), 21); /* 20.16 */
    assert_int_equal(moe_capacity(6, 2, 3, 0.0), 6);    /* dropless */
    assert_int_equal(moe_capacity(6, 2, 3, 1e6), 6);    /* never above N */
    assert_int_equal(moe_capacity(0, 2, 4, 1.0), 0);
}

/* N = 6, E = 3, k = 2: idx (choice 0, choice 1) per token; expert 0 gets 5 assignments. */
enum { A_N = 6, A_E = 3, A_K = 2 };
static const int a_idx[A_N * A_K] = {0, 1, /* t0 */ 1, 0, /* t1 */ 0, 2, /* t2 */
                                     2, 0, /* t3 */ 0, 1, /* t4 */ 1, 2 /* t5 */};
/* Only expert 0 is over capacity, so only column 0 matters: t4 .7 > t2 .6 > t0 .5 > t1 .2 = t3 .2 */
static const float a_probs[A_N * A_E] = {0.5f, 0.3f, 0.2f, 0.2f, 0.7f, 0.1f, 0.6f, 0.1f, 0.3f,
                                         0.2f, 0.1f, 0.7f, 0.7f, 0.2f, 0.1f, 0.1f, 0.5f, 0.4f};
static const int a_load[A_E] = {5, 4, 3};

/* cf = 1: cap = 4. 'position' keeps tokens 0..3 of expert 0 (t4's choice 0 dropped). */
static void position_keeps_earliest_tokens_exact(void **state) {
    (void)state;
    moe_plan_t p;
    moe_plan_create(&p, A_N, A_E, A_K);
    moe_plan_build(&p, a_idx, a_probs, A_N, 1.0, MOE_DROP_POSITION);
    const int kept[] = {4, 4, 3}, offset[] = {0, 4, 8, 11};
    const int token[] = {0, 1, 2, 3, /* e1 */ 0, 1, 4, 5, /* e2 */ 2, 3, 5};
    const int choice[] = {0, 1, 0, 1, /* e1 */ 1, 0, 1, 0, /* e2 */ 1, 0, 1};
    check_plan(&p, &(want_plan_t){4, 11, 1, a_load, kept, offset, token, choice});
    moe_plan_destroy(&p);
}

/* Context parallelism: the 'position' plan above cut to the odd tokens (t1, t3, t5 -> local 0,
 * 1, 2) and to the even ones (t0, t2, t4 -> 0, 1, 2): each keeps the whole plan's load and cap,
 * its own kept rows in the whole plan's order; the even half owns the one drop (t4's choice 0). */
static void restrict_cuts_the_plan_to_local_tokens_exact(void **state) {
    (void)state;
    moe_plan_t g, p;
    moe_plan_create(&g, A_N, A_E, A_K);
    moe_plan_create(&p, A_N / 2, A_E, A_K);
    moe_plan_build(&g, a_idx, a_probs, A_N, 1.0, MOE_DROP_POSITION);
    const int odd_of[A_N] = {-1, 0, -1, 1, -1, 2}, even_of[A_N] = {0, -1, 1, -1, 2, -1};
    moe_plan_restrict(&p, &g, odd_of, A_N / 2);
    const int okept[] = {2, 2, 2}, ooff[] = {0, 2, 4, 6}, otok[] = {0, 1, 0, 2, 1, 2};
    const int ochoice[] = {1, 1, 0, 0, 0, 1};
    check_plan(&p, &(want_plan_t){4, 6, 0, a_load, okept, ooff, otok, ochoice});
    assert_int_equal(p.N, A_N / 2);
    moe_plan_restrict(&p, &g, even_of, A_N / 2);
    const int ekept[] = {2, 2, 1}, eoff[] = {0, 2, 4, 5}, etok[] = {0, 1, 0, 2, 1};
    const int echoice[] = {0, 0, 1, 1, 1};
    check_plan(&p, &(want_plan_t){4, 5, 1, a_load, ekept, eoff, etok, echoice});
    moe_plan_destroy(&p);
    moe_plan_destroy(&g);
}

/* 'probs' keeps t4, t2, t0 and of the tie t1 = t3 the smaller, t1: listed 0, 1, 2, 4. */
static void probs_keeps_largest_ties_to_smaller_token_exact(void **state) {
    (void)state;
    moe_plan_t p;
    moe_plan_create(&p, A_N, A_E, A_K);
    moe_plan_build(&p, a_idx, a_probs, A_N, 1.0, MOE_DROP_PROBS);
    const int kept[] = {4, 4, 3}, offset[] = {0, 4, 8, 11};
    const int token[] = {0, 1, 2, 4, /* e1 */ 0, 1, 4, 5, /* e2 */ 2, 3, 5};
    const int choice[] = {0, 1, 0, 0, /* e1 */ 1, 0, 1, 0, /* e2 */ 1, 0, 1};
    check_plan(&p, &(want_plan_t){4, 11, 1, a_load, kept, offset, token, choice});
    moe_plan_destroy(&p);
}

/* cf = 0: cap = N, every assignment kept, both policies alike. */
static void dropless_keeps_everything_exact(void **state) {
    (void)state;
    const int kept[] = {5, 4, 3}, offset[] = {0, 5, 9, 12};
    const int token[] = {0, 1, 2, 3, 4, /* e1 */ 0, 1, 4, 5, /* e2 */ 2, 3, 5};
    const int choice[] = {0, 1, 0, 1, 0, /* e1 */ 1, 0, 1, 0, /* e2 */ 1, 0, 1};
    for (int policy = 0; policy < 2; policy++) {
        moe_plan_t p;
        moe_plan_create(&p, A_N, A_E, A_K);
        moe_plan_build(&p, a_idx, a_probs, A_N, 0.0, policy ? MOE_DROP_POSITION : MOE_DROP_PROBS);
        check_plan(&p, &(want_plan_t){A_N, 12, 0, a_load, kept, offset, token, choice});
        moe_plan_destroy(&p);
    }
}

/* k = 1, N = 5, E = 2, cf = 1: cap = ceil(2.5) = 3; expert 1 gets t0..t3 (p .9 .6 .8 .7). */
static void top1_both_policies_exact(void **state) {
    (void)state;
    const int idx[5] = {1, 1, 1, 1, 0};
    const float probs[5 * 2] = {0.1f, 0.9f, 0.4f, 0.6f, 0.2f, 0.8f, 0.3f, 0.7f, 0.6f, 0.4f};
    const int load[] = {1, 4}, kept[] = {1, 3}, offset[] = {0, 1, 4}, choice[] = {0, 0, 0, 0};
    const int token_position[] = {4, 0, 1, 2}, token_probs[] = {4, 0, 2, 3};
    moe_plan_t p;
    moe_plan_create(&p, 5, 2, 1);
    moe_plan_build(&p, idx, probs, 5, 1.0, MOE_DROP_POSITION);
    check_plan(&p, &(want_plan_t){3, 4, 1, load, kept, offset, token_position, choice});
    moe_plan_build(&p, idx, probs, 5, 1.0, MOE_DROP_PROBS); /* the same plan, built again */
    check_plan(&p, &(want_plan_t){3, 4, 1, load, kept, offset, token_probs, choice});
    moe_plan_destroy(&p);
}

/* N = 4, E = 4, k = 2, cf = 0.5: cap = 1. Experts 0 and 1 both get t0, t1, t3; tokens that
 * lose both of their choices get no dispatch row. */
static void token_can_lose_both_choices_exact(void **state) {
    (void)state;
    const int idx[4 * 2] = {0, 1, 0, 1, 2, 3, 1, 0};
    /* expert 0: t0 .1, t1 .5, t3 .3 -> t1; expert 1: t0 .4, t1 .2, t3 .4 -> tie, t0 */
    const float probs[4 * 4] = {0.1f, 0.4f, 0.3f, 0.2f, 0.5f, 0.2f, 0.2f, 0.1f,
                                0.1f, 0.1f, 0.5f, 0.3f, 0.3f, 0.4f, 0.2f, 0.1f};
    const int load[] = {3, 3, 1, 1}, kept[] = {1, 1, 1, 1}, offset[] = {0, 1, 2, 3, 4};
    moe_plan_t p;
    moe_plan_create(&p, 4, 4, 2);
    moe_plan_build(&p, idx, probs, 4, 0.5, MOE_DROP_POSITION); /* t1 and t3 lose both */
    const int token_pos[] = {0, 0, 2, 2}, choice_pos[] = {0, 1, 0, 1};
    check_plan(&p, &(want_plan_t){1, 4, 4, load, kept, offset, token_pos, choice_pos});
    moe_plan_build(&p, idx, probs, 4, 0.5, MOE_DROP_PROBS); /* t3 loses both */
    const int token_probs[] = {1, 0, 2, 2}, choice_probs[] = {0, 1, 0, 1};
    check_plan(&p, &(want_plan_t){1, 4, 4, load, kept, offset, token_probs, choice_probs});
    moe_plan_destroy(&p);
}

/* ---------------------------------------------------------------- random routings */

static uint64_t rng_state = 0x082EFA98EC4E6C89ull;
static int irand(int n) { /* xorshift64*, uniform enough in [0, n) */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (int)((rng_state * 0x2545F4914F6CDD1Dull >> 33) % (uint64_t)n);
}

/* Brute force from the header: assignment (i, j) to e is kept iff fewer than cap assignments of
 * e go before it (smaller token; or, for 'probs', larger probability, ties smaller token); the
 * kept ones listed expert by expert, by token. */
static void check_against_brute_force(const moe_plan_t *p, const int *idx, const float *probs,
                                      int N, moe_drop_t policy) {
    const int E = p->E, k = p->k;
    int r = 0;
    for (int e = 0; e < E; e++) {
        int load = 0, kept = 0;
        assert_int_equal(p->offset[e], r);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < k; j++) {
                if (idx[i * k + j] != e) continue;
                load++;
                int before = 0;
                for (int i2 = 0; i2 < N; i2++)
                    for (int j2 = 0; j2 < k; j2++) {
                        if (idx[i2 * k + j2] != e || i2 == i) continue;
                        const float a = probs[i2 * E + e], b = probs[i * E + e];
                        before += policy == MOE_DROP_POSITION ? i2 < i : (a > b || (a == b && i2 < i));
                    }
                if (before >= p->cap) continue;
                kept++;
                if (p->token[r] != i || p->choice[r] != j)
                    fail_msg("expert %d row %d: got token %d choice %d, want %d %d", e, r,
                             p->token[r], p->choice[r], i, j);
                r++;
            }
        assert_int_equal(p->load[e], load);
        assert_int_equal(p->kept[e], kept);
    }
    assert_int_equal(p->M, r);
    assert_int_equal(p->offset[E], r);
    assert_int_equal(p->dropped, N * k - r);
}

/* Random routings skewed to expert 0 (overflow) with probabilities on a grid of 8 values (many
 * ties); one plan of N_max = 300 reused for N = 300, 17 and 1. */
static void random_routings_match_brute_force_exact(void **state) {
    (void)state;
    enum { N_MAX = 300, E = 6, K = 2 };
    int *idx = malloc(N_MAX * K * sizeof *idx);
    float *probs = malloc(N_MAX * E * sizeof *probs);
    moe_plan_t p;
    moe_plan_create(&p, N_MAX, E, K);
    const int sizes[3] = {N_MAX, 17, 1};
    const double factors[4] = {1.0, 1.25, 0.3, 0.0};
    for (int s = 0; s < 3; s++)
        for (int f = 0; f < 4; f++)
            for (int policy = 0; policy < 2; policy++) {
                const int N = sizes[s];
                for (int i = 0; i < N; i++) {
                    const int a = irand(3) == 0 ? irand(E) : 0; /* expert 0 twice as busy */
                    int b = irand(E - 1);
                    b = b >= a ? b + 1 : b; /* distinct from a */
                    idx[i * K] = a, idx[i * K + 1] = b;
                    for (int e = 0; e < E; e++) probs[i * E + e] = (float)irand(8) / 8.0f;
                }
                const moe_drop_t pol = policy ? MOE_DROP_POSITION : MOE_DROP_PROBS;
                moe_plan_build(&p, idx, probs, N, factors[f], pol);
                assert_int_equal(p.cap, moe_capacity(N, K, E, factors[f]));
                check_against_brute_force(&p, idx, probs, N, pol);
            }
    moe_plan_destroy(&p);
    free(idx), free(probs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(capacity_is_ceil_of_n_k_cf_over_e_exact),
        cmocka_unit_test(position_keeps_earliest_tokens_exact),
        cmocka_unit_test(probs_keeps_largest_ties_to_smaller_token_exact),
        cmocka_unit_test(dropless_keeps_everything_exact),
        cmocka_unit_test(top1_both_policies_exact),
        cmocka_unit_test(token_can_lose_both_choices_exact),
        cmocka_unit_test(random_routings_match_brute_force_exact),
        cmocka_unit_test(restrict_cuts_the_plan_to_local_tokens_exact),
    };
    return cmocka_run_group_tests_name("moe_route", tests, NULL, NULL);
}
