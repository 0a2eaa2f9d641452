/* deadline.h — the end of the job, and stopping before it: the end time comes from &run
 * time_limit_min (minutes from the start), else LLMT_JOB_END_TIME (seconds since the epoch, what
 * a launcher may export), else the Slurm job's end time (squeue, for SLURM_JOB_ID). After each
 * step the run stops — a checkpoint, then exit 75 like a stop signal — once the time left is
 * less than one more step plus a save (the longest measured so far, with 10% and 5 s to spare),
 * so a time-limited job never loses the work since its last checkpoint.
 * Owns: the end time, the margin, the warning about a Slurm signal margin that is too short.
 * Uses: MPI (through parallel/comm), core/. Used by: train/trainer. */
#ifndef LLMT_DEADLINE_H
#define LLMT_DEADLINE_H
#include <mpi.h>
#include <stdbool.h>
#include "config/config.h"

typedef struct deadline {
    double end;        /* the job's end, seconds since the epoch; 0 = unknown (never stops) */
    char source[160];  /* where `end` came from, for the startup line */
    double save_s;     /* the longest checkpoint save measured, or the estimate until one is */
    bool save_measured;
    double step_s;     /* the longest step so far */
    double signal_margin_s; /* LLMT_SIGNAL_MARGIN_S (the jobscript's --signal=USR1@N); 0 = unknown */
    bool warned;
} deadline_t;

/* Rank 0 finds the end time, every rank gets it (collective). `ckpt_bytes` sizes the save
 * estimate used until a save has been timed: 5 s + ckpt_bytes at 100 MB/s. Prints one line. */
void deadline_init(deadline_t *d, const config_t *cfg, double ckpt_bytes, MPI_Comm world);
void deadline_note_step(deadline_t *d, double seconds);
void deadline_note_save(deadline_t *d, double seconds);
/* Seconds until the job's end (meaningful when d->end > 0). */
double deadline_left_s(const deadline_t *d);
/* Seconds the run needs before the end to stop safely (a step, a save, and the spare). */
double deadline_margin(const deadline_t *d);
/* Whether to stop now (on the calling rank's clock: the trainer asks rank 0 and shares its
 * verdict with the stop-signal check). Also warns once (rank 0) when the Slurm signal would come
 * too late for a save. */
bool deadline_due(deadline_t *d, int world_rank);
/* Parse Slurm's time format ("2026-12-01T15:09:29", local time) into seconds since the epoch;
 * 0 when it is not such a time ("Unknown", "NONE"). */
double deadline_parse_slurm_time(const char *text);
#endif
