/* straggler.c — naming a straggler from the ranks' busy times (see straggler.h). */
#include "train/straggler.h"
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double straggler_median(double *x, int n) {
    if (n <= 0) return 0.0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* by group, then busy time (then rank, so the order is total) */
static int cmp_entry(const void *a, const void *b) {
    const straggler_entry_t *x = a, *y = b;
    if (x->group != y->group) return (x->group > y->group) - (x->group < y->group);
    if (x->busy != y->busy) return (x->busy > y->busy) - (x->busy < y->busy);
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The median of the sorted run e[0, m) without its element at p (m >= 2). */
static double median_without(const straggler_entry_t *e, int m, int p) {
    const int k = m - 1;
#define AT(i) e[(i) < p ? (i) : (i) + 1].busy
    return k % 2 ? AT(k / 2) : 0.5 * (AT(k / 2 - 1) + AT(k / 2));
#undef AT
}

void straggler_ratios(const double *busy, const int *group, int n, double *ratio, double *excess,
                      straggler_entry_t *scratch) {
    for (int r = 0; r < n; r++) scratch[r] = (straggler_entry_t){group[r], r, busy[r]};
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_entry);
    for (int a = 0; a < n;) {
        int b = a;
        while (b < n && scratch[b].group == scratch[a].group) b++;
        for (int p = a; p < b; p++) {
            const double med = b - a >= 2 ? median_without(scratch + a, b - a, p - a) : 0.0;
            ratio[scratch[p].rank] = med > 0 ? scratch[p].busy / med : 1.0;
            if (excess) excess[scratch[p].rank] = b - a >= 2 ? scratch[p].busy - med : 0.0;
        }
        a = b;
    }
}

void straggler_init(straggler_t *s, int n, const int *group, double threshold) {
    memset(s, 0, sizeof *s);
    s->n = n;
    s->threshold = n >= 2 ? threshold : 0.0;
    s->rank = s->worst_rank = s->max_rank = -1;
    if (n < 1) return;
    /* untracked: bookkeeping of a few doubles per rank, not one of the planned categories */
    s->group = xrealloc_small(NULL, sizeof(int) * (size_t)n);
    s->ratio = xrealloc_small(NULL, sizeof(double) * STRAGGLER_WINDOW * (size_t)n);
    s->excess = xrealloc_small(NULL, sizeof(double) * STRAGGLER_WINDOW * (size_t)n);
    s->scratch = xrealloc_small(NULL, sizeof(straggler_entry_t) * (size_t)n);
    s->warned = xrealloc_small(NULL, (size_t)n);
    memset(s->warned, 0, (size_t)n);
    /* a rank alone in its group has no peer doing the same work: then every rank is a peer */
    for (int r = 0; r < n; r++) s->scratch[r] = (straggler_entry_t){group[r], r, 0.0};
    qsort(s->scratch, (size_t)n, sizeof *s->scratch, cmp_entry);
    bool lonely = false;
    for (int a = 0, b; a < n && !lonely; a = b) {
        for (b = a; b < n && s->scratch[b].group == s->scratch[a].group;) b++;
        lonely = b - a == 1;
    }
    for (int r = 0; r < n; r++) s->group[r] = lonely ? 0 : group[r];
}

void straggler_destroy(straggler_t *s) {
    free(s->group);
    free(s->ratio);
    free(s->excess);
    free(s->scratch);
    free(s->warned);
    memset(s, 0, sizeof *s);
}

/* The median over the window of rank r's values in ring[STRAGGLER_WINDOW][n]. */
static double window_median(const double *ring, int n, int r) {
    double last[STRAGGLER_WINDOW];
    for (int i = 0; i < STRAGGLER_WINDOW; i++) last[i] = ring[(size_t)i * (size_t)n + (size_t)r];
    return straggler_median(last, STRAGGLER_WINDOW);
}

int straggler_push(straggler_t *s, const double *busy) {
    s->rank = -1;
    if (s->threshold <= 0) return -1;
    if (++s->pushed <= STRAGGLER_WARMUP) return -1;
    const size_t slot = (size_t)(s->steps % STRAGGLER_WINDOW) * (size_t)s->n;
    straggler_ratios(busy, s->group, s->n, s->ratio + slot, s->excess + slot, s->scratch);
    s->steps++;
    s->worst_rank = -1;
    s->worst = s->worst_excess = 0.0;
    if (s->steps < STRAGGLER_WINDOW) return -1;
    for (int r = 0; r < s->n; r++) {
        const double m = window_median(s->ratio, s->n, r);
        const double x = window_median(s->excess, s->n, r);
        if (s->worst_rank < 0 || m > s->worst) {
            s->worst = m;
            s->worst_rank = r;
            s->worst_excess = x;
        }
        if (m >= s->threshold && x >= STRAGGLER_MIN_EXCESS_S && (s->rank < 0 || m > s->value)) {
            s->rank = r;
            s->value = m;
        }
    }
    if (s->max_rank < 0 || s->worst > s->max_seen) {
        s->max_seen = s->worst;
        s->max_rank = s->worst_rank;
        s->max_step = s->pushed;
        s->max_excess = s->worst_excess;
    }
    return s->rank;
}

bool straggler_first_time(straggler_t *s, int r) {
    if (r < 0 || r >= s->n || s->warned[r]) return false;
    s->warned[r] = 1;
    return true;
}

void straggler_host_of(const char *joined, int rank, char *out, size_t len) {
    if (len == 0) return;
    const char *p = joined ? joined : "";
    for (int i = 0; i < rank && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    size_t n = p ? strcspn(p, ",.") : 0;
    if (!p || n == 0) {
        p = "?";
        n = 1;
    }
    if (n >= len) n = len - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

/* ---------------------------------------------------------------- slow links */

void link_watch_init(link_watch_t *w, int n_nodes, double threshold) {
    memset(w, 0, sizeof *w);
    w->n = n_nodes;
    w->threshold = n_nodes >= 3 ? threshold : 0.0;
    w->prev = w->worst = w->node = w->max_node = -1;
    w->warned = xrealloc_small(NULL, (size_t)(n_nodes > 0 ? n_nodes : 1));
    memset(w->warned, 0, (size_t)(n_nodes > 0 ? n_nodes : 1));
}

void link_watch_destroy(link_watch_t *w) {
    free(w->warned);
    w->warned = NULL;
}

int link_watch_push(link_watch_t *w, const double *node_s) {
    w->node = w->worst = -1;
    w->worst_ratio = 0.0;
    if (w->n < 3) return -1;
    w->probes++;
    double *others = xrealloc_small(NULL, sizeof(double) * (size_t)(w->n - 1));
    for (int k = 0; k < w->n; k++) {
        for (int j = 0, m = 0; j < w->n; j++)
            if (j != k) others[m++] = node_s[j];
        const double med = straggler_median(others, w->n - 1);
        const double ratio = med > 0 ? node_s[k] / med : 1.0;
        if (ratio > w->worst_ratio) {
            w->worst = k;
            w->worst_ratio = ratio;
            w->worst_s = node_s[k];
            w->median_s = med;
        }
    }
    free(others);
    if (w->worst >= 0 && w->worst_ratio > w->max_ratio) {
        w->max_ratio = w->worst_ratio;
        w->max_node = w->worst;
    }
    const bool picked = w->threshold > 0 && w->worst >= 0 && w->worst_ratio >= w->threshold &&
                        w->worst_s - w->median_s >= LINK_MIN_EXCESS_S;
    const int pick = picked ? w->worst : -1;
    if (pick >= 0 && pick == w->prev) w->node = pick;
    w->prev = pick;
    return w->node;
}

bool link_watch_first_time(link_watch_t *w, int k) {
    if (k < 0 || k >= w->n || w->warned[k]) return false;
    w->warned[k] = 1;
    return true;
}
