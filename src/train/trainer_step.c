/* trainer_step.c — one optimizer step: the micro-batches through the pipeline schedule, the
 * reduced loss and gradient norm, the testing hooks (dumps, injected NaN / overflow / spike),
 * fp16 loss scaling, ZB-H1's optimistic update, the update itself and the counters; and
 * entering a curriculum stage (the trainer takes its shape). */
#include "train/trainer_internal.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/prof.h"
#include "io/checkpoint.h"
#include "train/ckpt_async.h"
#include "parallel/comm_host.h"
#include "parallel/watchdog.h"
#include "train/flat.h"

/* Forward + backward over all micro-batches of this rank through the pipeline schedule; the
 * data-parallel buckets start during the last micro-batch's backward and finish here. Returns
 * the sum of the micro-batches' mean losses (last stage; 0 elsewhere). */
static double accumulate_gradients(trainer_t *tr) {
    const int B = tr->shape.micro_batch, Tg = tr->shape.T;
    const int T = Tg / tr->grid->cp; /* this rank's tokens of a sequence */
    const size_t BT = (size_t)B * Tg;
    /* fp16: the loss gradient is scaled up (the optimizer divides it out again) */
    const float dloss =
        (float)(tr->scaler.scale / ((double)B * T * tr->shape.accum * tr->grid->dp));
    char err[1024] = "";
    int bad = 0;
    for (int a = 0; a < tr->shape.accum && !bad; a++) {
        prof_begin(PROF_DATA, "data", a, -1);
        /* the global batch [sample_pos, sample_pos + G) cut into dp slices of accum micro-batches */
        const int64_t first = curric_sample_offset(tr->grid->rank_data, tr->shape.accum, B, a);
        bad = curric_fill(&tr->curric, tr->prog.sample_pos, first, B, tr->inputs + a * BT,
                          tr->targets + a * BT, err, sizeof err) != 0;
        prof_end(PROF_DATA, 0);
    }
    curric_agree_data_error(tr->cfg->source_path, tr->grid->dp_comm, bad, err);
    ring_keep_local(tr->inputs, tr->shape.accum * B, Tg, tr->grid->cp, tr->grid->rank_cp);
    ring_keep_local(tr->targets, tr->shape.accum * B, Tg, tr->grid->cp, tr->grid->rank_cp);
    zero_grads_begin_step(&tr->zero);
    /* dropout, label smoothing and z-loss: this pass only (masks keyed by step and by the
     * sample's index in the step's global batch: this rank's micro-batch 0 starts at its sample
     * offset, the one the data above was read from) */
    gpt_train_pass(&tr->model, tr->prog.step,
                   (uint64_t)curric_sample_offset(tr->grid->rank_data, tr->shape.accum, B, 0));
    moe_stats_reset(tr->model.moe);
    /* a slow rank for the straggler tests (LLMT_FAULT=compute@R:sleepN): busy time of its own,
     * after the data agreement above, so the others wait for it inside the timed comm calls */
    fault_point("compute", tr->grid->world_rank);
    double loss_sum =
        pipe_run(&tr->pipe, tr->inputs, tr->targets, tr->shape.accum, B, T, true, dloss);
    gpt_eval_pass(&tr->model);
    dp_sync_finish(&tr->dps);
    return loss_sum;
}

/* The step's mean loss on every rank: the last stage has it, summed over pp and dp. */
static double global_loss(trainer_t *tr, double loss_sum) {
    comm_allreduce_sum_double(&loss_sum, 1, tr->grid->pp_group, COMM_OTHER);
    comm_allreduce_sum_double(&loss_sum, 1, tr->grid->dp_group, COMM_OTHER);
    return loss_sum / (tr->shape.accum * tr->grid->dp);
}

/* The global gradient norm: each rank sums the reduced gradients of the elements it owns in the
 * ownership map (its ZeRO partition of its tp shard of its stage, replicated tensors on tp rank
 * 0, the tied wte on the first stage), so the sum over all ranks counts every element once. */
static double global_grad_norm(trainer_t *tr) {
    double sq = zero_grad_sumsq_owned(&tr->zero, &tr->model);
    comm_allreduce_sum_double(&sq, 1, tr->grid->world_group, COMM_OTHER);
    return sqrt(sq);
}

/* Testing hooks (&train inject_nan_step, inject_overflow_step): poison one reduced gradient so
 * the anomaly or overflow path runs for real. */
static void inject_nonfinite(trainer_t *tr, float nan_value) {
    const param_t *p = &tr->model.P.p[0];
    for (int i = 0; i < tr->model.P.n && !p->held; i++) p = &tr->model.P.p[i];
    /* where the reduced gradient lives: the full buffer, or (ZeRO >= 2) the partitions */
    const zero_t *z = &tr->zero;
    if (z->stage >= 2) {
        if (z->hi > z->lo) tr->ops->to_device(z->grad_shard, &nan_value, sizeof nan_value);
    } else {
        tr->ops->to_device(tr->model.grads + p->offset, &nan_value, sizeof nan_value);
    }
}

/* Testing hook (&train inject_spike_step): the batch that step reads in an uninterrupted run
 * (first sample inject_spike_step * global_batch) gets its loss and reduced gradients multiplied
 * by SPIKE_FACTOR, so the spike (and gradient-explosion) detectors fire for real. It is tied to
 * the data, like a bad batch: a rollback skips that batch, and the spike does not come back
 * (inject_nan_step, tied to the step number, does: a fault a rollback cannot cure). */
#define SPIKE_FACTOR 100.0f

static bool spike_injected(const trainer_t *tr) {
    return tr->cfg->inject_spike_step >= 0 &&
           tr->prog.sample_pos == (int64_t)tr->cfg->inject_spike_step * tr->shape.global_batch;
}

static void scale_reduced_grads(trainer_t *tr, float s) {
    const zero_t *z = &tr->zero;
    if (z->stage >= 2) tr->ops->scale(z->grad_shard, s, z->hi - z->lo);
    else tr->ops->scale(tr->model.grads, s, tr->model.P.total);
}

/* Testing hook (&train dump_grads_step): the step's gradients as the optimizer sees them
 * (micro-batches accumulated through the pipeline schedule, reduced over dp, tied embedding
 * summed; before clipping), in global shapes like a weights file, so a reference can compare
 * them on any grid. */
static void dump_grads(trainer_t *tr) {
    char path[RUNDIR_PATH_MAX + 64], msg[COMM_MSG_MAX + 64];
    ckpt_async_wait(&tr->ckpt); /* HDF5 is the background writer's until it is done */
    snprintf(path, sizeof path, "%s/grads_step%06lld.h5", tr->rd.dir, (long long)tr->prog.step);
    float *host =
        flat_host_copy(&tr->zero, tr->ops, tr->model.grads, tr->zero.grad_shard, tr->zero.stage >= 2);
    ckpt_meta_t meta = {tr->prog.step, tr->cfg->seed, tr->model.V, tr->model.Vp, tr->cfg->n_layer,
                        tr->cfg->n_head, tr->cfg->d_model, tr->cfg->d_ff, tr->cfg->seq_len,
                        tr->config_text, "", &tr->provenance};
    watchdog_enter_for("gradient dump", "all ranks", tr->cfg->io_timeout_s);
    int rc = ckpt_write_weights(path, MPI_COMM_WORLD, &tr->model.P.ckpt, host, &meta,
                                ckpt_owner(tr->grid), msg, sizeof msg);
    watchdog_leave();
    xfree(host);
    if (rc != 0) fatal_user("&train dump_grads_step: %s", msg);
    if (is_root(tr)) printf("gradients: wrote %s\n", path);
}

/* fp16: an Inf or NaN in the scaled gradients (any rank: the norm sums them all) skips the step
 * and lets the scaler back off; an overflow at the scaler's floor is an anomaly (loss_scale, for
 * the detectors). Returns whether the step may be applied; sets r->overflow and *at_floor. */
static bool loss_scaling_verdict(trainer_t *tr, step_result_t *r, bool *at_floor_out) {
    const double before = tr->scaler.scale;
    bool at_floor;
    r->overflow = !isfinite(r->norm);
    bool apply = loss_scaler_update(&tr->scaler, r->overflow, &at_floor);
    *at_floor_out = at_floor;
    if (r->overflow && !at_floor && is_root(tr))
        fprintf(stderr, "llmtrain: note: step %lld: fp16 gradients overflowed at loss scale %g: "
                "step skipped, scale now %g\n", (long long)tr->prog.step + 1, before, tr->scaler.scale);
    return apply;
}

/* ZB-H1's optimizer post-validation (postval.h): the loss and the norm reduced without waiting
 * for them, the update applied meanwhile without clipping (what almost every step does). Sets
 * the step's loss (spike: times the factor) and the norm of the true gradient. */
static void optimistic_update(trainer_t *tr, step_result_t *r, double loss_sum, bool spike) {
    /* each last-stage tp rank holds the same loss: one of them counts it */
    const bool counts = tr->grid->rank_tp == 0;
    postval_start(&tr->pv, counts ? loss_sum : 0.0, counts ? tr->model.reg.z_loss_sum : 0.0,
                  zero_grad_sumsq_owned(&tr->zero, &tr->model));
    prof_begin(PROF_OPTIMIZER, "optimizer", -1, -1);
    postval_save(&tr->pv, &tr->opt, &tr->model, &tr->zero);
    adamw_step(&tr->opt, &tr->model, &tr->zero, tr->cfg, (float)r->lr,
               (float)(1.0 / tr->scaler.scale));
    prof_end(PROF_OPTIMIZER, 0);
    double loss, z_loss, sq;
    postval_wait(&tr->pv, &loss, &z_loss, &sq);
    r->loss = loss / (tr->shape.accum * tr->grid->dp) * (spike ? SPIKE_FACTOR : 1.0);
    r->z_loss = z_loss / (tr->shape.accum * tr->grid->dp);
    r->norm = sqrt(sq) / tr->scaler.scale;
}

/* The update the checks decided on: applied with grad_scale, or not at all. Post-validated, the
 * optimistic one stays when it is that update and is undone otherwise. */
static void settle_update(trainer_t *tr, const step_result_t *r, float grad_scale,
                          float optimistic_scale) {
    if (tr->post_validate) {
        if (r->applied && grad_scale == optimistic_scale) return;
        postval_undo(&tr->pv, &tr->opt, &tr->model, &tr->zero);
    }
    if (r->applied)
        adamw_step(&tr->opt, &tr->model, &tr->zero, tr->cfg, (float)r->lr, grad_scale);
}

step_result_t trainer_step(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    step_result_t r = {0};
    r.step = tr->prog.step + 1;
    watchdog_set_step(tr->prog.step + 1);
    r.loss_scale = tr->scaler.scale;
    double loss_sum = accumulate_gradients(tr);
    moe_log_step(&tr->moelog, &tr->model, tr->grid->world_group, r.step, is_root(tr));
    if (tr->prog.step == cfg->dump_grads_step) dump_grads(tr);
    if (tr->prog.step == cfg->inject_nan_step) inject_nonfinite(tr, NAN);
    if (tr->prog.step == cfg->inject_overflow_step) inject_nonfinite(tr, INFINITY);
    const bool spike = spike_injected(tr);
    if (spike) scale_reduced_grads(tr, SPIKE_FACTOR);
    r.lr = curric_lr(&tr->curric, cfg, tr->prog.step);
    const double scale_used = tr->scaler.scale; /* the optimistic update's (the verdict may
                                                  * change the scale) */
    if (tr->post_validate) {
        optimistic_update(tr, &r, loss_sum, spike);
    } else {
        r.loss = global_loss(tr, loss_sum) * (spike ? SPIKE_FACTOR : 1.0);
        if (cfg->z_loss > 0) r.z_loss = global_loss(tr, tr->model.reg.z_loss_sum); /* like the loss */
        r.norm = global_grad_norm(tr) / tr->scaler.scale; /* the norm of the true gradient */
    }
    bool apply = true, at_floor = false;
    if (tr->scaler.enabled) apply = loss_scaling_verdict(tr, &r, &at_floor);
    else r.overflow = false;
    /* the data of this step is passed over by a rollback: training goes on after it (the
     * reloaded checkpoint replaces an optimistic update too) */
    if (anom_handler_step(&tr->anomaly, &r, at_floor, tr->prog.sample_pos + tr->shape.global_batch))
        return r;
    r.applied = apply && !(r.anomaly && r.event.action == ANOM_SKIP);
    prof_begin(PROF_OPTIMIZER, "optimizer", -1, -1);
    settle_update(tr, &r, (float)(clip_scale(r.norm, cfg->grad_clip) / tr->scaler.scale),
                  (float)(1.0 / scale_used));
    if (!r.applied) tr->prog.skipped++;
    prof_end(PROF_OPTIMIZER, 0);
    if (r.anomaly)
        anom_handler_report(&tr->anomaly, &r.event, r.applied ? "update applied" : "update skipped");
    tr->prog.step++;
    tr->prog.sample_pos += tr->shape.global_batch;
    tr->prog.tokens_seen += (int64_t)tr->shape.global_batch * tr->shape.T;
    curric_commit(&tr->curric);
    return r;
}

/* ---------------------------------------------------------------- curriculum stages */

/* The trainer takes the stage's shape: sequence length, batch, accumulation and the pipeline's
 * micro-batch count (the step line's FLOPs per token follow the shape's T). */
static void enter_stage(trainer_t *tr, int s) {
    const bool boundary = curric_enter(&tr->curric, s);
    const curric_stage_t *p = &tr->curric.stage[s];
    tr->shape.T = p->T;
    tr->shape.global_batch = p->global_batch;
    tr->shape.accum = p->accum;
    pipe_set_micro_batches(&tr->pipe, p->accum); /* the action lists, not only the count */
    if (boundary)
        curric_announce(&tr->curric, tr->prog.step, tr->shape.micro_batch, tr->grid->dp, is_root(tr),
                        &tr->metrics);
}

void trainer_begin_stages(trainer_t *tr) {
    if (tr->curric.staged && is_root(tr)) curric_print_plan(&tr->curric, tr->cfg);
    enter_stage(tr, curric_stage_for_step(&tr->curric, tr->prog.step));
}

void trainer_stage_before_step(trainer_t *tr) {
    const int s = curric_stage_for_step(&tr->curric, tr->prog.step);
    if (s != tr->curric.cur) enter_stage(tr, s);
}
