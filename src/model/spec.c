/* spec.c — the model's specification from the run configuration (see spec.h). */
#include "model/spec.h"
#include <string.h>
#include "core/error.h"

static model_storage_t storage(const char *v) {
    return !strcmp(v, "16bit") ? MODEL_STORE_16BIT : !strcmp(v, "fp32") ? MODEL_STORE_FP32
                                                                        : MODEL_STORE_AUTO;
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
        .rmsnorm = !strcmp(cfg->norm, "rmsnorm"),
        .rope = !strcmp(cfg->pos, "rope"),
        .swiglu = !strcmp(cfg->mlp, "swiglu"),
        .tie_embeddings = cfg->tie_embeddings,
        .bias = cfg->bias,
        .norm_eps = cfg->norm_eps,
        .rope_theta = cfg->rope_theta,
        .init_scheme = !strcmp(cfg->init_scheme, "xavier")    ? MODEL_INIT_XAVIER
                       : !strcmp(cfg->init_scheme, "kaiming") ? MODEL_INIT_KAIMING
                       : !strcmp(cfg->init_scheme, "small")   ? MODEL_INIT_SMALL
                                                              : MODEL_INIT_GPT2,
        .init_std = cfg->init_std,
        .init_depth_scaled = !strcmp(cfg->init_depth_scaled, "none")    ? MODEL_DEPTH_NONE
                             : !strcmp(cfg->init_depth_scaled, "layer") ? MODEL_DEPTH_LAYER
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
        .router_mlp = !strcmp(cfg->router, "mlp"),
        .drop_by_position = !strcmp(cfg->drop_policy, "position"),
        .moe_collapse_share = cfg->moe_collapse_share,
        .moe_collapse_steps = cfg->moe_collapse_steps,
        .attn_dropout = cfg->attn_dropout,
        .resid_dropout = cfg->resid_dropout,
        .embd_dropout = cfg->embd_dropout,
        .label_smoothing = cfg->label_smoothing,
        .z_loss = cfg->z_loss,
        .seed = cfg->seed,
        .generate = !strcmp(cfg->mode, "generate"),
        .cuda = !strcmp(cfg->device, "cuda"),
        .precision = dtype_from_name(cfg->precision),
        .bf16_products = !strcmp(cfg->bf16_products, "native")     ? MODEL_PRODUCTS_NATIVE
                         : !strcmp(cfg->bf16_products, "emulated") ? MODEL_PRODUCTS_EMULATED
                                                                   : MODEL_PRODUCTS_AUTO,
        .products_missing = cfg->products_missing,
        .weights_storage = storage(cfg->weights_storage),
        .activations_storage = storage(cfg->activations_storage),
        .recompute = !strcmp(cfg->recompute, "selective") ? MODEL_RECOMPUTE_SELECTIVE
                     : !strcmp(cfg->recompute, "full")    ? MODEL_RECOMPUTE_FULL
                                                          : MODEL_RECOMPUTE_NONE,
        .recompute_layers = cfg->recompute_layers,
    };
    return s;
}

void model_spec_check_grid(const model_spec_t *s, int tp, int pp, const char *source) {
    if (s->n_head % tp || s->d_ff % tp || s->padded_vocab % tp)
        fatal_user("%s: &parallel tp = %d must divide &model n_head (%d), d_ff (%d) and the "
                   "padded vocabulary (%d)", source, tp, s->n_head, s->d_ff, s->padded_vocab);
    /* grouped-query attention: k/v heads split over tp, or replicated (one per rank) */
    const int kv = s->n_kv_head;
    if (kv >= tp ? kv % tp != 0 : tp % kv != 0)
        fatal_user("%s: &model n_kv_head = %d and &parallel tp = %d: the k/v heads are split over "
                   "tp when n_kv_head >= tp (tp must divide it) and replicated when n_kv_head < tp "
                   "(n_kv_head must divide tp)", source, kv, tp);
    if (s->n_experts > 0 && s->d_ff_expert % tp)
        fatal_user("%s: &parallel tp = %d must divide &model d_ff_expert (%d): each expert's MLP is "
                   "split over tp like the dense one", source, tp, s->d_ff_expert);
    if (pp > s->n_layer)
        fatal_user("%s: &parallel pp = %d exceeds &model n_layer = %d (each pipeline stage "
                   "needs at least one layer)", source, pp, s->n_layer);
}
