/* step_result.h — what one optimizer step came to: its values, whether its update was applied,
 * and the anomaly event when one fired. The step (trainer_step.c) fills it in; the loop, the
 * step line (train/trainer_report) and anomaly handling read it. Header only. Uses:
 * train/anomaly. Used by: train/trainer, train/trainer_report. */
#ifndef LLMT_STEP_RESULT_H
#define LLMT_STEP_RESULT_H
#include <stdbool.h>
#include <stdint.h>
#include "train/anomaly.h"

typedef struct step_result {
    int64_t step;          /* this step, 1-based as logged */
    double loss, norm, lr, loss_scale;
    double z_loss;         /* &train z_loss: coef * mean(logsumexp^2) of the step */
    bool anomaly, applied, overflow;
    anom_event_t event;    /* when anomaly */
} step_result_t;
#endif
