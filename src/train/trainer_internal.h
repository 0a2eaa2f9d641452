/* trainer_internal.h — private to the trainer's files (trainer.c, trainer_setup.c,
 * trainer_step.c, trainer_anomaly.c, trainer_validate.c, trainer_report.c): the step's result
 * and anomaly event types and the functions one of them provides to another. Nothing outside
 * those files includes it. */
#ifndef LLMT_TRAINER_INTERNAL_H
#define LLMT_TRAINER_INTERNAL_H
#include <stdbool.h>
#include <stdint.h>
#include "train/trainer.h"

static inline bool is_root(const trainer_t *tr) { return tr->grid->world_rank == 0; }

/* An anomaly verdict and what was done about it (one metrics record, one line). */
typedef struct anom_event {
    int64_t step;          /* the step (1-based, as logged) whose values or validation fired */
    double loss, norm;     /* that step's (for the message) */
    anom_verdict_t v;
    anom_action_t action;  /* what was done: a rollback that was not possible is a skip */
    int64_t to_step;       /* the step rolled back to; -1 if none */
    const char *note;      /* why the policy was not followed, or NULL */
} anom_event_t;

typedef struct step_result {
    int64_t step;          /* this step, 1-based as logged */
    double loss, norm, lr, loss_scale;
    double z_loss;         /* &train z_loss: coef * mean(logsumexp^2) of the step */
    bool anomaly, applied, overflow;
    anom_event_t event;    /* when anomaly */
} step_result_t;

/* ---- trainer_setup.c */
/* A data error that only some ranks of `comm` saw: agreed, printed once, exit 2. */
void trainer_agree_data_error(const config_t *cfg, MPI_Comm comm, int failed, const char *err);
/* Context parallelism: n sequences of T tokens in x compacted in place to this rank's two
 * chunks of each (model/ring.h); nothing without cp. */
void trainer_cp_local(const trainer_t *tr, int *x, int n, int T);
/* Where the memory limit comes from, for the messages. */
const char *trainer_limit_source(const config_t *cfg);

/* ---- trainer_step.c */
/* One optimizer step: gradients, the checks, the update (or none), the counters. */
step_result_t trainer_step(trainer_t *tr);
/* Training starts (or resumes) at tr->prog.step: the curriculum's plan is printed and the
 * step's stage entered. */
void trainer_begin_stages(trainer_t *tr);
/* Before each step: enter the step's stage if it is another one (a boundary). */
void trainer_stage_before_step(trainer_t *tr);

/* ---- trainer_anomaly.c */
/* The detectors on one step's values, then its policy: abort ends the run here; rollback
 * reloads (true: the step is over); skip and warn are left to the caller (r->event). */
bool trainer_step_anomaly(trainer_t *tr, step_result_t *r, bool at_floor, int64_t next_sample);
/* The line (stderr) and record of an event that did not end the run. */
void trainer_report_anomaly(trainer_t *tr, const anom_event_t *e, const char *outcome);
/* Validation during training, and the divergence detector on its loss. */
void trainer_validate_and_watch(trainer_t *tr);

/* ---- trainer_validate.c */
/* trainer_validate, printed (rank 0) and recorded; returns the loss. */
double trainer_run_validation(trainer_t *tr);

/* ---- trainer_report.c */
/* The startup summary (rank 0): model, batch, memory plan, pipeline, compute, MFU reference. */
void trainer_print_plan(const trainer_t *tr);
/* One step's line (rank 0, every log_every) and metrics record. */
void trainer_log_step(trainer_t *tr, const step_result_t *r, double dt, double eta,
                      const comm_stats_t *c, long faults);
/* Stragglers (train/straggler.h): the peer groups gathered at setup (collective, training);
 * after each step every rank's busy time (dt less the waits in c) gathered and judged, the
 * step line's mark and record members set, a warning the first time a rank is named;
 * at the end the largest ratio seen (rank 0). Off (no collective) with &log straggler_ratio 0
 * or one rank. */
void trainer_stragglers_setup(trainer_t *tr);
void trainer_watch_stragglers(trainer_t *tr, int64_t step, double dt, const comm_stats_t *c);
void trainer_print_stragglers(const trainer_t *tr);
/* End of run: the per-rank communication summary, and the per-rank memory table. */
void trainer_print_time_split(trainer_t *tr);
void trainer_print_memory_table(const trainer_t *tr);
#endif
