/* calibrate.c — the measurements of llmtrain --calibrate (calibrate.h). */
#include "train/calibrate.h"
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/timer.h"
#include "kernels/ops.h"
#include "train/machine.h"

#define N_SIZES 6
static const int sizes[N_SIZES] = {32, 64, 128, 256, 512, 1024};

/* FLOP/s of the square product s^3 (fp32, the CPU backend): repeated to 50 ms, best of 3. */
static double square_rate(const ops_t *ops, int s) {
    const size_t n = (size_t)s * s;
    float *a = ops->alloc(n * sizeof(float), MEM_WORKSPACE), *b = ops->alloc(n * sizeof(float), MEM_WORKSPACE);
    float *c = ops->alloc(n * sizeof(float), MEM_WORKSPACE);
    for (size_t i = 0; i < n; i++) a[i] = b[i] = 1e-3f * (float)(i % 97);
    ops->matmul_forward(c, a, b, NULL, s, s, s); /* warm-up */
    double best = 0;
    for (int r = 0; r < 3; r++) {
        long reps = 0;
        const double t0 = now_sec();
        double dt = 0;
        do {
            ops->matmul_forward(c, a, b, NULL, s, s, s);
            reps++;
            dt = now_sec() - t0;
        } while (dt < 0.05);
        const double rate = 2.0 * s * (double)s * s * reps / dt;
        if (rate > best) best = rate;
    }
    ops->free(a), ops->free(b), ops->free(c);
    return best;
}

/* machine.h's model rate(s) = R s^3 / (s + h)^3 fitted to the measured rates: h by a log-spaced
 * scan minimising the squared log error, R in closed form for each h (the mean log ratio). */
static void fit_gemm(const double *rate, double *R, double *h) {
    double best = INFINITY;
    for (double x = 0; x <= 4096; x = x < 1 ? 1 : x * 1.02) {
        double mean = 0, err = 0;
        for (int i = 0; i < N_SIZES; i++) mean += log(rate[i]) - 3 * log(sizes[i] / (sizes[i] + x));
        mean /= N_SIZES;
        for (int i = 0; i < N_SIZES; i++) {
            const double e = log(rate[i]) - 3 * log(sizes[i] / (sizes[i] + x)) - mean;
            err += e * e;
        }
        if (err < best) best = err, *h = x, *R = exp(mean);
    }
}

/* Bytes/s of a 64 MiB copy (read + write), best of 5. */
static double copy_bandwidth(void) {
    const size_t n = (size_t)64 << 20;
    char *a = xmalloc(n), *b = xmalloc(n);
    memset(a, 1, n), memset(b, 2, n);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        const double t0 = now_sec();
        memcpy(b, a, n);
        const double dt = now_sec() - t0;
        if (2.0 * n / dt > best) best = 2.0 * n / dt;
    }
    xfree(a), xfree(b);
    return best;
}

/* Ping-pong of `bytes` between ranks 0 and 1, `reps` round trips: the one-way time. */
static double ping_pong(char *buf, int bytes, int reps, int rank) {
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    const double t0 = now_sec();
    for (int i = 0; i < reps && rank < 2; i++) {
        if (rank == 0) {
            MPI_CHECK(MPI_Send(buf, bytes, MPI_CHAR, 1, 7, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(buf, bytes, MPI_CHAR, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            MPI_CHECK(MPI_Recv(buf, bytes, MPI_CHAR, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Send(buf, bytes, MPI_CHAR, 0, 7, MPI_COMM_WORLD));
        }
    }
    return (now_sec() - t0) / (2.0 * reps);
}

/* MemTotal of this node in bytes. */
static double node_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    double kib = 0;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib * 1024.0;
}

/* The file's comments: where each number comes from. */
static void write_file(const char *path, const machine_t *m, const double *rate, double lat_s,
                       double bw, int world, double capacity, int slots) {
    char when[64], host[128] = "?", gemm[400], net[200], dev[240];
    const time_t t = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    gethostname(host, sizeof host - 1);
    int n = snprintf(gemm, sizeof gemm, "measured: fp32 square products (GFLOP/s)");
    for (int i = 0; i < N_SIZES && n < (int)sizeof gemm; i++)
        n += snprintf(gemm + n, sizeof gemm - (size_t)n, " %d: %.1f", sizes[i], rate[i] / 1e9);
    snprintf(net, sizeof net, "measured: MPI ping-pong ranks 0-1, 8 B one way %.2f us, 4 MiB %.2f GB/s",
             lat_s * 1e6, bw / 1e9);
    const char *c[32] = {0};
    c[0] = "this machine, measured by llmtrain --calibrate";
    c[2] = "16-bit runs: the fp32 rate (an approximation where the CPU's bf16 products are native)";
    c[4] = gemm;
    c[5] = "the peak above is the fitted asymptote of the measured rates: efficiency 1";
    c[6] = "fitted to the rates above (machine.h: rate = peak * (s/(s+h))^3, least squares in log)";
    c[7] = "MemTotal shared by devices_per_node ranks";
    c[8] = "measured: one rank's 64 MiB memcpy (read + write)";
    snprintf(dev, sizeof dev, "measured: %d ranks computing at once delivered %.2f times one rank's "
             "rate (other load on the cores counts); %d cores over OpenMP threads at most", world,
             capacity, slots);
    c[9] = dev;
    c[10] = "one node: more ranks than devices_per_node share its cores (oversubscribed)";
    c[11] = net;
    c[13] = "one node: the intra-node link again";
    c[15] = "assumed (the MPI library's algorithm is not measured)";
    FILE *f = fopen(path, "w");
    if (!f) fatal_user("--calibrate: cannot write %s: %s", path, strerror(errno));
    fprintf(f, "! local.nml — written by llmtrain --calibrate on %s at %s.\n", host, when);
    machine_write(f, m, c);
    fclose(f);
}

int calibrate_run(const char *out_path) {
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    if (world < 2)
        fatal_user("--calibrate measures the MPI link between two ranks: run it on 2 ranks "
                   "(mpirun -np 2 ./llmtrain --calibrate %s)", out_path);
    machine_t m;
    memset(&m, 0, sizeof m);
    double rate[N_SIZES] = {0}, R = 0, h = 0;
    if (rank == 0) { /* the compute and memory of one rank while the others wait */
        for (int i = 0; i < N_SIZES; i++) rate[i] = square_rate(ops_cpu(), sizes[i]);
        fit_gemm(rate, &R, &h);
        m.memory_bw = copy_bandwidth();
    }
    /* every rank at once on the same product: the cores' capacity as it is now (other load on
     * them counts), in units of one rank's rate */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    const double mine = square_rate(ops_cpu(), 256);
    double together = 0;
    MPI_CHECK(MPI_Reduce(&mine, &together, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    char *buf = xcalloc(4u << 20, 1);
    ping_pong(buf, 8, 200, rank); /* warm-up */
    const double lat = ping_pong(buf, 8, 2000, rank);
    const double big = ping_pong(buf, 4 << 20, 20, rank);
    xfree(buf);
    if (rank == 0) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        const int threads = omp_get_max_threads();
        snprintf(m.name, sizeof m.name, "local");
        m.peak_bf16 = m.peak_fp16 = m.peak_fp32 = R;
        m.gemm_efficiency = 1.0, m.gemm_half_size = h;
        const int slots = cores / threads > 0 ? (int)(cores / threads) : 1;
        const double capacity = together / rate[3]; /* rate[3]: one rank alone on 256^3 */
        m.devices_per_node = (int)fmin(slots, fmax(1.0, floor(capacity + 0.5)));
        m.max_nodes = 1;
        m.memory_bytes = node_memory() / m.devices_per_node;
        const double bw = (4 << 20) / fmax(big - lat, 1e-9);
        m.intra_bw = m.inter_bw = bw, m.intra_lat = m.inter_lat = lat;
        m.collective = MACHINE_RING;
        write_file(out_path, &m, rate, lat, bw, world, capacity, slots);
        printf("calibrate: wrote %s: fp32 products up to %.3g GFLOP/s (half rate at %.0f), memory "
               "%.3g GB/s, MPI %.2f us and %.3g GB/s between ranks 0 and 1\n", out_path, R / 1e9, h,
               m.memory_bw / 1e9, lat * 1e6, bw / 1e9);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    return 0;
}
