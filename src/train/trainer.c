/* trainer.c — setup, the training step, validation and the run loop (see trainer.h). */
#include "train/trainer.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <omp.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/fileio.h"
#include "core/prof.h"
#include "core/version.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "parallel/comm_host.h"
#include "parallel/watchdog.h"
#include "train/checkpointing.h"
#include "train/lr.h"
#include "train/planner.h"
#include "train/runinfo.h"


static int is_root(const trainer_t *tr) { return tr->grid->world_rank == 0; }

/* ---------------------------------------------------------------- setup */

/* A data error that only some ranks of `comm` saw (each checks its own part or windows): all
 * learn of it, the lowest such rank's message is printed once with its rank and host (its part
 * comes first, so it names the first bad token), and every rank exits 2. */
static void agree_on_data_error(const config_t *cfg, MPI_Comm comm, int failed, const char *err) {
    char msg[1400];
    if (failed) snprintf(msg, sizeof msg, "%s: &data %s", cfg->source_path, err);
    comm_agree_or_exit(comm, LLMT_EXIT_USER, "checking the data", failed ? msg : NULL);
}

/* Open a set of shards, check every token id (each rank scans 1/world of the set, so the ranks
 * read it once together; sets above SHARD_SCAN_MAX_BYTES_PER_RANK per rank rely on the check of
 * every window in sampler_fill) and create its sampler. Every rank opens the files itself, and a
 * file may be visible on some nodes only (node-local storage, a missing mount): each problem is
 * agreed and reported once. */
static void open_data(const trainer_t *tr, const char *patterns, const char *key,
                      shard_set_t *set, sampler_t *s, bool shuffle) {
    const config_t *cfg = tr->cfg;
    char err[1024] = "";
    int bad = shard_set_open(set, patterns, key, cfg->data_format, err, sizeof err) != 0;
    agree_on_data_error(cfg, MPI_COMM_WORLD, bad, err);
    const double per_rank = 2.0 * (double)set->n_tokens / tr->grid->world_size;
    if (per_rank <= (double)SHARD_SCAN_MAX_BYTES_PER_RANK) {
        bad = shard_set_check_tokens(set, cfg->vocab_size, tr->grid->world_rank,
                                     tr->grid->world_size, err, sizeof err) != 0;
        agree_on_data_error(cfg, MPI_COMM_WORLD, bad, err);
    } else if (is_root(tr)) {
        printf("data: %s holds %.1f GiB of tokens, %.1f GiB per rank: no startup scan above %.0f "
               "GiB per rank; every window is checked against vocab_size as it is read\n", key,
               2.0 * (double)set->n_tokens / (1 << 30), per_rank / (1 << 30),
               (double)SHARD_SCAN_MAX_BYTES_PER_RANK / (1 << 30));
    }
    bad = sampler_create(s, set, cfg->seq_len, cfg->vocab_size, shuffle, (uint64_t)cfg->seed, err,
                         sizeof err) != 0;
    agree_on_data_error(cfg, MPI_COMM_WORLD, bad, err);
}

/* FLOP/s of one matrix product out[N, OC] = in[N, C] w[OC, C]^T: one warm-up, best of 3. */
static double time_matmul(const ops_t *ops, int N, int C, int OC) {
    float *a = ops->alloc((size_t)N * C * sizeof(float), MEM_WORKSPACE);
    float *b = ops->alloc((size_t)OC * C * sizeof(float), MEM_WORKSPACE);
    float *c = ops->alloc((size_t)N * OC * sizeof(float), MEM_WORKSPACE);
    ops->zero(a, (size_t)N * C);
    ops->zero(b, (size_t)OC * C);
    double best = 1e30;
    for (int i = 0; i < 4; i++) {
        double t0 = now_sec();
        ops->matmul_forward(c, a, b, NULL, N, C, OC);
        double dt = now_sec() - t0;
        if (i > 0 && dt < best) best = dt;
    }
    ops->free(a);
    ops->free(b);
    ops->free(c);
    return 2.0 * N * (double)C * OC / best;
}

/* Achievable FLOP/s of this backend's matrix products (for MFU when &log peak_flops is 0): the
 * better of a square 1024^3 product and the model's own MLP product, so MFU stays a fraction of
 * what the hardware and BLAS really deliver here. */
static double measure_peak_flops(const ops_t *ops, int rows, int C, int F) {
    double square = time_matmul(ops, 1024, 1024, 1024);
    double mlp = time_matmul(ops, rows, C, F);
    return square > mlp ? square : mlp;
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

/* Where the limit comes from, for the messages: "&run memory_limit_gb", or what it is unset. */
static const char *limit_source(const config_t *cfg) {
    if (cfg->memory_limit_gb > 0) return "&run memory_limit_gb";
    return cfg->device_memory ? "&run memory_limit_gb unset: the device's memory: its free memory at startup less a reserve"
                              : "&run memory_limit_gb unset: this node's memory shared by its ranks";
}

/* The global batch is the namelist's, or, when the namelist leaves it unset, that of the
 * checkpoint the run resumes from (the file actually used). */
static void batch_geometry(trainer_t *tr, int64_t resumed) {
    const config_t *cfg = tr->cfg;
    tr->T = cfg->seq_len;
    /* with stages the file holds its stage's batch, not the run's */
    if (!cfg->global_batch_derived || cfg->n_stages > 0 || resumed > INT32_MAX) resumed = 0;
    tr->global_batch = resumed > 0 ? (int)resumed : cfg->global_batch;
    tr->micro_batch = cfg->micro_batch;
    if (tr->micro_batch == 0) { /* the largest that fits, chosen alike on every rank */
        config_t c = *cfg;
        c.global_batch = tr->global_batch;
        tr->micro_batch = plan_auto_micro_batch(&c, tr->memory_limit);
        if (tr->micro_batch == 0) {
            char hint[300] = "", limit[32];
            bool fits = plan_suggest(&c, tr->memory_limit, hint, sizeof hint);
            format_bytes(tr->memory_limit, limit);
            fatal_user("%s: &train micro_batch = 0: not even micro_batch = 1 fits the %s a rank may "
                       "use (%s); %s%s", cfg->source_path, limit, limit_source(cfg),
                       fits ? "the planner suggests " : "more ranks (tp, pp), a smaller model or a "
                       "larger limit are needed", hint);
        }
        if (is_root(tr))
            printf("batch: micro_batch = 0: the planner chose micro_batch %d (the largest that fits "
                   "%.2f GiB per rank)\n", tr->micro_batch, tr->memory_limit / 1073741824.0);
    }
    tr->accum = tr->global_batch / (tr->micro_batch * cfg->dp);
    if (tr->accum * tr->micro_batch * cfg->dp != tr->global_batch || tr->accum < 1)
        fatal_user("%s: &train global_batch = %d must be a multiple of micro_batch * dp = %d * %d",
                   cfg->source_path, tr->global_batch, tr->micro_batch, cfg->dp);
}

/* How the weights copy is kept (gpt.h wtype), and why, for the startup summary. */
static void print_weights_storage(const trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const gpt_t *m = &tr->model;
    const dtype_t p = tr->precision;
    if (m->wtype != DT_FP32) {
        printf("weights copy: %s storage, %zu bytes per element (&train weights_storage = '%s'); "
               "norms and biases also kept as fp32 values; products read the matrices %s\n",
               dtype_name(m->wtype), dtype_bytes(m->wtype), cfg->weights_storage,
               gpt_product_type(MODEL_SPEC_OF(cfg), m->ops) == m->wtype ? "as they are"
                                                         : "widened to fp32 one at a time");
        return;
    }
    const char *why = !strcmp(cfg->weights_storage, "fp32")
                          ? "&train weights_storage = 'fp32'"
                          : "weights_storage = 'auto' and the products are not of this type here";
    printf("weights copy: %s values in fp32 arrays (%s)\n", dtype_name(p), why);
}

/* How the activations saved for backward are kept (gpt.h atype), and why. */
static void print_activations_storage(const trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const gpt_t *m = &tr->model;
    if (m->atype != DT_FP32) {
        printf("activations: %s storage, %zu bytes per element, for the tensors each block saves "
               "for its backward (&train activations_storage = '%s'; one block's fp32 working "
               "set, %.1f MiB, shared by all); the residual stream, norm statistics and "
               "attention log-sum-exp stay fp32\n", dtype_name(m->atype), dtype_bytes(m->atype),
               cfg->activations_storage, (double)m->shared_bytes / 1048576.0);
        return;
    }
    printf("activations: %s values in fp32 arrays (%s)\n", dtype_name(tr->precision),
           !strcmp(cfg->activations_storage, "fp32")
               ? "&train activations_storage = 'fp32'"
               : "activations_storage = 'auto' keeps 16-bit storage for GPUs: its packing pass "
                 "costs time on a CPU");
}

/* Before anything large is allocated: the planner's prediction for this rank against the limit
 * (the ranks agree; the message names the rank, its categories and the planner's suggestion). */
static void check_fits(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    config_t c = *cfg;
    c.global_batch = tr->global_batch;
    plan_rank(&c, tr->grid->rank_tp, tr->grid->rank_pp, tr->micro_batch, tr->accum, &tr->plan);
    char msg[1400], hint[300] = "", part[MEM_CATEGORIES][32], total[32], limit[32];
    const char *mine = NULL;
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
                 part[MEM_WORKSPACE], limit, limit_source(cfg),
                 fits ? "the planner suggests " : "no zero_stage x recompute x micro_batch fits: more "
                 "ranks (tp, pp), a smaller model or a larger limit are needed", hint, cfg->source_path);
        mine = msg;
    } else if (tr->plan.host_total > tr->host_limit) { /* beside a device: the host's share */
        format_bytes(tr->plan.host_total, total);
        format_bytes(tr->host_limit, limit);
        snprintf(msg, sizeof msg, "%s: this run needs %s of host memory on this rank beside the "
                 "device's (the batches, the transient copies of setup and checkpoints%s) but this "
                 "node's memory shared by its ranks is %s: fewer ranks per node%s",
                 cfg->source_path, total, strcmp(cfg->offload, "optimizer") ? "" :
                 ", the offloaded optimizer", limit, strcmp(cfg->offload, "optimizer") ? "" :
                 ", or &train offload = 'none'");
        mine = msg;
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "checking the memory plan", mine);
}

static void print_memory_plan(const trainer_t *tr) {
    const double MiB = 1024.0 * 1024.0;
    printf("model: GPT L=%d C=%d heads=%d d_ff=%d vocab=%d (padded %d) seq_len=%d: %.2fM "
           "parameters\n", tr->model.L, tr->model.C, tr->model.NH, tr->model.F, tr->model.V,
           tr->model.Vp, tr->cfg->seq_len, tr->model.P.n_global / 1e6);
    if (tr->model.moe) moe_print_summary(tr->model.moe, &tr->model.P, MODEL_SPEC_OF(tr->cfg));
    printf("batch: global %d sequences = micro_batch %d x accumulation %d x dp %d "
           "(%d tokens per step)\n", tr->global_batch, tr->micro_batch, tr->accum,
           tr->grid->dp, tr->global_batch * tr->T);
    printf("memory plan (rank 0, planner):");
    for (int c = 0; c < MEM_CATEGORIES; c++)
        printf(" %s %.1f%s", mem_category_name((mem_category_t)c), tr->plan.bytes[c] / MiB,
               c + 1 < MEM_CATEGORIES ? "," : "");
    printf(" MiB; total %.1f MiB of %.2f GiB per rank (%s)\n", tr->plan.total / MiB,
           tr->memory_limit / 1073741824.0, limit_source(tr->cfg));
    if (tr->cfg->device_memory)
        printf("memory plan, host memory beside the device's (rank 0): %.1f MiB of %.2f GiB\n",
               tr->plan.host_total / MiB, tr->host_limit / 1073741824.0);
    printf("activations (rank 0): %d slot%s x %.1f MiB + head/scratch %.1f MiB\n",
           tr->model.par.n_slots, tr->model.par.n_slots > 1 ? "s" : "", tr->model.slot_bytes / MiB,
           tr->model.head_bytes / MiB);
    if (tr->grid->pp > 1) {
        int *first = xmalloc(sizeof(int) * ((size_t)tr->grid->pp + 1));
        params_partition_layers(MODEL_SPEC_OF(tr->cfg), tr->grid->pp, first);
        printf("pipeline: schedule %s, %d micro-batches per step, layers per stage:",
               tr->cfg->schedule, tr->accum);
        const int v = tr->model.n_chunks, per = tr->model.chunk_layers;
        for (int s = 0; s < tr->grid->pp; s++) /* interleaved: stage s holds chunks c*pp + s */
            for (int c = 0; c < v; c++)
                if (v > 1) printf("%s[%d,%d)", c ? "+" : " ", (c * tr->grid->pp + s) * per,
                                  (c * tr->grid->pp + s + 1) * per);
                else printf(" [%d,%d)", first[s], first[s + 1]);
        printf(" (embedding on stage 0, head on stage %d)\n", tr->grid->pp - 1);
        xfree(first);
    }
    const dtype_t p = tr->precision;
    printf("compute: %s backend, GEMM %s; %d OpenMP thread%s per rank\n", tr->model.ops->name,
           tr->model.ops->describe(), omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "");
    if (p != DT_FP32) { /* what choose_products chose, and from what */
        const bool can = tr->model.ops->products_native(p) &&
                         !(p == DT_BF16 && (tr->cfg->products_missing & CFG_MISSING_BF16_NATIVE));
        printf("precision: %s products %s%s", dtype_name(p),
               tr->products == DT_FP32 ? "emulated: fp32 products of the rounded values"
               : strcmp(tr->cfg->device, "cuda") ? "native (the CPU's bf16 instructions, fp32 accumulation)"
                                                 : "native (tensor cores, fp32 accumulation)",
               can ? "" : tr->model.ops->products_native(p)
                              ? " (another rank's CPU has no native products of this type: every rank "
                                "emulates, so that all choose alike)"
                              : " (no native products of this type here)");
        if (can && p == DT_BF16 && !strcmp(tr->cfg->bf16_products, "auto"))
            printf(" (&train bf16_products = 'auto': the GEMM library's bf16 kernels are %s than "
                   "its fp32 ones on this CPU)", tr->products == DT_BF16 ? "faster" : "not faster");
        printf("\n");
        print_weights_storage(tr);
        print_activations_storage(tr);
    }
    printf("MFU reference: hardware peak %.1f GFLOP/s per rank (%s); best GEMM %.1f GFLOP/s per "
           "rank (the model's matmul, measured); %.4f GFLOP per token\n", tr->peak_flops / 1e9,
           tr->peak_how, tr->gemm_flops / 1e9, tr->flops_per_token / 1e9);
    printf("MFU and GEMM in the step lines are per rank: each rank's FLOP/s against the rates "
           "above, measured on rank 0's %s with %d OpenMP thread%s\n", tr->cores,
           omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "");
}

static void setup_data(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    fault_point("data", tr->grid->world_rank);
    tr->has_train = cfg->train_files[0] != '\0' || stages_have_data(cfg);
    tr->has_val = cfg->val_files[0] != '\0';
    if (tr->has_train) curric_open_data(tr);
    if (tr->has_val)
        open_data(tr, cfg->val_files, "val_files", &tr->val_set, &tr->val_sampler, false);
    if (strcmp(cfg->mode, "eval") == 0 && !tr->has_val)
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
    const bool writes = is_root(tr) && cfg->jsonl && strcmp(cfg->mode, "train") == 0;
    const char *mine = NULL;
    struct stat st;
    const bool existed = writes && stat(path, &st) == 0 && st.st_size > 0;
    long marked = existed ? metrics_supersede_after(path, (long long)tr->step) : 0;
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
                  (long long)tr->step, resumed ? "true" : "false", marked, job ? job : "",
                  restarts ? atoi(restarts) : 0);
    if (marked > 0)
        printf("metrics: %ld records of %s written after step %lld by an earlier attempt are "
               "marked \"superseded\":true (kept); every step appears once in the others\n",
               marked, path, (long long)tr->step);
}

/* <run dir>/tb/: the metrics records as TensorBoard events (io/metrics mirrors every record it
 * writes). The directory is checked like the run directory; rank 0 writes the one event file. */
static void open_tensorboard(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    if (!cfg->tensorboard || strcmp(cfg->mode, "train") != 0) return;
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
    runinfo_collect(&tr->provenance, tr->cfg, tr->grid, tr->rd.dir, tr->rd.run_id, tr->step,
                    tr->config_text);
    if (strcmp(tr->cfg->mode, "train") != 0) return;
    runinfo_write_json(&tr->provenance, tr->rd.dir);
    char *members = provenance_json_members(&tr->provenance, ",");
    metrics_write(&tr->metrics, "\"kind\":\"provenance\",%s,\"step\":%lld", members,
                  (long long)tr->step);
    free(members);
}

void trainer_set_params_from_host(trainer_t *tr, const float *host) {
    const zero_t *z = &tr->zero;
    if (tr->model.wtype != DT_FP32) { /* 16-bit storage: the master from the host, the copy
                                        * rounded from it */
        adamw_take_host_params(&tr->opt, &tr->model, &tr->zero, host);
        return;
    }
    if (z->stage >= 3)
        tr->ops->to_device(z->param_shard, host + z->lo, (z->hi - z->lo) * sizeof(float));
    else
        tr->ops->to_device(tr->model.params, host, tr->model.P.total * sizeof(float));
    zero3_invalidate(&tr->zero);
    adamw_take_params(&tr->opt, &tr->model, &tr->zero); /* bf16/fp16: master, rounded copy */
}

/* &run init_from: weights of any grid (or a checkpoint's model part), checked against the
 * namelist's model; any problem is one message and exit 2. */
static void load_init_weights(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    float *host = xcalloc(tr->model.P.total, sizeof(float));
    ckpt_meta_t want = {0, cfg->seed, cfg->vocab_size, config_padded_vocab(cfg), cfg->n_layer,
                        cfg->n_head, cfg->d_model, cfg->d_ff, cfg->seq_len, NULL, "", NULL};
    char msg[COMM_MSG_MAX + 64];
    watchdog_enter_for("weights read", "all ranks", cfg->io_timeout_s);
    int rc = ckpt_load(cfg->init_from, MPI_COMM_WORLD, tr->grid->tp_comm, tr->grid->ep_comm, &tr->model.P.ckpt, host,
                       NULL, NULL, NULL, &want, NULL, msg, sizeof msg);
    watchdog_leave();
    if (rc != 0) {
        xfree(host);
        fatal_user("&run init_from: %s", msg);
    }
    trainer_set_params_from_host(tr, host);
    xfree(host);
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

void trainer_rank_registry(params_t *P, const config_t *cfg, const grid_t *grid) {
    const int v = pipe_schedule_from_name(cfg->schedule) == SCHED_INTERLEAVED ? cfg->virtual_stages : 1;
    params_create_experts(P, MODEL_SPEC_OF(cfg), grid->tp, grid->rank_tp, grid->pp, grid->rank_pp, v, grid->ep,
                          grid->rank_ep);
}

void trainer_setup(trainer_t *tr, const config_t *cfg, const grid_t *grid, const ops_t *ops,
                   const char *cores) {
    memset(tr, 0, sizeof *tr);
    snprintf(tr->cores, sizeof tr->cores, "%s", cores ? cores : "its cores");
    tr->cfg = cfg;
    tr->grid = grid;
    tr->ops = ops;
    ASSERT(cfg->device_memory == (ops->memory_capacity() > 0)); /* the planner plans that memory */
    tr->io_hints = MPI_INFO_NULL;
    tr->last_ckpt_step = -1;
    /* The effective configuration (defaults filled in) is what checkpoints record. */
    int n = config_to_namelist(cfg, NULL, 0);
    tr->config_text = xmalloc((size_t)n + 1);
    config_to_namelist(cfg, tr->config_text, n + 1);
    rundir_open(&tr->rd, cfg);
    rundir_check_fresh(&tr->rd, cfg);
    /* the memory a rank may use: the smallest over the nodes, so every rank plans alike */
    /* memory_limit_gb, else the node's memory / its ranks, or a device's own capacity; the host's
     * share beside a device is held to the node's memory / its ranks */
    const int per_node = comm_node_size(MPI_COMM_WORLD);
    tr->host_limit = plan_node_share_bytes(per_node);
    tr->memory_limit = cfg->device_memory && cfg->memory_limit_gb <= 0
                           ? (double)ops->memory_capacity() : plan_limit_bytes(cfg, per_node);
    double limits[2] = {tr->memory_limit, tr->host_limit};
    comm_allreduce(limits, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, "checking the memory plan");
    tr->memory_limit = limits[0], tr->host_limit = limits[1];
    ckpt_resumed_t resumed;
    ckpt_resume_find(tr, &resumed);
    batch_geometry(tr, resumed.found ? resumed.state.global_batch : 0);
    curric_plan(tr);
    check_fits(tr);
    setup_data(tr);
    const pipe_schedule_t sched = pipe_schedule_from_name(cfg->schedule);
    const int v = sched == SCHED_INTERLEAVED ? cfg->virtual_stages : 1;
    char why[400];
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "pipeline schedule",
                       schedule_error(tr, sched, v, why, sizeof why));
    gpt_parallel_t par = {grid->tp, grid->rank_tp, grid->pp, grid->rank_pp, grid->tp_group,
                          pipe_slots_needed(sched, grid->pp, v, grid->rank_pp, tr->accum), v,
                          sched == SCHED_ZBH1, grid->ep, grid->rank_ep, grid->ep_group};
    /* the ZeRO partitions of the flat buffer the model will have, before the model: ZeRO-3
     * gives the model its weight provider */
    params_t P;
    trainer_rank_registry(&P, cfg, grid);
    /* with expert parallelism ZeRO shards over the experts' replicas (edp): an element's
     * partition owner then holds the same experts (the dense tensors, the same on every ep
     * rank, are sharded edp ways) */
    const bool ep = grid->ep > 1;
    zero_create(&tr->zero, cfg->zero_stage, ep ? grid->edp : grid->dp, ep ? grid->rank_edp : grid->rank_dp,
                ep ? grid->edp_group : grid->dp_group, P.total, ops);
    tr->zero.ep = grid->ep;
    tr->zero.rank_ep = grid->rank_ep;
    tr->zero.ep_group = grid->ep_group;
    params_destroy(&P);
    if (cfg->zero_stage > 0 && tr->zero.dp == 1 && is_root(tr))
        printf("zero: &parallel zero_stage = %d with %s = 1 changes nothing (there is no replica "
               "to shard over)\n", cfg->zero_stage, ep ? "dp / ep" : "dp");
    /* ZeRO >= 2 stages the gradients per micro-batch where every micro-batch's backward ends
     * before the next begins (pp = 1, 1F1B); with pp > 1 they are reduced once per step */
    const gpt_grad_provider_t *staging = zero_stage_grads(&tr->zero, grid->pp == 1 && !ep &&
                                                          sched == SCHED_1F1B);
    gpt_create(&tr->model, MODEL_SPEC_OF(cfg), ops, tr->micro_batch, tr->T, &par, zero3_provider(&tr->zero),
               staging);
    zero_attach(&tr->zero, &tr->model, cfg->zero3_resident);
    pipe_create(&tr->pipe, &tr->model, grid, tr->accum, sched, v);
    dp_sync_create(&tr->dps, &tr->model, &tr->zero, grid->dp_group, grid->embed_group,
                   grid->ep > 1 ? grid->edp_group : grid->dp_group, grid->dp, cfg->bucket_mb);
    tr->pipe.last_micro_hook = dp_sync_layer_done;
    tr->pipe.hook_ctx = &tr->dps;
    tr->precision = dtype_from_name(cfg->precision);
    tr->dps.grad_dtype = tr->precision;
    tr->zero.grad_dtype = tr->precision;
    choose_products(tr);
    loss_scaler_init(&tr->scaler, cfg);
    adamw_create(&tr->opt, ops, zero_state_floats(&tr->zero), tr->precision,
                 strcmp(cfg->offload, "optimizer") == 0);
    adamw_attach(&tr->opt, &tr->model, &tr->zero);
    if (tr->opt.off && is_root(tr))
        printf("optimizer: offload = 'optimizer': AdamW moments and fp32 master weights in host "
               "memory (%.1f MiB on rank 0, page-locked by the %s backend), the update on the "
               "CPU %s\n", (double)adamw_offload_bytes(&tr->opt) / 1048576.0,
               ops->name, tr->zero.stage == 0 ? "overlapped with the next forward, unit by unit"
                                              : "before the ZeRO all-gather (not overlapped)");
    tr->post_validate = sched == SCHED_ZBH1;
    if (tr->post_validate)
        postval_create(&tr->pv, ops, zero_state_floats(&tr->zero), grid->world_group);
    if (cfg->init_from[0]) {
        load_init_weights(tr);
    } else {
        float *host = xcalloc(tr->model.P.total, sizeof(float));
        params_init(&tr->model.P, host, (uint64_t)cfg->seed);
        trainer_set_params_from_host(tr, host);
        xfree(host);
    }
    const bool was_resumed = resumed.found;
    ckpt_resume_apply(tr, &resumed);
    /* the detectors start afresh (their state is not in checkpoints: a resumed run warms up
     * again), and that is also the state a rollback to the resumed checkpoint restores */
    const anom_config_t detectors = anom_config_from(cfg);
    anom_init(&tr->anom, &detectors);
    tr->anom_at_ckpt = tr->anom;
    open_metrics(tr, was_resumed);
    open_tensorboard(tr);
    record_provenance(tr);
    if (strcmp(cfg->mode, "train") == 0)
        deadline_init(&tr->deadline, cfg, ckpt_file_bytes(&tr->model.P.ckpt, true), MPI_COMM_WORLD);
    tr->inputs = xmalloc(sizeof(int) * (size_t)tr->accum * tr->micro_batch * tr->T);
    tr->targets = xmalloc(sizeof(int) * (size_t)tr->accum * tr->micro_batch * tr->T);
    tr->flops_per_token = gpt_flops_per_token(&tr->model, tr->T);
    tr->dp_blocking_ms = measure_dp_allreduce_ms(tr);
    /* &log peak_flops set: both figures against it, and no measurement (its buffers would be
     * the largest workspace of a small run) */
    tr->gemm_flops = cfg->peak_flops > 0 ? cfg->peak_flops
                     : measure_peak_flops(ops, tr->micro_batch * tr->T, cfg->d_model, cfg->d_ff);
    tr->peak_flops = cfg->peak_flops > 0 ? cfg->peak_flops
                     : ops->hardware_peak(tr->products, tr->peak_how,
                                         sizeof tr->peak_how);
    if (cfg->peak_flops > 0) snprintf(tr->peak_how, sizeof tr->peak_how, "&log peak_flops");
    else if (tr->peak_flops < tr->gemm_flops) { /* a loaded core can under-measure: MFU <= 100% */
        tr->peak_flops = tr->gemm_flops;
        snprintf(tr->peak_how, sizeof tr->peak_how, "the GEMM rate: the FMA loop measured less");
    }
    if (strcmp(cfg->mode, "train") == 0) profiling_setup(&tr->prof, cfg, grid, tr->accum);
    if (strcmp(cfg->mode, "train") == 0 && tr->has_train) curric_begin(tr); /* the step's stage */
    if (is_root(tr)) print_memory_plan(tr);
}

void trainer_destroy(trainer_t *tr) {
    profiling_destroy(&tr->prof);
    moe_log_free(&tr->moelog);
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

/* ---------------------------------------------------------------- weights */

float *trainer_host_params(const trainer_t *tr) {
    const zero_t *z = &tr->zero;
    if (tr->opt.master) /* bf16/fp16: the fp32 master weights, laid out like the AdamW state */
        return trainer_host_copy(tr, tr->opt.state_ops, tr->opt.master, tr->opt.master,
                                 z->stage >= 1);
    return trainer_host_copy(tr, tr->ops, tr->model.params, z->param_shard, z->stage >= 3);
}

float *trainer_host_copy(const trainer_t *tr, const ops_t *from, const float *full,
                         const float *shard, bool sharded) {
    const zero_t *z = &tr->zero;
    const bool writer = z->rank == 0; /* dp rank 0, or with ep > 1 each ep rank's replica 0 */
    if (!sharded) {
        float *host = xmalloc(z->total * sizeof(float));
        from->to_host(host, full, z->total * sizeof(float));
        return host;
    }
    /* the partitions meet on dp rank 0, which writes; the others keep no full copy */
    const size_t mine = z->hi - z->lo;
    float *part = xmalloc((mine ? mine : 1) * sizeof(float));
    from->to_host(part, shard, mine * sizeof(float));
    float *host = writer ? xmalloc(z->total * sizeof(float)) : NULL;
    zero_gather_to_root(z, part, host);
    xfree(part);
    return host;
}

/* A weights file weights_<tag>.h5 in the run directory (space-checked, watched with the I/O
 * timeout). 0, or -1 after saying why it was not written. */
static int save_weights(trainer_t *tr, const char *tag) {
    if (!tr->cfg->save_weights) return 0;
    char path[RUNDIR_PATH_MAX + 64], msg[COMM_MSG_MAX + 64];
    snprintf(path, sizeof path, "%s/weights_%s.h5", tr->rd.dir, tag);
    const double need = ckpt_file_bytes(&tr->model.P.ckpt, false);
    int rc = -1;
    if (!ckpt_reserve_space(tr->rd.dir, need, msg, sizeof msg)) {
        /* msg says why */
    } else {
        adamw_finish(&tr->opt); /* an offloaded update still in flight: done and uploaded */
        float *host = trainer_host_params(tr);
        ckpt_meta_t meta = {tr->step, tr->cfg->seed, tr->model.V, tr->model.Vp, tr->cfg->n_layer,
                            tr->cfg->n_head, tr->cfg->d_model, tr->cfg->d_ff, tr->cfg->seq_len,
                            tr->config_text, "", &tr->provenance};
        snprintf(meta.run_id, sizeof meta.run_id, "%s", tr->rd.run_id);
        /* One replica writes: dp rank 0 (tp shards are disjoint, so each tp rank writes its own). */
        watchdog_enter_for("weights write", "all ranks", tr->cfg->io_timeout_s);
        prof_begin(PROF_CHECKPOINT, "weights write", -1, -1);
        rc = ckpt_write_weights(path, MPI_COMM_WORLD, &tr->model.P.ckpt, host, &meta,
                                ckpt_owner(tr->grid), msg, sizeof msg);
        prof_end(PROF_CHECKPOINT, 0);
        watchdog_leave();
        xfree(host);
    }
    if (rc == 0) {
        if (is_root(tr)) printf("weights: wrote %s\n", path);
        return 0;
    }
    if (is_root(tr)) fprintf(stderr, "llmtrain: error: weights %s not written: %s\n", path, msg);
    metrics_write(&tr->metrics, "\"step\":%lld,\"weights\":\"%s\",\"failed\":true",
                  (long long)tr->step, tag);
    return -1;
}

/* ---------------------------------------------------------------- one step */

/* Forward + backward over all micro-batches of this rank through the pipeline schedule; the
 * data-parallel buckets start during the last micro-batch's backward and finish here. Returns
 * the sum of the micro-batches' mean losses (last stage; 0 elsewhere). */
static double accumulate_gradients(trainer_t *tr) {
    const int B = tr->micro_batch, T = tr->T;
    const size_t BT = (size_t)B * T;
    /* fp16: the loss gradient is scaled up (the optimizer divides it out again) */
    const float dloss = (float)(tr->scaler.scale / ((double)B * T * tr->accum * tr->grid->dp));
    char err[1024] = "";
    int bad = 0;
    for (int a = 0; a < tr->accum && !bad; a++) {
        prof_begin(PROF_DATA, "data", a, -1);
        /* the global batch [sample_pos, sample_pos + G) cut into dp slices of accum micro-batches */
        bad = curric_fill(tr, a, tr->inputs + a * BT, tr->targets + a * BT, err, sizeof err) != 0;
        prof_end(PROF_DATA, 0);
    }
    agree_on_data_error(tr->cfg, tr->grid->dp_comm, bad, err);
    zero_grads_begin_step(&tr->zero);
    /* dropout, label smoothing and z-loss: this pass only (masks keyed by step and by the
     * sample's index in the step's global batch, where this rank's micro-batch 0 starts at
     * rank_dp * accum * B, as curric_fill cuts it) */
    gpt_train_pass(&tr->model, tr->step, (uint64_t)tr->grid->rank_dp * tr->accum * B);
    gpt_set_loss_weight(&tr->model, dloss); /* MoE: the aux and z losses' weight */
    moe_stats_reset(tr->model.moe);
    double loss_sum = pipe_run(&tr->pipe, tr->inputs, tr->targets, tr->accum, B, T, true, dloss);
    gpt_eval_pass(&tr->model);
    dp_sync_finish(&tr->dps);
    return loss_sum;
}

/* The step's mean loss on every rank: the last stage has it, summed over pp and dp. */
static double global_loss(trainer_t *tr, double loss_sum) {
    comm_allreduce_sum_double(&loss_sum, 1, tr->grid->pp_group, COMM_OTHER);
    comm_allreduce_sum_double(&loss_sum, 1, tr->grid->dp_group, COMM_OTHER);
    return loss_sum / (tr->accum * tr->grid->dp);
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
           tr->sample_pos == (int64_t)tr->cfg->inject_spike_step * tr->global_batch;
}

static void scale_reduced_grads(trainer_t *tr, float s) {
    const zero_t *z = &tr->zero;
    if (z->stage >= 2) tr->ops->scale(z->grad_shard, s, z->hi - z->lo);
    else tr->ops->scale(tr->model.grads, s, tr->model.P.total);
}

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

/* Testing hook (&train dump_grads_step): the step's gradients as the optimizer sees them
 * (micro-batches accumulated through the pipeline schedule, reduced over dp, tied embedding
 * summed; before clipping), in global shapes like a weights file, so a reference can compare
 * them on any grid. */
static void dump_grads(trainer_t *tr) {
    char path[RUNDIR_PATH_MAX + 64], msg[COMM_MSG_MAX + 64];
    snprintf(path, sizeof path, "%s/grads_step%06lld.h5", tr->rd.dir, (long long)tr->step);
    float *host =
        trainer_host_copy(tr, tr->ops, tr->model.grads, tr->zero.grad_shard, tr->zero.stage >= 2);
    ckpt_meta_t meta = {tr->step, tr->cfg->seed, tr->model.V, tr->model.Vp, tr->cfg->n_layer,
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
                "step skipped, scale now %g\n", (long long)tr->step + 1, before, tr->scaler.scale);
    return apply;
}

/* ---------------------------------------------------------------- anomalies */

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
    const char *own = spike ? cfg->on_spike : d == ANOM_DIVERGENCE ? cfg->on_divergence : "";
    *value = own[0] ? own : cfg->on_anomaly;
    return own[0] ? (spike ? "on_spike" : "on_divergence") : "on_anomaly";
}

/* What the detector saw, for messages: "loss 9.1 is 55.2 sigma above ...". */
static void describe(const trainer_t *tr, const anom_event_t *e, char *buf, size_t len) {
    const config_t *cfg = tr->cfg;
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
                 tr->anom.c.window, v->threshold);
        break;
    case ANOM_GRAD_EXPLOSION:
        snprintf(buf, len, "gradient explosion: norm %g is %.1f x the median %g of the last %d "
                 "steps (&train grad_explosion_ratio = %g)", e->norm, v->value, v->reference,
                 tr->anom.c.window, v->threshold);
        break;
    case ANOM_DIVERGENCE:
        snprintf(buf, len, "divergence: validation loss %g rose %.0f evaluations in a row (&train "
                 "divergence_evals = %d)", e->loss, v->value, cfg->divergence_evals);
        break;
    default: snprintf(buf, len, "anomaly"); break;
    }
}

/* The event as one flat metrics record (the TensorBoard writer shows its strings as text). */
static void record_anomaly(trainer_t *tr, const anom_event_t *e) {
    char n1[32], n2[32], to[96] = "", note[160] = "";
    if (e->to_step >= 0)
        snprintf(to, sizeof to, ",\"to_step\":%lld,\"sample_pos\":%lld,\"rollbacks\":%d",
                 (long long)e->to_step, (long long)tr->sample_pos, tr->rollbacks);
    if (e->note) snprintf(note, sizeof note, ",\"note\":\"%s\"", e->note);
    metrics_write(&tr->metrics, "\"event\":\"anomaly\",\"detector\":\"%s\",\"step\":%lld,"
                  "\"value\":%s,\"threshold\":%s,\"action\":\"%s\"%s%s",
                  anom_detector_name(e->v.detector), (long long)e->step,
                  metrics_num(n1, sizeof n1, e->v.value), metrics_num(n2, sizeof n2, e->v.threshold),
                  anom_action_name(e->action), to, note);
}

/* 'abort', or a rollback beyond &train max_rollbacks: the record, one message, exit 2. */
_Noreturn static void abort_on_anomaly(trainer_t *tr, anom_event_t *e, bool rollbacks_used_up) {
    char what[300];
    const char *value, *key = policy_key(tr->cfg, e->v.detector, &value);
    describe(tr, e, what, sizeof what);
    e->action = ANOM_ABORT;
    e->note = rollbacks_used_up ? "max_rollbacks used up" : NULL;
    record_anomaly(tr, e);
    if (rollbacks_used_up)
        fatal_user("step %lld: %s; stopping: &train %s = 'rollback' but the %d rollback%s that "
                   "&train max_rollbacks = %d allows %s been made", (long long)e->step, what, key,
                   tr->rollbacks, tr->rollbacks == 1 ? "" : "s", tr->cfg->max_rollbacks,
                   tr->rollbacks == 1 ? "has" : "have");
    fatal_user("step %lld: %s; stopping because &train %s = 'abort'", (long long)e->step, what, key);
}

/* The line (stderr) and record of an event that did not end the run. */
static void report_anomaly(trainer_t *tr, const anom_event_t *e, const char *outcome) {
    char what[300], done[200];
    const char *value, *key = policy_key(tr->cfg, e->v.detector, &value);
    describe(tr, e, what, sizeof what);
    if (e->to_step >= 0)
        snprintf(done, sizeof done, "rolled back to the checkpoint of step %lld; the samples up to "
                 "%lld (steps %lld..%lld) are skipped (rollback %d of at most %d)",
                 (long long)e->to_step, (long long)tr->sample_pos, (long long)e->to_step + 1,
                 (long long)e->step, tr->rollbacks, tr->cfg->max_rollbacks);
    else snprintf(done, sizeof done, "%s%s%s", outcome, e->note ? ": " : "", e->note ? e->note : "");
    if (is_root(tr))
        fprintf(stderr, "llmtrain: warning: step %lld: %s: %s (%s = '%s')\n", (long long)e->step,
                what, done, key, value);
    record_anomaly(tr, e);
}

/* A rollback verdict: reload the newest checkpoint (step c) with the detector state it had and
 * continue the data at `next_sample` (the position after the window that fired, so the
 * samples of steps c+1..k are not seen again). No checkpoint yet, or one that does not load:
 * the step is skipped instead (said in the note). Returns whether it rolled back. */
static bool roll_back(trainer_t *tr, anom_event_t *e, int64_t next_sample) {
    if (tr->rollbacks >= tr->cfg->max_rollbacks) abort_on_anomaly(tr, e, true);
    e->action = ANOM_SKIP;
    if (tr->last_ckpt_step < 0) {
        e->note = "no checkpoint to roll back to yet";
        return false;
    }
    char msg[COMM_MSG_MAX + 64];
    curric_cursor_t keep; /* the data cursor at next_sample (the step's start or end) */
    const bool have_cursor = curric_cursor_at(&tr->curric, next_sample, &keep);
    ASSERT(have_cursor);
    if (ckpt_rollback(tr, msg, sizeof msg) != 0) {
        if (is_root(tr)) fprintf(stderr, "llmtrain: error: rollback: %s\n", msg);
        e->note = "the checkpoint could not be reloaded";
        return false;
    }
    tr->rollbacks++;
    /* the records of the steps about to be redone are superseded, as after a resume */
    if (metrics_supersede_open(&tr->metrics, (long long)tr->step) < 0)
        fprintf(stderr, "llmtrain: warning: rollback: marking the superseded records of %s: %s\n",
                tr->metrics.path, strerror(errno));
    tr->anom = tr->anom_at_ckpt;
    tr->sample_pos = next_sample;
    curric_set_cursor(&tr->curric, &keep, next_sample);
    e->action = ANOM_ROLLBACK;
    e->to_step = tr->step;
    return true;
}

/* The detectors on one step's values, then its policy: abort ends the run here; rollback
 * reloads (true: the step is over); skip and warn are left to the caller (r->event). The values
 * of an anomalous step are folded into the statistics only under 'warn' (the run goes on
 * from them). */
static bool step_anomaly(trainer_t *tr, step_result_t *r, bool at_floor, int64_t next_sample) {
    const anom_step_in_t in = {r->loss, r->norm, r->overflow, at_floor};
    anom_event_t *e = &r->event;
    e->step = r->step;
    e->loss = r->loss;
    e->norm = r->norm;
    e->to_step = -1;
    e->v = agreed_verdict(anom_check_step(&tr->anom, &in));
    r->anomaly = e->v.detector != ANOM_NONE;
    e->action = r->anomaly ? anom_action_for(tr->cfg, e->v.detector) : ANOM_WARN;
    anom_observe_step(&tr->anom, &in, r->anomaly && e->action != ANOM_WARN);
    if (!r->anomaly) return false;
    if (e->action == ANOM_ABORT) abort_on_anomaly(tr, e, false);
    if (e->action != ANOM_ROLLBACK || !roll_back(tr, e, next_sample)) return false;
    r->applied = false;
    report_anomaly(tr, e, NULL);
    return true;
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
    r->loss = loss / (tr->accum * tr->grid->dp) * (spike ? SPIKE_FACTOR : 1.0);
    r->z_loss = z_loss / (tr->accum * tr->grid->dp);
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

static step_result_t train_step(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    step_result_t r = {0};
    r.step = tr->step + 1;
    watchdog_set_step(tr->step + 1);
    r.loss_scale = tr->scaler.scale;
    double loss_sum = accumulate_gradients(tr);
    moe_log_step(&tr->moelog, &tr->model, tr->grid->world_group, r.step, is_root(tr));
    if (tr->step == cfg->dump_grads_step) dump_grads(tr);
    if (tr->step == cfg->inject_nan_step) inject_nonfinite(tr, NAN);
    if (tr->step == cfg->inject_overflow_step) inject_nonfinite(tr, INFINITY);
    const bool spike = spike_injected(tr);
    if (spike) scale_reduced_grads(tr, SPIKE_FACTOR);
    r.lr = curric_lr(tr, tr->step);
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
    if (step_anomaly(tr, &r, at_floor, tr->sample_pos + tr->global_batch)) return r;
    r.applied = apply && !(r.anomaly && r.event.action == ANOM_SKIP);
    prof_begin(PROF_OPTIMIZER, "optimizer", -1, -1);
    settle_update(tr, &r, (float)(clip_scale(r.norm, cfg->grad_clip) / tr->scaler.scale),
                  (float)(1.0 / scale_used));
    if (!r.applied) tr->skipped++;
    prof_end(PROF_OPTIMIZER, 0);
    if (r.anomaly) report_anomaly(tr, &r.event, r.applied ? "update applied" : "update skipped");
    tr->step++;
    tr->sample_pos += tr->global_batch;
    tr->tokens_seen += (int64_t)tr->global_batch * tr->T;
    curric_commit(&tr->curric);
    return r;
}

/* ---------------------------------------------------------------- validation */

double trainer_validate(trainer_t *tr) {
    /* &model seq_len, whatever the stage: validation losses stay comparable */
    const int B = tr->micro_batch, T = tr->val_sampler.seq_len, n = tr->cfg->val_batches;
    double sum = 0.0;
    /* Batch i goes to dp rank i % dp; the same batches every time, so curves are comparable.
     * Every rank runs the same number of forward passes, ceil(n / dp): a forward has dp-group
     * collectives (ZeRO-3's gathers, the experts' all-to-all), so where n is not a multiple of dp
     * a rank without a batch of its own runs one more pass (on batch i mod n) whose loss it
     * leaves out. A bad window is agreed by every rank before the pass, so none is left waiting
     * in one. */
    char err[1024] = "";
    const int dp = tr->grid->dp, passes = (n + dp - 1) / dp;
    for (int k = 0; k < passes; k++) {
        const int i = tr->grid->rank_dp + k * dp;
        const int bad = sampler_fill(&tr->val_sampler, (uint64_t)(i % n) * B, B, tr->inputs,
                                     tr->targets, err, sizeof err) != 0;
        agree_on_data_error(tr->cfg, MPI_COMM_WORLD, bad, err);
        const double loss = pipe_run(&tr->pipe, tr->inputs, tr->targets, 1, B, T, false, 0.0f);
        if (i < n) sum += loss;
    }
    comm_allreduce_sum_double(&sum, 1, tr->grid->pp_group, COMM_OTHER);
    comm_allreduce_sum_double(&sum, 1, tr->grid->dp_group, COMM_OTHER);
    return sum / n;
}

/* ---------------------------------------------------------------- logging */

static void format_hms(char *buf, size_t len, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
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

static void log_step(trainer_t *tr, const step_result_t *r, double dt, double eta,
                     const comm_stats_t *c, long faults) {
    const double tok_s = (double)tr->global_batch * tr->T / dt;
    const double achieved = tr->flops_per_token * tok_s / tr->grid->world_size; /* per rank */
    const double mfu = achieved / tr->peak_flops, gemm_util = achieved / tr->gemm_flops;
    const double mem = (double)alloc_rss_bytes() / (1024.0 * 1024.0);
    const double peak = (double)tr->ops->memory_peak(MEM_CATEGORIES) / (1024.0 * 1024.0);
    char e[32], n1[32], n2[32], scale[48] = "";
    format_hms(e, sizeof e, eta);
    if (tr->scaler.enabled) snprintf(scale, sizeof scale, " | scale %g", r->loss_scale);
    char event[96] = "", zl[256] = "";
    int zn = 0;
    if (tr->cfg->z_loss > 0) zn = snprintf(zl, sizeof zl, ",\"z_loss\":%.9g", r->z_loss);
    if (tr->model.moe) /* the experts' token exchange (all-to-all over the ep group) */
        zn += snprintf(zl + zn, sizeof zl - (size_t)zn, ",\"ms_ep\":%.3f,\"bytes_ep\":%.0f",
                       c->seconds[COMM_EP] * 1e3, c->bytes[COMM_EP]);
    if (tr->opt.off) { /* the step's forwards waiting for the previous step's host update */
        int ready, units;
        const double w = adamw_offload_wait(&tr->opt, &ready, &units);
        snprintf(zl + zn, sizeof zl - (size_t)zn,
                 ",\"ms_offload_wait\":%.3f,\"offload_units_ready\":%d,\"offload_units\":%d",
                 w * 1e3, ready, units);
    }
    if (r->anomaly && r->event.to_step >= 0)
        snprintf(event, sizeof event, " | %s: ROLLBACK to step %lld",
                 anom_detector_name(r->event.v.detector), (long long)r->event.to_step);
    else if (r->anomaly)
        snprintf(event, sizeof event, " | %s: %s", anom_detector_name(r->event.v.detector),
                 r->applied ? "applied (warn)" : "SKIPPED");
    else if (!r->applied)
        snprintf(event, sizeof event, " | SKIPPED%s", r->overflow ? " (overflow)" : "");
    if (is_root(tr) && (r->step % tr->cfg->log_every == 0 || r->step == tr->cfg->max_steps ||
                        r->anomaly))
        printf("step %*lld/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | "
               "MFU %4.1f%% (GEMM %3.0f%%) | peak %.0f MiB | ETA %s%s%s%s\n",
               (int)log10(tr->cfg->max_steps) + 1, (long long)r->step, tr->cfg->max_steps,
               r->loss, r->lr, r->norm, dt * 1e3, tok_s, 100.0 * mfu, 100.0 * gemm_util, peak, e, scale,
               tr->moelog.line, event);
    metrics_write(&tr->metrics,
                  "\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"ms\":%.3f,"
                  "\"tokens_per_s\":%.1f,\"mfu\":%.5f,\"gemm_util\":%.5f,\"minor_faults\":%ld,\"rss_mib\":%.1f,\"peak_mib\":%.1f,\"tokens\":%lld,"
                  "\"skipped\":%lld,\"applied\":%s,\"ms_tp\":%.3f,\"ms_pp_wait\":%.3f,"
                  "\"ms_dp_wait\":%.3f,\"bytes_tp\":%.0f,\"bytes_pp\":%.0f,\"bytes_dp\":%.0f,"
                  "\"loss_scale\":%.9g,\"overflow\":%s,\"stage\":%d,\"seq_len\":%d,\"global_batch\":%d%s%s%s",
                  (long long)r->step, metrics_num(n1, sizeof n1, r->loss), r->lr,
                  metrics_num(n2, sizeof n2, r->norm), dt * 1e3, tok_s, mfu, gemm_util, faults, mem, peak,
                  (long long)tr->tokens_seen, (long long)tr->skipped,
                  r->applied ? "true" : "false", c->seconds[COMM_TP] * 1e3,
                  c->seconds[COMM_PP] * 1e3, c->seconds[COMM_DP] * 1e3, c->bytes[COMM_TP],
                  c->bytes[COMM_PP], c->bytes[COMM_DP], r->loss_scale,
                  r->overflow ? "true" : "false", tr->curric.cur + 1, tr->T, tr->global_batch,
                  zl, tr->prof.record, tr->moelog.record ? tr->moelog.record : "");
    fflush(stdout);
}

static double run_validation(trainer_t *tr) {
    double v = trainer_validate(tr);
    char n1[32];
    if (is_root(tr)) printf("val  %lld | val_loss %.4f\n", (long long)tr->step, v);
    metrics_write(&tr->metrics, "\"step\":%lld,\"val_loss\":%s", (long long)tr->step,
                  metrics_num(n1, sizeof n1, v));
    return v;
}

/* Validation during training, and the divergence detector on its loss (a rollback continues
 * the data where it is: after this step's samples). 'skip' has no update to drop here. */
static void validate_and_watch(trainer_t *tr) {
    const double val = run_validation(tr);
    anom_event_t e = {tr->step, val, NAN, agreed_verdict(anom_observe_val(&tr->anom, val)),
                      ANOM_WARN, -1, NULL};
    if (e.v.detector == ANOM_NONE) return;
    e.action = anom_action_for(tr->cfg, e.v.detector);
    if (e.action == ANOM_ABORT) abort_on_anomaly(tr, &e, false);
    if (e.action == ANOM_ROLLBACK) roll_back(tr, &e, tr->sample_pos);
    if (e.action == ANOM_SKIP && !e.note) e.note = "after a validation there is no update to skip";
    report_anomaly(tr, &e, "training goes on");
}

/* The communication summary of the run, one row per rank (gathered to rank 0): where the
 * time went and what each pipeline stage held. Per step averages over the whole run. */
static void print_time_split(trainer_t *tr) {
    enum { NV = 9 };
    const comm_stats_t *c = comm_stats();
    const double steps = tr->step > 0 ? (double)tr->step : 1.0;
    const double MiB = 1024.0 * 1024.0;
    double mine[NV] = {tr->grid->rank_pp, c->seconds[COMM_TP] / steps * 1e3,
                       c->seconds[COMM_PP] / steps * 1e3, c->seconds[COMM_DP] / steps * 1e3,
                       c->bytes[COMM_TP] / steps / MiB, c->bytes[COMM_PP] / steps / MiB,
                       c->bytes[COMM_DP] / steps / MiB, tr->pipe.max_inflight,
                       tr->pipe.max_inflight * tr->model.slot_bytes / MiB};
    double *all = is_root(tr) ? xmalloc(sizeof(double) * NV * (size_t)tr->grid->world_size) : NULL;
    fault_point("stats", tr->grid->world_rank);
    comm_gather(mine, NV, MPI_DOUBLE, all, 0, MPI_COMM_WORLD, "end-of-run statistics");
    if (is_root(tr) && tr->grid->world_size > 1) {
        printf("time split per step (ms, mean over %lld steps) and bytes sent (MiB/step):\n"
               "  %4s %5s %8s %11s %11s %8s %8s %8s %9s %13s\n", (long long)tr->step, "rank",
               "stage", "tp ar ms", "p2p wait ms", "dp wait ms", "tp MiB", "pp MiB", "dp MiB",
               "in flight", "act. peak MiB");
        for (int r = 0; r < tr->grid->world_size; r++) {
            const double *v = all + NV * r;
            printf("  %4d %5.0f %8.2f %11.2f %11.2f %8.2f %8.2f %8.2f %9.0f %13.2f\n", r, v[0],
                   v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
        }
    }
    if (is_root(tr) && tr->grid->dp > 1) {
        double waited = c->seconds[COMM_DP] / steps * 1e3;
        double hidden = 1.0 - waited / tr->dp_blocking_ms;
        printf("dp all-reduce: %.2f ms when blocking (measured at startup), %.2f ms waited per "
               "step with %d buckets: %.0f%% hidden behind backward\n", tr->dp_blocking_ms,
               waited, tr->dps.n, 100.0 * (hidden < 0 ? 0 : hidden));
    }
    xfree(all);
}

/* ---------------------------------------------------------------- the loop */

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
    const bool untrained = tr->step == 0 && tr->last_ckpt_step < 0;
    int code = LLMT_EXIT_REQUEUE;
    if (!(tr->last_ckpt_step == tr->step || untrained)) {
        if (is_root(tr))
            printf("%s at step %lld: writing a checkpoint, then exiting with code %d so the job "
                   "can be requeued (resume = 'auto' continues from it)\n", what,
                   (long long)tr->step, LLMT_EXIT_REQUEUE);
        code = ckpt_write_now(tr, timed_out ? "time limit" : "signal") == 0 ? LLMT_EXIT_REQUEUE
                                                                            : LLMT_EXIT_CKPT;
    } else if (is_root(tr)) {
        printf("%s at step %lld: %s; exiting with code %d so the job can be requeued (resume = "
               "'auto' continues from it)\n", what, (long long)tr->step,
               untrained ? "nothing trained yet, nothing to save"
               : "the checkpoint of this step exists", LLMT_EXIT_REQUEUE);
    }
    /* the record survives where the launcher stopped reading stdout (see checkpointing.c) */
    metrics_write(&tr->metrics, "\"step\":%lld,\"stopped_by\":\"%s\",\"exit_code\":%d",
                  (long long)tr->step, name, code);
    profiling_finish(&tr->prof, tr->rd.dir, &tr->metrics, tr->step);
    return code;
}

/* After each step: a checkpoint when one is due, then the stop signals (a signal that arrived
 * during that save is seen here, and the save just made serves it). Returns an exit code when
 * the run must end now, else -1. */
static int after_step(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    /* After a rollback the step is that of the checkpoint just reloaded: nothing to write. A
     * failed save was reported and training goes on; a written one keeps the detectors' state
     * for a rollback to it. */
    if (cfg->ckpt_every > 0 && tr->step % cfg->ckpt_every == 0 && tr->step < cfg->max_steps &&
        tr->last_ckpt_step != tr->step && ckpt_write_now(tr, "every") == 0)
        tr->anom_at_ckpt = tr->anom;
    fault_point("step", tr->grid->world_rank);
    /* rank 0's clock decides about the time limit; the verdict travels with the signals */
    const bool late = is_root(tr) && deadline_due(&tr->deadline, tr->grid->world_rank);
    int sig = stop_pending(MPI_COMM_WORLD, late ? STOP_TIME_LIMIT : 0);
    return sig ? stop_for_signal(tr, sig, "") : -1;
}

/* The end of a run: validation, the final checkpoint, then the final weights (both checked for
 * space first; either failing is exit code 5). */
/* The end-of-run table: each rank's measured peak per category beside the planner's prediction
 * (measured/planned MiB), its tracked peak in all and its resident size. With many ranks, the
 * first 16 and then the largest of each column. */
enum { MEMROW_DP, MEMROW_TP, MEMROW_PP, MEMROW_CAT, MEMROW_PEAK = MEMROW_CAT + 2 * MEM_CATEGORIES,
       MEMROW_PLANNED, MEMROW_RSS, MEMROW_HOST, MEMROW_HOST_PLANNED, MEMROW_N };

static void print_memory_row(const char *label, const double *r) {
    const double MiB = 1048576.0;
    printf("  %-14s", label);
    for (int c = 0; c < MEM_CATEGORIES; c++)
        printf(" %7.1f/%-7.1f", r[MEMROW_CAT + 2 * c] / MiB, r[MEMROW_CAT + 2 * c + 1] / MiB);
    printf(" %7.1f/%-7.1f %8.1f\n", r[MEMROW_PEAK] / MiB, r[MEMROW_PLANNED] / MiB, r[MEMROW_RSS] / MiB);
}

static void print_memory_table(const trainer_t *tr) {
    const grid_t *g = tr->grid;
    double mine[MEMROW_N];
    mine[MEMROW_DP] = g->rank_dp;
    mine[MEMROW_TP] = g->rank_tp;
    mine[MEMROW_PP] = g->rank_pp;
    for (int c = 0; c < MEM_CATEGORIES; c++) { /* the backend's memory: a device's, or the host's */
        mine[MEMROW_CAT + 2 * c] = (double)tr->ops->memory_peak(c);
        mine[MEMROW_CAT + 2 * c + 1] = tr->plan.bytes[c];
    }
    mine[MEMROW_PEAK] = (double)tr->ops->memory_peak(MEM_CATEGORIES);
    mine[MEMROW_PLANNED] = tr->plan.total;
    mine[MEMROW_RSS] = (double)alloc_rss_bytes();
    mine[MEMROW_HOST] = (double)alloc_bytes_peak(); /* beside a device: the host's tracked peak */
    mine[MEMROW_HOST_PLANNED] = tr->plan.host_total;
    double *all = is_root(tr) ? xmalloc(sizeof(double) * MEMROW_N * (size_t)g->world_size) : NULL;
    comm_gather(mine, MEMROW_N, MPI_DOUBLE, all, 0, MPI_COMM_WORLD, "the memory table");
    if (!is_root(tr)) return;
    printf("memory per rank, MiB, measured peak / planned (tracked buffers by category%s; rss = "
           "resident size):\n  %-14s", tr->cfg->device_memory ? " in device memory" : "",
           "rank (dp,tp,pp)");
    for (int c = 0; c < MEM_CATEGORIES; c++) printf(" %15s", mem_category_name((mem_category_t)c));
    printf(" %15s %8s\n", "total", "rss");
    double most[MEMROW_N] = {0};
    for (int r = 0; r < g->world_size; r++) {
        const double *row = all + (size_t)r * MEMROW_N;
        for (int k = 0; k < MEMROW_N; k++) most[k] = row[k] > most[k] ? row[k] : most[k];
        if (r >= 16) continue;
        char label[48];
        snprintf(label, sizeof label, "%d (%d,%d,%d)", r, (int)row[MEMROW_DP], (int)row[MEMROW_TP],
                 (int)row[MEMROW_PP]);
        print_memory_row(label, row);
    }
    if (g->world_size > 16) {
        printf("  ... %d more ranks\n", g->world_size - 16);
        print_memory_row("largest", most);
    }
    if (tr->cfg->device_memory)
        printf("host memory beside the device's, MiB, measured peak / planned (largest rank): "
               "%.1f/%.1f\n", most[MEMROW_HOST] / 1048576.0, most[MEMROW_HOST_PLANNED] / 1048576.0);
    xfree(all);
}

static int finish(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    if (tr->has_val && (cfg->val_every <= 0 || tr->step % cfg->val_every != 0)) run_validation(tr);
    int code = 0;
    if (cfg->ckpt_every > 0 && tr->last_ckpt_step != tr->step && ckpt_write_now(tr, "final") != 0)
        code = LLMT_EXIT_CKPT;
    char tag[32];
    snprintf(tag, sizeof tag, "step%06lld", (long long)tr->step);
    if (save_weights(tr, tag) != 0) code = LLMT_EXIT_CKPT;
    if (is_root(tr) && tr->skipped)
        printf("anomalies: %lld of %lld steps skipped%s\n", (long long)tr->skipped,
               (long long)tr->step, tr->scaler.overflows ? "" : "");
    if (is_root(tr) && tr->rollbacks)
        printf("anomalies: %d rollback%s to an earlier checkpoint (&train max_rollbacks = %d)\n",
               tr->rollbacks, tr->rollbacks > 1 ? "s" : "", cfg->max_rollbacks);
    if (is_root(tr) && tr->post_validate)
        printf("post-validation: %lld of %lld optimistic updates undone (clipping, anomaly or "
               "overflow) and redone as checked\n", (long long)tr->pv.undone, (long long)tr->step);
    if (is_root(tr) && tr->scaler.enabled)
        printf("loss scaling: %lld overflowing steps skipped, final scale %g\n",
               (long long)tr->scaler.overflows, tr->scaler.scale);
    print_time_split(tr);
    print_memory_table(tr);
    profiling_finish(&tr->prof, tr->rd.dir, &tr->metrics, tr->step);
    return code;
}

int trainer_train(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    /* a signal during setup (or resume) is acted on before the first step */
    int sig = stop_signal_pending(MPI_COMM_WORLD);
    if (sig) return stop_for_signal(tr, sig, " during setup");
    if (tr->step == 0 && save_weights(tr, "step000000") != 0 && is_root(tr))
        fprintf(stderr, "llmtrain: warning: training goes on without the step-0 weights file\n");
    double ema = 0.0;
    comm_stats_reset();
    const int64_t first = tr->step;
    while (tr->step < cfg->max_steps) {
        curric_before_step(tr); /* a stage boundary: the next stage's shape and data */
        comm_stats_t before = *comm_stats(), delta;
        const long faults0 = minor_faults_now();
        profiling_step_begin(&tr->prof, tr->step + 1);
        double t0 = now_sec();
        prof_begin(PROF_STEP, "step", -1, -1);
        step_result_t r = train_step(tr);
        prof_end(PROF_STEP, 0);
        double dt = now_sec() - t0;
        deadline_note_step(&tr->deadline, dt);
        profiling_step_end(&tr->prof);
        const long faults = minor_faults_now() - faults0;
        comm_delta(&before, &delta);
        /* The first step carries one-time costs (page faults, BLAS warm-up): keep it out of the ETA. */
        ema = tr->step - first <= 2 ? dt : 0.9 * ema + 0.1 * dt;
        log_step(tr, &r, dt, ema * (cfg->max_steps - tr->step), &delta, faults);
        if (r.event.to_step < 0 && tr->has_val && cfg->val_every > 0 && tr->step % cfg->val_every == 0)
            validate_and_watch(tr);
        int code = after_step(tr);
        if (code >= 0) return code;
    }
    return finish(tr);
}
