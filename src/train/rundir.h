/* rundir.h — a run directory belongs to one run.
 * Owns: creating the run directory (out_dir/name) and the checkpoint directory at startup and
 * proving them writable on the ranks that write (not at the first save hours later); the lock
 * that keeps a second concurrent run out; the refusal to start a fresh run over an older run's
 * files; the run's lineage id. Uses: parallel/comm, io/checkpoint (peek), core/. Used by:
 * train/trainer, train/checkpointing.
 *
 * The lock is the file <dir>/.llmtrain.lock, created exclusively by rank 0 and holding the
 * owner's host, pid, Slurm job id, the job's restart count and start time. A background thread
 * of rank 0 touches it every RUNDIR_HEARTBEAT_S seconds. A lock is stale (taken over, with a
 * warning naming its old owner) when its heartbeat is older than RUNDIR_STALE_S, when it names a
 * process on this host that no longer exists, or when it names an earlier run of this Slurm job
 * (a requeued job: a lower SLURM_RESTART_COUNT; Slurm ended that run before the requeue);
 * otherwise the run refuses to start with a message naming the owner. A lock of this very job
 * run (a second llmtrain started in the same allocation) is live like any other. The lock is
 * removed when the run ends.
 *
 * Lineage: a fresh start draws a run_id (hash of time, host, pid); a resumed run keeps the id
 * of the checkpoint it resumed from. Every checkpoint records it, and pruning deletes only
 * checkpoints of the run's own lineage (see checkpointing.c). The checkpoint directory's file
 * `lineage` names the lineage of the run that last started there, written as soon as the run
 * knows it (before its first save): a fresh run requeued before its first checkpoint continues
 * its own lineage (from step 0), not that of an older run whose files it was allowed to
 * overwrite. */
#ifndef LLMT_RUNDIR_H
#define LLMT_RUNDIR_H
#include <stdbool.h>
#include <stdint.h>
#include "config/config.h"
#include "io/checkpoint.h"

#define RUNDIR_HEARTBEAT_S 10
#define RUNDIR_STALE_S 60
#define RUNDIR_PATH_MAX 600
#define RUNDIR_MAX_REFUSED 32

typedef struct rundir {
    char dir[RUNDIR_PATH_MAX];      /* out_dir/name */
    char ckpt_dir[RUNDIR_PATH_MAX]; /* &checkpoint dir, or dir */
    char run_id[CKPT_RUN_ID_LEN];   /* lineage of this run (set by rundir_open, replaced on resume) */
    int n_locks;                    /* rank 0: locks held (run dir, and checkpoint dir if other) */
    char lock_path[2][RUNDIR_PATH_MAX + 32];
    /* The run's place in the checkpoint directory's history (train/checkpointing.c), the same on
     * every rank: the save_seq of its last save (at start: the highest in the directory), and
     * what its next save continues from (parent_step -1: a fresh start). */
    int64_t last_seq, parent_seq, parent_step;
    /* rank 0: checkpoints this run's resume refused (they count for nothing when pruning), and
     * whether the unusable files were reported already */
    int n_refused;
    long long refused_step[RUNDIR_MAX_REFUSED];
    bool warned_unusable;
} rundir_t;

/* Collective. For mode = 'train': create both directories, check them writable (rank 0 creates
 * and removes a probe file; every rank checks access), take the locks, and draw a fresh run_id.
 * Other modes only name the directories. Any problem is one agreed message and exit 2. */
void rundir_open(rundir_t *rd, const config_t *cfg);
/* Collective: a run that will not resume (resume = 'none', or 'auto' that found nothing to
 * resume) must not replace an older run's checkpoints, weights or metrics unless &checkpoint
 * overwrite = .true.: exit 2 with a message listing what is there and the ways out. */
void rundir_check_fresh(const rundir_t *rd, const config_t *cfg);
/* Collective: rank 0 creates `dir` (mkdir -p) and proves it writable with a probe file, every
 * rank checks access; a problem is "<namelist>: cannot create the <what> <dir>: why" (or "is not
 * writable") once, and exit 2 on every rank. */
void rundir_prepare_dir(const char *dir, const char *what, const config_t *cfg);
/* Rank-local: the lineage the checkpoint directory's `lineage` file names into id; 0, or -1 when
 * there is none (a directory of an older version) or it cannot be read. */
int rundir_read_lineage(const rundir_t *rd, char *id, size_t len);
/* Rank 0: record rd->run_id as the checkpoint directory's lineage (atomic replace); a failure is
 * a warning (resume = 'auto' then goes by `latest`). */
void rundir_write_lineage(const rundir_t *rd);
/* Rank 0: remove the locks and stop the heartbeat. Safe to call twice. */
void rundir_close(rundir_t *rd);
#endif
