/* test_profiling.c — the phase seam (core/prof.c) with the counters it feeds (core/counters.c)
 * driven by a mock backend (this VM exposes no hardware counters, so PAPI's counting path is
 * tested through the same function table), and the RAPL energy reader (core/energy.c) on a
 * fake powercap tree. References: counts computed here from the mock's scripted readings (exact),
 * joules from the written microjoule values (exact to 1e-9 J), emissions = kWh x intensity. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>
#include "core/counters.h"
#include "core/energy.h"
#include "core/prof.h"
#define TEST_DIR_TAG "profiling"
#include "test_tmpdir.h"

/* ---- a mock counters backend: event i reads (i + 1) * 10^k after k reads ------------------ */

static int mock_reads, mock_start_fails, mock_n;
static const char *const mock_known[] = {"PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_FP_OPS"};

static int mock_init(char *why, size_t len) { (void)why, (void)len; return 0; }
static int mock_lookup(const char *event, int *code) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(event, mock_known[i])) return *code = i, 0;
    return -1;
}
static void mock_list(char *out, size_t len) { snprintf(out, len, "PAPI_TOT_INS, PAPI_TOT_CYC"); }
static int mock_start(const int *codes, int n, char *why, size_t len) {
    (void)codes;
    mock_n = n;
    mock_reads = 0;
    if (mock_start_fails) snprintf(why, len, "component perf_event disabled");
    return mock_start_fails ? -1 : 0;
}
/* Reading k (0-based) of event i: (i + 1) * k * k, so each interval's count differs. */
static long long mock_value(int i, int k) { return (long long)(i + 1) * k * k; }
static void mock_read(long long *v) {
    for (int i = 0; i < mock_n; i++) v[i] = mock_value(i, mock_reads);
    mock_reads++;
}
static void mock_stop(void) {}
static const counters_backend_t mock = {"mock", mock_init, mock_lookup, mock_list,
                                        mock_start, mock_read, mock_stop};

static void counts_accumulate_per_slot_exactly(void **state) {
    (void)state;
    counters_t c;
    char err[512] = "";
    mock_start_fails = 0;
    assert_int_equal(counters_open(&c, &mock, " PAPI_TOT_INS , PAPI_TOT_CYC", err, sizeof err), 0);
    assert_true(c.counting && c.n == 2 && counters_find(&c, "PAPI_TOT_CYC") == 1);
    assert_int_equal(mock_reads, 1); /* the baseline */
    const int slots[] = {3, 1, 3, 0, 3};
    long long want[COUNTERS_SLOTS][2] = {{0}};
    for (int k = 0; k < 5; k++) {
        counters_charge(&c, slots[k]);
        for (int i = 0; i < 2; i++) want[slots[k]][i] += mock_value(i, k + 1) - mock_value(i, k);
    }
    for (int s = 0; s < COUNTERS_SLOTS; s++)
        for (int i = 0; i < 2; i++)
            if (c.sum[s][i] != want[s][i])
                fail_msg("slot %d event %d: %lld, expected %lld", s, i, c.sum[s][i], want[s][i]);
    counters_close(&c);
}

static void bad_event_lists_are_refused_with_what_is_offered(void **state) {
    (void)state;
    counters_t c;
    char err[512];
    mock_start_fails = 0;
    assert_int_equal(counters_open(&c, &mock, "PAPI_TOT_INS,PAPI_FOO", err, sizeof err), -1);
    assert_string_equal(err, "&log papi_events: unknown event 'PAPI_FOO'; this machine offers: "
                             "PAPI_TOT_INS, PAPI_TOT_CYC");
    assert_int_equal(counters_open(&c, &mock, "PAPI_TOT_INS,,PAPI_TOT_CYC", err, sizeof err), -1);
    assert_non_null(strstr(err, "an empty or over-long"));
    assert_int_equal(counters_open(&c, &mock, "PAPI_TOT_INS, PAPI_TOT_INS", err, sizeof err), -1);
    assert_string_equal(err, "&log papi_events: event 'PAPI_TOT_INS' is listed twice");
    assert_int_equal(counters_open(&c, &mock, "A,B,C,D,E,F,G,H,I", err, sizeof err), -1);
    assert_string_equal(err, "&log papi_events: more than 8 events");
}

/* Known events this machine cannot count: open succeeds, nothing is read, the reason is kept. */
static void events_the_machine_cannot_count_leave_the_run_going(void **state) {
    (void)state;
    counters_t c;
    char err[512] = "";
    mock_start_fails = 1;
    assert_int_equal(counters_open(&c, &mock, "PAPI_TOT_INS", err, sizeof err), 0);
    assert_false(c.counting);
    assert_string_equal(c.why, "component perf_event disabled");
    const int reads = mock_reads;
    counters_charge(&c, 2);
    assert_int_equal(mock_reads, reads);
    assert_true(c.sum[2][0] == 0);
    mock_start_fails = 0;
}

/* Through the seam: nested phases count exclusively (the tp all-reduce inside forward goes to
 * comm, the forward's own time before and after it to forward), events carry their tags, a
 * full buffer drops and counts, and a disarmed seam reads nothing. */
static void the_seam_attributes_counts_to_the_running_phase(void **state) {
    (void)state;
    counters_t c;
    char err[512];
    mock_start_fails = 0;
    assert_int_equal(counters_open(&c, &mock, "PAPI_TOT_INS", err, sizeof err), 0);
    prof_config_t pc = {4, &c, NULL};
    prof_start(&pc);
    prof_set_step(7, true);
    /* reads: 1 begin step, 2 begin fwd, 3 begin comm, 4 end comm, 5 end fwd, 6 begin opt,
     * 7 end opt, 8 end step */
    prof_begin(PROF_STEP, "step", -1, -1);
    prof_begin(PROF_FORWARD, "forward", 2, 1);
    prof_begin(PROF_COMM, "tp all-reduce", -1, -1);
    prof_end(PROF_COMM, 4096);
    prof_end(PROF_FORWARD, 0);
    prof_begin(PROF_OPTIMIZER, "optimizer", -1, -1);
    prof_end(PROF_OPTIMIZER, 0);
    prof_end(PROF_STEP, 0);
#define D(k) (mock_value(0, k) - mock_value(0, (k) - 1))
    const long long other = D(1) + D(2) + D(6) + D(8), fwd = D(3) + D(5), comm = D(4), opt = D(7);
    assert_true(c.sum[PROF_SLOT_OTHER][0] == other && c.sum[PROF_FORWARD][0] == fwd &&
                c.sum[PROF_COMM][0] == comm && c.sum[PROF_OPTIMIZER][0] == opt);
    size_t n, dropped;
    const prof_event_t *ev = prof_events(&n, &dropped);
    assert_true(n == 4 && dropped == 0);
    /* recorded at their ends: comm, forward, optimizer, step */
    assert_string_equal(ev[0].name, "tp all-reduce");
    assert_true(ev[0].bytes == 4096 && ev[0].phase == PROF_COMM && ev[0].step == 7);
    assert_true(ev[1].mb == 2 && ev[1].stage == 1 && ev[1].phase == PROF_FORWARD);
    assert_true(ev[1].t0 <= ev[0].t0 && ev[0].t1 <= ev[1].t1 && ev[3].t0 <= ev[1].t0);
    prof_begin(PROF_DATA, "data", 0, -1);
    prof_end(PROF_DATA, 0);
    ev = prof_events(&n, &dropped);
    assert_true(n == 4 && dropped == 1);
    prof_stop();
    const int reads = mock_reads;
    prof_begin(PROF_FORWARD, "forward", 0, 0);
    prof_end(PROF_FORWARD, 0);
    assert_int_equal(mock_reads, reads);
    prof_free();
    counters_close(&c);
}

/* ---- energy on a fake powercap tree -------------------------------------------------------- */

static void write_file(const char *sub, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void zone(const char *sub, const char *name, const char *max, const char *uj) {
    char line[64];
    snprintf(line, sizeof line, "%s\n", name);
    write_file(sub, "name", line);
    write_file(sub, "max_energy_range_uj", max);
    write_file(sub, "energy_uj", uj);
}

/* package and dram count; the core sub-zone (inside the package) and psys (all packages) do not;
 * a wrap-around past max_energy_range_uj is undone. */
static void energy_counts_packages_and_dram_across_wraparounds(void **state) {
    (void)state;
    zone("intel-rapl:0", "package-0", "1000000\n", "900000\n");
    zone("intel-rapl:0:0", "core", "1000000\n", "5\n");
    zone("intel-rapl:0:1", "dram", "262143328850\n", "1000\n");
    zone("intel-rapl:1", "psys", "1000000\n", "7\n");
    zone("intel-rapl:2", "package-1", "1000000\n", "0\n");
    energy_t e;
    assert_int_equal(energy_open(&e, dir), 0);
    assert_string_equal(e.zones, "package-0, dram, package-1");
    assert_true(energy_read_j(&e) == 0.0);
    /* package-0 wraps: 900000 -> max 1000000 -> 0 -> 100000 is 200001 uJ */
    write_file("intel-rapl:0", "energy_uj", "100000\n");
    write_file("intel-rapl:0:0", "energy_uj", "999999\n");
    write_file("intel-rapl:0:1", "energy_uj", "251000\n");
    write_file("intel-rapl:1", "energy_uj", "999999\n");
    write_file("intel-rapl:2", "energy_uj", "3000000\n"); /* above max: a counter, not wrapped */
    double j = energy_read_j(&e), want = (200001 + 250000 + 3000000) * 1e-6;
    if (fabs(j - want) > 1e-9) fail_msg("joules %.9f, expected %.9f", j, want);
    write_file("intel-rapl:0", "energy_uj", "600000\n");
    j = energy_read_j(&e);
    want += 500000e-6;
    if (fabs(j - want) > 1e-9) fail_msg("joules %.9f, expected %.9f", j, want);
    /* 3.6 MJ is one kWh: at 400 gCO2/kWh, 400 g */
    assert_true(fabs(energy_emissions_g(3.6e6, 400) - 400) < 1e-9);
    assert_true(fabs(energy_emissions_g(j, 250) - j / 3.6e6 * 250) < 1e-15);
}

static void energy_without_rapl_says_why(void **state) {
    (void)state;
    energy_t e;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_int_equal(energy_open(&e, missing), -1);
    assert_false(e.available);
    assert_non_null(strstr(e.why, "No such file or directory"));
    assert_int_equal(energy_open(&e, dir), -1); /* an empty tree */
    assert_non_null(strstr(e.why, "no RAPL zones under"));
    zone("intel-rapl:0", "package-0", "1000000\n", "x\n");
    assert_int_equal(energy_open(&e, dir), -1);
    assert_non_null(strstr(e.why, "energy_uj: not a number"));
    assert_true(energy_read_j(&e) == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts_accumulate_per_slot_exactly),
        cmocka_unit_test(bad_event_lists_are_refused_with_what_is_offered),
        cmocka_unit_test(events_the_machine_cannot_count_leave_the_run_going),
        cmocka_unit_test(the_seam_attributes_counts_to_the_running_phase),
        cmocka_unit_test_setup_teardown(energy_counts_packages_and_dram_across_wraparounds, make_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(energy_without_rapl_says_why, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
