/* tokenizer_hfbpe.c — encoding with a Hugging Face tokenizer.json (read by tokenizer_hf.c) so
 * that the ids are those of the `tokenizers` library: the added tokens are found first
 * (leftmost, then longest: those not `normalized` in the text as given, then the NFC normalizer
 * through libutf8proc, then the `normalized` ones), the text between them is split by the file's
 * pattern (the Split pre-tokenizer, behavior Isolated: matches and the gaps between them are the
 * pieces), and each piece is merged as the library's BPE model merges a word (Word::merge_all):
 * a min-heap of (merge rank, position) over adjacent pairs of symbols, an entry dropped when its
 * pair no longer makes the same new id. model.ignore_merges: a piece that is a token is that token.
 * Uses: core/ (allocation, errors), libutf8proc. */
#include "io/tokenizer_internal.h"
#include "core/error.h"
#include <utf8proc.h>
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

/* ------------------------------------------------------------------ NFC */

/* The library's NFC (the unicode-normalization-alignments crate) has Unicode 9.0's tables: a
 * character assigned since is to it unassigned, a starter that neither decomposes nor composes.
 * These are the ones for which libutf8proc's later tables say otherwise (a combining class, a
 * decomposition, or a part of one); they are copied as they are and each side normalized apart,
 * as the library does. Sorted. */
static const int32_t nfc_after_unicode9[] = {
    /* 111 code points (libutf8proc 15.0.0; validation/tokenizer/nfc_unicode9.py) */
    0x007FD, 0x00898, 0x00899, 0x0089A, 0x0089B, 0x0089C, 0x0089D, 0x0089E, 0x0089F, 0x008CA,
    0x008CB, 0x008CC, 0x008CD, 0x008CE, 0x008CF, 0x008D0, 0x008D1, 0x008D2, 0x008D3, 0x009FE,
    0x00C3C, 0x00D3B, 0x00D3C, 0x00EBA, 0x01715, 0x01ABF, 0x01AC0, 0x01AC1, 0x01AC2, 0x01AC3,
    0x01AC4, 0x01AC5, 0x01AC6, 0x01AC7, 0x01AC8, 0x01AC9, 0x01ACA, 0x01ACB, 0x01ACC, 0x01ACD,
    0x01ACE, 0x01DF6, 0x01DF7, 0x01DF8, 0x01DF9, 0x01DFA, 0x0A82C, 0x10D24, 0x10D25, 0x10D26,
    0x10D27, 0x10EAB, 0x10EAC, 0x10EFD, 0x10EFE, 0x10EFF, 0x10F46, 0x10F47, 0x10F48, 0x10F49,
    0x10F4A, 0x10F4B, 0x10F4C, 0x10F4D, 0x10F4E, 0x10F4F, 0x10F50, 0x10F82, 0x10F83, 0x10F84,
    0x10F85, 0x11070, 0x1133B, 0x1145E, 0x11839, 0x1183A, 0x11930, 0x11935, 0x11938, 0x1193D,
    0x1193E, 0x11943, 0x119E0, 0x11A34, 0x11A47, 0x11A99, 0x11D42, 0x11D44, 0x11D45, 0x11D97,
    0x11F41, 0x11F42, 0x16FF0, 0x16FF1, 0x1E08F, 0x1E130, 0x1E131, 0x1E132, 0x1E133, 0x1E134,
    0x1E135, 0x1E136, 0x1E2AE, 0x1E2EC, 0x1E2ED, 0x1E2EE, 0x1E2EF, 0x1E4EC, 0x1E4ED, 0x1E4EE,
    0x1E4EF
};

static bool nfc_is_after_unicode9(int32_t cp) {
    size_t lo = 0, hi = sizeof nfc_after_unicode9 / sizeof *nfc_after_unicode9;
    if (cp < nfc_after_unicode9[0]) return false;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_after_unicode9[mid] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < sizeof nfc_after_unicode9 / sizeof *nfc_after_unicode9 &&
           nfc_after_unicode9[lo] == cp;
}

/* Grow the scratch buffer *p of *cap elements of `size` bytes to hold n. */
static void *grow(void *p, size_t *cap, size_t n, size_t size) {
    if (n <= *cap) return p;
    *cap = n > 2 * *cap ? n : 2 * *cap;
    p = realloc(p, *cap * size);
    PTR_CHECK(p);
    return p;
}

/* Append the NFC of the valid UTF-8 text[0..n) to hf->nfc_out at *o: utf8proc_NFC's steps
 * (utf8proc_map: decompose, reorder and compose, encode) into hf's scratch. */
static void nfc_run(hf_bpe_t *hf, const uint8_t *text, size_t n, size_t *o) {
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    utf8proc_ssize_t m;
    for (;;) {
        m = utf8proc_decompose(text, (utf8proc_ssize_t)n, hf->nfc_cp,
                               (utf8proc_ssize_t)hf->cap_nfc_cp, opt);
        ASSERT(m >= 0); /* the caller checked the UTF-8 */
        if ((size_t)m <= hf->cap_nfc_cp) break;
        hf->nfc_cp = grow(hf->nfc_cp, &hf->cap_nfc_cp, (size_t)m, sizeof *hf->nfc_cp);
    }
    m = utf8proc_normalize_utf32(hf->nfc_cp, m, opt);
    ASSERT(m >= 0);
    hf->nfc_out = grow(hf->nfc_out, &hf->cap_nfc_out, *o + 4 * (size_t)m, 1);
    for (utf8proc_ssize_t k = 0; k < m; k++)
        *o += (size_t)utf8proc_encode_char(hf->nfc_cp[k], hf->nfc_out + *o);
}

/* A character NFC leaves alone whatever surrounds it: combining class 0, its own NFC, never the
 * second of a composition (UAX #15's NFC_Quick_Check = Yes with ccc = 0: a text may be cut
 * before it). The seconds are the characters after the first in a canonical decomposition
 * (each step of one is a starter and one character more), Hangul's vowels and trailing
 * consonants included. One bit per code point, built once per tokenizer from libutf8proc. */
void hf_nfc_init(hf_bpe_t *hf) {
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    hf->nfc_inert = malloc(0x110000 / 8);
    PTR_CHECK(hf->nfc_inert);
    memset(hf->nfc_inert, 0xFF, 0x110000 / 8);
    for (int32_t cp = 0x80; cp < 0x110000; cp++) {
        const utf8proc_property_t *p = utf8proc_get_property(cp);
        bool hangul = cp >= 0xAC00 && cp <= 0xD7A3; /* decomposed by rule, not by table */
        if (p->combining_class != 0 || (cp >= 0xD800 && cp < 0xE000))
            hf->nfc_inert[cp >> 3] &= (uint8_t)~(1u << (cp & 7));
        if (p->decomp_seqindex == UINT16_MAX && !hangul) continue;
        int32_t d[32];
        int boundclass = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char(cp, d, 32, UTF8PROC_DECOMPOSE, &boundclass);
        if (n <= 0 || n > 32 || (n == 1 && d[0] == cp)) continue; /* a compatibility one */
        for (utf8proc_ssize_t k = 1; k < n; k++)
            hf->nfc_inert[d[k] >> 3] &= (uint8_t)~(1u << (d[k] & 7));
        if (utf8proc_normalize_utf32(d, n, opt) != 1 || d[0] != cp) /* not its own NFC */
            hf->nfc_inert[cp >> 3] &= (uint8_t)~(1u << (cp & 7));
    }
    for (size_t k = 0; k < sizeof nfc_after_unicode9 / sizeof *nfc_after_unicode9; k++) {
        int32_t cp = nfc_after_unicode9[k]; /* kept as they are, but no base (nfc_kind) */
        hf->nfc_inert[cp >> 3] &= (uint8_t)~(1u << (cp & 7));
    }
}

typedef enum { NFC_INERT, NFC_KEEP, NFC_CHANGE } nfc_kind_t;

/* What text[i] is to NFC, and its length *n: inert (above; ASCII is), kept as it is but no base
 * for what follows (a byte that is not UTF-8, a character after Unicode 9.0), or one that may
 * change or combine. */
static nfc_kind_t nfc_kind(const hf_bpe_t *hf, const uint8_t *text, size_t len, size_t i,
                           size_t *n) {
    utf8proc_int32_t cp = 0;
    *n = 1;
    if (text[i] < 0x80) return NFC_INERT;
    utf8proc_ssize_t k = utf8proc_iterate(text + i, (utf8proc_ssize_t)(len - i), &cp);
    if (k <= 0) return NFC_KEEP;
    *n = (size_t)k;
    if (hf->nfc_inert[cp >> 3] >> (cp & 7) & 1) return NFC_INERT;
    return nfc_is_after_unicode9(cp) ? NFC_KEEP : NFC_CHANGE;
}

/* An inert character never combines with the one before it, so the text is cut before each, and
 * only the runs of other characters, each with the inert character before it (a base that may
 * take an accent), go through utf8proc. Bytes that are not UTF-8 (the library sees only valid
 * UTF-8) and the characters of nfc_after_unicode9 are copied as they are and end a run. */
const uint8_t *hf_nfc(hf_bpe_t *hf, const uint8_t *text, size_t len, size_t *out_len) {
    size_t i = 0, o = 0, done = 0; /* text[0..done) is in nfc_out[0..o) */
    size_t base = SIZE_MAX, n;     /* the inert character just before text[i], if one is */
    while (i < len) {
        if (text[i] < 0x80) { /* a stretch of ASCII, the most common case: inert */
            while (++i < len && text[i] < 0x80) {}
            base = i - 1;
            continue;
        }
        nfc_kind_t kind = nfc_kind(hf, text, len, i, &n);
        if (kind != NFC_CHANGE) {
            base = kind == NFC_INERT ? i : SIZE_MAX;
            i += n;
            continue;
        }
        size_t s = base != SIZE_MAX ? base : i, e = i + n;
        while (e < len && nfc_kind(hf, text, len, e, &n) == NFC_CHANGE) e += n;
        hf->nfc_out = grow(hf->nfc_out, &hf->cap_nfc_out, o + (s - done), 1);
        memcpy(hf->nfc_out + o, text + done, s - done); /* what NFC leaves as it is */
        o += s - done;
        nfc_run(hf, text + s, e - s, &o);
        done = i = e;
        base = SIZE_MAX;
    }
    if (done == 0) { /* nothing to normalize */
        *out_len = len;
        return text;
    }
    hf->nfc_out = grow(hf->nfc_out, &hf->cap_nfc_out, o + (len - done), 1);
    memcpy(hf->nfc_out + o, text + done, len - done);
    o += len - done;
    *out_len = o;
    return hf->nfc_out;
}

/* ------------------------------------------------------------------ added tokens */

/* The longest added token of one pass (normalized or not) whose pattern starts at text[i]; -1
 * if none. Special tokens are found too: where they are not wanted the caller skips them. */
static long added_at(const hf_bpe_t *hf, bool normalized, const uint8_t *text, size_t len,
                     size_t i) {
    long best = -1;
    for (size_t k = 0; k < hf->n_added; k++) {
        const added_tok_t *a = &hf->added[k];
        bool shorter = best >= 0 && a->len <= hf->added[best].len;
        if (a->normalized != normalized || a->len > len - i || shorter) continue;
        if (memcmp(text + i, hf->pat + a->off, a->len) == 0) best = (long)k;
    }
    return best;
}

static void split_added(tokenizer_t *tok, const uint8_t *text, size_t len, bool normalized,
                        bool all, tok_ids_t *out);

/* A stretch between the added tokens of one pass: after the first (tokens as written), the
 * normalizer and the second (normalized tokens); after the second, the pieces. */
static void between(tokenizer_t *tok, const uint8_t *text, size_t len, bool normalized, bool all,
                    tok_ids_t *out) {
    if (normalized) {
        hf_pieces(tok, text, len, out);
        return;
    }
    if (tok->hf->nfc) text = hf_nfc(tok->hf, text, len, &len);
    split_added(tok, text, len, true, all, out);
}

/* One pass of the library's AddedVocabulary::extract_and_normalize: leftmost-longest matches of
 * that pass's patterns (an Aho-Corasick automaton there); a special token when `all` is false
 * is skipped and stays text (encode_special_tokens: its match is dropped, not searched again). */
static void split_added(tokenizer_t *tok, const uint8_t *text, size_t len, bool normalized,
                        bool all, tok_ids_t *out) {
    const hf_bpe_t *hf = tok->hf;
    const bool *first = normalized ? hf->first_norm : hf->first_raw;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (!first[text[i]]) continue;
        long k = added_at(hf, normalized, text, len, i);
        if (k < 0) continue;
        const added_tok_t *a = &hf->added[k];
        if (a->special && !all) {
            i += a->len - 1;
            continue;
        }
        between(tok, text + start, i - start, normalized, all, out);
        ids_push(out, a->id);
        i += a->len - 1;
        start = i + 1;
    }
    between(tok, text + start, len - start, normalized, all, out);
}

/* The library's order: the added tokens that are not `normalized` are found in the text as
 * given; each stretch between them is normalized (NFC), then searched for the `normalized` ones;
 * what is left is pre-tokenized and merged. */
void hf_encode(tokenizer_t *tok, const uint8_t *text, size_t len, unsigned flags, tok_ids_t *out) {
    split_added(tok, text, len, false, flags & TOKENIZER_ALLOW_SPECIAL, out);
}
