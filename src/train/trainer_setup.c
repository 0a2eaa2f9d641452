/* trainer_setup.c — the trainer's setup, as named steps in the order they must run: the
 * configuration text and run directory, the memory limits, the resume choice and batch
 * geometry, the curriculum and the memory check, the data, the parallel wiring (ZeRO, model,
 * pipeline, dp buckets, precision, optimizer), the initial weights or the resumed state, the
 * metrics and provenance, the rates MFU is measured against; and trainer_destroy. */
#include "train/trainer_internal.h"
#include "train/ckpt_async.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "kernels/ops_rate.h"
#include "parallel/comm_host.h"
#include "parallel/watchdog.h"
#include "train/ckpt_memory.h"
#include "train/flat.h"
#include "train/init_from.h"
#include "train/planner.h"
#include "train/runinfo.h"

/* Open a set of shards, check every token id (each rank scans 1/world of the set, so the ranks
 * read it once together; sets above SHARD_SCAN_MAX_BYTES_PER_RANK per rank rely on the check of
 * every window in sampler_fill) and create its sampler. Every rank opens the files itself, and a
 * file may be visible on some nodes only (node-local storage, a missing mount): each problem is
 * agreed and reported once. */
static void open_data(const trainer_t *tr, const char *patterns, const char *key,
                      shard_set_t *set, sampler_t *s, bool shuffle) {
    const config_t *cfg = tr->cfg;
    char err[1024] = "";
    int bad = shard_set_open(set, patterns, key, cfg->choice.data_format, err, sizeof err) != 0;
    curric_agree_data_error(cfg->source_path, MPI_COMM_WORLD, bad, err);
    const double per_rank = (double)set->token_bytes / tr->grid->world_size;
    if (per_rank <= (double)SHARD_SCAN_MAX_BYTES_PER_RANK) {
        bad = shard_set_check_tokens(set, cfg->vocab_size, tr->grid->world_rank,
                                     tr->grid->world_size, err, sizeof err) != 0;
        curric_agree_data_error(cfg->source_path, MPI_COMM_WORLD, bad, err);
    } else if (is_root(tr)) {
        printf("data: %s holds %.1f GiB of tokens, %.1f GiB per rank: no startup scan above %.0f "
               "GiB per rank; every window is checked against vocab_size as it is read\n", key,
               (double)set->token_bytes / (1 << 30), per_rank / (1 << 30),
               (double)SHARD_SCAN_MAX_BYTES_PER_RANK / (1 << 30));
    }
    bad = sampler_create(s, set, cfg->seq_len, cfg->vocab_size, shuffle, (uint64_t)cfg->seed, err,
                         sizeof err) != 0;
    curric_agree_data_error(cfg->source_path, MPI_COMM_WORLD, bad, err);
}

/* bf16 products on the CPU's bf16 instructions, or fp32 products of the bf16 values (the same
 * products; only the order of the fp32 additions differs). 'auto' takes native products only
 * where the backend expects them to be faster than its fp32 ones (ops->products_faster: oneDNN
 * with AMX), a fixed rule rather than a timing, so that two runs of one namelist compute alike.
 * A rank whose CPU has no bf16 products emulates; the summary says so. */
static void choose_products(trainer_t *tr) {
    const ops_t *ops = tr->model.ops;
    tr->products = gpt_product_type(MODEL_SPEC_OF(tr->cfg), ops); /* the planner counts its buffers */
    ops->set_product_type(tr->products);
}

/* The global batch is the namelist's, or, when the namelist leaves it unset, that of the
 * checkpoint the run resumes from (the file actually used). */
static void batch_geometry(trainer_t *tr, int64_t resumed) {
    const config_t *cfg = tr->cfg;
    tr->shape.T = cfg->seq_len;
    /* with stages the file holds its stage's batch, not the run's */
    if (!cfg->global_batch_derived || cfg->n_stages > 0 || resumed > INT32_MAX) resumed = 0;
    tr->shape.global_batch = resumed > 0 ? (int)resumed : cfg->global_batch;
    tr->shape.micro_batch = cfg->micro_batch;
    if (tr->shape.micro_batch == 0) { /* the largest that fits, chosen alike on every rank */
        config_t c = *cfg;
        c.global_batch = tr->shape.global_batch;
        tr->shape.micro_batch = plan_auto_micro_batch(&c, tr->memory_limit);
        if (tr->shape.micro_batch == 0) {
            char hint[300] = "", limit[32];
            bool fits = plan_suggest(&c, tr->memory_limit, hint, sizeof hint);
            format_bytes(tr->memory_limit, limit);
            fatal_user("%s: &train micro_batch = 0: not even micro_batch = 1 fits the %s a rank may "
                       "use (%s); %s%s", cfg->source_path, limit, report_limit_source(cfg),
                       fits ? "the planner suggests " : "more ranks (tp, pp), a smaller model or a "
                       "larger limit are needed", hint);
        }
        if (is_root(tr))
            printf("batch: micro_batch = 0: the planner chose micro_batch %d (the largest that fits "
                   "%.2f GiB per rank)\n", tr->shape.micro_batch, tr->memory_limit / 1073741824.0);
    }
    tr->shape.accum = tr->shape.global_batch / (tr->shape.micro_batch * cfg->dp);
    const batch_shape_t *b = &tr->shape;
    if (b->accum * b->micro_batch * cfg->dp != b->global_batch || b->accum < 1)
        fatal_user("%s: &train global_batch = %d must be a multiple of micro_batch * dp = %d * %d",
                   cfg->source_path, tr->shape.global_batch, tr->shape.micro_batch, cfg->dp);
}

/* Before anything large is allocated: the planner's prediction for this rank against the limit
 * (the ranks agree; the message names the rank, its categories and the planner's suggestion). */
static void check_fits(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    config_t c = *cfg;
    c.global_batch = tr->shape.global_batch;
    plan_rank(&c, tr->grid->rank_tp, tr->grid->rank_pp, tr->shape.micro_batch, tr->shape.accum,
              &tr->plan);
    char msg[1400], hint[300] = "", part[MEM_CATEGORIES][32], total[32], limit[32];
    const char *mine = NULL;
    const bool offload = cfg->choice.offload == CFG_OFFLOAD_OPTIMIZER;
    if (tr->plan.total > tr->memory_limit) {
        bool fits = plan_suggest(&c, tr->memory_limit, hint, sizeof hint);
        for (int k = 0; k < MEM_CATEGORIES; k++) format_bytes(tr->plan.bytes[k], part[k]);
        format_bytes(tr->plan.total, total);
        format_bytes(tr->memory_limit, limit);
        snprintf(msg, sizeof msg, "%s: &run memory_limit_gb: this run needs %s on this rank "
                 "(parameters %s, gradients %s, optimizer %s, master %s, activations %s, comm %s, "
                 "workspace %s) but a rank may use %s (%s); %s%s (see llmtrain --plan %s)",
                 cfg->source_path, total, part[MEM_PARAMETERS], part[MEM_GRADIENTS],
                 part[MEM_OPTIMIZER], part[MEM_MASTER], part[MEM_ACTIVATIONS], part[MEM_COMM],
                 part[MEM_WORKSPACE], limit, report_limit_source(cfg),
                 fits ? "the planner suggests " : "no zero_stage x recompute x micro_batch fits: more "
                 "ranks (tp, pp), a smaller model or a larger limit are needed", hint, cfg->source_path);
        mine = msg;
    } else if (tr->plan.host_total > tr->host_limit) { /* beside a device: the host's share */
        format_bytes(tr->plan.host_total, total);
        format_bytes(tr->host_limit, limit);
        snprintf(msg, sizeof msg, "%s: this run needs %s of host memory on this rank beside the "
                 "device's (the batches, the transient copies of setup and checkpoints%s) but this "
                 "node's memory shared by its ranks is %s: fewer ranks per node%s",
                 cfg->source_path, total, offload ? ", the offloaded optimizer" : "", limit,
                 offload ? ", or &train offload = 'none'" : "");
        mine = msg;
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "checking the memory plan", mine);
}

static void setup_data(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    fault_point("data", tr->grid->world_rank);
    tr->has_train = cfg->train_files[0] != '\0' || stages_have_data(cfg);
    tr->has_val = cfg->val_files[0] != '\0';
    if (tr->has_train) curric_open_data(&tr->curric, cfg, tr->grid);
    if (tr->has_val)
        open_data(tr, cfg->val_files, "val_files", &tr->val_set, &tr->val_sampler, false);
    if (cfg->choice.mode == CFG_MODE_EVAL && !tr->has_val)
        fatal_user("%s: &run mode = 'eval' needs &data val_files", cfg->source_path);
}

/* The cost of the dp gradient all-reduce when nothing hides it: one blocking all-reduce of the
 * whole gradient buffer (best of 2), the yardstick for how much the buckets overlap. */
static double measure_dp_allreduce_ms(trainer_t *tr) {
    if (tr->grid->dp == 1 || !tr->model.grads) return 0.0; /* (staged gradients: no full buffer) */
    double best = 1e30;
    for (int i = 0; i < 2; i++) {
        comm_barrier(tr->grid->dp_comm, "measuring the dp all-reduce");
        double t0 = now_sec();
        comm_allreduce_sum(tr->model.grads, tr->model.P.total, tr->grid->dp_group, COMM_OTHER);
        double dt = now_sec() - t0;
        if (dt < best) best = dt;
    }
    tr->ops->zero(tr->model.grads, tr->model.P.total);
    return best * 1e3;
}

/* metrics.jsonl in the run directory: one file holds the whole history of a run, so it is only
 * ever appended to. A run that continues from step s (a resume; or 0 for a fresh run that may
 * replace an older one's files) first marks the records an earlier attempt wrote after step s
 * as superseded, then writes a restart record. Only rank 0 writes it; the ranks agree on the
 * outcome. */
static void open_metrics(trainer_t *tr, bool resumed) {
    const config_t *cfg = tr->cfg;
    char path[RUNDIR_PATH_MAX + 32], msg[RUNDIR_PATH_MAX + 200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", tr->rd.dir);
    const bool writes = is_root(tr) && cfg->jsonl && cfg->choice.mode == CFG_MODE_TRAIN;
    const char *mine = NULL;
    struct stat st;
    const bool existed = writes && stat(path, &st) == 0 && st.st_size > 0;
    long marked = existed ? metrics_supersede_after(path, (long long)tr->prog.step) : 0;
    if (marked < 0) {
        snprintf(msg, sizeof msg, "cannot mark the superseded records of %s: %s", path, strerror(errno));
        mine = msg;
    } else if (metrics_open(&tr->metrics, path, writes) != 0) {
        snprintf(msg, sizeof msg, "cannot open the metrics file %s: %s", path, strerror(errno));
        mine = msg;
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "opening metrics.jsonl", mine);
    if (!existed) return;
    const char *restarts = getenv("SLURM_RESTART_COUNT"), *job = getenv("SLURM_JOB_ID");
    metrics_write(&tr->metrics, "\"event\":\"restart\",\"step\":%lld,\"resumed\":%s,"
                  "\"superseded_records\":%ld,\"slurm_job_id\":\"%s\",\"slurm_restart_count\":%d",
                  (long long)tr->prog.step, resumed ? "true" : "false", marked, job ? job : "",
                  restarts ? atoi(restarts) : 0);
    if (marked > 0)
        printf("metrics: %ld records of %s written after step %lld by an earlier attempt are "
               "marked \"superseded\":true (kept); every step appears once in the others\n",
               marked, path, (long long)tr->prog.step);
}

/* <run dir>/tb/: the metrics records as TensorBoard events (io/metrics mirrors every record it
 * writes). The directory is checked like the run directory; rank 0 writes the one event file. */
static void open_tensorboard(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    if (!cfg->tensorboard || cfg->choice.mode != CFG_MODE_TRAIN) return;
    char dir[RUNDIR_PATH_MAX + 8], msg[RUNDIR_PATH_MAX + sizeof tr->metrics.tb.path + 200];
    snprintf(dir, sizeof dir, "%s/tb", tr->rd.dir);
    rundir_prepare_dir(dir, "TensorBoard directory (&log tensorboard)", cfg);
    const char *mine = NULL;
    if (is_root(tr) && metrics_open_tensorboard(&tr->metrics, dir) != 0) {
        snprintf(msg, sizeof msg, "%s: cannot create the TensorBoard event file %s (&log "
                 "tensorboard): %s", cfg->source_path, tr->metrics.tb.path, strerror(errno));
        mine = msg;
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "opening the TensorBoard events", mine);
}

/* The run's provenance (train/runinfo): on every rank for the checkpoints, and, in training,
 * as run.json and as this start's first metrics record. "step" comes last in that record:
 * line-oriented readers look for step records as '"step":N,'. */
static void record_provenance(trainer_t *tr) {
    runinfo_collect(&tr->provenance, tr->cfg, tr->grid, tr->rd.dir, tr->rd.run_id, tr->prog.step,
                    tr->config_text);
    if (tr->cfg->choice.mode != CFG_MODE_TRAIN) return;
    runinfo_write_json(&tr->provenance, tr->rd.dir);
    char *members = provenance_json_members(&tr->provenance, ",");
    metrics_write(&tr->metrics, "\"kind\":\"provenance\",%s,\"step\":%lld", members,
                  (long long)tr->prog.step);
    free(members);
}

/* &run init_from: weights of any grid (or a checkpoint's model part), checked against the
 * namelist's model, at the namelist's seq_len (train/init_from.h), read like a resume: each rank
 * its ZeRO partition (all of the stage without ZeRO) through the staging buffer, straight to
 * where the weights live; any problem is one message and exit 2. */
static void load_init_weights(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    flat_io_t f;
    ckpt_io_t io;
    float *staging = ckpt_flat_load_begin(&tr->ckpt, &f, &io);
    char msg[COMM_MSG_MAX + 64];
    watchdog_enter_for("weights read", "all ranks", cfg->io_timeout_s);
    int rc = init_from_load(cfg, MPI_COMM_WORLD, tr->grid->tp_comm, tr->grid->ep_comm, &tr->model.P.ckpt,
                            tr->model.P.total, &io, msg, sizeof msg);
    watchdog_leave();
    xfree(staging);
    if (rc != 0) fatal_user("&run init_from: %s", msg);
    flat_load_finish(&f);
}

/* Why the schedule cannot run the micro-batches of some curriculum stage (each stage's
 * accumulation gets its own action lists), or NULL. */
static const char *schedule_error(const trainer_t *tr, pipe_schedule_t sched, int v, char *why,
                                  size_t len) {
    const curriculum_t *c = &tr->curric;
    for (int s = 0; s < c->n_stages; s++) {
        char one[360];
        if (!sched_constraint_error(sched, tr->grid->pp, v, c->stage[s].accum, tr->cfg->n_layer,
                                    one, sizeof one))
            continue;
        if (c->n_stages == 1) snprintf(why, len, "%s", one);
        else snprintf(why, len, "&stage %d of %d: %s", s + 1, c->n_stages, one);
        return why;
    }
    return NULL;
}

/* The trainer's own fields, the effective configuration (defaults filled in: what checkpoints
 * record) and the view checkpointing has of the trainer (pointers into it). */
static void setup_context(trainer_t *tr, const config_t *cfg, const grid_t *grid,
                          const ops_t *ops, const char *cores) {
    memset(tr, 0, sizeof *tr);
    snprintf(tr->report.cores, sizeof tr->report.cores, "%s", cores ? cores : "its cores");
    tr->cfg = cfg;
    tr->grid = grid;
    tr->ops = ops;
    ASSERT(cfg->device_memory == (ops->memory_capacity() > 0)); /* the planner plans that memory */
    tr->io_hints = MPI_INFO_NULL;
    tr->prog.last_ckpt_step = -1;
    int n = config_to_namelist(cfg, NULL, 0);
    tr->config_text = xmalloc((size_t)n + 1);
    config_to_namelist(cfg, tr->config_text, n + 1);
    tr->ckpt = (ckpt_ctx_t){.cfg = cfg, .grid = grid, .ops = ops, .model = &tr->model,
                            .opt = &tr->opt, .zero = &tr->zero, .scaler = &tr->scaler,
                            .curric = &tr->curric, .rd = &tr->rd, .metrics = &tr->metrics,
                            .deadline = &tr->deadline, .provenance = &tr->provenance,
                            .config_text = tr->config_text, .io_hints = &tr->io_hints,
                            .global_batch = &tr->shape.global_batch, .prog = &tr->prog};
}

/* The memory a rank may use: memory_limit_gb, else the node's memory / its ranks, or a
 * device's own capacity; the host's share beside a device is held to the node's memory / its
 * ranks. The smallest over the nodes, so every rank plans alike. */
static void agree_memory_limits(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const int per_node = comm_node_size(MPI_COMM_WORLD);
    tr->host_limit = plan_node_share_bytes(per_node);
    tr->memory_limit = cfg->device_memory && cfg->memory_limit_gb <= 0
                           ? (double)tr->ops->memory_capacity() : plan_limit_bytes(cfg, per_node);
    double limits[2] = {tr->memory_limit, tr->host_limit};
    comm_allreduce(limits, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, "checking the memory plan");
    tr->memory_limit = limits[0], tr->host_limit = limits[1];
}

/* The ZeRO partitions of the flat buffer the model will have, before the model: ZeRO-3 gives
 * the model its weight provider. With expert parallelism ZeRO shards over the experts'
 * replicas (edp): an element's partition owner then holds the same experts (the dense
 * tensors, the same on every ep rank, are sharded edp ways). */
static void create_zero(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const grid_t *grid = tr->grid;
    params_t P;
    flat_rank_registry(&P, cfg, grid);
    const bool ep = grid->ep > 1;
    zero_create(&tr->zero, cfg->zero_stage, ep ? grid->edp : grid->dp, ep ? grid->rank_edp : grid->rank_dp,
                ep ? grid->edp_group : grid->dp_group, P.total, tr->ops);
    zero_set_experts(&tr->zero, grid->ep, grid->rank_ep, grid->ep_group);
    params_destroy(&P);
    if (cfg->zero_stage > 0 && tr->zero.dp == 1 && is_root(tr))
        printf("zero: &parallel zero_stage = %d with %s = 1 changes nothing (there is no replica "
               "to shard over)\n", cfg->zero_stage, ep ? "dp / ep" : "dp");
}

/* The model (this rank's shard of its stage), its ZeRO attachment, the pipeline runner and the
 * dp buckets (started by the pipeline's last micro-batch). */
static void create_model(trainer_t *tr, pipe_schedule_t sched, int v) {
    const config_t *cfg = tr->cfg;
    const grid_t *grid = tr->grid;
    const ops_t *ops = tr->ops;
    gpt_parallel_t par = {grid->tp, grid->rank_tp, grid->pp, grid->rank_pp, grid->tp_group,
                          pipe_slots_needed(sched, grid->pp, v, grid->rank_pp, tr->shape.accum), v,
                          sched == SCHED_ZBH1, grid->ep, grid->rank_ep, grid->ep_group,
                          grid->cp, grid->rank_cp, grid->cp_group};
    /* ZeRO >= 2 stages the gradients per micro-batch where every micro-batch's backward ends
     * before the next begins (pp = 1, 1F1B); with pp > 1 they are reduced once per step */
    const bool ep = grid->ep > 1;
    const gpt_grad_provider_t *staging = zero_stage_grads(&tr->zero, grid->pp == 1 && !ep &&
                                                          sched == SCHED_1F1B);
    /* context parallelism: the model sees this rank's T / cp rows of each sequence */
    gpt_create(&tr->model, MODEL_SPEC_OF(cfg), ops, tr->shape.micro_batch, tr->shape.T / grid->cp, &par,
               zero3_provider(&tr->zero),
               staging);
    zero_attach(&tr->zero, &tr->model, cfg->zero3_resident);
    pipe_create(&tr->pipe, &tr->model, grid, tr->shape.accum, sched, v);
    dp_sync_create(&tr->dps, &tr->model, &tr->zero, grid->dp_group, grid->embed_group,
                   grid->ep > 1 ? grid->edp_group : grid->dp_group, grid->dp, cfg->bucket_mb);
    pipe_set_last_micro_hook(&tr->pipe, dp_sync_layer_done, &tr->dps);
}

/* The precision of the weights copy, activations and gradients before reduction; the products'
 * type; the fp16 loss scaler. */
static void set_precision(trainer_t *tr) {
    tr->precision = model_dtype_of(tr->cfg->choice.precision);
    tr->dps.grad_dtype = tr->precision;
    tr->zero.grad_dtype = tr->precision;
    choose_products(tr);
    loss_scaler_init(&tr->scaler, tr->cfg);
}

/* AdamW (its state sharded by ZeRO, on the device or offloaded) and, with ZB-H1, the
 * post-validation copies. */
static void create_optimizer(trainer_t *tr, pipe_schedule_t sched) {
    const ops_t *ops = tr->ops;
    adamw_create(&tr->opt, ops, zero_state_floats(&tr->zero), tr->precision,
                 tr->cfg->choice.offload == CFG_OFFLOAD_OPTIMIZER);
    adamw_attach(&tr->opt, &tr->model, &tr->zero);
    if (tr->opt.off && is_root(tr))
        printf("optimizer: offload = 'optimizer': AdamW moments and fp32 master weights in host "
               "memory (%.1f MiB on rank 0, page-locked by the %s backend), the update on the "
               "CPU %s\n", (double)adamw_offload_bytes(&tr->opt) / 1048576.0,
               ops->name, tr->zero.stage == 0 ? "overlapped with the next forward, unit by unit"
                                              : "before the ZeRO all-gather (not overlapped)");
    tr->post_validate = sched == SCHED_ZBH1;
    if (tr->post_validate)
        postval_create(&tr->pv, ops, zero_state_floats(&tr->zero), tr->grid->world_group);
}

/* The parallel wiring: the schedule checked against every stage, ZeRO, the model, the
 * pipeline, the dp buckets, the precision and the optimizer. */
static void build_parallel(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const pipe_schedule_t sched = sched_kind_of(cfg->choice.schedule);
    const int v = sched == SCHED_INTERLEAVED ? cfg->virtual_stages : 1;
    char why[400];
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "pipeline schedule",
                       schedule_error(tr, sched, v, why, sizeof why));
    create_zero(tr);
    create_model(tr, sched, v);
    set_precision(tr);
    create_optimizer(tr, sched);
}

/* The initial weights: &run init_from, else the seeded grid-invariant init. */
static void init_weights(trainer_t *tr) {
    if (tr->cfg->init_from[0]) {
        load_init_weights(tr);
        return;
    }
    flat_io_t f = {.z = &tr->zero, .opt = &tr->opt, .m = &tr->model, .ops = tr->ops};
    size_t lo, hi, floats;
    flat_load_range(&tr->zero, &lo, &hi);
    float *staging = ckpt_staging_alloc(&tr->ckpt, hi - lo, &floats);
    flat_init_params(&f, (uint64_t)tr->cfg->seed, staging, floats);
    xfree(staging);
}

/* The resumed state (if any) applied, the detectors started, then what the run writes: the
 * metrics, TensorBoard, the provenance, and (training) the deadline. */
static void start_run(trainer_t *tr, ckpt_resumed_t *resumed) {
    const config_t *cfg = tr->cfg;
    const bool was_resumed = resumed->found;
    ckpt_resume_apply(&tr->ckpt, resumed);
    anom_handler_init(&tr->anomaly, cfg); /* afresh: a resumed run warms up again */
    open_metrics(tr, was_resumed);
    if (was_resumed) /* what the load of the checkpoint cost in time and memory */
        metrics_write(&tr->metrics, "\"step\":%lld,\"resume_load_s\":%.4f,\"load_peak_rss_mib\":%.1f",
                      (long long)tr->prog.step, resumed->seconds, resumed->peak_rss_mib);
    open_tensorboard(tr);
    record_provenance(tr);
    if (cfg->choice.mode == CFG_MODE_TRAIN)
        deadline_init(&tr->deadline, cfg, ckpt_file_bytes(&tr->model.P.ckpt, true), MPI_COMM_WORLD);
}

/* The rates MFU and the GEMM utilisation are measured against. &log peak_flops set: both
 * figures are it, and nothing is measured (its buffers would be the largest workspace of a
 * small run). */
static void measure_rates(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const ops_t *ops = tr->ops;
    report_t *rp = &tr->report;
    rp->dp_blocking_ms = measure_dp_allreduce_ms(tr);
    rp->gemm_flops = cfg->peak_flops > 0 ? cfg->peak_flops
                     : ops_best_gemm_rate(ops, tr->shape.micro_batch * tr->shape.T, cfg->d_model, cfg->d_ff);
    rp->peak_flops = cfg->peak_flops > 0 ? cfg->peak_flops
                     : ops->hardware_peak(tr->products, rp->peak_how, sizeof rp->peak_how);
    if (cfg->peak_flops > 0) snprintf(rp->peak_how, sizeof rp->peak_how, "&log peak_flops");
    else if (rp->peak_flops < rp->gemm_flops) { /* a loaded core can under-measure: MFU <= 100% */
        rp->peak_flops = rp->gemm_flops;
        snprintf(rp->peak_how, sizeof rp->peak_how, "the GEMM rate: the FMA loop measured less");
    }
}

/* What reporting, validation and anomaly handling see of the trainer (pointers into it), once
 * the model, the optimizer, the memory plan and the batch buffers exist. */
static void setup_views(trainer_t *tr) {
    tr->report.ctx = (report_ctx_t){.cfg = tr->cfg, .grid = tr->grid, .ops = tr->ops,
                                    .model = &tr->model, .shape = &tr->shape, .prog = &tr->prog,
                                    .plan = &tr->plan, .memory_limit = tr->memory_limit,
                                    .host_limit = tr->host_limit, .precision = tr->precision,
                                    .products = tr->products, .scaler = &tr->scaler,
                                    .opt = &tr->opt, .pipe = &tr->pipe, .dps = &tr->dps,
                                    .curric = &tr->curric, .prof = &tr->prof,
                                    .moelog = &tr->moelog, .provenance = &tr->provenance,
                                    .metrics = &tr->metrics};
    tr->val = (val_ctx_t){.grid = tr->grid, .pipe = &tr->pipe, .sampler = &tr->val_sampler,
                          .shape = &tr->shape, .inputs = tr->inputs, .targets = tr->targets,
                          .val_batches = tr->cfg->val_batches,
                          .source_path = tr->cfg->source_path, .step = &tr->prog.step,
                          .metrics = &tr->metrics};
    tr->anomaly.ctx = (anom_ctx_t){.cfg = tr->cfg, .grid = tr->grid, .ckpt = &tr->ckpt,
                                   .prog = &tr->prog, .curric = &tr->curric,
                                   .metrics = &tr->metrics, .val = &tr->val};
}

void trainer_setup(trainer_t *tr, const config_t *cfg, const grid_t *grid, const ops_t *ops,
                   const char *cores) {
    setup_context(tr, cfg, grid, ops, cores);
    rundir_open(&tr->rd, cfg);
    rundir_check_fresh(&tr->rd, cfg);
    agree_memory_limits(tr);
    ckpt_staging_setup(&tr->ckpt);
    ckpt_resumed_t resumed;
    ckpt_resume_find(&tr->ckpt, &resumed);
    batch_geometry(tr, resumed.found ? resumed.state.global_batch : 0);
    tr->shape.accum = curric_plan(&tr->curric, cfg, tr->shape.micro_batch, tr->shape.global_batch);
    check_fits(tr);
    setup_data(tr);
    build_parallel(tr);
    init_weights(tr);
    start_run(tr, &resumed);
    const size_t batch_tokens = (size_t)tr->shape.accum * tr->shape.micro_batch * tr->shape.T;
    tr->inputs = xmalloc(sizeof(int) * batch_tokens);
    tr->targets = xmalloc(sizeof(int) * batch_tokens);
    setup_views(tr);
    measure_rates(tr);
    if (cfg->choice.mode == CFG_MODE_TRAIN) profiling_setup(&tr->prof, cfg, grid, tr->shape.accum);
    if (cfg->choice.mode == CFG_MODE_TRAIN) report_stragglers_setup(&tr->report);
    if (cfg->choice.mode == CFG_MODE_TRAIN && tr->has_train)
        trainer_begin_stages(tr); /* the step's stage */
    if (is_root(tr)) report_print_plan(&tr->report);
    tr->ckpt.async = ckpt_async_create(&tr->ckpt); /* its snapshot: training's memory */
    ckpt_peak_reset(); /* training's peak memory counts from here (setup's buffers do not) */
}

void trainer_destroy(trainer_t *tr) {
    ckpt_async_destroy(&tr->ckpt); /* a write in flight finishes and is reported */
    profiling_destroy(&tr->prof);
    moe_log_free(&tr->moelog);
    report_destroy(&tr->report);
    metrics_close(&tr->metrics);
    dp_sync_destroy(&tr->dps);
    zero_destroy(&tr->zero);
    pipe_destroy(&tr->pipe);
    postval_destroy(&tr->pv, tr->ops);
    adamw_destroy(&tr->opt);
    gpt_destroy(&tr->model);
    curric_destroy(&tr->curric);
    if (tr->has_val) {
        sampler_destroy(&tr->val_sampler);
        shard_set_close(&tr->val_set);
    }
    xfree(tr->inputs);
    xfree(tr->targets);
    xfree(tr->config_text);
    provenance_destroy(&tr->provenance);
    rundir_close(&tr->rd);
}
