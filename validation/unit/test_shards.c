/* test_shards.c — token shards: round trip through shard_write (atomic: no tmp file left, an
 * old file replaced whole), every malformed file refused with a message naming the namelist
 * key, the file and what is wrong, nanoGPT's raw format, and the token-id scan (the vectorised
 * max and search against a scalar loop; the first bad token's exact message; the parts of a
 * split scan). Reference: the formats in shards.h (llm.c: 256 x int32 header, magic 20240520,
 * version 1, uint16 tokens; nanoGPT: raw little-endian uint16). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    assert_int_not_equal(shard_set_open(&set, patterns, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
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
    assert_int_equal(shard_set_open(&set, path, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
    assert_int_equal(set.n_shards, 1);
    assert_int_equal(set.n_tokens, N);
    assert_int_equal(set.shards[0].n_tokens, N);
    assert_string_equal(set.shards[0].path, path);
    assert_memory_equal(set.shards[0].tokens, tok, sizeof tok);
    const int32_t *h = set.shards[0].map;
    assert_int_equal(h[0], SHARD_MAGIC);
    assert_int_equal(h[1], SHARD_VERSION_U16);
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
    write_raw("v3.bin", SHARD_MAGIC, 3, 10, 40, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "v3.bin");
    expect_refused(p, "v3.bin: unsupported shard version 3", "expected 1: uint16 ids, or 2: uint32 ids");
}

/* Version 2 (llm.c's Llama 3 shards): uint32 ids after the same header. Written, opened, read
 * back through the mapping and, independently, with fread of the file's bytes. */
static void version_2_shard_round_trips_uint32_ids_exactly(void **state) {
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "w.bin");
    enum { N = 3000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)i * 2654435761u % 2147483647u;
    tok[0] = 65535, tok[1] = 65536, tok[2] = 128255, tok[3] = 2147483646;
    assert_int_equal(shard_write_u32(path, tok, N), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    int32_t h[SHARD_HEADER_INTS];
    uint32_t body[N + 1];
    assert_int_equal(fread(h, sizeof h, 1, f), 1);
    assert_int_equal(fread(body, 4, N + 1, f), N); /* exactly N ids, nothing after */
    fclose(f);
    assert_int_equal(h[0], 20240520);
    assert_int_equal(h[1], 2);
    assert_int_equal(h[2], N);
    for (int i = 3; i < SHARD_HEADER_INTS; i++) assert_int_equal(h[i], 0);
    assert_memory_equal(body, tok, sizeof tok);
    shard_set_t set;
    char err[512] = "";
    assert_int_equal(shard_set_open(&set, path, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
    assert_int_equal(set.n_tokens, N);
    assert_int_equal(set.token_bytes, 4 * N);
    assert_int_equal(set.shards[0].width, 4);
    assert_null(set.shards[0].tokens);
    assert_memory_equal(set.shards[0].tokens32, tok, sizeof tok);
    assert_int_equal(set.shards[0].map_bytes, SHARD_HEADER_INTS * 4 + 4 * N);
    for (int i = 0; i < N; i++) assert_int_equal(shard_token(&set.shards[0], (size_t)i), tok[i]);
    assert_int_equal(shard_set_check_tokens(&set, 2147483647, 0, 1, err, sizeof err), 0);
    shard_set_close(&set);
}

/* A set may mix the versions: each shard keeps its width, the totals add up. */
static void a_set_mixes_version_1_and_version_2_shards(void **state) {
    (void)state;
    write_tokens("m_0.bin", 100, 3);
    char path[512];
    path_in_dir(path, sizeof path, "m_1.bin");
    uint32_t t[50];
    for (int i = 0; i < 50; i++) t[i] = 70000u + (uint32_t)i;
    assert_int_equal(shard_write_u32(path, t, 50), 0);
    shard_set_t set;
    char p[512], err[512] = "";
    path_in_dir(p, sizeof p, "m_*.bin");
    assert_int_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
    assert_int_equal(set.n_tokens, 150);
    assert_int_equal(set.token_bytes, 2 * 100 + 4 * 50);
    assert_int_equal(set.shards[0].width, 2);
    assert_int_equal(set.shards[1].width, 4);
    assert_int_equal(shard_token(&set.shards[0], 1), 3 + 7);
    assert_int_equal(shard_token(&set.shards[1], 49), 70049);
    assert_int_equal(shard_set_check_tokens(&set, 70050, 0, 1, err, sizeof err), 0);
    assert_int_not_equal(shard_set_check_tokens(&set, 70049, 0, 1, err, sizeof err), 0);
    assert_non_null(strstr(err, "m_1.bin: token 70049 at position 49 (token index in the shard) is "
                                ">= &model vocab_size = 70049"));
    shard_set_close(&set);
}

/* A header whose version disagrees with the width of the body: named, with both widths. */
static void version_disagreeing_with_the_body_width_is_refused(void **state) {
    (void)state;
    write_raw("v2_u16.bin", SHARD_MAGIC, 2, 10, 20, SHARD_HEADER_INTS * 4);
    write_raw("v1_u32.bin", SHARD_MAGIC, 1, 10, 40, SHARD_HEADER_INTS * 4);
    write_raw("v2_cut.bin", SHARD_MAGIC, 2, 10, 36, SHARD_HEADER_INTS * 4);
    char p[512];
    path_in_dir(p, sizeof p, "v2_u16.bin");
    expect_refused(p, "v2_u16.bin: header version 2 announces 10 uint32 ids (4 bytes each) but the "
                   "file holds 20 bytes of ids, 10 uint16 ids", "version field disagrees");
    path_in_dir(p, sizeof p, "v1_u32.bin");
    expect_refused(p, "v1_u32.bin: header version 1 announces 10 uint16 ids (2 bytes each) but the "
                   "file holds 40 bytes of ids, 10 uint32 ids", "version field disagrees");
    path_in_dir(p, sizeof p, "v2_cut.bin");
    expect_refused(p, "v2_cut.bin: truncated: header says 10 tokens but file holds 9 (version 2: "
                   "uint32 ids)", NULL);
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
    assert_int_equal(shard_set_open(&set, patterns, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
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

/* ---- nanoGPT's raw format ----------------------------------------------------------------- */

static void write_bytes(const char *name, const void *bytes, size_t n) {
    char path[512];
    path_in_dir(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

/* nanoGPT's prepare.py: np.array(ids, dtype=np.uint16).tofile('train.bin'), no header. */
static void write_nanogpt(const char *name, size_t n) {
    uint16_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)((i * 7919) % 50257);
    write_bytes(name, tok, n * sizeof *tok);
    free(tok);
}

static void nanogpt_file_opens_with_format_nanogpt_tokens_exact(void **state) {
    (void)state;
    write_nanogpt("train.bin", 3000);
    char p[512], err[512] = "";
    path_in_dir(p, sizeof p, "train.bin");
    shard_set_t set;
    assert_int_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_NANOGPT, err, sizeof err), 0);
    assert_int_equal(set.n_tokens, 3000);
    for (size_t i = 0; i < 3000; i++) assert_int_equal(set.shards[0].tokens[i], (i * 7919) % 50257);
    assert_int_equal(shard_set_check_tokens(&set, 50257, 0, 1, err, sizeof err), 0);
    shard_set_close(&set);
}

static void nanogpt_file_without_format_key_is_refused_suggesting_it(void **state) {
    (void)state;
    write_nanogpt("train.bin", 3000);
    write_nanogpt("tiny.bin", 100); /* shorter than an llm.c header */
    char p[512];
    path_in_dir(p, sizeof p, "train.bin");
    expect_refused(p, "train.bin: bad magic", "set &data format = 'nanogpt'");
    path_in_dir(p, sizeof p, "tiny.bin");
    expect_refused(p, "tiny.bin: bad magic", "set &data format = 'nanogpt'");
    /* format = 'llmc' says no more than the header is wrong */
    shard_set_t set;
    char err[512] = "";
    path_in_dir(p, sizeof p, "train.bin");
    assert_int_not_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_LLMC, err, sizeof err), 0);
    assert_non_null(strstr(err, "bad magic"));
    assert_null(strstr(err, "nanogpt"));
}

static void nanogpt_format_refuses_odd_size_and_an_llmc_header(void **state) {
    (void)state;
    const unsigned char odd[5] = {1, 0, 2, 0, 3};
    write_bytes("odd.bin", odd, sizeof odd);
    write_tokens("llmc.bin", 100, 0);
    shard_set_t set;
    char p[512], err[512] = "";
    path_in_dir(p, sizeof p, "odd.bin");
    assert_int_not_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_NANOGPT, err, sizeof err), 0);
    printf("    message: %s\n", err);
    assert_non_null(strstr(err, "odd.bin: holds 5 bytes, an odd number"));
    path_in_dir(p, sizeof p, "llmc.bin");
    assert_int_not_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_NANOGPT, err, sizeof err), 0);
    printf("    message: %s\n", err);
    assert_non_null(strstr(err, "llmc.bin: starts with an llm.c shard header"));
    assert_non_null(strstr(err, "use format = 'auto' or 'llmc'"));
    assert_int_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_LLMC, err, sizeof err), 0);
    shard_set_close(&set);
}

static void empty_file_is_refused_in_every_format(void **state) {
    (void)state;
    write_bytes("zero.bin", "", 0);
    const cfg_data_format_t formats[] = {CFG_FORMAT_AUTO, CFG_FORMAT_LLMC, CFG_FORMAT_NANOGPT};
    for (int f = 0; f < 3; f++) {
        shard_set_t set;
        char p[512], err[512] = "";
        path_in_dir(p, sizeof p, "zero.bin");
        assert_int_not_equal(shard_set_open(&set, p, "train_files", formats[f], err, sizeof err), 0);
        assert_non_null(strstr(err, "zero.bin: is empty (0 bytes)"));
    }
}

/* ---- the token-id scan -------------------------------------------------------------------- */

static uint16_t max_scalar(const uint16_t *t, size_t n) {
    uint16_t m = 0;
    for (volatile size_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    return m;
}

/* Every length 0..300 at every alignment 0..7, plus block-sized runs: max and first-at-least
 * equal a plain (volatile, unvectorised) loop's. */
static void vectorised_max_and_search_equal_a_scalar_loop(void **state) {
    (void)state;
    enum { N = 100000 };
    uint16_t *t = malloc(N * sizeof *t);
    uint32_t x = 1;
    for (size_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (uint16_t)(x >> 16);
    }
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 300; n++) {
            assert_int_equal(shard_max_token(t + off, n), max_scalar(t + off, n));
            const int limits[] = {0, 1, 30000, 65000, 65535, 65536, 70000};
            for (int l = 0; l < 7; l++) {
                size_t want = n;
                for (size_t i = 0; i < n; i++)
                    if (t[off + i] >= limits[l]) {
                        want = i;
                        break;
                    }
                assert_int_equal(shard_find_token_at_least(t + off, n, limits[l]), want);
            }
        }
    for (size_t i = 0; i < N; i++) t[i] &= 0x3fff; /* all < 16384 ... */
    t[N - 3] = 40000;                               /* ... but one, in the last block */
    assert_int_equal(shard_max_token(t, N), 40000);
    assert_int_equal(shard_find_token_at_least(t, N, 16384), N - 3);
    assert_int_equal(shard_find_token_at_least(t, N, 40001), N);
    free(t);
}

/* The uint32 scan against a plain loop, limits around 2^16 and up to INT_MAX. */
static void vectorised_u32_max_and_search_equal_a_scalar_loop(void **state) {
    (void)state;
    enum { N = 70000 };
    uint32_t *t = malloc(N * sizeof *t), x = 7;
    for (size_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = x >> (i % 3 == 0 ? 1 : 14); /* some ids up to 2^31 - 1, most below 2^18 */
    }
    const int limits[] = {0, 1, 65536, 200000, 1 << 30, 2147483647};
    for (size_t off = 0; off < 4; off++)
        for (size_t n = 0; n <= 200; n++) {
            uint32_t m = 0;
            for (volatile size_t i = 0; i < n; i++) m = t[off + i] > m ? t[off + i] : m;
            assert_int_equal(shard_max_token_u32(t + off, n), m);
            for (int l = 0; l < 6; l++) {
                size_t want = n;
                for (size_t i = 0; i < n && want == n; i++)
                    if (t[off + i] >= (uint32_t)limits[l]) want = i;
                assert_int_equal(shard_find_token_at_least_u32(t + off, n, limits[l]), want);
            }
        }
    for (size_t i = 0; i < N; i++) t[i] &= 0xffff;
    t[N - 5] = 128255;
    assert_int_equal(shard_find_token_at_least_u32(t, N, 65536), N - 5);
    assert_int_equal(shard_find_token_at_least_u32(t, N, 128256), N);
    free(t);
}

/* A set of 4 shards of 1000 tokens, all 7 except `bad` tokens of id `id` at global positions. */
static void open_set_with_bad(shard_set_t *set, const size_t *bad, int n_bad, uint16_t id) {
    for (int s = 0; s < 4; s++) {
        uint16_t tok[1000];
        for (int i = 0; i < 1000; i++) tok[i] = 7;
        for (int b = 0; b < n_bad; b++)
            if (bad[b] / 1000 == (size_t)s) tok[bad[b] % 1000] = id;
        char path[512], name[32];
        snprintf(name, sizeof name, "s_%d.bin", s);
        path_in_dir(path, sizeof path, name);
        assert_int_equal(shard_write(path, tok, 1000), 0);
    }
    char p[512], err[512] = "";
    path_in_dir(p, sizeof p, "s_*.bin");
    assert_int_equal(shard_set_open(set, p, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
}

/* The message names the file, the token and its index in the shard; ids up to vocab_size - 1
 * pass; 65535 is caught for any vocab_size below 65536. */
static void scan_names_file_position_token_and_vocab_size(void **state) {
    (void)state;
    const size_t bad[] = {2345, 3999};
    shard_set_t set;
    open_set_with_bad(&set, bad, 2, 50257);
    char err[512] = "", want[700];
    assert_int_not_equal(shard_set_check_tokens(&set, 50257, 0, 1, err, sizeof err), 0);
    snprintf(want, sizeof want, "train_files: %s/s_2.bin: token 50257 at position 345 (token index in "
             "the shard) is >= &model vocab_size = 50257", dir);
    assert_string_equal(err, want);
    assert_int_equal(shard_set_check_tokens(&set, 50258, 0, 1, err, sizeof err), 0);
    assert_int_equal(shard_set_check_tokens(&set, 65536, 0, 1, err, sizeof err), 0);
    assert_int_not_equal(shard_set_check_tokens(&set, 8, 0, 1, err, sizeof err), 0);
    snprintf(want, sizeof want, "%s/s_2.bin: token 50257 at position 345", dir);
    assert_non_null(strstr(err, want));
    shard_set_close(&set);
    const size_t last[] = {3999};
    open_set_with_bad(&set, last, 1, 65535);
    assert_int_not_equal(shard_set_check_tokens(&set, 65535, 0, 1, err, sizeof err), 0);
    assert_non_null(strstr(err, "s_3.bin: token 65535 at position 999 "));
    shard_set_close(&set);
}

/* Split over n parts: part p sees exactly the bad tokens in its contiguous range, the parts
 * cover the set once, and the lowest failing part reports the set's first bad token. */
static void split_scan_parts_cover_the_set_in_order(void **state) {
    (void)state;
    const size_t bad[] = {999, 1000, 2500};
    shard_set_t set;
    open_set_with_bad(&set, bad, 3, 600);
    char err[512] = "";
    for (int n = 1; n <= 9; n++) {
        int lowest = -1;
        for (int p = 0; p < n; p++) {
            size_t begin = 4000 / (size_t)n * (size_t)p + ((size_t)p < 4000 % (size_t)n ? (size_t)p : 4000 % (size_t)n);
            size_t end = begin + 4000 / (size_t)n + ((size_t)p < 4000 % (size_t)n);
            bool want_bad = false;
            size_t first = 0;
            for (int b = 2; b >= 0; b--)
                if (bad[b] >= begin && bad[b] < end) want_bad = true, first = bad[b];
            err[0] = '\0';
            int rc = shard_set_check_tokens(&set, 600, p, n, err, sizeof err);
            if ((rc != 0) != want_bad) fail_msg("n %d part %d [%zu, %zu): rc %d", n, p, begin, end, rc);
            if (rc != 0) {
                char want[64];
                snprintf(want, sizeof want, "s_%zu.bin: token 600 at position %zu ", first / 1000, first % 1000);
                if (!strstr(err, want)) fail_msg("n %d part %d: %s lacks %s", n, p, err, want);
                if (lowest < 0) {
                    lowest = p;
                    assert_non_null(strstr(err, "s_0.bin: token 600 at position 999 "));
                }
            }
        }
        assert_true(lowest >= 0);
    }
    shard_set_close(&set);
}

/* shard_write goes through core/fileio: replacing a shard leaves the new content whole and no
 * tmp file; a failed write leaves the old file as it was. */
static void shard_write_replaces_atomically_and_keeps_the_old_file_on_failure(void **state) {
    (void)state;
    write_tokens("r.bin", 100, 1);
    write_tokens("r.bin", 50, 9);
    char p[512], tmp[520], err[512] = "";
    path_in_dir(p, sizeof p, "r.bin");
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    assert_int_not_equal(access(tmp, F_OK), 0);
    shard_set_t set;
    assert_int_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
    assert_int_equal(set.n_tokens, 50);
    assert_int_equal(set.shards[0].tokens[1], 9 + 7);
    shard_set_close(&set);
    /* a tmp path that cannot be created (a directory is in the way): the old file stays */
    assert_int_equal(mkdir(tmp, 0755), 0);
    uint16_t t[3] = {1, 2, 3};
    assert_int_not_equal(shard_write(p, t, 3), 0);
    assert_int_equal(shard_set_open(&set, p, "train_files", CFG_FORMAT_AUTO, err, sizeof err), 0);
    assert_int_equal(set.n_tokens, 50);
    shard_set_close(&set);
    rmdir(tmp);
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
        cmocka_unit_test_setup_teardown(version_2_shard_round_trips_uint32_ids_exactly, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_set_mixes_version_1_and_version_2_shards, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(version_disagreeing_with_the_body_width_is_refused, make_dir, remove_dir),
        cmocka_unit_test(vectorised_u32_max_and_search_equal_a_scalar_loop),
        cmocka_unit_test_setup_teardown(file_shorter_than_header_is_truncated_header, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(short_body_says_tokens_announced_and_held, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(extra_bytes_after_body_are_refused_with_count, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(zero_token_shard_is_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(one_bad_file_among_good_ones_fails_the_set, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(two_patterns_expand_sorted_without_duplicates, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(pattern_without_match_is_named_in_message, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(shard_write_into_missing_directory_fails_and_leaves_nothing, make_dir, remove_dir),
        cmocka_unit_test(empty_pattern_list_is_refused),
        cmocka_unit_test_setup_teardown(nanogpt_file_opens_with_format_nanogpt_tokens_exact, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(nanogpt_file_without_format_key_is_refused_suggesting_it, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(nanogpt_format_refuses_odd_size_and_an_llmc_header, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(empty_file_is_refused_in_every_format, make_dir, remove_dir),
        cmocka_unit_test(vectorised_max_and_search_equal_a_scalar_loop),
        cmocka_unit_test_setup_teardown(scan_names_file_position_token_and_vocab_size, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(split_scan_parts_cover_the_set_in_order, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(shard_write_replaces_atomically_and_keeps_the_old_file_on_failure, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
