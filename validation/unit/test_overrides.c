/* test_overrides.c — command-line overrides "group.key=value" (config_parse_overrides,
 * config_load_overrides in src/config/config_load.c): every kind of value reaches its field, an
 * override wins over the file and a later one over an earlier one, each error is the namelist
 * file's message with "command line argument N 'TEXT':" in place of "file:line:col:", and the
 * overrides are echoed by config_to_namelist. Reference: the key table and its messages, as
 * test_config.c checks them for the file; the expected values are written out here.
 * Run on more than one rank (command_line.sh does, with 2) it also checks that rank 0's
 * overrides are the ones every rank applies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <mpi.h>
#include "config/config.h"
#include "core/error.h"
#include "model/spec.h"
#include "test_fatal.h"

#define PATH "inputs/x.nml"
#define FILE_TEXT                                                  \
    "&run name = 'from_file' /\n"                                  \
    "&train max_steps = 50, lr = 3e-3, min_lr = 3e-4 /\n"          \
    "&data train_files = 'data/train_*.bin' /\n"

/* FILE_TEXT with the overrides args[0..n), the first at command-line position 2. */
static void parse_ok(config_t *cfg, int n, const char *const *args) {
    config_args_t a = {.args = args, .n = n, .first_argno = 2};
    if (setjmp(fatal_jump) != 0) fail_msg("unexpected error: %s", fatal_message);
    config_parse_overrides(PATH, FILE_TEXT, &a, cfg);
}

/* The one-line message of an override that must fail, without "llmtrain: error: ". */
static const char *override_error(const char *arg) {
    const char *args[] = {"train.max_steps=3", arg};
    config_args_t a = {.args = args, .n = 2, .first_argno = 2};
    config_t cfg;
    fatal_message[0] = '\0';
    if (setjmp(fatal_jump) == 0) {
        config_parse_overrides(PATH, FILE_TEXT, &a, &cfg);
        config_destroy(&cfg);
        fail_msg("expected an error, but this override was accepted: %s", arg);
    }
    return caught_user_error_text();
}

/* The message starts with `start` (the argument, at position 3) and contains `part`. */
#define EXPECT_ERROR(arg, start, part)                                                              \
    do {                                                                                            \
        const char *got_ = override_error(arg);                                                     \
        if (strncmp(got_, start, strlen(start)) != 0 || !strstr(got_, part))                        \
            fail_msg("message\n  %s\ndoes not start with\n  %s\nor does not contain\n  %s", got_, start, part); \
    } while (0)

/* ---- values --------------------------------------------------------------------------------- */

static void every_kind_of_value_reaches_its_field(void **state) {
    (void)state;
    const char *args[] = {"train.max_steps=3", "train.lr=1", "train.beta2=0.98d0", "run.seed=42",
                          "checkpoint.overwrite=T", "log.jsonl=.false.", "run.prompt_ids=1, 2 3",
                          "train.precision=BF16", "PARALLEL.DP=2", "train.micro_batch = 2"};
    config_t c;
    parse_ok(&c, 10, args);
    assert_int_equal(c.max_steps, 3);
    assert_true(c.lr == 1.0);      /* an integer is a fine real */
    assert_true(c.beta2 == 0.98);  /* Fortran's d exponent */
    assert_int_equal(c.seed, 42);
    assert_true(c.ckpt_overwrite);
    assert_false(c.jsonl);
    assert_int_equal(c.n_prompt_ids, 3);
    assert_int_equal(c.prompt_ids[0], 1);
    assert_int_equal(c.prompt_ids[2], 3);
    assert_string_equal(c.precision, "bf16"); /* choices any case, stored canonical */
    assert_int_equal(c.dp, 2);                /* names any case */
    assert_int_equal(c.micro_batch, 2);       /* blanks around '=' */
    assert_int_equal(c.global_batch, 4);      /* derived after the overrides: micro_batch * dp */
    assert_string_equal(c.name, "from_file"); /* untouched keys keep the file's value */
    config_destroy(&c);
}

static void strings_with_and_without_quotes(void **state) {
    (void)state;
    struct { const char *arg, *expected; } cases[] = {
        {"run.name=plain", "plain"},                         /* the shell removed the quotes */
        {"run.name=my 'odd' run", "my 'odd' run"},           /* unquoted: the text as given */
        {"run.name='quoted name'", "quoted name"},           /* quoted: namelist syntax */
        {"run.name=\"it's \"\"here\"\"\"", "it's \"here\""}, /* a doubled quote is one quote */
        {"run.name='a/b=c!d&e'", "a/b=c!d&e"},               /* syntax characters inside quotes */
        {"data.train_files=data/a*.bin, b?.bin", "data/a*.bin, b?.bin"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        config_t c;
        const char *key = strncmp(cases[i].arg, "run.", 4) == 0 ? "name" : "train_files";
        parse_ok(&c, 1, &cases[i].arg);
        const char *got = !strcmp(key, "name") ? c.name : c.train_files;
        if (strcmp(got, cases[i].expected) != 0)
            fail_msg("%s: got [%s], expected [%s]", cases[i].arg, got, cases[i].expected);
        config_destroy(&c);
    }
}

static void override_wins_over_the_file_and_the_last_one_wins(void **state) {
    (void)state;
    config_t c;
    const char *none[] = {NULL};
    parse_ok(&c, 0, none);
    assert_int_equal(c.max_steps, 50); /* the file's */
    assert_string_equal(c.overrides, "");
    config_destroy(&c);
    const char *args[] = {"train.max_steps=7", "run.name=first", "train.max_steps=9", "model.n_layer=3"};
    parse_ok(&c, 4, args);
    assert_int_equal(c.max_steps, 9);      /* over the file's 50 and the earlier 7 */
    assert_string_equal(c.name, "first");  /* over the file's 'from_file' */
    assert_int_equal(c.n_layer, 3);        /* a group the file does not have */
    assert_string_equal(c.overrides, "train.max_steps=7 run.name=first train.max_steps=9 model.n_layer=3");
    config_destroy(&c);
}

/* ---- errors: the file's messages, naming the argument ------------------------------------- */

static void unknown_key_and_group_name_the_argument_and_suggest(void **state) {
    (void)state;
    EXPECT_ERROR("train.max_step=20", "command line argument 3 'train.max_step=20': &train unknown key 'max_step' "
                 "(valid keys: max_steps, ", "did you mean 'max_steps'?");
    EXPECT_ERROR("trian.lr=1", "command line argument 3 'trian.lr=1': unknown group '&trian' (valid groups: ",
                 "did you mean '&train'?");
    EXPECT_ERROR("model.max_steps=2", "command line argument 3 'model.max_steps=2': &model unknown key 'max_steps'",
                 "'max_steps' belongs in &train");
}

static void not_group_key_value_is_refused_with_a_hint(void **state) {
    (void)state;
    EXPECT_ERROR("max_steps=3", "command line argument 3 'max_steps=3': expected GROUP.KEY=VALUE",
                 "did you mean train.max_steps=3?");
    EXPECT_ERROR("top_k=5", "command line argument 3 'top_k=5': expected GROUP.KEY=VALUE",
                 "did you mean run.top_k=5 or model.top_k=5?");
    EXPECT_ERROR("other.nml", "command line argument 3 'other.nml': expected GROUP.KEY=VALUE", "one namelist file");
    EXPECT_ERROR("train.=3", "command line argument 3 'train.=3': expected GROUP.KEY=VALUE", "");
    EXPECT_ERROR("train.max steps=3", "command line argument 3 'train.max steps=3': expected GROUP.KEY=VALUE", "");
}

static void bad_values_get_the_namelist_message_without_a_text_position(void **state) {
    (void)state;
    EXPECT_ERROR("train.max_steps=abc", "command line argument 3 'train.max_steps=abc': unquoted word 'abc' in "
                 "the value of key 'max_steps'", "");
    EXPECT_ERROR("parallel.dp=2.5", "command line argument 3 'parallel.dp=2.5': &parallel dp: expected an "
                 "integer, got real 2.5", "");
    EXPECT_ERROR("log.jsonl=1", "command line argument 3 'log.jsonl=1': &log jsonl: expected a logical "
                 "(.true. or .false.), got integer 1", "");
    EXPECT_ERROR("train.max_steps=", "command line argument 3 'train.max_steps=': key 'max_steps' has no value "
                 "after '='", "");
    EXPECT_ERROR("train.lr=1e", "command line argument 3 'train.lr=1e': malformed number '1e'", "");
    EXPECT_ERROR("run.name='open", "command line argument 3 'run.name='open': unterminated string", "");
    EXPECT_ERROR("run.mode=bogus", "command line argument 3 'run.mode=bogus': &run mode: 'bogus' is not one of "
                 "'train', 'eval', 'generate'", "");
    EXPECT_ERROR("train.max_steps=1, 2", "command line argument 3 'train.max_steps=1, 2': &train max_steps: "
                 "expected one value, got 2 values", "");
}

static void range_violations_are_the_tables(void **state) {
    (void)state;
    EXPECT_ERROR("train.max_steps=-1", "command line argument 3 'train.max_steps=-1': &train max_steps: must be "
                 ">= 0, got -1", "");
    EXPECT_ERROR("model.vocab_size=2147483521", "command line argument 3 'model.vocab_size=2147483521': &model "
                 "vocab_size: must be in [1, 2147483520], got 2147483521 (the padded vocabulary", "");
    EXPECT_ERROR("train.beta1=1.0", "command line argument 3 'train.beta1=1.0': &train beta1: must be in [0, 1), "
                 "got 1.0", "");
    EXPECT_ERROR("parallel.dp=3000000000", "command line argument 3 'parallel.dp=3000000000': &parallel dp: "
                 "3000000000 does not fit in a 32-bit integer", "");
}

static void unimplemented_keys_are_refused_as_in_the_file(void **state) {
    (void)state;
#ifndef LLMT_CUDA
    EXPECT_ERROR("run.device=cuda", "command line argument 3 'run.device=cuda': &run device: 'cuda': this "
                 "llmtrain was built without CUDA (build it with make CUDA=1, see INSTALL)", "use 'cpu'");
#endif
    config_t c;
    const char *defaults[] = {"model.dropout=0.0", "model.n_experts=0"}; /* the default is accepted */
    parse_ok(&c, 2, defaults);
    assert_true(c.dropout == 0.0);
    config_destroy(&c);
}

static void cross_key_checks_see_the_overrides_and_name_them(void **state) {
    (void)state;
    EXPECT_ERROR("train.min_lr=1", "command line argument 3 'train.min_lr=1': &train min_lr: min_lr = 1 "
                 "(command line argument 3) must be <= lr = 0.003 (line 2)", "");
    EXPECT_ERROR("train.loss_scale=8", "command line argument 3 'train.loss_scale=8': &train loss_scale: loss "
                 "scaling is for precision = 'fp16'", "");
    /* the file's keys checked against an override: d_model 64 does not divide by n_head 5 (the
     * model's shape rule, model/spec.c, with the positions the configuration kept) */
    const char *args[] = {"model.d_model=64", "model.n_head=5"};
    config_args_t a = {.args = args, .n = 2, .first_argno = 2};
    static config_t c; /* static: intact after the longjmp */
    if (setjmp(fatal_jump) == 0) {
        config_parse_overrides(PATH, FILE_TEXT, &a, &c);
        model_spec_check(MODEL_SPEC_OF(&c), c.ep, &c.where);
        fail_msg("d_model 64, n_head 5 was accepted");
    }
    config_destroy(&c);
    if (!strstr(fatal_message, "command line argument 2 'model.d_model=64': &model d_model: d_model = 64 "
                               "(command line argument 2) must be divisible by n_head = 5 (command line argument 3)"))
        fail_msg("got %s", fatal_message);
}

static void syntax_that_would_escape_the_key_is_refused(void **state) {
    (void)state;
    EXPECT_ERROR("train.lr=1/2", "command line argument 3 'train.lr=1/2': unexpected '/' in the value", "");
    EXPECT_ERROR("train.lr=1 / &model n_layer=9", "command line argument 3 'train.lr=1 / &model n_layer=9': "
                 "unexpected '/' in the value", "");
    EXPECT_ERROR("train.max_steps=3 lr=1", "command line argument 3 'train.max_steps=3 lr=1': unexpected '=' in "
                 "the value: one GROUP.KEY=VALUE per argument", "");
    EXPECT_ERROR("train.max_steps=3 !x", "command line argument 3 'train.max_steps=3 !x': unexpected '!'", "");
    EXPECT_ERROR("run.name='a'\n&model", "command line argument 3 'run.name='a'?&model': an override is one line", "");
}

/* ---- echo and load ------------------------------------------------------------------------ */

static void effective_configuration_shows_the_overrides_and_reads_back(void **state) {
    (void)state;
    const char *args[] = {"train.max_steps=3", "run.name=x y"};
    config_t c;
    parse_ok(&c, 2, args);
    int n = config_to_namelist(&c, NULL, 0);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    config_to_namelist(&c, text, n + 1);
    if (!strstr(text, "! inputs/x.nml with the command-line overrides: train.max_steps=3 run.name=x y\n"))
        fail_msg("no overrides line in\n%s", text);
    assert_non_null(strstr(text, "  max_steps       = 3\n"));
    assert_non_null(strstr(text, "  name            = 'x y'\n"));
    config_t back; /* the echo is a namelist that gives the same values without the overrides */
    if (setjmp(fatal_jump) != 0) fail_msg("the echo does not parse: %s", fatal_message);
    config_parse("echo.nml", text, &back);
    assert_int_equal(back.max_steps, 3);
    assert_string_equal(back.name, "x y");
    config_destroy(&back);
    free(text);
    config_destroy(&c);
}

/* Every rank loads with overrides, rank 0 with its own and the others with different ones: all
 * end with rank 0's, the file's text kept as read. */
static void load_applies_rank_0s_overrides_on_every_rank(void **state) {
    (void)state;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char path[64] = "/tmp/test_overrides_XXXXXX";
    if (rank == 0) {
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, FILE_TEXT, strlen(FILE_TEXT)), (ssize_t)strlen(FILE_TEXT));
        close(fd);
    }
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    const char *mine[] = {"train.max_steps=4", "run.name=rank0"};
    const char *other[] = {"train.max_steps=999"};
    config_args_t a = rank == 0 ? (config_args_t){.args = mine, .n = 2, .first_argno = 2}
                                : (config_args_t){.args = other, .n = 1, .first_argno = 5};
    config_t c;
    if (setjmp(fatal_jump) != 0) fail_msg("unexpected error: %s", fatal_message);
    config_load_overrides(path, &a, &c);
    assert_int_equal(c.max_steps, 4);
    assert_string_equal(c.name, "rank0");
    assert_string_equal(c.overrides, "train.max_steps=4 run.name=rank0");
    assert_string_equal(c.text, FILE_TEXT);
    config_destroy(&c);
    if (rank == 0) unlink(path); /* only rank 0 reads it */
}

static void load_reports_a_bad_override_with_its_position(void **state) {
    (void)state;
    char path[] = "/tmp/test_overrides_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, FILE_TEXT, strlen(FILE_TEXT)), (ssize_t)strlen(FILE_TEXT));
    close(fd);
    const char *args[] = {"train.max_steps=4", "train.lr=0"};
    config_args_t a = {.args = args, .n = 2, .first_argno = 3};
    config_t c;
    if (setjmp(fatal_jump) == 0) {
        config_load_overrides(path, &a, &c);
        fail_msg("train.lr=0 was accepted");
    }
    assert_string_equal(fatal_message, "llmtrain: error: command line argument 4 'train.lr=0': &train lr: must be > 0, "
                                       "got 0");
    unlink(path);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kind_of_value_reaches_its_field),
        cmocka_unit_test(strings_with_and_without_quotes),
        cmocka_unit_test(override_wins_over_the_file_and_the_last_one_wins),
        cmocka_unit_test(unknown_key_and_group_name_the_argument_and_suggest),
        cmocka_unit_test(not_group_key_value_is_refused_with_a_hint),
        cmocka_unit_test(bad_values_get_the_namelist_message_without_a_text_position),
        cmocka_unit_test(range_violations_are_the_tables),
        cmocka_unit_test(unimplemented_keys_are_refused_as_in_the_file),
        cmocka_unit_test(cross_key_checks_see_the_overrides_and_name_them),
        cmocka_unit_test(syntax_that_would_escape_the_key_is_refused),
        cmocka_unit_test(effective_configuration_shows_the_overrides_and_reads_back),
        cmocka_unit_test(load_applies_rank_0s_overrides_on_every_rank),
        cmocka_unit_test(load_reports_a_bad_override_with_its_position),
    };
    int failed = cmocka_run_group_tests(tests, install_hook, NULL);
    MPI_Finalize();
    return failed;
}
