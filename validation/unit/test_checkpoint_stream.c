/* test_checkpoint_stream.c — io/checkpoint's serial tensor-by-tensor reader and writer (what
 * llmmerge uses): a file written one tensor at a time reads back bit-exactly with its root
 * attributes, sorted tensor list, shapes and the long-namelist /config dataset; a flipped bit
 * fails the checksum, a non-finite value and a missing file are refused with their messages,
 * and an abandoned write leaves no file. Reference: the values written (exact). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <math.h>
#include <mpi.h>
#include "core/alloc.h"
#include "io/checkpoint.h"
#define TEST_DIR_TAG "ckpt_stream"
#include "test_tmpdir.h"

static const ckpt_file_meta_t model = {.vocab_size = 10, .padded_vocab = 16, .n_layer = 1, .n_head = 2,
                                       .d_model = 4, .d_ff = 16, .seq_len = 8};

/* Writes b [3] and a [2, 5] (out of name order) with the values i * 0.25 - 1, a[9] = bad_value. */
static void write_file(const char *path, const char *config, float bad_value) {
    ckpt_stream_info_t info = {.model = &model, .step = 7, .seed = 3, .run_id = "abc", .config = config,
                               .method = "linear", .inputs_json = "[]", .parameters = "&merge /"};
    ckpt_stream_t out;
    char err[512];
    if (ckpt_stream_create(&out, path, &info, err, sizeof err) != 0) fail_msg("%s", err);
    ckpt_file_tensor_t b = {.name = "b", .ndim = 1, .dims = {3, 1, 1}, .numel = 3};
    ckpt_file_tensor_t a = {.name = "a", .ndim = 2, .dims = {2, 5, 1}, .numel = 10};
    float x[10];
    for (int i = 0; i < 10; i++) x[i] = (float)i * 0.25f - 1;
    if (ckpt_stream_write(&out, &b, x, err, sizeof err) != 0) fail_msg("%s", err);
    x[9] = bad_value;
    if (ckpt_stream_write(&out, &a, x, err, sizeof err) != 0) fail_msg("%s", err);
    if (ckpt_stream_publish(&out, err, sizeof err) != 0) fail_msg("%s", err);
}

static void tensors_round_trip_bit_exactly_with_their_attributes(void **state) {
    (void)state;
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/w.h5", dir);
    char *config = xcalloc(70001, 1); /* longer than an attribute: the /config dataset */
    memset(config, 'x', 70000);
    write_file(path, config, 1.25f);
    assert_int_equal(access(path, F_OK), 0);
    hid_t f;
    ckpt_file_meta_t m;
    if (ckpt_file_open(path, "in", &f, &m, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(m.step, 7);
    assert_int_equal(m.padded_vocab, 16);
    assert_string_equal(m.kind, "weights");
    assert_string_equal(m.run_id, "abc");
    char *text = ckpt_file_config(f);
    assert_string_equal(text, config);
    xfree(text);
    xfree(config);
    ckpt_file_tensor_t *t;
    int n;
    if (ckpt_file_tensors(f, "in", &t, &n, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(n, 2);
    assert_string_equal(t[0].name, "a"); /* sorted by name */
    assert_int_equal(t[0].ndim, 2);
    assert_int_equal(t[0].dims[1], 5);
    float x[10];
    if (ckpt_file_read_tensor(f, "in", &t[0], x, err, sizeof err) != 0) fail_msg("%s", err);
    for (int i = 0; i < 9; i++) assert_true(x[i] == (float)i * 0.25f - 1);
    assert_true(x[9] == 1.25f);
    xfree(t);
    H5Fclose(f);
}

static void non_finite_values_and_missing_files_are_refused(void **state) {
    (void)state;
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/nan.h5", dir);
    write_file(path, "", NAN);
    hid_t f;
    ckpt_file_meta_t m;
    if (ckpt_file_open(path, "models(1)", &f, &m, err, sizeof err) != 0) fail_msg("%s", err);
    ckpt_file_tensor_t *t;
    int n;
    if (ckpt_file_tensors(f, "models(1)", &t, &n, err, sizeof err) != 0) fail_msg("%s", err);
    float x[10];
    assert_int_equal(ckpt_file_read_tensor(f, "models(1)", &t[0], x, err, sizeof err), -1);
    assert_string_equal(err, "models(1): tensor /model/a holds NaN at element 9: a diverged model cannot be merged");
    xfree(t);
    H5Fclose(f);
    snprintf(path, sizeof path, "%s/none.h5", dir);
    assert_int_equal(ckpt_file_open(path, "base", &f, &m, err, sizeof err), -1);
    assert_string_equal(err, "base: cannot read: No such file or directory");
}

static void an_abandoned_write_leaves_no_file(void **state) {
    (void)state;
    char path[300], tmp[310], err[512];
    snprintf(path, sizeof path, "%s/gone.h5", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ckpt_stream_info_t info = {.model = &model, .run_id = "r", .config = "", .method = "linear",
                               .inputs_json = "[]", .parameters = ""};
    ckpt_stream_t out;
    if (ckpt_stream_create(&out, path, &info, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(access(tmp, F_OK), 0);
    ckpt_stream_abandon(&out);
    assert_int_not_equal(access(tmp, F_OK), 0);
    assert_int_not_equal(access(path, F_OK), 0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(tensors_round_trip_bit_exactly_with_their_attributes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(non_finite_values_and_missing_files_are_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(an_abandoned_write_leaves_no_file, make_dir, remove_dir),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
