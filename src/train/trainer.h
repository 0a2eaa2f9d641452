/* trainer.h — the step loop: micro-batches with gradient accumulation, data-parallel gradient
 * all-reduce, anomaly handling, clipping, AdamW, LR schedule, validation, logging, weights.
 * Also 'eval' (validation loss of given weights) and 'generate' (sampling from a prompt).
 * Owns: the model, optimizer, data, metrics of one run. Uses: model/, io/, parallel/,
 * kernels/ops.h, kernels/ops_rate.h, config/, core/, and the other train/ modules, each through
 * its own narrow interface (checkpointing through ckpt_ctx_t, the curriculum through
 * curriculum_t); none of them includes this header. Used by: main.
 * The implementation is split by concern over trainer.c (the run loop), trainer_setup.c and
 * trainer_step.c, which share the private trainer_internal.h; anomaly handling
 * (trainer_anomaly.h), reporting (trainer_report.h) and validation (trainer_validate.h) see the
 * run only through the narrow contexts setup builds for them (anom_ctx_t, report_ctx_t,
 * val_ctx_t), never trainer_t. */
#ifndef LLMT_TRAINER_H
#define LLMT_TRAINER_H
#include <stdint.h>
#include "config/config.h"
#include "core/provenance.h"
#include "io/metrics.h"
#include "io/sampler.h"
#include "io/shards.h"
#include "model/gpt.h"
#include "parallel/grid.h"
#include "train/checkpointing.h"
#include "train/curriculum.h"
#include "train/deadline.h"
#include "train/dp_sync.h"
#include "train/generate.h"
#include "train/loss_scale.h"
#include "train/optimizer.h"
#include "train/pipeline.h"
#include "train/planner.h"
#include "train/postval.h"
#include "train/moe_log.h"
#include "train/profiling.h"
#include "train/rundir.h"
#include "train/trainer_anomaly.h"
#include "train/trainer_report.h"
#include "train/trainer_validate.h"
#include "train/zero.h"

typedef struct trainer {
    const config_t *cfg;
    const grid_t *grid;
    const ops_t *ops;
    gpt_t model;
    adamw_t opt;
    postval_t pv;               /* ZB-H1: optimizer post-validation (postval.h); else unused */
    bool post_validate;
    deadline_t deadline; /* the job's end time and the stop before it */
    zero_t zero;                /* ZeRO partitions over the dp group: the ownership map */
    dtype_t precision;          /* weights copy, saved activations, gradients before reduction */
    double memory_limit;        /* bytes a rank may use (&run memory_limit_gb, else the node's,
                                   or with a backend of its own memory that memory's capacity) */
    double host_limit;          /* host bytes a rank may use (the node's memory / its ranks) */
    mem_plan_t plan;            /* the planner's prediction for this rank */
    loss_scaler_t scaler;       /* fp16 */
    pipe_t pipe;                /* pipeline schedule over the micro-batches of a step */
    dp_sync_t dps;              /* bucketed data-parallel gradient all-reduce */
    shard_set_t val_set;
    sampler_t val_sampler;
    val_ctx_t val;              /* what validation reads (train/trainer_validate.h) */
    curriculum_t curric;        /* the stages, the training data and its cursor */
    bool has_train, has_val;
    batch_shape_t shape;        /* the current stage's (at setup: the largest) */
    int *inputs, *targets;      /* host [accum][micro_batch * T]: one step's micro-batches */
    rundir_t rd;                /* the run and checkpoint directories, lock and lineage */
    char *config_text;          /* effective namelist, stored in weight files */
    metrics_t metrics;          /* metrics.jsonl, mirrored to TensorBoard */
    provenance_t provenance;    /* the run's (train/runinfo), the same on every rank */
    ckpt_progress_t prog;       /* step, skipped, tokens_seen, sample_pos, the last checkpoint */
    ckpt_ctx_t ckpt;            /* what checkpointing sees of this trainer (set up once) */
    anom_handler_t anomaly;     /* the detectors, their policies, the rollbacks
                                   (train/trainer_anomaly.h) */
    MPI_Info io_hints;          /* MPI-IO hints for checkpoint files */
    dtype_t products;           /* the products' type (choose_products: gpt_product_type) */
    profiling_t prof;           /* timeline, counts per phase, energy (mode = 'train') */
    moe_log_t moelog;           /* the MoE blocks' step statistics (train/moe_log.h) */
    report_t report;            /* what reporting reads (pointers into this) and keeps
                                   (train/trainer_report.h) */
} trainer_t;

/* Everything a run needs, allocated once; data files are validated here (a bad file is one
 * message naming it). Loads &run init_from weights when given, else the seeded init. */
/* cores: rank 0's cores as the placement table shows them ("2 cores (0-1)"), for the MFU line. */
void trainer_setup(trainer_t *tr, const config_t *cfg, const grid_t *grid, const ops_t *ops,
                   const char *cores);
void trainer_destroy(trainer_t *tr);
/* mode = 'train': optimizer steps up to max_steps (from the resumed step, if any), with
 * checkpoints. Returns the exit code: 0; LLMT_EXIT_REQUEUE after a stop signal and its
 * checkpoint; LLMT_EXIT_CKPT if a checkpoint that had to be written could not be. */
int trainer_train(trainer_t *tr);
/* Mean loss over val_batches micro-batches of the validation set (all ranks get it). */
double trainer_validate(trainer_t *tr);
/* mode = 'generate': sample max_new_tokens after the prompt (generate.h); rank 0 prints the ids. */
void trainer_generate(trainer_t *tr);
#endif
