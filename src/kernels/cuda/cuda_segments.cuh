/* cuda_segments.cuh — deterministic "dst[key[r], :] += w[r] * src[r, :] for r = 0 .. M-1 in
 * order" on the GPU, without atomics (whose order, hence whose float sum, changes from run to
 * run): the embedding backward (dwte rows of the tokens) and the MoE combine (token rows of the
 * dispatch rows) both have this shape.
 *
 * How: the positions r are sorted by key with CUB's radix sort, which is STABLE (positions
 * with equal keys keep ascending order); equal keys are then contiguous segments. For each
 * column, the thread that finds the start of a segment walks it and adds its source rows into
 * the destination row in ascending r: one float addition per source row, in the CPU's order
 * and rounding (__fmul_rn / __fadd_rn are never contracted into an FMA). Keys outside
 * [0, n_keys) (tokens of another vocab shard) are sorted past the end and skipped. All on the
 * default stream, no host work. The sort needs 4 M ints and CUB's temporary storage: one
 * static device buffer per including file, grown on demand (cuda_grow_buffer).
 * Owns: static functions only. Uses: cuda_common.cuh, CUB. Used by: embed.cu, moe.cu. */
#ifndef LLMT_CUDA_SEGMENTS_CUH
#define LLMT_CUDA_SEGMENTS_CUH
#include <cub/device/device_radix_sort.cuh>
#include "kernels/cuda/cuda_common.cuh"

/* the sorted view: key[M] ascending (n_keys = not owned), pos[M] the source rows */
struct segments {
    const unsigned *key;
    const int *pos;
    int M;
    unsigned n_keys;
};

/* keys_in[r] = rows[r] - offset if in [0, n_keys) else n_keys; pos_in[r] = r */
static __global__ void segments_keys_kernel(unsigned *keys_in, int *pos_in, const int *rows, int M,
                                            int offset, int n_keys) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const int k = rows[r] - offset;
    keys_in[r] = (k >= 0 && k < n_keys) ? (unsigned)k : (unsigned)n_keys;
    pos_in[r] = r;
}

/* bytes rounded up to 256 (CUB wants its temporary storage aligned) */
static inline size_t segments_align(size_t bytes) {
    return (bytes + 255) & ~(size_t)255;
}

/* Sorts the positions of rows[M] by key rows[r] - offset (n_keys >= 1 keys), into *buf. */
static segments segments_sort(void **buf, size_t *cap, const int *rows, int M, int offset,
                              int n_keys) {
    int end_bit = 1; /* bits holding n_keys itself (the "not owned" key) */
    while (end_bit < 32 && ((unsigned)n_keys >> end_bit) != 0u) end_bit++;
    const size_t arr = segments_align((size_t)M * sizeof(int));
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const unsigned *)NULL,
                                               (unsigned *)NULL, (const int *)NULL, (int *)NULL, M,
                                               0, end_bit, (cudaStream_t)0));
    char *base = (char *)cuda_grow_buffer(buf, cap, 4 * arr + segments_align(temp_bytes));
    unsigned *keys_in = (unsigned *)base, *keys_out = (unsigned *)(base + arr);
    int *pos_in = (int *)(base + 2 * arr), *pos_out = (int *)(base + 3 * arr);
    segments_keys_kernel<<<(M + 255) / 256, 256>>>(keys_in, pos_in, rows, M, offset, n_keys);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + 4 * arr, temp_bytes, keys_in, keys_out,
                                               pos_in, pos_out, M, 0, end_bit, (cudaStream_t)0));
    segments s = {keys_out, pos_out, M, (unsigned)n_keys};
    return s;
}

/* The term of source row r at column c: w[r] * src[r, c] (w NULL: src[r, c]), never fused. */
__device__ __forceinline__ float segments_term(const float *src, const float *w, int r, int c,
                                               int C) {
    const float x = src[(size_t)r * C + c];
    return w ? __fmul_rn(w[r], x) : x;
}

#define SEGMENTS_UNROLL 8    /* source rows whose loads are in flight at once */
#define SEGMENTS_PER_BLOCK 8 /* sorted positions a block looks at (most are not starts) */

/* dst[k, c] += the terms of the segment s.pos[j .. end), in order. The loads of SEGMENTS_UNROLL
 * rows are issued together, the additions stay in order: a frequent token's long segment costs
 * ~1/8 of its serial latency. */
__device__ __forceinline__ void segments_add_one(float *dst, const float *src, const float *w,
                                                 const segments &s, int j, unsigned k, int c,
                                                 int C) {
    int end = j + 1;
    while (end < s.M && s.key[end] == k) end++;
    float *d = dst + (size_t)k * C;
    float acc = d[c];
    int jj = j;
    for (; jj + SEGMENTS_UNROLL <= end; jj += SEGMENTS_UNROLL) {
        float t[SEGMENTS_UNROLL];
#pragma unroll
        for (int u = 0; u < SEGMENTS_UNROLL; u++) t[u] = segments_term(src, w, s.pos[jj + u], c, C);
#pragma unroll
        for (int u = 0; u < SEGMENTS_UNROLL; u++) acc = __fadd_rn(acc, t[u]);
    }
    for (; jj < end; jj++) acc = __fadd_rn(acc, segments_term(src, w, s.pos[jj], c, C));
    d[c] = acc;
}

/* dst[key, :] += (w ? w[r] : 1) * src[r, :] over each segment, ascending r. Grid (ceil(M /
 * SEGMENTS_PER_BLOCK), column blocks), one column per thread: a block adds the segments that
 * START among its sorted positions (a segment's other positions are skipped), so each segment
 * is added exactly once, by one thread per column. */
static __global__ void segments_add_kernel(float *dst, const float *src, const float *w, segments s,
                                           int C) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int j0 = blockIdx.x * SEGMENTS_PER_BLOCK, j1 = min(s.M, j0 + SEGMENTS_PER_BLOCK);
    for (int j = j0; j < j1; j++) {
        const unsigned k = s.key[j];
        if (k >= s.n_keys) return; /* sorted: every later key is "not owned" too */
        if (j == 0 || s.key[j - 1] != k) segments_add_one(dst, src, w, s, j, k, c, C);
    }
}

/* The whole operation: dst[rows[r] - offset, :] += w[r] * src[r, :] for owned rows, r in order. */
static void segments_scatter_add(void **buf, size_t *cap, float *dst, const float *src,
                                 const float *w, const int *rows, int M, int C, int offset,
                                 int n_keys) {
    if (M <= 0 || C <= 0 || n_keys <= 0) return;
    const segments s = segments_sort(buf, cap, rows, M, offset, n_keys);
    const dim3 grid((unsigned)((M + SEGMENTS_PER_BLOCK - 1) / SEGMENTS_PER_BLOCK),
                    (unsigned)((C + CUDA_ROW_THREADS - 1) / CUDA_ROW_THREADS));
    segments_add_kernel<<<grid, CUDA_ROW_THREADS>>>(dst, src, w, s, C);
    CUDA_CHECK_LAUNCH();
}
#endif
