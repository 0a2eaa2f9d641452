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
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/prof.h"
#include "core/fileio.h"
#include "core/thread.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "parallel/comm_host.h"
#include "parallel/watchdog.h"

#define CKPT_PREFIX "ckpt_step"
#define PATH_LEN 700

static int world_rank(void) { return error_world_rank(); }

/* ---------------------------------------------------------------- directory listing */

typedef struct ckpt_file {
    long long step;
    char run_id[CKPT_RUN_ID_LEN];
} ckpt_file_t;

static int by_step_descending(const void *a, const void *b) {
    long long x = ((const ckpt_file_t *)a)->step, y = ((const ckpt_file_t *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void ckpt_name(char *out, size_t len, const char *dir, long long step) {
    snprintf(out, len, "%s/" CKPT_PREFIX "%08lld.h5", dir, step);
}

/* Every complete checkpoint file in dir (by name), newest first, with its lineage when
 * `with_run_ids` (rank 0 only; the caller frees the array). */
static ckpt_file_t *list_checkpoints(const char *dir, int *n_out, bool with_run_ids) {
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int n = 0, cap = 0;
    ckpt_file_t *list = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long s;
        char tail[8];
        if (sscanf(e->d_name, CKPT_PREFIX "%lld.h%7s", &s, tail) != 2 || strcmp(tail, "5") != 0)
            continue;
        if (n == cap) list = xrealloc_small(list, sizeof *list * (size_t)(cap = cap ? 2 * cap : 64));
        list[n].step = s;
        list[n++].run_id[0] = '\0';
    }
    closedir(d);
    if (n > 1) qsort(list, (size_t)n, sizeof *list, by_step_descending); /* list is NULL when n = 0 */
    for (int i = 0; with_run_ids && i < n; i++) {
        char path[PATH_LEN];
        int64_t step;
        ckpt_name(path, sizeof path, dir, list[i].step);
        if (ckpt_peek(path, &step, list[i].run_id, sizeof list[i].run_id) != 0)
            snprintf(list[i].run_id, sizeof list[i].run_id, "?"); /* unreadable: no lineage */
    }
    *n_out = n;
    return list;
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

/* Delete checkpoints of this run's lineage beyond the newest `keep`, never `just_written`, and
 * leftovers of killed saves (rank 0). Other lineages' files are never touched. */
static void prune(const char *dir, int keep, const char *run_id, long long just_written) {
    int n;
    ckpt_file_t *list = list_checkpoints(dir, &n, true);
    char path[PATH_LEN];
    int ours = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i].run_id, run_id) != 0) continue;
        if (++ours <= keep || list[i].step == just_written) continue;
        ckpt_name(path, sizeof path, dir, list[i].step);
        if (unlink(path) != 0)
            fprintf(stderr, "llmtrain: warning: could not remove old checkpoint %s: %s\n", path,
                    strerror(errno));
    }
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

/* JSON string contents for a metrics record (quotes and control characters escaped). */
static void json_escape(const char *s, char *out, size_t len) {
    size_t o = 0;
    for (; *s && o + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') out[o++] = '\\', out[o++] = (char)c;
        else if (c < 0x20) o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    out[o] = '\0';
}

static void report_failed_save(trainer_t *tr, const char *why, const char *msg) {
    char esc[2048];
    if (world_rank() == 0) {
        fprintf(stderr, "llmtrain: error: checkpoint at step %lld (%s) not written: %s; earlier "
                "checkpoints are intact%s\n", (long long)tr->step, why, msg,
                strcmp(why, "every") == 0 ? "; training goes on" : "");
        fflush(stderr);
    }
    json_escape(msg, esc, sizeof esc);
    metrics_write(&tr->metrics, "\"step\":%lld,\"checkpoint\":\"%s\",\"failed\":true,\"error\":\"%s\"",
                  (long long)tr->step, why, esc);
}

/* The model the namelist describes, for the files' attributes and the checks on load. */
static ckpt_meta_t model_meta(const trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    ckpt_meta_t meta = {tr->step, cfg->seed, cfg->vocab_size, config_padded_vocab(cfg),
                        cfg->n_layer, cfg->n_head, cfg->d_model, cfg->d_ff, cfg->seq_len,
                        tr->config_text, "", &tr->provenance};
    snprintf(meta.run_id, sizeof meta.run_id, "%s", tr->rd.run_id);
    return meta;
}

int ckpt_owner(const grid_t *g) {
    return (g->rank_dp == 0 ? CKPT_OWNS_DENSE : 0) | (g->rank_edp == 0 ? CKPT_OWNS_EXPERTS : 0);
}

int ckpt_write_now(trainer_t *tr, const char *why) {
    const config_t *cfg = tr->cfg;
    const char *dir = tr->rd.ckpt_dir;
    char path[PATH_LEN], msg[COMM_MSG_MAX + 64];
    ckpt_name(path, sizeof path, dir, (long long)tr->step);
    const double need = ckpt_file_bytes(&tr->model.P, true);
    if (!ckpt_reserve_space(dir, need, msg, sizeof msg)) {
        report_failed_save(tr, why, msg);
        return -1;
    }
    gpt_t *m = &tr->model;
    const zero_t *z = &tr->zero;
    /* host copies in the flat layout; under ZeRO the partitions meet on dp rank 0 (the writer),
     * the other dp ranks hold none */
    adamw_finish(&tr->opt); /* an offloaded update still in flight: done and uploaded */
    float *p = trainer_host_params(tr);
    float *mm = trainer_host_copy(tr, tr->opt.state_ops, tr->opt.m, tr->opt.m, z->stage >= 1);
    float *vv = trainer_host_copy(tr, tr->opt.state_ops, tr->opt.v, tr->opt.v, z->stage >= 1);
    ckpt_meta_t meta = model_meta(tr);
    ckpt_state_t st = {tr->tokens_seen, tr->sample_pos, tr->opt.t, tr->skipped, tr->global_batch,
                       tr->scaler.scale, tr->grid->dp, tr->grid->tp, tr->grid->pp,
                       tr->scaler.growth_tracker, tr->scaler.hysteresis_tracker,
                       tr->scaler.overflows, 1, 0, 0, 0, {0}, 0};
    curric_save_state(&tr->curric, &st);
    double t0 = now_sec(), written = 0;
    watchdog_enter_for("checkpoint write", "all ranks", cfg->io_timeout_s);
    prof_begin(PROF_CHECKPOINT, "checkpoint write", -1, -1);
    int rc = ckpt_save(path, MPI_COMM_WORLD, tr->io_hints, &m->P, p, mm, vv, &meta, &st,
                       ckpt_owner(tr->grid), &written, msg, sizeof msg);
    prof_end(PROF_CHECKPOINT, 0);
    watchdog_leave();
    double dt = now_sec() - t0;
    xfree(p);
    xfree(mm);
    xfree(vv);
    if (rc != 0) {
        report_failed_save(tr, why, msg);
        return -1;
    }
    tr->last_ckpt_step = tr->step;
    deadline_note_save(&tr->deadline, dt);
    snprintf(tr->last_ckpt_path, sizeof tr->last_ckpt_path, "%s", path);
    if (world_rank() == 0) {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (write_latest(dir, base) != 0)
            fprintf(stderr, "llmtrain: warning: checkpoint %s written, but the 'latest' pointer "
                    "could not be updated: %s (resume = 'auto' still finds the newest file)\n",
                    path, strerror(errno));
        prune(dir, cfg->ckpt_keep, tr->rd.run_id, (long long)tr->step);
        printf("checkpoint: step %lld (%s) -> %s: %.1f MiB in %.2f s (%.0f MiB/s)\n",
               (long long)tr->step, why, path, written / 1048576.0, dt, written / 1048576.0 / dt);
        fflush(stdout);
    }
    comm_barrier(MPI_COMM_WORLD, "checkpoint housekeeping");
    metrics_write(&tr->metrics, "\"step\":%lld,\"checkpoint\":\"%s\",\"ckpt_s\":%.4f,"
                  "\"ckpt_mib\":%.3f", (long long)tr->step, why, dt, written / 1048576.0);
    return 0;
}

/* ---------------------------------------------------------------- choosing what to resume */

/* The files resume would try, in order (rank 0 decides, every rank gets the list): for 'auto',
 * the file `latest` names and the other files of its lineage, newest first (without a usable
 * `latest`: every file, newest first); else the one path given. Free with free(). */
static char *resume_candidates(const config_t *cfg, const char *dir, int *n_out) {
    int n = 0;
    char *out = NULL;
    if (world_rank() == 0) {
        if (strcmp(cfg->resume, "auto") != 0) {
            out = xrealloc_small(NULL, PATH_LEN);
            snprintf(out, PATH_LEN, "%s", cfg->resume);
            n = 1;
        } else {
            char path[PATH_LEN], line[PATH_LEN] = "", lineage[CKPT_RUN_ID_LEN] = "";
            int k, others = 0;
            ckpt_file_t *list = list_checkpoints(dir, &k, true);
            out = xrealloc_small(NULL, (size_t)(k + 1) * PATH_LEN);
            snprintf(path, sizeof path, "%s/latest", dir);
            FILE *f = fopen(path, "r");
            if (f && fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(out, PATH_LEN, "%s/%s", dir, line);
                int64_t step;
                if (strchr(line, '/') == NULL && ckpt_peek(out, &step, lineage, sizeof lineage) == 0)
                    n = 1;
                else
                    fprintf(stderr, "llmtrain: warning: resume: %s names '%s', which cannot be "
                            "read; trying the checkpoints in %s newest first\n", path, line, dir);
            }
            if (f) fclose(f);
            for (int i = 0; i < k; i++) {
                ckpt_name(path, sizeof path, dir, list[i].step);
                if (n > 0 && strcmp(out, path) == 0) continue;
                if (n > 0 && lineage[0] && strcmp(list[i].run_id, lineage) != 0) {
                    others++;
                    continue;
                }
                snprintf(out + (size_t)n++ * PATH_LEN, PATH_LEN, "%s", path);
            }
            if (others)
                printf("resume: %d checkpoint%s in %s belong to another run (not the lineage of "
                       "'latest') and %s not considered\n", others, others > 1 ? "s" : "", dir,
                       others > 1 ? "are" : "is");
            free(list);
        }
    }
    comm_bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD, "resume");
    if (world_rank() != 0) out = xrealloc_small(NULL, (size_t)(n > 0 ? n : 1) * PATH_LEN);
    if (n > 0) comm_bcast(out, n * PATH_LEN, MPI_CHAR, 0, MPI_COMM_WORLD, "resume");
    *n_out = n;
    return out;
}

/* Read and verify one file into res; 0, or -1 with the reason in msg. */
static int load_candidate(trainer_t *tr, const params_t *P, const char *path, ckpt_resumed_t *res,
                          char *msg, size_t len) {
    const ckpt_meta_t want = model_meta(tr);
    double t0 = now_sec();
    watchdog_enter_for("checkpoint read", "all ranks", tr->cfg->io_timeout_s);
    int rc = ckpt_load(path, MPI_COMM_WORLD, tr->grid->tp_comm, tr->grid->ep_comm, P, res->params, res->m, res->v,
                       &res->state, &want, &res->meta, msg, len);
    watchdog_leave();
    if (rc != 0) return -1;
    res->found = true;
    snprintf(res->path, sizeof res->path, "%s", path);
    res->seconds = now_sec() - t0;
    res->mib = 3.0 * (double)P->n_global * sizeof(float) / 1048576.0;
    return 0;
}

void ckpt_resume_default(config_t *cfg, int world_rank) {
    const char *restarts = getenv("SLURM_RESTART_COUNT");
    if (cfg->resume_given || !restarts || atoi(restarts) <= 0 || strcmp(cfg->mode, "train") != 0)
        return;
    snprintf(cfg->resume, sizeof cfg->resume, "auto");
    if (world_rank == 0)
        printf("resume: Slurm job %s was requeued (SLURM_RESTART_COUNT = %s) and %s does not set "
               "&checkpoint resume: continuing from the newest checkpoint (resume = 'auto')\n",
               getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "?", restarts, cfg->source_path);
}

void ckpt_resume_find(trainer_t *tr, ckpt_resumed_t *res) {
    const config_t *cfg = tr->cfg;
    memset(res, 0, sizeof *res);
    if (strcmp(cfg->resume, "none") == 0 || strcmp(cfg->mode, "train") != 0) return;
    /* the registry the model will have on this rank: the host buffers match its layout */
    params_t P;
    trainer_rank_registry(&P, cfg, tr->grid); /* interleaved: its chunks, as the model holds them */
    res->total = P.total;
    res->params = xcalloc(P.total, sizeof(float));
    res->m = xcalloc(P.total, sizeof(float));
    res->v = xcalloc(P.total, sizeof(float));
    int n;
    char *files = resume_candidates(cfg, tr->rd.ckpt_dir, &n), msg[COMM_MSG_MAX + 64];
    for (int i = 0; i < n && !res->found; i++) {
        const char *path = files + (size_t)i * PATH_LEN;
        if (load_candidate(tr, &P, path, res, msg, sizeof msg) == 0) break;
        if (strcmp(cfg->resume, "auto") != 0) {
            free(files);
            fatal_user("&checkpoint resume: %s", msg);
        }
        if (world_rank() == 0)
            fprintf(stderr, "llmtrain: warning: resume: refused %s; trying an older checkpoint\n", msg);
    }
    free(files);
    params_destroy(&P);
    if (!res->found) {
        if (world_rank() == 0)
            printf("resume = 'auto': %s in %s; starting from step 0\n",
                   n ? "no checkpoint passed verification" : "no checkpoint found", tr->rd.ckpt_dir);
        xfree(res->params);
        xfree(res->m);
        xfree(res->v);
        res->params = res->m = res->v = NULL;
    }
}

/* The model, optimizer, step, counters and fp16 scaler from what load_candidate read (a resume
 * or a rollback); the host copies stay with the caller. */
static void apply_loaded(trainer_t *tr, const ckpt_resumed_t *res) {
    gpt_t *m = &tr->model;
    const zero_t *z = &tr->zero;
    ASSERT(res->total == m->P.total); /* the same registry as the model's */
    adamw_finish(&tr->opt); /* nothing of an earlier update may land on the loaded weights */
    const size_t bytes = m->P.total * sizeof(float), part = (z->hi - z->lo) * sizeof(float);
    /* every rank read the whole of its tp shard; under ZeRO it keeps its partition */
    trainer_set_params_from_host(tr, res->params); /* bf16/fp16: the file holds the master */
    const ops_t *state = tr->opt.state_ops; /* the device, or the host when offloaded */
    if (z->stage >= 1) {
        state->to_device(tr->opt.m, res->m + z->lo, part);
        state->to_device(tr->opt.v, res->v + z->lo, part);
    } else {
        state->to_device(tr->opt.m, res->m, bytes);
        state->to_device(tr->opt.v, res->v, bytes);
    }
    const ckpt_state_t *st = &res->state;
    tr->step = res->meta.step;
    tr->last_ckpt_step = tr->step;
    tr->opt.t = st->adam_t;
    tr->skipped = st->skipped;
    tr->tokens_seen = st->tokens_seen;
    tr->sample_pos = st->sample_pos;
    curric_load_state(&tr->curric, st, tr->sample_pos);
    if (tr->scaler.enabled && st->has_scaler) { /* the fp16 scaler continues where it was */
        tr->scaler.scale = st->loss_scale;
        tr->scaler.growth_tracker = (int)st->ls_growth;
        tr->scaler.hysteresis_tracker = (int)st->ls_hysteresis;
        tr->scaler.overflows = st->ls_overflows;
    }
    snprintf(tr->last_ckpt_path, sizeof tr->last_ckpt_path, "%s", res->path);
    /* the lineage continues (a file of version 0.1 has none: this run's new id stands) */
    if (res->meta.run_id[0]) snprintf(tr->rd.run_id, sizeof tr->rd.run_id, "%s", res->meta.run_id);
}

static void free_loaded(ckpt_resumed_t *res) {
    xfree(res->params);
    xfree(res->m);
    xfree(res->v);
    memset(res, 0, sizeof *res);
}

void ckpt_resume_apply(trainer_t *tr, ckpt_resumed_t *res) {
    if (!res->found) return;
    apply_loaded(tr, res);
    const ckpt_state_t *st = &res->state;
    if (world_rank() == 0)
        printf("resume: %s: step %lld, %lld tokens seen, saved on grid dp %lld x tp %lld x pp %lld, "
               "continuing on dp %d x tp %d x pp %d (read and verified %.1f MiB in %.2f s, %.0f "
               "MiB/s)\n", res->path, (long long)tr->step, (long long)st->tokens_seen,
               (long long)st->grid_dp, (long long)st->grid_tp, (long long)st->grid_pp,
               tr->grid->dp, tr->grid->tp, tr->grid->pp, res->mib, res->seconds,
               res->mib / res->seconds);
    free_loaded(res);
}

int ckpt_rollback(trainer_t *tr, char *msg, size_t len) {
    const params_t *P = &tr->model.P;
    ckpt_resumed_t res;
    memset(&res, 0, sizeof res);
    res.total = P->total;
    res.params = xcalloc(P->total, sizeof(float));
    res.m = xcalloc(P->total, sizeof(float));
    res.v = xcalloc(P->total, sizeof(float));
    int rc = tr->last_ckpt_path[0] ? load_candidate(tr, P, tr->last_ckpt_path, &res, msg, len) : -1;
    if (rc != 0 && !tr->last_ckpt_path[0]) snprintf(msg, len, "no checkpoint file is known");
    if (rc == 0) apply_loaded(tr, &res);
    free_loaded(&res);
    return rc;
}

/* ---------------------------------------------------------------- stop signals */

/* Set by the handler on whichever thread took the signal, read by the main thread: a lock-free
 * atomic (async-signal-safe), not a volatile. */
static atomic_int stop_signal = 0;

/* The thread that installed the handlers (main), which the SIGTERM handler wakes. */
static pthread_t main_thread;

/* After SIGTERM the launcher may stop reading our output: Open MPI's mpirun does as soon as it is
 * told to terminate, and a rank whose next step line meets a full pipe would block there until
 * it is killed, its checkpoint unwritten. So stdout and stderr stop blocking (fcntl is
 * async-signal-safe): a line nobody reads any more is dropped, the checkpoint and
 * metrics.jsonl (files) are complete. A write already blocked on the pipe does not see the flag:
 * the main thread gets SIGURG (pthread_kill is async-signal-safe), whose empty handler, installed
 * without SA_RESTART, ends that write with EINTR. SIGUSR1 leaves the output alone: mpirun
 * forwards it and goes on reading. */
static void on_stop_signal(int sig) {
    int saved = errno;
    atomic_store_explicit(&stop_signal, sig, memory_order_relaxed);
    if (sig == SIGTERM) {
        for (int fd = 1; fd <= 2; fd++) {
            int flags = fcntl(fd, F_GETFL);
            if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        }
        pthread_kill(main_thread, SIGURG);
    }
    errno = saved;
}

static void on_wake(int sig) { (void)sig; }

static void stop_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGTERM);
}

/* The one thread that takes the stop signals: it only waits, so the handler's frame lands on a
 * stack nobody computes on. */
static void *signal_thread_main(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

/* The main thread's alternate signal stack, for SIGURG: a wake-up may arrive in a GEMM. */
static void main_thread_signal_stack(void) {
    static char *stack;
    long size = 64 * 1024;
#ifdef _SC_SIGSTKSZ
    const long need = sysconf(_SC_SIGSTKSZ); /* AVX-512 / AMX state makes frames large */
    if (need > size / 4) size = 4 * need;
#endif
    if (!stack) stack = xrealloc_small(NULL, (size_t)size);
    stack_t ss = {.ss_sp = stack, .ss_size = (size_t)size, .ss_flags = 0};
    SYS_CHECK(sigaltstack(&ss, NULL));
}

/* A signal handler must not run on a thread's own stack while that thread is inside a GEMM. The
 * kernel writes the signal frame just below the interrupted stack pointer (past the 128-byte
 * red zone), and oneDNN 2.6's JIT sgemm keeps live data there: a SIGUSR1 arriving mid-product
 * corrupted the heap ("corrupted size vs. prev_size": the rank aborted with 134 instead of
 * checkpointing, 2 runs in 8 of run_directory.sh, and within seconds under a signal storm,
 * validation/unit/test_stop_signals.c). So the main thread blocks the stop signals before it
 * starts any thread (OpenMP workers, the watchdog, the heartbeat inherit the mask, also those
 * the OpenMP runtime creates later) and one idle thread takes them instead (threads Open MPI
 * started inside MPI_Init may take them too: they never run a GEMM). The one signal the main
 * thread takes, SIGURG (a wake-up from that handler), runs on its alternate stack. */
void stop_signals_install(void) {
    main_thread = pthread_self();
    main_thread_signal_stack();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_wake;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK; /* no SA_RESTART: the point is the EINTR */
    SYS_CHECK(sigaction(SIGURG, &sa, NULL));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    SYS_CHECK(sigaction(SIGUSR1, &sa, NULL));
    SYS_CHECK(sigaction(SIGTERM, &sa, NULL));
    /* A file-size limit (ulimit -f) makes write() fail with EFBIG, which a save reports and
     * survives; the default action of SIGXFSZ would kill the rank instead. */
    signal(SIGXFSZ, SIG_IGN);
    sigset_t stop, takes;
    stop_set(&stop);
    PTHREAD_CHECK(pthread_sigmask(SIG_BLOCK, &stop, &takes));
    sigdelset(&takes, SIGUSR1); /* the caller's mask, the stop signals open */
    sigdelset(&takes, SIGTERM);
    static pthread_t signal_thread; /* never joined: it waits until the process ends */
    thread_start_masked(&signal_thread, signal_thread_main, NULL, &takes, "stop-signal thread");
}

int stop_signal_received(void) { return atomic_load_explicit(&stop_signal, memory_order_relaxed); }

int stop_pending(MPI_Comm world, int also) {
    const int got = stop_signal_received();
    int sig = got > also ? got : also;
    comm_allreduce(&sig, 1, MPI_INT, MPI_MAX, world, "stop-signal check");
    return sig;
}

int stop_signal_pending(MPI_Comm world) { return stop_pending(world, 0); }
