/* config_sizes.c — sizes derived from several keys, bounded before anything is allocated.
 * Owns: the counts that must fit the kernels' and MPI's 32-bit integers (ranks, tokens, heads
 * and activations per micro-batch, tokens per step) and the 1 TiB per rank
 * ceiling, each with a message naming the keys and where each came from.
 *
 * Why a second, hand-written count of the GPT here, beside the planner (train/planner.c):
 * the planner's numbers are exact because they are gpt_create run dry (gpt_plan) over a grid
 * and a backend, but config/ sits below model/ and train/ and may not call them, and they
 * need a model that can be built. These bounds must refuse an impossible namelist (a typo of a
 * few digits) while it is read, on every rank, with file:line:col, before a grid or a model
 * exists, and before the planner's own arithmetic could overflow. So what is here is not a
 * plan but a closed-form estimate of one rank's parameters and activations (rank_size_at_least:
 * the largest pipeline stage, alignment and scratch left out; the estimate is GPT-2's block, so
 * the Llama switches and grouped-query attention only shift it) used for one refusal only: more
 * than 1 TiB per rank, a guard against typos rather than a memory check. A rank may hold more
 * than 2^31 parameters: element counts are 64-bit through the registry, ZeRO's partitions and
 * the checkpoint I/O, and communication splits what MPI's int counts cannot take in one call
 * (parallel/comm.h, comm_max_count). It
 * differs in kind from the planner's: 16 bytes per parameter (fp32 weights, gradients, AdamW
 * m and v) and fp32 activations whatever &train precision, the storage keys and ZeRO say, so
 * for a 16-bit or ZeRO run it is not a bound of what the planner will find; whether a run
 * fits its memory is the planner's answer alone (validation/unit/test_config.c holds the
 * refusals at the edges). Uses: config_internal.h, core/alloc.h (format_bytes). */
#include "config/config.h"
#include "config/config_internal.h"
#include "core/alloc.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
        const key_spec_t *k = &cfg_keys[keys[i]];
        snprintf(one, sizeof one, "%s&%s %s: %s", i ? ", " : "", cfg_group_names[k->group], k->key,
                 cfg_provenance(ctx, keys[i], where));
        cfg_append(out, size, one);
    }
}

/* "&group key: <body> (<where each key came from>)", pointing at the first key the file set. */
__attribute__((format(printf, 4, 5)))
static int size_error(parse_ctx_t *ctx, const int *keys, int n, const char *fmt, ...) {
    int line = 0, col = 0, at = -1;
    for (int i = 0; i < n && at < 0; i++)
        if (ctx->set_by[keys[i]]) at = keys[i];
    cfg_locate(ctx, at >= 0 ? at : keys[0], keys[0], &line, &col);
    char body[1024], prov[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    provenances(ctx, keys, n, prov, sizeof prov);
    const key_spec_t *k = &cfg_keys[keys[0]];
    return cfg_error(ctx, line, col, "&%s %s: %s (%s)", cfg_group_names[k->group], k->key, body, prov);
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
    const double kept = cfg->choice.recompute == CFG_RECOMPUTE_SELECTIVE ? N * (4 * C + 4 + 3 * Cl + Fl)
                        : cfg->choice.recompute == CFG_RECOMPUTE_FULL    ? N * C
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
        const double ins = cfg->choice.mlp == CFG_MLP_SWIGLU ? 2 : 1; /* gate and up, or fc */
        const double dense_mlp = C + (2 * F * C + F) / tp;
        const double moe_mlp = E * C + (cfg->choice.router == CFG_ROUTER_MLP ? C * C : 0) +
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
        int k[] = {cfg_key_index(G_PARALLEL, "dp"), cfg_key_index(G_PARALLEL, "tp"), cfg_key_index(G_PARALLEL, "pp")};
        return size_error(ctx, k, 3, "dp * tp * pp = %d * %d * %d = %.0f ranks exceed %.0f (MPI counts ranks in "
                          "32-bit integers)", cfg->dp, cfg->tp, cfg->pp, ranks, INT_LIMIT);
    }
    if (3.0 * cfg->d_model > INT_LIMIT) {
        int k[] = {cfg_key_index(G_MODEL, "d_model")};
        return size_error(ctx, k, 1, "3 * d_model = %.0f (the width of a qkv row) exceeds %.0f, the largest "
                          "dimension the kernels take", 3.0 * cfg->d_model, INT_LIMIT);
    }
    return 0;
}

static int check_batch_sizes(parse_ctx_t *ctx, const config_t *cfg) {
    const int mb = cfg_key_index(G_TRAIN, "micro_batch"), T = cfg_key_index(G_MODEL, "seq_len");
    const double tokens = (double)cfg->micro_batch * cfg->seq_len;
    if (tokens > INT_LIMIT) {
        int k[] = {mb, T};
        return size_error(ctx, k, 2, "micro_batch * seq_len = %d * %d = %.0f tokens per micro-batch exceed %.0f "
                          "(the kernels count them in 32-bit integers)", cfg->micro_batch, cfg->seq_len, tokens,
                          INT_LIMIT);
    }
    const double heads = (double)cfg->micro_batch * cfg->n_head;
    if (heads > INT_LIMIT) {
        int k[] = {mb, cfg_key_index(G_MODEL, "n_head")};
        return size_error(ctx, k, 2, "micro_batch * n_head = %d * %d = %.0f attention heads per micro-batch "
                          "exceed %.0f (the kernels count them in 32-bit integers)", cfg->micro_batch,
                          cfg->n_head, heads, INT_LIMIT);
    }
    const double acts = tokens * cfg->d_model;
    if (acts > INT_LIMIT) {
        int k[] = {mb, T, cfg_key_index(G_MODEL, "d_model")};
        return size_error(ctx, k, 3, "micro_batch * seq_len * d_model = %d * %d * %d = %.0f activations per "
                          "micro-batch exceed %.0f (the kernels take a micro-batch's rows and widths as 32-bit "
                          "integers)", cfg->micro_batch, cfg->seq_len,
                          cfg->d_model, acts, INT_LIMIT);
    }
    const double step_tokens = (double)cfg->global_batch * cfg->seq_len;
    if (step_tokens > INT_LIMIT) {
        int k[] = {cfg_key_index(G_TRAIN, "global_batch"), T, mb, cfg_key_index(G_PARALLEL, "dp")};
        return size_error(ctx, k, cfg->global_batch_derived ? 4 : 2,
                          "global_batch * seq_len = %d%s * %d = %.0f tokens per optimizer step exceed %.0f "
                          "(counted in 32-bit integers)", cfg->global_batch,
                          cfg->global_batch_derived ? " (micro_batch * dp)" : "", cfg->seq_len, step_tokens,
                          INT_LIMIT);
    }
    return 0;
}

static int check_rank_memory(parse_ctx_t *ctx, const config_t *cfg) {
    const int model_keys[] = {cfg_key_index(G_MODEL, "d_model"), cfg_key_index(G_MODEL, "n_layer"),
                              cfg_key_index(G_MODEL, "d_ff"), cfg_key_index(G_MODEL, "vocab_size"),
                              cfg_key_index(G_PARALLEL, "tp"), cfg_key_index(G_PARALLEL, "pp")};
    const int moe_keys[] = {cfg_key_index(G_MODEL, "n_experts"), cfg_key_index(G_MODEL, "d_ff_expert"),
                            cfg_key_index(G_MODEL, "d_model"), cfg_key_index(G_PARALLEL, "ep"),
                            cfg_key_index(G_PARALLEL, "tp"), cfg_key_index(G_PARALLEL, "pp")};
    double pbytes, abytes, total = rank_bytes_at_least(cfg, &pbytes, &abytes);
    if (total <= RANK_BYTES_LIMIT) return 0;
    char t[32], pb[32], ab[32];
    format_bytes(total, t);
    format_bytes(pbytes, pb);
    format_bytes(abytes, ab);
    const int act_keys[] = {cfg_key_index(G_TRAIN, "micro_batch"), cfg_key_index(G_MODEL, "seq_len"),
                            cfg_key_index(G_MODEL, "d_model"), cfg_key_index(G_MODEL, "n_head"),
                            cfg_key_index(G_MODEL, "n_layer")};
    const bool acts = abytes > pbytes;
    const bool moe = !acts && cfg->n_experts > 0; /* the experts' keys first */
    return size_error(ctx, acts ? act_keys : moe ? moe_keys : model_keys, acts ? 5 : 6,
                      "one rank needs at least %s (parameters, gradients and AdamW moments: %s; activations "
                      "for micro_batch = %d, seq_len = %d: %s), more than the 1 TiB llmtrain accepts per rank: "
                      "use a smaller %s, a larger &parallel %s%s", t, pb, cfg->micro_batch, cfg->seq_len, ab,
                      acts ? "micro_batch or seq_len" : moe ? "model or fewer or narrower experts" : "model",
                      moe ? "ep, tp or pp" : "tp or pp",
                      acts && cfg->choice.recompute != CFG_RECOMPUTE_FULL ? ", or &parallel recompute = 'full'" : "");
}

int cfg_check_sizes(parse_ctx_t *ctx, const config_t *cfg) {
    if (check_grid_and_rows(ctx, cfg) || check_batch_sizes(ctx, cfg) || check_rank_memory(ctx, cfg)) return -1;
    return 0;
}
