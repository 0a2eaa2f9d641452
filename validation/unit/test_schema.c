/* test_schema.c — the schema engine for a tool's own key table (src/config/schema.c): type,
 * count, finiteness and bounds of an entry, unknown keys with "did you mean", the parser's
 * capacity callback. Reference: the messages users see (llmmerge's &merge), compared as text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <mpi.h>
#include "config/namelist.h"
#include "config/schema.h"

#define PATH "m.nml"

static const schema_key_t keys[] = {
    {.key = "method", .type = SCHEMA_STR},
    {.key = "weights", .type = SCHEMA_REALS},
    {.key = "density", .type = SCHEMA_REALS, .lo_kind = '(', .hi_kind = ']', .lo = 0, .hi = 1, .why = "the fraction kept"},
    {.key = "seed", .type = SCHEMA_INT, .lo_kind = '[', .lo = 0},
    {.key = "normalize", .type = SCHEMA_BOOL},
    {.key = "t", .type = SCHEMA_REAL, .lo_kind = '[', .hi_kind = ']', .lo = 0, .hi = 1},
};
static const schema_t schema = {"merge", keys, (int)(sizeof keys / sizeof keys[0])};

/* Parses "&merge TEXT /" and checks its one entry (type, then bounds); returns the message or "". */
static const char *check(const char *text) {
    static char err[1024];
    char full[512];
    snprintf(full, sizeof full, "&merge %s /", text);
    namelist_t nl;
    err[0] = '\0';
    if (namelist_parse_keys(PATH, full, schema_key_capacity, (void *)&schema, &nl, err, sizeof err) != 0) return err;
    const nl_entry_t *e = &nl.groups[0].entries[0];
    int k = schema_find_key(&schema, e->key);
    if (k < 0) schema_unknown_key_error(&schema, e, PATH, err, sizeof err);
    else if (schema_check_entry(&schema, k, e, PATH, err, sizeof err) == 0)
        schema_check_bounds(&schema, k, e, PATH, err, sizeof err);
    namelist_free(&nl);
    return err;
}

static void expect(const char *text, const char *message) {
    const char *got = check(text);
    if (strcmp(got, message) != 0) fail_msg("'%s'\n  got:      %s\n  expected: %s", text, got, message);
}

static void valid_entries_pass(void **state) {
    (void)state;
    expect("method = 'ties'", "");
    expect("weights = 1, 0.5, 2", "");
    expect("density = 1", "");
    expect("seed = 0", "");
    expect("normalize = .true.", "");
    expect("t = 0", "");
}

static void type_count_and_finiteness_messages_match_llmmerge(void **state) {
    (void)state;
    expect("method = 'a', 'b'", "m.nml:1:22: &merge method: expected one value, got 2 values");
    expect("seed = 1.5", "m.nml:1:15: &merge seed: expected an integer, got real 1.5");
    expect("weights = 1, 'x'", "m.nml:1:21: &merge weights: expected a real number, got string 'x'");
    expect("normalize = 1", "m.nml:1:20: &merge normalize: expected a logical (.true. or .false.), got integer 1");
}

static void bounds_state_the_interval_and_the_reason(void **state) {
    (void)state;
    expect("density = 0.5, 0", "m.nml:1:23: &merge density: must be in (0, 1], got 0 (the fraction kept)");
    expect("t = 1.5", "m.nml:1:12: &merge t: must be in [0, 1], got 1.5");
    expect("seed = -1", "m.nml:1:15: &merge seed: must be >= 0, got -1");
}

static void unknown_keys_list_the_valid_ones_with_a_suggestion(void **state) {
    (void)state;
    expect("wieghts = 1", "m.nml:1:8: &merge unknown key 'wieghts' (valid keys: method, weights, density, seed, "
                          "normalize, t); did you mean 'weights'?");
    expect("zzz = 1", "m.nml:1:8: &merge unknown key 'zzz' (valid keys: method, weights, density, seed, normalize, t)");
}

static void capacity_is_one_for_scalars_and_open_for_lists(void **state) {
    (void)state;
    assert_int_equal(schema_key_capacity("merge", "seed", (void *)&schema), 1);
    assert_int_equal(schema_key_capacity("merge", "weights", (void *)&schema), 0);
    assert_int_equal(schema_key_capacity("merge", "nope", (void *)&schema), 0);
    assert_int_equal(schema_key_capacity("model", "seed", (void *)&schema), 0);
}

static void typo_distance_allows_one_edit_for_short_names_two_for_long(void **state) {
    (void)state;
    const char *names[] = {"ties", "linear", "slerp"};
    assert_string_equal(schema_closest("tie", names, 3), "ties");
    assert_string_equal(schema_closest("lniaer", names, 3), "linear");
    assert_null(schema_closest("xx", names, 3));
    char b[64];
    schema_format_bounds(false, '[', 0, 0, 0, b, sizeof b);
    assert_string_equal(b, ">= 0");
    schema_format_bounds(true, '(', 0, ')', 0.5, b, sizeof b);
    assert_string_equal(b, "in (0, 0.5)");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_entries_pass),
        cmocka_unit_test(type_count_and_finiteness_messages_match_llmmerge),
        cmocka_unit_test(bounds_state_the_interval_and_the_reason),
        cmocka_unit_test(unknown_keys_list_the_valid_ones_with_a_suggestion),
        cmocka_unit_test(capacity_is_one_for_scalars_and_open_for_lists),
        cmocka_unit_test(typo_distance_allows_one_edit_for_short_names_two_for_long),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
