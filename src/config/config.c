/* config.c — the typed run configuration: schema, defaults, validation, echo (see config.h).
 * Owns: the table of every namelist key (group, type, struct field, default, allowed values and
 * range), the checks that involve several keys, and config_to_namelist. The syntax itself is
 * namelist.c's. Uses: namelist.h, core/error.h, core/alloc.h.
 *
 * One table drives defaults, assignment, range checks, error messages and the echo, so a new
 * key is one line in key_specs[] (plus a cross-key check if it has one).
 * Every error is formatted into a buffer, everything parsed is freed, and only then is
 * fatal_user() called: unit tests longjmp out of it and must not leak. */
#include "config/config.h"
#include "config/namelist.h"
#include "core/alloc.h"
#include "core/error.h"
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CFG_MSG 2048             /* one error line */
#define CFG_MAX_FILE (16 << 20)  /* a namelist bigger than this is not a namelist */

/* ---- schema ------------------------------------------------------------------------------ */

enum { G_RUN, G_MODEL, G_PARALLEL, G_TRAIN, G_DATA, G_CHECKPOINT, G_LOG, N_GROUPS };
static const char *const group_names[N_GROUPS] = {"run", "model", "parallel", "train", "data", "checkpoint", "log"};

typedef enum key_type { K_INT, K_I64, K_REAL, K_STR, K_BOOL, K_INT_ARRAY } key_type_t;

typedef struct key_spec {
    int group;
    const char *key;       /* namelist name (may differ from the field: &checkpoint dir -> ckpt_dir) */
    key_type_t type;
    size_t offset;         /* of the field in config_t */
    size_t size;           /* K_STR: capacity of the char array; K_INT_ARRAY: max count */
    size_t count_offset;   /* K_INT_ARRAY: offset of the int that holds the count */
    double def;            /* numeric default */
    const char *def_str;   /* K_STR default */
    const char *choices;   /* K_STR: "a|b|c" (matched case-insensitively), NULL = free text */
    const char *planned;   /* K_STR: a value in the DESIGN contract that is not implemented yet */
    char lo_kind, hi_kind; /* '[' or '(' / ']' or ')' for inclusive / exclusive; 0 = unbounded */
    double lo, hi;
} key_spec_t;

#define FIELD(f) .offset = offsetof(config_t, f)
#define INT_KEY(g, k, f, d, ...) {.group = g, .key = k, .type = K_INT, FIELD(f), .def = d, __VA_ARGS__}
#define I64_KEY(g, k, f, d, ...) {.group = g, .key = k, .type = K_I64, FIELD(f), .def = d, __VA_ARGS__}
#define REAL_KEY(g, k, f, d, ...) {.group = g, .key = k, .type = K_REAL, FIELD(f), .def = d, __VA_ARGS__}
#define BOOL_KEY(g, k, f, d) {.group = g, .key = k, .type = K_BOOL, FIELD(f), .def = d}
#define STR_KEY(g, k, f, d, ch) \
    {.group = g, .key = k, .type = K_STR, FIELD(f), .size = sizeof(((config_t *)0)->f), .def_str = d, .choices = ch}
#define AT_LEAST(x) .lo_kind = '[', .lo = (x)
#define ABOVE(x) .lo_kind = '(', .lo = (x)
#define AT_MOST(x) .hi_kind = ']', .hi = (x)
#define BELOW(x) .hi_kind = ')', .hi = (x)
#define UNBOUNDED .lo_kind = 0

static const key_spec_t key_specs[] = {
    STR_KEY(G_RUN, "name", name, "run", NULL),
    STR_KEY(G_RUN, "out_dir", out_dir, "runs", NULL),
    STR_KEY(G_RUN, "mode", mode, "train", "train|eval|generate"),
    STR_KEY(G_RUN, "device", device, "cpu", "cpu|cuda"),
    I64_KEY(G_RUN, "seed", seed, 1337, AT_LEAST(0)),
    STR_KEY(G_RUN, "init_from", init_from, "", NULL),
    STR_KEY(G_RUN, "prompt", prompt, "", NULL),
    {.group = G_RUN, .key = "prompt_ids", .type = K_INT_ARRAY, FIELD(prompt_ids), .size = CFG_MAX_IDS,
     .count_offset = offsetof(config_t, n_prompt_ids), AT_LEAST(0)},
    INT_KEY(G_RUN, "max_new_tokens", max_new_tokens, 64, AT_LEAST(1)),
    REAL_KEY(G_RUN, "temperature", temperature, 1.0, AT_LEAST(0)),
    INT_KEY(G_RUN, "top_k", top_k, 40, AT_LEAST(0)),

    INT_KEY(G_MODEL, "n_layer", n_layer, 12, AT_LEAST(1)),
    INT_KEY(G_MODEL, "n_head", n_head, 12, AT_LEAST(1)),
    INT_KEY(G_MODEL, "d_model", d_model, 768, AT_LEAST(1)),
    INT_KEY(G_MODEL, "d_ff", d_ff, 0, AT_LEAST(0)), /* 0 = 4 * d_model, resolved after parsing */
    INT_KEY(G_MODEL, "vocab_size", vocab_size, 50257, AT_LEAST(1)),
    INT_KEY(G_MODEL, "seq_len", seq_len, 1024, AT_LEAST(1)),
    REAL_KEY(G_MODEL, "dropout", dropout, 0.0, AT_LEAST(0), BELOW(1)),
    INT_KEY(G_MODEL, "n_experts", n_experts, 0, AT_LEAST(0)),
    INT_KEY(G_MODEL, "top_k", top_k_moe, 2, AT_LEAST(1)),
    INT_KEY(G_MODEL, "moe_every", moe_every, 1, AT_LEAST(1)),
    REAL_KEY(G_MODEL, "capacity_factor", capacity_factor, 1.25, ABOVE(0)),
    REAL_KEY(G_MODEL, "router_noise", router_noise, 0.0, AT_LEAST(0)),
    REAL_KEY(G_MODEL, "aux_loss_coef", aux_loss_coef, 0.01, AT_LEAST(0)),
    REAL_KEY(G_MODEL, "z_loss_coef", z_loss_coef, 0.001, AT_LEAST(0)),

    INT_KEY(G_PARALLEL, "dp", dp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "tp", tp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "pp", pp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "ep", ep, 1, AT_LEAST(1)),
    STR_KEY(G_PARALLEL, "schedule", schedule, "1f1b", "1f1b|gpipe|interleaved"),
    INT_KEY(G_PARALLEL, "virtual_stages", virtual_stages, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "zero_stage", zero_stage, 0, AT_LEAST(0), AT_MOST(3)),
    STR_KEY(G_PARALLEL, "recompute", recompute, "none", "none|selective|full"),
    STR_KEY(G_PARALLEL, "bind", bind, "cores", "cores|none"),
    REAL_KEY(G_PARALLEL, "bucket_mb", bucket_mb, 25.0, ABOVE(0)),

    INT_KEY(G_TRAIN, "max_steps", max_steps, 100, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "global_batch", global_batch, 0, AT_LEAST(0)), /* 0 = micro_batch * dp */
    INT_KEY(G_TRAIN, "micro_batch", micro_batch, 4, AT_LEAST(1)),
    REAL_KEY(G_TRAIN, "lr", lr, 6e-4, ABOVE(0)),
    REAL_KEY(G_TRAIN, "min_lr", min_lr, 0.0, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "warmup_steps", warmup_steps, 0, AT_LEAST(0)),
    STR_KEY(G_TRAIN, "lr_schedule", lr_schedule, "cosine", "cosine|constant|linear|wsd"),
    REAL_KEY(G_TRAIN, "decay_fraction", decay_fraction, 0.2, ABOVE(0), AT_MOST(1)),
    REAL_KEY(G_TRAIN, "weight_decay", weight_decay, 0.1, AT_LEAST(0)),
    REAL_KEY(G_TRAIN, "beta1", beta1, 0.9, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_TRAIN, "beta2", beta2, 0.95, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_TRAIN, "eps", eps, 1e-8, ABOVE(0)),
    REAL_KEY(G_TRAIN, "grad_clip", grad_clip, 1.0, AT_LEAST(0)),
    STR_KEY(G_TRAIN, "precision", precision, "fp32", "fp32|bf16|fp16"),
    {.group = G_TRAIN, .key = "on_anomaly", .type = K_STR, FIELD(on_anomaly), .size = sizeof(((config_t *)0)->on_anomaly),
     .def_str = "skip", .choices = "warn|skip|abort", .planned = "rollback"},
    INT_KEY(G_TRAIN, "inject_nan_step", inject_nan_step, -1, AT_LEAST(-1)),

    STR_KEY(G_DATA, "train_files", train_files, "", NULL),
    STR_KEY(G_DATA, "val_files", val_files, "", NULL),
    BOOL_KEY(G_DATA, "shuffle", shuffle, false),
    INT_KEY(G_DATA, "val_every", val_every, 0, AT_LEAST(0)),
    INT_KEY(G_DATA, "val_batches", val_batches, 8, AT_LEAST(1)),
    STR_KEY(G_DATA, "tokenizer", tokenizer, "", NULL),

    STR_KEY(G_CHECKPOINT, "dir", ckpt_dir, "", NULL),
    INT_KEY(G_CHECKPOINT, "every", ckpt_every, 0, AT_LEAST(0)),
    INT_KEY(G_CHECKPOINT, "keep", ckpt_keep, 3, AT_LEAST(1)),
    STR_KEY(G_CHECKPOINT, "resume", resume, "none", NULL), /* 'none' | 'auto' | a path */
    REAL_KEY(G_CHECKPOINT, "timeout_s", timeout_s, 600, ABOVE(0)),
    REAL_KEY(G_CHECKPOINT, "io_timeout_s", io_timeout_s, 3600, ABOVE(0)),
    BOOL_KEY(G_CHECKPOINT, "overwrite", ckpt_overwrite, false),
    BOOL_KEY(G_CHECKPOINT, "save_weights", save_weights, 1),
    INT_KEY(G_CHECKPOINT, "striping_factor", striping_factor, 0, AT_LEAST(0)),
    INT_KEY(G_CHECKPOINT, "striping_unit", striping_unit, 0, AT_LEAST(0)),

    INT_KEY(G_LOG, "every", log_every, 1, AT_LEAST(1)),
    BOOL_KEY(G_LOG, "jsonl", jsonl, true),
    BOOL_KEY(G_LOG, "tensorboard", tensorboard, false),
    REAL_KEY(G_LOG, "peak_flops", peak_flops, 0, AT_LEAST(0)),
    STR_KEY(G_LOG, "papi_events", papi_events, "", NULL),
    BOOL_KEY(G_LOG, "profile", profile, false),
};
#define N_KEYS ((int)(sizeof key_specs / sizeof key_specs[0]))

/* What the parse saw, for positions in messages: which entry set each key, where each group was. */
typedef struct parse_ctx {
    const char *path;
    char *msg;
    size_t msgsize;
    const nl_entry_t *set_by[N_KEYS];
    const nl_group_t *group_at[N_GROUPS];
} parse_ctx_t;

static void *field_ptr(config_t *cfg, const key_spec_t *ks) { return (char *)cfg + ks->offset; }
static const void *field_cptr(const config_t *cfg, const key_spec_t *ks) { return (const char *)cfg + ks->offset; }

static int find_group(const char *name) {
    for (int g = 0; g < N_GROUPS; g++)
        if (!strcmp(group_names[g], name)) return g;
    return -1;
}

static int find_key(int group, const char *key) {
    for (int k = 0; k < N_KEYS; k++)
        if (key_specs[k].group == group && !strcmp(key_specs[k].key, key)) return k;
    return -1;
}

/* Only for the cross-key checks below, where the names are literals: a typo here is a bug. */
static int key_index(int group, const char *key) {
    int k = find_key(group, key);
    ASSERT(k >= 0);
    return k;
}

__attribute__((format(printf, 4, 5)))
static int cfg_error(parse_ctx_t *ctx, int line, int col, const char *fmt, ...) {
    int n = snprintf(ctx->msg, ctx->msgsize, "%s:%d:%d: ", ctx->path, line, col);
    if (n < 0 || (size_t)n >= ctx->msgsize) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg + n, ctx->msgsize - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- defaults ---------------------------------------------------------------------------- */

/* The table's defaults, before anything derived (d_ff, global_batch stay 0 = "derive me"). */
static void set_table_defaults(config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int k = 0; k < N_KEYS; k++) {
        const key_spec_t *ks = &key_specs[k];
        void *f = field_ptr(cfg, ks);
        switch (ks->type) {
        case K_INT: *(int *)f = (int)ks->def; break;
        case K_I64: *(int64_t *)f = (int64_t)ks->def; break;
        case K_REAL: *(double *)f = ks->def; break;
        case K_BOOL: *(bool *)f = ks->def != 0; break;
        case K_STR: snprintf(f, ks->size, "%s", ks->def_str); break;
        case K_INT_ARRAY: break; /* empty */
        }
    }
}

void config_defaults(config_t *cfg) {
    set_table_defaults(cfg);
    /* d_ff is used directly by the model, so it holds its effective value; global_batch stays 0,
     * which means micro_batch * dp and stays right if a test changes dp or micro_batch. */
    cfg->d_ff = 4 * cfg->d_model;
}

/* ---- messages that list what is valid ---------------------------------------------------- */

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
static int typo_distance(const char *typo, const char *name) {
    int d = edit_distance(typo, name);
    return d <= (strlen(name) >= 6 ? 2 : 1) ? d : INT_MAX;
}

static const char *closest_group(const char *name) {
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int g = 0; g < N_GROUPS; g++) {
        int d = typo_distance(name, group_names[g]);
        if (d < best_d) best_d = d, best = group_names[g];
    }
    return best;
}

static const char *closest_key(int group, const char *key) {
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int k = 0; k < N_KEYS; k++) {
        if (key_specs[k].group != group) continue;
        int d = typo_distance(key, key_specs[k].key);
        if (d < best_d) best_d = d, best = key_specs[k].key;
    }
    return best;
}

/* Appends "text" to a NUL-terminated buffer without overflowing it. */
static void append(char *buf, size_t size, const char *text) {
    size_t len = strlen(buf);
    if (len + 1 < size) snprintf(buf + len, size - len, "%s", text);
}

static int unknown_group_error(parse_ctx_t *ctx, const nl_group_t *g) {
    char valid[256] = "", hint[128] = "";
    for (int i = 0; i < N_GROUPS; i++) {
        append(valid, sizeof valid, i ? ", &" : "&");
        append(valid, sizeof valid, group_names[i]);
    }
    const char *close = closest_group(g->name);
    if (close) snprintf(hint, sizeof hint, "; did you mean '&%s'?", close);
    return cfg_error(ctx, g->line, g->col, "unknown group '&%s' (valid groups: %s)%s", g->name, valid, hint);
}

static int unknown_key_error(parse_ctx_t *ctx, int group, const nl_entry_t *e) {
    char valid[1024] = "", hint[128] = "";
    for (int k = 0; k < N_KEYS; k++) {
        if (key_specs[k].group != group) continue;
        if (valid[0]) append(valid, sizeof valid, ", ");
        append(valid, sizeof valid, key_specs[k].key);
    }
    const char *close = closest_key(group, e->key);
    if (close) {
        snprintf(hint, sizeof hint, "; did you mean '%s'?", close);
    } else {
        for (int g = 0; g < N_GROUPS && !hint[0]; g++)
            if (g != group && find_key(g, e->key) >= 0)
                snprintf(hint, sizeof hint, "; '%s' belongs in &%s", e->key, group_names[g]);
    }
    return cfg_error(ctx, e->line, e->col, "&%s unknown key '%s' (valid keys: %s)%s", group_names[group], e->key,
                     valid, hint);
}

/* "'a', 'b', 'c'" from "a|b|c" */
static void format_choices(const char *choices, char *out, size_t size) {
    out[0] = '\0';
    for (const char *c = choices; *c;) {
        size_t n = strcspn(c, "|");
        char one[64];
        snprintf(one, sizeof one, "%s'%.*s'", c == choices ? "" : ", ", (int)n, c);
        append(out, size, one);
        c += n + (c[n] == '|');
    }
}

/* ">= 0", "> 0", "<= 3", "in [0, 1)" */
static void format_bounds(const key_spec_t *ks, char *out, size_t size) {
    if (ks->lo_kind && ks->hi_kind)
        snprintf(out, size, "in %c%g, %g%c", ks->lo_kind, ks->lo, ks->hi, ks->hi_kind);
    else if (ks->lo_kind)
        snprintf(out, size, "%s %g", ks->lo_kind == '[' ? ">=" : ">", ks->lo);
    else
        snprintf(out, size, "%s %g", ks->hi_kind == ']' ? "<=" : "<", ks->hi);
}

static bool in_bounds(const key_spec_t *ks, double x) {
    if (ks->lo_kind == '[' && !(x >= ks->lo)) return false;
    if (ks->lo_kind == '(' && !(x > ks->lo)) return false;
    if (ks->hi_kind == ']' && !(x <= ks->hi)) return false;
    if (ks->hi_kind == ')' && !(x < ks->hi)) return false;
    return true;
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
    const char *g = group_names[ks->group];
    if (!kind_fits(ks->type, v->kind))
        return cfg_error(ctx, v->line, v->col, "&%s %s: expected %s, got %s %s", g, ks->key, expected_kind(ks->type),
                         namelist_kind_name(v->kind), v->raw);
    if (v->kind != NL_INTEGER && v->kind != NL_REAL) return 0;
    if ((ks->lo_kind || ks->hi_kind) && !in_bounds(ks, v->r)) {
        char bounds[64];
        format_bounds(ks, bounds, sizeof bounds);
        return cfg_error(ctx, v->line, v->col, "&%s %s: must be %s, got %s", g, ks->key, bounds, v->raw);
    }
    if ((ks->type == K_INT || ks->type == K_INT_ARRAY) && (v->i < INT_MIN || v->i > INT_MAX))
        return cfg_error(ctx, v->line, v->col, "&%s %s: %s does not fit in a 32-bit integer", g, ks->key, v->raw);
    return 0;
}

/* One of ks->choices (any case); stores the canonical lower-case spelling. */
static int assign_choice(parse_ctx_t *ctx, const key_spec_t *ks, const nl_value_t *v, char *dst) {
    for (const char *c = ks->choices; *c;) {
        size_t n = strcspn(c, "|");
        if (strlen(v->s) == n && !strncasecmp(c, v->s, n)) {
            snprintf(dst, ks->size, "%.*s", (int)n, c);
            return 0;
        }
        c += n + (c[n] == '|');
    }
    char list[256];
    format_choices(ks->choices, list, sizeof list);
    const char *g = group_names[ks->group];
    if (ks->planned && !strcasecmp(ks->planned, v->s))
        return cfg_error(ctx, v->line, v->col, "&%s %s: '%s' is not implemented yet; use one of %s", g, ks->key,
                         v->s, list);
    return cfg_error(ctx, v->line, v->col, "&%s %s: '%s' is not one of %s", g, ks->key, v->s, list);
}

static int assign_string(parse_ctx_t *ctx, const key_spec_t *ks, const nl_value_t *v, char *dst) {
    if (ks->choices) return assign_choice(ctx, ks, v, dst);
    size_t len = strlen(v->s);
    if (len >= ks->size)
        return cfg_error(ctx, v->line, v->col, "&%s %s: string is %zu characters long; at most %zu allowed",
                         group_names[ks->group], ks->key, len, ks->size - 1);
    memcpy(dst, v->s, len + 1);
    return 0;
}

static int assign_int_array(parse_ctx_t *ctx, const key_spec_t *ks, const nl_entry_t *e, config_t *cfg) {
    if ((size_t)e->n_values > ks->size) {
        const nl_value_t *extra = &e->values[ks->size];
        return cfg_error(ctx, extra->line, extra->col, "&%s %s: at most %zu values allowed, got %d",
                         group_names[ks->group], ks->key, ks->size, e->n_values);
    }
    int *dst = field_ptr(cfg, ks);
    for (int i = 0; i < e->n_values; i++) {
        if (check_value(ctx, ks, &e->values[i]) != 0) return -1;
        dst[i] = (int)e->values[i].i;
    }
    *(int *)((char *)cfg + ks->count_offset) = e->n_values;
    return 0;
}

static int assign_entry(parse_ctx_t *ctx, const key_spec_t *ks, const nl_entry_t *e, config_t *cfg) {
    if (ks->type == K_INT_ARRAY) return assign_int_array(ctx, ks, e, cfg);
    if (e->n_values != 1)
        return cfg_error(ctx, e->values[1].line, e->values[1].col, "&%s %s: expected one value, got %d values",
                         group_names[ks->group], ks->key, e->n_values);
    const nl_value_t *v = &e->values[0];
    if (check_value(ctx, ks, v) != 0) return -1;
    void *f = field_ptr(cfg, ks);
    switch (ks->type) {
    case K_INT: *(int *)f = (int)v->i; break;
    case K_I64: *(int64_t *)f = v->i; break;
    case K_REAL: *(double *)f = v->r; break;
    case K_BOOL: *(bool *)f = v->b; break;
    case K_STR: return assign_string(ctx, ks, v, f);
    case K_INT_ARRAY: break; /* handled above */
    }
    return 0;
}

static int apply_group(parse_ctx_t *ctx, const nl_group_t *g, config_t *cfg) {
    int gi = find_group(g->name);
    if (gi < 0) return unknown_group_error(ctx, g);
    if (ctx->group_at[gi])
        return cfg_error(ctx, g->line, g->col, "duplicate group '&%s' (first opened at line %d)", g->name,
                         ctx->group_at[gi]->line);
    ctx->group_at[gi] = g;
    for (int i = 0; i < g->n_entries; i++) {
        const nl_entry_t *e = &g->entries[i];
        int k = find_key(gi, e->key);
        if (k < 0) return unknown_key_error(ctx, gi, e);
        if (ctx->set_by[k])
            return cfg_error(ctx, e->line, e->col, "&%s %s: duplicate key (first set at line %d)", g->name, e->key,
                             ctx->set_by[k]->line);
        ctx->set_by[k] = e;
        if (assign_entry(ctx, &key_specs[k], e, cfg) != 0) return -1;
    }
    return 0;
}

/* ---- checks that need more than one key -------------------------------------------------- */

/* "line 7" if the file set key k, else "default" — cross-key messages name where each came from. */
static const char *provenance(const parse_ctx_t *ctx, int k, char buf[32]) {
    if (!ctx->set_by[k]) return "default";
    snprintf(buf, 32, "line %d", ctx->set_by[k]->line);
    return buf;
}

/* Where to point for a check on keys a and b: the first one the file set, else a group header
 * of theirs, else the top of the file. */
static void locate(const parse_ctx_t *ctx, int a, int b, int *line, int *col) {
    const nl_entry_t *e = ctx->set_by[a] ? ctx->set_by[a] : ctx->set_by[b];
    const nl_group_t *g = ctx->group_at[key_specs[a].group];
    if (!g) g = ctx->group_at[key_specs[b].group];
    *line = e ? e->line : g ? g->line : 1;
    *col = e ? e->col : g ? g->col : 1;
}

static int check_heads_divide_width(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->d_model % cfg->n_head == 0) return 0;
    int a = key_index(G_MODEL, "d_model"), b = key_index(G_MODEL, "n_head"), line, col;
    char pa[32], pb[32];
    locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col, "&model d_model: d_model = %d (%s) must be divisible by n_head = %d (%s)",
                     cfg->d_model, provenance(ctx, a, pa), cfg->n_head, provenance(ctx, b, pb));
}

static int check_global_batch(parse_ctx_t *ctx, const config_t *cfg) {
    long long per_step = (long long)cfg->micro_batch * cfg->dp;
    if (cfg->global_batch == 0 || cfg->global_batch % per_step == 0) return 0;
    int a = key_index(G_TRAIN, "global_batch"), b = key_index(G_TRAIN, "micro_batch");
    int c = key_index(G_PARALLEL, "dp"), line, col;
    char pa[32], pb[32], pc[32];
    locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col,
                     "&train global_batch: global_batch = %d (%s) must be a multiple of micro_batch * dp = "
                     "%d * %d = %lld (&train micro_batch: %s, &parallel dp: %s)",
                     cfg->global_batch, provenance(ctx, a, pa), cfg->micro_batch, cfg->dp, per_step,
                     provenance(ctx, b, pb), provenance(ctx, c, pc));
}

static int check_min_lr(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->min_lr <= cfg->lr) return 0;
    int a = key_index(G_TRAIN, "min_lr"), b = key_index(G_TRAIN, "lr"), line, col;
    char pa[32], pb[32];
    locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col, "&train min_lr: min_lr = %g (%s) must be <= lr = %g (%s)", cfg->min_lr,
                     provenance(ctx, a, pa), cfg->lr, provenance(ctx, b, pb));
}

static int check_mode_inputs(parse_ctx_t *ctx, const config_t *cfg) {
    int m = key_index(G_RUN, "mode"), line, col;
    char pm[32];
    if (!strcmp(cfg->mode, "train") && cfg->train_files[0] == '\0') {
        int f = key_index(G_DATA, "train_files");
        locate(ctx, f, m, &line, &col);
        return cfg_error(ctx, line, col,
                         "&data train_files: must be set when &run mode = 'train' (%s), "
                         "e.g. train_files = 'data/train_*.bin'", provenance(ctx, m, pm));
    }
    if (!strcmp(cfg->mode, "generate") && cfg->n_prompt_ids < 1 && cfg->prompt[0] == '\0') {
        int p = key_index(G_RUN, "prompt_ids");
        locate(ctx, p, m, &line, &col);
        return cfg_error(ctx, line, col,
                         "&run prompt_ids: mode = 'generate' (%s) needs at least one prompt id "
                         "(n_prompt_ids >= 1), e.g. prompt_ids = 50256, or a text prompt with "
                         "&data tokenizer", provenance(ctx, m, pm));
    }
    if (cfg->prompt[0] != '\0' && cfg->tokenizer[0] == '\0') {
        int p = key_index(G_RUN, "prompt"), t = key_index(G_DATA, "tokenizer");
        locate(ctx, t, p, &line, &col);
        return cfg_error(ctx, line, col,
                         "&data tokenizer: a text prompt (&run prompt) needs a tokenizer file, "
                         "e.g. tokenizer = 'data/gpt2/gpt2.tiktoken'");
    }
    return 0;
}

static int check_prompt_in_vocab(parse_ctx_t *ctx, const config_t *cfg) {
    int p = key_index(G_RUN, "prompt_ids"), v = key_index(G_MODEL, "vocab_size");
    char pv[32];
    for (int i = 0; i < cfg->n_prompt_ids; i++) {
        if (cfg->prompt_ids[i] < cfg->vocab_size) continue;
        const nl_value_t *val = &ctx->set_by[p]->values[i];
        return cfg_error(ctx, val->line, val->col,
                         "&run prompt_ids: id %d must be < vocab_size = %d (&model vocab_size: %s)",
                         cfg->prompt_ids[i], cfg->vocab_size, provenance(ctx, v, pv));
    }
    return 0;
}

/* Keys that are in the contract but whose feature is not built yet: refuse rather than ignore. */
static int check_unimplemented(parse_ctx_t *ctx, const config_t *cfg) {
    const nl_entry_t *e = ctx->set_by[key_index(G_MODEL, "dropout")];
    if (cfg->dropout != 0.0)
        return cfg_error(ctx, e->values[0].line, e->values[0].col,
                         "&model dropout: dropout is not implemented yet; use 0");
    e = ctx->set_by[key_index(G_MODEL, "n_experts")];
    if (cfg->n_experts > 0)
        return cfg_error(ctx, e->values[0].line, e->values[0].col,
                         "&model n_experts: Mixture-of-Experts is not implemented yet; use n_experts = 0");
    return 0;
}

/* 0 in the file means "derive": d_ff = 4 * d_model, global_batch = micro_batch * dp. */
static int resolve_derived(parse_ctx_t *ctx, config_t *cfg) {
    long long d_ff = 4LL * cfg->d_model, global_batch = (long long)cfg->micro_batch * cfg->dp;
    if (cfg->d_ff == 0 && d_ff > INT_MAX)
        return cfg_error(ctx, 1, 1, "&model d_ff: 4 * d_model = %lld does not fit in a 32-bit integer", d_ff);
    if (cfg->global_batch == 0 && global_batch > INT_MAX)
        return cfg_error(ctx, 1, 1, "&train global_batch: micro_batch * dp = %lld does not fit in a 32-bit integer",
                         global_batch);
    if (cfg->d_ff == 0) cfg->d_ff = (int)d_ff;
    cfg->global_batch_derived = cfg->global_batch == 0;
    if (cfg->global_batch == 0) cfg->global_batch = (int)global_batch;
    return 0;
}

static int check_cross_keys(parse_ctx_t *ctx, config_t *cfg) {
    if (check_unimplemented(ctx, cfg) || check_heads_divide_width(ctx, cfg) || check_global_batch(ctx, cfg) ||
        check_min_lr(ctx, cfg) || check_mode_inputs(ctx, cfg) || check_prompt_in_vocab(ctx, cfg))
        return -1;
    return resolve_derived(ctx, cfg);
}

/* ---- parse, load, destroy ---------------------------------------------------------------- */

/* Everything but the text copy; returns 0, or -1 with the message in msg. Frees what it parsed. */
static int parse_into(const char *path, const char *text, config_t *cfg, char *msg, size_t msgsize) {
    set_table_defaults(cfg);
    snprintf(cfg->source_path, sizeof cfg->source_path, "%s", path ? path : "<namelist>");
    namelist_t nl;
    if (namelist_parse(cfg->source_path, text, &nl, msg, msgsize) != 0) return -1;
    parse_ctx_t ctx = {.path = cfg->source_path, .msg = msg, .msgsize = msgsize};
    int rc = 0;
    for (int g = 0; g < nl.n_groups && rc == 0; g++) rc = apply_group(&ctx, &nl.groups[g], cfg);
    if (rc == 0) rc = check_cross_keys(&ctx, cfg);
    namelist_free(&nl);
    return rc;
}

void config_parse(const char *path, const char *text, config_t *cfg) {
    char msg[CFG_MSG];
    if (parse_into(path, text, cfg, msg, sizeof msg) != 0) fatal_user("%s", msg);
    cfg->text = xstrdup(text);
}

/* Whole file into a NUL-terminated buffer; NULL with *err = errno on failure. */
static char *read_whole_file(const char *path, long long *len, int *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return (*err = errno), NULL;
    size_t n = 0, cap = 4096;
    char *buf = xrealloc_small(NULL, cap);
    for (;;) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (ferror(f) || n >= CFG_MAX_FILE) {
            *err = ferror(f) ? errno : EFBIG;
            fclose(f);
            free(buf);
            return NULL;
        }
        if (feof(f)) break;
        if (n + 1 >= cap) buf = xrealloc_small(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = '\0';
    *len = (long long)n;
    return buf;
}

/* Rank 0 reads, everyone receives: the file system sees one reader, not thousands. */
static char *read_and_broadcast(const char *path, long long *len, int *err) {
    int init = 0, rank = 0;
    MPI_CHECK(MPI_Initialized(&init));
    if (init) MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    char *text = NULL;
    long long header[2] = {-1, 0}; /* length (-1 = failed), errno */
    if (rank == 0) {
        int e = 0;
        text = read_whole_file(path, &header[0], &e);
        header[1] = e;
    }
    if (init) MPI_CHECK(MPI_Bcast(header, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
    *len = header[0];
    *err = (int)header[1];
    if (*len < 0) return NULL;
    if (!init) return text; /* a tool without MPI: nothing to share */
    if (rank != 0) text = xrealloc_small(NULL, (size_t)*len + 1);
    MPI_CHECK(MPI_Bcast(text, (int)*len + 1, MPI_CHAR, 0, MPI_COMM_WORLD));
    return text;
}

void config_load(const char *path, config_t *cfg) {
    long long len = 0;
    int err = 0;
    char *text = read_and_broadcast(path, &len, &err);
    if (!text) {
        memset(cfg, 0, sizeof *cfg);
        fatal_user("%s: cannot read the namelist file: %s", path, strerror(err));
    }
    if ((long long)strlen(text) != len) {
        free(text);
        memset(cfg, 0, sizeof *cfg);
        fatal_user("%s: contains a NUL byte; is it a namelist text file?", path);
    }
    char msg[CFG_MSG];
    if (parse_into(path, text, cfg, msg, sizeof msg) != 0) {
        free(text);
        fatal_user("%s", msg);
    }
    cfg->text = text; /* from xrealloc_small: config_destroy frees it with free() */
}

void config_destroy(config_t *cfg) {
    free(cfg->text); /* xstrdup / xrealloc_small memory, not an xmalloc block */
    cfg->text = NULL;
}

int config_padded_vocab(const config_t *cfg) { return (cfg->vocab_size + 127) / 128 * 128; }

/* ---- echo as a namelist ------------------------------------------------------------------ */

/* snprintf-like output: counts everything, writes what fits. */
typedef struct writer {
    char *buf;
    size_t size;
    size_t len;
} writer_t;

__attribute__((format(printf, 2, 3)))
static void put(writer_t *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = w->len < w->size ? w->buf + w->len : NULL;
    int n = vsnprintf(dst, dst ? w->size - w->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) w->len += (size_t)n;
}

/* The shortest %g that reads back as exactly x, without an exponent where plain digits read
 * better (600.0, not 6e+02), spelled so a Fortran reader sees a real. */
static void format_real(double x, char out[40]) {
    bool plain_reads_better = fabs(x) >= 1e-4 && fabs(x) < 1e15;
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, x);
        if (strtod(out, NULL) == x && !(plain_reads_better && strchr(out, 'e'))) break;
    }
    if (!strpbrk(out, ".eEn")) strcat(out, ".0");
}

static void put_quoted(writer_t *w, const char *s) {
    put(w, "'");
    for (; *s; s++) put(w, *s == '\'' ? "''" : "%c", *s);
    put(w, "'");
}

static void put_key(writer_t *w, const key_spec_t *ks, const config_t *cfg) {
    const void *f = field_cptr(cfg, ks);
    char real[40];
    if (ks->type == K_INT_ARRAY) {
        int n = *(const int *)((const char *)cfg + ks->count_offset);
        if (n == 0) {
            put(w, "  ! %s: none given\n", ks->key); /* an empty value is not valid namelist syntax */
            return;
        }
        put(w, "  %-15s = ", ks->key);
        for (int i = 0; i < n; i++) put(w, "%s%d", i ? ", " : "", ((const int *)f)[i]);
        put(w, "\n");
        return;
    }
    put(w, "  %-15s = ", ks->key);
    switch (ks->type) {
    case K_INT: put(w, "%d", *(const int *)f); break;
    case K_I64: put(w, "%lld", (long long)*(const int64_t *)f); break;
    case K_REAL:
        format_real(*(const double *)f, real);
        put(w, "%s", real);
        break;
    case K_BOOL: put(w, "%s", *(const bool *)f ? ".true." : ".false."); break;
    case K_STR: put_quoted(w, f); break;
    case K_INT_ARRAY: break;
    }
    put(w, "\n");
}

int config_to_namelist(const config_t *cfg, char *buf, int bufsize) {
    writer_t w = {.buf = buf, .size = buf && bufsize > 0 ? (size_t)bufsize : 0, .len = 0};
    if (w.size) buf[0] = '\0';
    put(&w, "! effective configuration of run '%s' (defaults filled in)\n", cfg->name);
    for (int g = 0; g < N_GROUPS; g++) {
        put(&w, "&%s\n", group_names[g]);
        for (int k = 0; k < N_KEYS; k++)
            if (key_specs[k].group == g) put_key(&w, &key_specs[k], cfg);
        put(&w, "/\n");
    }
    return (int)w.len;
}
