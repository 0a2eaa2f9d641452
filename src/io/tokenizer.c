/* tokenizer.c — the tokenizer object (see tokenizer.h): create from a vocabulary file or a
 * trained vocabulary, destroy, accessors; the vocabulary's bytes -> rank map (add, rehash,
 * free); the growable id lists. Encoding lives in tokenizer_bpe.c, the pattern in
 * tokenizer_pretok.c, file formats in tokenizer_formats.c, training in tokenizer_train.c
 * (the private tokenizer_internal.h says who owns what). Uses: core/ (allocation, errors). */
#include "io/tokenizer_internal.h"
#include "core/alloc.h"
#include "core/error.h"
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the vocabulary map */

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

uint32_t vocab_add(vocab_t *v, const uint8_t *p, size_t n) {
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

void vocab_free(vocab_t *v) {
    free(v->bytes);
    free(v->off);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

/* ------------------------------------------------------------------ id lists */

void tok_ids_free(tok_ids_t *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

void ids_grow(tok_ids_t *v, size_t more) {
    if (v->n + more <= v->cap) return;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < v->n + more) cap *= 2;
    v->ids = xrealloc_small(v->ids, cap * sizeof *v->ids);
    v->cap = cap;
}

/* ------------------------------------------------------------------ create, destroy */

tokenizer_t *tokenizer_alloc(tok_kind_t kind) {
    tokenizer_t *t = calloc(1, sizeof *t);
    PTR_CHECK(t);
    t->kind = kind;
    t->heap_threshold = 64;
    t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
    PTR_CHECK(t->cache);
    return t;
}

int tokenizer_from_vocab(tokenizer_t **out, vocab_t *v, char *err, size_t errlen) {
    tokenizer_t *t = tokenizer_alloc(TOK_TIKTOKEN);
    if (pretok_init(&t->re, NULL, err, errlen) != 0) {
        tokenizer_destroy(t);
        vocab_free(v);
        return -1;
    }
    t->v = *v;
    t->cut_gpt2 = true;
    memset(v, 0, sizeof *v);
    *out = t;
    return 0;
}

void tokenizer_destroy(tokenizer_t *tok) {
    if (!tok) return;
    vocab_free(&tok->v);
    pretok_free(&tok->re);
    hf_free(tok->hf);
    spm_close(tok->spm);
    free(tok->id_bytes);
    free(tok->id_off);
    free(tok->id_known);
    free(tok->source);
    free(tok->parts);
    free(tok->cache);
    free(tok);
}

/* ------------------------------------------------------------------ accessors */

/* tiktoken: ranks 0..n-1, then <|endoftext|>. A file that numbers its own ids: the ordinary
 * tokens are those that are neither added tokens nor control pieces (tokenizer.h). */
uint32_t tokenizer_n_ranks(const tokenizer_t *tok) {
    return tok->kind == TOK_SPM ? tok->n_ids : tok->v.n; /* BPE: the merge ranks */
}
uint32_t tokenizer_eot(const tokenizer_t *tok) {
    return tok->kind == TOK_TIKTOKEN ? tok->v.n : tok->eot_id;
}
uint32_t tokenizer_vocab_size(const tokenizer_t *tok) {
    return tok->kind == TOK_TIKTOKEN ? tok->v.n + 1 : tok->n_ids;
}
void tokenizer_set_heap_threshold(tokenizer_t *tok, size_t n) { tok->heap_threshold = n; }

const char *tokenizer_token(const tokenizer_t *tok, uint32_t id, size_t *len) {
    if (tok->kind != TOK_TIKTOKEN) {
        if (id >= tok->n_ids || !tok->id_known[id]) return NULL;
        *len = tok->id_off[id + 1] - tok->id_off[id];
        return (const char *)tok->id_bytes + tok->id_off[id];
    }
    if (id == tok->v.n) {
        *len = EOT_LEN;
        return TOKENIZER_EOT_TEXT;
    }
    if (id > tok->v.n) return NULL;
    return (const char *)vocab_tok(&tok->v, id, len);
}

const char *tokenizer_file_name(const tokenizer_t *tok) {
    return tok->kind == TOK_HF_BPE ? "tokenizer.json"
           : tok->kind == TOK_SPM  ? "tokenizer.model"
                                   : "tokenizer.tiktoken";
}

const char *tokenizer_kind(const tokenizer_t *tok) {
    return tok->kind == TOK_HF_BPE ? "byte-level BPE (tokenizer.json)"
           : tok->kind == TOK_SPM  ? "SentencePiece"
                                   : "byte-level BPE (tiktoken ranks)";
}
