/* tokenizer_pretok.c — GPT-2's pre-tokenising regular expression, compiled with PCRE2 (UTF,
 * Unicode properties, invalid UTF-8 as a barrier, JIT when the library has it) and the search
 * for the next match. The piece iterator built on it (piece_next: matches, and the invalid
 * UTF-8 runs between them) is static inline in tokenizer_internal.h, as it runs once per piece
 * of encoding (tokenizer_bpe.c) and word counting (tokenizer_train.c).
 * Uses: core/error.h, PCRE2. */
#include "io/tokenizer_internal.h"
#include "core/error.h"
#include <stdio.h>
#include <stdlib.h>

/* GPT-2's pattern for PCRE2. \s is spelled out as Unicode's White_Space, [\t-\r\x{85}\p{Z}]:
 * under PCRE2_UCP, \s also matches U+180E (PCRE2 follows \h there), which Unicode took out of
 * White_Space in 6.3 and which tiktoken (Rust regex) and GPT-2's encoder.py (Python regex) treat
 * as an ordinary symbol. (?!\S) becomes (?![^...]): at an invalid UTF-8 sequence, as at the end,
 * a class matches nothing, so the lookahead holds there as tiktoken's does at a run's end. */
#define WS "\\t-\\r\\x{85}\\p{Z}"
#define PCRE2_GPT2_PATTERN                                                                 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+" \
    "|[" WS "]+(?![^" WS "])|[" WS "]+"

/* A tokenizer.json pattern (Oniguruma syntax, as the `tokenizers` library compiles it) for
 * PCRE2: \s and \S spelled out as White_Space, as in GPT-2's pattern above (Oniguruma's \s is
 * White_Space; PCRE2's also takes U+180E). Everything else is the same in both syntaxes for
 * the patterns in use (\p{L}, \p{N}, (?i:...), {1,3}, lookahead). NULL with err for \S inside
 * a class, which this spelling cannot say. */
static char *pattern_for_pcre2(const char *pat, char *err, size_t errlen) {
    size_t n = strlen(pat), o = 0;
    char *out = malloc(n * 16 + 1);
    PTR_CHECK(out);
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n && (pat[i + 1] == 's' || pat[i + 1] == 'S')) {
            bool neg = pat[++i] == 'S';
            if (neg && in_class) {
                free(out);
                errf(err, errlen, "\\S inside a character class is not supported");
                return NULL;
            }
            o += (size_t)sprintf(out + o, in_class ? "%s" : neg ? "[^%s]" : "[%s]", WS);
            continue;
        }
        out[o++] = c;
        if (c == '\\' && i + 1 < n) out[o++] = pat[++i];
        else if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
    }
    out[o] = 0;
    return out;
}

int pretok_init(pretok_t *p, const char *pattern, char *err, size_t errlen) {
    int ecode;
    PCRE2_SIZE eoff;
    memset(p, 0, sizeof *p);
    char *pat = pattern ? pattern_for_pcre2(pattern, err, errlen) : NULL;
    if (pattern && !pat) return -1;
    p->code = pcre2_compile((PCRE2_SPTR)(pat ? pat : PCRE2_GPT2_PATTERN), PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ecode, &eoff, NULL);
    free(pat);
    if (!p->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        return errf(err, errlen, "PCRE2 cannot compile the pattern at %zu: %s", (size_t)eoff,
                    (char *)msg);
    }
    uint32_t min_len = 0;
    pcre2_pattern_info(p->code, PCRE2_INFO_MINLENGTH, &min_len);
    if (min_len == 0) {
        pretok_free(p);
        return errf(err, errlen, "the pattern can match the empty string");
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

void pretok_free(pretok_t *p) {
    if (p->stack) pcre2_jit_stack_free(p->stack);
    if (p->mctx) pcre2_match_context_free(p->mctx);
    if (p->md) pcre2_match_data_free(p->md);
    if (p->code) pcre2_code_free(p->code);
    memset(p, 0, sizeof *p);
}

int pretok_match(pretok_t *p, const uint8_t *text, size_t len, size_t pos, size_t *s,
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
