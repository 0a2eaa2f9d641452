/* bench_kset.c — fills a kset_t (bench_kset.h) from an ops_t table by member name. Compiled
 * against the ops.h of the tree whose table it reads: as is, kset_new() from ops_cpu() (and, in
 * the bench_ops_vs build, kset_base() from the members kset_base_members hands over); with
 * -DKSET_BASE and the older commit's src/ first on the include path, kset_base_members() from
 * ops_cpu_base() (the older ops_cpu, renamed when it was compiled). */
#include "kernels/ops.h"
#include "bench_kset.h"

#ifdef KSET_BASE
const ops_t *ops_cpu_base(void);

void kset_base_members(kset_any_fn fns[KSET_N_MEMBERS]) {
    const ops_t *o = ops_cpu_base();
    int i = 0;
#define KSET_OUT(m) fns[i++] = (kset_any_fn)o->m;
    KSET_MEMBERS(KSET_OUT)
#undef KSET_OUT
}
#else
kset_t kset_new(void) {
    const ops_t *o = ops_cpu();
    kset_t k = {.name = "new"};
#define KSET_COPY(m) k.m = o->m;
    KSET_MEMBERS(KSET_COPY)
    KSET_FUSED(KSET_COPY)
#undef KSET_COPY
    return k;
}

#ifdef BENCH_VS
kset_t kset_base(void) {
    kset_any_fn fns[KSET_N_MEMBERS];
    kset_base_members(fns);
    kset_t k = {.name = "base"}; /* fused ops NULL: the older table is not read for them */
    int i = 0;
#define KSET_IN(m) k.m = (__typeof__(k.m))fns[i++];
    KSET_MEMBERS(KSET_IN)
#undef KSET_IN
    return k;
}
#endif
#endif
