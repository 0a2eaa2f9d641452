/* checkpointing.c — checkpoint policy: save, keep, latest pointer, resume, stop signals (see
 * checkpointing.h). File-system housekeeping (pointer, pruning, free space, listing) is done by
 * rank 0 and its outcome broadcast, so every rank takes the same branch. */
#include "train/checkpointing.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/prof.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/thread.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "parallel/comm_host.h"
#include "parallel/watchdog.h"
#include "train/ckpt_memory.h"
#include "train/flat.h"
#include "train/rundir.h"

#define CKPT_PREFIX "ckpt_step"
#define PATH_LEN 700

static int world_rank(void) { return error_world_rank(); }

/* ---------------------------------------------------------------- directory listing */

typedef struct ckpt_file {
    long long step;  /* from the file name */
    ckpt_peek_t info; /* its attributes (lineage, recency), when listed with them */
    bool usable;     /* the attributes were read and verified */
    char why[COMM_MSG_MAX]; /* why not */
} ckpt_file_t;

static int by_step_descending(const void *a, const void *b) {
    long long x = ((const ckpt_file_t *)a)->step, y = ((const ckpt_file_t *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Most recently saved first: save_seq, then the step (files written before save_seq existed
 * have 0 and keep the order of their steps, after every newer file). */
static int by_recency(const void *a, const void *b) {
    const ckpt_file_t *x = a, *y = b;
    if (x->info.save_seq != y->info.save_seq) return x->info.save_seq < y->info.save_seq ? 1 : -1;
    return by_step_descending(a, b);
}

static void ckpt_name(char *out, size_t len, const char *dir, long long step) {
    snprintf(out, len, "%s/" CKPT_PREFIX "%08lld.h5", dir, step);
}

/* The step in a checkpoint file's name, or -1. */
static long long step_of_name(const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    long long s;
    char tail[8];
    if (sscanf(base, CKPT_PREFIX "%lld.h%7s", &s, tail) != 2 || strcmp(tail, "5") != 0) return -1;
    return s;
}

/* Every complete checkpoint file in dir (by name), newest step first; `with_info`: each file's
 * attributes peeked and verified (rank 0 only; the caller frees the array). */
static ckpt_file_t *list_checkpoints(const char *dir, int *n_out, bool with_info) {
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int n = 0, cap = 0;
    ckpt_file_t *list = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long s = step_of_name(e->d_name);
        if (s < 0) continue;
        if (n == cap) list = xrealloc_small(list, sizeof *list * (size_t)(cap = cap ? 2 * cap : 64));
        memset(&list[n], 0, sizeof list[n]);
        list[n++].step = s;
    }
    closedir(d);
    if (n > 1) qsort(list, (size_t)n, sizeof *list, by_step_descending); /* list is NULL when n = 0 */
    for (int i = 0; with_info && i < n; i++) {
        char path[PATH_LEN];
        ckpt_name(path, sizeof path, dir, list[i].step);
        list[i].usable = ckpt_peek(path, &list[i].info, list[i].why, sizeof list[i].why) == 0;
    }
    *n_out = n;
    return list;
}

/* The highest save_seq of any file in dir (rank 0). */
static int64_t highest_seq(const ckpt_file_t *list, int n) {
    int64_t top = 0;
    for (int i = 0; i < n; i++)
        if (list[i].info.save_seq > top) top = list[i].info.save_seq;
    return top;
}

/* ---------------------------------------------------------------- memory and staging */

void ckpt_staging_setup(ckpt_ctx_t *ck) {
    const config_t *cfg = ck->cfg;
    params_t P;
    flat_rank_registry(&P, cfg, ck->grid);
    const double floats = cfg->ckpt_staging_mb * 1048576.0 / sizeof(float);
    unsigned long long row = ckpt_staging_min_floats(&P.ckpt);
    params_destroy(&P);
    double avail = world_rank() == 0 ? ckpt_available_mib() : 0;
    comm_bcast(&avail, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, "checkpoint staging");
    comm_allreduce(&row, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, "checkpoint staging");
    if (floats < (double)row)
        fatal_user("&checkpoint staging_mb = %g holds %.0f floats, less than one row of the widest "
                   "tensor (%llu floats = %.4f MiB): give at least %.4f", cfg->ckpt_staging_mb,
                   floor(floats), row, (double)row * sizeof(float) / 1048576.0,
                   (double)row * sizeof(float) / 1048576.0);
    if (avail >= 0 && cfg->ckpt_staging_mb > avail)
        fatal_user("&checkpoint staging_mb = %g MiB is more than the node's free memory (%.0f MiB "
                   "available): give less", cfg->ckpt_staging_mb, avail);
    ck->staging_floats = (size_t)floats;
}

float *ckpt_staging_alloc(const ckpt_ctx_t *ck, size_t n, size_t *floats) {
    *floats = n < ck->staging_floats ? (n > 0 ? n : 1) : ck->staging_floats;
    return xmalloc(*floats * sizeof(float));
}

/* The communicator of the ranks among which ZeRO partitions the flat buffer (zero.h). */
static MPI_Comm partition_comm(const grid_t *g) { return g->ep > 1 ? g->edp_comm : g->dp_comm; }

float *ckpt_flat_load_begin(const ckpt_ctx_t *ck, flat_io_t *f, ckpt_io_t *io) {
    *f = (flat_io_t){.z = ck->zero, .opt = ck->opt, .m = ck->model, .ops = ck->ops};
    size_t floats, lo, hi;
    flat_load_range(ck->zero, &lo, &hi);
    float *staging = ckpt_staging_alloc(ck, hi - lo, &floats);
    flat_load_io(io, f, partition_comm(ck->grid), staging, floats);
    return staging;
}

/* ---------------------------------------------------------------- saving */

/* Rank 0 makes sure `need` bytes can really be written in `dir` before any HDF5 call: the free
 * space (statvfs, for a message with numbers), then a reservation file of that size allocated
 * with fallocate(2), which also meets quotas (EDQUOT) and file-size limits (EFBIG) that
 * statvfs cannot see. The reservation is removed again at once: what is proven is that the
 * space was there a moment before the save. Every rank learns the verdict.
 * Why before HDF5: parallel HDF5 reports a write error inside a collective save, but closing
 * such a file can leave the ranks in different collectives of the library (its metadata flush
 * skips a synchronisation point on the rank that failed), i.e. a hang that only the watchdog's
 * io_timeout_s ends. A failure found here costs nothing and the run goes on. File systems
 * without fallocate (EOPNOTSUPP) get the statvfs check alone. */
int ckpt_reserve_space(const char *dir, double need, char *msg, size_t len) {
    char text[COMM_MSG_MAX] = "";
    if (world_rank() == 0) {
        struct statvfs st;
        double avail = statvfs(dir, &st) == 0 ? (double)st.f_bavail * (double)st.f_frsize : 1e300;
        char path[PATH_LEN];
        snprintf(path, sizeof path, "%s/.llmtrain.reserve", dir);
        int fd = -1, err = 0;
        if (avail < need)
            snprintf(text, sizeof text, "the file system of %s has %.1f MiB free but the file "
                     "needs %.1f MiB", dir, avail / 1048576.0, need / 1048576.0);
        else if ((fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600)) < 0)
            snprintf(text, sizeof text, "cannot create a file in %s: %s", dir, strerror(errno));
        else if (fallocate(fd, 0, 0, (off_t)need) != 0 && (err = errno) != EOPNOTSUPP && err != ENOSYS)
            snprintf(text, sizeof text, "%.1f MiB cannot be allocated in %s: %s", need / 1048576.0,
                     dir, strerror(err));
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
    }
    comm_bcast(text, (int)sizeof text, MPI_CHAR, 0, MPI_COMM_WORLD, "checkpoint space check");
    if (text[0] == '\0') return 1;
    snprintf(msg, len, "%s", text);
    return 0;
}

/* Replace dir/latest by a file naming `file`, atomically (rank 0). */
static int write_latest(const char *dir, const char *file) {
    char path[PATH_LEN], line[PATH_LEN];
    snprintf(path, sizeof path, "%s/latest", dir);
    int n = snprintf(line, sizeof line, "%s\n", file);
    return file_write_atomic(path, line, (size_t)n);
}

/* Whether this run's resume refused the file of `step` (rank 0). */
static bool was_refused(const rundir_t *rd, long long step) {
    for (int i = 0; i < rd->n_refused; i++)
        if (rd->refused_step[i] == step) return true;
    return false;
}

/* Once per run: the checkpoint files that cannot be used (unreadable, attributes damaged or
 * edited, refused by this run's resume). They count for nothing toward `keep` and are left
 * where they are: deleting evidence is the user's decision. */
static void warn_unusable(rundir_t *rd, const ckpt_file_t *list, int n, const char *dir) {
    int bad = 0, first = -1;
    for (int i = 0; i < n; i++)
        if (!list[i].usable) bad++, first = first < 0 ? i : first;
    if (!bad || rd->warned_unusable) return;
    rd->warned_unusable = true;
    fprintf(stderr, "llmtrain: warning: %d checkpoint file%s in %s cannot be used and %s left in "
            "place, not counted toward &checkpoint keep (delete %s when no longer needed):", bad,
            bad > 1 ? "s" : "", dir, bad > 1 ? "are" : "is", bad > 1 ? "them" : "it");
    for (int i = 0, shown = 0; i < n && shown < 8; i++)
        if (!list[i].usable) fprintf(stderr, " " CKPT_PREFIX "%08lld.h5", list[i].step), shown++;
    fprintf(stderr, "%s; first: %s\n", bad > 8 ? " ..." : "", list[first].why);
}

/* Keep the newest `keep` usable checkpoints of this run's lineage, by the run's own history
 * first: the file just written and the chain of checkpoints it continues from (its parent, the
 * parent's parent: the file this run resumed from and what led to it), then the lineage's other
 * files most recent first (a branch abandoned when an earlier run resumed from an older file).
 * The rest of the lineage is deleted, never `just_written`; other lineages' files and unusable
 * files are never touched; leftovers of killed saves are removed (rank 0). */
static void prune(rundir_t *rd, const char *dir, int keep, long long just_written) {
    int n;
    ckpt_file_t *list = list_checkpoints(dir, &n, true);
    char path[PATH_LEN];
    for (int i = 0; i < n; i++)
        if (list[i].usable && list[i].step != just_written && was_refused(rd, list[i].step)) {
            list[i].usable = false;
            snprintf(list[i].why, sizeof list[i].why, "refused when this run resumed");
        }
    warn_unusable(rd, list, n, dir);
    if (n > 1) qsort(list, (size_t)n, sizeof *list, by_recency);
    /* rank[i]: position in the order of keeping (chain first), 0 = not ours */
    snprintf(path, sizeof path, "%s/latest", dir); /* for the fsync below when nothing is removed */
    int *rank = xcalloc((size_t)(n > 0 ? n : 1), sizeof *rank), next = 1;
    long long step = just_written;
    int64_t seq = rd->last_seq;
    for (int hops = 0; hops < n && step >= 0; hops++) {
        int at = -1;
        for (int i = 0; i < n && at < 0; i++)
            if (list[i].usable && !rank[i] && list[i].step == step && list[i].info.save_seq == seq &&
                strcmp(list[i].info.run_id, rd->run_id) == 0)
                at = i;
        if (at < 0) break;
        rank[at] = next++;
        step = list[at].info.parent_step;
        seq = list[at].info.parent_seq;
    }
    for (int i = 0; i < n; i++)
        if (list[i].usable && !rank[i] && strcmp(list[i].info.run_id, rd->run_id) == 0) rank[i] = next++;
    for (int i = 0; i < n; i++) {
        if (!rank[i] || rank[i] <= keep || list[i].step == just_written) continue;
        ckpt_name(path, sizeof path, dir, list[i].step);
        if (unlink(path) != 0)
            fprintf(stderr, "llmtrain: warning: could not remove old checkpoint %s: %s\n", path,
                    strerror(errno));
    }
    xfree(rank);
    free(list);
    /* a .tmp is a save that never finished (the run's lock means nobody else is writing) */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, CKPT_PREFIX, strlen(CKPT_PREFIX)) && len > 7 &&
            !strcmp(e->d_name + len - 7, ".h5.tmp")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    if (d) closedir(d);
    fsync_dir_of(path);
}

void ckpt_save_failed(ckpt_ctx_t *ck, const ckpt_save_t *s, const char *msg) {
    char esc[2048];
    if (world_rank() == 0) {
        fprintf(stderr, "llmtrain: error: checkpoint at step %lld (%s) not written: %s%s; earlier "
                "checkpoints are intact%s\n", (long long)s->step, s->why, msg,
                s->async ? " (a background write)" : "", strcmp(s->why, "every") == 0 ? "; training goes on" : "");
        fflush(stderr);
    }
    json_escape(esc, sizeof esc, msg);
    metrics_write(ck->metrics, "\"step\":%lld,\"checkpoint\":\"%s\",\"failed\":true,\"async\":%s,"
                  "\"error\":\"%s\"", (long long)s->step, s->why, s->async ? "true" : "false", esc);
}

/* The model the namelist describes, for the files' attributes and the checks on load. */
static ckpt_meta_t model_meta(const ckpt_ctx_t *ck) {
    const config_t *cfg = ck->cfg;
    ckpt_meta_t meta = {ck->prog->step, cfg->seed, cfg->vocab_size, config_padded_vocab(cfg),
                        cfg->n_layer, cfg->n_head, cfg->d_model, cfg->d_ff, cfg->seq_len,
                        ck->config_text, "", ck->provenance};
    snprintf(meta.run_id, sizeof meta.run_id, "%s", ck->rd->run_id);
    return meta;
}

int ckpt_owner(const grid_t *g) {
    return (g->rank_dp == 0 ? CKPT_OWNS_DENSE : 0) | (g->rank_edp == 0 ? CKPT_OWNS_EXPERTS : 0);
}

/* The tensors a rank writes within its partition: the expert tensors it holds, and the dense
 * ones unless another ep rank holds the same (with expert parallelism ep rank 0 writes them). */
int ckpt_save_owner(const zero_t *z) {
    return CKPT_OWNS_EXPERTS | (z->ep <= 1 || z->rank_ep == 0 ? CKPT_OWNS_DENSE : 0);
}

/* A collective write of the parameters (and, with st, the moments: a checkpoint) to path: every
 * rank its ZeRO partition, piece by piece through the staging buffer, straight from where they
 * live. *peak_rss: this rank's largest resident size sampled between the pieces. */
static int write_sharded(ckpt_ctx_t *ck, const char *path, MPI_Info info, const ckpt_meta_t *meta,
                         const ckpt_state_t *st, double *written, double *peak_rss, char *msg, size_t len) {
    zero_t *z = ck->zero;
    adamw_finish(ck->opt); /* an offloaded update still in flight: done and uploaded */
    size_t floats;
    float *staging = ckpt_staging_alloc(ck, z->hi - z->lo, &floats);
    flat_io_t f = {.z = z, .opt = ck->opt, .m = ck->model, .ops = ck->ops};
    ckpt_io_t io;
    flat_save_io(&io, &f, ckpt_save_owner(z), staging, floats);
    const char *what = st ? "checkpoint write" : "weights write";
    watchdog_enter_for(what, "all ranks", ck->cfg->io_timeout_s);
    prof_begin(PROF_CHECKPOINT, what, -1, -1);
    int rc = ckpt_save_io(path, MPI_COMM_WORLD, info, &ck->model->P.ckpt, &io, meta, st, written, msg, len);
    prof_end(PROF_CHECKPOINT, 0);
    watchdog_leave();
    xfree(staging);
    *peak_rss = io.peak_rss_mib;
    return rc;
}

/* A checkpoint, with the peaks: training's (any rank's largest resident size before it, kept
 * over the run) in peak[0] and the save's (during it) in peak[1]. */
int ckpt_save_sharded(ckpt_ctx_t *ck, const char *path, const ckpt_meta_t *meta,
                      const ckpt_state_t *st, double *written, double peak[2], char *msg, size_t len) {
    const double before = ckpt_max_over_ranks(ckpt_hwm_mib());
    ck->train_peak_mib = before > ck->train_peak_mib ? before : ck->train_peak_mib;
    ckpt_peak_reset();
    double sampled;
    int rc = write_sharded(ck, path, *ck->io_hints, meta, st, written, &sampled, msg, len);
    const double during = ckpt_hwm_mib();
    peak[0] = ck->train_peak_mib;
    peak[1] = ckpt_max_over_ranks(during > sampled ? during : sampled);
    ckpt_peak_reset(); /* training's peak from here on */
    return rc;
}

int ckpt_write_weights_sharded(ckpt_ctx_t *ck, const char *path, const ckpt_meta_t *meta, char *msg,
                               size_t len) {
    double written, sampled;
    return write_sharded(ck, path, MPI_INFO_NULL, meta, NULL, &written, &sampled, msg, len);
}

int ckpt_save_prepare(ckpt_ctx_t *ck, const char *why, ckpt_save_t *s) {
    memset(s, 0, sizeof *s);
    s->why = why;
    s->step = ck->prog->step;
    ckpt_name(s->path, sizeof s->path, ck->rd->ckpt_dir, (long long)s->step);
    char msg[COMM_MSG_MAX + 64];
    if (!ckpt_reserve_space(ck->rd->ckpt_dir, ckpt_file_bytes(&ck->model->P.ckpt, true), msg, sizeof msg)) {
        ckpt_save_failed(ck, s, msg);
        return -1;
    }
    s->meta = model_meta(ck);
    s->st = (ckpt_state_t){.tokens_seen = ck->prog->tokens_seen, .sample_pos = ck->prog->sample_pos,
                           .adam_t = ck->opt->t, .skipped = ck->prog->skipped,
                           .global_batch = *ck->global_batch, .loss_scale = ck->scaler->scale,
                           .grid_dp = ck->grid->dp, .grid_tp = ck->grid->tp, .grid_pp = ck->grid->pp,
                           .ls_growth = ck->scaler->growth_tracker,
                           .ls_hysteresis = ck->scaler->hysteresis_tracker,
                           .ls_overflows = ck->scaler->overflows, .has_scaler = 1,
                           .save_seq = ck->rd->last_seq + 1, .parent_seq = ck->rd->parent_seq,
                           .parent_step = ck->rd->parent_step};
    curric_save_state(ck->curric, &s->st);
    return 0;
}

void ckpt_save_commit(ckpt_ctx_t *ck, const ckpt_save_t *s) {
    const char *dir = ck->rd->ckpt_dir;
    ck->prog->last_ckpt_step = s->step;
    ck->rd->last_seq = s->st.save_seq; /* the next save continues from this one */
    ck->rd->parent_seq = s->st.save_seq;
    ck->rd->parent_step = s->step;
    for (int i = 0; i < ck->rd->n_refused; i++) /* a refused file of this step was replaced */
        if (ck->rd->refused_step[i] == (long long)s->step) ck->rd->refused_step[i] = -1;
    deadline_note_save(ck->deadline, s->write_s);
    snprintf(ck->prog->last_ckpt_path, sizeof ck->prog->last_ckpt_path, "%s", s->path);
    const double mib = s->written / 1048576.0, rate = s->write_s > 0 ? mib / s->write_s : 0;
    if (world_rank() == 0) {
        const char *base = strrchr(s->path, '/') ? strrchr(s->path, '/') + 1 : s->path;
        if (write_latest(dir, base) != 0)
            fprintf(stderr, "llmtrain: warning: checkpoint %s written, but the 'latest' pointer "
                    "could not be updated: %s (resume = 'auto' still finds the newest file)\n",
                    s->path, strerror(errno));
        prune(ck->rd, dir, ck->cfg->ckpt_keep, (long long)s->step);
        printf("checkpoint: step %lld (%s) -> %s: %.1f MiB in %.2f s (%.0f MiB/s%s); training "
               "stalled %.3f s; peak memory %.0f MiB during the save, %.0f MiB in training\n",
               (long long)s->step, s->why, s->path, mib, s->write_s, rate,
               s->async ? ", in the background" : "", s->stall_s, s->peak[1], s->peak[0]);
        fflush(stdout);
    }
    comm_barrier(MPI_COMM_WORLD, "checkpoint housekeeping");
    metrics_write(ck->metrics, "\"step\":%lld,\"checkpoint\":\"%s\",\"ckpt_s\":%.4f,"
                  "\"ckpt_mib\":%.3f,\"async\":%s,\"stall_s\":%.4f,\"write_s\":%.4f,\"mib_per_s\":%.1f,"
                  "\"save_peak_rss_mib\":%.1f,\"train_peak_rss_mib\":%.1f,\"staging_mib\":%.3f",
                  (long long)s->step, s->why, s->write_s, mib, s->async ? "true" : "false", s->stall_s,
                  s->write_s, rate, s->peak[1], s->peak[0],
                  (double)ck->staging_floats * sizeof(float) / 1048576.0);
}

/* ---------------------------------------------------------------- choosing what to resume */

/* The lineage resume = 'auto' continues (rank 0): the one the directory's `lineage` file
 * names (the run that last started there, also before its first save), else that of the file
 * `latest` names, else none (every file is a candidate). */
static void auto_lineage(const ckpt_ctx_t *ck, const char *dir, const ckpt_file_t *list, int k,
                         char *lineage, size_t len) {
    lineage[0] = '\0';
    if (rundir_read_lineage(ck->rd, lineage, len) == 0) return;
    char path[PATH_LEN], line[PATH_LEN] = "";
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        long long step = strchr(line, '/') ? -1 : step_of_name(line);
        for (int i = 0; i < k && step >= 0 && !lineage[0]; i++)
            if (list[i].step == step && list[i].info.run_id[0])
                snprintf(lineage, len, "%s", list[i].info.run_id);
        if (!lineage[0])
            fprintf(stderr, "llmtrain: warning: resume: %s names '%s', which cannot be read; "
                    "trying the checkpoints in %s newest first\n", path, line, dir);
    }
    fclose(f);
}

/* The files resume would try, in order (rank 0 decides, every rank gets the list): for 'auto',
 * the checkpoints of the directory's lineage (auto_lineage), most recently saved first, after
 * the files whose attributes cannot be read or verified (their place in the history is not
 * known: one may be the newest; its load refuses it and says why, in a warning);
 * else the one path given. `lineage` gets the lineage 'auto' continues ("" when none is known,
 * the same on every rank). Free with free(). */
static char *resume_candidates(const ckpt_ctx_t *ck, const char *dir, int *n_out, char *lineage,
                               size_t lineage_len) {
    const config_t *cfg = ck->cfg;
    int n = 0;
    char *out = NULL;
    lineage[0] = '\0';
    if (world_rank() == 0) {
        if (strcmp(cfg->resume, "auto") != 0) {
            out = xrealloc_small(NULL, PATH_LEN);
            snprintf(out, PATH_LEN, "%s", cfg->resume);
            n = 1;
        } else {
            char path[PATH_LEN];
            int k, others = 0;
            ckpt_file_t *list = list_checkpoints(dir, &k, true);
            if (k > 1) qsort(list, (size_t)k, sizeof *list, by_recency);
            auto_lineage(ck, dir, list, k, lineage, lineage_len);
            out = xrealloc_small(NULL, (size_t)(k + 1) * PATH_LEN);
            for (int pass = 0; pass < 2; pass++)
                for (int i = 0; i < k; i++) {
                    const bool unknown = list[i].info.run_id[0] == '\0';
                    if (pass != (list[i].usable ? 1 : 0)) continue;
                    if (!unknown && lineage[0] && strcmp(list[i].info.run_id, lineage) != 0) {
                        others++;
                        continue;
                    }
                    ckpt_name(path, sizeof path, dir, list[i].step);
                    snprintf(out + (size_t)n++ * PATH_LEN, PATH_LEN, "%s", path);
                }
            if (others)
                printf("resume: %d checkpoint%s in %s belong to another run (not the lineage %s of "
                       "this directory) and %s not considered\n", others, others > 1 ? "s" : "",
                       dir, lineage, others > 1 ? "are" : "is");
            free(list);
        }
    }
    comm_bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD, "resume");
    comm_bcast(lineage, (int)lineage_len, MPI_CHAR, 0, MPI_COMM_WORLD, "resume");
    if (world_rank() != 0) out = xrealloc_small(NULL, (size_t)(n > 0 ? n : 1) * PATH_LEN);
    if (n > 0) comm_bcast(out, n * PATH_LEN, MPI_CHAR, 0, MPI_COMM_WORLD, "resume");
    *n_out = n;
    return out;
}

/* Read and verify one file's tensors and state into res (the tensors are verified, not kept):
 * every rank streams its ZeRO partition (of the registry P, whose model may not exist yet)
 * through the staging buffer. 0, or -1 with the reason in msg. */
static int load_candidate(ckpt_ctx_t *ck, const params_t *P, const char *path, ckpt_resumed_t *res,
                          char *msg, size_t len) {
    const ckpt_meta_t want = model_meta(ck);
    const grid_t *g = ck->grid;
    const bool ep = g->ep > 1;
    ckpt_io_t io;
    memset(&io, 0, sizeof io);
    size_t lo, hi;
    zero_partition(P->total, ep ? g->edp : g->dp, ep ? g->rank_edp : g->rank_dp, &lo, &hi);
    for (int k = 0; k < 3; k++) io.lo[k] = lo, io.hi[k] = hi, io.part_comm[k] = partition_comm(g);
    io.staging = ckpt_staging_alloc(ck, hi - lo, &io.staging_floats);
    double t0 = now_sec();
    watchdog_enter_for("checkpoint read", "all ranks", ck->cfg->io_timeout_s);
    int rc = ckpt_load_io(path, MPI_COMM_WORLD, g->tp_comm, g->ep_comm, &P->ckpt, &io, 3, &res->state,
                          &want, &res->meta, msg, len);
    watchdog_leave();
    xfree(io.staging);
    if (rc != 0) return -1;
    static bool said; /* once per process: files of an older llmtrain */
    if (!res->state.attrs_checked && !said && world_rank() == 0)
        printf("resume: %s has no attribute checksum (written before llmtrain had one): its "
               "attributes were range-checked only\n", path);
    said = said || !res->state.attrs_checked;
    res->found = true;
    snprintf(res->path, sizeof res->path, "%s", path);
    res->seconds = now_sec() - t0;
    res->mib = 3.0 * (double)P->n_global * sizeof(float) / 1048576.0;
    return 0;
}

void ckpt_resume_default(config_t *cfg, int world_rank) {
    const char *restarts = getenv("SLURM_RESTART_COUNT");
    if (cfg->resume_given || !restarts || atoi(restarts) <= 0 || cfg->choice.mode != CFG_MODE_TRAIN)
        return;
    snprintf(cfg->resume, sizeof cfg->resume, "auto");
    if (world_rank == 0)
        printf("resume: Slurm job %s was requeued (SLURM_RESTART_COUNT = %s) and %s does not set "
               "&checkpoint resume: continuing from the newest checkpoint (resume = 'auto')\n",
               getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "?", restarts, cfg->source_path);
}

/* Where the run stands in the checkpoint directory's history, the same on every rank: the
 * highest save_seq there (its saves number on from it) and the file its next save continues
 * from; then the directory's `lineage` names this run's (rank 0 writes it). */
static void history_start(ckpt_ctx_t *ck, const ckpt_resumed_t *res) {
    int64_t top = 0;
    if (world_rank() == 0) {
        int k;
        ckpt_file_t *list = list_checkpoints(ck->rd->ckpt_dir, &k, true);
        top = highest_seq(list, k);
        free(list);
    }
    comm_bcast(&top, 1, MPI_INT64_T, 0, MPI_COMM_WORLD, "resume");
    ck->rd->last_seq = top;
    ck->rd->parent_seq = res->found ? res->state.save_seq : 0;
    ck->rd->parent_step = res->found ? res->meta.step : -1;
    if (res->found && res->meta.run_id[0])
        snprintf(ck->rd->run_id, sizeof ck->rd->run_id, "%s", res->meta.run_id);
    rundir_write_lineage(ck->rd);
}

/* Rank 0 remembers the files its resume refused: pruning counts them for nothing. */
static void note_refused(rundir_t *rd, const char *path) {
    const long long step = step_of_name(path);
    if (step >= 0 && rd->n_refused < RUNDIR_MAX_REFUSED) rd->refused_step[rd->n_refused++] = step;
}

void ckpt_resume_find(ckpt_ctx_t *ck, ckpt_resumed_t *res) {
    const config_t *cfg = ck->cfg;
    memset(res, 0, sizeof *res);
    if (cfg->choice.mode != CFG_MODE_TRAIN) return;
    if (strcmp(cfg->resume, "none") == 0) {
        history_start(ck, res);
        return;
    }
    /* the registry the model will have on this rank: the host buffers match its layout */
    params_t P;
    flat_rank_registry(&P, cfg, ck->grid); /* interleaved: its chunks, as the model holds them */
    res->total = P.total;
    int n;
    char lineage[CKPT_RUN_ID_LEN], msg[COMM_MSG_MAX + 64];
    char *files = resume_candidates(ck, ck->rd->ckpt_dir, &n, lineage, sizeof lineage);
    for (int i = 0; i < n && !res->found; i++) {
        const char *path = files + (size_t)i * PATH_LEN;
        if (load_candidate(ck, &P, path, res, msg, sizeof msg) == 0) break;
        if (strcmp(cfg->resume, "auto") != 0) {
            free(files);
            /* one message, naming rank 0 and its host; exit 2 on every rank */
            char full[COMM_MSG_MAX + 96];
            snprintf(full, sizeof full, "&checkpoint resume: %s", msg);
            comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "resume", world_rank() == 0 ? full : NULL);
            fatal_user("&checkpoint resume: %s", msg); /* not reached */
        }
        if (world_rank() == 0) {
            fprintf(stderr, "llmtrain: warning: resume: refused %s; trying an older checkpoint\n", msg);
            note_refused(ck->rd, path);
        }
    }
    free(files);
    params_destroy(&P);
    if (!res->found) {
        /* a run that started here and was stopped before its first checkpoint (a requeue)
         * continues its own lineage from step 0, not an older run's */
        const bool own = n == 0 && lineage[0];
        if (own) snprintf(ck->rd->run_id, sizeof ck->rd->run_id, "%s", lineage);
        if (world_rank() == 0) {
            if (own)
                printf("resume = 'auto': no checkpoint of this directory's lineage %s in %s yet "
                       "(the run that started it saved none); starting from step 0 in that "
                       "lineage\n", lineage, ck->rd->ckpt_dir);
            else
                printf("resume = 'auto': %s in %s; starting from step 0\n",
                       n ? "no checkpoint passed verification" : "no checkpoint found", ck->rd->ckpt_dir);
        }
    }
    history_start(ck, res);
}

/* The tensors of a verified file into the model and optimizer: every rank reads its ZeRO
 * partition (all of its buffers without ZeRO) piece by piece through the staging buffer, straight
 * to where they live; then the replicas follow. The file was verified a moment ago: a failure now
 * (it changed in between) leaves a half-loaded model, so it ends the run. Returns the largest
 * resident size of any rank during the load. */
static double load_into_model(ckpt_ctx_t *ck, const char *path) {
    ckpt_peak_reset();
    flat_io_t f;
    ckpt_io_t io;
    float *staging = ckpt_flat_load_begin(ck, &f, &io);
    const ckpt_meta_t want = model_meta(ck);
    ckpt_state_t st;
    char msg[COMM_MSG_MAX + 64];
    watchdog_enter_for("checkpoint read", "all ranks", ck->cfg->io_timeout_s);
    int rc = ckpt_load_io(path, MPI_COMM_WORLD, ck->grid->tp_comm, ck->grid->ep_comm, &ck->model->P.ckpt,
                          &io, 3, &st, &want, NULL, msg, sizeof msg);
    watchdog_leave();
    xfree(staging);
    flat_load_finish(&f);
    if (rc != 0) fatal_user("checkpoint %s changed after it was verified; the model is half loaded: %s", path, msg);
    const double during = ckpt_hwm_mib();
    const double peak = ckpt_max_over_ranks(during > io.peak_rss_mib ? during : io.peak_rss_mib);
    ckpt_peak_reset();
    return peak;
}

/* The model, optimizer, step, counters and fp16 scaler from the file load_candidate verified (a
 * resume or a rollback). */
static void apply_loaded(ckpt_ctx_t *ck, ckpt_resumed_t *res) {
    ASSERT(res->total == ck->model->P.total); /* the same registry as the model's */
    res->peak_rss_mib = load_into_model(ck, res->path);
    const ckpt_state_t *st = &res->state;
    ck->prog->step = res->meta.step;
    ck->prog->last_ckpt_step = ck->prog->step;
    ck->opt->t = st->adam_t;
    ck->prog->skipped = st->skipped;
    ck->prog->tokens_seen = st->tokens_seen;
    ck->prog->sample_pos = st->sample_pos;
    curric_load_state(ck->curric, st, ck->prog->sample_pos);
    if (ck->scaler->enabled && st->has_scaler) { /* the fp16 scaler continues where it was */
        ck->scaler->scale = st->loss_scale;
        ck->scaler->growth_tracker = (int)st->ls_growth;
        ck->scaler->hysteresis_tracker = (int)st->ls_hysteresis;
        ck->scaler->overflows = st->ls_overflows;
    }
    snprintf(ck->prog->last_ckpt_path, sizeof ck->prog->last_ckpt_path, "%s", res->path);
    /* the lineage continues (a file of version 0.1 has none: this run's new id stands) */
    if (res->meta.run_id[0]) snprintf(ck->rd->run_id, sizeof ck->rd->run_id, "%s", res->meta.run_id);
}

void ckpt_resume_apply(ckpt_ctx_t *ck, ckpt_resumed_t *res) {
    if (!res->found) return;
    double t0 = now_sec();
    apply_loaded(ck, res);
    res->seconds += now_sec() - t0;
    const ckpt_state_t *st = &res->state;
    if (world_rank() == 0)
        printf("resume: %s: step %lld, %lld tokens seen, saved on grid dp %lld x tp %lld x pp %lld, "
               "continuing on dp %d x tp %d x pp %d (read and verified %.1f MiB twice in %.2f s, "
               "%.0f MiB/s; peak memory %.0f MiB during the load)\n", res->path, (long long)ck->prog->step,
               (long long)st->tokens_seen, (long long)st->grid_dp, (long long)st->grid_tp,
               (long long)st->grid_pp, ck->grid->dp, ck->grid->tp, ck->grid->pp, res->mib, res->seconds,
               2 * res->mib / res->seconds, res->peak_rss_mib);
}

int ckpt_rollback(ckpt_ctx_t *ck, char *msg, size_t len) {
    const params_t *P = &ck->model->P;
    ckpt_resumed_t res;
    memset(&res, 0, sizeof res);
    res.total = P->total;
    int rc = ck->prog->last_ckpt_path[0] ? load_candidate(ck, P, ck->prog->last_ckpt_path, &res, msg, len) : -1;
    if (rc != 0 && !ck->prog->last_ckpt_path[0]) snprintf(msg, len, "no checkpoint file is known");
    if (rc == 0) apply_loaded(ck, &res);
    return rc;
}
