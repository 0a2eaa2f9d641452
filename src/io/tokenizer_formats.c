/* tokenizer_formats.c — vocabulary files: reading tiktoken's rank files (strict base64, ranks
 * 0..n-1 each once, all 256 bytes present) and Hugging Face's GPT-2 vocab.json + merges.txt
 * (GPT-2's bytes_to_unicode alphabet, a minimal JSON reader), choosing between them by path,
 * and saving a vocabulary as a rank file (written atomically through core/fileio).
 * Every refusal is one message naming the file and line. Uses: core/ (allocation, errors,
 * fileio). */
#include "io/tokenizer_internal.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Vocabulary files are small (GPT-2's rank file is 1.6 MB); anything over this is not one. */
#define VOCAB_FILE_MAX ((size_t)1 << 30)

/* ------------------------------------------------------------------ reading files, base64 */

/* The whole file, NUL-terminated, through core/fileio; NULL with err naming the file. */
char *read_vocab_file(const char *path, size_t *len, char *err, size_t errlen) {
    int e = 0;
    char *buf = file_read_whole(path, VOCAB_FILE_MAX, len, &e);
    if (buf) return buf;
    if (e == EFBIG)
        errf(err, errlen, "%s: cannot read: larger than %zu MiB, too large for a vocabulary "
             "file", path, VOCAB_FILE_MAX >> 20);
    else
        errf(err, errlen, "%s: cannot read: %s", path,
             e == EISDIR ? "not a regular file (a directory)" : file_strerror(e));
    return NULL;
}

/* Every byte must be a token, or some input could not be encoded. */
static int vocab_check_bytes(const vocab_t *v, const char *path, char *err, size_t errlen) {
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (vocab_get(v, &c, 1) == NO_RANK)
            return errf(err, errlen, "%s: byte 0x%02x has no token (a byte-level BPE "
                        "vocabulary needs all 256 single bytes)", path, b);
    }
    return 0;
}

static int b64_value(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Strict standard base64 with padding. Returns the decoded length, or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4) return -1;
    long len = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            int c = (unsigned char)s[i + k];
            bool may_pad = i + 4 == n && (k == 3 || (k == 2 && s[i + 3] == '='));
            v[k] = c == '=' && may_pad ? (pad++, 0) : b64_value(c);
            if (v[k] < 0) return -1;
        }
        uint32_t w = (uint32_t)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        out[len++] = (uint8_t)(w >> 16);
        if (pad < 2) out[len++] = (uint8_t)(w >> 8);
        if (pad < 1) out[len++] = (uint8_t)w;
    }
    return len;
}

static size_t b64_encode(const uint8_t *p, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16;
        if (i + 1 < n) w |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) w |= p[i + 2];
        out[o++] = tab[w >> 18 & 63];
        out[o++] = tab[w >> 12 & 63];
        out[o++] = i + 1 < n ? tab[w >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tab[w & 63] : '=';
    }
    return o;
}

/* ------------------------------------------------------------------ tiktoken rank files */

typedef struct rank_line { /* one parsed line: token bytes at pool[off..off+len), its rank */
    size_t off, len;
    uint32_t rank;
    int line;
} rank_line_t;

/* Parse "base64 rank" from one line (no newline). 0, or -1 with err naming path:line. */
static int parse_rank_line(const char *s, size_t n, const char *path, int line, uint8_t *pool,
                           rank_line_t *out, char *err, size_t errlen) {
    size_t sp = 0;
    while (sp < n && s[sp] != ' ' && s[sp] != '\t') sp++;
    size_t r0 = sp;
    while (r0 < n && (s[r0] == ' ' || s[r0] == '\t')) r0++;
    long len = b64_decode(s, sp, pool + out->off);
    if (len <= 0) {
        return errf(err, errlen, "%s:%d: bad base64 token '%.*s'", path, line,
                    (int)(sp > 60 ? 60 : sp), s);
    }
    uint64_t rank = 0;
    size_t i = r0;
    for (; i < n && s[i] >= '0' && s[i] <= '9' && rank < 0x7FFFFFFF; i++)
        rank = rank * 10 + (uint64_t)(s[i] - '0');
    if (r0 == n || i != n || rank >= 0x7FFFFFFF) {
        return errf(err, errlen, "%s:%d: expected 'base64-token rank', found '%.*s'", path, line,
                    (int)(n > 60 ? 60 : n), s);
    }
    out->len = (size_t)len;
    out->rank = (uint32_t)rank;
    out->line = line;
    return 0;
}

/* Split the file into lines and parse each; *n_lines = number of tokens. */
static rank_line_t *parse_rank_lines(const char *buf, size_t len, const char *path,
                                     uint8_t *pool, size_t *n_out, char *err, size_t errlen) {
    size_t cap = 1024, n = 0, pool_used = 0;
    rank_line_t *lines = xrealloc_small(NULL, cap * sizeof *lines);
    int line = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len, e = end;
        line++;
        if (e > pos && buf[e - 1] == '\r') e--;
        if (e > pos) {
            if (n == cap) lines = xrealloc_small(lines, (cap *= 2) * sizeof *lines);
            lines[n].off = pool_used;
            if (parse_rank_line(buf + pos, e - pos, path, line, pool, &lines[n], err, errlen)) {
                free(lines);
                return NULL;
            }
            pool_used += lines[n++].len;
        }
        pos = end + 1;
    }
    *n_out = n;
    return lines;
}

/* Ranks must be 0..n-1, each once; then the tokens go into the vocabulary in rank order. */
static int vocab_from_rank_lines(vocab_t *v, const rank_line_t *lines, size_t n,
                                 const uint8_t *pool, const char *path, char *err,
                                 size_t errlen) {
    size_t *by_rank = malloc((n ? n : 1) * sizeof *by_rank);
    PTR_CHECK(by_rank);
    for (size_t i = 0; i < n; i++) by_rank[i] = SIZE_MAX;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint32_t r = lines[i].rank;
        if (r >= n) {
            rc = errf(err, errlen, "%s:%d: rank %u out of range: %zu tokens need ranks 0..%zu",
                      path, lines[i].line, r, n, n - 1);
        } else if (by_rank[r] != SIZE_MAX) {
            rc = errf(err, errlen, "%s:%d: rank %u repeats line %d", path, lines[i].line, r,
                      lines[by_rank[r]].line);
        } else {
            by_rank[r] = i;
        }
    }
    for (size_t r = 0; r < n && rc == 0; r++) {
        const rank_line_t *l = &lines[by_rank[r]];
        uint32_t got = vocab_add(v, pool + l->off, l->len);
        if (got != r) {
            rc = errf(err, errlen, "%s:%d: token repeats the token of rank %u (line %d)", path,
                      l->line, got, lines[by_rank[got]].line);
        }
    }
    free(by_rank);
    return rc;
}

static int load_tiktoken(vocab_t *v, const char *path, char *err, size_t errlen) {
    size_t len, n = 0;
    char *buf = read_vocab_file(path, &len, err, errlen);
    if (!buf) return -1;
    uint8_t *pool = malloc(len + 1); /* decoded tokens are shorter than their base64 */
    PTR_CHECK(pool);
    rank_line_t *lines = parse_rank_lines(buf, len, path, pool, &n, err, errlen);
    int rc = lines ? 0 : -1;
    if (rc == 0 && n == 0)
        rc = errf(err, errlen, "%s: no tokens (expected lines of 'base64-token rank')", path);
    if (rc == 0) rc = vocab_from_rank_lines(v, lines, n, pool, path, err, errlen);
    if (rc == 0) rc = vocab_check_bytes(v, path, err, errlen);
    free(lines);
    free(pool);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ Hugging Face files */

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 bytes for
 * U+0100 onwards in byte order. byte_rank lists the bytes in that order (tiktoken's ranks). */
static void gpt2_byte_map(int cp_of_byte[256], uint8_t byte_rank[256]) {
    int n_other = 0, k = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        cp_of_byte[b] = printable ? b : 256 + n_other++;
        if (printable) byte_rank[k++] = (uint8_t)b;
    }
    for (int b = 0; b < 256; b++)
        if (cp_of_byte[b] >= 256) byte_rank[k++] = (uint8_t)b;
}

/* Decode one UTF-8 code point from s[0..n); returns its length or 0 when invalid. */
static size_t utf8_decode(const uint8_t *s, size_t n, int *cp) {
    if (n == 0) return 0;
    if (s[0] < 0x80) return *cp = s[0], 1;
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (len == 0 || len > n) return 0;
    int c = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    *cp = c;
    return len;
}

static size_t utf8_encode(int cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 63));
        out[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 63));
    out[2] = (char)(0x80 | (cp >> 6 & 63));
    out[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* byte_of_cp[cp] = the byte GPT-2's alphabet shows as code point cp (< 324), or -1. */
void gpt2_alphabet(int byte_of_cp[324]) {
    int cp_of_byte[256];
    uint8_t order[256];
    gpt2_byte_map(cp_of_byte, order);
    for (int i = 0; i < 324; i++) byte_of_cp[i] = -1;
    for (int b = 0; b < 256; b++) byte_of_cp[cp_of_byte[b]] = b;
}

/* A token written in GPT-2's byte alphabet back to bytes. Returns the byte count or -1. */
long unicode_to_bytes(const int byte_of_cp[324], const char *s, size_t n, uint8_t *out) {
    long len = 0;
    for (size_t i = 0; i < n;) {
        int cp = 0;
        size_t k = utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (k == 0 || cp >= 324 || byte_of_cp[cp] < 0) return -1;
        out[len++] = (uint8_t)byte_of_cp[cp];
        i += k;
    }
    return len;
}

/* A minimal reader of vocab.json: one flat object of "string": integer. */
typedef struct json_in {
    const char *s;
    size_t n, pos;
    int line;
} json_in_t;

static void json_ws(json_in_t *j) {
    for (; j->pos < j->n; j->pos++) {
        char c = j->s[j->pos];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') break;
        if (c == '\n') j->line++;
    }
}

static int json_hex4(json_in_t *j, int *v) {
    if (j->pos + 4 > j->n) return -1;
    *v = 0;
    for (int k = 0; k < 4; k++) {
        int c = j->s[j->pos++], d = c >= '0' && c <= '9' ? c - '0'
                                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* One escape after the backslash; appends UTF-8 to out. */
static int json_escape(json_in_t *j, char *out, size_t *o) {
    if (j->pos >= j->n) return -1;
    char c = j->s[j->pos++];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *f = strchr(from, c);
    if (c && f) return out[(*o)++] = to[f - from], 0;
    if (c != 'u') return -1;
    int cp, lo;
    if (json_hex4(j, &cp)) return -1;
    if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
        if (j->pos + 2 > j->n || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u') return -1;
        j->pos += 2;
        if (json_hex4(j, &lo) || lo < 0xDC00 || lo >= 0xE000) return -1;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
        return -1;
    }
    *o += utf8_encode(cp, out + *o);
    return 0;
}

/* A string into out (room for the input's length); returns its length or -1. */
static long json_string(json_in_t *j, char *out) {
    size_t o = 0;
    if (j->pos >= j->n || j->s[j->pos] != '"') return -1;
    j->pos++;
    while (j->pos < j->n && j->s[j->pos] != '"') {
        char c = j->s[j->pos++];
        if (c == '\\') {
            if (json_escape(j, out, &o)) return -1;
        } else if ((unsigned char)c < 0x20) {
            return -1;
        } else {
            out[o++] = c;
        }
    }
    if (j->pos >= j->n) return -1;
    j->pos++;
    return (long)o;
}

typedef struct json_entry {
    size_t off, len; /* key bytes (UTF-8) in the key pool */
    long id;
    int line;
} json_entry_t;

static int json_entry(json_in_t *j, char *keys, size_t *used, json_entry_t *e) {
    json_ws(j);
    e->line = j->line;
    e->off = *used;
    long len = json_string(j, keys + *used);
    if (len < 0) return -1;
    e->len = (size_t)len;
    *used += (size_t)len;
    json_ws(j);
    if (j->pos >= j->n || j->s[j->pos++] != ':') return -1;
    json_ws(j);
    char *end;
    errno = 0;
    e->id = strtol(j->s + j->pos, &end, 10);
    if (end == j->s + j->pos || errno || e->id < 0 || e->id > 0x7FFFFFFF) return -1;
    j->pos = (size_t)(end - j->s);
    json_ws(j);
    return 0;
}

static json_entry_t *parse_vocab_json(const char *buf, size_t len, const char *path, char *keys,
                                      size_t *n_out, char *err, size_t errlen) {
    json_in_t j = {buf, len, 0, 1};
    size_t n = 0, cap = 1024, used = 0;
    json_entry_t *es = xrealloc_small(NULL, cap * sizeof *es);
    json_ws(&j);
    bool ok = j.pos < len && buf[j.pos++] == '{';
    json_ws(&j);
    if (ok && j.pos < len && buf[j.pos] == '}') j.pos++;
    else
        while (ok) {
            if (n == cap) es = xrealloc_small(es, (cap *= 2) * sizeof *es);
            ok = json_entry(&j, keys, &used, &es[n]) == 0 && j.pos < len;
            if (!ok) break;
            n++;
            char c = buf[j.pos++];
            if (c == '}') break;
            ok = c == ',';
        }
    json_ws(&j);
    if (!ok || j.pos != len) {
        errf(err, errlen, "%s:%d: not a JSON object of \"token\": id entries", path, j.line);
        free(es);
        return NULL;
    }
    *n_out = n;
    return es;
}

/* merges.txt: "#version" line, then "left right" per line, in the byte alphabet. */
static int load_merges(vocab_t *v, const char *buf, size_t len, const char *path, char *err,
                       size_t errlen) {
    int line = 0, alphabet[324];
    gpt2_alphabet(alphabet);
    uint8_t *tmp = malloc(len + 1);
    PTR_CHECK(tmp);
    int rc = 0;
    for (size_t pos = 0; pos < len && rc == 0;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len, e = end;
        line++;
        if (e > pos && buf[e - 1] == '\r') e--;
        const char *s = buf + pos;
        size_t n = e - pos;
        pos = end + 1;
        if (n == 0 || (line == 1 && n >= 8 && memcmp(s, "#version", 8) == 0)) continue;
        const char *sp = memchr(s, ' ', n);
        long a = sp ? unicode_to_bytes(alphabet, s, (size_t)(sp - s), tmp) : -1;
        long b = a > 0 ? unicode_to_bytes(alphabet, sp + 1, n - (size_t)(sp - s) - 1, tmp + a) : -1;
        if (a <= 0 || b <= 0) {
            rc = errf(err, errlen, "%s:%d: expected two tokens in GPT-2's byte alphabet separated "
                      "by one space, found '%.*s'", path, line, (int)(n > 60 ? 60 : n), s);
        } else if (vocab_get(v, tmp, (size_t)a) == NO_RANK ||
                   vocab_get(v, tmp + a, (size_t)b) == NO_RANK) {
            rc = errf(err, errlen, "%s:%d: '%.*s' merges a token no earlier line makes", path,
                      line, (int)(n > 60 ? 60 : n), s);
        } else {
            uint32_t before = v->n, r = vocab_add(v, tmp, (size_t)(a + b));
            if (r != before) {
                rc = errf(err, errlen, "%s:%d: '%.*s' makes a token that rank %u already is", path,
                          line, (int)(n > 60 ? 60 : n), s, r);
            }
        }
    }
    free(tmp);
    return rc;
}

/* Every vocab.json entry must carry the rank the merges give it (and cover every rank). */
static int check_vocab_json(const vocab_t *v, const json_entry_t *es, size_t n, const char *keys,
                            const char *path, char *err, size_t errlen) {
    uint8_t *tmp = malloc(4096);
    PTR_CHECK(tmp);
    size_t n_tokens = 0;
    int rc = 0, alphabet[324];
    gpt2_alphabet(alphabet);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *k = keys + es[i].off;
        if (es[i].len == EOT_LEN && memcmp(k, TOKENIZER_EOT_TEXT, EOT_LEN) == 0) {
            if (es[i].id != (long)v->n) {
                rc = errf(err, errlen, "%s:%d: %s has id %ld; it must follow the last rank (%u)",
                          path, es[i].line, TOKENIZER_EOT_TEXT, es[i].id, v->n);
            }
            continue;
        }
        long len = es[i].len <= 4096 ? unicode_to_bytes(alphabet, k, es[i].len, tmp) : -1;
        uint32_t r = len > 0 ? vocab_get(v, tmp, (size_t)len) : NO_RANK;
        int shown = (int)(es[i].len > 60 ? 60 : es[i].len);
        if (r == NO_RANK) {
            rc = errf(err, errlen, "%s:%d: token \"%.*s\" (id %ld) is not one of the 256 bytes "
                      "nor made by merges.txt", path, es[i].line, shown, k, es[i].id);
        } else if ((long)r != es[i].id) {
            rc = errf(err, errlen, "%s:%d: token \"%.*s\" has id %ld, but merges.txt gives it "
                      "rank %u", path, es[i].line, shown, k, es[i].id, r);
        }
        n_tokens++;
    }
    if (rc == 0 && n_tokens != v->n) {
        rc = errf(err, errlen, "%s: has %zu tokens but the 256 bytes and merges.txt make %u", path,
                  n_tokens, v->n);
    }
    free(tmp);
    return rc;
}

static int load_hf(vocab_t *v, const char *vocab_path, const char *merges_path, char *err,
                   size_t errlen) {
    size_t vlen = 0, mlen = 0, n = 0;
    char *vbuf = read_vocab_file(vocab_path, &vlen, err, errlen);
    char *mbuf = vbuf ? read_vocab_file(merges_path, &mlen, err, errlen) : NULL;
    char *keys = malloc(vlen + 1);
    PTR_CHECK(keys);
    json_entry_t *es = mbuf ? parse_vocab_json(vbuf, vlen, vocab_path, keys, &n, err, errlen)
                            : NULL;
    int rc = es ? 0 : -1;
    if (rc == 0) {
        int cp_of_byte[256];
        uint8_t order[256];
        gpt2_byte_map(cp_of_byte, order);
        for (int k = 0; k < 256; k++) vocab_add(v, &order[k], 1);
        rc = load_merges(v, mbuf, mlen, merges_path, err, errlen);
    }
    if (rc == 0) rc = check_vocab_json(v, es, n, keys, vocab_path, err, errlen);
    free(es);
    free(keys);
    free(mbuf);
    free(vbuf);
    return rc;
}

/* ------------------------------------------------------------------ choosing the format */

/* vocab.json and merges.txt: inside the directory `path`, or beside the .json file `path`. */
static void hf_paths(const char *path, bool is_dir, char *vp, char *mp, size_t len) {
    if (is_dir) {
        snprintf(vp, len, "%s/vocab.json", path);
        snprintf(mp, len, "%s/merges.txt", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    snprintf(vp, len, "%s", path);
    if (slash) snprintf(mp, len, "%.*s/merges.txt", (int)(slash - path), path);
    else snprintf(mp, len, "merges.txt");
}

int vocab_load(vocab_t *v, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0)
        return errf(err, errlen, "%s: cannot read the vocabulary: %s", path, strerror(errno));
    size_t plen = strlen(path);
    bool is_dir = S_ISDIR(st.st_mode);
    if (is_dir || (plen >= 5 && strcmp(path + plen - 5, ".json") == 0)) {
        char vp[4096], mp[4096];
        hf_paths(path, is_dir, vp, mp, sizeof vp);
        return load_hf(v, vp, mp, err, errlen);
    }
    return load_tiktoken(v, path, err, errlen);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The tokenizer object from a vocabulary file: here, beside the readers, so that tokenizer.c
 * (the object) calls nothing of this file and the arrow runs one way (formats -> object).
 * "*.model": SentencePiece; "*.json" other than vocab.json: tokenizer.json; a directory: its
 * vocab.json + merges.txt, else its tokenizer.json, else its tokenizer.model. */
int tokenizer_create(tokenizer_t **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    struct stat st;
    char sub[4096];
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(sub, sizeof sub, "%s/vocab.json", path);
        if (!is_file(sub)) {
            snprintf(sub, sizeof sub, "%s/tokenizer.json", path);
            if (is_file(sub)) return tokenizer_load_hf(out, sub, err, errlen);
            snprintf(sub, sizeof sub, "%s/tokenizer.model", path);
            if (is_file(sub)) return tokenizer_load_spm(out, sub, err, errlen);
        }
    } else if (ends_with(path, ".model")) {
        return tokenizer_load_spm(out, path, err, errlen);
    } else if (ends_with(path, ".json") && !ends_with(path, "vocab.json")) {
        return tokenizer_load_hf(out, path, err, errlen);
    }
    vocab_t v = {0};
    if (vocab_load(&v, path, err, errlen) != 0) {
        vocab_free(&v);
        return -1;
    }
    return tokenizer_from_vocab(out, &v, err, errlen);
}

/* ------------------------------------------------------------------ saving */

/* One "base64(token) rank\n" line per rank, through atomic_file_* (tmp, fsync, rename, fsync
 * of the directory): a crash leaves the old file or the whole new one. */
int tokenizer_save(const tokenizer_t *tok, const char *path) {
    atomic_file_t af;
    if (atomic_file_open(&af, path) != 0) return -1;
    if (tok->source) { /* a tokenizer.json or SentencePiece model: its own bytes */
        if (atomic_file_write(&af, tok->source, tok->source_len) != 0) {
            atomic_file_abort(&af);
            return -1;
        }
        return atomic_file_commit(&af);
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (uint32_t r = 0; r < tok->v.n && rc == 0; r++) {
        size_t len;
        const uint8_t *p = vocab_tok(&tok->v, r, &len);
        if (4 * (len / 3 + 1) + 16 > cap) {
            cap = 4 * (len / 3 + 1) + 16;
            line = xrealloc_small(line, cap);
        }
        size_t o = b64_encode(p, len, line);
        o += (size_t)snprintf(line + o, cap - o, " %u\n", r);
        rc = atomic_file_write(&af, line, o);
    }
    free(line);
    if (rc != 0) {
        atomic_file_abort(&af); /* keeps errno */
        return -1;
    }
    return atomic_file_commit(&af);
}
