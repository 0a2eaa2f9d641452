/* config_schema.c — the schema engine: one key against its entry in the key table (config.c).
 * Owns: finding groups and keys, a key's field in config_t, the table's defaults, typed
 * assignment of a parsed value (type, range, 32-bit fit, choices and the enum beside them,
 * "not implemented"), the messages that list what is valid with a "did you mean" for a typo,
 * and the assignment of a whole parsed group. Uses: config_internal.h, stages.h (the &stage
 * key positions), schema.h (the typo distance and bound wording it shares with the tools'
 * tables), core/error.h. */
#include "config/config.h"
#include "config/config_internal.h"
#include "config/schema.h"
#include "config/stages.h"
#include "core/error.h"
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* A &stage key's field is in stages[stage_at] (its offset is that of stages[0]). */
static size_t stage_shift(const config_t *cfg, const key_spec_t *ks) {
    return ks->group == G_STAGE ? (size_t)cfg->stage_at * sizeof(cfg_stage_t) : 0;
}
void *cfg_field_ptr(config_t *cfg, const key_spec_t *ks) { return (char *)cfg + ks->offset + stage_shift(cfg, ks); }
const void *cfg_field_cptr(const config_t *cfg, const key_spec_t *ks) {
    return (const char *)cfg + ks->offset + stage_shift(cfg, ks);
}

int cfg_find_group(const char *name) {
    for (int g = 0; g < N_GROUPS; g++)
        if (!strcmp(cfg_group_names[g], name)) return g;
    return -1;
}

int cfg_find_key(int group, const char *key) {
    for (int k = 0; k < cfg_n_keys; k++)
        if (cfg_keys[k].group == group && !strcmp(cfg_keys[k].key, key)) return k;
    return -1;
}

/* What a key holds, for the parser's check of a repeat count before it copies anything
 * (namelist_parse_keys): an array its maximum, any other key one value; 0 for a key the schema
 * does not know (its own message, with a suggestion, comes later). */
int cfg_key_capacity(const char *group, const char *key, void *unused) {
    (void)unused;
    int g = cfg_find_group(group), k = g < 0 ? -1 : cfg_find_key(g, key);
    if (k < 0) return 0;
    return cfg_keys[k].type == K_INT_ARRAY ? (int)cfg_keys[k].size : 1;
}

/* Only for the cross-key checks below, where the names are literals: a typo here is a bug. */
int cfg_key_index(int group, const char *key) {
    int k = cfg_find_key(group, key);
    ASSERT(k >= 0);
    return k;
}

__attribute__((format(printf, 4, 5)))
int cfg_error(parse_ctx_t *ctx, int line, int col, const char *fmt, ...) {
    int n = line < 0 ? snprintf(ctx->msg, ctx->msgsize, "%s: ", ctx->over[-1 - line].label)
                     : snprintf(ctx->msg, ctx->msgsize, "%s:%d:%d: ", ctx->path, line, col);
    if (n < 0 || (size_t)n >= ctx->msgsize) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg + n, ctx->msgsize - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- defaults ---------------------------------------------------------------------------- */

/* The table's defaults, before anything derived (d_ff, global_batch stay 0 = "derive me"). */
void cfg_set_key_defaults(config_t *cfg, int group) {
    for (int k = 0; k < cfg_n_keys; k++) {
        const key_spec_t *ks = &cfg_keys[k];
        if (group >= 0 && ks->group != group) continue;
        void *f = cfg_field_ptr(cfg, ks);
        switch (ks->type) {
        case K_INT: *(int *)f = (int)ks->def; break;
        case K_I64: *(int64_t *)f = (int64_t)ks->def; break;
        case K_REAL: *(double *)f = ks->def; break;
        case K_BOOL: *(bool *)f = ks->def != 0; break;
        case K_STR: cfg_store_choice(cfg, ks, ks->def_str); break;
        case K_INT_ARRAY: break; /* empty */
        }
    }
}

void cfg_set_table_defaults(config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg_set_key_defaults(cfg, -1);
}

/* The position of value in "a|b|c" (exact spelling), or -1. */
static int choice_index(const char *names, const char *value) {
    int i = 0;
    for (const char *c = names; c;) {
        size_t n = strcspn(c, "|");
        if (strlen(value) == n && !strncmp(c, value, n)) return i;
        i++;
        c = c[n] == '|' ? c + n + 1 : NULL;
    }
    return -1;
}

void cfg_store_choice(config_t *cfg, const key_spec_t *ks, const char *value) {
    snprintf(cfg_field_ptr(cfg, ks), ks->size, "%s", value);
    if (!ks->enum_names) return;
    const int e = choice_index(ks->enum_names, value);
    ASSERT(e >= 0); /* a value the key accepts that its enum lacks: the table is wrong */
    *(int *)((char *)cfg + ks->enum_offset) = e;
}

int config_set_choice(config_t *cfg, const char *group, const char *key, const char *value) {
    const int g = cfg_find_group(group), k = g < 0 ? -1 : cfg_find_key(g, key);
    if (k < 0 || !cfg_keys[k].choices || choice_index(cfg_keys[k].choices, value) < 0) return -1;
    cfg_store_choice(cfg, &cfg_keys[k], value);
    return 0;
}

/* ---- messages that list what is valid ---------------------------------------------------- */

/* A typo, not a different word (schema.h: one edit for short names, two for long ones). */
static int typo_distance(const char *typo, const char *name) { return schema_typo_distance(typo, name); }

static const char *closest_group(const char *name) {
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int g = 0; g < N_GROUPS; g++) {
        int d = typo_distance(name, cfg_group_names[g]);
        if (d < best_d) best_d = d, best = cfg_group_names[g];
    }
    return best;
}

static const char *closest_key(int group, const char *key) {
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int k = 0; k < cfg_n_keys; k++) {
        if (cfg_keys[k].group != group) continue;
        int d = typo_distance(key, cfg_keys[k].key);
        if (d < best_d) best_d = d, best = cfg_keys[k].key;
    }
    return best;
}

/* Appends "text" to a NUL-terminated buffer without overflowing it. */
void cfg_append(char *buf, size_t size, const char *text) {
    size_t len = strlen(buf);
    if (len + 1 < size) snprintf(buf + len, size - len, "%s", text);
}

int cfg_unknown_group_error(parse_ctx_t *ctx, const nl_group_t *g) {
    char valid[256] = "", hint[128] = "";
    for (int i = 0; i < N_GROUPS; i++) {
        cfg_append(valid, sizeof valid, i ? ", &" : "&");
        cfg_append(valid, sizeof valid, cfg_group_names[i]);
    }
    const char *close = closest_group(g->name);
    if (close) snprintf(hint, sizeof hint, "; did you mean '&%s'?", close);
    return cfg_error(ctx, g->line, g->col, "unknown group '&%s' (valid groups: %s)%s", g->name, valid, hint);
}

int cfg_unknown_key_error(parse_ctx_t *ctx, int group, const nl_entry_t *e) {
    char valid[1024] = "", hint[128] = "";
    for (int k = 0; k < cfg_n_keys; k++) {
        if (cfg_keys[k].group != group) continue;
        if (valid[0]) cfg_append(valid, sizeof valid, ", ");
        cfg_append(valid, sizeof valid, cfg_keys[k].key);
    }
    const char *close = closest_key(group, e->key);
    if (close) {
        snprintf(hint, sizeof hint, "; did you mean '%s'?", close);
    } else {
        for (int g = 0; g < N_GROUPS && !hint[0]; g++)
            if (g != group && cfg_find_key(g, e->key) >= 0)
                snprintf(hint, sizeof hint, "; '%s' belongs in &%s", e->key, cfg_group_names[g]);
    }
    return cfg_error(ctx, e->line, e->col, "&%s unknown key '%s' (valid keys: %s)%s", cfg_group_names[group], e->key,
                     valid, hint);
}

/* "'a', 'b', 'c'" from "a|b|c" */
static void format_choices(const char *choices, char *out, size_t size) {
    out[0] = '\0';
    for (const char *c = choices; *c;) {
        size_t n = strcspn(c, "|");
        char one[64];
        snprintf(one, sizeof one, "%s'%.*s'", c == choices ? "" : ", ", (int)n, c);
        cfg_append(out, size, one);
        c += n + (c[n] == '|');
    }
}

/* ">= 0", "> 0", "<= 3", "in [0, 1)" (integers exactly for integer keys) */
static void format_bounds(const key_spec_t *ks, char *out, size_t size) {
    schema_format_bounds(ks->type == K_REAL, ks->lo_kind, ks->lo, ks->hi_kind, ks->hi, out, size);
}

static bool in_bounds(const key_spec_t *ks, double x) {
    return schema_in_bounds(ks->lo_kind, ks->lo, ks->hi_kind, ks->hi, x);
}

/* ---- assigning one key ------------------------------------------------------------------- */

static const char *expected_kind(key_type_t t) {
    switch (t) {
    case K_INT:
    case K_I64:
    case K_INT_ARRAY: return "an integer";
    case K_REAL: return "a real number";
    case K_STR: return "a string in quotes";
    case K_BOOL: return "a logical (.true. or .false.)";
    }
    return "a value";
}

static bool kind_fits(key_type_t t, nl_kind_t kind) {
    switch (t) {
    case K_INT:
    case K_I64:
    case K_INT_ARRAY: return kind == NL_INTEGER;
    case K_REAL: return kind == NL_INTEGER || kind == NL_REAL; /* 1 is a fine real */
    case K_STR: return kind == NL_STRING;
    case K_BOOL: return kind == NL_LOGICAL;
    }
    return false;
}

/* Type, range, and (for int fields) 32-bit fit of one value. */
static int check_value(parse_ctx_t *ctx, const key_spec_t *ks, const nl_value_t *v) {
    const char *g = cfg_group_names[ks->group];
    if (!kind_fits(ks->type, v->kind))
        return cfg_error(ctx, v->line, v->col, "&%s %s: expected %s, got %s %s", g, ks->key, expected_kind(ks->type),
                         namelist_kind_name(v->kind), v->raw);
    if (v->kind != NL_INTEGER && v->kind != NL_REAL) return 0;
    if ((ks->lo_kind || ks->hi_kind) && !in_bounds(ks, v->r)) {
        char bounds[96];
        format_bounds(ks, bounds, sizeof bounds);
        return cfg_error(ctx, v->line, v->col, "&%s %s: must be %s, got %s%s%s%s", g, ks->key, bounds, v->raw,
                         ks->why ? " (" : "", ks->why ? ks->why : "", ks->why ? ")" : "");
    }
    if ((ks->type == K_INT || ks->type == K_INT_ARRAY) && (v->i < INT_MIN || v->i > INT_MAX))
        return cfg_error(ctx, v->line, v->col, "&%s %s: %s does not fit in a 32-bit integer", g, ks->key, v->raw);
    return 0;
}

/* Whether `value` is one of "a|b|c" (any case); the canonical spelling goes to dst if given. */
static bool match_choice(const char *choices, const char *value, char *dst, size_t size) {
    for (const char *c = choices; c && *c;) {
        size_t n = strcspn(c, "|");
        if (strlen(value) == n && !strncasecmp(c, value, n)) {
            if (dst) snprintf(dst, size, "%.*s", (int)n, c);
            return true;
        }
        c += n + (c[n] == '|');
    }
    return false;
}

/* One of ks->choices (any case); stores the canonical lower-case spelling. A planned value is
 * refused as not implemented, anything else as not one of the choices. */
static int assign_choice(parse_ctx_t *ctx, const key_spec_t *ks, const nl_value_t *v, config_t *cfg) {
    char canonical[64];
    if (match_choice(ks->choices, v->s, canonical, sizeof canonical)) {
        cfg_store_choice(cfg, ks, canonical);
        return 0;
    }
    char list[256];
    format_choices(ks->choices, list, sizeof list);
    const char *g = cfg_group_names[ks->group];
    const char *use = strchr(ks->choices, '|') ? "use one of " : "use ";
    if (ctx->plan_devices && ks->group == G_RUN && strcmp(ks->key, "device") == 0 &&
        match_choice(ks->planned, v->s, canonical, sizeof canonical)) {
        cfg_store_choice(cfg, ks, canonical); /* --plan --machine: the machine file's devices */
        return 0;
    }
    if (match_choice(ks->planned, v->s, NULL, 0))
        return cfg_error(ctx, v->line, v->col, "&%s %s: '%s': %s; %s%s", g, ks->key, v->s, ks->not_impl, use, list);
    return cfg_error(ctx, v->line, v->col, "&%s %s: '%s' is not one of %s", g, ks->key, v->s, list);
}

/* A key marked not implemented (not_impl without planned values) accepts only its default. */
static int refuse_unimplemented(parse_ctx_t *ctx, const key_spec_t *ks, const nl_value_t *v) {
    if (!ks->not_impl || ks->planned) return 0;
    bool is_default = true;
    switch (ks->type) {
    case K_INT:
    case K_I64: is_default = v->i == (int64_t)ks->def; break;
    case K_REAL: is_default = v->r == ks->def; break;
    case K_BOOL: is_default = v->b == (ks->def != 0); break;
    case K_STR: is_default = strcmp(v->s, ks->def_str) == 0; break;
    case K_INT_ARRAY: break;
    }
    if (is_default) return 0;
    return cfg_error(ctx, v->line, v->col, "&%s %s: %s; remove the key", cfg_group_names[ks->group], ks->key,
                     ks->not_impl);
}

static int assign_string(parse_ctx_t *ctx, const key_spec_t *ks, const nl_value_t *v, config_t *cfg) {
    if (ks->choices) return assign_choice(ctx, ks, v, cfg);
    char *dst = cfg_field_ptr(cfg, ks);
    size_t len = strlen(v->s);
    if (len >= ks->size)
        return cfg_error(ctx, v->line, v->col, "&%s %s: string is %zu characters long; at most %zu allowed",
                         cfg_group_names[ks->group], ks->key, len, ks->size - 1);
    memcpy(dst, v->s, len + 1);
    return 0;
}

static int assign_int_array(parse_ctx_t *ctx, const key_spec_t *ks, const nl_entry_t *e, config_t *cfg) {
    if ((size_t)e->n_values > ks->size) {
        const nl_value_t *extra = &e->values[ks->size];
        return cfg_error(ctx, extra->line, extra->col, "&%s %s: at most %zu values allowed, got %d",
                         cfg_group_names[ks->group], ks->key, ks->size, e->n_values);
    }
    int *dst = cfg_field_ptr(cfg, ks);
    for (int i = 0; i < e->n_values; i++) {
        if (check_value(ctx, ks, &e->values[i]) != 0) return -1;
        dst[i] = (int)e->values[i].i;
    }
    *(int *)((char *)cfg + ks->count_offset) = e->n_values;
    return 0;
}

int cfg_assign_entry(parse_ctx_t *ctx, const key_spec_t *ks, const nl_entry_t *e, config_t *cfg) {
    if (ks->type == K_INT_ARRAY) return assign_int_array(ctx, ks, e, cfg);
    if (e->n_values != 1)
        return cfg_error(ctx, e->values[1].line, e->values[1].col, "&%s %s: expected one value, got %d values",
                         cfg_group_names[ks->group], ks->key, e->n_values);
    const nl_value_t *v = &e->values[0];
    if (check_value(ctx, ks, v) != 0 || refuse_unimplemented(ctx, ks, v) != 0) return -1;
    void *f = cfg_field_ptr(cfg, ks);
    switch (ks->type) {
    case K_INT: *(int *)f = (int)v->i; break;
    case K_I64: *(int64_t *)f = v->i; break;
    case K_REAL: *(double *)f = v->r; break;
    case K_BOOL: *(bool *)f = v->b; break;
    case K_STR: return assign_string(ctx, ks, v, cfg);
    case K_INT_ARRAY: break; /* handled above */
    }
    return 0;
}

/* A new &stage group: the next element of stages[], its keys counted afresh (each group may set
 * each key once). */
static int open_stage(parse_ctx_t *ctx, const nl_group_t *g, config_t *cfg) {
    if (cfg->n_stages == CFG_MAX_STAGES)
        return cfg_error(ctx, g->line, g->col, "&stage: at most %d &stage groups", CFG_MAX_STAGES);
    cfg->stage_at = cfg->n_stages++;
    cfg_set_key_defaults(cfg, G_STAGE);
    cfg_stage_t *st = &cfg->stages[cfg->stage_at];
    st->line = g->line;
    st->col = g->col;
    for (int k = 0; k < cfg_n_keys; k++)
        if (cfg_keys[k].group == G_STAGE) ctx->set_by[k] = NULL;
    return 0;
}

static void note_stage_key(config_t *cfg, const key_spec_t *ks, const nl_entry_t *e) {
    int i = stage_key_index(ks->key);
    ASSERT(i >= 0);
    cfg->stages[cfg->stage_at].key_line[i] = e->line;
    cfg->stages[cfg->stage_at].key_col[i] = e->col;
}

int cfg_apply_group(parse_ctx_t *ctx, const nl_group_t *g, config_t *cfg) {
    int gi = cfg_find_group(g->name);
    if (gi < 0) return cfg_unknown_group_error(ctx, g);
    if (gi == G_STAGE) {
        if (open_stage(ctx, g, cfg) != 0) return -1;
    } else if (ctx->group_at[gi])
        return cfg_error(ctx, g->line, g->col, "duplicate group '&%s' (first opened at line %d)", g->name,
                         ctx->group_at[gi]->line);
    ctx->group_at[gi] = g;
    for (int i = 0; i < g->n_entries; i++) {
        const nl_entry_t *e = &g->entries[i];
        int k = cfg_find_key(gi, e->key);
        if (k < 0) return cfg_unknown_key_error(ctx, gi, e);
        if (ctx->set_by[k])
            return cfg_error(ctx, e->line, e->col, "&%s %s: duplicate key (first set at line %d)", g->name, e->key,
                             ctx->set_by[k]->line);
        ctx->set_by[k] = e;
        if (cfg_assign_entry(ctx, &cfg_keys[k], e, cfg) != 0) return -1;
        if (gi == G_STAGE) note_stage_key(cfg, &cfg_keys[k], e);
    }
    return 0;
}
