/* checkpointing.h — when and where checkpoints are written and which one a run resumes from
 * (the file format itself is io/checkpoint). Files live in &checkpoint dir (default: the run
 * directory) as ckpt_stepNNNNNNNN.h5, with a `latest` pointer (a one-line text file, replaced
 * atomically) and only the newest `keep` files kept. A save first checks the free space, writes
 * "<name>.tmp", flushes and renames, then moves `latest`: a failed or killed save leaves every
 * earlier checkpoint and the pointer intact. resume = 'auto' tries `latest`, then older files
 * newest first, refusing (with a message) any that fail to load or verify; resume = path loads
 * exactly that file. Also owns the SIGUSR1/SIGTERM flag. Uses: train/trainer, io/checkpoint.
 * Used by: train/trainer. */
#ifndef LLMT_CHECKPOINTING_H
#define LLMT_CHECKPOINTING_H
#include <stdbool.h>
#include "train/trainer.h"

/* Write a checkpoint of the current step; `why` appears in the log ("every", "final",
 * "signal"). Returns 0, or -1 after reporting why it could not be written (nothing lost). */
int ckpt_write_now(trainer_t *tr, const char *why);
/* Before the model exists: the global batch of the checkpoint a resume would start from, or 0
 * (resume = 'none', nothing to resume, or unreadable). */
int64_t ckpt_resume_global_batch(const config_t *cfg, const char *run_dir);
/* Load the checkpoint &checkpoint resume asks for into the trainer (model, AdamW state, step,
 * data position). Returns true if a checkpoint was loaded. */
bool ckpt_resume(trainer_t *tr);
/* The checkpoint directory of a run. */
void ckpt_dir_of(const config_t *cfg, const char *run_dir, char *out, size_t len);

/* SIGUSR1 / SIGTERM: remembered, acted on at the next step boundary by every rank together. */
void stop_signals_install(void);
/* Collective: whether any rank received a stop signal (and which). 0 if none. */
int stop_signal_pending(MPI_Comm world);
#endif
