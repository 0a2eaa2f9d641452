/* dp_sync.c — bucketed, overlapped data-parallel gradient all-reduce (see dp_sync.h). */
#include "train/dp_sync.h"
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "parallel/comm.h"

/* When a parameter's gradient is final in backward order: blocks after their layer, the final
 * norm (layer n_layer) right after the head, the embeddings only at the end. */
static int param_ready_layer(const param_t *p) { return p->layer < 0 ? -1 : p->layer; }

/* ZeRO >= 2: the part of bucket [begin, end) in every dp rank's partition. */
static void bucket_parts(dp_sync_t *d, dp_bucket_t *b) {
    const zero_t *z = d->z;
    b->counts = xcalloc((size_t)z->dp, sizeof(size_t));
    for (int r = 0; r < z->dp; r++) {
        size_t lo = z->displs[r], hi = lo + z->counts[r];
        size_t a = b->begin > lo ? b->begin : lo, e = b->end < hi ? b->end : hi;
        b->counts[r] = a < e ? e - a : 0;
    }
    size_t mine = b->begin > z->lo ? b->begin : z->lo;
    b->recv = z->grad_shard + (mine < z->hi ? mine - z->lo : 0);
}

void dp_sync_create(dp_sync_t *d, gpt_t *m, zero_t *z, const comm_group_t *dp_group,
                    const comm_group_t *embed_group, const comm_group_t *edp_group, int dp,
                    double bucket_mb) {
    memset(d, 0, sizeof *d);
    d->m = m;
    d->z = z;
    d->dp_group = dp_group;
    d->embed_group = embed_group;
    d->edp_group = edp_group;
    d->dp = dp;
    const size_t cap_floats = (size_t)(bucket_mb * 1024 * 1024 / sizeof(float));
    d->b = xcalloc((size_t)m->P.n + 1, sizeof(dp_bucket_t));
    dp_bucket_t *cur = NULL;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        if (!p->held) continue;
        const bool experts = p->experts > 0 && edp_group != dp_group;
        if (!cur || cur->end - cur->begin >= cap_floats || cur->experts != experts) {
            cur = &d->b[d->n++];
            cur->begin = p->offset;
            cur->experts = experts;
            cur->ready_layer = param_ready_layer(p);
            cur->req = COMM_REQ_NULL;
        }
        int r = param_ready_layer(p);
        if (r < cur->ready_layer) cur->ready_layer = r;
        /* the bucket runs to the next parameter's start, alignment padding included */
        size_t next = i + 1 < m->P.n ? m->P.p[i + 1].offset : m->P.total;
        cur->end = next;
    }
    if (z->stage >= 2)
        for (int i = 0; i < d->n; i++) bucket_parts(d, &d->b[i]);
}

void dp_sync_destroy(dp_sync_t *d) {
    for (int i = 0; i < d->n; i++) xfree(d->b[i].counts);
    xfree(d->b);
    memset(d, 0, sizeof *d);
}

static void start_bucket(dp_sync_t *d, dp_bucket_t *b) {
    /* the gradient as the low-precision buffer would hold it, before it is reduced */
    d->m->ops->quantize(d->m->grads + b->begin, b->end - b->begin, d->grad_dtype);
    if (d->z->stage >= 2) /* over the ZeRO group (the experts' replicas with ep > 1) */
        comm_ireduce_scatter_sum(d->m->grads + b->begin, b->recv, b->counts, d->z->dp_group, COMM_DP,
                                 &b->req);
    else
        comm_iallreduce_sum(d->m->grads + b->begin, b->end - b->begin,
                            b->experts ? d->edp_group : d->dp_group, COMM_DP, &b->req);
    b->started = true;
}

void dp_sync_layer_done(void *ctx, int layer) {
    dp_sync_t *d = ctx;
    if (d->dp == 1 || d->z->staged) return; /* staged gradients are reduced per unit */
    for (int i = 0; i < d->n; i++) {
        dp_bucket_t *b = &d->b[i];
        if (!b->started && b->ready_layer >= layer) {
            start_bucket(d, b);
            d->started_early++;
        }
    }
    /* OpenMPI progresses non-blocking collectives inside MPI calls: give it a chance. */
    for (int i = 0; i < d->n; i++)
        if (d->b[i].started) (void)comm_test(&d->b[i].req);
}

/* Sum the two copies of the tied wte gradient (first and last pipeline stage). */
static void tied_embedding_sum(dp_sync_t *d) {
    const param_t *wte = params_find(&d->m->P, "wte");
    if (wte->held) comm_allreduce_sum(d->m->grads + wte->offset, wte->numel, d->embed_group, COMM_EMBED);
}

void dp_sync_finish(dp_sync_t *d) {
    if (d->z->staged) {
        zero_grads_finish_step(d->z);
        return;
    }
    if (d->embed_group && d->m->tied) tied_embedding_sum(d);
    if (d->dp == 1) d->m->ops->quantize(d->m->grads, d->m->P.total, d->grad_dtype);
    if (d->dp > 1)
        for (int i = 0; i < d->n; i++)
            if (!d->b[i].started) start_bucket(d, &d->b[i]);
    for (int i = 0; i < d->n; i++) {
        dp_bucket_t *b = &d->b[i];
        comm_wait(&b->req, COMM_DP);
        b->started = false;
        /* ZeRO >= 2 with ep > 1: a dense bucket's part was summed over one ep rank's replicas;
         * the ep group adds the other ep ranks' */
        if (d->z->stage >= 2 && d->z->ep > 1 && !b->experts && b->counts[d->z->rank] > 0)
            comm_allreduce_sum(b->recv, b->counts[d->z->rank], d->z->ep_group, COMM_DP);
    }
}
