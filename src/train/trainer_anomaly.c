/* trainer_anomaly.c — the anomaly detectors' verdicts (agreed by every rank) and their
 * policies: the messages and records, abort, skip, warn and the rollback to the last
 * checkpoint; the divergence detector on the validation loss during training
 * (trainer_anomaly.h). */
#include "train/trainer_anomaly.h"
#include "train/ckpt_async.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "parallel/comm_host.h"

static bool is_root(const anom_ctx_t *in) { return in->grid->world_rank == 0; }

void anom_handler_init(anom_handler_t *h, const config_t *cfg) {
    const anom_config_t detectors = anom_config_from(cfg);
    anom_init(&h->now, &detectors);
    h->at_ckpt = h->now;
    h->rollbacks = 0;
}

void anom_handler_saved(anom_handler_t *h, bool in_background) {
    h->saving = h->now; /* written in the background: it counts once committed */
    if (!in_background) h->at_ckpt = h->now;
}

void anom_handler_committed(anom_handler_t *h) { h->at_ckpt = h->saving; }

/* The verdict every rank acts on: each computes it from the same globally reduced values, and
 * one integer all-reduce makes sure (a rank that saw nothing takes the highest detector seen). */
static anom_verdict_t agreed_verdict(anom_verdict_t v) {
    int d = (int)v.detector;
    comm_allreduce(&d, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "anomaly verdict");
    if (d != (int)v.detector) {
        v.detector = (anom_detector_t)d;
        v.value = v.threshold = v.reference = NAN;
    }
    return v;
}

/* The namelist key whose policy a detector follows, and its value. */
static const char *policy_key(const config_t *cfg, anom_detector_t d, const char **value) {
    const bool spike = d == ANOM_SPIKE || d == ANOM_GRAD_EXPLOSION;
    const cfg_policy_t own = spike                  ? cfg->choice.on_spike
                             : d == ANOM_DIVERGENCE ? cfg->choice.on_divergence
                                                    : CFG_POLICY_INHERIT;
    if (own == CFG_POLICY_INHERIT) {
        *value = cfg->on_anomaly;
        return "on_anomaly";
    }
    *value = spike ? cfg->on_spike : cfg->on_divergence;
    return spike ? "on_spike" : "on_divergence";
}

/* What the detector saw, for messages: "loss 9.1 is 55.2 sigma above ...". */
static void describe(const anom_handler_t *h, const anom_event_t *e, char *buf, size_t len) {
    const anom_ctx_t *in = &h->ctx;
    const config_t *cfg = in->cfg;
    const anom_verdict_t *v = &e->v;
    switch (v->detector) {
    case ANOM_NONFINITE:
        snprintf(buf, len, "loss %g, gradient norm %g is not finite", e->loss, e->norm);
        break;
    case ANOM_LOSS_SCALE:
        if (v->threshold > 0)
            snprintf(buf, len, "%.0f fp16 overflows in a row (&train overflow_streak = %d): the loss "
                     "scaler is not recovering", v->value, cfg->overflow_streak);
        else
            snprintf(buf, len, "loss %g, gradient norm %g is not finite at the smallest loss scale "
                     "(&train min_loss_scale)", e->loss, e->norm);
        break;
    case ANOM_SPIKE:
        snprintf(buf, len, "loss spike: loss %g is %.1f robust scales above the median %g of the "
                 "last %d losses (&train spike_zscore = %g)", e->loss, v->value, v->reference,
                 h->now.c.window, v->threshold);
        break;
    case ANOM_GRAD_EXPLOSION:
        snprintf(buf, len, "gradient explosion: norm %g is %.1f x the median %g of the last %d "
                 "steps (&train grad_explosion_ratio = %g)", e->norm, v->value, v->reference,
                 h->now.c.window, v->threshold);
        break;
    case ANOM_DIVERGENCE:
        snprintf(buf, len, "divergence: validation loss %g rose %.0f evaluations in a row (&train "
                 "divergence_evals = %d)", e->loss, v->value, cfg->divergence_evals);
        break;
    default: snprintf(buf, len, "anomaly"); break;
    }
}

/* The event as one flat metrics record (the TensorBoard writer shows its strings as text). */
static void record_anomaly(const anom_handler_t *h, const anom_event_t *e) {
    const anom_ctx_t *in = &h->ctx;
    char n1[32], n2[32], to[96] = "", note[160] = "";
    if (e->to_step >= 0)
        snprintf(to, sizeof to, ",\"to_step\":%lld,\"sample_pos\":%lld,\"rollbacks\":%d",
                 (long long)e->to_step, (long long)in->prog->sample_pos, h->rollbacks);
    if (e->note) snprintf(note, sizeof note, ",\"note\":\"%s\"", e->note);
    metrics_write(in->metrics, "\"event\":\"anomaly\",\"detector\":\"%s\",\"step\":%lld,"
                  "\"value\":%s,\"threshold\":%s,\"action\":\"%s\"%s%s",
                  anom_detector_name(e->v.detector), (long long)e->step,
                  metrics_num(n1, sizeof n1, e->v.value), metrics_num(n2, sizeof n2, e->v.threshold),
                  anom_action_name(e->action), to, note);
}

/* 'abort', or a rollback beyond &train max_rollbacks: the record, one message, exit 2. */
_Noreturn static void abort_on_anomaly(const anom_handler_t *h, anom_event_t *e,
                                      bool rollbacks_used_up) {
    const anom_ctx_t *in = &h->ctx;
    char what[300];
    const char *value, *key = policy_key(in->cfg, e->v.detector, &value);
    describe(h, e, what, sizeof what);
    e->action = ANOM_ABORT;
    e->note = rollbacks_used_up ? "max_rollbacks used up" : NULL;
    record_anomaly(h, e);
    if (rollbacks_used_up)
        fatal_user("step %lld: %s; stopping: &train %s = 'rollback' but the %d rollback%s that "
                   "&train max_rollbacks = %d allows %s been made", (long long)e->step, what, key,
                   h->rollbacks, h->rollbacks == 1 ? "" : "s", in->cfg->max_rollbacks,
                   h->rollbacks == 1 ? "has" : "have");
    fatal_user("step %lld: %s; stopping because &train %s = 'abort'", (long long)e->step, what, key);
}

/* The line (stderr) and record of an event that did not end the run. */
void anom_handler_report(anom_handler_t *h, const anom_event_t *e, const char *outcome) {
    const anom_ctx_t *in = &h->ctx;
    char what[300], done[200];
    const char *value, *key = policy_key(in->cfg, e->v.detector, &value);
    describe(h, e, what, sizeof what);
    if (e->to_step >= 0)
        snprintf(done, sizeof done, "rolled back to the checkpoint of step %lld; the samples up to "
                 "%lld (steps %lld..%lld) are skipped (rollback %d of at most %d)",
                 (long long)e->to_step, (long long)in->prog->sample_pos, (long long)e->to_step + 1,
                 (long long)e->step, h->rollbacks, in->cfg->max_rollbacks);
    else snprintf(done, sizeof done, "%s%s%s", outcome, e->note ? ": " : "", e->note ? e->note : "");
    if (is_root(in))
        fprintf(stderr, "llmtrain: warning: step %lld: %s: %s (%s = '%s')\n", (long long)e->step,
                what, done, key, value);
    record_anomaly(h, e);
}

/* A rollback verdict: reload the newest checkpoint (step c) with the detector state it had and
 * continue the data at `next_sample` (the position after the window that fired, so the
 * samples of steps c+1..k are not seen again). No checkpoint yet, or one that does not load:
 * the step is skipped instead (said in the note). Returns whether it rolled back. */
static bool roll_back(anom_handler_t *h, anom_event_t *e, int64_t next_sample) {
    const anom_ctx_t *in = &h->ctx;
    if (h->rollbacks >= in->cfg->max_rollbacks) abort_on_anomaly(h, e, true);
    e->action = ANOM_SKIP;
    if (ckpt_async_wait(in->ckpt) > 0) /* the newest checkpoint was being written */
        h->at_ckpt = h->saving;
    if (in->prog->last_ckpt_step < 0) {
        e->note = "no checkpoint to roll back to yet";
        return false;
    }
    char msg[COMM_MSG_MAX + 64];
    curric_cursor_t keep; /* the data cursor at next_sample (the step's start or end) */
    const bool have_cursor = curric_cursor_at(in->curric, next_sample, &keep);
    ASSERT(have_cursor);
    if (ckpt_rollback(in->ckpt, msg, sizeof msg) != 0) {
        if (is_root(in)) fprintf(stderr, "llmtrain: error: rollback: %s\n", msg);
        e->note = "the checkpoint could not be reloaded";
        return false;
    }
    h->rollbacks++;
    /* the records of the steps about to be redone are superseded, as after a resume */
    if (metrics_supersede_open(in->metrics, (long long)in->prog->step) < 0)
        fprintf(stderr, "llmtrain: warning: rollback: marking the superseded records of %s: %s\n",
                in->metrics->path, strerror(errno));
    h->now = h->at_ckpt;
    in->prog->sample_pos = next_sample;
    curric_set_cursor(in->curric, &keep, next_sample);
    e->action = ANOM_ROLLBACK;
    e->to_step = in->prog->step;
    return true;
}

/* The detectors on one step's values, then its policy: abort ends the run here; rollback
 * reloads (true: the step is over); skip and warn are left to the caller (r->event). The values
 * of an anomalous step are folded into the statistics only under 'warn' (the run goes on
 * from them). */
bool anom_handler_step(anom_handler_t *h, step_result_t *r, bool at_floor, int64_t next_sample) {
    const anom_ctx_t *in = &h->ctx;
    const anom_step_in_t values = {r->loss, r->norm, r->overflow, at_floor};
    anom_event_t *e = &r->event;
    e->step = r->step;
    e->loss = r->loss;
    e->norm = r->norm;
    e->to_step = -1;
    e->v = agreed_verdict(anom_check_step(&h->now, &values));
    r->anomaly = e->v.detector != ANOM_NONE;
    e->action = r->anomaly ? anom_action_for(in->cfg, e->v.detector) : ANOM_WARN;
    anom_observe_step(&h->now, &values, r->anomaly && e->action != ANOM_WARN);
    if (!r->anomaly) return false;
    if (e->action == ANOM_ABORT) abort_on_anomaly(h, e, false);
    if (e->action != ANOM_ROLLBACK || !roll_back(h, e, next_sample)) return false;
    r->applied = false;
    anom_handler_report(h, e, NULL);
    return true;
}

/* Validation during training, and the divergence detector on its loss (a rollback continues
 * the data where it is: after this step's samples). 'skip' has no update to drop here. */
void anom_handler_validate(anom_handler_t *h) {
    const anom_ctx_t *in = &h->ctx;
    const double val = val_run(in->val);
    anom_event_t e = {in->prog->step, val, NAN, agreed_verdict(anom_observe_val(&h->now, val)),
                      ANOM_WARN, -1, NULL};
    if (e.v.detector == ANOM_NONE) return;
    e.action = anom_action_for(in->cfg, e.v.detector);
    if (e.action == ANOM_ABORT) abort_on_anomaly(h, &e, false);
    if (e.action == ANOM_ROLLBACK) roll_back(h, &e, in->prog->sample_pos);
    if (e.action == ANOM_SKIP && !e.note) e.note = "after a validation there is no update to skip";
    anom_handler_report(h, &e, "training goes on");
}
