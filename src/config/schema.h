/* schema.h — the configuration schema engine for a tool's own key table: a tool (llmmerge)
 * describes the keys of its namelist group in a table of schema_key_t, and the engine checks a
 * parsed entry against its entry in the table (type, count, finiteness, bounds), finds a key
 * with "did you mean" for an unknown one, and tells the namelist parser how many values a key
 * takes. Messages are llmtrain's: "path:line:col: &group key: ...". llmtrain's own table
 * (config_t's keys) stays in config_internal.h; both use the same typo distance and bounds
 * wording. Nothing here prints or exits: a failure is -1 with one message in err.
 * Uses: config/namelist. Used by: config/config_schema.c, tools/llmmerge.c. */
#ifndef LLMT_CONFIG_SCHEMA_H
#define LLMT_CONFIG_SCHEMA_H
#include "config/namelist.h"
#include <stdbool.h>
#include <stddef.h>

typedef enum schema_type {
    SCHEMA_STR,   /* one string */
    SCHEMA_STRS,  /* a list of strings (any length) */
    SCHEMA_REAL,  /* one finite real (an integer literal is a fine real) */
    SCHEMA_REALS, /* a list of finite reals */
    SCHEMA_INT,   /* one integer (64-bit) */
    SCHEMA_BOOL   /* one logical */
} schema_type_t;

typedef struct schema_key {
    const char *key;       /* the namelist name */
    schema_type_t type;
    char lo_kind, hi_kind; /* '[' or '(' / ']' or ')': inclusive / exclusive; 0 = unbounded */
    double lo, hi;
    const char *why;       /* the reason of a bound, appended to the range message */
} schema_key_t;

/* One group's table. */
typedef struct schema {
    const char *group; /* "merge" */
    const schema_key_t *keys;
    int n_keys;
} schema_t;

/* The index of key in s, or -1. */
int schema_find_key(const schema_t *s, const char *key);
/* namelist_parse_keys's capacity callback (ctx: the schema_t): a list key any number (0), any
 * other key one value, 0 for a key or group that is not the schema's (reported later). */
int schema_key_capacity(const char *group, const char *key, void *ctx);
/* Type, count and finiteness of entry e of key k; 0, or -1 with
 * "path:line:col: &group key: ..." in err. */
int schema_check_entry(const schema_t *s, int k, const nl_entry_t *e, const char *path, char *err,
                       size_t errlen);
/* The bounds of key k on every numeric value of e ("&group key: must be in (0, 1], got 0 (why)");
 * separate from schema_check_entry so that a tool can first ask whether the key applies. */
int schema_check_bounds(const schema_t *s, int k, const nl_entry_t *e, const char *path, char *err,
                        size_t errlen);
/* "path:line:col: &group unknown key 'x' (valid keys: ...); did you mean 'y'?"; returns -1. */
int schema_unknown_key_error(const schema_t *s, const nl_entry_t *e, const char *path, char *err,
                             size_t errlen);

/* The closest of names[n] to word when it looks like a typo of it (one edit for names shorter
 * than 6 characters, two for longer ones: insertions, deletions, substitutions, adjacent swaps),
 * else NULL. */
const char *schema_closest(const char *word, const char *const *names, int n);
/* The typo distance behind schema_closest: the edit distance, or INT_MAX when over the limit. */
int schema_typo_distance(const char *typo, const char *name);
/* ">= 0", "> 0", "<= 3", "in [0, 1)": a bound as a message states it; integers exactly when
 * !is_real. */
void schema_format_bounds(bool is_real, char lo_kind, double lo, char hi_kind, double hi, char *out,
                          size_t size);
/* Whether x is within the bounds (unbounded sides always are). */
bool schema_in_bounds(char lo_kind, double lo, char hi_kind, double hi, double x);
#endif
