/* flat.c — the rank's registry and host copies of its flat buffers (see flat.h). */
#include "train/flat.h"
#include <string.h>
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

/* ---- sharded checkpoint I/O ---------------------------------------------------------------- */

/* Where flat elements [a, b) of group g live, and the backend that holds them: the model's fp32
 * weights (ZeRO-3: its partition), else the master (bf16/fp16) or a moment, laid out like the
 * optimizer state. */
static float *save_at(flat_io_t *f, int g, size_t a, const ops_t **ops) {
    adamw_t *opt = f->opt;
    if (g == 0 && !opt->master) {
        *ops = f->ops;
        return zero_param_at(f->z, f->m->params, a);
    }
    *ops = opt->state_ops;
    return (g == 0 ? opt->master : g == 1 ? opt->m : opt->v) + zero_state_index(f->z, a);
}

/* A backend that computes in host memory (memory_capacity 0: the CPU's) is read and written in
 * place, without the staging copy. */
static bool in_host_memory(const ops_t *ops) { return ops->memory_capacity() == 0; }

static const float *save_fetch(void *ctx, int g, size_t a, size_t b, float *staging) {
    flat_io_t *f = ctx;
    const ops_t *ops;
    const float *x = save_at(f, g, a, &ops);
    if (in_host_memory(ops)) return x;
    ops->to_host(staging, x, (b - a) * sizeof(float));
    return staging;
}

void flat_save_io(ckpt_io_t *io, flat_io_t *f, int owner, float *staging, size_t staging_floats) {
    memset(io, 0, sizeof *io);
    for (int g = 0; g < 3; g++) io->lo[g] = f->z->lo, io->hi[g] = f->z->hi, io->part_comm[g] = MPI_COMM_SELF;
    io->owner = owner;
    io->staging = staging;
    io->staging_floats = staging_floats;
    io->fetch = save_fetch;
    io->ctx = f;
}

/* Where a load puts flat elements [a, b) of group g, and the backend that holds them (NULL: plain
 * host memory): the model's weights with fp32 storage (the master follows at the end), the
 * master's values with 16-bit weights (host_params, handed over at the end), else a moment. */
static float *load_at(flat_io_t *f, int g, size_t a, const ops_t **ops) {
    adamw_t *opt = f->opt;
    if (g == 0 && f->m->wtype == DT_FP32) {
        *ops = f->ops;
        return zero_param_at(f->z, f->m->params, a);
    }
    if (g == 0) {
        *ops = NULL;
        return f->host_params + a;
    }
    *ops = opt->state_ops;
    return (g == 1 ? opt->m : opt->v) + zero_state_index(f->z, a);
}

/* In host memory the file is read straight into place; else into staging, then load_store. */
static float *load_dest(void *ctx, int g, size_t a, size_t b, float *staging) {
    (void)b, (void)staging;
    const ops_t *ops;
    float *x = load_at(ctx, g, a, &ops);
    return !ops || in_host_memory(ops) ? x : NULL;
}

static void load_store(void *ctx, int g, size_t a, size_t b, const float *buf) {
    const ops_t *ops;
    float *x = load_at(ctx, g, a, &ops);
    if (x == buf) return; /* read in place */
    if (ops) ops->to_device(x, buf, (b - a) * sizeof(float));
    else memcpy(x, buf, (b - a) * sizeof(float));
}

void flat_load_io(ckpt_io_t *io, flat_io_t *f, MPI_Comm dp_comm, float *staging, size_t staging_floats) {
    memset(io, 0, sizeof *io);
    const zero_t *z = f->z;
    size_t lo, hi;
    flat_load_range(z, &lo, &hi);
    for (int g = 0; g < 3; g++) {
        io->lo[g] = lo;
        io->hi[g] = hi;
        io->part_comm[g] = z->stage >= 1 ? dp_comm : MPI_COMM_SELF;
    }
    io->staging = staging;
    io->staging_floats = staging_floats;
    io->dest = load_dest;
    io->store = load_store;
    io->ctx = f;
    adamw_finish(f->opt); /* nothing of an earlier update may land on the loaded weights */
    /* untouched pages cost nothing: the partition alone becomes resident */
    f->host_params = f->m->wtype == DT_FP32 ? NULL : xmalloc(z->total * sizeof(float));
}

void flat_load_finish(flat_io_t *f) {
    if (f->host_params) { /* the master from the file, the 16-bit copy rounded from it */
        adamw_take_host_params(f->opt, f->m, f->z, f->host_params);
        xfree(f->host_params);
        f->host_params = NULL;
        return;
    }
    zero_allgather_params(f->z, f->m->params); /* ZeRO-1/2: every partition; ZeRO-3: stale copies */
    adamw_take_params(f->opt, f->m, f->z);     /* the master, when there is one */
}

void flat_load_range(const zero_t *z, size_t *lo, size_t *hi) {
    *lo = z->stage >= 1 ? z->lo : 0;
    *hi = z->stage >= 1 ? z->hi : z->total;
}

void flat_init_params(flat_io_t *f, uint64_t seed, float *staging, size_t piece) {
    size_t lo, hi;
    flat_load_range(f->z, &lo, &hi);
    ckpt_io_t io;
    flat_load_io(&io, f, MPI_COMM_SELF, staging, piece);
    for (size_t a = lo; a < hi; a += piece) {
        const size_t b = hi - a < piece ? hi : a + piece;
        params_init_range(&f->m->P, seed, a, b, staging);
        io.store(io.ctx, 0, a, b, staging);
    }
    flat_load_finish(f);
}
