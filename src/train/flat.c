/* flat.c — the rank's registry and host copies of its flat buffers (see flat.h). */
#include "train/flat.h"
#include "core/alloc.h"
#include "train/pipeline.h"

void flat_rank_registry(params_t *P, const config_t *cfg, const grid_t *grid) {
    const bool interleaved = sched_kind_of(cfg->choice.schedule) == SCHED_INTERLEAVED;
    const int v = interleaved ? cfg->virtual_stages : 1;
    params_create_experts(P, MODEL_SPEC_OF(cfg), grid->tp, grid->rank_tp, grid->pp, grid->rank_pp, v, grid->ep,
                          grid->rank_ep);
}

float *flat_host_copy(const zero_t *z, const ops_t *from, const float *full, const float *shard,
                      bool sharded) {
    const bool writer = z->rank == 0; /* dp rank 0, or with ep > 1 each ep rank's replica 0 */
    if (!sharded) {
        float *host = xmalloc(z->total * sizeof(float));
        from->to_host(host, full, z->total * sizeof(float));
        return host;
    }
    /* the partitions meet on dp rank 0, which writes; the others keep no full copy */
    const size_t mine = z->hi - z->lo;
    float *part = xmalloc((mine ? mine : 1) * sizeof(float));
    from->to_host(part, shard, mine * sizeof(float));
    float *host = writer ? xmalloc(z->total * sizeof(float)) : NULL;
    zero_gather_to_root(z, part, host);
    xfree(part);
    return host;
}

float *flat_host_params(const zero_t *z, const adamw_t *opt, const gpt_t *m, const ops_t *ops) {
    if (opt->master) /* bf16/fp16: the fp32 master weights, laid out like the AdamW state */
        return flat_host_copy(z, opt->state_ops, opt->master, opt->master, z->stage >= 1);
    return flat_host_copy(z, ops, m->params, z->param_shard, z->stage >= 3);
}

void flat_set_params_from_host(zero_t *z, adamw_t *opt, gpt_t *m, const ops_t *ops,
                               const float *host) {
    if (m->wtype != DT_FP32) { /* 16-bit storage: the master from the host, the copy rounded
                                 * from it */
        adamw_take_host_params(opt, m, z, host);
        return;
    }
    if (z->stage >= 3)
        ops->to_device(z->param_shard, host + z->lo, (z->hi - z->lo) * sizeof(float));
    else
        ops->to_device(m->params, host, m->P.total * sizeof(float));
    zero3_invalidate(z);
    adamw_take_params(opt, m, z); /* bf16/fp16: master, rounded copy */
}
