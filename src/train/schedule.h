/* schedule.h — pipeline schedules as data. A generator writes, for every pipeline rank, the list
 * of actions it performs in one step: F (forward of one micro-batch through one chunk of
 * layers), B (its backward; with a split backward, B is the input gradient only), W (the
 * deferred weight gradient), and the point-to-point RECV/SEND around them, each with micro-batch,
 * chunk, activation slot, peer and tag. A simulator executes all ranks' lists with the runner's
 * semantics (a send is posted without waiting, a receive waits for its send, an activation slot
 * is reused only after its earlier sends were received) and so proves before training that the
 * lists match and cannot deadlock; it also measures peak in-flight activations and, under a
 * stated compute-time model, the bubble. A second run proves the same on an ordered transport
 * (NCCL: messages matched by order, one stream per direction). train/pipeline executes the
 * lists (one runner).
 *
 * Layout (Megatron's): rank r holds v chunks; chunk c of rank r is model chunk c*p + r (virtual
 * stage). Activations flow virtual stage s -> s + 1, i.e. rank r -> r + 1, and from rank p - 1
 * chunk c to rank 0 chunk c + 1. Tag of a message: 2 * (sender chunk * m + micro) + (0 forward,
 * 1 backward); for v = 1 that is 2i / 2i+1.
 * Owns: the action lists. Uses: core/, config/ (the schedule enum). Used by: train/pipeline,
 * train/planner, main (--plan). */
#ifndef LLMT_SCHEDULE_H
#define LLMT_SCHEDULE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "config/config.h"

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1 } sched_kind_t;
typedef enum { ACT_F, ACT_B, ACT_W, ACT_RECV_F, ACT_SEND_F, ACT_RECV_B, ACT_SEND_B } act_op_t;

typedef struct sched_act {
    act_op_t op;
    int chunk, micro;
    int slot;       /* activation slot of (chunk, micro) on this rank */
    int peer, tag;  /* RECV / SEND only */
    /* before the action: wait until the slot's earlier forward (SCHED_WAIT_FWD) / backward
     * (SCHED_WAIT_BWD) sends were received, as the action (re)writes the buffers they read */
    int wait;
} sched_act_t;
enum { SCHED_WAIT_FWD = 1, SCHED_WAIT_BWD = 2 };

typedef struct sched_rank {
    sched_act_t *act;
    int n, cap;
    int n_slots;    /* activation slots the list uses = its peak (chunk, micro) in flight */
} sched_rank_t;

typedef struct schedule {
    sched_kind_t kind;
    int p, v, m;    /* ranks, chunks per rank, micro-batches */
    bool backward;  /* false: forward only (evaluation) */
    bool split;     /* backward split into B (input gradient) and W (weight gradient) */
    sched_rank_t *rank; /* [p] */
} schedule_t;

/* Compute-time model of the simulator, in units: F, B (input gradient when split, else the
 * whole backward) and W. */
typedef struct sched_cost {
    double f, b, w;
} sched_cost_t;

typedef struct sched_sim {
    bool ok;
    char err[512];         /* why not ok: the unmatched message or the ranks of a deadlock */
    double makespan;       /* time at which the last rank finishes */
    double bubble;         /* idle fraction: 1 - sum(busy) / (p * makespan) */
    int peak_inflight_max; /* over ranks */
    size_t messages;       /* point-to-point messages of the step (all ranks) */
} sched_sim_t;

/* Name of a schedule ('gpipe', '1f1b', 'interleaved', 'zb-h1'); -1 when unknown. */
int sched_kind_from_name(const char *name);
/* The schedule of &parallel schedule (config_t.choice.schedule). */
sched_kind_t sched_kind_of(cfg_schedule_t s);
const char *sched_kind_name(sched_kind_t k);
/* Why (kind, p, v, m) cannot be scheduled, with the nearest valid settings; NULL when it can.
 * n_layer: the model's layers (interleaved needs n_layer % (p * v) == 0). */
const char *sched_constraint_error(sched_kind_t k, int p, int v, int m, int n_layer, char *buf,
                                   size_t len);
/* Generate the lists (constraints must hold). */
void sched_build(schedule_t *s, sched_kind_t kind, int p, int v, int m, bool backward);
void sched_destroy(schedule_t *s);
/* Append one action to rank r's list (generators and tests). */
void sched_push(schedule_t *s, int r, act_op_t op, int chunk, int micro);
/* Add the RECV/SEND actions around F and B and assign slots, from F/B/W-only lists. */
void sched_finish(schedule_t *s);
/* Run every rank's list with the runner's semantics under the cost model. */
void sched_simulate(const schedule_t *s, const sched_cost_t *cost, sched_sim_t *out);
/* The lists again under the semantics of an ORDERED transport (NCCL, parallel/comm_nccl.c): no
 * tags, a receive takes the next message its sender sends it; the transfers of one direction
 * (to higher ranks, to lower ones) run one after another on one stream per rank, and a send
 * completes only together with its receive (rendezvous, the worst case). The host posts as the
 * runner does (a send without waiting, a receive and then waits for it, a slot's earlier sends
 * waited for before it is rewritten, all sends at the end). ok: every receive gets the message
 * of its own tag and nothing waits forever; else err says where the order breaks. */
void sched_check_ordered(const schedule_t *s, sched_sim_t *out);
/* Peak (chunk, micro) activations in flight on rank r: forwarded, not yet released (by B, or
 * by W when split). */
int sched_peak_inflight(const schedule_t *s, int r);
/* Per rank one line of compute actions ("F0 F1 B0 ..."; chunk as a suffix when v > 1: F0.1 is
 * micro-batch 0 of chunk 1); at most max_actions per line. */
void sched_print(const schedule_t *s, FILE *f, int max_actions);
#endif
