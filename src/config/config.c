/* config.c — the key table: every namelist key's group, name, type, struct field, default,
 * bounds (and why), allowed values and what is not implemented yet; the defaults, and the small
 * functions of config.h that read a configuration.
 *
 * One table drives defaults, assignment, range checks, error messages, --keys and the echo, so
 * a new key is one line in cfg_keys[] (plus a cross-key check in config_checks.c if it has one,
 * or in model/spec.c model_spec_check if it is a rule on the model's shape).
 * The table is also the one place that says which keys (or string values) are in the contract
 * but not implemented yet (.not_impl): setting them to anything but the default is refused with
 * the file:line:col of the value, and a later feature only deletes its marker. A choice key
 * with an enum in config_t.choice is a CHOICE_KEY (or names it with ENUM): the loader sets the
 * enum with the string, in the order of the names given.
 *
 * The other files of the configuration (config_internal.h says what they share):
 *   config_schema.c  one key against its table entry: type, range, choices, "did you mean"
 *   config_checks.c  the checks that need more than one key, and the values derived from several
 *   config_sizes.c   sizes derived from several keys (counts that must fit 32 bits, bytes per rank)
 *   config_load.c    reading and broadcasting the file, overrides, ${VAR} in paths
 *   config_where.c   where each key was set, kept after loading (config_key_where)
 *   config_json.c    the table as JSON (llmtrain --keys)
 *   config_echo.c    the effective configuration as a namelist
 * The syntax itself is namelist.c's. Uses: config_internal.h, core/. */
#include "config/config.h"
#include "config/config_internal.h"
#include "core/error.h"
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

const char *const cfg_group_names[N_GROUPS] = {"run",  "model", "parallel", "train",
                                               "data", "checkpoint", "log", "stage"};

#define FIELD(f) .offset = offsetof(config_t, f)
#define INT_KEY(g, k, f, d, ...) {.group = g, .key = k, .type = K_INT, FIELD(f), .def = d, __VA_ARGS__}
#define I64_KEY(g, k, f, d, ...) {.group = g, .key = k, .type = K_I64, FIELD(f), .def = d, __VA_ARGS__}
#define REAL_KEY(g, k, f, d, ...) {.group = g, .key = k, .type = K_REAL, FIELD(f), .def = d, __VA_ARGS__}
#define BOOL_KEY(g, k, f, d) {.group = g, .key = k, .type = K_BOOL, FIELD(f), .def = d}
#define STR_KEY(g, k, f, d, ch, ...) \
    {.group = g, .key = k, .type = K_STR, FIELD(f), .size = sizeof(((config_t *)0)->f), .def_str = d, .choices = ch, \
     __VA_ARGS__}
/* A string key whose values are an enum in config_t.choice (same field name), in the order of
 * `names` ("a|b|c"; usually the choices). */
#define ENUM(f, names) .enum_offset = offsetof(config_t, choice.f), .enum_names = names
#define CHOICE_KEY(g, k, f, d, ch) \
    {.group = g, .key = k, .type = K_STR, FIELD(f), .size = sizeof(((config_t *)0)->f), .def_str = d, .choices = ch, \
     ENUM(f, ch)}
#define POLICIES "|warn|skip|rollback|abort" /* cfg_policy_t; '' = on_anomaly's */
#define AT_LEAST(x) .lo_kind = '[', .lo = (x)
#define ABOVE(x) .lo_kind = '(', .lo = (x)
#define AT_MOST(x) .hi_kind = ']', .hi = (x)
#define BELOW(x) .hi_kind = ')', .hi = (x)
#define UNBOUNDED .lo_kind = 0
#define WHY(text) .why = text
#define NOT_IMPL(text) .not_impl = text
/* A string key with implemented choices and planned values, refused with `text`. */
#define PLANNED_STR_KEY(g, k, f, d, ch, pl, text, ...) \
    {.group = g, .key = k, .type = K_STR, FIELD(f), .size = sizeof(((config_t *)0)->f), .def_str = d, .choices = ch, \
     .planned = pl, .not_impl = text, __VA_ARGS__}
/* A whole key that is not implemented: only its default is accepted. */
#define WATCHDOG_BOUNDS \
    AT_LEAST(1e-3), AT_MOST(1e9), WHY("the watchdog counts nanoseconds: below 1 ms every wait would time out")

const key_spec_t cfg_keys[] = {
    STR_KEY(G_RUN, "name", name, "run", NULL),
    STR_KEY(G_RUN, "out_dir", out_dir, "runs", NULL),
    CHOICE_KEY(G_RUN, "mode", mode, "train", "train|eval|generate"),
#ifdef LLMT_CUDA /* make CUDA=1 */
    STR_KEY(G_RUN, "device", device, "cpu", "cpu|cuda", ENUM(device, "cpu|cuda")),
#else
    PLANNED_STR_KEY(G_RUN, "device", device, "cpu", "cpu", "cuda",
                    "this llmtrain was built without CUDA (build it with make CUDA=1, see INSTALL)",
                    ENUM(device, "cpu|cuda")),
#endif
    I64_KEY(G_RUN, "seed", seed, 1337, AT_LEAST(0)),
    STR_KEY(G_RUN, "init_from", init_from, "", NULL),
    REAL_KEY(G_RUN, "memory_limit_gb", memory_limit_gb, 0, AT_LEAST(0), AT_MOST(1e9)), /* 0 = the node's */
    REAL_KEY(G_RUN, "time_limit_min", time_limit_min, 0, AT_LEAST(0), AT_MOST(1e7)), /* 0 = the job's */
    CHOICE_KEY(G_RUN, "elastic", elastic, "off", "off|shrink|wait"), /* jobscripts/elastic.sbatch */
    INT_KEY(G_RUN, "min_nodes", min_nodes, 1, AT_LEAST(1), AT_MOST(1000000)),
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
    INT_KEY(G_MODEL, "vocab_size", vocab_size, 50257, AT_LEAST(1), AT_MOST(2147483520),
            WHY("the padded vocabulary, vocab_size rounded up to a multiple of 128, is a 32-bit "
                "integer (ids above 65535 need version-2 shards, uint32 ids)")),
    INT_KEY(G_MODEL, "seq_len", seq_len, 1024, AT_LEAST(1), AT_MOST(INT_MAX - 1),
            WHY("a window of seq_len + 1 tokens is counted in a 32-bit integer")),
    CHOICE_KEY(G_MODEL, "arch", arch, "gpt2", "gpt2|llama"),
    CHOICE_KEY(G_MODEL, "norm", norm, "layernorm", "layernorm|rmsnorm"),
    REAL_KEY(G_MODEL, "norm_eps", norm_eps, 1e-5, ABOVE(0), BELOW(1)),
    CHOICE_KEY(G_MODEL, "pos", pos, "learned", "learned|rope"),
    REAL_KEY(G_MODEL, "rope_theta", rope_theta, 10000.0, ABOVE(1), AT_MOST(1e12)),
    CHOICE_KEY(G_MODEL, "rope_scaling", rope_scaling, "none", "none|llama3"),
    REAL_KEY(G_MODEL, "rope_scaling_factor", rope_scaling_factor, 8.0, AT_LEAST(1), AT_MOST(1e6)),
    REAL_KEY(G_MODEL, "rope_low_freq_factor", rope_low_freq_factor, 1.0, ABOVE(0), AT_MOST(1e6)),
    REAL_KEY(G_MODEL, "rope_high_freq_factor", rope_high_freq_factor, 4.0, ABOVE(0), AT_MOST(1e6)),
    INT_KEY(G_MODEL, "rope_original_max_positions", rope_original_max_positions, 8192, AT_LEAST(1),
            AT_MOST(INT_MAX - 1)),
    INT_KEY(G_MODEL, "sliding_window", sliding_window, 0, AT_LEAST(0), AT_MOST(INT_MAX - 1)), /* 0 = none */
    CHOICE_KEY(G_MODEL, "mlp", mlp, "gelu", "gelu|swiglu"),
    INT_KEY(G_MODEL, "n_kv_head", n_kv_head, 0, AT_LEAST(0)), /* 0 = n_head, resolved after parsing */
    BOOL_KEY(G_MODEL, "tie_embeddings", tie_embeddings, true),
    BOOL_KEY(G_MODEL, "bias", bias, true),
    BOOL_KEY(G_MODEL, "qkv_bias", qkv_bias, false),
    REAL_KEY(G_MODEL, "dropout", dropout, 0.0, AT_LEAST(0), BELOW(1)), /* the three below, unless given */
    REAL_KEY(G_MODEL, "attn_dropout", attn_dropout, 0.0, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_MODEL, "resid_dropout", resid_dropout, 0.0, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_MODEL, "embd_dropout", embd_dropout, 0.0, AT_LEAST(0), BELOW(1)),
    CHOICE_KEY(G_MODEL, "init", init_scheme, "gpt2", "gpt2|xavier|kaiming|small"),
    REAL_KEY(G_MODEL, "init_std", init_std, 0.02, ABOVE(0), AT_MOST(1e3)),
    CHOICE_KEY(G_MODEL, "init_depth_scaled", init_depth_scaled, "total", "none|total|layer"),
    INT_KEY(G_MODEL, "n_experts", n_experts, 0, AT_LEAST(0)), /* 0 = dense */
    INT_KEY(G_MODEL, "top_k", top_k_moe, 2, AT_LEAST(1)),     /* <= n_experts */
    INT_KEY(G_MODEL, "moe_every", moe_every, 1, AT_LEAST(1)), /* <= n_layer */
    INT_KEY(G_MODEL, "d_ff_expert", d_ff_expert, 0, AT_LEAST(0)), /* 0 = d_ff */
    REAL_KEY(G_MODEL, "capacity_factor", capacity_factor, 1.25, AT_LEAST(0), AT_MOST(1e6)), /* 0 = dropless */
    CHOICE_KEY(G_MODEL, "drop_policy", drop_policy, "probs", "probs|position"),
    REAL_KEY(G_MODEL, "router_noise", router_noise, 0.0, AT_LEAST(0), AT_MOST(1e3)), /* 0 = off */
    REAL_KEY(G_MODEL, "aux_loss_coef", aux_loss_coef, 0.01, AT_LEAST(0), AT_MOST(1e3)),
    REAL_KEY(G_MODEL, "z_loss_coef", z_loss_coef, 0.001, AT_LEAST(0), AT_MOST(1e3)),
    INT_KEY(G_MODEL, "n_shared_experts", n_shared_experts, 0, AT_LEAST(0), AT_MOST(64)),
    CHOICE_KEY(G_MODEL, "router", router, "linear", "linear|mlp"),
    REAL_KEY(G_MODEL, "collapse_share", moe_collapse_share, 0.5, ABOVE(0), AT_MOST(1)),
    INT_KEY(G_MODEL, "collapse_steps", moe_collapse_steps, 20, AT_LEAST(1)),

    INT_KEY(G_PARALLEL, "dp", dp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "tp", tp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "cp", cp, 1, AT_LEAST(1), AT_MOST(4096)), /* divides seq_len / 2 */
    INT_KEY(G_PARALLEL, "pp", pp, 1, AT_LEAST(1)),
    INT_KEY(G_PARALLEL, "ep", ep, 1, AT_LEAST(1)), /* divides dp and n_experts */
    CHOICE_KEY(G_PARALLEL, "schedule", schedule, "1f1b", "1f1b|gpipe|interleaved|zb-h1"),
    INT_KEY(G_PARALLEL, "virtual_stages", virtual_stages, 1, AT_LEAST(1)), /* interleaved */
    INT_KEY(G_PARALLEL, "zero_stage", zero_stage, 0, AT_LEAST(0), AT_MOST(3)),
    BOOL_KEY(G_PARALLEL, "zero3_resident", zero3_resident, false),
    BOOL_KEY(G_PARALLEL, "sequence_parallel", sequence_parallel, false), /* tp > 1 */
    CHOICE_KEY(G_PARALLEL, "recompute", recompute, "none", "none|selective|full"),
    INT_KEY(G_PARALLEL, "recompute_layers", recompute_layers, -1, AT_LEAST(-1)), /* <= n_layer */
    CHOICE_KEY(G_PARALLEL, "bind", bind, "cores", "cores|none"),
    REAL_KEY(G_PARALLEL, "bucket_mb", bucket_mb, 25.0, ABOVE(0), AT_MOST(1e6),
             WHY("the bucket size is converted to a count of floats")),

    INT_KEY(G_TRAIN, "max_steps", max_steps, 100, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "global_batch", global_batch, 0, AT_LEAST(0)), /* 0 = micro_batch * dp */
    INT_KEY(G_TRAIN, "micro_batch", micro_batch, 4, AT_LEAST(0)), /* 0 = the largest that fits */
    REAL_KEY(G_TRAIN, "lr", lr, 6e-4, ABOVE(0)),
    REAL_KEY(G_TRAIN, "min_lr", min_lr, 0.0, AT_LEAST(0)),
    INT_KEY(G_TRAIN, "warmup_steps", warmup_steps, 0, AT_LEAST(0)),
    CHOICE_KEY(G_TRAIN, "lr_schedule", lr_schedule, "cosine", "cosine|constant|linear|wsd"),
    REAL_KEY(G_TRAIN, "decay_fraction", decay_fraction, 0.2, ABOVE(0), AT_MOST(1)),
    REAL_KEY(G_TRAIN, "weight_decay", weight_decay, 0.1, AT_LEAST(0)),
    REAL_KEY(G_TRAIN, "beta1", beta1, 0.9, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_TRAIN, "beta2", beta2, 0.95, AT_LEAST(0), BELOW(1)),
    REAL_KEY(G_TRAIN, "eps", eps, 1e-8, ABOVE(0)),
    REAL_KEY(G_TRAIN, "grad_clip", grad_clip, 1.0, AT_LEAST(0)),
    REAL_KEY(G_TRAIN, "label_smoothing", label_smoothing, 0.0, AT_LEAST(0), AT_MOST(1)),
    REAL_KEY(G_TRAIN, "z_loss", z_loss, 0.0, AT_LEAST(0), AT_MOST(1e3)),
    CHOICE_KEY(G_TRAIN, "precision", precision, "fp32", "fp32|bf16|fp16"),
    CHOICE_KEY(G_TRAIN, "offload", offload, "none", "none|optimizer"),
    CHOICE_KEY(G_TRAIN, "bf16_products", bf16_products, "auto", "auto|native|emulated"),
    CHOICE_KEY(G_TRAIN, "weights_storage", weights_storage, "auto", "auto|16bit|fp32"),
    CHOICE_KEY(G_TRAIN, "activations_storage", activations_storage, "auto", "auto|16bit|fp32"),
    BOOL_KEY(G_TRAIN, "allow_tf32", allow_tf32, false), /* the CUDA backend's fp32 products */
    REAL_KEY(G_TRAIN, "loss_scale", loss_scale, 0, AT_LEAST(0), AT_MOST(1e30)),
    REAL_KEY(G_TRAIN, "initial_loss_scale", initial_loss_scale, 65536, ABOVE(0), AT_MOST(1e30)),
    INT_KEY(G_TRAIN, "loss_scale_window", loss_scale_window, 1000, AT_LEAST(1)),
    INT_KEY(G_TRAIN, "hysteresis", hysteresis, 2, AT_LEAST(1)),
    REAL_KEY(G_TRAIN, "min_loss_scale", min_loss_scale, 1, ABOVE(0), AT_MOST(1e30)),
    STR_KEY(G_TRAIN, "on_anomaly", on_anomaly, "skip", "warn|skip|rollback|abort", ENUM(on_anomaly, POLICIES)),
    CHOICE_KEY(G_TRAIN, "on_spike", on_spike, "", POLICIES), /* '' = on_anomaly */
    CHOICE_KEY(G_TRAIN, "on_divergence", on_divergence, "", POLICIES),
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
    CHOICE_KEY(G_DATA, "format", data_format, "auto", "auto|llmc|nanogpt"),
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
    REAL_KEY(G_CHECKPOINT, "staging_mb", ckpt_staging_mb, 64, ABOVE(0), AT_MOST(1e6)),
    BOOL_KEY(G_CHECKPOINT, "async", ckpt_async, false), /* unset: device = 'cuda' */

    INT_KEY(G_LOG, "every", log_every, 1, AT_LEAST(1)),
    BOOL_KEY(G_LOG, "jsonl", jsonl, true),
    BOOL_KEY(G_LOG, "tensorboard", tensorboard, true), /* <run dir>/tb/: metrics.jsonl's records as events */
    REAL_KEY(G_LOG, "peak_flops", peak_flops, 0, AT_LEAST(0), AT_MOST(1e18), WHY("FLOP/s of one rank")),
    STR_KEY(G_LOG, "papi_events", papi_events, "", NULL), /* names checked by core/counters.c */
    BOOL_KEY(G_LOG, "profile", profile, false),
    STR_KEY(G_LOG, "profile_steps", profile_steps, "", NULL), /* 'a:b' (check_profile_steps) */
    REAL_KEY(G_LOG, "carbon_intensity", carbon_intensity, 0, AT_LEAST(0), AT_MOST(1e5), WHY("gCO2/kWh")),
    /* 0 = off, else above 1 (check_grad_explosion_ratio). 2: healthy 4-rank runs on 2 shared,
     * oversubscribed cores reached 1.5 (ranks sharing a core are slower in earnest); on
     * dedicated cores a healthy run stays near 1, and a rank twice as busy halves the job */
    REAL_KEY(G_LOG, "straggler_ratio", straggler_ratio, 2, AT_LEAST(0), AT_MOST(1e6),
             WHY("a rank's busy time over its peers' median")),
    /* a slow link between nodes (parallel/linkprobe.h): named at the same straggler_ratio */
    INT_KEY(G_LOG, "link_probe_every", link_probe_every, 50, AT_LEAST(0), AT_MOST(1000000),
            WHY("steps between probes of the links between nodes (3 nodes or more); 0 = off")),
    INT_KEY(G_LOG, "link_probe_kib", link_probe_kib, 256, AT_LEAST(1), AT_MOST(65536),
            WHY("KiB each node's first rank exchanges with each ring neighbour per probe")),

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
const int cfg_n_keys = (int)(sizeof cfg_keys / sizeof cfg_keys[0]);
_Static_assert(sizeof cfg_keys / sizeof cfg_keys[0] <= CFG_MAX_KEYS, "raise CFG_MAX_KEYS in config_internal.h");

/* ---- defaults and derived values ------------------------------------------------------- */

void config_defaults(config_t *cfg) {
    cfg_set_table_defaults(cfg);
    /* d_ff is used directly by the model, so it holds its effective value; global_batch stays 0,
     * which means micro_batch * dp and stays right if a test changes dp or micro_batch. */
    cfg->d_ff = 4 * cfg->d_model;
    snprintf(cfg->resume, sizeof cfg->resume, "none"); /* not given: as resolve_derived says */
    cfg->n_kv_head = cfg->n_head; /* likewise effective (0 in a file means n_head) */
}

int config_kv_heads(const config_t *cfg) { return cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head; }

/* In 64 bits: vocab_size + 127 would overflow an int near INT_MAX (validation bounds
 * vocab_size by INT_MAX / 128 * 128, but tools may call this on an unvalidated config). */
int config_padded_vocab(const config_t *cfg) {
    long long padded = ((long long)cfg->vocab_size + 127) / 128 * 128;
    return padded > INT_MAX ? INT_MAX / 128 * 128 : (int)padded;
}

bool config_weights_16bit_possible(const config_t *cfg) {
    return cfg->choice.precision == CFG_PRECISION_BF16 || cfg->choice.precision == CFG_PRECISION_FP16;
}
