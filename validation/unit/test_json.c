/* test_json.c — the JSON string writer (core/json.c): escapes byte for byte as written out here
 * ('"' '\\' backslashed, newline \n, other control bytes \u00XX, UTF-8 copied), json_escape's
 * snprintf-like length and truncation that never cuts an escape, and json_write_string's quotes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "core/json.h"

static void expect_escape(const char *in, const char *want) {
    char buf[256];
    const size_t n = json_escape(buf, sizeof buf, in);
    if (strcmp(buf, want) != 0 || n != strlen(want))
        print_error("json_escape of %zu bytes: got '%s' (%zu), expected '%s' (%zu)\n", strlen(in), buf, n,
                    want, strlen(want));
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
}

static void escapes_quotes_backslashes_and_control_bytes(void **state) {
    (void)state;
    expect_escape("", "");
    expect_escape("plain text 123", "plain text 123");
    expect_escape("say \"hi\"", "say \\\"hi\\\"");
    expect_escape("a\\b", "a\\\\b");
    expect_escape("line1\nline2", "line1\\nline2");
    expect_escape("tab\there", "tab\\u0009here");
    expect_escape("\r\x01\x1f", "\\u000d\\u0001\\u001f");
    expect_escape("caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac"); /* UTF-8 as it is */
    expect_escape("\x7f", "\x7f");
}

static void escape_measures_and_truncates_whole_escapes(void **state) {
    (void)state;
    assert_int_equal(json_escape(NULL, 0, "a\"b\x01"), 1 + 2 + 1 + 6);
    char buf[8];
    memset(buf, 'X', sizeof buf);
    /* "ab" fits, the 6-character \u0001 does not (2 + 6 + NUL > 8): stops before it */
    assert_int_equal(json_escape(buf, sizeof buf, "ab\x01" "cd"), 2 + 6 + 2);
    assert_string_equal(buf, "ab");
    /* exactly full: 7 characters and the NUL */
    assert_int_equal(json_escape(buf, sizeof buf, "abcdefg"), 7);
    assert_string_equal(buf, "abcdefg");
    assert_int_equal(json_escape(buf, sizeof buf, "abcdefgh"), 8);
    assert_string_equal(buf, "abcdefg");
    assert_int_equal(json_escape(buf, 1, "abc"), 3);
    assert_string_equal(buf, "");
    /* a 2-character escape that would end on the last byte is left out whole */
    assert_int_equal(json_escape(buf, sizeof buf, "abcdef\""), 8);
    assert_string_equal(buf, "abcdef");
}

static void write_string_quotes_the_same_escape(void **state) {
    (void)state;
    const char *in = "p\"a\\t\nh\x02";
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    json_write_string(f, in);
    fclose(f);
    char esc[64];
    json_escape(esc, sizeof esc, in);
    char want[80];
    snprintf(want, sizeof want, "\"%s\"", esc);
    assert_string_equal(text, want);
    assert_string_equal(text, "\"p\\\"a\\\\t\\nh\\u0002\"");
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escapes_quotes_backslashes_and_control_bytes),
        cmocka_unit_test(escape_measures_and_truncates_whole_escapes),
        cmocka_unit_test(write_string_quotes_the_same_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
