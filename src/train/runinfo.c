/* runinfo.c — the run's provenance (see runinfo.h). */
#include "train/runinfo.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "parallel/comm_host.h"

#define HOST_LEN 256

/* A JSON array of strings and the same names comma-joined, both malloc'ed. */
static void join_names(const char *const *names, int n, char **json, char **text) {
    size_t cap = 3;
    for (int i = 0; i < n; i++) cap += 6 * strlen(names[i]) + 4;
    char *j = xrealloc_small(NULL, cap), *t = xrealloc_small(NULL, cap), *jo = j, *to = t;
    *jo++ = '[';
    *to = '\0';
    for (int i = 0; i < n; i++) {
        char *quoted = provenance_json_string(names[i]);
        jo += sprintf(jo, "%s%s", i ? "," : "", quoted);
        to += sprintf(to, "%s%s", i ? "," : "", names[i]);
        free(quoted);
    }
    strcpy(jo, "]");
    *json = j;
    *text = t;
}

/* Rank 0: "hosts" (the distinct nodes, in rank order of first appearance: bounded by the
 * node count, so it fits a checkpoint attribute) and "rank_hosts" (every rank's host, JSON
 * only: 10^4 ranks would not fit an attribute) from the gathered names. */
static void add_hosts(provenance_t *p, const char *all, int world) {
    const char **names = xrealloc_small(NULL, sizeof *names * (size_t)world);
    const char **distinct = xrealloc_small(NULL, sizeof *distinct * (size_t)world);
    int nd = 0;
    for (int r = 0; r < world; r++) {
        names[r] = all + (size_t)r * HOST_LEN;
        int seen = 0;
        for (int k = 0; k < nd && !seen; k++) seen = !strcmp(distinct[k], names[r]);
        if (!seen) distinct[nd++] = names[r];
    }
    char *json, *text;
    join_names(distinct, nd, &json, &text);
    provenance_add_json(p, "hosts", text, json);
    free(json);
    free(text);
    join_names(names, world, &json, &text);
    provenance_add_json(p, "rank_hosts", text, json);
    p->f[p->n - 1].in_h5 = false;
    free(json);
    free(text);
    free(names);
    free(distinct);
}

static void add_int(provenance_t *p, const char *name, long long v) {
    char num[32];
    snprintf(num, sizeof num, "%lld", v);
    provenance_add_json(p, name, num, num);
}

/* Rank 0: everything but the hosts. */
static void add_run_fields(provenance_t *p, const config_t *cfg, const grid_t *g,
                           const char *run_dir, const char *run_id, int64_t start_step) {
    char started[32];
    time_t now = time(NULL);
    struct tm utc;
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &utc));
    provenance_add_str(p, "run_id", run_id);
    provenance_add_str(p, "run_dir", run_dir);
    provenance_add_str(p, "namelist_file", cfg->source_path);
    provenance_add_str(p, "started", started);
    add_int(p, "start_step", (long long)start_step);
    add_int(p, "world_size", g->world_size);
    add_int(p, "dp", g->dp);
    add_int(p, "tp", g->tp);
    add_int(p, "pp", g->pp);
    provenance_add_str(p, "slurm_job_id", getenv("SLURM_JOB_ID"));
    provenance_add_str(p, "slurm_step_id", getenv("SLURM_STEP_ID"));
    provenance_add_str(p, "slurm_restart_count", getenv("SLURM_RESTART_COUNT"));
    provenance_add_str(p, "loaded_modules", getenv("LOADEDMODULES"));
}

void runinfo_collect(provenance_t *p, const config_t *cfg, const grid_t *g, const char *run_dir,
                     const char *run_id, int64_t start_step, const char *config_text) {
    const int root = g->world_rank == 0;
    char mine[HOST_LEN] = "";
    if (gethostname(mine, sizeof mine - 1) != 0) snprintf(mine, sizeof mine, "unknown");
    char *all = root ? xrealloc_small(NULL, (size_t)HOST_LEN * g->world_size) : NULL;
    comm_gather(mine, HOST_LEN, MPI_CHAR, all, 0, MPI_COMM_WORLD, "gathering the provenance");
    memset(p, 0, sizeof *p);
    long long len = 0;
    char *packed = NULL;
    if (root) {
        provenance_add_build(p);
        add_run_fields(p, cfg, g, run_dir, run_id, start_step);
        add_hosts(p, all, g->world_size);
        provenance_add_str(p, "config", config_text);
        p->f[p->n - 1].in_h5 = false; /* checkpoints hold it already: the attribute /config */
        size_t n;
        packed = provenance_pack(p, &n);
        len = (long long)n;
    }
    free(all);
    /* rank 0's record on every rank: checkpoints write their attributes collectively */
    comm_bcast(&len, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, "broadcasting the provenance");
    if (!root) packed = xrealloc_small(NULL, (size_t)len + 1);
    comm_bcast(packed, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD, "broadcasting the provenance");
    if (!root) provenance_unpack(p, packed, (size_t)len);
    free(packed);
}

void runinfo_write_json(const provenance_t *p, const char *run_dir) {
    char path[1024], msg[1200];
    const char *mine = NULL;
    int rank;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/run.json", run_dir);
        char *members = provenance_json_members(p, ",\n  "); /* one member per line */
        size_t n = strlen(members) + 8;
        char *text = xrealloc_small(NULL, n);
        snprintf(text, n, "{\n  %s\n}\n", members);
        if (file_write_atomic(path, text, strlen(text)) != 0) {
            snprintf(msg, sizeof msg, "cannot write %s: %s", path, strerror(errno));
            mine = msg;
        }
        free(text);
        free(members);
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "writing run.json", mine);
}
