/* test_numeric.h — numeric helpers shared by the kernel unit tests (test_ops.c, test_ops_llama.c,
 * test_gemm.c): a deterministic random stream, buffers from the backend under test, relative-error
 * and bitwise comparisons that print the worst element, and a central finite-difference driver.
 * Each test program is its own executable: define TEST_RNG_SEED (the stream's 64-bit start, a
 * different one per program) and include this once, after cmocka.h (print_error). `ops` is the
 * backend under test: the program sets it before the buffer helpers are used. */
#ifndef LLMT_TEST_NUMERIC_H
#define LLMT_TEST_NUMERIC_H
#include "core/alloc.h"
#include "kernels/ops.h"
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const ops_t *ops;

static uint64_t rng_state = TEST_RNG_SEED;

/* uniform in [-1, 1), xorshift64* (deterministic across runs) */
static inline float frand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (float)((double)(r >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static inline float *buf_fill(size_t n, float value) {
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    for (size_t i = 0; i < n; i++) p[i] = value;
    return p;
}

static inline float *buf_copy(const float *src, size_t n) {
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    memcpy(p, src, n * sizeof *p);
    return p;
}

static inline double dot_double(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* max |got - want| / max(max |want|, floor); prints the worst element when above tol */
static inline bool close_rel(const char *what, const float *got, const double *want, size_t n,
                             double tol) {
    double max_diff = 0.0, max_ref = 1e-30;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= max_diff)) max_diff = d, worst = i; /* also catches NaN */
        if (fabs(want[i]) > max_ref) max_ref = fabs(want[i]);
    }
    double err = max_diff / max_ref;
    if (!(err <= tol))
        print_error("%s: error %.3g > %.1g at [%zu]: got %.9g want %.9g (max |want| %.3g)\n", what,
                    err, tol, worst, (double)got[worst], want[worst], max_ref);
    return err <= tol;
}

static inline bool close_rel_f(const char *what, const float *got, const float *want, size_t n,
                               double tol) {
    double *w = malloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++) w[i] = want[i];
    bool ok = close_rel(what, got, w, n, tol);
    free(w);
    return ok;
}

static inline bool equal_exact(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof got[i]) != 0) {
            print_error("%s: [%zu] got %.9g want %.9g (must be bitwise equal)\n", what, i,
                        (double)got[i], (double)want[i]);
            return false;
        }
    return true;
}

typedef double (*objective_fn)(void *ctx);

/* Central differences of objective(ctx) with respect to x[n], compared with analytic[n]. */
static inline bool fd_check(const char *what, objective_fn objective, void *ctx, float *x,
                            size_t n, const float *analytic, float eps, double tol) {
    double *numeric = malloc(n * sizeof *numeric);
    for (size_t i = 0; i < n; i++) {
        const float old = x[i];
        const float hi = old + eps, lo = old - eps;
        x[i] = hi;
        const double f_hi = objective(ctx);
        x[i] = lo;
        const double f_lo = objective(ctx);
        x[i] = old;
        numeric[i] = (f_hi - f_lo) / ((double)hi - (double)lo);
    }
    bool ok = close_rel(what, analytic, numeric, n, tol);
    free(numeric);
    return ok;
}
#endif
