/* tokenizer_hf.c — reading a Hugging Face tokenizer.json of the byte-level BPE family (Llama 3,
 * Qwen 2, GPT-2, GPT-4-style patterns) with libjansson: the checks that it is one llmtrain
 * reproduces exactly (each refusal names the file and the field), the id table (each id's
 * bytes: model.vocab through GPT-2's byte alphabet, added tokens as written), the merges as a
 * map from a pair of ids to (merge rank, new id), the added tokens, the document token; and
 * loading a SentencePiece model through the library's shim (tokenizer_spm.h) into the same id
 * table. Encoding is tokenizer_hfbpe.c. Uses: core/ (allocation, errors), libjansson. */
#include "io/tokenizer_internal.h"
#include "core/alloc.h"
#include "core/error.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pre-tokenizer patterns of Llama 3 and Qwen 2 as their tokenizer.json files hold them:
 * with these tokenizer_cut may cut a text after "\n" + an ASCII letter (tokenizer.h). */
#define LLAMA3_PATTERN                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_PATTERN                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct hf_load {
    const char *path;
    char *err;
    size_t errlen;
    json_t *root, *model;
    tokenizer_t *t;
    uint32_t *off_of, *len_of; /* per id, into pool; len UINT32_MAX: no token */
    uint8_t *pool;
    size_t n_pool, cap_pool;
} hf_load_t;

static const char *jstr(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int refuse(hf_load_t *L, const char *fmt, const char *field, const char *what) {
    char msg[1024];
    snprintf(msg, sizeof msg, fmt, field, what ? what : "");
    return errf(L->err, L->errlen, "%s: %s", L->path, msg);
}

/* ------------------------------------------------------------------ what is supported */

/* null, false or 0 (an option that changes nothing), or a string that is empty */
static bool jnone(const json_t *v) {
    return !v || json_is_null(v) || json_is_false(v) ||
           (json_is_number(v) && json_number_value(v) == 0) ||
           (json_is_string(v) && json_string_value(v)[0] == 0);
}

/* The normalizer: none, NFC (Qwen 2's), or a Sequence of NFC only (NFC twice is NFC once). */
static int check_normalizer(hf_load_t *L) {
    json_t *n = json_object_get(L->root, "normalizer");
    const char *type = jstr(n, "type");
    if (jnone(n)) return 0;
    if (type && strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(n, "normalizers"), i, m) {
            const char *mt = jstr(m, "type");
            if (mt && strcmp(mt, "NFC") == 0) {
                L->t->hf->nfc = true;
                continue;
            }
            char field[64];
            snprintf(field, sizeof field, "normalizer.normalizers[%zu].type", i);
            return refuse(L, "%s is '%s': not supported (llmtrain applies NFC, Qwen 2's, alone "
                          "or in a Sequence, and no other normalizer)", field, mt ? mt : "null");
        }
        return 0;
    }
    if (type && strcmp(type, "NFC") == 0) return L->t->hf->nfc = true, 0;
    return refuse(L, "%s is '%s': not supported (llmtrain applies NFC, Qwen 2's, alone or in a "
                  "Sequence, and no other normalizer)", "normalizer", type ? type : "null");
}

static int check_model(hf_load_t *L) {
    L->model = json_object_get(L->root, "model");
    const char *type = jstr(L->model, "type");
    if (!json_is_object(L->model) || !type)
        return refuse(L, "%s: missing: not a tokenizer.json%s", "model.type", NULL);
    if (strcmp(type, "BPE") != 0)
        return refuse(L, "%s is '%s': llmtrain reads tokenizer.json files of the byte-level BPE "
                      "family (model.type BPE); give a SentencePiece model as its .model file",
                      "model.type", type);
    static const char *off[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix",
                                "byte_fallback"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        if (jnone(json_object_get(L->model, off[i]))) continue;
        char field[64];
        snprintf(field, sizeof field, "model.%s", off[i]);
        return refuse(L, "%s is set: not supported (byte-level BPE without it only)%s", field,
                      NULL);
    }
    if (check_normalizer(L) != 0) return -1;
    if (L->t->hf->nfc) hf_nfc_init(L->t->hf);
    L->t->hf->ignore_merges = json_is_true(json_object_get(L->model, "ignore_merges"));
    return 0;
}

static bool is_bytelevel(const json_t *p, bool use_regex) {
    const char *type = jstr(p, "type");
    json_t *ur = json_object_get(p, "use_regex");
    return type && strcmp(type, "ByteLevel") == 0 &&
           !json_is_true(json_object_get(p, "add_prefix_space")) &&
           (ur ? json_is_true(ur) : true) == use_regex;
}

/* ByteLevel (its own GPT-2 pattern: *pattern NULL), or Sequence [Split (Regex, Isolated, not
 * inverted), ByteLevel (use_regex false)]: *pattern the Split's regex. */
static int check_pretok(hf_load_t *L, const char **pattern) {
    json_t *pt = json_object_get(L->root, "pre_tokenizer");
    const char *type = jstr(pt, "type");
    *pattern = NULL;
    if (is_bytelevel(pt, true)) return 0;
    json_t *seq = json_object_get(pt, "pretokenizers");
    json_t *split = json_array_get(seq, 0), *bl = json_array_get(seq, 1);
    const char *re = jstr(json_object_get(split, "pattern"), "Regex");
    const char *beh = jstr(split, "behavior");
    if (type && strcmp(type, "Sequence") == 0 && json_array_size(seq) == 2 && re &&
        strcmp(jstr(split, "type") ? jstr(split, "type") : "", "Split") == 0 && beh &&
        strcmp(beh, "Isolated") == 0 && !json_is_true(json_object_get(split, "invert")) &&
        is_bytelevel(bl, false)) {
        *pattern = re;
        return 0;
    }
    return refuse(L, "%s is '%s': llmtrain reads ByteLevel (add_prefix_space false), or "
                  "Sequence [Split (a Regex pattern, behavior Isolated, invert false), ByteLevel "
                  "(use_regex false)] as Llama 3 and Qwen 2 have it", "pre_tokenizer.type",
                  type ? type : "null");
}

/* ------------------------------------------------------------------ the id table */

static void pool_put(hf_load_t *L, uint32_t id, const void *p, size_t n) {
    if (L->n_pool + n > L->cap_pool) {
        L->cap_pool = 2 * (L->n_pool + n) + 65536;
        L->pool = xrealloc_small(L->pool, L->cap_pool);
    }
    memcpy(L->pool + L->n_pool, p, n);
    L->off_of[id] = (uint32_t)L->n_pool;
    L->len_of[id] = (uint32_t)n;
    L->n_pool += n;
}

/* The number of ids: one more than the largest in model.vocab and added_tokens. */
static int count_ids(hf_load_t *L, json_t *vocab, json_t *added) {
    int64_t top = -1;
    const char *key;
    json_t *v;
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return refuse(L, "%s: missing or empty%s", "model.vocab", NULL);
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= INT32_MAX)
            return refuse(L, "%s: the id of '%s' is not a whole number in [0, 2^31 - 1)",
                          "model.vocab", key);
        if (json_integer_value(v) > top) top = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX || !jstr(v, "content"))
            return refuse(L, "%s: an entry without a valid id or content%s", "added_tokens", NULL);
        if (json_integer_value(id) > top) top = json_integer_value(id);
    }
    L->t->n_ids = (uint32_t)top + 1;
    return 0;
}

/* Each model.vocab entry's bytes (GPT-2's alphabet decoded; a string outside that alphabet,
 * which no merge of bytes can make, as its UTF-8, as the library's ByteLevel decoder does). */
static void put_vocab(hf_load_t *L, json_t *vocab, int byte_of_cp[324]) {
    const char *key;
    json_t *v;
    uint8_t *tmp = NULL;
    size_t cap = 0;
    json_object_foreach(vocab, key, v) {
        size_t n = strlen(key);
        if (n > cap) tmp = xrealloc_small(tmp, cap = 2 * n);
        long b = n ? unicode_to_bytes(byte_of_cp, key, n, tmp) : -1;
        uint32_t id = (uint32_t)json_integer_value(v);
        if (b >= 0) pool_put(L, id, tmp, (size_t)b);
        else pool_put(L, id, key, n);
        if (b < 0) L->len_of[id] |= 1u << 31; /* not a byte string: no BPE makes it */
    }
    free(tmp);
}

/* added_tokens: their content as bytes, their flags checked; what the text is searched for: the
 * content as written, or in NFC for a `normalized` token when the normalizer is NFC (the
 * library normalizes those patterns, AddedVocabulary::refresh_added_tokens). */
static int put_added(hf_load_t *L, json_t *added) {
    hf_bpe_t *hf = L->t->hf;
    size_t i, n_pat = 0, cap_pat = 0;
    json_t *a;
    hf->n_added = json_array_size(added);
    hf->added = calloc(hf->n_added ? hf->n_added : 1, sizeof *hf->added);
    PTR_CHECK(hf->added);
    json_array_foreach(added, i, a) {
        static const char *flags[] = {"lstrip", "rstrip", "single_word"};
        for (size_t k = 0; k < 3; k++) {
            if (!json_is_true(json_object_get(a, flags[k]))) continue;
            char field[96];
            snprintf(field, sizeof field, "added_tokens[%zu].%s", i, flags[k]);
            return refuse(L, "%s is true (token '%s'): not supported", field, jstr(a, "content"));
        }
        const char *c = jstr(a, "content");
        uint32_t id = (uint32_t)json_integer_value(json_object_get(a, "id"));
        if (!c[0]) return refuse(L, "%s: an empty content%s", "added_tokens", NULL);
        pool_put(L, id, c, strlen(c));
        L->len_of[id] |= 1u << 31; /* an added token is matched whole, never made by BPE */
        bool normalized = json_is_true(json_object_get(a, "normalized"));
        size_t n = strlen(c);
        const uint8_t *p = normalized && hf->nfc ? hf_nfc(hf, (const uint8_t *)c, n, &n)
                                                 : (const uint8_t *)c;
        if (n_pat + n > cap_pat) hf->pat = xrealloc_small(hf->pat, cap_pat = 2 * (n_pat + n));
        memcpy(hf->pat + n_pat, p, n);
        hf->added[i] = (added_tok_t){.id = id, .off = (uint32_t)n_pat, .len = (uint32_t)n,
                                     .special = json_is_true(json_object_get(a, "special")),
                                     .normalized = normalized};
        (normalized ? hf->first_norm : hf->first_raw)[p[0]] = true;
        n_pat += n;
    }
    return 0;
}

/* Lay the ids out in order; the model tokens that are byte strings go into t->v too (bytes ->
 * id, for the single bytes and model.ignore_merges). */
static int lay_out_ids(hf_load_t *L) {
    tokenizer_t *t = L->t;
    hf_bpe_t *hf = t->hf;
    t->id_off = malloc(((size_t)t->n_ids + 1) * sizeof *t->id_off);
    t->id_known = calloc(t->n_ids, 1);
    t->id_bytes = malloc(L->n_pool + 1);
    hf->rank_id = malloc(((size_t)t->n_ids + 1) * sizeof *hf->rank_id);
    PTR_CHECK(t->id_off);
    PTR_CHECK(t->id_known);
    PTR_CHECK(t->id_bytes);
    PTR_CHECK(hf->rank_id);
    size_t o = 0;
    for (uint32_t id = 0; id < t->n_ids; id++) {
        t->id_off[id] = (uint32_t)o;
        if (L->len_of[id] == UINT32_MAX) continue;
        size_t n = L->len_of[id] & ~(1u << 31);
        memcpy(t->id_bytes + o, L->pool + L->off_of[id], n);
        t->id_known[id] = 1;
        if (!(L->len_of[id] >> 31)) { /* a model token made of bytes */
            uint32_t before = t->v.n, r = vocab_add(&t->v, t->id_bytes + o, n);
            if (t->v.n > before) hf->rank_id[r] = id;
        }
        o += n;
    }
    t->id_off[t->n_ids] = (uint32_t)o;
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        uint32_t r = vocab_get(&t->v, &c, 1);
        if (r == NO_RANK)
            return errf(L->err, L->errlen, "%s: model.vocab: byte 0x%02x has no token (a "
                        "byte-level BPE vocabulary needs all 256 single bytes)", L->path, b);
        hf->byte_id[b] = hf->rank_id[r];
    }
    return 0;
}

/* ------------------------------------------------------------------ merges */

static void pair_put(hf_bpe_t *hf, uint32_t a, uint32_t b, uint32_t rank, uint32_t new_id) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t i = (size_t)(hash_bytes((const uint8_t *)&key, 8) & hf->pair_mask);
    while (hf->pair_key[i] != UINT64_MAX && hf->pair_key[i] != key) i = (i + 1) & hf->pair_mask;
    hf->pair_key[i] = key; /* a pair listed twice: the later rank, as the library's map keeps */
    hf->pair_val[i] = (uint64_t)rank << 32 | new_id;
}

/* One merge, "a b" or ["a", "b"], as ids. */
static int merge_ids(hf_load_t *L, json_t *vocab, json_t *m, size_t i, uint32_t ids[3]) {
    char buf[2048];
    const char *a = NULL, *b = NULL;
    if (json_is_string(m) && json_string_length(m) < sizeof buf) {
        snprintf(buf, sizeof buf, "%s", json_string_value(m));
        char *sp = strchr(buf, ' ');
        if (sp && !strchr(sp + 1, ' ')) *sp = 0, a = buf, b = sp + 1;
    } else if (json_array_size(m) == 2) {
        a = json_string_value(json_array_get(m, 0));
        b = json_string_value(json_array_get(m, 1));
    }
    char joined[4096];
    if (a && b) snprintf(joined, sizeof joined, "%s%s", a, b);
    json_t *x = a ? json_object_get(vocab, a) : NULL, *y = b ? json_object_get(vocab, b) : NULL;
    json_t *z = a && b ? json_object_get(vocab, joined) : NULL;
    if (!x || !y || !z) {
        char field[64];
        snprintf(field, sizeof field, "model.merges[%zu]", i);
        return refuse(L, "%s: %s", field, !a || !b ? "not a pair of tokens"
                                          : "a token (or the two joined) is not in model.vocab");
    }
    ids[0] = (uint32_t)json_integer_value(x);
    ids[1] = (uint32_t)json_integer_value(y);
    ids[2] = (uint32_t)json_integer_value(z);
    return 0;
}

static int load_merges(hf_load_t *L) {
    hf_bpe_t *hf = L->t->hf;
    json_t *vocab = json_object_get(L->model, "vocab"), *merges = json_object_get(L->model,
                                                                                   "merges");
    if (!json_is_array(merges)) return refuse(L, "%s: missing%s", "model.merges", NULL);
    size_t n = json_array_size(merges), slots = 1024;
    while (slots < 2 * n) slots *= 2;
    hf->pair_mask = slots - 1;
    hf->pair_key = malloc(slots * sizeof *hf->pair_key);
    hf->pair_val = malloc(slots * sizeof *hf->pair_val);
    PTR_CHECK(hf->pair_key);
    PTR_CHECK(hf->pair_val);
    memset(hf->pair_key, 0xFF, slots * sizeof *hf->pair_key);
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        uint32_t ids[3] = {0, 0, 0};
        if (merge_ids(L, vocab, m, i, ids) != 0) return -1;
        pair_put(hf, ids[0], ids[1], (uint32_t)i, ids[2]);
    }
    return 0;
}

/* ------------------------------------------------------------------ the document token */

/* The special token a TemplateProcessing (alone or in a Sequence) puts first; else the added
 * token <|endoftext|>. */
static int find_doc_token(hf_load_t *L) {
    json_t *pp = json_object_get(L->root, "post_processor"), *tp = NULL;
    const char *type = jstr(pp, "type");
    if (type && strcmp(type, "TemplateProcessing") == 0) tp = pp;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(pp, "processors"), i, p) {
        const char *pt = jstr(p, "type");
        if (pt && strcmp(pt, "TemplateProcessing") == 0) tp = p;
    }
    json_t *first = json_object_get(json_array_get(json_object_get(tp, "single"), 0),
                                    "SpecialToken");
    const char *name = jstr(first, "id");
    json_t *ids = json_object_get(json_object_get(json_object_get(tp, "special_tokens"),
                                                  name ? name : ""), "ids");
    if (json_is_integer(json_array_get(ids, 0))) {
        L->t->eot_id = (uint32_t)json_integer_value(json_array_get(ids, 0));
        if (L->t->eot_id < L->t->n_ids) return 0;
    }
    hf_bpe_t *hf = L->t->hf;
    for (size_t k = 0; k < hf->n_added; k++) {
        const added_tok_t *a = &hf->added[k];
        if (a->len == EOT_LEN && memcmp(L->t->id_bytes + L->t->id_off[a->id],
                                        TOKENIZER_EOT_TEXT, EOT_LEN) == 0)
            return L->t->eot_id = a->id, 0;
    }
    return refuse(L, "%s: names no document token (no TemplateProcessing that starts with a "
                  "special token, no added token %s)", "post_processor", TOKENIZER_EOT_TEXT);
}

/* ------------------------------------------------------------------ loading */

static int load_parts(hf_load_t *L) {
    const char *pattern;
    tokenizer_t *t = L->t;
    if (check_model(L) != 0 || check_pretok(L, &pattern) != 0) return -1;
    json_t *vocab = json_object_get(L->model, "vocab"), *added = json_object_get(L->root,
                                                                                 "added_tokens");
    if (count_ids(L, vocab, added) != 0) return -1;
    L->off_of = calloc(t->n_ids, sizeof *L->off_of);
    L->len_of = malloc(t->n_ids * sizeof *L->len_of);
    PTR_CHECK(L->off_of);
    PTR_CHECK(L->len_of);
    memset(L->len_of, 0xFF, t->n_ids * sizeof *L->len_of);
    int byte_of_cp[324];
    gpt2_alphabet(byte_of_cp);
    put_vocab(L, vocab, byte_of_cp);
    if (put_added(L, added) != 0 || lay_out_ids(L) != 0 || load_merges(L) != 0) return -1;
    if (find_doc_token(L) != 0) return -1;
    char msg[256];
    if (pretok_init(&t->re, pattern, msg, sizeof msg) != 0)
        return refuse(L, "%s: %s", "pre_tokenizer.pretokenizers[0].pattern.Regex", msg);
    /* An added token with a newline: cutting could split it (a special one too: in llmprep's
     * text the library skips its match as text, and no token is found inside it). NFC keeps
     * both cuts: each is just before a "\n" or an ASCII letter, characters that never combine
     * with what precedes them, so the NFC of the whole is the NFC of the two parts joined. */
    bool token_nl = false;
    for (size_t k = 0; k < t->hf->n_added; k++)
        token_nl |= memchr(t->hf->pat + t->hf->added[k].off, '\n', t->hf->added[k].len) != NULL;
    t->cut_newline_letter = pattern && !token_nl &&
                            (strcmp(pattern, LLAMA3_PATTERN) == 0 ||
                             strcmp(pattern, QWEN2_PATTERN) == 0);
    t->cut_gpt2 = !pattern && !token_nl;
    return 0;
}

int tokenizer_load_hf(tokenizer_t **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    size_t len;
    char *buf = read_vocab_file(path, &len, err, errlen);
    if (!buf) return -1;
    json_error_t je;
    json_t *root = json_loadb(buf, len, 0, &je);
    if (!json_is_object(root)) {
        free(buf);
        if (root) {
            json_decref(root);
            return errf(err, errlen, "%s: not a JSON object (a tokenizer.json is one)", path);
        }
        return errf(err, errlen, "%s:%d: not valid JSON (a tokenizer.json): %s", path, je.line,
                    je.text);
    }
    tokenizer_t *t = tokenizer_alloc(TOK_HF_BPE);
    t->hf = calloc(1, sizeof *t->hf);
    PTR_CHECK(t->hf);
    t->source = buf;
    t->source_len = len;
    hf_load_t L = {.path = path, .err = err, .errlen = errlen, .root = root, .t = t};
    int rc = load_parts(&L);
    free(L.off_of);
    free(L.len_of);
    free(L.pool);
    json_decref(root);
    if (rc != 0) tokenizer_destroy(t);
    else *out = t;
    return rc;
}

void hf_free(hf_bpe_t *hf) {
    if (!hf) return;
    free(hf->rank_id);
    free(hf->pair_key);
    free(hf->pair_val);
    free(hf->added);
    free(hf->pat);
    free(hf->nfc_inert);
    free(hf->nfc_out);
    free(hf->nfc_cp);
    free(hf->sym);
    free(hf->heap);
    free(hf);
}

/* ------------------------------------------------------------------ SentencePiece */

/* Each id's bytes: a byte piece <0xNN> is that byte, a control piece (<s>, <unk>) its text,
 * any other piece its text with U+2581 (the library's space) as a space. */
static void spm_id_table(tokenizer_t *t) {
    size_t total = 0, len;
    for (uint32_t id = 0; id < t->n_ids; id++) spm_piece(t->spm, id, &len), total += len;
    t->id_off = malloc(((size_t)t->n_ids + 1) * sizeof *t->id_off);
    t->id_known = malloc(t->n_ids ? t->n_ids : 1);
    t->id_bytes = malloc(total + 1);
    PTR_CHECK(t->id_off);
    PTR_CHECK(t->id_known);
    PTR_CHECK(t->id_bytes);
    size_t o = 0;
    for (uint32_t id = 0; id < t->n_ids; id++) {
        const char *p = spm_piece(t->spm, id, &len);
        t->id_off[id] = (uint32_t)o;
        t->id_known[id] = 1;
        unsigned byte;
        if (spm_is_byte(t->spm, id) && sscanf(p, "<0x%2X>", &byte) == 1) {
            t->id_bytes[o++] = (uint8_t)byte;
            continue;
        }
        for (size_t i = 0; i < len; i++) {
            bool space = !spm_is_control(t->spm, id) && i + 3 <= len &&
                         memcmp(p + i, "\xe2\x96\x81", 3) == 0;
            t->id_bytes[o++] = space ? ' ' : (uint8_t)p[i];
            if (space) i += 2;
        }
    }
    t->id_off[t->n_ids] = (uint32_t)o;
}

int tokenizer_load_spm(tokenizer_t **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    size_t len;
    char *buf = read_vocab_file(path, &len, err, errlen);
    if (!buf) return -1;
    spm_t *s = spm_open(path, err, errlen);
    if (!s) {
        free(buf);
        return -1;
    }
    tokenizer_t *t = tokenizer_alloc(TOK_SPM);
    t->spm = s;
    t->source = buf;
    t->source_len = len;
    t->n_ids = spm_n_ids(s);
    int doc = spm_bos(s) >= 0 ? spm_bos(s) : spm_eos(s);
    if (doc < 0) {
        tokenizer_destroy(t);
        return errf(err, errlen, "%s: bos_id, eos_id: the model has neither <s> nor </s>, one "
                    "of which llmprep puts before each document", path);
    }
    t->eot_id = (uint32_t)doc;
    spm_id_table(t);
    *out = t;
    return 0;
}
