/* checkpointing.c — checkpoint policy: save, keep, latest pointer, resume, stop signals (see
 * checkpointing.h). File-system housekeeping (pointer, pruning, free space) is done by rank 0 and
 * its outcome broadcast, so every rank takes the same branch. */
#include "train/checkpointing.h"
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "parallel/comm.h"
#include "parallel/watchdog.h"

#define CKPT_PREFIX "ckpt_step"
#define MAX_CANDIDATES 64

void ckpt_dir_of(const config_t *cfg, const char *run_dir, char *out, size_t len) {
    snprintf(out, len, "%s", cfg->ckpt_dir[0] ? cfg->ckpt_dir : run_dir);
}

static int world_rank(void) { return error_world_rank(); }

/* ---------------------------------------------------------------- directory listing */

/* Steps of the complete checkpoint files in dir, newest first (rank 0 only). */
static int list_checkpoints(const char *dir, long long *steps, int cap) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long s;
        char tail[8];
        if (sscanf(e->d_name, CKPT_PREFIX "%lld.h%7s", &s, tail) == 2 && strcmp(tail, "5") == 0 &&
            n < cap)
            steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            long long t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

static void ckpt_name(char *out, size_t len, const char *dir, long long step) {
    snprintf(out, len, "%s/" CKPT_PREFIX "%08lld.h5", dir, step);
}

/* ---------------------------------------------------------------- saving */

/* Rank 0 checks the free space for `need` bytes; every rank learns the verdict. */
static int enough_space(const char *dir, double need, char *msg, size_t len) {
    double avail = 1e300;
    if (world_rank() == 0) {
        struct statvfs st;
        if (statvfs(dir, &st) == 0) avail = (double)st.f_bavail * (double)st.f_frsize;
    }
    MPI_CHECK(MPI_Bcast(&avail, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (avail >= need) return 1;
    snprintf(msg, len, "the file system of %s has %.1f MiB free but the checkpoint needs %.1f "
             "MiB", dir, avail / 1048576.0, need / 1048576.0);
    return 0;
}

/* Replace dir/latest by a file naming `file`, atomically (rank 0). */
static void write_latest(const char *dir, const char *file) {
    char tmp[700], path[700];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(tmp, "w");
    PTR_CHECK(f);
    fprintf(f, "%s\n", file);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) die_call(__FILE__, __LINE__, "fsync", strerror(errno));
    fclose(f);
    SYS_CHECK(rename(tmp, path));
}

/* Delete all but the newest `keep` checkpoints, and leftovers of killed saves (rank 0). */
static void prune(const char *dir, int keep, long long current) {
    long long steps[MAX_CANDIDATES];
    int n = list_checkpoints(dir, steps, MAX_CANDIDATES);
    char path[700];
    for (int i = keep; i < n; i++) {
        ckpt_name(path, sizeof path, dir, steps[i]);
        if (unlink(path) != 0) warn_user("could not remove old checkpoint %s: %s", path, strerror(errno));
    }
    for (int i = 0; i < n; i++) { /* a .tmp next to a complete file of an older step is garbage */
        if (steps[i] >= current) continue;
        ckpt_name(path, sizeof path, dir, steps[i]);
        strcat(path, ".tmp");
        unlink(path);
    }
}

int ckpt_write_now(trainer_t *tr, const char *why) {
    const config_t *cfg = tr->cfg;
    char dir[600], path[700], msg[1024];
    ckpt_dir_of(cfg, tr->run_dir, dir, sizeof dir);
    ckpt_name(path, sizeof path, dir, (long long)tr->step);
    /* tensors (model, m, v) plus HDF5's metadata: a few percent and one small block */
    const double need = 3.0 * (double)tr->model.P.n_global * sizeof(float) * 1.02 + (64 << 10);
    if (!enough_space(dir, need, msg, sizeof msg)) {
        if (world_rank() == 0)
            fprintf(stderr, "llmtrain: error: checkpoint at step %lld (%s) not written: %s; "
                    "earlier checkpoints are intact\n", (long long)tr->step, why, msg);
        return -1;
    }
    gpt_t *m = &tr->model;
    const size_t bytes = m->P.total * sizeof(float);
    float *p = xmalloc(bytes), *mm = xmalloc(bytes), *vv = xmalloc(bytes);
    tr->ops->to_host(p, m->params, bytes);
    tr->ops->to_host(mm, tr->opt.m, bytes);
    tr->ops->to_host(vv, tr->opt.v, bytes);
    ckpt_meta_t meta = {tr->step, cfg->seed, m->V, m->Vp, tr->config_text};
    ckpt_state_t st = {tr->tokens_seen, tr->sample_pos, tr->opt.t, tr->skipped, tr->global_batch,
                       1.0, tr->grid->dp, tr->grid->tp, tr->grid->pp};
    double t0 = now_sec();
    watchdog_enter_for("checkpoint write", "all ranks", cfg->timeout_s);
    double written = ckpt_save(path, MPI_COMM_WORLD, tr->io_hints, &m->P, p, mm, vv, &meta, &st,
                               tr->grid->rank_dp == 0);
    watchdog_leave();
    double dt = now_sec() - t0;
    xfree(p);
    xfree(mm);
    xfree(vv);
    if (world_rank() == 0) {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        write_latest(dir, base);
        prune(dir, cfg->ckpt_keep, (long long)tr->step);
        printf("checkpoint: step %lld (%s) -> %s: %.1f MiB in %.2f s (%.0f MiB/s)\n",
               (long long)tr->step, why, path, written / 1048576.0, dt, written / 1048576.0 / dt);
        fflush(stdout);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    metrics_write(&tr->metrics, "\"step\":%lld,\"checkpoint\":\"%s\",\"ckpt_s\":%.4f,"
                  "\"ckpt_mib\":%.3f", (long long)tr->step, why, dt, written / 1048576.0);
    return 0;
}

/* ---------------------------------------------------------------- choosing what to resume */

/* The files resume would try, in order; rank 0 decides, every rank gets the list. */
static int resume_candidates(const config_t *cfg, const char *run_dir, char (*out)[700], int cap) {
    int n = 0;
    if (world_rank() == 0) {
        if (strcmp(cfg->resume, "auto") != 0) {
            snprintf(out[n++], 700, "%s", cfg->resume);
        } else {
            char dir[600], line[600] = "", path[700];
            ckpt_dir_of(cfg, run_dir, dir, sizeof dir);
            snprintf(path, sizeof path, "%s/latest", dir);
            FILE *f = fopen(path, "r");
            if (f && fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(out[n++], 700, "%s/%s", dir, line);
            }
            if (f) fclose(f);
            long long steps[MAX_CANDIDATES];
            int k = list_checkpoints(dir, steps, MAX_CANDIDATES);
            for (int i = 0; i < k && n < cap; i++) {
                ckpt_name(path, sizeof path, dir, steps[i]);
                if (n == 0 || strcmp(out[0], path) != 0) snprintf(out[n++], 700, "%s", path);
            }
        }
    }
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Bcast(out, 700 * n, MPI_CHAR, 0, MPI_COMM_WORLD));
    return n;
}

int64_t ckpt_resume_global_batch(const config_t *cfg, const char *run_dir) {
    if (strcmp(cfg->resume, "none") == 0) return 0;
    char files[MAX_CANDIDATES][700];
    int n = resume_candidates(cfg, run_dir, files, MAX_CANDIDATES);
    int64_t gb = 0;
    if (n > 0 && world_rank() == 0) gb = ckpt_peek_global_batch(files[0]);
    MPI_CHECK(MPI_Bcast(&gb, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
    return gb;
}

/* Load one file into the trainer; 0, or -1 with the reason in msg. */
static int load_into(trainer_t *tr, const char *path, char *msg, size_t len) {
    gpt_t *m = &tr->model;
    const size_t bytes = m->P.total * sizeof(float);
    float *p = xcalloc(m->P.total, sizeof(float)), *mm = xcalloc(m->P.total, sizeof(float));
    float *vv = xcalloc(m->P.total, sizeof(float));
    ckpt_state_t st;
    int64_t step = 0;
    double t0 = now_sec();
    int rc = ckpt_load(path, MPI_COMM_WORLD, &m->P, p, mm, vv, &st, &step, tr->grid->rank_dp == 0,
                       msg, len);
    if (rc == 0) {
        tr->ops->to_device(m->params, p, bytes);
        tr->ops->to_device(tr->opt.m, mm, bytes);
        tr->ops->to_device(tr->opt.v, vv, bytes);
        tr->step = step;
        tr->opt.t = st.adam_t;
        tr->skipped = st.skipped;
        tr->tokens_seen = st.tokens_seen;
        tr->sample_pos = st.sample_pos;
        double dt = now_sec() - t0, mib = 3.0 * (double)m->P.n_global * sizeof(float) / 1048576.0;
        if (world_rank() == 0)
            printf("resume: %s: step %lld, %lld tokens seen, saved on grid dp %lld x tp %lld x "
                   "pp %lld, continuing on dp %d x tp %d x pp %d (read and verified %.1f MiB in "
                   "%.2f s, %.0f MiB/s)\n", path, (long long)step, (long long)st.tokens_seen,
                   (long long)st.grid_dp, (long long)st.grid_tp, (long long)st.grid_pp,
                   tr->grid->dp, tr->grid->tp, tr->grid->pp, mib, dt, mib / dt);
    }
    xfree(p);
    xfree(mm);
    xfree(vv);
    return rc;
}

bool ckpt_resume(trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    if (strcmp(cfg->resume, "none") == 0) return false;
    char files[MAX_CANDIDATES][700], msg[1024];
    int n = resume_candidates(cfg, tr->run_dir, files, MAX_CANDIDATES);
    for (int i = 0; i < n; i++) {
        if (load_into(tr, files[i], msg, sizeof msg) == 0) return true;
        if (strcmp(cfg->resume, "auto") != 0) fatal_user("&checkpoint resume: %s", msg);
        if (world_rank() == 0)
            fprintf(stderr, "llmtrain: warning: resume: refused %s; trying an older checkpoint\n", msg);
    }
    if (world_rank() == 0)
        printf("resume = 'auto': %s; starting from step 0\n",
               n ? "no checkpoint passed verification" : "no checkpoint found");
    return false;
}

/* ---------------------------------------------------------------- stop signals */

static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig) { stop_signal = sig; }

void stop_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    SYS_CHECK(sigaction(SIGUSR1, &sa, NULL));
    SYS_CHECK(sigaction(SIGTERM, &sa, NULL));
}

int stop_signal_pending(MPI_Comm world) {
    int sig = stop_signal;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, world));
    return sig;
}
