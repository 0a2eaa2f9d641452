/* tokenizer.h — byte-level BPE exactly like GPT-2 / tiktoken: load, encode, decode, train, save;
 * and the tokenizers of today's open models: Hugging Face tokenizer.json files of the byte-level
 * BPE family (Llama 3, Qwen 2, GPT-4-style patterns) with ids exactly as the `tokenizers`
 * library gives them, and SentencePiece models (Llama 2, Mistral) through the SentencePiece
 * library itself.
 * Owns: a vocabulary of byte strings ranked by merge priority (rank = token id), the special
 * token <|endoftext|> (id = number of ranks: 50256 for GPT-2), GPT-2's pre-tokenising regular
 * expression (PCRE2, UTF + Unicode properties, JIT), and BPE training on word counts.
 * Uses: core/. Used by: tools/llmprep, train/generate, tests and benches.
 *
 * Vocabulary files (the format is decided by the path):
 *  - "*.tiktoken" (or any plain file): tiktoken's rank file, one "base64(token) rank" per line,
 *    ranks 0..n-1 each once, all 256 single bytes present (a byte-level vocabulary);
 *  - a directory, or a path to "vocab.json" with "merges.txt" beside it: Hugging Face's GPT-2
 *    files (bytes shown through GPT-2's bytes_to_unicode map). Ranks come from the merge order
 *    (256 bytes first), and vocab.json must agree with them, as tiktoken's own loader demands.
 *  - "*.model": a SentencePiece model (any kind the library reads: BPE, unigram, word, char),
 *    encoded and decoded by the library (tokenizer_spm.cc, a C++ shim); the document token
 *    (tokenizer_eot) is its <s> (bos), else its </s>.
 *  - a ".json" file that is not vocab.json (or a directory with tokenizer.json and no
 *    vocab.json): a Hugging Face tokenizer.json (read with libjansson) of model.type "BPE" over
 *    bytes: pre_tokenizer ByteLevel (use_regex: GPT-2's pattern) or Sequence [Split (a Regex,
 *    behavior Isolated, not inverted), ByteLevel (use_regex false)], no normalizer or NFC
 *    (Qwen 2's; alone or in a Sequence; libutf8proc), no dropout, no subword prefix or suffix,
 *    all 256 bytes tokens. Ids are the file's; a word is merged as the library merges it (by
 *    the rank of each adjacent pair in model.merges, then leftmost), model.ignore_merges
 *    honoured. Added tokens (added_tokens) are found in the text first, leftmost-longest, as
 *    the library does: those not `normalized` in the text as given, then after NFC the
 *    `normalized` ones (their content in NFC too); with flags = 0 a special token found is
 *    left as text (the library with encode_special_tokens = True), with
 *    TOKENIZER_ALLOW_SPECIAL it is the token (its default). NFC is the library's: Unicode
 *    9.0's tables, so the characters since then that would combine are left as they are. The
 *    document token is the special token the post_processor's template puts first (Llama 3's
 *    <|begin_of_text|>), else the added token <|endoftext|> (Qwen 2, GPT-2).
 *    Refused, naming the file and field: another model.type, another normalizer (NFKC,
 *    Lowercase, ...), another pre_tokenizer, added tokens with lstrip/rstrip/single_word,
 *    merges that name tokens model.vocab lacks.
 * A vocabulary that does not parse is refused with one message naming the file and line.
 *
 * Encoding is tiktoken's: split the text with GPT-2's pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (\s being Unicode's White_Space, as in tiktoken: PCRE2 gets it spelled out, see
 * tokenizer_pretok.c)
 * then merge the bytes of each piece, lowest-rank pair first (leftmost on ties). Invalid UTF-8
 * is kept losslessly: PCRE2_MATCH_INVALID_UTF makes an invalid byte sequence a barrier no match
 * crosses, so the valid stretches are split exactly as tiktoken splits each of them on its own,
 * and each maximal run of bytes no match covers is one more piece, BPE-merged like any other.
 * Hence decode(encode(x)) == x for every byte string x. (tiktoken's API takes str, so it never
 * sees invalid bytes; validation/tokenizer/tiktoken_ref.py states the reference this matches.)
 * Unicode version: the letter/number/space classes come from PCRE2's tables (10.42: Unicode 14).
 * A character assigned later (e.g. U+1C89, Unicode 16) counts as unassigned, so where tiktoken's
 * newer tables call it a letter the split can differ; ids still decode to the exact bytes.
 *
 * A tokenizer_t holds scratch space and a cache: use one per thread. */
#ifndef LLMT_TOKENIZER_H
#define LLMT_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#define TOKENIZER_EOT_TEXT "<|endoftext|>"
/* The pattern as GPT-2 and tiktoken write it (PCRE2 compiles an equivalent spelling). */
#define TOKENIZER_GPT2_PATTERN \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct tokenizer tokenizer_t;

/* A growable list of token ids; encode appends to it. Zero-initialise; free with tok_ids_free. */
typedef struct tok_ids {
    uint32_t *ids;
    size_t n, cap;
} tok_ids_t;
void tok_ids_free(tok_ids_t *v);

/* Load a vocabulary (see above). 0 on success; otherwise *out is NULL and err holds one message
 * such as "vocab/gpt2.tiktoken:17: rank 9 repeats line 10". Never exits. */
int tokenizer_create(tokenizer_t **out, const char *path, char *err, size_t errlen);
void tokenizer_destroy(tokenizer_t *tok); /* accepts NULL */

uint32_t tokenizer_n_ranks(const tokenizer_t *tok);    /* ordinary tokens: ids 0..n_ranks-1 */
uint32_t tokenizer_eot(const tokenizer_t *tok);        /* <|endoftext|> = n_ranks; else the
                                                          document token (see above) */
uint32_t tokenizer_vocab_size(const tokenizer_t *tok); /* n_ranks + 1; else the file's ids */
/* The name the vocabulary is saved under (tokenizer_save): "tokenizer.tiktoken",
 * "tokenizer.json" or "tokenizer.model"; and its kind in words. */
const char *tokenizer_file_name(const tokenizer_t *tok);
const char *tokenizer_kind(const tokenizer_t *tok);
/* The bytes of token `id` (the special token's text for the eot id); NULL if out of range. */
const char *tokenizer_token(const tokenizer_t *tok, uint32_t id, size_t *len);

enum {
    TOKENIZER_ALLOW_SPECIAL = 1 /* "<|endoftext|>" in the text becomes the eot id; else text */
};
/* Encode text[0..len) and append the ids to *out. flags = 0 is tiktoken's encode_ordinary. */
void tokenizer_encode(tokenizer_t *tok, const char *text, size_t len, unsigned flags,
                      tok_ids_t *out);
/* A cut point in text[0..len), at or after `from`, such that encoding text[0..cut) and
 * text[cut..len) apart gives exactly the ids of encoding the whole: just before a "\n" that an
 * ASCII non-space character follows (GPT-2's pattern always makes that "\n" a piece of its own,
 * after the rest of any whitespace run before it). Returns len when there is none. */
size_t tokenizer_safe_cut(const char *text, size_t len, size_t from);
/* The same for this tokenizer: GPT-2's pattern (tiktoken files, tokenizer.json with ByteLevel's
 * own pattern) cuts as tokenizer_safe_cut; Llama 3's and Qwen 2's patterns just after a "\n"
 * that an ASCII letter follows (no piece of theirs holds "\n" then a letter, and none looks
 * behind); other patterns and SentencePiece (which adds its space at each start) never cut. */
size_t tokenizer_cut(const tokenizer_t *tok, const char *text, size_t len, size_t from);
/* Decode ids[0..n) into out (at most `cap` bytes written, no terminating NUL). Returns the number
 * of bytes the whole decoding needs, or SIZE_MAX when an id is not in the vocabulary. */
size_t tokenizer_decode(const tokenizer_t *tok, const uint32_t *ids, size_t n, char *out,
                        size_t cap);

/* Write the vocabulary as a tiktoken rank file (rank order; the special token is implied); a
 * tokenizer.json or SentencePiece model is written as the bytes of the file it was read from.
 * Written atomically (core/fileio: "<path>.tmp", fsync, rename, fsync of the directory), so
 * a crash leaves the old file or the whole new one. 0 on success, -1 with errno. */
int tokenizer_save(const tokenizer_t *tok, const char *path);

/* ---- training ----
 * Count the pre-tokenised words of a corpus (the same pattern and invalid-UTF-8 rule as
 * encoding), possibly on several ranks, then train on the merged counts. */
typedef struct tok_counter tok_counter_t;
tok_counter_t *tok_counter_create(void);
void tok_counter_destroy(tok_counter_t *c);
void tok_counter_add_text(tok_counter_t *c, const char *text, size_t len);
size_t tok_counter_n_words(const tok_counter_t *c); /* distinct words */
/* Serialise the counts (to send them to another rank): a malloc'd buffer, its size in *len. */
char *tok_counter_pack(const tok_counter_t *c, size_t *len);
/* Add packed counts into c. 0, or -1 when the buffer is malformed. */
int tok_counter_unpack_add(tok_counter_t *c, const char *buf, size_t len);

/* Train a byte-level BPE vocabulary of `vocab_size` ids in all (256 single bytes in byte order,
 * then one rank per merge, then <|endoftext|>): repeatedly merge the most frequent adjacent pair
 * (count weighted by word frequency); ties go to the pair with the smaller (left id, right id).
 * Deterministic: the result depends only on the counts. Stops early when no pair is left.
 * 0 on success, else err says why (vocab_size < 257). */
int tokenizer_train(tokenizer_t **out, const tok_counter_t *counts, uint32_t vocab_size,
                    char *err, size_t errlen);

/* For tests: pieces longer than `n` bytes use the heap-based merge (O(n log n)) instead of the
 * linear scan; both give identical ids. Default 64. */
void tokenizer_set_heap_threshold(tokenizer_t *tok, size_t n);
#endif
