/* trainer_report.h — what the trainer prints and records: the startup summary (model, batch,
 * memory plan, pipeline layout, precision and storage, MFU reference), the step line and its
 * metrics record, the stragglers and slow links (train/straggler.h: the busy times gathered,
 * the marks, the warnings), and the end-of-run communication and memory tables.
 * Owns: report_t, the state only reporting keeps (the straggler and link watches, the step
 * line's marks, the rates MFU is measured against, the cores text). Reads the run through
 * report_ctx_t, pointers into the trainer's state set once at setup; never the trainer itself.
 * Uses: model/gpt, parallel/ (grid, link probes, the host collectives), io/metrics and the
 * train/ modules whose state it shows. Used by: train/trainer (setup and loop). */
#ifndef LLMT_TRAINER_REPORT_H
#define LLMT_TRAINER_REPORT_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"
#include "core/provenance.h"
#include "io/metrics.h"
#include "model/gpt.h"
#include "parallel/comm.h"
#include "parallel/grid.h"
#include "parallel/linkprobe.h"
#include "train/checkpointing.h"
#include "train/curriculum.h"
#include "train/dp_sync.h"
#include "train/loss_scale.h"
#include "train/moe_log.h"
#include "train/optimizer.h"
#include "train/pipeline.h"
#include "train/planner.h"
#include "train/profiling.h"
#include "train/step_result.h"
#include "train/straggler.h"

/* What reporting reads of the run: set once at setup, after the model, the optimizer and the
 * memory plan exist (the pointed-to state goes on changing: the stage's shape, the progress). */
typedef struct report_ctx {
    const config_t *cfg;
    const grid_t *grid;
    const ops_t *ops;
    const gpt_t *model;
    const batch_shape_t *shape;     /* the current stage's */
    const ckpt_progress_t *prog;    /* step, skipped, tokens seen */
    const mem_plan_t *plan;         /* the planner's prediction for this rank */
    double memory_limit;            /* bytes a rank may use (trainer_setup.c) */
    double host_limit;              /* host bytes a rank may use beside a device */
    dtype_t precision;              /* weights copy, saved activations, gradients */
    dtype_t products;               /* the products' type */
    const loss_scaler_t *scaler;
    adamw_t *opt;                   /* the offloaded update's wait (adamw_offload_wait) */
    const pipe_t *pipe;             /* micro-batches in flight */
    const dp_sync_t *dps;           /* the dp buckets */
    const curriculum_t *curric;     /* the current stage */
    const profiling_t *prof;        /* the step record's profiling members */
    const moe_log_t *moelog;        /* the MoE blocks' step-line summary and record members */
    const provenance_t *provenance; /* every rank's host */
    metrics_t *metrics;
} report_ctx_t;

typedef struct report {
    report_ctx_t ctx;
    double peak_flops;          /* per rank: the hardware's peak (or &log peak_flops), for MFU */
    char peak_how[160];         /* how peak_flops was found, for the startup summary */
    double gemm_flops;          /* per rank: the model's matmul as measured at startup */
    double dp_blocking_ms;      /* one blocking all-reduce of all gradients, measured at setup */
    char cores[80];             /* rank 0's cores ("2 cores (0-1)"), for the startup summary */
    straggler_t strag;          /* slow ranks named from the busy times (train/straggler.h) */
    double *busy_all;           /* [world]: the step's busy times, gathered (NULL when off) */
    linkprobe_t probe;          /* the links between nodes, timed (parallel/linkprobe.h) */
    link_watch_t linkw;         /* ... and a slow one named (train/straggler.h) */
    char strag_line[160];       /* " | straggler r2@n2 x2.4 | slow link n3 x9.8", or "" */
    char strag_record[768];     /* ",\"straggler_rank\":2,...": the step record's members, or "" */
} report_t;

/* Where the memory limit comes from, for the messages. */
const char *report_limit_source(const config_t *cfg);
/* The startup summary (rank 0): model, batch, memory plan, pipeline, compute, MFU reference. */
void report_print_plan(const report_t *rp);
/* One step's line (rank 0, every log_every) and metrics record. */
void report_step(report_t *rp, const step_result_t *r, double dt, double eta,
                 const comm_stats_t *c, long faults);
/* Stragglers (train/straggler.h): the peer groups gathered at setup (collective, training);
 * after each step every rank's busy time (dt less the waits in c) gathered and judged, the
 * step line's mark and record members set, a warning the first time a rank is named;
 * at the end the largest ratio seen (rank 0). Off (no collective) with &log straggler_ratio 0
 * or one rank. */
void report_stragglers_setup(report_t *rp);
void report_watch_stragglers(report_t *rp, int64_t step, double dt, const comm_stats_t *c);
void report_print_stragglers(const report_t *rp);
/* End of run (collective): the per-rank communication summary, and the per-rank memory table. */
void report_time_split(const report_t *rp);
void report_memory_table(const report_t *rp);
/* What report_stragglers_setup allocated. */
void report_destroy(report_t *rp);
#endif
