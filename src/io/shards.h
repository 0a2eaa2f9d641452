/* shards.h — token shards, memory-mapped: llm.c's format, or nanoGPT's raw train.bin.
 * llm.c (&data format = 'llmc', and 'auto'): a header of 256 int32 (magic 20240520, version,
 * token count, rest 0), then `count` tokens: version 1 holds uint16 ids (GPT-2's vocabulary and
 * any up to 65,536), version 2 uint32 ids (llm.c's Llama 3 data scripts; any vocabulary up to
 * 2^31 - 1). Both are read; a shard set may mix them. nanoGPT ('nanogpt'): no header, the whole
 * file is little-endian uint16 tokens (what its prepare.py writes with np.memmap). 'auto'
 * requires the llm.c header (a headerless file has no magic to recognise it by) and refuses a
 * file that looks like raw uint16 tokens with a message suggesting format = 'nanogpt'.
 * Owns: finding the files of a glob pattern list, validating each shard's header and size,
 * mapping them read-only, the token-id check against the vocabulary. Uses: core/, config/ (the
 * &data format enum). Used by: io/sampler, train/, tools/. */
#ifndef LLMT_SHARDS_H
#define LLMT_SHARDS_H
#include <stdbool.h>
#include "config/config.h"
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION_U16 1 /* uint16 ids: 0..65535 */
#define SHARD_VERSION_U32 2 /* uint32 ids (llm.c's Llama 3 shards) */
#define SHARD_HEADER_INTS 256
#define SHARD_U16_MAX_VOCAB 65536 /* the largest vocabulary version 1 (and nanoGPT) can hold */

/* Exactly one of tokens / tokens32 is set, by the file's id width. */
typedef struct shard {
    char path[512];
    const uint16_t *tokens;   /* width 2: mapped, after the header (if any); else NULL */
    const uint32_t *tokens32; /* width 4 (version 2): mapped, after the header; else NULL */
    int width;                /* bytes per id: 2 or 4 */
    size_t n_tokens;
    void *map;              /* the whole mapping */
    size_t map_bytes;
} shard_t;

typedef struct shard_set {
    shard_t *shards;
    int n_shards;
    size_t n_tokens;        /* total */
    size_t token_bytes;     /* total bytes of the ids (2 or 4 per id, by shard) */
    char what[32];          /* the namelist key the set came from ("train_files"): messages */
} shard_set_t;

/* Expand `patterns` (glob patterns separated by blanks or commas, sorted per pattern, duplicates
 * dropped), validate and map every file in `format` (&data format: CFG_FORMAT_AUTO, _LLMC or
 * _NANOGPT; see the top of this file). On any problem returns -1 and writes one message
 * starting with `what` and naming the file into err (e.g. "train_files: data/x.bin: bad magic
 * 1234 (expected 20240520)", "...: truncated: header says 1000 tokens but file holds 812",
 * "train_files: no file matches 'data/train_*.bin'"). Never exits: the caller decides (rank 0
 * reports via fatal_user). `what` names the namelist key in messages ("train_files"). */
int shard_set_open(shard_set_t *set, const char *patterns, const char *what,
                   cfg_data_format_t format, char *err, size_t errlen);
void shard_set_close(shard_set_t *set);
/* Tell the kernel how the mappings will be read (madvise): random windows when shuffled,
 * sequential otherwise. Advice only; results never depend on it. */
void shard_set_advise(const shard_set_t *set, bool random_access);

/* The token-id check: every id must be < vocab_size (ids in [vocab_size, padded vocab) would
 * read masked logits and drive the loss negative, larger ones a missing embedding row). Two
 * ways, both on by default in the trainer (train/trainer.c open_data):
 *  - shard_set_check_tokens, the full scan at startup. The set's tokens, shard after shard, are
 *    cut into n_parts equal contiguous ranges; this checks range `part` (a rank scans its own
 *    1/n_parts, so the ranks together read the data once). Ranges come in order, so the lowest
 *    failing part holds the set's first bad token: its message is the one to print.
 *    Returns 0, or -1 with "train_files: data/x.bin: token 50300 at position 12345 (token index
 *    in the shard) is >= &model vocab_size = 50257" (the first bad token of the range).
 *    Speed: a max over 32 Ki-token blocks, early exit at the first block over the limit, which
 *    gcc -O3 vectorises (vpmaxuw; checked with -fopt-info-vec). Measured with
 *    validation/bench/bench_data_check.c on a 1 GiB set, one core of a 2-core AVX-512 VM, page
 *    cache warm, medians: 14-15 GB/s when the machine was quiet, 6-8 GB/s while others ran
 *    (memory bandwidth) -- 0.07 to 0.15 s per GiB. From a cold disk the reading dominates.
 *    Version-2 shards (uint32 ids, shard_find_token_at_least_u32, vpmaxud) scan at the same
 *    bytes per second: 128 Mi ids in memory, 3 runs beside uint16 at load 8 on the 2 cores,
 *    5.5-8.3 GB/s against 4.3-10.8 GB/s; so the limit below counts bytes, not ids.
 *    Decision: the trainer scans when the set is at most SHARD_SCAN_MAX_BYTES_PER_RANK per rank
 *    (about 1 s warm, a few seconds cold) and says so when it skips a larger set.
 *  - the per-window check in sampler_fill (see sampler.h): always on. It costs nothing
 *    measurable next to the copy it sits in (T = 1024, B = 16: 8.3 us per micro-batch either
 *    way, differences -2% .. +0.5% over 5 runs) and covers the sets too large to scan, or a file
 *    changed in place after the scan. */
#ifndef SHARD_SCAN_MAX_BYTES_PER_RANK /* a site (or a test build: -D...=0) may change it */
#define SHARD_SCAN_MAX_BYTES_PER_RANK (8ull << 30)
#endif
int shard_set_check_tokens(const shard_set_t *set, int vocab_size, int part, int n_parts,
                           char *err, size_t errlen);
/* The largest token of tok[0, n) (0 when n = 0). Vectorised. */
uint16_t shard_max_token(const uint16_t *tok, size_t n);
uint32_t shard_max_token_u32(const uint32_t *tok, size_t n);
/* The first index i < n with tok[i] >= limit, or n when there is none. Vectorised, early exit. */
size_t shard_find_token_at_least(const uint16_t *tok, size_t n, int limit);
size_t shard_find_token_at_least_u32(const uint32_t *tok, size_t n, int limit);
/* Either width: the first index i in [lo, hi) of shard s with id >= limit, or hi. */
size_t shard_find_in(const shard_t *s, size_t lo, size_t hi, int limit);
/* Token i of shard s, whatever its width. */
static inline uint32_t shard_token(const shard_t *s, size_t i) {
    return s->tokens32 ? s->tokens32[i] : s->tokens[i];
}
/* The message for token `pos` of shard `shard` being >= vocab_size (format above); returns -1. */
int shard_bad_token_error(const shard_set_t *set, int shard, size_t pos, int vocab_size, char *err,
                          size_t errlen);

/* Write an llm.c shard file (used by tests, llmprep and the demo): header + tokens, through
 * core/fileio's atomic writer (tmp file, fsync, rename, fsync of the directory), so a reader
 * never sees half a shard and a crash leaves the old file or the new one. 0, or -1 with errno
 * (EINVAL for zero tokens, EOVERFLOW for more than the int32 header count holds).
 * shard_write: version 1 (uint16 ids); shard_write_u32: version 2 (uint32 ids). */
int shard_write(const char *path, const uint16_t *tokens, size_t n_tokens);
int shard_write_u32(const char *path, const uint32_t *tokens, size_t n_tokens);
#endif
