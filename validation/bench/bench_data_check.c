/* bench_data_check.c — the cost of the token-id checks (io/shards.h, io/sampler.h) and of the
 * CPU backend's exp (kernels/cpu/cpu_kernels.h). Not a test. Prints medians:
 *   1. shard_set_check_tokens over a synthetic shard set (default 1 GiB of tokens, all valid, so
 *      the scan runs to the end): GB/s on one core, page cache warm (the first, cold-ish pass is
 *      printed separately);
 *   2. sampler_fill of micro-batches (B windows of T+1 tokens, shuffled, so every window is a
 *      random read) side by side with the same copy without the check (copy_only below: the
 *      loop sampler_fill had before the check), whole passes alternating;
 *   3. cpu_expf over 1 Mi floats in [-30, 0] (the softmax range) and libm expf, ns per element.
 * Build (from the repository root):
 *   mpicc -std=c11 -D_GNU_SOURCE -fopenmp -O3 -march=native -fno-math-errno -Isrc \
 *     -o /tmp/bench_data_check validation/bench/bench_data_check.c src/io/shards.c \
 *     src/io/sampler.c src/core/alloc.c src/core/error.c src/core/fileio.c src/core/rng.c \
 *     $(pkg-config --cflags --libs hdf5-openmpi) -lm
 *   OMP_NUM_THREADS=1 /tmp/bench_data_check [DIR [MiB]]     (default /tmp, 1024 MiB) */
#include "core/timer.h"
#include "io/sampler.h"
#include "io/shards.h"
#include "kernels/cpu/cpu_kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_SHARDS 8
#define REPS 9

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* Shards of valid GPT-2 ids (a cheap LCG, all < 50257) under dir; returns the pattern. */
static void write_set(const char *dir, size_t total_tokens, char *pattern, size_t len) {
    size_t per = total_tokens / N_SHARDS;
    uint16_t *tok = malloc(per * sizeof *tok);
    uint32_t x = 12345;
    for (size_t i = 0; i < per; i++) {
        x = x * 1664525u + 1013904223u;
        tok[i] = (uint16_t)((x >> 8) % 50257);
    }
    for (int s = 0; s < N_SHARDS; s++) {
        char path[600];
        snprintf(path, sizeof path, "%s/bench_check_%03d.bin", dir, s);
        if (shard_write(path, tok, per) != 0) {
            perror(path);
            exit(1);
        }
    }
    free(tok);
    snprintf(pattern, len, "%s/bench_check_*.bin", dir);
}

static void bench_scan(const shard_set_t *set) {
    char err[512];
    double t[REPS];
    double t0 = now_sec();
    if (shard_set_check_tokens(set, 50257, 0, 1, err, sizeof err) != 0) printf("unexpected: %s\n", err);
    double first = now_sec() - t0;
    for (int r = 0; r < REPS; r++) {
        t0 = now_sec();
        if (shard_set_check_tokens(set, 50257, 0, 1, err, sizeof err) != 0) printf("unexpected: %s\n", err);
        t[r] = now_sec() - t0;
    }
    const double bytes = (double)set->n_tokens * 2;
    double m = median(t, REPS);
    printf("full scan: %.2f GiB, first pass %.3f s (%.1f GB/s), warm median %.3f s = %.1f GB/s "
           "(one core)\n", bytes / (1 << 30), first, bytes / first / 1e9, m, bytes / m / 1e9);
}

/* sampler_fill as it was before the per-window check: locate, copy, nothing else. */
static void copy_only(const sampler_t *s, uint64_t first, int count, int *inputs, int *targets) {
    const int T = s->seq_len;
    for (int b = 0; b < count; b++) {
        int shard;
        uint64_t offset;
        sampler_locate(s, first + (uint64_t)b, &shard, &offset);
        const uint16_t *tok = s->set->shards[shard].tokens + offset;
        int *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            in[t] = tok[t];
            tg[t] = tok[t + 1];
        }
    }
}

static void bench_fill(const shard_set_t *set, int B, int T) {
    sampler_t s;
    char err[512];
    if (sampler_create(&s, set, T, 50257, true, 1, err, sizeof err) != 0) {
        printf("sampler: %s\n", err);
        exit(1);
    }
    int *in = malloc(sizeof(int) * (size_t)B * T), *tg = malloc(sizeof(int) * (size_t)B * T);
    enum { BATCHES = 200, PASSES = 10 };
    double t_off[BATCHES * PASSES / 2], t_on[BATCHES * PASSES / 2];
    int n_off = 0, n_on = 0;
    /* Whole passes over the same samples, alternating (the windows come from DRAM in each pass:
     * the set is larger than the caches); the first two passes warm up. */
    for (int pass = 0; pass < PASSES + 2; pass++)
        for (int i = 0; i < BATCHES; i++) {
            const uint64_t first = (uint64_t)i * (uint64_t)B;
            double t0 = now_sec();
            if (pass % 2) {
                if (sampler_fill(&s, first, B, in, tg, err, sizeof err) != 0) printf("%s\n", err);
            } else {
                copy_only(&s, first, B, in, tg);
            }
            double dt = now_sec() - t0;
            if (pass < 2) continue;
            if (pass % 2) t_on[n_on++] = dt;
            else t_off[n_off++] = dt;
        }
    double a = median(t_off, n_off), b = median(t_on, n_on);
    printf("sampler_fill B = %d, T = %d: copy only %.2f us, with the check %.2f us (medians of %d): "
           "the check adds %.1f%%\n", B, T, a * 1e6, b * 1e6, n_on, 100.0 * (b - a) / a);
    free(in);
    free(tg);
    sampler_destroy(&s);
}

static void exp_cpu(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = cpu_expf(x[i]);
}

static void exp_libm(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

static void bench_exp(void) {
    enum { N = 1 << 20 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = -30.0f * (float)i / N;
    void (*fn[2])(float *, const float *, size_t) = {exp_cpu, exp_libm};
    const char *name[2] = {"cpu_expf", "libm expf"};
    for (int f = 0; f < 2; f++) {
        double t[REPS];
        for (int r = 0; r < REPS; r++) {
            double t0 = now_sec();
            fn[f](y, x, N);
            t[r] = now_sec() - t0;
        }
        printf("%-9s: %.3f ns per element (median of %d over %d floats; checksum %g)\n", name[f],
               median(t, REPS) * 1e9 / N, REPS, N, (double)y[N / 3]);
    }
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    char pattern[700], err[512];
    write_set(dir, mib * 1024 * 1024 / 2, pattern, sizeof pattern);
    shard_set_t set;
    if (shard_set_open(&set, pattern, "train_files", CFG_FORMAT_AUTO, err, sizeof err) != 0) {
        printf("%s\n", err);
        return 1;
    }
    bench_scan(&set);
    bench_fill(&set, 16, 1024);
    bench_fill(&set, 4, 64);
    bench_exp();
    shard_set_close(&set);
    for (int s = 0; s < N_SHARDS; s++) {
        char path[600];
        snprintf(path, sizeof path, "%s/bench_check_%03d.bin", dir, s);
        unlink(path);
    }
    return 0;
}
