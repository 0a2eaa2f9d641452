/* optimizer.c — AdamW and gradient norm (see optimizer.h). */
#include "train/optimizer.h"
#include <math.h>
#include <string.h>
#include "core/alloc.h"

void adamw_create(adamw_t *opt, const ops_t *ops, size_t n, dtype_t weights) {
    memset(opt, 0, sizeof *opt);
    opt->ops = ops;
    opt->n = n;
    opt->weights = weights;
    const size_t k = n ? n : 1;
    opt->m = ops->alloc(k * sizeof(float), MEM_OPTIMIZER);
    opt->v = ops->alloc(k * sizeof(float), MEM_OPTIMIZER);
    ops->zero(opt->m, k);
    ops->zero(opt->v, k);
    if (weights != DT_FP32) {
        opt->master = ops->alloc(k * sizeof(float), MEM_MASTER);
        ops->zero(opt->master, k);
    }
}

void adamw_destroy(adamw_t *opt) {
    opt->ops->free(opt->m);
    opt->ops->free(opt->v);
    if (opt->master) opt->ops->free(opt->master);
    memset(opt, 0, sizeof *opt);
}

void adamw_take_params(adamw_t *opt, gpt_t *m, zero_t *z) {
    if (!opt->master) return;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        size_t a, b;
        if (!zero_my_range(z, p->offset, p->numel, &a, &b)) continue;
        float *w = zero_param_at(z, m->params, a), *master = opt->master + zero_state_index(z, a);
        opt->ops->quantize_copy(master, w, b - a, DT_FP32);
        opt->ops->quantize(w, b - a, opt->weights);
    }
    zero_allgather_params(z, m->params);
}

const float *adamw_master_or(const adamw_t *opt, const float *params) {
    return opt->master ? opt->master : params;
}

float clip_scale(double norm, double grad_clip) {
    if (grad_clip > 0 && norm > grad_clip) return (float)(grad_clip / norm);
    return 1.0f;
}

void adamw_step(adamw_t *opt, gpt_t *m, zero_t *z, const config_t *cfg, float lr,
                float grad_scale) {
    opt->t++;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        size_t a, b;
        if (!zero_my_range(z, p->offset, p->numel, &a, &b)) continue;
        const float wd = p->decay ? (float)cfg->weight_decay : 0.0f;
        const size_t k = zero_state_index(z, a);
        float *w = zero_param_at(z, m->params, a);
        /* mixed precision: the fp32 master is updated, the model keeps its rounded copy */
        float *target = opt->master ? opt->master + k : w;
        m->ops->adamw_update(target, zero_grad_at(z, m->grads, a), opt->m + k, opt->v + k, b - a,
                             lr, (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps, wd,
                             grad_scale, (int)opt->t);
        if (opt->master) m->ops->quantize_copy(w, target, b - a, opt->weights);
    }
    zero_allgather_params(z, m->params);
}
