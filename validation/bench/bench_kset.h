/* bench_kset.h — the non-GEMM kernels that bench_ops times, as one table of function pointers
 * that does not depend on ops_t's layout: bench_kset.c fills it from an ops_t table by member
 * name, compiled once against this tree's kernels/ops.h (kset_new) and, for a comparison, once
 * against an older commit's (kset_base, see the Makefile's bench_ops_vs target). So the two
 * kernel sets run side by side in one process even when ops_t gained or moved entries between
 * the commits. A fused op the older table lacks is NULL (the bench then runs the unfused
 * composition). Matrix products and attention are not here: bench_ops takes them from ops_cpu().
 *
 * The prototypes are kernels/ops.h's: each member has the type of the ops_t member of its name
 * (__typeof__, GNU C and C23's typeof). The older commit's table crosses over as an array of
 * generic function pointers in KSET_MEMBERS order, each converted back to its ops.h type here. */
#ifndef BENCH_KSET_H
#define BENCH_KSET_H
#include "kernels/ops.h"

/* The ops_t members both tables have, in the order kset_base_members fills them. */
#define KSET_MEMBERS(X)                                                                          \
    X(zero) X(embed_forward) X(embed_backward) X(layernorm_forward) X(layernorm_backward)        \
    X(gelu_forward) X(gelu_backward) X(add) X(xent_row_max) X(xent_row_sumexp)                   \
    X(xent_target_logit) X(xent_losses) X(xent_backward_inplace) X(sumsq) X(adamw_update)        \
    X(scale) X(quantize) X(quantize_copy) X(any_nonfinite)
/* fused ops (NULL where the table has none) */
#define KSET_FUSED(X) X(residual_layernorm_forward)

#define KSET_COUNT_ONE(m) +1
enum { KSET_N_MEMBERS = 0 KSET_MEMBERS(KSET_COUNT_ONE) };
typedef void (*kset_any_fn)(void); /* a member in transit between the two compilations */

/* Fills fns[KSET_N_MEMBERS] from the older commit's ops_cpu() (only in the bench_ops_vs build,
 * compiled against that commit's ops.h). */
void kset_base_members(kset_any_fn fns[KSET_N_MEMBERS]);

#ifndef KSET_BASE
#define KSET_MEMBER_DECL(m) __typeof__(((ops_t *)0)->m) m;
typedef struct {
    const char *name;
    KSET_MEMBERS(KSET_MEMBER_DECL)
    KSET_FUSED(KSET_MEMBER_DECL)
} kset_t;

kset_t kset_new(void);  /* this tree's ops_cpu() */
kset_t kset_base(void); /* the older commit's (only in the bench_ops_vs build) */
#endif
#endif
