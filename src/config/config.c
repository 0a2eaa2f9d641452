/* config.c — the typed run configuration: schema, defaults, validation, echo (see config.h).
 * Owns: the table of every namelist key (group, type, struct field, default, allowed values and
 * range), the checks that involve several keys, the command-line overrides (each parsed as a
 * one-key namelist and assigned through the same table), and config_to_namelist. The syntax
 * itself is namelist.c's. Uses: namelist.h, core/error.h, core/alloc.h.
 *
 * One table drives defaults, assignment, range checks, error messages and the echo, so a new
 * key is one line in key_specs[] (plus a cross-key check if it has one). The table is also the
 * one place that says which keys (or string values) are in the contract but not implemented
 * yet (.not_impl): setting them to anything but the default is refused with the file:line:col
 * of the value, and a later feature only deletes its marker. Sizes derived from several keys
 * (tokens per micro-batch, activations, parameters per rank, bytes per rank, ranks) are
 * computed without overflow and bounded in check_sizes, with messages that name the keys.
 * Every error is formatted into a buffer, everything parsed is freed, and only then is
 * fatal_user() called: unit tests longjmp out of it and must not leak. */
#include "config/config.h"
#include "config/namelist.h"
#include "config/stages.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CFG_MSG 2048             /* one error line */
#define CFG_MAX_FILE (16 << 20)  /* a namelist bigger than this is not a namelist */

/* ---- schema ------------------------------------------------------------------------------ */

enum { G_RUN, G_MODEL, G_PARALLEL, G_TRAIN, G_DATA, G_CHECKPOINT, G_LOG, G_STAGE, N_GROUPS };
static const char *const group_names[N_GROUPS] = {"run",  "model", "parallel", "train",
                                                  "data", "checkpoint", "log", "stage"};

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
    const char *planned;   /* K_STR: "a|b", values in the key contract of docs/design.md (not in choices) that
                              are not implemented yet; refused with not_impl */
    const char *not_impl;  /* non-NULL: what is not implemented in this version. Without
                              planned: the whole key (any value but the default is refused);
                              with planned: those values */
    const char *why;       /* the reason of a bound, appended to the range message */
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
#define WHY(text) .why = text
#define NOT_IMPL(text) .not_impl = text
/* A string key with implemented choices and planned values, refused with `text`. */
#define PLANNED_STR_KEY(g, k, f, d, ch, pl, text) \
    {.group = g, .key = k, .type = K_STR, FIELD(f), .size = sizeof(((config_t *)0)->f), .def_str = d, .choices = ch, \
     .planned = pl, .not_impl = text}
/* A whole key that is not implemented: only its default is accepted. */
#define WATCHDOG_BOUNDS \
    AT_LEAST(1e-3), AT_MOST(1e9), WHY("the watchdog counts nanoseconds: below 1 ms every wait would time out")

static const key_spec_t key_specs[] = {
    STR_KEY(G_RUN, "name", name, "run", NULL),
    STR_KEY(G_RUN, "out_dir", out_dir, "runs", NULL),
    STR_KEY(G_RUN, "mode", mode, "train", "train|eval|generate"),
#ifdef LLMT_CUDA /* make CUDA=1 */
    STR_KEY(G_RUN, "device", device, "cpu", "cpu|cuda"),
#else
    PLANNED_STR_KEY(G_RUN, "device", device, "cpu", "cpu", "cuda",
                    "this llmtrain was built without CUDA (build it with make CUDA=1, see INSTALL)"),
#endif
    I64_KEY(G_RUN, "seed", seed, 1337, AT_LEAST(0)),
    STR_KEY(G_RUN, "init_from", init_from, "", NULL),
    REAL_KEY(G_RUN, "memory_limit_gb", memory_limit_gb, 0, AT_LEAST(0), AT_MOST(1e9)), /* 0 = the node's */
    REAL_KEY(G_RUN, "time_limit_min", time_limit_min, 0, AT_LEAST(0), AT_MOST(1e7)), /* 0 = the job's */
    STR_KEY(G_RUN, "prompt", prompt, "", NULL),
    {.group = G_RUN, .key = "prompt_ids", .type = K_INT_ARRAY, FIELD(prompt_ids), .size = CFG_MAX_IDS,
     .count_offset = offsetof(config_t, n_prompt_ids), AT_LEAST(0)},
    INT_KEY(G_RUN, "max_new_tokens", max_new_tokens, 64, AT_LEAST(1), AT_MOST(INT_MAX - CFG_MAX_IDS),
            WHY("the prompt and the new tokens are counted in a 32-bit integer")),
    REAL_KEY(G_RUN, "temperature", temperature, 1.0, AT_LEAST(0)),
    INT_KEY(G_RUN, "top_k", top_k, 40, AT_LEAST(0)),

    INT_KEY(G_MODEL, "n_layer", n_layer, 12, AT_LEAST(1), AT_MOST(1024),
            WHY("the pipeline layer partition takes pp * n_layer^2 steps")),
    INT_KEY(G_MODEL, "n_head", n_head, 12, AT_LEAST(1)),
    INT_KEY(G_MODEL, "d_model", d_model, 768, AT_LEAST(1)),
    INT_KEY(G_MODEL, "d_ff", d_ff, 0, AT_LEAST(0)), /* 0 = 4 * d_model, resolved after parsing */
    INT_KEY(G_MODEL, "vocab_size", vocab_size, 50257, AT_LEAST(1), AT_MOST(65536),
            WHY("llm.c version-1 shards hold uint16 tokens")),
    INT_KEY(G_MODEL, "seq_len", seq_len, 1024, AT_LEAST(1), AT_MOST(INT_MAX - 1),
            WHY("a window of seq_len + 1 tokens is counted in a 32-bit integer")),
    STR_KEY(G_MODEL, "arch", arch, "gpt2", "gpt2|llama"),
    STR_KEY(G_MODEL, "norm", norm, "layernorm", "layernorm|rmsnorm"),
    REAL_KEY(G_MODEL, "norm_eps", norm_eps, 1e-5, ABOVE(0), BELOW(1)),
    STR_KEY(G_MODEL, "pos", pos, "learned", "learned|rope"),
    REAL_KEY(G_MODEL, "rope_theta", rope_theta, 10000.0, ABOVE(1), AT_MOST(1e12)),
    STR_KEY(G_MODEL, "mlp", mlp, "gelu", "gelu|swiglu"),
    INT_KEY(G_MODEL, "n_kv_head", n_kv_head, 0, AT_LEAST(0)), /* 0 = n_head, resolved after parsing */
    BOOL_KEY(G_MODEL, "tie_embeddings", tie_embeddings, true),
    BOOL_KEY(G_MODEL, "bias", bias, true),
    REAL_KEY(G_MODEL, "dropout", dropout, 0.0, AT_LEAST(0), BELOW(1)), /* the three below, unless given */
    REAL_KEY(G_MODEL, "attn_dropout", attn_dropout, 0.0, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_MODEL, "resid_dropout", resid_dropout, 0.0, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_MODEL, "embd_dropout", embd_dropout, 0.0, AT_LEAST(0), BELOW(1)),
    STR_KEY(G_MODEL, "init", init_scheme, "gpt2", "gpt2|xavier|kaiming|small"),
    REAL_KEY(G_MODEL, "init_std", init_std, 0.02, ABOVE(0), AT_MOST(1e3)),
    STR_KEY(G_MODEL, "init_depth_scaled", init_depth_scaled, "total", "none|total|layer"),
    INT_KEY(G_MODEL, "n_experts", n_experts, 0, AT_LEAST(0)), /* 0 = dense */
    INT_KEY(G_MODEL, "top_k", top_k_moe, 2, AT_LEAST(1)),     /* <= n_experts */
    INT_KEY(G_MODEL, "moe_every", moe_every, 1, AT_LEAST(1)), /* <= n_layer */
    INT_KEY(G_MODEL, "d_ff_expert", d_ff_expert, 0, AT_LEAST(0)), /* 0 = d_ff */
    REAL_KEY(G_MODEL, "capacity_factor", capacity_factor, 1.25, AT_LEAST(0), AT_MOST(1e6)), /* 0 = dropless */
    STR_KEY(G_MODEL, "drop_policy", drop_policy, "probs", "probs|position"),
    REAL_KEY(G_MODEL, "router_noise", router_noise, 0.0, AT_LEAST(0), AT_MOST(1e3)), /* 0 = off */
    REAL_KEY(G_MODEL, "aux_loss_coef", aux_loss_coef, 0.01, AT_LEAST(0), AT_MOST(1e3)),
    REAL_KEY(G_MODEL, "z_loss_coef", z_loss_coef, 0.001, AT_LEAST(0), AT_MOST(1e3)),
    INT_KEY(G_MODEL, "n_shared_experts", n_shared_experts, 0, AT_LEAST(0), AT_MOST(64)),
    STR_KEY(G_MODEL, "router", router, "linear", "linear|mlp"),
    REAL_KEY(G_MODEL, "collapse_share", moe_collapse_share, 0.5, ABOVE(0), AT_MOST(1)),
    INT_KEY(G_MODEL, "collapse_steps", moe_collapse_steps, 20, AT_LEAST(1)),

    INT_KEY(G_PARALLEL, "dp", dp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "tp", tp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "pp", pp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "ep", ep, 1, AT_LEAST(1)), /* divides dp and n_experts */
    STR_KEY(G_PARALLEL, "schedule", schedule, "1f1b", "1f1b|gpipe|interleaved|zb-h1"),
    INT_KEY(G_PARALLEL, "virtual_stages", virtual_stages, 1, AT_LEAST(1)), /* interleaved */
    INT_KEY(G_PARALLEL, "zero_stage", zero_stage, 0, AT_LEAST(0), AT_MOST(3)),
    BOOL_KEY(G_PARALLEL, "zero3_resident", zero3_resident, false),
    STR_KEY(G_PARALLEL, "recompute", recompute, "none", "none|selective|full"),
    INT_KEY(G_PARALLEL, "recompute_layers", recompute_layers, -1, AT_LEAST(-1)), /* <= n_layer */
    STR_KEY(G_PARALLEL, "bind", bind, "cores", "cores|none"),
    REAL_KEY(G_PARALLEL, "bucket_mb", bucket_mb, 25.0, ABOVE(0), AT_MOST(1e6),
             WHY("the bucket size is converted to a count of floats")),

    INT_KEY(G_TRAIN, "max_steps", max_steps, 100, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "global_batch", global_batch, 0, AT_LEAST(0)), /* 0 = micro_batch * dp */
    INT_KEY(G_TRAIN, "micro_batch", micro_batch, 4, AT_LEAST(0)), /* 0 = the largest that fits */
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
    REAL_KEY(G_TRAIN, "label_smoothing", label_smoothing, 0.0, AT_LEAST(0), AT_MOST(1)),
    REAL_KEY(G_TRAIN, "z_loss", z_loss, 0.0, AT_LEAST(0), AT_MOST(1e3)),
    STR_KEY(G_TRAIN, "precision", precision, "fp32", "fp32|bf16|fp16"),
    STR_KEY(G_TRAIN, "offload", offload, "none", "none|optimizer"),
    STR_KEY(G_TRAIN, "bf16_products", bf16_products, "auto", "auto|native|emulated"),
    STR_KEY(G_TRAIN, "weights_storage", weights_storage, "auto", "auto|16bit|fp32"),
    STR_KEY(G_TRAIN, "activations_storage", activations_storage, "auto", "auto|16bit|fp32"),
    BOOL_KEY(G_TRAIN, "allow_tf32", allow_tf32, false), /* the CUDA backend's fp32 products */
    REAL_KEY(G_TRAIN, "loss_scale", loss_scale, 0, AT_LEAST(0), AT_MOST(1e30)),
    REAL_KEY(G_TRAIN, "initial_loss_scale", initial_loss_scale, 65536, ABOVE(0), AT_MOST(1e30)),
    INT_KEY(G_TRAIN, "loss_scale_window", loss_scale_window, 1000, AT_LEAST(1)),
    INT_KEY(G_TRAIN, "hysteresis", hysteresis, 2, AT_LEAST(1)),
    REAL_KEY(G_TRAIN, "min_loss_scale", min_loss_scale, 1, ABOVE(0), AT_MOST(1e30)),
    STR_KEY(G_TRAIN, "on_anomaly", on_anomaly, "skip", "warn|skip|rollback|abort"),
    STR_KEY(G_TRAIN, "on_spike", on_spike, "", "|warn|skip|rollback|abort"), /* '' = on_anomaly */
    STR_KEY(G_TRAIN, "on_divergence", on_divergence, "", "|warn|skip|rollback|abort"),
    INT_KEY(G_TRAIN, "anomaly_window", anomaly_window, 20, AT_LEAST(2), AT_MOST(CFG_ANOMALY_WINDOW_MAX)),
    REAL_KEY(G_TRAIN, "spike_zscore", spike_zscore, 6, AT_LEAST(0), AT_MOST(1e30)), /* 0 = off */
    REAL_KEY(G_TRAIN, "grad_explosion_ratio", grad_explosion_ratio, 10, AT_LEAST(0), AT_MOST(1e30)),
    INT_KEY(G_TRAIN, "divergence_evals", divergence_evals, 5, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "overflow_streak", overflow_streak, 32, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "max_rollbacks", max_rollbacks, 3, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "inject_nan_step", inject_nan_step, -1, AT_LEAST(-1)),
    INT_KEY(G_TRAIN, "inject_spike_step", inject_spike_step, -1, AT_LEAST(-1)),
    INT_KEY(G_TRAIN, "dump_grads_step", dump_grads_step, -1, AT_LEAST(-1)),
    INT_KEY(G_TRAIN, "inject_overflow_step", inject_overflow_step, -1, AT_LEAST(-1)),

    STR_KEY(G_DATA, "train_files", train_files, "", NULL),
    STR_KEY(G_DATA, "val_files", val_files, "", NULL),
    BOOL_KEY(G_DATA, "shuffle", shuffle, false),
    INT_KEY(G_DATA, "val_every", val_every, 0, AT_LEAST(0)),
    INT_KEY(G_DATA, "val_batches", val_batches, 8, AT_LEAST(1)),
    STR_KEY(G_DATA, "tokenizer", tokenizer, "", NULL),
    STR_KEY(G_DATA, "format", data_format, "auto", "auto|llmc|nanogpt"),
    STR_KEY(G_DATA, "mixture", mixture, "", NULL), /* 'pattern:weight, ...' (config/stages.h) */

    STR_KEY(G_CHECKPOINT, "dir", ckpt_dir, "", NULL),
    INT_KEY(G_CHECKPOINT, "every", ckpt_every, 0, AT_LEAST(0)),
    INT_KEY(G_CHECKPOINT, "keep", ckpt_keep, 3, AT_LEAST(1)),
    /* 'none' | 'auto' | a path; not given = 'none', or 'auto' in a requeued Slurm job */
    STR_KEY(G_CHECKPOINT, "resume", resume, "", NULL),
    REAL_KEY(G_CHECKPOINT, "timeout_s", timeout_s, 600, WATCHDOG_BOUNDS),
    REAL_KEY(G_CHECKPOINT, "io_timeout_s", io_timeout_s, 3600, WATCHDOG_BOUNDS),
    BOOL_KEY(G_CHECKPOINT, "overwrite", ckpt_overwrite, false),
    BOOL_KEY(G_CHECKPOINT, "save_weights", save_weights, 1),
    INT_KEY(G_CHECKPOINT, "striping_factor", striping_factor, 0, AT_LEAST(0)),
    INT_KEY(G_CHECKPOINT, "striping_unit", striping_unit, 0, AT_LEAST(0)),

    INT_KEY(G_LOG, "every", log_every, 1, AT_LEAST(1)),
    BOOL_KEY(G_LOG, "jsonl", jsonl, true),
    BOOL_KEY(G_LOG, "tensorboard", tensorboard, true), /* <run dir>/tb/: metrics.jsonl's records as events */
    REAL_KEY(G_LOG, "peak_flops", peak_flops, 0, AT_LEAST(0), AT_MOST(1e18), WHY("FLOP/s of one rank")),
    STR_KEY(G_LOG, "papi_events", papi_events, "", NULL), /* names checked by core/counters.c */
    BOOL_KEY(G_LOG, "profile", profile, false),
    STR_KEY(G_LOG, "profile_steps", profile_steps, "", NULL), /* 'a:b' (check_profile_steps) */
    REAL_KEY(G_LOG, "carbon_intensity", carbon_intensity, 0, AT_LEAST(0), AT_MOST(1e5), WHY("gCO2/kWh")),

    /* &stage, repeated (config/stages.h): the fields of stages[stage_at]; a key not set in a
     * group is inherited (the defaults here are never used as values). Order: STAGE_* enum. */
    INT_KEY(G_STAGE, "until_step", stages[0].until_step, 0, AT_LEAST(1)),
    I64_KEY(G_STAGE, "until_tokens", stages[0].until_tokens, 0, AT_LEAST(1)),
    INT_KEY(G_STAGE, "seq_len", stages[0].seq_len, 0, AT_LEAST(1)),
    INT_KEY(G_STAGE, "global_batch", stages[0].global_batch, 0, AT_LEAST(1)),
    STR_KEY(G_STAGE, "train_files", stages[0].train_files, "", NULL),
    STR_KEY(G_STAGE, "mixture", stages[0].mixture, "", NULL),
    REAL_KEY(G_STAGE, "lr", stages[0].lr, 0, ABOVE(0)),
    REAL_KEY(G_STAGE, "min_lr", stages[0].min_lr, 0, AT_LEAST(0)),
    INT_KEY(G_STAGE, "warmup_steps", stages[0].warmup_steps, 0, AT_LEAST(0)),
    STR_KEY(G_STAGE, "lr_schedule", stages[0].lr_schedule, "", "cosine|constant|linear|wsd"),
};
#define N_KEYS ((int)(sizeof key_specs / sizeof key_specs[0]))

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
    const nl_entry_t *set_by[N_KEYS];
    const nl_group_t *group_at[N_GROUPS];
    const override_arg_t *over; /* the command-line overrides (lines < 0 point here) */
    struct env_snapshot *env;   /* where path variables come from (NULL: this process's getenv) */
} parse_ctx_t;

/* The environment variables the path keys name, as rank 0 saw them: rank 0 records each one it
 * looks up (NAME, NUL, '1' or '0' for set or unset, VALUE, NUL), the record is broadcast with
 * the namelist, and the other ranks expand from it instead of their own environment, so a
 * variable set differently (or only) on another node cannot make the ranks read other files. */
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

/* A &stage key's field is in stages[stage_at] (its offset is that of stages[0]). */
static size_t stage_shift(const config_t *cfg, const key_spec_t *ks) {
    return ks->group == G_STAGE ? (size_t)cfg->stage_at * sizeof(cfg_stage_t) : 0;
}
static void *field_ptr(config_t *cfg, const key_spec_t *ks) { return (char *)cfg + ks->offset + stage_shift(cfg, ks); }
static const void *field_cptr(const config_t *cfg, const key_spec_t *ks) {
    return (const char *)cfg + ks->offset + stage_shift(cfg, ks);
}

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

/* What a key holds, for the parser's check of a repeat count before it copies anything
 * (namelist_parse_keys): an array its maximum, any other key one value; 0 for a key the schema
 * does not know (its own message, with a suggestion, comes later). */
static int key_capacity(const char *group, const char *key, void *unused) {
    (void)unused;
    int g = find_group(group), k = g < 0 ? -1 : find_key(g, key);
    if (k < 0) return 0;
    return key_specs[k].type == K_INT_ARRAY ? (int)key_specs[k].size : 1;
}

/* Only for the cross-key checks below, where the names are literals: a typo here is a bug. */
static int key_index(int group, const char *key) {
    int k = find_key(group, key);
    ASSERT(k >= 0);
    return k;
}

__attribute__((format(printf, 4, 5)))
static int cfg_error(parse_ctx_t *ctx, int line, int col, const char *fmt, ...) {
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
static void set_key_defaults(config_t *cfg, int group) {
    for (int k = 0; k < N_KEYS; k++) {
        const key_spec_t *ks = &key_specs[k];
        if (group >= 0 && ks->group != group) continue;
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

static void set_table_defaults(config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    set_key_defaults(cfg, -1);
}

void config_defaults(config_t *cfg) {
    set_table_defaults(cfg);
    /* d_ff is used directly by the model, so it holds its effective value; global_batch stays 0,
     * which means micro_batch * dp and stays right if a test changes dp or micro_batch. */
    cfg->d_ff = 4 * cfg->d_model;
    snprintf(cfg->resume, sizeof cfg->resume, "none"); /* not given: as resolve_derived says */
    cfg->n_kv_head = cfg->n_head; /* likewise effective (0 in a file means n_head) */
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

/* One bound as the user would write it: integers exactly (2147483646, not 2.14748e+09). */
static void format_number(const key_spec_t *ks, double x, char *out, size_t size) {
    if (ks->type != K_REAL && fabs(x) < 1e15) snprintf(out, size, "%.0f", x);
    else snprintf(out, size, "%g", x);
}

/* ">= 0", "> 0", "<= 3", "in [0, 1)" */
static void format_bounds(const key_spec_t *ks, char *out, size_t size) {
    char lo[32], hi[32];
    format_number(ks, ks->lo, lo, sizeof lo);
    format_number(ks, ks->hi, hi, sizeof hi);
    if (ks->lo_kind && ks->hi_kind)
        snprintf(out, size, "in %c%s, %s%c", ks->lo_kind, lo, hi, ks->hi_kind);
    else if (ks->lo_kind)
        snprintf(out, size, "%s %s", ks->lo_kind == '[' ? ">=" : ">", lo);
    else
        snprintf(out, size, "%s %s", ks->hi_kind == ']' ? "<=" : "<", hi);
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
static int assign_choice(parse_ctx_t *ctx, const key_spec_t *ks, const nl_value_t *v, char *dst) {
    if (match_choice(ks->choices, v->s, dst, ks->size)) return 0;
    char list[256];
    format_choices(ks->choices, list, sizeof list);
    const char *g = group_names[ks->group];
    const char *use = strchr(ks->choices, '|') ? "use one of " : "use ";
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
    return cfg_error(ctx, v->line, v->col, "&%s %s: %s; remove the key", group_names[ks->group], ks->key,
                     ks->not_impl);
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
    if (check_value(ctx, ks, v) != 0 || refuse_unimplemented(ctx, ks, v) != 0) return -1;
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

/* A new &stage group: the next element of stages[], its keys counted afresh (each group may set
 * each key once). */
static int open_stage(parse_ctx_t *ctx, const nl_group_t *g, config_t *cfg) {
    if (cfg->n_stages == CFG_MAX_STAGES)
        return cfg_error(ctx, g->line, g->col, "&stage: at most %d &stage groups", CFG_MAX_STAGES);
    cfg->stage_at = cfg->n_stages++;
    set_key_defaults(cfg, G_STAGE);
    cfg_stage_t *st = &cfg->stages[cfg->stage_at];
    st->line = g->line;
    st->col = g->col;
    for (int k = 0; k < N_KEYS; k++)
        if (key_specs[k].group == G_STAGE) ctx->set_by[k] = NULL;
    return 0;
}

static void note_stage_key(config_t *cfg, const key_spec_t *ks, const nl_entry_t *e) {
    int i = stage_key_index(ks->key);
    ASSERT(i >= 0);
    cfg->stages[cfg->stage_at].key_line[i] = e->line;
    cfg->stages[cfg->stage_at].key_col[i] = e->col;
}

static int apply_group(parse_ctx_t *ctx, const nl_group_t *g, config_t *cfg) {
    int gi = find_group(g->name);
    if (gi < 0) return unknown_group_error(ctx, g);
    if (gi == G_STAGE) {
        if (open_stage(ctx, g, cfg) != 0) return -1;
    } else if (ctx->group_at[gi])
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
        if (gi == G_STAGE) note_stage_key(cfg, &key_specs[k], e);
    }
    return 0;
}

/* ---- command-line overrides -------------------------------------------------------------- */

/* An override "group.key=value" is the namelist text "&group\n key = value\n/" parsed by
 * namelist.c and assigned by assign_entry, so it meets every check a file's key meets; it
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
        if (find_key(g, name) < 0) continue;
        char one[96];
        snprintf(one, sizeof one, "%s%s.%.60s", hint[0] ? " or " : "; did you mean ", group_names[g],
                 arg + strspn(arg, " \t"));
        append(hint, sizeof hint, one);
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
    int gi = find_group(group);
    if (gi < 0) return unknown_group_error(ctx, &g);
    if (gi == G_STAGE) /* which of the repeated groups would it change? */
        return cfg_error(ctx, line, 1, "&stage keys cannot be overridden on the command line (a "
                         "namelist may hold several &stage groups): edit the file");
    nl_entry_t e = {.key = key, .line = line, .col = 1};
    int k = find_key(gi, key);
    if (k < 0) return unknown_key_error(ctx, gi, &e);
    char *value = override_value_text(&key_specs[k], eq + 1);
    int rc = check_value_is_one_value(ctx, line, value);
    if (rc == 0) {
        size_t len = strlen(group) + strlen(key) + strlen(value) + 16;
        char *text = xrealloc_small(NULL, len);
        snprintf(text, len, "&%s\n%s = %s\n/\n", group, key, value);
        rc = namelist_parse_keys(o->label, text, key_capacity, NULL, &o->nl, ctx->msg, ctx->msgsize);
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
    return assign_entry(ctx, &key_specs[k], parsed, cfg);
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

/* ---- checks that need more than one key -------------------------------------------------- */

/* "line 7" if the file set key k, "command line argument 2" if an override did, else "default" —
 * cross-key messages name where each came from. */
static const char *provenance(const parse_ctx_t *ctx, int k, char buf[32]) {
    if (!ctx->set_by[k]) return "default";
    int line = ctx->set_by[k]->line;
    if (line < 0) snprintf(buf, 32, "command line argument %d", ctx->over[-1 - line].argno);
    else snprintf(buf, 32, "line %d", line);
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

/* &model arch = 'llama' sets the defaults of the switches it names; one set in the namelist or
 * on the command line keeps its value. n_kv_head = 0 means n_head. Runs before the checks. */
static void resolve_arch(parse_ctx_t *ctx, config_t *cfg) {
    if (!strcmp(cfg->arch, "llama")) {
        const struct { const char *key, *value; } strs[] = {
            {"norm", "rmsnorm"}, {"pos", "rope"}, {"mlp", "swiglu"}};
        for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
            const int k = key_index(G_MODEL, strs[i].key);
            if (!ctx->set_by[k]) snprintf(field_ptr(cfg, &key_specs[k]), key_specs[k].size, "%s", strs[i].value);
        }
        if (!ctx->set_by[key_index(G_MODEL, "tie_embeddings")]) cfg->tie_embeddings = false;
        if (!ctx->set_by[key_index(G_MODEL, "bias")]) cfg->bias = false;
    }
    if (cfg->n_kv_head == 0) cfg->n_kv_head = cfg->n_head;
}

/* Grouped-query attention: whole groups of query heads per k/v head. RoPE rotates pairs of
 * dimensions (i, i + hs/2) of each head: an even head size. */
static int check_kv_heads_and_rope(parse_ctx_t *ctx, const config_t *cfg) {
    int a = key_index(G_MODEL, "n_kv_head"), b = key_index(G_MODEL, "n_head"), line, col;
    char pa[32], pb[32];
    if (cfg->n_kv_head > cfg->n_head || cfg->n_head % cfg->n_kv_head != 0) {
        locate(ctx, a, b, &line, &col);
        return cfg_error(ctx, line, col, "&model n_kv_head: n_kv_head = %d (%s) must divide n_head = %d (%s)",
                         cfg->n_kv_head, provenance(ctx, a, pa), cfg->n_head, provenance(ctx, b, pb));
    }
    const int hs = cfg->d_model / cfg->n_head;
    if (!strcmp(cfg->pos, "rope") && hs % 2 != 0) {
        a = key_index(G_MODEL, "pos");
        locate(ctx, a, b, &line, &col);
        return cfg_error(ctx, line, col, "&model pos: 'rope' needs an even head size, but d_model / n_head = "
                         "%d / %d = %d", cfg->d_model, cfg->n_head, hs);
    }
    return 0;
}

static int check_global_batch(parse_ctx_t *ctx, const config_t *cfg) {
    int a = key_index(G_TRAIN, "global_batch"), b = key_index(G_TRAIN, "micro_batch");
    int c = key_index(G_PARALLEL, "dp"), line, col;
    char pa[32], pb[32], pc[32];
    if (cfg->micro_batch == 0) { /* chosen at startup: needs the global batch it must divide */
        if (cfg->global_batch > 0 && cfg->global_batch % cfg->dp == 0) return 0;
        locate(ctx, b, a, &line, &col);
        return cfg_error(ctx, line, col, "&train micro_batch: micro_batch = 0 (the largest that fits "
                         "the memory limit) needs a global_batch that dp = %d divides; global_batch "
                         "= %d (%s)", cfg->dp, cfg->global_batch, provenance(ctx, a, pa));
    }
    long long per_step = (long long)cfg->micro_batch * cfg->dp;
    if (cfg->global_batch == 0 || cfg->global_batch % per_step == 0) return 0;
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

static int check_recompute_layers(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->recompute_layers <= cfg->n_layer) return 0;
    int a = key_index(G_PARALLEL, "recompute_layers"), b = key_index(G_MODEL, "n_layer"), line, col;
    char pa[32], pb[32];
    locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col,
                     "&parallel recompute_layers: recompute_layers = %d (%s) must be <= n_layer = %d (%s); "
                     "-1 recomputes every block", cfg->recompute_layers, provenance(ctx, a, pa), cfg->n_layer,
                     provenance(ctx, b, pb));
}

static int check_mode_inputs(parse_ctx_t *ctx, const config_t *cfg) {
    int m = key_index(G_RUN, "mode"), line, col;
    char pm[32];
    if (!strcmp(cfg->mode, "train") && cfg->train_files[0] == '\0' && !stages_have_data(cfg)) {
        int f = key_index(G_DATA, "train_files");
        locate(ctx, f, m, &line, &col);
        return cfg_error(ctx, line, col,
                         "&data train_files: must be set when &run mode = 'train' (%s), "
                         "e.g. train_files = 'data/train_*.bin' (or &data mixture)", provenance(ctx, m, pm));
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

/* The interleaved schedule: virtual_stages v >= 2 chunks per stage, pp >= 2, n_layer divisible
 * by pp * v (equal chunks); and v > 1 only with it. (Micro-batches a multiple of pp: checked
 * where their number is known, train/schedule.c.) */
static int check_virtual_stages(parse_ctx_t *ctx, const config_t *cfg) {
    const bool il = !strcmp(cfg->schedule, "interleaved");
    const int v = cfg->virtual_stages, p = cfg->pp, L = cfg->n_layer;
    int a = key_index(G_PARALLEL, "virtual_stages"), s = key_index(G_PARALLEL, "schedule"), line, col;
    char pa[32], ps[32];
    locate(ctx, a, s, &line, &col);
    if (!il && v > 1)
        return cfg_error(ctx, line, col, "&parallel virtual_stages = %d (%s) needs schedule = "
                         "'interleaved' (got '%s'), or set virtual_stages = 1", v,
                         provenance(ctx, a, pa), cfg->schedule);
    if (!il) return 0;
    if (p < 2)
        return cfg_error(ctx, line, col, "&parallel virtual_stages: schedule = 'interleaved' (%s) "
                         "needs pp >= 2, got pp = %d; use pp >= 2, or schedule = '1f1b' with "
                         "virtual_stages = 1", provenance(ctx, s, ps), p);
    if (v < 2)
        return cfg_error(ctx, line, col, "&parallel virtual_stages = %d (%s): schedule = "
                         "'interleaved' needs virtual_stages >= 2 (with one chunk per stage it is "
                         "'1f1b')", v, provenance(ctx, a, pa));
    if (L % (p * v) != 0) {
        char ok[160] = "";
        size_t at = 0;
        for (int c = 2; c <= L / p && at + 8 < sizeof ok; c++)
            if (L % (p * c) == 0) at += (size_t)snprintf(ok + at, sizeof ok - at, "%s%d", at ? ", " : "", c);
        const int lo = L / (p * v) * (p * v), hi = lo + p * v;
        char near[64];
        if (lo > 0) snprintf(near, sizeof near, "n_layer = %d or %d", lo, hi);
        else snprintf(near, sizeof near, "n_layer = %d", hi);
        return cfg_error(ctx, line, col, "&parallel virtual_stages = %d (%s): &model n_layer = %d "
                         "is not divisible by pp * virtual_stages = %d; nearest valid: %s, or "
                         "virtual_stages in {%s} for pp = %d", v, provenance(ctx, a, pa), L, p * v,
                         near, at ? ok : "none", p);
    }
    return 0;
}

/* ZB-H1's post-validation keeps copies of the optimizer state beside it in device memory, to
 * undo an optimistic update: not with the state on the host. */
static int check_offload(parse_ctx_t *ctx, const config_t *cfg) {
    if (strcmp(cfg->offload, "optimizer") != 0 || strcmp(cfg->schedule, "zb-h1") != 0) return 0;
    int o = key_index(G_TRAIN, "offload"), s = key_index(G_PARALLEL, "schedule"), line, col;
    char ps[32];
    locate(ctx, o, s, &line, &col);
    return cfg_error(ctx, line, col, "&train offload = 'optimizer' cannot be used with &parallel "
                     "schedule = 'zb-h1' (%s): its post-validation undoes updates from device "
                     "copies of the optimizer state; use schedule = '1f1b', or offload = 'none'",
                     provenance(ctx, s, ps));
}

bool config_weights_16bit_possible(const config_t *cfg) {
    return !strcmp(cfg->precision, "bf16") || !strcmp(cfg->precision, "fp16");
}

/* weights_storage / activations_storage = '16bit' needs values rounded to 16 bits: a bf16/fp16
 * run (`what`: what the key stores). */
static int check_storage_key(parse_ctx_t *ctx, const config_t *cfg, const char *key,
                             const char *value, const char *what) {
    if (strcmp(value, "16bit") != 0 || config_weights_16bit_possible(cfg)) return 0;
    int w = key_index(G_TRAIN, key), p = key_index(G_TRAIN, "precision"), line, col;
    locate(ctx, w, p, &line, &col);
    return cfg_error(ctx, line, col, "&train %s = '16bit' needs a 16-bit %s, and &train precision "
                     "= 'fp32' has none; use precision = 'bf16' or 'fp16', or %s = 'auto'", key,
                     what, key);
}

static int check_storage(parse_ctx_t *ctx, const config_t *cfg) {
    return check_storage_key(ctx, cfg, "weights_storage", cfg->weights_storage, "weights copy") ||
           check_storage_key(ctx, cfg, "activations_storage", cfg->activations_storage,
                             "activation type");
}

/* Generation runs the whole model on each rank: any saved file loads on any grid. */
static int check_generate_grid(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->pp == 1 || strcmp(cfg->mode, "generate") != 0) return 0;
    int m = key_index(G_RUN, "mode"), p = key_index(G_PARALLEL, "pp"), line, col;
    char pm[32], pp[32];
    locate(ctx, p, m, &line, &col);
    return cfg_error(ctx, line, col,
                     "&parallel pp: mode = 'generate' (%s) runs with pp = 1, got pp = %d (%s); weights "
                     "saved on any grid load there", provenance(ctx, m, pm), cfg->pp, provenance(ctx, p, pp));
}

/* Loss scaling is fp16's: its keys set with another precision would do nothing, and a dynamic
 * scaler that starts below its floor cannot work. */
static const char *const fp16_keys[] = {"loss_scale", "initial_loss_scale", "loss_scale_window",
                                        "hysteresis", "min_loss_scale"};
#define N_FP16_KEYS (sizeof fp16_keys / sizeof fp16_keys[0])

static bool is_fp16_key(const key_spec_t *ks) {
    for (size_t i = 0; i < N_FP16_KEYS; i++)
        if (ks->group == G_TRAIN && !strcmp(ks->key, fp16_keys[i])) return true;
    return false;
}

static int check_loss_scaling(parse_ctx_t *ctx, const config_t *cfg) {
    const char *const *keys = fp16_keys;
    int pr = key_index(G_TRAIN, "precision"), line, col;
    char pp[32];
    for (size_t i = 0; i < N_FP16_KEYS && strcmp(cfg->precision, "fp16") != 0; i++) {
        int k = key_index(G_TRAIN, keys[i]);
        if (!ctx->set_by[k]) continue;
        locate(ctx, k, pr, &line, &col);
        return cfg_error(ctx, line, col, "&train %s: loss scaling is for precision = 'fp16', but "
                         "precision = '%s' (%s); remove the key", keys[i], cfg->precision,
                         provenance(ctx, pr, pp));
    }
    if (cfg->loss_scale == 0 && cfg->min_loss_scale > cfg->initial_loss_scale) {
        int a = key_index(G_TRAIN, "min_loss_scale"), b = key_index(G_TRAIN, "initial_loss_scale");
        char pa[32], pb[32];
        locate(ctx, a, b, &line, &col);
        return cfg_error(ctx, line, col, "&train min_loss_scale: min_loss_scale = %g (%s) must be <= "
                         "initial_loss_scale = %g (%s)", cfg->min_loss_scale, provenance(ctx, a, pa),
                         cfg->initial_loss_scale, provenance(ctx, b, pb));
    }
    return 0;
}

/* Validation every val_every steps needs data to validate on; without it nothing would run. */
static int check_val_files(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->val_every == 0 || cfg->val_files[0] != '\0' || strcmp(cfg->mode, "train") != 0) return 0;
    int e = key_index(G_DATA, "val_every"), f = key_index(G_DATA, "val_files"), line, col;
    char pe[32];
    locate(ctx, e, f, &line, &col);
    return cfg_error(ctx, line, col,
                     "&data val_files: val_every = %d (%s) asks for validation, but val_files is not set; "
                     "set val_files = 'data/val_*.bin' or val_every = 0", cfg->val_every, provenance(ctx, e, pe));
}

/* &data mixture: its syntax and weights (config/stages.h), and not together with train_files. */
static int check_data_mixture(parse_ctx_t *ctx, const config_t *cfg) {
    if (!cfg->mixture[0]) return 0;
    int m = key_index(G_DATA, "mixture"), f = key_index(G_DATA, "train_files"), line, col;
    char err[512], pf[32];
    locate(ctx, m, f, &line, &col);
    if (cfg->train_files[0])
        return cfg_error(ctx, line, col, "&data mixture: set train_files (%s) or mixture, not both",
                         provenance(ctx, f, pf));
    mix_spec_t mix;
    if (mixture_parse(cfg->mixture, &mix, err, sizeof err) != 0)
        return cfg_error(ctx, line, col, "&data mixture: %s", err);
    return 0;
}

/* &log profile_steps = 'a:b': whole numbers 1 <= a <= b, and only with profile = .true. */
static int check_profile_steps(parse_ctx_t *ctx, config_t *cfg) {
    const char *t = cfg->profile_steps;
    if (!t[0]) return 0;
    int k = key_index(G_LOG, "profile_steps"), pr = key_index(G_LOG, "profile"), line, col;
    locate(ctx, k, pr, &line, &col);
    long long a = 0, b = 0;
    int used = 0;
    if (sscanf(t, "%lld:%lld%n", &a, &b, &used) != 2 || t[used] != '\0' || t[0] == '+' ||
        t[0] == '-' || a < 1 || b < a)
        return cfg_error(ctx, line, col, "&log profile_steps: '%s' is not a step range 'a:b' "
                         "with 1 <= a <= b (steps count from 1), e.g. profile_steps = '2:5'", t);
    if (!cfg->profile)
        return cfg_error(ctx, line, col, "&log profile_steps: the timeline's steps, but profile "
                         "= .false.; set profile = .true. or remove the key");
    cfg->profile_first = a;
    cfg->profile_last = b;
    return 0;
}

/* Mixture of Experts: top_k of n_experts, moe_every within the model, ep dividing dp and
 * n_experts (each ep rank holds n_experts / ep whole experts of every MoE layer). */
static int check_moe(parse_ctx_t *ctx, const config_t *cfg) {
    int line, col, ne = key_index(G_MODEL, "n_experts");
    char pa[32], pb[32];
    /* each rule: the two keys it names (a, b), their values, whether it is broken, the message */
    const struct { int a, b, va, vb; bool bad; const char *fmt; } rules[] = {
        {key_index(G_MODEL, "top_k"), ne, cfg->top_k_moe, cfg->n_experts,
         cfg->n_experts > 0 && cfg->top_k_moe > cfg->n_experts,
         "&model top_k: top_k = %d (%s) must be <= n_experts = %d (%s)"},
        {key_index(G_MODEL, "moe_every"), key_index(G_MODEL, "n_layer"), cfg->moe_every, cfg->n_layer,
         cfg->n_experts > 0 && cfg->moe_every > cfg->n_layer,
         "&model moe_every: moe_every = %d (%s) must be <= n_layer = %d (%s) (block l is an MoE block "
         "when l %% moe_every = moe_every - 1)"},
        {key_index(G_PARALLEL, "ep"), key_index(G_PARALLEL, "dp"), cfg->ep, cfg->dp, cfg->dp % cfg->ep != 0,
         "&parallel ep: ep = %d (%s) must divide dp = %d (%s): the expert-parallel group is made of "
         "data-parallel ranks"},
        {key_index(G_PARALLEL, "ep"), ne, cfg->ep, cfg->n_experts, cfg->ep > 1 && cfg->n_experts == 0,
         "&parallel ep: ep = %d (%s) needs a Mixture-of-Experts model, but n_experts = %d (%s)"},
        {key_index(G_PARALLEL, "ep"), ne, cfg->ep, cfg->n_experts,
         cfg->ep > 1 && cfg->n_experts > 0 && cfg->n_experts % cfg->ep != 0,
         "&parallel ep: ep = %d (%s) must divide n_experts = %d (%s): each ep rank holds whole experts"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (!rules[i].bad) continue;
        locate(ctx, rules[i].a, rules[i].b, &line, &col);
        return cfg_error(ctx, line, col, rules[i].fmt, rules[i].va, provenance(ctx, rules[i].a, pa),
                         rules[i].vb, provenance(ctx, rules[i].b, pb));
    }
    return 0;
}

/* &model dropout sets attn_dropout, resid_dropout and embd_dropout, each unless given itself. */
static void resolve_dropout(const parse_ctx_t *ctx, config_t *cfg) {
    const char *keys[] = {"attn_dropout", "resid_dropout", "embd_dropout"};
    double *fields[] = {&cfg->attn_dropout, &cfg->resid_dropout, &cfg->embd_dropout};
    for (int i = 0; i < 3; i++)
        if (!ctx->set_by[key_index(G_MODEL, keys[i])]) *fields[i] = cfg->dropout;
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
    if (cfg->d_ff_expert == 0) cfg->d_ff_expert = cfg->d_ff;
    resolve_dropout(ctx, cfg);
    cfg->global_batch_derived = cfg->global_batch == 0;
    cfg->device_memory = strcmp(cfg->device, "cuda") == 0;
    cfg->resume_given = cfg->resume[0] != '\0';
    if (!cfg->resume_given) snprintf(cfg->resume, sizeof cfg->resume, "none");
    if (cfg->global_batch == 0) cfg->global_batch = (int)global_batch;
    return 0;
}

/* ---- sizes derived from several keys ------------------------------------------------------ */

/* Computed in double: products of up to four 32-bit values stay far inside its range (nothing
 * can overflow), and comparing with a bound below 2^53 is exact (rounding is monotone and the
 * bounds are representable). */
#define INT_LIMIT 2147483647.0              /* what the kernels and MPI counts hold */
#define RANK_BYTES_LIMIT 1099511627776.0    /* 1 TiB: an estimate above it is a typo, not a run */

/* "&train micro_batch: line 3, &model seq_len: default" */
static void provenances(const parse_ctx_t *ctx, const int *keys, int n, char *out, size_t size) {
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        char one[96], where[32];
        const key_spec_t *k = &key_specs[keys[i]];
        snprintf(one, sizeof one, "%s&%s %s: %s", i ? ", " : "", group_names[k->group], k->key,
                 provenance(ctx, keys[i], where));
        append(out, size, one);
    }
}

/* "&group key: <body> (<where each key came from>)", pointing at the first key the file set. */
__attribute__((format(printf, 4, 5)))
static int size_error(parse_ctx_t *ctx, const int *keys, int n, const char *fmt, ...) {
    int line = 0, col = 0, at = -1;
    for (int i = 0; i < n && at < 0; i++)
        if (ctx->set_by[keys[i]]) at = keys[i];
    locate(ctx, at >= 0 ? at : keys[0], keys[0], &line, &col);
    char body[1024], prov[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    provenances(ctx, keys, n, prov, sizeof prov);
    const key_spec_t *k = &key_specs[keys[0]];
    return cfg_error(ctx, line, col, "&%s %s: %s (%s)", group_names[k->group], k->key, body, prov);
}

/* What one rank of the largest pipeline stage holds, as lower bounds (exact for pp = 1, as in
 * model/gpt.c and model/params.c): every stage holds at least one layer and some stage at least
 * ceil(n_layer / pp); the first also wte and wpe, the last a copy of wte, the final norm and the
 * logits. Alignment padding is left out. */
typedef struct rank_size {
    double params;      /* parameters on the rank */
    double act_floats;  /* activations, scratch and head buffers (floats) */
} rank_size_t;

/* Activations of n blocks of one stage whose first recompute_layers (-1: all) keep `kept` floats
 * instead of layer_a each and share one scratch set of the rest. */
static double blocks_act_floats(const config_t *cfg, double n, double layer_a, double kept) {
    const double k = cfg->recompute_layers < 0 || cfg->recompute_layers > n ? n : cfg->recompute_layers;
    return k * kept + (n - k) * layer_a + (k > 0 ? layer_a - kept : 0);
}

static rank_size_t rank_size_at_least(const config_t *cfg) {
    const double C = cfg->d_model, F = cfg->d_ff, T = cfg->seq_len, tp = cfg->tp;
    const double L = cfg->n_layer, pp = cfg->pp, Vp = (double)config_padded_vocab(cfg);
    const double N = (double)cfg->micro_batch * T, Cl = C / tp, Fl = F / tp;
    const double lse = (double)cfg->micro_batch * ((double)cfg->n_head / tp) * T; /* attention */
    /* a block: ln1, proj.b, ln2, mlp.proj.b replicated; qkv, attn.proj.w, mlp.fc, mlp.proj.w split */
    const double layer_p = 6 * C + (4 * C * C + 3 * C + 2 * F * C + F) / tp;
    const double wte = Vp * C / tp, wpe = T * C, lnf = 2 * C;
    /* per layer: ln1, res2, ln2, res3 (N*C), 4 row statistics, qkv + atty, fch + gelu, lse */
    const double layer_a = N * (4 * C + 4 + 4 * Cl + 2 * Fl) + lse;
    /* a recomputed block keeps less (selective: not atty, lse, gelu; full: only res3), and one
     * scratch set of the rest is shared by all of them (model/gpt.c) */
    const double kept = !strcmp(cfg->recompute, "selective") ? N * (4 * C + 4 + 3 * Cl + Fl)
                        : !strcmp(cfg->recompute, "full")    ? N * C
                                                             : layer_a;
    /* slot io, dC, dC2, dbig (the attention kernels' scratch, a few tiles per thread, is left out) */
    const double fixed_a = 2 * N * C + 2 * N * C + N * (3 * Cl > Fl ? 3 * Cl : Fl);
    const double head_a = N * C + 6 * N + N * Vp / tp;
    /* Mixture of Experts (every moe_every-th layer, model/params.c): such a layer's MLP is the
     * router, this ep rank's n_experts / ep experts (d_ff_expert wide, tp-split like the dense
     * MLP) and the shared experts, instead of the dense MLP; the layers' parameters over the pp
     * stages' average then bound the largest stage from below */
    const double n_moe = cfg->n_experts > 0 ? floor(L / cfg->moe_every) : 0;
    double blocks_p = L * layer_p;
    if (n_moe > 0) {
        const double E = cfg->n_experts, Fe = cfg->d_ff_expert, S = (double)cfg->n_shared_experts * Fe;
        const double ins = !strcmp(cfg->mlp, "swiglu") ? 2 : 1; /* gate and up, or fc */
        const double dense_mlp = C + (2 * F * C + F) / tp;
        const double moe_mlp = E * C + (!strcmp(cfg->router, "mlp") ? C * C : 0) +
                               (cfg->router_noise > 0 ? E * C : 0) +
                               E / cfg->ep * (ins + 1) * Fe * C / tp + (ins + 1) * S * C / tp;
        blocks_p = L * layer_p + n_moe * (moe_mlp - dense_mlp);
    }
    rank_size_t r;
    if (cfg->pp == 1) {
        r.params = wte + wpe + lnf + blocks_p;
        r.act_floats = fixed_a + blocks_act_floats(cfg, L, layer_a, kept) + head_a;
        return r;
    }
    const double most = ceil(L / pp), one = blocks_act_floats(cfg, 1, layer_a, kept);
    const rank_size_t witness[3] = {
        {most * layer_p, fixed_a + blocks_act_floats(cfg, most, layer_a, kept)}, /* most layers */
        {wte + wpe + layer_p, fixed_a + one},                /* the first stage */
        {wte + lnf + layer_p, fixed_a + one + head_a},       /* the last stage */
    };
    r = witness[0];
    for (int i = 1; i < 3; i++) {
        if (witness[i].params > r.params) r.params = witness[i].params;
        if (witness[i].act_floats > r.act_floats) r.act_floats = witness[i].act_floats;
    }
    if (blocks_p / pp > r.params) r.params = blocks_p / pp; /* the experts, on average per stage */
    return r;
}

/* Bytes of the stage witnesses above, taken per stage (a max of sums, still a lower bound). */
static double rank_bytes_at_least(const config_t *cfg, double *param_bytes, double *act_bytes) {
    rank_size_t r = rank_size_at_least(cfg);
    *param_bytes = 16.0 * r.params; /* parameters, gradients, AdamW m and v: 4 floats each */
    *act_bytes = 4.0 * r.act_floats;
    return *param_bytes + *act_bytes;
}

static int check_grid_and_rows(parse_ctx_t *ctx, const config_t *cfg) {
    const double ranks = (double)cfg->dp * cfg->tp * cfg->pp;
    if (ranks > INT_LIMIT) {
        int k[] = {key_index(G_PARALLEL, "dp"), key_index(G_PARALLEL, "tp"), key_index(G_PARALLEL, "pp")};
        return size_error(ctx, k, 3, "dp * tp * pp = %d * %d * %d = %.0f ranks exceed %.0f (MPI counts ranks in "
                          "32-bit integers)", cfg->dp, cfg->tp, cfg->pp, ranks, INT_LIMIT);
    }
    if (3.0 * cfg->d_model > INT_LIMIT) {
        int k[] = {key_index(G_MODEL, "d_model")};
        return size_error(ctx, k, 1, "3 * d_model = %.0f (the width of a qkv row) exceeds %.0f, the largest "
                          "dimension the kernels take", 3.0 * cfg->d_model, INT_LIMIT);
    }
    return 0;
}

static int check_batch_sizes(parse_ctx_t *ctx, const config_t *cfg) {
    const int mb = key_index(G_TRAIN, "micro_batch"), T = key_index(G_MODEL, "seq_len");
    const double tokens = (double)cfg->micro_batch * cfg->seq_len;
    if (tokens > INT_LIMIT) {
        int k[] = {mb, T};
        return size_error(ctx, k, 2, "micro_batch * seq_len = %d * %d = %.0f tokens per micro-batch exceed %.0f "
                          "(the kernels count them in 32-bit integers)", cfg->micro_batch, cfg->seq_len, tokens,
                          INT_LIMIT);
    }
    const double heads = (double)cfg->micro_batch * cfg->n_head;
    if (heads > INT_LIMIT) {
        int k[] = {mb, key_index(G_MODEL, "n_head")};
        return size_error(ctx, k, 2, "micro_batch * n_head = %d * %d = %.0f attention heads per micro-batch "
                          "exceed %.0f (the kernels count them in 32-bit integers)", cfg->micro_batch,
                          cfg->n_head, heads, INT_LIMIT);
    }
    const double acts = tokens * cfg->d_model;
    if (acts > INT_LIMIT) {
        int k[] = {mb, T, key_index(G_MODEL, "d_model")};
        return size_error(ctx, k, 3, "micro_batch * seq_len * d_model = %d * %d * %d = %.0f activations per "
                          "micro-batch exceed %.0f (they are sent between pipeline stages and summed over tp "
                          "in one MPI call, whose count is a 32-bit integer)", cfg->micro_batch, cfg->seq_len,
                          cfg->d_model, acts, INT_LIMIT);
    }
    const double step_tokens = (double)cfg->global_batch * cfg->seq_len;
    if (step_tokens > INT_LIMIT) {
        int k[] = {key_index(G_TRAIN, "global_batch"), T, mb, key_index(G_PARALLEL, "dp")};
        return size_error(ctx, k, cfg->global_batch_derived ? 4 : 2,
                          "global_batch * seq_len = %d%s * %d = %.0f tokens per optimizer step exceed %.0f "
                          "(counted in 32-bit integers)", cfg->global_batch,
                          cfg->global_batch_derived ? " (micro_batch * dp)" : "", cfg->seq_len, step_tokens,
                          INT_LIMIT);
    }
    return 0;
}

static int check_rank_memory(parse_ctx_t *ctx, const config_t *cfg) {
    const int model_keys[] = {key_index(G_MODEL, "d_model"), key_index(G_MODEL, "n_layer"),
                              key_index(G_MODEL, "d_ff"), key_index(G_MODEL, "vocab_size"),
                              key_index(G_PARALLEL, "tp"), key_index(G_PARALLEL, "pp")};
    const int moe_keys[] = {key_index(G_MODEL, "n_experts"), key_index(G_MODEL, "d_ff_expert"),
                            key_index(G_MODEL, "d_model"), key_index(G_PARALLEL, "ep"),
                            key_index(G_PARALLEL, "tp"), key_index(G_PARALLEL, "pp")};
    rank_size_t r = rank_size_at_least(cfg);
    if (r.params > INT_LIMIT && cfg->n_experts > 0)
        return size_error(ctx, moe_keys, 6, "one rank would hold at least %.4g parameters (n_layer = %d, d_model = "
                          "%d, n_experts = %d, d_ff_expert = %d, moe_every = %d, ep = %d, tp = %d, pp = %d), more "
                          "than %.0f (gradients are all-reduced with 32-bit MPI counts): use a larger &parallel "
                          "ep, tp or pp, or fewer or narrower experts", r.params, cfg->n_layer, cfg->d_model,
                          cfg->n_experts, cfg->d_ff_expert, cfg->moe_every, cfg->ep, cfg->tp, cfg->pp, INT_LIMIT);
    if (r.params > INT_LIMIT)
        return size_error(ctx, model_keys, 6, "one rank would hold at least %.4g parameters (n_layer = %d, d_model = "
                          "%d, d_ff = %d, vocab_size = %d, tp = %d, pp = %d), more than %.0f (gradients are "
                          "all-reduced with 32-bit MPI counts): use a larger &parallel tp or pp, or a smaller "
                          "model", r.params, cfg->n_layer, cfg->d_model, cfg->d_ff, cfg->vocab_size, cfg->tp,
                          cfg->pp, INT_LIMIT);
    double pbytes, abytes, total = rank_bytes_at_least(cfg, &pbytes, &abytes);
    if (total <= RANK_BYTES_LIMIT) return 0;
    char t[32], pb[32], ab[32];
    format_bytes(total, t);
    format_bytes(pbytes, pb);
    format_bytes(abytes, ab);
    const int act_keys[] = {key_index(G_TRAIN, "micro_batch"), key_index(G_MODEL, "seq_len"),
                            key_index(G_MODEL, "d_model"), key_index(G_MODEL, "n_head"),
                            key_index(G_MODEL, "n_layer")};
    const bool acts = abytes > pbytes;
    return size_error(ctx, acts ? act_keys : model_keys, acts ? 5 : 6,
                      "one rank needs at least %s (parameters, gradients and AdamW moments: %s; activations "
                      "for micro_batch = %d, seq_len = %d: %s), more than the 1 TiB llmtrain accepts per rank: "
                      "use a smaller %s, a larger &parallel tp or pp%s", t, pb, cfg->micro_batch, cfg->seq_len, ab,
                      acts ? "micro_batch or seq_len" : "model",
                      acts && strcmp(cfg->recompute, "full") ? ", or &parallel recompute = 'full'" : "");
}

/* After resolve_derived: global_batch and d_ff hold their effective values. */
/* A ratio of at most 1 would call every ordinary step an explosion. */
static int check_grad_explosion_ratio(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->grad_explosion_ratio == 0 || cfg->grad_explosion_ratio > 1) return 0;
    int k = key_index(G_TRAIN, "grad_explosion_ratio"), line, col;
    locate(ctx, k, k, &line, &col);
    return cfg_error(ctx, line, col, "&train grad_explosion_ratio: must be 0 (off) or above 1 (a "
                     "multiple of the median gradient norm), got %g", cfg->grad_explosion_ratio);
}

static int check_sizes(parse_ctx_t *ctx, const config_t *cfg) {
    if (check_grid_and_rows(ctx, cfg) || check_batch_sizes(ctx, cfg) || check_rank_memory(ctx, cfg)) return -1;
    return 0;
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
                             group_names[key_specs[k].group], key_specs[k].key, value);
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
                             group_names[key_specs[k].group], key_specs[k].key, name, value, name);
        for (const char *u = use; *u && o + 1 < sizeof out; u++) out[o++] = *u;
        p = close + 1;
    }
    out[o] = '\0';
    if (o + 1 > cap)
        return cfg_error(ctx, 1, 1, "&%s %s: '%s' expands to %zu characters, more than %zu",
                         group_names[key_specs[k].group], key_specs[k].key, value, o, cap - 1);
    /* a default or a variable's value holding '${' again: expanded once here, the effective
     * configuration (echoed, stored in checkpoints) would be expanded a second time when read */
    if (strstr(out, "${")) {
        const nl_entry_t *e = ctx->set_by[k];
        return cfg_error(ctx, e ? e->line : 1, e ? e->col : 1, "&%s %s: '%s' expands to '%s', "
                         "which holds '${' again (variables are expanded once: no nesting, and no "
                         "'${' in a default or a variable's value)", group_names[key_specs[k].group],
                         key_specs[k].key, value, out);
    }
    memcpy(value, out, o + 1);
    return 0;
}

/* A path key: ${VAR} is expanded in it (env_path_keys; &stage's train_files and mixture too). */
static bool is_path_key(const key_spec_t *ks) {
    if (ks->type != K_STR) return false;
    for (size_t i = 0; i < sizeof env_path_keys / sizeof env_path_keys[0]; i++)
        if (!strcmp(ks->key, env_path_keys[i])) return true;
    return false;
}

static int expand_env_paths(parse_ctx_t *ctx, config_t *cfg) {
    for (int k = 0; k < N_KEYS; k++)
        if (key_specs[k].group != G_STAGE && is_path_key(&key_specs[k]) &&
            expand_one(ctx, k, field_ptr(cfg, &key_specs[k]), key_specs[k].size) != 0)
            return -1;
    return 0;
}

/* Where &data mixture and train_files were set, for the messages of config/stages.c and of the
 * data layer (which names a pattern matching no file by its line). */
static void note_data_positions(const parse_ctx_t *ctx, config_t *cfg) {
    const nl_entry_t *m = ctx->set_by[key_index(G_DATA, "mixture")];
    const nl_entry_t *f = ctx->set_by[key_index(G_DATA, "train_files")];
    cfg->mixture_line = m ? m->line : 0, cfg->mixture_col = m ? m->col : 0;
    cfg->train_files_line = f ? f->line : 0, cfg->train_files_col = f ? f->col : 0;
}

/* ${VAR} in the path keys of the &stage groups, as in &data's. */
static int expand_stage_paths(parse_ctx_t *ctx, config_t *cfg) {
    const int keys[2] = {key_index(G_STAGE, "train_files"), key_index(G_STAGE, "mixture")};
    for (int i = 0; i < cfg->n_stages; i++) {
        cfg->stage_at = i;
        for (int j = 0; j < 2; j++) {
            const key_spec_t *ks = &key_specs[keys[j]];
            const int at = stage_key_index(ks->key);
            nl_entry_t where = {.line = cfg->stages[i].key_line[at], .col = cfg->stages[i].key_col[at]};
            ctx->set_by[keys[j]] = where.line ? &where : NULL;
            int rc = expand_one(ctx, keys[j], field_ptr(cfg, ks), ks->size);
            ctx->set_by[keys[j]] = NULL;
            if (rc != 0) return -1;
        }
    }
    cfg->stage_at = 0;
    return 0;
}

static int check_cross_keys(parse_ctx_t *ctx, config_t *cfg) {
    if (expand_env_paths(ctx, cfg) || expand_stage_paths(ctx, cfg)) return -1;
    note_data_positions(ctx, cfg);
    resolve_arch(ctx, cfg);
    if (check_loss_scaling(ctx, cfg) || check_heads_divide_width(ctx, cfg) || check_kv_heads_and_rope(ctx, cfg) ||
        check_global_batch(ctx, cfg) ||
        check_min_lr(ctx, cfg) || check_mode_inputs(ctx, cfg) || check_prompt_in_vocab(ctx, cfg) ||
        check_generate_grid(ctx, cfg) || check_val_files(ctx, cfg) || check_recompute_layers(ctx, cfg) ||
        check_virtual_stages(ctx, cfg) || check_profile_steps(ctx, cfg) || check_grad_explosion_ratio(ctx, cfg) ||
        check_data_mixture(ctx, cfg) || check_moe(ctx, cfg) || check_offload(ctx, cfg) ||
        check_storage(ctx, cfg))
        return -1;
    if (resolve_derived(ctx, cfg) != 0) return -1;
    if (stages_check(cfg, ctx->msg, ctx->msgsize) != 0) return -1;
    return check_sizes(ctx, cfg);
}

/* ---- parse, load, destroy ---------------------------------------------------------------- */

/* Everything but the text copy; returns 0, or -1 with the message in msg. Frees what it parsed. */
static int parse_into(const char *path, const char *text, const config_args_t *args, config_t *cfg, char *msg,
                      size_t msgsize, env_snapshot_t *env) {
    set_table_defaults(cfg);
    snprintf(cfg->source_path, sizeof cfg->source_path, "%s", path ? path : "<namelist>");
    namelist_t nl;
    if (namelist_parse_keys(cfg->source_path, text, key_capacity, NULL, &nl, msg, msgsize) != 0) return -1;
    parse_ctx_t ctx = {.path = cfg->source_path, .msg = msg, .msgsize = msgsize, .env = env};
    int n_over = args ? args->n : 0;
    override_arg_t *over = xcalloc((size_t)n_over + 1, sizeof *over);
    int rc = 0;
    for (int g = 0; g < nl.n_groups && rc == 0; g++) rc = apply_group(&ctx, &nl.groups[g], cfg);
    if (rc == 0) rc = apply_overrides(&ctx, over, args, cfg);
    if (rc == 0) rc = check_cross_keys(&ctx, cfg);
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
    *out = (config_args_t){.args = *ptrs, .n = (int)header[0], .first_argno = (int)header[1]};
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
        fatal_user("%s", msg + (msg[0] == '\1'));
    }
    cfg->text = text; /* from xrealloc_small: config_destroy frees it with free() */
}

void config_load(const char *path, config_t *cfg) { config_load_overrides(path, NULL, cfg); }

void config_destroy(config_t *cfg) {
    free(cfg->text); /* xstrdup / xrealloc_small memory, not an xmalloc block */
    free(cfg->overrides);
    cfg->text = cfg->overrides = NULL;
}

/* In 64 bits: vocab_size + 127 would overflow an int near INT_MAX (validation bounds
 * vocab_size by 65536, but tools may call this on an unvalidated config). */
int config_kv_heads(const config_t *cfg) { return cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head; }

int config_padded_vocab(const config_t *cfg) {
    long long padded = ((long long)cfg->vocab_size + 127) / 128 * 128;
    return padded > INT_MAX ? INT_MAX / 128 * 128 : (int)padded;
}

/* ---- the schema as JSON (llmtrain --keys) ------------------------------------------------- */

static const char *const type_names[] = {"int", "int64", "real", "string", "bool", "int_array"};


static void json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* "a|b|c" as ["a", "b", "c"] (an empty alternative is ""). */
static void json_choices(FILE *out, const char *choices) {
    fputc('[', out);
    for (const char *p = choices;;) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        char one[64];
        snprintf(one, sizeof one, "%.*s", (int)n, p);
        json_string(out, one);
        if (!bar) break;
        fputs(", ", out);
        p = bar + 1;
    }
    fputc(']', out);
}

static void json_number(FILE *out, const key_spec_t *ks, double x) {
    if (ks->type == K_REAL) fprintf(out, "%.17g", x);
    else fprintf(out, "%.0f", x);
}

static void json_key(FILE *out, const key_spec_t *ks) {
    fprintf(out, "{\"group\": \"%s\", \"name\": \"%s\", \"type\": \"%s\", \"default\": ",
            group_names[ks->group], ks->key, type_names[ks->type]);
    switch (ks->type) {
    case K_STR: json_string(out, ks->def_str); break;
    case K_BOOL: fputs(ks->def != 0 ? "true" : "false", out); break;
    case K_INT_ARRAY: fputs("[]", out); break;
    default: json_number(out, ks, ks->def);
    }
    fputs(", \"min\": ", out);
    if (ks->lo_kind) json_number(out, ks, ks->lo); else fputs("null", out);
    fprintf(out, ", \"min_inclusive\": %s, \"max\": ", ks->lo_kind == '(' ? "false" : "true");
    if (ks->hi_kind) json_number(out, ks, ks->hi); else fputs("null", out);
    fprintf(out, ", \"max_inclusive\": %s, \"choices\": ", ks->hi_kind == ')' ? "false" : "true");
    if (ks->choices) json_choices(out, ks->choices); else fputs("null", out);
    fprintf(out, ", \"path\": %s", is_path_key(ks) ? "true" : "false");
    if (ks->type == K_STR) fprintf(out, ", \"max_length\": %zu", ks->size - 1);
    if (ks->type == K_INT_ARRAY) fprintf(out, ", \"array_length\": %zu", ks->size);
    fprintf(out, ", \"repeated_group\": %s", ks->group == G_STAGE ? "true" : "false");
    fputs(", \"planned\": ", out);
    if (ks->planned) json_choices(out, ks->planned); else fputs("null", out);
    fputs(", \"not_implemented\": ", out);
    if (ks->not_impl) json_string(out, ks->not_impl); else fputs("null", out);
    fputs(", \"why\": ", out);
    if (ks->why) json_string(out, ks->why); else fputs("null", out);
    fputc('}', out);
}

void config_keys_json(FILE *out) {
    fputs("{\"groups\": [", out);
    for (int g = 0; g < N_GROUPS; g++) fprintf(out, "%s\"%s\"", g ? ", " : "", group_names[g]);
    fputs("],\n \"keys\": [\n", out);
    for (int k = 0; k < N_KEYS; k++) {
        fputs("  ", out);
        json_key(out, &key_specs[k]);
        fputs(k + 1 < N_KEYS ? ",\n" : "\n", out);
    }
    fputs(" ]}\n", out);
}

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
    if (is_fp16_key(ks) && strcmp(cfg->precision, "fp16") != 0) { /* refused unless fp16 */
        format_real(ks->type == K_INT ? *(const int *)f : *(const double *)f, real);
        put(w, "  ! %s = %s (loss scaling: precision = 'fp16' only)\n", ks->key, real);
        return;
    }
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

/* The &stage groups with the keys each one set (the others are inherited, and writing their
 * inherited values would change what the echo means if it were read again). */
static void put_stages(writer_t *w, const config_t *cfg) {
    if (cfg->n_stages == 0) return;
    config_t *at = xmalloc(sizeof *at); /* a copy whose stage_at walks the stages */
    memcpy(at, cfg, sizeof *at);
    for (int i = 0; i < cfg->n_stages; i++) {
        at->stage_at = i;
        put(w, "&stage ! %d of %d\n", i + 1, cfg->n_stages);
        for (int k = 0; k < N_KEYS; k++)
            if (key_specs[k].group == G_STAGE && cfg->stages[i].key_line[stage_key_index(key_specs[k].key)])
                put_key(w, &key_specs[k], at);
        put(w, "/\n");
    }
    xfree(at);
}

int config_to_namelist(const config_t *cfg, char *buf, int bufsize) {
    writer_t w = {.buf = buf, .size = buf && bufsize > 0 ? (size_t)bufsize : 0, .len = 0};
    if (w.size) buf[0] = '\0';
    put(&w, "! effective configuration of run '%s' (defaults filled in)\n", cfg->name);
    if (cfg->overrides && cfg->overrides[0])
        put(&w, "! %s with the command-line overrides: %s\n", cfg->source_path, cfg->overrides);
    for (int g = 0; g < G_STAGE; g++) {
        put(&w, "&%s\n", group_names[g]);
        for (int k = 0; k < N_KEYS; k++)
            if (key_specs[k].group == g) put_key(&w, &key_specs[k], cfg);
        put(&w, "/\n");
    }
    put_stages(&w, cfg);
    return (int)w.len;
}
