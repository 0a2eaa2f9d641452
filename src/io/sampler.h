/* sampler.h — deterministic choice of training windows.
 * A sample is a window of seq_len+1 consecutive tokens (inputs = first seq_len, targets = last
 * seq_len) starting at a multiple of seq_len inside one shard: shard i holds
 * floor((n_tokens_i - 1) / seq_len) windows, numbered shard after shard. An epoch is every
 * window once. The window for a GLOBAL sample index s is a pure function of (seed, epoch, s):
 *   epoch = s / n_windows; j = s % n_windows; w = shuffle ? perm_{seed,epoch}(j) : j
 * where perm is a keyed bijection of [0, n_windows) (Feistel network with cycle walking over the
 * counter-based RNG). With shuffle off this is llm.c's sequential order: consecutive batches of
 * B*T+1 tokens, row b of the batch starting at b*T. The grid only decides which global indices
 * a rank asks for, so every grid sees the same data. Uses: io/shards, core/rng. */
#ifndef LLMT_SAMPLER_H
#define LLMT_SAMPLER_H
#include <stdbool.h>
#include <stdint.h>
#include "io/shards.h"

typedef struct sampler {
    const shard_set_t *set;
    int seq_len;
    bool shuffle;
    uint64_t seed;
    uint64_t n_windows;
    uint64_t *shard_first_window; /* [n_shards + 1] prefix sums */
} sampler_t;

/* 0 on success; non-zero with a message (e.g. no shard holds seq_len+1 tokens) in err. */
int sampler_create(sampler_t *s, const shard_set_t *set, int seq_len, bool shuffle,
                   uint64_t seed, char *err, size_t errlen);
void sampler_destroy(sampler_t *s);
/* The window for global sample index `sample`: its shard and token offset. */
void sampler_locate(const sampler_t *s, uint64_t sample, int *shard, uint64_t *offset);
/* Fill inputs[count*T] and targets[count*T] with samples first..first+count-1. */
void sampler_fill(const sampler_t *s, uint64_t first, int count, int *inputs, int *targets);
/* The keyed permutation itself (exposed for tests): a bijection of [0, n). */
uint64_t sampler_permute(uint64_t j, uint64_t n, uint64_t seed, uint64_t epoch);
#endif
