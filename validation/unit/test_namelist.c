/* test_namelist.c — the generic Fortran-namelist parser (src/config/namelist.c): every value
 * syntax it accepts, the positions it records, and every syntax error with its exact
 * "path:line:col: message". Reference: the Fortran 2018 namelist rules for what is accepted;
 * the messages are the ones users see, so they are compared as text. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cmocka.h>
#include <mpi.h>
#include "config/namelist.h"

#define PATH "inputs/x.nml"

/* Parses text that must be valid; a failure prints the parser's message. */
static void parse_ok(const char *text, namelist_t *nl) {
    char err[1024];
    if (namelist_parse(PATH, text, nl, err, sizeof err) != 0) fail_msg("unexpected error: %s\ntext:\n%s", err, text);
}

/* Parses text that must be invalid and checks the whole message. */
static void expect_error(const char *text, const char *expected) {
    namelist_t nl;
    char err[1024];
    if (namelist_parse(PATH, text, &nl, err, sizeof err) == 0) {
        namelist_free(&nl);
        fail_msg("expected error '%s' but the text parsed:\n%.300s%s", expected, text,
                 strlen(text) > 300 ? "..." : ""); /* the limit tests' texts are megabytes */
    }
    if (strcmp(err, expected) != 0) fail_msg("message differs\n  got:      %s\n  expected: %s", err, expected);
    assert_int_equal(nl.n_groups, 0); /* nothing left allocated */
}

static const nl_entry_t *entry(const namelist_t *nl, int g, int e) {
    assert_true(g < nl->n_groups);
    assert_true(e < nl->groups[g].n_entries);
    return &nl->groups[g].entries[e];
}

/* ---- accepted syntax ---------------------------------------------------------------------- */

static void names_are_lowercased_and_positions_are_1_based(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&Run\n  NAME = 'Mixed Case'\n  Seed=7 /\n", &nl);
    assert_int_equal(nl.n_groups, 1);
    assert_string_equal(nl.groups[0].name, "run");
    assert_int_equal(nl.groups[0].line, 1);
    assert_int_equal(nl.groups[0].col, 1);
    const nl_entry_t *e = entry(&nl, 0, 0);
    assert_string_equal(e->key, "name");
    assert_int_equal(e->line, 2);
    assert_int_equal(e->col, 3);
    assert_int_equal(e->values[0].line, 2);
    assert_int_equal(e->values[0].col, 10);
    assert_string_equal(e->values[0].s, "Mixed Case"); /* values keep their case */
    e = entry(&nl, 0, 1);
    assert_string_equal(e->key, "seed");
    assert_int_equal(e->line, 3);
    assert_int_equal(e->values[0].col, 8);
    namelist_free(&nl);
}

static void text_outside_groups_and_comments_are_ignored(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("This run: a & b, see notes / 42\n"
             "! &commented_out x = 1 /\n"
             "&a x = 1 ! a comment with & and / and 'quote\n"
             "   y = 2 / trailing text after the group\n"
             "between groups\n"
             "&b z = 3 /\n",
             &nl);
    assert_int_equal(nl.n_groups, 2);
    assert_string_equal(nl.groups[0].name, "a");
    assert_int_equal(nl.groups[0].n_entries, 2);
    assert_int_equal(entry(&nl, 0, 1)->values[0].i, 2);
    assert_string_equal(nl.groups[1].name, "b");
    namelist_free(&nl);
}

static void groups_close_with_slash_ampersand_end_or_dollar_end(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&a x = 1 &end\n$b y = 2 $END\n&c z = 3\n/\n&d w = 4 &End", &nl);
    assert_int_equal(nl.n_groups, 4);
    assert_string_equal(nl.groups[1].name, "b");
    assert_int_equal(entry(&nl, 3, 0)->values[0].i, 4);
    namelist_free(&nl);
}

static void empty_text_and_empty_group_are_valid(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("", &nl);
    assert_int_equal(nl.n_groups, 0);
    namelist_free(&nl);
    parse_ok("just prose, no groups\n", &nl);
    assert_int_equal(nl.n_groups, 0);
    namelist_free(&nl);
    parse_ok("&empty /", &nl);
    assert_int_equal(nl.n_groups, 1);
    assert_int_equal(nl.groups[0].n_entries, 0);
    namelist_free(&nl);
}

static void integers_take_sign_and_64_bits(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = 42, b = -7, c = +3, d = 9000000000, e = 0 /", &nl);
    const int64_t want[] = {42, -7, 3, 9000000000LL, 0};
    for (int i = 0; i < 5; i++) {
        const nl_value_t *v = &entry(&nl, 0, i)->values[0];
        assert_int_equal(v->kind, NL_INTEGER);
        assert_true(v->i == want[i]);
        assert_true(v->r == (double)want[i]);
    }
    namelist_free(&nl);
}

static void reals_in_every_fortran_spelling_read_exactly(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = 1e-3, b = 1.0d-3, c = 1.5D+2, d = -.5, e = 5., f = 2.5E3, g = +0.25, h = 3d0 /", &nl);
    const double want[] = {1e-3, 1.0e-3, 1.5e+2, -0.5, 5.0, 2.5e3, 0.25, 3.0};
    for (int i = 0; i < 8; i++) {
        const nl_value_t *v = &entry(&nl, 0, i)->values[0];
        assert_int_equal(v->kind, NL_REAL);
        if (v->r != want[i]) fail_msg("value %d (%s): got %.17g expected %.17g", i, v->raw, v->r, want[i]);
    }
    assert_string_equal(entry(&nl, 0, 1)->values[0].raw, "1.0d-3"); /* kept as written, for messages */
    namelist_free(&nl);
}

static void logicals_in_every_spelling_any_case(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = .true., b = .FALSE., c = T, d = f, e = .t., f = .F., g = true, h = False /", &nl);
    const bool want[] = {true, false, true, false, true, false, true, false};
    for (int i = 0; i < 8; i++) {
        const nl_value_t *v = &entry(&nl, 0, i)->values[0];
        assert_int_equal(v->kind, NL_LOGICAL);
        assert_int_equal(v->b, want[i]);
    }
    namelist_free(&nl);
}

static void strings_in_either_quote_with_doubled_quote_escape(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = 'it''s', b = \"say \"\"hi\"\"\", c = \"it's\", d = '! not a comment / nor end',\n"
             "   e = '', f = 'a&b' /",
             &nl);
    const char *want[] = {"it's", "say \"hi\"", "it's", "! not a comment / nor end", "", "a&b"};
    for (int i = 0; i < 6; i++) {
        const nl_value_t *v = &entry(&nl, 0, i)->values[0];
        assert_int_equal(v->kind, NL_STRING);
        assert_string_equal(v->s, want[i]);
    }
    assert_string_equal(entry(&nl, 0, 0)->values[0].raw, "'it''s'");
    namelist_free(&nl);
}

static void arrays_separated_by_commas_blanks_and_newlines(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g ids = 1, 2 3\n        4 ,5 ! five\n   next = 'x' 'y'\n/", &nl);
    const nl_entry_t *e = entry(&nl, 0, 0);
    assert_int_equal(e->n_values, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(e->values[i].i, i + 1);
    assert_int_equal(e->values[3].line, 2);
    e = entry(&nl, 0, 1);
    assert_int_equal(e->n_values, 2);
    assert_string_equal(e->values[1].s, "y");
    namelist_free(&nl);
}

static void blank_separated_values_end_at_the_next_key(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = 1 2 b = 3 c=4/", &nl);
    assert_int_equal(entry(&nl, 0, 0)->n_values, 2);
    assert_string_equal(entry(&nl, 0, 1)->key, "b");
    assert_int_equal(entry(&nl, 0, 2)->values[0].i, 4);
    namelist_free(&nl);
}

static void keys_named_t_or_f_are_keys_not_logicals(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = T t = 1 f = F /", &nl);
    assert_int_equal(nl.groups[0].n_entries, 3);
    assert_int_equal(entry(&nl, 0, 0)->n_values, 1);
    assert_string_equal(entry(&nl, 0, 1)->key, "t");
    assert_int_equal(entry(&nl, 0, 2)->values[0].b, false);
    namelist_free(&nl);
}

static void trailing_comma_before_key_or_slash_is_a_separator(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = 1, b = 2, /", &nl);
    assert_int_equal(nl.groups[0].n_entries, 2);
    assert_int_equal(entry(&nl, 0, 1)->n_values, 1);
    namelist_free(&nl);
}

static void repeat_count_expands_to_copies(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g x = 3*0.5, 2*'s' 1 /", &nl);
    const nl_entry_t *e = entry(&nl, 0, 0);
    assert_int_equal(e->n_values, 6);
    for (int i = 0; i < 3; i++) assert_true(e->values[i].kind == NL_REAL && e->values[i].r == 0.5);
    assert_string_equal(e->values[4].s, "s");
    assert_int_equal(e->values[5].i, 1);
    namelist_free(&nl);
}

static void duplicates_are_kept_in_file_order_for_the_schema_to_judge(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g a = 1 a = 2 / &g b = 3 /", &nl);
    assert_int_equal(nl.n_groups, 2);
    assert_int_equal(nl.groups[0].n_entries, 2);
    assert_int_equal(entry(&nl, 0, 1)->values[0].i, 2);
    namelist_free(&nl);
}

static void crlf_line_endings_and_tabs_are_blanks(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("&g\r\n\ta\t=\t1,\r\n\tb = 'x'\r\n/\r\n", &nl);
    assert_int_equal(nl.groups[0].n_entries, 2);
    assert_int_equal(entry(&nl, 0, 1)->line, 3);
    assert_string_equal(entry(&nl, 0, 1)->values[0].s, "x");
    namelist_free(&nl);
}

static void utf8_byte_order_mark_is_skipped(void **state) {
    (void)state;
    namelist_t nl;
    parse_ok("\xEF\xBB\xBF&g a = 1 /", &nl);
    assert_int_equal(nl.n_groups, 1);
    namelist_free(&nl);
}

static void kind_names_read_well_in_messages(void **state) {
    (void)state;
    assert_string_equal(namelist_kind_name(NL_INTEGER), "integer");
    assert_string_equal(namelist_kind_name(NL_REAL), "real");
    assert_string_equal(namelist_kind_name(NL_STRING), "string");
    assert_string_equal(namelist_kind_name(NL_LOGICAL), "logical");
}

/* ---- syntax errors: exact messages -------------------------------------------------------- */

static void unterminated_string_points_at_its_opening_quote(void **state) {
    (void)state;
    expect_error("&g\n  s = 'abc\n/", PATH ":2:7: unterminated string: missing closing ' before end of line");
    expect_error("&g s = \"abc", PATH ":1:8: unterminated string: missing closing \" before end of file");
}

static void missing_equals_after_key(void **state) {
    (void)state;
    expect_error("&model\n  n_layer 4\n/", PATH ":2:11: missing '=' after key 'n_layer' in group '&model' (found '4')");
    expect_error("&g a: 1 /", PATH ":1:5: missing '=' after key 'a' in group '&g' (found ':')");
    expect_error("&g a", PATH ":1:5: missing '=' after key 'a' in group '&g' (found end of file)");
}

static void group_not_closed_before_end_of_file(void **state) {
    (void)state;
    expect_error("\n&train lr = 1\n", PATH ":2:1: group '&train' is not closed by '/' (reached end of file)");
}

static void group_not_closed_before_next_group(void **state) {
    (void)state;
    expect_error("&run seed = 1\n&model n_layer = 2 /",
                 PATH ":2:1: group '&run' (line 1) is not closed by '/' before '&model'");
}

static void end_without_open_group(void **state) {
    (void)state;
    expect_error("&a x = 1 /\n&end", PATH ":2:1: '&end' without an open group");
}

static void unexpected_character_where_a_key_belongs(void **state) {
    (void)state;
    expect_error("&g\n  = 5 /", PATH ":2:3: unexpected '=' in group '&g'; expected a key name, '/' or '&end'");
    expect_error("&g 5 = 1 /", PATH ":1:4: unexpected '5' in group '&g'; expected a key name, '/' or '&end'");
}

static void unexpected_character_after_a_value(void **state) {
    (void)state;
    expect_error("&g x = 1e-3x /", PATH ":1:12: unexpected 'x' after number 1e-3");
    expect_error("&g x = 1.2.3 /", PATH ":1:11: unexpected '.' after number 1.2");
    expect_error("&g s = 'a'b /", PATH ":1:11: unexpected 'b' after value 'a' of key 's'");
    expect_error("&g b = .true.x /", PATH ":1:14: unexpected 'x' after value .true. of key 'b'");
}

static void unexpected_character_in_a_value(void **state) {
    (void)state;
    expect_error("&g x = @ /", PATH ":1:8: unexpected '@' in the value of key 'x'");
    expect_error("&g x = \x01 /", PATH ":1:8: unexpected byte 0x01 in the value of key 'x'");
}

static void malformed_numbers_and_logicals(void **state) {
    (void)state;
    expect_error("&g x = 1e /", PATH ":1:8: malformed number '1e'");
    expect_error("&g x = 1.5e+ /", PATH ":1:8: malformed number '1.5e+'");
    expect_error("&g x = .yes. /", PATH ":1:8: malformed logical '.yes.'; use .true. or .false.");
    expect_error("&g x = .true /", PATH ":1:8: malformed logical '.true'; use .true. or .false.");
}

static void out_of_range_numbers(void **state) {
    (void)state;
    expect_error("&g x = 99999999999999999999 /", PATH ":1:8: integer 99999999999999999999 is out of range");
    expect_error("&g x = 1d999 /", PATH ":1:8: real 1d999 is out of range");
}

static void unquoted_word_is_not_a_string(void **state) {
    (void)state;
    expect_error("&run out_dir = runs/x /",
                 PATH ":1:16: unquoted word 'runs' in the value of key 'out_dir': strings need quotes ('runs'), "
                      "logicals are .true./.false., and a new key needs '='");
}

static void indexed_assignment_is_refused_with_the_alternative(void **state) {
    (void)state;
    expect_error("&run prompt_ids(2) = 5 /",
                 PATH ":1:16: indexed assignment 'prompt_ids(...)' is not supported; give the whole array: "
                      "prompt_ids = v1, v2, ...");
}

static void null_values_and_missing_values(void **state) {
    (void)state;
    expect_error("&g x = 1,,3 /", PATH ":1:10: empty value between commas for key 'x' (null values are not supported)");
    expect_error("&g x = , 1 /", PATH ":1:8: missing value before ',' for key 'x'");
    expect_error("&g x = /", PATH ":1:4: key 'x' has no value after '='");
    expect_error("&g x = y = 1 /", PATH ":1:4: key 'x' has no value after '='");
}

static void bad_repeat_counts(void **state) {
    (void)state;
    expect_error("&g x = 3* /", PATH ":1:8: repeat count '3*' must be followed by a value (null values are not supported)");
    expect_error("&g x = 0*1 /", PATH ":1:8: repeat count '0*' must be an integer in [1, 100000]");
    expect_error("&g x = 2.5*1 /", PATH ":1:8: repeat count '2.5*' must be an integer in [1, 100000]");
    expect_error("&g x = 2*3*4 /", PATH ":1:11: a repeat count cannot be repeated");
}

/* ---- limits: no text makes the parser use unbounded memory (namelist.c NL_MAX_*) ------------- */

/* n copies of `piece` after `head`, then `tail`: a large text built in memory. */
static char *repeat_text(const char *head, const char *piece, long n, const char *tail) {
    size_t lh = strlen(head), lp = strlen(piece), lt = strlen(tail);
    char *text = malloc(lh + (size_t)n * lp + lt + 1);
    assert_non_null(text);
    memcpy(text, head, lh);
    for (long i = 0; i < n; i++) memcpy(text + lh + (size_t)i * lp, piece, lp);
    memcpy(text + lh + (size_t)n * lp, tail, lt + 1);
    return text;
}

static void repeat_counts_stop_at_one_million_values_in_total(void **state) {
    (void)state;
    namelist_t nl;
    /* 10 x 100000 = exactly the limit: fine, and every copy is there */
    char *text = repeat_text("&g a =", " 100000*'x'", 10, " /");
    parse_ok(text, &nl);
    assert_int_equal(entry(&nl, 0, 0)->n_values, 1000000);
    assert_string_equal(entry(&nl, 0, 0)->values[999999].s, "x");
    namelist_free(&nl);
    free(text);
    /* 999999 values, then 2*1: the repeat count that would make the 1000001st value is named */
    text = repeat_text("&g a = 99999*'x'", " 100000*'x'", 9, "\n  b = 2*1 /");
    expect_error(text, PATH ":2:7: too many values: a namelist holds at most 1000000 values (the limit; "
                        "each copy made by a repeat count r*value counts)");
    free(text);
}

static void many_keys_stop_at_one_million_values_in_total(void **state) {
    (void)state;
    /* a million one-value keys fill the limit; the next plain value (line 2, col 10) crosses it */
    char *text = repeat_text("&g", " k=1", 1000000, "\n  last = 7 /");
    expect_error(text, PATH ":2:10: too many values: a namelist holds at most 1000000 values (the limit; "
                        "each copy made by a repeat count r*value counts)");
    free(text);
    /* the count is per parse, not per group */
    text = repeat_text("&g a = 100000*1 / &h b = 100000*1 /", " &i c = 100000*1 /", 8, " &j d = 1 /");
    expect_error(text, PATH ":1:188: too many values: a namelist holds at most 1000000 values (the limit; "
                        "each copy made by a repeat count r*value counts)");
    free(text);
}

static void text_longer_than_16_mib_is_refused_at_the_first_byte_past_it(void **state) {
    (void)state;
    enum { LIMIT = 16 << 20 };
    /* a comment that fills exactly 16 MiB parses (nothing in it) */
    char *text = repeat_text("!", "x", LIMIT - 2, "\n");
    assert_int_equal(strlen(text), LIMIT);
    namelist_t nl;
    parse_ok(text, &nl);
    assert_int_equal(nl.n_groups, 0);
    namelist_free(&nl);
    free(text);
    /* one byte more: refused, pointing at that byte (line 3 starts at byte 7) */
    text = repeat_text("&g /\n!\n", "x", LIMIT - 7, "!");
    assert_int_equal(strlen(text), LIMIT + 1);
    expect_error(text, PATH ":3:16777210: the namelist text is longer than 16777216 bytes (16 MiB, the limit); "
                        "is this a namelist file?");
    free(text);
}

/* ---- repeat counts against what a key holds (namelist_parse_keys) -------------------------- */

/* The test's schema: s a scalar, a an array of at most 4, anything else unknown (0). */
static int test_capacity(const char *group, const char *key, void *ctx) {
    (void)ctx;
    if (strcmp(group, "g") != 0) return 0;
    return !strcmp(key, "s") ? 1 : !strcmp(key, "a") ? 4 : 0;
}

static const char *parse_keys_error(const char *text, char *err, size_t len) {
    namelist_t nl;
    if (namelist_parse_keys(PATH, text, test_capacity, NULL, &nl, err, len) == 0) {
        namelist_free(&nl);
        fail_msg("expected an error, but this parsed:\n%.300s", text);
    }
    assert_int_equal(nl.n_groups, 0);
    return err;
}

/* Under an address-space limit of what the process maps now + 1 GiB: a parser that expands a
 * repeat count into gigabytes fails here (the test dies) instead of swapping a shared machine. */
static struct rlimit limit_address_space(void) {
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld", &pages) != 1) pages = 0;
    if (f) fclose(f);
    struct rlimit lim = old;
    rlim_t want = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
    if (pages > 0 && (old.rlim_max == RLIM_INFINITY || want <= old.rlim_max)) lim.rlim_cur = want;
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    return old;
}

/* 100000*'<40 kB>': 4 GB of copies. */
static char *huge_repeat_text(const char *key) {
    enum { LEN = 40000 };
    char *text = malloc(LEN + 64);
    assert_non_null(text);
    int n = snprintf(text, 64, "&g\n  %s = 100000*'", key);
    memset(text + n, 'x', LEN);
    strcpy(text + n + LEN, "'\n/\n");
    return text;
}

static void repeat_count_beyond_the_keys_capacity_is_refused_before_any_copy(void **state) {
    (void)state;
    char err[1024];
    assert_string_equal(parse_keys_error("&g s = 3*'x' /", err, sizeof err),
                        PATH ":1:8: &g s: expected one value, got 3 values (the repeat count '3*'), refused "
                             "before making them");
    assert_string_equal(parse_keys_error("&g a = 1, 4*2 /", err, sizeof err),
                        PATH ":1:11: &g a: at most 4 values allowed, got 5 (the repeat count '4*'), refused "
                             "before making them");
    assert_string_equal(parse_keys_error("&g a = 5*2 /", err, sizeof err),
                        PATH ":1:8: &g a: at most 4 values allowed, got 5 (the repeat count '5*'), refused "
                             "before making them");
    /* within the capacity, and keys the caller does not know: expanded as before */
    namelist_t nl;
    assert_int_equal(namelist_parse_keys(PATH, "&g a = 2, 3*7 s = 1*'x' z = 9*1 / &h s = 2*1 /",
                                         test_capacity, NULL, &nl, err, sizeof err), 0);
    assert_int_equal(entry(&nl, 0, 0)->n_values, 4);
    assert_int_equal(entry(&nl, 0, 1)->n_values, 1);
    assert_int_equal(entry(&nl, 0, 2)->n_values, 9);
    assert_int_equal(entry(&nl, 1, 0)->n_values, 2);
    namelist_free(&nl);
    /* a 40 kB string 100000 times for a scalar: refused at the count, nothing copied */
    struct rlimit old = limit_address_space();
    char *text = huge_repeat_text("s");
    assert_string_equal(parse_keys_error(text, err, sizeof err),
                        PATH ":2:7: &g s: expected one value, got 100000 values (the repeat count "
                             "'100000*'), refused before making them");
    free(text);
    setrlimit(RLIMIT_AS, &old);
}

static void repeat_counts_copy_at_most_64_mib_of_strings(void **state) {
    (void)state;
    struct rlimit old = limit_address_space();
    char *text = huge_repeat_text("k"); /* no capacity known: the copy limit stops it */
    expect_error(text, PATH ":2:7: the repeat count '100000*' copies a value of 40002 bytes 100000 times: "
                        "more than the 64 MiB that repeat counts may copy in one namelist (the limit)");
    free(text);
    setrlimit(RLIMIT_AS, &old);
    /* the copies add up over the parse: 40 MB fits alone, twice does not */
    text = repeat_text("&g a = 10000*'", "x", 2000, "'");
    char *two = malloc(2 * strlen(text) + 16);
    assert_non_null(two);
    sprintf(two, "%s\n b = %s /", text, text + 7);
    namelist_t nl;
    char *one = malloc(strlen(text) + 4);
    assert_non_null(one);
    sprintf(one, "%s /", text);
    parse_ok(one, &nl);
    assert_int_equal(entry(&nl, 0, 0)->n_values, 10000);
    namelist_free(&nl);
    expect_error(two, PATH ":2:6: the repeat count '10000*' copies a value of 2002 bytes 10000 times: "
                       "more than the 64 MiB that repeat counts may copy in one namelist (the limit)");
    free(one);
    free(two);
    free(text);
}

static void path_defaults_when_none_is_given(void **state) {
    (void)state;
    namelist_t nl;
    char err[256];
    assert_int_equal(namelist_parse(NULL, "&g x = @ /", &nl, err, sizeof err), -1);
    assert_string_equal(err, "<namelist>:1:8: unexpected '@' in the value of key 'x'");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_are_lowercased_and_positions_are_1_based),
        cmocka_unit_test(text_outside_groups_and_comments_are_ignored),
        cmocka_unit_test(groups_close_with_slash_ampersand_end_or_dollar_end),
        cmocka_unit_test(empty_text_and_empty_group_are_valid),
        cmocka_unit_test(integers_take_sign_and_64_bits),
        cmocka_unit_test(reals_in_every_fortran_spelling_read_exactly),
        cmocka_unit_test(logicals_in_every_spelling_any_case),
        cmocka_unit_test(strings_in_either_quote_with_doubled_quote_escape),
        cmocka_unit_test(arrays_separated_by_commas_blanks_and_newlines),
        cmocka_unit_test(blank_separated_values_end_at_the_next_key),
        cmocka_unit_test(keys_named_t_or_f_are_keys_not_logicals),
        cmocka_unit_test(trailing_comma_before_key_or_slash_is_a_separator),
        cmocka_unit_test(repeat_count_expands_to_copies),
        cmocka_unit_test(duplicates_are_kept_in_file_order_for_the_schema_to_judge),
        cmocka_unit_test(crlf_line_endings_and_tabs_are_blanks),
        cmocka_unit_test(utf8_byte_order_mark_is_skipped),
        cmocka_unit_test(kind_names_read_well_in_messages),
        cmocka_unit_test(unterminated_string_points_at_its_opening_quote),
        cmocka_unit_test(missing_equals_after_key),
        cmocka_unit_test(group_not_closed_before_end_of_file),
        cmocka_unit_test(group_not_closed_before_next_group),
        cmocka_unit_test(end_without_open_group),
        cmocka_unit_test(unexpected_character_where_a_key_belongs),
        cmocka_unit_test(unexpected_character_after_a_value),
        cmocka_unit_test(unexpected_character_in_a_value),
        cmocka_unit_test(malformed_numbers_and_logicals),
        cmocka_unit_test(out_of_range_numbers),
        cmocka_unit_test(unquoted_word_is_not_a_string),
        cmocka_unit_test(indexed_assignment_is_refused_with_the_alternative),
        cmocka_unit_test(null_values_and_missing_values),
        cmocka_unit_test(bad_repeat_counts),
        cmocka_unit_test(repeat_counts_stop_at_one_million_values_in_total),
        cmocka_unit_test(many_keys_stop_at_one_million_values_in_total),
        cmocka_unit_test(text_longer_than_16_mib_is_refused_at_the_first_byte_past_it),
        cmocka_unit_test(repeat_count_beyond_the_keys_capacity_is_refused_before_any_copy),
        cmocka_unit_test(repeat_counts_copy_at_most_64_mib_of_strings),
        cmocka_unit_test(path_defaults_when_none_is_given),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
