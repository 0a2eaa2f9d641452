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
 * io/shards, train/lr, parallel/comm. Used by: train/trainer, train/checkpointing. */
#ifndef LLMT_CURRICULUM_H
#define LLMT_CURRICULUM_H
#include <stdbool.h>
#include <stdint.h>
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

struct trainer;
struct ckpt_state;

/* The plan from the configuration (no files): after the batch geometry (micro_batch, the
 * run's global_batch). Sets tr->accum to the largest stage's, for the allocations. A stage
 * global batch the chosen micro_batch does not divide is one message, exit 2. */
void curric_plan(struct trainer *tr);
/* Open and check every source's shards and make the samplers: one message naming the key
 * (file:line) for a pattern matching no file, a bad shard or one shorter than a window. */
void curric_open_data(struct trainer *tr);
void curric_destroy(curriculum_t *c);
/* Training starts (or resumes) at tr->step: the plan is printed and the step's stage entered. */
void curric_begin(struct trainer *tr);
/* Before each step: enter the step's stage if it is another one (a boundary: one line and one
 * metrics record). */
void curric_before_step(struct trainer *tr);
/* Micro-batch a of this rank in the current step (the step's first global sample is
 * tr->sample_pos): inputs and targets [micro_batch * T]. 0, or -1 with sampler_fill's message. */
int curric_fill(struct trainer *tr, int a, int *inputs, int *targets, char *err, size_t errlen);
/* The step is done: the cursor moves past its samples. */
void curric_commit(curriculum_t *c);
/* The learning rate of optimizer step `step` (0-based). */
double curric_lr(const struct trainer *tr, int64_t step);
/* The cursor for the data position `sample` (the current step's start or end), for a rollback
 * that continues the data there; false if it is neither. */
bool curric_cursor_at(const curriculum_t *c, int64_t sample, curric_cursor_t *out);
void curric_set_cursor(curriculum_t *c, const curric_cursor_t *cur, int64_t sample);
/* Checkpoint state: the cursor (and the stage, for the record) into / from st. */
void curric_save_state(const curriculum_t *c, struct ckpt_state *st);
void curric_load_state(curriculum_t *c, const struct ckpt_state *st, int64_t sample_pos);
#endif
