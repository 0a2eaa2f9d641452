/* runinfo.h — the run's provenance, gathered once at startup: the build (core/provenance), and
 * the run: its id, directory, start time and step, the grid, every rank's host (gathered), the
 * Slurm job id / step / restart count, the loaded environment modules, the effective namelist.
 * Every rank holds the same record (rank 0's, broadcast): checkpoints write it collectively as
 * attributes of /provenance. Rank 0 writes it as <run dir>/run.json (atomically; replaced at
 * each start, so it describes the latest one) and as the first record of this start in
 * metrics.jsonl ("kind":"provenance"). Uses: core/provenance, core/fileio, parallel/comm,
 * config/. Used by: train/trainer. */
#ifndef LLMT_RUNINFO_H
#define LLMT_RUNINFO_H
#include <stdint.h>
#include "config/config.h"
#include "core/provenance.h"
#include "parallel/grid.h"

/* Collective over MPI_COMM_WORLD: fill *p (the same on every rank). */
void runinfo_collect(provenance_t *p, const config_t *cfg, const grid_t *g, const char *run_dir,
                     const char *run_id, int64_t start_step, const char *config_text);
/* Collective: rank 0 writes <run_dir>/run.json; a failure is one message and exit 2 on all. */
void runinfo_write_json(const provenance_t *p, const char *run_dir);
#endif
