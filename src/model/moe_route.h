/* moe_route.h — which routing assignments an MoE layer keeps: expert capacity and the drop
 * policy, on the host, from the router's top-k choices of one micro-batch.
 *
 * An assignment is (token i, choice j): token i sent to expert idx[i*k + j]. Every assignment
 * is counted in the expert's load BEFORE capacity is applied (the load-balancing loss uses these
 * counts: Megatron #1513 counted after dropping). Capacity per expert and micro-batch:
 *   cap = ceil(N * k * capacity_factor / E)      (capacity_factor = 0: dropless, cap = N)
 * An expert with more than cap assignments keeps cap of them:
 *   MOE_DROP_POSITION  the earliest tokens (smallest i);
 *   MOE_DROP_PROBS     the largest router probability probs[i*E + e] (ties: smallest i).
 * The kept rows of each expert are listed in ascending token order (both policies), expert by
 * expert: the dispatch order. A token whose every assignment is dropped gets no MLP output (the
 * residual carries it).
 * Owns: moe_plan_t. Uses: core/. Used by: model/moe.c. */
#ifndef LLMT_MOE_ROUTE_H
#define LLMT_MOE_ROUTE_H
#include <stdbool.h>

typedef enum { MOE_DROP_PROBS, MOE_DROP_POSITION } moe_drop_t;

typedef struct moe_plan {
    int N, E, k;
    int N_max;          /* the most tokens moe_plan_build may be given (moe_plan_create's) */
    int cap;            /* assignments an expert may keep (N when dropless; never above N) */
    int *load;          /* [E] assignments per expert before dropping */
    int *kept;          /* [E] kept per expert (<= cap) */
    int *offset;        /* [E + 1] first dispatch row of expert e; offset[E] = M */
    int *token;         /* [N*k] dispatch row r -> its token (first M valid) */
    int *choice;        /* [N*k] dispatch row r -> j, its place among the token's k choices */
    int M;              /* kept assignments in all */
    int dropped;        /* N*k - M */
} moe_plan_t;

/* Capacity for N tokens (see above; a quotient within 1e-9 relative of an integer is that
 * integer, so 1.1 not being exact in binary cannot add one; at most N). */
int moe_capacity(int N, int k, int E, double capacity_factor);
/* Allocate for up to N_max tokens. */
void moe_plan_create(moe_plan_t *p, int N_max, int E, int k);
void moe_plan_destroy(moe_plan_t *p);
/* Fill p from idx[N, k] and probs[N, E] (host arrays; probs used by MOE_DROP_PROBS only). */
void moe_plan_build(moe_plan_t *p, const int *idx, const float *probs, int N, double capacity_factor,
                    moe_drop_t policy);
/* The part of plan g (built on a micro-batch's tokens that several ranks hold: context
 * parallelism) that concerns this rank's N tokens: local_of[t] is the local index of g's token
 * t, or -1. p keeps g's load (the whole micro-batch's, for the aux loss) and cap; kept, offset,
 * token (local indices, ascending within an expert as g's), choice, M and dropped (of the N k
 * local assignments) are this rank's. */
void moe_plan_restrict(moe_plan_t *p, const moe_plan_t *g, const int *local_of, int N);
#endif
