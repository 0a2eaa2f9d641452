/* peak.c — the hardware's peak FLOP/s for MFU: every OpenMP thread runs a loop of independent
 * fused multiply-adds (fp32: FMA on the widest vectors the CPU has; bf16: AVX512_BF16's
 * VDPBF16PS) for a few milliseconds, all threads at once, and the rates add up. This is cores x
 * clock x FLOP/cycle as the machine delivers it (turbo included; timed in thread CPU time, so
 * a neighbour time-sharing the core does not count), not a datasheet figure; the effective clock is derived from it for the summary.
 * Uses: OpenMP, GCC/Clang target attributes. Used by: ops_cpu.c (ops_t.hardware_peak). */
#include "kernels/cpu/cpu_kernels.h"
#include <omp.h>
#include <stdio.h>
#include <time.h>

#define PEAK_SECONDS 0.02 /* per thread; the loop checks the clock every PEAK_CHUNK iterations */
#define PEAK_CHUNK 20000

/* CPU time of the calling thread: the rate while the core runs our loop, so a neighbour that
 * time-shares the core (another rank, an oversubscribed test) does not lower the peak. */
static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* 12 independent accumulators hide the FMA latency (4 cycles x 2 ports = 8 in flight).
 * The empty asm keeps the compiler from folding the loop; each body is 12 FMAs on W floats. */
#define PEAK_LOOP(VT, FMA, FLOPS_PER_OP)                                                   \
    VT a0 = x, a1 = x, a2 = x, a3 = x, a4 = x, a5 = x, a6 = x, a7 = x, a8 = x, a9 = x,   \
       a10 = x, a11 = x;                                                                   \
    long iters = 0;                                                                        \
    const double t0 = thread_seconds();                                                    \
    double t1 = t0;                                                                        \
    while (t1 - t0 < PEAK_SECONDS) {                                                       \
        for (int i = 0; i < PEAK_CHUNK; i++) {                                             \
            FMA(a0); FMA(a1); FMA(a2); FMA(a3); FMA(a4); FMA(a5);                          \
            FMA(a6); FMA(a7); FMA(a8); FMA(a9); FMA(a10); FMA(a11);                        \
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));                 \
        }                                                                                  \
        iters += PEAK_CHUNK;                                                               \
        t1 = thread_seconds();                                                             \
    }                                                                                      \
    VT s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;                   \
    *sink = s[0];                                                                          \
    return 12.0 * (FLOPS_PER_OP) * iters / (t1 - t0);

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

__attribute__((target("avx512f"))) static double fma_rate_avx512(float *sink) {
    const v16f x = {0}, y = x + 1.0001f, z = x + 0.9999f;
#define FMA16(a) a = a * y + z
    PEAK_LOOP(v16f, FMA16, 32.0)
}
__attribute__((target("avx2,fma"))) static double fma_rate_avx2(float *sink) {
    const v8f x = {0}, y = x + 1.0001f, z = x + 0.9999f;
#define FMA8(a) a = a * y + z
    PEAK_LOOP(v8f, FMA8, 16.0)
}
static double fma_rate_sse(float *sink) { /* multiply and add, no FMA: 2 FLOP on 4 floats */
    const v4f x = {0}, y = x + 1.0001f, z = x + 0.9999f;
#define MULADD4(a) a = a * y + z
    PEAK_LOOP(v4f, MULADD4, 8.0)
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#include <immintrin.h>
#define HAVE_BF16_PEAK 1
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_rate(float *sink) {
    const __m512 x = _mm512_setzero_ps();
    const __m512bh p = (__m512bh)_mm512_set1_epi16(0x3f80), q = p; /* bf16 1.0 */
#define DP16(a) a = _mm512_dpbf16_ps(a, p, q)
    PEAK_LOOP(__m512, DP16, 64.0) /* 32 bf16 products + 32 additions */
}
#endif

static bool cpu_has_bf16(void) {
#if defined(HAVE_BF16_PEAK)
    return __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

/* One thread's rate for the ISA the GEMM libraries use for type t; flop_per_cycle and isa say
 * what was measured. */
static double thread_rate(dtype_t t, float *sink, double *flop_per_cycle, const char **isa) {
#if defined(HAVE_BF16_PEAK)
    if (t == DT_BF16 && cpu_has_bf16()) {
        *flop_per_cycle = 128, *isa = "AVX512_BF16 VDPBF16PS";
        return dpbf16_rate(sink);
    }
#endif
    if (__builtin_cpu_supports("avx512f")) {
        *flop_per_cycle = 64, *isa = "AVX-512 FMA";
        return fma_rate_avx512(sink);
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *flop_per_cycle = 32, *isa = "AVX2 FMA";
        return fma_rate_avx2(sink);
    }
    *flop_per_cycle = 16, *isa = "SSE";
    return fma_rate_sse(sink);
}

static volatile float peak_sink; /* the loops' results go here, so they are not optimised away */

/* cpu_hardware_peak: FLOP/s of all this rank's threads together for products of type t (bf16:
 * only where the CPU has bf16 instructions, else the fp32 rate); how[len] says how it was found,
 * e.g. "2 threads x 175 GFLOP/s, AVX-512 FMA loop: 64 FLOP/cycle at 2.73 GHz if 2 FMA units". */
double cpu_hardware_peak(dtype_t t, char *how, size_t len) {
    double total = 0, flop_per_cycle = 0;
    const char *isa = "";
    int threads = 1;
#pragma omp parallel reduction(+ : total)
    {
        float s = 0;
        double fpc;
        const char *name;
        total += thread_rate(t, &s, &fpc, &name);
        peak_sink = s;
#pragma omp master
        {
            threads = omp_get_num_threads();
            flop_per_cycle = fpc;
            isa = name;
        }
    }
    const double per_thread = total / threads;
    if (how && len) {
        int n = snprintf(how, len, "%d thread%s x %.0f GFLOP/s, %s loop", threads,
                         threads > 1 ? "s" : "", per_thread / 1e9, isa);
        if (n > 0 && (size_t)n < len && flop_per_cycle >= 64 && t != DT_BF16)
            snprintf(how + n, len - (size_t)n, ": %.0f FLOP/cycle at %.2f GHz if 2 FMA units",
                     flop_per_cycle, per_thread / flop_per_cycle / 1e9);
    }
    return total;
}
