/* loss_scale.h — loss scaling for fp16 training, with Megatron's semantics. The loss gradient is
 * multiplied by `scale` so that small gradients survive fp16's range; the optimizer divides it
 * out again. Dynamic (&train loss_scale = 0): an Inf or NaN in any gradient on any rank skips the
 * step and counts it, and after `hysteresis` such steps (the tracker is not reset by the
 * backoff, so from then on every overflow halves) the scale halves, never below min_loss_scale;
 * `loss_scale_window` clean steps in a row double it and reset the hysteresis. Fixed
 * (loss_scale = X): overflowing steps are skipped, the scale stays. An overflow while the scale is
 * already at its floor is handed to &train on_anomaly (it will not get better by itself).
 * bf16 and fp32 need no scaler: scale 1, never enabled. The state is saved in checkpoints.
 * Owns: the scale and its trackers. Uses: config/. Used by: train/trainer, train/checkpointing. */
#ifndef LLMT_LOSS_SCALE_H
#define LLMT_LOSS_SCALE_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"

typedef struct loss_scaler {
    bool enabled;            /* precision = 'fp16' */
    bool dynamic;
    double scale, min_scale;
    int window, hysteresis;  /* configuration */
    int growth_tracker;      /* clean steps since the last overflow or growth */
    int hysteresis_tracker;  /* overflows left before the next backoff */
    int64_t overflows;       /* steps skipped for an overflow */
} loss_scaler_t;

void loss_scaler_init(loss_scaler_t *s, const config_t *cfg);
/* The outcome of a step whose scaled gradients were (not) all finite; returns true when the step
 * may be applied. *at_floor is set when it overflowed with the scale already at min_loss_scale. */
bool loss_scaler_update(loss_scaler_t *s, bool found_inf, bool *at_floor);
#endif
