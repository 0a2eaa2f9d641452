/* test_init_scheme.c — &model init, init_std, init_depth_scaled: for every scheme and depth
 * scaling, each normally initialised tensor's sample mean and variance match the scheme's
 * formula (written out again here from the papers, not taken from the code) within 5 standard
 * errors (mean: 5 sigma / sqrt(n); variance: 5 sqrt(2 / n) relative: the sample variance of n
 * normals has relative standard deviation sqrt(2 / (n - 1))); norms are exactly 1, biases and
 * vocabulary padding exactly 0; the default is GPT-2's init bit for bit; and a tp shard's init
 * equals the slice of the serial init under every scheme (the grid-invariant RNG). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "config/config.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "model/params.h"

static void config_for(config_t *cfg, const char *scheme, const char *depth, double init_std) {
    config_defaults(cfg);
    cfg->n_layer = 3, cfg->n_head = 4, cfg->d_model = 64, cfg->d_ff = 256;
    cfg->vocab_size = 300, cfg->seq_len = 32; /* vocabulary padded to 384 */
    assert_int_equal(config_set_choice(cfg, "model", "init", scheme), 0);
    assert_int_equal(config_set_choice(cfg, "model", "init_depth_scaled", depth), 0);
    cfg->init_std = init_std;
}

/* The expected std of a matrix, from the formulas of the schemes. */
static double expected_std(const config_t *cfg, const param_t *p) {
    const double C = cfg->d_model;
    double in = (double)p->shape[1], out = (double)p->shape[0];
    if (strstr(p->name, "qkv")) out = C; /* q, k, v: three C x C matrices */
    double s = cfg->init_std;
    if (p->layer >= 0 && !strcmp(cfg->init_scheme, "xavier")) s = sqrt(2.0 / (in + out));
    if (p->layer >= 0 && !strcmp(cfg->init_scheme, "kaiming")) s = sqrt(2.0 / in);
    if (p->layer >= 0 && !strcmp(cfg->init_scheme, "small")) s = sqrt(2.0 / (5.0 * C));
    if (strstr(p->name, "proj.w")) {
        if (!strcmp(cfg->init_depth_scaled, "total")) s /= sqrt(2.0 * cfg->n_layer);
        if (!strcmp(cfg->init_depth_scaled, "layer")) s /= sqrt(2.0 * (p->layer + 1));
    }
    return s;
}

/* mean and variance of tensor p's first `rows` rows (the real vocabulary for wte) */
static void moments(const float *x, const param_t *p, int64_t rows, double *mean, double *var) {
    const size_t n = (size_t)(rows * p->shape[1]);
    double s = 0.0, s2 = 0.0;
    for (size_t j = 0; j < n; j++) s += x[p->offset + j];
    *mean = s / n;
    for (size_t j = 0; j < n; j++) s2 += (x[p->offset + j] - *mean) * (x[p->offset + j] - *mean);
    *var = s2 / (n - 1);
}

static int check_tensor(const config_t *cfg, const float *x, const param_t *p) {
    if (p->init == INIT_ONES || p->init == INIT_ZEROS) {
        for (size_t j = 0; j < p->numel; j++)
            if (x[p->offset + j] != (p->init == INIT_ONES ? 1.0f : 0.0f)) return 1;
        return 0;
    }
    const int64_t rows = p->init_rows;
    for (size_t j = (size_t)(rows * p->shape[1]); j < p->numel; j++)
        if (x[p->offset + j] != 0.0f) return 1; /* vocabulary padding */
    const double n = (double)(rows * p->shape[1]), sd = expected_std(cfg, p);
    double mean, var;
    moments(x, p, rows, &mean, &var);
    const double mean_tol = 5.0 * sd / sqrt(n), var_tol = 5.0 * sqrt(2.0 / n);
    const bool ok = fabs(mean) <= mean_tol && fabs(var / (sd * sd) - 1.0) <= var_tol;
    if (!ok || strstr(p->name, "h.2.") || p->layer < 0)
        print_message("  %-16s n %6.0f  mean %+.2e (tol %.1e)  std %.5f want %.5f (var rel %+.3f, tol %.3f)%s\n",
                      p->name, n, mean, mean_tol, sqrt(var), sd, var / (sd * sd) - 1.0, var_tol,
                      ok ? "" : "  FAIL");
    return !ok;
}

static void each_scheme_mean_and_variance_per_tensor_within_5_standard_errors(void **state) {
    (void)state;
    const char *schemes[] = {"gpt2", "xavier", "kaiming", "small"};
    const char *depths[] = {"none", "total", "layer"};
    int bad = 0;
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 3; d++) {
            config_t cfg;
            config_for(&cfg, schemes[s], depths[d], s == 0 ? 0.05 : 0.02);
            print_message("init = '%s', init_depth_scaled = '%s', init_std = %g\n", schemes[s],
                          depths[d], cfg.init_std);
            params_t P;
            params_create(&P, MODEL_SPEC_OF(&cfg), 1, 0);
            float *x = xcalloc(P.total, sizeof(float));
            params_init(&P, x, 42 + (uint64_t)s);
            for (int i = 0; i < P.n; i++) bad += check_tensor(&cfg, x, &P.p[i]);
            xfree(x);
            params_destroy(&P);
        }
    assert_int_equal(bad, 0);
}

/* The default (gpt2, 0.02, total) is GPT-2's init exactly: N(0, 0.02) and 0.02f / sqrtf(2 L) on
 * the residual projections, from the same Philox stream as always. */
static void default_is_gpt2_init_bit_for_bit(void **state) {
    (void)state;
    config_t cfg;
    config_defaults(&cfg);
    cfg.n_layer = 3, cfg.n_head = 4, cfg.d_model = 64, cfg.d_ff = 256, cfg.vocab_size = 300;
    params_t P;
    params_create(&P, MODEL_SPEC_OF(&cfg), 1, 0);
    float *x = xcalloc(P.total, sizeof(float));
    params_init(&P, x, 7);
    const param_t *pr = params_find(&P, "h.1.attn.proj.w"), *fc = params_find(&P, "h.2.mlp.fc.w");
    philox_key_t kp = rng_key(7, rng_hash_str(pr->name)), kf = rng_key(7, rng_hash_str(fc->name));
    const float resid = 0.02f / sqrtf(2.0f * 3.0f);
    for (size_t j = 0; j < pr->numel; j++) assert_true(x[pr->offset + j] == resid * rng_normal(kp, j));
    for (size_t j = 0; j < fc->numel; j++) assert_true(x[fc->offset + j] == 0.02f * rng_normal(kf, j));
    xfree(x);
    params_destroy(&P);
}

static void every_scheme_shard_init_equals_slice_of_serial_init_tp4(void **state) {
    (void)state;
    const char *schemes[] = {"gpt2", "xavier", "kaiming", "small"};
    for (int s = 0; s < 4; s++) {
        config_t cfg;
        config_for(&cfg, schemes[s], "layer", 0.02);
        params_t S;
        params_create(&S, MODEL_SPEC_OF(&cfg), 1, 0);
        float *serial = xcalloc(S.total, sizeof(float));
        params_init(&S, serial, 99);
        size_t differ = 0;
        for (int r = 0; r < 4; r++) {
            params_t P;
            params_create(&P, MODEL_SPEC_OF(&cfg), 4, r);
            float *local = xcalloc(P.total, sizeof(float));
            params_init(&P, local, 99);
            for (int i = 0; i < P.n; i++)
                for (size_t j = 0; j < P.p[i].numel; j++)
                    differ += local[P.p[i].offset + j] !=
                              serial[S.p[i].offset + (size_t)param_global_index(&P.p[i], 4, r, j)];
            xfree(local);
            params_destroy(&P);
        }
        if (differ) print_error("init '%s': %zu elements differ from the serial init\n", schemes[s], differ);
        assert_int_equal(differ, 0);
        xfree(serial);
        params_destroy(&S);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_scheme_mean_and_variance_per_tensor_within_5_standard_errors),
        cmocka_unit_test(default_is_gpt2_init_bit_for_bit),
        cmocka_unit_test(every_scheme_shard_init_equals_slice_of_serial_init_tp4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
