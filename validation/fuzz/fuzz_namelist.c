/* fuzz_namelist.c — libFuzzer target: arbitrary bytes into the namelist parser (namelist.c) and
 * the schema layer (config.c), without MPI and without exiting.
 * Built by `make fuzz` (see validation/fuzz/README.md) with clang -fsanitize=fuzzer,address,undefined.
 *
 * Besides "no crash, no leak, no undefined behaviour" (the sanitizers), every input must keep
 * these promises; a broken one calls abort(), which libFuzzer reports with the input:
 *  - namelist_parse succeeds with a well-formed tree (lower-case names, at least one value per
 *    key, and every group, key and value position pointing at that token in the text), or
 *    fails with one line "fuzz.nml:LINE:COL: message" whose position lies inside the text;
 *  - config_parse succeeds, or calls fatal_user once with such a line (captured through
 *    error_set_fatal_hook + longjmp, as the unit tests do);
 *  - a configuration that parsed is echoed by config_to_namelist into a namelist that parses
 *    again and echoes the same text (the echo each run writes must not lie);
 *  - the input's lines as command-line overrides (config_parse_overrides) apply, or give one
 *    message naming one of them, and what applied echoes as above. */
#include "config/config.h"
#include "config/namelist.h"
#include "core/error.h"
#include <sanitizer/common_interface_defs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PATH "fuzz.nml"
#define FATAL_PREFIX "llmtrain: error: "

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- a broken promise ---------------------------------------------------------------------- */

/* Printed where the sanitizers print: `make fuzz` runs with -close_fd_mask=2, which sends plain
 * stderr (fatal_user's messages) to /dev/null but keeps the sanitizers' report stream. */
__attribute__((format(printf, 1, 2))) _Noreturn static void broken(const char *fmt, ...) {
    static char msg[16384];
    int n = snprintf(msg, sizeof msg, "fuzz_namelist: broken promise: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    __sanitizer_report_error_summary(msg);
    abort();
}

/* ---- the text and its lines ---------------------------------------------------------------- */

typedef struct text {
    const char *s;       /* after the byte-order mark, as the parser counts columns */
    size_t len;
    size_t *line_start;  /* offset of each line */
    int n_lines;
} text_t;

static void text_index(text_t *t, const char *s) {
    if (!strncmp(s, "\xEF\xBB\xBF", 3)) s += 3;
    t->s = s;
    t->len = strlen(s);
    t->n_lines = 1;
    for (size_t i = 0; i < t->len; i++) t->n_lines += s[i] == '\n';
    t->line_start = malloc((size_t)t->n_lines * sizeof *t->line_start);
    if (!t->line_start) abort();
    int l = 0;
    t->line_start[l++] = 0;
    for (size_t i = 0; i < t->len; i++)
        if (s[i] == '\n') t->line_start[l++] = i + 1;
}

/* The text at (line, col), or NULL if that position is not in the text (one past the end of a
 * line or of the text is allowed: errors point there, e.g. "missing '=' ... found end of file"). */
static const char *text_at(const text_t *t, int line, int col) {
    if (line < 1 || line > t->n_lines || col < 1) return NULL;
    size_t start = t->line_start[line - 1];
    size_t end = line < t->n_lines ? t->line_start[line] - 1 : t->len; /* the '\n' or the end */
    if ((size_t)col - 1 > end - start) return NULL;
    return t->s + start + (size_t)col - 1;
}

/* "fuzz.nml:LINE:COL: something" with the position inside the text, on one line. */
static void check_message(const text_t *t, const char *msg, const char *what) {
    int line = 0, col = 0, n = 0;
    if (strncmp(msg, PATH ":", sizeof PATH) != 0 || sscanf(msg + sizeof PATH, "%d:%d: %n", &line, &col, &n) != 2 ||
        n == 0 || msg[sizeof PATH + (size_t)n] == '\0')
        broken("%s message is not 'path:line:col: text': %s", what, msg);
    if (!text_at(t, line, col)) broken("%s message points outside the text (%d lines): %s", what, t->n_lines, msg);
    if (strchr(msg, '\n')) broken("%s message has more than one line: %s", what, msg);
}

/* ---- namelist_parse ------------------------------------------------------------------------ */

static bool is_lower_name(const char *s) {
    if (!s || !*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
    return true;
}

static void check_tree(const text_t *t, const namelist_t *nl) {
    for (int g = 0; g < nl->n_groups; g++) {
        const nl_group_t *gr = &nl->groups[g];
        const char *at = text_at(t, gr->line, gr->col);
        if (!is_lower_name(gr->name) || !at || (at[0] != '&' && at[0] != '$') ||
            strncasecmp(at + 1, gr->name, strlen(gr->name)) != 0)
            broken("group '%s' at %d:%d is not there in the text", gr->name, gr->line, gr->col);
        for (int e = 0; e < gr->n_entries; e++) {
            const nl_entry_t *en = &gr->entries[e];
            at = text_at(t, en->line, en->col);
            if (!is_lower_name(en->key) || !at || strncasecmp(at, en->key, strlen(en->key)) != 0)
                broken("key '%s' at %d:%d is not there in the text", en->key, en->line, en->col);
            if (en->n_values < 1) broken("key '%s' has %d values", en->key, en->n_values);
            for (int v = 0; v < en->n_values; v++) {
                const nl_value_t *val = &en->values[v];
                at = text_at(t, val->line, val->col);
                if (!val->raw || !at || strncmp(at, val->raw, strlen(val->raw)) != 0)
                    broken("value '%s' of key '%s' at %d:%d is not there in the text", val->raw ? val->raw : "(null)",
                           en->key, val->line, val->col);
                if ((val->kind == NL_STRING) != (val->s != NULL))
                    broken("value '%s' of key '%s': kind %s but string %p", val->raw, en->key,
                           namelist_kind_name(val->kind), (void *)val->s);
            }
        }
    }
}

static void fuzz_namelist(const text_t *t, const char *text) {
    namelist_t nl;
    char err[1024];
    if (namelist_parse(PATH, text, &nl, err, sizeof err) == 0) {
        check_tree(t, &nl);
        namelist_free(&nl);
        return;
    }
    if (nl.n_groups != 0 || nl.groups != NULL) broken("a failed parse left groups behind");
    check_message(t, err, "namelist_parse");
}

/* ---- config_parse -------------------------------------------------------------------------- */

static jmp_buf fatal_jump;
static char fatal_message[4096];
static int fatal_calls;

static void capture_fatal(int exit_code, const char *message) {
    (void)exit_code;
    fatal_calls++;
    snprintf(fatal_message, sizeof fatal_message, "%s", message);
    longjmp(fatal_jump, 1);
}

/* config_parse; 0 with cfg filled, or -1 with the message in fatal_message. */
static int try_config_parse(const char *text, config_t *cfg) {
    fatal_calls = 0;
    if (setjmp(fatal_jump) != 0) {
        if (fatal_calls != 1) broken("fatal_user was called %d times", fatal_calls);
        return -1;
    }
    config_parse(PATH, text, cfg);
    return 0;
}

static char *echo(const config_t *cfg) {
    int n = config_to_namelist(cfg, NULL, 0);
    char *buf = malloc((size_t)n + 1);
    if (!buf) abort();
    if (config_to_namelist(cfg, buf, n + 1) != n) broken("config_to_namelist: two lengths for one config");
    return buf;
}

/* An echo parses, and its echo is the same text. Frees `first`. */
static void echo_reads_back(char *first) {
    config_t cfg;
    if (try_config_parse(first, &cfg) != 0) broken("the echo does not parse: %s\necho:\n%s", fatal_message, first);
    char *second = echo(&cfg);
    config_destroy(&cfg);
    if (strcmp(first, second) != 0) broken("the echo of the echo differs:\n%s\n---\n%s", first, second);
    free(first);
    free(second);
}

static void fuzz_config(const text_t *t, const char *text) {
    config_t cfg;
    if (try_config_parse(text, &cfg) != 0) {
        if (strncmp(fatal_message, FATAL_PREFIX, sizeof FATAL_PREFIX - 1) != 0)
            broken("config_parse message without '" FATAL_PREFIX "': %s", fatal_message);
        check_message(t, fatal_message + sizeof FATAL_PREFIX - 1, "config_parse");
        return;
    }
    char *first = echo(&cfg);
    config_destroy(&cfg);
    echo_reads_back(first);
}

/* ---- command-line overrides ---------------------------------------------------------------- */

#define OVERRIDES_LINE "! " PATH " with the command-line overrides: "

/* The echo without the comment line that names the overrides (a reparse has none). */
static void drop_overrides_line(char *echo_text) {
    char *line = strchr(echo_text, '\n');
    if (!line || strncmp(line + 1, OVERRIDES_LINE, sizeof OVERRIDES_LINE - 1) != 0) return;
    char *end = strchr(line + 1, '\n');
    if (!end) broken("the overrides line is the last line of the echo");
    memmove(line + 1, end + 1, strlen(end + 1) + 1);
}

/* The input's lines (at most 64) as overrides, from command-line position 2, of a file that
 * sets only train_files: they apply, or the message is one line naming one of them (or, for a
 * check of derived sizes, the file); what applied echoes into a namelist that gives the same
 * echo. Splits `text` in place. */
static void fuzz_overrides(char *text) {
    enum { MAX_ARGS = 64 };
    const char *args[MAX_ARGS];
    int n = 0;
    for (char *line = text; line && n < MAX_ARGS; n++) {
        args[n] = line;
        if ((line = strchr(line, '\n'))) *line++ = '\0';
    }
    config_args_t a = {.args = args, .n = n, .first_argno = 2};
    config_t cfg;
    fatal_calls = 0;
    if (setjmp(fatal_jump) != 0) {
        const char *msg = fatal_message + sizeof FATAL_PREFIX - 1;
        int argno = 0;
        if (fatal_calls != 1) broken("fatal_user was called %d times", fatal_calls);
        if (strncmp(fatal_message, FATAL_PREFIX, sizeof FATAL_PREFIX - 1) != 0 || strchr(msg, '\n'))
            broken("override message is not one '" FATAL_PREFIX "' line: %s", fatal_message);
        if (strncmp(msg, PATH ":", sizeof PATH) != 0 &&
            (sscanf(msg, "command line argument %d '", &argno) != 1 || argno < 2 || argno > n + 1))
            broken("override message names no argument 2..%d: %s", n + 1, msg);
        return;
    }
    config_parse_overrides(PATH, "&data train_files = 'x' /\n", &a, &cfg);
    char *first = echo(&cfg);
    config_destroy(&cfg);
    drop_overrides_line(first);
    echo_reads_back(first);
}

/* ---- libFuzzer entry points ---------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    error_set_fatal_hook(capture_fatal);
    return 0;
}

/* The bytes as a C string: the parser reads text up to its NUL (config_load refuses files
 * with a NUL byte before it gets there). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    text_t t;
    text_index(&t, text);
    fuzz_namelist(&t, text);
    fuzz_config(&t, text);
    free(t.line_start);
    fuzz_overrides(text); /* last: splits the text into lines */
    free(text);
    return 0;
}
