/* test_spec.c — the model's shape rules (model/spec.c model_spec_check) and the positions the
 * configuration keeps for them (config/config_where.c config_key_where). Reference: the rules as
 * spec.h states them, each message compared whole (the key, both values, where each came from,
 * and file:line:col of the first key given, else its group's header, else 1:1; an override's
 * label when an override gave it); each rule's edge, which must pass; the grid rules
 * (model_spec_check_grid) pointing at their keys alike. Errors are caught through
 * error_set_fatal_hook + longjmp (test_fatal.h), exit code 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <mpi.h>
#include "config/config.h"
#include "core/error.h"
#include "model/spec.h"
#include "test_fatal.h"

#define PATH "inputs/x.nml"
#define DATA "&data train_files = 'data/train_*.bin' /\n"

/* Parses text with overrides args[0..n) at command-line position 2 on; the configuration's own
 * checks must accept it. */
static void parse(const char *text, int n, const char *const *args, config_t *cfg) {
    config_args_t a = {.args = args, .n = n, .first_argno = 2};
    if (setjmp(fatal_jump) != 0) fail_msg("the configuration refused it: %s\ntext:\n%s", fatal_message, text);
    config_parse_overrides(PATH, text, &a, cfg);
}

/* model_spec_check's message for spec s with ep and positions `where`, which must refuse it. */
static const char *refusal(const model_spec_t *s, int ep, const config_positions_t *where) {
    fatal_message[0] = '\0';
    if (setjmp(fatal_jump) == 0) {
        model_spec_check(s, ep, where);
        fail_msg("the model's rules accepted it");
    }
    return caught_user_error_text();
}

#define EXPECT_MESSAGE(got, want)                                                                   \
    do {                                                                                            \
        const char *got_ = (got);                                                                   \
        if (strcmp(got_, want) != 0) fail_msg("message\n  %s\nexpected\n  %s", got_, want);         \
    } while (0)

/* ---- positions kept after loading ---------------------------------------------------------- */

static void positions_of_the_file_the_overrides_and_the_defaults_are_kept(void **state) {
    (void)state;
    const char *args[] = {"model.n_head=4", "model.d_model=64"};
    config_t c;
    parse("&run name = 'x' /\n&model\n  d_model = 96, n_layer = 3\n/\n" DATA, 2, args, &c);
    char buf[32];
    config_where_t w = config_key_where(&c.where, "model", "n_layer"); /* the file's */
    assert_string_equal(w.file, PATH);
    assert_true(w.line == 3 && w.col == 17 && w.argno == 0 && w.arg == NULL);
    assert_string_equal(config_where_text(&w, buf), "line 3");
    w = config_key_where(&c.where, "model", "n_head"); /* an override's */
    assert_true(w.line == 0 && w.argno == 2);
    assert_string_equal(w.arg, "command line argument 2 'model.n_head=4'");
    assert_string_equal(config_where_text(&w, buf), "command line argument 2");
    w = config_key_where(&c.where, "model", "d_model"); /* the file's, replaced by an override */
    assert_true(w.line == 0 && w.argno == 3);
    assert_string_equal(w.arg, "command line argument 3 'model.d_model=64'");
    w = config_key_where(&c.where, "model", "seq_len"); /* the default, in a group of the file */
    assert_true(w.line == 0 && w.argno == 0 && w.arg == NULL && w.group_line == 2 && w.group_col == 1);
    assert_string_equal(config_where_text(&w, buf), "default");
    w = config_key_where(&c.where, "parallel", "ep"); /* a group the file does not have */
    assert_true(w.line == 0 && w.argno == 0 && w.group_line == 0);
    config_destroy(&c);
    config_t d;
    config_defaults(&d); /* no namelist: every key at its default */
    w = config_key_where(&d.where, "model", "n_head");
    assert_string_equal(w.file, "<namelist>");
    assert_true(w.line == 0 && w.argno == 0 && w.group_line == 0);
}

/* ---- each rule on a hand-built spec --------------------------------------------------------- */

/* A valid dense spec: 12 heads of 64, no experts. */
static model_spec_t base_spec(void) {
    config_t d;
    config_defaults(&d);
    return model_spec_from_config(&d);
}

static void each_rule_refuses_a_hand_built_spec_with_its_message(void **state) {
    (void)state;
    config_t d;
    config_defaults(&d); /* positions: every key at its default, no file */
    model_spec_t s = base_spec();
    s.d_model = 100; /* 100 / 12 */
    EXPECT_MESSAGE(refusal(&s, 1, &d.where), "<namelist>:1:1: &model d_model: d_model = 100 (default) must be "
                                             "divisible by n_head = 12 (default)");
    s = base_spec(), s.n_kv_head = 5;
    EXPECT_MESSAGE(refusal(&s, 1, &d.where), "<namelist>:1:1: &model n_kv_head: n_kv_head = 5 (default) must "
                                             "divide n_head = 12 (default)");
    s = base_spec(), s.n_kv_head = 0; /* a spec not built by model_spec_from_config: no division by 0 */
    EXPECT_MESSAGE(refusal(&s, 1, &d.where), "<namelist>:1:1: &model n_kv_head: n_kv_head = 0 (default) must "
                                             "divide n_head = 12 (default)");
    s = base_spec(), s.n_kv_head = 24; /* more k/v heads than heads */
    EXPECT_MESSAGE(refusal(&s, 1, &d.where), "<namelist>:1:1: &model n_kv_head: n_kv_head = 24 (default) must "
                                             "divide n_head = 12 (default)");
    s = base_spec(), s.rope = true, s.d_model = 12 * 65; /* head size 65 */
    EXPECT_MESSAGE(refusal(&s, 1, &d.where), "<namelist>:1:1: &model pos: 'rope' needs an even head size, but "
                                             "d_model / n_head = 780 / 12 = 65");
    s = base_spec(), s.n_experts = 4, s.top_k_moe = 5;
    EXPECT_MESSAGE(refusal(&s, 1, &d.where), "<namelist>:1:1: &model top_k: top_k = 5 (default) must be <= "
                                             "n_experts = 4 (default)");
    s = base_spec(), s.n_experts = 4, s.top_k_moe = 2, s.moe_every = 13; /* 12 layers */
    EXPECT_MESSAGE(refusal(&s, 1, &d.where), "<namelist>:1:1: &model moe_every: moe_every = 13 (default) must be "
                                             "<= n_layer = 12 (default) (block l is an MoE block when l % "
                                             "moe_every = moe_every - 1)");
    s = base_spec();
    EXPECT_MESSAGE(refusal(&s, 2, &d.where), "<namelist>:1:1: &parallel ep: ep = 2 (default) needs a "
                                             "Mixture-of-Experts model, but n_experts = 0 (default)");
    s = base_spec(), s.n_experts = 6, s.top_k_moe = 2;
    EXPECT_MESSAGE(refusal(&s, 4, &d.where), "<namelist>:1:1: &parallel ep: ep = 4 (default) must divide "
                                             "n_experts = 6 (default): each ep rank holds whole experts");
}

/* Each rule's edge passes: n_kv_head = n_head and 1, RoPE with an even head size, top_k =
 * n_experts, moe_every = n_layer, ep = n_experts, and the MoE keys of a dense model ignored. */
static void the_edge_of_each_rule_passes(void **state) {
    (void)state;
    config_t d;
    config_defaults(&d);
    if (setjmp(fatal_jump) != 0) fail_msg("refused: %s", fatal_message);
    model_spec_t s = base_spec();
    model_spec_check(&s, 1, &d.where);
    s.n_kv_head = 12, s.rope = true; /* head size 64 */
    model_spec_check(&s, 1, &d.where);
    s.n_kv_head = 1, s.d_model = 12 * 2; /* head size 2 */
    model_spec_check(&s, 1, &d.where);
    s = base_spec(), s.n_experts = 8, s.top_k_moe = 8, s.moe_every = 12;
    model_spec_check(&s, 8, &d.where);
    s = base_spec(), s.n_experts = 0, s.top_k_moe = 50, s.moe_every = 50; /* dense: not read */
    model_spec_check(&s, 1, &d.where);
}

/* ---- the messages point at the namelist ---------------------------------------------------- */

/* The configuration alone accepts these (the rules are the model's); model_spec_check refuses
 * them naming file:line:col of the first key given, else the group's header, or the override. */
typedef struct { const char *text, *args[2], *want; } position_case_t;

/* One case: its text parses; the model's rules refuse it with `want`, or accept it (want NULL). */
static void check_position_case(size_t i, const position_case_t *pc) {
    char text[512];
    snprintf(text, sizeof text, "%s" DATA, pc->text);
    const int n = pc->args[1] ? 2 : pc->args[0] ? 1 : 0;
    static config_t c; /* static: intact after the longjmp */
    parse(text, n, pc->args, &c);
    if (pc->want) {
        const char *got = refusal(MODEL_SPEC_OF(&c), c.ep, &c.where);
        if (strcmp(got, pc->want) != 0) fail_msg("case %zu:\n  got:      %s\n  expected: %s", i, got, pc->want);
    } else {
        if (setjmp(fatal_jump) != 0) fail_msg("case %zu refused: %s", i, fatal_message);
        model_spec_check(MODEL_SPEC_OF(&c), c.ep, &c.where);
    }
    config_destroy(&c);
}

/* The configuration alone accepts these (the rules are the model's); model_spec_check refuses
 * them naming file:line:col of the first key given, else the group's header, or the override. */
static void messages_point_at_the_keys_in_the_file_or_the_override(void **state) {
    (void)state;
    static const position_case_t cases[] = {
        {"&model\n  d_model = 100\n  n_head = 12\n/\n", {NULL},
         PATH ":2:3: &model d_model: d_model = 100 (line 2) must be divisible by n_head = 12 (line 3)"},
        {"&model n_head = 5 /\n", {NULL},
         PATH ":1:8: &model d_model: d_model = 768 (default) must be divisible by n_head = 5 (line 1)"},
        {"&run seed = 1 /\n&model\n  n_head = 4, d_model = 64, arch = 'llama', n_kv_head = 3\n/\n", {NULL},
         PATH ":3:45: &model n_kv_head: n_kv_head = 3 (line 3) must divide n_head = 4 (line 3)"},
        /* neither pos (arch's default) nor n_head given: the &model header */
        {"\n  &model arch = 'llama', d_model = 780 /\n", {NULL},
         PATH ":2:3: &model pos: 'rope' needs an even head size, but d_model / n_head = 780 / 12 = 65"},
        {"&parallel dp = 2, ep = 2 /\n", {NULL},
         PATH ":1:19: &parallel ep: ep = 2 (line 1) needs a Mixture-of-Experts model, but n_experts = 0 "
              "(default)"},
        {"&model n_experts = 4 /\n", {"model.top_k=5"},
         "command line argument 2 'model.top_k=5': &model top_k: top_k = 5 (command line argument 2) must be "
         "<= n_experts = 4 (line 1)"},
        {"&model n_experts = 4, top_k = 5 /\n", {"model.n_experts=3", "model.top_k=1"}, NULL}, /* accepted */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_position_case(i, &cases[i]);
}

/* One grid case: its text parses; model_spec_check_grid on its tp and pp refuses it with `want`. */
static void check_grid_case(size_t i, const char *body, const char *want) {
    char text[256];
    snprintf(text, sizeof text, "%s" DATA, body);
    static config_t c; /* static: intact after the longjmp */
    parse(text, 0, NULL, &c);
    fatal_message[0] = '\0';
    if (setjmp(fatal_jump) == 0) {
        model_spec_check_grid(MODEL_SPEC_OF(&c), c.tp, c.pp, &c.where);
        fail_msg("case %zu accepted", i);
    }
    const char *got = caught_user_error_text();
    if (strcmp(got, want) != 0) fail_msg("case %zu:\n  got:      %s\n  expected: %s", i, got, want);
    config_destroy(&c);
}

/* model_spec_check_grid: tp and pp against the model, pointing at the keys like the rules above. */
static void grid_rules_point_at_the_keys(void **state) {
    (void)state;
    static const struct { const char *text, *want; } cases[] = {
        {"&parallel tp = 5 /\n", PATH ":1:11: &parallel tp = 5 must divide &model n_head (12), d_ff (3072) and "
                                 "the padded vocabulary (50304)"},
        {"&model n_head = 12, n_kv_head = 3 /\n&parallel tp = 2 /\n",
         PATH ":1:21: &model n_kv_head = 3 and &parallel tp = 2: the k/v heads are split over tp when n_kv_head "
              ">= tp (tp must divide it) and replicated when n_kv_head < tp (n_kv_head must divide tp)"},
        {"&model n_experts = 2, d_ff_expert = 30 /\n&parallel\n  tp = 4\n/\n",
         PATH ":3:3: &parallel tp = 4 must divide &model d_ff_expert (30): each expert's MLP is split over tp "
              "like the dense one"},
        {"&model n_layer = 2 /\n&parallel pp = 3 /\n",
         PATH ":2:11: &parallel pp = 3 exceeds &model n_layer = 2 (each pipeline stage needs at least one layer)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_grid_case(i, cases[i].text, cases[i].want);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(positions_of_the_file_the_overrides_and_the_defaults_are_kept),
        cmocka_unit_test(each_rule_refuses_a_hand_built_spec_with_its_message),
        cmocka_unit_test(the_edge_of_each_rule_passes),
        cmocka_unit_test(messages_point_at_the_keys_in_the_file_or_the_override),
        cmocka_unit_test(grid_rules_point_at_the_keys),
    };
    int failed = cmocka_run_group_tests(tests, install_hook, NULL);
    MPI_Finalize();
    return failed;
}
