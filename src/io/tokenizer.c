/* tokenizer.c — byte-level BPE like GPT-2 / tiktoken (see tokenizer.h).
 * Sections: hashing and the bytes->rank map; building a vocabulary; the pre-tokenising regex;
 * BPE merging (linear scan for short pieces, a heap for long ones) and a cache of recent words;
 * encode / decode; loading tiktoken and Hugging Face files; saving; counting words and training.
 * Uses: core/ (allocation, errors). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"
#include "core/alloc.h"
#include "core/error.h"
#include <errno.h>
#include <fcntl.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NO_RANK UINT32_MAX
#define EOT_LEN (sizeof TOKENIZER_EOT_TEXT - 1)

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ hashing, rank map */

/* n <= 16 bytes as two words, with loads that overlap instead of byte loops: every byte is in
 * one of the words, and with n mixed into the hash, different strings give different pairs. */
static inline void load_short(const uint8_t *p, size_t n, uint64_t *lo, uint64_t *hi) {
    uint32_t a, b;
    if (n >= 8) {
        memcpy(lo, p, 8);
        memcpy(hi, p + n - 8, 8);
    } else if (n >= 4) {
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        *lo = a, *hi = b;
    } else {
        *lo = n ? (uint64_t)p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16 : 0;
        *hi = 0;
    }
}

/* A fast 64-bit hash for byte strings (tokens, words: mostly short). */
static inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full), lo, hi;
    while (n > 16) {
        memcpy(&lo, p, 8);
        h = (h ^ lo) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    load_short(p, n, &lo, &hi);
    h = (h ^ lo) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    h = (h ^ hi) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 32);
}

/* a[0..n) == b[0..n) */
static inline bool bytes_equal(const uint8_t *a, const uint8_t *b, size_t n) {
    if (n > 16) return memcmp(a, b, n) == 0;
    uint64_t alo, ahi, blo, bhi;
    load_short(a, n, &alo, &ahi);
    load_short(b, n, &blo, &bhi);
    return alo == blo && ahi == bhi;
}

/* The vocabulary: n tokens back to back in `bytes`, token r = bytes[off[r] .. off[r+1]), and an
 * open-addressing map from byte string to rank. A slot holds (hash >> 32) << 32 | (rank + 1). */
typedef struct vocab {
    uint32_t n, cap;
    uint8_t *bytes;
    size_t n_bytes, cap_bytes;
    uint32_t *off; /* n + 1 entries */
    uint64_t *slots;
    size_t mask;   /* slots - 1, a power of two minus one */
} vocab_t;

static inline const uint8_t *vocab_tok(const vocab_t *v, uint32_t r, size_t *len) {
    *len = v->off[r + 1] - v->off[r];
    return v->bytes + v->off[r];
}

/* Rank of bytes p[0..n), or NO_RANK. */
static inline uint32_t vocab_get(const vocab_t *v, const uint8_t *p, size_t n) {
    uint64_t h = hash_bytes(p, n), tag = h >> 32 << 32;
    for (size_t i = h & v->mask;; i = (i + 1) & v->mask) {
        uint64_t s = v->slots[i];
        if (s == 0) return NO_RANK;
        if ((s & 0xFFFFFFFF00000000ull) != tag) continue;
        uint32_t r = (uint32_t)s - 1;
        if (v->off[r + 1] - v->off[r] == n && bytes_equal(v->bytes + v->off[r], p, n)) return r;
    }
}

static void vocab_rehash(vocab_t *v, size_t n_slots) {
    free(v->slots);
    v->slots = calloc(n_slots, sizeof *v->slots);
    PTR_CHECK(v->slots);
    v->mask = n_slots - 1;
    for (uint32_t r = 0; r < v->n; r++) {
        size_t len;
        const uint8_t *p = vocab_tok(v, r, &len);
        uint64_t h = hash_bytes(p, len);
        size_t i = h & v->mask;
        while (v->slots[i]) i = (i + 1) & v->mask;
        v->slots[i] = (h >> 32 << 32) | ((uint64_t)r + 1);
    }
}

/* Append a token as the next rank. Returns its rank, or the rank of an equal token already
 * there (then nothing is added). */
static uint32_t vocab_add(vocab_t *v, const uint8_t *p, size_t n) {
    uint32_t old = v->slots ? vocab_get(v, p, n) : NO_RANK;
    if (old != NO_RANK) return old;
    if (v->n + 2 > v->cap) {
        v->cap = v->cap ? 2 * v->cap : 1024;
        v->off = xrealloc_small(v->off, (v->cap + 1) * sizeof *v->off);
    }
    if (v->n_bytes + n > v->cap_bytes) {
        v->cap_bytes = 2 * (v->n_bytes + n) + 4096;
        v->bytes = xrealloc_small(v->bytes, v->cap_bytes);
    }
    if (v->n == 0) v->off[0] = 0;
    memcpy(v->bytes + v->n_bytes, p, n);
    v->n_bytes += n;
    v->off[++v->n] = (uint32_t)v->n_bytes;
    if (!v->slots || 2 * (size_t)v->n > v->mask + 1) {
        vocab_rehash(v, v->slots ? 2 * (v->mask + 1) : 4096);
    } else {
        uint64_t h = hash_bytes(p, n);
        size_t i = h & v->mask;
        while (v->slots[i]) i = (i + 1) & v->mask;
        v->slots[i] = (h >> 32 << 32) | (uint64_t)v->n;
    }
    return v->n - 1;
}

static void vocab_free(vocab_t *v) {
    free(v->bytes);
    free(v->off);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

/* Every byte must be a token, or some input could not be encoded. */
static int vocab_check_bytes(const vocab_t *v, const char *path, char *err, size_t errlen) {
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (vocab_get(v, &c, 1) == NO_RANK) {
            set_err(err, errlen, "%s: byte 0x%02x has no token (a byte-level BPE vocabulary "
                    "needs all 256 single bytes)", path, b);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ the pre-tokenising regex */

/* GPT-2's pattern for PCRE2. \s is spelled out as Unicode's White_Space, [\t-\r\x{85}\p{Z}]:
 * under PCRE2_UCP, \s also matches U+180E (PCRE2 follows \h there), which Unicode took out of
 * White_Space in 6.3 and which tiktoken (Rust regex) and GPT-2's encoder.py (Python regex) treat
 * as an ordinary symbol. (?!\S) becomes (?![^...]): at an invalid UTF-8 sequence, as at the end,
 * a class matches nothing, so the lookahead holds there as tiktoken's does at a run's end. */
#define WS "\\t-\\r\\x{85}\\p{Z}"
#define PCRE2_GPT2_PATTERN                                                                 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+" \
    "|[" WS "]+(?![^" WS "])|[" WS "]+"

typedef struct pretok {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    bool jit;
} pretok_t;

static int pretok_init(pretok_t *p, char *err, size_t errlen) {
    int ecode;
    PCRE2_SIZE eoff;
    memset(p, 0, sizeof *p);
    p->code = pcre2_compile((PCRE2_SPTR)PCRE2_GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ecode, &eoff, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        set_err(err, errlen, "PCRE2 cannot compile GPT-2's pattern at %zu: %s", (size_t)eoff,
                (char *)msg);
        return -1;
    }
    p->md = pcre2_match_data_create_from_pattern(p->code, NULL);
    PTR_CHECK(p->md);
    /* JIT when the library has it; the interpreter gives the same matches, only slower. */
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    if (p->jit) {
        p->mctx = pcre2_match_context_create(NULL);
        p->stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        PTR_CHECK(p->mctx);
        PTR_CHECK(p->stack);
        pcre2_jit_stack_assign(p->mctx, NULL, p->stack);
    }
    return 0;
}

static void pretok_free(pretok_t *p) {
    if (p->stack) pcre2_jit_stack_free(p->stack);
    if (p->mctx) pcre2_match_context_free(p->mctx);
    if (p->md) pcre2_match_data_free(p->md);
    if (p->code) pcre2_code_free(p->code);
    memset(p, 0, sizeof *p);
}

/* The first match at or after `pos`: 1 and its span [*s, *e), or 0 when there is none. */
static int pretok_match(pretok_t *p, const uint8_t *text, size_t len, size_t pos, size_t *s,
                        size_t *e) {
    int rc = p->jit ? pcre2_jit_match(p->code, text, len, pos, 0, p->md, p->mctx)
                    : pcre2_match(p->code, text, len, pos, 0, p->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        die_call(__FILE__, __LINE__, "pcre2_match", (char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
    *s = ov[0];
    *e = ov[1];
    ASSERT(*e > *s && *s >= pos); /* every alternative consumes at least one character */
    return 1;
}

/* Walks the pieces of a text: regex matches, and between them the runs of bytes no match
 * covers (invalid UTF-8), so that the pieces tile the text exactly. */
typedef struct piece_iter {
    pretok_t *re;
    const uint8_t *text;
    size_t len, pos, ms, me;
    int have; /* 0: not searched yet, 1: match [ms, me) pending, -1: no more matches */
} piece_iter_t;

static int piece_next(piece_iter_t *it, size_t *s, size_t *e) {
    if (it->pos >= it->len) return 0;
    if (it->have == 0)
        it->have = pretok_match(it->re, it->text, it->len, it->pos, &it->ms, &it->me) ? 1 : -1;
    if (it->have < 0 || it->ms > it->pos) { /* a gap before the next match (or the end) */
        *s = it->pos;
        *e = it->have < 0 ? it->len : it->ms;
    } else {
        *s = it->ms;
        *e = it->me;
        it->have = 0;
    }
    it->pos = *e;
    return 1;
}

/* ------------------------------------------------------------------ the tokenizer object */

#define CACHE_SLOTS 4096  /* direct-mapped cache of recent multi-token words */
#define CACHE_WORD 24     /* longest word cached, bytes */
#define CACHE_IDS 8       /* most ids a cached word may have */

typedef struct cache_slot {
    uint8_t len, n_ids;
    uint8_t bytes[CACHE_WORD];
    uint32_t ids[CACHE_IDS];
} cache_slot_t;

typedef struct bpe_part { /* one part of a piece being merged */
    size_t start;
    uint32_t rank; /* rank of this part joined with the next one, or NO_RANK */
} bpe_part_t;

struct tokenizer {
    vocab_t v;
    pretok_t re;
    size_t heap_threshold;
    bpe_part_t *parts;         /* scratch for merging, grown as needed */
    size_t cap_parts;
    cache_slot_t *cache;
};

void tok_ids_free(tok_ids_t *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static void ids_reserve(tok_ids_t *v, size_t more) {
    if (v->n + more <= v->cap) return;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < v->n + more) cap *= 2;
    v->ids = xrealloc_small(v->ids, cap * sizeof *v->ids);
    v->cap = cap;
}

static inline void ids_push(tok_ids_t *v, uint32_t id) {
    if (v->n == v->cap) ids_reserve(v, 1);
    v->ids[v->n++] = id;
}

/* Wrap a finished vocabulary (takes ownership of *v). */
static int tokenizer_from_vocab(tokenizer_t **out, vocab_t *v, char *err, size_t errlen) {
    tokenizer_t *t = calloc(1, sizeof *t);
    PTR_CHECK(t);
    if (pretok_init(&t->re, err, errlen) != 0) {
        free(t);
        vocab_free(v);
        return -1;
    }
    t->v = *v;
    memset(v, 0, sizeof *v);
    t->heap_threshold = 64;
    t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
    PTR_CHECK(t->cache);
    *out = t;
    return 0;
}

void tokenizer_destroy(tokenizer_t *tok) {
    if (!tok) return;
    vocab_free(&tok->v);
    pretok_free(&tok->re);
    free(tok->parts);
    free(tok->cache);
    free(tok);
}

uint32_t tokenizer_n_ranks(const tokenizer_t *tok) { return tok->v.n; }
uint32_t tokenizer_eot(const tokenizer_t *tok) { return tok->v.n; }
uint32_t tokenizer_vocab_size(const tokenizer_t *tok) { return tok->v.n + 1; }
void tokenizer_set_heap_threshold(tokenizer_t *tok, size_t n) { tok->heap_threshold = n; }

const char *tokenizer_token(const tokenizer_t *tok, uint32_t id, size_t *len) {
    if (id == tok->v.n) {
        *len = EOT_LEN;
        return TOKENIZER_EOT_TEXT;
    }
    if (id > tok->v.n) return NULL;
    return (const char *)vocab_tok(&tok->v, id, len);
}

/* ------------------------------------------------------------------ BPE merging */

/* Rank of the bytes spanning parts[i] .. parts[i + 2] (i.e. part i joined with part i + 1). */
static inline uint32_t pair_rank(const vocab_t *v, const uint8_t *p, const bpe_part_t *parts,
                                 size_t i, size_t n_parts) {
    if (i + 2 >= n_parts) return NO_RANK;
    return vocab_get(v, p + parts[i].start, parts[i + 2].start - parts[i].start);
}

/* tiktoken's byte_pair_merge: repeatedly join the adjacent pair whose joined bytes have the
 * lowest rank (the leftmost on ties). parts[] ends with a sentinel at n. O(n^2): short pieces. */
static size_t bpe_linear(const vocab_t *v, const uint8_t *p, size_t n, bpe_part_t *parts) {
    size_t n_parts = n + 1;
    for (size_t i = 0; i <= n; i++) parts[i].start = i;
    for (size_t i = 0; i <= n; i++) parts[i].rank = pair_rank(v, p, parts, i, n_parts);
    for (;;) {
        uint32_t best = NO_RANK;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n_parts; i++)
            if (parts[i].rank < best) best = parts[i].rank, bi = i;
        if (best == NO_RANK) break;
        memmove(parts + bi + 1, parts + bi + 2, (n_parts - bi - 2) * sizeof *parts);
        n_parts--;
        parts[bi].rank = pair_rank(v, p, parts, bi, n_parts);
        if (bi > 0) parts[bi - 1].rank = pair_rank(v, p, parts, bi - 1, n_parts);
    }
    return n_parts;
}

/* The same merges for long pieces in O(n log n): a doubly linked list of parts and a min-heap
 * of (rank, start) with stale entries skipped. Ties go to the smaller start, i.e. the leftmost,
 * as in the linear scan, so both give identical parts. */
typedef struct heap_ent {
    uint32_t rank;
    size_t start;
} heap_ent_t;

static inline bool hent_less(heap_ent_t a, heap_ent_t b) {
    return a.rank < b.rank || (a.rank == b.rank && a.start < b.start);
}

static void hent_push(heap_ent_t *h, size_t *n, heap_ent_t e) {
    size_t i = (*n)++;
    while (i > 0 && hent_less(e, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static heap_ent_t hent_pop(heap_ent_t *h, size_t *n) {
    heap_ent_t top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && hent_less(h[c + 1], h[c])) c++;
        if (!hent_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

typedef struct link { /* part starting at byte i: its successor and predecessor starts */
    size_t next, prev;
    uint32_t rank;   /* rank of this part joined with the next, NO_RANK if none */
    bool alive;
} link_t;

static uint32_t link_rank(const vocab_t *v, const uint8_t *p, size_t n, const link_t *l,
                          size_t i) {
    size_t j = l[i].next;
    if (j >= n) return NO_RANK;
    return vocab_get(v, p + i, l[j].next - i);
}

static size_t bpe_heap(const vocab_t *v, const uint8_t *p, size_t n, bpe_part_t *parts) {
    link_t *l = malloc((n + 1) * sizeof *l);
    heap_ent_t *h = malloc(3 * (n + 1) * sizeof *h); /* n initial + at most 2 per merge */
    PTR_CHECK(l);
    PTR_CHECK(h);
    size_t nh = 0;
    for (size_t i = 0; i <= n; i++) l[i] = (link_t){i + 1, i - 1, NO_RANK, true};
    for (size_t i = 0; i + 1 < n; i++) {
        l[i].rank = link_rank(v, p, n, l, i);
        if (l[i].rank != NO_RANK) hent_push(h, &nh, (heap_ent_t){l[i].rank, i});
    }
    while (nh > 0) {
        heap_ent_t e = hent_pop(h, &nh);
        size_t i = e.start;
        if (!l[i].alive || l[i].rank != e.rank) continue; /* stale */
        size_t j = l[i].next;
        l[j].alive = false;
        l[i].next = l[j].next;
        l[l[j].next].prev = i;
        l[i].rank = link_rank(v, p, n, l, i);
        if (l[i].rank != NO_RANK) hent_push(h, &nh, (heap_ent_t){l[i].rank, i});
        if (i > 0) {
            size_t k = l[i].prev;
            l[k].rank = link_rank(v, p, n, l, k);
            if (l[k].rank != NO_RANK) hent_push(h, &nh, (heap_ent_t){l[k].rank, k});
        }
    }
    size_t n_parts = 0;
    for (size_t i = 0; i < n; i = l[i].next) parts[n_parts++].start = i;
    parts[n_parts++].start = n;
    free(l);
    free(h);
    return n_parts;
}

static void parts_reserve(tokenizer_t *tok, size_t n) {
    if (n <= tok->cap_parts) return;
    tok->cap_parts = n > 2 * tok->cap_parts ? n : 2 * tok->cap_parts;
    free(tok->parts);
    tok->parts = malloc(tok->cap_parts * sizeof *tok->parts);
    PTR_CHECK(tok->parts);
}

/* BPE one piece of n >= 2 bytes that is not itself a token; append its ids. */
static void bpe_piece(tokenizer_t *tok, const uint8_t *p, size_t n, tok_ids_t *out) {
    parts_reserve(tok, n + 1);
    size_t n_parts = n <= tok->heap_threshold ? bpe_linear(&tok->v, p, n, tok->parts)
                                              : bpe_heap(&tok->v, p, n, tok->parts);
    ids_reserve(out, n_parts - 1);
    for (size_t i = 0; i + 1 < n_parts; i++) {
        size_t s = tok->parts[i].start;
        uint32_t r = vocab_get(&tok->v, p + s, tok->parts[i + 1].start - s);
        ASSERT(r != NO_RANK);
        out->ids[out->n++] = r;
    }
}

/* Encode one piece: a whole-token lookup first (most words), then the cache, then BPE. */
static void encode_piece(tokenizer_t *tok, const uint8_t *p, size_t n, tok_ids_t *out) {
    uint32_t r = vocab_get(&tok->v, p, n);
    if (r != NO_RANK) {
        ids_push(out, r);
        return;
    }
    if (n > CACHE_WORD) {
        bpe_piece(tok, p, n, out);
        return;
    }
    cache_slot_t *c = &tok->cache[hash_bytes(p, n) & (CACHE_SLOTS - 1)];
    if (c->len == n && memcmp(c->bytes, p, n) == 0) {
        ids_reserve(out, c->n_ids);
        memcpy(out->ids + out->n, c->ids, c->n_ids * sizeof *c->ids);
        out->n += c->n_ids;
        return;
    }
    size_t first = out->n;
    bpe_piece(tok, p, n, out);
    if (out->n - first <= CACHE_IDS) {
        c->len = (uint8_t)n;
        c->n_ids = (uint8_t)(out->n - first);
        memcpy(c->bytes, p, n);
        memcpy(c->ids, out->ids + first, c->n_ids * sizeof *c->ids);
    }
}

/* ------------------------------------------------------------------ encode, decode */

static void encode_ordinary(tokenizer_t *tok, const uint8_t *text, size_t len, tok_ids_t *out) {
    piece_iter_t it = {.re = &tok->re, .text = text, .len = len};
    size_t s, e;
    while (piece_next(&it, &s, &e)) encode_piece(tok, text + s, e - s, out);
}

void tokenizer_encode(tokenizer_t *tok, const char *text, size_t len, unsigned flags,
                      tok_ids_t *out) {
    const uint8_t *p = (const uint8_t *)text, *end = p + len;
    if (flags & TOKENIZER_ALLOW_SPECIAL) {
        const uint8_t *q;
        while ((q = memmem(p, (size_t)(end - p), TOKENIZER_EOT_TEXT, EOT_LEN)) != NULL) {
            encode_ordinary(tok, p, (size_t)(q - p), out);
            ids_push(out, tokenizer_eot(tok));
            p = q + EOT_LEN;
        }
    }
    encode_ordinary(tok, p, (size_t)(end - p), out);
}

size_t tokenizer_safe_cut(const char *text, size_t len, size_t from) {
    for (size_t p = from; p + 1 < len;) {
        const char *nl = memchr(text + p, '\n', len - 1 - p);
        if (!nl) break;
        p = (size_t)(nl - text);
        unsigned char next = (unsigned char)text[p + 1];
        if (p > 0 && next < 0x80 && next != ' ' && !(next >= '\t' && next <= '\r')) return p;
        p++;
    }
    return len;
}

size_t tokenizer_decode(const tokenizer_t *tok, const uint32_t *ids, size_t n, char *out,
                        size_t cap) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *b = tokenizer_token(tok, ids[i], &len);
        if (!b) return SIZE_MAX;
        if (total < cap) memcpy(out + total, b, len < cap - total ? len : cap - total);
        total += len;
    }
    return total;
}

/* ------------------------------------------------------------------ reading files, base64 */

/* The whole file in a malloc'd buffer (NUL-terminated for convenience). */
static char *read_whole(const char *path, size_t *len, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: cannot read: not a regular file", path);
        close(fd);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    PTR_CHECK(buf);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0) {
            set_err(err, errlen, "%s: read failed: %s", path, r < 0 ? strerror(errno) : "short");
            free(buf);
            close(fd);
            return NULL;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *len = got;
    return buf;
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
        set_err(err, errlen, "%s:%d: bad base64 token '%.*s'", path, line,
                (int)(sp > 60 ? 60 : sp), s);
        return -1;
    }
    uint64_t rank = 0;
    size_t i = r0;
    for (; i < n && s[i] >= '0' && s[i] <= '9' && rank < 0x7FFFFFFF; i++)
        rank = rank * 10 + (uint64_t)(s[i] - '0');
    if (r0 == n || i != n || rank >= 0x7FFFFFFF) {
        set_err(err, errlen, "%s:%d: expected 'base64-token rank', found '%.*s'", path, line,
                (int)(n > 60 ? 60 : n), s);
        return -1;
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
            set_err(err, errlen, "%s:%d: rank %u out of range: %zu tokens need ranks 0..%zu",
                    path, lines[i].line, r, n, n - 1);
            rc = -1;
        } else if (by_rank[r] != SIZE_MAX) {
            set_err(err, errlen, "%s:%d: rank %u repeats line %d", path, lines[i].line, r,
                    lines[by_rank[r]].line);
            rc = -1;
        } else {
            by_rank[r] = i;
        }
    }
    for (size_t r = 0; r < n && rc == 0; r++) {
        const rank_line_t *l = &lines[by_rank[r]];
        uint32_t got = vocab_add(v, pool + l->off, l->len);
        if (got != r) {
            set_err(err, errlen, "%s:%d: token repeats the token of rank %u (line %d)", path,
                    l->line, got, lines[by_rank[got]].line);
            rc = -1;
        }
    }
    free(by_rank);
    return rc;
}

static int load_tiktoken(vocab_t *v, const char *path, char *err, size_t errlen) {
    size_t len, n = 0;
    char *buf = read_whole(path, &len, err, errlen);
    if (!buf) return -1;
    uint8_t *pool = malloc(len + 1); /* decoded tokens are shorter than their base64 */
    PTR_CHECK(pool);
    rank_line_t *lines = parse_rank_lines(buf, len, path, pool, &n, err, errlen);
    int rc = lines ? 0 : -1;
    if (rc == 0 && n == 0) {
        set_err(err, errlen, "%s: no tokens (expected lines of 'base64-token rank')", path);
        rc = -1;
    }
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
static void gpt2_alphabet(int byte_of_cp[324]) {
    int cp_of_byte[256];
    uint8_t order[256];
    gpt2_byte_map(cp_of_byte, order);
    for (int i = 0; i < 324; i++) byte_of_cp[i] = -1;
    for (int b = 0; b < 256; b++) byte_of_cp[cp_of_byte[b]] = b;
}

/* A token written in GPT-2's byte alphabet back to bytes. Returns the byte count or -1. */
static long unicode_to_bytes(const int byte_of_cp[324], const char *s, size_t n, uint8_t *out) {
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
        set_err(err, errlen, "%s:%d: not a JSON object of \"token\": id entries", path, j.line);
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
            set_err(err, errlen, "%s:%d: expected two tokens in GPT-2's byte alphabet separated "
                    "by one space, found '%.*s'", path, line, (int)(n > 60 ? 60 : n), s);
            rc = -1;
        } else if (vocab_get(v, tmp, (size_t)a) == NO_RANK ||
                   vocab_get(v, tmp + a, (size_t)b) == NO_RANK) {
            set_err(err, errlen, "%s:%d: '%.*s' merges a token no earlier line makes", path,
                    line, (int)(n > 60 ? 60 : n), s);
            rc = -1;
        } else {
            uint32_t before = v->n, r = vocab_add(v, tmp, (size_t)(a + b));
            if (r != before) {
                set_err(err, errlen, "%s:%d: '%.*s' makes a token that rank %u already is", path,
                        line, (int)(n > 60 ? 60 : n), s, r);
                rc = -1;
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
                set_err(err, errlen, "%s:%d: %s has id %ld; it must follow the last rank (%u)",
                        path, es[i].line, TOKENIZER_EOT_TEXT, es[i].id, v->n);
                rc = -1;
            }
            continue;
        }
        long len = es[i].len <= 4096 ? unicode_to_bytes(alphabet, k, es[i].len, tmp) : -1;
        uint32_t r = len > 0 ? vocab_get(v, tmp, (size_t)len) : NO_RANK;
        int shown = (int)(es[i].len > 60 ? 60 : es[i].len);
        if (r == NO_RANK) {
            set_err(err, errlen, "%s:%d: token \"%.*s\" (id %ld) is not one of the 256 bytes "
                    "nor made by merges.txt", path, es[i].line, shown, k, es[i].id);
            rc = -1;
        } else if ((long)r != es[i].id) {
            set_err(err, errlen, "%s:%d: token \"%.*s\" has id %ld, but merges.txt gives it "
                    "rank %u", path, es[i].line, shown, k, es[i].id, r);
            rc = -1;
        }
        n_tokens++;
    }
    if (rc == 0 && n_tokens != v->n) {
        set_err(err, errlen, "%s: has %zu tokens but the 256 bytes and merges.txt make %u", path,
                n_tokens, v->n);
        rc = -1;
    }
    free(tmp);
    return rc;
}

static int load_hf(vocab_t *v, const char *vocab_path, const char *merges_path, char *err,
                   size_t errlen) {
    size_t vlen = 0, mlen = 0, n = 0;
    char *vbuf = read_whole(vocab_path, &vlen, err, errlen);
    char *mbuf = vbuf ? read_whole(merges_path, &mlen, err, errlen) : NULL;
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

/* ------------------------------------------------------------------ create, save */

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

int tokenizer_create(tokenizer_t **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    vocab_t v = {0};
    struct stat st;
    if (stat(path, &st) != 0) {
        set_err(err, errlen, "%s: cannot read the vocabulary: %s", path, strerror(errno));
        return -1;
    }
    size_t plen = strlen(path);
    bool is_dir = S_ISDIR(st.st_mode);
    int rc;
    if (is_dir || (plen >= 5 && strcmp(path + plen - 5, ".json") == 0)) {
        char vp[4096], mp[4096];
        hf_paths(path, is_dir, vp, mp, sizeof vp);
        rc = load_hf(&v, vp, mp, err, errlen);
    } else {
        rc = load_tiktoken(&v, path, err, errlen);
    }
    if (rc != 0) {
        vocab_free(&v);
        return -1;
    }
    return tokenizer_from_vocab(out, &v, err, errlen);
}

int tokenizer_save(const tokenizer_t *tok, const char *path) {
    size_t plen = strlen(path) + 5;
    char *tmp = malloc(plen);
    PTR_CHECK(tmp);
    snprintf(tmp, plen, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(tmp);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    for (uint32_t r = 0; r < tok->v.n; r++) {
        size_t len;
        const uint8_t *p = vocab_tok(&tok->v, r, &len);
        if (4 * (len / 3 + 1) + 16 > cap) {
            cap = 4 * (len / 3 + 1) + 16;
            line = xrealloc_small(line, cap);
        }
        size_t o = b64_encode(p, len, line);
        line[o] = 0;
        fprintf(f, "%s %u\n", line, r);
    }
    free(line);
    int rc = ferror(f) ? -1 : 0;
    int saved = errno;
    if (fclose(f) != 0) rc = -1, saved = errno;
    if (rc == 0 && rename(tmp, path) != 0) rc = -1, saved = errno;
    if (rc != 0) unlink(tmp);
    free(tmp);
    errno = saved;
    return rc;
}

/* ------------------------------------------------------------------ counting words */

typedef struct word_slot {
    uint64_t hash, count;
    size_t off;   /* bytes in the pool */
    uint32_t len; /* 0: empty slot */
} word_slot_t;

struct tok_counter {
    pretok_t re;
    word_slot_t *slots;
    size_t mask, n_words;
    uint8_t *pool;
    size_t n_pool, cap_pool;
};

tok_counter_t *tok_counter_create(void) {
    tok_counter_t *c = calloc(1, sizeof *c);
    PTR_CHECK(c);
    char err[256];
    if (pretok_init(&c->re, err, sizeof err) != 0) die_call(__FILE__, __LINE__, "pretok_init", err);
    c->mask = 4095;
    c->slots = calloc(c->mask + 1, sizeof *c->slots);
    PTR_CHECK(c->slots);
    return c;
}

void tok_counter_destroy(tok_counter_t *c) {
    if (!c) return;
    pretok_free(&c->re);
    free(c->slots);
    free(c->pool);
    free(c);
}

size_t tok_counter_n_words(const tok_counter_t *c) { return c->n_words; }

static void counter_grow(tok_counter_t *c) {
    size_t n = 2 * (c->mask + 1);
    word_slot_t *s = calloc(n, sizeof *s);
    PTR_CHECK(s);
    for (size_t i = 0; i <= c->mask; i++) {
        if (!c->slots[i].len) continue;
        size_t k = c->slots[i].hash & (n - 1);
        while (s[k].len) k = (k + 1) & (n - 1);
        s[k] = c->slots[i];
    }
    free(c->slots);
    c->slots = s;
    c->mask = n - 1;
}

static void counter_add(tok_counter_t *c, const uint8_t *w, size_t len, uint64_t count) {
    uint64_t h = hash_bytes(w, len);
    size_t k = h & c->mask;
    for (; c->slots[k].len; k = (k + 1) & c->mask) {
        word_slot_t *s = &c->slots[k];
        if (s->hash == h && s->len == len && memcmp(c->pool + s->off, w, len) == 0) {
            s->count += count;
            return;
        }
    }
    if (c->n_pool + len > c->cap_pool) {
        c->cap_pool = 2 * (c->n_pool + len) + 65536;
        c->pool = xrealloc_small(c->pool, c->cap_pool);
    }
    memcpy(c->pool + c->n_pool, w, len);
    c->slots[k] = (word_slot_t){h, count, c->n_pool, (uint32_t)len};
    c->n_pool += len;
    if (2 * ++c->n_words > c->mask) counter_grow(c);
}

void tok_counter_add_text(tok_counter_t *c, const char *text, size_t len) {
    piece_iter_t it = {.re = &c->re, .text = (const uint8_t *)text, .len = len};
    size_t s, e;
    while (piece_next(&it, &s, &e)) {
        /* A piece longer than 4 GiB would not fit a word's length; it is counted in slices. */
        for (size_t p = s; p < e; p += UINT32_MAX)
            counter_add(c, (const uint8_t *)text + p, e - p < UINT32_MAX ? e - p : UINT32_MAX, 1);
    }
}

/* Packed: per word a uint32 length, a uint64 count, then the bytes. */
char *tok_counter_pack(const tok_counter_t *c, size_t *len) {
    size_t n = c->n_words * 12 + c->n_pool, o = 0;
    char *buf = malloc(n ? n : 1);
    PTR_CHECK(buf);
    for (size_t i = 0; i <= c->mask; i++) {
        const word_slot_t *s = &c->slots[i];
        if (!s->len) continue;
        memcpy(buf + o, &s->len, 4);
        memcpy(buf + o + 4, &s->count, 8);
        memcpy(buf + o + 12, c->pool + s->off, s->len);
        o += 12 + s->len;
    }
    *len = o;
    return buf;
}

int tok_counter_unpack_add(tok_counter_t *c, const char *buf, size_t len) {
    for (size_t o = 0; o < len;) {
        uint32_t wl;
        uint64_t count;
        if (len - o < 12) return -1;
        memcpy(&wl, buf + o, 4);
        memcpy(&count, buf + o + 4, 8);
        if (wl == 0 || len - o - 12 < wl) return -1;
        counter_add(c, (const uint8_t *)buf + o + 12, wl, count);
        o += 12 + wl;
    }
    return 0;
}

/* ------------------------------------------------------------------ training */

typedef struct train_word {
    size_t off;      /* symbols in the trainer's symbol pool */
    uint32_t n;      /* current number of symbols */
    uint32_t stamp;  /* last merge that visited this word */
    uint64_t count;
} train_word_t;

typedef struct train_pair {
    uint32_t a, b;
    int64_t count, old_count; /* old_count: before the current merge (valid when stamp matches) */
    uint32_t *where;          /* words that may contain the pair (duplicates, stale entries ok) */
    uint32_t n_where, cap_where, last_word, stamp;
} train_pair_t;

typedef struct pair_ent { /* heap entry: most frequent first, then smallest (a, b) */
    int64_t count;
    uint32_t a, b;
} pair_ent_t;

typedef struct trainer {
    vocab_t v;
    train_word_t *words;
    size_t n_words;
    uint32_t *sym;
    train_pair_t *pairs;
    size_t n_pairs, cap_pairs;
    uint32_t *pair_slots; /* open addressing: pair index + 1 */
    size_t pair_mask;
    pair_ent_t *heap;
    size_t n_heap, cap_heap;
    uint32_t *touched;
    size_t n_touched, cap_touched;
    uint32_t stamp;
} trainer_t;

static inline uint64_t pair_hash(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 31);
}

static void pairs_rehash(trainer_t *t, size_t n_slots) {
    free(t->pair_slots);
    t->pair_slots = calloc(n_slots, sizeof *t->pair_slots);
    PTR_CHECK(t->pair_slots);
    t->pair_mask = n_slots - 1;
    for (size_t i = 0; i < t->n_pairs; i++) {
        size_t k = pair_hash(t->pairs[i].a, t->pairs[i].b) & t->pair_mask;
        while (t->pair_slots[k]) k = (k + 1) & t->pair_mask;
        t->pair_slots[k] = (uint32_t)i + 1;
    }
}

/* Index of pair (a, b), created with count 0 when `create`; SIZE_MAX when absent. */
static size_t pair_find(trainer_t *t, uint32_t a, uint32_t b, bool create) {
    size_t k = pair_hash(a, b) & t->pair_mask;
    for (; t->pair_slots[k]; k = (k + 1) & t->pair_mask) {
        train_pair_t *p = &t->pairs[t->pair_slots[k] - 1];
        if (p->a == a && p->b == b) return t->pair_slots[k] - 1;
    }
    if (!create) return SIZE_MAX;
    if (t->n_pairs == t->cap_pairs) {
        t->cap_pairs = t->cap_pairs ? 2 * t->cap_pairs : 65536;
        t->pairs = xrealloc_small(t->pairs, t->cap_pairs * sizeof *t->pairs);
    }
    t->pairs[t->n_pairs] = (train_pair_t){.a = a, .b = b, .last_word = UINT32_MAX,
                                          .stamp = UINT32_MAX};
    t->pair_slots[k] = (uint32_t)++t->n_pairs;
    if (2 * t->n_pairs > t->pair_mask) pairs_rehash(t, 2 * (t->pair_mask + 1));
    return t->n_pairs - 1;
}

/* Add `delta` to pair (a, b); note word w as a holder when `note`. */
static void pair_add(trainer_t *t, uint32_t a, uint32_t b, int64_t delta, uint32_t w, bool note) {
    size_t pi = pair_find(t, a, b, true); /* may move t->pairs: index first */
    train_pair_t *p = &t->pairs[pi];
    if (p->stamp != t->stamp) {
        p->stamp = t->stamp;
        p->old_count = p->count;
        if (t->n_touched == t->cap_touched) {
            t->cap_touched = t->cap_touched ? 2 * t->cap_touched : 4096;
            t->touched = xrealloc_small(t->touched, t->cap_touched * sizeof *t->touched);
        }
        t->touched[t->n_touched++] = (uint32_t)(p - t->pairs);
    }
    p->count += delta;
    if (note && p->last_word != w) {
        if (p->n_where == p->cap_where) {
            p->cap_where = p->cap_where ? 2 * p->cap_where : 4;
            p->where = xrealloc_small(p->where, p->cap_where * sizeof *p->where);
        }
        p->where[p->n_where++] = w;
        p->last_word = w;
    }
}

static inline bool pent_before(pair_ent_t x, pair_ent_t y) {
    if (x.count != y.count) return x.count > y.count;
    return x.a != y.a ? x.a < y.a : x.b < y.b;
}

static void pent_push(trainer_t *t, pair_ent_t e) {
    if (t->n_heap == t->cap_heap) {
        t->cap_heap = t->cap_heap ? 2 * t->cap_heap : 65536;
        t->heap = xrealloc_small(t->heap, t->cap_heap * sizeof *t->heap);
    }
    size_t i = t->n_heap++;
    while (i > 0 && pent_before(e, t->heap[(i - 1) / 2])) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = e;
}

static pair_ent_t pent_pop(trainer_t *t) {
    pair_ent_t *h = t->heap, top = h[0], last = h[--t->n_heap];
    size_t i = 0, n = t->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pent_before(h[c + 1], h[c])) c++;
        if (!pent_before(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n > 0) h[i] = last;
    return top;
}

/* Words sorted by bytes (so nothing depends on hash order), each as a run of byte symbols. */
typedef struct word_ref {
    const uint8_t *p;
    uint32_t len;
    uint64_t count;
} word_ref_t;

static int word_ref_cmp(const void *x, const void *y) {
    const word_ref_t *a = x, *b = y;
    int c = memcmp(a->p, b->p, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static void trainer_words(trainer_t *t, const tok_counter_t *c) {
    word_ref_t *refs = malloc((c->n_words ? c->n_words : 1) * sizeof *refs);
    PTR_CHECK(refs);
    size_t n = 0, n_sym = 0;
    for (size_t i = 0; i <= c->mask; i++) {
        const word_slot_t *s = &c->slots[i];
        if (s->len < 2) continue; /* one byte: no pair to count */
        refs[n++] = (word_ref_t){c->pool + s->off, s->len, s->count};
        n_sym += s->len;
    }
    qsort(refs, n, sizeof *refs, word_ref_cmp);
    t->words = malloc((n ? n : 1) * sizeof *t->words);
    t->sym = malloc((n_sym ? n_sym : 1) * sizeof *t->sym);
    PTR_CHECK(t->words);
    PTR_CHECK(t->sym);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t->words[i] = (train_word_t){off, refs[i].len, 0, refs[i].count};
        for (uint32_t k = 0; k < refs[i].len; k++) t->sym[off + k] = refs[i].p[k];
        off += refs[i].len;
    }
    t->n_words = n;
    free(refs);
}

static void trainer_count_pairs(trainer_t *t) {
    for (size_t w = 0; w < t->n_words; w++) {
        const uint32_t *s = t->sym + t->words[w].off;
        for (uint32_t i = 0; i + 1 < t->words[w].n; i++)
            pair_add(t, s[i], s[i + 1], (int64_t)t->words[w].count, (uint32_t)w, true);
    }
    for (size_t i = 0; i < t->n_pairs; i++)
        if (t->pairs[i].count > 0)
            pent_push(t, (pair_ent_t){t->pairs[i].count, t->pairs[i].a, t->pairs[i].b});
}

/* Replace every (a, b) in word w by z, updating the pair counts around it. */
static void trainer_merge_word(trainer_t *t, uint32_t w, uint32_t a, uint32_t b, uint32_t z) {
    train_word_t *wd = &t->words[w];
    uint32_t *s = t->sym + wd->off, n = wd->n, o = 0;
    int64_t c = (int64_t)wd->count;
    bool has = false;
    for (uint32_t i = 0; i + 1 < n && !has; i++) has = s[i] == a && s[i + 1] == b;
    if (!has) return; /* a stale entry of the pair's word list */
    for (uint32_t i = 0; i + 1 < n; i++) pair_add(t, s[i], s[i + 1], -c, w, false);
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) s[o++] = z, i++;
        else s[o++] = s[i];
    }
    wd->n = o;
    for (uint32_t i = 0; i + 1 < o; i++)
        pair_add(t, s[i], s[i + 1], c, w, s[i] == z || s[i + 1] == z);
}

/* Apply the merge of pair index pi: a new rank for its bytes (unless an equal token exists). */
static void trainer_merge(trainer_t *t, size_t pi) {
    uint32_t a = t->pairs[pi].a, b = t->pairs[pi].b;
    size_t la, lb;
    const uint8_t *pa = vocab_tok(&t->v, a, &la), *pb = vocab_tok(&t->v, b, &lb);
    uint8_t *joined = malloc(la + lb);
    PTR_CHECK(joined);
    memcpy(joined, pa, la);
    memcpy(joined + la, pb, lb);
    uint32_t z = vocab_add(&t->v, joined, la + lb);
    free(joined);
    uint32_t *where = t->pairs[pi].where, n_where = t->pairs[pi].n_where;
    t->pairs[pi].where = NULL;
    t->pairs[pi].n_where = t->pairs[pi].cap_where = 0;
    t->pairs[pi].last_word = UINT32_MAX;
    t->stamp++;
    t->n_touched = 0;
    for (uint32_t k = 0; k < n_where; k++) {
        if (t->words[where[k]].stamp == t->stamp) continue;
        t->words[where[k]].stamp = t->stamp;
        trainer_merge_word(t, where[k], a, b, z);
    }
    free(where);
    for (size_t k = 0; k < t->n_touched; k++) {
        train_pair_t *p = &t->pairs[t->touched[k]];
        if (p->count > p->old_count) pent_push(t, (pair_ent_t){p->count, p->a, p->b});
    }
}

/* The next pair to merge: the heap top whose count is current. SIZE_MAX when none is left. */
static size_t trainer_next(trainer_t *t) {
    while (t->n_heap > 0) {
        pair_ent_t e = pent_pop(t);
        size_t pi = pair_find(t, e.a, e.b, false);
        int64_t now = t->pairs[pi].count;
        if (now == e.count && now > 0) return pi;
        if (now > 0 && now < e.count) pent_push(t, (pair_ent_t){now, e.a, e.b});
    }
    return SIZE_MAX;
}

static void trainer_free(trainer_t *t) {
    for (size_t i = 0; i < t->n_pairs; i++) free(t->pairs[i].where);
    free(t->pairs);
    free(t->pair_slots);
    free(t->heap);
    free(t->touched);
    free(t->words);
    free(t->sym);
    vocab_free(&t->v);
}

int tokenizer_train(tokenizer_t **out, const tok_counter_t *counts, uint32_t vocab_size,
                    char *err, size_t errlen) {
    *out = NULL;
    if (vocab_size < 257) {
        set_err(err, errlen, "a vocabulary of %u ids is too small: 256 bytes and %s need 257",
                vocab_size, TOKENIZER_EOT_TEXT);
        return -1;
    }
    trainer_t t = {0};
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        vocab_add(&t.v, &c, 1);
    }
    pairs_rehash(&t, 1 << 16);
    trainer_words(&t, counts);
    trainer_count_pairs(&t);
    while (t.v.n < vocab_size - 1) {
        size_t pi = trainer_next(&t);
        if (pi == SIZE_MAX) break;
        trainer_merge(&t, pi);
    }
    vocab_t v = t.v;
    memset(&t.v, 0, sizeof t.v);
    trainer_free(&t);
    return tokenizer_from_vocab(out, &v, err, errlen);
}
