/* checkpoint.c — model weights in one HDF5 file, written and read collectively (see
 * checkpoint.h). Every parameter is a dataset in its GLOBAL shape; each rank moves exactly the
 * hyperslabs its registry says it owns, so the file does not depend on the grid that wrote it.
 * All HDF5 calls that touch metadata (create, attributes) are made by every rank with the same
 * arguments, as parallel HDF5 requires; only the data selections differ between ranks. */
#include "io/checkpoint.h"
#include "core/alloc.h"
#include "core/error.h"
#include <hdf5.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#ifndef LLMT_VERSION
#define LLMT_VERSION "0.1.0"
#endif

#define CKPT_FORMAT "llmtrain-checkpoint"
#define CKPT_FORMAT_VERSION 1
/* An attribute lives in the object header, which holds at most 64 KiB: longer namelist texts
 * go to the dataset /config instead. */
#define CKPT_CONFIG_ATTR_MAX 60000

/* ---- small HDF5 helpers ----------------------------------------------------------------- */

/* A fixed-length, NUL-terminated string type holding `len` characters (at least one byte). */
static hid_t str_type(size_t len) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5_CHECK(t);
    H5_CHECK(H5Tset_size(t, len + 1));
    H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLTERM));
    return t;
}

static void write_str_attr(hid_t loc, const char *name, const char *value) {
    hid_t type = str_type(strlen(value));
    hid_t space = H5Screate(H5S_SCALAR);
    H5_CHECK(space);
    hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(attr);
    H5_CHECK(H5Awrite(attr, type, value));
    H5_CHECK(H5Aclose(attr));
    H5_CHECK(H5Sclose(space));
    H5_CHECK(H5Tclose(type));
}

static void write_int_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                           const void *value) {
    hid_t space = H5Screate(H5S_SCALAR);
    H5_CHECK(space);
    hid_t attr = H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(attr);
    H5_CHECK(H5Awrite(attr, mem_type, value));
    H5_CHECK(H5Aclose(attr));
    H5_CHECK(H5Sclose(space));
}

/* Read a string attribute (fixed or variable length) into buf; -1 if it is absent. */
static int read_str_attr(hid_t loc, const char *name, char *buf, size_t len) {
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    H5_CHECK(attr);
    hid_t ftype = H5Aget_type(attr);
    H5_CHECK(ftype);
    int rc = -1;
    if (H5Tget_class(ftype) == H5T_STRING) {
        if (H5Tis_variable_str(ftype) > 0) {
            char *s = NULL;
            hid_t mtype = H5Tcopy(H5T_C_S1);
            H5_CHECK(H5Tset_size(mtype, H5T_VARIABLE));
            H5_CHECK(H5Aread(attr, mtype, &s));
            snprintf(buf, len, "%s", s ? s : "");
            H5free_memory(s);
            H5_CHECK(H5Tclose(mtype));
        } else {
            size_t n = H5Tget_size(ftype);
            char *s = xcalloc(n + 1, 1);
            hid_t mtype = str_type(n);
            H5_CHECK(H5Aread(attr, mtype, s));
            snprintf(buf, len, "%s", s);
            H5_CHECK(H5Tclose(mtype));
            xfree(s);
        }
        rc = 0;
    }
    H5_CHECK(H5Tclose(ftype));
    H5_CHECK(H5Aclose(attr));
    return rc;
}

/* Read an integer attribute as int64; -1 if it is absent. */
static int read_i64_attr(hid_t loc, const char *name, int64_t *value) {
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    H5_CHECK(attr);
    H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, value));
    H5_CHECK(H5Aclose(attr));
    return 0;
}

/* A file access list for the MPI-IO driver on `comm`, with collective metadata operations
 * (one rank reads or writes metadata and shares it, instead of every rank hitting the FS). */
static hid_t mpio_fapl(MPI_Comm comm) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5_CHECK(fapl);
    H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
    H5_CHECK(H5Pset_all_coll_metadata_ops(fapl, 1));
    H5_CHECK(H5Pset_coll_metadata_write(fapl, 1));
    return fapl;
}

static hid_t collective_dxpl(void) {
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5_CHECK(dxpl);
    H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    return dxpl;
}

/* ---- selections ----------------------------------------------------------------------------- */

/* Select in `fspace` the union of this rank's hyperslabs of p (or nothing), and return the
 * matching memory space: the local shard as a flat array. HDF5 enumerates a selection in
 * row-major file order, which is exactly the row-major order of the local shard, also when
 * split_blocks = 3 (local rows are q part | k part | v part, in file order). */
static hid_t select_local_shard(const param_t *p, const params_t *P, hid_t fspace,
                                bool this_rank_moves_data) {
    hsize_t local = p->numel > 0 ? (hsize_t)p->numel : 1;
    hid_t mspace = H5Screate_simple(1, &local, NULL);
    H5_CHECK(mspace);
    if (!this_rank_moves_data || p->numel == 0) {
        H5_CHECK(H5Sselect_none(fspace));
        H5_CHECK(H5Sselect_none(mspace));
        return mspace;
    }
    int64_t start[3][2], count[3][2];
    int nblk = param_hyperslabs(p, P->tp, P->tp_rank, start, count);
    ASSERT(nblk >= 1 && nblk <= 3);
    hsize_t total = 0;
    for (int b = 0; b < nblk; b++) {
        hsize_t st[2] = {(hsize_t)start[b][0], (hsize_t)start[b][1]};
        hsize_t ct[2] = {(hsize_t)count[b][0], (hsize_t)count[b][1]};
        H5_CHECK(H5Sselect_hyperslab(fspace, b == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, st, NULL,
                                     ct, NULL));
        total += ct[0] * (p->ndim == 2 ? ct[1] : 1);
    }
    ASSERT(total == (hsize_t)p->numel); /* registry and hyperslabs agree */
    ASSERT(H5Sget_select_npoints(fspace) == (hssize_t)p->numel);
    return mspace;
}

/* The GLOBAL shape of p as HDF5 dims (1-D parameters are stored 1-D). */
static int global_dims(const param_t *p, hsize_t dims[2]) {
    dims[0] = (hsize_t)p->shape[0];
    dims[1] = (hsize_t)p->shape[1];
    return p->ndim;
}

/* ---- write ---------------------------------------------------------------------------------- */

static void write_root_attributes(hid_t file, const ckpt_meta_t *meta, bool config_as_attr) {
    const int32_t version = CKPT_FORMAT_VERSION;
    const int32_t vocab = meta->vocab_size, padded = meta->padded_vocab;
    write_str_attr(file, "format", CKPT_FORMAT);
    write_int_attr(file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version);
    write_str_attr(file, "llmtrain_version", LLMT_VERSION);
    write_int_attr(file, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta->step);
    write_int_attr(file, "seed", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta->seed);
    write_int_attr(file, "vocab_size", H5T_STD_I32LE, H5T_NATIVE_INT32, &vocab);
    write_int_attr(file, "padded_vocab", H5T_STD_I32LE, H5T_NATIVE_INT32, &padded);
    if (config_as_attr) write_str_attr(file, "config", meta->config_text ? meta->config_text : "");
}

/* A namelist too long for an attribute: a scalar string dataset /config, written by rank 0. */
static void write_config_dataset(hid_t file, const char *text, int rank, hid_t dxpl) {
    hid_t type = str_type(strlen(text));
    hid_t fspace = H5Screate(H5S_SCALAR), mspace = H5Screate(H5S_SCALAR);
    H5_CHECK(fspace);
    H5_CHECK(mspace);
    hid_t dset = H5Dcreate2(file, "config", type, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(dset);
    if (rank != 0) {
        H5_CHECK(H5Sselect_none(fspace));
        H5_CHECK(H5Sselect_none(mspace));
    }
    H5_CHECK(H5Dwrite(dset, type, mspace, fspace, dxpl, text));
    H5_CHECK(H5Dclose(dset));
    H5_CHECK(H5Sclose(mspace));
    H5_CHECK(H5Sclose(fspace));
    H5_CHECK(H5Tclose(type));
}

static void write_param(hid_t group, const params_t *P, const param_t *p, const float *flat,
                        bool this_rank_writes, hid_t dxpl) {
    hsize_t dims[2];
    hid_t fspace = H5Screate_simple(global_dims(p, dims), dims, NULL);
    H5_CHECK(fspace);
    hid_t dset = H5Dcreate2(group, p->name, H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT);
    H5_CHECK(dset);
    hid_t mspace = select_local_shard(p, P, fspace, this_rank_writes);
    /* Collective: ranks with nothing to write still take part, with empty selections. */
    H5_CHECK(H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, flat + p->offset));
    H5_CHECK(H5Sclose(mspace));
    H5_CHECK(H5Dclose(dset));
    H5_CHECK(H5Sclose(fspace));
}

void ckpt_write_weights(const char *path, MPI_Comm comm, const params_t *P, const float *flat,
                        const ckpt_meta_t *meta, int writer) {
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    char tmp[1024];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        fatal_user("checkpoint path too long: %s", path);

    hid_t fapl = mpio_fapl(comm);
    MPI_CHECK(MPI_Barrier(comm));
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (file < 0) fatal_user("cannot create checkpoint file %s (is its directory writable?)", tmp);
    H5_CHECK(H5Pclose(fapl));

    const char *text = meta->config_text ? meta->config_text : "";
    bool config_as_attr = strlen(text) <= CKPT_CONFIG_ATTR_MAX;
    write_root_attributes(file, meta, config_as_attr);
    hid_t dxpl = collective_dxpl();
    if (!config_as_attr) write_config_dataset(file, text, rank, dxpl);

    hid_t group = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(group);
    for (int i = 0; i < P->n; i++) {
        const param_t *p = &P->p[i];
        /* One copy of each element: a replicated parameter is written by tp rank 0 only, the
         * tied wte by the first pipeline stage only. */
        bool writes = writer && p->held && !p->tied_copy && (p->split_dim >= 0 || P->tp_rank == 0);
        write_param(group, P, p, flat, writes, dxpl);
    }
    H5_CHECK(H5Gclose(group));
    H5_CHECK(H5Pclose(dxpl));
    /* Make the data durable before the rename publishes the file. */
    H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    H5_CHECK(H5Fclose(file));

    MPI_CHECK(MPI_Barrier(comm));
    if (rank == 0) SYS_CHECK(rename(tmp, path));
    MPI_CHECK(MPI_Barrier(comm)); /* every rank returns with the final name in place */
}

/* ---- read ----------------------------------------------------------------------------------- */

static void format_dims(char *buf, size_t len, int ndim, const hsize_t *dims) {
    if (ndim == 1) snprintf(buf, len, "[%llu]", (unsigned long long)dims[0]);
    else if (ndim == 2)
        snprintf(buf, len, "[%llu, %llu]", (unsigned long long)dims[0],
                 (unsigned long long)dims[1]);
    else snprintf(buf, len, "(%d dimensions)", ndim);
}

/* Open the file read-only on every rank, or end with a user error that says why. The existence
 * check runs on rank 0 and is shared, so every rank takes the same branch. */
static hid_t open_for_read(const char *path, MPI_Comm comm) {
    int rank, exists = 0;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    struct stat st;
    if (rank == 0) exists = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    MPI_CHECK(MPI_Bcast(&exists, 1, MPI_INT, 0, comm));
    if (!exists) fatal_user("checkpoint %s: no such file", path);

    hid_t fapl = mpio_fapl(comm);
    H5E_auto2_t old_func;
    void *old_data;
    H5_CHECK(H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data));
    H5_CHECK(H5Eset_auto2(H5E_DEFAULT, NULL, NULL)); /* our message replaces HDF5's trace */
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5_CHECK(H5Eset_auto2(H5E_DEFAULT, old_func, old_data));
    H5_CHECK(H5Pclose(fapl));
    if (file < 0) fatal_user("checkpoint %s: not a readable HDF5 file (corrupt or truncated?)", path);
    return file;
}

/* The root attributes say this is a checkpoint this program can read; else a message. */
static int check_format(hid_t file, const char *path, char *msg, size_t len) {
    char format[64] = "";
    int64_t version = 0;
    if (read_str_attr(file, "format", format, sizeof format) != 0 ||
        strcmp(format, CKPT_FORMAT) != 0) {
        snprintf(msg, len, "checkpoint %s: not an llmtrain checkpoint (attribute format is '%s', "
                 "expected '%s')", path, format, CKPT_FORMAT);
        return -1;
    }
    if (read_i64_attr(file, "format_version", &version) != 0 || version != CKPT_FORMAT_VERSION) {
        snprintf(msg, len, "checkpoint %s: format_version %lld, this program reads version %d",
                 path, (long long)version, CKPT_FORMAT_VERSION);
        return -1;
    }
    return 0;
}

/* Open /model/<name> and check its shape against the registry; -1 with a message if not. */
static hid_t open_param(hid_t group, const param_t *p, const char *path, char *msg, size_t len) {
    if (H5Lexists(group, p->name, H5P_DEFAULT) <= 0) {
        snprintf(msg, len, "checkpoint %s: dataset /model/%s is missing (written for a different "
                 "model?)", path, p->name);
        return -1;
    }
    hid_t dset = H5Dopen2(group, p->name, H5P_DEFAULT);
    H5_CHECK(dset);
    hid_t space = H5Dget_space(dset);
    H5_CHECK(space);
    hsize_t dims[H5S_MAX_RANK], want[2];
    int ndim = H5Sget_simple_extent_dims(space, dims, NULL);
    H5_CHECK(ndim);
    H5_CHECK(H5Sclose(space));
    int want_ndim = global_dims(p, want);
    bool same = ndim == want_ndim && dims[0] == want[0] && (ndim == 1 || dims[1] == want[1]);
    if (!same) {
        char have_s[64], want_s[64];
        format_dims(have_s, sizeof have_s, ndim, dims);
        format_dims(want_s, sizeof want_s, want_ndim, want);
        snprintf(msg, len, "checkpoint %s: dataset /model/%s has shape %s but the model expects "
                 "%s", path, p->name, have_s, want_s);
        H5_CHECK(H5Dclose(dset));
        return -1;
    }
    return dset;
}

static void read_param(hid_t dset, const params_t *P, const param_t *p, float *flat, hid_t dxpl) {
    hid_t fspace = H5Dget_space(dset);
    H5_CHECK(fspace);
    hid_t mspace = select_local_shard(p, P, fspace, true);
    H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, flat + p->offset));
    H5_CHECK(H5Sclose(mspace));
    H5_CHECK(H5Sclose(fspace));
}

/* Read every parameter; on the first problem leave a message and stop (-1). */
static int read_all_params(hid_t file, const char *path, const params_t *P, float *flat,
                           char *msg, size_t len) {
    if (H5Lexists(file, "model", H5P_DEFAULT) <= 0) {
        snprintf(msg, len, "checkpoint %s: group /model is missing", path);
        return -1;
    }
    hid_t group = H5Gopen2(file, "model", H5P_DEFAULT);
    H5_CHECK(group);
    hid_t dxpl = collective_dxpl();
    int rc = 0;
    for (int i = 0; i < P->n && rc == 0; i++) {
        hid_t dset = open_param(group, &P->p[i], path, msg, len);
        if (dset < 0) {
            rc = -1;
            break;
        }
        read_param(dset, P, &P->p[i], flat, dxpl);
        H5_CHECK(H5Dclose(dset));
    }
    H5_CHECK(H5Pclose(dxpl));
    H5_CHECK(H5Gclose(group));
    return rc;
}

int64_t ckpt_read_weights(const char *path, MPI_Comm comm, const params_t *P, float *flat) {
    hid_t file = open_for_read(path, comm);
    char msg[1024] = "";
    int64_t step = 0;
    int rc = check_format(file, path, msg, sizeof msg);
    if (rc == 0 && read_i64_attr(file, "step", &step) != 0) {
        snprintf(msg, sizeof msg, "checkpoint %s: root attribute 'step' is missing", path);
        rc = -1;
    }
    if (rc == 0) rc = read_all_params(file, path, P, flat, msg, sizeof msg);
    /* Every rank checked the same file, so every rank reaches the same verdict: close first,
     * then report (the message is a user error, not a crash). */
    H5_CHECK(H5Fclose(file));
    if (rc != 0) fatal_user("%s", msg);
    return step;
}
