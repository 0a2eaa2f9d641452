/* schema.c — the schema engine for a tool's own key table (schema.h), and the typo distance and
 * bound wording that llmtrain's table (config_schema.c) uses too. */
#include "config/schema.h"
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Optimal-string-alignment distance: insertions, deletions, substitutions, adjacent swaps. */
static int edit_distance(const char *a, const char *b) {
    enum { MAXN = 64 };
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la >= MAXN || lb >= MAXN) return INT_MAX;
    int d[MAXN][MAXN];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++) {
        for (int j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

/* A typo, not a different word: one edit for short names, two for long ones. */
int schema_typo_distance(const char *typo, const char *name) {
    int d = edit_distance(typo, name);
    return d <= (strlen(name) >= 6 ? 2 : 1) ? d : INT_MAX;
}

const char *schema_closest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int i = 0; i < n; i++) {
        int d = schema_typo_distance(word, names[i]);
        if (d < best_d) best_d = d, best = names[i];
    }
    return best;
}

/* One bound as the user would write it: integers exactly (2147483646, not 2.14748e+09). */
static void format_number(bool is_real, double x, char *out, size_t size) {
    if (!is_real && fabs(x) < 1e15) snprintf(out, size, "%.0f", x);
    else snprintf(out, size, "%g", x);
}

void schema_format_bounds(bool is_real, char lo_kind, double lo, char hi_kind, double hi, char *out,
                          size_t size) {
    char l[32], h[32];
    format_number(is_real, lo, l, sizeof l);
    format_number(is_real, hi, h, sizeof h);
    if (lo_kind && hi_kind) snprintf(out, size, "in %c%s, %s%c", lo_kind, l, h, hi_kind);
    else if (lo_kind) snprintf(out, size, "%s %s", lo_kind == '[' ? ">=" : ">", l);
    else snprintf(out, size, "%s %s", hi_kind == ']' ? "<=" : "<", h);
}

bool schema_in_bounds(char lo_kind, double lo, char hi_kind, double hi, double x) {
    if (lo_kind == '[' && !(x >= lo)) return false;
    if (lo_kind == '(' && !(x > lo)) return false;
    if (hi_kind == ']' && !(x <= hi)) return false;
    if (hi_kind == ')' && !(x < hi)) return false;
    return true;
}

/* ---- a tool's table ------------------------------------------------------------------------ */

__attribute__((format(printf, 6, 7)))
static int pos_error(char *err, size_t errlen, const char *path, int line, int col, const char *fmt, ...) {
    int n = snprintf(err, errlen, "%s:%d:%d: ", path, line, col);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < errlen) vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

int schema_find_key(const schema_t *s, const char *key) {
    for (int k = 0; k < s->n_keys; k++)
        if (strcmp(s->keys[k].key, key) == 0) return k;
    return -1;
}

int schema_key_capacity(const char *group, const char *key, void *ctx) {
    const schema_t *s = ctx;
    int k = strcmp(group, s->group) == 0 ? schema_find_key(s, key) : -1;
    return k < 0 || s->keys[k].type == SCHEMA_STRS || s->keys[k].type == SCHEMA_REALS ? 0 : 1;
}

static const char *expected_kind(schema_type_t t) {
    switch (t) {
    case SCHEMA_STR:
    case SCHEMA_STRS: return "a string in quotes";
    case SCHEMA_REAL:
    case SCHEMA_REALS: return "a real number";
    case SCHEMA_INT: return "an integer";
    case SCHEMA_BOOL: return "a logical (.true. or .false.)";
    }
    return "a value";
}

static bool kind_fits(schema_type_t t, nl_kind_t kind) {
    switch (t) {
    case SCHEMA_STR:
    case SCHEMA_STRS: return kind == NL_STRING;
    case SCHEMA_REAL:
    case SCHEMA_REALS: return kind == NL_REAL || kind == NL_INTEGER; /* 1 is a fine real */
    case SCHEMA_INT: return kind == NL_INTEGER;
    case SCHEMA_BOOL: return kind == NL_LOGICAL;
    }
    return false;
}

int schema_check_entry(const schema_t *s, int k, const nl_entry_t *e, const char *path, char *err,
                       size_t errlen) {
    const schema_key_t *ks = &s->keys[k];
    bool many = ks->type == SCHEMA_STRS || ks->type == SCHEMA_REALS;
    if (!many && e->n_values != 1)
        return pos_error(err, errlen, path, e->values[1].line, e->values[1].col,
                         "&%s %s: expected one value, got %d values", s->group, e->key, e->n_values);
    for (int i = 0; i < e->n_values; i++) {
        const nl_value_t *v = &e->values[i];
        if (!kind_fits(ks->type, v->kind))
            return pos_error(err, errlen, path, v->line, v->col, "&%s %s: expected %s, got %s %s", s->group,
                             e->key, expected_kind(ks->type), namelist_kind_name(v->kind), v->raw);
        bool real = ks->type == SCHEMA_REAL || ks->type == SCHEMA_REALS;
        if (real && !isfinite(v->r))
            return pos_error(err, errlen, path, v->line, v->col, "&%s %s: %s is not a finite number",
                             s->group, e->key, v->raw);
    }
    return 0;
}

int schema_check_bounds(const schema_t *s, int k, const nl_entry_t *e, const char *path, char *err,
                        size_t errlen) {
    const schema_key_t *ks = &s->keys[k];
    if (!ks->lo_kind && !ks->hi_kind) return 0;
    for (int i = 0; i < e->n_values; i++) {
        const nl_value_t *v = &e->values[i];
        if (v->kind != NL_INTEGER && v->kind != NL_REAL) continue;
        if (schema_in_bounds(ks->lo_kind, ks->lo, ks->hi_kind, ks->hi, v->r)) continue;
        char bounds[96];
        schema_format_bounds(ks->type == SCHEMA_REAL || ks->type == SCHEMA_REALS, ks->lo_kind, ks->lo,
                             ks->hi_kind, ks->hi, bounds, sizeof bounds);
        return pos_error(err, errlen, path, v->line, v->col, "&%s %s: must be %s, got %s%s%s%s", s->group,
                         e->key, bounds, v->raw, ks->why ? " (" : "", ks->why ? ks->why : "", ks->why ? ")" : "");
    }
    return 0;
}

int schema_unknown_key_error(const schema_t *s, const nl_entry_t *e, const char *path, char *err,
                             size_t errlen) {
    char valid[1024] = "", hint[128] = "";
    const char *names[128];
    int n = s->n_keys < 128 ? s->n_keys : 128;
    for (int k = 0; k < n; k++) {
        names[k] = s->keys[k].key;
        size_t l = strlen(valid);
        if (l + 1 < sizeof valid) snprintf(valid + l, sizeof valid - l, "%s%s", k ? ", " : "", s->keys[k].key);
    }
    const char *close = schema_closest(e->key, names, n);
    if (close) snprintf(hint, sizeof hint, "; did you mean '%s'?", close);
    return pos_error(err, errlen, path, e->line, e->col, "&%s unknown key '%s' (valid keys: %s)%s", s->group,
                     e->key, valid, hint);
}
