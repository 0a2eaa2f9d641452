/* checkpointing.h — when and where checkpoints are written and which one a run resumes from
 * (the file format itself is io/checkpoint). Files live in &checkpoint dir (default: the run
 * directory) as ckpt_stepNNNNNNNN.h5, with a `latest` pointer (a one-line text file, replaced
 * atomically). A save first checks the free space, writes "<name>.tmp", flushes, renames and
 * fsyncs the directory, then moves `latest` and prunes: only checkpoints of this run's lineage
 * (rundir.h) are deleted, never the one just written, so a failed or killed save, or a fresh
 * run beside an older one, loses nothing. `keep` keeps the run's own history first (the file
 * just written and the chain of files it continues from: parent_seq / parent_step), then the
 * lineage's most recently saved files (save_seq); files that cannot be read or verified, or that
 * this run's resume refused, count for nothing and are left in place (one warning). A save that fails (no space, a
 * write error inside HDF5, a file that cannot be created) is abandoned on every rank, its .tmp
 * removed, and reported; the caller decides whether training goes on.
 * resume = 'auto' tries the files of the directory's lineage (its `lineage` file, else that of
 * the file `latest` names) most recently saved first, refusing (with a message) any that fail to
 * load or verify; none yet of a lineage the `lineage` file names (a fresh run requeued before
 * its first save): step 0 in that lineage. resume = path loads exactly that file (any problem:
 * exit 2). The choice is made before the model exists, so the global
 * batch of the file actually used sets the batch geometry.
 * Saves are started by train/ckpt_async's ckpt_write_now: periodic ones (&checkpoint async)
 * written there by a background thread, the others synchronously here (ckpt_save_sharded).
 * The SIGUSR1/SIGTERM flag is train/stop_signals (included here for the trainer). Works on the trainer's state through ckpt_ctx_t (the parts a
 * checkpoint holds or a save touches), never on the trainer itself. Uses: train/flat,
 * train/curriculum, train/optimizer, train/zero, train/loss_scale, train/deadline, train/rundir,
 * io/checkpoint, io/metrics, parallel/comm. Used by: train/trainer, train/trainer_anomaly (a
 * rollback), train/trainer_report (the progress), main. */
#ifndef LLMT_CHECKPOINTING_H
#define LLMT_CHECKPOINTING_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"
#include "core/provenance.h"
#include "io/checkpoint.h"
#include "io/metrics.h"
#include "model/gpt.h"
#include "parallel/grid.h"
#include "train/curriculum.h"
#include "train/deadline.h"
#include "train/flat.h"
#include "train/loss_scale.h"
#include "train/optimizer.h"
#include "train/rundir.h"
#include "train/stop_signals.h"
#include "train/zero.h"

/* Where training stands: what a checkpoint records of the run's progress and a resume or a
 * rollback restores. */
typedef struct ckpt_progress {
    int64_t step;               /* optimizer steps taken */
    int64_t skipped;            /* steps whose update was discarded (an anomaly's 'skip') */
    int64_t tokens_seen;
    int64_t sample_pos;         /* global index of the next training sample */
    int64_t last_ckpt_step;     /* step of the newest checkpoint written or resumed (-1: none) */
    char last_ckpt_path[700];   /* ... its file, which an anomaly rollback reloads */
} ckpt_progress_t;

/* What checkpointing reads and writes of a run: pointers into the trainer's state, set once at
 * setup (the model and optimizer exist only after ckpt_resume_find, which uses the rest). */
typedef struct ckpt_ctx {
    const config_t *cfg;
    const grid_t *grid;
    const ops_t *ops;
    gpt_t *model;
    adamw_t *opt;
    zero_t *zero;
    loss_scaler_t *scaler;
    curriculum_t *curric;       /* the data cursor */
    rundir_t *rd;               /* directories, lineage, refused files */
    metrics_t *metrics;
    deadline_t *deadline;       /* told how long a save took */
    const provenance_t *provenance;
    const char *config_text;    /* the effective namelist, stored in the files */
    const MPI_Info *io_hints;   /* MPI-IO hints (set by main after setup) */
    const int *global_batch;    /* the current stage's */
    ckpt_progress_t *prog;
    size_t staging_floats;      /* &checkpoint staging_mb, in floats (ckpt_staging_setup) */
    double train_peak_mib;      /* the largest resident size of any rank in training so far */
    struct ckpt_async *async;   /* the background writer (train/ckpt_async), NULL: every save
                                   synchronous (&checkpoint async = .false., or no
                                   MPI_THREAD_MULTIPLE) */
} ckpt_ctx_t;

/* Collective: &checkpoint staging_mb checked against this rank's tensors (one row of the widest)
 * and the node's free memory: one message naming staging_mb, exit 2; else its size in
 * ck->staging_floats. Before anything reads or writes a checkpoint. */
void ckpt_staging_setup(ckpt_ctx_t *ck);
/* The staging buffer for a range of n floats: the configured size, or less when n is less (the
 * floats it holds in *floats); xfree it. */
float *ckpt_staging_alloc(const ckpt_ctx_t *ck, size_t n, size_t *floats);
/* A load into the run's model and optimizer (ckpt_load_io on io, then flat_load_finish(f)): f over
 * its flat buffers, io over this rank's range (its ZeRO partition, all without ZeRO; the partition
 * group: dp, or the expert-data-parallel group with ep) through a staging buffer of the configured
 * size, which is returned (xfree it once the load is done). f must outlive io. */
float *ckpt_flat_load_begin(const ckpt_ctx_t *ck, flat_io_t *f, ckpt_io_t *io);


/* One save, from its decision to its outcome (shared with train/ckpt_async). */
typedef struct ckpt_save {
    char path[700];
    const char *why;            /* "every", "final", "signal", "time limit" */
    int64_t step;
    bool async;                 /* written by the background thread */
    ckpt_meta_t meta;
    ckpt_state_t st;            /* the run's state at the step, as the file records it */
    double written;             /* bytes of tensor data */
    double stall_s;             /* the step's wait: the previous write, the space check, the
                                   snapshot (synchronous: the whole save) */
    double write_s;             /* the write itself, file created to file verified */
    double peak[2];             /* the largest resident size of any rank in training, in the save */
} ckpt_save_t;
/* Collective: the file name, meta and state of a save of the current step, after the space check
 * (0); or -1 after reporting why not (ckpt_save_failed). */
int ckpt_save_prepare(ckpt_ctx_t *ck, const char *why, ckpt_save_t *s);
/* Collective: a save written and verified becomes the newest: `latest`, pruning, the run's
 * history, the line on stdout and the metrics record (stall_s, write_s, mib_per_s). */
void ckpt_save_commit(ckpt_ctx_t *ck, const ckpt_save_t *s);
/* A save that failed: the message (rank 0) and a metrics record; nothing else changes. */
void ckpt_save_failed(ckpt_ctx_t *ck, const ckpt_save_t *s, const char *msg);
/* Collective: the synchronous write of a checkpoint (every rank its partition through the
 * staging buffer), with the peaks: training's in peak[0], the save's in peak[1]. 0, or -1 with
 * the reason in msg. */
int ckpt_save_sharded(ckpt_ctx_t *ck, const char *path, const ckpt_meta_t *meta,
                      const ckpt_state_t *st, double *written, double peak[2], char *msg, size_t len);

/* What this rank's replica writes of a checkpoint (io/checkpoint.h CKPT_OWNS_*): the dense
 * tensors on dp rank 0, the expert tensors on every ep rank's first replica. */
int ckpt_owner(const grid_t *g);

/* What a rank writes within its ZeRO partition (io/checkpoint.h CKPT_OWNS_*): the expert tensors
 * it holds, and the dense ones unless another ep rank holds the same. */
int ckpt_save_owner(const zero_t *z);
/* Collective: whether `need` bytes can be written in dir right now (free space, then a real
 * allocation, which also meets quotas and file-size limits); 0 with the reason in msg if not.
 * Checkpoints and weights files call it before any HDF5 call. */
int ckpt_reserve_space(const char *dir, double need, char *msg, size_t len);
/* The verified contents of the checkpoint a resume starts from, read before the model exists. */
typedef struct ckpt_resumed {
    bool found;
    char path[700];
    size_t total;
    ckpt_state_t state;
    ckpt_meta_t meta;
    double seconds, mib;   /* how long reading and verifying took, and how much */
    double peak_rss_mib;   /* the largest resident size of any rank while it was loaded */
} ckpt_resumed_t;
/* Collective: choose, read and verify the checkpoint &checkpoint resume asks for (nothing when
 * resume = 'none' or 'auto' finds none that verifies). Verifying streams every rank's partition
 * through the staging buffer and keeps nothing: ckpt_resume_apply reads it again into the model. */
void ckpt_resume_find(ckpt_ctx_t *ck, ckpt_resumed_t *res);
/* A requeued Slurm job (SLURM_RESTART_COUNT > 0) whose namelist does not set &checkpoint resume
 * continues from its newest checkpoint (resume = 'auto'): starting over would log step 1 again
 * and rotate the good checkpoints away. Called once after config_load, before the echo. */
void ckpt_resume_default(config_t *cfg, int world_rank);
/* Read the file ckpt_resume_find chose into the model and optimizer, piece by piece (each rank
 * its partition), and apply its state (step, data position, lineage). */
void ckpt_resume_apply(ckpt_ctx_t *ck, ckpt_resumed_t *res);

/* Collective: a weights file of the parameters (no write may be in flight: ckpt_async_wait) (the fp32 master with bf16/fp16) at `path`, each
 * rank its ZeRO partition through the staging buffer. 0, or -1 with one message in msg. */
int ckpt_write_weights_sharded(ckpt_ctx_t *ck, const char *path, const ckpt_meta_t *meta, char *msg,
                               size_t len);
/* Collective (no write in flight: ckpt_async_wait): reload the newest checkpoint this run wrote or resumed from (last_ckpt_path) into
 * the model and optimizer, as a resume would (step, counters, sample_pos, fp16 scaler): the
 * anomaly rollback. 0, or -1 with the reason in msg and nothing changed (the file is verified
 * before anything is applied). */
int ckpt_rollback(ckpt_ctx_t *ck, char *msg, size_t len);

#endif
