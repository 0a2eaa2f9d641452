/* config_checks.c — the checks that need more than one key, and the values derived from several.
 * Owns: where a value came from in messages (line, command-line argument or default), arch's
 * defaults of the Llama switches, dropout's of the three dropouts, d_ff / global_batch / resume
 * when not given, and the rules between keys of the run (batch geometry, the interleaved
 * schedule, precision and its storage and loss-scaling keys, ep within dp, mode and its inputs,
 * the data mixture, profile steps); cfg_check_cross_keys runs them, then the &stage checks
 * (stages.c) and the sizes (config_sizes.c). The rules on the model's shape (heads and widths,
 * grouped-query attention, RoPE, the experts against top_k, the layers and ep) are the model's:
 * model/spec.c model_spec_check, run by whoever builds the spec, with the positions this file's
 * loader keeps (config_where.c). Uses: config_internal.h, stages.h, core/error.h. */
#include "config/config.h"
#include "config/config_internal.h"
#include "config/stages.h"
#include "core/error.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* ---- checks that need more than one key -------------------------------------------------- */

/* "line 7" if the file set key k, "command line argument 2" if an override did, else "default" —
 * cross-key messages name where each came from. */
const char *cfg_provenance(const parse_ctx_t *ctx, int k, char buf[32]) {
    const nl_entry_t *e = ctx->set_by[k];
    const config_where_t w = {.line = e && e->line > 0 ? e->line : 0,
                              .argno = e && e->line < 0 ? ctx->over[-1 - e->line].argno : 0};
    return config_where_text(&w, buf); /* the wording of the rules above config/ too */
}

/* Where to point for a check on keys a and b: the first one the file set, else a group header
 * of theirs, else the top of the file. */
void cfg_locate(const parse_ctx_t *ctx, int a, int b, int *line, int *col) {
    const nl_entry_t *e = ctx->set_by[a] ? ctx->set_by[a] : ctx->set_by[b];
    const nl_group_t *g = ctx->group_at[cfg_keys[a].group];
    if (!g) g = ctx->group_at[cfg_keys[b].group];
    *line = e ? e->line : g ? g->line : 1;
    *col = e ? e->col : g ? g->col : 1;
}

/* &model arch = 'llama' sets the defaults of the switches it names; one set in the namelist or
 * on the command line keeps its value. n_kv_head = 0 means n_head. Runs before the checks.
 * A default that depends on another key, like d_ff's and the dropouts': the configuration holds
 * the resolved values, which the echo, --keys' users and the checkpoint attributes read. */
static void resolve_arch(parse_ctx_t *ctx, config_t *cfg) {
    if (cfg->choice.arch == CFG_ARCH_LLAMA) {
        const struct { const char *key, *value; } strs[] = {
            {"norm", "rmsnorm"}, {"pos", "rope"}, {"mlp", "swiglu"}};
        for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
            const int k = cfg_key_index(G_MODEL, strs[i].key);
            if (!ctx->set_by[k]) cfg_store_choice(cfg, &cfg_keys[k], strs[i].value);
        }
        if (!ctx->set_by[cfg_key_index(G_MODEL, "tie_embeddings")]) cfg->tie_embeddings = false;
        if (!ctx->set_by[cfg_key_index(G_MODEL, "bias")]) cfg->bias = false;
    }
    if (cfg->n_kv_head == 0) cfg->n_kv_head = cfg->n_head;
}

static int check_global_batch(parse_ctx_t *ctx, const config_t *cfg) {
    int a = cfg_key_index(G_TRAIN, "global_batch"), b = cfg_key_index(G_TRAIN, "micro_batch");
    int c = cfg_key_index(G_PARALLEL, "dp"), line, col;
    char pa[32], pb[32], pc[32];
    if (cfg->micro_batch == 0) { /* chosen at startup: needs the global batch it must divide */
        if (cfg->global_batch > 0 && cfg->global_batch % cfg->dp == 0) return 0;
        cfg_locate(ctx, b, a, &line, &col);
        return cfg_error(ctx, line, col, "&train micro_batch: micro_batch = 0 (the largest that fits "
                         "the memory limit) needs a global_batch that dp = %d divides; global_batch "
                         "= %d (%s)", cfg->dp, cfg->global_batch, cfg_provenance(ctx, a, pa));
    }
    long long per_step = (long long)cfg->micro_batch * cfg->dp;
    if (cfg->global_batch == 0 || cfg->global_batch % per_step == 0) return 0;
    cfg_locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col,
                     "&train global_batch: global_batch = %d (%s) must be a multiple of micro_batch * dp = "
                     "%d * %d = %lld (&train micro_batch: %s, &parallel dp: %s)",
                     cfg->global_batch, cfg_provenance(ctx, a, pa), cfg->micro_batch, cfg->dp, per_step,
                     cfg_provenance(ctx, b, pb), cfg_provenance(ctx, c, pc));
}

static int check_min_lr(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->min_lr <= cfg->lr) return 0;
    int a = cfg_key_index(G_TRAIN, "min_lr"), b = cfg_key_index(G_TRAIN, "lr"), line, col;
    char pa[32], pb[32];
    cfg_locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col, "&train min_lr: min_lr = %g (%s) must be <= lr = %g (%s)", cfg->min_lr,
                     cfg_provenance(ctx, a, pa), cfg->lr, cfg_provenance(ctx, b, pb));
}

static int check_recompute_layers(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->recompute_layers <= cfg->n_layer) return 0;
    int a = cfg_key_index(G_PARALLEL, "recompute_layers"), b = cfg_key_index(G_MODEL, "n_layer"), line, col;
    char pa[32], pb[32];
    cfg_locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col,
                     "&parallel recompute_layers: recompute_layers = %d (%s) must be <= n_layer = %d (%s); "
                     "-1 recomputes every block", cfg->recompute_layers, cfg_provenance(ctx, a, pa), cfg->n_layer,
                     cfg_provenance(ctx, b, pb));
}

static int check_mode_inputs(parse_ctx_t *ctx, const config_t *cfg) {
    int m = cfg_key_index(G_RUN, "mode"), line, col;
    char pm[32];
    if (cfg->choice.mode == CFG_MODE_TRAIN && cfg->train_files[0] == '\0' && !stages_have_data(cfg)) {
        int f = cfg_key_index(G_DATA, "train_files");
        cfg_locate(ctx, f, m, &line, &col);
        return cfg_error(ctx, line, col,
                         "&data train_files: must be set when &run mode = 'train' (%s), "
                         "e.g. train_files = 'data/train_*.bin' (or &data mixture)", cfg_provenance(ctx, m, pm));
    }
    if (cfg->choice.mode == CFG_MODE_GENERATE && cfg->n_prompt_ids < 1 && cfg->prompt[0] == '\0') {
        int p = cfg_key_index(G_RUN, "prompt_ids");
        cfg_locate(ctx, p, m, &line, &col);
        return cfg_error(ctx, line, col,
                         "&run prompt_ids: mode = 'generate' (%s) needs at least one prompt id "
                         "(n_prompt_ids >= 1), e.g. prompt_ids = 50256, or a text prompt with "
                         "&data tokenizer", cfg_provenance(ctx, m, pm));
    }
    if (cfg->prompt[0] != '\0' && cfg->tokenizer[0] == '\0') {
        int p = cfg_key_index(G_RUN, "prompt"), t = cfg_key_index(G_DATA, "tokenizer");
        cfg_locate(ctx, t, p, &line, &col);
        return cfg_error(ctx, line, col,
                         "&data tokenizer: a text prompt (&run prompt) needs a tokenizer file, "
                         "e.g. tokenizer = 'data/gpt2/gpt2.tiktoken'");
    }
    return 0;
}

static int check_prompt_in_vocab(parse_ctx_t *ctx, const config_t *cfg) {
    int p = cfg_key_index(G_RUN, "prompt_ids"), v = cfg_key_index(G_MODEL, "vocab_size");
    char pv[32];
    for (int i = 0; i < cfg->n_prompt_ids; i++) {
        if (cfg->prompt_ids[i] < cfg->vocab_size) continue;
        const nl_value_t *val = &ctx->set_by[p]->values[i];
        return cfg_error(ctx, val->line, val->col,
                         "&run prompt_ids: id %d must be < vocab_size = %d (&model vocab_size: %s)",
                         cfg->prompt_ids[i], cfg->vocab_size, cfg_provenance(ctx, v, pv));
    }
    return 0;
}

/* The interleaved schedule: virtual_stages v >= 2 chunks per stage, pp >= 2, n_layer divisible
 * by pp * v (equal chunks); and v > 1 only with it. (Micro-batches a multiple of pp: checked
 * where their number is known, train/schedule.c.) */
static int check_virtual_stages(parse_ctx_t *ctx, const config_t *cfg) {
    const bool il = cfg->choice.schedule == CFG_SCHED_INTERLEAVED;
    const int v = cfg->virtual_stages, p = cfg->pp, L = cfg->n_layer;
    int a = cfg_key_index(G_PARALLEL, "virtual_stages"), s = cfg_key_index(G_PARALLEL, "schedule"), line, col;
    char pa[32], ps[32];
    cfg_locate(ctx, a, s, &line, &col);
    if (!il && v > 1)
        return cfg_error(ctx, line, col, "&parallel virtual_stages = %d (%s) needs schedule = "
                         "'interleaved' (got '%s'), or set virtual_stages = 1", v,
                         cfg_provenance(ctx, a, pa), cfg->schedule);
    if (!il) return 0;
    if (p < 2)
        return cfg_error(ctx, line, col, "&parallel virtual_stages: schedule = 'interleaved' (%s) "
                         "needs pp >= 2, got pp = %d; use pp >= 2, or schedule = '1f1b' with "
                         "virtual_stages = 1", cfg_provenance(ctx, s, ps), p);
    if (v < 2)
        return cfg_error(ctx, line, col, "&parallel virtual_stages = %d (%s): schedule = "
                         "'interleaved' needs virtual_stages >= 2 (with one chunk per stage it is "
                         "'1f1b')", v, cfg_provenance(ctx, a, pa));
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
                         "virtual_stages in {%s} for pp = %d", v, cfg_provenance(ctx, a, pa), L, p * v,
                         near, at ? ok : "none", p);
    }
    return 0;
}

/* ZB-H1's post-validation keeps copies of the optimizer state beside it in device memory, to
 * undo an optimistic update: not with the state on the host. */
static int check_offload(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->choice.offload != CFG_OFFLOAD_OPTIMIZER || cfg->choice.schedule != CFG_SCHED_ZB_H1) return 0;
    int o = cfg_key_index(G_TRAIN, "offload"), s = cfg_key_index(G_PARALLEL, "schedule"), line, col;
    char ps[32];
    cfg_locate(ctx, o, s, &line, &col);
    return cfg_error(ctx, line, col, "&train offload = 'optimizer' cannot be used with &parallel "
                     "schedule = 'zb-h1' (%s): its post-validation undoes updates from device "
                     "copies of the optimizer state; use schedule = '1f1b', or offload = 'none'",
                     cfg_provenance(ctx, s, ps));
}

/* weights_storage / activations_storage = '16bit' needs values rounded to 16 bits: a bf16/fp16
 * run (`what`: what the key stores). */
static int check_storage_key(parse_ctx_t *ctx, const config_t *cfg, const char *key,
                             cfg_storage_t value, const char *what) {
    if (value != CFG_STORAGE_16BIT || config_weights_16bit_possible(cfg)) return 0;
    int w = cfg_key_index(G_TRAIN, key), p = cfg_key_index(G_TRAIN, "precision"), line, col;
    cfg_locate(ctx, w, p, &line, &col);
    return cfg_error(ctx, line, col, "&train %s = '16bit' needs a 16-bit %s, and &train precision "
                     "= 'fp32' has none; use precision = 'bf16' or 'fp16', or %s = 'auto'", key,
                     what, key);
}

static int check_storage(parse_ctx_t *ctx, const config_t *cfg) {
    return check_storage_key(ctx, cfg, "weights_storage", cfg->choice.weights_storage, "weights copy") ||
           check_storage_key(ctx, cfg, "activations_storage", cfg->choice.activations_storage,
                             "activation type");
}

/* Generation runs the whole model on each rank: any saved file loads on any grid. */
static int check_generate_grid(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->pp == 1 || cfg->choice.mode != CFG_MODE_GENERATE) return 0;
    int m = cfg_key_index(G_RUN, "mode"), p = cfg_key_index(G_PARALLEL, "pp"), line, col;
    char pm[32], pp[32];
    cfg_locate(ctx, p, m, &line, &col);
    return cfg_error(ctx, line, col,
                     "&parallel pp: mode = 'generate' (%s) runs with pp = 1, got pp = %d (%s); weights "
                     "saved on any grid load there", cfg_provenance(ctx, m, pm), cfg->pp, cfg_provenance(ctx, p, pp));
}

/* Loss scaling is fp16's: its keys set with another precision would do nothing, and a dynamic
 * scaler that starts below its floor cannot work. */
static const char *const fp16_keys[] = {"loss_scale", "initial_loss_scale", "loss_scale_window",
                                        "hysteresis", "min_loss_scale"};
#define N_FP16_KEYS (sizeof fp16_keys / sizeof fp16_keys[0])

bool cfg_is_fp16_key(const key_spec_t *ks) {
    for (size_t i = 0; i < N_FP16_KEYS; i++)
        if (ks->group == G_TRAIN && !strcmp(ks->key, fp16_keys[i])) return true;
    return false;
}

static int check_loss_scaling(parse_ctx_t *ctx, const config_t *cfg) {
    const char *const *keys = fp16_keys;
    int pr = cfg_key_index(G_TRAIN, "precision"), line, col;
    char pp[32];
    for (size_t i = 0; i < N_FP16_KEYS && cfg->choice.precision != CFG_PRECISION_FP16; i++) {
        int k = cfg_key_index(G_TRAIN, keys[i]);
        if (!ctx->set_by[k]) continue;
        cfg_locate(ctx, k, pr, &line, &col);
        return cfg_error(ctx, line, col, "&train %s: loss scaling is for precision = 'fp16', but "
                         "precision = '%s' (%s); remove the key", keys[i], cfg->precision,
                         cfg_provenance(ctx, pr, pp));
    }
    if (cfg->loss_scale == 0 && cfg->min_loss_scale > cfg->initial_loss_scale) {
        int a = cfg_key_index(G_TRAIN, "min_loss_scale"), b = cfg_key_index(G_TRAIN, "initial_loss_scale");
        char pa[32], pb[32];
        cfg_locate(ctx, a, b, &line, &col);
        return cfg_error(ctx, line, col, "&train min_loss_scale: min_loss_scale = %g (%s) must be <= "
                         "initial_loss_scale = %g (%s)", cfg->min_loss_scale, cfg_provenance(ctx, a, pa),
                         cfg->initial_loss_scale, cfg_provenance(ctx, b, pb));
    }
    return 0;
}

/* Validation every val_every steps needs data to validate on; without it nothing would run. */
static int check_val_files(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->val_every == 0 || cfg->val_files[0] != '\0' || cfg->choice.mode != CFG_MODE_TRAIN) return 0;
    int e = cfg_key_index(G_DATA, "val_every"), f = cfg_key_index(G_DATA, "val_files"), line, col;
    char pe[32];
    cfg_locate(ctx, e, f, &line, &col);
    return cfg_error(ctx, line, col,
                     "&data val_files: val_every = %d (%s) asks for validation, but val_files is not set; "
                     "set val_files = 'data/val_*.bin' or val_every = 0", cfg->val_every, cfg_provenance(ctx, e, pe));
}

/* &data mixture: its syntax and weights (config/stages.h), and not together with train_files. */
static int check_data_mixture(parse_ctx_t *ctx, const config_t *cfg) {
    if (!cfg->mixture[0]) return 0;
    int m = cfg_key_index(G_DATA, "mixture"), f = cfg_key_index(G_DATA, "train_files"), line, col;
    char err[512], pf[32];
    cfg_locate(ctx, m, f, &line, &col);
    if (cfg->train_files[0])
        return cfg_error(ctx, line, col, "&data mixture: set train_files (%s) or mixture, not both",
                         cfg_provenance(ctx, f, pf));
    mix_spec_t mix;
    if (mixture_parse(cfg->mixture, &mix, err, sizeof err) != 0)
        return cfg_error(ctx, line, col, "&data mixture: %s", err);
    return 0;
}

/* &log profile_steps = 'a:b': whole numbers 1 <= a <= b, and only with profile = .true. */
static int check_profile_steps(parse_ctx_t *ctx, config_t *cfg) {
    const char *t = cfg->profile_steps;
    if (!t[0]) return 0;
    int k = cfg_key_index(G_LOG, "profile_steps"), pr = cfg_key_index(G_LOG, "profile"), line, col;
    cfg_locate(ctx, k, pr, &line, &col);
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

/* The expert-parallel group is made of data-parallel ranks: ep divides dp. (The rules between ep
 * and the experts, like every rule on the model's shape, are the model's: model/spec.c.) */
static int check_ep_divides_dp(parse_ctx_t *ctx, const config_t *cfg) {
    if (cfg->dp % cfg->ep == 0) return 0;
    int a = cfg_key_index(G_PARALLEL, "ep"), b = cfg_key_index(G_PARALLEL, "dp"), line, col;
    char pa[32], pb[32];
    cfg_locate(ctx, a, b, &line, &col);
    return cfg_error(ctx, line, col, "&parallel ep: ep = %d (%s) must divide dp = %d (%s): the "
                     "expert-parallel group is made of data-parallel ranks", cfg->ep,
                     cfg_provenance(ctx, a, pa), cfg->dp, cfg_provenance(ctx, b, pb));
}

/* Sequence parallelism splits the token rows of the tensor-parallel group: tp > 1, and every
 * sequence length a run uses (&model seq_len, each &stage's) divisible by tp (with cp > 1 the
 * ring's rule asks seq_len / cp). Generation runs prompts of any length: refused. The rule cfg
 * breaks (SP_OK: none, or sequence_parallel off), for the parser and config_sp_error; *bad: the
 * seq_len not divisible by tp. */
typedef enum { SP_OK, SP_NEEDS_TP, SP_GENERATE, SP_SEQ_LEN } sp_rule_t;

static sp_rule_t sp_rule_broken(const config_t *cfg, int *bad) {
    *bad = 0;
    if (!cfg->sequence_parallel) return SP_OK;
    if (cfg->tp == 1) return SP_NEEDS_TP;
    if (cfg->choice.mode == CFG_MODE_GENERATE) return SP_GENERATE;
    *bad = cfg->seq_len % cfg->tp ? cfg->seq_len : 0;
    for (int i = 0; i < cfg->n_stages && !*bad; i++)
        if (cfg->stages[i].key_line[STAGE_SEQ_LEN] && cfg->stages[i].seq_len % cfg->tp)
            *bad = cfg->stages[i].seq_len;
    return *bad ? SP_SEQ_LEN : SP_OK;
}

/* The refusal of a broken sequence-parallel rule, pointing at its key. */
static int check_sequence_parallel(parse_ctx_t *ctx, const config_t *cfg) {
    int bad;
    const sp_rule_t r = sp_rule_broken(cfg, &bad);
    if (r == SP_OK) return 0;
    int k = cfg_key_index(G_PARALLEL, "sequence_parallel"), t = cfg_key_index(G_PARALLEL, "tp");
    int s = cfg_key_index(G_MODEL, "seq_len"), line, col;
    char pk[32], pt[32];
    cfg_locate(ctx, k, t, &line, &col);
    if (r == SP_NEEDS_TP)
        return cfg_error(ctx, line, col, "&parallel sequence_parallel: .true. (%s) needs tp > 1, got "
                         "tp = 1 (%s): it splits the tensor-parallel group's tokens",
                         cfg_provenance(ctx, k, pk), cfg_provenance(ctx, t, pt));
    if (r == SP_GENERATE)
        return cfg_error(ctx, line, col, "&parallel sequence_parallel: mode = 'generate' runs prompts "
                         "of any length: set sequence_parallel = .false. (%s)", cfg_provenance(ctx, k, pk));
    cfg_locate(ctx, s, t, &line, &col);
    return cfg_error(ctx, line, col, "&model seq_len: sequence_parallel (%s) needs seq_len divisible "
                     "by tp = %d (%s), got seq_len = %d%s", cfg_provenance(ctx, k, pk), cfg->tp,
                     cfg_provenance(ctx, t, pt), bad, bad == cfg->seq_len ? "" : " (a &stage's)");
}

const char *config_sp_error(const config_t *cfg, char *buf, size_t len) {
    int bad;
    switch (sp_rule_broken(cfg, &bad)) {
    case SP_OK: return NULL;
    case SP_NEEDS_TP: snprintf(buf, len, "&parallel sequence_parallel needs tp > 1"); break;
    case SP_GENERATE:
        snprintf(buf, len, "&parallel sequence_parallel cannot run mode = 'generate'");
        break;
    case SP_SEQ_LEN:
        snprintf(buf, len, "&parallel sequence_parallel needs seq_len divisible by tp = %d, got %d",
                 cfg->tp, bad);
        break;
    }
    return buf;
}

/* A broken rule of context parallelism: the key it points at (group g, `key`; NULL: cp itself;
 * stage >= 0: that &stage's seq_len) and why, the text after "&parallel cp: cp > 1 (...) ". */
typedef struct cp_rule {
    int g, stage;
    const char *key;
    char why[256];
} cp_rule_t;

static bool cp_broken(cp_rule_t *r, int g, const char *key, const char *why) {
    r->g = g, r->key = key, r->stage = -1;
    snprintf(r->why, sizeof r->why, "%s", why);
    return true;
}

/* The rules of context parallelism on one sequence length T (&model's, or stage `stage`'s):
 * 2 cp chunks, and with sequence parallelism T / cp split over tp. */
static bool cp_seq_len_broken(const config_t *cfg, int T, int stage, cp_rule_t *r) {
    char s[200];
    const bool chunks = T % (2 * cfg->cp) == 0;
    if (chunks && !(cfg->sequence_parallel && T / cfg->cp % cfg->tp)) return false;
    if (!chunks)
        snprintf(s, sizeof s, "cuts each sequence into 2 cp chunks: seq_len / 2 must be divisible "
                 "by cp, got seq_len = %d", T);
    else
        snprintf(s, sizeof s, "with sequence_parallel needs seq_len / cp divisible by tp (a rank's "
                 "tokens split over tp), got seq_len = %d", T);
    if (chunks && stage < 0) cp_broken(r, G_PARALLEL, "sequence_parallel", s);
    else cp_broken(r, G_MODEL, "seq_len", s);
    r->stage = stage;
    return true;
}

/* Context parallelism (model/ring.c) cuts each sequence into 2 cp chunks: seq_len / 2 divisible
 * by cp, &model's and every &stage's own (the ring's buffers are sized for &model's, the
 * largest). What the ring does not carry is refused by name: generation (prompts of any
 * length), the CUDA device (no GPU kernel of the ring's blocks yet; unless any_device). The
 * experts run (model/moe.c plans the whole micro-batch's routing over cp), and so do attention
 * dropout (the blocks draw the mask at global positions) and a sliding window (full causal
 * attention while seq_len <= sliding_window, model/spec.c: the ring's too). True and r filled
 * when cfg (cp > 1, dropouts resolved) breaks one. */
static bool cp_rule_broken(const config_t *cfg, bool any_device, cp_rule_t *r) {
    if (cfg->cp == 1) return false;
    if (cp_seq_len_broken(cfg, cfg->seq_len, -1, r)) return true;
    for (int i = 0; i < cfg->n_stages; i++)
        if (cfg->stages[i].key_line[STAGE_SEQ_LEN] && cp_seq_len_broken(cfg, cfg->stages[i].seq_len, i, r))
            return true;
    if (cfg->choice.mode == CFG_MODE_GENERATE)
        return cp_broken(r, G_RUN, "mode", "cannot run mode = 'generate' (prompts of any length): "
                         "set &parallel cp = 1");
    if (!any_device && cfg->choice.device == CFG_DEVICE_CUDA)
        return cp_broken(r, G_RUN, "device", "runs on device = 'cpu' only: the ring attention has "
                         "no CUDA kernel yet");
    return false;
}

const char *config_cp_error(const config_t *cfg, bool any_device, char *buf, size_t len) {
    cp_rule_t r;
    if (!cp_rule_broken(cfg, any_device, &r)) return NULL;
    if (r.stage >= 0)
        snprintf(buf, len, "&parallel cp = %d: &stage %d's seq_len: %s", cfg->cp, r.stage + 1, r.why);
    else
        snprintf(buf, len, "&parallel cp = %d: %s", cfg->cp, r.why);
    return buf;
}

/* The refusal of a broken rule, pointing at its key (or at cp; a &stage's seq_len: at that
 * key, named as stages.c names it). Runs after the dropouts are resolved. */
static int check_context_parallel(parse_ctx_t *ctx, const config_t *cfg) {
    cp_rule_t r;
    if (!cp_rule_broken(cfg, false, &r)) return 0;
    int k = cfg_key_index(G_PARALLEL, "cp"), o = r.key ? cfg_key_index(r.g, r.key) : k, line, col;
    char pk[32];
    if (r.stage >= 0) {
        const cfg_stage_t *st = &cfg->stages[r.stage];
        return cfg_error(ctx, st->key_line[STAGE_SEQ_LEN], st->key_col[STAGE_SEQ_LEN], "&stage "
                         "seq_len (stage %d of %d): &parallel cp > 1 (%s) %s", r.stage + 1,
                         cfg->n_stages, cfg_provenance(ctx, k, pk), r.why);
    }
    cfg_locate(ctx, o, k, &line, &col);
    return cfg_error(ctx, line, col, "&parallel cp: cp > 1 (%s) %s", cfg_provenance(ctx, k, pk), r.why);
}

/* A threshold ratio of at most 1 would fire on ordinary values: every step an explosion (the
 * gradient norm against its window's median), every run's slowest rank a straggler (a rank's
 * busy time against its peers'). 0 = off. */
static int check_ratio_off_or_above_1(parse_ctx_t *ctx, int g, const char *key, double v,
                                      const char *what) {
    if (v == 0 || v > 1) return 0;
    int k = cfg_key_index(g, key), line, col;
    cfg_locate(ctx, k, k, &line, &col);
    return cfg_error(ctx, line, col, "&%s %s: must be 0 (off) or above 1 (%s), got %g",
                     cfg_group_names[g], key, what, v);
}

static int check_grad_explosion_ratio(parse_ctx_t *ctx, const config_t *cfg) {
    return check_ratio_off_or_above_1(ctx, G_TRAIN, "grad_explosion_ratio", cfg->grad_explosion_ratio,
                                      "a multiple of the median gradient norm") ||
           check_ratio_off_or_above_1(ctx, G_LOG, "straggler_ratio", cfg->straggler_ratio,
                                      "a multiple of the median busy time of a rank's peers");
}

/* &model dropout sets attn_dropout, resid_dropout and embd_dropout, each unless given itself. */
static void resolve_dropout(const parse_ctx_t *ctx, config_t *cfg) {
    const char *keys[] = {"attn_dropout", "resid_dropout", "embd_dropout"};
    double *fields[] = {&cfg->attn_dropout, &cfg->resid_dropout, &cfg->embd_dropout};
    for (int i = 0; i < 3; i++)
        if (!ctx->set_by[cfg_key_index(G_MODEL, keys[i])]) *fields[i] = cfg->dropout;
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
    cfg->device_memory = cfg->choice.device == CFG_DEVICE_CUDA;
    /* &checkpoint async unset: on where a device computes (the rank's host cores wait for it),
     * off on the CPU (the writer thread takes the cores the step computes on: docs/checkpoints.md) */
    if (!ctx->set_by[cfg_key_index(G_CHECKPOINT, "async")])
        cfg->ckpt_async = cfg->choice.device == CFG_DEVICE_CUDA;
    cfg->resume_given = cfg->resume[0] != '\0';
    if (!cfg->resume_given) snprintf(cfg->resume, sizeof cfg->resume, "none");
    if (cfg->global_batch == 0) cfg->global_batch = (int)global_batch;
    return 0;
}

int cfg_check_cross_keys(parse_ctx_t *ctx, config_t *cfg) {
    if (cfg_expand_paths(ctx, cfg) != 0) return -1;
    resolve_arch(ctx, cfg);
    if (check_loss_scaling(ctx, cfg) || check_global_batch(ctx, cfg) ||
        check_min_lr(ctx, cfg) || check_mode_inputs(ctx, cfg) || check_prompt_in_vocab(ctx, cfg) ||
        check_generate_grid(ctx, cfg) || check_val_files(ctx, cfg) || check_recompute_layers(ctx, cfg) ||
        check_virtual_stages(ctx, cfg) || check_profile_steps(ctx, cfg) || check_grad_explosion_ratio(ctx, cfg) ||
        check_data_mixture(ctx, cfg) || check_ep_divides_dp(ctx, cfg) || check_offload(ctx, cfg) ||
        check_storage(ctx, cfg) || check_sequence_parallel(ctx, cfg))
        return -1;
    if (resolve_derived(ctx, cfg) != 0 || check_context_parallel(ctx, cfg) != 0) return -1;
    if (stages_check(cfg, ctx->msg, ctx->msgsize) != 0) return -1;
    return cfg_check_sizes(ctx, cfg);
}
