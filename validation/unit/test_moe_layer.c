/* test_moe_layer.c — the whole Mixture-of-Experts path through the model (model/moe.c inside
 * model/gpt.c, CPU backend, serial grid), dropless (capacity_factor = 0): gpt_backward's
 * gradient against central finite differences of the objective it differentiates,
 *   f = mean cross-entropy (gpt_forward) + sum over MoE blocks of (aux + z)
 * (the aux and z losses read from m->moe->stats, which a training pass fills), with the loss
 * weight 1 / N as the trainer sets it (gpt_backward's dloss), inside a training pass
 * (gpt_train_pass) so the router noise is on where router_noise > 0: the noise is a pure
 * function of (seed, step, layer, token, expert), the same in every evaluation.
 * The objective is summed in double from the per-token float losses. Each variant (router
 * 'linear' / 'mlp', 0 or 1 shared experts, GELU / SwiGLU, noise on / off, top_k 1, 2 and
 * n_experts, every block or every second one MoE) checks a spread sample of elements of every
 * MoE tensor (all experts), ln2.w and attn.qkv.w / attn.proj.w. Step 3e-3 (central), tolerance
 * 1e-2 of max |numeric| per tensor (test_numeric.h close_rel; float32 forward: the objective's
 * rounding noise is ~1e-7 of ~4, i.e. ~1e-4 / (2 eps) of a gradient whose largest sampled
 * element is 1e-2..1e-1). The top-k choices of every token must be the same set in every
 * perturbed evaluation as in the analytic pass (checked: a changed routing would make the
 * difference quotient meaningless); the router weights are drawn wider than the init (std
 * ~0.2) so that the top-k margins are far above what a step moves. aux_loss_coef 0.5 and
 * z_loss_coef 0.1 make those terms a visible part of the router's gradient. Needs MPI (the
 * serial grid's communicators are MPI_COMM_SELF). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <mpi.h>
#include <stdio.h>

#include "config/config.h"
#include "model/gpt.h"
#include "model/params.h"

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_numeric.h" /* ops, frand, close_rel */

#define FD_EPS 3e-3f
#define FD_TOL 1e-2
#define SAMPLES 10      /* elements per tensor, spread over the whole tensor */
#define B_ 2
#define T_ 8
#define STEP 3          /* the training pass's step (keys the router noise) */

typedef struct variant {
    const char *router, *mlp;
    int shared, top_k, moe_every, n_layer;
    double noise;
} variant_t;

typedef struct fd_ctx {
    config_t cfg;
    gpt_t m;
    int inputs[B_ * T_], targets[B_ * T_];
    int *base_idx;      /* [n_layer][N k] the analytic pass's choices, each token's sorted */
    int *idx_now;
    long evaluations, rerouted; /* objective calls; of them with another routing */
    long smaller_steps;         /* elements retried with a smaller step (rerouted) */
} fd_ctx;

static void config_of(const variant_t *v, config_t *cfg) {
    char text[1024];
    snprintf(text, sizeof text,
             "&run mode = 'train', seed = 11 /\n"
             "&model n_layer = %d, n_head = 2, d_model = 16, d_ff = 32, vocab_size = 40, seq_len = %d\n"
             "  mlp = '%s', n_experts = 4, top_k = %d, moe_every = %d, d_ff_expert = 12\n"
             "  capacity_factor = 0, router = '%s', n_shared_experts = %d, router_noise = %g\n"
             "  aux_loss_coef = 0.5, z_loss_coef = 0.1 /\n"
             "&train micro_batch = %d, global_batch = %d /\n"
             "&data train_files = 'unused' /\n",
             v->n_layer, T_, v->mlp, v->top_k, v->moe_every, v->router, v->shared, v->noise, B_, B_);
    config_parse("test_moe_layer.nml", text, cfg);
}

/* Every parameter drawn away from its init: matrices uniform with std 1 / sqrt(fan_in) (the
 * init's 0.02 leaves the experts' gradients ~1e-5, at the objective's rounding noise), the
 * router wider still (std 0.35: top-k margins far above what a step moves), biases and noise.w
 * off zero, norms off one. */
static void randomise_params(gpt_t *m) {
    float *p = m->params; /* CPU backend: host memory */
    for (int i = 0; i < m->P.n; i++) {
        const param_t *t = &m->P.p[i];
        float *x = p + t->offset;
        const float unit = (float)sqrt(3.0 / (double)t->shape[t->ndim - 1]);
        const float scale = strstr(t->name, "moe.router.w") ? 0.6f
                            : strstr(t->name, "moe.noise.w") ? 0.3f
                            : t->init == INIT_NORMAL         ? unit
                                                             : 0.1f;
        const size_t real = (size_t)t->init_rows * (t->numel / (size_t)t->shape[0]); /* not wte's padding */
        for (size_t j = 0; j < real; j++) x[j] = (t->init == INIT_ONES ? 1.0f : 0.0f) + scale * frand();
    }
}

/* Each token's k choices of every MoE block, sorted (the set is what routing decides). */
static void routing_of(fd_ctx *c, int *out) {
    const gpt_t *m = &c->m;
    const int N = B_ * T_, k = c->cfg.top_k_moe;
    for (int l = 0; l < m->L; l++) {
        int *o = out + (size_t)l * N * k;
        if (!params_moe_layer(MODEL_SPEC_OF(&c->cfg), l)) {
            memset(o, 0, (size_t)N * k * sizeof(int));
            continue;
        }
        ops->to_host(o, m->slot[0].layer[l].moe->idx, (size_t)N * k * sizeof(int));
        for (int i = 0; i < N; i++) /* insertion sort of k <= 4 */
            for (int a = 1; a < k; a++)
                for (int b = a; b > 0 && o[i * k + b] < o[i * k + b - 1]; b--) {
                    const int t = o[i * k + b];
                    o[i * k + b] = o[i * k + b - 1], o[i * k + b - 1] = t;
                }
    }
}

/* One training-pass forward: the objective gpt_backward differentiates. */
static double forward_objective(fd_ctx *c) {
    gpt_t *m = &c->m;
    const int N = B_ * T_;
    gpt_train_pass(m, STEP, 0);
    moe_stats_reset(m->moe);
    const gpt_pass_t pass = {.dloss = 1.0f / (B_ * T_)};
    gpt_forward(m, &pass, c->inputs, c->targets, B_, T_);
    double f = 0;
    for (int i = 0; i < N; i++) f += m->host_losses[i];
    f /= N;
    for (int l = 0; l < m->L; l++)
        if (m->moe->stats[l].load) f += m->moe->stats[l].aux + m->moe->stats[l].z;
    return f;
}

static double objective(void *p) {
    fd_ctx *c = p;
    const double f = forward_objective(c);
    gpt_eval_pass(&c->m);
    const size_t n = (size_t)c->m.L * B_ * T_ * c->cfg.top_k_moe;
    routing_of(c, c->idx_now);
    c->evaluations++;
    if (memcmp(c->idx_now, c->base_idx, n * sizeof(int)) != 0) c->rerouted++;
    return f;
}

static void setup(fd_ctx *c, const variant_t *v) {
    memset(c, 0, sizeof *c);
    config_of(v, &c->cfg);
    const gpt_parallel_t par = gpt_serial();
    gpt_create(&c->m, MODEL_SPEC_OF(&c->cfg), ops, B_, T_, &par, NULL, NULL);
    gpt_init_params(&c->m, 11);
    randomise_params(&c->m);
    for (int i = 0; i < B_ * T_; i++) {
        c->inputs[i] = (int)((frand() + 1.0f) * 0.5f * 39.99f);
        c->targets[i] = (int)((frand() + 1.0f) * 0.5f * 39.99f);
    }
    const size_t n = (size_t)c->m.L * B_ * T_ * c->cfg.top_k_moe;
    c->base_idx = calloc(n, sizeof(int));
    c->idx_now = calloc(n, sizeof(int));
}

static void teardown(fd_ctx *c) {
    gpt_destroy(&c->m);
    config_destroy(&c->cfg);
    free(c->base_idx), free(c->idx_now);
}

/* The analytic gradient: forward and backward in one training pass, loss weight 1 / N (the
 * aux and z losses are weighted dloss * N = 1 by moe_backward); a host copy of the grads. */
static float *analytic_grads(fd_ctx *c, double *f0) {
    gpt_t *m = &c->m;
    *f0 = forward_objective(c);
    routing_of(c, c->base_idx);
    const gpt_pass_t pass = {.dloss = 1.0f / (B_ * T_)};
    gpt_backward(m, &pass, B_, T_, true);
    gpt_eval_pass(m);
    float *g = malloc(m->P.total * sizeof(float));
    ops->to_host(g, m->grads, m->P.total * sizeof(float));
    return g;
}

/* d objective / d *x by central differences with step FD_EPS; where a step changes some
 * token's top-k set (rerouted), the step is divided by 4 (at most twice more). */
static double central_difference(fd_ctx *c, float *x, const char *name) {
    float eps = FD_EPS;
    for (int tries = 0; tries < 3; tries++, eps /= 4) {
        const long rerouted = c->rerouted;
        const float old = *x, hi = old + eps, lo = old - eps;
        *x = hi;
        const double f_hi = objective(c);
        *x = lo;
        const double f_lo = objective(c);
        *x = old;
        if (c->rerouted == rerouted) return (f_hi - f_lo) / ((double)hi - (double)lo);
        c->smaller_steps++;
    }
    fail_msg("%s: the routing changes under a step of %g", name, (double)eps * 4);
    return 0;
}

/* Central differences at SAMPLES elements spread over tensor `name` (stride coprime with the
 * rows, so several experts, rows and columns are hit), against the analytic gradient. */
static bool check_tensor(fd_ctx *c, const float *grads, const char *name, double *worst) {
    const param_t *t = params_find(&c->m.P, name);
    if (!t) fail_msg("no tensor %s in this variant", name);
    const size_t n = t->numel < SAMPLES ? t->numel : SAMPLES;
    float analytic[SAMPLES];
    double numeric[SAMPLES];
    float *x = c->m.params + t->offset;
    for (size_t s = 0; s < n; s++) {
        const size_t j = (s * t->numel) / n + (s * 7) % (t->numel / n);
        numeric[s] = central_difference(c, x + j, name);
        analytic[s] = grads[t->offset + j];
    }
    double max_num = 1e-30, max_diff = 0;
    for (size_t s = 0; s < n; s++) {
        max_num = fmax(max_num, fabs(numeric[s]));
        max_diff = fmax(max_diff, fabs(numeric[s] - analytic[s]));
    }
    const double err = max_diff / max_num;
    if (err > *worst) *worst = err;
    print_message("  %-26s max|grad| %.3e  err %.2e\n", name, max_num, err);
    return close_rel(name, analytic, numeric, n, FD_TOL);
}

static void check_variant(const variant_t *v) {
    fd_ctx c;
    setup(&c, v);
    print_message("router %s, mlp %s, shared %d, top_k %d, moe_every %d, noise %g\n", v->router,
                  v->mlp, v->shared, v->top_k, v->moe_every, v->noise);
    double f0;
    float *g = analytic_grads(&c, &f0);
    double aux = 0, z = 0;
    for (int l = 0; l < c.m.L; l++)
        if (c.m.moe->stats[l].load) aux += c.m.moe->stats[l].aux, z += c.m.moe->stats[l].z;
    print_message("  objective %.6f (aux %.4f, z %.4f)\n", f0, aux, z);
    assert_true(aux > 0.1 && z > 1e-3); /* the terms the test is about are really there */
    const bool swiglu = !strcmp(v->mlp, "swiglu");
    const char *moe_tensors[] = {
        "moe.router.w", swiglu ? "moe.experts.gate.w" : "moe.experts.fc.w",
        swiglu ? "moe.experts.gate.b" : "moe.experts.fc.b", "moe.experts.proj.w",
        "moe.experts.proj.b", swiglu ? "moe.experts.up.w" : NULL,
        v->shared ? (swiglu ? "moe.shared.gate.w" : "moe.shared.fc.w") : NULL,
        v->shared ? "moe.shared.proj.w" : NULL, v->shared ? "moe.shared.proj.b" : NULL,
        !strcmp(v->router, "mlp") ? "moe.router.fc.w" : NULL, v->noise > 0 ? "moe.noise.w" : NULL,
    };
    bool ok = true;
    double worst = 0;
    char name[PARAM_NAME_MAX];
    for (int l = 0; l < c.m.L; l++) {
        if (!params_moe_layer(MODEL_SPEC_OF(&c.cfg), l)) continue;
        for (size_t i = 0; i < sizeof moe_tensors / sizeof moe_tensors[0]; i++) {
            if (!moe_tensors[i]) continue;
            snprintf(name, sizeof name, "h.%d.%s", l, moe_tensors[i]);
            ok &= check_tensor(&c, g, name, &worst);
        }
    }
    const char *dense[] = {"h.0.ln2.w", "h.0.attn.qkv.w", "h.0.attn.proj.w", "lnf.w"};
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
        ok &= check_tensor(&c, g, dense[i], &worst);
    print_message("  worst error %.2e (tolerance %.0e); %ld of %ld evaluations rerouted (their "
                  "elements retried with a smaller step)\n", worst, FD_TOL, c.rerouted, c.evaluations);
    assert_true(ok);
    free(g);
    teardown(&c);
}

static void linear_router_gelu_top2_grads_match_finite_differences_1e_2(void **state) {
    (void)state;
    const variant_t v = {"linear", "gelu", 0, 2, 1, 2, 0.0};
    check_variant(&v);
}

static void mlp_router_swiglu_shared_noise_top2_grads_match_finite_differences_1e_2(void **state) {
    (void)state;
    const variant_t v = {"mlp", "swiglu", 1, 2, 2, 2, 1.0}; /* block 0 dense, block 1 MoE */
    check_variant(&v);
}

static void linear_router_swiglu_shared_noise_top2_grads_match_finite_differences_1e_2(void **state) {
    (void)state;
    const variant_t v = {"linear", "swiglu", 1, 2, 1, 2, 0.5};
    check_variant(&v);
}

static void mlp_router_gelu_shared_top1_grads_match_finite_differences_1e_2(void **state) {
    (void)state;
    const variant_t v = {"mlp", "gelu", 1, 1, 1, 1, 0.0}; /* k = 1: the gate is p itself */
    check_variant(&v);
}

/* k = E: every token takes every expert, routing cannot change under any step. */
static void linear_router_gelu_noise_all_experts_grads_match_finite_differences_1e_2(void **state) {
    (void)state;
    const variant_t v = {"linear", "gelu", 0, 4, 1, 2, 1.0};
    check_variant(&v);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    ops = ops_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(linear_router_gelu_top2_grads_match_finite_differences_1e_2),
        cmocka_unit_test(mlp_router_swiglu_shared_noise_top2_grads_match_finite_differences_1e_2),
        cmocka_unit_test(linear_router_swiglu_shared_noise_top2_grads_match_finite_differences_1e_2),
        cmocka_unit_test(mlp_router_gelu_shared_top1_grads_match_finite_differences_1e_2),
        cmocka_unit_test(linear_router_gelu_noise_all_experts_grads_match_finite_differences_1e_2),
    };
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
