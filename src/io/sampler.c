/* sampler.c — deterministic choice of training windows (see sampler.h).
 * Everything here is a pure function of (seed, epoch, global sample index): no cursor, no RNG
 * state. That is what makes every grid shape read the same data and makes a resumed run read
 * exactly what an uninterrupted one would have. */
#include "io/sampler.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Rounds of the Feistel network: 4 already give a pseudorandom permutation (Luby-Rackoff);
 * 6 leave margin for the small domains where each half has only a few bits. */
#define FEISTEL_ROUNDS 6

/* Windows of seq_len+1 tokens starting at multiples of seq_len that fit in n tokens. */
static uint64_t windows_in(size_t n_tokens, int seq_len) {
    return n_tokens >= 1 ? (uint64_t)(n_tokens - 1) / (uint64_t)seq_len : 0;
}

int sampler_create(sampler_t *s, const shard_set_t *set, int seq_len, int vocab_size,
                   bool shuffle, uint64_t seed, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (seq_len <= 0 || seq_len == INT_MAX)
        return errf(err, errlen, "%s: seq_len must be in [1, %d] (got %d)", set->what,
                    INT_MAX - 1, seq_len);
    if (vocab_size < 1 || vocab_size > SHARD_MAX_VOCAB)
        return errf(err, errlen, "%s: vocab_size must be in [1, %d] (got %d)", set->what,
                    SHARD_MAX_VOCAB, vocab_size);
    if (set->n_shards < 1) return errf(err, errlen, "%s: the shard set is empty", set->what);
    /* A shard without a window would be silently skipped: the user meant it to be read. */
    const size_t window = (size_t)seq_len + 1;
    for (int i = 0; i < set->n_shards; i++)
        if (set->shards[i].n_tokens < window)
            return errf(err, errlen, "%s: %s holds %zu tokens, fewer than one window of "
                        "seq_len + 1 = %zu tokens (every shard must hold at least one: remove it "
                        "from the pattern or use a smaller &model seq_len)", set->what,
                        set->shards[i].path, set->shards[i].n_tokens, window);
    s->set = set;
    s->seq_len = seq_len;
    s->vocab_size = vocab_size;
    s->shuffle = shuffle;
    s->seed = seed;
    s->shard_first_window = xcalloc((size_t)set->n_shards + 1, sizeof *s->shard_first_window);
    for (int i = 0; i < set->n_shards; i++)
        s->shard_first_window[i + 1] =
            s->shard_first_window[i] + windows_in(set->shards[i].n_tokens, seq_len);
    s->n_windows = s->shard_first_window[set->n_shards];
    shard_set_advise(set, shuffle);
    return 0;
}

void sampler_destroy(sampler_t *s) {
    xfree(s->shard_first_window);
    memset(s, 0, sizeof *s);
}

/* ---- the keyed permutation ---------------------------------------------------------------- */

/* Bits per Feistel half: the smallest h with 4^h >= n, so the domain 2^(2h) is < 4n and cycle
 * walking takes fewer than 4 steps on average. */
static int half_bits(uint64_t n) {
    int h = 1;
    while (h < 32 && (uint64_t)1 << (2 * h) < n) h++;
    return h;
}

/* One pass of the balanced Feistel network over 2h bits: a bijection of [0, 2^(2h)). */
static uint64_t feistel(uint64_t x, int h, philox_key_t key) {
    uint64_t mask = ((uint64_t)1 << h) - 1;
    uint64_t left = x >> h, right = x & mask;
    for (uint32_t r = 0; r < FEISTEL_ROUNDS; r++) {
        uint64_t next = left ^ (rng_u64(key, right, r) & mask);
        left = right;
        right = next;
    }
    return (left << h) | right;
}

uint64_t sampler_permute(uint64_t j, uint64_t n, uint64_t seed, uint64_t epoch) {
    ASSERT(j < n);
    if (n <= 1) return j;
    /* One key per (seed, epoch): each epoch is an unrelated order. */
    philox_key_t key = rng_key(seed, rng_hash_str("sampler.permute") + epoch);
    int h = half_bits(n);
    /* Cycle walking: apply the permutation of the larger domain until the value falls back
     * inside [0, n). Restricting a permutation this way is again a bijection of [0, n). */
    uint64_t x = j;
    do x = feistel(x, h, key);
    while (x >= n);
    return x;
}

/* ---- windows and tokens ------------------------------------------------------------------ */

/* The shard holding window w: the last i with first[i] <= w (skips shards with no window). */
static int shard_of_window(const sampler_t *s, uint64_t w) {
    int lo = 0, hi = s->set->n_shards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (s->shard_first_window[mid] <= w) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

void sampler_locate(const sampler_t *s, uint64_t sample, int *shard, uint64_t *offset) {
    uint64_t epoch = sample / s->n_windows;
    uint64_t j = sample % s->n_windows;
    uint64_t w = s->shuffle ? sampler_permute(j, s->n_windows, s->seed, epoch) : j;
    int i = shard_of_window(s, w);
    *shard = i;
    *offset = (w - s->shard_first_window[i]) * (uint64_t)s->seq_len;
}

/* One window: inputs = tok[0, T), targets = tok[1, T], and the max of its T+1 tokens in the
 * same vectorised loop (measured in cache, T = 1024: the copy alone 5.9 us per 16 windows, with
 * the max in the loop +2.5%, as a separate pass +4%). */
int sampler_fill(const sampler_t *s, uint64_t first, int count, int *inputs, int *targets,
                 char *err, size_t errlen) {
    const int T = s->seq_len;
    for (int b = 0; b < count; b++) {
        int shard;
        uint64_t offset;
        sampler_locate(s, first + (uint64_t)b, &shard, &offset);
        const uint16_t *tok = s->set->shards[shard].tokens + offset;
        int *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        uint16_t largest = tok[T];
        for (int t = 0; t < T; t++) {
            const uint16_t x = tok[t];
            in[t] = x;
            tg[t] = tok[t + 1];
            largest = x > largest ? x : largest;
        }
        if (largest >= s->vocab_size) { /* never for vocab_size 65536 */
            size_t pos = offset + shard_find_token_at_least(tok, (size_t)T + 1, s->vocab_size);
            return shard_bad_token_error(s->set, shard, pos, s->vocab_size, err, errlen);
        }
    }
    return 0;
}
