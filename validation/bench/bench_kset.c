/* bench_kset.c — fills a kset_t (bench_kset.h) from an ops_t table by field name. Compiled
 * against the ops.h of the tree whose table it reads: as is, kset_new() from ops_cpu(); with
 * -DKSET_BASE and the older commit's src/ first on the include path, kset_base() from
 * ops_cpu_base() (the older ops_cpu, renamed when it was compiled). */
#include "kernels/ops.h"
#include "bench_kset.h"

#ifdef KSET_BASE
const ops_t *ops_cpu_base(void);
#define KSET_FN kset_base
#define KSET_OPS ops_cpu_base
#define KSET_NAME "base"
#else
#define KSET_FN kset_new
#define KSET_OPS ops_cpu
#define KSET_NAME "new"
#endif

kset_t KSET_FN(void) {
    const ops_t *o = KSET_OPS();
    kset_t k = {
        .name = KSET_NAME,
        .zero = o->zero,
        .embed_forward = o->embed_forward,
        .embed_backward = o->embed_backward,
        .layernorm_forward = o->layernorm_forward,
        .layernorm_backward = o->layernorm_backward,
        .gelu_forward = o->gelu_forward,
        .gelu_backward = o->gelu_backward,
        .add = o->add,
        .xent_row_max = o->xent_row_max,
        .xent_row_sumexp = o->xent_row_sumexp,
        .xent_target_logit = o->xent_target_logit,
        .xent_losses = o->xent_losses,
        .xent_backward_inplace = o->xent_backward_inplace,
        .sumsq = o->sumsq,
        .adamw_update = o->adamw_update,
        .scale = o->scale,
        .quantize = o->quantize,
        .quantize_copy = o->quantize_copy,
        .any_nonfinite = o->any_nonfinite,
#ifndef KSET_BASE
        .residual_layernorm_forward = o->residual_layernorm_forward,
#endif
    };
    return k;
}
