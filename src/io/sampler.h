/* sampler.h — deterministic choice of training windows.
 * A sample is a window of seq_len+1 consecutive tokens (inputs = first seq_len, targets = last
 * seq_len) starting at a multiple of seq_len inside one shard: shard i holds
 * floor((n_tokens_i - 1) / seq_len) windows, numbered shard after shard. An epoch is every
 * window once. The window for a GLOBAL sample index s is a pure function of (seed, epoch, s):
 *   epoch = s / n_windows; j = s % n_windows; w = shuffle ? perm_{seed,epoch}(j) : j
 * where perm is a keyed bijection of [0, n_windows) (Feistel network with cycle walking over the
 * counter-based RNG). With shuffle off this is llm.c's sequential order: consecutive batches of
 * B*T+1 tokens, row b of the batch starting at b*T. The grid only decides which global indices
 * a rank asks for, so every grid sees the same data. Every shard must hold at least one window
 * (a shorter one is refused by name rather than silently skipped). Uses: io/shards, core/rng. */
#ifndef LLMT_SAMPLER_H
#define LLMT_SAMPLER_H
#include <stdbool.h>
#include <stdint.h>
#include "io/shards.h"

typedef struct sampler {
    const shard_set_t *set;
    int seq_len;
    int vocab_size;         /* every token sampler_fill hands out is below it */
    bool shuffle;
    uint64_t seed;
    uint64_t n_windows;
    uint64_t *shard_first_window; /* [n_shards + 1] prefix sums */
} sampler_t;

/* 0 on success; -1 with a message in err, e.g. "train_files: data/x.bin holds 60 tokens, fewer
 * than one window of seq_len + 1 = 65 tokens (...)". vocab_size in [1, INT_MAX]: the limit of
 * sampler_fill's check (65536 lets every uint16 through). */
int sampler_create(sampler_t *s, const shard_set_t *set, int seq_len, int vocab_size,
                   bool shuffle, uint64_t seed, char *err, size_t errlen);
void sampler_destroy(sampler_t *s);
/* The window for global sample index `sample`: its shard and token offset. */
void sampler_locate(const sampler_t *s, uint64_t sample, int *shard, uint64_t *offset);
/* Fill inputs[count*T] and targets[count*T] with samples first..first+count-1, checking every
 * token against vocab_size on the way. Returns 0, or -1 at the first window holding a token
 * >= vocab_size with the message of shard_set_check_tokens in err ("train_files: data/x.bin:
 * token 50300 at position 12345 (token index in the shard) is >= &model vocab_size = 50257");
 * the buffers are then partly filled and must not be used. Only this rank knows: the trainer
 * agrees with the others before it trains (see open_data / check_windows in train/trainer.c).
 * Cost: the max of the window's T+1 tokens is folded into the copy loop (uint16 or uint32 ->
 * int inputs and targets) and vectorised with it: in cache +2.5% over the copy alone (5.9 us per 16
 * windows of T = 1024); with the windows read from DRAM, as in training, within noise (8.3 us
 * per micro-batch with or without it; validation/bench/bench_data_check.c). Always on. */
int sampler_fill(const sampler_t *s, uint64_t first, int count, int *inputs, int *targets,
                 char *err, size_t errlen);
/* The keyed permutation itself (exposed for tests): a bijection of [0, n). */
uint64_t sampler_permute(uint64_t j, uint64_t n, uint64_t seed, uint64_t epoch);
#endif
