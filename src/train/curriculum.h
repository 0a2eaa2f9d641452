/* curriculum.h — multi-stage training: the &stage groups as a plan of step ranges, each with its
 * sequence length, global batch, data (one set of shards or a mixture) and learning-rate
 * schedule; switching at the boundaries; the data cursor (per-source positions) that
 * checkpoints carry. Meaning of the keys: config/stages.h; the draw of a mixture: io/mixture.h.
 *
 * Without &stage groups and without a mixture there is one stage with the run's own settings and
 * one source whose position is the sample index (what the trainer did before stages existed):
 * same data, same numbers, and checkpoints without a cursor load as that.
 * Boundaries: stage s covers optimizer steps [start_s, end_s) (0-based; logged steps start_s+1 ..
 * end_s): end_s = until_step, or, with until_tokens, the first step count whose tokens seen
 * (sum of global_batch * seq_len of the steps before) reach it; both are computed at startup.
 * Sequence length: the model and its activations are sized for &model seq_len, a stage's shorter
 * sequences use the front of the buffers. The per-source positions count windows of the
 * current stage's seq_len; when it changes they become ceil(position * old / new) (the same
 * token offset, rounded up to a whole window).
 * Batch size: micro_batch stays, the accumulation steps are global_batch / (micro_batch * dp);
 * buffers and pipeline slots are sized for the largest stage.
 * Owns: the plan, the shard sets of every source (each distinct pattern opened once), one
 * sampler per stage and source, the cursor. Uses: config/stages, io/mixture, io/sampler,
 * io/shards, train/lr, parallel/comm, io/metrics. Used by: train/trainer, train/checkpointing;
 * train/trainer_report, train/trainer_validate and train/trainer_anomaly (batch_shape_t, the
 * data-error agreement, the cursor). */
#ifndef LLMT_CURRICULUM_H
#define LLMT_CURRICULUM_H
#include <stdbool.h>
#include <stdint.h>
#include <mpi.h>
#include "config/stages.h"
#include "io/sampler.h"
#include "io/shards.h"
#include "train/lr.h"

#define CURRIC_MAX_SETS 64 /* distinct data sources over all stages */

typedef struct curric_stage {
    int64_t start, end;         /* optimizer steps [start, end); the last ends at max_steps */
    int T, global_batch, accum;
    int n_src;
    int set[MIX_MAX_SOURCES];   /* index into curriculum_t.sets */
    double weight[MIX_MAX_SOURCES], cum[MIX_MAX_SOURCES];
    sampler_t sampler[MIX_MAX_SOURCES];
    bool own_lr;                /* the stage's schedule piece, else &train's over the run */
    lr_piece_t lr;
    char data[CFG_STR];         /* the train_files or mixture text, for the plan */
    const char *data_key;       /* "&data train_files", "&stage mixture", ... */
    int data_line, data_col;    /* where it was set (0: &data's default) */
} curric_stage_t;

/* Where the data is: positions per source, counted in windows of seq_len T. */
typedef struct curric_cursor {
    int T;
    int64_t pos[CURRIC_MAX_SETS];
} curric_cursor_t;

typedef struct curriculum {
    int n_stages;
    curric_stage_t stage[CFG_MAX_STAGES];
    bool staged;                /* &stage groups or a mixture: print the plan, log boundaries */
    bool by_tokens;
    int n_sets;
    shard_set_t sets[CURRIC_MAX_SETS];
    char set_patterns[CURRIC_MAX_SETS][CFG_STR];
    bool opened;
    int cur;                    /* the stage of the current step (-1 before the first) */
    curric_cursor_t at;         /* before the current step (sample index at_sample) */
    curric_cursor_t next;       /* after it: valid once the step's data is planned */
    int64_t at_sample;
    int64_t planned_sample;     /* the step whose sources src/index hold (-1: none) */
    int *src;                   /* [max global_batch] this step's source of each sample */
    int64_t *index;             /* ... and its window in that source's sampler */
    int max_accum, max_global_batch;
    int model_T;                /* &model seq_len */
    uint64_t seed;
} curriculum_t;

/* The batch geometry of the current stage (at setup: the largest stage's); micro_batch is the
 * run's, the same in every stage. */
typedef struct batch_shape {
    int micro_batch, accum, global_batch, T;
} batch_shape_t;

struct ckpt_state;
struct grid;
struct metrics;

/* The plan from the configuration (no files): after the batch geometry (micro_batch, the
 * run's global_batch). Returns the largest stage's accumulation, for the allocations (buffers
 * and pipeline slots are sized for it). A stage global batch the chosen micro_batch does not
 * divide is one message, exit 2. */
int curric_plan(curriculum_t *c, const config_t *cfg, int micro_batch, int global_batch);
/* Open and check every source's shards and make the samplers: one message naming the key
 * (file:line) for a pattern matching no file, a bad shard or one shorter than a window. */
void curric_open_data(curriculum_t *c, const config_t *cfg, const struct grid *grid);
void curric_destroy(curriculum_t *c);
/* The stage of optimizer step `step` (0-based). */
int curric_stage_for_step(const curriculum_t *c, int64_t step);
/* Enter stage s (the cursor counts its seq_len from now on). Returns whether this is a
 * boundary to announce (a staged run going from one stage to another). */
bool curric_enter(curriculum_t *c, int s);
/* The plan, one line per stage (rank 0, when training starts). */
void curric_print_plan(const curriculum_t *c, const config_t *cfg);
/* A boundary into the current stage before step `step` (0-based): one line (root) and one
 * metrics record. */
void curric_announce(const curriculum_t *c, int64_t step, int micro_batch, int dp, bool root,
                     struct metrics *metrics);
/* The sample offset: the index, in a step's global batch, of the first sample of micro-batch a
 * of dp rank rank_dp (the global batch is cut into dp slices of accum micro-batches of
 * micro_batch samples). The data (curric_fill) and the model's per-sample randomness (dropout
 * masks keyed by the sample's index in the step) both count from it. */
static inline int64_t curric_sample_offset(int rank_dp, int accum, int micro_batch, int a) {
    return ((int64_t)rank_dp * accum + a) * micro_batch;
}
/* B samples of the step whose first global sample is step_sample, from the sample offset
 * `first` (curric_sample_offset) on: inputs and targets [B * T]. 0, or -1 with sampler_fill's
 * message. */
int curric_fill(curriculum_t *c, int64_t step_sample, int64_t first, int B, int *inputs,
                int *targets, char *err, size_t errlen);
/* A data error that only some ranks of `comm` saw (each checks its own part or windows): all
 * learn of it, the lowest such rank's message ("<source_path>: &data <err>") is printed once
 * with its rank and host, and every rank exits 2. */
void curric_agree_data_error(const char *source_path, MPI_Comm comm, int failed, const char *err);
/* The step is done: the cursor moves past its samples. */
void curric_commit(curriculum_t *c);
/* The learning rate of optimizer step `step` (0-based) in the current stage. */
double curric_lr(const curriculum_t *c, const config_t *cfg, int64_t step);
/* The cursor for the data position `sample` (the current step's start or end), for a rollback
 * that continues the data there; false if it is neither. */
bool curric_cursor_at(const curriculum_t *c, int64_t sample, curric_cursor_t *out);
void curric_set_cursor(curriculum_t *c, const curric_cursor_t *cur, int64_t sample);
/* Checkpoint state: the cursor (and the stage, for the record) into / from st. */
void curric_save_state(const curriculum_t *c, struct ckpt_state *st);
void curric_load_state(curriculum_t *c, const struct ckpt_state *st, int64_t sample_pos);
#endif
