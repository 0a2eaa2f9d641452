/* provenance.c — the provenance record (see provenance.h). Small strings only: plain (untracked)
 * allocations, so the memory categories the planner predicts are not touched. */
#include "core/provenance.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/buildinfo.h"
#include "core/error.h"
#include "core/json.h"

static void add_field(provenance_t *p, const char *name, char *text, char *json) {
    ASSERT(p->n < PROVENANCE_MAX_FIELDS);
    provenance_field_t *f = &p->f[p->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->text = text;
    f->json = json;
    f->in_h5 = true;
}

char *provenance_json_string(const char *s) {
    const size_t n = json_escape(NULL, 0, s);
    char *out = xrealloc_small(NULL, n + 3);
    out[0] = '"';
    json_escape(out + 1, n + 1, s);
    out[n + 1] = '"';
    out[n + 2] = '\0';
    return out;
}

void provenance_add_str(provenance_t *p, const char *name, const char *value) {
    add_field(p, name, xstrdup(value ? value : ""), value ? provenance_json_string(value) : xstrdup("null"));
}

void provenance_add_json(provenance_t *p, const char *name, const char *text, const char *json) {
    add_field(p, name, xstrdup(text), xstrdup(json));
}

void provenance_add_build(provenance_t *p) {
    buildinfo_t b;
    buildinfo_get(&b);
    provenance_add_str(p, "llmtrain_version", b.version);
    provenance_add_str(p, "commit", b.commit);
    provenance_add_json(p, "dirty", b.dirty, strcmp(b.dirty, "unknown") ? b.dirty : "null");
    provenance_add_str(p, "compiler", b.compiler);
    provenance_add_str(p, "cflags", b.cflags);
    provenance_add_str(p, "build_date", b.build_date);
    provenance_add_str(p, "mpi", b.mpi);
    provenance_add_str(p, "hdf5", b.hdf5);
    provenance_add_str(p, "gemm", b.gemm);
    provenance_add_str(p, "hwloc", b.hwloc);
    provenance_add_str(p, "papi", b.papi);
    provenance_add_str(p, "cuda", b.cuda);
    provenance_add_str(p, "nccl", b.nccl);
}

const provenance_field_t *provenance_find(const provenance_t *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->f[i].name, name)) return &p->f[i];
    return NULL;
}

char *provenance_json_members(const provenance_t *p, const char *sep) {
    size_t len = 1;
    for (int i = 0; i < p->n; i++) len += strlen(p->f[i].name) + strlen(p->f[i].json) + strlen(sep) + 3;
    char *out = xrealloc_small(NULL, len), *o = out;
    for (int i = 0; i < p->n; i++)
        o += sprintf(o, "%s\"%s\":%s", i ? sep : "", p->f[i].name, p->f[i].json);
    *o = '\0';
    return out;
}

/* Packed: per field name, text, json (each NUL-terminated) and one byte in_h5. */
char *provenance_pack(const provenance_t *p, size_t *len) {
    size_t n = 0;
    for (int i = 0; i < p->n; i++)
        n += strlen(p->f[i].name) + strlen(p->f[i].text) + strlen(p->f[i].json) + 4;
    char *buf = xrealloc_small(NULL, n), *o = buf;
    for (int i = 0; i < p->n; i++) {
        const char *part[3] = {p->f[i].name, p->f[i].text, p->f[i].json};
        for (int k = 0; k < 3; k++) o = stpcpy(o, part[k]) + 1;
        *o++ = p->f[i].in_h5 ? '1' : '0';
    }
    *len = n;
    return buf;
}

void provenance_unpack(provenance_t *p, const char *buf, size_t len) {
    provenance_destroy(p);
    const char *s = buf, *end = buf + len;
    while (s < end) {
        const char *name = s, *text = name + strlen(name) + 1, *json = text + strlen(text) + 1;
        s = json + strlen(json) + 1;
        provenance_add_json(p, name, text, json);
        p->f[p->n - 1].in_h5 = *s++ == '1';
    }
}

void provenance_destroy(provenance_t *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->f[i].text);
        free(p->f[i].json);
    }
    p->n = 0;
}
