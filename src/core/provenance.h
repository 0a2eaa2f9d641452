/* provenance.h — the provenance record every artefact of a run carries (run.json, the first
 * record of metrics.jsonl, a /provenance group in every checkpoint and weights file): an
 * ordered list of named fields, each with a plain text (for HDF5 attributes) and its JSON value
 * (a string, or a literal: number, true/false/null, array). One list, three renderings, so the
 * artefacts cannot disagree.
 * Owns: the list, its JSON rendering, packing it for a broadcast (every rank must write the
 * same attributes), and the build's fields (core/buildinfo). Uses: core/buildinfo, core/alloc.
 * Used by: train/runinfo (fills the run's fields), io/checkpoint (writes it). */
#ifndef LLMT_PROVENANCE_H
#define LLMT_PROVENANCE_H
#include <stdbool.h>
#include <stddef.h>

#define PROVENANCE_MAX_FIELDS 48

typedef struct provenance_field {
    char name[32];
    char *text;   /* the value as plain text ("" for an absent one) */
    char *json;   /* its JSON value */
    bool in_h5;   /* written as a checkpoint attribute (the namelist has its own: /config) */
} provenance_field_t;

typedef struct provenance {
    int n;
    provenance_field_t f[PROVENANCE_MAX_FIELDS];
} provenance_t;

/* A string field (JSON-escaped); NULL value = absent: text "", JSON null. */
void provenance_add_str(provenance_t *p, const char *name, const char *value);
/* A field whose JSON is `json` (a number, true/false/null or an array) and whose text is `text`. */
void provenance_add_json(provenance_t *p, const char *name, const char *text, const char *json);
/* The build's fields: llmtrain_version, commit, dirty, compiler, cflags, build_date, mpi, hdf5,
 * gemm, hwloc, papi, cuda, nccl. */
void provenance_add_build(provenance_t *p);
/* The field called name, or NULL. */
const provenance_field_t *provenance_find(const provenance_t *p, const char *name);
/* The members `"name":json` joined by sep ("," for one line), no braces; malloc'ed (free()). */
char *provenance_json_members(const provenance_t *p, const char *sep);
/* A JSON string literal of s (quotes included), malloc'ed (free()). */
char *provenance_json_string(const char *s);
/* Flatten into one buffer (malloc'ed, *len bytes; free()) and back: the broadcast form. */
char *provenance_pack(const provenance_t *p, size_t *len);
void provenance_unpack(provenance_t *p, const char *buf, size_t len);
void provenance_destroy(provenance_t *p);
#endif
