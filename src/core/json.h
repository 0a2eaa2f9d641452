/* json.h — the one JSON string writer: a C string as the contents of a JSON string.
 * Owns: the escaping every JSON file llmtrain and its tools write goes through (--keys,
 * run.json and the provenance record, llmprep's manifest, llmmerge's provenance). '"' and '\\'
 * get a backslash, a newline is \n (namelist text stays readable), every other byte below 0x20
 * is \u00XX; everything else, UTF-8 included, is copied as it is. Uses: nothing but libc.
 * Used by: config/, core/provenance.c, tools/. */
#ifndef LLMT_JSON_H
#define LLMT_JSON_H
#include <stddef.h>
#include <stdio.h>

/* The escaped contents of s (no quotes) into buf, NUL-terminated, snprintf-like: returns the
 * length the whole escape needs (without the NUL), writes what fits of it in size bytes, and
 * never cuts an escape sequence in half (buf may be NULL when size is 0, to measure). */
size_t json_escape(char *buf, size_t size, const char *s);
/* s as a JSON string, quotes included, to out. */
void json_write_string(FILE *out, const char *s);
#endif
