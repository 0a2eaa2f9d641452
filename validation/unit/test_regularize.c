/* test_regularize.c — the regularisation ops of the CPU backend (issue 16): dropout masks
 * (Philox-4x32-10 of the global indices as ops.h defines it, bit for bit; keep rate within 5
 * binomial standard deviations, kept elements scaled by exactly 1/(1-p),
 * mean preserved within 5 standard errors; a shard's mask is the slice of the full mask, bit
 * for bit), attention with dropout on the probabilities (forward against a naive double loop
 * with the same mask factors 1e-5; backward against central finite differences 2e-3; p = 0 is
 * the plain kernel bit for bit; a head shard equals those heads of the full run bit for bit;
 * grouped-query attention equals the fused kernel on k, v copied to each query head 1e-6, its
 * dk, dv the group's sums 1e-5),
 * and the cross-entropy with label smoothing and z-loss (backward against finite differences
 * 1e-3; two vocabulary shards combined as model/ combines them equal the whole vocabulary:
 * losses and gradients 1e-6, padding gradients exactly 0). Tolerances are max|got - want| / max|want|. Needs no MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_numeric.h" /* ops, frand, close_rel, equal_exact, fd_check */

static float *buf(size_t n, float scale) { /* random in [-scale, scale), or 0 for scale 0 */
    float *p = ops->alloc(n * sizeof *p, MEM_WORKSPACE);
    for (size_t i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}

static dropout_mask_t mask_of(float p, uint32_t k0, uint64_t row0, uint32_t col0, uint32_t word3) {
    dropout_mask_t m = {{k0, 0x1234567u}, (uint32_t)ldexp(p, 32), (float)(1.0 / (1.0 - p)), row0,
                        col0, word3};
    return m;
}

/* ---------------------------------------------------------------- dropout */

static void dropout_keep_rate_5_sigma_scale_exact_mean_preserved_5_sigma(void **state) {
    (void)state;
    const size_t rows = 1000;
    const int cols = 257; /* not a multiple of 4: Philox blocks straddle rows */
    const size_t n = rows * cols;
    float *ones = ops->alloc(n * sizeof(float), MEM_WORKSPACE), *out = buf(n, 0);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        const float p = ps[k];
        const dropout_mask_t m = mask_of(p, 77u + k, 123456789, 5, 0);
        ops->dropout_apply(out, ones, rows, cols, &m);
        size_t kept = 0, bad = 0;
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            kept += out[i] != 0.0f;
            bad += out[i] != 0.0f && out[i] != m.scale;
            sum += out[i];
        }
        const double rate = (double)kept / n, sd_rate = sqrt(p * (1.0 - p) / n);
        const double mean = sum / n, sd_mean = sqrt(p / (1.0 - p) / n);
        print_message("p %.1f: keep rate %.5f (want %.5f +- %.5f), mean %.5f (want 1 +- %.5f), scale %.9g\n",
                      p, rate, 1.0 - p, 5 * sd_rate, mean, 5 * sd_mean, (double)m.scale);
        assert_int_equal(bad, 0);
        assert_true(fabs(m.scale - 1.0 / (1.0 - p)) < 1e-6 / (1.0 - p));
        assert_true(fabs(rate - (1.0 - p)) <= 5 * sd_rate);
        assert_true(fabs(mean - 1.0) <= 5 * sd_mean);
    }
    ops->free(ones), ops->free(out);
}

/* The mask is the one ops.h defines: word (g % 4) of philox4x32_10(key, {g / 4, row, row >> 32,
 * word3}) >= threshold, for every column offset (blocks straddling the call's first column). */
static void dropout_mask_is_philox_of_global_indices_exact(void **state) {
    (void)state;
    const dropout_mask_t m = mask_of(0.4f, 0xabcdef, 0, 0, 0);
    float f[DROP_MAX_COLS];
    size_t bad = 0;
    for (uint64_t row = 0; row < (1ull << 33); row = row * 7 + 12345)
        for (uint64_t col = 0; col < 9; col++) {
            const int n = DROP_MAX_COLS - (int)col;
            cpu_dropout_factors(f, &m, row, col, n, 5);
            for (int j = 0; j < n; j++) {
                const uint64_t g = col + (uint64_t)j;
                philox_ctr_t c = {{(uint32_t)(g >> 2), (uint32_t)row, (uint32_t)(row >> 32), 5}};
                philox_key_t k = {{m.key[0], m.key[1]}};
                const float want = philox4x32_10(c, k).v[g & 3] >= m.threshold ? m.scale : 0.0f;
                bad += f[j] != want;
            }
        }
    assert_int_equal(bad, 0);
}

/* A tp rank or a micro-batch holds a block of the global [rows, cols]: its mask, drawn from its
 * global row0 and col0, is the block of the full mask. Also in place (out = in). */
static void dropout_shard_mask_is_slice_of_full_mask_exact(void **state) {
    (void)state;
    const size_t R = 40;
    const int C = 96, r1 = 8, nr = 17, c1 = 37, nc = 45;
    float *x = buf(R * C, 1.0f), *full = buf(R * C, 0), *part = buf((size_t)nr * nc, 0);
    const dropout_mask_t m = mask_of(0.3f, 9, 5000, 0, 0);
    ops->dropout_apply(full, x, R, C, &m);
    for (int i = 0; i < nr; i++) memcpy(part + (size_t)i * nc, x + (size_t)(r1 + i) * C + c1, nc * sizeof(float));
    dropout_mask_t ms = m;
    ms.row0 += r1, ms.col0 = c1;
    ops->dropout_apply(part, part, nr, nc, &ms);
    for (int i = 0; i < nr; i++)
        assert_true(equal_exact("shard row", part + (size_t)i * nc, full + (size_t)(r1 + i) * C + c1, nc));
    dropout_mask_t other = m; /* another step (key): another mask */
    other.key[0] ^= 1;
    float *o2 = buf(R * C, 0);
    ops->dropout_apply(o2, x, R, C, &other);
    size_t differ = 0;
    for (size_t i = 0; i < R * C; i++) differ += (o2[i] == 0.0f) != (full[i] == 0.0f);
    print_message("another key: %zu of %zu mask bits differ (expect ~%.0f)\n", differ, R * C, 2 * 0.3 * 0.7 * R * C);
    assert_true(differ > R * C / 4);
    ops->free(x), ops->free(full), ops->free(part), ops->free(o2);
}

/* ---------------------------------------------------------------- attention with dropout */

typedef struct {
    float *out, *lse, *qkv, *r, *scratch;
    size_t scratch_floats;
    int B, T, NH, hs;
    dropout_mask_t mask;
} att_ctx;

static double att_objective(void *p) {
    att_ctx *c = p;
    ops->attention_forward_dropout(c->out, c->lse, c->scratch, c->scratch_floats, c->qkv, c->B,
                                   c->T, c->NH, c->hs, &c->mask);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->B * c->T * c->NH * c->hs; i++) s += (double)c->out[i] * c->r[i];
    return s;
}

static void att_init(att_ctx *c, int B, int T, int NH, int hs, float p) {
    c->B = B, c->T = T, c->NH = NH, c->hs = hs;
    const size_t C = (size_t)NH * hs;
    c->out = buf((size_t)B * T * C, 0), c->lse = buf((size_t)B * NH * T, 0);
    c->qkv = buf((size_t)B * T * 3 * C, 2.0f), c->r = buf((size_t)B * T * C, 1.0f);
    c->scratch_floats = ops->attention_scratch_floats(B, T, NH, hs);
    c->scratch = buf(c->scratch_floats, 0);
    c->mask = mask_of(p, 31, (uint64_t)7 * T, 0, 3); /* batch row 0 is sample 7; heads from 3 */
}

static void att_free(att_ctx *c) {
    ops->free(c->out), ops->free(c->lse), ops->free(c->qkv), ops->free(c->r), ops->free(c->scratch);
}

/* out = (f * softmax) v in double, f the mask factors of (row0 + b T + t, key j, word3 + h) */
static void attention_dropout_naive(double *out, const att_ctx *c) {
    const int T = c->T, hs = c->hs, C = c->NH * hs;
    double *p = malloc((size_t)T * sizeof *p);
    float *f = malloc((size_t)T * sizeof *f);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = c->qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    p[j] = s / sqrt((double)hs);
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int j = 0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
                for (int j0 = 0; j0 <= t; j0 += DROP_MAX_COLS)
                    cpu_dropout_factors(f + j0, &c->mask, c->mask.row0 + (uint64_t)b * T + t, j0,
                                        t + 1 - j0 < DROP_MAX_COLS ? t + 1 - j0 : DROP_MAX_COLS,
                                        c->mask.word3 + h);
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0;
                for (int j = 0; j <= t; j++) {
                    const float *v = c->qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int d = 0; d < hs; d++) o[d] += f[j] * p[j] / sum * v[d];
                }
            }
    free(p), free(f);
}

static void attention_dropout_forward_matches_naive_double_1e_5(void **state) {
    (void)state;
    const int Ts[] = {5, 129, 300};
    for (int i = 0; i < 3; i++) {
        att_ctx c;
        att_init(&c, 2, Ts[i], 2, 4, 0.2f);
        att_objective(&c);
        const size_t n = (size_t)2 * Ts[i] * 2 * 4;
        double *want = malloc(n * sizeof *want);
        attention_dropout_naive(want, &c);
        char what[64];
        snprintf(what, sizeof what, "attention dropout out T=%d", Ts[i]);
        assert_true(close_rel(what, c.out, want, n, 1e-5));
        free(want);
        att_free(&c);
    }
}

static void check_att_backward(int B, int T, int NH, int hs, const char *what) {
    att_ctx c;
    att_init(&c, B, T, NH, hs, 0.3f);
    att_objective(&c);
    const size_t n = (size_t)B * T * 3 * NH * hs;
    float *dqkv = buf(n, 0);
    ops->attention_backward_dropout(dqkv, c.scratch, c.scratch_floats, c.r, c.qkv, c.out, c.lse, B,
                                    T, NH, hs, &c.mask);
    assert_true(fd_check(what, att_objective, &c, c.qkv, n, dqkv, 1e-2f, 2e-3));
    ops->free(dqkv);
    att_free(&c);
}

static void attention_dropout_backward_matches_finite_differences_2e_3(void **state) {
    (void)state;
    check_att_backward(2, 5, 2, 4, "attention dropout dqkv T=5");
    check_att_backward(1, 150, 1, 3, "attention dropout dqkv T=150 (2 x 2 tiles)");
}

static void attention_dropout_p0_is_plain_attention_exact(void **state) {
    (void)state;
    att_ctx c;
    att_init(&c, 2, 200, 2, 8, 0.0f);
    const size_t n = (size_t)2 * 200 * 16, nq = 3 * n;
    att_objective(&c);
    float *out = buf(n, 0), *lse = buf((size_t)2 * 2 * 200, 0), *d1 = buf(nq, 0), *d2 = buf(nq, 0);
    ops->attention_forward(out, lse, c.scratch, c.scratch_floats, c.qkv, 2, 200, 2, 8);
    assert_true(equal_exact("p = 0 out", c.out, out, n));
    ops->attention_backward(d1, c.scratch, c.scratch_floats, c.r, c.qkv, out, lse, 2, 200, 2, 8);
    ops->attention_backward_dropout(d2, c.scratch, c.scratch_floats, c.r, c.qkv, out, lse, 2, 200,
                                    2, 8, &c.mask);
    assert_true(equal_exact("p = 0 dqkv", d2, d1, nq));
    ops->free(out), ops->free(lse), ops->free(d1), ops->free(d2);
    att_free(&c);
}

/* tp: a rank with heads [2, 4) of 4 (word3 = 2) computes those heads of the full run. */
static void attention_dropout_head_shard_equals_full_run_exact(void **state) {
    (void)state;
    const int B = 2, T = 140, hs = 4, NH = 4, NHl = 2, h0 = 2;
    att_ctx c;
    att_init(&c, B, T, NH, hs, 0.25f);
    c.mask.word3 = 0;
    att_objective(&c);
    const size_t N = (size_t)B * T, C = (size_t)NH * hs, Cl = (size_t)NHl * hs;
    float *qkv = buf(N * 3 * Cl, 0), *out = buf(N * Cl, 0), *lse = buf((size_t)B * NHl * T, 0);
    for (size_t i = 0; i < N; i++)
        for (int part = 0; part < 3; part++)
            memcpy(qkv + i * 3 * Cl + part * Cl, c.qkv + i * 3 * C + part * C + h0 * hs, Cl * sizeof(float));
    dropout_mask_t m = c.mask;
    m.word3 = h0;
    ops->attention_forward_dropout(out, lse, c.scratch, c.scratch_floats, qkv, B, T, NHl, hs, &m);
    for (size_t i = 0; i < N; i++)
        assert_true(equal_exact("head shard", out + i * Cl, c.out + i * C + h0 * hs, Cl));
    ops->free(qkv), ops->free(out), ops->free(lse);
    att_free(&c);
}

/* Grouped-query attention with dropout (q [B, T, NH hs], k, v [B, T, NKV hs]) against the fused
 * multi-head kernel on k, v copied to every query head of their group: the mask is keyed by the
 * query head, so both draw the same factors. out and dq 1e-6, dk and dv (the group's heads of the
 * fused run summed in double) 1e-5. */
static void attention_gqa_dropout_equals_fused_on_expanded_kv_1e_6(void **state) {
    (void)state;
    const int B = 2, T = 150, hs = 4, NH = 4, NKV = 2, group = NH / NKV;
    att_ctx c;
    att_init(&c, B, T, NH, hs, 0.25f); /* c.qkv: the expanded fused input, filled below */
    const size_t N = (size_t)B * T, C = (size_t)NH * hs, KC = (size_t)NKV * hs;
    float *q = buf(N * C, 2.0f), *k = buf(N * KC, 2.0f), *v = buf(N * KC, 2.0f);
    for (size_t i = 0; i < N; i++)
        for (int h = 0; h < NH; h++) {
            const size_t kv = i * KC + (size_t)(h / group) * hs;
            memcpy(c.qkv + i * 3 * C + h * hs, q + i * C + h * hs, hs * sizeof(float));
            memcpy(c.qkv + i * 3 * C + C + h * hs, k + kv, hs * sizeof(float));
            memcpy(c.qkv + i * 3 * C + 2 * C + h * hs, v + kv, hs * sizeof(float));
        }
    att_objective(&c);
    float *dqkv = buf(N * 3 * C, 0);
    ops->attention_backward_dropout(dqkv, c.scratch, c.scratch_floats, c.r, c.qkv, c.out, c.lse, B,
                                    T, NH, hs, &c.mask);
    float *out = buf(N * C, 0), *lse = buf((size_t)B * NH * T, 0);
    float *dq = buf(N * C, 0), *dk = buf(N * KC, 0), *dv = buf(N * KC, 0);
    ops->attention_gqa_forward_dropout(out, lse, c.scratch, c.scratch_floats, q, k, v, B, T, NH,
                                       NKV, hs, &c.mask);
    ops->attention_gqa_backward_dropout(dq, dk, dv, c.scratch, c.scratch_floats, c.r, q, k, v, out,
                                        lse, B, T, NH, NKV, hs, &c.mask);
    double *want = calloc(N * C, sizeof *want), *wk = calloc(N * KC, sizeof *wk),
           *wv = calloc(N * KC, sizeof *wv);
    for (size_t i = 0; i < N * C; i++) want[i] = c.out[i];
    assert_true(close_rel("gqa dropout out", out, want, N * C, 1e-6));
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < C; j++) want[i * C + j] = dqkv[i * 3 * C + j];
    assert_true(close_rel("gqa dropout dq", dq, want, N * C, 1e-6));
    for (size_t i = 0; i < N; i++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < hs; d++) {
                const size_t kv = i * KC + (size_t)(h / group) * hs + d;
                wk[kv] += dqkv[i * 3 * C + C + h * hs + d];
                wv[kv] += dqkv[i * 3 * C + 2 * C + h * hs + d];
            }
    assert_true(close_rel("gqa dropout dk", dk, wk, N * KC, 1e-5));
    assert_true(close_rel("gqa dropout dv", dv, wv, N * KC, 1e-5));
    free(want), free(wk), free(wv);
    ops->free(q), ops->free(k), ops->free(v), ops->free(out), ops->free(lse), ops->free(dq);
    ops->free(dk), ops->free(dv), ops->free(dqkv);
    att_free(&c);
}

/* ---------------------------------------------------------------- label smoothing, z-loss */

typedef struct {
    float *logits, *work, *mx, *se, *tl, *rs, *loss, *z;
    int *targets;
    int N, Vl, V;
    float e, zc;
} xe_ctx;

/* the shard-local pieces (one shard: no all-reduce) and sum_i (loss_i + z_i) */
static double xe_objective(void *p) {
    xe_ctx *c = p;
    ops->xent_row_max(c->mx, c->logits, c->N, c->Vl, c->V);
    ops->xent_row_sumexp(c->se, c->logits, c->mx, c->N, c->Vl, c->V);
    ops->xent_target_logit(c->tl, c->logits, c->targets, c->N, c->Vl, 0);
    ops->xent_row_sum(c->rs, c->logits, c->N, c->Vl, c->V);
    ops->xent_losses_regularized(c->loss, c->z, c->mx, c->se, c->tl, c->rs, c->N, c->V, c->e, c->zc);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += (double)c->loss[i] + c->z[i];
    return s;
}

static void xe_init(xe_ctx *c, int N, int V, int Vl, float e, float zc) {
    c->N = N, c->V = V, c->Vl = Vl, c->e = e, c->zc = zc;
    c->logits = buf((size_t)N * Vl, 3.0f), c->work = buf((size_t)N * Vl, 0);
    c->mx = buf(N, 0), c->se = buf(N, 0), c->tl = buf(N, 0), c->rs = buf(N, 0);
    c->loss = buf(N, 0), c->z = buf(N, 0);
    c->targets = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) c->targets[i] = (i * 37 + 11) % V;
}

static void xe_free(xe_ctx *c) {
    float *b[] = {c->logits, c->work, c->mx, c->se, c->tl, c->rs, c->loss, c->z};
    for (int i = 0; i < 8; i++) ops->free(b[i]);
    free(c->targets);
}

static void smoothing_and_z_loss_backward_match_finite_differences_1e_3(void **state) {
    (void)state;
    const float cases[][2] = {{0.1f, 0.0f}, {0.0f, 1e-2f}, {0.2f, 0.05f}};
    for (int k = 0; k < 3; k++) {
        xe_ctx c;
        xe_init(&c, 6, 37, 48, cases[k][0], cases[k][1]); /* 11 padding columns */
        xe_objective(&c);
        memcpy(c.work, c.logits, (size_t)c.N * c.Vl * sizeof(float));
        ops->xent_backward_regularized_inplace(c.work, c.mx, c.se, c.targets, 1.0f, c.N, c.Vl, c.V,
                                               0, c.V, c.e, c.zc);
        for (int i = 0; i < c.N; i++)
            for (int v = c.V; v < c.Vl; v++) assert_true(c.work[(size_t)i * c.Vl + v] == 0.0f);
        char what[80];
        snprintf(what, sizeof what, "dlogits, smoothing %g, z-loss %g", cases[k][0], cases[k][1]);
        assert_true(fd_check(what, xe_objective, &c, c.logits, (size_t)c.N * c.Vl, c.work, 1e-2f, 1e-3));
        xe_free(&c);
    }
}

/* Vocabulary split over two ranks, V = 300 of Vp = 384 (shard 1 holds 108 real ids): max by
 * max, sums of exp / target logit / row sums added, as gpt.c's all-reduces do. */
static void two_vocab_shards_equal_whole_vocabulary_1e_6(void **state) {
    (void)state;
    const int N = 8, V = 300, Vp = 384, Vl = Vp / 2;
    xe_ctx full;
    xe_init(&full, N, V, Vp, 0.1f, 1e-3f);
    xe_objective(&full);
    memcpy(full.work, full.logits, (size_t)N * Vp * sizeof(float));
    ops->xent_backward_regularized_inplace(full.work, full.mx, full.se, full.targets, 0.125f, N, Vp, V, 0,
                                           V, 0.1f, 1e-3f);
    float *sh[2], *mx[2], *se[2], *tl[2], *rs[2];
    for (int r = 0; r < 2; r++) {
        sh[r] = buf((size_t)N * Vl, 0), mx[r] = buf(N, 0), se[r] = buf(N, 0), tl[r] = buf(N, 0), rs[r] = buf(N, 0);
        for (int i = 0; i < N; i++) memcpy(sh[r] + (size_t)i * Vl, full.logits + (size_t)i * Vp + r * Vl, Vl * sizeof(float));
    }
    const int valid[2] = {Vl, V - Vl};
    for (int r = 0; r < 2; r++) ops->xent_row_max(mx[r], sh[r], N, Vl, valid[r]);
    for (int i = 0; i < N; i++) mx[0][i] = mx[1][i] = fmaxf(mx[0][i], mx[1][i]);
    for (int r = 0; r < 2; r++) {
        ops->xent_row_sumexp(se[r], sh[r], mx[r], N, Vl, valid[r]);
        ops->xent_target_logit(tl[r], sh[r], full.targets, N, Vl, r * Vl);
        ops->xent_row_sum(rs[r], sh[r], N, Vl, valid[r]);
    }
    for (int i = 0; i < N; i++) {
        se[0][i] = se[1][i] = se[0][i] + se[1][i];
        tl[0][i] = tl[1][i] = tl[0][i] + tl[1][i];
        rs[0][i] = rs[1][i] = rs[0][i] + rs[1][i];
    }
    float *loss = buf(N, 0), *z = buf(N, 0);
    ops->xent_losses_regularized(loss, z, mx[0], se[0], tl[0], rs[0], N, V, 0.1f, 1e-3f);
    double want_l[8], want_z[8];
    for (int i = 0; i < N; i++) want_l[i] = full.loss[i], want_z[i] = full.z[i];
    assert_true(close_rel("sharded losses", loss, want_l, N, 1e-6));
    assert_true(close_rel("sharded z-loss", z, want_z, N, 1e-6));
    for (int r = 0; r < 2; r++) {
        ops->xent_backward_regularized_inplace(sh[r], mx[r], se[r], full.targets, 0.125f, N, Vl, valid[r],
                                               r * Vl, V, 0.1f, 1e-3f);
        double *want = malloc((size_t)N * Vl * sizeof *want);
        for (int i = 0; i < N; i++)
            for (int v = 0; v < Vl; v++) want[(size_t)i * Vl + v] = full.work[(size_t)i * Vp + r * Vl + v];
        assert_true(close_rel("sharded dlogits", sh[r], want, (size_t)N * Vl, 1e-6));
        free(want);
        ops->free(sh[r]), ops->free(mx[r]), ops->free(se[r]), ops->free(tl[r]), ops->free(rs[r]);
    }
    ops->free(loss), ops->free(z);
    xe_free(&full);
}

int main(void) {
    ops = ops_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dropout_keep_rate_5_sigma_scale_exact_mean_preserved_5_sigma),
        cmocka_unit_test(dropout_mask_is_philox_of_global_indices_exact),
        cmocka_unit_test(dropout_shard_mask_is_slice_of_full_mask_exact),
        cmocka_unit_test(attention_dropout_forward_matches_naive_double_1e_5),
        cmocka_unit_test(attention_dropout_backward_matches_finite_differences_2e_3),
        cmocka_unit_test(attention_dropout_p0_is_plain_attention_exact),
        cmocka_unit_test(attention_dropout_head_shard_equals_full_run_exact),
        cmocka_unit_test(attention_gqa_dropout_equals_fused_on_expanded_kv_1e_6),
        cmocka_unit_test(smoothing_and_z_loss_backward_match_finite_differences_1e_3),
        cmocka_unit_test(two_vocab_shards_equal_whole_vocabulary_1e_6),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
