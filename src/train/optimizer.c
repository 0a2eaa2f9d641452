/* optimizer.c — AdamW and gradient norm, on the device or offloaded to the host (see
 * optimizer.h). */
#include "train/optimizer.h"
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/thread.h"
#include "core/timer.h"

/* ---- offload: the host state, the staging buffers and the update thread --------------------- */

#define OFFLOAD_BUFFERS 5 /* m, v, master, and the staging of gradients and weights */

struct adamw_offload {
    void *locked[OFFLOAD_BUFFERS]; /* the whole pages inside each buffer, page-locked */
    gpt_t *m; /* the model and partition the overlapped update serves (adamw_attach) */
    zero_t *z;
    float *grads, *weights; /* [n] host staging: the gradients copied out, the rounded weights */
    bool overlap;           /* the update runs on the thread during the next forward */
    int units;              /* embeddings, n_layer blocks, the final norm (and untied head) */
    /* the update in flight (written by the main thread before a round starts) */
    float lr, grad_scale, beta1, beta2, eps, weight_decay;
    int t;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long round;      /* rounds started by the main thread */
    int done;        /* units the thread has updated in the current round */
    bool quit;
    bool in_flight;  /* a round started whose units are not all uploaded */
    bool *uploaded;  /* [units] */
    int n_uploaded;
    double wait_s;   /* the main thread's waits for the thread since adamw_offload_wait */
    int ready, arrived;
};

/* Forward order of the units: the embeddings, block 0 .. n_layer-1, the final norm. A
 * parameter's `layer` is -1 for the embeddings and n_layer for the final norm and head. */
static int unit_of_param(const param_t *p, int n_layer) {
    return p->layer < 0 ? 0 : p->layer >= n_layer ? n_layer + 1 : p->layer + 1;
}

static int unit_of_use(int unit, int n_layer) {
    return unit == GPT_UNIT_EMBED ? 0 : unit == GPT_UNIT_FINAL ? n_layer + 1 : unit + 1;
}

/* Whether parameter i belongs to `unit` and has elements [a, b) this rank updates. */
static bool in_unit(const gpt_t *m, const zero_t *z, int i, int unit, size_t *a, size_t *b) {
    const param_t *p = &m->P.p[i];
    return unit_of_param(p, m->L) == unit && zero_my_range(z, p->offset, p->numel, a, b);
}

/* AdamW on the host state of one unit (the thread, or the main thread without overlap). */
static void update_unit(adamw_t *opt, gpt_t *m, zero_t *z, int unit) {
    const adamw_offload_t *o = opt->off;
    const ops_t *host = opt->state_ops;
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        size_t a, b;
        if (!in_unit(m, z, i, unit, &a, &b)) continue;
        const size_t k = zero_state_index(z, a);
        host->adamw_update(opt->master + k, o->grads + k, opt->m + k, opt->v + k, b - a, o->lr,
                           o->beta1, o->beta2, o->eps, p->decay ? o->weight_decay : 0.0f,
                           o->grad_scale, o->t);
        if (m->wtype != DT_FP32) /* the 16-bit elements themselves: half the upload */
            host->store_as((uint16_t *)o->weights + k, opt->master + k, b - a, m->wtype);
        else
            host->quantize_copy(o->weights + k, opt->master + k, b - a, opt->weights);
    }
}

/* Flat elements [a, b) of the rounded weights in the host staging back to the device. */
static void upload_piece(adamw_t *opt, gpt_t *m, zero_t *z, size_t a, size_t b) {
    const size_t k = zero_state_index(z, a);
    if (m->wtype != DT_FP32) {
        opt->ops->to_device(zero_weights_at(z, m, a), (const uint16_t *)opt->off->weights + k,
                            (b - a) * sizeof(uint16_t));
        if (m->wstore) gpt_weights_written(m, a, b - a);
    } else {
        opt->ops->to_device(zero_param_at(z, m->params, a), opt->off->weights + k,
                            (b - a) * sizeof(float));
    }
}

/* The unit's rounded weights back to the device (main thread). */
static void upload_unit(adamw_t *opt, gpt_t *m, zero_t *z, int unit) {
    for (int i = 0; i < m->P.n; i++) {
        size_t a, b;
        if (in_unit(m, z, i, unit, &a, &b)) upload_piece(opt, m, z, a, b);
    }
}

static void *offload_main(void *arg) {
    adamw_t *opt = arg;
    adamw_offload_t *o = opt->off;
    long seen = 0;
    PTHREAD_CHECK(pthread_mutex_lock(&o->mu));
    for (;;) {
        while (o->round == seen && !o->quit) PTHREAD_CHECK(pthread_cond_wait(&o->cv, &o->mu));
        if (o->quit) break;
        seen = o->round;
        PTHREAD_CHECK(pthread_mutex_unlock(&o->mu));
        for (int u = 0; u < o->units; u++) {
            update_unit(opt, o->m, o->z, u);
            PTHREAD_CHECK(pthread_mutex_lock(&o->mu));
            o->done = u + 1;
            PTHREAD_CHECK(pthread_cond_broadcast(&o->cv));
            PTHREAD_CHECK(pthread_mutex_unlock(&o->mu));
        }
        PTHREAD_CHECK(pthread_mutex_lock(&o->mu));
    }
    PTHREAD_CHECK(pthread_mutex_unlock(&o->mu));
    return NULL;
}

/* Unit u of the round in flight: wait for the thread, then upload (main thread). */
static void offload_need(adamw_t *opt, int u) {
    adamw_offload_t *o = opt->off;
    if (!o->in_flight || o->uploaded[u]) return;
    const double t0 = now_sec();
    PTHREAD_CHECK(pthread_mutex_lock(&o->mu));
    o->ready += o->done > u;
    o->arrived++;
    while (o->done <= u) PTHREAD_CHECK(pthread_cond_wait(&o->cv, &o->mu));
    PTHREAD_CHECK(pthread_mutex_unlock(&o->mu));
    o->wait_s += now_sec() - t0;
    upload_unit(opt, o->m, o->z, u);
    o->uploaded[u] = true;
    if (++o->n_uploaded == o->units) o->in_flight = false;
}

static void on_unit_use(void *ctx, int unit) {
    adamw_t *opt = ctx;
    offload_need(opt, unit_of_use(unit, opt->off->m->L));
}

/* Page-lock the whole pages inside [p, p + bytes): a page another allocation shares would be
 * registered twice (cudaHostRegister refuses overlapping ranges); the pieces at the ends move
 * through the driver's staging instead. Returns the locked start (NULL: nothing locked). */
static void *lock_interior(const ops_t *ops, void *p, size_t bytes) {
    const uintptr_t page = 4096, lo = ((uintptr_t)p + page - 1) / page * page,
                    hi = ((uintptr_t)p + bytes) / page * page;
    if (hi <= lo) return NULL;
    ops->host_register((void *)lo, hi - lo);
    return (void *)lo;
}

static void offload_create(adamw_t *opt, size_t k) {
    adamw_offload_t *o = xcalloc(1, sizeof *o);
    opt->off = o;
    o->grads = xmalloc_in(k * sizeof(float), MEM_OPTIMIZER);
    o->weights = xmalloc_in(k * sizeof(float), MEM_OPTIMIZER);
    float *host[OFFLOAD_BUFFERS] = {opt->m, opt->v, opt->master, o->grads, o->weights};
    for (int i = 0; i < OFFLOAD_BUFFERS; i++)
        o->locked[i] = lock_interior(opt->ops, host[i], k * sizeof(float));
    PTHREAD_CHECK(pthread_mutex_init(&o->mu, NULL));
    PTHREAD_CHECK(pthread_cond_init(&o->cv, NULL));
}

void adamw_create(adamw_t *opt, const ops_t *ops, size_t n, dtype_t weights, bool offload) {
    memset(opt, 0, sizeof *opt);
    opt->ops = ops;
    opt->state_ops = offload ? ops_cpu() : ops;
    opt->n = n;
    opt->weights = weights;
    const ops_t *s = opt->state_ops;
    const size_t k = n ? n : 1;
    opt->m = s->alloc(k * sizeof(float), MEM_OPTIMIZER);
    opt->v = s->alloc(k * sizeof(float), MEM_OPTIMIZER);
    s->zero(opt->m, k);
    s->zero(opt->v, k);
    if (weights != DT_FP32 || offload) { /* offloaded: the host holds the fp32 values */
        opt->master = s->alloc(k * sizeof(float), MEM_MASTER);
        s->zero(opt->master, k);
    }
    if (offload) offload_create(opt, k);
}

void adamw_attach(adamw_t *opt, gpt_t *m, zero_t *z) {
    adamw_offload_t *o = opt->off;
    if (!o) return;
    o->m = m;
    o->z = z;
    o->units = m->L + 2;
    o->uploaded = xcalloc((size_t)o->units, sizeof(bool));
    o->overlap = z->stage == 0; /* ZeRO: the partitions are gathered right after the update */
    if (!o->overlap) return;
    m->on_unit_use = on_unit_use;
    m->unit_hook_ctx = opt;
    sigset_t all;
    sigfillset(&all);
    thread_start_masked(&o->thread, offload_main, opt, &all, "offloaded optimizer");
}

void adamw_finish(adamw_t *opt) {
    adamw_offload_t *o = opt->off;
    if (!o || !o->in_flight) return;
    for (int u = 0; u < o->units; u++) offload_need(opt, u);
}

double adamw_offload_wait(adamw_t *opt, int *ready_on_arrival, int *units) {
    adamw_offload_t *o = opt->off;
    if (!o) {
        *ready_on_arrival = *units = 0;
        return 0.0;
    }
    const double w = o->wait_s;
    *ready_on_arrival = o->ready;
    *units = o->arrived;
    o->wait_s = 0;
    o->ready = o->arrived = 0;
    return w;
}

size_t adamw_offload_bytes(const adamw_t *opt) {
    return opt->off ? OFFLOAD_BUFFERS * (opt->n ? opt->n : 1) * sizeof(float) : 0;
}

void adamw_destroy(adamw_t *opt) {
    adamw_offload_t *o = opt->off;
    if (o) {
        adamw_finish(opt);
        if (o->overlap) {
            PTHREAD_CHECK(pthread_mutex_lock(&o->mu));
            o->quit = true;
            PTHREAD_CHECK(pthread_cond_broadcast(&o->cv));
            PTHREAD_CHECK(pthread_mutex_unlock(&o->mu));
            PTHREAD_CHECK(pthread_join(o->thread, NULL));
        }
        for (int i = 0; i < OFFLOAD_BUFFERS; i++)
            if (o->locked[i]) opt->ops->host_unregister(o->locked[i]);
        PTHREAD_CHECK(pthread_mutex_destroy(&o->mu));
        PTHREAD_CHECK(pthread_cond_destroy(&o->cv));
        xfree(o->grads);
        xfree(o->weights);
        xfree(o->uploaded);
        xfree(o);
    }
    opt->state_ops->free(opt->m);
    opt->state_ops->free(opt->v);
    if (opt->master) opt->state_ops->free(opt->master);
    memset(opt, 0, sizeof *opt);
}

void adamw_write_weights(const adamw_t *opt, gpt_t *m, zero_t *z, size_t a, const float *src,
                         size_t n) {
    if (m->wtype == DT_FP32) {
        opt->ops->quantize_copy(zero_param_at(z, m->params, a), src, n, opt->weights);
        return;
    }
    opt->ops->store_as(zero_weights_at(z, m, a), src, n, m->wtype);
    if (m->wstore) gpt_weights_written(m, a, n); /* ZeRO-3: widened when its unit is bound */
}

void adamw_take_host_params(adamw_t *opt, gpt_t *m, zero_t *z, const float *host) {
    ASSERT(m->wtype != DT_FP32 && opt->master);
    adamw_finish(opt);
    const ops_t *s = opt->state_ops; /* the master's memory: the device's, or the host's */
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        size_t a, b;
        if (!zero_my_range(z, p->offset, p->numel, &a, &b)) continue;
        const size_t k = zero_state_index(z, a);
        s->to_device(opt->master + k, host + a, (b - a) * sizeof(float));
        if (!opt->off) {
            adamw_write_weights(opt, m, z, a, opt->master + k, b - a);
            continue;
        }
        /* offloaded: rounded on the host as its update does, uploaded as 16-bit elements */
        s->store_as((uint16_t *)opt->off->weights + k, opt->master + k, b - a, m->wtype);
        upload_piece(opt, m, z, a, b);
    }
    zero_allgather_weights(z, m); /* ZeRO-1/2: the other ranks' pieces */
}

void adamw_take_params(adamw_t *opt, gpt_t *m, zero_t *z) {
    if (!opt->master) return;
    ASSERT(m->wtype == DT_FP32); /* 16-bit storage has no fp32 values: adamw_take_host_params */
    adamw_finish(opt);
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        size_t a, b;
        if (!zero_my_range(z, p->offset, p->numel, &a, &b)) continue;
        float *w = zero_param_at(z, m->params, a), *master = opt->master + zero_state_index(z, a);
        if (opt->off) /* the host master from the device's values, then the device rounds */
            opt->ops->to_host(master, w, (b - a) * sizeof(float));
        else
            opt->ops->quantize_copy(master, w, b - a, DT_FP32);
        opt->ops->quantize(w, b - a, opt->weights);
    }
    zero_allgather_weights(z, m);
}

const float *adamw_master_or(const adamw_t *opt, const float *params) {
    return opt->master ? opt->master : params;
}

float clip_scale(double norm, double grad_clip) {
    if (grad_clip > 0 && norm > grad_clip) return (float)(grad_clip / norm);
    return 1.0f;
}

/* Offloaded: the gradients out in one copy, then the host update (on the thread, or here). */
static void offload_step(adamw_t *opt, gpt_t *m, zero_t *z, const config_t *cfg, float lr,
                         float grad_scale) {
    adamw_offload_t *o = opt->off;
    adamw_finish(opt); /* the previous round (a step without a forward in between) */
    const size_t lo = z->stage == 0 ? 0 : z->lo, n = zero_state_floats(z);
    if (n) opt->ops->to_host(o->grads, zero_grad_at(z, m->grads, lo), n * sizeof(float));
    o->lr = lr;
    o->grad_scale = grad_scale;
    o->beta1 = (float)cfg->beta1;
    o->beta2 = (float)cfg->beta2;
    o->eps = (float)cfg->eps;
    o->weight_decay = (float)cfg->weight_decay;
    o->t = (int)opt->t;
    memset(o->uploaded, 0, (size_t)o->units * sizeof(bool));
    o->n_uploaded = 0;
    if (!o->overlap) {
        for (int u = 0; u < o->units; u++) {
            update_unit(opt, m, z, u);
            upload_unit(opt, m, z, u);
        }
        zero_allgather_weights(z, m);
        return;
    }
    o->in_flight = true;
    PTHREAD_CHECK(pthread_mutex_lock(&o->mu));
    o->done = 0;
    o->round++;
    PTHREAD_CHECK(pthread_cond_broadcast(&o->cv));
    PTHREAD_CHECK(pthread_mutex_unlock(&o->mu));
}

void adamw_step(adamw_t *opt, gpt_t *m, zero_t *z, const config_t *cfg, float lr,
                float grad_scale) {
    opt->t++;
    if (opt->off) {
        offload_step(opt, m, z, cfg, lr, grad_scale);
        return;
    }
    for (int i = 0; i < m->P.n; i++) {
        const param_t *p = &m->P.p[i];
        size_t a, b;
        if (!zero_my_range(z, p->offset, p->numel, &a, &b)) continue;
        const float wd = p->decay ? (float)cfg->weight_decay : 0.0f;
        const size_t k = zero_state_index(z, a);
        /* mixed precision: the fp32 master is updated, the model keeps its rounded copy */
        float *target = opt->master ? opt->master + k : zero_param_at(z, m->params, a);
        m->ops->adamw_update(target, zero_grad_at(z, m->grads, a), opt->m + k, opt->v + k, b - a,
                             lr, (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps, wd,
                             grad_scale, (int)opt->t);
        if (opt->master) adamw_write_weights(opt, m, z, a, target, b - a);
    }
    zero_allgather_weights(z, m);
}
