/* sampler.c — deterministic choice of training windows (see sampler.h).
 * Everything here is a pure function of (seed, epoch, global sample index): no cursor, no RNG
 * state. That is what makes every grid shape read the same data and makes a resumed run read
 * exactly what an uninterrupted one would have. */
#include "io/sampler.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
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

int sampler_create(sampler_t *s, const shard_set_t *set, int seq_len, bool shuffle,
                   uint64_t seed, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (seq_len <= 0) {
        errf(err, errlen, "seq_len must be positive (got %d)", seq_len);
        return -1;
    }
    s->set = set;
    s->seq_len = seq_len;
    s->shuffle = shuffle;
    s->seed = seed;
    s->shard_first_window = xcalloc((size_t)set->n_shards + 1, sizeof *s->shard_first_window);
    size_t largest = 0;
    for (int i = 0; i < set->n_shards; i++) {
        uint64_t w = windows_in(set->shards[i].n_tokens, seq_len);
        s->shard_first_window[i + 1] = s->shard_first_window[i] + w;
        if (set->shards[i].n_tokens > largest) largest = set->shards[i].n_tokens;
    }
    s->n_windows = s->shard_first_window[set->n_shards];
    if (s->n_windows == 0) {
        errf(err, errlen,
             "no shard holds seq_len+1 = %d tokens (the largest of %d holds %zu): use shorter "
             "sequences or more data",
             seq_len + 1, set->n_shards, largest);
        sampler_destroy(s);
        return -1;
    }
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

void sampler_fill(const sampler_t *s, uint64_t first, int count, int *inputs, int *targets) {
    int T = s->seq_len;
    for (int b = 0; b < count; b++) {
        int shard;
        uint64_t offset;
        sampler_locate(s, first + (uint64_t)b, &shard, &offset);
        const uint16_t *tok = s->set->shards[shard].tokens + offset;
        int *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            in[t] = tok[t];
            tg[t] = tok[t + 1];
        }
    }
}
