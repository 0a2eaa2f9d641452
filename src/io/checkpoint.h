/* checkpoint.h — checkpoints and weight files in HDF5 (docs/design.md). Layout of one file:
 *   /model/<param>                float32, the parameter's GLOBAL shape
 *   /optimizer/adamw/m/<param>    float32, AdamW first moment, GLOBAL shape   (checkpoints)
 *   /optimizer/adamw/v/<param>    float32, AdamW second moment, GLOBAL shape  (checkpoints)
 *   every dataset: attribute `checksum` (uint64) = sum mod 2^64 over its elements of
 *                  mix64(global index, float bits); ranks compute it on their own parts
 *   attributes on / : format ("llmtrain-checkpoint"), format_version (1), llmtrain_version,
 *                  kind ("weights" | "checkpoint"), step, seed, vocab_size, padded_vocab,
 *                  n_layer, n_head, d_model, d_ff, seq_len (the model), run_id (the lineage:
 *                  one id per fresh start, kept across resumes), config (the effective
 *                  namelist); checkpoints also: tokens_seen, sample_pos (next global sample
 *                  index), adam_t, skipped, global_batch, loss_scale, loss_scale_growth,
 *                  loss_scale_hysteresis, loss_scale_overflows, grid_dp, grid_tp, grid_pp,
 *                  stage, data_seq_len, data_sources and data_pos_0 .. data_pos_<n-1> (the
 *                  curriculum's stage and per-source data positions; absent before 0.3.x)
 *                  with data_source_0 .. data_source_<n-1> (each position's source, named
 *                  by its pattern text; absent in files written before names were kept),
 *                  save_seq, parent_seq, parent_step (the file's place in the directory's
 *                  history: see ckpt_state_t); every file: attrs_checksum (uint64) over the
 *                  root attributes above but format, llmtrain_version and config (files
 *                  without it, written before it existed, are range-checked only)
 *   /config        : the namelist instead of the attribute when it is over 60000 bytes
 *   /provenance    : (group, written when the run gives one; readers need none) one string
 *                  attribute per field of the run's provenance (core/provenance.h,
 *                  train/runinfo.h): commit, dirty, compiler, build_date, library versions,
 *                  hosts, slurm_job_id, ... (the same values as run.json)
 * Written collectively through parallel HDF5 (MPI-IO, collective transfers): each element by
 * one rank only (the rank whose flat range — its ZeRO partition, ckpt_io_t — holds it, among
 * the owners: replicated tensors by tp rank 0, the tied wte by the first stage), in pieces of at
 * most one staging buffer. Read likewise: each rank reads exactly its own hyperslabs, so a file
 * written on one grid loads on any other, and the ranks that together read a copy verify its
 * checksum.
 * Written to "<path>.tmp", flushed, and renamed (then the directory fsync'ed) when complete.
 * Nothing here exits on a bad file or a failed write: every problem is one message, the same
 * on every rank, so the caller can fall back to an older file or carry on without the save.
 * The tensors are described by this file's own ckpt_tensors_t (io/ knows no model:
 * model/params.c describes its registry in it, params_t.ckpt).
 * Uses: HDF5, io/h5attr, parallel/comm (agreement between ranks), core/. */
#ifndef LLMT_CHECKPOINT_H
#define LLMT_CHECKPOINT_H
#include <hdf5.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include "core/provenance.h"
#include <stdbool.h>

/* One named tensor as a checkpoint sees it: its GLOBAL shape, and this rank's shard of it. */
typedef struct ckpt_tensor {
    const char *name;          /* the dataset's name under /model, /optimizer/... */
    int ndim;                  /* 1, 2, or 3 */
    int64_t shape[3];          /* GLOBAL shape (1 past ndim) */
    int split_dim;             /* split over the tp group (>= 0) or replicated (-1) */
    int experts;               /* > 0: an expert tensor, dealt out over the ep group */
    bool held;                 /* this rank's stage holds it */
    bool tied_copy;            /* a second copy (the last stage's tied wte): never written */
    size_t numel, offset;      /* local elements, and their offset in the flat local buffer */
    int nblk;                  /* the local shard as nblk hyperslab blocks (row-major order) */
    int64_t start[3][3], count[3][3];
    const void *src;           /* the describer's own record of the tensor (global_index) */
} ckpt_tensor_t;

/* Every tensor of a model, and this rank's place in the tensor-parallel group. */
typedef struct ckpt_tensors {
    ckpt_tensor_t *t;
    int n;
    int64_t n_global;          /* global elements of all tensors */
    int tp, tp_rank;
    /* The global (row-major) indices g[0..n) of local elements j0 .. j0+n-1 of t (checksums). */
    void (*global_index)(const struct ckpt_tensors *T, const ckpt_tensor_t *t, size_t j0,
                         size_t n, int64_t *g);
} ckpt_tensors_t;

#define CKPT_RUN_ID_LEN 40
#define CKPT_MAX_DATA_SOURCES 64 /* train/curriculum's CURRIC_MAX_SETS */
#define CKPT_SOURCE_LEN 256      /* a data source's name: its pattern text (config's CFG_STR) */

/* What every file records about the run and the model (and load checks against the namelist). */
typedef struct ckpt_meta {
    int64_t step;
    int64_t seed;
    int vocab_size, padded_vocab;
    int n_layer, n_head, d_model, d_ff, seq_len; /* 0 = unknown (files of version 0.1) */
    const char *config_text;                     /* effective namelist text (may be NULL) */
    char run_id[CKPT_RUN_ID_LEN];                /* lineage ("" in files of version 0.1) */
    const provenance_t *provenance;              /* written: the group /provenance (may be NULL) */
} ckpt_meta_t;

/* What a resume needs besides tensors. */
typedef struct ckpt_state {
    int64_t tokens_seen, sample_pos, adam_t, skipped;
    int64_t global_batch;
    double loss_scale;
    int64_t grid_dp, grid_tp, grid_pp;
    int64_t ls_growth, ls_hysteresis, ls_overflows; /* the fp16 loss scaler's trackers */
    int has_scaler;                                 /* read: the file holds them */
    /* the data cursor of train/curriculum (files before it have none: has_data_pos 0) */
    int64_t stage;                                  /* 0-based stage of the saved step */
    int64_t data_seq_len;                           /* the positions count windows of this */
    int64_t n_data_pos;                             /* sources */
    int64_t data_pos[CKPT_MAX_DATA_SOURCES];
    /* each position's source, named by its pattern text, so that a resume maps positions by
     * name ("" in files written before names were kept: positions by index) */
    char data_source[CKPT_MAX_DATA_SOURCES][CKPT_SOURCE_LEN];
    int has_data_pos;                               /* read: the file holds them */
    /* Recency: save_seq numbers the saves into one checkpoint directory (1, 2, ... across runs
     * and resumes, 0 = a file written before it existed); parent_seq / parent_step name the
     * checkpoint this state continued from (the run's previous save, or the file it resumed
     * from; parent_step -1 = none: a fresh start). */
    int64_t save_seq, parent_seq, parent_step;
    int attrs_checked; /* read: 1 when attrs_checksum matched, 0 when the file has none (older) */
} ckpt_state_t;

/* `owner` of ckpt_save / ckpt_write_weights: which of this rank's local tensors its replica
 * writes: the dense ones (dp rank 0), the expert tensors (expert-replica rank 0: with expert
 * parallelism each ep rank holds other experts), or none (0). */

/* `owner` of ckpt_save / ckpt_write_weights: which of this rank's local tensors its replica
 * writes: the dense ones (dp rank 0), the expert tensors (expert-replica rank 0: with expert
 * parallelism each ep rank holds other experts), or none (0). */
enum { CKPT_OWNS_DENSE = 1, CKPT_OWNS_EXPERTS = 2, CKPT_OWNS_ALL = 3 };

/* ---- sharded I/O ------------------------------------------------------------------------------
 * Each rank moves only the flat elements [lo, hi) of its local buffers (its ZeRO partition) and
 * only the tensors `owner` gives it, in pieces of at most staging_floats elements: every piece
 * is one collective H5Dwrite / H5Dread of the hyperslabs it covers (ranks with fewer pieces of a
 * dataset join with empty selections). Groups: 0 the parameters (/model), 1 and 2 the AdamW
 * moments m and v (/optimizer/adamw/m, /v). */
typedef struct ckpt_io {
    size_t lo[3], hi[3];   /* per group: the flat range this rank writes (save) or reads (load) */
    MPI_Comm part_comm[3]; /* load: the ranks whose ranges together cover one copy of the flat
                              buffer (MPI_COMM_SELF: this rank's range is all of it) */
    int owner;             /* save: CKPT_OWNS_* above, the tensors this rank writes within [lo, hi) */
    float *staging;        /* staging_floats floats (may be NULL when no callback uses it) */
    size_t staging_floats; /* the largest piece, in elements */
    /* save: flat elements [a, b) of group g; returns them (its own memory, or copied into
     * staging) */
    const float *(*fetch)(void *ctx, int g, size_t a, size_t b, float *staging);
    /* load: where elements [a, b) of group g are read to (NULL or no callback: staging), and
     * then (store, may be NULL: only verified) put in their place from there */
    float *(*dest)(void *ctx, int g, size_t a, size_t b, float *staging);
    void (*store)(void *ctx, int g, size_t a, size_t b, const float *buf);
    void *ctx;
    double peak_rss_mib;   /* out: this rank's largest resident size sampled between pieces */
} ckpt_io_t;

/* The smallest staging buffer, in elements: the longest row (last dimension) of any tensor. */
size_t ckpt_staging_min_floats(const ckpt_tensors_t *P);
/* This process's resident set size, in MiB (VmRSS; 0 when unknown). */
double ckpt_rss_mib(void);

/* ckpt_save / ckpt_load with sharded I/O (semantics as below); `with_optimizer` (save) or
 * `groups` (load: 1 the parameters, 3 with the moments) says which groups move. */
int ckpt_save_io(const char *path, MPI_Comm comm, MPI_Info info, const ckpt_tensors_t *P,
                 ckpt_io_t *io, const ckpt_meta_t *meta, const ckpt_state_t *state,
                 double *written, char *err, size_t errlen);
int ckpt_load_io(const char *path, MPI_Comm comm, MPI_Comm copy_comm, MPI_Comm ep_comm,
                 const ckpt_tensors_t *P, ckpt_io_t *io, int groups, ckpt_state_t *state,
                 const ckpt_meta_t *expect, ckpt_meta_t *found, char *err, size_t errlen);

/* Collective over comm. params (and m, v for a checkpoint, i.e. when state is not NULL) are host
 * copies of this rank's whole local flat buffers (ckpt_save_io with views of them); a rank that
 * is not an owner writes nothing and may pass NULL. `owner`: CKPT_OWNS_* above.
 * `info`: MPI-IO hints (MPI_INFO_NULL for none). Returns 0 with the bytes of tensor data in
 * *written, or -1 with one message in err on every rank: then nothing was published, the .tmp
 * file is gone and an earlier file of the same name is untouched. */
int ckpt_save(const char *path, MPI_Comm comm, MPI_Info info, const ckpt_tensors_t *P,
              const float *params, const float *m, const float *v, const ckpt_meta_t *meta,
              const ckpt_state_t *state, int owner, double *written, char *err, size_t errlen);
/* An upper bound of the size of the file ckpt_save writes (tensors, metadata block, slack). */
double ckpt_file_bytes(const ckpt_tensors_t *P, bool with_optimizer);
/* Weights only (weights_stepNNNNNN.h5): the same, without optimizer and state. */
int ckpt_write_weights(const char *path, MPI_Comm comm, const ckpt_tensors_t *P, const float *flat,
                       const ckpt_meta_t *meta, int writer, char *err, size_t errlen);

/* Collective: read this rank's hyperslabs of /model (and the moments when m, v are not NULL,
 * and state when not NULL); every rank verifies the checksum of what it read: copy_comm joins
 * the ranks that together hold one copy of the tensor-parallel tensors (the tp group; a
 * replicated tensor is checked on each rank alone), ep_comm the ep group that holds one copy of
 * the expert tensors with it (MPI_COMM_SELF without expert parallelism). `expect` is the model of the namelist: a
 * file written for another model is refused with a message naming the &model key. Returns 0
 * (the file's meta in *found, config_text NULL), or -1 with one message in err on every rank
 * (missing, not HDF5, truncated, corrupt, wrong model, attribute missing or unreadable). */
int ckpt_load(const char *path, MPI_Comm comm, MPI_Comm copy_comm, MPI_Comm ep_comm, const ckpt_tensors_t *P,
              float *params, float *m, float *v, ckpt_state_t *state, const ckpt_meta_t *expect,
              ckpt_meta_t *found, char *err, size_t errlen);

/* The `checksum` attribute of a dataset that holds the n floats of x in row-major order (a
 * whole tensor in its global shape): sum mod 2^64 of mix64(index, float bits), as ckpt_save
 * writes it. For tools that write or verify weight files tensor by tensor (llmmerge). */
uint64_t ckpt_tensor_checksum(const float *x, size_t n);

/* What ckpt_peek reads of a checkpoint file. */
typedef struct ckpt_peek {
    int64_t step, save_seq, parent_seq, parent_step; /* parent_step -1: none */
    char run_id[CKPT_RUN_ID_LEN];                    /* "" when it cannot be read */
} ckpt_peek_t;
/* Rank-local, cheap (root attributes only, not the tensors): the file's step, lineage and
 * recency, its attributes range-checked and verified against attrs_checksum. 0, or -1 with the
 * reason in err (not HDF5, truncated, an attribute missing, out of range or not matching the
 * checksum); the fields it could read are filled in either way. */
int ckpt_peek(const char *path, ckpt_peek_t *out, char *err, size_t errlen);

/* ---- one tensor at a time, serial (tools) ----------------------------------------------------
 * For a tool that works tensor by tensor on whole tensors in their global shapes (llmmerge,
 * MPI-parallel over tensors): each rank opens an input read-only itself (the sec2 driver) and
 * reads one /model tensor whole, its checksum verified; one rank writes a weights file one
 * tensor at a time to "<path>.tmp", published by rename when whole, in the layout above (root
 * attributes of a weights file, /model/<param> float32 with its `checksum`, no timestamps in the
 * object headers), plus the tool's own provenance attributes. Inputs may be checkpoints (their
 * /optimizer is not read) or weight files of any grid. Failures are -1 with one message in err
 * naming the input by its label ("models(2) 'runs/b/weights.h5'") and the tensor. */
#define CKPT_NAME_MAX 64 /* a tensor name, NUL included */
#define CKPT_ID_MAX 64   /* run_id, kind */

typedef struct ckpt_file_tensor {
    char name[CKPT_NAME_MAX]; /* "h.0.attn.qkv.w" (the dataset /model/<name>) */
    int ndim;                 /* 1, 2, or 3 (MoE expert tensors [n_experts, rows, cols]) */
    int64_t dims[3];          /* global shape (1 past ndim) */
    int64_t numel;
} ckpt_file_tensor_t;

/* The root attributes that describe the model and the run; 0 = absent (files of version 0.1
 * have no shape attributes). */
typedef struct ckpt_file_meta {
    int32_t vocab_size, padded_vocab, n_layer, n_head, d_model, d_ff, seq_len;
    int64_t step, seed;
    char run_id[CKPT_ID_MAX], kind[CKPT_ID_MAX];
} ckpt_file_meta_t;

/* The model keys of ckpt_file_meta_t as (name, value) for messages: n entries written into
 * names[] and values[] (at most 7). */
int ckpt_file_model_keys(const ckpt_file_meta_t *m, const char *names[7], int32_t values[7]);

/* Open an input read-only and check it is an llmtrain file of format version 1; its root
 * attributes into *meta. The handle in *file (close with H5Fclose). */
int ckpt_file_open(const char *path, const char *label, hid_t *file, ckpt_file_meta_t *meta, char *err,
                   size_t errlen);
/* The tensors of /model, sorted by name, with their shapes (each float32, 1-D, 2-D or 3-D,
 * with a checksum attribute). *tensors is xmalloc'ed (xfree it). */
int ckpt_file_tensors(hid_t file, const char *label, ckpt_file_tensor_t **tensors, int *n, char *err,
                      size_t errlen);
/* The effective namelist the file was written with (attribute `config` or dataset /config),
 * xmalloc'ed; "" when it has none. */
char *ckpt_file_config(hid_t file);
/* Read /model/<t->name> whole into x[t->numel]: its shape must be t's, its checksum must match
 * and every value must be finite. */
int ckpt_file_read_tensor(hid_t file, const char *label, const ckpt_file_tensor_t *t, float *x, char *err,
                          size_t errlen);

/* The output file, being written (serial HDF5: one rank writes it). */
typedef struct ckpt_stream {
    hid_t file, model, dcpl;
    char path[1024], tmp[1040];
} ckpt_stream_t;

/* What the output records about itself besides the tensors. */
typedef struct ckpt_stream_info {
    const ckpt_file_meta_t *model; /* the model attributes (of the reference input) */
    int64_t step, seed;            /* the largest input step; the reference input's seed */
    const char *run_id;            /* the merged model's lineage */
    const char *config;            /* the reference input's namelist text */
    const char *method;            /* merge_method */
    const char *inputs_json;       /* merge_inputs: every input's role, path, sha256, step, run_id */
    const char *parameters;        /* merge_parameters: the effective &merge namelist */
} ckpt_stream_info_t;

/* Create "<path>.tmp" (truncating an old one) with the root attributes and the group /model. */
int ckpt_stream_create(ckpt_stream_t *o, const char *path, const ckpt_stream_info_t *pv, char *err,
                       size_t errlen);
/* /model/<t->name> in t's shape with its checksum. */
int ckpt_stream_write(ckpt_stream_t *o, const ckpt_file_tensor_t *t, const float *x, char *err, size_t errlen);
/* Close the file (every byte written and flushed), fsync it, rename it to its path, fsync the
 * directory. On failure the .tmp is removed. */
int ckpt_stream_publish(ckpt_stream_t *o, char *err, size_t errlen);
/* Give up: close what is open and remove the .tmp (an older file at the path is untouched). */
void ckpt_stream_abandon(ckpt_stream_t *o);
#endif
