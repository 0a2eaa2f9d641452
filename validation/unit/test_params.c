/* test_params.c — the parameter registry: GPT-2 124M has the published parameter count, tp shards
 * tile every global tensor exactly once, and the seeded init of a shard equals the same slice of
 * the serial init (grid-invariant initialisation), also for MoE expert tensors split over ep and
 * tp. GPT-2 init statistics. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "config/config.h"
#include "core/alloc.h"
#include "model/params.h"

static void small_config(config_t *cfg) {
    config_defaults(cfg);
    cfg->n_layer = 2;
    cfg->n_head = 4;
    cfg->d_model = 32;
    cfg->d_ff = 128;
    cfg->vocab_size = 300; /* padded to 384 */
    cfg->seq_len = 16;
    cfg->n_kv_head = cfg->n_head; /* GPT-2's fused qkv (config_defaults set it for 12 heads) */
}

static void gpt2_124m_has_124439808_parameters_plus_vocab_padding(void **state) {
    (void)state;
    config_t cfg;
    config_defaults(&cfg);
    cfg.n_layer = 12, cfg.n_head = 12, cfg.d_model = 768, cfg.d_ff = 3072;
    cfg.vocab_size = 50257, cfg.seq_len = 1024;
    params_t P;
    params_create(&P, MODEL_SPEC_OF(&cfg), 1, 0);
    /* 124,439,808 with the real vocabulary (HF GPT-2); padding adds (50304-50257)*768 rows */
    assert_int_equal(P.n_global, 124439808 + (50304 - 50257) * 768);
    assert_int_equal(P.n, 2 + 12 * 12 + 2);
    assert_non_null(params_find(&P, "h.11.mlp.proj.b"));
    assert_null(params_find(&P, "h.12.mlp.proj.b"));
    params_destroy(&P);
}

static void decay_only_on_matrices_and_embeddings(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg);
    params_t P;
    params_create(&P, MODEL_SPEC_OF(&cfg), 1, 0);
    for (int i = 0; i < P.n; i++) {
        const param_t *p = &P.p[i];
        bool is_norm = strstr(p->name, "ln") != NULL;
        bool expect = p->ndim == 2 && !is_norm;
        if (p->decay != expect) print_error("%s: decay %d expected %d\n", p->name, p->decay, expect);
        assert_int_equal(p->decay, expect);
    }
    params_destroy(&P);
}

/* Every global element is owned by exactly one tp rank, for tp = 1, 2, 4. */
static void tp_shards_tile_each_global_tensor_exactly_once(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg);
    for (int tp = 1; tp <= 4; tp *= 2) {
        params_t ref;
        params_create(&ref, MODEL_SPEC_OF(&cfg), 1, 0);
        for (int i = 0; i < ref.n; i++) {
            const param_t *g = &ref.p[i];
            int64_t n = g->shape[0] * g->shape[1];
            int *count = xcalloc((size_t)n, sizeof(int));
            for (int r = 0; r < tp; r++) {
                params_t P;
                params_create(&P, MODEL_SPEC_OF(&cfg), tp, r);
                const param_t *p = &P.p[i];
                for (size_t j = 0; j < p->numel; j++) count[param_global_index(p, tp, r, j)]++;
                params_destroy(&P);
            }
            int64_t bad = 0;
            int expect_per = g->split_dim < 0 ? tp : 1; /* replicated: every rank holds it */
            for (int64_t j = 0; j < n; j++) bad += count[j] != expect_per;
            if (bad) print_error("%s tp=%d: %lld elements not owned %d times\n", g->name, tp,
                                 (long long)bad, expect_per);
            assert_int_equal(bad, 0);
            xfree(count);
        }
        params_destroy(&ref);
    }
}

/* The hyperslabs list the same elements as param_global_index, in the same order. */
static void hyperslabs_enumerate_local_elements_in_order(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg);
    const int tp = 2;
    for (int r = 0; r < tp; r++) {
        params_t P;
        params_create(&P, MODEL_SPEC_OF(&cfg), tp, r);
        for (int i = 0; i < P.n; i++) {
            const param_t *p = &P.p[i];
            int64_t st[3][3], ct[3][3];
            int nb = param_hyperslabs(p, tp, r, st, ct);
            /* row-major enumeration of the union of blocks (blocks are disjoint, sorted by start) */
            size_t j = 0;
            for (int64_t row = 0; row < p->shape[0]; row++)
                for (int64_t col = 0; col < p->shape[1]; col++)
                    for (int b = 0; b < nb; b++)
                        if (row >= st[b][0] && row < st[b][0] + ct[b][0] && col >= st[b][1] &&
                            col < st[b][1] + ct[b][1]) {
                            assert_int_equal(param_global_index(p, tp, r, j), row * p->shape[1] + col);
                            j++;
                        }
            assert_int_equal(j, p->numel);
        }
        params_destroy(&P);
    }
}

/* param_global_indices (runs along the last dimension) equals param_global_index element by
 * element, for windows that start and end anywhere, dense and expert tensors, tp 1, 2, 4. */
static void global_indices_equal_the_elementwise_index(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg);
    for (int moe = 0; moe < 2; moe++) {
        if (moe) cfg.n_experts = 4, cfg.top_k_moe = 2, cfg.moe_every = 2, cfg.d_ff_expert = 32;
        const int ep = moe ? 2 : 1;
        for (int tp = 1; tp <= 4; tp *= 2)
            for (int q = 0; q < tp * ep; q++) {
                const int r = q % tp;
                params_t P;
                params_create_experts(&P, MODEL_SPEC_OF(&cfg), tp, r, 1, 0, 1, ep, q / tp);
                for (int i = 0; i < P.n; i++) {
                    const param_t *p = &P.p[i];
                    if (!p->numel) continue;
                    int64_t *g = xcalloc(p->numel, sizeof *g);
                    const size_t windows[][2] = {{0, p->numel}, {1, p->numel - 1}, {p->numel / 3, p->numel / 2}, {p->numel - 1, 1}};
                    for (int w = 0; w < 4; w++) {
                        const size_t j0 = windows[w][0], n = windows[w][1] < p->numel - j0 ? windows[w][1] : p->numel - j0;
                        param_global_indices(p, tp, r, j0, n, g);
                        for (size_t k = 0; k < n; k++)
                            if (g[k] != param_global_index(p, tp, r, j0 + k)) {
                                print_error("%s tp=%d rank %d: element %zu: %lld, elementwise %lld\n", p->name, tp, r,
                                            j0 + k, (long long)g[k], (long long)param_global_index(p, tp, r, j0 + k));
                                fail();
                            }
                    }
                    xfree(g);
                }
                params_destroy(&P);
            }
    }
}

static void shard_init_equals_slice_of_serial_init(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg);
    params_t S;
    params_create(&S, MODEL_SPEC_OF(&cfg), 1, 0);
    float *serial = xcalloc(S.total, sizeof(float));
    params_init(&S, serial, 1337);
    const int tp = 4;
    for (int r = 0; r < tp; r++) {
        params_t P;
        params_create(&P, MODEL_SPEC_OF(&cfg), tp, r);
        float *local = xcalloc(P.total, sizeof(float));
        params_init(&P, local, 1337);
        for (int i = 0; i < P.n; i++) {
            const param_t *p = &P.p[i];
            for (size_t j = 0; j < p->numel; j++) {
                int64_t g = param_global_index(p, tp, r, j);
                float want = serial[S.p[i].offset + (size_t)g], got = local[p->offset + j];
                if (want != got) print_error("%s rank %d elem %zu: %g vs %g\n", p->name, r, j, got, want);
                assert_true(want == got);
            }
        }
        xfree(local);
        params_destroy(&P);
    }
    xfree(serial);
    params_destroy(&S);
}

/* MoE: expert tensors [E, rows, cols] dealt out over ep (whole experts) and split over tp inside
 * each expert: over every (ep, tp) rank pair each global element is held exactly once, the
 * 3-D hyperslab of a shard enumerates its elements in local order, the seeded init of a shard is
 * the same slice of the serial init, and a dense model's registry is unchanged by ep. */
static void expert_shards_tile_each_expert_tensor_exactly_once(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg);
    cfg.n_experts = 4, cfg.top_k_moe = 2, cfg.moe_every = 2, cfg.d_ff_expert = 32;
    cfg.n_shared_experts = 1;
    params_t S;
    params_create(&S, MODEL_SPEC_OF(&cfg), 1, 0);
    float *serial = xcalloc(S.total, sizeof(float));
    params_init(&S, serial, 99);
    assert_null(params_find(&S, "h.1.mlp.fc.w")); /* block 1 is the MoE one */
    assert_non_null(params_find(&S, "h.0.mlp.fc.w"));
    const param_t *fc = params_find(&S, "h.1.moe.experts.fc.w");
    assert_non_null(fc);
    assert_true(fc->ndim == 3 && fc->shape[0] == 4 && fc->shape[1] == 32 && fc->shape[2] == 32);
    const int tp = 2, ep = 2;
    for (int i = 0; i < S.n; i++) {
        const param_t *sp = &S.p[i];
        const int64_t n = param_global_numel(sp);
        int *count = xcalloc((size_t)n, sizeof(int));
        for (int e = 0; e < ep; e++)
            for (int r = 0; r < tp; r++) {
                params_t P;
                params_create_experts(&P, MODEL_SPEC_OF(&cfg), tp, r, 1, 0, 1, ep, e);
                const param_t *p = &P.p[i];
                float *local = xcalloc(P.total, sizeof(float));
                params_init(&P, local, 99);
                int64_t st[3][3], ct[3][3];
                const int nb = param_hyperslabs(p, tp, r, st, ct);
                size_t j = 0;
                for (int64_t a = 0; a < p->shape[0]; a++)
                    for (int64_t b = 0; b < p->shape[1]; b++)
                        for (int64_t c = 0; c < p->shape[2]; c++)
                            for (int k = 0; k < nb; k++) {
                                const int64_t at[3] = {a, b, c};
                                bool in = true;
                                for (int d = 0; d < 3; d++)
                                    in = in && (d >= p->ndim || (at[d] >= st[k][d] && at[d] < st[k][d] + ct[k][d]));
                                if (!in) continue;
                                const int64_t g = param_global_index(p, tp, r, j);
                                assert_int_equal(g, (a * p->shape[1] + b) * p->shape[2] + c);
                                assert_true(local[p->offset + j] == serial[sp->offset + (size_t)g]);
                                count[g]++;
                                j++;
                            }
                assert_int_equal(j, p->numel);
                xfree(local);
                params_destroy(&P);
            }
        /* experts: held once over (ep, tp); dense: once per ep rank (replicated over ep) */
        const int want = sp->experts > 0 ? 1 : ep;
        for (int64_t g = 0; g < n; g++)
            if (count[g] != want * (sp->split_dim >= 0 ? 1 : tp)) {
                print_error("%s element %lld held %d times\n", sp->name, (long long)g, count[g]);
                fail();
            }
        xfree(count);
    }
    xfree(serial);
    params_destroy(&S);
}

static void gpt2_init_statistics_std_002_resid_scaled_norms_one_padding_zero(void **state) {
    (void)state;
    config_t cfg;
    small_config(&cfg);
    cfg.d_model = 64, cfg.n_head = 4, cfg.d_ff = 256;
    params_t P;
    params_create(&P, MODEL_SPEC_OF(&cfg), 1, 0);
    float *x = xcalloc(P.total, sizeof(float));
    params_init(&P, x, 7);
    const param_t *fc = params_find(&P, "h.0.mlp.fc.w"), *pr = params_find(&P, "h.1.mlp.proj.w");
    const param_t *ln = params_find(&P, "h.0.ln1.w"), *b = params_find(&P, "h.0.attn.qkv.b");
    const param_t *wte = params_find(&P, "wte");
    double s2 = 0, r2 = 0;
    for (size_t j = 0; j < fc->numel; j++) s2 += (double)x[fc->offset + j] * x[fc->offset + j];
    for (size_t j = 0; j < pr->numel; j++) r2 += (double)x[pr->offset + j] * x[pr->offset + j];
    double sd = sqrt(s2 / fc->numel), rsd = sqrt(r2 / pr->numel);
    double want_r = 0.02 / sqrt(2.0 * cfg.n_layer);
    print_message("std fc %.5f (0.02), proj %.5f (%.5f)\n", sd, rsd, want_r);
    assert_true(fabs(sd - 0.02) < 0.02 * 0.05);      /* 16k samples: 5% */
    assert_true(fabs(rsd - want_r) < want_r * 0.05);
    for (size_t j = 0; j < ln->numel; j++) assert_true(x[ln->offset + j] == 1.0f);
    for (size_t j = 0; j < b->numel; j++) assert_true(x[b->offset + j] == 0.0f);
    for (int64_t row = cfg.vocab_size; row < wte->shape[0]; row++)
        for (int64_t c = 0; c < wte->shape[1]; c++)
            assert_true(x[wte->offset + (size_t)(row * wte->shape[1] + c)] == 0.0f);
    xfree(x);
    params_destroy(&P);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt2_124m_has_124439808_parameters_plus_vocab_padding),
        cmocka_unit_test(decay_only_on_matrices_and_embeddings),
        cmocka_unit_test(tp_shards_tile_each_global_tensor_exactly_once),
        cmocka_unit_test(hyperslabs_enumerate_local_elements_in_order),
        cmocka_unit_test(global_indices_equal_the_elementwise_index),
        cmocka_unit_test(shard_init_equals_slice_of_serial_init),
        cmocka_unit_test(expert_shards_tile_each_expert_tensor_exactly_once),
        cmocka_unit_test(gpt2_init_statistics_std_002_resid_scaled_norms_one_padding_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
