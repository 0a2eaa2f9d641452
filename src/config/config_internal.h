/* config_internal.h — what the files of the configuration share and nobody else may include:
 * the key table's types (config.c holds the table), the parse context every check writes its
 * message into, and the functions one file of config/ calls in another. The public interface
 * is config.h. Uses: namelist.h. Used by: config.c, config_schema.c, config_checks.c,
 * config_sizes.c, config_load.c, config_where.c, config_json.c, config_echo.c.
 *
 * It names the configuration `struct config` (config.h's config_t) without including config.h,
 * so that config.c, which includes this header, and this header are not a cycle of units. */
#ifndef LLMT_CONFIG_INTERNAL_H
#define LLMT_CONFIG_INTERNAL_H
#include "config/namelist.h"
#include <stdbool.h>
#include <stddef.h>

struct config;

/* ---- the key table (config.c) ------------------------------------------------------------ */

enum { G_RUN, G_MODEL, G_PARALLEL, G_TRAIN, G_DATA, G_CHECKPOINT, G_LOG, G_STAGE, N_GROUPS };
extern const char *const cfg_group_names[N_GROUPS];

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
    const char *enum_names; /* K_STR choice key with an enum in config_t.choice: "a|b|c", the
                              values in the enum's order (NULL: no enum) */
    size_t enum_offset;    /* of that enum field in config_t */
    const char *planned;   /* K_STR: "a|b", values the key contract names (not in choices) that
                              are not implemented yet; refused with not_impl */
    const char *not_impl;  /* non-NULL: what is not implemented in this version. Without
                              planned: the whole key (any value but the default is refused);
                              with planned: those values */
    const char *why;       /* the reason of a bound, appended to the range message */
    char lo_kind, hi_kind; /* '[' or '(' / ']' or ')' for inclusive / exclusive; 0 = unbounded */
    double lo, hi;
} key_spec_t;

#define CFG_MAX_KEYS 256 /* more than the table holds (config.c checks it at compile time) */
extern const key_spec_t cfg_keys[];
extern const int cfg_n_keys;

/* ---- the parse context (config_schema.c, config_load.c) ---------------------------------- */

#define CFG_MSG 2048 /* one error line */

/* One command-line override as parsed: its position and text for messages, and its namelist. Its
 * entry's line (and its values') is -1 - its index, a line no file has: cfg_error and provenance
 * name the argument instead of a file position. */
typedef struct override_arg {
    int argno;
    char label[288]; /* "command line argument 2 'train.max_steps=20'" */
    namelist_t nl;
} override_arg_t;

/* What the parse saw, for positions in messages: which entry set each key, where each group was. */
typedef struct parse_ctx {
    const char *path;
    char *msg;
    size_t msgsize;
    const nl_entry_t *set_by[CFG_MAX_KEYS];
    const nl_group_t *group_at[N_GROUPS];
    const override_arg_t *over; /* the command-line overrides (lines < 0 point here) */
    struct env_snapshot *env;   /* where path variables come from (NULL: this process's getenv) */
    bool plan_devices;          /* config_args_t.plan_devices */
} parse_ctx_t;

/* ---- the schema engine (config_schema.c) -------------------------------------------------- */

/* A key's field in cfg (a &stage key's in stages[stage_at]). */
void *cfg_field_ptr(struct config *cfg, const key_spec_t *ks);
const void *cfg_field_cptr(const struct config *cfg, const key_spec_t *ks);
int cfg_find_group(const char *name); /* -1: none */
int cfg_find_key(int group, const char *key); /* -1: none */
/* namelist_parse_keys's capacity callback: an array's maximum, 1, or 0 for an unknown key. */
int cfg_key_capacity(const char *group, const char *key, void *unused);
/* Only for literal names in the checks: a typo there is a bug (ASSERT). */
int cfg_key_index(int group, const char *key);
/* "path:line:col: " (or "command line argument N '...': " for line < 0) and the text into
 * ctx->msg; returns -1. */
__attribute__((format(printf, 4, 5)))
int cfg_error(parse_ctx_t *ctx, int line, int col, const char *fmt, ...);
/* Appends text to a NUL-terminated buffer without overflowing it. */
void cfg_append(char *buf, size_t size, const char *text);
/* The table's defaults of one group (-1: every group), before anything derived. */
void cfg_set_key_defaults(struct config *cfg, int group);
void cfg_set_table_defaults(struct config *cfg); /* zeroes cfg first */
/* Stores a choice key's canonical value: the string, and the enum where the key has one. */
void cfg_store_choice(struct config *cfg, const key_spec_t *ks, const char *value);
int cfg_unknown_group_error(parse_ctx_t *ctx, const nl_group_t *g);
int cfg_unknown_key_error(parse_ctx_t *ctx, int group, const nl_entry_t *e);
/* Type, range, choices and "not implemented" of one entry, then the field; 0 or -1. */
int cfg_assign_entry(parse_ctx_t *ctx, const key_spec_t *ks, const nl_entry_t *e, struct config *cfg);
/* Every entry of one parsed group; 0 or -1. */
int cfg_apply_group(parse_ctx_t *ctx, const nl_group_t *g, struct config *cfg);

/* ---- cross-key checks (config_checks.c) --------------------------------------------------- */

/* "line 7", "command line argument 2" or "default": where key k's value came from. */
const char *cfg_provenance(const parse_ctx_t *ctx, int k, char buf[32]);
/* Where to point for a check on keys a and b. */
void cfg_locate(const parse_ctx_t *ctx, int a, int b, int *line, int *col);
/* A loss-scaling key (precision = 'fp16' only; the echo comments it out otherwise). */
bool cfg_is_fp16_key(const key_spec_t *ks);
/* Paths, derived values, every check of several keys, the stages, the sizes; 0 or -1. */
int cfg_check_cross_keys(parse_ctx_t *ctx, struct config *cfg);

/* ---- sizes (config_sizes.c) --------------------------------------------------------------- */

int cfg_check_sizes(parse_ctx_t *ctx, const struct config *cfg);

/* ---- positions kept after loading (config_where.c) --------------------------------------- */

/* Copies where each key and group was set, and the n_over overrides' labels, into cfg->where
 * (config_key_where reads them), once the parse has succeeded. */
void cfg_keep_positions(const parse_ctx_t *ctx, int n_over, struct config *cfg);

/* ---- path variables (config_load.c) ------------------------------------------------------- */

/* A path key: ${VAR} is expanded in it. */
bool cfg_is_path_key(const key_spec_t *ks);
/* ${VAR} in every path key (&stage's too), then where &data mixture and train_files were set. */
int cfg_expand_paths(parse_ctx_t *ctx, struct config *cfg);
#endif
