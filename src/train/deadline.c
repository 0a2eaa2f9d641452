/* deadline.c — the job's end time and the stop before it (see deadline.h). */
#define _XOPEN_SOURCE 700 /* strptime */
#include "train/deadline.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/error.h"
#include "core/timer.h"
#include "parallel/comm_host.h"

double deadline_parse_slurm_time(const char *text) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || (*end && *end != '\n' && *end != ' ')) return 0;
    tm.tm_isdst = -1; /* Slurm prints local time */
    time_t t = mktime(&tm);
    return t == (time_t)-1 ? 0 : (double)t;
}

/* The Slurm job's end time from squeue (the batch environment of Slurm 22.05 does not carry
 * it). 0 when there is no job, no squeue, or no limit. */
static double slurm_end_time(const char *job, char *why, size_t len) {
    char cmd[160], line[128] = "";
    snprintf(cmd, sizeof cmd, "squeue -h -o %%e -j '%.60s' 2>/dev/null", job);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, len, "squeue could not be run");
        return 0;
    }
    if (!fgets(line, sizeof line, p)) line[0] = '\0';
    pclose(p);
    double end = deadline_parse_slurm_time(line);
    if (end == 0) snprintf(why, len, "squeue gave no end time for job %s", job);
    return end;
}

static double find_end(const config_t *cfg, char *source, size_t len) {
    const char *env = getenv("LLMT_JOB_END_TIME"), *job = getenv("SLURM_JOB_ID");
    if (cfg->time_limit_min > 0) {
        snprintf(source, len, "&run time_limit_min = %g", cfg->time_limit_min);
        return wall_sec() + 60.0 * cfg->time_limit_min;
    }
    if (env && atof(env) > 0) {
        snprintf(source, len, "LLMT_JOB_END_TIME");
        return atof(env);
    }
    if (job && *job) {
        double end = slurm_end_time(job, source, len);
        if (end > 0) snprintf(source, len, "the time limit of Slurm job %s", job);
        return end;
    }
    snprintf(source, len, "no time limit known (&run time_limit_min, or a Slurm job)");
    return 0;
}

void deadline_init(deadline_t *d, const config_t *cfg, double ckpt_bytes, MPI_Comm world) {
    memset(d, 0, sizeof *d);
    int rank;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    if (rank == 0) d->end = find_end(cfg, d->source, sizeof d->source);
    comm_bcast(&d->end, 1, MPI_DOUBLE, 0, world, "the job's end time");
    d->save_s = 5.0 + ckpt_bytes / 100e6;
    const char *margin = getenv("LLMT_SIGNAL_MARGIN_S");
    d->signal_margin_s = margin ? atof(margin) : 0;
    if (rank != 0 || d->end <= 0) return;
    char when[32];
    time_t t = (time_t)d->end;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
    printf("time limit: the job ends at %s (%s, in %.0f s); llmtrain writes a checkpoint and exits "
           "with code 75 when less than a step plus a save remains (a save is taken to last %.0f s "
           "until one is timed)\n", when, d->source, deadline_left_s(d), d->save_s);
}

void deadline_note_step(deadline_t *d, double seconds) {
    if (seconds > d->step_s) d->step_s = seconds;
}

void deadline_note_save(deadline_t *d, double seconds) {
    if (!d->save_measured || seconds > d->save_s) d->save_s = seconds;
    d->save_measured = true;
}

double deadline_left_s(const deadline_t *d) { return d->end - wall_sec(); }

double deadline_margin(const deadline_t *d) {
    return 1.1 * (d->step_s + d->save_s) + 5.0;
}

bool deadline_due(deadline_t *d, int world_rank) {
    if (world_rank == 0 && !d->warned && d->signal_margin_s > 0 && d->step_s > 0 &&
        d->signal_margin_s < d->step_s + d->save_s) {
        d->warned = true;
        fprintf(stderr, "llmtrain: warning: the stop signal comes %.0f s before the end "
                "(LLMT_SIGNAL_MARGIN_S, from --signal=USR1@N), less than a step (%.1f s) plus a "
                "save (%s%.0f s): the save it asks for may be cut off; use --signal=USR1@%.0f or "
                "more (llmtrain's own time-limit stop does not depend on it)\n", d->signal_margin_s,
                d->step_s, d->save_measured ? "" : "estimated ", d->save_s,
                60.0 * (double)(long)((deadline_margin(d) + 59.0) / 60.0));
    }
    return d->end > 0 && deadline_left_s(d) < deadline_margin(d);
}
