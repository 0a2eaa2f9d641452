/* schedule.c — schedule generators, the communication pass and the simulator (see schedule.h). */
#include "train/schedule.h"
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};

int sched_kind_from_name(const char *name) {
    for (int k = 0; k < 4; k++)
        if (strcmp(name, kind_names[k]) == 0) return k;
    return -1;
}

const char *sched_kind_name(sched_kind_t k) { return kind_names[k]; }

sched_kind_t sched_kind_of(cfg_schedule_t s) {
    switch (s) {
    case CFG_SCHED_GPIPE: return SCHED_GPIPE;
    case CFG_SCHED_INTERLEAVED: return SCHED_INTERLEAVED;
    case CFG_SCHED_ZB_H1: return SCHED_ZBH1;
    case CFG_SCHED_1F1B: break;
    }
    return SCHED_1F1B;
}

/* The multiples of `step` just below and above x (below only when positive). */
static void nearest_multiples(int x, int step, int *lo, int *hi) {
    *lo = x / step * step;
    *hi = *lo + step;
    if (*lo == x) *hi = x;
}

const char *sched_constraint_error(sched_kind_t k, int p, int v, int m, int n_layer, char *buf,
                                   size_t len) {
    if (k != SCHED_INTERLEAVED) return NULL;
    if (p < 2) {
        snprintf(buf, len, "&parallel schedule = 'interleaved' (virtual_stages = %d) needs "
                 "pp >= 2 (pp = %d): set pp >= 2, or schedule = '1f1b' with virtual_stages = 1",
                 v, p);
        return buf;
    }
    if (v < 2) {
        snprintf(buf, len, "&parallel schedule = 'interleaved' needs virtual_stages >= 2 (got %d); "
                 "with one chunk per rank use schedule = '1f1b'", v);
        return buf;
    }
    if (n_layer % (p * v) != 0) {
        int lo, hi;
        nearest_multiples(n_layer, p * v, &lo, &hi);
        char vs[128] = "";
        size_t at = 0;
        for (int c = 2; c <= n_layer / p && at + 8 < sizeof vs; c++)
            if (n_layer % (p * c) == 0) at += (size_t)snprintf(vs + at, sizeof vs - at, "%s%d", at ? ", " : "", c);
        snprintf(buf, len, "&parallel virtual_stages = %d: &model n_layer = %d is not divisible by "
                 "pp * virtual_stages = %d; nearest valid: n_layer = %d%s%.0d, or virtual_stages "
                 "in {%s} for pp = %d", v, n_layer, p * v, lo > 0 ? lo : hi, lo > 0 ? " or " : "",
                 lo > 0 ? hi : 0, at ? vs : "none", p);
        return buf;
    }
    if (m % p != 0) {
        int lo, hi;
        nearest_multiples(m, p, &lo, &hi);
        snprintf(buf, len, "&parallel schedule = 'interleaved': %d micro-batches per step (&train "
                 "global_batch / (micro_batch * dp)) is not a multiple of pp = %d; nearest valid: "
                 "%d%s%.0d micro-batches", m, p, lo > 0 ? lo : hi, lo > 0 ? " or " : "",
                 lo > 0 ? hi : 0);
        return buf;
    }
    return NULL;
}

/* ---------------------------------------------------------------- lists */

void sched_push(schedule_t *s, int r, act_op_t op, int chunk, int micro) {
    sched_rank_t *R = &s->rank[r];
    if (R->n == R->cap) {
        R->cap = R->cap ? 2 * R->cap : 64;
        R->act = xrealloc_small(R->act, (size_t)R->cap * sizeof(sched_act_t));
    }
    sched_act_t a = {op, chunk, micro, -1, -1, -1, 0};
    R->act[R->n++] = a;
}

static void gen_forward_only(schedule_t *s, int r) {
    for (int i = 0; i < s->m; i++)
        for (int c = 0; c < s->v; c++) sched_push(s, r, ACT_F, c, i);
}

static void gen_gpipe(schedule_t *s, int r) {
    for (int i = 0; i < s->m; i++) sched_push(s, r, ACT_F, 0, i);
    for (int i = 0; i < s->m; i++) sched_push(s, r, ACT_B, 0, i);
}

/* 1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then one forward one backward, then the
 * cool-down backwards. */
static void gen_1f1b(schedule_t *s, int r) {
    const int m = s->m;
    int warmup = s->p - r - 1;
    if (warmup > m) warmup = m;
    for (int i = 0; i < warmup; i++) sched_push(s, r, ACT_F, 0, i);
    for (int k = 0; k < m - warmup; k++) {
        sched_push(s, r, ACT_F, 0, warmup + k);
        sched_push(s, r, ACT_B, 0, k);
    }
    for (int i = m - warmup; i < m; i++) sched_push(s, r, ACT_B, 0, i);
}

/* Megatron's interleaved 1F1B: the k-th forward of a rank is micro-batch
 * (k / (p v)) p + k % p of chunk (k / p) % v (groups of p micro-batches go through each chunk
 * in turn), the k-th backward the same micro-batch of chunk v - 1 - (k / p) % v; warm-up
 * (p - r - 1) 2 + (v - 1) p forwards (all of them when that exceeds m v), then 1F1B. */
static int il_micro(const schedule_t *s, int k) { return k / (s->p * s->v) * s->p + k % s->p; }
static int il_chunk(const schedule_t *s, int k, bool fwd) {
    int c = k / s->p % s->v;
    return fwd ? c : s->v - 1 - c;
}

static void gen_interleaved(schedule_t *s, int r) {
    const int p = s->p, total = s->m * s->v;
    int warmup = (p - r - 1) * 2 + (s->v - 1) * p;
    if (warmup > total) warmup = total;
    for (int k = 0; k < warmup; k++) sched_push(s, r, ACT_F, il_chunk(s, k, true), il_micro(s, k));
    for (int k = 0; k < total - warmup; k++) {
        sched_push(s, r, ACT_F, il_chunk(s, warmup + k, true), il_micro(s, warmup + k));
        sched_push(s, r, ACT_B, il_chunk(s, k, false), il_micro(s, k));
    }
    for (int k = total - warmup; k < total; k++)
        sched_push(s, r, ACT_B, il_chunk(s, k, false), il_micro(s, k));
}

/* ZB-H1 (Qi et al., 2023): 1F1B's order of F and B, the backward split into B (input gradient,
 * on the critical path) and W (weight gradient, deferred). Rank r defers up to r weight
 * gradients: its 1F1B peak is p - r micro-batches, so it may hold r more and still not exceed
 * stage 0's p; the deferred W run in the cool-down, where 1F1B waits for gradients. */
static void gen_zbh1(schedule_t *s, int r) {
    const int m = s->m;
    int warmup = s->p - r - 1, next_w = 0;
    if (warmup > m) warmup = m;
    for (int i = 0; i < warmup; i++) sched_push(s, r, ACT_F, 0, i);
    for (int k = 0; k < m - warmup; k++) {
        sched_push(s, r, ACT_F, 0, warmup + k);
        sched_push(s, r, ACT_B, 0, k);
        if (k + 1 - next_w > r) sched_push(s, r, ACT_W, 0, next_w++);
    }
    for (int i = m - warmup; i < m; i++) {
        sched_push(s, r, ACT_B, 0, i);
        sched_push(s, r, ACT_W, 0, next_w++); /* one per backward: into the wait for the next */
    }
    while (next_w < m) sched_push(s, r, ACT_W, 0, next_w++);
}

void sched_build(schedule_t *s, sched_kind_t kind, int p, int v, int m, bool backward) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->p = p;
    s->v = kind == SCHED_INTERLEAVED ? v : 1;
    s->m = m;
    s->backward = backward;
    s->split = backward && kind == SCHED_ZBH1;
    s->rank = xcalloc((size_t)p, sizeof(sched_rank_t));
    for (int r = 0; r < p; r++) {
        if (!backward) gen_forward_only(s, r);
        else if (kind == SCHED_GPIPE) gen_gpipe(s, r);
        else if (kind == SCHED_1F1B) gen_1f1b(s, r);
        else if (kind == SCHED_INTERLEAVED) gen_interleaved(s, r);
        else gen_zbh1(s, r);
    }
    sched_finish(s);
}

void sched_destroy(schedule_t *s) {
    for (int r = 0; r < s->p; r++) free(s->rank[r].act); /* xrealloc_small: plain heap */
    xfree(s->rank);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- communication and slots */

static int vstage(const schedule_t *s, int r, int c) { return c * s->p + r; }
static int tag_of(const schedule_t *s, int chunk, int micro, int dir) {
    return 2 * (chunk * s->m + micro) + dir;
}

/* Slots: the lowest free one for a forward; freed by what releases the activations. */
typedef struct slots {
    int *of;     /* [v * m] slot of (chunk, micro), -1 none */
    bool *busy;  /* [cap] */
    int cap, used;
} slots_t;

static int slot_take(slots_t *S, int key) {
    int s = 0;
    while (s < S->cap && S->busy[s]) s++;
    ASSERT(s < S->cap);
    S->busy[s] = true;
    if (s + 1 > S->used) S->used = s + 1;
    return S->of[key] = s;
}

static void slot_free(slots_t *S, int key) {
    if (S->of[key] >= 0) S->busy[S->of[key]] = false;
}

static bool releases(const schedule_t *s, act_op_t op) {
    return !s->backward ? op == ACT_F : op == (s->split ? ACT_W : ACT_B);
}

static void push_full(sched_rank_t *R, sched_act_t a) {
    if (R->n == R->cap) {
        R->cap = R->cap ? 2 * R->cap : 64;
        R->act = xrealloc_small(R->act, (size_t)R->cap * sizeof(sched_act_t));
    }
    R->act[R->n++] = a;
}

/* One compute action with its messages: RECV before, SEND after (F forward from the previous
 * virtual stage to the next, B backward). The slot's stage input / output are rewritten from
 * the forward's first action, its gradient buffer from the backward's receive (or, on the last
 * virtual stage, by the head inside F): the waits for the slot's earlier sends go there, not
 * all at the forward, which could wait on a gradient send that is received only later. */
static void expand(const schedule_t *s, int r, sched_act_t a, sched_rank_t *out) {
    const int vs = vstage(s, r, a.chunk), last = s->p * s->v - 1;
    const int prev = (r + s->p - 1) % s->p, next = (r + 1) % s->p;
    const int prev_chunk = r == 0 ? a.chunk - 1 : a.chunk;
    const int next_chunk = r == s->p - 1 ? a.chunk + 1 : a.chunk;
    sched_act_t m = a;
    a.wait = 0;
    if (a.op == ACT_F) {
        if (vs > 0) {
            m.op = ACT_RECV_F, m.peer = prev, m.tag = tag_of(s, prev_chunk, a.micro, 0);
            m.wait = SCHED_WAIT_FWD;
            push_full(out, m);
        }
        a.wait = (vs == 0 ? SCHED_WAIT_FWD : 0) | (vs == last && s->backward ? SCHED_WAIT_BWD : 0);
        push_full(out, a);
        if (vs < last) {
            m.op = ACT_SEND_F, m.peer = next, m.tag = tag_of(s, a.chunk, a.micro, 0);
            m.wait = 0;
            push_full(out, m);
        }
    } else if (a.op == ACT_B) {
        if (vs < last) {
            m.op = ACT_RECV_B, m.peer = next, m.tag = tag_of(s, next_chunk, a.micro, 1);
            m.wait = SCHED_WAIT_BWD;
            push_full(out, m);
        }
        push_full(out, a);
        if (vs > 0) {
            m.op = ACT_SEND_B, m.peer = prev, m.tag = tag_of(s, a.chunk, a.micro, 1);
            m.wait = 0;
            push_full(out, m);
        }
    } else {
        push_full(out, a);
    }
}

void sched_finish(schedule_t *s) {
    const int keys = s->v * s->m;
    for (int r = 0; r < s->p; r++) {
        sched_rank_t *R = &s->rank[r], out = {0};
        slots_t S = {xmalloc(sizeof(int) * (size_t)keys), xcalloc((size_t)keys + 1, sizeof(bool)),
                     keys + 1, 0};
        for (int k = 0; k < keys; k++) S.of[k] = -1;
        for (int i = 0; i < R->n; i++) {
            sched_act_t a = R->act[i];
            const int key = a.chunk * s->m + a.micro;
            if (key < 0 || key >= keys) { /* a broken list: the simulator reports it */
                push_full(&out, a);
                continue;
            }
            a.slot = a.op == ACT_F ? slot_take(&S, key) : S.of[key];
            expand(s, r, a, &out);
            if (releases(s, a.op)) slot_free(&S, key);
        }
        out.n_slots = S.used > 0 ? S.used : 1;
        free(R->act);
        *R = out;
        xfree(S.of);
        xfree(S.busy);
    }
}

int sched_peak_inflight(const schedule_t *s, int r) {
    int now = 0, peak = 0;
    const sched_rank_t *R = &s->rank[r];
    for (int i = 0; i < R->n; i++) {
        if (R->act[i].op == ACT_F) now++;
        else if (s->backward && releases(s, R->act[i].op)) now--;
        if (now > peak) peak = now;
        if (!s->backward) now = 0;
    }
    return peak;
}

/* ---------------------------------------------------------------- simulator */

typedef struct msg {
    int src, dst, tag, slot;
    double sent;            /* time posted */
    double received;        /* time matched, when consumed */
    bool consumed;
} msg_t;

typedef struct sim {
    const schedule_t *s;
    const sched_cost_t *cost;
    msg_t *msg;
    size_t n_msg, cap_msg;
    int *pc;
    double *clock, *busy;
    /* indexes that give find_msg and slot_free_at the answers of a scan over msg[] without it
     * (the same answers: a bucket lists its messages in the order they were sent) */
    int n_tags, n_slots;   /* tags 2 * v * m; slots per rank (the largest list's) */
    int *first, *last;     /* [p * n_tags]: a (dst, tag) bucket's first and last message, -1 */
    int *next;             /* [cap_msg]: the bucket's next message, -1 */
    int *pending;          /* [p * n_slots * 2]: (src, slot, direction): sends not yet received */
    double *received;      /* [p * n_slots * 2]: the latest receive time of the received ones */
} sim_t;

static bool indexed(const sim_t *S, int tag, int slot) {
    return tag >= 0 && tag < S->n_tags && slot >= 0 && slot < S->n_slots;
}

static int slot_key(const sim_t *S, int r, int slot, int dir_bwd) {
    return (r * S->n_slots + slot) * 2 + dir_bwd;
}

static msg_t *find_msg(sim_t *S, int src, int dst, int tag) {
    if (tag >= 0 && tag < S->n_tags) {
        for (int i = S->first[dst * S->n_tags + tag]; i >= 0; i = S->next[i]) {
            msg_t *m = &S->msg[i];
            if (!m->consumed && m->src == src) return m;
        }
        return NULL;
    }
    for (size_t i = 0; i < S->n_msg; i++) {
        msg_t *m = &S->msg[i];
        if (!m->consumed && m->src == src && m->dst == dst && m->tag == tag) return m;
    }
    return NULL;
}

/* An action rewrites slot `slot` of rank r: its earlier sends of the kinds in `wait` must have
 * been received (the runner waits for them). False while one is pending; else the time they
 * all were. */
static bool slot_free_at(const sim_t *S, int r, int slot, int wait, double *t) {
    *t = 0;
    if (slot >= 0 && slot < S->n_slots) {
        for (int d = 0; d < 2; d++) {
            if (!(wait & (d ? SCHED_WAIT_BWD : SCHED_WAIT_FWD))) continue;
            const int k = slot_key(S, r, slot, d);
            if (S->pending[k]) return false;
            if (S->received[k] > *t) *t = S->received[k];
        }
        return true;
    }
    for (size_t i = 0; i < S->n_msg; i++) {
        const msg_t *m = &S->msg[i];
        const int dir = m->tag % 2 ? SCHED_WAIT_BWD : SCHED_WAIT_FWD;
        if (m->src != r || m->slot != slot || !(wait & dir)) continue;
        if (!m->consumed) return false;
        if (m->received > *t) *t = m->received;
    }
    return true;
}

/* Record a send in msg[] and the indexes. */
static void post_msg(sim_t *S, const msg_t *m) {
    if (S->n_msg == S->cap_msg) {
        S->cap_msg = S->cap_msg ? 2 * S->cap_msg : 256;
        S->msg = xrealloc_small(S->msg, S->cap_msg * sizeof(msg_t));
        S->next = xrealloc_small(S->next, S->cap_msg * sizeof(int));
    }
    const int i = (int)S->n_msg++;
    S->msg[i] = *m;
    S->next[i] = -1;
    if (m->tag >= 0 && m->tag < S->n_tags) {
        const int b = m->dst * S->n_tags + m->tag;
        if (S->last[b] >= 0) S->next[S->last[b]] = i;
        else S->first[b] = i;
        S->last[b] = i;
    }
    if (indexed(S, m->tag, m->slot)) S->pending[slot_key(S, m->src, m->slot, m->tag % 2 != 0)]++;
}

/* A message received at time t. */
static void consume_msg(sim_t *S, msg_t *m, double t) {
    m->consumed = true;
    m->received = t;
    if (!indexed(S, m->tag, m->slot)) return;
    const int k = slot_key(S, m->src, m->slot, m->tag % 2 != 0);
    S->pending[k]--;
    if (t > S->received[k]) S->received[k] = t;
}

/* The costs are a whole stage's; a chunk holds 1/v of its layers. */
static double compute_cost(const sim_t *S, act_op_t op) {
    const double c = op == ACT_F ? S->cost->f : op == ACT_W ? S->cost->w
                     : S->s->split ? S->cost->b : S->cost->b + S->cost->w;
    return c / S->s->v;
}

/* Rank r performs its next action if it can; false when it waits. */
static bool sim_step(sim_t *S, int r) {
    const sched_act_t *a = &S->s->rank[r].act[S->pc[r]];
    double t = S->clock[r];
    if (a->wait) {
        double freed;
        if (!slot_free_at(S, r, a->slot, a->wait, &freed)) return false;
        if (freed > t) t = freed;
    }
    if (a->op == ACT_RECV_F || a->op == ACT_RECV_B) {
        msg_t *m = find_msg(S, a->peer, r, a->tag);
        if (!m) return false;
        if (m->sent > t) t = m->sent;
        consume_msg(S, m, t);
    } else if (a->op == ACT_SEND_F || a->op == ACT_SEND_B) {
        const msg_t m = {r, a->peer, a->tag, a->slot, t, 0, false};
        post_msg(S, &m);
    } else {
        const double c = compute_cost(S, a->op);
        t += c;
        S->busy[r] += c;
    }
    S->clock[r] = t;
    S->pc[r]++;
    return true;
}

static const char *op_name(act_op_t op) {
    static const char *const n[] = {"F", "B", "W", "recv-F", "send-F", "recv-B", "send-B"};
    return n[op];
}

static void sim_index_create(sim_t *S) {
    const schedule_t *s = S->s;
    S->n_tags = 2 * s->v * s->m;
    for (int r = 0; r < s->p; r++)
        if (s->rank[r].n_slots > S->n_slots) S->n_slots = s->rank[r].n_slots;
    const size_t buckets = (size_t)s->p * (size_t)S->n_tags, slots = (size_t)s->p * S->n_slots * 2;
    S->first = xmalloc((buckets ? buckets : 1) * sizeof(int));
    S->last = xmalloc((buckets ? buckets : 1) * sizeof(int));
    for (size_t i = 0; i < buckets; i++) S->first[i] = S->last[i] = -1;
    S->pending = xcalloc(slots ? slots : 1, sizeof(int));
    S->received = xcalloc(slots ? slots : 1, sizeof(double));
}

/* Structure: every (chunk, micro) forwarded once, backwarded (and weight-gradient'ed when split)
 * once after it, on every rank; chunks and micro-batches in range. */
static bool check_structure(const schedule_t *s, sched_sim_t *out) {
    const int keys = s->v * s->m;
    int *state = xmalloc(sizeof(int) * (size_t)keys);
    bool ok = true;
    for (int r = 0; r < s->p && ok; r++) {
        for (int k = 0; k < keys; k++) state[k] = 0;
        const sched_rank_t *R = &s->rank[r];
        for (int i = 0; i < R->n && ok; i++) {
            const sched_act_t *a = &R->act[i];
            const int key = a->chunk * s->m + a->micro;
            if (a->chunk < 0 || a->chunk >= s->v || a->micro < 0 || a->micro >= s->m) {
                snprintf(out->err, sizeof out->err, "rank %d action %d: %s of micro-batch %d chunk "
                         "%d is out of range (m = %d, v = %d)", r, i, op_name(a->op), a->micro,
                         a->chunk, s->m, s->v);
                ok = false;
            } else if (a->op == ACT_F || a->op == ACT_B || a->op == ACT_W) {
                const int want = a->op == ACT_F ? 0 : a->op == ACT_B ? 1 : 2;
                if (state[key] != want) {
                    snprintf(out->err, sizeof out->err, "rank %d action %d: %s of micro-batch %d "
                             "chunk %d out of order (F, then B%s, once each)", r, i,
                             op_name(a->op), a->micro, a->chunk, s->split ? ", then W" : "");
                    ok = false;
                }
                state[key]++;
            }
        }
        const int done = !s->backward ? 1 : s->split ? 3 : 2;
        for (int k = 0; k < keys && ok; k++)
            if (state[k] != done) {
                snprintf(out->err, sizeof out->err, "rank %d: micro-batch %d chunk %d is not "
                         "completed (%d of %d compute actions)", r, k % s->m, k / s->m, state[k],
                         done);
                ok = false;
            }
    }
    xfree(state);
    return ok;
}

static void report_deadlock(const sim_t *S, sched_sim_t *out) {
    size_t at = (size_t)snprintf(out->err, sizeof out->err, "deadlock: no rank can proceed;");
    for (int r = 0; r < S->s->p && at < sizeof out->err; r++) {
        if (S->pc[r] == S->s->rank[r].n) continue;
        const sched_act_t *a = &S->s->rank[r].act[S->pc[r]];
        at += (size_t)snprintf(out->err + at, sizeof out->err - at, " rank %d waits at %s of "
                               "micro-batch %d chunk %d%s", r, op_name(a->op), a->micro, a->chunk,
                               a->op == ACT_RECV_F || a->op == ACT_RECV_B ? " (no matching send)"
                               : a->wait ? " (or its slot's earlier send is not received)" : "");
    }
}

static void report_unmatched(const sim_t *S, sched_sim_t *out) {
    for (size_t i = 0; i < S->n_msg; i++)
        if (!S->msg[i].consumed) {
            snprintf(out->err, sizeof out->err, "a message from rank %d to rank %d (tag %d) is "
                     "never received", S->msg[i].src, S->msg[i].dst, S->msg[i].tag);
            return;
        }
}

void sched_simulate(const schedule_t *s, const sched_cost_t *cost, sched_sim_t *out) {
    memset(out, 0, sizeof *out);
    if (!check_structure(s, out)) return;
    sim_t S = {.s = s, .cost = cost, .pc = xcalloc((size_t)s->p, sizeof(int)),
               .clock = xcalloc((size_t)s->p, sizeof(double)), .busy = xcalloc((size_t)s->p, sizeof(double))};
    sim_index_create(&S);
    int remaining = 0;
    for (int r = 0; r < s->p; r++) remaining += s->rank[r].n;
    bool progress = true;
    while (remaining > 0 && progress) {
        progress = false;
        for (int r = 0; r < s->p; r++)
            while (S.pc[r] < s->rank[r].n && sim_step(&S, r)) remaining--, progress = true;
    }
    if (remaining > 0) report_deadlock(&S, out);
    else report_unmatched(&S, out);
    out->ok = out->err[0] == '\0';
    double busy = 0;
    for (int r = 0; r < s->p; r++) {
        if (S.clock[r] > out->makespan) out->makespan = S.clock[r];
        busy += S.busy[r];
        int peak = sched_peak_inflight(s, r);
        if (peak > out->peak_inflight_max) out->peak_inflight_max = peak;
    }
    out->bubble = out->makespan > 0 ? 1.0 - busy / (s->p * out->makespan) : 0;
    out->messages = S.n_msg;
    free(S.msg);
    free(S.next);
    xfree(S.first), xfree(S.last), xfree(S.pending), xfree(S.received);
    xfree(S.pc);
    xfree(S.clock);
    xfree(S.busy);
}

/* ---------------------------------------------------------------- an ordered transport */

/* One transfer posted on a lane (a rank's stream for one direction of traffic). */
typedef struct lane_op {
    bool recv, done;
    int peer, tag;
} lane_op_t;

typedef struct lane_q {
    lane_op_t *op;
    int n, cap, head; /* ops before head are done */
} lane_q_t;

enum { LANE_UP, LANE_DOWN, LANES };

/* A posted send: its lane and its place there (index -1: none yet). */
typedef struct send_ref {
    int lane, index;
} send_ref_t;

typedef struct ordered {
    const schedule_t *s;
    lane_q_t *lane;   /* [p * LANES] */
    int *pc;          /* [p] next action */
    int *pending;     /* [p] index of the posted receive the host waits for in its lane, or -1 */
    send_ref_t **last_send; /* [p][n_slots * 2]: the slot's last forward / backward send */
    size_t messages;
} ordered_t;

/* comm_nccl.c's lanes: traffic to a higher rank goes up, to a lower one down. */
static int lane_of(int src, int dst) { return dst > src ? LANE_UP : LANE_DOWN; }

static lane_q_t *lane_at(ordered_t *O, int r, int l) { return &O->lane[r * LANES + l]; }

static int lane_post(ordered_t *O, int r, int l, bool recv, int peer, int tag) {
    lane_q_t *q = lane_at(O, r, l);
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 64;
        q->op = xrealloc_small(q->op, (size_t)q->cap * sizeof(lane_op_t));
    }
    q->op[q->n] = (lane_op_t){recv, false, peer, tag};
    return q->n++;
}

static lane_op_t *lane_head(ordered_t *O, int r, int l) {
    lane_q_t *q = lane_at(O, r, l);
    while (q->head < q->n && q->op[q->head].done) q->head++;
    return q->head < q->n ? &q->op[q->head] : NULL;
}

/* "forward of micro-batch 3 chunk 1" from a tag (tag_of). */
static void tag_text(const schedule_t *s, int tag, char *buf, size_t len) {
    const int k = tag / 2;
    snprintf(buf, len, "%s of micro-batch %d chunk %d", tag % 2 ? "gradient" : "activation",
             k % s->m, k / s->m);
}

/* Rank r's host performs its next action if it can. */
static bool ordered_host_step(ordered_t *O, int r) {
    const sched_rank_t *R = &O->s->rank[r];
    if (O->pc[r] == R->n) return false;
    const sched_act_t *a = &R->act[O->pc[r]];
    if (O->pending[r] >= 0) { /* the posted receive of this action */
        const int l = lane_of(a->peer, r);
        if (!lane_at(O, r, l)->op[O->pending[r]].done) return false;
        O->pending[r] = -1;
        O->pc[r]++;
        return true;
    }
    for (int dir = 0; dir < 2; dir++) {
        const int bit = dir ? SCHED_WAIT_BWD : SCHED_WAIT_FWD;
        const send_ref_t last = O->last_send[r][a->slot * 2 + dir];
        if ((a->wait & bit) && last.index >= 0 && !lane_at(O, r, last.lane)->op[last.index].done)
            return false;
    }
    if (a->op == ACT_RECV_F || a->op == ACT_RECV_B) {
        O->pending[r] = lane_post(O, r, lane_of(a->peer, r), true, a->peer, a->tag);
        return true;
    }
    if (a->op == ACT_SEND_F || a->op == ACT_SEND_B) {
        const int l = lane_of(r, a->peer);
        O->last_send[r][a->slot * 2 + (a->op == ACT_SEND_B)] =
            (send_ref_t){l, lane_post(O, r, l, false, a->peer, a->tag)};
        O->messages++;
    }
    O->pc[r]++;
    return true;
}

/* The send at the head of rank r's lane l meets the receive at the head of its peer's: both
 * complete. False when they do not meet, or (err set) when they meet with different tags. */
static bool ordered_match(ordered_t *O, int r, int l, sched_sim_t *out) {
    lane_op_t *snd = lane_head(O, r, l);
    if (!snd || snd->recv) return false;
    lane_op_t *rcv = lane_head(O, snd->peer, l);
    if (!rcv || !rcv->recv || rcv->peer != r) return false;
    if (rcv->tag != snd->tag) {
        char sent[96], want[96];
        tag_text(O->s, snd->tag, sent, sizeof sent);
        tag_text(O->s, rcv->tag, want, sizeof want);
        snprintf(out->err, sizeof out->err, "on an ordered transport rank %d's send (%s) would "
                 "land in rank %d's receive for the %s", r, sent, snd->peer, want);
        return false;
    }
    snd->done = rcv->done = true;
    return true;
}

/* The host is done with its list and every send it posted has completed. */
static bool ordered_finished(ordered_t *O, int r) {
    if (O->pc[r] < O->s->rank[r].n) return false;
    for (int l = 0; l < LANES; l++)
        if (lane_head(O, r, l)) return false;
    return true;
}

static void ordered_report_deadlock(ordered_t *O, sched_sim_t *out) {
    size_t at = (size_t)snprintf(out->err, sizeof out->err,
                                 "deadlock on an ordered transport (a stream per direction):");
    for (int r = 0; r < O->s->p && at < sizeof out->err; r++) {
        if (ordered_finished(O, r)) continue;
        char what[96] = "the end of its list";
        if (O->pc[r] < O->s->rank[r].n) {
            const sched_act_t *a = &O->s->rank[r].act[O->pc[r]];
            snprintf(what, sizeof what, "%s of micro-batch %d chunk %d", op_name(a->op), a->micro,
                     a->chunk);
        }
        at += (size_t)snprintf(out->err + at, sizeof out->err - at, " rank %d waits at %s", r,
                               what);
        for (int l = 0; l < LANES && at < sizeof out->err; l++) {
            const lane_op_t *h = lane_head(O, r, l);
            if (h)
                at += (size_t)snprintf(out->err + at, sizeof out->err - at,
                                       " (%s stream: %s rank %d, tag %d)", l == LANE_UP ? "up" : "down",
                                       h->recv ? "receive from" : "send to", h->peer, h->tag);
        }
        at += (size_t)snprintf(out->err + at, sizeof out->err - at, ";");
    }
}

void sched_check_ordered(const schedule_t *s, sched_sim_t *out) {
    memset(out, 0, sizeof *out);
    if (!check_structure(s, out)) return;
    ordered_t O = {s, xcalloc((size_t)s->p * LANES, sizeof(lane_q_t)),
                   xcalloc((size_t)s->p, sizeof(int)), xcalloc((size_t)s->p, sizeof(int)),
                   xcalloc((size_t)s->p, sizeof(send_ref_t *)), 0};
    for (int r = 0; r < s->p; r++) {
        const int n = 2 * (s->rank[r].n_slots > 0 ? s->rank[r].n_slots : 1);
        O.pending[r] = -1;
        O.last_send[r] = xmalloc(sizeof(send_ref_t) * (size_t)n);
        for (int i = 0; i < n; i++) O.last_send[r][i] = (send_ref_t){0, -1};
    }
    bool progress = true;
    while (progress && !out->err[0]) {
        progress = false;
        for (int r = 0; r < s->p; r++)
            while (ordered_host_step(&O, r)) progress = true;
        for (int r = 0; r < s->p && !out->err[0]; r++)
            for (int l = 0; l < LANES; l++)
                while (ordered_match(&O, r, l, out)) progress = true;
    }
    bool all = true;
    for (int r = 0; r < s->p; r++) all = all && ordered_finished(&O, r);
    if (!all && !out->err[0]) ordered_report_deadlock(&O, out);
    out->ok = out->err[0] == '\0';
    out->messages = O.messages;
    for (int r = 0; r < s->p; r++) {
        for (int l = 0; l < LANES; l++) free(lane_at(&O, r, l)->op);
        xfree(O.last_send[r]);
    }
    xfree(O.lane);
    xfree(O.pc);
    xfree(O.pending);
    xfree(O.last_send);
}

/* ---------------------------------------------------------------- printing */

void sched_print(const schedule_t *s, FILE *f, int max_actions) {
    for (int r = 0; r < s->p; r++) {
        fprintf(f, "  rank %d (%d slot%s):", r, s->rank[r].n_slots, s->rank[r].n_slots > 1 ? "s" : "");
        int shown = 0;
        for (int i = 0; i < s->rank[r].n; i++) {
            const sched_act_t *a = &s->rank[r].act[i];
            if (a->op != ACT_F && a->op != ACT_B && a->op != ACT_W) continue;
            if (shown++ == max_actions) {
                fprintf(f, " ...");
                break;
            }
            if (s->v > 1) fprintf(f, " %s%d.%d", op_name(a->op), a->micro, a->chunk);
            else fprintf(f, " %s%d", op_name(a->op), a->micro);
        }
        fprintf(f, "\n");
    }
}
