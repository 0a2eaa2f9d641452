/* test_cuda_plan.c — the CUDA backend's GPU-free rules (src/kernels/cuda/device_plan.c), tested
 * on any machine: the peak rate against NVIDIA's published data-sheet figures (dense, no
 * sparsity; tolerance stated per part: the data sheets round the clock), the device choice per
 * rank, the refusal of unusable GPUs, and the wording of each failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/cuda/device_plan.h"

static void assert_contains(const char *text, const char *part) {
    if (!strstr(text, part)) fail_msg("expected \"%s\" in:\n  %s", part, text);
}

/* The published dense TFLOP/s of parts, from their properties as the runtime reports them
 * (SM count, maximum clock): H100/H200 SXM 989.4 bf16, 494.7 tf32, 66.9 fp32; H100 PCIe 756 bf16;
 * A100 312 bf16, 156 tf32, 19.5 fp32; A40 149.7 bf16; L40S 362 bf16 (its data sheet's clock is
 * 2.49 GHz against the 2.52 GHz maximum: 1.5%). */
static void peak_matches_data_sheets_within_1pct(void **state) {
    (void)state;
    static const struct {
        const char *part;
        int major, minor, sms, clock_khz;
        dtype_t t;
        bool tf32;
        double tflops, tol;
    } parts[] = {
        {"H200 SXM bf16", 9, 0, 132, 1980000, DT_BF16, false, 989.4, 0.001},
        {"H100 SXM fp16", 9, 0, 132, 1980000, DT_FP16, false, 989.4, 0.001},
        {"H200 SXM tf32", 9, 0, 132, 1980000, DT_FP32, true, 494.7, 0.001},
        {"H200 SXM fp32", 9, 0, 132, 1980000, DT_FP32, false, 66.9, 0.002},
        {"H100 PCIe bf16", 9, 0, 114, 1755000, DT_BF16, false, 756.0, 0.001},
        {"A100 bf16", 8, 0, 108, 1410000, DT_BF16, false, 312.0, 0.001},
        {"A100 tf32", 8, 0, 108, 1410000, DT_FP32, true, 156.0, 0.001},
        {"A100 fp32", 8, 0, 108, 1410000, DT_FP32, false, 19.5, 0.002},
        {"A40 bf16", 8, 6, 84, 1740000, DT_BF16, false, 149.7, 0.001},
        {"L40S bf16", 8, 9, 142, 2520000, DT_BF16, false, 362.0, 0.015},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char how[256];
        const double got = cuda_plan_peak(parts[i].major, parts[i].minor, parts[i].sms,
                                          parts[i].clock_khz, parts[i].t, parts[i].tf32, how,
                                          sizeof how) / 1e12;
        const double rel = (got - parts[i].tflops) / parts[i].tflops;
        if (rel > parts[i].tol || rel < -parts[i].tol)
            fail_msg("%s: %.1f TFLOP/s, data sheet %.1f (rel %.4f > %.3f)\n  how: %s", parts[i].part,
                     got, parts[i].tflops, rel, parts[i].tol, how);
    }
}

/* how[] shows the product, and says when the data-sheet clock replaced the reported one. */
static void peak_how_states_sms_rate_and_clock(void **state) {
    (void)state;
    char how[256];
    cuda_plan_peak(9, 0, 132, 1980000, DT_BF16, false, how, sizeof how);
    assert_contains(how, "132 SMs x 4096 FLOP/cycle/SM (sm_90 dense bf16) x 1.83 GHz");
    assert_contains(how, "H100/H200 SXM data-sheet tensor clock; the device reports 1.98 GHz max");
    assert_contains(how, "= 989.4 TFLOP/s");
    /* an SXM part clocked differently (power-capped) is not taken for the data sheet's */
    cuda_plan_peak(9, 0, 132, 1500000, DT_BF16, false, how, sizeof how);
    assert_contains(how, "x 1.50 GHz (device max clock) = 811.0 TFLOP/s");
    /* fp32 without TF32 runs on the FP32 cores at the reported clock */
    cuda_plan_peak(9, 0, 132, 1980000, DT_FP32, false, how, sizeof how);
    assert_contains(how, "256 FLOP/cycle/SM (sm_90 dense fp32 (FP32 cores)) x 1.98 GHz (device max clock)");
}

/* Below sm_80 there is no rate (llmtrain refuses those GPUs); a cc newer than the table takes
 * its newest row; one between rows the row below it. */
static void peak_rows_by_compute_capability(void **state) {
    (void)state;
    const char *family = NULL;
    char how[256];
    assert_true(cuda_plan_peak(7, 5, 40, 1590000, DT_BF16, false, how, sizeof how) == 0);
    assert_contains(how, "compute capability 7.5: not in the rate table");
    assert_true(cuda_plan_flop_per_cycle_sm(12, 0, DT_BF16, false, &family) == 8192);
    assert_string_equal(family, "sm_100");
    assert_true(cuda_plan_flop_per_cycle_sm(8, 7, DT_BF16, false, &family) == 1024);
    assert_string_equal(family, "sm_86");
    assert_true(cuda_plan_flop_per_cycle_sm(9, 0, DT_FP16, false, &family) == 4096);
    assert_true(cuda_plan_flop_per_cycle_sm(8, 0, DT_FP32, false, &family) == 128);
}

/* hwloc's nearest GPUs are used when they give each node-local rank its own device; otherwise
 * (none, a duplicate, one out of range) every rank takes device = local rank. */
static void device_choice_uses_topology_only_when_one_gpu_each(void **state) {
    (void)state;
    char msg[512] = "";
    const int distinct[4] = {2, 0, 3, 1}, duplicate[4] = {0, 0, 1, 1}, none[4] = {-1, -1, -1, -1};
    const int out_of_range[2] = {0, 5};
    for (int r = 0; r < 4; r++) {
        assert_int_equal(cuda_plan_choose_device(r, 4, 4, distinct, msg, sizeof msg), distinct[r]);
        assert_int_equal(cuda_plan_choose_device(r, 4, 4, duplicate, msg, sizeof msg), r);
        assert_int_equal(cuda_plan_choose_device(r, 4, 8, none, msg, sizeof msg), r);
        assert_int_equal(cuda_plan_choose_device(r, 4, 4, NULL, msg, sizeof msg), r);
    }
    assert_int_equal(cuda_plan_choose_device(1, 2, 2, out_of_range, msg, sizeof msg), 1);
    /* fewer ranks than GPUs: the topology's pick may be any of them */
    const int two_of_eight[2] = {6, 7};
    assert_int_equal(cuda_plan_choose_device(0, 2, 8, two_of_eight, msg, sizeof msg), 6);
}

static void more_ranks_than_gpus_is_refused_with_counts(void **state) {
    (void)state;
    char msg[512] = "";
    assert_int_equal(cuda_plan_choose_device(3, 4, 2, NULL, msg, sizeof msg), -1);
    assert_contains(msg, "&run device = 'cuda': 4 ranks on this node but 2 GPUs visible: start at "
                         "most 2 ranks per node (one GPU each)");
    assert_int_equal(cuda_plan_choose_device(0, 1, 0, NULL, msg, sizeof msg), -1);
    assert_contains(msg, "1 rank on this node but 0 GPUs visible");
}

/* bf16 needs sm_80 (said in terms of the precision key); anything below sm_80 is too old. */
static void old_gpus_and_bf16_without_support_are_refused(void **state) {
    (void)state;
    char msg[512] = "";
    assert_int_equal(cuda_plan_check_device(1, "Tesla T4", 7, 5, DT_FP32, msg, sizeof msg), -1);
    assert_contains(msg, "GPU 1 (Tesla T4) has compute capability 7.5, too old: needs sm_80 or newer");
    assert_int_equal(cuda_plan_check_device(0, "Tesla V100", 7, 0, DT_BF16, msg, sizeof msg), -1);
    assert_contains(msg, "&train precision = 'bf16': GPU 0 (Tesla V100, compute capability 7.0) has no bf16");
    assert_int_equal(cuda_plan_check_device(0, "A100", 8, 0, DT_BF16, msg, sizeof msg), 0);
    assert_int_equal(cuda_plan_check_device(0, "H200", 9, 0, DT_FP16, msg, sizeof msg), 0);
}

/* Each runtime failure names its cause and the versions CUDA encodes as 1000 major + 10 minor. */
static void runtime_failures_have_one_message_each(void **state) {
    (void)state;
    char msg[512];
    cuda_plan_runtime_message(CUDA_PLAN_NO_DRIVER, 0, 13000, "x", msg, sizeof msg);
    assert_contains(msg, "no NVIDIA driver found");
    cuda_plan_runtime_message(CUDA_PLAN_OLD_DRIVER, 12020, 13000, "x", msg, sizeof msg);
    assert_contains(msg, "the NVIDIA driver supports CUDA 12.2, older than the CUDA 13.0 runtime");
    cuda_plan_runtime_message(CUDA_PLAN_NO_DEVICE, 13000, 13000, "x", msg, sizeof msg);
    assert_contains(msg, "no CUDA device visible (driver CUDA 13.0; check CUDA_VISIBLE_DEVICES");
    cuda_plan_runtime_message(CUDA_PLAN_OTHER, 13000, 13000, "OS call failed (cudaErrorOperatingSystem)",
                              msg, sizeof msg);
    assert_contains(msg, "cannot list devices: OS call failed (cudaErrorOperatingSystem)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(peak_matches_data_sheets_within_1pct),
        cmocka_unit_test(peak_how_states_sms_rate_and_clock),
        cmocka_unit_test(peak_rows_by_compute_capability),
        cmocka_unit_test(device_choice_uses_topology_only_when_one_gpu_each),
        cmocka_unit_test(more_ranks_than_gpus_is_refused_with_counts),
        cmocka_unit_test(old_gpus_and_bf16_without_support_are_refused),
        cmocka_unit_test(runtime_failures_have_one_message_each),
    };
    return cmocka_run_group_tests_name("cuda_plan", tests, NULL, NULL);
}
