/* spec.c — the model's specification from the run configuration, and the model's shape rules
 * (see spec.h). */
#include "model/spec.h"
#include "core/error.h"
#include <stdarg.h>
#include <stdio.h>

static model_storage_t storage(cfg_storage_t v) {
    return v == CFG_STORAGE_16BIT ? MODEL_STORE_16BIT : v == CFG_STORAGE_FP32 ? MODEL_STORE_FP32
                                                                              : MODEL_STORE_AUTO;
}

dtype_t model_dtype_of(cfg_precision_t p) {
    return p == CFG_PRECISION_BF16 ? DT_BF16 : p == CFG_PRECISION_FP16 ? DT_FP16 : DT_FP32;
}

model_spec_t model_spec_from_config(const config_t *cfg) {
    model_spec_t s = {
        .n_layer = cfg->n_layer,
        .n_head = cfg->n_head,
        .d_model = cfg->d_model,
        .d_ff = cfg->d_ff,
        .vocab_size = cfg->vocab_size,
        .seq_len = cfg->seq_len,
        .n_kv_head = config_kv_heads(cfg),
        .padded_vocab = config_padded_vocab(cfg),
        .rmsnorm = cfg->choice.norm == CFG_NORM_RMSNORM,
        .rope = cfg->choice.pos == CFG_POS_ROPE,
        .swiglu = cfg->choice.mlp == CFG_MLP_SWIGLU,
        .tie_embeddings = cfg->tie_embeddings,
        .bias = cfg->bias,
        .norm_eps = cfg->norm_eps,
        .rope_theta = cfg->rope_theta,
        .qkv_bias = cfg->qkv_bias,
        .rope_freq = {.theta = cfg->rope_theta,
                      .llama3 = cfg->choice.rope_scaling == CFG_ROPE_SCALING_LLAMA3,
                      .factor = cfg->rope_scaling_factor,
                      .low_freq_factor = cfg->rope_low_freq_factor,
                      .high_freq_factor = cfg->rope_high_freq_factor,
                      .original_max_positions = cfg->rope_original_max_positions},
        .sliding_window = cfg->sliding_window,
        .init_scheme = cfg->choice.init_scheme == CFG_INIT_XAVIER   ? MODEL_INIT_XAVIER
                       : cfg->choice.init_scheme == CFG_INIT_KAIMING ? MODEL_INIT_KAIMING
                       : cfg->choice.init_scheme == CFG_INIT_SMALL   ? MODEL_INIT_SMALL
                                                                     : MODEL_INIT_GPT2,
        .init_std = cfg->init_std,
        .init_depth_scaled = cfg->choice.init_depth_scaled == CFG_DEPTH_NONE    ? MODEL_DEPTH_NONE
                             : cfg->choice.init_depth_scaled == CFG_DEPTH_LAYER ? MODEL_DEPTH_LAYER
                                                                                : MODEL_DEPTH_TOTAL,
        .n_experts = cfg->n_experts,
        .top_k_moe = cfg->top_k_moe,
        .moe_every = cfg->moe_every,
        .d_ff_expert = cfg->d_ff_expert,
        .n_shared_experts = cfg->n_shared_experts,
        .capacity_factor = cfg->capacity_factor,
        .router_noise = cfg->router_noise,
        .aux_loss_coef = cfg->aux_loss_coef,
        .z_loss_coef = cfg->z_loss_coef,
        .router_mlp = cfg->choice.router == CFG_ROUTER_MLP,
        .drop_by_position = cfg->choice.drop_policy == CFG_DROP_POSITION,
        .moe_collapse_share = cfg->moe_collapse_share,
        .moe_collapse_steps = cfg->moe_collapse_steps,
        .attn_dropout = cfg->attn_dropout,
        .resid_dropout = cfg->resid_dropout,
        .embd_dropout = cfg->embd_dropout,
        .label_smoothing = cfg->label_smoothing,
        .z_loss = cfg->z_loss,
        .seed = cfg->seed,
        .generate = cfg->choice.mode == CFG_MODE_GENERATE,
        .cuda = cfg->choice.device == CFG_DEVICE_CUDA,
        .precision = model_dtype_of(cfg->choice.precision),
        .bf16_products = cfg->choice.bf16_products == CFG_BF16_NATIVE     ? MODEL_PRODUCTS_NATIVE
                         : cfg->choice.bf16_products == CFG_BF16_EMULATED ? MODEL_PRODUCTS_EMULATED
                                                                          : MODEL_PRODUCTS_AUTO,
        .products_missing = cfg->products_missing,
        .weights_storage = storage(cfg->choice.weights_storage),
        .activations_storage = storage(cfg->choice.activations_storage),
        .recompute = cfg->choice.recompute == CFG_RECOMPUTE_SELECTIVE ? MODEL_RECOMPUTE_SELECTIVE
                     : cfg->choice.recompute == CFG_RECOMPUTE_FULL    ? MODEL_RECOMPUTE_FULL
                                                                      : MODEL_RECOMPUTE_NONE,
        .recompute_layers = cfg->recompute_layers,
        .sequence_parallel = cfg->sequence_parallel,
    };
    return s;
}

/* ---- the model's shape rules ------------------------------------------------------------ */

/* Ends every rank with "<where keys a and b point>: <fmt ...>" (a, b: "group.key" split in two). */
__attribute__((format(printf, 6, 7)))
static void refuse(const config_positions_t *where, const char *ga, const char *ka, const char *gb,
                   const char *kb, const char *fmt, ...) {
    const config_where_t wa = config_key_where(where, ga, ka), wb = config_key_where(where, gb, kb);
    char start[400], body[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    fatal_user("%s%s", config_where_start(&wa, &wb, start, sizeof start), body);
}

/* A rule between two integer keys whose message says each value and where it came from:
 * `fmt` takes va, a's provenance, vb, b's provenance. */
static void pair_rule(const config_positions_t *where, bool broken, const char *ga, const char *ka, int va,
                      const char *gb, const char *kb, int vb, const char *fmt) {
    if (!broken) return;
    const config_where_t wa = config_key_where(where, ga, ka), wb = config_key_where(where, gb, kb);
    char pa[32], pb[32], body[512];
    snprintf(body, sizeof body, fmt, va, config_where_text(&wa, pa), vb, config_where_text(&wb, pb));
    refuse(where, ga, ka, gb, kb, "%s", body);
}

/* Llama 3.1's rope_scaling and Mistral's sliding window. */
static void rope_rules(const model_spec_t *s, const config_positions_t *where) {
    const rope_freq_t *r = &s->rope_freq;
    if (r->llama3 && !s->rope)
        refuse(where, "model", "rope_scaling", "model", "pos", "&model rope_scaling = 'llama3' adjusts "
               "RoPE's frequencies, but pos = 'learned' (set pos = 'rope' or arch = 'llama')");
    if (r->llama3 && !(r->high_freq_factor > r->low_freq_factor))
        refuse(where, "model", "rope_high_freq_factor", "model", "rope_low_freq_factor", "&model "
               "rope_high_freq_factor = %g must exceed rope_low_freq_factor = %g (rope_scaling = 'llama3' "
               "interpolates between them)", r->high_freq_factor, r->low_freq_factor);
    /* full causal attention equals a sliding window of W positions while seq_len <= W */
    pair_rule(where, s->sliding_window > 0 && s->seq_len > s->sliding_window, "model", "seq_len", s->seq_len,
              "model", "sliding_window", s->sliding_window, "&model seq_len: seq_len = %d (%s) exceeds "
              "sliding_window = %d (%s): llmtrain's attention is full causal attention, which is "
              "Mistral's sliding-window attention only while seq_len <= sliding_window");
}

void model_spec_check(const model_spec_t *s, int ep, const config_positions_t *where) {
    pair_rule(where, s->d_model % s->n_head != 0, "model", "d_model", s->d_model, "model", "n_head", s->n_head,
              "&model d_model: d_model = %d (%s) must be divisible by n_head = %d (%s)");
    /* grouped-query attention: whole groups of query heads per k/v head */
    const bool kv_bad = s->n_kv_head < 1 || s->n_kv_head > s->n_head || s->n_head % s->n_kv_head != 0;
    pair_rule(where, kv_bad, "model", "n_kv_head", s->n_kv_head, "model", "n_head", s->n_head,
              "&model n_kv_head: n_kv_head = %d (%s) must divide n_head = %d (%s)");
    /* RoPE rotates pairs of dimensions (i, i + hs/2) of each head */
    const int hs = s->d_model / s->n_head;
    if (s->rope && hs % 2 != 0)
        refuse(where, "model", "pos", "model", "n_head", "&model pos: 'rope' needs an even head size, but "
               "d_model / n_head = %d / %d = %d", s->d_model, s->n_head, hs);
    rope_rules(s, where);
    const bool moe = s->n_experts > 0;
    pair_rule(where, moe && s->top_k_moe > s->n_experts, "model", "top_k", s->top_k_moe, "model", "n_experts",
              s->n_experts, "&model top_k: top_k = %d (%s) must be <= n_experts = %d (%s)");
    pair_rule(where, moe && s->moe_every > s->n_layer, "model", "moe_every", s->moe_every, "model", "n_layer",
              s->n_layer, "&model moe_every: moe_every = %d (%s) must be <= n_layer = %d (%s) (block l is "
              "an MoE block when l %% moe_every = moe_every - 1)");
    /* each ep rank holds n_experts / ep whole experts of every MoE layer */
    pair_rule(where, ep > 1 && !moe, "parallel", "ep", ep, "model", "n_experts", s->n_experts,
              "&parallel ep: ep = %d (%s) needs a Mixture-of-Experts model, but n_experts = %d (%s)");
    pair_rule(where, ep > 1 && moe && s->n_experts % ep != 0, "parallel", "ep", ep, "model", "n_experts",
              s->n_experts, "&parallel ep: ep = %d (%s) must divide n_experts = %d (%s): each ep rank holds "
              "whole experts");
}

void model_spec_check_grid(const model_spec_t *s, int tp, int pp, const config_positions_t *where) {
    if (s->n_head % tp || s->d_ff % tp || s->padded_vocab % tp)
        refuse(where, "parallel", "tp", "model", "n_head", "&parallel tp = %d must divide &model n_head (%d), "
               "d_ff (%d) and the padded vocabulary (%d)", tp, s->n_head, s->d_ff, s->padded_vocab);
    /* grouped-query attention: k/v heads split over tp, or replicated (one per rank) */
    const int kv = s->n_kv_head;
    if (kv >= tp ? kv % tp != 0 : tp % kv != 0)
        refuse(where, "model", "n_kv_head", "parallel", "tp", "&model n_kv_head = %d and &parallel tp = %d: "
               "the k/v heads are split over tp when n_kv_head >= tp (tp must divide it) and replicated "
               "when n_kv_head < tp (n_kv_head must divide tp)", kv, tp);
    if (s->n_experts > 0 && s->d_ff_expert % tp)
        refuse(where, "parallel", "tp", "model", "d_ff_expert", "&parallel tp = %d must divide &model "
               "d_ff_expert (%d): each expert's MLP is split over tp like the dense one", tp, s->d_ff_expert);
    if (pp > s->n_layer)
        refuse(where, "parallel", "pp", "model", "n_layer", "&parallel pp = %d exceeds &model n_layer = %d "
               "(each pipeline stage needs at least one layer)", pp, s->n_layer);
}
