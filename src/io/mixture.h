/* mixture.h — which data source each training sample comes from, in a mixture of several sets
 * of shards with weights (&data mixture, &stage mixture; syntax in config/stages.h).
 * Sample g (the global sample index, counted over the whole run, the same on every grid) comes
 * from source k with probability weight_k / sum(weights): k is the first with
 * u_g < cum_k, u_g = a uniform number in [0, 1) that is a pure function of (seed, g) through the
 * counter-based RNG. Within source k, samples are read in order from a per-source position (the
 * number of windows already taken from it), so each source is read like a single train_files
 * set (shuffled or not by its own sampler); the positions are the mixture's only state (in
 * checkpoints). Every rank computes the sources of the whole global batch of a step (one
 * Philox call per sample) and takes its own slice, so no communication is needed.
 * Owns: the draw and the per-source positions arithmetic. Uses: core/rng. Used by:
 * train/curriculum, the unit test. */
#ifndef LLMT_MIXTURE_H
#define LLMT_MIXTURE_H
#include <stdint.h>

/* cum[k] = (w_0 + ... + w_k) / sum(w): cumulative, normalised (cum[n-1] = 1). sum(w) > 0. */
void mixture_cumulative(const double *weight, int n, double *cum);
/* The source of global sample `sample` (0 when n = 1: no draw). */
int mixture_pick(const double *cum, int n, uint64_t seed, uint64_t sample);
/* The samples first .. first+count-1: source src[i] and the index index[i] of the window inside
 * that source's sampler, taken in order from pos[] (positions before these samples, by source),
 * which is advanced past them. */
void mixture_assign(const double *cum, int n, uint64_t seed, uint64_t first, int count,
                    int64_t *pos, int *src, int64_t *index);
#endif
