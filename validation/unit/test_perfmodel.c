/* test_perfmodel.c — the performance model (train/perfmodel.c, train/machine.c) against hand
 * computations: ring and tree all-reduce and all-gather costs (1e-12), a product's rate from
 * machine.h's efficiency form (1e-12), the GEMM part of a one-rank step as the sum of every
 * linear layer's three products written out here (1e-9), the 1F1B bubble of the schedule
 * simulator = (p-1)/(m+p-1) of the pipeline's time (1e-9), the memory = the planner's fullest
 * rank (exact); sequence parallelism: the residual stream's element-wise passes on N / tp rows
 * (their time falls by exactly that share, 1e-9), the ring's all-gather + reduce-scatter pairs
 * cost what its all-reduces did (1e-12), GEMMs unchanged, less memory; context parallelism: cp 1
 * gives the numbers of the model before cp (golden values, 1e-12), cp 2 cuts a rank's rows to
 * T / cp (every product's time by exactly (T/2 + h) / (T + h) of the saturating rate, the
 * attention's (Tl, T, hs) products alike, the element-wise passes by exactly 1/2), the ring's
 * exchange written out (overlapped forward, dK/dV hops not, 1e-9), 0 at cp 1; the replica
 * group dp x cp (ZeRO and optimizer of dp 1 x cp 2 = those of dp 2); less cp on the same rows
 * never slower, never more memory (what --search leaves out); a 7B-like model at
 * seq_len 262144 on 16 80 GiB devices: no cp 1 grid fits, the search picks cp > 1; bad machine
 * files refused with a message naming the key, grids the ring refuses named. */
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
#include "train/perfplan.h"
#include "train/planner.h"
#include <unistd.h>

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

/* The prediction of tiny_config(extra) on machine m. */
static void predict_tiny(const machine_t *m, const char *extra, perf_t *p) {
    config_t cfg, c;
    tiny_config(&cfg, extra);
    perf_config_for(&cfg, m, &c);
    perf_predict(&c, m, p);
    config_destroy(&cfg);
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
        predict_tiny(&m, sp ? "&parallel tp = 2, sequence_parallel = .true. /\n" : "&parallel tp = 2 /\n", &p[sp]);
        assert_int_equal(p[sp].sp, sp);
    }
    /* 10 C bytes a row of the residual stream (norms, adds), forward once and backward twice, on
     * 4 blocks, 8 micro-batches of N = 32 rows, bf16 activations: half of those rows go */
    const double N = 32, C = 64, saved = 8 * 4 * 3 * 2.0 * 10 * C * (N - N / 2) / (m.memory_bw);
    close_to(p[0].part[PERF_ELEMENTWISE] - p[1].part[PERF_ELEMENTWISE], saved, 1e-9);
    close_to(p[1].part[PERF_TP], p[0].part[PERF_TP], 1e-12);
    close_to(p[1].part[PERF_GEMM], p[0].part[PERF_GEMM], 1e-12);
    assert_true(p[1].memory_gib < p[0].memory_gib);
}

/* The parts and step of tiny_config(extra) on the test machine, against the model's before cp
 * (printed with %.17g by perfmodel.c of commit 9001e98, parts in its order: gemm, attention,
 * elementwise, tp, recompute, p2p, bubble, dp, zero, optimizer, moe). */
static void same_as_before_cp(const char *extra, const double want[11], double step) {
    static const perf_part_t order[11] = {PERF_GEMM, PERF_ATTENTION, PERF_ELEMENTWISE, PERF_TP,
                                          PERF_RECOMPUTE, PERF_P2P, PERF_BUBBLE, PERF_DP,
                                          PERF_ZERO, PERF_OPTIMIZER, PERF_MOE};
    machine_t m;
    load_machine(&m);
    config_t cfg, c;
    tiny_config(&cfg, extra);
    perf_config_for(&cfg, &m, &c);
    perf_t p;
    perf_predict(&c, &m, &p);
    for (int i = 0; i < 11; i++) {
        if (want[i] == 0) assert_true(p.part[order[i]] == 0.0);
        else close_to(p.part[order[i]], want[i], 1e-12);
    }
    assert_true(p.part[PERF_CP] == 0.0);
    close_to(p.step_s, step, 1e-12);
    config_destroy(&cfg);
}

static void cp_1_gives_the_numbers_before_cp_1e12(void **state) {
    (void)state;
    const double a[11] = {5.4263808000000009e-06, 2.0643840000000005e-06, 5.4067199999999993e-07,
                          0.00019287381333333334, 5.8982400000000019e-07, 4.8218453333333334e-05,
                          3.1214190933333383e-05, 0, 3.2020266666666666e-06, 4.8486399999999997e-07, 0};
    same_as_before_cp("&parallel dp = 2, tp = 2, pp = 2, zero_stage = 1, sequence_parallel = .true., "
                      "recompute = 'selective', schedule = 'interleaved', virtual_stages = 2 /\n",
                      a, 0.00028461460906666671);
    const double b[11] = {8.1395712000000014e-06, 4.128768000000001e-06, 9.9942399999999994e-07, 0,
                          3.9911424000000003e-06, 0, 0, 4.7026303999999981e-06,
                          1.0092480000000001e-05, 8.73984e-07, 0};
    same_as_before_cp("&parallel dp = 4, zero_stage = 2, recompute = 'full' /\n", b,
                      3.2928000000000007e-05);
}

/* The prediction of a model of d_model 512, 8 heads, seq_len T, micro_batch mb on the test
 * machine. */
static void predict_wide(const machine_t *m, int T, int mb, const char *parallel, perf_t *p) {
    char text[1024];
    snprintf(text, sizeof text,
             "&model n_layer = 4, n_head = 8, d_model = 512, vocab_size = 256, seq_len = %d /\n"
             "&train global_batch = 8, micro_batch = %d, precision = 'bf16' /\n"
             "&data train_files = 'x.bin' /\n&parallel %s /\n", T, mb, parallel);
    config_t cfg, c;
    config_parse("wide.nml", text, &cfg);
    perf_config_for(&cfg, m, &c);
    char why[512];
    assert_null(perf_grid_error(&c, m, why, sizeof why));
    perf_predict(&c, m, p);
    config_destroy(&cfg);
}

/* A product's time is 2 (M + h)(N + h)(K + h) / (peak e) (machine.h's saturating rate), and each
 * of a linear layer's three products and of attention's (Tl, T, hs) ones has one dimension of
 * the rank's rows: cp 2 scales all of them by (T/2 + h) / (T + h). */
static void cp_2_cuts_a_ranks_rows_by_cp_1e9(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    perf_t one, two;
    predict_wide(&m, 4096, 1, "cp = 1", &one);
    predict_wide(&m, 4096, 1, "cp = 2", &two);
    const double h = m.gemm_half_size, share = (2048 + h) / (4096 + h);
    close_to(two.part[PERF_GEMM] / one.part[PERF_GEMM], share, 1e-9);
    close_to(two.part[PERF_ATTENTION] / one.part[PERF_ATTENTION], share, 1e-9);
    assert_true(two.part[PERF_GEMM] < 0.51 * one.part[PERF_GEMM]);
    assert_true(two.part[PERF_ATTENTION] < 0.51 * one.part[PERF_ATTENTION]);
    close_to(two.part[PERF_ELEMENTWISE] / one.part[PERF_ELEMENTWISE], 0.5, 1e-12);
    assert_true(one.part[PERF_CP] == 0.0);
    assert_true(two.part[PERF_CP] > 0.0);
    assert_int_equal(two.cp, 2);
    /* the same tokens a step on twice the devices: model TFLOP/s per device from world = 2 */
    close_to(two.tokens_per_s, 8.0 * 4096 / two.step_s, 1e-12);
    close_to(two.tflops_per_device / one.tflops_per_device, one.step_s / two.step_s / 2, 1e-12);
    /* the ring's exchange, written out: K/V blocks of 2048 rows x 8 heads x 64 fp32 per hop on
     * one node; 2 steps a pass, each on half the attention (2 heads' products x 8 of (2048,
     * 4096, 64)), the forward's one send hidden by it (the block work is longer), the
     * backward's dK/dV sent after the work, twice; 2 + 5 memory passes of the block */
    const double bytes = 2048 * 2 * 8 * 64 * 4.0, msg = m.intra_lat + bytes / m.intra_bw;
    const double pass = bytes / m.memory_bw;
    const double att0 = 2 * 8 * 2 * (2048 + h) * (4096 + h) * (64 + h) / (m.peak_bf16 * m.gemm_efficiency);
    assert_true(msg < att0 / 2);
    close_to(two.part[PERF_CP], 8 * 4 * (7 * pass + 2 * msg), 1e-9);
}

/* What --search leaves out (perfplan.c cp_dominated): cp 4 with micro_batch 2 against dp 2 x
 * cp 2 with micro_batch 1, cp 2 with micro_batch 2 against dp 2 x cp 1 with micro_batch 1: the
 * same rows on every rank: the same linear products and element-wise passes (1e-12), attention
 * on fewer, longer query blocks (faster at the saturating rate), a smaller cp part and step, no
 * more memory. */
static void less_cp_on_the_same_rows_is_never_worse_1e12(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    const char *grids[] = {"cp = 4", "dp = 2, cp = 2", "cp = 2", "dp = 2"};
    const int mb[] = {2, 1, 2, 1};
    perf_t p[4];
    for (int i = 0; i < 4; i++) predict_wide(&m, 4096, mb[i], grids[i], &p[i]);
    for (int i = 0; i < 4; i += 2) {
        close_to(p[i + 1].part[PERF_GEMM], p[i].part[PERF_GEMM], 1e-12);
        assert_true(p[i + 1].part[PERF_ATTENTION] < p[i].part[PERF_ATTENTION]); /* longer blocks */
        close_to(p[i + 1].part[PERF_ELEMENTWISE], p[i].part[PERF_ELEMENTWISE], 1e-12);
        if (!(p[i + 1].part[PERF_CP] < p[i].part[PERF_CP] && p[i + 1].step_s < p[i].step_s)) {
            fprintf(stderr, "%s: cp %g s step %g s; %s: cp %g s step %g s\n", grids[i],
                    p[i].part[PERF_CP], p[i].step_s, grids[i + 1], p[i + 1].part[PERF_CP],
                    p[i + 1].step_s);
            fail();
        }
        assert_true(p[i + 1].memory_gib <= p[i].memory_gib);
    }
}

/* A short sequence: the block work is shorter than the message, the forward's send shows. */
static void cp_forward_send_shows_beyond_short_blocks_1e9(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    config_t cfg, c;
    tiny_config(&cfg, "&parallel cp = 2 /\n");
    perf_config_for(&cfg, &m, &c);
    perf_t p;
    perf_predict(&c, &m, &p);
    const double h = m.gemm_half_size, bytes = 16 * 2 * 4 * 16 * 4.0;
    const double msg = m.intra_lat + bytes / m.intra_bw, pass = bytes / m.memory_bw;
    const double att0 = 2 * 4 * 2 * (16 + h) * (32 + h) * (16 + h) / (m.peak_bf16 * m.gemm_efficiency);
    const double att1 = 2.5 * att0;
    assert_true(msg > att1 / 2);
    const double block = (msg - att0 / 2) + 2 * pass + (msg - att1 / 2) + 2 * msg + 5 * pass;
    close_to(p.part[PERF_CP], 8 * 4 * block, 1e-9);
    close_to(p.part[PERF_ATTENTION], 8 * 4 * 3.5 * att0, 1e-9);
    config_destroy(&cfg);
}

/* ZeRO and the optimizer over the replica group dp x cp: dp 1 x cp 2 as dp 2 x cp 1. */
static void cp_joins_the_replica_group_1e12(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    const char *grids[] = {"&parallel zero_stage = 1 /\n", "&parallel dp = 2, zero_stage = 1 /\n",
                           "&parallel cp = 2, zero_stage = 1 /\n", "&parallel cp = 2 /\n"};
    perf_t p[4];
    for (int i = 0; i < 4; i++) {
        config_t cfg, c;
        tiny_config(&cfg, grids[i]);
        if (i == 1) cfg.global_batch = 8;
        perf_config_for(&cfg, &m, &c);
        perf_predict(&c, &m, &p[i]);
        config_destroy(&cfg);
    }
    assert_true(p[0].part[PERF_ZERO] == 0.0 && p[0].part[PERF_DP] == 0.0); /* one replica */
    assert_true(p[2].part[PERF_ZERO] > 0.0);
    close_to(p[2].part[PERF_ZERO], p[1].part[PERF_ZERO], 1e-12);
    close_to(p[2].part[PERF_OPTIMIZER], p[1].part[PERF_OPTIMIZER], 1e-12);
    close_to(p[2].part[PERF_OPTIMIZER], p[0].part[PERF_OPTIMIZER] / 2, 1e-12);
    assert_true(p[2].memory_gib < p[3].memory_gib); /* ZeRO 1 shards over cp's 2 replicas */
}

/* Between stages, tp 2 without sequence parallelism: each tp rank sends half of the replicated
 * activation (N C fp32) and the receiver all-gathers it over tp (pipeline.c's scatter/gather);
 * with sequence parallelism each sends its N / tp rows and gathers nothing. tp 2 x pp 2 sits in
 * one node of the test machine: every link intra-node; 8 micro-batches, one chunk. */
static void stages_exchange_a_tp_share_and_gather_it_1e12(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    perf_t p[2];
    for (int sp = 0; sp < 2; sp++)
        predict_tiny(&m, sp ? "&parallel tp = 2, pp = 2, sequence_parallel = .true. /\n" : "&parallel tp = 2, pp = 2 /\n",
                     &p[sp]);
    const double bytes = 32 * 64 * 4.0, bw = m.intra_bw, lat = m.intra_lat;
    const double msg = lat + bytes / 2 / bw;
    close_to(p[0].part[PERF_P2P], 8 * 2 * (msg + perf_allgather_s(bytes, 2, bw, lat)), 1e-12);
    close_to(p[1].part[PERF_P2P], 8 * 2 * msg, 1e-12);
}

/* Ranks sharing a core fill each other's pipeline bubbles: dp 2 x pp 2 (2 micro-batches a step,
 * a third of the step a bubble) on one node of 4 devices, and on one node of 2 (4 ranks, 2 a
 * core), with links so fast that only the products count: oversubscribed, the step is twice
 * the 4-device step's busy time and nothing is left of the bubble (each core runs its two
 * ranks' work back to back), not twice the 4-device step. */
static void oversubscribed_ranks_fill_the_bubble_1e6(void **state) {
    (void)state;
    perf_t p[2];
    for (int k = 0; k < 2; k++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "&machine\n name = 'test', device = 'gpu'\n"
                 " peak_tflops_bf16 = 100, peak_tflops_fp16 = 100, peak_tflops_fp32 = 10\n"
                 " gemm_efficiency = 0.8, gemm_half_size = 64\n"
                 " memory_gib = 80, memory_gb_per_s = 1e9\n"
                 " devices_per_node = %d, max_nodes = 1\n"
                 " intra_node_gb_per_s = 1e12, intra_node_latency_us = 1e-9\n"
                 " inter_node_gb_per_s = 1e12, inter_node_latency_us = 1e-9\n"
                 " collective = 'ring'\n/\n", k ? 2 : 4);
        write_text(DIR "/over.nml", text);
        machine_t m;
        char err[512];
        assert_int_equal(machine_load(DIR "/over.nml", &m, err, sizeof err), 0);
        config_t cfg, c;
        tiny_config(&cfg, "&parallel dp = 2, pp = 2 /\n");
        cfg.global_batch = 4;
        perf_config_for(&cfg, &m, &c);
        perf_predict(&c, &m, &p[k]);
        config_destroy(&cfg);
    }
    assert_false(p[0].oversubscribed);
    assert_true(p[1].oversubscribed);
    assert_true(p[0].part[PERF_BUBBLE] > 0.2 * p[0].step_s); /* 1 / 3 of the makespan */
    close_to(p[1].step_s, 2 * (p[0].step_s - p[0].part[PERF_BUBBLE]), 1e-6);
    assert_true(p[1].part[PERF_BUBBLE] <= 1e-6 * p[1].step_s);
}

/* ZeRO 3's gathers and the gradients' reduce-scatter share the replica group's link: however
 * well they overlap the compute, a step is never shorter than the link's own time for both
 * (reduce-scatter of fp32 gradients, 2 x accum gathers of at least 2-byte weights, or 1 with
 * zero3_resident). dp 4 sits in one node of the test machine (intra-node link); `params`
 * swept from far below to far above what the compute can hide. */
static void zero3_gathers_and_reduction_share_the_link_1e12(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    for (int resident = 0; resident < 2; resident++)
        for (int mb = 1; mb <= 2; mb++) {
            config_t cfg, c;
            tiny_config(&cfg, resident ? "&parallel dp = 4, zero_stage = 3, zero3_resident = .true. /\n"
                                       : "&parallel dp = 4, zero_stage = 3 /\n");
            cfg.micro_batch = mb;
            perf_config_for(&cfg, &m, &c);
            const int accum = c.global_batch / c.dp / c.micro_batch;
            for (double params = 1e3; params <= 1e8; params *= 1.5) {
                perf_t p;
                perf_time(&c, &m, params, 1.0, &p);
                const double link = perf_allgather_s(params * 4.0, 4, m.intra_bw, m.intra_lat) +
                                    (resident ? 1.0 : 2.0 * accum) *
                                        perf_allgather_s(params * 2.0, 4, m.intra_bw, m.intra_lat);
                if (p.step_s < link * (1 - 1e-12)) {
                    fprintf(stderr, "resident %d, mb %d, %g parameters: step %.9g s < the link's %.9g s\n",
                            resident, mb, params, p.step_s, link);
                    fail();
                }
            }
            config_destroy(&cfg);
        }
}

/* A 7B-like model (32 layers of d_model 4096) at seq_len 262144 on 16 devices of 80 GiB: the
 * least memory of tp 8 x dp 2 (micro_batch 1, full recompute, ZeRO 3, sequence parallelism)
 * does not fit, that of tp 8 x cp 2 does; the search (--json, read back) picks cp > 1. */
static void long_sequences_need_cp(void **state) {
    (void)state;
    machine_t m;
    load_machine(&m);
    const char *text = "&model n_layer = 32, n_head = 32, d_model = 4096, vocab_size = 32000, "
                       "seq_len = 262144 /\n&train global_batch = 8, micro_batch = 1, precision = "
                       "'bf16' /\n&data train_files = 'x.bin' /\n&parallel tp = 8, recompute = "
                       "'full', sequence_parallel = .true., zero_stage = 3 /\n";
    config_t cfg, c;
    config_parse("long.nml", text, &cfg);
    perf_config_for(&cfg, &m, &c);
    perf_t p;
    c.dp = 2, c.cp = 1;
    perf_memory(&c, &m, &p, NULL, NULL);
    assert_false(p.fits);
    c.dp = 1, c.cp = 2;
    perf_memory(&c, &m, &p, NULL, NULL);
    assert_true(p.fits);
    fflush(stdout);
    const int saved = dup(1);
    assert_non_null(freopen(DIR "/search.json", "w", stdout));
    const int rc = perfplan_search(&cfg, &m, 16, true);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    assert_int_equal(rc, 0);
    char buf[4096] = "";
    FILE *f = fopen(DIR "/search.json", "r");
    assert_non_null(f);
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *first = strstr(buf, "\"candidates\"");
    assert_non_null(first);
    const char *cp = strstr(first, "\"cp\": ");
    assert_non_null(cp);
    if (atoi(cp + 6) < 2) {
        fprintf(stderr, "the search's best has cp %d: %s\n", atoi(cp + 6), buf);
        fail();
    }
    config_destroy(&cfg);
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
    cfg.dp = 3, cfg.cp = 2; /* 12 ranks */
    e = perf_grid_error(&cfg, &m, why, sizeof why);
    assert_non_null(e);
    assert_non_null(strstr(e, "x cp 2"));
    cfg.dp = 1, cfg.cp = 3; /* seq_len 32: 2 cp chunks of 16 / 3 tokens */
    e = perf_grid_error(&cfg, &m, why, sizeof why);
    assert_non_null(e);
    assert_non_null(strstr(e, "seq_len"));
    cfg.cp = 2, cfg.dp = 2;
    assert_null(perf_grid_error(&cfg, &m, why, sizeof why)); /* dp 2 x cp 2 x tp 2 */
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
        cmocka_unit_test(cp_1_gives_the_numbers_before_cp_1e12),
        cmocka_unit_test(cp_2_cuts_a_ranks_rows_by_cp_1e9),
        cmocka_unit_test(cp_forward_send_shows_beyond_short_blocks_1e9),
        cmocka_unit_test(less_cp_on_the_same_rows_is_never_worse_1e12),
        cmocka_unit_test(cp_joins_the_replica_group_1e12),
        cmocka_unit_test(zero3_gathers_and_reduction_share_the_link_1e12),
        cmocka_unit_test(stages_exchange_a_tp_share_and_gather_it_1e12),
        cmocka_unit_test(oversubscribed_ranks_fill_the_bubble_1e6),
        cmocka_unit_test(long_sequences_need_cp),
        cmocka_unit_test(bad_machine_files_name_the_key),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return rc;
}
