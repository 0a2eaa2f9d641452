/* mixture.c — the source of each sample of a data mixture (see mixture.h). */
#include "io/mixture.h"
#include "core/rng.h"

void mixture_cumulative(const double *weight, int n, double *cum) {
    double sum = 0, run = 0;
    for (int k = 0; k < n; k++) sum += weight[k];
    for (int k = 0; k < n; k++) {
        run += weight[k];
        cum[k] = run / sum;
    }
    cum[n - 1] = 1.0; /* exactly: rounding must not leave a u without a source */
}

int mixture_pick(const double *cum, int n, uint64_t seed, uint64_t sample) {
    if (n <= 1) return 0;
    const philox_key_t key = rng_key(seed, rng_hash_str("data.mixture"));
    /* 53 random bits: a double uniform in [0, 1) */
    const double u = (double)(rng_u64(key, sample, 0) >> 11) * 0x1.0p-53;
    int k = 0;
    while (k < n - 1 && !(u < cum[k])) k++;
    return k;
}

void mixture_assign(const double *cum, int n, uint64_t seed, uint64_t first, int count,
                    int64_t *pos, int *src, int64_t *index) {
    for (int i = 0; i < count; i++) {
        const int k = mixture_pick(cum, n, seed, first + (uint64_t)i);
        src[i] = k;
        index[i] = pos[k]++;
    }
}
