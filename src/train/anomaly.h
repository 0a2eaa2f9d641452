/* anomaly.h — the training-anomaly detectors and the policy each one's verdict gets.
 * Detectors, checked in this order on every step (the first that fires is the step's verdict):
 *   nonfinite      the loss or the gradient norm is NaN/Inf (fp16: a non-finite norm is an
 *                  overflow, the loss scaler's business, not this detector's);
 *   loss_scale     fp16: an overflow with the scale already at min_loss_scale, or
 *                  `overflow_streak` overflowing steps in a row (the scaler is not recovering);
 *   spike          the loss's rise above the median of the last `window` losses exceeds
 *                  `spike_zscore` robust scales; the scale is the largest of three spreads of
 *                  those losses: 1.4826 x their median absolute deviation (the standard
 *                  deviation of the bulk, blind to earlier outliers), the exponential moving
 *                  standard deviation (span `window`: alpha = 2 / (window + 1); it carries the
 *                  tail that the bulk hides), and ANOM_SIGMA_FLOOR x the median. A small batch's
 *                  loss is heavy-tailed: an unusual batch of ordinary text lies 10-20 % above the
 *                  median (the demo: 4.49 -> 5.29), 8-15 of the bulk's deviations, where an
 *                  exponential variance over 20 steps skipped healthy updates (6 of the demo's 640
 *                  steps, none with this scale; a rise of 2x still scores ~20 at the default 6);
 *                  only rises count;
 *   grad_explosion the gradient norm exceeds `grad_ratio` times the median of the last
 *                  `window` finite norms.
 * And after each validation: divergence, the validation loss rose `divergence_evals` times in a
 * row. Warm-up: spike and grad_explosion give no verdict before `window` values were folded in.
 * A threshold of 0 turns its detector off. An anomalous step's loss and norm are not folded into
 * the statistics (the caller says so), so one spike does not hide the next.
 * The state is a plain struct (no allocation; copying it is a snapshot: the trainer keeps the
 * one of its newest checkpoint and restores it on a rollback).
 * Owns: detector state, verdicts, the event type, policy names. Uses: config/. Used by:
 * train/trainer_anomaly, train/step_result.h, train/trainer. */
#ifndef LLMT_ANOMALY_H
#define LLMT_ANOMALY_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"

#define ANOM_WINDOW_MAX CFG_ANOMALY_WINDOW_MAX /* the largest &train anomaly_window */
#define ANOM_SIGMA_FLOOR 0.05   /* the smallest scale of the spike score, relative to the median */

typedef enum anom_detector {
    ANOM_NONE, ANOM_NONFINITE, ANOM_LOSS_SCALE, ANOM_SPIKE, ANOM_GRAD_EXPLOSION, ANOM_DIVERGENCE,
    ANOM_DETECTORS
} anom_detector_t;

typedef enum anom_action { ANOM_WARN, ANOM_SKIP, ANOM_ROLLBACK, ANOM_ABORT } anom_action_t;

typedef struct anom_config {
    int window;              /* EMA span, median window, warm-up (steps) */
    double spike_zscore;     /* 0 = off */
    double grad_ratio;       /* 0 = off */
    int divergence_evals;    /* 0 = off */
    int overflow_streak;     /* 0 = off */
} anom_config_t;

typedef struct anom_state {
    anom_config_t c;
    int64_t n_loss;              /* losses folded in */
    double loss_mean, loss_var;  /* exponential moving mean and variance */
    double losses[ANOM_WINDOW_MAX]; /* ring of the last min(n_loss, window) losses folded in */
    int next_loss;
    double norms[ANOM_WINDOW_MAX]; /* ring of the last min(n_norms, window) finite norms */
    int n_norms, next_norm;
    int overflows_in_row;
    int n_val, rises;            /* validations seen; rises in a row */
    double last_val;
} anom_state_t;

/* What one step measured (globally reduced values, the same on every rank). */
typedef struct anom_step_in {
    double loss, norm;
    bool overflow;   /* fp16: the scaled gradients were not finite */
    bool at_floor;   /* ... with the scale already at its floor */
} anom_step_in_t;

typedef struct anom_verdict {
    anom_detector_t detector;  /* ANOM_NONE: nothing wrong */
    double value;              /* z-score, norm ratio, overflow streak, rises, or the bad value */
    double threshold;          /* what `value` exceeded (0 for nonfinite and the scaler's floor) */
    double reference;          /* spike: the median loss; grad_explosion: the median norm */
} anom_verdict_t;

/* An anomaly verdict and what was done about it (one metrics record, one line). */
typedef struct anom_event {
    int64_t step;          /* the step (1-based, as logged) whose values or validation fired */
    double loss, norm;     /* that step's (for the message) */
    anom_verdict_t v;
    anom_action_t action;  /* what was done: a rollback that was not possible is a skip */
    int64_t to_step;       /* the step rolled back to; -1 if none */
    const char *note;      /* why the policy was not followed, or NULL */
} anom_event_t;

void anom_init(anom_state_t *s, const anom_config_t *c);
/* The detectors' settings from &train. */
anom_config_t anom_config_from(const config_t *cfg);
/* The loss's spike score: its rise above the median of the window in robust scales (above);
 * NAN during warm-up. */
double anom_loss_zscore(const anom_state_t *s, double loss);
/* The norm over the median of the window; NAN during warm-up or for a non-finite norm. */
double anom_norm_ratio(const anom_state_t *s, double norm);
/* The verdict on a step, without changing the state. */
anom_verdict_t anom_check_step(const anom_state_t *s, const anom_step_in_t *in);
/* Fold a step in: the overflow streak always; the loss and norm (finite ones) unless
 * `anomalous` (a verdict whose update was not kept). */
void anom_observe_step(anom_state_t *s, const anom_step_in_t *in, bool anomalous);
/* Fold a validation loss in; the divergence verdict (ANOM_NONE or ANOM_DIVERGENCE). */
anom_verdict_t anom_observe_val(anom_state_t *s, double val_loss);

const char *anom_detector_name(anom_detector_t d);  /* "spike", ... */
const char *anom_action_name(anom_action_t a);      /* "warn" | "skip" | "rollback" | "abort" */
/* The policy of a detector: on_spike (spike, grad_explosion) or on_divergence when set, else
 * on_anomaly. */
anom_action_t anom_action_for(const config_t *cfg, anom_detector_t d);
#endif
