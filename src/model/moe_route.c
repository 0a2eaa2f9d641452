/* moe_route.c — the routing plan of an MoE layer (moe_route.h): expert loads, capacity, which
 * assignments each drop policy keeps, and the dispatch order (expert by expert, ascending token).
 *
 * Built in place in the plan's own arrays, with no allocation per micro-batch: a counting sort
 * lists every assignment expert by expert in ascending token order; an expert over capacity
 * keeps the first cap of its list ('position') or, for 'probs', its list is heap-sorted by
 * (probability descending, token ascending), cut to cap and heap-sorted back by token; the kept
 * lists are then moved together. Uses: core/alloc.h, core/error.h. Used by: model/moe.c. */
#include "model/moe_route.h"
#include "core/alloc.h"
#include "core/error.h"
#include <math.h>
#include <string.h>

/* ceil(N k cf / E), where a quotient within 1e-9 (relative) of an integer is that integer: the
 * product is taken in double and a factor such as 1.1 is not exact in binary (N k = 200, cf = 1.1,
 * E = 20 gives 11.000000000000002, which a plain ceil would make 12). Never above N (an expert
 * gets at most one assignment per token, and a huge cf cannot overflow the int). */
int moe_capacity(int N, int k, int E, double capacity_factor) {
    if (!(capacity_factor > 0.0)) return N; /* 0: dropless */
    const double x = (double)N * (double)k * capacity_factor / (double)E;
    if (x >= (double)N) return N;
    const double nearest = nearbyint(x);
    const double c = fabs(x - nearest) <= 1e-9 * fmax(1.0, x) ? nearest : ceil(x);
    return c < 1.0 ? 1 : (int)c; /* a positive quotient below 1e-9 still keeps one */
}

void moe_plan_create(moe_plan_t *p, int N_max, int E, int k) {
    ASSERT(N_max >= 0 && E > 0 && k >= 1 && k <= E);
    memset(p, 0, sizeof *p);
    p->N_max = N_max, p->E = E, p->k = k;
    const size_t n_assign = (size_t)N_max * (size_t)k;
    p->load = xcalloc((size_t)E, sizeof *p->load);
    p->kept = xcalloc((size_t)E, sizeof *p->kept);
    p->offset = xcalloc((size_t)E + 1, sizeof *p->offset);
    p->token = xcalloc(n_assign ? n_assign : 1, sizeof *p->token);
    p->choice = xcalloc(n_assign ? n_assign : 1, sizeof *p->choice);
}

void moe_plan_destroy(moe_plan_t *p) {
    xfree(p->load), xfree(p->kept), xfree(p->offset), xfree(p->token), xfree(p->choice);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- one expert's list */

/* The list of one expert: its tokens and their choice numbers, side by side. */
typedef struct {
    int *token, *choice;
    const float *probs; /* [N, E], for the order by probability */
    int E, e;
} expert_list_t;

/* Whether entry a goes before entry b: by token (by_probs false), or by probability descending
 * with ties to the smaller token (by_probs true). Tokens in one list are distinct: a total order. */
static bool goes_before(const expert_list_t *l, int a, int b, bool by_probs) {
    const int ta = l->token[a], tb = l->token[b];
    if (by_probs) {
        const float pa = l->probs[(size_t)ta * l->E + l->e], pb = l->probs[(size_t)tb * l->E + l->e];
        if (pa != pb) return pa > pb;
    }
    return ta < tb;
}

static void swap_entries(expert_list_t *l, int a, int b) {
    int t = l->token[a];
    l->token[a] = l->token[b], l->token[b] = t;
    t = l->choice[a];
    l->choice[a] = l->choice[b], l->choice[b] = t;
}

/* Restore the heap below `root` of the first n entries (the entry that goes last on top). */
static void sift_down(expert_list_t *l, int root, int n, bool by_probs) {
    for (;;) {
        int last = root;
        const int left = 2 * root + 1, right = left + 1;
        if (left < n && goes_before(l, last, left, by_probs)) last = left;
        if (right < n && goes_before(l, last, right, by_probs)) last = right;
        if (last == root) return;
        swap_entries(l, root, last);
        root = last;
    }
}

/* Sort the first n entries of the list (in place, O(n log n), no buffer). */
static void heap_sort(expert_list_t *l, int n, bool by_probs) {
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(l, i, n, by_probs);
    for (int end = n - 1; end > 0; end--) {
        swap_entries(l, 0, end);
        sift_down(l, 0, end, by_probs);
    }
}

/* ---------------------------------------------------------------- the plan */

/* load[e] and, in token[] / choice[], every assignment listed expert by expert (expert e's list
 * from offset[e], ascending token): a counting sort, with kept[] as the fill cursors. */
static void list_all_assignments(moe_plan_t *p, const int *idx, int N) {
    const int E = p->E, k = p->k;
    memset(p->load, 0, (size_t)E * sizeof *p->load);
    for (size_t a = 0; a < (size_t)N * k; a++) {
        ASSERT(idx[a] >= 0 && idx[a] < E);
        p->load[idx[a]]++;
    }
    p->offset[0] = 0;
    for (int e = 0; e < E; e++) p->offset[e + 1] = p->offset[e] + p->load[e];
    memset(p->kept, 0, (size_t)E * sizeof *p->kept);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < k; j++) {
            const int e = idx[(size_t)i * k + j], r = p->offset[e] + p->kept[e]++;
            p->token[r] = i, p->choice[r] = j;
        }
}

void moe_plan_build(moe_plan_t *p, const int *idx, const float *probs, int N, double capacity_factor,
                    moe_drop_t policy) {
    ASSERT(N >= 0 && N <= p->N_max);
    ASSERT(policy == MOE_DROP_POSITION || probs != NULL);
    p->N = N;
    p->cap = moe_capacity(N, p->k, p->E, capacity_factor);
    list_all_assignments(p, idx, N);
    /* Expert by expert: cut the list to cap, then move it down to the end of the kept rows so
     * far (never past its own start, so later lists are untouched). */
    int M = 0;
    for (int e = 0; e < p->E; e++) {
        const int start = p->offset[e];
        int n = p->load[e];
        if (n > p->cap) {
            if (policy == MOE_DROP_PROBS) {
                expert_list_t l = {p->token + start, p->choice + start, probs, p->E, e};
                heap_sort(&l, n, true);
                heap_sort(&l, p->cap, false);
            }
            n = p->cap;
        }
        memmove(p->token + M, p->token + start, (size_t)n * sizeof *p->token);
        memmove(p->choice + M, p->choice + start, (size_t)n * sizeof *p->choice);
        p->kept[e] = n;
        p->offset[e] = M;
        M += n;
    }
    p->offset[p->E] = M;
    p->M = M;
    p->dropped = N * p->k - M;
}

void moe_plan_restrict(moe_plan_t *p, const moe_plan_t *g, const int *local_of, int N) {
    ASSERT(N >= 0 && N <= p->N_max && p->E == g->E && p->k == g->k);
    p->N = N;
    p->cap = g->cap;
    memcpy(p->load, g->load, (size_t)g->E * sizeof *p->load);
    int M = 0;
    for (int e = 0; e < g->E; e++) {
        p->offset[e] = M;
        for (int r = g->offset[e]; r < g->offset[e + 1]; r++) {
            const int t = local_of[g->token[r]];
            if (t < 0) continue;
            p->token[M] = t, p->choice[M] = g->choice[r];
            M++;
        }
        p->kept[e] = M - p->offset[e];
    }
    p->offset[g->E] = M;
    p->M = M;
    p->dropped = N * p->k - M;
}
