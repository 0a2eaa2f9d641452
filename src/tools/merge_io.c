/* merge_io.c — llmmerge's HDF5 inputs and output (see merge_io.h). The attribute types and the
 * dataset properties are checkpoint.c's, so a merged file cannot be told from a weights file
 * that llmtrain wrote except by its merge_* attributes. */
#include "tools/merge_io.h"
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/version.h"
#include "io/checkpoint.h"
#include "io/h5attr.h"

#define MIO_FORMAT "llmtrain-checkpoint"
#define MIO_FORMAT_VERSION 1
#define MIO_TEXT_ATTR_MAX 60000   /* longer texts become a scalar string dataset (checkpoint.c) */
#define MIO_TEXT_MAX (64 << 20)   /* no text we read is longer: a damaged size is refused */

/* ---- attributes (reading) ------------------------------------------------------------------ */

int mio_model_keys(const mio_meta_t *m, const char *names[7], int32_t values[7]) {
    static const char *const keys[7] = {"vocab_size", "padded_vocab", "n_layer", "n_head",
                                        "d_model",    "d_ff",         "seq_len"};
    const int32_t v[7] = {m->vocab_size, m->padded_vocab, m->n_layer, m->n_head,
                          m->d_model,    m->d_ff,         m->seq_len};
    for (int i = 0; i < 7; i++) names[i] = keys[i], values[i] = v[i];
    return 7;
}

static int read_meta(hid_t file, const char *label, mio_meta_t *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    int32_t *v[7] = {&m->vocab_size, &m->padded_vocab, &m->n_layer, &m->n_head,
                     &m->d_model,    &m->d_ff,         &m->seq_len};
    const char *names[7];
    int32_t unused[7];
    mio_model_keys(m, names, unused);
    for (int i = 0; i < 7; i++) {
        int rc = h5_read_num_attr(file, names[i], H5T_NATIVE_INT32, v[i]);
        if (rc < 0 || (rc > 0 && i < 2))
            return errf(err, errlen, "%s: root attribute '%s' is %s", label, names[i],
                        rc > 0 ? "missing" : "unreadable (damaged file)");
    }
    const char *nums[2] = {"step", "seed"};
    int64_t *nv[2] = {&m->step, &m->seed};
    for (int i = 0; i < 2; i++) {
        int rc = h5_read_num_attr(file, nums[i], H5T_NATIVE_INT64, nv[i]);
        if (rc != 0)
            return errf(err, errlen, "%s: root attribute '%s' is %s", label, nums[i],
                        rc > 0 ? "missing" : "unreadable (damaged file)");
    }
    if (h5_read_str_attr(file, "run_id", MIO_TEXT_MAX, m->run_id, sizeof m->run_id) < 0 ||
        h5_read_str_attr(file, "kind", MIO_TEXT_MAX, m->kind, sizeof m->kind) < 0)
        return errf(err, errlen, "%s: root attribute run_id or kind is unreadable (damaged file)", label);
    return 0;
}

int mio_open(const char *path, const char *label, hid_t *file, mio_meta_t *meta, char *err,
             size_t errlen) {
    *file = -1;
    /* a regular file, checked without waiting: HDF5's own open of a FIFO would block forever */
    int fd = file_open_regular(path, NULL);
    if (fd < 0) return errf(err, errlen, "%s: cannot read: %s", label, file_strerror(errno));
    close(fd);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        char why[512];
        h5_error_text(why, sizeof why);
        return errf(err, errlen, "%s: not a readable HDF5 file (truncated or corrupt?): %s", label, why);
    }
    char format[64] = "";
    int64_t version = 0;
    int rc = h5_read_str_attr(f, "format", MIO_TEXT_MAX, format, sizeof format);
    if (rc != 0 || strcmp(format, MIO_FORMAT) != 0) {
        H5Fclose(f);
        return errf(err, errlen, "%s: not an llmtrain checkpoint or weights file (attribute format "
                    "is '%s', expected '%s')", label, rc == 0 ? format : rc > 0 ? "(missing)" : "(unreadable)",
                    MIO_FORMAT);
    }
    if (h5_read_num_attr(f, "format_version", H5T_NATIVE_INT64, &version) != 0 ||
        version != MIO_FORMAT_VERSION) {
        H5Fclose(f);
        return errf(err, errlen, "%s: format_version %lld, llmmerge reads version %d", label,
                    (long long)version, MIO_FORMAT_VERSION);
    }
    if (read_meta(f, label, meta, err, errlen) != 0) {
        H5Fclose(f);
        return -1;
    }
    *file = f;
    return 0;
}

/* ---- the list of tensors ------------------------------------------------------------------- */

static int by_name(const void *a, const void *b) {
    return strcmp(((const mio_tensor_t *)a)->name, ((const mio_tensor_t *)b)->name);
}

/* Shape and type of one dataset of /model into t; -1 with a message if it is not a float32
 * 1-D, 2-D or 3-D dataset with a checksum. */
static int describe_dataset(hid_t group, const char *label, mio_tensor_t *t, char *err, size_t errlen) {
    hid_t d = H5Dopen2(group, t->name, H5P_DEFAULT);
    if (d < 0) return errf(err, errlen, "%s: /model/%s is not a dataset (damaged file?)", label, t->name);
    hid_t space = H5Dget_space(d), type = H5Dget_type(d);
    hsize_t dims[H5S_MAX_RANK] = {0};
    int ndim = space < 0 ? -1 : H5Sget_simple_extent_dims(space, dims, NULL);
    int is_f32 = type >= 0 && H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
    htri_t has_sum = H5Aexists(d, "checksum");
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    H5Dclose(d);
    if (ndim < 1 || ndim > 3 || !is_f32)
        return errf(err, errlen, "%s: /model/%s is not a 1-D, 2-D or 3-D float32 tensor", label, t->name);
    if (has_sum <= 0)
        return errf(err, errlen, "%s: /model/%s has no checksum attribute", label, t->name);
    t->ndim = ndim;
    t->numel = 1;
    for (int k = 0; k < 3; k++) {
        t->dims[k] = k < ndim ? (int64_t)dims[k] : 1;
        t->numel *= t->dims[k];
    }
    return 0;
}

int mio_list_tensors(hid_t file, const char *label, mio_tensor_t **tensors, int *n, char *err,
                     size_t errlen) {
    *tensors = NULL;
    *n = 0;
    if (H5Lexists(file, "model", H5P_DEFAULT) <= 0)
        return errf(err, errlen, "%s: the group /model is missing", label);
    hid_t g = H5Gopen2(file, "model", H5P_DEFAULT);
    if (g < 0) return errf(err, errlen, "%s: the group /model cannot be opened", label);
    /* by position, not H5Literate: its callback's type differs between HDF5 1.10 and 1.12 */
    H5G_info_t info;
    int rc = 0, n_links = 0;
    if (H5Gget_info(g, &info) < 0) rc = errf(err, errlen, "%s: the group /model cannot be listed (damaged file)", label);
    else if (info.nlinks == 0) rc = errf(err, errlen, "%s: the group /model holds no tensors", label);
    else if (info.nlinks > 1000000) rc = errf(err, errlen, "%s: the group /model holds %llu objects (not a model)", label, (unsigned long long)info.nlinks);
    else n_links = (int)info.nlinks;
    mio_tensor_t *t = rc == 0 ? xcalloc((size_t)n_links, sizeof *t) : NULL;
    for (int i = 0; rc == 0 && i < n_links; i++) {
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, t[i].name,
                                         sizeof t[i].name, H5P_DEFAULT);
        if (len < 0) rc = errf(err, errlen, "%s: the group /model cannot be listed (damaged file)", label);
        else if (len >= MIO_NAME_MAX)
            rc = errf(err, errlen, "%s: /model holds a dataset with a name of %d or more characters "
                      "(not a model tensor)", label, MIO_NAME_MAX);
        else rc = describe_dataset(g, label, &t[i], err, errlen);
    }
    H5Gclose(g);
    if (rc != 0) {
        xfree(t);
        return -1;
    }
    qsort(t, (size_t)n_links, sizeof *t, by_name);
    *tensors = t;
    *n = n_links;
    return 0;
}

char *mio_config_text(hid_t file) {
    char *s = NULL;
    if (h5_read_text_attr(file, "config", MIO_TEXT_MAX, &s) == 0) return s;
    if (H5Lexists(file, "config", H5P_DEFAULT) > 0) { /* a namelist too long for an attribute */
        hid_t d = H5Dopen2(file, "config", H5P_DEFAULT);
        hid_t type = d < 0 ? -1 : H5Dget_type(d);
        size_t n = type >= 0 && H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) <= 0
                       ? H5Tget_size(type) : 0;
        if (n > 0 && n <= MIO_TEXT_MAX) {
            s = xcalloc(n + 1, 1);
            if (H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s) < 0) s[0] = '\0';
        }
        if (type >= 0) H5Tclose(type);
        if (d >= 0) H5Dclose(d);
    }
    return s ? s : xcalloc(1, 1); /* "" */
}

/* ---- one tensor ----------------------------------------------------------------------------- */

int mio_read_tensor(hid_t file, const char *label, const mio_tensor_t *t, float *x, char *err,
                    size_t errlen) {
    char path[MIO_NAME_MAX + 8];
    snprintf(path, sizeof path, "model/%s", t->name);
    hid_t d = H5Lexists(file, "model", H5P_DEFAULT) > 0 && H5Lexists(file, path, H5P_DEFAULT) > 0
                  ? H5Dopen2(file, path, H5P_DEFAULT) : -1;
    if (d < 0) return errf(err, errlen, "%s: tensor /model/%s is missing", label, t->name);
    hid_t space = H5Dget_space(d);
    hsize_t dims[H5S_MAX_RANK] = {0};
    int ndim = space < 0 ? -1 : H5Sget_simple_extent_dims(space, dims, NULL);
    if (space >= 0) H5Sclose(space);
    bool same = ndim == t->ndim;
    for (int k = 0; same && k < ndim; k++) same = (int64_t)dims[k] == t->dims[k];
    uint64_t stored = 0;
    int rc = 0;
    if (!same) {
        rc = errf(err, errlen, "%s: tensor /model/%s changed its shape while being merged", label, t->name);
    } else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0) {
        char why[512];
        h5_error_text(why, sizeof why);
        rc = errf(err, errlen, "%s: tensor /model/%s cannot be read (truncated or corrupt file): %s",
                  label, t->name, why);
    } else if (h5_read_num_attr(d, "checksum", H5T_NATIVE_UINT64, &stored) != 0) {
        rc = errf(err, errlen, "%s: tensor /model/%s has no readable checksum attribute", label, t->name);
    }
    H5Dclose(d);
    if (rc != 0) return rc;
    uint64_t have = ckpt_tensor_checksum(x, (size_t)t->numel);
    if (have != stored)
        return errf(err, errlen, "%s: tensor /model/%s fails its checksum (stored %016llx, computed "
                    "%016llx): the file is corrupt", label, t->name, (unsigned long long)stored,
                    (unsigned long long)have);
    for (int64_t j = 0; j < t->numel; j++)
        if (!isfinite(x[j]))
            return errf(err, errlen, "%s: tensor /model/%s holds %s at element %lld: a diverged "
                        "model cannot be merged", label, t->name, isnan(x[j]) ? "NaN" : "Inf",
                        (long long)j);
    return 0;
}

/* ---- the output ---------------------------------------------------------------------------- */

/* A text as a root attribute, or, when longer than an object header holds, as a scalar string
 * dataset of that name (how checkpoint.c stores a long /config). */
static herr_t write_text(hid_t file, const char *name, const char *text, hid_t dcpl) {
    hid_t type = h5_str_type(strlen(text), H5T_CSET_ASCII);
    if (type < 0) return -1;
    herr_t rc;
    if (strlen(text) <= MIO_TEXT_ATTR_MAX) {
        rc = h5_write_attr(file, name, type, type, text);
    } else {
        hid_t space = H5Screate(H5S_SCALAR);
        hid_t d = space < 0 ? -1 : H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        rc = d < 0 ? -1 : H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text);
        if (d >= 0 && H5Dclose(d) < 0) rc = -1;
        if (space >= 0) H5Sclose(space);
    }
    H5Tclose(type);
    return rc;
}

static int write_root(mio_out_t *o, const mio_provenance_t *pv) {
    const char *names[7];
    int32_t values[7];
    int n = mio_model_keys(pv->model, names, values);
    int32_t version = MIO_FORMAT_VERSION;
    int bad = write_text(o->file, "format", MIO_FORMAT, o->dcpl) < 0;
    bad |= h5_write_attr(o->file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version) < 0;
    for (int i = 0; i < n; i++)
        bad |= h5_write_attr(o->file, names[i], H5T_STD_I32LE, H5T_NATIVE_INT32, &values[i]) < 0;
    bad |= write_text(o->file, "llmtrain_version", LLMT_VERSION, o->dcpl) < 0;
    bad |= write_text(o->file, "kind", "weights", o->dcpl) < 0;
    bad |= write_text(o->file, "run_id", pv->run_id, o->dcpl) < 0;
    bad |= h5_write_attr(o->file, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &pv->step) < 0;
    bad |= h5_write_attr(o->file, "seed", H5T_STD_I64LE, H5T_NATIVE_INT64, &pv->seed) < 0;
    bad |= write_text(o->file, "config", pv->config, o->dcpl) < 0;
    bad |= write_text(o->file, "merge_method", pv->method, o->dcpl) < 0;
    bad |= write_text(o->file, "merge_inputs", pv->inputs_json, o->dcpl) < 0;
    bad |= write_text(o->file, "merge_parameters", pv->parameters, o->dcpl) < 0;
    return bad ? -1 : 0;
}

int mio_create(mio_out_t *o, const char *path, const mio_provenance_t *pv, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->file = o->model = o->dcpl = -1;
    if (snprintf(o->path, sizeof o->path, "%s", path) >= (int)sizeof o->path)
        return errf(err, errlen, "out '%s': path too long", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
    char why[512];
    o->file = H5Fcreate(o->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (o->file < 0) {
        h5_error_text(why, sizeof why);
        return errf(err, errlen, "cannot create %s (is its directory there and writable?): %s", o->tmp, why);
    }
    /* no timestamps in object headers: the same merge gives the same bytes (checkpoint.c) */
    o->dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    int bad = o->dcpl < 0 || H5Pset_obj_track_times(o->dcpl, 0) < 0 || gcpl < 0 ||
              H5Pset_obj_track_times(gcpl, 0) < 0;
    if (!bad) bad = write_root(o, pv) != 0;
    if (!bad) bad = (o->model = H5Gcreate2(o->file, "model", H5P_DEFAULT, gcpl, H5P_DEFAULT)) < 0;
    if (gcpl >= 0) H5Pclose(gcpl);
    if (bad) {
        h5_error_text(why, sizeof why);
        mio_abandon(o);
        return errf(err, errlen, "cannot write the attributes of %s: %s", o->tmp, why);
    }
    return 0;
}

int mio_write_tensor(mio_out_t *o, const mio_tensor_t *t, const float *x, char *err, size_t errlen) {
    hsize_t dims[3] = {(hsize_t)t->dims[0], (hsize_t)t->dims[1], (hsize_t)t->dims[2]};
    uint64_t sum = ckpt_tensor_checksum(x, (size_t)t->numel);
    hid_t space = H5Screate_simple(t->ndim, dims, NULL);
    hid_t d = space < 0 ? -1 : H5Dcreate2(o->model, t->name, H5T_IEEE_F32LE, space, H5P_DEFAULT, o->dcpl, H5P_DEFAULT);
    int bad = d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0 ||
              h5_write_attr(d, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &sum) < 0;
    char why[512] = "";
    if (bad) h5_error_text(why, sizeof why);
    if (d >= 0 && H5Dclose(d) < 0 && !bad) bad = 1, h5_error_text(why, sizeof why);
    if (space >= 0) H5Sclose(space);
    if (bad) return errf(err, errlen, "writing /model/%s into %s failed: %s", t->name, o->tmp, why);
    return 0;
}

int mio_publish(mio_out_t *o, char *err, size_t errlen) {
    char why[512] = "";
    int bad = H5Gclose(o->model) < 0;
    o->model = -1;
    if (!bad) bad = H5Fflush(o->file, H5F_SCOPE_GLOBAL) < 0;
    if (bad) h5_error_text(why, sizeof why);
    if (H5Pclose(o->dcpl) < 0) bad = 1;
    o->dcpl = -1;
    if (H5Fclose(o->file) < 0 && !bad) bad = 1, h5_error_text(why, sizeof why);
    o->file = -1;
    if (bad) {
        unlink(o->tmp);
        return errf(err, errlen, "writing %s failed: %s", o->tmp, why);
    }
    if (file_publish(o->tmp, o->path) != 0) {
        int e = errno;
        unlink(o->tmp);
        return errf(err, errlen, "cannot publish %s as %s: %s", o->tmp, o->path, strerror(e));
    }
    return 0;
}

void mio_abandon(mio_out_t *o) {
    if (o->model >= 0) H5Gclose(o->model);
    if (o->dcpl >= 0) H5Pclose(o->dcpl);
    if (o->file >= 0) H5Fclose(o->file);
    o->model = o->dcpl = o->file = -1;
    if (o->tmp[0]) unlink(o->tmp);
}
