/* trainer.h — the step loop: micro-batches with gradient accumulation, data-parallel gradient
 * all-reduce, anomaly handling, clipping, AdamW, LR schedule, validation, logging, weights.
 * Also 'eval' (validation loss of given weights) and 'generate' (sampling from a prompt).
 * Owns: the model, optimizer, data, metrics of one run. Uses: model/, io/, parallel/,
 * kernels/ops.h, config/, core/. Used by: main. */
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
#include "train/anomaly.h"
#include "train/curriculum.h"
#include "train/deadline.h"
#include "train/dp_sync.h"
#include "train/loss_scale.h"
#include "train/optimizer.h"
#include "train/pipeline.h"
#include "train/planner.h"
#include "train/postval.h"
#include "train/moe_log.h"
#include "train/profiling.h"
#include "train/rundir.h"
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
    curriculum_t curric;        /* the stages, the training data and its cursor */
    bool has_train, has_val;
    int micro_batch, accum, global_batch, T; /* the current stage's (at setup: the largest) */
    int *inputs, *targets;      /* host [accum][micro_batch * T]: one step's micro-batches */
    rundir_t rd;                /* the run and checkpoint directories, lock and lineage */
    char *config_text;          /* effective namelist, stored in weight files */
    metrics_t metrics;          /* metrics.jsonl, mirrored to TensorBoard */
    provenance_t provenance;    /* the run's (train/runinfo), the same on every rank */
    int64_t step;               /* optimizer steps taken */
    int64_t skipped;            /* steps whose update was discarded (an anomaly's 'skip') */
    int64_t tokens_seen;
    int64_t sample_pos;         /* global index of the next training sample */
    int64_t last_ckpt_step;     /* step of the newest checkpoint written or resumed (-1: none) */
    char last_ckpt_path[700];   /* ... its file, which an anomaly rollback reloads */
    anom_state_t anom;          /* the anomaly detectors (anomaly.h) */
    anom_state_t anom_at_ckpt;  /* ... as they were at last_ckpt_step: a rollback restores them */
    int rollbacks;              /* anomaly rollbacks made by this process (&train max_rollbacks) */
    MPI_Info io_hints;          /* MPI-IO hints for checkpoint files */
    double peak_flops;          /* per rank: the hardware's peak (or &log peak_flops), for MFU */
    char peak_how[160];         /* how peak_flops was found, for the startup summary */
    char cores[80];             /* this rank's cores ("2 cores (0-1)"), for the startup summary */
    double gemm_flops;          /* per rank: the model's matmul as measured at startup */
    dtype_t products;           /* the products' type (choose_products: gpt_product_type) */
    double flops_per_token;
    double dp_blocking_ms;      /* one blocking all-reduce of all gradients, measured at setup */
    profiling_t prof;           /* timeline, counts per phase, energy (mode = 'train') */
    moe_log_t moelog;           /* the MoE blocks' step statistics (train/moe_log.h) */
} trainer_t;

/* Everything a run needs, allocated once; data files are validated here (a bad file is one
 * message naming it). Loads &run init_from weights when given, else the seeded init. */
/* cores: rank 0's cores as the placement table shows them ("2 cores (0-1)"), for the MFU line. */
void trainer_setup(trainer_t *tr, const config_t *cfg, const grid_t *grid, const ops_t *ops,
                   const char *cores);
void trainer_destroy(trainer_t *tr);
/* The parameter registry this rank's model has (its tp shard, its pipeline stage's layers — the
 * interleaved schedule's virtual_stages chunks of them —, its experts): the one layout of the
 * flat buffers that the model, ZeRO and a resume's host copies share. */
void trainer_rank_registry(params_t *P, const config_t *cfg, const grid_t *grid);
/* mode = 'train': optimizer steps up to max_steps (from the resumed step, if any), with
 * checkpoints. Returns the exit code: 0; LLMT_EXIT_REQUEUE after a stop signal and its
 * checkpoint; LLMT_EXIT_CKPT if a checkpoint that had to be written could not be. */
int trainer_train(trainer_t *tr);
/* A host copy of a flat buffer for a file writer: the full device buffer, or (sharded: ZeRO
 * partitions) the partitions gathered on dp rank 0 (NULL on the other dp ranks, which write
 * nothing). Collective over the dp group when sharded. Free with xfree. */
float *trainer_host_copy(const trainer_t *tr, const ops_t *from, const float *full,
                         const float *shard, bool sharded);
/* The parameters in fp32 for a file: the master weights (bf16/fp16) or the model's own, as
 * trainer_host_copy gives them. */
float *trainer_host_params(const trainer_t *tr);
/* The parameters from a full host copy of the flat buffer (fp32): into the model (bf16/fp16:
 * the master and the rounded copy), or (ZeRO-3) this rank's partition of them. */
void trainer_set_params_from_host(trainer_t *tr, const float *host);
/* Mean loss over val_batches micro-batches of the validation set (all ranks get it). */
double trainer_validate(trainer_t *tr);
/* mode = 'generate': sample max_new_tokens after the prompt; rank 0 prints the ids. */
void trainer_generate(trainer_t *tr);
/* Draw a token from softmax(logits[V] / temperature) over the top_k largest logits (0 = all;
 * temperature 0 = argmax) with the uniform number u in (0,1). Overwrites logits; scratch[V]. */
int sample_token(float *logits, int V, double temperature, int top_k, float u, float *scratch);
#endif
