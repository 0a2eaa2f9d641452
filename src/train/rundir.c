/* rundir.c — run directory ownership: directories, writability, lock, fresh-run refusal, lineage
 * (see rundir.h). File-system work is done by rank 0 (one client touching metadata, not
 * thousands) except the access check, which every rank makes for itself; every outcome is
 * agreed, so all ranks take the same branch. */
#include "train/rundir.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/error.h"
#include "core/fileio.h"
#include "core/rng.h"
#include "core/thread.h"
#include "parallel/comm_host.h"

#define LOCK_NAME ".llmtrain.lock"

static int world_rank(void) { return error_world_rank(); }

static void hostname_of_this(char *buf, size_t len) {
    if (gethostname(buf, len - 1) != 0) snprintf(buf, len, "?");
    buf[len - 1] = '\0';
}

/* ---- directories -------------------------------------------------------------------------- */

/* Rank 0 creates `dir` and proves it writable with a probe file; every rank checks that it may
 * write there (checkpoints and weights are written through MPI-IO by many ranks). */
void rundir_prepare_dir(const char *dir, const char *what, const config_t *cfg) {
    char msg[1200];
    const char *mine = NULL;
    if (world_rank() == 0) {
        char probe[RUNDIR_PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/.llmtrain.probe.%d", dir, (int)getpid());
        int fd = -1;
        if (make_dirs(dir) != 0) {
            snprintf(msg, sizeof msg, "%s: cannot create the %s %s: %s", cfg->source_path, what,
                     dir, strerror(errno));
            mine = msg;
        } else if ((fd = open(probe, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644)) < 0 ||
                   write(fd, "x", 1) != 1 || close(fd) != 0) {
            snprintf(msg, sizeof msg, "%s: the %s %s is not writable: %s", cfg->source_path,
                     what, dir, strerror(errno));
            mine = msg;
        }
        unlink(probe);
    }
    comm_barrier(MPI_COMM_WORLD, "preparing the run directory");
    if (!mine && access(dir, W_OK | X_OK) != 0) {
        snprintf(msg, sizeof msg, "%s: the %s %s is not writable from this rank: %s",
                 cfg->source_path, what, dir, strerror(errno));
        mine = msg;
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "preparing the run directory", mine);
}

/* ---- the lock ----------------------------------------------------------------------------- */

typedef struct lock_owner {
    char host[256], job[64];
    long pid, started;
    long restart; /* SLURM_RESTART_COUNT of the owner's job run (-1: not recorded, older lock) */
} lock_owner_t;

static void this_owner(lock_owner_t *o) {
    memset(o, 0, sizeof *o);
    hostname_of_this(o->host, sizeof o->host);
    const char *job = getenv("SLURM_JOB_ID"), *restarts = getenv("SLURM_RESTART_COUNT");
    snprintf(o->job, sizeof o->job, "%s", job ? job : "");
    o->pid = (long)getpid();
    o->started = (long)time(NULL);
    o->restart = restarts ? atol(restarts) : 0;
}

static int format_owner(const lock_owner_t *o, char *buf, size_t len) {
    return snprintf(buf, len, "host=%s\npid=%ld\njob=%s\nrestart=%ld\nstarted=%ld\n", o->host,
                    o->pid, o->job, o->restart, o->started);
}

static void parse_owner(const char *text, lock_owner_t *o) {
    memset(o, 0, sizeof *o);
    o->restart = -1;
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int n = (int)strcspn(line, "\n");
        if (!strncmp(line, "host=", 5)) snprintf(o->host, sizeof o->host, "%.*s", n - 5, line + 5);
        else if (!strncmp(line, "job=", 4)) snprintf(o->job, sizeof o->job, "%.*s", n - 4, line + 4);
        else if (!strncmp(line, "pid=", 4)) o->pid = atol(line + 4);
        else if (!strncmp(line, "restart=", 8)) o->restart = atol(line + 8);
        else if (!strncmp(line, "started=", 8)) o->started = atol(line + 8);
    }
}

/* On this host: why process `pid` cannot be a running llmtrain (it does not exist, it is a
 * zombie its parent has not reaped yet, or its pid now belongs to another program), or NULL. */
static const char *process_gone(pid_t pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return "its process no longer exists";
    char path[64], stat[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return NULL; /* no /proc: trust kill() */
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    /* "pid (comm) state ...": comm may hold spaces and parentheses, so take the last ')' */
    const char *open = strchr(stat, '('), *close = strrchr(stat, ')');
    if (!open || !close || close < open) return NULL;
    if (close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X')) return "its process has ended";
    /* the same program as ours (whatever the binary is called) may be that run */
    char self[64] = "";
    f = fopen("/proc/self/comm", "r");
    if (f) {
        if (fgets(self, sizeof self, f)) self[strcspn(self, "\n")] = '\0';
        fclose(f);
    }
    size_t len = (size_t)(close - open - 1);
    if (self[0] && (strlen(self) != len || strncmp(open + 1, self, len) != 0))
        return "its pid now belongs to another program";
    return NULL;
}

/* Why a lock held by `old` may be taken over, or NULL when its owner may still be running.
 * The same Slurm job id alone proves nothing: a second llmtrain in the same allocation has it
 * too, and taking its lock would put two live runs in one directory. An earlier run of the job
 * does (a lower restart count, or a lock that recorded none while this run is a requeue): Slurm
 * ended it before requeueing. */
static const char *stale_reason(const lock_owner_t *old, const lock_owner_t *me, double age_s) {
    if (age_s > RUNDIR_STALE_S) return "its heartbeat stopped";
    const long old_restart = old->restart >= 0 ? old->restart : 0; /* an older lock: unknown */
    if (old->job[0] && strcmp(old->job, me->job) == 0 && old_restart < me->restart)
        return "it belongs to an earlier run of this Slurm job (requeued)";
    if (strcmp(old->host, me->host) == 0 && old->pid > 0) return process_gone((pid_t)old->pid);
    return NULL;
}

/* Write our lock over a stale one: a whole new file renamed into place, then read back (two
 * runs taking over the same stale lock: the last rename wins and the other sees it). */
static int take_over(const char *path, const char *content, const lock_owner_t *me) {
    if (file_write_atomic(path, content, strlen(content)) != 0) return -1;
    size_t len;
    int err;
    char *back = file_read_whole(path, 4096, &len, &err);
    if (!back) return -1;
    lock_owner_t now;
    parse_owner(back, &now);
    free(back);
    return now.pid == me->pid && strcmp(now.host, me->host) == 0 ? 0 : (errno = EEXIST, -1);
}

/* Rank 0: take the lock of `dir`; 0, or -1 with the reason in msg. */
static int acquire(const char *path, char *msg, size_t len) {
    lock_owner_t me, old;
    this_owner(&me);
    char content[512];
    format_owner(&me, content, sizeof content);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t n = write(fd, content, strlen(content));
        int ok = n == (ssize_t)strlen(content) && fsync(fd) == 0;
        if (close(fd) != 0) ok = 0;
        if (ok) return 0;
        unlink(path);
        return errf(msg, len, "cannot write the lock %s: %s", path, strerror(errno));
    }
    if (errno != EEXIST) return errf(msg, len, "cannot create the lock %s: %s", path, strerror(errno));
    size_t n;
    int err;
    struct stat st;
    char *text = file_read_whole(path, 4096, &n, &err);
    if (!text || stat(path, &st) != 0) {
        free(text);
        return errf(msg, len, "cannot read the lock %s: %s", path, strerror(text ? errno : err));
    }
    parse_owner(text, &old);
    free(text);
    const double age = difftime(time(NULL), st.st_mtime);
    const char *why = stale_reason(&old, &me, age);
    if (!why)
        return errf(msg, len, "the run directory is in use: %s names llmtrain pid %ld on host %s%s%s%s "
                    "(heartbeat %.0f s ago). Two runs must not share a directory: choose another "
                    "&run name or out_dir. If that run is gone, its lock goes stale %d s after its "
                    "last heartbeat (or delete the file).", path, old.pid, old.host,
                    old.job[0] ? ", Slurm job " : "", old.job,
                    old.job[0] && strcmp(old.job, me.job) == 0 ? " (this job: a second llmtrain "
                    "started in the same job while the first still runs)" : "",
                    age, RUNDIR_STALE_S);
    if (take_over(path, content, &me) != 0)
        return errf(msg, len, "the stale lock %s was taken by another run at the same moment", path);
    fprintf(stderr, "llmtrain: warning: took over the stale lock %s of pid %ld on host %s: %s\n",
            path, old.pid, old.host, why);
    return 0;
}

/* ---- heartbeat ---------------------------------------------------------------------------- */

static struct {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    int running;
    rundir_t *rd;
} beat = {.mutex = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static void *heartbeat_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&beat.mutex);
    while (beat.running) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += RUNDIR_HEARTBEAT_S;
        while (beat.running && pthread_cond_timedwait(&beat.wake, &beat.mutex, &until) == 0) {
        }
        if (!beat.running) break;
        for (int i = 0; i < beat.rd->n_locks; i++) /* a failed touch only ages the lock */
            (void)utimensat(AT_FDCWD, beat.rd->lock_path[i], NULL, 0);
    }
    pthread_mutex_unlock(&beat.mutex);
    return NULL;
}

static void start_heartbeat(rundir_t *rd) {
    sigset_t all;
    sigfillset(&all);
    beat.rd = rd;
    beat.running = 1;
    /* the thread takes no signals: SIGTERM / SIGUSR1 have a thread of their own
     * (train/checkpointing.c) */
    thread_start_masked(&beat.thread, heartbeat_main, NULL, &all, "heartbeat");
}

static void stop_heartbeat(void) {
    if (!beat.running) return;
    pthread_mutex_lock(&beat.mutex);
    beat.running = 0;
    pthread_cond_signal(&beat.wake);
    pthread_mutex_unlock(&beat.mutex);
    pthread_join(beat.thread, NULL);
}

/* A run that ends through exit() (a user error after the lock was taken) leaves no lock. */
static rundir_t *held_at_exit;
static void release_at_exit(void) {
    if (held_at_exit) rundir_close(held_at_exit);
}

/* ---- lineage ------------------------------------------------------------------------------ */

/* 16 hex digits from the clock, the host and the pid of rank 0, shared with every rank. */
static void draw_run_id(rundir_t *rd) {
    char id[CKPT_RUN_ID_LEN] = "";
    if (world_rank() == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        char host[256];
        hostname_of_this(host, sizeof host);
        /* Philox keyed by the clock, drawn at the host's and the pid's stream: unique per start */
        philox_key_t key = rng_key((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                                   rng_hash_str(host) ^ (uint64_t)getpid());
        uint64_t h = rng_u64(key, 0, 0);
        snprintf(id, sizeof id, "%016llx", (unsigned long long)h);
    }
    comm_bcast(id, (int)sizeof id, MPI_CHAR, 0, MPI_COMM_WORLD, "preparing the run directory");
    snprintf(rd->run_id, sizeof rd->run_id, "%s", id);
}

#define LINEAGE_NAME "lineage"

int rundir_read_lineage(const rundir_t *rd, char *id, size_t len) {
    char path[RUNDIR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" LINEAGE_NAME, rd->ckpt_dir);
    size_t n;
    int err;
    char *text = file_read_whole(path, 256, &n, &err);
    if (!text) return -1;
    text[strcspn(text, "\r\n")] = '\0';
    const int ok = text[0] != '\0' && strlen(text) < len && strlen(text) < CKPT_RUN_ID_LEN;
    if (ok) snprintf(id, len, "%s", text);
    free(text);
    return ok ? 0 : -1;
}

void rundir_write_lineage(const rundir_t *rd) {
    if (world_rank() != 0) return;
    char path[RUNDIR_PATH_MAX + 32], line[CKPT_RUN_ID_LEN + 2];
    snprintf(path, sizeof path, "%s/" LINEAGE_NAME, rd->ckpt_dir);
    const int n = snprintf(line, sizeof line, "%s\n", rd->run_id);
    if (file_write_atomic(path, line, (size_t)n) != 0)
        fprintf(stderr, "llmtrain: warning: cannot record this run's lineage in %s: %s (a requeue "
                "before the first checkpoint goes by 'latest')\n", path, strerror(errno));
}

/* ---- the public API ----------------------------------------------------------------------- */

void rundir_open(rundir_t *rd, const config_t *cfg) {
    memset(rd, 0, sizeof *rd);
    if (snprintf(rd->dir, sizeof rd->dir, "%s/%s", cfg->out_dir, cfg->name) >= (int)sizeof rd->dir)
        fatal_user("%s: &run out_dir/name is longer than %d characters", cfg->source_path,
                   RUNDIR_PATH_MAX - 1);
    snprintf(rd->ckpt_dir, sizeof rd->ckpt_dir, "%s", cfg->ckpt_dir[0] ? cfg->ckpt_dir : rd->dir);
    if (cfg->choice.mode != CFG_MODE_TRAIN) return; /* eval and generate write nothing there */
    rundir_prepare_dir(rd->dir, "run directory", cfg);
    const bool separate = strcmp(rd->ckpt_dir, rd->dir) != 0;
    if (separate) rundir_prepare_dir(rd->ckpt_dir, "checkpoint directory (&checkpoint dir)", cfg);
    char msg[1400];
    const char *mine = NULL;
    if (world_rank() == 0) {
        const char *dirs[2] = {rd->dir, rd->ckpt_dir};
        for (int i = 0; i < (separate ? 2 : 1) && !mine; i++) {
            snprintf(rd->lock_path[i], sizeof rd->lock_path[i], "%s/" LOCK_NAME, dirs[i]);
            if (acquire(rd->lock_path[i], msg, sizeof msg) != 0) mine = msg;
            else rd->n_locks = i + 1;
        }
        if (!mine) {
            held_at_exit = rd;
            atexit(release_at_exit);
            start_heartbeat(rd);
        }
    }
    if (mine) {
        rundir_close(rd); /* a partly taken pair of locks is given back */
        comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "locking the run directory", mine);
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "locking the run directory", NULL);
    draw_run_id(rd);
}

/* What an older run left in `dir`: a short list for the message ("3 checkpoints, latest,
 * metrics.jsonl (412 lines)"), empty when nothing. */
static void describe_leftovers(const char *dir, bool run_dir, char *out, size_t len) {
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    int ckpts = 0, weights = 0, latest = 0;
    long long metrics_bytes = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strncmp(e->d_name, "ckpt_step", 9)) ckpts++;
        else if (!strcmp(e->d_name, "latest")) latest = 1;
        else if (run_dir && !strncmp(e->d_name, "weights_", 8)) weights++;
        else if (run_dir && !strcmp(e->d_name, "metrics.jsonl")) {
            char p[RUNDIR_PATH_MAX + 32];
            struct stat st;
            snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
            if (stat(p, &st) == 0) metrics_bytes = (long long)st.st_size;
        }
    }
    closedir(d);
    size_t used = 0;
#define ADD(...) (used += (size_t)snprintf(out + used, used < len ? len - used : 0, __VA_ARGS__))
    if (ckpts) ADD("%s%d checkpoint file%s", used ? ", " : "", ckpts, ckpts > 1 ? "s" : "");
    if (latest) ADD("%sthe 'latest' pointer", used ? ", " : "");
    if (weights) ADD("%s%d weights file%s", used ? ", " : "", weights, weights > 1 ? "s" : "");
    if (metrics_bytes > 0) ADD("%smetrics.jsonl (%lld bytes)", used ? ", " : "", metrics_bytes);
#undef ADD
}

void rundir_check_fresh(const rundir_t *rd, const config_t *cfg) {
    if (cfg->choice.mode != CFG_MODE_TRAIN || strcmp(cfg->resume, "none") != 0) return;
    char found[2][300], msg[2400];
    const char *mine = NULL;
    if (world_rank() == 0) {
        describe_leftovers(rd->dir, true, found[0], sizeof found[0]);
        found[1][0] = '\0';
        if (strcmp(rd->ckpt_dir, rd->dir) != 0)
            describe_leftovers(rd->ckpt_dir, false, found[1], sizeof found[1]);
        const bool any = found[0][0] || found[1][0];
        if (any && !cfg->ckpt_overwrite) {
            snprintf(msg, sizeof msg, "%s: a fresh run (&checkpoint resume = 'none') would replace "
                     "an older run's files: %s%s%s%s%s. Continue that run with resume = 'auto', "
                     "use another &run name or out_dir, or set &checkpoint overwrite = .true.",
                     cfg->source_path, found[0][0] ? rd->dir : "", found[0][0] ? " holds " : "",
                     found[0], found[1][0] ? (found[0][0] ? "; " : "") : "",
                     found[1][0] ? rd->ckpt_dir : "");
            if (found[1][0]) {
                size_t n = strlen(msg);
                snprintf(msg + n, sizeof msg - n, " (holds %s)", found[1]);
            }
            mine = msg;
        } else if (any) {
            fprintf(stderr, "llmtrain: warning: &checkpoint overwrite = .true.: this fresh run "
                    "replaces files of an older run in %s (%s%s%s); checkpoints of the older run "
                    "that this run does not overwrite are kept\n", rd->dir, found[0],
                    found[1][0] ? "; " : "", found[1]);
        }
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "checking the run directory", mine);
}

void rundir_close(rundir_t *rd) {
    if (world_rank() != 0 || rd->n_locks == 0) return;
    stop_heartbeat();
    for (int i = rd->n_locks - 1; i >= 0; i--) unlink(rd->lock_path[i]);
    rd->n_locks = 0;
    held_at_exit = NULL;
}
