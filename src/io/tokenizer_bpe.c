/* tokenizer_bpe.c — encoding and decoding: tiktoken's byte-pair merge of one piece (a linear
 * scan for short pieces, a heap for long ones: identical ids), a direct-mapped cache of recent
 * multi-token words, encode (with or without <|endoftext|> as a special token), decode, and the
 * safe cut points where a text may be encoded in slices. Uses: core/ (allocation, errors). */
#include "io/tokenizer_internal.h"
#include "core/error.h"
#include <stdlib.h>
#include <string.h>

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

/* A SentencePiece model: the library encodes (it takes no special tokens from the text). */
static void spm_encode_ids(tokenizer_t *tok, const char *text, size_t len, tok_ids_t *out) {
    const int *ids;
    size_t n;
    char err[512];
    if (spm_encode(tok->spm, text, len, &ids, &n, err, sizeof err) != 0)
        die_call(__FILE__, __LINE__, "spm_encode", err);
    ids_reserve(out, n);
    for (size_t i = 0; i < n; i++) out->ids[out->n++] = (uint32_t)ids[i];
}

void tokenizer_encode(tokenizer_t *tok, const char *text, size_t len, unsigned flags,
                      tok_ids_t *out) {
    const uint8_t *p = (const uint8_t *)text, *end = p + len;
    if (tok->kind == TOK_HF_BPE) {
        hf_encode(tok, p, len, flags, out);
        return;
    }
    if (tok->kind == TOK_SPM) {
        spm_encode_ids(tok, text, len, out);
        return;
    }
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

size_t tokenizer_cut(const tokenizer_t *tok, const char *text, size_t len, size_t from) {
    if (tok->cut_gpt2) return tokenizer_safe_cut(text, len, from);
    if (!tok->cut_newline_letter) return len;
    for (size_t p = from; p + 1 < len;) { /* just after a newline that an ASCII letter follows */
        const char *nl = memchr(text + p, '\n', len - 1 - p);
        if (!nl) break;
        p = (size_t)(nl - text) + 1;
        unsigned char next = (unsigned char)text[p];
        if ((next | 0x20) >= 'a' && (next | 0x20) <= 'z') return p;
    }
    return len;
}

size_t tokenizer_decode(const tokenizer_t *tok, const uint32_t *ids, size_t n, char *out,
                        size_t cap) {
    size_t total = 0;
    if (tok->kind == TOK_SPM) { /* the library joins the pieces (and drops its leading space) */
        const char *text = spm_decode(tok->spm, ids, n, &total);
        if (!text) return SIZE_MAX;
        memcpy(out, text, total < cap ? total : cap);
        return total;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *b = tokenizer_token(tok, ids[i], &len);
        if (!b) return SIZE_MAX;
        if (total < cap) memcpy(out + total, b, len < cap - total ? len : cap - total);
        total += len;
    }
    return total;
}
