/* test_shards.c — llm.c token shards: round trip through shard_write, and every malformed file
 * refused with a message naming the namelist key, the file and what is wrong.
 * Reference: the format in shards.h (256 x int32 header, magic 20240520, version 1, uint16). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/shards.h"

#define TEST_DIR_TAG "shards"
#include "test_tmpdir.h"

static void path_in_dir(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", dir, name);
}

/* Write raw bytes: a header with the given fields plus `body_bytes` bytes of tokens. */
static void write_raw(const char *name, int32_t magic, int32_t version, int32_t count,
                      size_t body_bytes, size_t header_bytes) {
    char path[512];
    path_in_dir(path, sizeof path, name);
    int32_t header[SHARD_HEADER_INTS] = {magic, version, count};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(header, 1, header_bytes, f), header_bytes);
    for (size_t i = 0; i < body_bytes; i++) fputc((int)(i & 0xff), f);
    fclose(f);
}

static void write_tokens(const char *name, size_t n, uint16_t first) {
    char path[512];
    path_in_dir(path, sizeof path, name);
    uint16_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)(first + i * 7);
    assert_int_equal(shard_write(path, tok, n), 0);
    free(tok);
}

/* Open `pattern` (relative to dir), expect failure, and check the message holds all of `parts`. */
static void expect_refused(const char *patterns, const char *part1, const char *part2) {
    shard_set_t set;
    char err[1024] = "";
    assert_int_not_equal(shard_set_open(&set, patterns, "train_files", err, sizeof err), 0);
    printf("    message: %s\n", err);
    assert_non_null(strstr(err, "train_files"));
    if (part1) assert_non_null(strstr(err, part1));
    if (part2) assert_non_null(strstr(err, part2));
    assert_int_equal(set.n_shards, 0);
    assert_null(set.shards);
}

static void shard_write_then_open_round_trips_tokens_exactly(void **state) {
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "a.bin");
    enum { N = 5000 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 2654435761u >> 16);
    assert_int_equal(shard_write(path, tok, N), 0);
    assert_int_equal(access(path, F_OK), 0);
    char tmp[520];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0); /* renamed away */

    shard_set_t set;
    char err[512] = "";
    assert_int_equal(shard_set_open(&set, path, "train_files", err, sizeof err), 0);
    assert_int_equal(set.n_shards, 1);
    assert_int_equal(set.n_tokens, N);
    assert_int_equal(set.shards[0].n_tokens, N);
    assert_string_equal(set.shards[0].path, path);
    assert_memory_equal(set.shards[0].tokens, tok, sizeof tok);
    const int32_t *h = set.shards[0].map;
    assert_int_equal(h[0], SHARD_MAGIC);
    assert_int_equal(h[1], SHARD_VERSION);
    assert_int_equal(h[2], N);
    for (int i = 3; i < SHARD_HEADER_INTS; i++) assert_int_equal(h[i], 0);
    assert_int_equal(set.shards[0].map_bytes, SHARD_HEADER_INTS * 4 + 2 * N);
    shard_set_advise(&set, true);
    shard_set_advise(&set, false);
    shard_set_close(&set);
    assert_int_equal(set.n_shards, 0);
}

static void bad_magic_is_refused_naming_found_and_expected(void **state) {
    (void)state;
    write_raw("bad.bin", 1234, 1, 10, 20, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "bad.bin");
    expect_refused(p, "bad.bin: bad magic 1234 (expected 20240520)", NULL);
}

static void llmc_model_file_is_recognised_by_its_magic(void **state) {
    (void)state;
    write_raw("gpt2_124M.bin", 20240326, 3, 10, 20, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "gpt2_124M.bin");
    expect_refused(p, "bad magic 20240326", "llm.c model weights");
}

static void unsupported_version_is_refused(void **state) {
    (void)state;
    write_raw("v2.bin", SHARD_MAGIC, 2, 10, 40, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "v2.bin");
    expect_refused(p, "v2.bin: unsupported shard version 2", "expected 1");
}

static void file_shorter_than_header_is_truncated_header(void **state) {
    (void)state;
    write_raw("short.bin", SHARD_MAGIC, 1, 10, 0, 100);
    char p[512];
    path_in_dir(p, sizeof p, "short.bin");
    expect_refused(p, "short.bin: truncated header", NULL);
}

static void short_body_says_tokens_announced_and_held(void **state) {
    (void)state;
    write_raw("cut.bin", SHARD_MAGIC, 1, 1000, 812 * 2, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "cut.bin");
    expect_refused(p, "cut.bin: truncated: header says 1000 tokens but file holds 812", NULL);
}

static void extra_bytes_after_body_are_refused_with_count(void **state) {
    (void)state;
    write_raw("long.bin", SHARD_MAGIC, 1, 10, 20 + 6, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "long.bin");
    expect_refused(p, "long.bin: has 6 extra bytes", NULL);
}

static void zero_token_shard_is_refused(void **state) {
    (void)state;
    write_raw("empty.bin", SHARD_MAGIC, 1, 0, 0, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "empty.bin");
    expect_refused(p, "empty.bin: shard holds zero tokens", NULL);
}

static void one_bad_file_among_good_ones_fails_the_set(void **state) {
    (void)state;
    write_tokens("d_00.bin", 100, 1);
    write_raw("d_01.bin", 42, 1, 10, 20, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "d_*.bin");
    expect_refused(p, "d_01.bin: bad magic 42", NULL);
}

/* Two patterns (blank and comma separated), each expanded sorted, overlaps dropped. */
static void two_patterns_expand_sorted_without_duplicates(void **state) {
    (void)state;
    write_tokens("train_002.bin", 30, 200);
    write_tokens("train_000.bin", 10, 0);
    write_tokens("train_001.bin", 20, 100);
    write_tokens("extra_b.bin", 50, 400);
    write_tokens("extra_a.bin", 40, 300);
    char patterns[1200];
    snprintf(patterns, sizeof patterns, "  %s/train_*.bin,%s/extra_*.bin %s/train_001.bin,", dir,
             dir, dir);
    shard_set_t set;
    char err[512] = "";
    assert_int_equal(shard_set_open(&set, patterns, "train_files", err, sizeof err), 0);
    const char *want[] = {"train_000.bin", "train_001.bin", "train_002.bin", "extra_a.bin",
                          "extra_b.bin"};
    const size_t want_n[] = {10, 20, 30, 40, 50};
    assert_int_equal(set.n_shards, 5);
    for (int i = 0; i < 5; i++) {
        const char *base = strrchr(set.shards[i].path, '/') + 1;
        if (strcmp(base, want[i]) != 0) printf("    shard %d: got %s want %s\n", i, base, want[i]);
        assert_string_equal(base, want[i]);
        assert_int_equal(set.shards[i].n_tokens, want_n[i]);
    }
    assert_int_equal(set.n_tokens, 150);
    assert_int_equal(set.shards[3].tokens[0], 300);
    shard_set_close(&set);
}

static void pattern_without_match_is_named_in_message(void **state) {
    (void)state;
    char p[512], want[600];
    path_in_dir(p, sizeof p, "nothing_*.bin");
    snprintf(want, sizeof want, "train_files: no file matches '%s'", p);
    expect_refused(p, want, NULL);
}

static void shard_write_into_missing_directory_fails_and_leaves_nothing(void **state) {
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "no_such_dir/x.bin");
    uint16_t tok[4] = {1, 2, 3, 4};
    errno = 0;
    assert_int_not_equal(shard_write(path, tok, 4), 0);
    assert_int_equal(errno, ENOENT);
    path_in_dir(path, sizeof path, "zero.bin");
    assert_int_not_equal(shard_write(path, tok, 0), 0); /* a shard holds at least one token */
    assert_int_not_equal(access(path, F_OK), 0);
}

static void empty_pattern_list_is_refused(void **state) {
    (void)state;
    expect_refused(" , ", "no file pattern given", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(shard_write_then_open_round_trips_tokens_exactly, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(bad_magic_is_refused_naming_found_and_expected, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(llmc_model_file_is_recognised_by_its_magic, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(unsupported_version_is_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(file_shorter_than_header_is_truncated_header, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(short_body_says_tokens_announced_and_held, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(extra_bytes_after_body_are_refused_with_count, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(zero_token_shard_is_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(one_bad_file_among_good_ones_fails_the_set, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(two_patterns_expand_sorted_without_duplicates, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(pattern_without_match_is_named_in_message, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(shard_write_into_missing_directory_fails_and_leaves_nothing, make_dir, remove_dir),
        cmocka_unit_test(empty_pattern_list_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
