/* lr.c — learning-rate schedules (see lr.h). */
#include "train/lr.h"
#include <math.h>
#include <string.h>

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

double lr_at(const config_t *cfg, int step) {
    const double lr = cfg->lr, min_lr = cfg->min_lr;
    const int warm = cfg->warmup_steps, total = cfg->max_steps;
    if (step < warm) return lr * (step + 1) / warm;
    if (strcmp(cfg->lr_schedule, "constant") == 0) return lr;
    double span = total - warm;
    double p = span > 0 ? clamp01((step - warm) / span) : 1.0;
    if (strcmp(cfg->lr_schedule, "cosine") == 0)
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    if (strcmp(cfg->lr_schedule, "linear") == 0) return lr + (min_lr - lr) * p;
    /* wsd: stable at lr, then a linear decay over the last decay_fraction of all steps */
    double decay_start = total * (1.0 - cfg->decay_fraction);
    if (step < decay_start) return lr;
    double q = clamp01((step - decay_start) / (total - decay_start));
    return lr + (min_lr - lr) * q;
}
