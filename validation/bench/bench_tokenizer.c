/* bench_tokenizer.c — encoding throughput of llmtrain's tokenizer on one thread (a benchmark,
 * not a test). usage: bench_tokenizer VOCAB TEXT [REPEATS]
 * Encodes the whole text as one string (like tiktoken's encode_ordinary) and document by
 * document (split at blank lines), best of REPEATS (default 5); prints MB/s, the token count and
 * a hash of the ids that bench_tokenizer.py prints for tiktoken's ids too. */
#include "core/timer.h"
#include "io/tokenizer.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    char *buf = malloc(*n + 1);
    if (fread(buf, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return buf;
}

/* Encode text[0..n) whole (per_doc = 0) or per blank-line document; returns seconds. */
static double encode_once(tokenizer_t *t, const char *text, size_t n, int per_doc, tok_ids_t *ids) {
    ids->n = 0;
    double t0 = now_sec();
    if (!per_doc) {
        tokenizer_encode(t, text, n, 0, ids);
        return now_sec() - t0;
    }
    for (size_t s = 0; s < n;) {
        const char *q = memmem(text + s, n - s, "\n\n", 2);
        size_t e = q ? (size_t)(q - text) + 2 : n;
        tokenizer_encode(t, text + s, e - s, 0, ids);
        s = e;
    }
    return now_sec() - t0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer VOCAB TEXT [REPEATS]\n");
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 5;
    char err[1024];
    tokenizer_t *t;
    size_t n;
    char *text = read_all(argv[2], &n);
    if (!text || tokenizer_create(&t, argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "bench_tokenizer: %s\n", text ? err : "cannot read the text");
        return 2;
    }
    tok_ids_t ids = {0};
    for (int per_doc = 0; per_doc < 2; per_doc++) {
        double best = 1e30;
        for (int r = 0; r < repeats; r++) {
            double dt = encode_once(t, text, n, per_doc, &ids);
            if (dt < best) best = dt;
        }
        uint64_t h = 0;
        for (size_t i = 0; i < ids.n; i++) h = h * 1000003u + ids.ids[i];
        printf("llmtrain %-10s %8.1f MB/s  %zu tokens  hash %016llx\n",
               per_doc ? "per-doc" : "one-string", (double)n / best / 1e6, ids.n,
               (unsigned long long)h);
    }
    tok_ids_free(&ids);
    tokenizer_destroy(t);
    free(text);
    return 0;
}
