/* pipeline.c — the schedule runner (see pipeline.h). */
#include "train/pipeline.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/prof.h"
#include "parallel/comm.h"

int pipe_slots_needed(pipe_schedule_t schedule, int pp, int v, int stage, int n_micro) {
    char why[400];
    if (sched_constraint_error(schedule, pp, v, n_micro, pp * v, why, sizeof why))
        return n_micro * v; /* not runnable (refused elsewhere): an upper bound for the planner */
    schedule_t train, eval;
    sched_build(&train, schedule, pp, v, n_micro, true);
    sched_build(&eval, schedule, pp, v, 1, false);
    int n = train.rank[stage].n_slots > eval.rank[stage].n_slots ? train.rank[stage].n_slots
                                                                 : eval.rank[stage].n_slots;
    sched_destroy(&train);
    sched_destroy(&eval);
    return n;
}

/* The lists of every rank, checked by the simulator with MPI's semantics (tags) and with an
 * ordered transport's (NCCL: no tags, a stream per direction), whichever carries them: each
 * rank runs the checks on the same lists, so all ranks reach the same verdict and end together. */
static void build_checked(schedule_t *s, const pipe_t *p, int n, bool backward) {
    sched_build(s, p->schedule, p->pp, p->v, n, backward);
    const sched_cost_t unit = {1, 1, 1};
    sched_sim_t sim;
    sched_simulate(s, &unit, &sim);
    const char *how = "before running";
    if (sim.ok) {
        sched_check_ordered(s, &sim);
        how = "on an ordered transport (NCCL)";
    }
    if (!sim.ok) {
        char msg[760];
        snprintf(msg, sizeof msg, "internal error: the %s schedule for pp = %d, v = %d, %d "
                 "micro-batches fails its check %s: %s", sched_kind_name(p->schedule), p->pp,
                 p->v, n, how, sim.err);
        fatal_agreed(LLMT_EXIT_INTERNAL, msg);
    }
    ASSERT(s->rank[p->stage].n_slots <= p->m->par.n_slots);
}

void pipe_create(pipe_t *p, gpt_t *m, const grid_t *g, int n_micro, pipe_schedule_t schedule,
                 int v) {
    memset(p, 0, sizeof *p);
    p->m = m;
    p->pp_group = g->pp_group;
    p->pp = g->pp;
    p->tp_group = g->tp_group;
    /* sequence parallel: a message is already the rank's rows; LLMT_PP_WHOLE=1 (a test knob)
     * sends the whole activation from every tp rank, to compare */
    const char *whole = getenv("LLMT_PP_WHOLE");
    p->tp = m->sp || (whole && strcmp(whole, "1") == 0) ? 1 : g->tp;
    p->rank_tp = p->tp > 1 ? g->rank_tp : 0;
    p->stage = g->rank_pp;
    p->n_micro = n_micro;
    p->schedule = schedule;
    p->v = schedule == SCHED_INTERLEAVED ? v : 1;
    ASSERT(m->n_chunks == p->v);
    build_checked(&p->train, p, n_micro, true);
    p->fwd_send = xcalloc((size_t)m->par.n_slots, sizeof(comm_req_t)); /* zero: COMM_REQ_NULL */
    p->bwd_send = xcalloc((size_t)m->par.n_slots, sizeof(comm_req_t));
}

void pipe_set_micro_batches(pipe_t *p, int n_micro) {
    if (n_micro == p->n_micro) return;
    sched_destroy(&p->train);
    p->n_micro = n_micro;
    build_checked(&p->train, p, n_micro, true); /* asserts the slots suffice */
}

void pipe_destroy(pipe_t *p) {
    sched_destroy(&p->train);
    if (p->eval_n) sched_destroy(&p->eval);
    xfree(p->fwd_send);
    xfree(p->bwd_send);
    memset(p, 0, sizeof *p);
}

void pipe_set_last_micro_hook(pipe_t *p, gpt_layer_hook_t hook, void *ctx) {
    p->last_micro_hook = hook;
    p->hook_ctx = ctx;
}

typedef struct run {
    const int *tokens, *targets;
    int B, T;
    bool backward;
    float dloss;
    double loss_sum;
} run_t;

static int vstage(const pipe_t *p, int chunk) { return chunk * p->pp + p->stage; }
static bool embeds(const pipe_t *p, int chunk) { return vstage(p, chunk) == 0; }
static bool heads(const pipe_t *p, int chunk) { return vstage(p, chunk) == p->pp * p->v - 1; }

/* The slot's earlier sends that read what this action rewrites are complete. */
static void wait_slot(pipe_t *p, const sched_act_t *a) {
    if (a->wait & SCHED_WAIT_FWD) comm_wait(&p->fwd_send[a->slot], COMM_PP);
    if (a->wait & SCHED_WAIT_BWD) comm_wait(&p->bwd_send[a->slot], COMM_PP);
}

/* The model's view of the action: its slot, micro-batch (dropout masks are keyed by its
 * samples) and chunk; a forward-only pass keeps nothing for a backward that will not come. The
 * chunk's block gradients are final after the last micro-batch's backward, or with a split
 * backward its W: that one reports each block done (the data-parallel buckets start). */
static gpt_pass_t pass_of(const pipe_t *p, const run_t *r, const sched_act_t *a,
                          bool final_part) {
    const bool hook = final_part && a->micro == p->n_micro - 1;
    return (gpt_pass_t){.slot = a->slot, .micro = a->micro, .chunk = a->chunk,
                        .forward_only = !r->backward, .dloss = r->dloss,
                        .on_layer_done = hook ? p->last_micro_hook : NULL,
                        .hook_ctx = p->hook_ctx};
}

static void forward(pipe_t *p, run_t *r, const sched_act_t *a) {
    gpt_t *m = p->m;
    const int i = a->micro;
    const size_t N = (size_t)r->B * r->T;
    const gpt_pass_t pass = pass_of(p, r, a, false);
    prof_begin(PROF_FORWARD, "forward", i, p->stage); /* the compute, not the waits around it */
    if (embeds(p, a->chunk)) gpt_embed(m, &pass, r->tokens + (size_t)i * N, r->B, r->T);
    p->last_out = gpt_stage_forward(m, &pass, r->B, r->T);
    if (heads(p, a->chunk))
        r->loss_sum += gpt_head(m, &pass, r->targets + (size_t)i * N, r->B, r->T, i == 0);
    prof_end(PROF_FORWARD, 0);
    if (r->backward && ++p->inflight > p->max_inflight) p->max_inflight = p->inflight;
}

/* The recomputation and backward draw the micro-batch's masks again. */
static void backward(pipe_t *p, run_t *r, const sched_act_t *a) {
    const bool split = p->train.split;
    const gpt_pass_t pass = pass_of(p, r, a, !split);
    prof_begin(PROF_BACKWARD, "backward", a->micro, p->stage);
    gpt_stage_backward(p->m, &pass, r->B, r->T, a->micro == 0);
    prof_end(PROF_BACKWARD, 0);
    if (!split) p->inflight--;
}

/* ZB-H1's W: the micro-batch's deferred weight gradients (the first micro-batch overwrites, as
 * its B did for the rest); it releases the micro-batch's activations. */
static void weight_grad(pipe_t *p, run_t *r, const sched_act_t *a) {
    const gpt_pass_t pass = pass_of(p, r, a, true);
    prof_begin(PROF_BACKWARD, "weight-grad", a->micro, p->stage);
    gpt_stage_weight_grad(p->m, &pass, a->micro == 0);
    prof_end(PROF_BACKWARD, 0);
    p->inflight--;
}

static void run_action(pipe_t *p, run_t *r, const sched_act_t *a) {
    gpt_slot_t *sl = &p->m->slot[a->slot];
    /* the stage's activation (sequence parallel: the rank's rows); with scatter/gather, this tp
     * rank's piece of it (C, hence NC, is a multiple of tp) */
    const size_t NC = gpt_stage_floats(p->m, r->B, r->T), n = NC / (size_t)p->tp;
    const size_t off = n * (size_t)p->rank_tp;
    ASSERT(n * (size_t)p->tp == NC);
    comm_req_t req;
    wait_slot(p, a);
    switch (a->op) {
    case ACT_RECV_F:
    case ACT_RECV_B: {
        float *buf = a->op == ACT_RECV_F ? sl->input : sl->dout;
        comm_irecv(buf + off, n, a->peer, a->tag, p->pp_group, &req);
        comm_wait_recv(&req, n);
        if (p->tp > 1) comm_allgather_inplace(buf, n, p->tp_group, COMM_TP, "stage input gather");
        break;
    }
    case ACT_SEND_F:
        comm_isend(p->last_out + off, n, a->peer, a->tag, p->pp_group, COMM_PP, &p->fwd_send[a->slot]);
        p->p2p_bytes += n * sizeof(float);
        break;
    case ACT_SEND_B:
        comm_isend(sl->dout + off, n, a->peer, a->tag, p->pp_group, COMM_PP, &p->bwd_send[a->slot]);
        p->p2p_bytes += n * sizeof(float);
        break;
    case ACT_F: forward(p, r, a); break;
    case ACT_B: backward(p, r, a); break;
    case ACT_W: weight_grad(p, r, a); break;
    }
}

double pipe_run(pipe_t *p, const int *tokens, const int *targets, int n, int B, int T,
                bool backward, float dloss) {
    ASSERT(!backward || n == p->n_micro);
    if (!backward && n != p->eval_n) { /* forward-only lists for n micro-batches, once */
        if (p->eval_n) sched_destroy(&p->eval);
        build_checked(&p->eval, p, n, false);
        p->eval_n = n;
    }
    const sched_rank_t *list = &(backward ? &p->train : &p->eval)->rank[p->stage];
    run_t r = {tokens, targets, B, T, backward, dloss, 0.0};
    p->inflight = 0;
    for (int k = 0; k < list->n; k++) run_action(p, &r, &list->act[k]);
    for (int s = 0; s < p->m->par.n_slots; s++) { /* every message of the pass delivered */
        comm_wait(&p->fwd_send[s], COMM_PP);
        comm_wait(&p->bwd_send[s], COMM_PP);
    }
    return r.loss_sum;
}
