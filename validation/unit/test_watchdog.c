/* test_watchdog.c — the hang watchdog. Reference: the wall clock (a wait longer than its
 * timeout must end the process with exit code 4 within the timeout plus two poll periods; a
 * shorter one must not) and the message text (phase, step, peers, rank). Cases that may end
 * the process run in a forked child whose stderr comes back through a pipe. The cost case
 * times 1e6 enter/leave pairs with the watchdog running: under 1 us per pair on average.
 * The hang hook (LLMT_HANG_HOOK) runs before the exit, with the rank, and is waited for (its
 * file is written when the process is gone), at most LLMT_HANG_HOOK_S (then killed).
 * The fork cases run before MPI_Init; the peers-text cases after it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/timer.h"
#include "parallel/watchdog.h"

/* ---- run a scenario in a child process -------------------------------------------------------- */

typedef struct child_result {
    int exited, exit_code, signal;
    double seconds;
    char err[4096]; /* the child's stderr */
} child_result_t;

static void run_child(void (*scenario)(void), child_result_t *r) {
    memset(r, 0, sizeof *r);
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    fflush(stderr);
    double t0 = now_sec();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], STDERR_FILENO);
        close(fd[1]);
        scenario();
        _exit(0);
    }
    close(fd[1]);
    size_t used = 0;
    ssize_t got;
    while ((got = read(fd[0], r->err + used, sizeof r->err - 1 - used)) > 0) used += (size_t)got;
    r->err[used] = '\0';
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    r->seconds = now_sec() - t0;
    r->exited = WIFEXITED(status);
    r->exit_code = r->exited ? WEXITSTATUS(status) : -1;
    r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    printf("  child: %s %d after %.2f s; stderr: \"%s\"\n", r->exited ? "exit" : "signal",
           r->exited ? r->exit_code : r->signal, r->seconds, r->err);
}

static void sleep_s(double s) { usleep((useconds_t)(s * 1e6)); }

/* ---- scenarios (run in the child) ------------------------------------------------------------ */

static void short_waits(void) {
    watchdog_start(0.5, 1);
    watchdog_set_step(3);
    for (int i = 0; i < 10; i++) { /* 1 s of waiting in total, 0.1 s at a time */
        watchdog_enter("short wait", "rank 0");
        sleep_s(0.1);
        watchdog_leave();
    }
    sleep_s(1.0); /* idle longer than the timeout: no wait in progress */
    watchdog_stop();
}

static void long_wait(void) {
    watchdog_start(0.5, 3);
    watchdog_set_step(17);
    watchdog_enter("test phase", "rank 9");
    sleep(3);
}

static void long_wait_own_timeout(void) {
    watchdog_start(60, 5);
    watchdog_set_step(40);
    watchdog_enter_for("checkpoint write", "all ranks", 0.3);
    sleep(3);
}

static void long_wait_no_timeout(void) {
    watchdog_start(0.3, 5);
    watchdog_enter_for("checkpoint write", "all ranks", 0); /* this wait is never timed out */
    sleep_s(1.0);
    watchdog_leave();
    watchdog_stop();
}

static void long_wait_disabled(void) {
    watchdog_start(0, 2); /* timeout_s = 0: no watchdog */
    watchdog_enter("dp all-reduce", "rank 1");
    sleep_s(0.8);
    watchdog_leave();
    watchdog_stop();
}

static void long_wait_long_texts(void) {
    char phase[200], peers[400];
    memset(phase, 'p', sizeof phase - 1);
    phase[sizeof phase - 1] = '\0';
    memset(peers, 'q', sizeof peers - 1);
    peers[sizeof peers - 1] = '\0';
    watchdog_start(0.3, 0);
    watchdog_enter(phase, peers);
    memset(peers, 'x', sizeof peers - 1); /* the watchdog holds its own copy */
    sleep(3);
}

/* LLMT_HANG_HOOK: the hook closes its stderr (the test's pipe), so the pipe's end says nothing
 * about it; only a watchdog that waited for it leaves its file written when the child is gone */
#define HOOK_FILE "/tmp/llmt_test_watchdog_hook.txt"
static void long_wait_with_hook(void) {
    setenv("LLMT_HANG_HOOK", "exec 2>&-; sleep 0.4; echo \"hook ran on rank $LLMT_HANG_RANK\" >" HOOK_FILE, 1);
    long_wait();
}

static void short_waits_with_hook(void) {
    setenv("LLMT_HANG_HOOK", "echo \"hook ran\" >&2", 1);
    short_waits(); /* ends with watchdog_stop, which frees the hook */
}

static void long_wait_with_slow_hook(void) {
    setenv("LLMT_HANG_HOOK", "exec sleep 30", 1);
    setenv("LLMT_HANG_HOOK_S", "0.3", 1);
    long_wait();
}

/* ---- test cases ------------------------------------------------------------------------------ */

static void watchdog_waits_shorter_than_timeout_0_5s_do_nothing(void **state) {
    (void)state;
    child_result_t r;
    run_child(short_waits, &r);
    assert_true(r.exited);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.err, "");
}

static void watchdog_wait_over_timeout_0_5s_exits_4_naming_phase_step_peers(void **state) {
    (void)state;
    child_result_t r;
    run_child(long_wait, &r);
    assert_true(r.exited);
    assert_int_equal(r.exit_code, LLMT_EXIT_HANG);
    /* fires after the timeout and within two poll periods (0.05 s) plus scheduling slack */
    assert_true(r.seconds >= 0.5 && r.seconds < 2.0);
    assert_non_null(strstr(r.err, "llmtrain: watchdog: rank 3 waited "));
    assert_non_null(strstr(r.err, "in 'test phase' at step 17 for rank 9 (timeout 0.5 s)"));
    assert_non_null(strstr(r.err, "a peer is dead or hung; ending the job\n"));
}

static void watchdog_hang_hook_runs_and_is_waited_for_before_exit_4(void **state) {
    (void)state;
    child_result_t r;
    remove(HOOK_FILE);
    run_child(long_wait_with_hook, &r);
    assert_int_equal(r.exit_code, LLMT_EXIT_HANG);
    assert_true(r.seconds >= 0.5 + 0.4 && r.seconds < 3.0);
    assert_non_null(strstr(r.err, "in 'test phase' at step 17 for rank 9 (timeout 0.5 s)"));
    char got[64] = "";
    FILE *f = fopen(HOOK_FILE, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof got, f));
    fclose(f);
    remove(HOOK_FILE);
    assert_string_equal(got, "hook ran on rank 3\n");
}

static void watchdog_hang_hook_not_run_without_a_hang(void **state) {
    (void)state;
    child_result_t r;
    run_child(short_waits_with_hook, &r);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.err, "");
}

static void watchdog_hang_hook_over_LLMT_HANG_HOOK_S_0_3s_is_killed(void **state) {
    (void)state;
    child_result_t r;
    run_child(long_wait_with_slow_hook, &r);
    assert_int_equal(r.exit_code, LLMT_EXIT_HANG);
    assert_true(r.seconds >= 0.5 + 0.3 && r.seconds < 3.0); /* not the hook's 30 s */
    assert_non_null(strstr(r.err, "rank 3: the hang hook (LLMT_HANG_HOOK) still ran after 0.3 s "
                                  "(LLMT_HANG_HOOK_S): killed\n"));
}

static void watchdog_enter_for_uses_its_own_timeout_0_3s(void **state) {
    (void)state;
    child_result_t r;
    run_child(long_wait_own_timeout, &r);
    assert_int_equal(r.exit_code, LLMT_EXIT_HANG);
    assert_true(r.seconds >= 0.3 && r.seconds < 2.0);
    assert_non_null(strstr(r.err, "rank 5 waited "));
    assert_non_null(strstr(r.err, "in 'checkpoint write' at step 40 for all ranks (timeout 0.3 s)"));
    run_child(long_wait_no_timeout, &r);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.err, "");
}

static void watchdog_timeout_0_is_disabled(void **state) {
    (void)state;
    child_result_t r;
    run_child(long_wait_disabled, &r);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.err, "");
}

static void watchdog_long_texts_are_cut_with_dots_and_copied(void **state) {
    (void)state;
    child_result_t r;
    run_child(long_wait_long_texts, &r);
    assert_int_equal(r.exit_code, LLMT_EXIT_HANG);
    char want_phase[WATCHDOG_PHASE_LEN + 8], want_peers[WATCHDOG_PEERS_LEN + 8];
    memset(want_phase, 'p', WATCHDOG_PHASE_LEN - 4);
    snprintf(want_phase + WATCHDOG_PHASE_LEN - 4, 8, "...' ");
    memset(want_peers, 'q', WATCHDOG_PEERS_LEN - 4);
    snprintf(want_peers + WATCHDOG_PEERS_LEN - 4, 8, "... (");
    assert_non_null(strstr(r.err, want_phase));
    assert_non_null(strstr(r.err, want_peers));
    assert_null(strstr(r.err, "xxxx"));
    assert_non_null(strstr(r.err, "at startup"));
}

static void watchdog_stop_returns_within_0_5s_not_a_1s_poll(void **state) {
    (void)state;
    watchdog_start(60, 0); /* polls once a second */
    sleep_s(0.05);
    double t0 = now_sec();
    watchdog_stop();
    double dt = now_sec() - t0;
    printf("  watchdog_stop took %.4f s\n", dt);
    assert_true(dt < 0.5);
}

static void watchdog_enter_leave_pair_costs_under_1us(void **state) {
    (void)state;
    watchdog_start(60, 0);
    const long pairs = 1000000;
    double t0 = now_sec();
    for (long i = 0; i < pairs; i++) {
        watchdog_enter("dp all-reduce", "dp group ranks 0,2,4,6");
        watchdog_leave();
    }
    double dt = now_sec() - t0;
    watchdog_stop();
    printf("  %ld enter/leave pairs: %.1f ns per pair\n", pairs, dt / (double)pairs * 1e9);
    assert_true(dt / (double)pairs < 1e-6);
}

/* ---- peers text (MPI) ------------------------------------------------------------------------ */

static void watchdog_format_ranks_lists_up_to_8_and_shortens_longer(void **state) {
    (void)state;
    int ranks[32];
    char buf[128];
    for (int i = 0; i < 32; i++) ranks[i] = 2 * i;
    watchdog_format_ranks(ranks, 4, "dp group", buf, sizeof buf);
    assert_string_equal(buf, "dp group ranks 0,2,4,6");
    watchdog_format_ranks(ranks + 5, 1, "", buf, sizeof buf);
    assert_string_equal(buf, "rank 10");
    watchdog_format_ranks(ranks, 32, "dp group", buf, sizeof buf);
    assert_string_equal(buf, "dp group ranks 0,2,4,...,62 (32 ranks)");
    watchdog_format_ranks(ranks, 8, "tp group", buf, 20); /* cut, never overrun */
    assert_string_equal(buf, "tp group ranks 0,2,");
}

static void watchdog_group_peers_names_world_ranks(void **state) {
    (void)state;
    int rank, size;
    char buf[128], want[128];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    watchdog_group_peers(MPI_COMM_SELF, MPI_COMM_WORLD, "", buf, sizeof buf);
    snprintf(want, sizeof want, "rank %d", rank);
    assert_string_equal(buf, want);
    /* the ranks of my parity: 0,2,4,... or 1,3,5,... */
    MPI_Comm parity;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &parity);
    watchdog_group_peers(parity, MPI_COMM_WORLD, "dp group", buf, sizeof buf);
    int ranks[64], n = 0;
    for (int r = rank % 2; r < size && n < 64; r += 2) ranks[n++] = r;
    watchdog_format_ranks(ranks, n, "dp group", want, sizeof want);
    printf("  rank %d: %s\n", rank, buf);
    assert_string_equal(buf, want);
    /* the cached form: the same text, computed once per communicator */
    const char *cached = watchdog_peers_of(parity, "dp group");
    assert_string_equal(cached, want);
    assert_ptr_equal(watchdog_peers_of(parity, "dp group"), cached);
    assert_ptr_not_equal(watchdog_peers_of(MPI_COMM_SELF, "tp group"), cached);
    watchdog_forget_peers();
    MPI_Comm_free(&parity);
}

/* `test_watchdog --hang-demo` under mpirun -np N (N >= 2): the last rank never reaches the
 * barrier (it sleeps 60 s); the others wait in it under a 1 s watchdog. The job must end in
 * seconds with exit code 4 and the message naming the barrier, not hang for a minute. */
static int hang_demo(int argc, char **argv) {
    int rank, size;
    char peers[128];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    watchdog_group_peers(MPI_COMM_WORLD, MPI_COMM_WORLD, "world", peers, sizeof peers);
    if (rank == size - 1) sleep(60); /* the hung peer */
    watchdog_start(1.0, rank);
    watchdog_set_step(7);
    watchdog_enter("test barrier", peers);
    MPI_Barrier(MPI_COMM_WORLD);
    watchdog_leave();
    watchdog_stop();
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--hang-demo") == 0) return hang_demo(argc, argv);
    const struct CMUnitTest no_mpi[] = {
        cmocka_unit_test(watchdog_waits_shorter_than_timeout_0_5s_do_nothing),
        cmocka_unit_test(watchdog_wait_over_timeout_0_5s_exits_4_naming_phase_step_peers),
        cmocka_unit_test(watchdog_hang_hook_runs_and_is_waited_for_before_exit_4),
        cmocka_unit_test(watchdog_hang_hook_not_run_without_a_hang),
        cmocka_unit_test(watchdog_hang_hook_over_LLMT_HANG_HOOK_S_0_3s_is_killed),
        cmocka_unit_test(watchdog_enter_for_uses_its_own_timeout_0_3s),
        cmocka_unit_test(watchdog_timeout_0_is_disabled),
        cmocka_unit_test(watchdog_long_texts_are_cut_with_dots_and_copied),
        cmocka_unit_test(watchdog_stop_returns_within_0_5s_not_a_1s_poll),
        cmocka_unit_test(watchdog_enter_leave_pair_costs_under_1us),
    };
    const struct CMUnitTest with_mpi[] = {
        cmocka_unit_test(watchdog_format_ranks_lists_up_to_8_and_shortens_longer),
        cmocka_unit_test(watchdog_group_peers_names_world_ranks),
    };
    /* fork before MPI_Init: forking an MPI process is not portable */
    int failed = cmocka_run_group_tests_name("watchdog", no_mpi, NULL, NULL);
    MPI_Init(&argc, &argv);
    failed += cmocka_run_group_tests_name("watchdog peers", with_mpi, NULL, NULL);
    MPI_Finalize();
    return failed ? 1 : 0;
}
