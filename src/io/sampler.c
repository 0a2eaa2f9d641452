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
    if (vocab_size < 1)
        return errf(err, errlen, "%s: vocab_size must be in [1, %d] (got %d)", set->what, INT_MAX,
                    vocab_size);
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

/* One window of uint16 ids: inputs = tok[0, T), targets = tok[1, T], and the max of its T+1
 * tokens in the same vectorised loop (measured in cache, T = 1024: the copy alone 5.9 us per 16
 * windows, with the max in the loop +2.5%, as a separate pass +4%). */
static uint32_t copy_window_u16(const uint16_t *tok, int T, int *in, int *tg) {
    uint16_t largest = tok[T];
    for (int t = 0; t < T; t++) {
        const uint16_t x = tok[t];
        in[t] = x;
        tg[t] = tok[t + 1];
        largest = x > largest ? x : largest;
    }
    return largest;
}

/* The same for uint32 ids (version-2 shards). An id above INT_MAX would turn negative in the
 * int arrays: the caller refuses the window by its max, taken here on the unsigned values. */
static uint32_t copy_window_u32(const uint32_t *tok, int T, int *in, int *tg) {
    uint32_t largest = tok[T];
    for (int t = 0; t < T; t++) {
        const uint32_t x = tok[t];
        in[t] = (int)x;
        tg[t] = (int)tok[t + 1];
        largest = x > largest ? x : largest;
    }
    return largest;
}

int sampler_fill(const sampler_t *s, uint64_t first, int count, int *inputs, int *targets,
                 char *err, size_t errlen) {
    const int T = s->seq_len;
    for (int b = 0; b < count; b++) {
        int shard;
        uint64_t offset;
        sampler_locate(s, first + (uint64_t)b, &shard, &offset);
        const shard_t *sh = &s->set->shards[shard];
        int *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        const uint32_t largest = sh->tokens32 ? copy_window_u32(sh->tokens32 + offset, T, in, tg)
                                              : copy_window_u16(sh->tokens + offset, T, in, tg);
        if (largest >= (uint32_t)s->vocab_size) { /* never for uint16 ids and vocab_size 65536 */
            size_t pos = shard_find_in(sh, offset, offset + (size_t)T + 1, s->vocab_size);
            return shard_bad_token_error(s->set, shard, pos, s->vocab_size, err, errlen);
        }
    }
    return 0;
}
