/* moe_log.c — the MoE blocks' step statistics for metrics.jsonl and the step line (see
 * moe_log.h). */
#include "train/moe_log.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"

static void append(moe_log_t *lg, size_t *len, const char *fmt, ...) {
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (*len + (size_t)n + 1 > lg->cap) {
        lg->cap = (*len + (size_t)n + 1) * 2;
        lg->record = xrealloc_small(lg->record, lg->cap);
    }
    vsnprintf(lg->record + *len, (size_t)n + 1, fmt, again);
    va_end(again);
    *len += (size_t)n;
}

/* Coefficient of variation (population std / mean) and the largest share of load[E]. */
static void load_shape(const double *load, int E, double *cv, double *max_share) {
    double sum = 0, sq = 0, mx = 0;
    for (int e = 0; e < E; e++) {
        sum += load[e];
        if (load[e] > mx) mx = load[e];
    }
    const double mean = sum / E;
    for (int e = 0; e < E; e++) sq += (load[e] - mean) * (load[e] - mean);
    *cv = mean > 0 ? sqrt(sq / E) / mean : 0;
    *max_share = sum > 0 ? mx / sum : 0;
}

static void warn_collapse(moe_t *q, int l, double share, int64_t step, bool root) {
    q->collapsed_for[l] = share > q->collapse_share ? q->collapsed_for[l] + 1 : 0;
    if (q->collapsed_for[l] == q->collapse_steps && root)
        printf("moe: WARNING block %d: one expert has taken %.0f%% of the assignments (more than "
               "&model collapse_share = %.2f) for %d steps in a row, up to step %lld: the router "
               "is collapsing (raise aux_loss_coef, or add router_noise)\n",
               l, 100.0 * share, q->collapse_share, q->collapse_steps, (long long)step);
}

void moe_log_step(moe_log_t *lg, gpt_t *m, const comm_group_t *world, int64_t step, bool root) {
    size_t len = 0;
    if (!lg->record) append(lg, &len, "%s", "");
    lg->record[0] = '\0';
    lg->line[0] = '\0';
    lg->aux = lg->z = 0;
    moe_t *q = m->moe;
    if (!q) return;
    const int E = q->E, per = E + MOE_STAT_SCALARS;
    double *all = xcalloc((size_t)moe_stats_floats(q), sizeof(double));
    moe_stats_reduce(q, world, all);
    /* the totals first (and the collapse watch), then each block's members */
    double assigned = 0, dropped = 0, worst = 0, cv, share;
    for (int l = 0; l < m->L; l++) {
        if (!q->stats[l].load) continue;
        const double *s = all + (size_t)l * per, *v = s + E;
        const double micro = v[MOE_STAT_MICRO] > 0 ? v[MOE_STAT_MICRO] : 1;
        load_shape(s, E, &cv, &share);
        lg->aux += v[MOE_STAT_AUX] / micro;
        lg->z += v[MOE_STAT_Z] / micro;
        assigned += v[MOE_STAT_ASSIGNED];
        dropped += v[MOE_STAT_DROPPED];
        if (share * E > worst) worst = share * E; /* max / mean load */
        warn_collapse(q, l, share, step, root);
    }
    const double drop = assigned > 0 ? dropped / assigned : 0;
    append(lg, &len, ",\"moe_aux_loss\":%.9g,\"moe_z_loss\":%.9g,\"moe_dropped\":%.6g", lg->aux,
           lg->z, drop);
    for (int l = 0; l < m->L; l++) {
        if (!q->stats[l].load) continue;
        const double *s = all + (size_t)l * per, *v = s + E;
        const double micro = v[MOE_STAT_MICRO] > 0 ? v[MOE_STAT_MICRO] : 1;
        const double n = v[MOE_STAT_ASSIGNED];
        load_shape(s, E, &cv, &share);
        append(lg, &len, ",\"moe%d_load\":[", l);
        for (int e = 0; e < E; e++) append(lg, &len, "%s%.0f", e ? "," : "", s[e]);
        append(lg, &len, "],\"moe%d_drop\":%.6g,\"moe%d_cv\":%.6g,\"moe%d_entropy\":%.6g,"
               "\"moe%d_aux\":%.9g,\"moe%d_z\":%.9g", l, n > 0 ? v[MOE_STAT_DROPPED] / n : 0, l, cv,
               l, v[MOE_STAT_ENTROPY] / micro, l, v[MOE_STAT_AUX] / micro, l, v[MOE_STAT_Z] / micro);
    }
    xfree(all);
    snprintf(lg->line, sizeof lg->line, " | moe load max/mean %.2f drop %.1f%%", worst,
             100.0 * drop);
}

void moe_log_free(moe_log_t *lg) {
    free(lg->record); /* xrealloc_small memory: untracked */
    memset(lg, 0, sizeof *lg);
}
