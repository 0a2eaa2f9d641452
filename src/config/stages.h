/* stages.h — the &stage groups and data mixtures of a namelist: their meaning, their syntax and
 * the checks that need more than one key. The run-time side is train/curriculum.h (the stage
 * plan, switching at boundaries) and io/mixture.h (which source each sample comes from).
 * Owns: the mixture syntax, the checks of the stages against each other and against &model /
 * &train, the names of the &stage keys. Uses: config.h, core/error.h. Used by: config_schema.c,
 * config_checks.c, config_load.c, config_echo.c (never config.c or config.h: the configuration's
 * table and type do not depend on the stages' checks), train/curriculum, io/mixture.
 *
 * A &stage group sets, for a contiguous range of optimizer steps, any of:
 *   until_step / until_tokens  where the stage ends: after that many optimizer steps, or at the
 *                  first step whose tokens seen reach that count (one kind for all stages; each
 *                  larger than the previous one; only the last stage may omit it: it then runs
 *                  to &train max_steps, and so does a last stage whose end is not reached)
 *   seq_len        <= &model seq_len (the activations are sized once for that)
 *   global_batch   a multiple of micro_batch * dp (the accumulation steps change)
 *   train_files / mixture   the data (one of them), as in &data
 *   lr, min_lr, warmup_steps, lr_schedule   setting any of them gives the stage its own schedule
 *                  over its own steps (warmup_steps from the stage's first step, default 0;
 *                  decay to its last step; lr, min_lr, lr_schedule, decay_fraction not set come
 *                  from &train); setting none follows &train's schedule over the whole run
 * A key a stage does not set comes from &model / &train / &data (not from the previous stage).
 *
 * A mixture is 'PATTERNS:WEIGHT, PATTERNS:WEIGHT, ...': comma-separated sources, each one or
 * more glob patterns (blank-separated, as in train_files) and a weight >= 0 after the last ':';
 * the weights must sum to a positive number (they are normalised). */
#ifndef LLMT_STAGES_H
#define LLMT_STAGES_H
#include <stdbool.h>
#include <stddef.h>
#include "config/config.h"

#define MIX_MAX_SOURCES 16

typedef struct mix_spec {
    int n;
    char patterns[MIX_MAX_SOURCES][CFG_STR];
    double weight[MIX_MAX_SOURCES];   /* as written */
} mix_spec_t;

/* Parse a mixture text. 0, or -1 with what is wrong in err (no position: the caller adds it). */
int mixture_parse(const char *text, mix_spec_t *out, char *err, size_t errlen);
/* Index of a &stage key in cfg_stage_t.key_line (STAGE_*), or -1. */
int stage_key_index(const char *key);
/* Whether the key was set in the stage's group. */
bool stage_sets(const cfg_stage_t *st, int key);
/* Every stage names its own data (so &data may leave train_files and mixture unset). */
bool stages_have_data(const config_t *cfg);
/* The checks of the &stage groups (after the derived keys are resolved). 0, or -1 with
 * "path:line:col: &stage KEY: what is wrong" in msg. */
int stages_check(const config_t *cfg, char *msg, size_t msgsize);
#endif
