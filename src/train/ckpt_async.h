/* ckpt_async.h — asynchronous checkpoints (&checkpoint async = .true., the default): a periodic
 * save costs the step only a snapshot of the rank's ZeRO partition (parameters or fp32 master,
 * both AdamW moments) into a host buffer kept for the run; a background thread writes the file
 * from it, through parallel HDF5 on a duplicate of MPI_COMM_WORLD of its own, while training
 * goes on. The file goes to "<name>.tmp" and is renamed when complete (io/checkpoint), then rank
 * 0 re-reads and verifies its attributes; only then, back on the main thread at a step boundary
 * (ckpt_async_poll) or where something must wait for it (ckpt_async_wait: the next save, a
 * weights file, a rollback, a stop signal, the end of the run), does it become the newest
 * (ckpt_save_commit: `latest`, pruning, the metrics record). A failed write is reported there
 * (ckpt_save_failed: a warning and a metrics record) and training goes on.
 * HDF5 is not thread-safe: while a write is in flight the main thread makes no HDF5 call (every
 * HDF5 user of the trainer waits first: checkpointing.c, trainer_step.c's gradient dump). The
 * writer's collectives are unwatched (comm_thread_unwatched); the main thread's wait for it is
 * watched with &checkpoint io_timeout_s. Needs MPI_THREAD_MULTIPLE (main.c asks for it).
 * Owns: the writer thread, its communicator and the snapshot. Uses: train/checkpointing,
 * train/flat, train/ckpt_memory, io/checkpoint, parallel/comm_host, parallel/watchdog, core/.
 * Used by: train/checkpointing, train/trainer*. */
#ifndef LLMT_CKPT_ASYNC_H
#define LLMT_CKPT_ASYNC_H
#include <stdbool.h>
#include "train/checkpointing.h"

/* Write a checkpoint of the current step; `why` appears in the log and metrics ("every",
 * "final", "signal"). A write still in flight is waited for first. Returns 0, or -1 after
 * reporting why it could not be written (on stderr and as a metrics record; nothing earlier is
 * lost). With the background writer (ck->async) a periodic save ("every") returns 0 once its
 * snapshot is taken: its outcome is reported when it completes (train/ckpt_async.h). */
int ckpt_write_now(ckpt_ctx_t *ck, const char *why);

/* Collective, at setup (after ckpt_staging_setup): the writer of ck's periodic saves, or NULL
 * (every save synchronous) when &checkpoint async is off, nothing saves periodically, or the MPI
 * library does not provide MPI_THREAD_MULTIPLE (one note from rank 0). The snapshot is
 * allocated and touched here, so training's memory includes it from the first step. */
struct ckpt_async *ckpt_async_create(const ckpt_ctx_t *ck);
/* Collective: wait for a write in flight (and report it), then free everything; NULL is fine. */
void ckpt_async_destroy(ckpt_ctx_t *ck);
/* Collective: snapshot the save s (prepared by ckpt_save_prepare) and start its write; t0 is when
 * the step began to save (stall_s counts from it). Returns 0. */
int ckpt_async_start(ckpt_ctx_t *ck, const ckpt_save_t *s, double t0);
/* Whether a write is in flight (the same on every rank). */
bool ckpt_async_pending(const ckpt_ctx_t *ck);
/* Collective, cheap: when every rank's writer has finished, its outcome (1 committed, -1 failed
 * and reported); 0 while it runs or when none is in flight (then no communication at all). */
int ckpt_async_poll(ckpt_ctx_t *ck);
/* Collective: the same, waiting for the write to finish (0 when none is in flight). */
int ckpt_async_wait(ckpt_ctx_t *ck);
#endif
