/* test_perfmodel.c — the performance model (train/perfmodel.c, train/machine.c) against hand
 * computations: ring and tree all-reduce and all-gather costs (1e-12), a product's rate from
 * machine.h's efficiency form (1e-12), the GEMM part of a one-rank step as the sum of every
 * linear layer's three products written out here (1e-9), the 1F1B bubble of the schedule
 * simulator = (p-1)/(m+p-1) of the pipeline's time (1e-9), the memory = the planner's fullest
 * rank (exact); sequence parallelism: the residual stream's element-wise passes on N / tp rows
 * (their time falls by exactly that share, 1e-9), the ring's all-gather + reduce-scatter pairs
 * cost what its all-reduces did (1e-12), GEMMs unchanged, less memory; bad machine files refused
 * with a message naming the key. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <mpi.h>
#include "config/config.h"
#include "train/machine.h"
#include "train/perfmodel.h"
#include "train/planner.h"

#define DIR "/tmp/llmt_test_perfmodel"

static const char *const machine_text =
    "&machine\n name = 'test', device = 'gpu'\n"
    " peak_tflops_bf16 = 100, peak_tflops_fp16 = 100, peak_tflops_fp32 = 10\n"
    " gemm_efficiency = 0.8, gemm_half_size = 64\n"
    " memory_gib = 80, memory_gb_per_s = 2000\n"
    " devices_per_node = 8, max_nodes = 0\n"
    " intra_node_gb_per_s = 300, intra_node_latency_us = 3\n"
    " inter_node_gb_per_s = 200, inter_node_latency_us = 5\n"
    " collective = 'ring'\n/\n";

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void load_machine(machine_t *m) {
    char err[512];
    write_text(DIR "/m.nml", machine_text);
    assert_int_equal(machine_load(DIR "/m.nml", m, err, sizeof err), 0);
}

static void close_to(double got, double want, double rel) {
    if (fabs(got - want) > rel * fabs(want)) {
        fprintf(stderr, "got %.17g, want %.17g (relative tolerance %g)\n", got, want, rel);
        fail();
    }
}

static void collective_costs_match_hand_computations_1e12(void **state) {
    (void)state;
    /* ring on 8: 2 * 7/8 * 1 GB / 100 GB/s + 2 * 7 * 1 us */
    close_to(perf_allreduce_s(MACHINE_RING, 1e9, 8, 100e9, 1e-6), 0.0175 + 14e-6, 1e-12);
    /* tree on 8: 2 * 1 GB / 100 GB/s + 2 * 3 * 1 us */
    close_to(perf_allreduce_s(MACHINE_TREE, 1e9, 8, 100e9, 1e-6), 0.02 + 6e-6, 1e-12);
    close_to(perf_allgather_s(1e9, 4, 100e9, 1e-6), 0.0075 + 3e-6, 1e-12);
    assert_true(perf_allreduce_s(MACHINE_RING, 1e9, 1, 100e9, 1e-6) == 0.0);
}

static void gemm_rate_is_the_saturating_form_1e12(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    /* 1e14 * 0.8 * (1024/1088) * (256/320) * (64/128) */
    close_to(machine_gemm_rate(&m, 1e14, 1024, 256, 64), 1e14 * 0.8 * (1024.0 / 1088) * 0.8 * 0.5, 1e-12);
}

static void tiny_config(config_t *c, const char *extra) {
    char text[1024];
    snprintf(text, sizeof text,
             "&model n_layer = 4, n_head = 4, d_model = 64, vocab_size = 256, seq_len = 32 /\n"
             "&train global_batch = 8, micro_batch = 1, precision = 'bf16' /\n"
             "&data train_files = 'x.bin' /\n&log peak_flops = 1e12 /\n%s", extra);
    config_parse("tiny.nml", text, c);
}

/* One linear layer's three products, written out: t = 2 M N K / (peak e fM fN fK). */
static double linear_s(const machine_t *m, double rows, double in, double out) {
    const double pk = m->peak_bf16 * m->gemm_efficiency, h = m->gemm_half_size;
#define T(M, N, K) (2.0 * (M) * (N) * (K) / (pk * (M) / ((M) + h) * (N) / ((N) + h) * (K) / ((K) + h)))
    return T(rows, out, in) + T(rows, in, out) + T(out, in, rows);
#undef T
}

static void gemm_part_is_the_sum_of_the_layers_products_1e9(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    config_t cfg, c;
    tiny_config(&cfg, "");
    perf_config_for(&cfg, &m, &c);
    perf_t p;
    perf_predict(&c, &m, &p);
    const double N = 32, C = 64, V = 256; /* the padded vocabulary of 256 is 256 */
    const double block = linear_s(&m, N, C, 3 * C) + linear_s(&m, N, C, C) + linear_s(&m, N, C, 4 * C) +
                         linear_s(&m, N, 4 * C, C);
    const double want = 8 * (4 * block + linear_s(&m, N, C, V)); /* 8 micro-batches */
    close_to(p.part[PERF_GEMM], want, 1e-9);
    assert_true(p.fits);
    assert_int_equal(p.accum, 8);
    config_destroy(&cfg);
}

static void one_f_one_b_bubble_is_p_minus_1_over_m_plus_p_minus_1_1e9(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    for (int pp = 2; pp <= 4; pp += 2) {
        config_t cfg, c;
        tiny_config(&cfg, "&parallel schedule = '1f1b' /\n");
        cfg.pp = pp;
        perf_config_for(&cfg, &m, &c);
        perf_t p;
        perf_predict(&c, &m, &p);
        const double pipeline = p.step_s - p.part[PERF_OPTIMIZER]; /* dp 1: nothing else */
        close_to(p.part[PERF_BUBBLE] / pipeline, (pp - 1.0) / (8 + pp - 1.0), 1e-9);
        config_destroy(&cfg);
    }
}

static void long_pipelines_extrapolate_the_steady_state_exactly_1e12(void **state) {
    (void)state;
    const sched_kind_t kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1};
    for (int k = 0; k < 4; k++)
        for (int p = 2; p <= 8; p *= 2)
            for (int m = 7 * p; m <= 12 * p; m += 5 * p - 1) {
                const int v = kinds[k] == SCHED_INTERLEAVED ? 2 : 1;
                if (kinds[k] == SCHED_INTERLEAVED && m % p) continue;
                const double full = perf_pipeline_s(kinds[k], p, v, m, 1.0, 2.3, 0.7, false);
                const double fast = perf_pipeline_s(kinds[k], p, v, m, 1.0, 2.3, 0.7, true);
                if (fabs(full - fast) > 1e-12 * full) {
                    fprintf(stderr, "kind %d p %d m %d: simulated %.17g, extrapolated %.17g\n", k, p,
                            m, full, fast);
                    fail();
                }
            }
}

static void memory_is_the_planners_fullest_rank(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    config_t cfg, c;
    tiny_config(&cfg, "&parallel pp = 2, tp = 2, dp = 2, zero_stage = 1 /\n");
    perf_config_for(&cfg, &m, &c);
    perf_t p;
    perf_predict(&c, &m, &p);
    mem_plan_t w, mc;
    plan_worst(&c, 1, 4, &w, &mc);
    close_to(p.memory_gib * 1073741824.0, w.total, 1e-15);
    config_destroy(&cfg);
}

static void sequence_parallel_cuts_the_residual_streams_passes_by_tp_1e9(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    perf_t p[2];
    for (int sp = 0; sp < 2; sp++) {
        config_t cfg, c;
        tiny_config(&cfg, sp ? "&parallel tp = 2, sequence_parallel = .true. /\n" : "&parallel tp = 2 /\n");
        perf_config_for(&cfg, &m, &c);
        perf_predict(&c, &m, &p[sp]);
        assert_int_equal(p[sp].sp, sp);
        config_destroy(&cfg);
    }
    /* 10 C bytes a row of the residual stream (norms, adds), forward once and backward twice, on
     * 4 blocks, 8 micro-batches of N = 32 rows, bf16 activations: half of those rows go */
    const double N = 32, C = 64, saved = 8 * 4 * 3 * 2.0 * 10 * C * (N - N / 2) / (m.memory_bw);
    close_to(p[0].part[PERF_ELEMENTWISE] - p[1].part[PERF_ELEMENTWISE], saved, 1e-9);
    close_to(p[1].part[PERF_TP], p[0].part[PERF_TP], 1e-12);
    close_to(p[1].part[PERF_GEMM], p[0].part[PERF_GEMM], 1e-12);
    assert_true(p[1].memory_gib < p[0].memory_gib);
}

/* machine_load refuses `text` with a message containing `want`. */
static void refused(const char *text, const char *want) {
    machine_t m;
    char err[512] = "";
    write_text(DIR "/bad.nml", text);
    assert_int_equal(machine_load(DIR "/bad.nml", &m, err, sizeof err), -1);
    if (!strstr(err, want)) {
        fprintf(stderr, "message '%s' lacks '%s'\n", err, want);
        fail();
    }
}

static char *replace(const char *from, const char *to) {
    static char buf[2048];
    const char *at = strstr(machine_text, from);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - machine_text), machine_text, to, at + strlen(from));
    return buf;
}

static void bad_machine_files_name_the_key(void **state) {
    (void)state;
    refused(replace(" memory_gib = 80,", ""), "missing key 'memory_gib'");
    refused(replace("peak_tflops_fp32 = 10", "peak_tflops_fp32 = 0"), "peak_tflops_fp32");
    refused(replace("memory_gb_per_s = 2000", "memory_gb_per_s = -1"), "memory_gb_per_s");
    refused(replace("collective = 'ring'", "collective = 'star'"), "collective");
    refused(replace("gemm_half_size = 64", "gemm_halfsize = 64"), "gemm_half_size");
    refused(replace("devices_per_node = 8", "devices_per_node = 0"), "devices_per_node");
    machine_t m;
    load_machine(&m);
    config_t cfg;
    tiny_config(&cfg, "&parallel tp = 2 /\n");
    cfg.dp = 3, cfg.global_batch = 12;
    char why[512];
    const char *e = perf_grid_error(&cfg, &m, why, sizeof why); /* 6 ranks on nodes of 8 */
    assert_non_null(e);
    assert_non_null(strstr(e, "devices_per_node"));
    cfg.dp = 4;
    assert_null(perf_grid_error(&cfg, &m, why, sizeof why)); /* 8 ranks: one node */
    config_destroy(&cfg);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv); /* the planner's model plan takes a one-rank group */
    if (system("mkdir -p " DIR) != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(collective_costs_match_hand_computations_1e12),
        cmocka_unit_test(gemm_rate_is_the_saturating_form_1e12),
        cmocka_unit_test(gemm_part_is_the_sum_of_the_layers_products_1e9),
        cmocka_unit_test(one_f_one_b_bubble_is_p_minus_1_over_m_plus_p_minus_1_1e9),
        cmocka_unit_test(long_pipelines_extrapolate_the_steady_state_exactly_1e12),
        cmocka_unit_test(memory_is_the_planners_fullest_rank),
        cmocka_unit_test(sequence_parallel_cuts_the_residual_streams_passes_by_tp_1e9),
        cmocka_unit_test(bad_machine_files_name_the_key),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return rc;
}
