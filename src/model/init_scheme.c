/* init_scheme.c — the standard deviation of every normally initialised parameter, from
 * &model init, init_std and init_depth_scaled (see params.h, params_apply_init_scheme).
 * The values themselves are drawn by params_init, keyed by (seed, name, global element index),
 * so every scheme is grid-invariant. Uses: model/params, config/. Used by: params.c.
 *
 * For a matrix w[out, in] (PyTorch's layout) with fan_in = in and fan_out = out (the fused qkv
 * counts as three [C, C] matrices: fan_out = C):
 *   'gpt2'    std = init_std                               (GPT-2, Megatron: 0.02)
 *   'xavier'  std = sqrt(2 / (fan_in + fan_out))           (Glorot & Bengio 2010, normal, gain 1)
 *   'kaiming' std = sqrt(2 / fan_in)                       (He et al. 2015; PyTorch's
 *                                                           kaiming_normal_ defaults)
 *   'small'   std = sqrt(2 / (5 d_model))                  (Nguyen & Salazar 2019, "small init")
 * The embeddings wte and wpe are N(0, init_std) under every scheme. Then the matrices that write
 * into the residual stream (attn.proj.w, mlp.proj.w, the experts' proj.w) are scaled by init_depth_scaled:
 *   'none'  1;  'total'  1 / sqrt(2 n_layer) (GPT-2, Megatron);
 *   'layer' 1 / sqrt(2 (l + 1)) for block l, counted from 0 (Mitchell et al., as OLMo's
 *           "mitchell" init).
 * Norm weights stay 1 and biases 0. The default (gpt2, 0.02, total) is GPT-2's init exactly. */
#include <math.h>
#include <string.h>
#include "core/error.h"
#include "model/params.h"

/* Whether p writes into the residual stream (a block's output projection). */
static bool writes_residual(const param_t *p) {
    static const char *const suffixes[] = {".attn.proj.w", ".mlp.proj.w", ".moe.experts.proj.w",
                                           ".moe.shared.proj.w"};
    const size_t n = strlen(p->name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        const size_t k = strlen(suffixes[i]);
        if (n > k && strcmp(p->name + n - k, suffixes[i]) == 0) return true;
    }
    return false;
}

static float scheme_std(const model_spec_t *spec, const param_t *p) {
    /* an expert tensor [E, out, in] is E matrices [out, in] */
    const int d = p->ndim == 3 ? 1 : 0;
    const double fan_in = (double)p->shape[d + 1], fan_out = (double)p->shape[d] / p->split_blocks;
    if (p->layer < 0 || spec->init_scheme == MODEL_INIT_GPT2) return (float)spec->init_std;
    if (spec->init_scheme == MODEL_INIT_XAVIER) return (float)sqrt(2.0 / (fan_in + fan_out));
    if (spec->init_scheme == MODEL_INIT_KAIMING) return (float)sqrt(2.0 / fan_in);
    ASSERT(spec->init_scheme == MODEL_INIT_SMALL);
    return (float)sqrt(2.0 / (5.0 * spec->d_model));
}

/* The residual-output factor, in float like GPT-2's 0.02f / sqrtf(2.0f * n_layer). */
static float depth_divisor(const model_spec_t *spec, const param_t *p) {
    if (!writes_residual(p) || spec->init_depth_scaled == MODEL_DEPTH_NONE) return 1.0f;
    if (spec->init_depth_scaled == MODEL_DEPTH_TOTAL) return sqrtf(2.0f * (float)spec->n_layer);
    ASSERT(spec->init_depth_scaled == MODEL_DEPTH_LAYER);
    return sqrtf(2.0f * (float)(p->layer + 1));
}

void params_apply_init_scheme(params_t *P, const model_spec_t *spec) {
    for (int i = 0; i < P->n; i++) {
        param_t *p = &P->p[i];
        if (p->init != INIT_NORMAL) continue;
        p->init_std = scheme_std(spec, p) / depth_divisor(spec, p);
    }
}
