/* namelist.c — the Fortran-namelist parser (see namelist.h for the accepted syntax).
 * A hand-written scanner over the text: one lexer_t walks the characters and keeps line and
 * column; lookahead is done on a copy of the lexer. Every failure formats one message and
 * returns -1 up the call chain; nothing here exits.
 * Memory: arrays grow with xrealloc_small and strings come from xstrdup, so they are released
 * with free() (xfree is only for xmalloc's tracked blocks).
 * Limits: no text can make the parser use unbounded memory or time. The text is at most
 * NL_MAX_TEXT bytes (what config.c reads from a file), one repeat count at most NL_MAX_REPEAT, and
 * one parse at most NL_MAX_VALUES values, every copy of a repeat count included; so `a = 100000*'x',
 * 100000*'y', ...` or a million keys end with one "path:line:col:" message naming the limit. The
 * strings that repeat counts copy are at most NL_MAX_COPIED bytes in one parse (100000 copies of
 * a 40 kB string would be 4 GB), and with the caller's key capacities (namelist_parse_keys) a
 * count is checked against what its key holds before any copy is made. */
#include "config/namelist.h"
#include "core/alloc.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NL_MAX_REPEAT 100000   /* r*value: beyond this it is surely a typo, not a real array */
#define NL_MAX_VALUES 1000000  /* values in one parse (~100 MB of nl_value_t and strings) */
#define NL_MAX_TEXT (16 << 20) /* bytes of text: config.c's CFG_MAX_FILE, for callers that skip it */
#define NL_MAX_COPIED (64 << 20) /* bytes of strings copied by repeat counts in one parse */

typedef struct lexer {
    const char *path;
    const char *p; /* next character to read */
    int line, col;
    char *err;
    size_t errsize;
    int n_values; /* in the whole parse so far, <= NL_MAX_VALUES */
    size_t copied; /* bytes of strings copied by repeat counts so far, <= NL_MAX_COPIED */
    nl_capacity_fn capacity; /* the caller's key capacities, or NULL */
    void *capacity_ctx;
    const char *group;       /* the group being parsed (for the capacity and its message) */
} lexer_t;

/* ---- characters and positions ------------------------------------------------------------ */

static char peek(const lexer_t *lx) { return *lx->p; }
static char peek_at(const lexer_t *lx, int k) {
    for (int i = 0; i < k; i++)
        if (lx->p[i] == '\0') return '\0';
    return lx->p[k];
}

static void advance(lexer_t *lx) {
    if (*lx->p == '\0') return;
    if (*lx->p == '\n') {
        lx->line++;
        lx->col = 1;
    } else {
        lx->col++;
    }
    lx->p++;
}

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }
static bool is_alpha(char c) { return isalpha((unsigned char)c) != 0; }
static bool is_digit(char c) { return isdigit((unsigned char)c) != 0; }
static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* What may follow a value: a separator, the end of the group, a comment, or the end of text. */
static bool ends_value(char c) { return c == '\0' || is_blank(c) || c == ',' || c == '/' || c == '!'; }

static void skip_to_eol(lexer_t *lx) {
    while (peek(lx) != '\0' && peek(lx) != '\n') advance(lx);
}

/* Blanks, newlines and '!' comments are all insignificant between tokens. */
static void skip_space(lexer_t *lx) {
    for (;;) {
        char c = peek(lx);
        if (is_blank(c)) advance(lx);
        else if (c == '!') skip_to_eol(lx);
        else return;
    }
}

/* A character as a human reads it in a message. */
static const char *describe_char(char c, char buf[16]) {
    if (c == '\0') return "end of file";
    if (c == '\n') return "end of line";
    if (isprint((unsigned char)c)) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02x", (unsigned char)c);
    return buf;
}

__attribute__((format(printf, 4, 5)))
static int lex_error(lexer_t *lx, int line, int col, const char *fmt, ...) {
    int n = snprintf(lx->err, lx->errsize, "%s:%d:%d: ", lx->path, line, col);
    if (n < 0 || (size_t)n >= lx->errsize) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lx->err + n, lx->errsize - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Room for n more values in this parse? The one check behind NL_MAX_VALUES; (line, col) is the
 * value, or the repeat count, that would go past it. */
static int count_values(lexer_t *lx, int line, int col, int64_t n) {
    if (n > NL_MAX_VALUES - lx->n_values)
        return lex_error(lx, line, col,
                         "too many values: a namelist holds at most %d values (the limit; each copy made by "
                         "a repeat count r*value counts)", NL_MAX_VALUES);
    lx->n_values += (int)n;
    return 0;
}

/* ---- growable arrays --------------------------------------------------------------------- */

/* Capacity doubles whenever the count reaches a power of two, so no capacity field is needed. */
static void *grow_for_one_more(void *array, int count, size_t elem) {
    if (count != 0 && (count & (count - 1)) != 0) return array;
    size_t cap = count == 0 ? 1 : 2 * (size_t)count;
    return xrealloc_small(array, cap * elem);
}

static nl_group_t *push_group(namelist_t *nl) {
    nl->groups = grow_for_one_more(nl->groups, nl->n_groups, sizeof *nl->groups);
    nl_group_t *g = &nl->groups[nl->n_groups++];
    memset(g, 0, sizeof *g);
    return g;
}

static nl_entry_t *push_entry(nl_group_t *g) {
    g->entries = grow_for_one_more(g->entries, g->n_entries, sizeof *g->entries);
    nl_entry_t *e = &g->entries[g->n_entries++];
    memset(e, 0, sizeof *e);
    return e;
}

static nl_value_t *push_value(nl_entry_t *e) {
    e->values = grow_for_one_more(e->values, e->n_values, sizeof *e->values);
    nl_value_t *v = &e->values[e->n_values++];
    memset(v, 0, sizeof *v);
    return v;
}

static char *copy_range(const char *start, const char *end) {
    size_t n = (size_t)(end - start);
    char *s = xrealloc_small(NULL, n + 1);
    memcpy(s, start, n);
    s[n] = '\0';
    return s;
}

/* ---- tokens ------------------------------------------------------------------------------ */

/* A name: letter, then letters, digits, '_'. Returned lower-case (names are case-insensitive). */
static char *read_name(lexer_t *lx) {
    const char *start = lx->p;
    while (is_name_char(peek(lx))) advance(lx);
    char *name = copy_range(start, lx->p);
    for (char *c = name; *c; c++) *c = (char)tolower((unsigned char)*c);
    return name;
}

/* Is the text at lx a key, i.e. a name followed by '=' (or '(' of an indexed assignment)?
 * Needed because values may be separated by blanks only: in "a = 1 2 b = 3", 'b' ends a's list. */
static bool at_key(const lexer_t *lx) {
    if (!is_alpha(peek(lx))) return false;
    lexer_t look = *lx;
    while (is_name_char(peek(&look))) advance(&look);
    skip_space(&look);
    return peek(&look) == '=' || peek(&look) == '(';
}

static bool is_logical_word(const char *w, bool *value) {
    if (!strcmp(w, "t") || !strcmp(w, "true")) return (*value = true), true;
    if (!strcmp(w, "f") || !strcmp(w, "false")) return (*value = false), true;
    return false;
}

/* 'text' or "text"; a doubled quote inside is one quote. Strings end on their own line. */
static int read_string(lexer_t *lx, nl_value_t *v) {
    const char *start = lx->p;
    char quote = peek(lx);
    size_t len = 0, cap = 16;
    char *s = xrealloc_small(NULL, cap);
    advance(lx);
    for (;;) {
        char c = peek(lx);
        if (c == '\0' || c == '\n') {
            free(s);
            return lex_error(lx, v->line, v->col, "unterminated string: missing closing %c before %s",
                             quote, c == '\0' ? "end of file" : "end of line");
        }
        advance(lx);
        if (c == quote) {
            if (peek(lx) != quote) break;
            advance(lx); /* doubled quote: one literal quote */
        }
        if (len + 2 > cap) s = xrealloc_small(s, cap *= 2);
        s[len++] = c;
    }
    s[len] = '\0';
    v->kind = NL_STRING;
    v->s = s;
    v->raw = copy_range(start, lx->p);
    return 0;
}

/* Scan [sign] digits [. digits] [(e|d) [sign] digits]; sets *is_real. Returns -1 if malformed. */
static int scan_number(lexer_t *lx, bool *is_real) {
    int mantissa_digits = 0;
    *is_real = false;
    if (peek(lx) == '+' || peek(lx) == '-') advance(lx);
    while (is_digit(peek(lx))) advance(lx), mantissa_digits++;
    if (peek(lx) == '.') {
        *is_real = true;
        advance(lx);
        while (is_digit(peek(lx))) advance(lx), mantissa_digits++;
    }
    if (mantissa_digits == 0) return -1;
    if (peek(lx) != '\0' && strchr("eEdD", peek(lx))) {
        *is_real = true;
        advance(lx);
        if (peek(lx) == '+' || peek(lx) == '-') advance(lx);
        if (!is_digit(peek(lx))) return -1;
        while (is_digit(peek(lx))) advance(lx);
    }
    return 0;
}

/* Convert the scanned token: 64-bit integer, or real (Fortran's 'd' exponent becomes 'e'). */
static int convert_number(lexer_t *lx, nl_value_t *v, bool is_real) {
    char *end = NULL;
    errno = 0;
    if (!is_real) {
        long long i = strtoll(v->raw, &end, 10);
        if (errno == ERANGE) return lex_error(lx, v->line, v->col, "integer %s is out of range", v->raw);
        v->kind = NL_INTEGER;
        v->i = i;
        v->r = (double)i;
        return 0;
    }
    char *text = xstrdup(v->raw);
    for (char *c = text; *c; c++)
        if (*c == 'd' || *c == 'D') *c = 'e';
    double r = strtod(text, &end);
    free(text);
    if (isinf(r)) return lex_error(lx, v->line, v->col, "real %s is out of range", v->raw);
    v->kind = NL_REAL;
    v->r = r;
    return 0;
}

static int read_number(lexer_t *lx, nl_value_t *v) {
    const char *start = lx->p;
    bool is_real = false;
    if (scan_number(lx, &is_real) != 0) {
        while (is_name_char(peek(lx)) || peek(lx) == '.') advance(lx); /* whole token for the message */
        v->raw = copy_range(start, lx->p);
        return lex_error(lx, v->line, v->col, "malformed number '%s'", v->raw);
    }
    v->raw = copy_range(start, lx->p);
    if (!ends_value(peek(lx)) && peek(lx) != '*') {
        char buf[16];
        return lex_error(lx, lx->line, lx->col, "unexpected %s after number %s",
                         describe_char(peek(lx), buf), v->raw);
    }
    return convert_number(lx, v, is_real);
}

/* .true. .false. .t. .f. (any case) */
static int read_dotted_logical(lexer_t *lx, nl_value_t *v) {
    const char *start = lx->p;
    advance(lx);
    char *word = read_name(lx);
    bool closed = peek(lx) == '.';
    if (closed) advance(lx);
    v->raw = copy_range(start, lx->p);
    bool ok = closed && is_logical_word(word, &v->b);
    free(word);
    if (!ok) return lex_error(lx, v->line, v->col, "malformed logical '%s'; use .true. or .false.", v->raw);
    v->kind = NL_LOGICAL;
    return 0;
}

/* A bare word in value position is a logical (T, F, true, false) or a mistake. */
static int read_bare_word(lexer_t *lx, nl_value_t *v, const char *key) {
    const char *start = lx->p;
    char *word = read_name(lx);
    v->raw = copy_range(start, lx->p);
    bool ok = is_logical_word(word, &v->b);
    free(word);
    if (ok) {
        v->kind = NL_LOGICAL;
        return 0;
    }
    return lex_error(lx, v->line, v->col,
                     "unquoted word '%s' in the value of key '%s': strings need quotes ('%s'), "
                     "logicals are .true./.false., and a new key needs '='",
                     v->raw, key, v->raw);
}

static bool starts_number(const lexer_t *lx) {
    char c = peek(lx), c1 = peek_at(lx, 1);
    if (is_digit(c)) return true;
    if (c == '.') return is_digit(c1);
    if (c == '+' || c == '-') return is_digit(c1) || (c1 == '.' && is_digit(peek_at(lx, 2)));
    return false;
}

/* One value token (no repeat count). */
static int read_single_value(lexer_t *lx, nl_value_t *v, const char *key) {
    char c = peek(lx), buf[16];
    v->line = lx->line;
    v->col = lx->col;
    if (c == '\'' || c == '"') return read_string(lx, v);
    if (starts_number(lx)) return read_number(lx, v);
    if (c == '.' && is_alpha(peek_at(lx, 1))) return read_dotted_logical(lx, v);
    if (is_alpha(c)) return read_bare_word(lx, v, key);
    return lex_error(lx, lx->line, lx->col, "unexpected %s in the value of key '%s'", describe_char(c, buf), key);
}

static void copy_value(nl_value_t *dst, const nl_value_t *src) {
    *dst = *src;
    dst->raw = xstrdup(src->raw);
    dst->s = src->s ? xstrdup(src->s) : NULL;
}

/* Before a repeat count is expanded: the key it belongs to holds at most what the caller's
 * capacity says (values already given included), so no copy is made that the key cannot take. */
static int check_capacity(lexer_t *lx, const nl_entry_t *e, int64_t count, const char *repeat_raw,
                          int line, int col) {
    int cap = lx->capacity ? lx->capacity(lx->group, e->key, lx->capacity_ctx) : 0;
    int64_t total = (int64_t)e->n_values - 1 + count; /* the count itself is the last value */
    if (cap <= 0 || total <= cap) return 0;
    if (cap == 1)
        return lex_error(lx, line, col, "&%s %s: expected one value, got %lld values (the repeat "
                         "count '%s'), refused before making them", lx->group, e->key,
                         (long long)total, repeat_raw);
    return lex_error(lx, line, col, "&%s %s: at most %d values allowed, got %lld (the repeat count "
                     "'%s'), refused before making them", lx->group, e->key, cap, (long long)total,
                     repeat_raw);
}

/* The strings count - 1 more copies of v would add, within NL_MAX_COPIED for the whole parse. */
static int check_copied_bytes(lexer_t *lx, const nl_value_t *v, int64_t count, const char *repeat_raw,
                              int line, int col) {
    size_t one = strlen(v->raw) + 1 + (v->s ? strlen(v->s) + 1 : 0);
    if ((double)one * (double)(count - 1) > (double)(NL_MAX_COPIED - lx->copied))
        return lex_error(lx, line, col, "the repeat count '%s' copies a value of %zu bytes %lld times: "
                         "more than the %d MiB that repeat counts may copy in one namelist (the limit)",
                         repeat_raw, strlen(v->raw), (long long)count, NL_MAX_COPIED >> 20);
    lx->copied += one * (size_t)(count - 1);
    return 0;
}

/* r*value: `count` copies of the value that follows the '*'. The first copy is already in e. */
static int expand_repeat(lexer_t *lx, nl_entry_t *e, const char *key) {
    nl_value_t *counter = &e->values[e->n_values - 1];
    char repeat_raw[64];
    snprintf(repeat_raw, sizeof repeat_raw, "%s*", counter->raw);
    if (counter->kind != NL_INTEGER || !is_digit(counter->raw[0]) || counter->i < 1 || counter->i > NL_MAX_REPEAT)
        return lex_error(lx, counter->line, counter->col, "repeat count '%s' must be an integer in [1, %d]",
                         repeat_raw, NL_MAX_REPEAT);
    int64_t count = counter->i;
    int line = counter->line, col = counter->col;
    if (check_capacity(lx, e, count, repeat_raw, line, col) != 0) return -1;
    advance(lx); /* the '*' */
    if (ends_value(peek(lx)))
        return lex_error(lx, line, col, "repeat count '%s' must be followed by a value "
                         "(null values are not supported)", repeat_raw);
    free(counter->raw);
    memset(counter, 0, sizeof *counter);
    if (read_single_value(lx, counter, key) != 0) return -1;
    if (peek(lx) == '*') return lex_error(lx, lx->line, lx->col, "a repeat count cannot be repeated");
    if (count_values(lx, line, col, count - 1) != 0) return -1; /* the first copy is counted */
    if (check_copied_bytes(lx, counter, count, repeat_raw, line, col) != 0) return -1;
    for (int64_t k = 1; k < count; k++) {
        nl_value_t *v = push_value(e);
        copy_value(v, &e->values[e->n_values - 2]);
    }
    return 0;
}

/* ---- grammar ----------------------------------------------------------------------------- */

static bool at_end_of_values(const lexer_t *lx) {
    char c = peek(lx);
    if ((c == '&' || c == '$') && is_alpha(peek_at(lx, 1))) return true;
    return c == '\0' || c == '/' || at_key(lx);
}

/* After '=': values separated by commas and/or blanks, up to the next key or the group end. */
static int parse_values(lexer_t *lx, nl_entry_t *e) {
    bool after_comma = false;
    for (;;) {
        skip_space(lx);
        if (peek(lx) == ',') {
            if (e->n_values == 0) return lex_error(lx, lx->line, lx->col, "missing value before ',' for key '%s'", e->key);
            if (after_comma)
                return lex_error(lx, lx->line, lx->col,
                                 "empty value between commas for key '%s' (null values are not supported)", e->key);
            after_comma = true;
            advance(lx);
            continue;
        }
        if (at_end_of_values(lx)) {
            if (e->n_values == 0) return lex_error(lx, e->line, e->col, "key '%s' has no value after '='", e->key);
            return 0;
        }
        if (count_values(lx, lx->line, lx->col, 1) != 0) return -1;
        nl_value_t *v = push_value(e);
        if (read_single_value(lx, v, e->key) != 0) return -1;
        if (peek(lx) == '*' && expand_repeat(lx, e, e->key) != 0) return -1;
        if (!ends_value(peek(lx))) {
            char buf[16];
            const nl_value_t *last = &e->values[e->n_values - 1];
            return lex_error(lx, lx->line, lx->col, "unexpected %s after value %s of key '%s'",
                             describe_char(peek(lx), buf), last->raw, e->key);
        }
        after_comma = false;
    }
}

static int parse_entry(lexer_t *lx, nl_group_t *g) {
    nl_entry_t *e = push_entry(g);
    e->line = lx->line;
    e->col = lx->col;
    e->key = read_name(lx);
    skip_space(lx);
    char c = peek(lx), buf[16];
    if (c == '(')
        return lex_error(lx, lx->line, lx->col,
                         "indexed assignment '%s(...)' is not supported; give the whole array: %s = v1, v2, ...",
                         e->key, e->key);
    if (c != '=')
        return lex_error(lx, lx->line, lx->col, "missing '=' after key '%s' in group '&%s' (found %s)", e->key,
                         g->name, describe_char(c, buf));
    advance(lx);
    return parse_values(lx, e);
}

/* At '&' or '$' inside a group: either &end/$end (close) or the start of another group (error). */
static int parse_ampersand_in_group(lexer_t *lx, nl_group_t *g, bool *closed) {
    int line = lx->line, col = lx->col;
    char sigil = peek(lx);
    advance(lx);
    char *name = read_name(lx);
    *closed = !strcmp(name, "end");
    int rc = 0;
    if (!*closed)
        rc = lex_error(lx, line, col, "group '&%s' (line %d) is not closed by '/' before '%c%s'", g->name,
                       g->line, sigil, name);
    free(name);
    return rc;
}

static int parse_group_body(lexer_t *lx, nl_group_t *g) {
    lx->group = g->name;
    for (;;) {
        skip_space(lx);
        char c = peek(lx), buf[16];
        if (c == '\0')
            return lex_error(lx, g->line, g->col, "group '&%s' is not closed by '/' (reached end of file)", g->name);
        if (c == '/') {
            advance(lx);
            return 0;
        }
        if ((c == '&' || c == '$') && is_alpha(peek_at(lx, 1))) {
            bool closed = false;
            if (parse_ampersand_in_group(lx, g, &closed) != 0) return -1;
            if (closed) return 0;
            continue;
        }
        if (!is_alpha(c))
            return lex_error(lx, lx->line, lx->col, "unexpected %s in group '&%s'; expected a key name, '/' or '&end'",
                             describe_char(c, buf), g->name);
        if (parse_entry(lx, g) != 0) return -1;
    }
}

static int parse_group(lexer_t *lx, namelist_t *nl) {
    int line = lx->line, col = lx->col;
    char sigil = peek(lx);
    advance(lx);
    char *name = read_name(lx);
    if (!strcmp(name, "end")) {
        free(name);
        return lex_error(lx, line, col, "'%cend' without an open group", sigil);
    }
    nl_group_t *g = push_group(nl);
    g->name = name;
    g->line = line;
    g->col = col;
    return parse_group_body(lx, g);
}

/* Outside groups everything is ignored except '!' comments and '&name' / '$name'. */
static int parse_text(lexer_t *lx, namelist_t *nl) {
    for (;;) {
        char c = peek(lx);
        if (c == '\0') return 0;
        if (c == '!') {
            skip_to_eol(lx);
        } else if ((c == '&' || c == '$') && is_alpha(peek_at(lx, 1))) {
            if (parse_group(lx, nl) != 0) return -1;
        } else {
            advance(lx);
        }
    }
}

/* The text is longer than NL_MAX_TEXT: point at its first byte past the limit. */
static int text_too_long(lexer_t *lx) {
    const char *limit = lx->p + NL_MAX_TEXT, *line_start = lx->p;
    int line = 1;
    for (const char *c = lx->p; (c = memchr(c, '\n', (size_t)(limit - c))) != NULL; line_start = ++c) line++;
    return lex_error(lx, line, (int)(limit - line_start) + 1,
                     "the namelist text is longer than %d bytes (16 MiB, the limit); is this a namelist file?",
                     NL_MAX_TEXT);
}

int namelist_parse(const char *path, const char *text, namelist_t *nl, char *err, size_t errsize) {
    return namelist_parse_keys(path, text, NULL, NULL, nl, err, errsize);
}

int namelist_parse_keys(const char *path, const char *text, nl_capacity_fn capacity, void *ctx,
                        namelist_t *nl, char *err, size_t errsize) {
    lexer_t lx = {.path = path ? path : "<namelist>", .p = text ? text : "", .line = 1, .col = 1,
                  .err = err, .errsize = errsize, .capacity = capacity, .capacity_ctx = ctx};
    memset(nl, 0, sizeof *nl);
    if (errsize > 0) err[0] = '\0';
    if (strnlen(lx.p, NL_MAX_TEXT + 1) > NL_MAX_TEXT) return text_too_long(&lx);
    if (!strncmp(lx.p, "\xEF\xBB\xBF", 3)) lx.p += 3; /* UTF-8 byte-order mark from some editors */
    if (parse_text(&lx, nl) != 0) {
        namelist_free(nl);
        return -1;
    }
    return 0;
}

void namelist_free(namelist_t *nl) {
    for (int gi = 0; gi < nl->n_groups; gi++) {
        nl_group_t *g = &nl->groups[gi];
        for (int ei = 0; ei < g->n_entries; ei++) {
            nl_entry_t *e = &g->entries[ei];
            for (int vi = 0; vi < e->n_values; vi++) {
                free(e->values[vi].s);
                free(e->values[vi].raw);
            }
            free(e->values);
            free(e->key);
        }
        free(g->entries);
        free(g->name);
    }
    free(nl->groups);
    memset(nl, 0, sizeof *nl);
}

const char *namelist_kind_name(nl_kind_t kind) {
    switch (kind) {
    case NL_INTEGER: return "integer";
    case NL_REAL: return "real";
    case NL_STRING: return "string";
    case NL_LOGICAL: return "logical";
    }
    return "value";
}
