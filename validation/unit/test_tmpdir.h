/* test_tmpdir.h — a fresh temporary directory per test, as cmocka setup/teardown functions.
 * Each test program is its own executable: define TEST_DIR_TAG (a string naming the test) and
 * include this once; `dir` holds the directory's path while a test runs. */
#ifndef LLMT_TEST_TMPDIR_H
#define LLMT_TEST_TMPDIR_H
#include <stdio.h>
#include <stdlib.h>

static char dir[256];

static int make_dir(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/llmt_test_" TEST_DIR_TAG "_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}
#endif
