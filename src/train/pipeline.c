/* pipeline.c — GPipe and 1F1B schedules (see pipeline.h). */
#include "train/pipeline.h"
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/prof.h"
#include "parallel/comm.h"

pipe_schedule_t pipe_schedule_from_name(const char *name) {
    return strcmp(name, "gpipe") == 0 ? SCHED_GPIPE : SCHED_1F1B;
}

int pipe_slots_needed(pipe_schedule_t schedule, int pp, int stage, int n_micro) {
    int k = schedule == SCHED_GPIPE ? n_micro : pp - stage;
    return k < n_micro ? k : n_micro;
}

void pipe_create(pipe_t *p, gpt_t *m, const grid_t *g, int n_micro, pipe_schedule_t schedule) {
    memset(p, 0, sizeof *p);
    p->m = m;
    p->pp_comm = g->pp_comm;
    p->pp = g->pp;
    p->stage = g->rank_pp;
    p->n_micro = n_micro;
    p->schedule = schedule;
    p->fwd_send = xmalloc(sizeof(MPI_Request) * (size_t)m->par.n_slots);
    p->bwd_send = xmalloc(sizeof(MPI_Request) * (size_t)m->par.n_slots);
    for (int s = 0; s < m->par.n_slots; s++) p->fwd_send[s] = p->bwd_send[s] = MPI_REQUEST_NULL;
}

void pipe_destroy(pipe_t *p) {
    xfree(p->fwd_send);
    xfree(p->bwd_send);
    memset(p, 0, sizeof *p);
}

typedef struct run {
    const int *tokens, *targets;
    int B, T;
    bool backward;
    float dloss;
    double loss_sum;
} run_t;

static bool first_stage(const pipe_t *p) { return p->stage == 0; }
static bool last_stage(const pipe_t *p) { return p->stage == p->pp - 1; }

static void forward_micro(pipe_t *p, run_t *r, int i) {
    gpt_t *m = p->m;
    const int s = i % m->par.n_slots;
    const size_t N = (size_t)r->B * r->T, NC = N * (size_t)m->C;
    comm_wait(&p->fwd_send[s], COMM_PP); /* the slot's buffers are about to be rewritten */
    comm_wait(&p->bwd_send[s], COMM_PP);
    gpt_set_micro(m, s, i); /* dropout masks are keyed by the micro-batch's samples */
    if (!first_stage(p)) {
        MPI_Request req;
        comm_irecv(m->slot[s].input, NC, p->stage - 1, 2 * i, p->pp_comm, &req);
        comm_wait_recv(&req, NC);
    }
    prof_begin(PROF_FORWARD, "forward", i, p->stage); /* the compute, not the waits around it */
    if (first_stage(p)) gpt_embed(m, s, r->tokens + (size_t)i * N, r->B, r->T);
    const float *out = gpt_stage_forward(m, s, r->B, r->T);
    if (last_stage(p))
        r->loss_sum += gpt_head(m, s, r->targets + (size_t)i * N, r->B, r->T, r->backward,
                                r->dloss, i == 0);
    prof_end(PROF_FORWARD, 0);
    if (!last_stage(p))
        comm_isend(out, NC, p->stage + 1, 2 * i, p->pp_comm, COMM_PP, &p->fwd_send[s]);
    if (r->backward && ++p->inflight > p->max_inflight) p->max_inflight = p->inflight;
}

static void backward_micro(pipe_t *p, run_t *r, int i) {
    gpt_t *m = p->m;
    const int s = i % m->par.n_slots;
    const size_t NC = (size_t)r->B * r->T * (size_t)m->C;
    if (!last_stage(p)) {
        MPI_Request req;
        comm_irecv(m->slot[s].dout, NC, p->stage + 1, 2 * i + 1, p->pp_comm, &req);
        comm_wait_recv(&req, NC);
    }
    bool last_micro = i == p->n_micro - 1;
    m->on_layer_done = last_micro ? p->last_micro_hook : NULL;
    m->hook_ctx = p->hook_ctx;
    prof_begin(PROF_BACKWARD, "backward", i, p->stage);
    gpt_stage_backward(m, s, r->B, r->T, i == 0);
    prof_end(PROF_BACKWARD, 0);
    m->on_layer_done = NULL;
    if (!first_stage(p))
        comm_isend(m->slot[s].dout, NC, p->stage - 1, 2 * i + 1, p->pp_comm, COMM_PP,
                   &p->bwd_send[s]);
    p->inflight--;
}

/* The order of forward (F) and backward (B) steps on this stage. */
static void run_schedule(pipe_t *p, run_t *r, int n) {
    if (!r->backward) {
        for (int i = 0; i < n; i++) forward_micro(p, r, i);
        return;
    }
    if (p->schedule == SCHED_GPIPE) {
        for (int i = 0; i < n; i++) forward_micro(p, r, i);
        for (int i = 0; i < n; i++) backward_micro(p, r, i);
        return;
    }
    int warmup = p->pp - p->stage - 1;
    if (warmup > n) warmup = n;
    for (int i = 0; i < warmup; i++) forward_micro(p, r, i);
    for (int k = 0; k < n - warmup; k++) { /* steady state: one forward, one backward */
        forward_micro(p, r, warmup + k);
        backward_micro(p, r, k);
    }
    for (int i = n - warmup; i < n; i++) backward_micro(p, r, i);
}

double pipe_run(pipe_t *p, const int *tokens, const int *targets, int n, int B, int T,
                bool backward, float dloss) {
    ASSERT(!backward || n == p->n_micro);
    run_t r = {tokens, targets, B, T, backward, dloss, 0.0};
    p->inflight = 0;
    run_schedule(p, &r, n);
    for (int s = 0; s < p->m->par.n_slots; s++) { /* every message of the pass delivered */
        comm_wait(&p->fwd_send[s], COMM_PP);
        comm_wait(&p->bwd_send[s], COMM_PP);
    }
    return r.loss_sum;
}
