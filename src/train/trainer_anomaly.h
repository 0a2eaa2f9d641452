/* trainer_anomaly.h — the anomaly detectors' verdicts during training (train/anomaly.h: pure
 * functions on anom_state_t), agreed by every rank, and their policies: the messages and
 * records, abort, skip, warn and the rollback to the last checkpoint (reloaded through
 * checkpointing's ckpt_ctx_t, with the detectors' state as it was then); the divergence
 * detector on the validation loss during training.
 * Owns: anom_handler_t, the detectors' states (now, at the newest checkpoint, at the save in
 * flight) and the rollback count. Reads and changes the run only through anom_ctx_t, pointers
 * set once at setup; never the trainer itself. Uses: train/anomaly, train/checkpointing,
 * train/ckpt_async, train/curriculum, train/trainer_validate, io/metrics, parallel/.
 * Used by: train/trainer (setup, the step and the loop). */
#ifndef LLMT_TRAINER_ANOMALY_H
#define LLMT_TRAINER_ANOMALY_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"
#include "io/metrics.h"
#include "parallel/grid.h"
#include "train/anomaly.h"
#include "train/checkpointing.h"
#include "train/curriculum.h"
#include "train/step_result.h"
#include "train/trainer_validate.h"

/* What anomaly handling reads and changes of the run: set once at setup. */
typedef struct anom_ctx {
    const config_t *cfg;        /* the policies (&train on_anomaly, ...), max_rollbacks */
    const grid_t *grid;
    ckpt_ctx_t *ckpt;           /* a rollback reloads the newest checkpoint through it */
    ckpt_progress_t *prog;      /* the step and data position a rollback resets */
    curriculum_t *curric;       /* the data cursor a rollback moves past the bad window */
    metrics_t *metrics;
    const val_ctx_t *val;       /* validation during training */
} anom_ctx_t;

typedef struct anom_handler {
    anom_ctx_t ctx;
    anom_state_t now;           /* the anomaly detectors (anomaly.h) */
    anom_state_t at_ckpt;       /* ... as they were at last_ckpt_step: a rollback restores them */
    anom_state_t saving;        /* ... as they were at the save a background write has in flight */
    int rollbacks;              /* anomaly rollbacks made by this process (&train max_rollbacks) */
} anom_handler_t;

/* The detectors started afresh from &train (their state is not in checkpoints: a resumed run
 * warms up again), which is also the state a rollback to the resumed checkpoint restores. */
void anom_handler_init(anom_handler_t *h, const config_t *cfg);
/* A checkpoint of the current step was started: `in_background` (train/ckpt_async) counts it
 * as the rollback target once anom_handler_committed says so, otherwise at once. */
void anom_handler_saved(anom_handler_t *h, bool in_background);
/* The background write started by the last anom_handler_saved(h, true) has completed. */
void anom_handler_committed(anom_handler_t *h);
/* The detectors on one step's values, then its policy: abort ends the run here; rollback
 * reloads (true: the step is over); skip and warn are left to the caller (r->event). */
bool anom_handler_step(anom_handler_t *h, step_result_t *r, bool at_floor, int64_t next_sample);
/* The line (stderr) and record of an event that did not end the run. */
void anom_handler_report(anom_handler_t *h, const anom_event_t *e, const char *outcome);
/* Validation during training (val_run), and the divergence detector on its loss. */
void anom_handler_validate(anom_handler_t *h);
#endif
