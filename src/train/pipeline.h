/* pipeline.h — the one runner of pipeline schedules over the stages of gpt_t. A schedule is data
 * (train/schedule.h): per rank a list of F / B / W / send / receive actions. pipe_create
 * generates the step's lists for the grid (GPipe: all forwards, then all backwards; 1F1B /
 * PipeDream-flush: a stage holds at most pp - stage micro-batches in flight; interleaved 1F1B:
 * v chunks per stage, Megatron's order; ZB-H1: 1F1B's order with each backward split into B and
 * a deferred W, gpt_stage_weight_grad) and simulates them on every rank before anything runs:
 * a list that does not match or could deadlock is an internal error with the simulator's
 * reason, never a hang. pipe_run then executes this rank's list.
 * Activations go forward and their gradients backward by non-blocking point-to-point messages
 * on the grid's pp communicator (tags: schedule.h); a slot's buffers are rewritten only after
 * its earlier sends completed. With pp = 1 every schedule reduces to forward/backward per
 * micro-batch.
 * Owns: the action lists, the send requests and the in-flight accounting. Uses: train/schedule,
 * model/gpt, parallel/. Used by: train/trainer, train/planner. */
#ifndef LLMT_PIPELINE_H
#define LLMT_PIPELINE_H
#include <stdbool.h>
#include "model/gpt.h"
#include "parallel/grid.h"
#include "train/schedule.h"

typedef sched_kind_t pipe_schedule_t;

typedef struct pipe {
    gpt_t *m;
    const comm_group_t *pp_group;
    int pp, stage, n_micro, v;
    /* scatter/gather between stages (tp > 1 without sequence parallelism, whose stage
     * activations are replicated over tp): each tp rank sends and receives its 1/tp of a
     * message, and the receiving stage all-gathers the rest over tp_group (fast links inside a
     * node) instead of every tp rank carrying the whole message between stages */
    const comm_group_t *tp_group;
    int tp, rank_tp;
    pipe_schedule_t schedule;
    schedule_t train;                 /* the step's lists (all ranks: the simulator needs them) */
    schedule_t eval;                  /* forward only, for eval_n micro-batches (built on use) */
    int eval_n;
    comm_req_t *fwd_send, *bwd_send;  /* [n_slots] pending sends of each slot's buffers */
    const float *last_out;            /* the output of the last F (its SEND_F follows) */
    int inflight, max_inflight;       /* (chunk, micro-batch) activations held (until B, or
                                         with a split backward until W) */
    size_t p2p_bytes;                 /* bytes this rank sent point-to-point (all passes) */
    /* called after each block's backward of the step's last micro-batch (data-parallel buckets) */
    gpt_layer_hook_t last_micro_hook;
    void *hook_ctx;
} pipe_t;

/* Activation slots a stage needs for n_micro micro-batches under a schedule with v chunks per
 * stage (training and one-micro-batch evaluation). */
int pipe_slots_needed(pipe_schedule_t schedule, int pp, int v, int stage, int n_micro);
/* Build and simulate the lists (with tags, and ordered as NCCL runs them); a failing simulation
 * ends every rank (exit 3) with its reason. */
void pipe_create(pipe_t *p, gpt_t *m, const grid_t *g, int n_micro, pipe_schedule_t schedule,
                 int v);
void pipe_destroy(pipe_t *p);
/* Called after each block's backward of a step's last micro-batch, with ctx (the data-parallel
 * buckets start there). */
void pipe_set_last_micro_hook(pipe_t *p, gpt_layer_hook_t hook, void *ctx);
/* A new micro-batch count for training passes (a curriculum stage's accumulation): the training
 * lists are built and checked again; n_micro at most pipe_create's (the slots are sized for it). */
void pipe_set_micro_batches(pipe_t *p, int n_micro);
/* One pass over n micro-batches: tokens / targets are host arrays [n][B*T]. With backward,
 * n = n_micro, every micro-batch's loss gradient is dloss per token and gradients accumulate
 * from zero. Returns the sum of the micro-batches' mean losses on the stage with the head, 0 on
 * other stages. */
double pipe_run(pipe_t *p, const int *tokens, const int *targets, int n, int B, int T,
                bool backward, float dloss);
#endif
