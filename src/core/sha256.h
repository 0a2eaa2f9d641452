/* sha256.h — SHA-256 (FIPS 180-4) of buffers and whole files, for provenance: the merged weights
 * file records the sha256 of every input (tools/llmmerge). Uses: libc. Used by: tools/.
 * Nothing here prints or exits: sha256_file returns -1 with errno. */
#ifndef LLMT_SHA256_H
#define LLMT_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    uint64_t len; /* bytes added so far */
} sha256_t;

void sha256_init(sha256_t *s);
void sha256_add(sha256_t *s, const void *data, size_t n);
void sha256_end(sha256_t *s, uint8_t digest[32]);
/* The digest of a whole file, read in 1 MiB pieces (not mapped, not held). 0, or -1 with errno. */
int sha256_file(const char *path, uint8_t digest[32]);
/* 64 lower-case hex digits and a NUL. */
void sha256_hex(const uint8_t digest[32], char hex[65]);
#endif
