/* perfplan.h — `llmtrain --plan IN.nml --machine M.nml [--search N] [--json]`: the performance
 * model's prediction for the namelist's grid as a table of its parts (train/perfmodel.h), or
 * the search over grids for N devices: every valid (dp, cp, tp, pp, virtual_stages, micro_batch,
 * recompute, zero_stage, schedule, sequence_parallel) for the namelist's model and global batch
 * (cp where the ring allows it: config_cp_error), timed by the model, memory planned for the
 * fastest until the best few that fit are known; the best printed with their figures, and why
 * the others lose (memory, bubble, communication, recomputation, smaller products). --json: one JSON object (the grid keys, step_s, tokens_per_s,
 * tflops_per_device, mfu, memory_gib_per_device, fits, parts; with --search a `candidates` list
 * of such objects, best first).
 * Owns: nothing. Uses: train/perfmodel, train/machine, train/planner, train/schedule, config/.
 * Used by: main. */
#ifndef LLMT_PERFPLAN_H
#define LLMT_PERFPLAN_H
#include <stdbool.h>
#include "config/config.h"
#include "train/machine.h"

/* The prediction for cfg on mc; an exit code: 0 when it fits, 2 when it does not or the grid
 * cannot run there (the message names the key; the smallest change that fits is suggested). */
int perfplan_print(const config_t *cfg, const machine_t *mc, bool json);
/* The search for `devices` devices; 0, or 2 when no configuration fits (with the smallest
 * change that would make one) or none is valid. */
int perfplan_search(const config_t *cfg, const machine_t *mc, int devices, bool json);
#endif
