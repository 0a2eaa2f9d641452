/* loss_scale.c — the fp16 loss scaler (see loss_scale.h). */
#include "train/loss_scale.h"
#include <string.h>

void loss_scaler_init(loss_scaler_t *s, const config_t *cfg) {
    memset(s, 0, sizeof *s);
    s->scale = 1.0;
    if (cfg->choice.precision != CFG_PRECISION_FP16) return;
    s->enabled = true;
    s->dynamic = cfg->loss_scale == 0;
    s->scale = s->dynamic ? cfg->initial_loss_scale : cfg->loss_scale;
    s->min_scale = s->dynamic ? cfg->min_loss_scale : s->scale;
    s->window = cfg->loss_scale_window;
    s->hysteresis = cfg->hysteresis;
    s->hysteresis_tracker = cfg->hysteresis;
}

bool loss_scaler_update(loss_scaler_t *s, bool found_inf, bool *at_floor) {
    *at_floor = false;
    if (!s->enabled) return !found_inf;
    if (!found_inf) {
        if (s->dynamic && ++s->growth_tracker == s->window) {
            s->growth_tracker = 0;
            s->hysteresis_tracker = s->hysteresis;
            s->scale *= 2.0;
        }
        return true;
    }
    s->overflows++;
    *at_floor = s->scale <= s->min_scale;
    if (s->dynamic) {
        s->growth_tracker = 0;
        if (--s->hysteresis_tracker <= 0) {
            double halved = s->scale / 2.0;
            s->scale = halved < s->min_scale ? s->min_scale : halved;
        }
    }
    return false;
}
