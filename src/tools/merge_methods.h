/* merge_methods.h — the weight-merging methods of llmmerge, each on one tensor held as a flat
 * float array, defined as mergekit (0.1.5, merge_methods/ and sparsify.py) defines them:
 *
 *   linear           Σ wᵢ θᵢ / Σ wᵢ  (without normalize: Σ wᵢ θᵢ)
 *   slerp            the two tensors as flattened vectors: unit copies, dot = their product
 *                    (clamped to [-1, 1]); |dot| > 0.9995: lerp (1-t) a + t b; else
 *                    sin((1-t)θ)/sin θ · a + sin(tθ)/sin θ · b with θ = acos(dot), of the
 *                    unnormalised originals (a norm <= 1e-8 counts as 1)
 *   task_arithmetic  base + λ Σ wᵢ δᵢ, δᵢ = θᵢ - base  (normalize: / Σ wᵢ)
 *   ties             δᵢ trimmed to its top k = max(1, ⌊density·n⌋) entries by magnitude; the
 *                    sign of each entry elected as the sign of Σ wᵢ δᵢ (>= 0: +); the mean of
 *                    wᵢ δᵢ over the entries that agree with it, weighted (÷ Σ wᵢ over those,
 *                    1 where none); normalize on by default
 *   dare_linear      δᵢ: each entry kept with probability density, then rescaled (mergekit's
 *   dare_ties        L1 rule: × Σ|δᵢ| / Σ|kept|, or the classic × 1/density, or not); then
 *                    task_arithmetic's sum, or ties' election and mean
 *
 * The pipeline of one tensor is built from the pieces below by tools/llmmerge.c; they are pure
 * functions (no MPI, no HDF5, no allocation) so the unit test calls them directly.
 * Uses: core/rng (the DARE masks). Used by: tools/llmmerge.c, validation/unit/test_merge.c. */
#ifndef LLMT_MERGE_METHODS_H
#define LLMT_MERGE_METHODS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/rng.h"

typedef enum merge_method {
    MERGE_LINEAR,
    MERGE_SLERP,
    MERGE_TASK_ARITHMETIC,
    MERGE_TIES,
    MERGE_DARE_LINEAR,
    MERGE_DARE_TIES,
    MERGE_N_METHODS
} merge_method_t;

typedef enum merge_rescale {
    MERGE_RESCALE_NONE,        /* 'none': the kept entries as they are */
    MERGE_RESCALE_L1,          /* 'l1': mergekit's current rule, the L1 norm is kept */
    MERGE_RESCALE_INV_DENSITY  /* '1/density': the DARE paper's (and early mergekit's) rule */
} merge_rescale_t;

/* "linear", "slerp", "task_arithmetic", "ties", "dare_linear", "dare_ties" */
const char *merge_method_name(merge_method_t m);
/* The method of that name (exact, lower case), or -1. */
int merge_method_from_name(const char *name);
/* Task-vector methods (δ from a base): task_arithmetic, ties, dare_*. */
bool merge_method_is_task_vector(merge_method_t m);
/* Methods that elect signs (two passes over the inputs): ties, dare_ties. */
bool merge_method_elects_sign(merge_method_t m);
/* mergekit's default for `normalize`: linear and ties on, the others off. */
bool merge_method_normalizes(merge_method_t m);

/* acc[n] += w · x[n], in float, as mergekit's addcmul_ (linear) and mul_ + sum (task vectors). */
void merge_axpy(float *acc, const float *x, float w, size_t n);
/* x[n] *= s */
void merge_scale(float *x, float s, size_t n);
/* x[n] -= base[n]: the task vector δ = θ - base, in place. */
void merge_delta(float *x, const float *base, size_t n);

/* out[n] = slerp(t, a, b) (see above); out may be a or b. Returns 1 when the |dot| > 0.9995
 * fallback (lerp) was taken, else 0; the dot product in *dot when dot is not NULL. */
int merge_slerp(float *out, const float *a, const float *b, double t, size_t n, double *dot);

/* The TIES trim: keep the k = max(1, ⌊density·n⌋) entries of largest |δ| (density >= 1: all;
 * equal magnitudes at the cut are kept in index order), zero the others. scratch[n] is
 * overwritten. Returns k. */
size_t merge_trim(float *delta, size_t n, double density, float *scratch);
/* The same in two steps, so the second pass of the sign election applies the cut of the first
 * without selecting again: where the trim of this δ cuts (scratch[n] is overwritten) ... */
typedef struct merge_cut {
    bool all;       /* density >= 1: nothing trimmed */
    float cut;      /* the k-th largest magnitude */
    size_t at_cut;  /* how many entries equal to it are kept (the first ones) */
    size_t k;
} merge_cut_t;
merge_cut_t merge_trim_cut(const float *delta, size_t n, double density, float *scratch);
/* ... and the trim itself. */
void merge_trim_apply(float *delta, size_t n, merge_cut_t c);

/* The DARE drop: entry j of input `sub` is kept when u(j) < density, u(j) uniform in (0, 1)
 * from Philox-4x32-10 under `key` (see merge_dare_uniform), then the kept entries are
 * rescaled. density >= 1: nothing dropped, nothing rescaled (mergekit). Returns the factor the
 * kept entries were multiplied by (1 when none). */
double merge_dare(float *delta, size_t n, double density, philox_key_t key, uint32_t sub,
                  merge_rescale_t rescale);
/* The key of the DARE masks of one tensor: rng_key(seed, rng_hash_str(tensor name)). */
philox_key_t merge_dare_key(uint64_t seed, const char *tensor_name);
/* u(j) for input `sub`: word j % 4 of Philox(key, counter {j/4 low, j/4 high, sub, "DARE"}),
 * its top 24 bits + 0.5 over 2^24. The mask depends on (seed, tensor, input, element) only: the
 * same on any number of ranks. */
float merge_dare_uniform(philox_key_t key, uint64_t j, uint32_t sub);

/* Sign election, pass 2 of ties / dare_ties: e = w·s (s the sparsified δ of one input); where
 * sign(e) equals the elected sign (+ where sum >= 0, - elsewhere; sum = Σ wᵢ sᵢ of pass 1):
 * mixed += e, div += w. A zero e never agrees. */
void merge_elect_add(float *mixed, float *div, const float *s, float w, const float *sum,
                     size_t n);
/* The end of every task-vector method: out[n] = base + λ · mixed / divisor, where divisor is
 * div[n] per entry (sign election; 0 counts as 1) or the scalar div_scalar (|.| < 1e-8 counts
 * as 1) when div is NULL; without normalize no division. out may be base or mixed. */
void merge_finish(float *out, const float *base, const float *mixed, const float *div,
                  double div_scalar, bool normalize, double lambda, size_t n);
#endif
