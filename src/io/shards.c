/* shards.c — token shards in llm.c's or nanoGPT's format (see shards.h).
 * A shard set is opened once at startup: the patterns are expanded with glob(3), every file is
 * validated (header, version, size) and mapped read-only, so the sampler reads tokens straight
 * from the page cache without copies or file offsets. Problems are returned as one message that
 * names the namelist key and the file; this module never exits (the caller reports on rank 0).
 * The formats are little-endian, like the x86/ARM machines they are written and read on. */
#include "io/shards.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_HEADER_BYTES ((size_t)SHARD_HEADER_INTS * sizeof(int32_t))

/* Magic numbers of other llm.c files, so a wrong file gets a helpful message. */
#define LLMC_MODEL_MAGIC 20240326     /* gpt2_124M.bin: model weights */
#define LLMC_DEBUG_MAGIC 20240327     /* gpt2_124M_debug_state.bin */
#define LLMC_TOKENIZER_MAGIC 20240328 /* gpt2_tokenizer.bin */

/* ---- pattern expansion ------------------------------------------------------------------ */

/* A growing list of unique paths in the order they were first seen. */
typedef struct path_list {
    char **paths;
    int n, cap;
} path_list_t;

static bool path_list_has(const path_list_t *l, const char *path) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->paths[i], path) == 0) return true;
    return false;
}

static void path_list_add(path_list_t *l, const char *path) {
    if (path_list_has(l, path)) return; /* "a*.bin a1.bin" names a1.bin once */
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->paths = xrealloc_small(l->paths, (size_t)l->cap * sizeof *l->paths);
    }
    l->paths[l->n++] = xstrdup(path);
}

static void path_list_free(path_list_t *l) {
    for (int i = 0; i < l->n; i++) free(l->paths[i]);
    free(l->paths);
    memset(l, 0, sizeof *l);
}

/* Expand one glob pattern (glob(3) returns the matches sorted) and append them to `l`. */
static int expand_pattern(path_list_t *l, const char *pattern, const char *what, char *err,
                          size_t errlen) {
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        errf(err, errlen, "%s: no file matches '%s'", what, pattern);
        return -1;
    }
    if (rc != 0) {
        errf(err, errlen, "%s: cannot expand '%s': %s", what, pattern,
             rc == GLOB_NOSPACE ? "out of memory" : "read error in a directory");
        globfree(&g);
        return -1;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) path_list_add(l, g.gl_pathv[i]);
    globfree(&g);
    return 0;
}

/* Split `patterns` at blanks and commas and expand each piece, in the order given. */
static int expand_patterns(path_list_t *l, const char *patterns, const char *what, char *err,
                           size_t errlen) {
    char *copy = xstrdup(patterns ? patterns : "");
    int rc = 0, n_patterns = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, " \t\n,", &save); tok && rc == 0;
         tok = strtok_r(NULL, " \t\n,", &save)) {
        rc = expand_pattern(l, tok, what, err, errlen);
        n_patterns++;
    }
    free(copy);
    if (rc == 0 && n_patterns == 0) {
        errf(err, errlen, "%s: no file pattern given", what);
        rc = -1;
    }
    return rc;
}

/* ---- one shard -------------------------------------------------------------------------- */

/* Text: no control characters other than tab, newline, vertical tab, form feed, return and
 * escape in the first KiB. A file of uint16 tokens fails this at its first token below 2304
 * (high byte 0..8), which the frequent tokens of any tokenizer are. */
static bool looks_like_text(const unsigned char *bytes, size_t size) {
    for (size_t i = 0; i < 1024 && i < size; i++)
        if (bytes[i] < 9 || (bytes[i] > 13 && bytes[i] < 32 && bytes[i] != 27)) return false;
    return true;
}

/* Raw uint16 tokens (nanoGPT's train.bin): an even size, the first 64 Ki values all inside
 * GPT-2's padded vocabulary, and not shaped like a header (ints 3..255 all zero: 506 tokens
 * of id 0 in a row are not text). Only used for a hint; never to decide the format. */
static bool looks_like_raw_tokens(const void *map, size_t size) {
    if (size < 2 || size % 2 != 0) return false;
    if (size >= SHARD_HEADER_BYTES) {
        const int32_t *h = map;
        bool header_shaped = true;
        for (int i = 3; i < SHARD_HEADER_INTS && header_shaped; i++) header_shaped = h[i] == 0;
        if (header_shaped) return false;
    }
    size_t n = size / 2 < 65536 ? size / 2 : 65536;
    return shard_max_token(map, n) < 50304;
}

/* Name a magic number that belongs to a different known format, or NULL. */
static const char *known_other_format(int32_t magic, const unsigned char *bytes, size_t size,
                                      cfg_data_format_t format) {
    static const unsigned char hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (size >= 4 && magic == LLMC_MODEL_MAGIC) return "an llm.c model weights file (magic 20240326)";
    if (size >= 4 && magic == LLMC_DEBUG_MAGIC) return "an llm.c debug state file (magic 20240327)";
    if (size >= 4 && magic == LLMC_TOKENIZER_MAGIC) return "an llm.c tokenizer file (magic 20240328)";
    if (size >= 8 && memcmp(bytes, hdf5_sig, 8) == 0) return "an HDF5 file (a checkpoint?)";
    if (size >= 6 && memcmp(bytes, "\x93NUMPY", 6) == 0) return "a NumPy .npy file";
    if (size >= 4 && __builtin_bswap32((uint32_t)magic) == SHARD_MAGIC)
        return "a shard written with the other byte order";
    if (looks_like_text(bytes, size)) return "a text file (tokenize it with llmprep first)";
    if (format == CFG_FORMAT_AUTO && looks_like_raw_tokens(bytes, size))
        return "raw uint16 tokens without a header (nanoGPT's train.bin?); if so, set "
               "&data format = 'nanogpt'";
    return NULL;
}

/* The message for a header that does not match the file's size: names the version field and
 * the width it implies, and says when the body has exactly the other width's size. */
static int size_mismatch(size_t size, const int32_t *h, const char *path, const char *what,
                         char *err, size_t errlen) {
    const size_t body = size - SHARD_HEADER_BYTES, n = (size_t)h[2];
    const int width = h[1] == SHARD_VERSION_U32 ? 4 : 2, other = 6 - width;
    if (body == n * (size_t)other)
        return errf(err, errlen, "%s: %s: header version %d announces %d uint%d ids (%d bytes "
                    "each) but the file holds %zu bytes of ids, %d uint%d ids: the header's version "
                    "field disagrees with the width the ids were written in", what, path, h[1],
                    h[2], 8 * width, width, body, h[2], 8 * other);
    if (body < n * (size_t)width)
        return errf(err, errlen, "%s: %s: truncated: header says %d tokens but file holds %zu "
                    "(version %d: uint%d ids)", what, path, h[2], body / (size_t)width, h[1],
                    8 * width);
    return errf(err, errlen, "%s: %s: has %zu extra bytes after the %d tokens the header "
                "announces (version %d, uint%d ids)", what, path, body - n * (size_t)width, h[2],
                h[1], 8 * width);
}

/* Check the llm.c header of a mapped file of `size` bytes; on success set the token count and
 * the id width (2 for version 1, 4 for version 2). */
static int validate_header(const void *map, size_t size, const char *path, const char *what,
                           cfg_data_format_t format, size_t *n_tokens, int *width, char *err,
                           size_t errlen) {
    const int32_t *h = map;
    int32_t magic = 0;
    memcpy(&magic, map, size < sizeof magic ? size : sizeof magic);
    if (size < SHARD_HEADER_BYTES || magic != SHARD_MAGIC) {
        const char *other = known_other_format(magic, map, size, format);
        if (magic == SHARD_MAGIC || (size < SHARD_HEADER_BYTES && !other))
            return errf(err, errlen, "%s: %s: truncated header: file holds %zu bytes, a shard "
                        "header is %zu", what, path, size, SHARD_HEADER_BYTES);
        return errf(err, errlen, "%s: %s: bad magic %d (expected %d)%s%s", what, path, magic,
                    SHARD_MAGIC, other ? ": this looks like " : "", other ? other : "");
    }
    if (h[1] != SHARD_VERSION_U16 && h[1] != SHARD_VERSION_U32)
        return errf(err, errlen, "%s: %s: unsupported shard version %d (expected %d: uint16 ids, "
                    "or %d: uint32 ids)", what, path, h[1], SHARD_VERSION_U16, SHARD_VERSION_U32);
    if (h[2] < 0)
        return errf(err, errlen, "%s: %s: header token count %d is negative", what, path, h[2]);
    if (h[2] == 0) return errf(err, errlen, "%s: %s: shard holds zero tokens", what, path);
    *width = h[1] == SHARD_VERSION_U32 ? 4 : 2;
    if (size != SHARD_HEADER_BYTES + (size_t)h[2] * (size_t)*width)
        return size_mismatch(size, h, path, what, err, errlen);
    *n_tokens = (size_t)h[2];
    return 0;
}

/* A nanoGPT file: uint16 tokens from byte 0, so the size must be even. An llm.c header at the
 * start means the user picked the wrong format (its ints would be read as tokens). */
static int validate_raw(const void *map, size_t size, const char *path, const char *what,
                        size_t *n_tokens, char *err, size_t errlen) {
    int32_t h[2] = {0, 0};
    memcpy(h, map, size < sizeof h ? size : sizeof h);
    if (size >= sizeof h && h[0] == SHARD_MAGIC && (h[1] == 1 || h[1] == 2))
        return errf(err, errlen, "%s: %s: starts with an llm.c shard header (magic %d, version "
                    "%d), but &data format = 'nanogpt' reads raw uint16 tokens; use format = "
                    "'auto' or 'llmc'", what, path, SHARD_MAGIC, h[1]);
    if (size % 2 != 0)
        return errf(err, errlen, "%s: %s: holds %zu bytes, an odd number: &data format = "
                    "'nanogpt' reads raw uint16 tokens (2 bytes each)", what, path, size);
    *n_tokens = size / 2;
    return 0;
}

/* Open, validate and map one shard file. The descriptor is closed again: the mapping stays. */
static int shard_open(shard_t *s, const char *path, const char *what, cfg_data_format_t format,
                      char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (strlen(path) >= sizeof s->path)
        return errf(err, errlen, "%s: %s: path longer than %zu characters", what, path,
                    sizeof s->path - 1);
    snprintf(s->path, sizeof s->path, "%s", path);
    struct stat st;
    int fd = file_open_regular(path, &st); /* a FIFO would block the open forever */
    if (fd < 0)
        return errf(err, errlen, "%s: %s: %s%s", what, path,
                    errno == EISDIR || errno == EINVAL ? "" : "cannot open: ",
                    errno == EISDIR ? "is a directory" : file_strerror(errno));
    if (st.st_size == 0) {
        errf(err, errlen, "%s: %s: is empty (0 bytes)", what, path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return errf(err, errlen, "%s: %s: cannot map: %s", what, path, strerror(mmap_errno));
    s->map = map;
    s->map_bytes = size;
    s->width = 2;
    int rc = format == CFG_FORMAT_NANOGPT
                 ? validate_raw(map, size, path, what, &s->n_tokens, err, errlen)
                 : validate_header(map, size, path, what, format, &s->n_tokens, &s->width, err,
                                   errlen);
    if (rc != 0) {
        munmap(map, size);
        s->map = NULL;
        return -1;
    }
    size_t header = format == CFG_FORMAT_NANOGPT ? 0 : SHARD_HEADER_BYTES;
    const void *ids = (const char *)map + header;
    if (s->width == 4) s->tokens32 = ids;
    else s->tokens = ids;
    return 0;
}

/* ---- the set ---------------------------------------------------------------------------- */

int shard_set_open(shard_set_t *set, const char *patterns, const char *what,
                   cfg_data_format_t format, char *err, size_t errlen) {
    memset(set, 0, sizeof *set);
    if (!what) what = "files";
    snprintf(set->what, sizeof set->what, "%s", what);
    path_list_t list = {0};
    if (expand_patterns(&list, patterns, what, err, errlen) != 0) {
        path_list_free(&list);
        return -1;
    }
    set->shards = xcalloc((size_t)list.n, sizeof *set->shards);
    for (int i = 0; i < list.n; i++) {
        if (shard_open(&set->shards[i], list.paths[i], what, format, err, errlen) != 0) {
            path_list_free(&list);
            shard_set_close(set);
            return -1;
        }
        set->n_shards = i + 1;
        set->n_tokens += set->shards[i].n_tokens;
        set->token_bytes += set->shards[i].n_tokens * (size_t)set->shards[i].width;
    }
    path_list_free(&list);
    return 0;
}

void shard_set_close(shard_set_t *set) {
    for (int i = 0; i < set->n_shards; i++)
        if (set->shards[i].map) munmap(set->shards[i].map, set->shards[i].map_bytes);
    xfree(set->shards);
    memset(set, 0, sizeof *set);
}

void shard_set_advise(const shard_set_t *set, bool random_access) {
    /* Advice only: a kernel that ignores it (or refuses it) changes speed, not results. */
    int advice = random_access ? MADV_RANDOM : MADV_SEQUENTIAL;
    for (int i = 0; i < set->n_shards; i++)
        if (set->shards[i].map) (void)madvise(set->shards[i].map, set->shards[i].map_bytes, advice);
}

/* ---- the token-id check ----------------------------------------------------------------- */

/* Tokens per block of the scan: 64 KiB, still in L2 when a block over the limit is searched
 * again for its first bad position. */
#define SCAN_BLOCK 32768

/* A plain max loop: gcc -O3 turns it into pmaxuw / vpmaxuw over 8, 16 or 32 lanes (checked
 * with -fopt-info-vec), no intrinsics needed. */
uint16_t shard_max_token(const uint16_t *tok, size_t n) {
    uint16_t m = 0;
    for (size_t i = 0; i < n; i++) m = tok[i] > m ? tok[i] : m;
    return m;
}

size_t shard_find_token_at_least(const uint16_t *tok, size_t n, int limit) {
    if (limit > UINT16_MAX) return n; /* every uint16 is below it */
    if (limit <= 0) return 0;
    for (size_t b = 0; b < n; b += SCAN_BLOCK) {
        size_t len = n - b < SCAN_BLOCK ? n - b : SCAN_BLOCK;
        if (shard_max_token(tok + b, len) < limit) continue;
        for (size_t i = b;; i++)
            if (tok[i] >= limit) return i;
    }
    return n;
}

uint32_t shard_max_token_u32(const uint32_t *tok, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) m = tok[i] > m ? tok[i] : m;
    return m;
}

size_t shard_find_token_at_least_u32(const uint32_t *tok, size_t n, int limit) {
    if (limit <= 0) return 0;
    for (size_t b = 0; b < n; b += SCAN_BLOCK) {
        size_t len = n - b < SCAN_BLOCK ? n - b : SCAN_BLOCK;
        if (shard_max_token_u32(tok + b, len) < (uint32_t)limit) continue;
        for (size_t i = b;; i++)
            if (tok[i] >= (uint32_t)limit) return i;
    }
    return n;
}

size_t shard_find_in(const shard_t *s, size_t lo, size_t hi, int limit) {
    return lo + (s->tokens32 ? shard_find_token_at_least_u32(s->tokens32 + lo, hi - lo, limit)
                             : shard_find_token_at_least(s->tokens + lo, hi - lo, limit));
}

int shard_bad_token_error(const shard_set_t *set, int shard, size_t pos, int vocab_size, char *err,
                          size_t errlen) {
    const shard_t *s = &set->shards[shard];
    return errf(err, errlen, "%s: %s: token %u at position %zu (token index in the shard) is >= "
                "&model vocab_size = %d", set->what, s->path, (unsigned)shard_token(s, pos), pos,
                vocab_size);
}

int shard_set_check_tokens(const shard_set_t *set, int vocab_size, int part, int n_parts,
                           char *err, size_t errlen) {
    ASSERT(n_parts >= 1 && part >= 0 && part < n_parts);
    /* Part p is [p*base + min(p, rem), ...): balanced, in order, and no product can overflow. */
    const size_t np = (size_t)n_parts, p = (size_t)part;
    const size_t base = set->n_tokens / np, rem = set->n_tokens % np;
    const size_t begin = p * base + (p < rem ? p : rem), end = begin + base + (p < rem);
    size_t first = 0; /* index of shard i's first token in the set */
    for (int i = 0; i < set->n_shards && first < end; first += set->shards[i++].n_tokens) {
        const shard_t *s = &set->shards[i];
        if (first + s->n_tokens <= begin) continue;
        size_t lo = begin > first ? begin - first : 0;
        size_t hi = end - first < s->n_tokens ? end - first : s->n_tokens;
        size_t pos = shard_find_in(s, lo, hi, vocab_size);
        if (pos < hi) return shard_bad_token_error(set, i, pos, vocab_size, err, errlen);
    }
    return 0;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* Header (magic, version, count) and the ids of `width` bytes each, atomically. */
static int write_ids(const char *path, const void *tokens, size_t n_tokens, int version,
                     size_t width) {
    if (n_tokens == 0 || n_tokens > INT32_MAX) {
        errno = n_tokens == 0 ? EINVAL : EOVERFLOW; /* the header count is an int32 */
        return -1;
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = version;
    header[2] = (int32_t)n_tokens;
    /* Beside the target, fsync'd, renamed over it: a reader never sees half a shard. */
    atomic_file_t af;
    if (atomic_file_open(&af, path) != 0) return -1;
    if (atomic_file_write(&af, header, sizeof header) != 0 ||
        atomic_file_write(&af, tokens, n_tokens * width) != 0) {
        atomic_file_abort(&af);
        return -1;
    }
    return atomic_file_commit(&af);
}

int shard_write(const char *path, const uint16_t *tokens, size_t n_tokens) {
    return write_ids(path, tokens, n_tokens, SHARD_VERSION_U16, sizeof *tokens);
}

int shard_write_u32(const char *path, const uint32_t *tokens, size_t n_tokens) {
    return write_ids(path, tokens, n_tokens, SHARD_VERSION_U32, sizeof *tokens);
}
