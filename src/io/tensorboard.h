/* tensorboard.h — TensorBoard event files written directly (no TensorFlow, no protobuf library):
 * <dir>/events.out.tfevents.<secs>.<host>, a TFRecord stream of Event protobufs that TensorBoard
 * (and what imports its files: W&B, SwanLab) reads as it is being written.
 *
 * Framing of one record: uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
 * the Event bytes, uint32 masked CRC-32C of the Event; CRC-32C is Castagnoli's (reflected
 * polynomial 0x82F63B78), masked as ((crc >> 15) | (crc << 17)) + 0xa282ead8. The first Event
 * holds file_version "brain.Event:2". Each record is written with one fwrite and flushed, so a
 * killed process loses at most a torn last record, which readers skip.
 *
 * What is written mirrors metrics.jsonl by construction (io/metrics hands every record it writes
 * to tb_write_record): a record with a numeric "step" becomes one Event at that step whose
 * Summary has one Value per member: numbers as scalars (simple_value, float32), true/false as
 * scalars 1/0, strings (and arrays) as text (the "text" plugin's string tensor); null (a
 * non-finite number) is left out. Tags are the member names, prefixed "<kind>/" when the record
 * has a string member "kind" (e.g. "provenance/commit"). Records without "step" are not written.
 * Owns: the file, the encoding, the parser of our own flat JSON records. Uses: libc, core/.
 * Used by: io/metrics. */
#ifndef LLMT_TENSORBOARD_H
#define LLMT_TENSORBOARD_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tb_writer {
    FILE *f;             /* NULL: not writing */
    char path[1100];
} tb_writer_t;

/* Create a new event file in `dir` (which exists; earlier runs' files stay, as the metrics.jsonl
 * history does) and write its file_version record. 0, or -1 with errno. */
int tb_open(tb_writer_t *tb, const char *dir);
/* One metrics record, a JSON object `{...}`, as one Event with wall_time (seconds since the
 * epoch). 0 (also for a record without "step"); -1 with errno when writing failed; -2 when the
 * record is not JSON this parser reads. */
int tb_write_record(tb_writer_t *tb, const char *json, double wall_time);
void tb_close(tb_writer_t *tb);

/* The pieces, exposed for the unit tests. */
uint32_t tb_crc32c(const void *data, size_t n);
uint32_t tb_mask_crc(uint32_t crc);
size_t tb_varint(uint8_t out[10], uint64_t v); /* base-128 varint; returns its length */
/* out[n + 16] = the TFRecord framing of data[n]. */
void tb_frame(uint8_t *out, const uint8_t *data, size_t n);
/* The Event bytes of the file_version record (malloc'ed, *len bytes; free()). */
uint8_t *tb_encode_file_version(double wall_time, size_t *len);
/* The Event bytes of a metrics record (malloc'ed; free()), NULL with *len = 0 for a record
 * without "step", NULL with *len = 1 for one that does not parse. */
uint8_t *tb_encode_record(const char *json, double wall_time, size_t *len);
#endif
