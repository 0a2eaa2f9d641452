/* spec.h — the model's specification: everything the model reads of the run configuration,
 * built once from it (model_spec_from_config), with the choice keys resolved (enums and flags)
 * and the derived sizes computed (k/v heads, padded vocabulary). gpt_create, the parameter
 * registry, the MoE blocks and the regularisers take this, never config_t.
 * The model's shape rules are here too: model_spec_check (heads and widths, grouped-query
 * attention, RoPE, the experts against top_k, the layers and ep; messages with the namelist's
 * file:line:col of the keys, from config/'s kept positions) and model_spec_check_grid (tp
 * divides the heads, the widths and the padded vocabulary; pp not above the layers).
 * Owns: model_spec_t. Uses: config/ (to build it), kernels/precision.h, core/. Used by: model/,
 * train/, main.c, tools/. */
#ifndef LLMT_MODEL_SPEC_H
#define LLMT_MODEL_SPEC_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"
#include "kernels/precision.h"
#include "kernels/rope_math.h"

typedef enum { MODEL_INIT_GPT2, MODEL_INIT_XAVIER, MODEL_INIT_KAIMING, MODEL_INIT_SMALL } model_init_t;
typedef enum { MODEL_DEPTH_NONE, MODEL_DEPTH_TOTAL, MODEL_DEPTH_LAYER } model_depth_scale_t;
typedef enum { MODEL_RECOMPUTE_NONE, MODEL_RECOMPUTE_SELECTIVE, MODEL_RECOMPUTE_FULL } model_recompute_t;
typedef enum { MODEL_STORE_AUTO, MODEL_STORE_16BIT, MODEL_STORE_FP32 } model_storage_t;
typedef enum { MODEL_PRODUCTS_AUTO, MODEL_PRODUCTS_NATIVE, MODEL_PRODUCTS_EMULATED } model_products_t;

typedef struct model_spec {
    /* shape (&model) */
    int n_layer, n_head, d_model, d_ff, vocab_size, seq_len;
    int n_kv_head;               /* resolved: n_head when the file leaves it 0 */
    int padded_vocab;            /* vocab_size rounded up to a multiple of 128 */
    bool rmsnorm, rope, swiglu;  /* norm, pos, mlp */
    bool tie_embeddings, bias;
    bool qkv_bias;               /* biases on q, k, v (Qwen 2); bias = .true. has them too */
    double norm_eps, rope_theta;
    rope_freq_t rope_freq;       /* rope_theta and the rope_scaling keys (kernels/rope_math.h) */
    int sliding_window;          /* 0 = none; seq_len may not exceed it */
    /* initialisation */
    model_init_t init_scheme;
    double init_std;
    model_depth_scale_t init_depth_scaled;
    /* Mixture-of-Experts */
    int n_experts, top_k_moe, moe_every, d_ff_expert, n_shared_experts;
    double capacity_factor, router_noise, aux_loss_coef, z_loss_coef;
    bool router_mlp;             /* router = 'mlp' (else 'linear') */
    bool drop_by_position;       /* drop_policy = 'position' (else 'probs') */
    double moe_collapse_share;
    int moe_collapse_steps;
    /* regularisers */
    double attn_dropout, resid_dropout, embd_dropout, label_smoothing, z_loss;
    int64_t seed;
    /* how the model runs */
    bool generate;               /* &run mode = 'generate' (dropless MoE) */
    bool cuda;                   /* &run device = 'cuda' */
    dtype_t precision;
    model_products_t bf16_products;
    unsigned products_missing;   /* config_t's CFG_MISSING_* bits (every rank's backends) */
    model_storage_t weights_storage, activations_storage;
    model_recompute_t recompute;
    int recompute_layers;
    bool sequence_parallel;      /* &parallel sequence_parallel (config/ checked tp > 1) */
} model_spec_t;

/* The spec of cfg (validated by config/: every choice is one of its values), read from its
 * enums (cfg->choice), not its strings. */
model_spec_t model_spec_from_config(const config_t *cfg);
/* The storage type of &train precision. */
dtype_t model_dtype_of(cfg_precision_t p);

/* The spec of cfg as a pointer to a temporary (the enclosing block's): for a call site that holds
 * only the configuration, e.g. params_create(&P, MODEL_SPEC_OF(&cfg), 1, 0). */
#define MODEL_SPEC_OF(cfg) ((const model_spec_t[1]){model_spec_from_config(cfg)})

/* The model's shape: n_head divides d_model; n_kv_head divides n_head; RoPE's head size is even;
 * with experts, top_k <= n_experts and moe_every <= n_layer; ep > 1 only with experts, and ep
 * divides n_experts. A broken rule ends every rank with one message, exit 2 (every rank calls it
 * with the same values, so its fatal_user is collective), pointing at the keys it names the way
 * config/'s own messages do: "inputs/x.nml:3:5: &model d_model: d_model = 100 (line 3) must be
 * divisible by n_head = 12 (line 4)". `where`: the configuration's positions (config_t.where).
 * Whoever builds the spec from a loaded configuration runs it first (main.c for every mode and
 * for --plan and --grid, llmmerge for each model it reads). */
void model_spec_check(const model_spec_t *s, int ep, const config_positions_t *where);

/* The model's shape against a grid of tp x pp (every rank calls it with the same values, so its
 * fatal_user is collective): tp divides n_head, d_ff, the padded vocabulary and d_ff_expert;
 * the k/v heads split over tp or replicate; pp not above n_layer. Messages point at the keys
 * as model_spec_check's do (`where`: the configuration's positions). */
void model_spec_check_grid(const model_spec_t *s, int tp, int pp, const config_positions_t *where);
#endif
