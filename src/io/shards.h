/* shards.h — token shards in llm.c's format, memory-mapped.
 * Format: a header of 256 int32 (magic 20240520, version 1, token count, rest 0), then `count`
 * uint16 tokens. Owns: finding the files of a glob pattern list, validating each shard's header
 * and size, mapping them read-only. Uses: core/. Used by: io/sampler, train/. */
#ifndef LLMT_SHARDS_H
#define LLMT_SHARDS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

typedef struct shard {
    char path[512];
    const uint16_t *tokens; /* mapped, after the header */
    size_t n_tokens;
    void *map;              /* the whole mapping */
    size_t map_bytes;
} shard_t;

typedef struct shard_set {
    shard_t *shards;
    int n_shards;
    size_t n_tokens;        /* total */
} shard_set_t;

/* Expand `patterns` (glob patterns separated by blanks or commas, sorted per pattern, duplicates
 * dropped), validate and map every file. On any problem returns non-zero and writes one message
 * naming the file and what is wrong into err (e.g. "data/x.bin: bad magic 1234 (expected
 * 20240520)", "...: truncated: header says 1000 tokens but file holds 812", "no file matches
 * 'data/train_*.bin'"). Never exits: the caller decides (rank 0 reports via fatal_user).
 * `what` names the namelist key in messages ("train_files"). */
int shard_set_open(shard_set_t *set, const char *patterns, const char *what, char *err,
                   size_t errlen);
void shard_set_close(shard_set_t *set);
/* Tell the kernel how the mappings will be read (madvise): random windows when shuffled,
 * sequential otherwise. Advice only; results never depend on it. */
void shard_set_advise(const shard_set_t *set, bool random_access);

/* Write a shard file (used by tests, llmprep and the demo): header + tokens. 0 on success. */
int shard_write(const char *path, const uint16_t *tokens, size_t n_tokens);
#endif
