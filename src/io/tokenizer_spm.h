/* tokenizer_spm.h — a C view of the SentencePiece library (C++), for the tokenizer files only:
 * load a model (.model, any kind the library knows: BPE, unigram, word, char), encode to ids,
 * decode ids, and each id's piece and kind. The library does the work; tokenizer_spm.cc is a
 * thin extern "C" shim over sentencepiece::SentencePieceProcessor, so that the rest of llmtrain
 * stays C11. Uses: the SentencePiece library. Used by: io/tokenizer*.c. */
#ifndef LLMT_TOKENIZER_SPM_H
#define LLMT_TOKENIZER_SPM_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct spm spm_t;

/* Load a SentencePiece model file. NULL with one message in err (naming the file) on failure. */
spm_t *spm_open(const char *path, char *err, size_t errlen);
void spm_close(spm_t *s); /* accepts NULL */

uint32_t spm_n_ids(const spm_t *s);
int spm_bos(const spm_t *s); /* -1 when the model has none */
int spm_eos(const spm_t *s);
/* "bpe", "unigram", "word" or "char": the model's kind (its trainer_spec.model_type). */
const char *spm_kind(const spm_t *s);
/* The piece of `id` as the model stores it ("\xe2\x96\x81the", "<0x0A>", "<s>"). */
const char *spm_piece(const spm_t *s, uint32_t id, size_t *len);
int spm_is_byte(const spm_t *s, uint32_t id);    /* a byte-fallback piece <0xNN> */
int spm_is_control(const spm_t *s, uint32_t id); /* <s>, </s>, ... and <unk> */

/* Encode text[0..len): the ids, valid until the next call on s; their number in *n. 0, or -1
 * with err when the library refuses. */
int spm_encode(spm_t *s, const char *text, size_t len, const int **ids, size_t *n, char *err,
               size_t errlen);
/* Decode ids[0..n): the text, valid until the next call on s, its length in *len; NULL when an
 * id is out of range. */
const char *spm_decode(spm_t *s, const uint32_t *ids, size_t n, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
