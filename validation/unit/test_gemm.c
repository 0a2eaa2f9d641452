/* test_gemm.c — unit tests of the GEMM interface (src/kernels/cpu/gemm.h) and of the linear
 * layer's bf16 products. Built twice: build/tests/test_gemm against the GEMM library the build
 * uses, and build/tests/test_gemm_<other> against the other implementation (gemm_cblas.c or
 * gemm_onednn.c, where its library is installed), so both pass the same checks on every machine
 * that has both.
 * References: naive loops in double. Each test's name states its tolerance (relative to the
 * largest |reference| element). Needs no MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"
#include "kernels/precision.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_numeric.h"

static float *rand_buf(size_t n, bool bf16_values) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = bf16_values ? round_bf16(frand()) : frand();
    return x;
}

/* Element (i, j) of op(X) for X stored row-major with leading dimension ld. */
static double at(const float *X, int ld, bool t, int i, int j) {
    return t ? X[(size_t)j * ld + i] : X[(size_t)i * ld + j];
}

/* max |got - want| / max |want| over C[M, N] (leading dimension ldc) */
static double rel_err(const float *got, const double *want, int M, int N, int ldc) {
    double worst = 0, scale = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            worst = fmax(worst, fabs(got[(size_t)i * ldc + j] - want[(size_t)i * N + j]));
            scale = fmax(scale, fabs(want[(size_t)i * N + j]));
        }
    return worst / scale;
}

/* One product through gemm_f32 or gemm_bf16 with padded leading dimensions, against double. */
static double check_product(bool bf16, bool ta, bool tb, int M, int N, int K, float alpha,
                            float beta) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
    const int a_rows = ta ? K : M, b_rows = tb ? N : K;
    float *A = rand_buf((size_t)a_rows * lda, bf16), *B = rand_buf((size_t)b_rows * ldb, bf16);
    float *C = rand_buf((size_t)M * ldc, false);
    double *want = malloc(sizeof(double) * M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += at(A, lda, ta, i, k) * at(B, ldb, tb, k, j);
            want[(size_t)i * N + j] = alpha * s + beta * C[(size_t)i * ldc + j];
        }
    if (bf16) {
        uint16_t *A16 = malloc(sizeof(uint16_t) * a_rows * lda), *B16 = malloc(sizeof(uint16_t) * b_rows * ldb);
        for (size_t i = 0; i < (size_t)a_rows * lda; i++) A16[i] = bf16_bits(A[i]);
        for (size_t i = 0; i < (size_t)b_rows * ldb; i++) B16[i] = bf16_bits(B[i]);
        gemm_bf16(ta, tb, M, N, K, alpha, A16, lda, B16, ldb, beta, C, ldc);
        free(A16), free(B16);
    } else {
        gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    const double err = rel_err(C, want, M, N, ldc);
    free(A), free(B), free(C), free(want);
    return err;
}

/* every transpose combination, alpha/beta and odd shapes */
static double all_cases(bool bf16) {
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 80}, {130, 67, 129}};
    double worst = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++) {
            const float alpha = t == 3 ? 0.5f : 1.0f, beta = t & 1 ? 1.0f : 0.0f;
            double e = check_product(bf16, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                                     alpha, beta);
            if (e > worst) worst = e;
            e = check_product(bf16, t >> 1, t & 1, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f,
                              beta ? 0.0f : 1.0f);
            if (e > worst) worst = e;
        }
    return worst;
}

static void gemm_f32_matches_double_all_transposes_1e_6(void **state) {
    (void)state;
    const double worst = all_cases(false);
    printf("  %s: worst relative error %.2e\n", gemm_describe(), worst);
    assert_true(worst < 1e-6);
}

/* bf16 inputs are exact in fp32, so a bf16 GEMM with fp32 accumulation differs from the double
 * reference only by fp32 rounding of the sums. */
static void gemm_bf16_matches_double_on_bf16_values_1e_6(void **state) {
    (void)state;
    if (!gemm_native_bf16()) {
        printf("  no native bf16 products in %s on this CPU: gemm_bf16 is not used\n", gemm_describe());
        skip();
    }
    const double worst = all_cases(true);
    printf("  bf16: worst relative error %.2e\n", worst);
    assert_true(worst < 1e-6);
}

/* The linear layer with bf16 products equals the fp32 products on the same bf16 values (the
 * model's use: inputs already rounded), forward and both backward products, 2 threads. */
static void matmul_bf16_products_equal_fp32_products_on_bf16_values_1e_6(void **state) {
    (void)state;
    ops = ops_cpu();
    const int N = 96, C = 200, OC = 300; /* splits over 2 threads along OC and C */
    float *x = rand_buf((size_t)N * C, true), *w = rand_buf((size_t)OC * C, true);
    float *b = rand_buf(OC, true), *dy = rand_buf((size_t)N * OC, true);
    float *y[2], *dx[2], *dw[2], *db[2];
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    for (int k = 0; k < 2; k++) {
        y[k] = calloc((size_t)N * OC, sizeof(float)), dx[k] = calloc((size_t)N * C, sizeof(float));
        dw[k] = calloc((size_t)OC * C, sizeof(float)), db[k] = calloc(OC, sizeof(float));
        ops->set_product_type(k ? DT_BF16 : DT_FP32);
        ops->matmul_forward(y[k], x, w, b, N, C, OC);
        ops->matmul_backward(dx[k], dw[k], db[k], dy, x, w, N, C, OC, false, true);
    }
    ops->set_product_type(DT_FP32);
    omp_set_num_threads(saved);
    double worst = 0;
    const float *got[3] = {y[1], dx[1], dw[1]}, *want[3] = {y[0], dx[0], dw[0]};
    const size_t n[3] = {(size_t)N * OC, (size_t)N * C, (size_t)OC * C};
    for (int t = 0; t < 3; t++) {
        double e = 0, s = 0;
        for (size_t i = 0; i < n[t]; i++) {
            e = fmax(e, fabs((double)got[t][i] - want[t][i]));
            s = fmax(s, fabs((double)want[t][i]));
        }
        worst = fmax(worst, e / s);
    }
    printf("  bf16 products %s: worst relative difference to fp32 products %.2e\n",
           ops->products_native(DT_BF16) ? "native" : "emulated (fp32)", worst);
    assert_true(worst < 1e-6);
    for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]), free(dw[k]), free(db[k]);
    free(x), free(w), free(b), free(dy);
}

/* The hardware peak is positive and names what it measured. */
static void hardware_peak_is_measured_and_described_exact(void **state) {
    (void)state;
    char how[160] = "";
    const double peak = ops_cpu()->hardware_peak(DT_FP32, how, sizeof how);
    printf("  fp32 peak %.1f GFLOP/s: %s\n", peak / 1e9, how);
    assert_true(peak > 1e8 && strstr(how, "GFLOP/s") != NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gemm_f32_matches_double_all_transposes_1e_6),
        cmocka_unit_test(gemm_bf16_matches_double_on_bf16_values_1e_6),
        cmocka_unit_test(matmul_bf16_products_equal_fp32_products_on_bf16_values_1e_6),
        cmocka_unit_test(hardware_peak_is_measured_and_described_exact),
    };
    return cmocka_run_group_tests_name("gemm", tests, NULL, NULL);
}
