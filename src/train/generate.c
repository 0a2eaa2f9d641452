/* generate.c — mode = 'generate': autoregressive sampling from a prompt of token ids with
 * temperature and top-k. The random draw for new token i is keyed by (seed, i), so the same
 * namelist gives the same text on every grid. Without a KV cache each new token reruns the
 * forward over the last seq_len tokens: simple and exact, fine for short samples. */
#include "train/generate.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/rng.h"
#include "io/tokenizer.h"
#include "parallel/comm_host.h"

/* Index of the largest logit. */
static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The k-th largest value of x[n] (1-based k), by partial selection on a copy. */
static float kth_largest(const float *x, int n, int k, float *scratch) {
    memcpy(scratch, x, sizeof(float) * (size_t)n);
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) { /* quickselect for descending order */
        float pivot = scratch[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (scratch[i] > pivot) i++;
            while (scratch[j] < pivot) j--;
            if (i <= j) {
                float t = scratch[i];
                scratch[i++] = scratch[j];
                scratch[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return scratch[want];
}

/* Draw a token from softmax(logits / temperature) restricted to the top_k largest logits. */
int sample_token(float *logits, int V, double temperature, int top_k, float u, float *scratch) {
    if (temperature <= 0) return argmax(logits, V);
    float cutoff = -INFINITY;
    if (top_k > 0 && top_k < V) cutoff = kth_largest(logits, V, top_k, scratch);
    float mx = logits[argmax(logits, V)];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        logits[i] = logits[i] >= cutoff ? expf((float)((logits[i] - mx) / temperature)) : 0.0f;
        sum += logits[i];
    }
    double target = u * sum, acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += logits[i];
        if (logits[i] > 0 && acc >= target) return i;
    }
    return argmax(logits, V);
}

/* The tokenizer of &data tokenizer, or NULL when none is set. Every rank loads it, and a file
 * may be readable on some nodes only: the ranks agree, and the first failing rank's message is
 * printed once with its rank and host. */
static tokenizer_t *load_tokenizer(const config_t *cfg, int vocab_size) {
    if (cfg->tokenizer[0] == '\0') return NULL;
    tokenizer_t *tok = NULL;
    char err[1024], msg[1400];
    const char *mine = NULL;
    if (tokenizer_create(&tok, cfg->tokenizer, err, sizeof err) != 0) {
        snprintf(msg, sizeof msg, "&data tokenizer: %s", err);
        mine = msg;
    } else if ((int)tokenizer_vocab_size(tok) > vocab_size) {
        snprintf(msg, sizeof msg, "&data tokenizer: %s has %u tokens but &model vocab_size is %d",
                 cfg->tokenizer, tokenizer_vocab_size(tok), vocab_size);
        mine = msg;
    }
    if (mine) {
        tokenizer_destroy(tok);
        tok = NULL;
    }
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "loading the tokenizer", mine);
    return tok;
}

/* The prompt as ids: the text prompt through the tokenizer, else &run prompt_ids. */
static int prompt_ids(const config_t *cfg, tokenizer_t *tok, int *seq, int cap) {
    if (cfg->prompt[0] == '\0') {
        memcpy(seq, cfg->prompt_ids, sizeof(int) * (size_t)cfg->n_prompt_ids);
        return cfg->n_prompt_ids;
    }
    tok_ids_t ids = {0};
    tokenizer_encode(tok, cfg->prompt, strlen(cfg->prompt), TOKENIZER_ALLOW_SPECIAL, &ids);
    int n = (int)ids.n < cap ? (int)ids.n : cap;
    for (int i = 0; i < n; i++) seq[i] = (int)ids.ids[i];
    tok_ids_free(&ids);
    if (n == 0) fatal_user("&run prompt: the text encodes to no tokens");
    return n;
}

static void print_text(const tokenizer_t *tok, const int *seq, int n) {
    uint32_t *ids = xmalloc(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) ids[i] = (uint32_t)seq[i];
    size_t need = tokenizer_decode(tok, ids, (size_t)n, NULL, 0);
    if (need != SIZE_MAX) {
        char *text = xmalloc(need + 1);
        tokenizer_decode(tok, ids, (size_t)n, text, need);
        text[need] = '\0';
        printf("%s", text);
        xfree(text);
    }
    xfree(ids);
}

void generate_run(const config_t *cfg, const grid_t *grid, gpt_t *m) {
    tokenizer_t *tok = load_tokenizer(cfg, m->V);
    const int total = CFG_MAX_IDS + cfg->max_new_tokens;
    int *seq = xmalloc(sizeof(int) * (size_t)total);
    float *logits = xmalloc(sizeof(float) * (size_t)m->V);
    float *scratch = xmalloc(sizeof(float) * (size_t)m->V);
    philox_key_t key = rng_key((uint64_t)cfg->seed, rng_hash_str("generate"));
    int len = prompt_ids(cfg, tok, seq, CFG_MAX_IDS);
    const int root = grid->world_rank == 0;
    if (root) {
        printf("generate: prompt (%d ids):", len);
        for (int i = 0; i < len; i++) printf(" %d", seq[i]);
        printf("\ngenerate: continuation:");
        fflush(stdout);
    }
    for (int i = 0; i < cfg->max_new_tokens; i++, len++) {
        int T = len < m->T ? len : m->T;
        const gpt_pass_t pass = {.forward_only = true}; /* no backward: nothing to keep */
        gpt_forward(m, &pass, seq + len - T, NULL, 1, T);
        fault_point("generate", grid->world_rank);
        gpt_logits_row(m, 0, T - 1, T, logits);
        seq[len] = sample_token(logits, m->V, cfg->temperature, cfg->top_k,
                                rng_uniform(key, (uint64_t)i, 0), scratch);
        if (root) {
            printf(" %d", seq[len]);
            fflush(stdout);
        }
    }
    if (root) printf("\n");
    if (root && tok) {
        printf("generate: text:\n");
        print_text(tok, seq, len);
        printf("\n");
    }
    tokenizer_destroy(tok);
    xfree(seq);
    xfree(logits);
    xfree(scratch);
}
