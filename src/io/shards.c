/* shards.c — token shards in llm.c's format (see shards.h).
 * A shard set is opened once at startup: the patterns are expanded with glob(3), every file is
 * validated (header, version, size) and mapped read-only, so the sampler reads tokens straight
 * from the page cache without copies or file offsets. Problems are returned as one message that
 * names the namelist key and the file; this module never exits (the caller reports on rank 0).
 * The format is little-endian, like the x86/ARM machines it is written and read on. */
#include "io/shards.h"
#include "core/alloc.h"
#include "core/error.h"
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

/* Name a magic number that belongs to a different known format, or NULL. */
static const char *known_other_format(int32_t magic, const unsigned char *bytes, size_t size) {
    static const unsigned char hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (magic == LLMC_MODEL_MAGIC) return "an llm.c model weights file (magic 20240326)";
    if (magic == LLMC_DEBUG_MAGIC) return "an llm.c debug state file (magic 20240327)";
    if (magic == LLMC_TOKENIZER_MAGIC) return "an llm.c tokenizer file (magic 20240328)";
    if (size >= 8 && memcmp(bytes, hdf5_sig, 8) == 0) return "an HDF5 file (a checkpoint?)";
    if (size >= 6 && memcmp(bytes, "\x93NUMPY", 6) == 0) return "a NumPy .npy file";
    if (__builtin_bswap32((uint32_t)magic) == SHARD_MAGIC)
        return "a shard written with the other byte order";
    bool text = true;
    for (size_t i = 0; i < 16 && i < size; i++)
        if (bytes[i] < 9 || (bytes[i] > 13 && bytes[i] < 32 && bytes[i] != 27)) text = false;
    return text ? "a text file (tokenize it with llmprep first)" : NULL;
}

/* Check the header of a mapped file of `size` bytes; on success set the token count. */
static int validate_header(const void *map, size_t size, const char *path, const char *what,
                           size_t *n_tokens, char *err, size_t errlen) {
    const int32_t *h = map;
    if (h[0] != SHARD_MAGIC) {
        const char *other = known_other_format(h[0], map, size);
        errf(err, errlen, "%s: %s: bad magic %d (expected %d)%s%s", what, path, h[0],
             SHARD_MAGIC, other ? ": this looks like " : "", other ? other : "");
        return -1;
    }
    if (h[1] != SHARD_VERSION) {
        errf(err, errlen, "%s: %s: unsupported shard version %d (expected %d%s)", what, path,
             h[1], SHARD_VERSION,
             h[1] == 2 ? "; version 2 holds uint32 tokens (llm.c LLaMA 3 data), this program "
                         "reads uint16 GPT-2 tokens"
                       : "");
        return -1;
    }
    if (h[2] < 0) {
        errf(err, errlen, "%s: %s: header token count %d is negative", what, path, h[2]);
        return -1;
    }
    if (h[2] == 0) {
        errf(err, errlen, "%s: %s: shard holds zero tokens", what, path);
        return -1;
    }
    size_t want = SHARD_HEADER_BYTES + (size_t)h[2] * sizeof(uint16_t);
    if (size < want) {
        errf(err, errlen, "%s: %s: truncated: header says %d tokens but file holds %zu", what,
             path, h[2], (size - SHARD_HEADER_BYTES) / sizeof(uint16_t));
        return -1;
    }
    if (size > want) {
        errf(err, errlen, "%s: %s: has %zu extra bytes after the %d tokens the header announces",
             what, path, size - want, h[2]);
        return -1;
    }
    *n_tokens = (size_t)h[2];
    return 0;
}

/* Open, validate and map one shard file. The descriptor is closed again: the mapping stays. */
static int shard_open(shard_t *s, const char *path, const char *what, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (strlen(path) >= sizeof s->path) {
        errf(err, errlen, "%s: %s: path longer than %zu characters", what, path,
             sizeof s->path - 1);
        return -1;
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errf(err, errlen, "%s: %s: cannot open: %s", what, path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        errf(err, errlen, "%s: %s: cannot stat: %s", what, path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        errf(err, errlen, "%s: %s: %s", what, path,
             S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    if (size < SHARD_HEADER_BYTES) {
        errf(err, errlen, "%s: %s: truncated header: file holds %zu bytes, a shard header is %zu",
             what, path, size, SHARD_HEADER_BYTES);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        errf(err, errlen, "%s: %s: cannot map: %s", what, path, strerror(mmap_errno));
        return -1;
    }
    s->map = map;
    s->map_bytes = size;
    if (validate_header(map, size, path, what, &s->n_tokens, err, errlen) != 0) {
        munmap(map, size);
        s->map = NULL;
        return -1;
    }
    s->tokens = (const uint16_t *)((const char *)map + SHARD_HEADER_BYTES);
    return 0;
}

/* ---- the set ---------------------------------------------------------------------------- */

int shard_set_open(shard_set_t *set, const char *patterns, const char *what, char *err,
                   size_t errlen) {
    memset(set, 0, sizeof *set);
    if (!what) what = "files";
    path_list_t list = {0};
    if (expand_patterns(&list, patterns, what, err, errlen) != 0) {
        path_list_free(&list);
        return -1;
    }
    set->shards = xcalloc((size_t)list.n, sizeof *set->shards);
    for (int i = 0; i < list.n; i++) {
        if (shard_open(&set->shards[i], list.paths[i], what, err, errlen) != 0) {
            path_list_free(&list);
            shard_set_close(set);
            return -1;
        }
        set->n_shards = i + 1;
        set->n_tokens += set->shards[i].n_tokens;
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

/* ---- writing ---------------------------------------------------------------------------- */

/* write(2) until done: a large write may be split by the kernel. */
static int write_all(int fd, const void *buf, size_t bytes) {
    const char *p = buf;
    while (bytes > 0) {
        ssize_t n = write(fd, p, bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        bytes -= (size_t)n;
    }
    return 0;
}

int shard_write(const char *path, const uint16_t *tokens, size_t n_tokens) {
    if (n_tokens == 0 || n_tokens > INT32_MAX) {
        errno = n_tokens == 0 ? EINVAL : EOVERFLOW; /* the header count is an int32 */
        return -1;
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n_tokens;

    /* Write beside the target and rename, so a reader never sees half a shard. */
    size_t len = strlen(path) + 5;
    char *tmp = xrealloc_small(NULL, len);
    snprintf(tmp, len, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd < 0 ? -1 : 0;
    if (rc == 0) rc = write_all(fd, header, sizeof header);
    if (rc == 0) rc = write_all(fd, tokens, n_tokens * sizeof *tokens);
    if (fd >= 0 && close(fd) != 0) rc = -1;
    if (rc == 0) rc = rename(tmp, path);
    if (rc != 0) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
    }
    free(tmp);
    return rc;
}
