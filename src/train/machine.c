/* machine.c — the &machine file (machine.h): its key table, reading and writing. */
#include "train/machine.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/namelist.h"
#include "config/schema.h"
#include "core/error.h"
#include "core/fileio.h"

enum {
    K_NAME, K_DEVICE, K_BF16, K_FP16, K_FP32, K_GEMM_EFF, K_GEMM_HALF, K_MEM_GIB, K_MEM_BW,
    K_DPN, K_MAX_NODES, K_INTRA_BW, K_INTRA_LAT, K_INTER_BW, K_INTER_LAT, K_COLLECTIVE, N_KEYS
};

#define POSITIVE '(', 0, 0, 0
static const schema_key_t machine_keys[N_KEYS] = {
    [K_NAME] = {"name", SCHEMA_STR},
    [K_DEVICE] = {"device", SCHEMA_STR},
    [K_BF16] = {"peak_tflops_bf16", SCHEMA_REAL, POSITIVE, "a rate"},
    [K_FP16] = {"peak_tflops_fp16", SCHEMA_REAL, POSITIVE, "a rate"},
    [K_FP32] = {"peak_tflops_fp32", SCHEMA_REAL, POSITIVE, "a rate"},
    [K_GEMM_EFF] = {"gemm_efficiency", SCHEMA_REAL, '(', ']', 0, 1, "a fraction of the peak"},
    [K_GEMM_HALF] = {"gemm_half_size", SCHEMA_REAL, '[', 0, 0, 0, "elements"},
    [K_MEM_GIB] = {"memory_gib", SCHEMA_REAL, POSITIVE, "a capacity"},
    [K_MEM_BW] = {"memory_gb_per_s", SCHEMA_REAL, POSITIVE, "a rate"},
    [K_DPN] = {"devices_per_node", SCHEMA_INT, '[', 0, 1, 0},
    [K_MAX_NODES] = {"max_nodes", SCHEMA_INT, '[', 0, 0, 0, "0: any number"},
    [K_INTRA_BW] = {"intra_node_gb_per_s", SCHEMA_REAL, POSITIVE, "a rate"},
    [K_INTRA_LAT] = {"intra_node_latency_us", SCHEMA_REAL, '[', 0, 0, 0},
    [K_INTER_BW] = {"inter_node_gb_per_s", SCHEMA_REAL, POSITIVE, "a rate"},
    [K_INTER_LAT] = {"inter_node_latency_us", SCHEMA_REAL, '[', 0, 0, 0},
    [K_COLLECTIVE] = {"collective", SCHEMA_STR},
};
static const schema_t machine_schema = {"machine", machine_keys, N_KEYS};

const char *const machine_key_names[N_KEYS] = {
    "name", "device", "peak_tflops_bf16", "peak_tflops_fp16", "peak_tflops_fp32", "gemm_efficiency",
    "gemm_half_size", "memory_gib", "memory_gb_per_s", "devices_per_node", "max_nodes",
    "intra_node_gb_per_s", "intra_node_latency_us", "inter_node_gb_per_s", "inter_node_latency_us",
    "collective"};
const int machine_n_keys = N_KEYS;

/* The one &machine group's entries by key, each checked against the table. */
static int collect(const char *path, const namelist_t *nl, const nl_entry_t **by_key, char *err,
                   size_t errlen) {
    const nl_group_t *grp = NULL;
    for (int g = 0; g < nl->n_groups; g++) {
        const nl_group_t *gr = &nl->groups[g];
        if (strcmp(gr->name, "machine") != 0)
            return errf(err, errlen, "%s:%d:%d: unknown group '&%s' (a machine file holds one &machine "
                        "group)", path, gr->line, gr->col, gr->name);
        if (grp) return errf(err, errlen, "%s:%d:%d: a second &machine group", path, gr->line, gr->col);
        grp = gr;
    }
    if (!grp) return errf(err, errlen, "%s: no &machine group (see docs/planning.md)", path);
    for (int i = 0; i < grp->n_entries; i++) {
        const nl_entry_t *e = &grp->entries[i];
        const int k = schema_find_key(&machine_schema, e->key);
        if (k < 0) return schema_unknown_key_error(&machine_schema, e, path, err, errlen);
        if (by_key[k])
            return errf(err, errlen, "%s:%d:%d: &machine %s: given twice (first at line %d)", path,
                        e->line, e->col, e->key, by_key[k]->line);
        if (schema_check_entry(&machine_schema, k, e, path, err, errlen) != 0) return -1;
        if (schema_check_bounds(&machine_schema, k, e, path, err, errlen) != 0) return -1;
        by_key[k] = e;
    }
    for (int k = 0; k < N_KEYS; k++)
        if (!by_key[k])
            return errf(err, errlen, "%s: &machine: missing key '%s' (every key is required; see "
                        "docs/planning.md)", path, machine_keys[k].key);
    return 0;
}

/* A string key that must be one of `choices` ("a|b"); its index, or -1 with the message. */
static int choice_of(const char *path, const nl_entry_t *e, const char *a, const char *b, char *err,
                     size_t errlen) {
    const char *s = e->values[0].s;
    if (strcmp(s, a) == 0) return 0;
    if (strcmp(s, b) == 0) return 1;
    return errf(err, errlen, "%s:%d:%d: &machine %s: '%s' is not one of '%s', '%s'", path,
                e->values[0].line, e->values[0].col, e->key, s, a, b);
}

static int assign(const char *path, const nl_entry_t *const *v, machine_t *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", v[K_NAME]->values[0].s);
    const int dev = choice_of(path, v[K_DEVICE], "gpu", "cpu", err, errlen);
    const int coll = dev < 0 ? -1 : choice_of(path, v[K_COLLECTIVE], "ring", "tree", err, errlen);
    if (dev < 0 || coll < 0) return -1;
    m->gpu = dev == 0;
    m->collective = coll == 0 ? MACHINE_RING : MACHINE_TREE;
    m->peak_bf16 = v[K_BF16]->values[0].r * 1e12;
    m->peak_fp16 = v[K_FP16]->values[0].r * 1e12;
    m->peak_fp32 = v[K_FP32]->values[0].r * 1e12;
    m->gemm_efficiency = v[K_GEMM_EFF]->values[0].r;
    m->gemm_half_size = v[K_GEMM_HALF]->values[0].r;
    m->memory_bytes = v[K_MEM_GIB]->values[0].r * 1073741824.0;
    m->memory_bw = v[K_MEM_BW]->values[0].r * 1e9;
    if (v[K_DPN]->values[0].i > 1 << 20 || v[K_MAX_NODES]->values[0].i > 1 << 20)
        return errf(err, errlen, "%s: &machine devices_per_node and max_nodes: at most %d", path, 1 << 20);
    m->devices_per_node = (int)v[K_DPN]->values[0].i;
    m->max_nodes = (int)v[K_MAX_NODES]->values[0].i;
    m->intra_bw = v[K_INTRA_BW]->values[0].r * 1e9;
    m->intra_lat = v[K_INTRA_LAT]->values[0].r * 1e-6;
    m->inter_bw = v[K_INTER_BW]->values[0].r * 1e9;
    m->inter_lat = v[K_INTER_LAT]->values[0].r * 1e-6;
    return 0;
}

int machine_load(const char *path, machine_t *m, char *err, size_t errlen) {
    size_t len = 0;
    int sys = 0;
    char *text = file_read_whole(path, 1 << 20, &len, &sys);
    if (!text) return errf(err, errlen, "%s: cannot read the machine file (%s)", path, strerror(sys));
    namelist_t nl = {0};
    int rc = namelist_parse_keys(path, text, schema_key_capacity, (void *)&machine_schema, &nl, err, errlen);
    free(text);
    if (rc != 0) return -1;
    const nl_entry_t *by_key[N_KEYS] = {0};
    rc = collect(path, &nl, by_key, err, errlen);
    if (rc == 0) rc = assign(path, by_key, m, err, errlen);
    namelist_free(&nl);
    return rc;
}

void machine_write(FILE *f, const machine_t *m, const char *const comments[]) {
    const double v[N_KEYS] = {
        [K_BF16] = m->peak_bf16 / 1e12, [K_FP16] = m->peak_fp16 / 1e12, [K_FP32] = m->peak_fp32 / 1e12,
        [K_GEMM_EFF] = m->gemm_efficiency, [K_GEMM_HALF] = m->gemm_half_size,
        [K_MEM_GIB] = m->memory_bytes / 1073741824.0, [K_MEM_BW] = m->memory_bw / 1e9,
        [K_DPN] = m->devices_per_node, [K_MAX_NODES] = m->max_nodes, [K_INTRA_BW] = m->intra_bw / 1e9,
        [K_INTRA_LAT] = m->intra_lat * 1e6, [K_INTER_BW] = m->inter_bw / 1e9,
        [K_INTER_LAT] = m->inter_lat * 1e6};
    fprintf(f, "&machine\n");
    for (int k = 0; k < N_KEYS; k++) {
        if (comments && comments[k]) fprintf(f, "  ! %s\n", comments[k]);
        if (k == K_NAME) fprintf(f, "  name = '%s'\n", m->name);
        else if (k == K_DEVICE) fprintf(f, "  device = '%s'\n", m->gpu ? "gpu" : "cpu");
        else if (k == K_COLLECTIVE)
            fprintf(f, "  collective = '%s'\n", m->collective == MACHINE_RING ? "ring" : "tree");
        else if (k == K_DPN || k == K_MAX_NODES) fprintf(f, "  %s = %.0f\n", machine_keys[k].key, v[k]);
        else fprintf(f, "  %s = %.6g\n", machine_keys[k].key, v[k]);
    }
    fprintf(f, "/\n");
}

double machine_gemm_rate(const machine_t *m, double peak, double M, double N, double K) {
    const double h = m->gemm_half_size;
    return peak * m->gemm_efficiency * (M / (M + h)) * (N / (N + h)) * (K / (K + h));
}
