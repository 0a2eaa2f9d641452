/* rng.c — Philox-4x32-10 and the helpers built on it (see rng.h). */
#include "core/rng.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

philox_ctr_t philox4x32_10(philox_ctr_t c, philox_key_t k) {
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(PHILOX_M0, c.v[0], &hi0);
        uint32_t lo1 = mulhilo(PHILOX_M1, c.v[2], &hi1);
        philox_ctr_t n = {{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
        c = n;
        k.v[0] += PHILOX_W0;
        k.v[1] += PHILOX_W1;
    }
    return c;
}

uint64_t rng_hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* The key mixes seed and stream through one Philox block so nearby seeds/streams give
 * unrelated keys. */
philox_key_t rng_key(uint64_t seed, uint64_t stream) {
    philox_ctr_t c = {{(uint32_t)stream, (uint32_t)(stream >> 32), 0x6c6c6d74u, 0}};
    philox_key_t k0 = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    philox_ctr_t r = philox4x32_10(c, k0);
    philox_key_t k = {{r.v[0], r.v[1]}};
    return k;
}

static philox_ctr_t block(philox_key_t key, uint64_t index, uint32_t sub) {
    philox_ctr_t c = {{(uint32_t)index, (uint32_t)(index >> 32), sub, 0}};
    return philox4x32_10(c, key);
}

/* 24 random bits -> (0, 1): (x + 0.5) / 2^24 never hits 0 or 1. */
static inline float u01(uint32_t x) { return ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f); }

float rng_uniform(philox_key_t key, uint64_t index, uint32_t sub) {
    return u01(block(key, index, sub).v[0]);
}

uint64_t rng_u64(philox_key_t key, uint64_t index, uint32_t sub) {
    philox_ctr_t r = block(key, index, sub);
    return ((uint64_t)r.v[1] << 32) | r.v[0];
}

float rng_normal(philox_key_t key, uint64_t index) {
    philox_ctr_t r = block(key, index, 0x4e4f524du /* "NORM" */);
    /* Box-Muller in double from two 32-bit uniforms, so init is the same on any compiler. */
    double u1 = ((double)r.v[0] + 0.5) / 4294967296.0;
    double u2 = ((double)r.v[1] + 0.5) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
