/* cuda_segments.cuh — deterministic "dst[key[r], :] += w[r] * src[r, :] for r = 0 .. M-1 in
 * order" on the GPU, without atomics (whose order, hence whose float sum, changes from run to
 * run): the embedding backward (dwte rows of the tokens) and the MoE combine (token rows of the
 * dispatch rows) both have this shape.
 *
 * How: the positions r are sorted by key with CUB's radix sort, which is STABLE (positions with
 * equal keys keep ascending order); equal keys are then contiguous segments. One block per
 * sorted position; the block at the start of a segment walks the segment and adds its source
 * rows into the destination row, in ascending r, one column per thread (each element: one
 * float addition per source row, in the CPU's order, rounded the same way: __fmul_rn/__fadd_rn
 * are never contracted into an FMA). Keys outside [0, n_keys) (tokens of another vocab shard)
 * are sorted past the end and skipped. Everything runs on the default stream, no host work.
 * The sort needs 4 M ints and CUB's temporary storage: one static device buffer per including
 * file, grown on demand (cuda_grow_buffer).
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

/* dst[key, :] += (w ? w[r] : 1) * src[r, :] over each segment, ascending r. Grid M (one block
 * per sorted position: only segment starts work), any block size. */
static __global__ void segments_add_kernel(float *dst, const float *src, const float *w, segments s,
                                           int C) {
    const int j = blockIdx.x;
    const unsigned k = s.key[j];
    if (k >= s.n_keys || (j > 0 && s.key[j - 1] == k)) return; /* not owned, or not a start */
    float *d = dst + (size_t)k * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = d[c];
        for (int jj = j; jj < s.M && s.key[jj] == k; jj++) {
            const int r = s.pos[jj];
            const float x = src[(size_t)r * C + c];
            acc = __fadd_rn(acc, w ? __fmul_rn(w[r], x) : x);
        }
        d[c] = acc;
    }
}

/* The whole operation: dst[rows[r] - offset, :] += w[r] * src[r, :] for owned rows, r in order. */
static void segments_scatter_add(void **buf, size_t *cap, float *dst, const float *src,
                                 const float *w, const int *rows, int M, int C, int offset,
                                 int n_keys) {
    if (M <= 0 || C <= 0 || n_keys <= 0) return;
    const segments s = segments_sort(buf, cap, rows, M, offset, n_keys);
    segments_add_kernel<<<M, CUDA_ROW_THREADS>>>(dst, src, w, s, C);
    CUDA_CHECK_LAUNCH();
}
#endif
