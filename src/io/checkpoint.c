/* checkpoint.c — checkpoints and weights in one HDF5 file, written and read collectively (see
 * checkpoint.h). Every parameter is a dataset in its GLOBAL shape; each rank moves exactly the
 * hyperslabs its registry says it owns, so the file does not depend on the grid that wrote it.
 * All HDF5 calls that touch metadata (create, attributes) are made by every rank with the same
 * arguments, as parallel HDF5 requires; only the data selections differ between ranks. */
#include "io/checkpoint.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/version.h"
#include <hdf5.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>


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
static hid_t mpio_fapl(MPI_Comm comm, MPI_Info info) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5_CHECK(fapl);
    H5_CHECK(H5Pset_fapl_mpio(fapl, comm, info));
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


/* ---- checksums ------------------------------------------------------------------------------ */

/* splitmix64's finaliser: a strong 64-bit mix, so a flipped bit anywhere changes the sum. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Sum over this rank's local elements of mix64(global index, value bits), mod 2^64. The sum
 * commutes, so the parts of any grid add up to the same number. */
static uint64_t local_checksum(const param_t *p, const params_t *P, const float *x) {
    uint64_t sum = 0;
    for (size_t j = 0; j < p->numel; j++) {
        uint32_t bits;
        memcpy(&bits, &x[j], sizeof bits);
        uint64_t g = (uint64_t)param_global_index(p, P->tp, P->tp_rank, j);
        sum += mix64(g * 0x9e3779b97f4a7c15ull ^ ((uint64_t)bits << 17) ^ bits);
    }
    return sum;
}

/* Whether this rank holds the one copy of p's local elements that is written and checked. */
static bool owns_copy(const param_t *p, const params_t *P, int owner) {
    return owner && p->held && !p->tied_copy && (p->split_dim >= 0 || P->tp_rank == 0);
}

/* ---- write ---------------------------------------------------------------------------------- */

static void write_root_attributes(hid_t file, const ckpt_meta_t *meta, bool config_as_attr,
                                  const char *kind) {
    const int32_t version = CKPT_FORMAT_VERSION;
    const int32_t vocab = meta->vocab_size, padded = meta->padded_vocab;
    write_str_attr(file, "format", CKPT_FORMAT);
    write_int_attr(file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version);
    write_str_attr(file, "llmtrain_version", LLMT_VERSION);
    write_str_attr(file, "kind", kind);
    write_int_attr(file, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta->step);
    write_int_attr(file, "seed", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta->seed);
    write_int_attr(file, "vocab_size", H5T_STD_I32LE, H5T_NATIVE_INT32, &vocab);
    write_int_attr(file, "padded_vocab", H5T_STD_I32LE, H5T_NATIVE_INT32, &padded);
    if (config_as_attr) write_str_attr(file, "config", meta->config_text ? meta->config_text : "");
}

static void write_state_attributes(hid_t file, const ckpt_state_t *s) {
    const int64_t *v[] = {&s->tokens_seen, &s->sample_pos, &s->adam_t, &s->skipped,
                          &s->global_batch, &s->grid_dp, &s->grid_tp, &s->grid_pp};
    const char *names[] = {"tokens_seen", "sample_pos", "adam_t", "skipped", "global_batch",
                           "grid_dp", "grid_tp", "grid_pp"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        write_int_attr(file, names[i], H5T_STD_I64LE, H5T_NATIVE_INT64, v[i]);
    write_int_attr(file, "loss_scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &s->loss_scale);
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

/* One tensor: collective create, each owner writes its hyperslabs, then the combined checksum
 * as an attribute (same value on every rank, as collective metadata requires). */
static void write_param(hid_t group, const params_t *P, const param_t *p, const float *flat,
                        bool this_rank_writes, hid_t dxpl, MPI_Comm comm) {
    hsize_t dims[2];
    hid_t fspace = H5Screate_simple(global_dims(p, dims), dims, NULL);
    H5_CHECK(fspace);
    hid_t dset = H5Dcreate2(group, p->name, H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT);
    H5_CHECK(dset);
    hid_t mspace = select_local_shard(p, P, fspace, this_rank_writes);
    /* Collective: ranks with nothing to write still take part, with empty selections. */
    H5_CHECK(H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, flat + p->offset));
    uint64_t sum = this_rank_writes ? local_checksum(p, P, flat + p->offset) : 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_UINT64_T, MPI_SUM, comm));
    write_int_attr(dset, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &sum);
    H5_CHECK(H5Sclose(mspace));
    H5_CHECK(H5Dclose(dset));
    H5_CHECK(H5Sclose(fspace));
}

static double write_tensor_group(hid_t parent, const char *name, const params_t *P,
                                 const float *flat, int owner, hid_t dxpl, MPI_Comm comm) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5_CHECK(lcpl);
    H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    hid_t group = H5Gcreate2(parent, name, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(group);
    double bytes = 0;
    for (int i = 0; i < P->n; i++) {
        const param_t *p = &P->p[i];
        bool writes = owns_copy(p, P, owner);
        write_param(group, P, p, flat, writes, dxpl, comm);
        bytes += (double)p->shape[0] * p->shape[1] * sizeof(float);
    }
    H5_CHECK(H5Gclose(group));
    H5_CHECK(H5Pclose(lcpl));
    return bytes;
}

double ckpt_save(const char *path, MPI_Comm comm, MPI_Info info, const params_t *P,
                 const float *params, const float *m, const float *v, const ckpt_meta_t *meta,
                 const ckpt_state_t *state, int owner) {
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    char tmp[1024];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        fatal_user("checkpoint path too long: %s", path);
    hid_t fapl = mpio_fapl(comm, info);
    MPI_CHECK(MPI_Barrier(comm));
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (file < 0) fatal_user("cannot create checkpoint file %s (is its directory writable?)", tmp);
    H5_CHECK(H5Pclose(fapl));

    const char *text = meta->config_text ? meta->config_text : "";
    bool config_as_attr = strlen(text) <= CKPT_CONFIG_ATTR_MAX;
    write_root_attributes(file, meta, config_as_attr, state ? "checkpoint" : "weights");
    if (state) write_state_attributes(file, state);
    hid_t dxpl = collective_dxpl();
    if (!config_as_attr) write_config_dataset(file, text, rank, dxpl);
    double bytes = write_tensor_group(file, "model", P, params, owner, dxpl, comm);
    if (m && v) {
        bytes += write_tensor_group(file, "optimizer/adamw/m", P, m, owner, dxpl, comm);
        bytes += write_tensor_group(file, "optimizer/adamw/v", P, v, owner, dxpl, comm);
    }
    H5_CHECK(H5Pclose(dxpl));
    /* Make the data durable before the rename publishes the file. */
    H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    H5_CHECK(H5Fclose(file));
    MPI_CHECK(MPI_Barrier(comm));
    if (rank == 0) SYS_CHECK(rename(tmp, path));
    MPI_CHECK(MPI_Barrier(comm)); /* every rank returns with the final name in place */
    return bytes;
}

void ckpt_write_weights(const char *path, MPI_Comm comm, const params_t *P, const float *flat,
                        const ckpt_meta_t *meta, int writer) {
    ckpt_save(path, comm, MPI_INFO_NULL, P, flat, NULL, NULL, meta, NULL, writer);
}

/* ---- read ------------------------------------------------------------------------------------
 * Nothing here aborts on a bad file: every problem becomes a message and -1, the same on every
 * rank (metadata is read collectively, and data problems are agreed by an all-reduce), so a
 * caller can refuse the file and fall back to an older one. */

static void format_dims(char *buf, size_t len, int ndim, const hsize_t *dims) {
    if (ndim == 1) snprintf(buf, len, "[%llu]", (unsigned long long)dims[0]);
    else if (ndim == 2)
        snprintf(buf, len, "[%llu, %llu]", (unsigned long long)dims[0],
                 (unsigned long long)dims[1]);
    else snprintf(buf, len, "(%d dimensions)", ndim);
}

typedef struct reader {
    const char *path;
    MPI_Comm comm;
    const params_t *P;
    int owner;
    hid_t dxpl;
    char *msg;
    size_t len;
} reader_t;

/* Open read-only on every rank; < 0 with a message if missing or not a readable HDF5 file. */
static hid_t open_for_read(reader_t *r, MPI_Info info) {
    int rank, exists = 0;
    MPI_CHECK(MPI_Comm_rank(r->comm, &rank));
    struct stat st;
    if (rank == 0) exists = stat(r->path, &st) == 0 && S_ISREG(st.st_mode);
    MPI_CHECK(MPI_Bcast(&exists, 1, MPI_INT, 0, r->comm));
    if (!exists) {
        snprintf(r->msg, r->len, "checkpoint %s: no such file", r->path);
        return -1;
    }
    hid_t fapl = mpio_fapl(r->comm, info);
    hid_t file = H5Fopen(r->path, H5F_ACC_RDONLY, fapl);
    H5_CHECK(H5Pclose(fapl));
    if (file < 0)
        snprintf(r->msg, r->len, "checkpoint %s: not a readable HDF5 file (truncated or "
                 "corrupt)", r->path);
    return file;
}

/* The root attributes say this is a checkpoint this program can read; else a message. */
static int check_format(reader_t *r, hid_t file) {
    char format[64] = "";
    int64_t version = 0;
    if (read_str_attr(file, "format", format, sizeof format) != 0 ||
        strcmp(format, CKPT_FORMAT) != 0) {
        snprintf(r->msg, r->len, "checkpoint %s: not an llmtrain checkpoint (attribute format "
                 "is '%s', expected '%s')", r->path, format, CKPT_FORMAT);
        return -1;
    }
    if (read_i64_attr(file, "format_version", &version) != 0 || version != CKPT_FORMAT_VERSION) {
        snprintf(r->msg, r->len, "checkpoint %s: format_version %lld, this program reads "
                 "version %d", r->path, (long long)version, CKPT_FORMAT_VERSION);
        return -1;
    }
    return 0;
}

/* Open <group>/<name> and check its shape against the registry; < 0 with a message if not. */
static hid_t open_param(reader_t *r, hid_t group, const char *gname, const param_t *p) {
    if (H5Lexists(group, p->name, H5P_DEFAULT) <= 0) {
        snprintf(r->msg, r->len, "checkpoint %s: dataset /%s/%s is missing (written for a "
                 "different model?)", r->path, gname, p->name);
        return -1;
    }
    hid_t dset = H5Dopen2(group, p->name, H5P_DEFAULT);
    hid_t space = dset < 0 ? -1 : H5Dget_space(dset);
    hsize_t dims[H5S_MAX_RANK], want[2];
    int ndim = space < 0 ? -1 : H5Sget_simple_extent_dims(space, dims, NULL);
    if (space >= 0) H5Sclose(space);
    if (ndim < 0) {
        if (dset >= 0) H5Dclose(dset);
        snprintf(r->msg, r->len, "checkpoint %s: dataset /%s/%s cannot be opened (corrupt "
                 "file)", r->path, gname, p->name);
        return -1;
    }
    int want_ndim = global_dims(p, want);
    bool same = ndim == want_ndim && dims[0] == want[0] && (ndim == 1 || dims[1] == want[1]);
    if (!same) {
        char have_s[64], want_s[64];
        format_dims(have_s, sizeof have_s, ndim, dims);
        format_dims(want_s, sizeof want_s, want_ndim, want);
        snprintf(r->msg, r->len, "checkpoint %s: dataset /%s/%s has shape %s but the model "
                 "expects %s", r->path, gname, p->name, have_s, want_s);
        H5Dclose(dset);
        return -1;
    }
    return dset;
}

/* Read this rank's part of one tensor and agree with every rank that the checksum holds. */
static int read_param(reader_t *r, hid_t group, const char *gname, const param_t *p,
                      float *flat) {
    hid_t dset = open_param(r, group, gname, p);
    if (dset < 0) return -1;
    int bad = 0;
    hid_t fspace = H5Dget_space(dset);
    H5_CHECK(fspace);
    hid_t mspace = select_local_shard(p, r->P, fspace, true);
    if (H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, r->dxpl, flat + p->offset) < 0) bad = 1;
    H5Sclose(mspace);
    H5Sclose(fspace);
    bool has_sum = H5Aexists(dset, "checksum") > 0;
    uint64_t stored = 0;
    if (has_sum) {
        hid_t attr = H5Aopen(dset, "checksum", H5P_DEFAULT);
        if (attr < 0 || H5Aread(attr, H5T_NATIVE_UINT64, &stored) < 0) bad = 1;
        if (attr >= 0) H5Aclose(attr);
    }
    H5Dclose(dset);
    uint64_t v[2] = {!bad && owns_copy(p, r->P, r->owner) ? local_checksum(p, r->P, flat + p->offset) : 0,
                     (uint64_t)bad};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_SUM, r->comm));
    if (v[1]) {
        snprintf(r->msg, r->len, "checkpoint %s: dataset /%s/%s cannot be read (corrupt or "
                 "truncated file)", r->path, gname, p->name);
        return -1;
    }
    if (has_sum && v[0] != stored) {
        snprintf(r->msg, r->len, "checkpoint %s: dataset /%s/%s fails its checksum (stored "
                 "%016llx, computed %016llx): the file is corrupt", r->path, gname, p->name,
                 (unsigned long long)stored, (unsigned long long)v[0]);
        return -1;
    }
    return 0;
}

static int read_tensor_group(reader_t *r, hid_t file, const char *gname, float *flat) {
    if (H5Lexists(file, "optimizer", H5P_DEFAULT) <= 0 && strncmp(gname, "optimizer", 9) == 0) {
        snprintf(r->msg, r->len, "checkpoint %s: no optimizer state (a weights file, not a "
                 "checkpoint)", r->path);
        return -1;
    }
    hid_t group = H5Lexists(file, gname, H5P_DEFAULT) > 0 ? H5Gopen2(file, gname, H5P_DEFAULT) : -1;
    if (group < 0) {
        snprintf(r->msg, r->len, "checkpoint %s: group /%s is missing", r->path, gname);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < r->P->n && rc == 0; i++) rc = read_param(r, group, gname, &r->P->p[i], flat);
    H5Gclose(group);
    return rc;
}

static int read_state(reader_t *r, hid_t file, ckpt_state_t *s) {
    int64_t *v[] = {&s->tokens_seen, &s->sample_pos, &s->adam_t, &s->skipped, &s->global_batch,
                    &s->grid_dp, &s->grid_tp, &s->grid_pp};
    const char *names[] = {"tokens_seen", "sample_pos", "adam_t", "skipped", "global_batch",
                           "grid_dp", "grid_tp", "grid_pp"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (read_i64_attr(file, names[i], v[i]) != 0) {
            snprintf(r->msg, r->len, "checkpoint %s: root attribute '%s' is missing (a weights "
                     "file, not a checkpoint?)", r->path, names[i]);
            return -1;
        }
    s->loss_scale = 1.0;
    if (H5Aexists(file, "loss_scale") > 0) {
        hid_t a = H5Aopen(file, "loss_scale", H5P_DEFAULT);
        if (a >= 0) {
            H5Aread(a, H5T_NATIVE_DOUBLE, &s->loss_scale);
            H5Aclose(a);
        }
    }
    return 0;
}

int ckpt_load(const char *path, MPI_Comm comm, const params_t *P, float *params, float *m,
              float *v, ckpt_state_t *state, int64_t *meta_step, int owner, char *err,
              size_t errlen) {
    reader_t r = {path, comm, P, owner, -1, err, errlen};
    err[0] = '\0';
    /* HDF5 would print its whole error stack for a damaged file: our one message replaces it. */
    H5E_auto2_t old_func;
    void *old_data;
    H5_CHECK(H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data));
    H5_CHECK(H5Eset_auto2(H5E_DEFAULT, NULL, NULL));
    hid_t file = open_for_read(&r, MPI_INFO_NULL);
    int rc = file < 0 ? -1 : check_format(&r, file);
    if (rc == 0 && read_i64_attr(file, "step", meta_step) != 0) {
        snprintf(err, errlen, "checkpoint %s: root attribute 'step' is missing", path);
        rc = -1;
    }
    if (rc == 0 && state) rc = read_state(&r, file, state);
    r.dxpl = collective_dxpl();
    if (rc == 0) rc = read_tensor_group(&r, file, "model", params);
    if (rc == 0 && m) rc = read_tensor_group(&r, file, "optimizer/adamw/m", m);
    if (rc == 0 && v) rc = read_tensor_group(&r, file, "optimizer/adamw/v", v);
    H5Pclose(r.dxpl);
    if (file >= 0) H5Fclose(file);
    H5_CHECK(H5Eset_auto2(H5E_DEFAULT, old_func, old_data));
    return rc;
}

int64_t ckpt_peek_global_batch(const char *path) {
    H5E_auto2_t old_func;
    void *old_data;
    H5_CHECK(H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data));
    H5_CHECK(H5Eset_auto2(H5E_DEFAULT, NULL, NULL));
    int64_t gb = 0;
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file >= 0) {
        if (read_i64_attr(file, "global_batch", &gb) != 0) gb = 0;
        H5Fclose(file);
    }
    H5_CHECK(H5Eset_auto2(H5E_DEFAULT, old_func, old_data));
    return gb;
}

int64_t ckpt_read_weights(const char *path, MPI_Comm comm, const params_t *P, float *flat,
                          int owner) {
    char msg[1024];
    int64_t step = 0;
    if (ckpt_load(path, comm, P, flat, NULL, NULL, NULL, &step, owner, msg, sizeof msg) != 0)
        fatal_user("%s", msg);
    return step;
}
