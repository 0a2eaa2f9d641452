/* rng.h — counter-based random numbers (Philox-4x32-10, Salmon et al. 2011).
 * Owns: every random number of the program. A number is a pure function of
 * (seed, purpose/name, counter), so the same seed gives the same values on every grid shape and
 * after a restart (there is no RNG state to save). Uses: nothing. Used by: model/ (init),
 * io/ (sampler), train/ (generation sampling, dropout later). */
#ifndef LLMT_RNG_H
#define LLMT_RNG_H
#include <stdint.h>

typedef struct { uint32_t v[4]; } philox_ctr_t;
typedef struct { uint32_t v[2]; } philox_key_t;

/* The raw block function: 10 rounds of Philox-4x32. */
philox_ctr_t philox4x32_10(philox_ctr_t ctr, philox_key_t key);

/* 64-bit FNV-1a of a string: turns a parameter name / purpose into key material. */
uint64_t rng_hash_str(const char *s);
/* Key from (seed, stream id). */
philox_key_t rng_key(uint64_t seed, uint64_t stream);

/* Uniform in (0, 1), exclusive of both ends: from counter (index, sub) under key. */
float rng_uniform(philox_key_t key, uint64_t index, uint32_t sub);
/* Standard normal via Box-Muller from counter index: element `index` of a tensor. */
float rng_normal(philox_key_t key, uint64_t index);
/* A 64-bit random integer from counter (index, sub). */
uint64_t rng_u64(philox_key_t key, uint64_t index, uint32_t sub);
#endif
