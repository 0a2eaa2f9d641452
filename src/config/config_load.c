/* config_load.c — reading a configuration: the file, the command-line overrides, ${VAR} in paths.
 * Owns: rank 0's read of the namelist and its broadcast, the overrides "group.key=value" (each
 * parsed as a one-key namelist and assigned through the same table), the environment variables
 * of the path keys (rank 0's snapshot replayed on the other ranks), the parse from defaults to
 * checked configuration, the agreement of every rank on a refusal, config_destroy. Every error
 * is formatted into a buffer, everything parsed is freed, and only then is fatal_user() called:
 * unit tests longjmp out of it and must not leak. Uses: config_internal.h, namelist.h, stages.h
 * (the &stage key positions), core/. */
#include "config/config.h"
#include "config/config_internal.h"
#include "config/namelist.h"
#include "config/stages.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CFG_MAX_FILE (16 << 20)  /* a namelist bigger than this is not a namelist */

typedef struct env_snapshot {
    char *buf;
    size_t len, cap;
    bool replay; /* look up in buf (the other ranks) rather than getenv and record (rank 0) */
} env_snapshot_t;

static void env_record(env_snapshot_t *e, const char *name, const char *value) {
    const size_t need = strlen(name) + 2 + (value ? strlen(value) : 0) + 1;
    if (e->len + need > e->cap) {
        e->cap = (e->len + need) * 2;
        e->buf = xrealloc_small(e->buf, e->cap);
    }
    e->len += (size_t)sprintf(e->buf + e->len, "%s", name) + 1;
    e->buf[e->len++] = value ? '1' : '0';
    e->len += (size_t)sprintf(e->buf + e->len, "%s", value ? value : "") + 1;
}

static const char *env_lookup(env_snapshot_t *e, const char *name) {
    if (!e) return getenv(name);
    if (!e->replay) {
        const char *v = getenv(name);
        env_record(e, name, v);
        return v;
    }
    for (size_t at = 0; at < e->len;) {
        const char *n = e->buf + at, *flag = n + strlen(n) + 1, *v = flag + 1;
        if (strcmp(n, name) == 0) return *flag == '1' ? v : NULL;
        at = (size_t)(v + strlen(v) + 1 - e->buf);
    }
    return NULL; /* rank 0 never looked it up: its namelist did not name it */
}

/* ---- command-line overrides -------------------------------------------------------------- */

/* An override "group.key=value" is the namelist text "&group\n key = value\n/" parsed by
 * namelist.c and assigned by cfg_assign_entry, so it meets every check a file's key meets; it
 * replaces the file's value (and an earlier override's) of its key. */

#define ARG_NAME 64 /* longer than any group or key name */

static bool is_blank_char(char c) { return c == ' ' || c == '\t'; }

/* The name in [start, end), blanks around it dropped, lower-cased into out; false if it is not
 * a name (a letter, then letters, digits, '_'). */
static bool copy_name(const char *start, const char *end, char out[ARG_NAME]) {
    while (start < end && is_blank_char(*start)) start++;
    while (end > start && is_blank_char(end[-1])) end--;
    size_t n = (size_t)(end - start);
    if (n == 0 || n >= ARG_NAME || !isalpha((unsigned char)*start)) return false;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)start[i]) && start[i] != '_') return false;
        out[i] = (char)tolower((unsigned char)start[i]);
    }
    out[n] = '\0';
    return true;
}

/* Not GROUP.KEY=VALUE; if the part before '=' is a key, say which group it is in. */
static int override_syntax_error(parse_ctx_t *ctx, int line, const char *arg) {
    const char *eq = strchr(arg, '=');
    char name[ARG_NAME], hint[192] = "";
    for (int g = 0; eq && copy_name(arg, eq, name) && g < N_GROUPS; g++) {
        if (cfg_find_key(g, name) < 0) continue;
        char one[96];
        snprintf(one, sizeof one, "%s%s.%.60s", hint[0] ? " or " : "; did you mean ", cfg_group_names[g],
                 arg + strspn(arg, " \t"));
        cfg_append(hint, sizeof hint, one);
    }
    return cfg_error(ctx, line, 1, "expected GROUP.KEY=VALUE, e.g. train.max_steps=20 (one namelist file, "
                     "then overrides)%s%s", hint, hint[0] ? "?" : "");
}

/* A string key's value may come without quotes (the shell removes them): it is then the text as
 * given. Anything else goes to the namelist parser as written. */
static char *override_value_text(const key_spec_t *ks, const char *value) {
    char first = value[strspn(value, " \t")];
    if (ks->type != K_STR || first == '\'' || first == '"') return xstrdup(value);
    char *q = xrealloc_small(NULL, 2 * strlen(value) + 3), *o = q;
    *o++ = '\'';
    for (const char *c = value; *c; c++) {
        if (*c == '\'') *o++ = '\'';
        *o++ = *c;
    }
    *o++ = '\'';
    *o = '\0';
    return q;
}

/* Outside quotes, '/', '&', '$' would end or open a group, '!' start a comment and '=' a second
 * key: refused, so the argument is exactly one key. */
static int check_value_is_one_value(parse_ctx_t *ctx, int line, const char *value) {
    char quote = 0;
    for (const char *c = value; *c; c++) {
        if (quote) {
            if (*c == quote) quote = 0; /* a doubled quote closes and reopens: same result */
        } else if (*c == '\'' || *c == '"') {
            quote = *c;
        } else if (strchr("/&$!=", *c)) {
            return cfg_error(ctx, line, 1, "unexpected '%c' in the value: one GROUP.KEY=VALUE per argument, "
                             "and a string holding '%c' needs quotes", *c, *c);
        }
    }
    return 0;
}

/* namelist.c says "LABEL:LINE:COL: what"; the line and column are of the text made here, so
 * only "LABEL: what" is kept. */
static void drop_text_position(char *msg, const char *label) {
    size_t n = strlen(label);
    if (strncmp(msg, label, n) != 0 || msg[n] != ':') return;
    char *p = msg + n + 1;
    p += strspn(p, "0123456789");
    if (*p == ':') p++;
    p += strspn(p, "0123456789");
    if (*p == ':') p++;
    memmove(msg + n + 1, p, strlen(p) + 1);
}

/* Parse override i (o->nl) and assign it; 0, or -1 with the message in ctx->msg. */
static int apply_override(parse_ctx_t *ctx, override_arg_t *o, int i, const char *arg, config_t *cfg) {
    const int line = -1 - i;
    if (strpbrk(arg, "\n\r")) return cfg_error(ctx, line, 1, "an override is one line: it holds a line break");
    const char *eq = strchr(arg, '='), *dot = eq ? memchr(arg, '.', (size_t)(eq - arg)) : NULL;
    char group[ARG_NAME], key[ARG_NAME];
    if (!dot || !copy_name(arg, dot, group) || !copy_name(dot + 1, eq, key))
        return override_syntax_error(ctx, line, arg);
    nl_group_t g = {.name = group, .line = line, .col = 1};
    int gi = cfg_find_group(group);
    if (gi < 0) return cfg_unknown_group_error(ctx, &g);
    if (gi == G_STAGE) /* which of the repeated groups would it change? */
        return cfg_error(ctx, line, 1, "&stage keys cannot be overridden on the command line (a "
                         "namelist may hold several &stage groups): edit the file");
    nl_entry_t e = {.key = key, .line = line, .col = 1};
    int k = cfg_find_key(gi, key);
    if (k < 0) return cfg_unknown_key_error(ctx, gi, &e);
    char *value = override_value_text(&cfg_keys[k], eq + 1);
    int rc = check_value_is_one_value(ctx, line, value);
    if (rc == 0) {
        size_t len = strlen(group) + strlen(key) + strlen(value) + 16;
        char *text = xrealloc_small(NULL, len);
        snprintf(text, len, "&%s\n%s = %s\n/\n", group, key, value);
        rc = namelist_parse_keys(o->label, text, cfg_key_capacity, NULL, &o->nl, ctx->msg, ctx->msgsize);
        if (rc != 0) drop_text_position(ctx->msg, o->label);
        free(text);
    }
    free(value);
    if (rc != 0) return -1;
    ASSERT(o->nl.n_groups == 1 && o->nl.groups[0].n_entries == 1); /* check_value_is_one_value */
    nl_entry_t *parsed = &o->nl.groups[0].entries[0];
    parsed->line = line;
    for (int v = 0; v < parsed->n_values; v++) parsed->values[v].line = line;
    ctx->set_by[k] = parsed;
    return cfg_assign_entry(ctx, &cfg_keys[k], parsed, cfg);
}

/* "command line argument 2 'train.max_steps=20'", the text shortened and control characters
 * shown as '?', so the message stays one line. */
static void label_override(override_arg_t *o, int argno, const char *arg) {
    char shown[201];
    size_t n = 0;
    for (const char *c = arg; *c && n < sizeof shown - 1; c++) shown[n++] = iscntrl((unsigned char)*c) ? '?' : *c;
    shown[n] = '\0';
    o->argno = argno;
    snprintf(o->label, sizeof o->label, "command line argument %d '%s%s'", argno, shown,
             strlen(arg) > n ? "..." : "");
}

static int apply_overrides(parse_ctx_t *ctx, override_arg_t *over, const config_args_t *args, config_t *cfg) {
    for (int i = 0; args && i < args->n; i++) label_override(&over[i], args->first_argno + i, args->args[i]);
    ctx->over = over;
    for (int i = 0; args && i < args->n; i++)
        if (apply_override(ctx, &over[i], i, args->args[i], cfg) != 0) return -1;
    return 0;
}

/* The overrides as given, separated by blanks, for the banner and the echo ("" if none). */
static char *join_args(const config_args_t *args) {
    size_t len = 1;
    for (int i = 0; args && i < args->n; i++) len += strlen(args->args[i]) + 1;
    char *s = xrealloc_small(NULL, len);
    s[0] = '\0';
    for (int i = 0; args && i < args->n; i++) {
        if (i) strcat(s, " ");
        strcat(s, args->args[i]);
    }
    return s;
}

/* ---- environment variables in paths ------------------------------------------------------ */

/* Path keys may name environment variables: ${NAME}, or ${NAME:-default} (the default when
 * NAME is unset or empty), so an installed example runs from any directory
 * (train_files = '${LLMTRAIN_DATA:-data}/tiny/train_*.bin'). An unset variable without a
 * default is an error naming the key; a path is otherwise left as written (relative paths are
 * relative to the working directory, like every other program's). */
static const char *const env_path_keys[] = {"train_files", "val_files", "tokenizer", "init_from",
                                            "out_dir", "dir", "mixture"};

static int expand_one(parse_ctx_t *ctx, int k, char *value, size_t cap) {
    char out[CFG_STR * 4];
    size_t o = 0;
    for (const char *p = value; *p;) {
        if (p[0] != '$' || p[1] != '{') {
            if (o + 1 < sizeof out) out[o++] = *p;
            p++;
            continue;
        }
        const char *close = strchr(p, '}');
        const nl_entry_t *e = ctx->set_by[k];
        const int line = e ? e->line : 1, col = e ? e->col : 1;
        if (!close)
            return cfg_error(ctx, line, col, "&%s %s: '${' without a closing '}' in '%s'",
                             cfg_group_names[cfg_keys[k].group], cfg_keys[k].key, value);
        char name[128] = "", def[CFG_STR] = "";
        const char *colon = strstr(p, ":-");
        const bool has_def = colon && colon < close;
        const char *name_end = has_def ? colon : close;
        snprintf(name, sizeof name, "%.*s", (int)(name_end - p - 2), p + 2);
        if (has_def) snprintf(def, sizeof def, "%.*s", (int)(close - colon - 2), colon + 2);
        const char *env = env_lookup(ctx->env, name);
        const char *use = env && *env ? env : has_def ? def : NULL;
        if (!use)
            return cfg_error(ctx, line, col, "&%s %s: the environment variable %s in '%s' is not "
                             "set (export it, or write ${%s:-default})",
                             cfg_group_names[cfg_keys[k].group], cfg_keys[k].key, name, value, name);
        for (const char *u = use; *u && o + 1 < sizeof out; u++) out[o++] = *u;
        p = close + 1;
    }
    out[o] = '\0';
    if (o + 1 > cap)
        return cfg_error(ctx, 1, 1, "&%s %s: '%s' expands to %zu characters, more than %zu",
                         cfg_group_names[cfg_keys[k].group], cfg_keys[k].key, value, o, cap - 1);
    /* a default or a variable's value holding '${' again: expanded once here, the effective
     * configuration (echoed, stored in checkpoints) would be expanded a second time when read */
    if (strstr(out, "${")) {
        const nl_entry_t *e = ctx->set_by[k];
        return cfg_error(ctx, e ? e->line : 1, e ? e->col : 1, "&%s %s: '%s' expands to '%s', "
                         "which holds '${' again (variables are expanded once: no nesting, and no "
                         "'${' in a default or a variable's value)", cfg_group_names[cfg_keys[k].group],
                         cfg_keys[k].key, value, out);
    }
    memcpy(value, out, o + 1);
    return 0;
}

/* A path key: ${VAR} is expanded in it (env_path_keys; &stage's train_files and mixture too). */
bool cfg_is_path_key(const key_spec_t *ks) {
    if (ks->type != K_STR) return false;
    for (size_t i = 0; i < sizeof env_path_keys / sizeof env_path_keys[0]; i++)
        if (!strcmp(ks->key, env_path_keys[i])) return true;
    return false;
}

static int expand_env_paths(parse_ctx_t *ctx, config_t *cfg) {
    for (int k = 0; k < cfg_n_keys; k++)
        if (cfg_keys[k].group != G_STAGE && cfg_is_path_key(&cfg_keys[k]) &&
            expand_one(ctx, k, cfg_field_ptr(cfg, &cfg_keys[k]), cfg_keys[k].size) != 0)
            return -1;
    return 0;
}

/* Where &data mixture and train_files were set, for the messages of config/stages.c and of the
 * data layer (which names a pattern matching no file by its line). */
static void note_data_positions(const parse_ctx_t *ctx, config_t *cfg) {
    const nl_entry_t *m = ctx->set_by[cfg_key_index(G_DATA, "mixture")];
    const nl_entry_t *f = ctx->set_by[cfg_key_index(G_DATA, "train_files")];
    cfg->mixture_line = m ? m->line : 0, cfg->mixture_col = m ? m->col : 0;
    cfg->train_files_line = f ? f->line : 0, cfg->train_files_col = f ? f->col : 0;
}

/* ${VAR} in the path keys of the &stage groups, as in &data's. */
static int expand_stage_paths(parse_ctx_t *ctx, config_t *cfg) {
    const int keys[2] = {cfg_key_index(G_STAGE, "train_files"), cfg_key_index(G_STAGE, "mixture")};
    for (int i = 0; i < cfg->n_stages; i++) {
        cfg->stage_at = i;
        for (int j = 0; j < 2; j++) {
            const key_spec_t *ks = &cfg_keys[keys[j]];
            const int at = stage_key_index(ks->key);
            nl_entry_t where = {.line = cfg->stages[i].key_line[at], .col = cfg->stages[i].key_col[at]};
            ctx->set_by[keys[j]] = where.line ? &where : NULL;
            int rc = expand_one(ctx, keys[j], cfg_field_ptr(cfg, ks), ks->size);
            ctx->set_by[keys[j]] = NULL;
            if (rc != 0) return -1;
        }
    }
    cfg->stage_at = 0;
    return 0;
}

int cfg_expand_paths(parse_ctx_t *ctx, config_t *cfg) {
    if (expand_env_paths(ctx, cfg) || expand_stage_paths(ctx, cfg)) return -1;
    note_data_positions(ctx, cfg);
    return 0;
}

/* ---- parse, load, destroy ---------------------------------------------------------------- */

/* Everything but the text copy; returns 0, or -1 with the message in msg. Frees what it parsed. */
static int parse_into(const char *path, const char *text, const config_args_t *args, config_t *cfg, char *msg,
                      size_t msgsize, env_snapshot_t *env) {
    cfg_set_table_defaults(cfg);
    snprintf(cfg->source_path, sizeof cfg->source_path, "%s", path ? path : "<namelist>");
    namelist_t nl;
    if (namelist_parse_keys(cfg->source_path, text, cfg_key_capacity, NULL, &nl, msg, msgsize) != 0) return -1;
    parse_ctx_t ctx = {.path = cfg->source_path, .msg = msg, .msgsize = msgsize, .env = env,
                       .plan_devices = args && args->plan_devices};
    int n_over = args ? args->n : 0;
    override_arg_t *over = xcalloc((size_t)n_over + 1, sizeof *over);
    int rc = 0;
    for (int g = 0; g < nl.n_groups && rc == 0; g++) rc = cfg_apply_group(&ctx, &nl.groups[g], cfg);
    if (rc == 0) rc = apply_overrides(&ctx, over, args, cfg);
    if (rc == 0) rc = cfg_check_cross_keys(&ctx, cfg);
    if (rc == 0) cfg_keep_positions(&ctx, n_over, cfg);
    for (int i = 0; i < n_over; i++) namelist_free(&over[i].nl);
    xfree(over);
    namelist_free(&nl);
    return rc;
}

void config_parse_overrides(const char *path, const char *text, const config_args_t *args, config_t *cfg) {
    char msg[CFG_MSG];
    if (parse_into(path, text, args, cfg, msg, sizeof msg, NULL) != 0) fatal_user("%s", msg);
    cfg->text = xstrdup(text);
    cfg->overrides = join_args(args);
}

void config_parse(const char *path, const char *text, config_t *cfg) {
    config_parse_overrides(path, text, NULL, cfg);
}

/* Whole file into a NUL-terminated buffer (malloc'd); NULL with *err = errno on failure. */
static char *read_whole_file(const char *path, long long *len, int *err) {
    size_t n = 0;
    char *text = file_read_whole(path, CFG_MAX_FILE, &n, err);
    *len = text ? (long long)n : -1;
    return text;
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

/* Rank 0's overrides on every rank (MPI does not promise the other processes rank 0's argv): the
 * strings packed one after another into *packed, which *ptrs (and out->args) point into. */
static void broadcast_args(const config_args_t *in, config_args_t *out, char **packed, const char ***ptrs) {
    int init = 0, rank = 0;
    MPI_CHECK(MPI_Initialized(&init));
    if (init) MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    long long header[3] = {0, 0, 0}; /* count, first argno, bytes */
    if (rank == 0 && in) {
        header[0] = in->n, header[1] = in->first_argno;
        for (int i = 0; i < in->n; i++) header[2] += (long long)strlen(in->args[i]) + 1;
    }
    if (init) MPI_CHECK(MPI_Bcast(header, 3, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
    if (header[2] > INT_MAX) fatal_user("the command-line overrides are longer than %d bytes", INT_MAX);
    *packed = xrealloc_small(NULL, (size_t)header[2] + 1);
    *ptrs = xcalloc((size_t)header[0] + 1, sizeof **ptrs);
    for (long long i = 0, at = 0; rank == 0 && i < header[0]; i++) {
        size_t n = strlen(in->args[i]) + 1;
        memcpy(*packed + at, in->args[i], n);
        at += (long long)n;
    }
    if (init && header[2] > 0) MPI_CHECK(MPI_Bcast(*packed, (int)header[2], MPI_CHAR, 0, MPI_COMM_WORLD));
    for (long long i = 0, at = 0; i < header[0]; i++) {
        (*ptrs)[i] = *packed + at;
        at += (long long)strlen(*packed + at) + 1;
    }
    *out = (config_args_t){.args = *ptrs, .n = (int)header[0], .first_argno = (int)header[1],
                           .plan_devices = in && in->plan_devices}; /* every rank's own argv */
}

/* Whether any rank refused the namelist: the lowest such rank's message goes to every rank (into
 * msg, marked with a leading '\1', and naming that rank and its host when it is not rank 0), so
 * all of them end together with it, printed once (fatal_user prints rank 0's copy). Collective. */
static void agree_parse(int rc, char *msg, size_t size) {
    int rank = 0, first = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    int mine = rc != 0 ? rank : INT_MAX;
    MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == INT_MAX) {
        msg[0] = '\0';
        return;
    }
    char body[CFG_MSG + 320];
    if (rank == first) {
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        if (first == 0) snprintf(body, sizeof body, "\1%.*s", CFG_MSG, msg);
        else snprintf(body, sizeof body, "\1rank %d (host %.64s): %.*s", first, host, CFG_MSG, msg);
    }
    MPI_CHECK(MPI_Bcast(body, (int)sizeof body, MPI_CHAR, first, MPI_COMM_WORLD));
    snprintf(msg, size, "%s", body);
}

void config_load_overrides(const char *path, const config_args_t *args, config_t *cfg) {
    long long len = 0;
    int err = 0;
    char *text = read_and_broadcast(path, &len, &err);
    if (!text) {
        memset(cfg, 0, sizeof *cfg);
        fatal_user("%s: cannot read the namelist file: %s", path, file_strerror(err));
    }
    if ((long long)strlen(text) != len) {
        free(text);
        memset(cfg, 0, sizeof *cfg);
        fatal_user("%s: contains a NUL byte; is it a namelist text file?", path);
    }
    config_args_t shared;
    char *packed = NULL;
    const char **ptrs = NULL;
    broadcast_args(args, &shared, &packed, &ptrs);
    char msg[CFG_MSG + 320];
    int init = 0, rank = 0;
    MPI_CHECK(MPI_Initialized(&init));
    if (init) MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    /* rank 0 parses first, recording the path variables it expands; the others expand from
     * its record (env_snapshot_t), and a refusal on any rank is every rank's (agree_parse) */
    env_snapshot_t env = {.replay = rank != 0};
    int rc = 0;
    if (rank == 0) rc = parse_into(path, text, &shared, cfg, msg, sizeof msg, &env);
    if (init) {
        long long n = (long long)env.len;
        MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
        if (rank != 0) env.buf = xrealloc_small(NULL, (size_t)n + 1), env.len = (size_t)n;
        if (n > 0) MPI_CHECK(MPI_Bcast(env.buf, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD));
    }
    if (rank != 0) rc = parse_into(path, text, &shared, cfg, msg, sizeof msg, &env);
    free(env.buf);
    if (rc == 0) cfg->overrides = join_args(&shared);
    free(packed);
    xfree(ptrs);
    if (init) agree_parse(rc, msg, sizeof msg);
    if (rc != 0 || msg[0] == '\1') {
        free(text);
        if (rc == 0) config_destroy(cfg); /* parsed here, refused on another rank */
        fatal_user("%s", msg + (msg[0] == '\1'));
    }
    cfg->text = text; /* from xrealloc_small: config_destroy frees it with free() */
}

void config_load(const char *path, config_t *cfg) { config_load_overrides(path, NULL, cfg); }

void config_destroy(config_t *cfg) {
    free(cfg->text); /* xstrdup / xrealloc_small memory, not an xmalloc block */
    free(cfg->overrides);
    free(cfg->where.labels);
    cfg->text = cfg->overrides = cfg->where.labels = NULL;
}
