/* test_ops_devsim.c — the simulated device (kernels/cpu/ops_devsim.c) catches what would crash on a
 * GPU and changes no number: host code that reads or writes device memory outside an op dies at
 * once with the address and exit 70 (a forked child tries it); an op handed a host buffer dies
 * naming the op and the argument; copies in and out and the ops themselves give the CPU backend's
 * bits; freed blocks are reused. Reference: the CPU backend (ops_cpu) on the same inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <mpi.h>
#include "kernels/cpu/ops_devsim.h"
#include "kernels/ops.h"

static const ops_t *dev, *cpu;

/* Run f in a child with stderr in a pipe: its exit status and what it wrote. */
static int in_child(void (*f)(void), char *err, size_t len) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        devsim_catch_faults(); /* cmocka's own SIGSEGV handler is installed during a test */
        f();
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < len && (r = read(fds[0], err + got, len - 1 - got)) > 0) got += (size_t)r;
    err[got] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void host_reads_device_memory(void) {
    float *x = dev->alloc(64 * sizeof(float), 0);
    volatile float v = x[3]; /* a bug: no to_host */
    (void)v;
}

static void host_writes_device_memory(void) {
    float *x = dev->alloc(1000 * sizeof(float), 0);
    x[999] = 1.0f;
}

static void op_gets_a_host_buffer(void) {
    float *x = dev->alloc(16 * sizeof(float), 0), host[16] = {0};
    dev->add(x, x, host, 16);
}

static void host_access_outside_an_op_dies_with_the_address(void **state) {
    (void)state;
    char err[4096];
    assert_int_equal(in_child(host_reads_device_memory, err, sizeof err), 70);
    assert_non_null(strstr(err, "devsim: host code touched device memory at"));
    assert_non_null(strstr(err, "the call stack"));
    assert_int_equal(in_child(host_writes_device_memory, err, sizeof err), 70);
    assert_non_null(strstr(err, "devsim: host code touched device memory at"));
}

static void an_op_given_host_memory_names_the_op_and_argument(void **state) {
    (void)state;
    char err[4096];
    assert_int_not_equal(in_child(op_gets_a_host_buffer, err, sizeof err), 0);
    assert_non_null(strstr(err, "add"));
    assert_non_null(strstr(err, "argument 'b'"));
    assert_non_null(strstr(err, "is host memory, not device memory"));
}

static void copies_and_ops_give_the_cpu_backends_bits(void **state) {
    (void)state;
    enum { N = 8, C = 16, OC = 24 };
    float hx[N * C], hw[OC * C], hb[OC], want[N * OC], got[N * OC];
    for (int i = 0; i < N * C; i++) hx[i] = (float)((i * 37) % 101 - 50) / 17.0f;
    for (int i = 0; i < OC * C; i++) hw[i] = (float)((i * 53) % 89 - 44) / 23.0f;
    for (int i = 0; i < OC; i++) hb[i] = (float)i / 7.0f;
    cpu->matmul_forward(want, hx, hw, hb, N, C, OC);
    cpu->gelu_forward(want, want, N * OC);
    float *x = dev->alloc(sizeof hx, 0), *w = dev->alloc(sizeof hw, 0), *b = dev->alloc(sizeof hb, 0);
    float *y = dev->alloc(sizeof want, 0);
    assert_true(devsim_contains(x) && devsim_contains(y) && !devsim_contains(hx));
    dev->to_device(x, hx, sizeof hx);
    dev->to_device(w, hw, sizeof hw);
    dev->to_device(b, hb, sizeof hb);
    dev->matmul_forward(y, x, w, b, N, C, OC);
    dev->gelu_forward(y, y, N * OC);
    dev->to_host(got, y, sizeof got);
    assert_memory_equal(got, want, sizeof got);
    /* the sum of squares comes back to the host as a value, like the GPU's */
    assert_true(dev->sumsq(y, N * OC) == cpu->sumsq(want, N * OC));
    dev->free(y);
    float *again = dev->alloc(sizeof want, 0);
    assert_ptr_equal(again, y); /* the freed block, reused */
    dev->free(again), dev->free(x), dev->free(w), dev->free(b);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    cpu = ops_cpu();
    dev = ops_devsim(cpu, (size_t)64 << 20);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_access_outside_an_op_dies_with_the_address),
        cmocka_unit_test(an_op_given_host_memory_names_the_op_and_argument),
        cmocka_unit_test(copies_and_ops_give_the_cpu_backends_bits),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
