/* llmmerge.c — merge the weights of llmtrain models (checkpoints or weight files of any grid)
 * into one weights file that llmtrain loads (&run init_from), under MPI.
 *
 *   llmmerge MERGE.nml [KEY=VALUE ...]
 *
 * MERGE.nml holds one &merge group (keys below; docs/llmmerge.md). Each KEY=VALUE
 * argument replaces that key, written as in the namelist (weights=0.3,0.7 "out='t3.h5'"), so a
 * search (llmsweep) can run one namelist with different parameters as its trial command.
 *
 *   method     'linear' | 'slerp' | 'task_arithmetic' | 'ties' | 'dare_linear' | 'dare_ties'
 *   models     paths or glob patterns (sorted), e.g. 'runs/a/ckpt_step*.h5'; last = K keeps the
 *              last K of them (averaging the end of a run)
 *   weights    one per model [1 each]            base       the base model (task vectors; slerp)
 *   density    one, or one per model [1]         t          slerp [0.5], or per tensor with
 *   t_filter, t_value  the first filter that matches a tensor name (a substring, or a glob
 *              pattern with * ? [) gives its t   normalize  [mergekit's default per method]
 *   rescale    DARE: 'l1' (mergekit) | '1/density' (classic) | 'none'
 *   seed       DARE masks [1337]   lambda  task vectors' scale [1]   out  the output file
 *   overwrite  replace an existing out [.false.]
 *
 * Method definitions: tools/merge_methods.h (mergekit's). Every input is checked before any
 * tensor is merged: a regular file (a FIFO is refused, not waited on), format, the model
 * attributes and the list and global shapes of the tensors in /model must be the same in all, and
 * the first input's must be those of the parameter registry (model/params.h) of the model its
 * namelist describes, so no dataset shape is trusted before it is allocated (else one message
 * naming the key or the file and tensor). Then the
 * tensors are merged one at a time — tensor i by rank i % size — reading each input's copy
 * when it is needed and verifying its checksum; rank 0 receives the merged tensors in order and
 * writes them to <out>.tmp, which is renamed to out when complete. Memory per rank: a few times
 * the largest tensor (2 for linear and slerp, 3 for task arithmetic and dare_linear, 5 to 6 for
 * ties and dare_ties, whose sign election reads every input twice), never a whole model.
 * The output records its provenance: merge_method, merge_inputs (role, path, sha256, step and
 * run_id of every input, as JSON), merge_parameters (the effective &merge namelist).
 *
 * Exit codes: 0 written; 2 bad input (namelist, an input missing, corrupt or of another model,
 * an existing out), on every rank; 3 internal error; 5 the output could not be written.
 * Uses: config/namelist, config/schema (the &merge key table is checked by the configuration's
 * schema engine), config/config and model/params (the registry of the inputs' model),
 * tools/merge_methods, io/checkpoint (the inputs and the output, tensor by tensor), parallel/comm_host (agreement
 * on errors), core/.
 *
 * Why one file of ~1,300 lines: the program's parts (its key table, the checks of every input
 * against the model before anything is allocated, the tensor loop over ranks, the provenance) are
 * each used once and in this order; the methods are merge_methods.c, the file format
 * io/checkpoint.c, the key checks config/schema.c.
 */
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "config/config.h"
#include "config/namelist.h"
#include "config/schema.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/timer.h"
#include "core/version.h"
#include "io/checkpoint.h"
#include "model/params.h"
#include "parallel/comm_host.h"
#include "tools/merge_methods.h"

#define MSG_LEN 2048
#define MAX_TEXT (16 << 20)
#define EXIT_WRITE LLMT_EXIT_CKPT /* 5: the output could not be written */

static const char *usage =
    "usage: llmmerge MERGE.nml [KEY=VALUE ...]\n"
    "  MERGE.nml holds one &merge group: method ('linear' | 'slerp' | 'task_arithmetic' |\n"
    "  'ties' | 'dare_linear' | 'dare_ties'), models, weights, base, density, t, t_filter,\n"
    "  t_value, normalize, rescale, lambda, seed, last, out, overwrite (see docs/llmmerge.md).\n"
    "  KEY=VALUE replaces a key, written as in the namelist: weights=0.3,0.7 \"out='a.h5'\"\n";

/* ---- the &merge schema ------------------------------------------------------------------------ */

enum {
    K_METHOD, K_MODELS, K_WEIGHTS, K_BASE, K_DENSITY, K_T, K_T_FILTER, K_T_VALUE, K_SEED,
    K_RESCALE, K_NORMALIZE, K_LAMBDA, K_LAST, K_OUT, K_OVERWRITE, N_KEYS
};

#define M(m) (1u << (m))
#define ALL_METHODS ((1u << MERGE_N_METHODS) - 1)
#define TASK_VECTOR (M(MERGE_TASK_ARITHMETIC) | M(MERGE_TIES) | M(MERGE_DARE_LINEAR) | M(MERGE_DARE_TIES))
#define DARE (M(MERGE_DARE_LINEAR) | M(MERGE_DARE_TIES))

/* The keys of &merge for the configuration's schema engine (config/schema.h): type, count and
 * bounds; which methods each key is a parameter of is llmmerge's own rule (key_methods). */
static const schema_key_t merge_keys[N_KEYS] = {
    [K_METHOD] = {"method", SCHEMA_STR},
    [K_MODELS] = {"models", SCHEMA_STRS},
    [K_WEIGHTS] = {"weights", SCHEMA_REALS},
    [K_BASE] = {"base", SCHEMA_STR},
    [K_DENSITY] = {"density", SCHEMA_REALS, '(', ']', 0, 1, "the fraction of each task vector that is kept"},
    [K_T] = {"t", SCHEMA_REAL, '[', ']', 0, 1},
    [K_T_FILTER] = {"t_filter", SCHEMA_STRS},
    [K_T_VALUE] = {"t_value", SCHEMA_REALS, '[', ']', 0, 1},
    [K_SEED] = {"seed", SCHEMA_INT, '[', 0, 0, 0},
    [K_RESCALE] = {"rescale", SCHEMA_STR},
    [K_NORMALIZE] = {"normalize", SCHEMA_BOOL},
    [K_LAMBDA] = {"lambda", SCHEMA_REAL},
    [K_LAST] = {"last", SCHEMA_INT, '[', 0, 0, 0},
    [K_OUT] = {"out", SCHEMA_STR},
    [K_OVERWRITE] = {"overwrite", SCHEMA_BOOL},
};
static const schema_t merge_schema = {"merge", merge_keys, N_KEYS};

/* The methods each key is a parameter of. */
static const unsigned key_methods[N_KEYS] = {
    [K_METHOD] = ALL_METHODS,
    [K_MODELS] = ALL_METHODS,
    [K_WEIGHTS] = ALL_METHODS & ~M(MERGE_SLERP),
    [K_BASE] = TASK_VECTOR | M(MERGE_SLERP),
    [K_DENSITY] = M(MERGE_TIES) | DARE,
    [K_T] = M(MERGE_SLERP),
    [K_T_FILTER] = M(MERGE_SLERP),
    [K_T_VALUE] = M(MERGE_SLERP),
    [K_SEED] = DARE,
    [K_RESCALE] = DARE,
    [K_NORMALIZE] = ALL_METHODS & ~M(MERGE_SLERP),
    [K_LAMBDA] = TASK_VECTOR,
    [K_LAST] = ALL_METHODS,
    [K_OUT] = ALL_METHODS,
    [K_OVERWRITE] = ALL_METHODS,
};

/* Where a key was given, for messages after parsing ("path:line:col"). */
typedef struct where {
    char path[600];
    int line, col;
} where_t;

typedef struct merge_opts {
    merge_method_t method;
    char **models;        /* after expansion and `last` */
    int n_models;
    double *weights;      /* n_models (defaults filled in) */
    char *base;           /* NULL: none */
    double *density;      /* n_models (defaults filled in) */
    double t;
    char **t_filter;
    double *t_value;
    int n_t_filter;
    uint64_t seed;
    merge_rescale_t rescale;
    bool normalize;
    double lambda;
    int64_t last;
    char *out;
    bool overwrite;
    bool given[N_KEYS];
    where_t at[N_KEYS];   /* of the key */
    /* as given, before expansion */
    char **model_args;
    int n_model_args, n_weights, n_density, n_t_value;
} merge_opts_t;

static int world_rank, world_size;

/* ---- agreeing on errors ----------------------------------------------------------------------- */

/* Every rank states its outcome (code 0: fine, else an exit code with msg); when any rank
 * failed, comm_agree_or_exit prints the lowest failing rank's message once and every rank exits
 * with that rank's code. Returns when none failed. */
static void agree_or_exit(int code, const char *msg) {
    int first = code ? world_rank : world_size;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == world_size) return;
    int agreed = code;
    MPI_CHECK(MPI_Bcast(&agreed, 1, MPI_INT, first, MPI_COMM_WORLD)); /* the first failing rank's */
    comm_agree_or_exit(MPI_COMM_WORLD, agreed, "llmmerge", code ? msg : NULL);
}

/* Rank 0's verdict (code 0: fine, else an exit code with msg) for every rank: rank 0 checked
 * or wrote for all, so its message is the verdict as it stands, without a rank. */
static void rank0_outcome(int code, const char *msg) {
    struct {
        int code;
        char text[MSG_LEN];
    } v = {world_rank == 0 ? code : 0, ""};
    if (world_rank == 0 && code) snprintf(v.text, sizeof v.text, "%s", msg);
    MPI_CHECK(MPI_Bcast(&v, (int)sizeof v, MPI_BYTE, 0, MPI_COMM_WORLD));
    v.text[sizeof v.text - 1] = '\0';
    if (v.code) fatal_agreed(v.code, v.text);
}

/* Rank 0's verdict on the input (msg "" = fine): bad input, exit 2. */
static void rank0_verdict(const char *msg) { rank0_outcome(msg[0] ? LLMT_EXIT_USER : 0, msg); }

/* ---- namelist: parsing ------------------------------------------------------------------------ */

static int pos_error(char *err, const char *path, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int pos_error(char *err, const char *path, int line, int col, const char *fmt, ...) {
    int n = snprintf(err, MSG_LEN, "%s:%d:%d: ", path, line, col);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && n < MSG_LEN) vsnprintf(err + n, MSG_LEN - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* The entries of one parsed text into by_key (a later text replaces a key of an earlier one;
 * within one text a key may appear once). */
static int collect_entries(char *err, const char *path, const namelist_t *nl,
                           const nl_entry_t **by_key, const char **key_path) {
    const nl_group_t *merge = NULL;
    for (int g = 0; g < nl->n_groups; g++) {
        const nl_group_t *gr = &nl->groups[g];
        if (strcmp(gr->name, "merge") != 0)
            return pos_error(err, path, gr->line, gr->col, "unknown group '&%s' (llmmerge reads one "
                             "&merge group)", gr->name);
        if (merge)
            return pos_error(err, path, gr->line, gr->col, "a second &merge group (the first is at "
                             "line %d)", merge->line);
        merge = gr;
    }
    if (!merge) return errf(err, MSG_LEN, "%s: no &merge group", path);
    const nl_entry_t *seen[N_KEYS] = {0};
    for (int i = 0; i < merge->n_entries; i++) {
        const nl_entry_t *e = &merge->entries[i];
        int k = schema_find_key(&merge_schema, e->key);
        if (k < 0) return schema_unknown_key_error(&merge_schema, e, path, err, MSG_LEN);
        if (seen[k])
            return pos_error(err, path, e->line, e->col, "&merge %s: given twice (first at line %d)",
                             e->key, seen[k]->line);
        if (schema_check_entry(&merge_schema, k, e, path, err, MSG_LEN) != 0) return -1;
        seen[k] = e;
    }
    for (int k = 0; k < N_KEYS; k++) /* an override replaces the file's value of its key */
        if (seen[k]) by_key[k] = seen[k], key_path[k] = path;
    return 0;
}

static char **strings_of(const nl_entry_t *e) {
    char **s = xcalloc((size_t)e->n_values, sizeof *s);
    for (int i = 0; i < e->n_values; i++) s[i] = xstrdup(e->values[i].s);
    return s;
}

static double *reals_of(const nl_entry_t *e) {
    double *r = xcalloc((size_t)e->n_values, sizeof *r);
    for (int i = 0; i < e->n_values; i++) r[i] = e->values[i].r;
    return r;
}

/* A value outside its range (the table's bounds) or not one of rescale's: the message points at
 * it. */
static int check_ranges(char *err, const char *path, int k, const nl_entry_t *e, merge_opts_t *o) {
    if (schema_check_bounds(&merge_schema, k, e, path, err, MSG_LEN) != 0) return -1;
    if (k == K_RESCALE) {
        const char *s = e->values[0].s;
        if (strcmp(s, "l1") == 0) o->rescale = MERGE_RESCALE_L1;
        else if (strcmp(s, "1/density") == 0) o->rescale = MERGE_RESCALE_INV_DENSITY;
        else if (strcmp(s, "none") == 0) o->rescale = MERGE_RESCALE_NONE;
        else
            return pos_error(err, path, e->values[0].line, e->values[0].col, "&merge rescale: expected "
                             "'l1', '1/density' or 'none', got '%s'", s);
    }
    return 0;
}

static int set_method(char *err, const char *path, const nl_entry_t *e, merge_opts_t *o) {
    const nl_value_t *v = &e->values[0];
    int m = merge_method_from_name(v->s);
    if (m >= 0) {
        o->method = (merge_method_t)m;
        return 0;
    }
    const char *names[MERGE_N_METHODS];
    for (int i = 0; i < MERGE_N_METHODS; i++) names[i] = merge_method_name((merge_method_t)i);
    char hint[128] = "";
    const char *close = schema_closest(v->s, names, MERGE_N_METHODS);
    if (close) snprintf(hint, sizeof hint, "; did you mean '%s'?", close);
    return pos_error(err, path, v->line, v->col, "&merge method: unknown method '%s' (methods: "
                     "'linear', 'slerp', 'task_arithmetic', 'ties', 'dare_linear', 'dare_ties')%s",
                     v->s, hint);
}

/* "slerp" / "ties, dare_linear, dare_ties": the methods a key belongs to. */
static void methods_of(unsigned mask, char *out, size_t len) {
    out[0] = '\0';
    for (int m = 0; m < MERGE_N_METHODS; m++)
        if (mask & M(m)) {
            size_t l = strlen(out);
            snprintf(out + l, len - l, "%s%s", l ? ", " : "", merge_method_name((merge_method_t)m));
        }
}

/* Every key given into o (types and ranges checked; counts are checked once `models` is
 * expanded). */
static int assign(char *err, const nl_entry_t **by_key, const char **key_path, merge_opts_t *o) {
    *o = (merge_opts_t){.t = 0.5, .seed = 1337, .rescale = MERGE_RESCALE_L1, .lambda = 1};
    if (!by_key[K_METHOD]) return errf(err, MSG_LEN, "%s: &merge method is required (one of 'linear', "
                                      "'slerp', 'task_arithmetic', 'ties', 'dare_linear', 'dare_ties')", key_path[N_KEYS]);
    if (set_method(err, key_path[K_METHOD], by_key[K_METHOD], o) != 0) return -1;
    o->normalize = merge_method_normalizes(o->method);
    for (int k = 0; k < N_KEYS; k++) {
        const nl_entry_t *e = by_key[k];
        if (!e) continue;
        const char *path = key_path[k];
        o->given[k] = true;
        snprintf(o->at[k].path, sizeof o->at[k].path, "%s", path);
        o->at[k].line = e->line, o->at[k].col = e->col;
        if (!(key_methods[k] & M(o->method))) {
            char which[128];
            methods_of(key_methods[k], which, sizeof which);
            return pos_error(err, path, e->line, e->col, "&merge %s: not a parameter of method '%s' "
                             "(%s is for: %s)", e->key, merge_method_name(o->method), e->key, which);
        }
        if (check_ranges(err, path, k, e, o) != 0) return -1;
        switch (k) {
        case K_MODELS: o->model_args = strings_of(e), o->n_model_args = e->n_values; break;
        case K_WEIGHTS: o->weights = reals_of(e), o->n_weights = e->n_values; break;
        case K_BASE: o->base = xstrdup(e->values[0].s); break;
        case K_DENSITY: o->density = reals_of(e), o->n_density = e->n_values; break;
        case K_T: o->t = e->values[0].r; break;
        case K_T_FILTER: o->t_filter = strings_of(e), o->n_t_filter = e->n_values; break;
        case K_T_VALUE: o->t_value = reals_of(e), o->n_t_value = e->n_values; break;
        case K_SEED: o->seed = (uint64_t)e->values[0].i; break;
        case K_NORMALIZE: o->normalize = e->values[0].b; break;
        case K_LAMBDA: o->lambda = e->values[0].r; break;
        case K_LAST: o->last = e->values[0].i; break;
        case K_OUT: o->out = xstrdup(e->values[0].s); break;
        case K_OVERWRITE: o->overwrite = e->values[0].b; break;
        default: break;
        }
    }
    return 0;
}

/* Checks that need no file: required keys, filters and their values, empty strings. */
static int check_keys(char *err, merge_opts_t *o, const char *path) {
    if (!o->given[K_MODELS]) return errf(err, MSG_LEN, "%s: &merge models is required (the input files)", path);
    if (!o->given[K_OUT] || !o->out[0]) return errf(err, MSG_LEN, "%s: &merge out is required (the output file)", path);
    const where_t *w = &o->at[K_MODELS];
    for (int i = 0; i < o->n_model_args; i++)
        if (!o->model_args[i][0]) return pos_error(err, w->path, w->line, w->col, "&merge models(%d) is empty", i + 1);
    bool needs_base = merge_method_is_task_vector(o->method);
    if (needs_base && (!o->base || !o->base[0]))
        return errf(err, MSG_LEN, "%s: &merge base is required by method '%s' (the model the task "
                    "vectors are taken from)", path, merge_method_name(o->method));
    if (o->n_t_filter != o->n_t_value) {
        w = &o->at[o->given[K_T_FILTER] ? K_T_FILTER : K_T_VALUE];
        return pos_error(err, w->path, w->line, w->col, "&merge t_filter and t_value: %d filters but "
                         "%d values (one t_value per t_filter)", o->n_t_filter, o->n_t_value);
    }
    return 0;
}

/* Parse the namelist text and the KEY=VALUE overrides; 0, or -1 with the message. */
static int parse_options(char *err, const char *path, const char *text, int n_over, char **over,
                         merge_opts_t *o) {
    namelist_t *nl = xcalloc((size_t)n_over + 1, sizeof *nl);
    char (*paths)[64] = xcalloc((size_t)n_over + 1, sizeof *paths);
    const nl_entry_t *by_key[N_KEYS] = {0};
    const char *key_path[N_KEYS + 1] = {0};
    key_path[N_KEYS] = path;
    int parsed = 0, rc = namelist_parse_keys(path, text, schema_key_capacity, (void *)&merge_schema, &nl[0], err, MSG_LEN);
    if (rc == 0) parsed = 1, rc = collect_entries(err, path, &nl[0], by_key, key_path);
    for (int i = 0; rc == 0 && i < n_over; i++) {
        snprintf(paths[i + 1], sizeof paths[i + 1], "argument %d", i + 2);
        if (!strchr(over[i], '=')) {
            rc = errf(err, MSG_LEN, "argument %d '%s': expected KEY=VALUE (a &merge key and its value "
                      "as in the namelist)", i + 2, over[i]);
            break;
        }
        size_t len = strlen(over[i]) + 16;
        char *t = xmalloc(len);
        snprintf(t, len, "&merge %s /", over[i]);
        rc = namelist_parse_keys(paths[i + 1], t, schema_key_capacity, (void *)&merge_schema, &nl[i + 1], err, MSG_LEN);
        xfree(t);
        if (rc == 0) parsed++, rc = collect_entries(err, paths[i + 1], &nl[i + 1], by_key, key_path);
    }
    if (rc == 0) rc = assign(err, by_key, key_path, o);
    if (rc == 0) rc = check_keys(err, o, path);
    for (int i = 0; i < parsed; i++) namelist_free(&nl[i]);
    xfree(nl);
    xfree(paths);
    return rc;
}

/* ---- the inputs -------------------------------------------------------------------------------- */

static bool has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* Rank 0: models as files (patterns expanded, sorted; `last` applied), or a message. */
static int expand_models(char *err, merge_opts_t *o) {
    const where_t *w = &o->at[K_MODELS];
    char **list = NULL;
    int n = 0, cap = 0;
    for (int i = 0; i < o->n_model_args; i++) {
        glob_t g = {0};
        const char *arg = o->model_args[i];
        int rc = has_glob_chars(arg) ? glob(arg, GLOB_ERR, NULL, &g) : -1;
        if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
            globfree(&g);
            return pos_error(err, w->path, w->line, w->col, "&merge models(%d): '%s' matches no file",
                             i + 1, arg);
        }
        if (rc > 0) {
            globfree(&g);
            return pos_error(err, w->path, w->line, w->col, "&merge models(%d): '%s' cannot be "
                             "expanded (a directory cannot be read)", i + 1, arg);
        }
        size_t add = rc == 0 ? g.gl_pathc : 1;
        for (size_t j = 0; j < add; j++) {
            if (n == cap) cap = cap ? 2 * cap : 16, list = xrealloc_small(list, (size_t)cap * sizeof *list);
            list[n++] = xstrdup(rc == 0 ? g.gl_pathv[j] : arg);
        }
        if (rc == 0) globfree(&g);
    }
    if (o->last > n) {
        const where_t *wl = &o->at[K_LAST];
        for (int i = 0; i < n; i++) free(list[i]);
        free(list);
        return pos_error(err, wl->path, wl->line, wl->col, "&merge last = %lld, but models names %d "
                         "file%s", (long long)o->last, n, n == 1 ? "" : "s");
    }
    int skip = o->last > 0 ? n - (int)o->last : 0;
    o->n_models = n - skip;
    o->models = xcalloc((size_t)o->n_models, sizeof *o->models);
    for (int i = 0; i < n; i++) {
        if (i < skip) free(list[i]);
        else o->models[i - skip] = list[i];
    }
    free(list);
    return 0;
}

/* The models list, rank 0's, on every rank. */
static void share_models(merge_opts_t *o) {
    size_t len = 0;
    if (world_rank == 0)
        for (int i = 0; i < o->n_models; i++) len += strlen(o->models[i]) + 1;
    unsigned long long l = len;
    int n = o->n_models;
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Bcast(&l, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
    char *buf = xcalloc((size_t)l + 1, 1);
    if (world_rank == 0)
        for (int i = 0, at = 0; i < n; i++) at += sprintf(buf + at, "%s", o->models[i]) + 1;
    MPI_CHECK(MPI_Bcast(buf, (int)l, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (world_rank != 0) {
        o->n_models = n;
        o->models = xcalloc((size_t)n, sizeof *o->models);
        for (int i = 0, at = 0; i < n; i++) {
            o->models[i] = xstrdup(buf + at);
            at += (int)strlen(buf + at) + 1;
        }
    }
    xfree(buf);
}

/* Per-model lists (weights, density) against the number of models, defaults filled in. */
static int fill_per_model(char *err, merge_opts_t *o, int k, double **v, int n_given, double def,
                          bool one_for_all) {
    const where_t *w = &o->at[k];
    if (n_given == 0 || (one_for_all && n_given == 1)) {
        double x = n_given ? (*v)[0] : def;
        xfree(*v);
        *v = xcalloc((size_t)o->n_models, sizeof **v);
        for (int i = 0; i < o->n_models; i++) (*v)[i] = x;
        return 0;
    }
    if (n_given != o->n_models)
        return pos_error(err, w->path, w->line, w->col, "&merge %s: %d values for %d model%s (one per "
                         "model%s)", merge_keys[k].key, n_given, o->n_models, o->n_models == 1 ? "" : "s",
                         one_for_all ? ", or one for all" : "");
    return 0;
}

/* Checks that need the expanded models: counts, slerp's two ends, weights that sum to 0. */
static int check_counts(char *err, merge_opts_t *o, const char *path) {
    if (fill_per_model(err, o, K_WEIGHTS, &o->weights, o->n_weights, 1.0, false) != 0 ||
        fill_per_model(err, o, K_DENSITY, &o->density, o->n_density, 1.0, true) != 0)
        return -1;
    if (o->method == MERGE_SLERP && o->n_models + (o->base != NULL) != 2)
        return errf(err, MSG_LEN, "%s: &merge method 'slerp' interpolates between two models: give "
                    "models = 'a.h5', 'b.h5' (t = 0 is a), or base and one model (t = 0 is the base); "
                    "got %d model%s%s", path, o->n_models, o->n_models == 1 ? "" : "s", o->base ? " and a base" : "");
    double sum = 0;
    for (int i = 0; i < o->n_models; i++) sum += o->weights[i];
    if (o->normalize && o->method != MERGE_SLERP && fabs(sum) < 1e-8) {
        const where_t *w = &o->at[o->given[K_WEIGHTS] ? K_WEIGHTS : K_MODELS];
        return pos_error(err, w->path, w->line, w->col, "&merge weights: they sum to %g and normalize "
                         "is on (the merge divides by their sum); change them or set normalize = .false.", sum);
    }
    for (int i = 0; i < o->n_models; i++) {
        if (o->base && strcmp(o->models[i], o->base) == 0)
            return errf(err, MSG_LEN, "%s: &merge models(%d) '%s' is the base itself: list only the "
                        "other models in models", path, i + 1, o->models[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(o->models[i], o->models[j]) == 0)
                return errf(err, MSG_LEN, "%s: &merge models(%d) '%s' is listed twice (also "
                            "models(%d)); give it a larger weight instead", path, i + 1, o->models[i], j + 1);
    }
    return 0;
}

/* One input file: its role, and what the checks found. */
typedef struct input {
    const char *path;
    char label[1200];  /* "base 'x.h5'", "models(2) 'y.h5'" */
    char role[32];     /* "base", "models(2)" */
    int model;         /* index into models, -1 for the base */
    hid_t file;
    ckpt_file_meta_t meta;
    uint8_t sha[32];
} input_t;

/* base first (when there is one), then models in order. */
static input_t *make_inputs(const merge_opts_t *o, int *n) {
    *n = o->n_models + (o->base != NULL);
    input_t *in = xcalloc((size_t)*n, sizeof *in);
    int at = 0;
    if (o->base) {
        in[at] = (input_t){.path = o->base, .model = -1, .file = -1};
        snprintf(in[at].role, sizeof in[at].role, "base");
        at++;
    }
    for (int i = 0; i < o->n_models; i++, at++) {
        in[at] = (input_t){.path = o->models[i], .model = i, .file = -1};
        snprintf(in[at].role, sizeof in[at].role, "models(%d)", i + 1);
    }
    for (int i = 0; i < *n; i++) snprintf(in[i].label, sizeof in[i].label, "%s '%s'", in[i].role, in[i].path);
    return in;
}

static void format_shape(char *buf, size_t len, const ckpt_file_tensor_t *t) {
    if (t->ndim == 1) snprintf(buf, len, "[%lld]", (long long)t->dims[0]);
    else if (t->ndim == 2) snprintf(buf, len, "[%lld, %lld]", (long long)t->dims[0], (long long)t->dims[1]);
    else snprintf(buf, len, "[%lld, %lld, %lld]", (long long)t->dims[0], (long long)t->dims[1],
                  (long long)t->dims[2]);
}

/* The first tensor in which list b (of input x) differs from list a (of the reference r):
 * missing, extra or of another shape; 0 when they are the same. */
static int compare_tensors(char *err, size_t len, const input_t *r, const ckpt_file_tensor_t *a, int na,
                           const input_t *x, const ckpt_file_tensor_t *b, int nb) {
    int i = 0, j = 0;
    while (i < na || j < nb) {
        int c = i == na ? 1 : j == nb ? -1 : strcmp(a[i].name, b[j].name);
        if (c < 0)
            return errf(err, len, "%s has no tensor /model/%s, %s has it", x->label, a[i].name, r->label);
        if (c > 0)
            return errf(err, len, "%s has a tensor /model/%s that %s does not have", x->label, b[j].name, r->label);
        if (a[i].ndim != b[j].ndim || a[i].dims[0] != b[j].dims[0] || a[i].dims[1] != b[j].dims[1] ||
            a[i].dims[2] != b[j].dims[2]) {
            char sa[64], sb[64];
            format_shape(sa, sizeof sa, &a[i]);
            format_shape(sb, sizeof sb, &b[j]);
            return errf(err, len, "tensor /model/%s has shape %s in %s but %s in %s", a[i].name, sb,
                        x->label, sa, r->label);
        }
        i++, j++;
    }
    return 0;
}

/* Input x against the reference r: the same model (attributes) and the same tensors. */
static int compare_inputs(char *err, const input_t *r, const ckpt_file_tensor_t *rt, int nr,
                          const input_t *x, const ckpt_file_tensor_t *xt, int nx) {
    const char *names[7];
    int32_t va[7], vb[7];
    ckpt_file_model_keys(&r->meta, names, va);
    ckpt_file_model_keys(&x->meta, names, vb);
    int key = -1;
    for (int i = 0; i < 7 && key < 0; i++)
        if (va[i] != 0 && vb[i] != 0 && va[i] != vb[i]) key = i;
    char what[1400] = "";
    int tdiff = compare_tensors(what, sizeof what, r, rt, nr, x, xt, nx);
    const char *why = "models of different shapes or vocabularies cannot be merged";
    if (tdiff && key >= 0)
        return errf(err, MSG_LEN, "%s (%s = %d vs %d): %s", what, names[key], vb[key], va[key], why);
    if (tdiff) return errf(err, MSG_LEN, "%s: %s", what, why);
    if (key >= 0) {
        bool vocab = key <= 1;
        return errf(err, MSG_LEN, "%s has %s = %d but %s has %d (tensor /model/%s: %s): %s", x->label,
                    names[key], vb[key], r->label, va[key], vocab ? "wte" : rt[0].name,
                    vocab ? "the same rows hold different tokens" : "the same tensors mean different things",
                    why);
    }
    return 0;
}

/* A growing text. */
typedef struct text {
    char *s;
    size_t len, cap;
} text_t;

static void tprintf(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(text_t *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        t->cap = 2 * (t->cap + (size_t)n) + 256;
        t->s = xrealloc_small(t->s, t->cap);
        if (t->len == 0) t->s[0] = '\0';
    }
}

/* ---- the model's registry: what every tensor's shape must be --------------------------------- */

/* A file's dataset shapes are not trusted: a chunked dataset of 2^36 elements costs a few bytes
 * on disk, and the merge allocates what the shapes say. The reference input's model (the &model
 * group of its namelist, or without one its root attributes) gives the parameter registry
 * (model/params.h), and its tensors must be exactly the registry's, in names and global shapes,
 * before anything is allocated or read; the other inputs must have the reference's tensors. */

/* Append "key = v1, v2" of a namelist entry, values as written. */
static void model_entry_text(text_t *t, const nl_entry_t *e) {
    tprintf(t, "  %s =", e->key);
    for (int v = 0; v < e->n_values; v++) tprintf(t, "%s %s", v ? "," : "", e->values[v].raw);
    tprintf(t, "\n");
}

/* Rank 0: the namelist the registry is built from: the &model group(s) of the reference's config
 * (nothing else changes a tensor's global shape), or its model attributes when it has no config,
 * and the one &data key a parse needs. NULL with a message in err when there is neither. */
static char *registry_namelist(char *err, const input_t *r, const char *config) {
    namelist_t nl = {0};
    char why[MSG_LEN];
    if (config[0] && namelist_parse("config", config, &nl, why, sizeof why) != 0) {
        errf(err, MSG_LEN, "%s: its namelist (root attribute config) does not parse: %s", r->label, why);
        return NULL;
    }
    text_t t = {0};
    tprintf(&t, "&model\n");
    int n_model = 0;
    for (int g = 0; g < nl.n_groups; g++)
        if (strcmp(nl.groups[g].name, "model") == 0)
            for (int e = 0; e < nl.groups[g].n_entries; e++, n_model++) model_entry_text(&t, &nl.groups[g].entries[e]);
    namelist_free(&nl);
    if (n_model == 0) { /* a file without a namelist: GPT-2 of the attributes' size */
        const char *names[7];
        int32_t v[7];
        ckpt_file_model_keys(&r->meta, names, v);
        for (int i = 0; i < 7; i++) {
            if (i == 1) continue; /* padded_vocab follows from vocab_size */
            if (v[i] <= 0) {
                free(t.s);
                errf(err, MSG_LEN, "%s: has neither a namelist (root attribute config) nor the root "
                     "attribute %s: the shapes of its tensors cannot be checked", r->label, names[i]);
                return NULL;
            }
            tprintf(&t, "  %s = %d\n", names[i], (int)v[i]);
        }
    }
    tprintf(&t, "/\n&data\n  train_files = 'unused'\n/\n");
    return t.s;
}

/* Every rank: the registry of the reference's model from rank 0's namelist text; the text is
 * the same on every rank, so a bad one ends every rank alike (config_parse: fatal_user). */
static void registry_create(params_t *P, const input_t *r, char *text) {
    unsigned long long len = world_rank == 0 ? strlen(text) : 0;
    MPI_CHECK(MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
    if (world_rank != 0) text = xcalloc((size_t)len + 1, 1);
    MPI_CHECK(MPI_Bcast(text, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD));
    char path[1300];
    snprintf(path, sizeof path, "%s (the &model of its namelist)", r->label);
    config_t cfg;
    config_parse(path, text, &cfg);
    model_spec_check(MODEL_SPEC_OF(&cfg), cfg.ep, &cfg.where);
    const char *names[7];
    int32_t attr[7], want[7] = {cfg.vocab_size, config_padded_vocab(&cfg), cfg.n_layer, cfg.n_head,
                                cfg.d_model, cfg.d_ff, cfg.seq_len};
    ckpt_file_model_keys(&r->meta, names, attr);
    for (int i = 0; i < 7; i++)
        if (attr[i] != 0 && attr[i] != want[i])
            fatal_user("%s: root attribute %s = %d, but its namelist says %d (a damaged file?)",
                       r->label, names[i], (int)attr[i], (int)want[i]);
    params_create(P, MODEL_SPEC_OF(&cfg), 1, 0);
    config_destroy(&cfg);
    if (world_rank != 0) xfree(text);
}

/* The reference's tensors against the registry: the same names, each of its global shape. */
static int check_registry(char *err, const input_t *r, const ckpt_file_tensor_t *t, int nt, const params_t *P) {
    for (int i = 0; i < nt; i++) {
        const param_t *p = params_find(P, t[i].name);
        if (!p)
            return errf(err, MSG_LEN, "%s: tensor /model/%s is not a parameter of the model its "
                        "namelist describes", r->label, t[i].name);
        ckpt_file_tensor_t want = {.ndim = p->ndim};
        for (int k = 0; k < 3; k++) want.dims[k] = k < p->ndim ? p->shape[k] : 1;
        if (t[i].ndim != want.ndim || t[i].dims[0] != want.dims[0] || t[i].dims[1] != want.dims[1] ||
            t[i].dims[2] != want.dims[2]) {
            char got[64], exp[64];
            format_shape(got, sizeof got, &t[i]);
            format_shape(exp, sizeof exp, &want);
            return errf(err, MSG_LEN, "%s: tensor /model/%s has shape %s, but its model (&model of its "
                        "namelist) makes it %s: refused before anything is read or allocated",
                        r->label, t[i].name, got, exp);
        }
    }
    for (int j = 0; j < P->n; j++) {
        int found = 0;
        for (int i = 0; i < nt && !found; i++) found = strcmp(t[i].name, P->p[j].name) == 0;
        if (!found)
            return errf(err, MSG_LEN, "%s: has no tensor /model/%s, a parameter of the model its "
                        "namelist describes", r->label, P->p[j].name);
    }
    return 0;
}

/* Rank 0: the reference input's namelist text for the registry ("" in err when all is well). */
static char *reference_model(char *err, input_t *r) {
    err[0] = '\0';
    hid_t f;
    if (ckpt_file_open(r->path, r->label, &f, &r->meta, err, MSG_LEN) != 0) return NULL;
    char *config = ckpt_file_config(f);
    H5Fclose(f);
    char *text = registry_namelist(err, r, config);
    xfree(config);
    return text;
}

/* Rank 0: open and describe every input, check the reference against the registry and the others
 * against the reference; the reference's tensor list in *tensors. "" in err when all is well. */
static void check_inputs(char *err, input_t *in, int n_in, const params_t *P, ckpt_file_tensor_t **tensors,
                         int *n_tensors) {
    err[0] = '\0';
    ckpt_file_tensor_t *ref = NULL;
    int n_ref = 0;
    for (int i = 0; i < n_in && !err[0]; i++) {
        hid_t f;
        ckpt_file_tensor_t *t = NULL;
        int nt = 0;
        if (ckpt_file_open(in[i].path, in[i].label, &f, &in[i].meta, err, MSG_LEN) != 0) break;
        int listed = ckpt_file_tensors(f, in[i].label, &t, &nt, err, MSG_LEN) == 0;
        if (listed && i == 0) check_registry(err, &in[0], t, nt, P);
        else if (listed) compare_inputs(err, &in[0], ref, n_ref, &in[i], t, nt);
        H5Fclose(f);
        if (i == 0) ref = t, n_ref = nt;
        else xfree(t);
    }
    *tensors = ref;
    *n_tensors = n_ref;
}

/* The tensor table and every input's meta, rank 0's, on every rank. */
static void share_inputs(input_t *in, int n_in, ckpt_file_tensor_t **tensors, int *n_tensors) {
    MPI_CHECK(MPI_Bcast(n_tensors, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (world_rank != 0) *tensors = xcalloc((size_t)*n_tensors, sizeof **tensors);
    MPI_CHECK(MPI_Bcast(*tensors, (int)(*n_tensors * sizeof **tensors), MPI_BYTE, 0, MPI_COMM_WORLD));
    for (int i = 0; i < n_in; i++)
        MPI_CHECK(MPI_Bcast(&in[i].meta, (int)sizeof in[i].meta, MPI_BYTE, 0, MPI_COMM_WORLD));
}

/* Every rank opens every input (read-only) and hashes its share of them (input i on rank
 * i % size); rank 0 ends up with all the sha256s. */
static void open_and_hash(input_t *in, int n_in) {
    char err[MSG_LEN] = "";
    ckpt_file_meta_t m;
    for (int i = 0; i < n_in && !err[0]; i++) ckpt_file_open(in[i].path, in[i].label, &in[i].file, &m, err, MSG_LEN);
    agree_or_exit(err[0] ? LLMT_EXIT_USER : 0, err);
    uint8_t *mine = xcalloc((size_t)n_in, 32), *all = xcalloc((size_t)n_in, 32);
    for (int i = world_rank; i < n_in && !err[0]; i += world_size)
        if (sha256_file(in[i].path, mine + 32 * i) != 0)
            snprintf(err, sizeof err, "%s: cannot read: %s", in[i].label, strerror(errno));
    agree_or_exit(err[0] ? LLMT_EXIT_USER : 0, err);
    MPI_CHECK(MPI_Reduce(mine, all, n_in * 32, MPI_UNSIGNED_CHAR, MPI_BOR, 0, MPI_COMM_WORLD));
    for (int i = 0; i < n_in; i++) memcpy(in[i].sha, all + 32 * i, 32);
    xfree(mine);
    xfree(all);
}

/* ---- provenance ------------------------------------------------------------------------------- */

static void json_str(text_t *t, const char *s) {
    const size_t n = json_escape(NULL, 0, s);
    char *esc = xrealloc_small(NULL, n + 1);
    json_escape(esc, n + 1, s);
    tprintf(t, "\"%s\"", esc);
    free(esc);
}

/* A namelist string: quotes doubled. */
static void nml_str(text_t *t, const char *s) {
    tprintf(t, "'");
    for (; *s; s++) tprintf(t, *s == '\'' ? "''" : "%c", *s);
    tprintf(t, "'");
}

/* The shortest %g that reads back as the same double. */
static void nml_real(text_t *t, double x) {
    char buf[40];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    tprintf(t, "%s", buf);
}

static void nml_reals(text_t *t, const char *key, const double *v, int n) {
    tprintf(t, "  %s = ", key);
    for (int i = 0; i < n; i++) {
        if (i) tprintf(t, ", ");
        nml_real(t, v[i]);
    }
    tprintf(t, "\n");
}

/* The effective &merge namelist (models expanded, defaults filled in): merge_parameters. */
static char *parameters_text(const merge_opts_t *o) {
    text_t t = {0};
    unsigned m = M(o->method);
    tprintf(&t, "&merge\n  method = '%s'\n  models = ", merge_method_name(o->method));
    for (int i = 0; i < o->n_models; i++) {
        if (i) tprintf(&t, ", ");
        nml_str(&t, o->models[i]);
    }
    tprintf(&t, "\n");
    if (key_methods[K_WEIGHTS] & m) nml_reals(&t, "weights", o->weights, o->n_models);
    if (o->base) tprintf(&t, "  base = "), nml_str(&t, o->base), tprintf(&t, "\n");
    if (key_methods[K_DENSITY] & m) nml_reals(&t, "density", o->density, o->n_models);
    if (key_methods[K_T] & m) {
        nml_reals(&t, "t", &o->t, 1);
        if (o->n_t_filter) {
            tprintf(&t, "  t_filter = ");
            for (int i = 0; i < o->n_t_filter; i++) tprintf(&t, "%s", i ? ", " : ""), nml_str(&t, o->t_filter[i]);
            tprintf(&t, "\n");
            nml_reals(&t, "t_value", o->t_value, o->n_t_filter);
        }
    }
    if (key_methods[K_SEED] & m) tprintf(&t, "  seed = %llu\n", (unsigned long long)o->seed);
    if (key_methods[K_RESCALE] & m)
        tprintf(&t, "  rescale = '%s'\n", o->rescale == MERGE_RESCALE_L1 ? "l1"
                : o->rescale == MERGE_RESCALE_INV_DENSITY ? "1/density" : "none");
    if (key_methods[K_NORMALIZE] & m) tprintf(&t, "  normalize = %s\n", o->normalize ? ".true." : ".false.");
    if (key_methods[K_LAMBDA] & m) nml_reals(&t, "lambda", &o->lambda, 1);
    tprintf(&t, "  out = "), nml_str(&t, o->out), tprintf(&t, "\n/\n");
    return t.s;
}

/* merge_inputs: [{"role", "path", "sha256", "step", "run_id", "kind"}, ...] */
static char *inputs_json(const input_t *in, int n_in) {
    text_t t = {0};
    tprintf(&t, "[");
    for (int i = 0; i < n_in; i++) {
        char hex[65];
        sha256_hex(in[i].sha, hex);
        tprintf(&t, "%s\n  {\"role\": ", i ? "," : "");
        json_str(&t, in[i].role);
        tprintf(&t, ", \"path\": ");
        json_str(&t, in[i].path);
        tprintf(&t, ", \"sha256\": \"%s\", \"step\": %lld, \"run_id\": ", hex, (long long)in[i].meta.step);
        json_str(&t, in[i].meta.run_id);
        tprintf(&t, ", \"kind\": ");
        json_str(&t, in[i].meta.kind);
        tprintf(&t, "}");
    }
    tprintf(&t, "\n]");
    return t.s;
}

/* ---- the output, prepared on rank 0 ----------------------------------------------------------- */

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Rank 0: refuse an out that would replace an input or (without overwrite) any file, make its
 * directory, create <out>.tmp with the root attributes. Returns the exit code (0 = fine). */
static int create_output(char *err, const merge_opts_t *o, const input_t *in, int n_in,
                         ckpt_stream_t *out) {
    const where_t *w = &o->at[K_OUT];
    for (int i = 0; i < n_in; i++)
        if (strcmp(o->out, in[i].path) == 0 || same_file(o->out, in[i].path))
            return pos_error(err, w->path, w->line, w->col, "&merge out: '%s' is the input %s",
                             o->out, in[i].label), LLMT_EXIT_USER;
    struct stat st;
    if (stat(o->out, &st) == 0 && !o->overwrite)
        return pos_error(err, w->path, w->line, w->col, "&merge out: '%s' exists (set overwrite = "
                         ".true. to replace it)", o->out), LLMT_EXIT_USER;
    if (stat(o->out, &st) == 0 && !S_ISREG(st.st_mode))
        return pos_error(err, w->path, w->line, w->col, "&merge out: '%s' is not a regular file", o->out),
               LLMT_EXIT_USER;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", o->out);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (make_dirs(dir) != 0)
            return pos_error(err, w->path, w->line, w->col, "&merge out: cannot create the directory "
                             "'%s': %s", dir, strerror(errno)), LLMT_EXIT_USER;
    }
    const input_t *ref = &in[0];
    int64_t step = 0;
    for (int i = 0; i < n_in; i++) step = in[i].meta.step > step ? in[i].meta.step : step;
    char *config = ckpt_file_config(ref->file), *params = parameters_text(o), *json = inputs_json(in, n_in);
    /* the merged model's lineage: a hash of what made it, so the same merge gives the same file */
    text_t id_src = {0};
    tprintf(&id_src, "%s%s", params, json);
    char run_id[CKPT_ID_MAX];
    snprintf(run_id, sizeof run_id, "%016llx", (unsigned long long)rng_hash_str(id_src.s));
    ckpt_stream_info_t pv = {&ref->meta, step, ref->meta.seed, run_id, config,
                           merge_method_name(o->method), json, params};
    int rc = ckpt_stream_create(out, o->out, &pv, err, MSG_LEN);
    free(id_src.s);
    free(params);
    free(json);
    xfree(config);
    return rc == 0 ? 0 : EXIT_WRITE;
}

/* ---- merging one tensor ----------------------------------------------------------------------- */

typedef struct merger {
    const merge_opts_t *o;
    input_t *in;
    int n_in;
    float *res, *x, *base, *sum, *div, *scratch; /* [max numel] each, as the method needs */
    merge_cut_t *cuts; /* ties: each model's cut of the tensor in hand, from pass 1 for pass 2 */
    int lerp_fallbacks;
    double seconds_read, seconds_merge;
} merger_t;

static void merger_create(merger_t *mg, const merge_opts_t *o, input_t *in, int n_in, size_t max_numel) {
    *mg = (merger_t){.o = o, .in = in, .n_in = n_in};
    size_t bytes = max_numel * sizeof(float);
    mg->res = xmalloc(bytes);
    mg->x = xmalloc(bytes);
    if (merge_method_is_task_vector(o->method)) mg->base = xmalloc(bytes);
    if (merge_method_elects_sign(o->method)) mg->sum = xmalloc(bytes), mg->div = xmalloc(bytes);
    if (o->method == MERGE_TIES) mg->scratch = xmalloc(bytes);
    mg->cuts = xcalloc((size_t)o->n_models, sizeof *mg->cuts);
}

static void merger_destroy(merger_t *mg) {
    xfree(mg->res), xfree(mg->x), xfree(mg->base), xfree(mg->sum), xfree(mg->div), xfree(mg->scratch);
    xfree(mg->cuts);
}

static int read_input(merger_t *mg, int k, const ckpt_file_tensor_t *t, float *dst, char *err) {
    double t0 = now_sec();
    int rc = ckpt_file_read_tensor(mg->in[k].file, mg->in[k].label, t, dst, err, MSG_LEN);
    mg->seconds_read += now_sec() - t0;
    return rc;
}

/* slerp's t for a tensor: the first t_filter that matches its name, else t. */
static double t_for(const merge_opts_t *o, const char *name) {
    for (int i = 0; i < o->n_t_filter; i++) {
        const char *f = o->t_filter[i];
        if (has_glob_chars(f) ? fnmatch(f, name, 0) == 0 : strstr(name, f) != NULL) return o->t_value[i];
    }
    return o->t;
}

/* x ← the sparsified task vector of model input k (x holds the model's tensor, base the base's);
 * the TIES cut is found in pass 1 and applied again in pass 2. */
static void task_vector(merger_t *mg, int k, const ckpt_file_tensor_t *t, int pass) {
    size_t n = (size_t)t->numel;
    int model = mg->in[k].model;
    merge_delta(mg->x, mg->base, n);
    if (mg->o->method == MERGE_TIES && pass == 1)
        mg->cuts[model] = merge_trim_cut(mg->x, n, mg->o->density[model], mg->scratch);
    if (mg->o->method == MERGE_TIES) merge_trim_apply(mg->x, n, mg->cuts[model]);
    if (mg->o->method == MERGE_DARE_LINEAR || mg->o->method == MERGE_DARE_TIES)
        merge_dare(mg->x, n, mg->o->density[model], merge_dare_key(mg->o->seed, t->name),
                   (uint32_t)model, mg->o->rescale);
}

/* Σ of the weights of the models (the divisor of linear and of the sum of task vectors). */
static double weight_sum(const merge_opts_t *o) {
    float s = 0; /* float32, as mergekit's weight tensor */
    for (int i = 0; i < o->n_models; i++) s += (float)o->weights[i];
    return s;
}

static int merge_task_vectors(merger_t *mg, const ckpt_file_tensor_t *t, char *err) {
    const merge_opts_t *o = mg->o;
    size_t n = (size_t)t->numel;
    int first = o->base ? 1 : 0; /* in[0] is the base */
    if (read_input(mg, 0, t, mg->base, err) != 0) return -1;
    float *acc = merge_method_elects_sign(o->method) ? mg->sum : mg->res;
    memset(acc, 0, n * sizeof *acc);
    for (int k = first; k < mg->n_in; k++) { /* pass 1: Σ wᵢ δᵢ */
        if (read_input(mg, k, t, mg->x, err) != 0) return -1;
        double t0 = now_sec();
        task_vector(mg, k, t, 1);
        merge_axpy(acc, mg->x, (float)o->weights[mg->in[k].model], n);
        mg->seconds_merge += now_sec() - t0;
    }
    if (merge_method_elects_sign(o->method)) { /* pass 2: the mean over the entries that agree */
        memset(mg->res, 0, n * sizeof *mg->res);
        memset(mg->div, 0, n * sizeof *mg->div);
        for (int k = first; k < mg->n_in; k++) {
            if (read_input(mg, k, t, mg->x, err) != 0) return -1;
            double t0 = now_sec();
            task_vector(mg, k, t, 2);
            merge_elect_add(mg->res, mg->div, mg->x, (float)o->weights[mg->in[k].model], mg->sum, n);
            mg->seconds_merge += now_sec() - t0;
        }
    }
    merge_finish(mg->res, mg->base, mg->res, merge_method_elects_sign(o->method) ? mg->div : NULL,
                 weight_sum(o), o->normalize, o->lambda, n);
    return 0;
}

/* The merged tensor t into mg->res; 0, or -1 with the message (a bad input). */
static int merge_tensor(merger_t *mg, const ckpt_file_tensor_t *t, char *err) {
    const merge_opts_t *o = mg->o;
    size_t n = (size_t)t->numel;
    if (o->method == MERGE_SLERP) {
        if (read_input(mg, 0, t, mg->res, err) != 0 || read_input(mg, 1, t, mg->x, err) != 0) return -1;
        double t0 = now_sec();
        mg->lerp_fallbacks += merge_slerp(mg->res, mg->res, mg->x, t_for(o, t->name), n, NULL);
        mg->seconds_merge += now_sec() - t0;
        return 0;
    }
    if (o->method == MERGE_LINEAR) {
        memset(mg->res, 0, n * sizeof *mg->res);
        for (int k = 0; k < mg->n_in; k++) {
            if (read_input(mg, k, t, mg->x, err) != 0) return -1;
            double t0 = now_sec();
            merge_axpy(mg->res, mg->x, (float)o->weights[mg->in[k].model], n);
            mg->seconds_merge += now_sec() - t0;
        }
        if (o->normalize) {
            float d = (float)weight_sum(o);
            for (size_t j = 0; j < n; j++) mg->res[j] /= d;
        }
        return 0;
    }
    return merge_task_vectors(mg, t, err);
}

/* ---- streaming: rank i % size merges tensor i, rank 0 writes them in order -------------------- */

typedef struct header {
    int32_t status; /* 0: the data follows; 1: this rank failed (its message comes at the end) */
    int32_t tensor;
    int64_t numel;
} header_t;

#define TAG_HEADER 21
#define TAG_DATA 22
#define CHUNK_FLOATS (1 << 28)

static void send_floats(const float *x, int64_t n) {
    for (int64_t o = 0; o < n; o += CHUNK_FLOATS) {
        int c = (int)(n - o < CHUNK_FLOATS ? n - o : CHUNK_FLOATS);
        MPI_CHECK(MPI_Send(x + o, c, MPI_FLOAT, 0, TAG_DATA, MPI_COMM_WORLD));
    }
}

static void recv_floats(float *x, int64_t n, int from) {
    for (int64_t o = 0; o < n; o += CHUNK_FLOATS) {
        int c = (int)(n - o < CHUNK_FLOATS ? n - o : CHUNK_FLOATS);
        MPI_CHECK(MPI_Recv(x + o, c, MPI_FLOAT, from, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
}

typedef struct stream_stats {
    double seconds_write, seconds_wait; /* rank 0: writing; waiting for other ranks' tensors */
    double bytes;
} stream_stats_t;

/* The whole merge. Returns this rank's exit code (0, 2 bad input, 5 write failure) with its
 * message in err. */
static int stream(merger_t *mg, const ckpt_file_tensor_t *tensors, int n_tensors, ckpt_stream_t *out,
                  float *recv_buf, stream_stats_t *st, char *err) {
    int code = 0;
    bool others_failed = false;
    for (int i = 0; i < n_tensors; i++) {
        const ckpt_file_tensor_t *t = &tensors[i];
        int owner = i % world_size;
        if (owner == world_rank) {
            if (code == 0 && merge_tensor(mg, t, err) != 0) code = LLMT_EXIT_USER;
            if (world_rank != 0) {
                header_t h = {code != 0, i, t->numel};
                MPI_CHECK(MPI_Send(&h, (int)sizeof h, MPI_BYTE, 0, TAG_HEADER, MPI_COMM_WORLD));
                if (code == 0) send_floats(mg->res, t->numel);
                continue;
            }
        }
        if (world_rank != 0) continue;
        const float *data = mg->res;
        if (owner != 0) {
            double t0 = now_sec();
            header_t h;
            MPI_CHECK(MPI_Recv(&h, (int)sizeof h, MPI_BYTE, owner, TAG_HEADER, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            ASSERT(h.tensor == i && (h.status != 0 || h.numel == t->numel));
            if (h.status == 0) recv_floats(recv_buf, t->numel, owner);
            else others_failed = true;
            st->seconds_wait += now_sec() - t0;
            data = recv_buf;
        }
        if (code != 0 || others_failed) continue; /* keep receiving: no rank waits forever */
        double t0 = now_sec();
        if (ckpt_stream_write(out, t, data, err, MSG_LEN) != 0) code = EXIT_WRITE;
        st->seconds_write += now_sec() - t0;
        st->bytes += (double)t->numel * sizeof(float);
    }
    return code;
}

/* ---- main ---------------------------------------------------------------------------------------- */

/* Rank 0 reads the namelist file; every rank gets its text (or everyone stops). */
static char *read_namelist(const char *path) {
    char err[MSG_LEN] = "";
    size_t len = 0;
    char *text = NULL;
    if (world_rank == 0) {
        int e = 0;
        text = file_read_whole(path, MAX_TEXT, &len, &e);
        if (!text) snprintf(err, sizeof err, "%s: cannot read the namelist: %s", path,
                            e == EFBIG ? "larger than 16 MiB" : file_strerror(e));
    }
    rank0_verdict(err);
    unsigned long long l = len;
    MPI_CHECK(MPI_Bcast(&l, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
    if (world_rank != 0) {
        text = calloc((size_t)l + 1, 1);
        PTR_CHECK(text);
    }
    MPI_CHECK(MPI_Bcast(text, (int)l, MPI_CHAR, 0, MPI_COMM_WORLD));
    return text;
}

static void free_opts(merge_opts_t *o) {
    for (int i = 0; i < o->n_models; i++) free(o->models[i]); /* xstrdup: plain malloc */
    for (int i = 0; i < o->n_model_args; i++) free(o->model_args[i]);
    for (int i = 0; i < o->n_t_filter; i++) free(o->t_filter[i]);
    free(o->base), free(o->out);
    xfree(o->models), xfree(o->model_args), xfree(o->t_filter), xfree(o->t_value);
    xfree(o->weights), xfree(o->density);
}

/* Options, inputs and their checks: everything before the first tensor. */
static void prepare(int argc, char **argv, merge_opts_t *o) {
    char err[MSG_LEN] = "";
    char *text = read_namelist(argv[1]);
    int rc = parse_options(err, argv[1], text, argc - 2, argv + 2, o);
    free(text);
    if (rc != 0) fatal_user("%s", err); /* the same text gives the same verdict on every rank */
    if (world_rank == 0 && expand_models(err, o) != 0) o->n_models = 0;
    rank0_verdict(err);
    share_models(o);
    if (check_counts(err, o, argv[1]) != 0) fatal_user("%s", err);
}

/* The peak resident set of this process (VmHWM), in bytes; 0 when unknown. */
static double peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* Wall-clock seconds of the phases of a merge (rank 0's view). */
typedef struct phases {
    double check, hash, merge, publish;
} phases_t;

static void report(const merge_opts_t *o, const merger_t *mg, int n_tensors, const ckpt_file_tensor_t *t,
                   const stream_stats_t *st, const phases_t *ph, double seconds) {
    double mine[3] = {mg->seconds_read, mg->seconds_merge, (double)alloc_bytes_peak()}, worst[3];
    double rss = peak_rss_bytes(), rss_max;
    MPI_CHECK(MPI_Reduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Reduce(&rss, &rss_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    int fallbacks = mg->lerp_fallbacks, all_fallbacks = 0;
    MPI_CHECK(MPI_Reduce(&fallbacks, &all_fallbacks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    if (world_rank != 0) return;
    double params = 0;
    for (int i = 0; i < n_tensors; i++) params += (double)t[i].numel;
    printf("llmmerge: %s of %d model%s%s: %d tensors, %.2fM parameters, %.1f MB\n",
           merge_method_name(o->method), o->n_models, o->n_models == 1 ? "" : "s",
           o->base ? " onto the base" : "", n_tensors, params / 1e6, st->bytes / 1e6);
    if (o->method == MERGE_SLERP)
        printf("llmmerge: slerp fell back to lerp (|dot| > 0.9995) in %d of %d tensors\n", all_fallbacks, n_tensors);
    printf("llmmerge: %.2f s on %d rank%s (slowest rank: read + verify %.2f s, merge %.2f s; rank 0: "
           "write %.2f s, waiting for tensors %.2f s); memory per rank at most %.1f MiB in buffers, "
           "peak RSS %.1f MiB\n",
           seconds, world_size, world_size == 1 ? "" : "s", worst[0], worst[1], st->seconds_write,
           st->seconds_wait, worst[2] / 1048576.0, rss_max / 1048576.0);
    printf("llmmerge: phases: options and checks %.2f s, sha256 of the inputs %.2f s, merging and "
           "writing %.2f s, flush + fsync + rename %.2f s\n", ph->check, ph->hash, ph->merge, ph->publish);
    printf("llmmerge: wrote %s\n", o->out);
}

int main(int argc, char **argv) {
    error_set_program_name("llmmerge");
    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* our messages carry HDF5's reason instead */
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "--version") == 0) {
        if (world_rank == 0) {
            if (argc >= 2 && strcmp(argv[1], "--version") == 0) printf("llmmerge %s\n", LLMT_VERSION);
            else fputs(usage, argc < 2 ? stderr : stdout);
        }
        MPI_Finalize();
        return argc < 2 ? LLMT_EXIT_USER : 0;
    }
    double t0 = now_sec();
    merge_opts_t o;
    prepare(argc, argv, &o);
    int n_in;
    input_t *in = make_inputs(&o, &n_in);
    ckpt_file_tensor_t *tensors = NULL;
    int n_tensors = 0;
    char err[MSG_LEN] = "";
    char *model_text = world_rank == 0 ? reference_model(err, &in[0]) : NULL;
    rank0_verdict(err);
    MPI_CHECK(MPI_Bcast(&in[0].meta, (int)sizeof in[0].meta, MPI_BYTE, 0, MPI_COMM_WORLD));
    params_t registry;
    registry_create(&registry, &in[0], model_text);
    free(model_text);
    if (world_rank == 0) check_inputs(err, in, n_in, &registry, &tensors, &n_tensors);
    params_destroy(&registry);
    rank0_verdict(err);
    share_inputs(in, n_in, &tensors, &n_tensors);
    phases_t ph = {.check = now_sec() - t0};
    double t1 = now_sec();
    open_and_hash(in, n_in);
    ph.hash = now_sec() - t1;
    ckpt_stream_t out = {.file = -1, .model = -1, .dcpl = -1};
    int code = world_rank == 0 ? create_output(err, &o, in, n_in, &out) : 0;
    rank0_outcome(code, err);

    size_t max_numel = 1;
    for (int i = 0; i < n_tensors; i++)
        if ((size_t)tensors[i].numel > max_numel) max_numel = (size_t)tensors[i].numel;
    merger_t mg;
    merger_create(&mg, &o, in, n_in, max_numel);
    float *recv_buf = world_rank == 0 && world_size > 1 ? xmalloc(max_numel * sizeof(float)) : NULL;
    stream_stats_t st = {0};
    t1 = now_sec();
    code = stream(&mg, tensors, n_tensors, &out, recv_buf, &st, err);
    ph.merge = now_sec() - t1;
    int any = code;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (any && world_rank == 0) ckpt_stream_abandon(&out); /* the .tmp goes; an older out stays */
    if (any) agree_or_exit(code, err);
    t1 = now_sec();
    if (world_rank == 0 && ckpt_stream_publish(&out, err, MSG_LEN) != 0) code = EXIT_WRITE;
    ph.publish = now_sec() - t1;
    rank0_outcome(code, err);
    report(&o, &mg, n_tensors, tensors, &st, &ph, now_sec() - t0);

    for (int i = 0; i < n_in; i++) H5Fclose(in[i].file);
    merger_destroy(&mg);
    xfree(recv_buf);
    xfree(tensors);
    xfree(in);
    free_opts(&o);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
