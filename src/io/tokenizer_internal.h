/* tokenizer_internal.h — PRIVATE to the tokenizer files (io/tokenizer*.c); nothing else may
 * include it: the public interface is io/tokenizer.h.
 * Owns the types and helpers the tokenizer files share: the byte-string hash, the vocabulary
 * (bytes -> rank map), the pre-tokeniser's state and piece iterator, the tokenizer object's
 * layout, and the id-list growth. What runs per byte or per piece (hash_bytes, vocab_get,
 * piece_next, ids_push, ids_reserve's fast path) is static inline here, so that splitting the
 * files costs no speed (measured: piece_next out of line cost about 5% of encoding speed).
 * Uses: core/ (allocation, errors), PCRE2.
 *
 * Which file owns what:
 *   tokenizer.c          the object: made from a vocabulary (tokenizer_from_vocab), destroy,
 *                        accessors, id lists, the vocabulary map (add, rehash, free)
 *   tokenizer_pretok.c   GPT-2's pre-tokenising regular expression (PCRE2) and its matching;
 *                        the piece iterator on top of it (piece_next) is inline here
 *   tokenizer_bpe.c      BPE merging (linear and heap), the word cache, encode, decode, safe cut
 *   tokenizer_formats.c  vocabulary files: tiktoken rank files (base64), Hugging Face
 *                        vocab.json + merges.txt, tokenizer_create (a file's tokenizer),
 *                        and saving as a rank file; it calls tokenizer.c, never the reverse
 *   tokenizer_train.c    the word counter (count, pack, unpack) and BPE training
 *   tokenizer_hf.c       Hugging Face tokenizer.json (libjansson): its checks, the id table,
 *                        the merges, the added tokens, the document token
 *   tokenizer_hfbpe.c    encoding with a tokenizer.json: added tokens, then its pattern, then
 *                        the merges in the order of the `tokenizers` library
 *   tokenizer_spm.cc     the C++ shim over the SentencePiece library (tokenizer_spm.h) */
#ifndef LLMT_TOKENIZER_INTERNAL_H
#define LLMT_TOKENIZER_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"
#include "io/tokenizer_spm.h"
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define NO_RANK UINT32_MAX
#define EOT_LEN (sizeof TOKENIZER_EOT_TEXT - 1)

/* ------------------------------------------------------------------ hashing */

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

/* ------------------------------------------------------------------ the vocabulary */

/* n tokens back to back in `bytes`, token r = bytes[off[r] .. off[r+1]), and an open-addressing
 * map from byte string to rank. A slot holds (hash >> 32) << 32 | (rank + 1). */
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

/* Append a token as the next rank. Returns its rank, or the rank of an equal token already
 * there (then nothing is added). (tokenizer.c) */
uint32_t vocab_add(vocab_t *v, const uint8_t *p, size_t n);
void vocab_free(vocab_t *v);
/* Fill an empty vocabulary from the file `path` (see tokenizer.h for the formats); 0, or -1
 * with one message naming the file and line in err. (tokenizer_formats.c) */
int vocab_load(vocab_t *v, const char *path, char *err, size_t errlen);

/* ------------------------------------------------------------------ pre-tokenising */

typedef struct pretok {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    bool jit;
} pretok_t;

/* Compile a pattern (NULL: GPT-2's) (JIT when available); 0, or -1 with err. A pattern given
 * in Oniguruma's syntax (tokenizer.json) has its \s and \S spelled out as Unicode's White_Space
 * first, as GPT-2's is, and must not match the empty string. (tokenizer_pretok.c) */
int pretok_init(pretok_t *p, const char *pattern, char *err, size_t errlen);
void pretok_free(pretok_t *p);

/* Walks the pieces of a text: regex matches, and between them the runs of bytes no match
 * covers (invalid UTF-8), so that the pieces tile the text exactly. Zero-initialise all but
 * re, text and len. */
typedef struct piece_iter {
    pretok_t *re;
    const uint8_t *text;
    size_t len, pos, ms, me;
    int have; /* 0: not searched yet, 1: match [ms, me) pending, -1: no more matches */
} piece_iter_t;

/* The first match at or after `pos`: 1 and its span [*s, *e), or 0 when there is none.
 * (tokenizer_pretok.c) */
int pretok_match(pretok_t *p, const uint8_t *text, size_t len, size_t pos, size_t *s, size_t *e);

/* The next piece: 1 and its span [*s, *e), or 0 at the end of the text. Inline: it runs once
 * per piece in encoding and counting. */
static inline int piece_next(piece_iter_t *it, size_t *s, size_t *e) {
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

typedef enum tok_kind {
    TOK_TIKTOKEN = 0, /* rank = id, GPT-2's pattern, <|endoftext|> after the ranks */
    TOK_HF_BPE,       /* tokenizer.json: ids from the file, merges by pair (tokenizer_hf*.c) */
    TOK_SPM           /* SentencePiece model through the library (tokenizer_spm.cc) */
} tok_kind_t;

typedef struct added_tok { /* a tokenizer.json added token: matched in the text before BPE */
    uint32_t id;
    uint32_t off, len;     /* what is matched: hf->pat[off, off + len), its content as written,
                              or in NFC when it is `normalized` and the normalizer is NFC */
    bool special;
    bool normalized;       /* matched in the normalized text (else in the text as given) */
} added_tok_t;

typedef struct hf_sym { /* one symbol of a word being merged (the library's Symbol) */
    uint32_t id;
    int32_t prev, next;
    uint32_t len;       /* 0: merged into its left neighbour */
} hf_sym_t;

typedef struct hf_merge { /* a heap entry (the library's Merge): smallest rank, then pos */
    uint32_t rank, new_id;
    uint32_t pos;
} hf_merge_t;

typedef struct hf_bpe {
    uint32_t *rank_id;          /* tok->v's rank of a model token -> its id */
    uint32_t byte_id[256];      /* the id of each single byte */
    uint64_t *pair_key;         /* (left << 32 | right) -> pair_val (merge rank << 32 | new id) */
    uint64_t *pair_val;
    size_t pair_mask;
    bool ignore_merges;         /* a word that is a token is that token (model.ignore_merges) */
    bool nfc;                   /* the normalizer is NFC (alone or in a Sequence) */
    added_tok_t *added;
    size_t n_added;
    uint8_t *pat;               /* the added tokens' patterns */
    bool first_raw[256], first_norm[256]; /* first bytes of the patterns: not normalized, normalized */
    hf_sym_t *sym;              /* scratch */
    hf_merge_t *heap;
    size_t cap;
    uint8_t *nfc_inert;         /* NFC: a bit per code point, 1 when NFC leaves it alone */
    uint8_t *nfc_out;           /* scratch of hf_nfc: the normalized text, its code points */
    size_t cap_nfc_out;
    int32_t *nfc_cp;
    size_t cap_nfc_cp;
} hf_bpe_t;

struct tokenizer {
    tok_kind_t kind;
    uint32_t n_ids, eot_id;    /* TOK_HF_BPE, TOK_SPM: ids 0..n_ids-1; the document token */
    uint8_t *id_bytes;         /* TOK_HF_BPE, TOK_SPM: the bytes of each id */
    uint32_t *id_off;          /* n_ids + 1 offsets into id_bytes */
    uint8_t *id_known;         /* 0 for an id no token has */
    char *source;              /* the file's bytes, saved as they are (tokenizer_save) */
    size_t source_len;
    bool cut_gpt2;             /* tokenizer_cut may cut as tokenizer_safe_cut (GPT-2's pattern) */
    bool cut_newline_letter;   /* or after a newline that an ASCII letter follows */
    hf_bpe_t *hf;
    spm_t *spm;
    vocab_t v;
    pretok_t re;
    size_t heap_threshold;
    bpe_part_t *parts;         /* scratch for merging, grown as needed */
    size_t cap_parts;
    cache_slot_t *cache;
};

/* Wrap a finished vocabulary (takes ownership of *v, also on failure). (tokenizer.c) */
int tokenizer_from_vocab(tokenizer_t **out, vocab_t *v, char *err, size_t errlen);
/* An empty object of the given kind with its cache (tokenizer.c). */
tokenizer_t *tokenizer_alloc(tok_kind_t kind);

/* A tokenizer.json (tokenizer_hf.c) and a SentencePiece model (tokenizer_spm_load in
 * tokenizer_hf.c too, beside the other id tables): 0, or -1 with one message naming the file
 * and the field in err. */
int tokenizer_load_hf(tokenizer_t **out, const char *path, char *err, size_t errlen);
int tokenizer_load_spm(tokenizer_t **out, const char *path, char *err, size_t errlen);
/* Encode with a tokenizer.json's merges (tokenizer_hfbpe.c). */
void hf_encode(tokenizer_t *tok, const uint8_t *text, size_t len, unsigned flags, tok_ids_t *out);
/* text[0..len) in Unicode NFC (libutf8proc), as the library's NFC normalizer makes it: the text
 * itself when it is ASCII, else hf's scratch (valid until the next call); *out_len its length.
 * Bytes that are not UTF-8 stay as they are. (tokenizer_hfbpe.c) */
const uint8_t *hf_nfc(hf_bpe_t *hf, const uint8_t *text, size_t len, size_t *out_len);
void hf_nfc_init(hf_bpe_t *hf); /* hf_nfc's table; once, before it */
void hf_free(hf_bpe_t *hf);

/* Shared with tokenizer_formats.c: the whole file, GPT-2's byte alphabet and its decoding. */
char *read_vocab_file(const char *path, size_t *len, char *err, size_t errlen);
void gpt2_alphabet(int byte_of_cp[324]);
long unicode_to_bytes(const int byte_of_cp[324], const char *s, size_t n, uint8_t *out);

/* ------------------------------------------------------------------ id lists */

/* Grow v to hold `more` further ids (the slow path of ids_reserve). (tokenizer.c) */
void ids_grow(tok_ids_t *v, size_t more);

static inline void ids_reserve(tok_ids_t *v, size_t more) {
    if (v->n + more > v->cap) ids_grow(v, more);
}

static inline void ids_push(tok_ids_t *v, uint32_t id) {
    if (v->n == v->cap) ids_grow(v, 1);
    v->ids[v->n++] = id;
}
#endif
