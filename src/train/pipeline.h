/* pipeline.h — pipeline-parallel schedules over the stages of gpt_t: GPipe (all forwards, then
 * all backwards) and 1F1B / PipeDream-flush (warm-up forwards, then one forward one backward,
 * then cool-down backwards: a stage holds at most pp - stage micro-batches in flight).
 * Activations go forward and their gradients backward by non-blocking point-to-point messages
 * on the grid's pp communicator (tag 2i forward, 2i+1 backward for micro-batch i).
 * With pp = 1 both schedules reduce to forward/backward per micro-batch.
 * Owns: the send requests and the in-flight accounting. Uses: model/gpt, parallel/.
 * Used by: train/trainer. */
#ifndef LLMT_PIPELINE_H
#define LLMT_PIPELINE_H
#include <mpi.h>
#include <stdbool.h>
#include "model/gpt.h"
#include "parallel/grid.h"

typedef enum { SCHED_GPIPE, SCHED_1F1B } pipe_schedule_t;

typedef struct pipe {
    gpt_t *m;
    MPI_Comm pp_comm;
    int pp, stage, n_micro;
    pipe_schedule_t schedule;
    MPI_Request *fwd_send, *bwd_send; /* [n_slots] pending sends of each slot's buffers */
    int inflight, max_inflight;       /* micro-batches forwarded but not yet backwarded */
    /* called after each block's backward of the step's last micro-batch (data-parallel buckets) */
    gpt_layer_hook_t last_micro_hook;
    void *hook_ctx;
} pipe_t;

/* Activation slots a stage needs for n_micro micro-batches under a schedule. */
int pipe_slots_needed(pipe_schedule_t schedule, int pp, int stage, int n_micro);
pipe_schedule_t pipe_schedule_from_name(const char *name);
void pipe_create(pipe_t *p, gpt_t *m, const grid_t *g, int n_micro, pipe_schedule_t schedule);
void pipe_destroy(pipe_t *p);
/* One pass over n micro-batches: tokens / targets are host arrays [n][B*T]. With backward,
 * every micro-batch's loss gradient is dloss per token and gradients accumulate from zero.
 * Returns the sum of the micro-batches' mean losses on the last stage, 0 on other stages. */
double pipe_run(pipe_t *p, const int *tokens, const int *targets, int n, int B, int T,
                bool backward, float dloss);
#endif
