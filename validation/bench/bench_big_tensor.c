/* bench_big_tensor.c — part of `make bench` (validation/bench/big_tensor_bench.sh): one tensor of
 * more than 2^31 elements written and read back through the checkpoint I/O path (io/checkpoint.h:
 * ckpt_save_io, ckpt_load_io), the way a rank holding such a shard saves and loads it: in pieces
 * of one staging buffer, hyperslabs of the global dataset, the per-dataset checksum written and
 * verified by the reader. Not a test, but it fails (exit 1) when a byte read back differs.
 *
 * The tensor is never held: the writer's fetch fills the staging buffer with the values of its
 * elements (a hash of the global index, exact floats), the reader's store compares each piece
 * with the same values and sums a checksum of its own (a 64-bit mix of each element's index
 * and bits, summed: the order of the pieces does not matter), compared with the same sum over
 * the values computed apart (the writer may fetch a piece more than once). Memory: the staging buffer and the pieces' index arrays.
 * After the write (fsync'ed by the writer) the file's pages are dropped from the page cache
 * (posix_fadvise DONTNEED), so the read comes from the disk.
 * Usage: bench_big_tensor DIR [ELEMENTS [STAGING_MIB]] (one rank; ELEMENTS a multiple of 4096,
 * default 2^31 + 4096 = 8 GiB of fp32; STAGING_MIB 64, the &checkpoint staging_mb default).
 * Prints: elements, file MiB, write and read MiB/s, the two checksums, the peak resident size. */
#include <fcntl.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/timer.h"
#include "io/checkpoint.h"

#define COLS 4096

/* element i's value: 24 bits of a 64-bit mix of i, as an exact float in [-0.5, 0.5) */
static uint64_t mix(uint64_t x);
static float value_of(uint64_t i) {
    return (float)(mix(i + 0x9e3779b97f4a7c15ull) >> 40) * (1.0f / 16777216.0f) - 0.5f;
}

typedef struct bench {
    uint64_t sum_read; /* sum of mix(index, bits) over the elements read back */
    size_t differ, verified;
    size_t first_bad;
} bench_t;

static uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* the sum of mix(index, bits) over elements [a, a + n) held in x */
static uint64_t sum_of(const float *x, size_t a, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        h += mix(((uint64_t)(a + i) << 32) ^ bits ^ 0x5bd1e995u);
    }
    return h;
}

static const float *fetch(void *ctx, int g, size_t a, size_t b, float *staging) {
    (void)ctx, (void)g;
    for (size_t i = a; i < b; i++) staging[i - a] = value_of(i);
    return staging;
}

static void store(void *ctx, int g, size_t a, size_t b, const float *buf) {
    (void)g;
    bench_t *s = ctx;
    for (size_t i = a; i < b; i++)
        if (memcmp(&buf[i - a], &(float){value_of(i)}, sizeof(float)) != 0 && s->differ++ == 0)
            s->first_bad = i;
    s->verified += b - a;
    s->sum_read += sum_of(buf, a, b - a);
}

static void identity_index(const ckpt_tensors_t *T, const ckpt_tensor_t *t, size_t j0, size_t n,
                           int64_t *g) {
    (void)T, (void)t;
    for (size_t k = 0; k < n; k++) g[k] = (int64_t)(j0 + k);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2 || size != 1) {
        fprintf(stderr, "usage: bench_big_tensor DIR [ELEMENTS [STAGING_MIB]] (one rank)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const size_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : ((size_t)1 << 31) + COLS;
    const size_t staging_mib = argc > 3 ? strtoull(argv[3], NULL, 10) : 64;
    if (n == 0 || n % COLS || staging_mib == 0) {
        fprintf(stderr, "bench_big_tensor: ELEMENTS must be a positive multiple of %d\n", COLS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/big_tensor.h5", argv[1]);

    ckpt_tensor_t t = {.name = "big", .ndim = 2, .shape = {(int64_t)(n / COLS), COLS, 1},
                       .split_dim = -1, .held = true, .numel = n, .offset = 0, .nblk = 1};
    t.count[0][0] = (int64_t)(n / COLS), t.count[0][1] = COLS, t.count[0][2] = 1;
    ckpt_tensors_t T = {.t = &t, .n = 1, .n_global = (int64_t)n, .tp = 1, .tp_rank = 0,
                        .global_index = identity_index};
    ckpt_meta_t meta = {.step = 1, .seed = 1, .vocab_size = COLS, .padded_vocab = COLS, .n_layer = 1,
                        .n_head = 1, .d_model = COLS, .d_ff = COLS, .seq_len = 1,
                        .config_text = "! bench_big_tensor", .run_id = "bench_big_tensor"};
    const size_t staging_floats = staging_mib * 1048576 / sizeof(float);
    float *staging = xmalloc(staging_floats * sizeof(float));
    bench_t s = {0};
    char err[2048];

    ckpt_io_t w = {.owner = CKPT_OWNS_ALL, .staging = staging, .staging_floats = staging_floats,
                   .fetch = fetch, .ctx = &s};
    w.lo[0] = 0, w.hi[0] = n;
    double written = 0, t0 = now_sec();
    if (ckpt_save_io(path, MPI_COMM_WORLD, MPI_INFO_NULL, &T, &w, &meta, NULL, &written, err,
                     sizeof err) != 0) {
        fprintf(stderr, "bench_big_tensor: write failed: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const double write_s = now_sec() - t0;
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the read below comes from the disk */
        close(fd);
    }
    FILE *f = fopen(path, "rb");
    double file_mib = 0;
    if (f && fseek(f, 0, SEEK_END) == 0) file_mib = (double)ftell(f) / 1048576.0;
    if (f) fclose(f);

    ckpt_io_t r = {.staging = staging, .staging_floats = staging_floats, .store = store, .ctx = &s};
    r.lo[0] = 0, r.hi[0] = n, r.part_comm[0] = MPI_COMM_SELF;
    t0 = now_sec();
    if (ckpt_load_io(path, MPI_COMM_WORLD, MPI_COMM_WORLD, MPI_COMM_SELF, &T, &r, 1, NULL, &meta,
                     NULL, err, sizeof err) != 0) {
        fprintf(stderr, "bench_big_tensor: read failed: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const double read_s = now_sec() - t0;
    uint64_t sum_want = 0;
    for (size_t a = 0; a < n; a += staging_floats) { /* the values written, summed apart */
        const size_t k = n - a < staging_floats ? n - a : staging_floats;
        for (size_t i = 0; i < k; i++) staging[i] = value_of(a + i);
        sum_want += sum_of(staging, a, k);
    }
    const double tensor_mib = (double)n * sizeof(float) / 1048576.0;
    printf("one tensor of %zu fp32 elements (2^31 %s %lld) [%zu, %d]: %.0f MiB, file %.0f MiB, "
           "staging %zu MiB\n", n, n >= (1ull << 31) ? "+" : "-",
           llabs((long long)n - (1LL << 31)), n / COLS, COLS, tensor_mib, file_mib, staging_mib);
    printf("write (ckpt_save_io, fsync'ed): %.1f s, %.0f MiB/s\n", write_s, tensor_mib / write_s);
    printf("read (ckpt_load_io, dataset checksum verified; page cache dropped): %.1f s, %.0f MiB/s\n",
           read_s, tensor_mib / read_s);
    printf("read back: %zu of %zu elements compared, %zu differ; checksum of the elements written "
           "%016" PRIx64 ", read %016" PRIx64 "\n", s.verified, n, s.differ, sum_want, s.sum_read);
    printf("peak resident size: %.0f MiB (write), %.0f MiB (read)\n", w.peak_rss_mib, r.peak_rss_mib);
    const int bad = s.differ || s.verified != n || sum_want != s.sum_read;
    if (bad)
        fprintf(stderr, "bench_big_tensor: the read-back differs (first differing element %zu)\n",
                s.first_bad);
    xfree(staging);
    MPI_Finalize();
    return bad;
}
