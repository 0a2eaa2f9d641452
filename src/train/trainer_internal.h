/* trainer_internal.h — private to the trainer's files that work on trainer_t (trainer.c,
 * trainer_setup.c, trainer_step.c): the functions one of them provides to another. Anomaly
 * handling (trainer_anomaly.h), reporting (trainer_report.h) and validation
 * (trainer_validate.h) have narrow contexts of their own and do not include it. */
#ifndef LLMT_TRAINER_INTERNAL_H
#define LLMT_TRAINER_INTERNAL_H
#include <stdbool.h>
#include <stdint.h>
#include "train/step_result.h"
#include "train/trainer.h"

static inline bool is_root(const trainer_t *tr) { return tr->grid->world_rank == 0; }

/* ---- trainer_step.c */
/* One optimizer step: gradients, the checks, the update (or none), the counters. */
step_result_t trainer_step(trainer_t *tr);
/* Training starts (or resumes) at tr->prog.step: the curriculum's plan is printed and the
 * step's stage entered. */
void trainer_begin_stages(trainer_t *tr);
/* Before each step: enter the step's stage if it is another one (a boundary). */
void trainer_stage_before_step(trainer_t *tr);

#endif
