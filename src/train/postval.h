/* postval.h — optimizer post-validation (Qi et al., 2023, "zero bubble", section 4) for the
 * ZB-H1 schedule: the step's global reductions (loss, gradient sum of squares) are started
 * without waiting, the AdamW update is applied optimistically (no clipping), and only then is
 * the result of the reductions awaited and checked. The rare step the check fails (the norm
 * needs clipping, an Inf/NaN or another anomaly, an fp16 overflow) has its update undone from
 * the copy taken before it, and the trainer then does what it would have done without
 * post-validation (apply with the clip scale, or skip): the same weights either way.
 * Holds: copies of the optimizer's elements (the updated tensor — the fp32 master, or the
 * weights themselves —, both moments) and the update count: 3 x zero_state_floats floats
 * (MEM_OPTIMIZER; the planner counts them).
 * Owns: those copies and the pending reduction. Uses: train/optimizer, train/zero, model/gpt,
 * parallel/comm. Used by: train/trainer, train/planner. */
#ifndef LLMT_POSTVAL_H
#define LLMT_POSTVAL_H
#include <stdint.h>
#include "train/optimizer.h"
#include "train/zero.h"

typedef struct postval {
    float *target, *m, *v; /* [n] before the optimistic update */
    size_t n;
    int64_t t;
    double red[3];         /* loss, z-loss and the owned sum of squares, reduced over all ranks */
    comm_req_t req;
    const comm_group_t *world; /* every rank: the reduction of red */
    int64_t undone;        /* optimistic updates undone so far */
} postval_t;

/* Floats of the copies for n optimizer elements (the planner's count). */
size_t postval_floats(size_t n);
void postval_create(postval_t *pv, const ops_t *ops, size_t n, const comm_group_t *world);
void postval_destroy(postval_t *pv, const ops_t *ops);
/* Start summing (loss, z-loss, sumsq) over MPI_COMM_WORLD; postval_wait returns the sums. */
void postval_start(postval_t *pv, double loss_part, double z_loss_part, double sumsq);
void postval_wait(postval_t *pv, double *loss, double *z_loss, double *sumsq);
/* Copy what the next adamw_step changes on this rank; postval_undo puts it back (the dp
 * replicas' parameters gathered again, as after a step). */
void postval_save(postval_t *pv, const adamw_t *opt, gpt_t *m, zero_t *z);
void postval_undo(postval_t *pv, adamw_t *opt, gpt_t *m, zero_t *z);
#endif
