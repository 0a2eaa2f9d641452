/* tokenizer_train.c — BPE training: the word counter (pre-tokenised words of a corpus and their
 * counts, in an open-addressing table; packed to send to another rank and added back), and the
 * trainer, which merges the most frequent adjacent pair (ties: smallest (left, right) ids) with
 * a pair index, per-pair word lists and a lazy max-heap, deterministically from the counts.
 * Uses: core/ (allocation, errors). */
#include "io/tokenizer_internal.h"
#include "core/alloc.h"
#include "core/error.h"
#include <stdlib.h>
#include <string.h>

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
    if (pretok_init(&c->re, NULL, err, sizeof err) != 0) die_call(__FILE__, __LINE__, "pretok_init", err);
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
    if (vocab_size < 257)
        return errf(err, errlen, "a vocabulary of %u ids is too small: 256 bytes and %s "
                    "need 257", vocab_size, TOKENIZER_EOT_TEXT);
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
