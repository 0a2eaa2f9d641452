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

double grad_sumsq_owned(const gpt_t *m) {
    double sum = 0.0;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        bool owned = p->held && !p->tied_copy && (p->split_dim >= 0 || m->par.tp_rank == 0);
        if (owned) sum += m->ops->sumsq(m->grads + p->offset, p->numel);
    }
    return sum;
}

float clip_scale(double norm, double grad_clip) {
    if (grad_clip > 0 && norm > grad_clip) return (float)(grad_clip / norm);
    return 1.0f;
}

void adamw_step(adamw_t *opt, gpt_t *m, const config_t *cfg, float lr, float grad_scale) {
    opt->t++;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        float wd = p->decay ? (float)cfg->weight_decay : 0.0f;
        m->ops->adamw_update(m->params + p->offset, m->grads + p->offset, opt->m + p->offset,
                             opt->v + p->offset, p->numel, lr, (float)cfg->beta1,
                             (float)cfg->beta2, (float)cfg->eps, wd, grad_scale, (int)opt->t);
    }
}
