/* namelist.h — a generic Fortran-namelist parser: text in, groups of (key, values) out.
 * Owns: the syntax (groups, keys, strings, logicals, numbers, arrays, repeat counts, comments)
 * and the line/column of every key and value, so the schema layer can point at mistakes.
 * Knows nothing about which groups or keys exist: that is config.c's job.
 * Uses: core/alloc.h. Used by: config.c (and tools that read namelists).
 *
 * It never exits: a syntax error returns non-zero with "PATH:LINE:COL: what is wrong" in the
 * caller's buffer, and the caller decides how to report it (config.c: fatal_user).
 *
 * Accepted syntax (names case-insensitive, stored lower-case):
 *   text outside groups is ignored (except '!' comments, which hide '&' too)
 *   &group  key = value  key = v1, v2 v3  /        also closed by &end or $end; $group opens too
 *   'str' "str" ('' or "" inside is one quote; a string may not span lines)
 *   .true. .false. .t. .f. T F true false        logicals
 *   42 -7 +3                                      integers (64-bit)
 *   1.5 -.5 1e-3 1.0d-3 1.5D+2                    reals
 *   3*0.0                                         repeat count: three values 0.0
 * Not supported, with a clear error: indexed assignment key(2) = 5, null values (a = 1,,3),
 * unquoted strings.
 * Limits: at most 1,000,000 values per parse (repeat counts expanded), a repeat count at most
 * 100,000, at most 64 MiB of text copied by repeat counts in one parse, and 16 MiB of text;
 * beyond them, one "path:line:col:" error. A caller that knows its keys (namelist_parse_keys)
 * also has a repeat count refused, before any copy, when it would give a key more values than
 * the key holds. */
#ifndef LLMT_NAMELIST_H
#define LLMT_NAMELIST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum nl_kind { NL_INTEGER, NL_REAL, NL_STRING, NL_LOGICAL } nl_kind_t;

typedef struct nl_value {
    nl_kind_t kind;
    int64_t i;       /* NL_INTEGER */
    double r;        /* NL_REAL (also set for NL_INTEGER, as a convenience) */
    bool b;          /* NL_LOGICAL */
    char *s;         /* NL_STRING: contents without quotes, escapes resolved */
    char *raw;       /* the token as written (for messages: "got real 1.0d-3") */
    int line, col;   /* 1-based position of the token */
} nl_value_t;

typedef struct nl_entry {
    char *key;       /* lower-case */
    int line, col;   /* position of the key */
    nl_value_t *values;
    int n_values;    /* >= 1 */
} nl_entry_t;

typedef struct nl_group {
    char *name;      /* lower-case, without '&' */
    int line, col;   /* position of the '&' */
    nl_entry_t *entries;
    int n_entries;   /* in file order; duplicates are kept (the schema decides) */
} nl_group_t;

typedef struct namelist {
    nl_group_t *groups;
    int n_groups;    /* in file order; duplicates are kept */
} namelist_t;

/* Parse `text`; `path` is used only in messages. Returns 0, or -1 with a one-line
 * "path:line:col: message" in err[errsize]. On failure `nl` holds nothing (already freed). */
int namelist_parse(const char *path, const char *text, namelist_t *nl, char *err, size_t errsize);
/* How many values key `key` of group `group` (both lower-case) can hold: 1 for a scalar, an
 * array's maximum; 0 when the caller does not know the key (its own check reports it later). */
typedef int (*nl_capacity_fn)(const char *group, const char *key, void *ctx);
/* namelist_parse, with the capacity of every key: a repeat count r*value that would give a key
 * more values than it holds is refused at the count ("&run prompt: expected one value, got
 * 100000 values (the repeat count '100000*'), refused before making them") before anything is
 * copied, so a long string repeated cannot cost memory the key could never use. capacity may be
 * NULL. */
int namelist_parse_keys(const char *path, const char *text, nl_capacity_fn capacity, void *ctx,
                        namelist_t *nl, char *err, size_t errsize);
void namelist_free(namelist_t *nl);

/* "integer", "real", "string", "logical" — for type-mismatch messages. */
const char *namelist_kind_name(nl_kind_t kind);
#endif
