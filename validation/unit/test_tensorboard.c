/* test_tensorboard.c — the TensorBoard writer's pieces against known values, exactly:
 * CRC-32C against the published check value ("123456789" -> 0xE3069283) and RFC 3720's vectors;
 * masking, TFRecord framing and protobuf bytes against bytes worked out by hand from the wire
 * format (and the masked CRCs computed by an independent bitwise Python CRC-32C); the JSON
 * record rules (scalars, booleans, null, strings as text, "kind" prefix, escapes, no step).
 * The whole file read by tensorboard itself: validation/e2e/tensorboard_roundtrip.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "io/tensorboard.h"
#define TEST_DIR_TAG "tensorboard"
#include "test_tmpdir.h"

/* Bytes equal, else the first difference and both sequences. */
static void assert_bytes(const uint8_t *got, size_t n_got, const uint8_t *want, size_t n_want) {
    size_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    if (i == n_got && n_got == n_want) return;
    char g[400] = "", w[400] = "";
    for (size_t k = 0; k < n_got && k < 120; k++) sprintf(g + strlen(g), "%02x ", got[k]);
    for (size_t k = 0; k < n_want && k < 120; k++) sprintf(w + strlen(w), "%02x ", want[k]);
    fail_msg("bytes differ at %zu (lengths %zu, %zu)\n  got:  %s\n  want: %s", i, n_got, n_want, g, w);
}

static void crc32c_matches_check_value_and_rfc3720_vectors(void **state) {
    (void)state;
    uint8_t zeros[32] = {0}, ramp[32];
    for (int i = 0; i < 32; i++) ramp[i] = (uint8_t)i;
    assert_int_equal(tb_crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(tb_crc32c("", 0), 0u);
    assert_int_equal(tb_crc32c(zeros, 32), 0x8A9136AAu);
    assert_int_equal(tb_crc32c(ramp, 32), 0x46DD794Eu);
    /* not zlib's CRC-32 (0xCBF43926 for the same input) */
    assert_true(tb_crc32c("123456789", 9) != 0xCBF43926u);
}

static void mask_rotates_right_15_and_adds_the_constant(void **state) {
    (void)state;
    assert_int_equal(tb_mask_crc(0), 0xa282ead8u);
    assert_int_equal(tb_mask_crc(0xE3069283u), 0xc78ab0e5u);
}

static void varints_are_base_128_little_endian(void **state) {
    (void)state;
    const struct { uint64_t v; uint8_t bytes[10]; size_t n; } cases[] = {
        {0, {0x00}, 1}, {1, {0x01}, 1}, {127, {0x7f}, 1}, {128, {0x80, 0x01}, 2},
        {300, {0xac, 0x02}, 2}, {16384, {0x80, 0x80, 0x01}, 3},
        {UINT64_MAX, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t out[10];
        size_t n = tb_varint(out, cases[i].v);
        assert_bytes(out, n, cases[i].bytes, cases[i].n);
    }
}

static void frame_is_length_crc_data_crc(void **state) {
    (void)state;
    uint8_t out[3 + 16];
    tb_frame(out, (const uint8_t *)"abc", 3);
    const uint8_t want[] = {0x03, 0, 0, 0, 0, 0, 0, 0,   /* uint64 LE length */
                            0xb0, 0x99, 0x49, 0x0e,      /* masked CRC-32C of those 8 bytes */
                            'a', 'b', 'c',
                            0x6e, 0x57, 0xf1, 0x21};     /* masked CRC-32C of "abc" */
    assert_bytes(out, sizeof out, want, sizeof want);
}

static void file_version_event_bytes(void **state) {
    (void)state;
    size_t n;
    uint8_t *ev = tb_encode_file_version(1.5, &n);
    const uint8_t want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, /* wall_time 1 (double 1.5) */
                            0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    assert_bytes(ev, n, want, sizeof want);
    free(ev);
}

static void scalar_record_bytes(void **state) {
    (void)state;
    size_t n;
    uint8_t *ev = tb_encode_record("{\"step\":3,\"loss\":2.5}", 0.0, &n);
    const uint8_t want[] = {0x09, 0, 0, 0, 0, 0, 0, 0, 0, /* wall_time 0.0 */
                            0x10, 0x03,                   /* step 3 */
                            0x2a, 13,                     /* summary */
                            0x0a, 11,                     /* value */
                            0x0a, 4, 'l', 'o', 's', 's',  /* tag */
                            0x15, 0x00, 0x00, 0x20, 0x40}; /* simple_value 2.5f */
    assert_bytes(ev, n, want, sizeof want);
    free(ev);
}

static void text_record_bytes_with_escapes_decoded(void **state) {
    (void)state;
    size_t n;
    uint8_t *ev = tb_encode_record("{\"step\":1, \"e\":\"a\\\"\\u00e9\"}", 0.0, &n);
    const uint8_t value[] = {0x0a, 1, 'e',                                  /* tag */
                             0x42, 10, 0x08, 0x07, 0x12, 0x00,               /* tensor: DT_STRING, scalar */
                             0x42, 4, 'a', '"', 0xc3,                        /* string_val 'a"é' (4 bytes) */
                             0xa9, 0x4a, 8, 0x0a, 6, 0x0a, 4, 't', 'e', 'x', 't'}; /* metadata */
    uint8_t want[64] = {0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x01, 0x2a, sizeof value + 2, 0x0a, sizeof value};
    memcpy(want + 15, value, sizeof value);
    assert_bytes(ev, n, want, 15 + sizeof value);
    free(ev);
}

/* The values of an encoded record as "tag=kind" words, by walking its bytes (one-byte lengths). */
static void value_tags(const uint8_t *ev, size_t n, char *out) {
    size_t p = 9 + 2; /* wall_time, step (< 128) */
    assert_true(ev[p] == 0x2a);
    p += 2;
    out[0] = '\0';
    while (p < n) {
        assert_true(ev[p] == 0x0a);
        size_t len = ev[p + 1], q = p + 2;
        assert_true(ev[q] == 0x0a);
        sprintf(out + strlen(out), "%.*s=%s ", ev[q + 1], (const char *)ev + q + 2,
                ev[q + 2 + ev[q + 1]] == 0x15 ? "scalar" : "text");
        p += 2 + len;
    }
}

static void record_rules_kind_prefix_booleans_null_arrays(void **state) {
    (void)state;
    size_t n;
    char tags[256];
    uint8_t *ev = tb_encode_record("{\"kind\":\"val\",\"step\":4,\"x\":1e3,\"ok\":true,\"bad\":null,"
                                   "\"hosts\":[\"a\",\"b\"],\"why\":\"s\"}", 0.0, &n);
    assert_non_null(ev);
    value_tags(ev, n, tags);
    assert_string_equal(tags, "val/x=scalar val/ok=scalar val/hosts=text val/why=text ");
    free(ev);
    /* no step: nothing written; not JSON: refused */
    assert_null(tb_encode_record("{\"kind\":\"x\",\"a\":1}", 0.0, &n));
    assert_int_equal(n, 0);
    const char *bad[] = {"{\"step\":1,", "{\"step\":1,\"a\":}", "[1]", "{\"step\":1} x", "{\"a\":\"\\q\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(tb_encode_record(bad[i], 0.0, &n));
        if (n != 1) fail_msg("'%s' was not refused", bad[i]);
    }
}

static void open_writes_the_framed_file_version_and_keeps_old_files(void **state) {
    (void)state;
    char old[400], path[1200];
    snprintf(old, sizeof old, "%s/events.out.tfevents.1.oldhost", dir);
    FILE *f = fopen(old, "w");
    fclose(f);
    tb_writer_t tb;
    assert_int_equal(tb_open(&tb, dir), 0);
    assert_int_equal(access(old, F_OK), 0); /* an earlier run's events stay, like its metrics */
    assert_int_equal(tb_write_record(&tb, "{\"step\":2,\"loss\":1}", 10.0), 0);
    assert_int_equal(tb_write_record(&tb, "{\"no_step\":1}", 10.0), 0);
    snprintf(path, sizeof path, "%s", tb.path);
    tb_close(&tb);
    f = fopen(path, "rb");
    uint8_t buf[256];
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t n1, n2;
    uint8_t *fv = tb_encode_file_version(0.0, &n1), *rec = tb_encode_record("{\"step\":2,\"loss\":1}", 10.0, &n2);
    assert_int_equal(got, n1 + 16 + n2 + 16); /* two records, the step-less one not written */
    uint8_t want[256];
    tb_frame(want, rec, n2);
    assert_bytes(buf + n1 + 16, n2 + 16, want, n2 + 16);
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | buf[i];
    assert_int_equal(len, n1);
    assert_memory_equal(buf + 12 + 9, fv + 9, n1 - 9); /* file_version after its wall_time */
    free(fv);
    free(rec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc32c_matches_check_value_and_rfc3720_vectors),
        cmocka_unit_test(mask_rotates_right_15_and_adds_the_constant),
        cmocka_unit_test(varints_are_base_128_little_endian),
        cmocka_unit_test(frame_is_length_crc_data_crc),
        cmocka_unit_test(file_version_event_bytes),
        cmocka_unit_test(scalar_record_bytes),
        cmocka_unit_test(text_record_bytes_with_escapes_decoded),
        cmocka_unit_test(record_rules_kind_prefix_booleans_null_arrays),
        cmocka_unit_test_setup_teardown(open_writes_the_framed_file_version_and_keeps_old_files,
                                        make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
