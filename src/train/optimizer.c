/* optimizer.c — AdamW and gradient norm (see optimizer.h). */
#include "train/optimizer.h"
#include <math.h>
#include <string.h>

void adamw_create(adamw_t *opt, const ops_t *ops, size_t n) {
    memset(opt, 0, sizeof *opt);
    opt->ops = ops;
    opt->n = n;
    opt->m = ops->alloc(n * sizeof(float));
    opt->v = ops->alloc(n * sizeof(float));
    ops->zero(opt->m, n);
    ops->zero(opt->v, n);
}

void adamw_destroy(adamw_t *opt) {
    opt->ops->free(opt->m);
    opt->ops->free(opt->v);
    memset(opt, 0, sizeof *opt);
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
        m->ops->adamw_update(zero_param_at(z, m->params, a), zero_grad_at(z, m->grads, a),
                             opt->m + k, opt->v + k, b - a, lr, (float)cfg->beta1,
                             (float)cfg->beta2, (float)cfg->eps, wd, grad_scale, (int)opt->t);
    }
    zero_allgather_params(z, m->params);
}
