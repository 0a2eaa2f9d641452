/* postval.c — optimizer post-validation (see postval.h). */
#include "train/postval.h"
#include <string.h>
#include "core/alloc.h"
#include "parallel/comm.h"

size_t postval_floats(size_t n) { return 3 * (n ? n : 1); }

void postval_create(postval_t *pv, const ops_t *ops, size_t n, const comm_group_t *world) {
    memset(pv, 0, sizeof *pv);
    const size_t k = n ? n : 1;
    pv->n = n;
    pv->target = ops->alloc(k * sizeof(float), MEM_OPTIMIZER);
    pv->m = ops->alloc(k * sizeof(float), MEM_OPTIMIZER);
    pv->v = ops->alloc(k * sizeof(float), MEM_OPTIMIZER);
    pv->req = COMM_REQ_NULL;
    pv->world = world;
}

void postval_destroy(postval_t *pv, const ops_t *ops) {
    if (!pv->target) return;
    ops->free(pv->target);
    ops->free(pv->m);
    ops->free(pv->v);
    memset(pv, 0, sizeof *pv);
}

void postval_start(postval_t *pv, double loss_part, double z_loss_part, double sumsq) {
    pv->red[0] = loss_part;
    pv->red[1] = z_loss_part;
    pv->red[2] = sumsq;
    comm_iallreduce_sum_double(pv->red, 3, pv->world, COMM_OTHER, &pv->req);
}

void postval_wait(postval_t *pv, double *loss, double *z_loss, double *sumsq) {
    comm_wait(&pv->req, COMM_OTHER);
    *loss = pv->red[0];
    *z_loss = pv->red[1];
    *sumsq = pv->red[2];
}

/* Copy between the updated tensor's elements this rank owns and `keep` (indexed like m, v). */
static void copy_target(const adamw_t *opt, gpt_t *m, zero_t *z, float *keep, bool to_keep) {
    const ops_t *o = opt->ops;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        size_t a, b;
        if (!zero_my_range(z, p->offset, p->numel, &a, &b)) continue;
        const size_t k = zero_state_index(z, a);
        float *t = opt->master ? opt->master + k : zero_param_at(z, m->params, a);
        if (to_keep) {
            o->quantize_copy(keep + k, t, b - a, DT_FP32);
            continue;
        }
        o->quantize_copy(t, keep + k, b - a, DT_FP32);
        if (opt->master) adamw_write_weights(opt, m, z, a, t, b - a); /* the rounded copy */
    }
}

void postval_save(postval_t *pv, const adamw_t *opt, gpt_t *m, zero_t *z) {
    copy_target(opt, m, z, pv->target, true);
    opt->ops->quantize_copy(pv->m, opt->m, pv->n, DT_FP32);
    opt->ops->quantize_copy(pv->v, opt->v, pv->n, DT_FP32);
    pv->t = opt->t;
}

void postval_undo(postval_t *pv, adamw_t *opt, gpt_t *m, zero_t *z) {
    copy_target(opt, m, z, pv->target, false);
    opt->ops->quantize_copy(opt->m, pv->m, pv->n, DT_FP32);
    opt->ops->quantize_copy(opt->v, pv->v, pv->n, DT_FP32);
    opt->t = pv->t;
    zero_allgather_weights(z, m);
    pv->undone++;
}
