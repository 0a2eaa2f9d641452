/* checkpoint.c — checkpoints and weights in one HDF5 file, written and read in parallel (see
 * checkpoint.h). Every parameter is a dataset in its GLOBAL shape; each rank moves exactly the
 * hyperslabs its registry says it owns, so the file does not depend on the grid that wrote it.
 * All HDF5 calls that touch metadata (create, attributes) are made by every rank with the same
 * arguments, as parallel HDF5 requires; only the data selections differ between ranks.
 *
 * Data moves independently where a rank's pieces are whole file rows and collectively where tp
 * interleaves them (moves_collectively); the collective datasets go first. Each element is
 * fetched once: its checksum is summed as it is written and the attributes follow the data.
 * Waits where ranks arrive far apart (after the data) sleep instead of polling.
 * Failures: no HDF5 call here aborts. A rank that sees a failure records it and keeps making
 * the same collective calls as the others; the ranks agree on the outcome at fixed points (after
 * each tensor group's creation, after all data calls, after the checksums, at the end), so they
 * all stop at the same place, close what is open and report one message. HDF5's automatic error printing is
 * off (main.c): the message carries the library's innermost reason instead.
 *
 * The last section is the serial, tensor-by-tensor reader and writer of the same format for
 * tools (llmmerge): it is here, not in a file of its own, so that the format's one definition
 * (name, version, attribute names, checksum, dataset properties) has one home; that is why this
 * file is longer than ~800 lines. */
#include "io/checkpoint.h"
#include "io/h5attr.h"
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/fileio.h"
#include "core/version.h"
#include "parallel/comm_host.h"

#define CKPT_FORMAT "llmtrain-checkpoint"
#define CKPT_FORMAT_VERSION 1
/* An attribute lives in the object header, which holds at most 64 KiB: longer namelist texts
 * go to the dataset /config instead. */
#define CKPT_CONFIG_ATTR_MAX 60000
/* No string attribute we read is longer than this: a larger size in a damaged file is refused
 * instead of allocated. */
#define CKPT_STR_ATTR_MAX (1 << 20)

/* ---- small HDF5 helpers (writing) -------------------------------------------------------------
 * They return < 0 on failure and never abort; the writer turns that into its message. */

static herr_t write_i64_attr(hid_t loc, const char *name, int64_t value) {
    return h5_write_attr(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

static herr_t write_i32_attr(hid_t loc, const char *name, int32_t value) {
    return h5_write_attr(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value);
}

/* A file access list for the MPI-IO driver on `comm`, with collective metadata operations
 * (one rank reads or writes metadata and shares it, instead of every rank hitting the FS). */
static hid_t mpio_fapl(MPI_Comm comm, MPI_Info info, hsize_t meta_block) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    if (H5Pset_fapl_mpio(fapl, comm, info) < 0 || H5Pset_all_coll_metadata_ops(fapl, 1) < 0 ||
        H5Pset_coll_metadata_write(fapl, 1) < 0 ||
        (meta_block > 0 && H5Pset_meta_block_size(fapl, meta_block) < 0)) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

/* A transfer list for MPI-IO data transfers of the given mode (collective or independent). */
static hid_t transfer_dxpl(H5FD_mpio_xfer_t mode) {
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (dxpl >= 0 && H5Pset_dxpl_mpio(dxpl, mode) < 0) {
        H5Pclose(dxpl);
        return -1;
    }
    return dxpl;
}

/* How p's data moves. A rank's elements of a tensor that is whole on it or split by rows over
 * tp (split_dim 0, or tp = 1) lie in whole rows of the file: each piece is a few contiguous file
 * ranges, written and read independently, with no collective call per dataset (a ZeRO partition,
 * an expert, a pipeline stage's tensors). A tensor split by columns over tp interleaves the tp
 * ranks' pieces in every row: those move in collective calls, so MPI-IO can aggregate the short
 * stretches into large accesses. The choice depends on p and tp only: the same on every rank. */
static bool moves_collectively(const ckpt_tensors_t *P, const ckpt_tensor_t *p) {
    return P->tp > 1 && p->split_dim > 0;
}

/* ---- selections ----------------------------------------------------------------------------- */

/* A piece of a local shard: local elements [a, b) of tensor p, in the local row-major order.
 * HDF5 enumerates a selection in row-major file order, which is the row-major order of the local
 * shard (also with split_blocks = 3: local rows are q part | k part | v part, in file order), and
 * every dimension maps local to global coordinates increasingly; so any set of local elements,
 * selected as file hyperslabs, is enumerated in local order. A range [a, b) of a row-major array
 * is at most 5 boxes (a partial row, full rows, ... for 3 dimensions); each box is at most
 * nblk file hyperslabs (its stretch of the split dimension cut at the blocks). */
typedef struct box {
    int64_t start[3], count[3];
} box_t;
#define PIECE_MAX_BOXES 16

/* The local shape of p's shard: the blocks' counts, the split dimension's summed. */
static void local_shape(const ckpt_tensor_t *p, int64_t L[3]) {
    for (int d = 0; d < 3; d++) L[d] = d < p->ndim ? p->count[0][d] * (d == p->split_dim ? p->nblk : 1) : 1;
}

/* The boxes (local coordinates) of elements [a, b) of the sub-array of dimensions d.. at the
 * place base[0..d) of the outer ones; appended to out[n..). */
static int range_boxes(const int64_t L[3], int nd, int d, int64_t base[3], int64_t a, int64_t b,
                       box_t *out, int n) {
    if (a >= b) return n;
    int64_t S = 1;
    for (int k = d + 1; k < nd; k++) S *= L[k];
    box_t x;
    for (int k = 0; k < 3; k++) x.start[k] = k < d ? base[k] : 0, x.count[k] = k < d ? 1 : L[k];
    if (d == nd - 1) {
        x.start[d] = a, x.count[d] = b - a;
        out[n++] = x;
        return n;
    }
    if (a % S) { /* the head: a partial row */
        const int64_t r = a / S, end = (r + 1) * S < b ? (r + 1) * S : b;
        base[d] = r;
        n = range_boxes(L, nd, d + 1, base, a - r * S, end - r * S, out, n);
        a = end;
    }
    if (b / S > a / S && a < b) { /* full rows */
        x.start[d] = a / S, x.count[d] = b / S - a / S;
        out[n++] = x;
        a = b / S * S;
    }
    if (a < b) { /* the tail: a partial row */
        base[d] = a / S;
        n = range_boxes(L, nd, d + 1, base, 0, b - a, out, n);
    }
    return n;
}

/* The file hyperslabs of local elements [a, b) of p: returns how many (<= PIECE_MAX_BOXES). */
static int piece_boxes(const ckpt_tensor_t *p, size_t a, size_t b, box_t *out) {
    int64_t L[3], base[3] = {0, 0, 0};
    box_t local[6];
    local_shape(p, L);
    const int nl = range_boxes(L, p->ndim, 0, base, (int64_t)a, (int64_t)b, local, 0);
    const int sd = p->split_dim, nblk = p->nblk;
    const int64_t per = sd >= 0 ? p->count[0][sd] : 0;
    int n = 0;
    for (int i = 0; i < nl; i++)
        for (int blk = 0; blk < (sd >= 0 ? nblk : 1); blk++) {
            box_t g;
            bool empty = false;
            for (int d = 0; d < 3; d++) {
                g.start[d] = local[i].start[d] + p->start[0][d], g.count[d] = local[i].count[d];
                if (d != sd) continue;
                const int64_t s = local[i].start[d] > blk * per ? local[i].start[d] : blk * per;
                const int64_t e0 = local[i].start[d] + local[i].count[d], e = e0 < (blk + 1) * per ? e0 : (blk + 1) * per;
                empty = e <= s;
                g.start[d] = p->start[blk][d] + (s - blk * per), g.count[d] = e - s;
            }
            if (!empty) out[n++] = g;
        }
    ASSERT(n <= PIECE_MAX_BOXES);
    return n;
}

/* Select in `fspace` the file elements of local elements [a, b) of p (nothing when a == b), and
 * return the matching memory space: b - a floats. < 0 on failure. */
static hid_t select_piece(const ckpt_tensor_t *p, hid_t fspace, size_t a, size_t b) {
    hsize_t local = b > a ? (hsize_t)(b - a) : 1;
    hid_t mspace = H5Screate_simple(1, &local, NULL);
    if (mspace < 0) return -1;
    if (a >= b) {
        if (H5Sselect_none(fspace) < 0 || H5Sselect_none(mspace) < 0) goto fail;
        return mspace;
    }
    box_t boxes[PIECE_MAX_BOXES];
    const int nb = piece_boxes(p, a, b, boxes);
    for (int i = 0; i < nb; i++) {
        hsize_t st[3], ct[3];
        for (int d = 0; d < 3; d++) st[d] = (hsize_t)boxes[i].start[d], ct[d] = (hsize_t)boxes[i].count[d];
        if (H5Sselect_hyperslab(fspace, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, st, NULL, ct, NULL) < 0)
            goto fail;
    }
    ASSERT(H5Sget_select_npoints(fspace) == (hssize_t)(b - a)); /* registry and hyperslabs agree */
    return mspace;
fail:
    H5Sclose(mspace);
    return -1;
}

/* The part [*a, *b) of p's local elements inside the flat range [lo, hi); false when empty. */
static bool tensor_range(const ckpt_tensor_t *p, size_t lo, size_t hi, size_t *a, size_t *b) {
    const size_t s = p->offset > lo ? p->offset : lo, e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (s >= e || p->numel == 0) return false;
    *a = s - p->offset, *b = e - p->offset;
    return true;
}

/* Pieces of at most `piece` elements that [a, b) takes (0 when empty). */
static int pieces_of(size_t a, size_t b, size_t piece) {
    return b > a ? (int)((b - a + piece - 1) / piece) : 0;
}

static int64_t tensor_global_numel(const ckpt_tensor_t *p) {
    return p->shape[0] * p->shape[1] * p->shape[2];
}

/* The GLOBAL shape of p as HDF5 dims (1-D parameters are stored 1-D, expert tensors with the
 * expert index first). */
static int global_dims(const ckpt_tensor_t *p, hsize_t dims[3]) {
    for (int d = 0; d < 3; d++) dims[d] = (hsize_t)p->shape[d];
    return p->ndim;
}

/* ---- checksums ------------------------------------------------------------------------------ */

/* splitmix64's finaliser: a strong 64-bit mix, so a flipped bit anywhere changes the sum. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Sum over local elements j0 .. j0+n-1 of p (x[0..n)) of mix64(global index, value bits), mod
 * 2^64. The sum commutes, so the pieces of any grid and partition add up to the same number. */
static uint64_t range_checksum(const ckpt_tensor_t *p, const ckpt_tensors_t *P, size_t j0, size_t n,
                               const float *x) {
    uint64_t sum = 0;
    int64_t gi[1024];
    for (size_t k0 = 0; k0 < n; k0 += 1024) {
        const size_t m = n - k0 < 1024 ? n - k0 : 1024;
        P->global_index(P, p, j0 + k0, m, gi);
        for (size_t k = 0; k < m; k++) {
            uint32_t bits;
            memcpy(&bits, &x[k0 + k], sizeof bits);
            uint64_t g = (uint64_t)gi[k];
            sum += mix64(g * 0x9e3779b97f4a7c15ull ^ ((uint64_t)bits << 17) ^ bits);
        }
    }
    return sum;
}

/* The checksum of a whole tensor in row-major order (global index = position): what
 * range_checksum gives for a rank that holds all of it (tp = 1). */
uint64_t ckpt_tensor_checksum(const float *x, size_t n) {
    uint64_t sum = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t bits;
        memcpy(&bits, &x[j], sizeof bits);
        sum += mix64((uint64_t)j * 0x9e3779b97f4a7c15ull ^ ((uint64_t)bits << 17) ^ bits);
    }
    return sum;
}

/* ---- the attribute checksum -----------------------------------------------------------------
 * attrs_checksum covers the root attributes that say where a run stands (step, adam_t,
 * sample_pos, the data cursor, the loss scale, the lineage, the model...): a value changed after
 * the save (an edit with h5py, a bit flip in the metadata block) is refused instead of resumed
 * from. Each attribute is mixed with its name, in a fixed order; the number is the same on
 * every rank and every grid. format, llmtrain_version and config are left out (text a user may
 * legitimately rewrite, e.g. h5py's UTF-8 strings; the namelist only documents the run). */
static void attr_mix(uint64_t *h, const char *name, uint64_t bits) {
    uint64_t n = 0xcbf29ce484222325ull; /* FNV-1a of the name */
    for (const char *c = name; *c; c++) n = (n ^ (unsigned char)*c) * 0x100000001b3ull;
    *h = mix64(*h ^ mix64(n) ^ mix64(bits + 0x9e3779b97f4a7c15ull));
}

static void attr_mix_str(uint64_t *h, const char *name, const char *text) {
    uint64_t t = 0xcbf29ce484222325ull;
    for (const char *c = text; *c; c++) t = (t ^ (unsigned char)*c) * 0x100000001b3ull;
    attr_mix(h, name, t ^ strlen(text));
}

static int data_sources_written(const ckpt_state_t *s) {
    return s->n_data_pos < 0 ? 0 : s->n_data_pos > CKPT_MAX_DATA_SOURCES ? CKPT_MAX_DATA_SOURCES
                                                                         : (int)s->n_data_pos;
}

/* The checksum of the attributes of a file of `kind` with meta and (checkpoints) state. */
static uint64_t attrs_checksum(const char *kind, const ckpt_meta_t *m, const ckpt_state_t *s) {
    uint64_t h = 0x6c6c6d747261696eull; /* "llmtrain" */
    attr_mix_str(&h, "kind", kind);
    attr_mix_str(&h, "run_id", m->run_id);
    attr_mix(&h, "format_version", CKPT_FORMAT_VERSION);
    attr_mix(&h, "step", (uint64_t)m->step);
    attr_mix(&h, "seed", (uint64_t)m->seed);
    const int32_t ints[7] = {m->vocab_size, m->padded_vocab, m->n_layer, m->n_head,
                             m->d_model, m->d_ff, m->seq_len};
    for (int i = 0; i < 7; i++) attr_mix(&h, "model", (uint64_t)(int64_t)ints[i]);
    if (!s) return h;
    const int64_t v[] = {s->tokens_seen, s->sample_pos, s->adam_t, s->skipped, s->global_batch,
                         s->grid_dp, s->grid_tp, s->grid_pp, s->ls_growth, s->ls_hysteresis,
                         s->ls_overflows, s->stage, s->data_seq_len, s->save_seq, s->parent_seq,
                         s->parent_step};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) attr_mix(&h, "state", (uint64_t)v[i]);
    uint64_t scale;
    memcpy(&scale, &s->loss_scale, sizeof scale);
    attr_mix(&h, "loss_scale", scale);
    const int n = data_sources_written(s);
    attr_mix(&h, "data_sources", (uint64_t)n);
    for (int k = 0; k < n; k++) attr_mix(&h, "data_pos", (uint64_t)s->data_pos[k]);
    for (int k = 0; k < n; k++) /* names, in files that have them */
        if (s->data_source[k][0]) attr_mix_str(&h, "data_source", s->data_source[k]);
    return h;
}

/* Whether this rank holds the one copy of p's local elements that is written. */
static bool owns_copy(const ckpt_tensor_t *p, const ckpt_tensors_t *P, int owner) {
    const bool replica = owner & (p->experts > 0 ? CKPT_OWNS_EXPERTS : CKPT_OWNS_DENSE);
    return replica && p->held && !p->tied_copy && (p->split_dim >= 0 || P->tp_rank == 0);
}

/* ---- write ----------------------------------------------------------------------------------
 * Two phases, so that a failed data write never leaves dirty metadata behind:
 *  1. every dataset and attribute is created (checksums are computed from the host copies and
 *     reduced before any data is written) and the metadata is flushed to the file;
 *  2. the tensor data is written, one collective H5Dwrite per dataset, the ranks agreeing on
 *     the outcome after each.
 * Why: parallel HDF5 flushes dirty metadata collectively when a file is closed, and after a
 * write error that flush can leave the ranks in different collectives of the library (the rank
 * that failed skips a synchronisation point): a hang. With the metadata flushed before the first
 * data write, a failure in phase 2 leaves nothing to flush and the close stays collective. */

/* All metadata goes in one block at the start of the file, before the tensor data: then the
 * metadata flush at the end of phase 1 writes only there, and a file that cannot grow fails in
 * phase 2, in the data, where a failure is clean. About 1 KiB per dataset (object header,
 * checksum attribute, group entries), the root attributes with the config text, and room. */
static hsize_t meta_block_bytes(const ckpt_tensors_t *P, bool with_optimizer) {
    return (hsize_t)(with_optimizer ? 3 : 1) * (hsize_t)P->n * 2048 + (256 << 10);
}

double ckpt_file_bytes(const ckpt_tensors_t *P, bool with_optimizer) {
    double tensors = (double)P->n_global * sizeof(float) * (with_optimizer ? 3 : 1);
    return tensors + (double)meta_block_bytes(P, with_optimizer) + (64 << 10);
}

typedef struct writer {
    MPI_Comm comm;
    const ckpt_tensors_t *P;
    ckpt_io_t *io;
    int owner;
    hid_t dxpl, dxpl_ind; /* collective and independent transfers (moves_collectively) */
    int bad;        /* this rank saw a failure (the first one is in msg) */
    int agreed_bad; /* some rank did, and every rank knows */
    char msg[1800];
} writer_t;

/* One dataset created in phase 1, written in phase 2. */
typedef struct pending {
    hid_t dset, mem_type;
    const ckpt_tensor_t *p;   /* NULL: the /config string, written by rank 0 */
    const void *data;         /* the /config string */
    int g;                    /* the tensor's group (ckpt_io_t) */
    size_t a, b;              /* the local elements of p this rank writes (a == b: none) */
    uint64_t sum;             /* the checksum of this rank's elements, summed as they are written */
    int pieces;               /* writes of the dataset: this rank's pieces, or when it moves
                                 collectively the most pieces of any rank */
    char object[96];
} pending_t;

/* Record this rank's first failure: which call, on what, and HDF5's reason. */
static void w_fail(writer_t *w, const char *what, const char *object) {
    if (w->bad++) return;
    char why[512];
    h5_error_text(why, sizeof why);
    snprintf(w->msg, sizeof w->msg, "%s %s failed: %s", what, object, why);
}

#define W_TRY(w, call, what, object)                                     \
    do {                                                                 \
        if (!(w)->bad && (long long)(call) < 0) w_fail(w, what, object); \
    } while (0)

/* The ranks compare notes: afterwards every rank knows whether any failed. */
static int w_agree(writer_t *w) {
    if (w->agreed_bad) return -1;
    int bad = w->bad != 0;
    comm_allreduce_idle(&bad, 1, MPI_INT, MPI_MAX, w->comm, "checkpoint write");
    w->agreed_bad = bad;
    return bad ? -1 : 0;
}

/* The group /provenance: one string attribute per field that goes into files (rank 0's record,
 * broadcast: the same on every rank, as collective metadata requires). */
static void write_provenance(writer_t *w, hid_t file, const provenance_t *p) {
    if (!p || p->n == 0 || w->bad) return;
    hid_t group = H5Gcreate2(file, "provenance", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    W_TRY(w, group, "creating group", "/provenance");
    for (int i = 0; i < p->n && group >= 0; i++)
        if (p->f[i].in_h5)
            W_TRY(w, h5_write_str_attr(group, p->f[i].name, p->f[i].text), "writing attribute",
                  p->f[i].name);
    if (group >= 0 && H5Gclose(group) < 0) w_fail(w, "closing group", "/provenance");
}

static void write_root_attributes(writer_t *w, hid_t file, const ckpt_meta_t *meta,
                                  bool config_as_attr, const char *kind) {
    const struct {
        const char *name;
        int32_t value;
    } ints[] = {{"format_version", CKPT_FORMAT_VERSION}, {"vocab_size", meta->vocab_size},
                {"padded_vocab", meta->padded_vocab},     {"n_layer", meta->n_layer},
                {"n_head", meta->n_head},                 {"d_model", meta->d_model},
                {"d_ff", meta->d_ff},                     {"seq_len", meta->seq_len}};
    W_TRY(w, h5_write_str_attr(file, "format", CKPT_FORMAT), "writing attribute", "format");
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        W_TRY(w, write_i32_attr(file, ints[i].name, ints[i].value), "writing attribute", ints[i].name);
    W_TRY(w, h5_write_str_attr(file, "llmtrain_version", LLMT_VERSION), "writing attribute", "llmtrain_version");
    W_TRY(w, h5_write_str_attr(file, "kind", kind), "writing attribute", "kind");
    W_TRY(w, h5_write_str_attr(file, "run_id", meta->run_id), "writing attribute", "run_id");
    W_TRY(w, write_i64_attr(file, "step", meta->step), "writing attribute", "step");
    W_TRY(w, write_i64_attr(file, "seed", meta->seed), "writing attribute", "seed");
    if (config_as_attr)
        W_TRY(w, h5_write_str_attr(file, "config", meta->config_text ? meta->config_text : ""),
              "writing attribute", "config");
    write_provenance(w, file, meta->provenance);
}

/* The curriculum's stage and per-source positions: data_pos_<k> scalars (attributes stay
 * scalar everywhere in this format), each with its source's name data_source_<k>. */
static void write_data_cursor(writer_t *w, hid_t file, const ckpt_state_t *s) {
    const int n = data_sources_written(s);
    W_TRY(w, write_i64_attr(file, "stage", s->stage), "writing attribute", "stage");
    W_TRY(w, write_i64_attr(file, "data_seq_len", s->data_seq_len), "writing attribute", "data_seq_len");
    W_TRY(w, write_i64_attr(file, "data_sources", n), "writing attribute", "data_sources");
    for (int k = 0; k < n; k++) {
        char name[32];
        snprintf(name, sizeof name, "data_pos_%d", k);
        W_TRY(w, write_i64_attr(file, name, s->data_pos[k]), "writing attribute", "data_pos");
        if (!s->data_source[k][0]) continue;
        snprintf(name, sizeof name, "data_source_%d", k);
        W_TRY(w, h5_write_str_attr(file, name, s->data_source[k]), "writing attribute", "data_source");
    }
}

static void write_state_attributes(writer_t *w, hid_t file, const ckpt_state_t *s) {
    const int64_t *v[] = {&s->tokens_seen, &s->sample_pos, &s->adam_t, &s->skipped,
                          &s->global_batch, &s->grid_dp, &s->grid_tp, &s->grid_pp};
    const char *names[] = {"tokens_seen", "sample_pos", "adam_t", "skipped", "global_batch",
                           "grid_dp", "grid_tp", "grid_pp"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        W_TRY(w, write_i64_attr(file, names[i], *v[i]), "writing attribute", names[i]);
    W_TRY(w, h5_write_attr(file, "loss_scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &s->loss_scale),
          "writing attribute", "loss_scale");
    W_TRY(w, write_i64_attr(file, "loss_scale_growth", s->ls_growth), "writing attribute", "loss_scale_growth");
    W_TRY(w, write_i64_attr(file, "loss_scale_hysteresis", s->ls_hysteresis), "writing attribute",
          "loss_scale_hysteresis");
    W_TRY(w, write_i64_attr(file, "loss_scale_overflows", s->ls_overflows), "writing attribute",
          "loss_scale_overflows");
    const int64_t *r[] = {&s->save_seq, &s->parent_seq, &s->parent_step};
    const char *rn[] = {"save_seq", "parent_seq", "parent_step"};
    for (int i = 0; i < 3; i++) W_TRY(w, write_i64_attr(file, rn[i], *r[i]), "writing attribute", rn[i]);
    write_data_cursor(w, file, s);
}

/* Dataset creation properties: no timestamps in the object headers, so the same state gives
 * the same file bytes and a data write never touches metadata. */
static hid_t quiet_dcpl(void) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) < 0) {
        H5Pclose(dcpl);
        return -1;
    }
    return dcpl;
}

/* Phase 1 for a namelist too long for an attribute: the scalar string dataset /config. */
static void create_config_dataset(writer_t *w, hid_t file, const char *text, hid_t dcpl,
                                  pending_t *pd) {
    memset(pd, 0, sizeof *pd);
    pd->dset = pd->mem_type = -1;
    snprintf(pd->object, sizeof pd->object, "/config");
    pd->data = text;
    hid_t type = h5_str_type(strlen(text), H5T_CSET_ASCII), space = H5Screate(H5S_SCALAR);
    if (type >= 0 && space >= 0)
        pd->dset = H5Dcreate2(file, "config", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    W_TRY(w, pd->dset, "creating dataset", "/config");
    pd->mem_type = type;
    if (space >= 0) H5Sclose(space);
}

/* What a rank that writes nothing passes to the collective H5Dwrite (an empty selection). */
static const float dummy_data = 0.0f;

/* This rank's share of tensor p of group g: its elements in the io's range, when it writes p. */
static void writer_share(const writer_t *w, const ckpt_tensor_t *p, int g, size_t *a, size_t *b) {
    *a = *b = 0;
    if (owns_copy(p, w->P, w->owner) && !tensor_range(p, w->io->lo[g], w->io->hi[g], a, b)) *a = *b = 0;
}

/* Phase 1 for one tensor group: each dataset in its global shape with its checksum attribute,
 * 0 until phase 3 writes the sum of the ranks' shares (computed as phase 2 writes them, so each
 * element is fetched once). Returns its bytes. */
static double create_tensor_group(writer_t *w, hid_t file, const char *name, int g, hid_t dcpl,
                                  pending_t *pd) {
    const int n = w->P->n;
    for (int i = 0; i < n; i++) pd[i] = (pending_t){.dset = -1, .mem_type = H5T_NATIVE_FLOAT, .g = g};
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    W_TRY(w, lcpl, "creating a link property list for", name);
    if (lcpl >= 0) W_TRY(w, H5Pset_create_intermediate_group(lcpl, 1), "creating group", name);
    hid_t group = w->bad ? -1 : H5Gcreate2(file, name, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    W_TRY(w, group, "creating group", name);
    const uint64_t zero = 0;
    for (int i = 0; i < n; i++) {
        writer_share(w, &w->P->t[i], g, &pd[i].a, &pd[i].b);
        pd[i].pieces = pieces_of(pd[i].a, pd[i].b, w->io->staging_floats);
    }
    double bytes = 0;
    for (int i = 0; i < n && group >= 0; i++) {
        const ckpt_tensor_t *p = &w->P->t[i];
        pd[i].p = p;
        snprintf(pd[i].object, sizeof pd[i].object, "/%s/%s", name, p->name);
        hsize_t dims[3];
        hid_t fspace = H5Screate_simple(global_dims(p, dims), dims, NULL);
        if (!w->bad && fspace >= 0)
            pd[i].dset = H5Dcreate2(group, p->name, H5T_IEEE_F32LE, fspace, H5P_DEFAULT, dcpl,
                                    H5P_DEFAULT);
        W_TRY(w, pd[i].dset, "creating dataset", pd[i].object);
        if (pd[i].dset >= 0)
            W_TRY(w, h5_write_attr(pd[i].dset, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &zero),
                  "writing the checksum of", pd[i].object);
        if (fspace >= 0) H5Sclose(fspace);
        bytes += (double)tensor_global_numel(p) * sizeof(float);
    }
    if (group >= 0 && H5Gclose(group) < 0) w_fail(w, "closing group", name);
    if (lcpl >= 0) H5Pclose(lcpl);
    return bytes;
}

/* Phase 2 for the /config string: rank 0 writes it, the others join with nothing. */
static void write_config(writer_t *w, const pending_t *pd, int rank) {
    hid_t fspace = H5Dget_space(pd->dset), mspace = H5Screate(H5S_SCALAR);
    if (fspace < 0 || mspace < 0 ||
        (rank != 0 && (H5Sselect_none(fspace) < 0 || H5Sselect_none(mspace) < 0)))
        w_fail(w, "selecting", pd->object);
    if (H5Dwrite(pd->dset, pd->mem_type, mspace >= 0 ? mspace : H5S_ALL, fspace >= 0 ? fspace : H5S_ALL,
                 w->dxpl, pd->data) < 0)
        w_fail(w, "writing dataset", pd->object);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    w_agree(w);
}

/* Phase 2 for one tensor dataset: pd->pieces writes, each of at most one staging buffer of this
 * rank's share. Collective ones (moves_collectively) go on with an empty selection once its
 * share is written or after a failure, as every rank calls them; independent ones stop. The
 * ranks agree on the outcome once all datasets are written (write_contents). */
static void write_pending(writer_t *w, pending_t *pd) {
    const size_t piece = w->io->staging_floats;
    const bool coll = moves_collectively(w->P, pd->p);
    for (int k = 0; k < pd->pieces; k++) {
        size_t a = pd->a + (size_t)k * piece, b = a + piece < pd->b ? a + piece : pd->b;
        if (a >= b || w->bad) a = b = 0;
        if (!coll && a == b) break;
        const void *data = &dummy_data;
        if (b > a) {
            data = w->io->fetch(w->io->ctx, pd->g, pd->p->offset + a, pd->p->offset + b, w->io->staging);
            pd->sum += range_checksum(pd->p, w->P, a, b - a, data);
        }
        hid_t fspace = H5Dget_space(pd->dset);
        hid_t mspace = fspace < 0 ? -1 : select_piece(pd->p, fspace, a, b);
        if (fspace < 0 || mspace < 0) w_fail(w, "selecting", pd->object);
        /* a rank that failed to select still joins with an empty write: the call is collective */
        if (fspace >= 0 && mspace < 0 && (mspace = H5Screate(H5S_NULL)) >= 0) H5Sselect_none(fspace);
        if (H5Dwrite(pd->dset, H5T_NATIVE_FLOAT, mspace >= 0 ? mspace : H5S_ALL,
                     fspace >= 0 ? fspace : H5S_ALL, coll ? w->dxpl : w->dxpl_ind, data) < 0)
            w_fail(w, "writing dataset", pd->object);
        if (mspace >= 0) H5Sclose(mspace);
        if (fspace >= 0) H5Sclose(fspace);
        const double rss = ckpt_rss_mib();
        if (rss > w->io->peak_rss_mib) w->io->peak_rss_mib = rss;
    }
}

/* Every rank writes a dataset that moves collectively in the same number of calls: the most
 * pieces of any. */
static void agree_pieces(writer_t *w, pending_t *pd, int n) {
    int *k = xcalloc((size_t)(n > 0 ? n : 1), sizeof *k);
    for (int i = 0; i < n; i++) k[i] = pd[i].pieces;
    comm_allreduce(k, n, MPI_INT, MPI_MAX, w->comm, "checkpoint write");
    for (int i = 0; i < n; i++)
        if (pd[i].p && moves_collectively(w->P, pd[i].p)) pd[i].pieces = k[i];
    xfree(k);
}

/* Phase 3: every dataset's checksum attribute gets the sum of the ranks' shares (one reduction
 * for all; the same value on every rank, as collective metadata requires). */
static void write_checksums(writer_t *w, pending_t *pd, int n) {
    uint64_t *sums = xcalloc((size_t)(n > 0 ? n : 1), sizeof *sums);
    for (int i = 0; i < n; i++) sums[i] = pd[i].sum;
    comm_allreduce(sums, n, MPI_UINT64_T, MPI_SUM, w->comm, "checkpoint write");
    for (int i = 0; i < n && !w->bad; i++) {
        if (pd[i].dset < 0) continue;
        hid_t attr = H5Aopen(pd[i].dset, "checksum", H5P_DEFAULT);
        if (attr < 0 || H5Awrite(attr, H5T_NATIVE_UINT64, &sums[i]) < 0)
            w_fail(w, "writing the checksum of", pd[i].object);
        if (attr >= 0) H5Aclose(attr);
    }
    xfree(sums);
}

/* The datasets of phase 2 in the order they are written: first every one that moves
 * collectively (every rank joins each call, so ranks with little independent data do not wait
 * in the first collective call for the others to finish theirs), then the independent ones,
 * which no rank waits for until the agreement at the end. */
static void write_all_pending(writer_t *w, pending_t *pd, int n) {
    for (int coll = 1; coll >= 0; coll--)
        for (int i = 0; i < n && !w->agreed_bad; i++)
            if (pd[i].p && moves_collectively(w->P, pd[i].p) == (coll == 1)) write_pending(w, &pd[i]);
}

/* Everything inside the open file; the caller closes it. Returns the tensor bytes. */
static double write_contents(writer_t *w, hid_t file, int rank, const ckpt_meta_t *meta,
                             const ckpt_state_t *state) {
    const char *text = meta->config_text ? meta->config_text : "";
    const bool config_as_attr = strlen(text) <= CKPT_CONFIG_ATTR_MAX;
    const int n = w->P->n, groups = state ? 3 : 1;
    const char *names[3] = {"model", "optimizer/adamw/m", "optimizer/adamw/v"};
    pending_t *pd = xcalloc((size_t)(groups * n + 1), sizeof *pd), *config = &pd[groups * n];
    config->dset = -1;
    hid_t dcpl = quiet_dcpl();
    W_TRY(w, dcpl, "creating dataset properties for", "the file");
    write_root_attributes(w, file, meta, config_as_attr, state ? "checkpoint" : "weights");
    if (state) write_state_attributes(w, file, state);
    const uint64_t sum = attrs_checksum(state ? "checkpoint" : "weights", meta, state);
    W_TRY(w, h5_write_attr(file, "attrs_checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &sum),
          "writing attribute", "attrs_checksum");
    if (!config_as_attr) create_config_dataset(w, file, text, dcpl, config);
    double bytes = 0;
    for (int g = 0; g < groups && w_agree(w) == 0; g++)
        bytes += create_tensor_group(w, file, names[g], g, dcpl, pd + g * n);
    /* the end of phase 1: all metadata on disk before the first byte of data */
    if (w_agree(w) == 0) W_TRY(w, H5Fflush(file, H5F_SCOPE_GLOBAL), "flushing the metadata of", "the file");
    if (w_agree(w) == 0) agree_pieces(w, pd, groups * n);
    if (!w->agreed_bad && config->dset >= 0) write_config(w, config, rank);
    write_all_pending(w, pd, groups * n);
    if (w_agree(w) == 0) write_checksums(w, pd, groups * n);
    /* make the data durable before the rename publishes the file */
    if (w_agree(w) == 0) W_TRY(w, H5Fflush(file, H5F_SCOPE_GLOBAL), "flushing", "the file");
    for (int i = 0; i <= groups * n; i++)
        if (pd[i].dset >= 0 && H5Dclose(pd[i].dset) < 0) w_fail(w, "closing dataset", pd[i].object);
    if (config->mem_type >= 0 && config->dset >= 0) H5Tclose(config->mem_type);
    if (dcpl >= 0) H5Pclose(dcpl);
    xfree(pd);
    return bytes;
}

int ckpt_save_io(const char *path, MPI_Comm comm, MPI_Info info, const ckpt_tensors_t *P,
                 ckpt_io_t *io, const ckpt_meta_t *meta, const ckpt_state_t *state,
                 double *written, char *err, size_t errlen) {
    int rank, world_rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    char tmp[1100];
    *written = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return errf(err, errlen, "%s: path too long", path);
    ASSERT(io->staging_floats > 0);
    writer_t w = {.comm = comm, .P = P, .io = io, .owner = io->owner, .dxpl = -1, .dxpl_ind = -1};
    hid_t fapl = mpio_fapl(comm, info, meta_block_bytes(P, state != NULL));
    W_TRY(&w, fapl, "setting up MPI-IO for", tmp);
    w.dxpl = transfer_dxpl(H5FD_MPIO_COLLECTIVE);
    W_TRY(&w, w.dxpl, "setting up collective transfers for", tmp);
    w.dxpl_ind = transfer_dxpl(H5FD_MPIO_INDEPENDENT);
    W_TRY(&w, w.dxpl_ind, "setting up independent transfers for", tmp);
    hid_t file = w.bad ? -1 : H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (file < 0 && !w.bad) {
        char why[512];
        h5_error_text(why, sizeof why);
        w.bad = 1;
        snprintf(w.msg, sizeof w.msg, "cannot create %s (is its directory there and writable?): "
                 "%s", tmp, why);
    }
    if (fapl >= 0) H5Pclose(fapl);
    double bytes = 0;
    if (w_agree(&w) == 0) {
        fault_point(state ? "save" : "weights", world_rank);
        bytes = write_contents(&w, file, rank, meta, state);
    }
    if (file >= 0 && H5Fclose(file) < 0) w_fail(&w, "closing", tmp);
    if (w.dxpl >= 0) H5Pclose(w.dxpl);
    if (w.dxpl_ind >= 0) H5Pclose(w.dxpl_ind);
    /* A rank that saw nothing wrong joins the agreement with NULL; the failing rank's message
     * reaches every rank. */
    int failed = comm_agree(comm, "checkpoint write", w.bad ? w.msg : NULL, err, errlen);
    if (!failed && rank == 0 && file_publish(tmp, path) != 0) {
        snprintf(w.msg, sizeof w.msg, "cannot publish %s as %s: %s", tmp, path, strerror(errno));
        w.bad = 1;
    }
    if (!failed) failed = comm_agree(comm, "checkpoint write", rank == 0 && w.bad ? w.msg : NULL, err, errlen);
    if (failed) {
        if (rank == 0) unlink(tmp); /* the old file of this name, if any, is untouched */
        comm_barrier(comm, "checkpoint write");
        return -1;
    }
    *written = bytes;
    return 0;
}

/* The flat buffers of ckpt_save / ckpt_load as a ckpt_io_t: whole host copies, no staging. */
typedef struct flat_bufs {
    float *g[3];
} flat_bufs_t;

static const float *flat_fetch(void *ctx, int g, size_t a, size_t b, float *staging) {
    (void)b, (void)staging;
    return ((flat_bufs_t *)ctx)->g[g] + a;
}

static float *flat_dest(void *ctx, int g, size_t a, size_t b, float *staging) {
    (void)b, (void)staging;
    return ((flat_bufs_t *)ctx)->g[g] + a;
}

/* The end of the flat local buffer the registry describes. */
static size_t flat_end(const ckpt_tensors_t *P) {
    size_t end = 0;
    for (int i = 0; i < P->n; i++)
        if (P->t[i].offset + P->t[i].numel > end) end = P->t[i].offset + P->t[i].numel;
    return end;
}

/* Whole flat buffers, moved in pieces of this many elements (no copy: the pieces are views). */
#define CKPT_FLAT_PIECE ((size_t)1 << 26)

static ckpt_io_t flat_io(const ckpt_tensors_t *P, flat_bufs_t *bufs, int owner) {
    ckpt_io_t io = {.owner = owner, .staging_floats = CKPT_FLAT_PIECE, .fetch = flat_fetch,
                    .dest = flat_dest, .ctx = bufs};
    for (int g = 0; g < 3; g++) io.lo[g] = 0, io.hi[g] = flat_end(P), io.part_comm[g] = MPI_COMM_SELF;
    return io;
}

int ckpt_save(const char *path, MPI_Comm comm, MPI_Info info, const ckpt_tensors_t *P,
              const float *params, const float *m, const float *v, const ckpt_meta_t *meta,
              const ckpt_state_t *state, int owner, double *written, char *err, size_t errlen) {
    /* a rank that writes nothing may pass NULL buffers */
    flat_bufs_t bufs = {{(float *)params, (float *)m, (float *)v}};
    ckpt_io_t io = flat_io(P, &bufs, params && (!state || (m && v)) ? owner : 0);
    return ckpt_save_io(path, comm, info, P, &io, meta, state, written, err, errlen);
}

int ckpt_write_weights(const char *path, MPI_Comm comm, const ckpt_tensors_t *P, const float *flat,
                       const ckpt_meta_t *meta, int writer, char *err, size_t errlen) {
    double written;
    return ckpt_save(path, comm, MPI_INFO_NULL, P, flat, NULL, NULL, meta, NULL, writer,
                     &written, err, errlen);
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
    else if (ndim == 3)
        snprintf(buf, len, "[%llu, %llu, %llu]", (unsigned long long)dims[0],
                 (unsigned long long)dims[1], (unsigned long long)dims[2]);
    else snprintf(buf, len, "(%d dimensions)", ndim);
}

typedef struct reader {
    const char *path;
    MPI_Comm comm, copy_comm, ep_comm;
    const ckpt_tensors_t *P;
    hid_t dxpl, dxpl_ind; /* collective and independent transfers (moves_collectively) */
    char *msg;
    size_t len;
    ckpt_io_t *io; /* where the pieces go (NULL: metadata only, ckpt_peek) */
} reader_t;

/* A root attribute the format requires; a message naming it when missing or unreadable. */
static int need_attr(reader_t *r, int rc, const char *name, const char *hint) {
    if (rc == 0) return 0;
    if (rc > 0) errf(r->msg, r->len, "checkpoint %s: root attribute '%s' is missing%s", r->path, name, hint);
    else errf(r->msg, r->len, "checkpoint %s: root attribute '%s' cannot be read (damaged file)", r->path, name);
    return -1;
}

/* Open read-only on every rank; < 0 with a message if missing or not a readable HDF5 file. */
static hid_t open_for_read(reader_t *r, MPI_Info info) {
    int rank, exists = 0;
    MPI_CHECK(MPI_Comm_rank(r->comm, &rank));
    int why_not = 0; /* a FIFO would block HDF5's open forever: only a regular file is opened */
    if (rank == 0) {
        int fd = file_open_regular(r->path, NULL);
        exists = fd >= 0, why_not = fd >= 0 ? 0 : errno;
        if (fd >= 0) close(fd);
    }
    comm_bcast(&exists, 1, MPI_INT, 0, r->comm, "checkpoint read");
    comm_bcast(&why_not, 1, MPI_INT, 0, r->comm, "checkpoint read");
    if (!exists) {
        if (why_not == ENOENT) errf(r->msg, r->len, "checkpoint %s: no such file", r->path);
        else errf(r->msg, r->len, "checkpoint %s: cannot read: %s", r->path, file_strerror(why_not));
        return -1;
    }
    hid_t fapl = mpio_fapl(r->comm, info, 0);
    hid_t file = fapl < 0 ? -1 : H5Fopen(r->path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    /* H5Fopen is collective; agree anyway, so a rank that alone fails is not left behind */
    char why[512] = "";
    if (file < 0) h5_error_text(why, sizeof why);
    char mine[700];
    snprintf(mine, sizeof mine, "checkpoint %s: not a readable HDF5 file (truncated or corrupt): %s",
             r->path, why);
    if (comm_agree(r->comm, "checkpoint read", file < 0 ? mine : NULL, NULL, 0) > 0) {
        if (file >= 0) H5Fclose(file);
        errf(r->msg, r->len, "checkpoint %s: not a readable HDF5 file (truncated or corrupt)", r->path);
        return -1;
    }
    return file;
}

/* The root attributes say this is a file this program can read; else a message. */
static int check_format(reader_t *r, hid_t file) {
    char format[64] = "";
    int64_t version = 0;
    int rc = h5_read_str_attr(file, "format", CKPT_STR_ATTR_MAX, format, sizeof format);
    if (rc != 0 || strcmp(format, CKPT_FORMAT) != 0)
        return errf(r->msg, r->len, "checkpoint %s: not an llmtrain checkpoint (attribute format "
                    "is '%s', expected '%s')", r->path, rc == 0 ? format : rc > 0 ? "(missing)" : "(unreadable)",
                    CKPT_FORMAT);
    if (h5_read_num_attr(file, "format_version", H5T_NATIVE_INT64, &version) != 0 ||
        version != CKPT_FORMAT_VERSION)
        return errf(r->msg, r->len, "checkpoint %s: format_version %lld, this program reads "
                    "version %d", r->path, (long long)version, CKPT_FORMAT_VERSION);
    return 0;
}

/* The file's description of the run and model; the shape attributes are optional (files of
 * version 0.1 have none), vocab_size and padded_vocab are not. */
static int read_meta(reader_t *r, hid_t file, ckpt_meta_t *f) {
    memset(f, 0, sizeof *f);
    int32_t v[7] = {0};
    const char *names[7] = {"vocab_size", "padded_vocab", "n_layer", "n_head", "d_model", "d_ff", "seq_len"};
    if (need_attr(r, h5_read_num_attr(file, "step", H5T_NATIVE_INT64, &f->step), "step", "") ||
        need_attr(r, h5_read_num_attr(file, "seed", H5T_NATIVE_INT64, &f->seed), "seed", ""))
        return -1;
    for (int i = 0; i < 7; i++) {
        int rc = h5_read_num_attr(file, names[i], H5T_NATIVE_INT32, &v[i]);
        if (rc < 0 || (rc > 0 && i < 2)) return need_attr(r, rc, names[i], "");
    }
    f->vocab_size = v[0], f->padded_vocab = v[1], f->n_layer = v[2], f->n_head = v[3];
    f->d_model = v[4], f->d_ff = v[5], f->seq_len = v[6];
    if (h5_read_str_attr(file, "run_id", CKPT_STR_ATTR_MAX, f->run_id, sizeof f->run_id) < 0)
        return need_attr(r, -1, "run_id", "");
    return 0;
}

/* The file was written for the model the namelist describes; else a message naming the key. */
static int check_model(reader_t *r, const ckpt_meta_t *f, const ckpt_meta_t *want) {
    const struct {
        const char *key;
        int file, namelist;
    } k[] = {{"vocab_size", f->vocab_size, want->vocab_size}, {"n_layer", f->n_layer, want->n_layer},
             {"n_head", f->n_head, want->n_head},             {"d_model", f->d_model, want->d_model},
             {"d_ff", f->d_ff, want->d_ff},                   {"seq_len", f->seq_len, want->seq_len}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].file != 0 && k[i].file != k[i].namelist)
            return errf(r->msg, r->len, "checkpoint %s was written for &model %s = %d, but the "
                        "namelist has %s = %d", r->path, k[i].key, k[i].file, k[i].key, k[i].namelist);
    if (f->padded_vocab != want->padded_vocab)
        return errf(r->msg, r->len, "checkpoint %s has a padded vocabulary of %d rows, this "
                    "program pads &model vocab_size = %d to %d", r->path, f->padded_vocab,
                    want->vocab_size, want->padded_vocab);
    return 0;
}

/* Open <group>/<name> and check its shape against the registry; < 0 with a message if not. */
static hid_t open_param(reader_t *r, hid_t group, const char *gname, const ckpt_tensor_t *p) {
    if (H5Lexists(group, p->name, H5P_DEFAULT) <= 0) {
        errf(r->msg, r->len, "checkpoint %s: dataset /%s/%s is missing (written for a "
             "different model?)", r->path, gname, p->name);
        return -1;
    }
    hid_t dset = H5Dopen2(group, p->name, H5P_DEFAULT);
    hid_t space = dset < 0 ? -1 : H5Dget_space(dset);
    hsize_t dims[H5S_MAX_RANK], want[3];
    int ndim = space < 0 ? -1 : H5Sget_simple_extent_dims(space, dims, NULL);
    if (space >= 0) H5Sclose(space);
    if (ndim < 0) {
        if (dset >= 0) H5Dclose(dset);
        errf(r->msg, r->len, "checkpoint %s: dataset /%s/%s cannot be opened (corrupt file)",
             r->path, gname, p->name);
        return -1;
    }
    int want_ndim = global_dims(p, want);
    bool same = ndim == want_ndim;
    for (int d = 0; same && d < ndim; d++) same = dims[d] == want[d];
    if (!same) {
        char have_s[64], want_s[64];
        format_dims(have_s, sizeof have_s, ndim, dims);
        format_dims(want_s, sizeof want_s, want_ndim, want);
        errf(r->msg, r->len, "checkpoint %s: dataset /%s/%s has shape %s but the model "
             "expects %s", r->path, gname, p->name, have_s, want_s);
        H5Dclose(dset);
        return -1;
    }
    return dset;
}

/* Per-parameter results of reading one group, checked together at its end. */
typedef struct group_sums {
    uint64_t *stored, *local; /* [P->n] */
    int *held_here;           /* [P->n] this rank read elements of it */
} group_sums_t;

/* The pieces of this rank's range of p (group g), read one staging buffer at a time and summed
 * into *sum: `pieces` reads, which when p moves collectively (moves_collectively) every rank
 * makes (empty ones after its range is done, and after a failure); 0, or -1 when a read failed. */
static int read_pieces(reader_t *r, hid_t dset, const ckpt_tensor_t *p, int g, int pieces, uint64_t *sum) {
    ckpt_io_t *io = r->io;
    size_t a0 = 0, b0 = 0;
    if (!tensor_range(p, io->lo[g], io->hi[g], &a0, &b0)) a0 = b0 = 0;
    int bad = 0;
    const bool coll = moves_collectively(r->P, p);
    for (int k = 0; k < pieces; k++) {
        size_t a = a0 + (size_t)k * io->staging_floats, b = a + io->staging_floats < b0 ? a + io->staging_floats : b0;
        if (a >= b) a = b = 0;
        if (!coll && (a == b || bad)) break;
        float *buf = b > a && io->dest ? io->dest(io->ctx, g, p->offset + a, p->offset + b, io->staging) : NULL;
        if (!buf) buf = b > a ? io->staging : (float *)&dummy_data;
        hid_t fspace = H5Dget_space(dset);
        hid_t mspace = fspace < 0 ? -1 : select_piece(p, fspace, a, b);
        if (mspace < 0 || H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, coll ? r->dxpl : r->dxpl_ind,
                                  buf) < 0)
            bad = 1;
        if (mspace >= 0) H5Sclose(mspace);
        if (fspace >= 0) H5Sclose(fspace);
        if (bad || b == a) continue;
        *sum += range_checksum(p, r->P, a, b - a, buf);
        if (io->store) io->store(io->ctx, g, p->offset + a, p->offset + b, buf);
        const double rss = ckpt_rss_mib();
        if (rss > io->peak_rss_mib) io->peak_rss_mib = rss;
    }
    return bad ? -1 : 0;
}

/* Read this rank's part of one tensor and its stored checksum; 0, or -1 on a local failure
 * (the message is made once the ranks agree). */
static int read_param(reader_t *r, hid_t group, const char *gname, const ckpt_tensor_t *p, int g,
                      int pieces, group_sums_t *gs, int i) {
    hid_t dset = open_param(r, group, gname, p);
    if (dset < 0) return -2; /* metadata problem: the same on every rank (collective metadata) */
    gs->local[i] = 0;
    int bad = read_pieces(r, dset, p, g, pieces, &gs->local[i]);
    int rc = h5_read_num_attr(dset, "checksum", H5T_NATIVE_UINT64, &gs->stored[i]);
    H5Dclose(dset);
    if (rc != 0) {
        errf(r->msg, r->len, "checkpoint %s: dataset /%s/%s has %s checksum attribute", r->path,
             gname, p->name, rc > 0 ? "no" : "an unreadable");
        return -2;
    }
    gs->held_here[i] = p->held && p->numel > 0;
    return bad ? -1 : 0;
}

/* Every copy of every tensor this group read is verified: a tp-split tensor's checksum is
 * summed over the tp group (which together holds one copy), a replicated one stands alone; an
 * expert tensor's is then summed over the ep group too (each ep rank holds other experts). */
static int verify_group(reader_t *r, const char *gname, int g, group_sums_t *gs, int read_failed) {
    const int n = r->P->n;
    /* ranks that read parts of the flat buffer (ZeRO partitions) first add up their parts */
    if (r->io->part_comm[g] != MPI_COMM_SELF)
        comm_allreduce(gs->local, n, MPI_UINT64_T, MPI_SUM, r->io->part_comm[g], "checkpoint read");
    uint64_t *split = xcalloc((size_t)n, sizeof *split), *experts = xcalloc((size_t)n, sizeof *experts);
    for (int i = 0; i < n; i++)
        if (r->P->t[i].split_dim >= 0) split[i] = gs->local[i];
    comm_allreduce(split, n, MPI_UINT64_T, MPI_SUM, r->copy_comm, "checkpoint read");
    for (int i = 0; i < n; i++)
        if (r->P->t[i].experts > 0) experts[i] = r->P->t[i].split_dim >= 0 ? split[i] : gs->local[i];
    comm_allreduce(experts, n, MPI_UINT64_T, MPI_SUM, r->ep_comm, "checkpoint read");
    for (int i = 0; i < n; i++)
        if (r->P->t[i].experts > 0) split[i] = experts[i];
    xfree(experts);
    int first_bad = n;
    for (int i = 0; i < n && !read_failed; i++) {
        if (!gs->held_here[i]) continue;
        const ckpt_tensor_t *p = &r->P->t[i];
        uint64_t have = p->split_dim >= 0 || p->experts > 0 ? split[i] : gs->local[i];
        if (have != gs->stored[i] && i < first_bad) first_bad = i;
    }
    xfree(split);
    int v[2] = {read_failed, first_bad};
    comm_allreduce(&v[0], 1, MPI_INT, MPI_MAX, r->comm, "checkpoint read");
    comm_allreduce(&v[1], 1, MPI_INT, MPI_MIN, r->comm, "checkpoint read");
    if (v[0])
        return errf(r->msg, r->len, "checkpoint %s: a dataset of /%s cannot be read (corrupt or "
                    "truncated file)", r->path, gname);
    if (v[1] < n)
        return errf(r->msg, r->len, "checkpoint %s: dataset /%s/%s fails its checksum (stored "
                    "%016llx): the file is corrupt", r->path, gname, r->P->t[v[1]].name,
                    (unsigned long long)gs->stored[v[1]]);
    return 0;
}

/* The group holds exactly the registry's datasets: one more (a deeper model's layer) is a
 * different model, not something to ignore. */
static int check_no_extra(reader_t *r, hid_t group, const char *gname) {
    H5G_info_t info;
    if (H5Gget_info(group, &info) < 0)
        return errf(r->msg, r->len, "checkpoint %s: group /%s cannot be read", r->path, gname);
    if (info.nlinks > (hsize_t)r->P->n)
        return errf(r->msg, r->len, "checkpoint %s: /%s holds %llu tensors but the namelist's "
                    "model has %d (a model with more layers? check &model n_layer)", r->path,
                    gname, (unsigned long long)info.nlinks, r->P->n);
    return 0;
}

static int read_tensor_group(reader_t *r, hid_t file, const char *gname, int g) {
    if (H5Lexists(file, "optimizer", H5P_DEFAULT) <= 0 && strncmp(gname, "optimizer", 9) == 0)
        return errf(r->msg, r->len, "checkpoint %s: no optimizer state (a weights file, not a "
                    "checkpoint)", r->path);
    hid_t group = H5Lexists(file, gname, H5P_DEFAULT) > 0 ? H5Gopen2(file, gname, H5P_DEFAULT) : -1;
    if (group < 0) return errf(r->msg, r->len, "checkpoint %s: group /%s is missing", r->path, gname);
    int rc = check_no_extra(r, group, gname);
    const int n = r->P->n;
    group_sums_t gs = {xcalloc((size_t)n, sizeof(uint64_t)), xcalloc((size_t)n, sizeof(uint64_t)),
                       xcalloc((size_t)n, sizeof(int))};
    /* every rank reads a dataset that moves collectively in the same number of calls: the most
     * of any; the others, its own pieces */
    int *pieces = xcalloc((size_t)(n > 0 ? n : 1), sizeof *pieces), *mine = xcalloc((size_t)(n > 0 ? n : 1), sizeof *mine);
    for (int i = 0; i < n; i++) {
        size_t a, b;
        if (tensor_range(&r->P->t[i], r->io->lo[g], r->io->hi[g], &a, &b))
            pieces[i] = mine[i] = pieces_of(a, b, r->io->staging_floats);
    }
    comm_allreduce(pieces, n, MPI_INT, MPI_MAX, r->comm, "checkpoint read");
    for (int i = 0; i < n; i++)
        if (!moves_collectively(r->P, &r->P->t[i])) pieces[i] = mine[i];
    xfree(mine);
    int read_failed = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int one = read_param(r, group, gname, &r->P->t[i], g, pieces[i], &gs, i);
        if (one == -2) rc = -1; /* same on every rank: stop reading */
        if (one == -1) read_failed = 1;
    }
    if (rc == 0) rc = verify_group(r, gname, g, &gs, read_failed);
    xfree(pieces);
    xfree(gs.stored);
    xfree(gs.local);
    xfree(gs.held_here);
    H5Gclose(group);
    return rc;
}

/* The curriculum cursor, when the file has one (data_sources present); then all of it. */
static int read_data_cursor(reader_t *r, hid_t file, ckpt_state_t *s) {
    int rc = h5_read_num_attr(file, "data_sources", H5T_NATIVE_INT64, &s->n_data_pos);
    if (rc < 0) return need_attr(r, -1, "data_sources", "");
    s->has_data_pos = rc == 0;
    if (!s->has_data_pos) return 0;
    if (s->n_data_pos < 1 || s->n_data_pos > CKPT_MAX_DATA_SOURCES)
        return errf(r->msg, r->len, "checkpoint %s: impossible data_sources %lld: damaged file", r->path,
                    (long long)s->n_data_pos);
    if (need_attr(r, h5_read_num_attr(file, "stage", H5T_NATIVE_INT64, &s->stage), "stage", "") ||
        need_attr(r, h5_read_num_attr(file, "data_seq_len", H5T_NATIVE_INT64, &s->data_seq_len), "data_seq_len", ""))
        return -1;
    for (int k = 0; k < s->n_data_pos; k++) {
        char name[32];
        snprintf(name, sizeof name, "data_pos_%d", k);
        if (need_attr(r, h5_read_num_attr(file, name, H5T_NATIVE_INT64, &s->data_pos[k]), name, "")) return -1;
        if (s->data_pos[k] < 0)
            return errf(r->msg, r->len, "checkpoint %s: impossible %s %lld: damaged file", r->path, name,
                        (long long)s->data_pos[k]);
        snprintf(name, sizeof name, "data_source_%d", k);
        s->data_source[k][0] = 0; /* absent in files written before names were kept */
        if (h5_read_str_attr(file, name, CKPT_SOURCE_LEN - 1, s->data_source[k], CKPT_SOURCE_LEN) < 0)
            return errf(r->msg, r->len, "checkpoint %s: unreadable attribute %s: damaged file", r->path, name);
    }
    if (s->data_seq_len < 1 || s->stage < 0)
        return errf(r->msg, r->len, "checkpoint %s: impossible data_seq_len %lld or stage %lld: damaged file",
                    r->path, (long long)s->data_seq_len, (long long)s->stage);
    return 0;
}

static int read_state(reader_t *r, hid_t file, ckpt_state_t *s) {
    int64_t *v[] = {&s->tokens_seen, &s->sample_pos, &s->adam_t, &s->skipped, &s->global_batch,
                    &s->grid_dp, &s->grid_tp, &s->grid_pp};
    const char *names[] = {"tokens_seen", "sample_pos", "adam_t", "skipped", "global_batch",
                           "grid_dp", "grid_tp", "grid_pp"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (need_attr(r, h5_read_num_attr(file, names[i], H5T_NATIVE_INT64, v[i]), names[i],
                      " (a weights file, not a checkpoint?)") != 0)
            return -1;
    s->loss_scale = 1.0;
    if (h5_read_num_attr(file, "loss_scale", H5T_NATIVE_DOUBLE, &s->loss_scale) < 0)
        return need_attr(r, -1, "loss_scale", "");
    /* the scaler's trackers (files of version 0.1 have none: a fresh scaler then) */
    const char *trk[3] = {"loss_scale_growth", "loss_scale_hysteresis", "loss_scale_overflows"};
    int64_t *tv[3] = {&s->ls_growth, &s->ls_hysteresis, &s->ls_overflows};
    int found = 0;
    for (int i = 0; i < 3; i++) {
        int rc = h5_read_num_attr(file, trk[i], H5T_NATIVE_INT64, tv[i]);
        if (rc < 0) return need_attr(r, -1, trk[i], "");
        found += rc == 0;
    }
    s->has_scaler = found == 3;
    if (read_data_cursor(r, file, s) != 0) return -1;
    /* the place in the directory's history (files before it have none: unknown, no parent) */
    const char *rn[3] = {"save_seq", "parent_seq", "parent_step"};
    int64_t *rv[3] = {&s->save_seq, &s->parent_seq, &s->parent_step};
    s->save_seq = s->parent_seq = 0;
    s->parent_step = -1;
    for (int i = 0; i < 3; i++)
        if (h5_read_num_attr(file, rn[i], H5T_NATIVE_INT64, rv[i]) < 0) return need_attr(r, -1, rn[i], "");
    return 0;
}

/* One attribute outside its range: the message names the file, the attribute and the rule. */
static int out_of_range(reader_t *r, const char *name, double value, const char *rule) {
    return errf(r->msg, r->len, "checkpoint %s: attribute '%s' is %.17g, which is impossible (%s): "
                "a damaged or edited file", r->path, name, value, rule);
}

/* The values a run would continue from are possible ones (every file, with or without
 * attrs_checksum: the checksum proves a file unchanged, not its writer right). */
static int check_ranges(reader_t *r, const ckpt_meta_t *m, const ckpt_state_t *s) {
    if (m->step < 0) return out_of_range(r, "step", (double)m->step, "must be >= 0");
    if (!s) return 0;
    const struct {
        const char *name;
        int64_t value, min;
    } lo[] = {{"tokens_seen", s->tokens_seen, 0}, {"sample_pos", s->sample_pos, 0},
              {"adam_t", s->adam_t, 0},           {"skipped", s->skipped, 0},
              {"global_batch", s->global_batch, 1}, {"grid_dp", s->grid_dp, 1},
              {"grid_tp", s->grid_tp, 1},         {"grid_pp", s->grid_pp, 1},
              {"save_seq", s->save_seq, 0},       {"parent_seq", s->parent_seq, 0},
              {"parent_step", s->parent_step, -1}};
    for (size_t i = 0; i < sizeof lo / sizeof lo[0]; i++)
        if (lo[i].value < lo[i].min) {
            char rule[48];
            snprintf(rule, sizeof rule, "must be >= %lld", (long long)lo[i].min);
            return out_of_range(r, lo[i].name, (double)lo[i].value, rule);
        }
    /* every step either updated AdamW (adam_t counts them) or was skipped */
    if (s->adam_t > m->step) return out_of_range(r, "adam_t", (double)s->adam_t, "more updates than steps");
    if (s->skipped > m->step) return out_of_range(r, "skipped", (double)s->skipped, "more skipped steps than steps");
    if (s->parent_step > m->step) return out_of_range(r, "parent_step", (double)s->parent_step, "after the step itself");
    if (!(s->loss_scale > 0) || s->loss_scale > 1e300)
        return out_of_range(r, "loss_scale", s->loss_scale, "must be finite and > 0");
    if (s->has_scaler) {
        const char *trk[3] = {"loss_scale_growth", "loss_scale_hysteresis", "loss_scale_overflows"};
        const int64_t tv[3] = {s->ls_growth, s->ls_hysteresis, s->ls_overflows};
        for (int i = 0; i < 3; i++)
            if (tv[i] < 0) return out_of_range(r, trk[i], (double)tv[i], "must be >= 0");
    }
    return 0;
}

/* Range checks, then attrs_checksum against the attributes as read. state is what the caller
 * read (NULL: a weights load, then a checkpoint's state is read here for the checksum alone). */
static int check_attrs(reader_t *r, hid_t file, const ckpt_meta_t *m, ckpt_state_t *state) {
    char kind[32] = "";
    int rc = h5_read_str_attr(file, "kind", CKPT_STR_ATTR_MAX, kind, sizeof kind);
    if (rc < 0) return need_attr(r, -1, "kind", "");
    ckpt_state_t own;
    const bool checkpoint = strcmp(kind, "checkpoint") == 0;
    if (checkpoint && !state) {
        memset(&own, 0, sizeof own);
        if (read_state(r, file, &own) != 0) return -1;
        state = &own;
    }
    if (check_ranges(r, m, checkpoint ? state : NULL) != 0) return -1;
    uint64_t stored;
    rc = h5_read_num_attr(file, "attrs_checksum", H5T_NATIVE_UINT64, &stored);
    if (rc < 0) return need_attr(r, -1, "attrs_checksum", "");
    if (state) state->attrs_checked = rc == 0;
    if (rc > 0) return 0; /* written before the checksum existed: range-checked only */
    const uint64_t have = attrs_checksum(kind, m, checkpoint ? state : NULL);
    if (have != stored)
        return errf(r->msg, r->len, "checkpoint %s: the root attributes (step, seed, run_id, the "
                    "model%s) do not match attribute 'attrs_checksum' (stored %016llx, computed "
                    "%016llx): changed after the save (an edit, a damaged metadata block)",
                    r->path, checkpoint ? ", adam_t, sample_pos, tokens_seen, skipped, the data "
                    "cursor, loss_scale, save_seq" : "", (unsigned long long)stored,
                    (unsigned long long)have);
    return 0;
}

int ckpt_load_io(const char *path, MPI_Comm comm, MPI_Comm copy_comm, MPI_Comm ep_comm,
                 const ckpt_tensors_t *P, ckpt_io_t *io, int groups, ckpt_state_t *state,
                 const ckpt_meta_t *expect, ckpt_meta_t *found, char *err, size_t errlen) {
    reader_t r = {.path = path, .comm = comm, .copy_comm = copy_comm, .ep_comm = ep_comm, .P = P,
                  .dxpl = -1, .dxpl_ind = -1, .msg = err, .len = errlen, .io = io};
    err[0] = '\0';
    ckpt_meta_t meta;
    int world_rank;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    ASSERT(io->staging_floats > 0 && (groups == 1 || groups == 3));
    hid_t file = open_for_read(&r, MPI_INFO_NULL);
    int rc = file < 0 ? -1 : check_format(&r, file);
    if (rc == 0) rc = read_meta(&r, file, &meta);
    if (rc == 0 && state) rc = read_state(&r, file, state);
    if (rc == 0) rc = check_attrs(&r, file, &meta, state);
    if (rc == 0 && expect) rc = check_model(&r, &meta, expect);
    if (rc == 0) {
        fault_point("resume", world_rank);
        r.dxpl = transfer_dxpl(H5FD_MPIO_COLLECTIVE);
        r.dxpl_ind = transfer_dxpl(H5FD_MPIO_INDEPENDENT);
        if (r.dxpl < 0 || r.dxpl_ind < 0)
            rc = errf(err, errlen, "checkpoint %s: cannot set up MPI-IO reads", path);
    }
    const char *names[3] = {"model", "optimizer/adamw/m", "optimizer/adamw/v"};
    for (int g = 0; g < groups && rc == 0; g++) rc = read_tensor_group(&r, file, names[g], g);
    if (r.dxpl >= 0) H5Pclose(r.dxpl);
    if (r.dxpl_ind >= 0) H5Pclose(r.dxpl_ind);
    if (file >= 0) H5Fclose(file);
    /* every step above is decided alike on every rank; one last agreement makes sure of it */
    int bad = rc != 0;
    comm_allreduce(&bad, 1, MPI_INT, MPI_MAX, comm, "checkpoint read");
    if (bad && rc == 0) errf(err, errlen, "checkpoint %s: refused on another rank", path);
    if (!bad && found) *found = meta;
    return bad ? -1 : 0;
}

int ckpt_load(const char *path, MPI_Comm comm, MPI_Comm copy_comm, MPI_Comm ep_comm, const ckpt_tensors_t *P,
              float *params, float *m, float *v, ckpt_state_t *state, const ckpt_meta_t *expect,
              ckpt_meta_t *found, char *err, size_t errlen) {
    flat_bufs_t bufs = {{params, m, v}};
    ckpt_io_t io = flat_io(P, &bufs, 0);
    return ckpt_load_io(path, comm, copy_comm, ep_comm, P, &io, m && v ? 3 : 1, state, expect, found,
                        err, errlen);
}

size_t ckpt_staging_min_floats(const ckpt_tensors_t *P) {
    size_t row = 1;
    for (int i = 0; i < P->n; i++) {
        const ckpt_tensor_t *t = &P->t[i];
        if ((size_t)t->shape[t->ndim - 1] > row) row = (size_t)t->shape[t->ndim - 1];
    }
    return row;
}

double ckpt_rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return 0;
    int got = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return got == 2 ? (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0 : 0;
}

int ckpt_peek(const char *path, ckpt_peek_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->parent_step = -1;
    reader_t r = {.path = path, .comm = MPI_COMM_SELF, .copy_comm = MPI_COMM_SELF, .ep_comm = MPI_COMM_SELF,
                  .dxpl = -1, .dxpl_ind = -1, .msg = err, .len = errlen};
    err[0] = '\0';
    /* a regular file, checked without waiting (HDF5's own open of a FIFO blocks forever); a
     * file that is not HDF5 makes HDF5 print nothing (errors are off in main.c) */
    int fd = file_open_regular(path, NULL);
    if (fd < 0) return errf(err, errlen, "checkpoint %s: cannot read: %s", path, file_strerror(errno));
    close(fd);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return errf(err, errlen, "checkpoint %s: not a readable HDF5 file (truncated or corrupt)", path);
    ckpt_meta_t meta;
    ckpt_state_t st;
    memset(&st, 0, sizeof st);
    int rc = check_format(&r, file);
    if (rc == 0) rc = read_meta(&r, file, &meta);
    if (rc == 0) {
        out->step = meta.step;
        snprintf(out->run_id, sizeof out->run_id, "%s", meta.run_id);
        rc = read_state(&r, file, &st);
    }
    if (rc == 0) {
        out->save_seq = st.save_seq;
        out->parent_seq = st.parent_seq;
        out->parent_step = st.parent_step;
        rc = check_attrs(&r, file, &meta, &st);
    }
    H5Fclose(file);
    return rc;
}

/* ==== one tensor at a time, serial (tools: llmmerge) ======================================== */

#define CKPT_TEXT_READ_MAX (64 << 20) /* no text read here is longer: a damaged size is refused */

/* ---- attributes (reading) ------------------------------------------------------------------ */

int ckpt_file_model_keys(const ckpt_file_meta_t *m, const char *names[7], int32_t values[7]) {
    static const char *const keys[7] = {"vocab_size", "padded_vocab", "n_layer", "n_head",
                                        "d_model",    "d_ff",         "seq_len"};
    const int32_t v[7] = {m->vocab_size, m->padded_vocab, m->n_layer, m->n_head,
                          m->d_model,    m->d_ff,         m->seq_len};
    for (int i = 0; i < 7; i++) names[i] = keys[i], values[i] = v[i];
    return 7;
}

static int file_read_meta(hid_t file, const char *label, ckpt_file_meta_t *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    int32_t *v[7] = {&m->vocab_size, &m->padded_vocab, &m->n_layer, &m->n_head,
                     &m->d_model,    &m->d_ff,         &m->seq_len};
    const char *names[7];
    int32_t unused[7];
    ckpt_file_model_keys(m, names, unused);
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
    if (h5_read_str_attr(file, "run_id", CKPT_TEXT_READ_MAX, m->run_id, sizeof m->run_id) < 0 ||
        h5_read_str_attr(file, "kind", CKPT_TEXT_READ_MAX, m->kind, sizeof m->kind) < 0)
        return errf(err, errlen, "%s: root attribute run_id or kind is unreadable (damaged file)", label);
    return 0;
}

int ckpt_file_open(const char *path, const char *label, hid_t *file, ckpt_file_meta_t *meta, char *err,
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
    int rc = h5_read_str_attr(f, "format", CKPT_TEXT_READ_MAX, format, sizeof format);
    if (rc != 0 || strcmp(format, CKPT_FORMAT) != 0) {
        H5Fclose(f);
        return errf(err, errlen, "%s: not an llmtrain checkpoint or weights file (attribute format "
                    "is '%s', expected '%s')", label, rc == 0 ? format : rc > 0 ? "(missing)" : "(unreadable)",
                    CKPT_FORMAT);
    }
    if (h5_read_num_attr(f, "format_version", H5T_NATIVE_INT64, &version) != 0 ||
        version != CKPT_FORMAT_VERSION) {
        H5Fclose(f);
        return errf(err, errlen, "%s: format_version %lld, llmmerge reads version %d", label,
                    (long long)version, CKPT_FORMAT_VERSION);
    }
    if (file_read_meta(f, label, meta, err, errlen) != 0) {
        H5Fclose(f);
        return -1;
    }
    *file = f;
    return 0;
}

/* ---- the list of tensors ------------------------------------------------------------------- */

static int file_tensor_by_name(const void *a, const void *b) {
    return strcmp(((const ckpt_file_tensor_t *)a)->name, ((const ckpt_file_tensor_t *)b)->name);
}

/* Shape and type of one dataset of /model into t; -1 with a message if it is not a float32
 * 1-D, 2-D or 3-D dataset with a checksum. */
static int file_describe_dataset(hid_t group, const char *label, ckpt_file_tensor_t *t, char *err, size_t errlen) {
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

int ckpt_file_tensors(hid_t file, const char *label, ckpt_file_tensor_t **tensors, int *n, char *err,
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
    ckpt_file_tensor_t *t = rc == 0 ? xcalloc((size_t)n_links, sizeof *t) : NULL;
    for (int i = 0; rc == 0 && i < n_links; i++) {
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, t[i].name,
                                         sizeof t[i].name, H5P_DEFAULT);
        if (len < 0) rc = errf(err, errlen, "%s: the group /model cannot be listed (damaged file)", label);
        else if (len >= CKPT_NAME_MAX)
            rc = errf(err, errlen, "%s: /model holds a dataset with a name of %d or more characters "
                      "(not a model tensor)", label, CKPT_NAME_MAX);
        else rc = file_describe_dataset(g, label, &t[i], err, errlen);
    }
    H5Gclose(g);
    if (rc != 0) {
        xfree(t);
        return -1;
    }
    qsort(t, (size_t)n_links, sizeof *t, file_tensor_by_name);
    *tensors = t;
    *n = n_links;
    return 0;
}

char *ckpt_file_config(hid_t file) {
    char *s = NULL;
    if (h5_read_text_attr(file, "config", CKPT_TEXT_READ_MAX, &s) == 0) return s;
    if (H5Lexists(file, "config", H5P_DEFAULT) > 0) { /* a namelist too long for an attribute */
        hid_t d = H5Dopen2(file, "config", H5P_DEFAULT);
        hid_t type = d < 0 ? -1 : H5Dget_type(d);
        size_t n = type >= 0 && H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) <= 0
                       ? H5Tget_size(type) : 0;
        if (n > 0 && n <= CKPT_TEXT_READ_MAX) {
            s = xcalloc(n + 1, 1);
            if (H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s) < 0) s[0] = '\0';
        }
        if (type >= 0) H5Tclose(type);
        if (d >= 0) H5Dclose(d);
    }
    return s ? s : xcalloc(1, 1); /* "" */
}

/* ---- one tensor ----------------------------------------------------------------------------- */

int ckpt_file_read_tensor(hid_t file, const char *label, const ckpt_file_tensor_t *t, float *x, char *err,
                    size_t errlen) {
    char path[CKPT_NAME_MAX + 8];
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
static herr_t stream_write_text(hid_t file, const char *name, const char *text, hid_t dcpl) {
    hid_t type = h5_str_type(strlen(text), H5T_CSET_ASCII);
    if (type < 0) return -1;
    herr_t rc;
    if (strlen(text) <= CKPT_CONFIG_ATTR_MAX) {
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

static int stream_write_root(ckpt_stream_t *o, const ckpt_stream_info_t *pv) {
    const char *names[7];
    int32_t values[7];
    int n = ckpt_file_model_keys(pv->model, names, values);
    int32_t version = CKPT_FORMAT_VERSION;
    int bad = stream_write_text(o->file, "format", CKPT_FORMAT, o->dcpl) < 0;
    bad |= h5_write_attr(o->file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version) < 0;
    for (int i = 0; i < n; i++)
        bad |= h5_write_attr(o->file, names[i], H5T_STD_I32LE, H5T_NATIVE_INT32, &values[i]) < 0;
    bad |= stream_write_text(o->file, "llmtrain_version", LLMT_VERSION, o->dcpl) < 0;
    bad |= stream_write_text(o->file, "kind", "weights", o->dcpl) < 0;
    bad |= stream_write_text(o->file, "run_id", pv->run_id, o->dcpl) < 0;
    bad |= h5_write_attr(o->file, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &pv->step) < 0;
    bad |= h5_write_attr(o->file, "seed", H5T_STD_I64LE, H5T_NATIVE_INT64, &pv->seed) < 0;
    bad |= stream_write_text(o->file, "config", pv->config, o->dcpl) < 0;
    bad |= stream_write_text(o->file, "merge_method", pv->method, o->dcpl) < 0;
    bad |= stream_write_text(o->file, "merge_inputs", pv->inputs_json, o->dcpl) < 0;
    bad |= stream_write_text(o->file, "merge_parameters", pv->parameters, o->dcpl) < 0;
    return bad ? -1 : 0;
}

int ckpt_stream_create(ckpt_stream_t *o, const char *path, const ckpt_stream_info_t *pv, char *err, size_t errlen) {
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
    o->dcpl = quiet_dcpl();
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    int bad = o->dcpl < 0 || gcpl < 0 || H5Pset_obj_track_times(gcpl, 0) < 0;
    if (!bad) bad = stream_write_root(o, pv) != 0;
    if (!bad) bad = (o->model = H5Gcreate2(o->file, "model", H5P_DEFAULT, gcpl, H5P_DEFAULT)) < 0;
    if (gcpl >= 0) H5Pclose(gcpl);
    if (bad) {
        h5_error_text(why, sizeof why);
        ckpt_stream_abandon(o);
        return errf(err, errlen, "cannot write the attributes of %s: %s", o->tmp, why);
    }
    return 0;
}

int ckpt_stream_write(ckpt_stream_t *o, const ckpt_file_tensor_t *t, const float *x, char *err, size_t errlen) {
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

int ckpt_stream_publish(ckpt_stream_t *o, char *err, size_t errlen) {
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

void ckpt_stream_abandon(ckpt_stream_t *o) {
    if (o->model >= 0) H5Gclose(o->model);
    if (o->dcpl >= 0) H5Pclose(o->dcpl);
    if (o->file >= 0) H5Fclose(o->file);
    o->model = o->dcpl = o->file = -1;
    if (o->tmp[0]) unlink(o->tmp);
}
