/* test_checkpoint.c — HDF5 weight checkpoints. Reference: the grid-invariant init of the same
 * registry on one rank (tp=1); tolerance: exact (the file stores the float32 values as they are).
 * Runs on 1 rank and under `mpirun -np 2`: with 2 ranks the file is written by a tp=2 registry
 * (each rank its half of every split tensor) and by a dp=2 layout (rank 1 writes nothing), and
 * read back on tp=1 and tp=2 (every rank verifies the copy it read). Shapes and attributes are
 * checked through the HDF5 API; a missing file, a missing dataset, a wrong shape, a missing
 * checksum, another model (n_head, extra layers) must be refused with a message, and string
 * attributes as h5py writes them (UTF-8, variable length) must be read. A save into a directory
 * that does not exist fails with a message and leaves no .tmp behind. A checkpoint's state
 * attributes edited after the save are refused naming the attribute (impossible values) or
 * attrs_checksum (possible ones); a file without attrs_checksum is range-checked only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/params.h"

static int world_rank, world_size;
static char dir[256];

/* ---- fixtures ------------------------------------------------------------------------------- */

/* A small GPT-2: 2 layers, d_model 16 (qkv 48 rows = 3 blocks of 16, split evenly over tp=2),
 * vocab 100 padded to 128. Filled directly, so the test does not depend on the parser. */
static void small_config(config_t *cfg, int vocab_size) {
    config_defaults(cfg); /* GPT-2's architecture switches and init */
    cfg->n_layer = 2;
    cfg->n_head = cfg->n_kv_head = 2;
    cfg->d_model = 16;
    cfg->d_ff = 64;
    cfg->vocab_size = vocab_size;
    cfg->seq_len = 8;
    cfg->seed = 1337;
}

static float *init_weights(params_t *P, const config_t *cfg, int tp, int tp_rank) {
    params_create(P, MODEL_SPEC_OF(cfg), tp, tp_rank);
    float *flat = xcalloc(P->total, sizeof(float));
    params_init(P, flat, (uint64_t)cfg->seed);
    return flat;
}

static void path_in_dir(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", dir, name);
}

static const char *namelist_text =
    "&model\n  n_layer = 2\n  d_model = 16\n  vocab_size = 100\n/\n&run\n  seed = 1337\n/\n";

/* The model small_config describes, as the files record it. */
static ckpt_meta_t meta_of(const config_t *cfg, int64_t step, const char *config_text) {
    ckpt_meta_t meta = {step, 1337, cfg->vocab_size, (cfg->vocab_size + 127) / 128 * 128,
                        cfg->n_layer, cfg->n_head, cfg->d_model, cfg->d_ff, cfg->seq_len,
                        config_text, "0123456789abcdef", NULL};
    return meta;
}

static void write_ckpt(const char *name, const params_t *P, const float *flat, int64_t step,
                       const char *config_text, int writer) {
    char path[512], err[2048];
    path_in_dir(path, sizeof path, name);
    config_t cfg;
    small_config(&cfg, 100);
    ckpt_meta_t meta = meta_of(&cfg, step, config_text);
    int rc = ckpt_write_weights(path, MPI_COMM_WORLD, &P->ckpt, flat, &meta, writer, err, sizeof err);
    if (rc != 0) printf("    write failed: %s\n", err);
    assert_int_equal(rc, 0);
}

/* The communicator of ranks that together hold one copy of the tp-split tensors: all ranks
 * for a registry of tp = world size, each rank alone for tp = 1. */
static MPI_Comm copy_comm_for(int tp) { return tp == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD; }

/* Load `name` into a registry of (tp, tp_rank) for cfg; returns ckpt_load's result. */
static int load(const char *name, const config_t *cfg, params_t *P, float *flat, int tp,
                ckpt_meta_t *found, char *err, size_t errlen) {
    char path[512];
    path_in_dir(path, sizeof path, name);
    ckpt_meta_t want = meta_of(cfg, 0, NULL);
    return ckpt_load(path, MPI_COMM_WORLD, copy_comm_for(tp), MPI_COMM_SELF, &P->ckpt, flat, NULL, NULL, NULL, &want,
                     found, err, errlen);
}

/* Every local element of every parameter equal; prints the first one that differs. */
static void assert_same_weights(const params_t *P, const float *got, const float *want) {
    for (int i = 0; i < P->n; i++) {
        const param_t *p = &P->p[i];
        for (size_t j = 0; j < p->numel; j++)
            if (got[p->offset + j] != want[p->offset + j]) {
                printf("    rank %d: %s local element %zu: read %.9g, expected %.9g\n",
                       world_rank, p->name, j, got[p->offset + j], want[p->offset + j]);
                fail();
            }
    }
}

/* Read `name` into a registry of (tp, tp_rank) and compare with that registry's own init. */
static void read_and_compare(const char *name, const config_t *cfg, int tp, int tp_rank,
                             int64_t want_step) {
    params_t P;
    float *want = init_weights(&P, cfg, tp, tp_rank);
    float *got = xcalloc(P.total, sizeof(float));
    char err[2048];
    ckpt_meta_t found;
    int rc = load(name, cfg, &P, got, tp, &found, err, sizeof err);
    if (rc != 0) printf("    refused: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(found.step, want_step);
    assert_string_equal(found.run_id, "0123456789abcdef");
    assert_same_weights(&P, got, want);
    xfree(got);
    xfree(want);
    params_destroy(&P);
}

/* ---- sharded I/O in pieces ---------------------------------------------------------------- */

/* The io callbacks of the piece tests: the flat buffer, copied through the staging buffer. */
static const float *copy_fetch(void *ctx, int g, size_t a, size_t b, float *staging) {
    (void)g;
    memcpy(staging, (const float *)ctx + a, (b - a) * sizeof(float));
    return staging;
}

static void copy_store(void *ctx, int g, size_t a, size_t b, const float *buf) {
    (void)g;
    memcpy((float *)ctx + a, buf, (b - a) * sizeof(float));
}

/* A weights file written in pieces of `piece` floats through `staging`: every rank the flat range
 * [lo, hi) of its registry (tp = tp ranks, or replicas of tp = 1 cut into partitions). */
static void write_pieces(const char *name, const params_t *P, float *flat, size_t lo, size_t hi,
                         size_t piece) {
    char path[512], err[2048];
    path_in_dir(path, sizeof path, name);
    config_t cfg;
    small_config(&cfg, 100);
    ckpt_meta_t meta = meta_of(&cfg, 4, NULL);
    float *staging = xmalloc(piece * sizeof(float));
    ckpt_io_t io = {.owner = CKPT_OWNS_ALL, .staging = staging, .staging_floats = piece,
                    .fetch = copy_fetch, .ctx = flat};
    io.lo[0] = lo, io.hi[0] = hi;
    double written;
    int rc = ckpt_save_io(path, MPI_COMM_WORLD, MPI_INFO_NULL, &P->ckpt, &io, &meta, NULL, &written,
                          err, sizeof err);
    if (rc != 0) printf("    write failed: %s\n", err);
    assert_int_equal(rc, 0);
    xfree(staging);
}

/* Read back in pieces of `piece` floats into the range [lo, hi) only (part: the ranks whose
 * ranges together cover one copy); that range must equal `want`. */
static void read_pieces_back(const char *name, const params_t *P, const float *want, size_t lo,
                             size_t hi, size_t piece, MPI_Comm copy, MPI_Comm part) {
    char path[512], err[2048];
    path_in_dir(path, sizeof path, name);
    config_t cfg;
    small_config(&cfg, 100);
    ckpt_meta_t want_meta = meta_of(&cfg, 0, NULL);
    float *got = xcalloc(P->total, sizeof(float)), *staging = xmalloc(piece * sizeof(float));
    ckpt_io_t io = {.staging = staging, .staging_floats = piece, .store = copy_store, .ctx = got};
    for (int g = 0; g < 3; g++) io.lo[g] = lo, io.hi[g] = hi, io.part_comm[g] = part;
    int rc = ckpt_load_io(path, MPI_COMM_WORLD, copy, MPI_COMM_SELF, &P->ckpt, &io, 1, NULL, &want_meta,
                          NULL, err, sizeof err);
    if (rc != 0) printf("    refused: %s\n", err);
    assert_int_equal(rc, 0);
    for (size_t j = lo; j < hi; j++)
        if (got[j] != want[j]) {
            printf("    rank %d, pieces of %zu: flat element %zu read %.9g, expected %.9g\n", world_rank,
                   piece, j, got[j], want[j]);
            fail();
        }
    xfree(staging);
    xfree(got);
}

/* Pieces of 1, 7, 33 and 1000 floats (partial rows, tp blocks of qkv cut anywhere, a rank with
 * more pieces of a dataset than another) write the file a whole-buffer write gives and read back
 * exactly: on tp = world size (each rank all of its shard) and, with 2 ranks, on two replicas of
 * tp = 1 that split the flat buffer at an odd element (ZeRO partitions). Reference: the init. */
static void pieces_of_any_size_write_and_read_the_same_file(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    const size_t sizes[4] = {1, 7, 33, 1000};
    params_t P, R;
    float *flat = init_weights(&P, &cfg, world_size, world_rank), *rep = init_weights(&R, &cfg, 1, 0);
    const size_t mid = world_size == 2 ? R.total / 2 + 5 : R.total;
    const size_t lo = world_rank == 0 ? 0 : mid, hi = world_rank == 0 ? mid : R.total;
    for (int k = 0; k < 4; k++) {
        write_pieces("tp.h5", &P, flat, 0, P.total, sizes[k]);
        read_and_compare("tp.h5", &cfg, 1, 0, 4);
        read_pieces_back("tp.h5", &P, flat, 0, P.total, sizes[k], copy_comm_for(world_size), MPI_COMM_SELF);
        write_pieces("part.h5", &R, rep, lo, hi, sizes[k]);
        read_and_compare("part.h5", &cfg, 1, 0, 4);
        read_pieces_back("part.h5", &R, rep, lo, hi, sizes[k], MPI_COMM_SELF, MPI_COMM_WORLD);
    }
    xfree(flat);
    xfree(rep);
    params_destroy(&P);
    params_destroy(&R);
}

static int make_dir(void **state) {
    (void)state;
    if (world_rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/llmt_test_ckpt_XXXXXX");
        if (!mkdtemp(dir)) return -1;
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    return 0;
}

static int remove_dir(void **state) {
    (void)state;
    MPI_Barrier(MPI_COMM_WORLD);
    int rc = 0;
    if (world_rank == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        rc = system(cmd) == 0 ? 0 : -1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return rc;
}

/* ---- round trips ---------------------------------------------------------------------------- */

static void written_weights_read_back_exactly_on_same_grid(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("same.h5", &P, flat, 42, namelist_text, 1);
    char path[512], tmp[520];
    path_in_dir(path, sizeof path, "same.h5");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(access(path, R_OK), 0);
    assert_int_not_equal(access(tmp, F_OK), 0); /* renamed when complete */
    read_and_compare("same.h5", &cfg, world_size, world_rank, 42);
    xfree(flat);
    params_destroy(&P);
}

/* Written with tp = world size (tp=2 under mpirun -np 2), read as full tensors on tp=1 and
 * as shards of tp = world size: every global element lands where the other grid expects it. */
static void tp_sharded_write_reads_back_as_full_tensors_on_tp1(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("tp.h5", &P, flat, 7, namelist_text, 1);
    read_and_compare("tp.h5", &cfg, 1, 0, 7);
    xfree(flat);
    params_destroy(&P);

    /* And the other way round: a tp=1 file (written by rank 0 alone) read as tp shards. */
    float *full = init_weights(&P, &cfg, 1, 0);
    write_ckpt("tp1.h5", &P, full, 8, namelist_text, world_rank == 0);
    read_and_compare("tp1.h5", &cfg, world_size, world_rank, 8);
    xfree(full);
    params_destroy(&P);
}

/* A data-parallel layout: every rank holds the full model, only rank 0 writes; the other
 * ranks take part in the collective writes with empty selections. */
static void only_writer_rank_writes_and_others_join_collectively(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, 1, 0);
    if (world_rank != 0) /* garbage on non-writers: it must not reach the file */
        for (size_t i = 0; i < P.total; i++) flat[i] = -999.0f;
    write_ckpt("dp.h5", &P, flat, 3, namelist_text, world_rank == 0);
    read_and_compare("dp.h5", &cfg, 1, 0, 3);
    xfree(flat);
    params_destroy(&P);
}

/* ---- the file through the HDF5 API (independent of our reader) ------------------------------ */

static void check_string_attr(hid_t file, const char *name, const char *want) {
    assert_true(H5Aexists(file, name) > 0);
    hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
    hid_t type = H5Aget_type(attr);
    assert_int_equal(H5Tget_class(type), H5T_STRING);
    size_t n = H5Tget_size(type);
    char *buf = calloc(n + 1, 1);
    assert_true(H5Aread(attr, type, buf) >= 0);
    if (want && strcmp(buf, want) != 0) printf("    attribute %s = '%s', want '%s'\n", name, buf, want);
    if (want) assert_string_equal(buf, want);
    else assert_true(strlen(buf) > 0);
    free(buf);
    H5Tclose(type);
    H5Aclose(attr);
}

static int64_t int_attr(hid_t file, const char *name) {
    int64_t v = -1;
    assert_true(H5Aexists(file, name) > 0);
    hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
    assert_true(H5Aread(attr, H5T_NATIVE_INT64, &v) >= 0);
    H5Aclose(attr);
    return v;
}

static void check_file_layout(const char *path, const params_t *P) {
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(file >= 0);
    check_string_attr(file, "format", "llmtrain-checkpoint");
    check_string_attr(file, "llmtrain_version", NULL);
    check_string_attr(file, "config", namelist_text);
    assert_int_equal(int_attr(file, "format_version"), 1);
    assert_int_equal(int_attr(file, "step"), 1234567890123ll);
    assert_int_equal(int_attr(file, "seed"), 1337);
    assert_int_equal(int_attr(file, "vocab_size"), 100);
    assert_int_equal(int_attr(file, "padded_vocab"), 128);
    assert_int_equal(int_attr(file, "n_layer"), 2);
    assert_int_equal(int_attr(file, "n_head"), 2);
    assert_int_equal(int_attr(file, "d_model"), 16);
    assert_int_equal(int_attr(file, "d_ff"), 64);
    assert_int_equal(int_attr(file, "seq_len"), 8);
    check_string_attr(file, "run_id", "0123456789abcdef");
    for (int i = 0; i < P->n; i++) {
        const param_t *p = &P->p[i];
        char name[128];
        snprintf(name, sizeof name, "/model/%s", p->name);
        hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
        assert_true(d >= 0);
        hid_t space = H5Dget_space(d), type = H5Dget_type(d);
        hsize_t dims[2] = {0, 0};
        int ndim = H5Sget_simple_extent_dims(space, dims, NULL);
        if (ndim != p->ndim || (int64_t)dims[0] != p->shape[0] ||
            (ndim == 2 && (int64_t)dims[1] != p->shape[1]))
            printf("    %s: file shape %d:[%llu, %llu], registry %d:[%lld, %lld]\n", name, ndim,
                   (unsigned long long)dims[0], (unsigned long long)dims[1], p->ndim,
                   (long long)p->shape[0], (long long)p->shape[1]);
        assert_int_equal(ndim, p->ndim);
        assert_int_equal(dims[0], p->shape[0]);
        if (ndim == 2) assert_int_equal(dims[1], p->shape[1]);
        assert_int_equal(H5Tget_class(type), H5T_FLOAT);
        assert_int_equal(H5Tget_size(type), 4);
        H5Tclose(type);
        H5Sclose(space);
        H5Dclose(d);
    }
    H5Fclose(file);
}

static void file_has_global_shapes_and_root_attributes(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("layout.h5", &P, flat, 1234567890123ll, namelist_text, 1);
    params_t P1; /* global shapes: the same on every grid */
    params_create(&P1, MODEL_SPEC_OF(&cfg), 1, 0);
    if (world_rank == 0) {
        char path[512];
        path_in_dir(path, sizeof path, "layout.h5");
        check_file_layout(path, &P1);
        /* wte is [padded_vocab, d_model]; qkv.w [3 d_model, d_model]; biases 1-D. */
        assert_int_equal(params_find(&P1, "wte")->shape[0], 128);
        assert_int_equal(params_find(&P1, "h.1.attn.qkv.w")->shape[0], 48);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    params_destroy(&P1);
    xfree(flat);
    params_destroy(&P);
}

/* A namelist over 64 KiB does not fit an attribute: it goes to the dataset /config. */
static void long_config_text_is_stored_as_dataset(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    size_t n = 100000;
    char *text = malloc(n + 1);
    for (size_t i = 0; i < n; i++) text[i] = i % 64 == 63 ? '\n' : (char)('a' + i % 26);
    text[n] = 0;
    write_ckpt("long.h5", &P, flat, 5, text, 1);
    if (world_rank == 0) {
        char path[512];
        path_in_dir(path, sizeof path, "long.h5");
        hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        assert_true(file >= 0);
        assert_true(H5Aexists(file, "config") == 0);
        hid_t d = H5Dopen2(file, "/config", H5P_DEFAULT);
        assert_true(d >= 0);
        hid_t type = H5Dget_type(d);
        char *buf = calloc(H5Tget_size(type) + 1, 1);
        assert_true(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
        assert_int_equal(strlen(buf), n);
        assert_string_equal(buf, text);
        free(buf);
        H5Tclose(type);
        H5Dclose(d);
        H5Fclose(file);
    }
    read_and_compare("long.h5", &cfg, world_size, world_rank, 5);
    free(text);
    xfree(flat);
    params_destroy(&P);
}

/* ---- refusals ------------------------------------------------------------------------------- */

/* Read `name` with a registry for cfg; expect a refusal whose message holds the path and parts. */
static void expect_refused_cfg(const char *name, const config_t *cfg, const char *part1,
                               const char *part2) {
    params_t P;
    params_create(&P, MODEL_SPEC_OF(cfg), world_size, world_rank);
    float *flat = xcalloc(P.total, sizeof(float));
    char path[512], err[2048] = "";
    path_in_dir(path, sizeof path, name);
    int rc = load(name, cfg, &P, flat, world_size, NULL, err, sizeof err);
    if (world_rank == 0) printf("    message: %s\n", err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, path));
    if (part1) assert_non_null(strstr(err, part1));
    if (part2) assert_non_null(strstr(err, part2));
    xfree(flat);
    params_destroy(&P);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void expect_read_refused(const char *name, int vocab_size, const char *part1,
                                const char *part2) {
    config_t cfg;
    small_config(&cfg, vocab_size);
    expect_refused_cfg(name, &cfg, part1, part2);
}

/* Rank 0 edits a written file behind the writer's back (plain serial HDF5). */
static hid_t open_for_edit(const char *name) {
    char path[512];
    path_in_dir(path, sizeof path, name);
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(file >= 0);
    return file;
}

static void missing_file_is_refused_naming_it(void **state) {
    (void)state;
    expect_read_refused("nope.h5", 100, "no such file", NULL);
}

static void missing_dataset_is_refused_naming_it(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("partial.h5", &P, flat, 1, namelist_text, 1);
    if (world_rank == 0) { /* remove one tensor behind the writer's back */
        hid_t file = open_for_edit("partial.h5");
        assert_true(H5Ldelete(file, "/model/h.1.mlp.fc.w", H5P_DEFAULT) >= 0);
        H5Fclose(file);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_read_refused("partial.h5", 100, "/model/h.1.mlp.fc.w", "missing");
    xfree(flat);
    params_destroy(&P);
}

/* A file for vocabulary 100 (padded 128) read by a model with vocabulary 200 (padded 256): the
 * recorded vocab_size names the mismatch. A file that does not record d_ff (as files of version
 * 0.1) read by a model with another d_ff: the tensor shapes tell, with both shapes. */
static void wrong_shape_is_refused_with_both_shapes(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("small_vocab.h5", &P, flat, 1, namelist_text, 1);
    expect_read_refused("small_vocab.h5", 200, "vocab_size = 100", "vocab_size = 200");
    char path[512], err[2048];
    path_in_dir(path, sizeof path, "no_dff.h5");
    ckpt_meta_t meta = meta_of(&cfg, 1, NULL);
    meta.d_ff = 0;
    assert_int_equal(ckpt_write_weights(path, MPI_COMM_WORLD, &P.ckpt, flat, &meta, 1, err, sizeof err), 0);
    config_t wider = cfg;
    wider.d_ff = 128;
    expect_refused_cfg("no_dff.h5", &wider, "/model/h.0.mlp.fc.w has shape [64, 16]",
                       "expects [128, 16]");
    xfree(flat);
    params_destroy(&P);
}

static void non_hdf5_file_is_refused(void **state) {
    (void)state;
    if (world_rank == 0) {
        char path[512];
        path_in_dir(path, sizeof path, "text.h5");
        FILE *f = fopen(path, "w");
        fputs("not a checkpoint\n", f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_read_refused("text.h5", 100, "not a readable HDF5 file", NULL);
}

/* A dataset without its checksum cannot be verified: refused, not skipped. */
static void missing_checksum_is_refused(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("nosum.h5", &P, flat, 1, namelist_text, 1);
    if (world_rank == 0) {
        hid_t file = open_for_edit("nosum.h5");
        assert_true(H5Adelete_by_name(file, "/model/h.0.ln1.w", "checksum", H5P_DEFAULT) >= 0);
        H5Fclose(file);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_read_refused("nosum.h5", 100, "/model/h.0.ln1.w", "no checksum");
    xfree(flat);
    params_destroy(&P);
}

/* n_head changes no tensor shape: only the recorded attribute can tell the models apart. A
 * deeper model's file (an extra layer) is another model too, not a file to read partly. */
static void file_of_another_model_is_refused_naming_the_key(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("heads.h5", &P, flat, 1, namelist_text, 1);
    config_t other = cfg;
    other.n_head = 4;
    expect_refused_cfg("heads.h5", &other, "n_head = 2", "n_head = 4");
    config_t deeper = cfg;
    deeper.n_layer = 3;
    params_t P3;
    float *flat3 = init_weights(&P3, &deeper, world_size, world_rank);
    char path[512], err[2048];
    path_in_dir(path, sizeof path, "deep.h5");
    ckpt_meta_t meta = meta_of(&deeper, 1, NULL);
    meta.n_layer = 0; /* as a file that does not record its depth: the extra tensors tell */
    assert_int_equal(ckpt_write_weights(path, MPI_COMM_WORLD, &P3.ckpt, flat3, &meta, 1, err, sizeof err), 0);
    expect_refused_cfg("deep.h5", &cfg, "holds", "n_layer");
    xfree(flat3);
    params_destroy(&P3);
    xfree(flat);
    params_destroy(&P);
}

/* h5py writes str attributes as variable-length UTF-8 strings: they must be read (today's
 * files use fixed-length ASCII; both are HDF5 strings). */
static void utf8_string_attributes_as_h5py_writes_them_are_read(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    write_ckpt("utf8.h5", &P, flat, 9, namelist_text, 1);
    if (world_rank == 0) {
        hid_t file = open_for_edit("utf8.h5");
        const char *names[] = {"format", "run_id"}, *values[] = {"llmtrain-checkpoint", "0123456789abcdef"};
        for (int i = 0; i < 2; i++) {
            assert_true(H5Adelete(file, names[i]) >= 0);
            hid_t type = H5Tcopy(H5T_C_S1);
            H5Tset_size(type, H5T_VARIABLE);
            H5Tset_cset(type, H5T_CSET_UTF8);
            hid_t space = H5Screate(H5S_SCALAR);
            hid_t attr = H5Acreate2(file, names[i], type, space, H5P_DEFAULT, H5P_DEFAULT);
            assert_true(attr >= 0);
            assert_true(H5Awrite(attr, type, &values[i]) >= 0);
            H5Aclose(attr);
            H5Sclose(space);
            H5Tclose(type);
        }
        H5Fclose(file);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    read_and_compare("utf8.h5", &cfg, world_size, world_rank, 9);
    xfree(flat);
    params_destroy(&P);
}

/* ---- the state attributes: range checks and attrs_checksum ----------------------------------
 * A checkpoint of step 10 (adam_t 9, sample_pos 80, loss scale 1024) with one root attribute
 * edited afterwards, as h5py can: an impossible value is refused naming that attribute, a
 * possible but different one by attrs_checksum; a file without attrs_checksum (written before
 * it existed) is read, range-checked only, and says so (attrs_checked 0). */
static ckpt_state_t state_of_step10(void) {
    ckpt_state_t st;
    memset(&st, 0, sizeof st);
    st.tokens_seen = 2560, st.sample_pos = 80, st.adam_t = 9, st.skipped = 1, st.global_batch = 8;
    st.loss_scale = 1024.0, st.grid_dp = 1, st.grid_tp = world_size, st.grid_pp = 1;
    st.ls_growth = 3, st.ls_hysteresis = 1, st.ls_overflows = 1;
    st.stage = 0, st.data_seq_len = 8, st.n_data_pos = 1, st.data_pos[0] = 80;
    snprintf(st.data_source[0], CKPT_SOURCE_LEN, "data/tiny/train_*.bin");
    st.save_seq = 4, st.parent_seq = 3, st.parent_step = 8;
    return st;
}

static void write_state_ckpt(const char *name) {
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    char path[512], err[2048];
    path_in_dir(path, sizeof path, name);
    ckpt_meta_t meta = meta_of(&cfg, 10, namelist_text);
    ckpt_state_t st = state_of_step10();
    double written;
    int rc = ckpt_save(path, MPI_COMM_WORLD, MPI_INFO_NULL, &P.ckpt, flat, flat, flat, &meta, &st,
                       CKPT_OWNS_DENSE, &written, err, sizeof err);
    if (rc != 0) printf("    write failed: %s\n", err);
    assert_int_equal(rc, 0);
    xfree(flat);
    params_destroy(&P);
}

/* Rank 0 replaces root attribute `name` by a scalar of `type` holding *value (NULL: deletes it). */
static void edit_root_attr(const char *file_name, const char *name, hid_t type, const void *value) {
    if (world_rank == 0) {
        hid_t file = open_for_edit(file_name);
        assert_true(H5Adelete(file, name) >= 0);
        if (value) {
            hid_t space = H5Screate(H5S_SCALAR);
            hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
            assert_true(attr >= 0 && H5Awrite(attr, type, value) >= 0);
            H5Aclose(attr);
            H5Sclose(space);
        }
        H5Fclose(file);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Load a checkpoint with its state; 0 or -1 with err, as ckpt_load. */
static int load_state(const char *name, ckpt_state_t *st, ckpt_meta_t *found, char *err, size_t len) {
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    params_create(&P, MODEL_SPEC_OF(&cfg), world_size, world_rank);
    float *a = xcalloc(P.total, sizeof(float)), *b = xcalloc(P.total, sizeof(float)),
          *c = xcalloc(P.total, sizeof(float));
    char path[512];
    path_in_dir(path, sizeof path, name);
    ckpt_meta_t want = meta_of(&cfg, 0, NULL);
    int rc = ckpt_load(path, MPI_COMM_WORLD, copy_comm_for(world_size), MPI_COMM_SELF, &P.ckpt, a, b, c,
                       st, &want, found, err, len);
    if (world_rank == 0) printf("    %s: %s\n", name, rc ? err : "read");
    xfree(a), xfree(b), xfree(c);
    params_destroy(&P);
    return rc;
}

static void expect_state_refused(const char *name, const char *part1, const char *part2) {
    ckpt_state_t st;
    ckpt_meta_t found;
    char err[2048] = "", path[512];
    path_in_dir(path, sizeof path, name);
    assert_int_equal(load_state(name, &st, &found, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, part1));
    if (part2) assert_non_null(strstr(err, part2));
}

static void state_attributes_read_back_with_checksum_verified(void **state) {
    (void)state;
    write_state_ckpt("s.h5");
    ckpt_state_t st;
    ckpt_meta_t found;
    char err[2048];
    assert_int_equal(load_state("s.h5", &st, &found, err, sizeof err), 0);
    const ckpt_state_t want = state_of_step10();
    assert_int_equal(found.step, 10);
    assert_int_equal(st.adam_t, want.adam_t);
    assert_int_equal(st.sample_pos, want.sample_pos);
    assert_int_equal(st.save_seq, 4);
    assert_int_equal(st.parent_seq, 3);
    assert_int_equal(st.parent_step, 8);
    assert_int_equal(st.n_data_pos, 1);
    assert_int_equal(st.data_pos[0], 80);
    assert_string_equal(st.data_source[0], want.data_source[0]);
    assert_true(st.loss_scale == 1024.0);
    assert_int_equal(st.attrs_checked, 1);
    char path[512];
    path_in_dir(path, sizeof path, "s.h5");
    ckpt_peek_t pk;
    if (world_rank == 0) {
        assert_int_equal(ckpt_peek(path, &pk, err, sizeof err), 0);
        assert_int_equal(pk.step, 10);
        assert_int_equal(pk.save_seq, 4);
        assert_string_equal(pk.run_id, "0123456789abcdef");
    }
}

static void negative_step_attribute_is_refused_naming_it(void **state) {
    (void)state;
    write_state_ckpt("neg.h5");
    const int64_t bad = -5;
    edit_root_attr("neg.h5", "step", H5T_NATIVE_INT64, &bad);
    expect_state_refused("neg.h5", "attribute 'step' is -5", "must be >= 0");
    char path[512], err[2048];
    path_in_dir(path, sizeof path, "neg.h5");
    ckpt_peek_t pk;
    if (world_rank == 0) { /* the cheap look pruning and resume take refuses it too */
        assert_int_equal(ckpt_peek(path, &pk, err, sizeof err), -1);
        assert_non_null(strstr(err, "'step'"));
    }
}

static void impossible_state_attributes_are_refused_naming_them(void **state) {
    (void)state;
    write_state_ckpt("t.h5");
    const int64_t many = 11;
    edit_root_attr("t.h5", "adam_t", H5T_NATIVE_INT64, &many);
    expect_state_refused("t.h5", "attribute 'adam_t' is 11", "more updates than steps");
    write_state_ckpt("u.h5");
    const double nan = 0.0 / 0.0;
    edit_root_attr("u.h5", "loss_scale", H5T_NATIVE_DOUBLE, &nan);
    expect_state_refused("u.h5", "attribute 'loss_scale'", "finite and > 0");
    write_state_ckpt("w.h5");
    const int64_t neg = -3;
    edit_root_attr("w.h5", "sample_pos", H5T_NATIVE_INT64, &neg);
    expect_state_refused("w.h5", "attribute 'sample_pos' is -3", NULL);
}

static void possible_but_edited_attribute_fails_the_checksum(void **state) {
    (void)state;
    write_state_ckpt("e.h5");
    const int64_t other = 88;
    edit_root_attr("e.h5", "sample_pos", H5T_NATIVE_INT64, &other);
    expect_state_refused("e.h5", "attrs_checksum", "changed after the save");
    write_state_ckpt("f.h5");
    const int64_t step = 12;
    edit_root_attr("f.h5", "step", H5T_NATIVE_INT64, &step);
    expect_state_refused("f.h5", "attrs_checksum", NULL);
    write_state_ckpt("g.h5"); /* a source renamed: its position would go to another source */
    const char renamed[] = "data/tiny/val_*.bin";
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, sizeof renamed);
    edit_root_attr("g.h5", "data_source_0", str, renamed);
    H5Tclose(str);
    expect_state_refused("g.h5", "attrs_checksum", NULL);
}

static void file_without_attribute_checksum_is_range_checked_only(void **state) {
    (void)state;
    write_state_ckpt("old.h5");
    edit_root_attr("old.h5", "attrs_checksum", 0, NULL);
    ckpt_state_t st;
    ckpt_meta_t found;
    char err[2048];
    assert_int_equal(load_state("old.h5", &st, &found, err, sizeof err), 0);
    assert_int_equal(st.attrs_checked, 0);
    assert_int_equal(st.sample_pos, 80);
    const int64_t bad = -1;
    edit_root_attr("old.h5", "step", H5T_NATIVE_INT64, &bad);
    expect_state_refused("old.h5", "attribute 'step' is -1", NULL);
}

/* A save that cannot create its file fails on every rank with a message; nothing is left. */
static void save_into_missing_directory_fails_cleanly(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg, 100);
    params_t P;
    float *flat = init_weights(&P, &cfg, world_size, world_rank);
    char path[512], err[2048] = "";
    path_in_dir(path, sizeof path, "no_such_dir/w.h5");
    ckpt_meta_t meta = meta_of(&cfg, 1, NULL);
    int rc = ckpt_write_weights(path, MPI_COMM_WORLD, &P.ckpt, flat, &meta, 1, err, sizeof err);
    if (world_rank == 0) printf("    message: %s\n", err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "cannot create"));
    assert_non_null(strstr(err, "no_such_dir"));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
    xfree(flat);
    params_destroy(&P);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* as llmtrain does: our messages, not HDF5's stack */
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size > 2) {
        if (world_rank == 0) fprintf(stderr, "test_checkpoint: run on 1 or 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(written_weights_read_back_exactly_on_same_grid, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(tp_sharded_write_reads_back_as_full_tensors_on_tp1, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(only_writer_rank_writes_and_others_join_collectively, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(file_has_global_shapes_and_root_attributes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(long_config_text_is_stored_as_dataset, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(missing_file_is_refused_naming_it, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(missing_dataset_is_refused_naming_it, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(wrong_shape_is_refused_with_both_shapes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(non_hdf5_file_is_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(missing_checksum_is_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(file_of_another_model_is_refused_naming_the_key, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(utf8_string_attributes_as_h5py_writes_them_are_read, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(save_into_missing_directory_fails_cleanly, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(state_attributes_read_back_with_checksum_verified, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(negative_step_attribute_is_refused_naming_it, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(impossible_state_attributes_are_refused_naming_them, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(possible_but_edited_attribute_fails_the_checksum, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(file_without_attribute_checksum_is_range_checked_only, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(pieces_of_any_size_write_and_read_the_same_file, make_dir, remove_dir),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    /* A test that failed on one rank only must fail the run on every rank. */
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_failed ? 1 : 0;
}
