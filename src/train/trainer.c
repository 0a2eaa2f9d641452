/* trainer.c — the run loop (trainer_train): steps, validation and checkpoints when due, stop
 * signals and the time limit, the weights files, the end of the run; and mode 'generate'.
 * Setup, the step, anomalies, validation and reporting live in the trainer_*.c files beside
 * it (trainer.h lists them). */
#include "train/trainer_internal.h"
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/prof.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "parallel/comm_host.h"
#include "parallel/watchdog.h"
#include "train/ckpt_async.h"
#include "train/flat.h"

/* A weights file weights_<tag>.h5 in the run directory (space-checked, watched with the I/O
 * timeout). 0, or -1 after saying why it was not written. */
static int save_weights(trainer_t *tr, const char *tag) {
    if (!tr->cfg->save_weights) return 0;
    ckpt_async_wait(&tr->ckpt); /* HDF5 is the background writer's until it is done */
    char path[RUNDIR_PATH_MAX + 64], msg[COMM_MSG_MAX + 64];
    snprintf(path, sizeof path, "%s/weights_%s.h5", tr->rd.dir, tag);
    const double need = ckpt_file_bytes(&tr->model.P.ckpt, false);
    int rc = -1;
    if (!ckpt_reserve_space(tr->rd.dir, need, msg, sizeof msg)) {
        /* msg says why */
    } else {
        ckpt_meta_t meta = {tr->prog.step, tr->cfg->seed, tr->model.V, tr->model.Vp, tr->cfg->n_layer,
                            tr->cfg->n_head, tr->cfg->d_model, tr->cfg->d_ff, tr->cfg->seq_len,
                            tr->config_text, "", &tr->provenance};
        snprintf(meta.run_id, sizeof meta.run_id, "%s", tr->rd.run_id);
        /* every rank its ZeRO partition of its tp shard, through the staging buffer */
        rc = ckpt_write_weights_sharded(&tr->ckpt, path, &meta, msg, sizeof msg);
    }
    if (rc == 0) {
        if (is_root(tr)) printf("weights: wrote %s\n", path);
        return 0;
    }
    if (is_root(tr)) fprintf(stderr, "llmtrain: error: weights %s not written: %s\n", path, msg);
    metrics_write(&tr->metrics, "\"step\":%lld,\"weights\":\"%s\",\"failed\":true",
                  (long long)tr->prog.step, tag);
    return -1;
}

/* Per-step communication: seconds waited and bytes sent per kind (this rank, rank 0 logs). */
static void comm_delta(const comm_stats_t *before, comm_stats_t *d) {
    const comm_stats_t *now = comm_stats();
    for (int k = 0; k < COMM_KINDS; k++) {
        d->seconds[k] = now->seconds[k] - before->seconds[k];
        d->bytes[k] = now->bytes[k] - before->bytes[k];
        d->calls[k] = now->calls[k] - before->calls[k];
    }
}

/* Minor page faults of this process so far (first touch of memory: none should happen inside
 * a step once the first steps have allocated everything). */
static long minor_faults_now(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_minflt : 0;
}

/* A stop signal: the state of the current step is saved (unless a checkpoint of exactly this
 * step exists already: one was just written, or the run stopped before its first step), then
 * the run ends with the requeue code. */
static int stop_for_signal(trainer_t *tr, int sig, const char *when) {
    const bool timed_out = sig == STOP_TIME_LIMIT;
    const char *name = timed_out ? "time_limit" : sig == SIGTERM ? "SIGTERM" : "SIGUSR1";
    char what[300];
    if (timed_out)
        snprintf(what, sizeof what, "%.0f s left before the job ends (%s): less than a step plus "
                 "a save with margin (%.0f s)", deadline_left_s(&tr->deadline),
                 tr->deadline.source, deadline_margin(&tr->deadline));
    else
        snprintf(what, sizeof what, "received %s%s", name, when);
    ckpt_async_wait(&tr->ckpt); /* a write in flight is finished (and is the newest) first */
    const bool untrained = tr->prog.step == 0 && tr->prog.last_ckpt_step < 0;
    int code = LLMT_EXIT_REQUEUE;
    if (!(tr->prog.last_ckpt_step == tr->prog.step || untrained)) {
        if (is_root(tr))
            printf("%s at step %lld: writing a checkpoint, then exiting with code %d so the job "
                   "can be requeued (resume = 'auto' continues from it)\n", what,
                   (long long)tr->prog.step, LLMT_EXIT_REQUEUE);
        code = ckpt_write_now(&tr->ckpt, timed_out ? "time limit" : "signal") == 0 ? LLMT_EXIT_REQUEUE
                                                                            : LLMT_EXIT_CKPT;
    } else if (is_root(tr)) {
        printf("%s at step %lld: %s; exiting with code %d so the job can be requeued (resume = "
               "'auto' continues from it)\n", what, (long long)tr->prog.step,
               untrained ? "nothing trained yet, nothing to save"
               : "the checkpoint of this step exists", LLMT_EXIT_REQUEUE);
    }
    /* the record survives where the launcher stopped reading stdout (see checkpointing.c) */
    metrics_write(&tr->metrics, "\"step\":%lld,\"stopped_by\":\"%s\",\"exit_code\":%d",
                  (long long)tr->prog.step, name, code);
    profiling_finish(&tr->prof, tr->rd.dir, &tr->metrics, tr->prog.step);
    return code;
}

/* After each step: a checkpoint when one is due, then the stop signals (a signal that arrived
 * during that save is seen here, and the save just made serves it). Returns an exit code when
 * the run must end now, else -1. */
static int after_step(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    if (ckpt_async_poll(&tr->ckpt) > 0) /* a background write completed: the rollback target */
        anom_handler_committed(&tr->anomaly);
    /* After a rollback the step is that of the checkpoint just reloaded: nothing to write. A
     * failed save was reported and training goes on; a written one keeps the detectors' state
     * for a rollback to it. */
    if (cfg->ckpt_every > 0 && tr->prog.step % cfg->ckpt_every == 0 && tr->prog.step < cfg->max_steps &&
        tr->prog.last_ckpt_step != tr->prog.step && ckpt_write_now(&tr->ckpt, "every") == 0)
        anom_handler_saved(&tr->anomaly, ckpt_async_pending(&tr->ckpt));
    fault_point("step", tr->grid->world_rank);
    /* rank 0's clock decides about the time limit; the verdict travels with the signals */
    const bool late = is_root(tr) && deadline_due(&tr->deadline, tr->grid->world_rank);
    int sig = stop_pending(MPI_COMM_WORLD, late ? STOP_TIME_LIMIT : 0);
    return sig ? stop_for_signal(tr, sig, "") : -1;
}

/* The end of a run: validation, the final checkpoint, then the final weights (both checked for
 * space first; either failing is exit code 5). */
static int finish(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    if (tr->has_val && (cfg->val_every <= 0 || tr->prog.step % cfg->val_every != 0)) val_run(&tr->val);
    int code = 0;
    ckpt_async_wait(&tr->ckpt); /* the last periodic save may be of this very step */
    if (cfg->ckpt_every > 0 && tr->prog.last_ckpt_step != tr->prog.step && ckpt_write_now(&tr->ckpt, "final") != 0)
        code = LLMT_EXIT_CKPT;
    char tag[32];
    snprintf(tag, sizeof tag, "step%06lld", (long long)tr->prog.step);
    if (save_weights(tr, tag) != 0) code = LLMT_EXIT_CKPT;
    if (is_root(tr) && tr->prog.skipped)
        printf("anomalies: %lld of %lld steps skipped%s\n", (long long)tr->prog.skipped,
               (long long)tr->prog.step, tr->scaler.overflows ? "" : "");
    const int rollbacks = tr->anomaly.rollbacks;
    if (is_root(tr) && rollbacks)
        printf("anomalies: %d rollback%s to an earlier checkpoint (&train max_rollbacks = %d)\n",
               rollbacks, rollbacks > 1 ? "s" : "", cfg->max_rollbacks);
    if (is_root(tr) && tr->post_validate)
        printf("post-validation: %lld of %lld optimistic updates undone (clipping, anomaly or "
               "overflow) and redone as checked\n", (long long)tr->pv.undone, (long long)tr->prog.step);
    if (is_root(tr) && tr->scaler.enabled)
        printf("loss scaling: %lld overflowing steps skipped, final scale %g\n",
               (long long)tr->scaler.overflows, tr->scaler.scale);
    report_time_split(&tr->report);
    if (is_root(tr)) report_print_stragglers(&tr->report);
    report_memory_table(&tr->report);
    profiling_finish(&tr->prof, tr->rd.dir, &tr->metrics, tr->prog.step);
    return code;
}

int trainer_train(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    /* a signal during setup (or resume) is acted on before the first step */
    int sig = stop_signal_pending(MPI_COMM_WORLD);
    if (sig) return stop_for_signal(tr, sig, " during setup");
    if (tr->prog.step == 0 && save_weights(tr, "step000000") != 0 && is_root(tr))
        fprintf(stderr, "llmtrain: warning: training goes on without the step-0 weights file\n");
    double ema = 0.0;
    comm_stats_reset();
    const int64_t first = tr->prog.step;
    while (tr->prog.step < cfg->max_steps) {
        trainer_stage_before_step(tr); /* a stage boundary: the next stage's shape and data */
        comm_stats_t before = *comm_stats(), delta;
        const long faults0 = minor_faults_now();
        profiling_step_begin(&tr->prof, tr->prog.step + 1);
        double t0 = now_sec();
        prof_begin(PROF_STEP, "step", -1, -1);
        step_result_t r = trainer_step(tr);
        prof_end(PROF_STEP, 0);
        double dt = now_sec() - t0;
        deadline_note_step(&tr->deadline, dt);
        profiling_step_end(&tr->prof);
        const long faults = minor_faults_now() - faults0;
        comm_delta(&before, &delta);
        report_watch_stragglers(&tr->report, r.step, dt, &delta); /* all ranks: a small all-gather */
        /* The first step carries one-time costs (page faults, BLAS warm-up): keep it out of the ETA. */
        ema = tr->prog.step - first <= 2 ? dt : 0.9 * ema + 0.1 * dt;
        report_step(&tr->report, &r, dt, ema * (cfg->max_steps - tr->prog.step), &delta, faults);
        if (r.event.to_step < 0 && tr->has_val && cfg->val_every > 0 && tr->prog.step % cfg->val_every == 0)
            anom_handler_validate(&tr->anomaly);
        int code = after_step(tr);
        if (code >= 0) return code;
    }
    return finish(tr);
}

double trainer_validate(trainer_t *tr) { return val_loss(&tr->val); }

void trainer_generate(trainer_t *tr) { generate_run(tr->cfg, tr->grid, &tr->model); }
