/* tokenizer_hfbpe.c — encoding with a Hugging Face tokenizer.json (read by tokenizer_hf.c) so
 * that the ids are those of the `tokenizers` library: the added tokens are found first
 * (leftmost, then longest), the text between them is split by the file's pattern (the Split
 * pre-tokenizer, behavior Isolated: matches and the gaps between them are the pieces), and each
 * piece is merged as the library's BPE model merges a word (Word::merge_all): a min-heap of
 * (merge rank, position) over adjacent pairs of symbols, an entry dropped when its pair no
 * longer makes the same new id. model.ignore_merges: a piece that is a token is that token.
 * Uses: core/ (allocation, errors). */
#include "io/tokenizer_internal.h"
#include "core/error.h"
#include <stdlib.h>
#include <string.h>

/* The merge of the pair (a, b): its rank and new id; false when the pair is not a merge. */
static inline bool pair_get(const hf_bpe_t *hf, uint32_t a, uint32_t b, uint32_t *rank,
                            uint32_t *new_id) {
    uint64_t key = (uint64_t)a << 32 | b;
    for (size_t i = (size_t)(hash_bytes((const uint8_t *)&key, 8) & hf->pair_mask);;
         i = (i + 1) & hf->pair_mask) {
        uint64_t k = hf->pair_key[i];
        if (k == UINT64_MAX) return false;
        if (k == key) {
            *rank = (uint32_t)(hf->pair_val[i] >> 32);
            *new_id = (uint32_t)hf->pair_val[i];
            return true;
        }
    }
}

static inline bool merge_less(hf_merge_t a, hf_merge_t b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(hf_merge_t *h, size_t *n, hf_merge_t e) {
    size_t i = (*n)++;
    while (i > 0 && merge_less(e, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static hf_merge_t heap_pop(hf_merge_t *h, size_t *n) {
    hf_merge_t top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && merge_less(h[c + 1], h[c])) c++;
        if (!merge_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* Push the merge of symbols i and s[i].next, if that pair is one. */
static void push_pair(const hf_bpe_t *hf, hf_merge_t *h, size_t *nh, int32_t i) {
    const hf_sym_t *s = hf->sym;
    uint32_t rank, id;
    if (i >= 0 && s[i].next >= 0 && pair_get(hf, s[i].id, s[s[i].next].id, &rank, &id))
        heap_push(h, nh, (hf_merge_t){rank, id, (uint32_t)i});
}

/* Merge the n >= 2 bytes of p as the library does; append the ids. */
static void merge_word(hf_bpe_t *hf, const uint8_t *p, size_t n, tok_ids_t *out) {
    if (n > hf->cap) {
        hf->cap = n > 2 * hf->cap ? n : 2 * hf->cap;
        free(hf->sym);
        free(hf->heap);
        hf->sym = malloc(hf->cap * sizeof *hf->sym);
        hf->heap = malloc(3 * hf->cap * sizeof *hf->heap); /* n - 1 first, then 2 per merge */
        PTR_CHECK(hf->sym);
        PTR_CHECK(hf->heap);
    }
    hf_sym_t *s = hf->sym;
    for (size_t i = 0; i < n; i++)
        s[i] = (hf_sym_t){hf->byte_id[p[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 1};
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(hf, hf->heap, &nh, (int32_t)i);
    while (nh > 0) {
        hf_merge_t top = heap_pop(hf->heap, &nh);
        hf_sym_t *cur = &s[top.pos];
        uint32_t rank, id;
        if (cur->len == 0 || cur->next < 0) continue;
        hf_sym_t right = s[cur->next];
        if (!pair_get(hf, cur->id, right.id, &rank, &id) || id != top.new_id) continue; /* stale */
        s[cur->next].len = 0;
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        if (right.next >= 0) s[right.next].prev = (int32_t)top.pos;
        push_pair(hf, hf->heap, &nh, cur->prev);
        push_pair(hf, hf->heap, &nh, (int32_t)top.pos);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next) ids_push(out, s[i].id);
}

/* One piece: a whole token (model.ignore_merges), a single byte, the cache, or the merges. */
static void hf_piece(tokenizer_t *tok, const uint8_t *p, size_t n, tok_ids_t *out) {
    hf_bpe_t *hf = tok->hf;
    if (hf->ignore_merges) {
        uint32_t r = vocab_get(&tok->v, p, n);
        if (r != NO_RANK) {
            ids_push(out, hf->rank_id[r]);
            return;
        }
    }
    if (n == 1) {
        ids_push(out, hf->byte_id[p[0]]);
        return;
    }
    cache_slot_t *c = n <= CACHE_WORD ? &tok->cache[hash_bytes(p, n) & (CACHE_SLOTS - 1)] : NULL;
    if (c && c->len == n && memcmp(c->bytes, p, n) == 0) {
        ids_reserve(out, c->n_ids);
        memcpy(out->ids + out->n, c->ids, c->n_ids * sizeof *c->ids);
        out->n += c->n_ids;
        return;
    }
    size_t first = out->n;
    merge_word(hf, p, n, out);
    if (c && out->n - first <= CACHE_IDS) {
        c->len = (uint8_t)n;
        c->n_ids = (uint8_t)(out->n - first);
        memcpy(c->bytes, p, n);
        memcpy(c->ids, out->ids + first, c->n_ids * sizeof *c->ids);
    }
}

static void hf_pieces(tokenizer_t *tok, const uint8_t *text, size_t len, tok_ids_t *out) {
    piece_iter_t it = {.re = &tok->re, .text = text, .len = len};
    size_t s, e;
    while (piece_next(&it, &s, &e)) hf_piece(tok, text + s, e - s, out);
}

/* The longest added token (special ones only when `all`) that starts at text[i]; -1 if none. */
static long added_at(const tokenizer_t *tok, const uint8_t *text, size_t len, size_t i, bool all) {
    const hf_bpe_t *hf = tok->hf;
    long best = -1;
    for (size_t k = 0; k < hf->n_added; k++) {
        const added_tok_t *a = &hf->added[k];
        bool shorter = best >= 0 && a->len <= hf->added[best].len;
        if ((a->special && !all) || a->len > len - i || shorter) continue;
        if (memcmp(text + i, tok->id_bytes + a->off, a->len) == 0) best = (long)k;
    }
    return best;
}

void hf_encode(tokenizer_t *tok, const uint8_t *text, size_t len, unsigned flags, tok_ids_t *out) {
    bool all = flags & TOKENIZER_ALLOW_SPECIAL;
    const bool *first = all ? tok->hf->first_any : tok->hf->first_plain;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (!first[text[i]]) continue;
        long k = added_at(tok, text, len, i, all);
        if (k < 0) continue;
        hf_pieces(tok, text + start, i - start, out);
        ids_push(out, tok->hf->added[k].id);
        i += tok->hf->added[k].len - 1;
        start = i + 1;
    }
    hf_pieces(tok, text + start, len - start, out);
}
