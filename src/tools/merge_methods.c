/* merge_methods.c — the merge methods on flat float arrays (see merge_methods.h). Elementwise
 * arithmetic is float, as mergekit's on float32 tensors; reductions (norms, dot products, L1
 * sums) are double, so their result does not depend on the length of the tensor. */
#include "tools/merge_methods.h"
#include <math.h>
#include <string.h>

static const char *const method_names[MERGE_N_METHODS] = {
    "linear", "slerp", "task_arithmetic", "ties", "dare_linear", "dare_ties"};

const char *merge_method_name(merge_method_t m) {
    return m >= 0 && m < MERGE_N_METHODS ? method_names[m] : "?";
}

int merge_method_from_name(const char *name) {
    for (int m = 0; m < MERGE_N_METHODS; m++)
        if (strcmp(name, method_names[m]) == 0) return m;
    return -1;
}

bool merge_method_is_task_vector(merge_method_t m) {
    return m == MERGE_TASK_ARITHMETIC || m == MERGE_TIES || m == MERGE_DARE_LINEAR ||
           m == MERGE_DARE_TIES;
}

bool merge_method_elects_sign(merge_method_t m) { return m == MERGE_TIES || m == MERGE_DARE_TIES; }

bool merge_method_normalizes(merge_method_t m) { return m == MERGE_LINEAR || m == MERGE_TIES; }

void merge_axpy(float *acc, const float *x, float w, size_t n) {
    for (size_t j = 0; j < n; j++) acc[j] += w * x[j];
}

void merge_scale(float *x, float s, size_t n) {
    for (size_t j = 0; j < n; j++) x[j] *= s;
}

void merge_delta(float *x, const float *base, size_t n) {
    for (size_t j = 0; j < n; j++) x[j] -= base[j];
}

/* ---- slerp ---------------------------------------------------------------------------------- */

int merge_slerp(float *out, const float *a, const float *b, double t, size_t n, double *dot_out) {
    double aa = 0, bb = 0, ab = 0;
    for (size_t j = 0; j < n; j++) {
        aa += (double)a[j] * a[j];
        bb += (double)b[j] * b[j];
        ab += (double)a[j] * b[j];
    }
    double na = sqrt(aa), nb = sqrt(bb);
    if (!(na > 1e-8)) na = 1; /* mergekit: a (near) zero vector is not normalised */
    if (!(nb > 1e-8)) nb = 1;
    double dot = ab / na / nb;
    dot = dot > 1 ? 1 : dot < -1 ? -1 : dot;
    if (dot_out) *dot_out = dot;
    int linear = fabs(dot) > 0.9995;
    double ca = 1 - t, cb = t;
    if (!linear) {
        double theta = acos(dot), s = sin(theta);
        ca = sin((1 - t) * theta) / s;
        cb = sin(t * theta) / s;
    }
    const float fa = (float)ca, fb = (float)cb;
    for (size_t j = 0; j < n; j++) out[j] = fa * a[j] + fb * b[j];
    return linear;
}

/* ---- TIES trim ------------------------------------------------------------------------------ */

static inline void swap_f(float *x, size_t i, size_t j) {
    float t = x[i];
    x[i] = x[j];
    x[j] = t;
}

/* The value that would be at position `want` if x[n] were sorted ascending (x is reordered):
 * quickselect with a median-of-three pivot and a three-way partition, O(n) on average and
 * fast on runs of equal values (zeros in a task vector). */
static float select_nth(float *x, size_t n, size_t want) {
    size_t lo = 0, hi = n; /* the answer is in x[lo, hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        float p0 = x[lo], p1 = x[mid], p2 = x[hi - 1];
        float pivot = p0 < p1 ? (p1 < p2 ? p1 : (p0 < p2 ? p2 : p0)) : (p0 < p2 ? p0 : (p1 < p2 ? p2 : p1));
        /* Dijkstra's three-way partition: [lo, lt) < pivot, [lt, i) == pivot, (gt, hi) > pivot */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (x[i] < pivot) swap_f(x, lt++, i++);
            else if (x[i] > pivot) swap_f(x, i, --gt);
            else i++;
        }
        if (want < lt) hi = lt;
        else if (want >= gt) lo = gt;
        else return pivot;
    }
    return x[lo];
}

merge_cut_t merge_trim_cut(const float *delta, size_t n, double density, float *scratch) {
    merge_cut_t c = {.all = true, .k = n};
    if (density >= 1 || n == 0) return c;
    size_t k = (size_t)floor(density * (double)n); /* Python's int(density * numel) */
    if (k < 1) k = 1;
    for (size_t j = 0; j < n; j++) scratch[j] = fabsf(delta[j]);
    /* the k-th largest magnitude: position n - k in ascending order */
    c = (merge_cut_t){.all = false, .cut = select_nth(scratch, n, n - k), .k = k};
    size_t above = 0;
    for (size_t j = 0; j < n; j++) above += fabsf(delta[j]) > c.cut;
    c.at_cut = k - above; /* entries equal to the cut that are kept, first ones first */
    return c;
}

void merge_trim_apply(float *delta, size_t n, merge_cut_t c) {
    if (c.all) return;
    for (size_t j = 0; j < n; j++) {
        float m = fabsf(delta[j]);
        if (m > c.cut) continue;
        if (m == c.cut && c.at_cut > 0) {
            c.at_cut--;
            continue;
        }
        delta[j] = 0;
    }
}

size_t merge_trim(float *delta, size_t n, double density, float *scratch) {
    merge_cut_t c = merge_trim_cut(delta, n, density, scratch);
    merge_trim_apply(delta, n, c);
    return c.k;
}

/* ---- DARE ------------------------------------------------------------------------------------ */

#define DARE_TAG 0x44415245u /* "DARE" */

philox_key_t merge_dare_key(uint64_t seed, const char *tensor_name) {
    return rng_key(seed, rng_hash_str(tensor_name));
}

static inline float u01(uint32_t x) { return ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f); }

float merge_dare_uniform(philox_key_t key, uint64_t j, uint32_t sub) {
    uint64_t c = j >> 2;
    philox_ctr_t ctr = {{(uint32_t)c, (uint32_t)(c >> 32), sub, DARE_TAG}};
    return u01(philox4x32_10(ctr, key).v[j & 3]);
}

double merge_dare(float *delta, size_t n, double density, philox_key_t key, uint32_t sub,
                  merge_rescale_t rescale) {
    if (density >= 1) return 1;
    double before = 0, after = 0;
    for (size_t c = 0; c < n; c += 4) { /* one Philox block gives four entries' draws */
        uint64_t q = c >> 2;
        philox_ctr_t ctr = {{(uint32_t)q, (uint32_t)(q >> 32), sub, DARE_TAG}};
        philox_ctr_t r = philox4x32_10(ctr, key);
        for (size_t j = c; j < c + 4 && j < n; j++) {
            double m = fabs((double)delta[j]);
            before += m;
            if ((double)u01(r.v[j & 3]) < density) after += m;
            else delta[j] = 0;
        }
    }
    double scale = 1;
    if (rescale == MERGE_RESCALE_INV_DENSITY) scale = 1 / density;
    /* mergekit's rescaled_masked_tensor: norms under eps = 1e-7 are left alone */
    if (rescale == MERGE_RESCALE_L1 && before >= 1e-7 && after >= 1e-7) scale = before / after;
    if (scale != 1) merge_scale(delta, (float)scale, n);
    return scale;
}

/* ---- sign election and the end -------------------------------------------------------------- */

void merge_elect_add(float *mixed, float *div, const float *s, float w, const float *sum,
                     size_t n) {
    for (size_t j = 0; j < n; j++) {
        float e = w * s[j];
        bool agree = sum[j] >= 0 ? e > 0 : e < 0;
        if (agree) {
            mixed[j] += e;
            div[j] += w;
        }
    }
}

void merge_finish(float *out, const float *base, const float *mixed, const float *div,
                  double div_scalar, bool normalize, double lambda, size_t n) {
    const float lam = (float)lambda;
    if (!normalize || !div) {
        float d = (float)div_scalar;
        if (!normalize || fabs(div_scalar) < 1e-8) d = 1;
        for (size_t j = 0; j < n; j++) {
            float m = mixed[j] / d;
            if (lambda != 1) m *= lam;
            out[j] = base[j] + m;
        }
        return;
    }
    for (size_t j = 0; j < n; j++) {
        float m = mixed[j] / (div[j] == 0 ? 1.0f : div[j]);
        if (lambda != 1) m *= lam;
        out[j] = base[j] + m;
    }
}
