/* lr.c — learning-rate schedules (see lr.h). */
#include "train/lr.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

lr_piece_t lr_piece_from(const config_t *cfg) {
    lr_piece_t p = {cfg->lr, cfg->min_lr, cfg->decay_fraction, cfg->warmup_steps, cfg->max_steps, ""};
    snprintf(p.schedule, sizeof p.schedule, "%s", cfg->lr_schedule);
    return p;
}

double lr_at(const config_t *cfg, int step) {
    const lr_piece_t p = lr_piece_from(cfg);
    return lr_piece_at(&p, step);
}

double lr_piece_at(const lr_piece_t *pc, int step) {
    const double lr = pc->lr, min_lr = pc->min_lr;
    const int warm = pc->warmup_steps, total = pc->total;
    if (step < warm) return lr * (step + 1) / warm;
    if (strcmp(pc->schedule, "constant") == 0) return lr;
    double span = total - warm;
    double p = span > 0 ? clamp01((step - warm) / span) : 1.0;
    if (strcmp(pc->schedule, "cosine") == 0)
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    if (strcmp(pc->schedule, "linear") == 0) return lr + (min_lr - lr) * p;
    /* wsd: stable at lr, then a linear decay over the last decay_fraction of all steps */
    double decay_start = total * (1.0 - pc->decay_fraction);
    if (step < decay_start) return lr;
    double q = clamp01((step - decay_start) / (total - decay_start));
    return lr + (min_lr - lr) * q;
}
