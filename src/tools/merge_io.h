/* merge_io.h — the HDF5 side of llmmerge: what an input file is (its root attributes and the
 * list of /model tensors with their global shapes), one tensor read with its checksum verified,
 * and the output weights file written one tensor at a time in the layout of io/checkpoint.h
 * (/model/<param> float32 in its global shape with its `checksum`, the root attributes of a
 * weights file), plus the merge's provenance.
 *
 * Serial HDF5 (the sec2 driver): every rank opens the inputs read-only itself, and only rank 0
 * writes the output, to "<out>.tmp", published by rename (core/fileio file_publish) when whole.
 * Inputs may be checkpoints (their /optimizer is not read) or weight files of any grid.
 * Nothing here prints or exits: failures are -1 with one message in err, naming the input by
 * its label ("models(2) 'runs/b/weights.h5'") and the tensor.
 * Uses: HDF5, io/checkpoint (ckpt_tensor_checksum), core/. Used by: tools/llmmerge.c. */
#ifndef LLMT_MERGE_IO_H
#define LLMT_MERGE_IO_H
#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#define MIO_NAME_MAX 64 /* a tensor name, NUL included */
#define MIO_STR_MAX 64  /* run_id, kind */

typedef struct mio_tensor {
    char name[MIO_NAME_MAX]; /* "h.0.attn.qkv.w" (the dataset /model/<name>) */
    int ndim;                /* 1, 2, or 3 (MoE expert tensors [n_experts, rows, cols]) */
    int64_t dims[3];         /* global shape (1 past ndim) */
    int64_t numel;
} mio_tensor_t;

/* The root attributes that describe the model and the run; 0 = absent (files of version 0.1
 * have no shape attributes). */
typedef struct mio_meta {
    int32_t vocab_size, padded_vocab, n_layer, n_head, d_model, d_ff, seq_len;
    int64_t step, seed;
    char run_id[MIO_STR_MAX], kind[MIO_STR_MAX];
} mio_meta_t;

/* The model keys of mio_meta_t as (name, value) for messages: n entries written into names[] and
 * values[] (at most 7). */
int mio_model_keys(const mio_meta_t *m, const char *names[7], int32_t values[7]);

/* Open an input read-only and check it is an llmtrain file of format version 1; its root
 * attributes into *meta. The handle in *file (close with H5Fclose). */
int mio_open(const char *path, const char *label, hid_t *file, mio_meta_t *meta, char *err,
             size_t errlen);
/* The tensors of /model, sorted by name, with their shapes (each float32, 1-D or 2-D, with a
 * checksum attribute). *tensors is xmalloc'ed (xfree it). */
int mio_list_tensors(hid_t file, const char *label, mio_tensor_t **tensors, int *n, char *err,
                     size_t errlen);
/* The effective namelist the file was written with (attribute `config` or dataset /config),
 * xmalloc'ed; "" when it has none. */
char *mio_config_text(hid_t file);
/* Read /model/<t->name> whole into x[t->numel]: its shape must be t's, its checksum must match
 * and every value must be finite. */
int mio_read_tensor(hid_t file, const char *label, const mio_tensor_t *t, float *x, char *err,
                    size_t errlen);

/* The output file, being written. */
typedef struct mio_out {
    hid_t file, model, dcpl;
    char path[1024], tmp[1040];
} mio_out_t;

/* What the output records about itself besides the tensors. */
typedef struct mio_provenance {
    const mio_meta_t *model;   /* the model attributes (of the reference input) */
    int64_t step, seed;        /* the largest input step; the reference input's seed */
    const char *run_id;        /* the merged model's lineage */
    const char *config;        /* the reference input's namelist text */
    const char *method;        /* merge_method */
    const char *inputs_json;   /* merge_inputs: every input's role, path, sha256, step, run_id */
    const char *parameters;    /* merge_parameters: the effective &merge namelist */
} mio_provenance_t;

/* Create "<path>.tmp" (truncating an old one) with the root attributes and the group /model. */
int mio_create(mio_out_t *o, const char *path, const mio_provenance_t *pv, char *err,
               size_t errlen);
/* /model/<t->name> in t's shape with its checksum. */
int mio_write_tensor(mio_out_t *o, const mio_tensor_t *t, const float *x, char *err, size_t errlen);
/* Close the file (every byte written and flushed), fsync it, rename it to its path, fsync the
 * directory. On failure the .tmp is removed. */
int mio_publish(mio_out_t *o, char *err, size_t errlen);
/* Give up: close what is open and remove the .tmp (an older file at the path is untouched). */
void mio_abandon(mio_out_t *o);
#endif
