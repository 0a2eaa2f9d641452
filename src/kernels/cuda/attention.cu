/* attention.cu — causal multi-head and grouped-query self-attention on the GPU without the T x T
 * matrix (FlashAttention-2 style tiling, fp32 in shared memory), forward and backward, with and
 * without dropout on the probabilities. Same formulas as kernels/cpu/attention.c:
 *   forward:  S = scale q k^T (causal), online softmax per query row (running max m, sum l),
 *             out = (P [* mask]) v / l, lse = m + log(l) of the UNDROPPED P;
 *   backward: P = exp(S - lse) recomputed per tile, D = rowsum(dout * out),
 *             dv = (f P)^T dout, dS = scale P (f (dout v^T) - D), dq = dS k, dk = dS^T q
 *             (f = the mask's factors, 1 without dropout).
 *
 * Tiles: ATT_BQ = ATT_BK = 64 query rows / keys, 256 threads (8 warps) a block, each warp owns 8
 * rows of the tile; head size hs <= 128 (lane l handles columns l, l + 32, ... < hs: any hs, not
 * only multiples of 32; rows past T are zero-filled and never written). Shared-memory rows are
 * padded to an odd stride so a warp reading 32 different rows at the same column hits 32 banks.
 *  - forward: one block per (query tile, head, batch row), walking the key tiles up to the
 *    diagonal; scores are computed lanes-over-keys, P goes through shared memory for P v.
 *  - backward, deterministic (no atomics), FlashAttention-2's split into two kernels as the
 *    CPU backend's two-pass form: dk, dv by one block per (key tile, k/v head, batch row) that
 *    loops over the group's query heads in ascending order and, for each, over the query tiles
 *    from the diagonal down, accumulating in registers and writing once (OVERWRITE); dq by one
 *    block per (query tile, head, batch row) over its key tiles in ascending order. The scores
 *    and dout v^T of a tile are computed in both (7 products a tile instead of FA2's 5 with an
 *    atomic dq): the price of bit-reproducible gradients.
 *  - D = rowsum(dout * out) is a small kernel into scratch[B, NH, T] (the only scratch).
 * Dropout factors come from philox.cuh's dropout_factor_dev at (row0 + b T + t, key j,
 * word3 + h), exactly the CPU's (kernels/cpu/dropout.c); no mask is stored.
 * Work is on the legacy default stream 0. Uses: cuda_common.cuh (its warp reductions, and
 * cuda_check.h), philox.cuh. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_common.cuh" /* warp_max, warp_sum */
#include "kernels/cuda/philox.cuh"
#include <math.h>

#define ATT_BQ 64      /* query rows of a tile */
#define ATT_BK 64      /* keys of a tile (= ATT_BQ: the diagonal tile of query tile i is key tile i) */
#define ATT_WARPS 8
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_RW (ATT_BQ / ATT_WARPS) /* rows of a tile per warp */
#define ATT_HS_MAX 128
static_assert(ATT_BQ == ATT_BK, "the causal tile walk assumes square tiles");
static_assert(ATT_BK == 64, "a lane holds keys lane and lane + 32 of a tile");

/* Where the tensors of one call live (pointers at batch 0, head 0; row strides in floats). */
struct att_args {
    const float *q, *k, *v, *out, *dout, *lse, *D;
    float *o_out, *lse_out, *D_out, *dq, *dk, *dv;
    int B, T, NH, NKV, hs, ldq, ldkv;
    float scale;
    bool drop;
    dropout_mask_t mask;
};

/* Odd row stride >= hs of a shared-memory tile (conflict-free column reads across rows). */
__host__ __device__ static inline int tile_stride(int hs) { return hs | 1; }

/* dst[r][d] (row stride sld) = rows [r0, r0 + 64) of src (row stride ld), columns [0, hs);
 * rows at or past T are zero. All threads of the block take part. */
__device__ static void load_tile(float *dst, int sld, const float *src, int ld, int r0, int T,
                                 int hs) {
    for (int idx = threadIdx.x; idx < ATT_BQ * hs; idx += blockDim.x) {
        const int r = idx / hs, d = idx - r * hs, t = r0 + r;
        dst[r * sld + d] = t < T ? src[(size_t)t * ld + d] : 0.0f;
    }
}

/* s[r][c] = A[r] . Bm[lane + 32 c] over hs columns: A holds this warp's ATT_RW rows (read as
 * broadcasts), Bm a tile of 64 rows (each lane reads its own two rows); both of stride sld. */
__device__ static void tile_dots(float s[ATT_RW][2], const float *A, const float *Bm, int sld,
                                 int hs, int lane) {
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) s[r][0] = s[r][1] = 0.0f;
    const float *b0 = Bm + lane * sld, *b1 = Bm + (lane + 32) * sld;
#pragma unroll 4
    for (int d = 0; d < hs; d++) {
        const float x0 = b0[d], x1 = b1[d];
#pragma unroll
        for (int r = 0; r < ATT_RW; r++) {
            const float a = A[r * sld + d];
            s[r][0] = fmaf(a, x0, s[r][0]);
            s[r][1] = fmaf(a, x1, s[r][1]);
        }
    }
}

/* acc[r][c] += W[r][j] * X[j][lane + 32 c] over the keys j < jend of a tile, in ascending j:
 * W this warp's ATT_RW rows of a [.][ATT_BK] tile (P or dS), X a tile of 64 rows of stride sld
 * (V or K; columns at or past hs read as 0). The forward's P v and the backward's dS k. */
template <int DC>
__device__ static void tile_accumulate(float acc[ATT_RW][DC], const float *W, const float *X,
                                       int sld, int hs, int jend, int lane) {
    for (int j = 0; j < jend; j++) {
        float xj[DC];
#pragma unroll
        for (int c = 0; c < DC; c++) xj[c] = lane + 32 * c < hs ? X[j * sld + lane + 32 * c] : 0.0f;
#pragma unroll
        for (int r = 0; r < ATT_RW; r++) {
            const float w = W[r * ATT_BK + j];
#pragma unroll
            for (int c = 0; c < DC; c++) acc[r][c] = fmaf(w, xj[c], acc[r][c]);
        }
    }
}

/* The dropout factor of query t (local to batch row b), key j, local head h; 1 without dropout. */
__device__ static inline float drop_factor(const att_args &a, int b, int t, int j, int h) {
    if (!a.drop) return 1.0f;
    return dropout_factor_dev(a.mask.key[0], a.mask.key[1], a.mask.threshold, a.mask.scale,
                              a.mask.row0 + (uint64_t)b * a.T + (uint64_t)t, (uint64_t)j,
                              a.mask.word3 + (uint32_t)h);
}

__host__ __device__ static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* ---------------------------------------------------------------- forward */

/* Dynamic shared memory of the forward: Q, K, V tiles [64][sld] and P [64][64]. */
static size_t forward_smem(int hs) {
    return ((size_t)3 * ATT_BQ * tile_stride(hs) + (size_t)ATT_BQ * ATT_BK) * sizeof(float);
}

/* Rows of this warp, one key tile: online softmax of the scores s (scaled in place), the
 * statistics m, l and the partial output o updated, P [* mask] written to this warp's rows of Ps. */
template <int DC>
__device__ static void forward_softmax_tile(const att_args &a, float s[ATT_RW][2], float *m,
                                            float *l, float o[ATT_RW][DC], float *Ps, int b,
                                            int h, int t0, int k0, int lane) {
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        const int t = t0 + r;
        float *prow = Ps + r * ATT_BK;
        if (t >= a.T) { /* a padding row (warp-uniform): nothing to add */
            prow[lane] = prow[lane + 32] = 0.0f;
            continue;
        }
        float x[2];
#pragma unroll
        for (int c = 0; c < 2; c++) x[c] = k0 + lane + 32 * c <= t ? s[r][c] * a.scale : -INFINITY;
        /* key k0 <= t is visible (k0 <= the tile's first query): mx is finite */
        const float m_new = fmaxf(m[r], warp_max(fmaxf(x[0], x[1])));
        float p[2];
#pragma unroll
        for (int c = 0; c < 2; c++) p[c] = x[c] == -INFINITY ? 0.0f : expf(x[c] - m_new);
        const float corr = expf(m[r] - m_new); /* 0 on the first tile: m = -inf, l = o = 0 */
        l[r] = l[r] * corr + warp_sum(p[0] + p[1]);
        m[r] = m_new;
#pragma unroll
        for (int c = 0; c < DC; c++) o[r][c] *= corr;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int j = k0 + lane + 32 * c;
            prow[lane + 32 * c] = p[c] != 0.0f ? p[c] * drop_factor(a, b, t, j, h) : 0.0f;
        }
    }
}

/* out rows of one (query tile, head, batch row); DC = ceil(hs / 32) output columns per lane. */
template <int DC>
__global__ void __launch_bounds__(ATT_THREADS) attention_forward_kernel(att_args a) {
    extern __shared__ float smem[];
    const int hs = a.hs, sld = tile_stride(hs), T = a.T;
    float *Qs = smem, *Ks = Qs + ATT_BQ * sld, *Vs = Ks + ATT_BK * sld, *Ps = Vs + ATT_BK * sld;
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z; /* costly first */
    const int kvh = h / (a.NH / a.NKV), q0 = qt * ATT_BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t0 = q0 + warp * ATT_RW;
    const float *k = a.k + (size_t)b * T * a.ldkv + (size_t)kvh * hs;
    const float *v = a.v + (size_t)b * T * a.ldkv + (size_t)kvh * hs;
    load_tile(Qs, sld, a.q + (size_t)b * T * a.ldq + (size_t)h * hs, a.ldq, q0, T, hs);
    float o[ATT_RW][DC], m[ATT_RW], l[ATT_RW];
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < DC; c++) o[r][c] = 0.0f;
    }
    float *Pw = Ps + warp * ATT_RW * ATT_BK;
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * ATT_BK;
        __syncthreads(); /* the previous tile's K, V are no longer read */
        load_tile(Ks, sld, k, a.ldkv, k0, T, hs);
        load_tile(Vs, sld, v, a.ldkv, k0, T, hs);
        __syncthreads();
        float s[ATT_RW][2];
        tile_dots(s, Qs + warp * ATT_RW * sld, Ks, sld, hs, lane);
        forward_softmax_tile<DC>(a, s, m, l, o, Pw, b, h, t0, k0, lane);
        __syncwarp();
        /* keys past this warp's last row (or T) have P = 0 */
        tile_accumulate<DC>(o, Pw, Vs, sld, hs, min(ATT_BK, min(T, t0 + ATT_RW) - k0), lane);
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        const int t = t0 + r;
        if (t >= T) continue;
        const float inv = 1.0f / l[r];
        float *orow = a.o_out + ((size_t)b * T + t) * a.NH * hs + (size_t)h * hs;
#pragma unroll
        for (int c = 0; c < DC; c++)
            if (lane + 32 * c < hs) orow[lane + 32 * c] = o[r][c] * inv;
        if (lane == 0) a.lse_out[((size_t)b * a.NH + h) * T + t] = m[r] + logf(l[r]);
    }
}

/* ---------------------------------------------------------------- backward */

/* D[b, h, t] = dout[b, t, h] . out[b, t, h] (hs wide): one warp per (b, t, h). */
__global__ void attention_row_dots_kernel(att_args a) {
    const size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (size_t)a.B * a.T * a.NH) return; /* whole warps leave together */
    const int h = (int)(row % a.NH);
    const size_t bt = row / a.NH;
    const int t = (int)(bt % a.T), b = (int)(bt / a.T);
    const float *g = a.dout + row * a.hs, *o = a.out + row * a.hs; /* [B, T, NH, hs] */
    float s = 0.0f;
    for (int d = lane; d < a.hs; d += 32) s = fmaf(g[d], o[d], s);
    s = warp_sum(s);
    if (lane == 0) a.D_out[((size_t)b * a.NH + h) * a.T + t] = s;
}

/* Dynamic shared memory of the dk/dv kernel: K, V, Q, dout tiles [64][sld], P^T and dS^T
 * [64][64], lse and D of the query tile [64] each. */
static size_t dkdv_smem(int hs) {
    return ((size_t)4 * ATT_BQ * tile_stride(hs) + (size_t)2 * ATT_BQ * ATT_BK + 2 * ATT_BQ) *
           sizeof(float);
}

/* One (query tile, this warp's keys): P^T [* mask] and dS^T of the warp's key rows into PT, dST
 * (row stride ATT_BQ), from sT = k . q and dpT = v . dout (lanes over queries). */
__device__ static void dkdv_tile_probs(const att_args &a, const float sT[ATT_RW][2],
                                       const float dpT[ATT_RW][2], const float *lse_s,
                                       const float *D_s, float *PT, float *dST, int b, int h,
                                       int j0, int q0, int lane) {
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        const int j = j0 + r;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int i = lane + 32 * c, t = q0 + i;
            float p = 0.0f, ds = 0.0f;
            if (t < a.T && j <= t) {
                const float P = expf(sT[r][c] * a.scale - lse_s[i]);
                const float f = drop_factor(a, b, t, j, h);
                ds = a.scale * P * (f * dpT[r][c] - D_s[i]);
                p = f * P;
            }
            PT[r * ATT_BQ + i] = p;
            dST[r * ATT_BQ + i] = ds;
        }
    }
}

/* dk, dv of one (key tile, k/v head, batch row), summed over the group's query heads. */
template <int DC>
__global__ void __launch_bounds__(ATT_THREADS) attention_dkdv_kernel(att_args a) {
    extern __shared__ float smem[];
    const int hs = a.hs, sld = tile_stride(hs), T = a.T, group = a.NH / a.NKV;
    float *Ks = smem, *Vs = Ks + ATT_BK * sld, *Qs = Vs + ATT_BK * sld, *dOs = Qs + ATT_BQ * sld;
    float *PT = dOs + ATT_BQ * sld, *dST = PT + ATT_BK * ATT_BQ;
    float *lse_s = dST + ATT_BK * ATT_BQ, *D_s = lse_s + ATT_BQ;
    const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, k0 = kt * ATT_BK; /* costly first */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j0 = k0 + warp * ATT_RW;
    const size_t kv_off = (size_t)b * T * a.ldkv + (size_t)kvh * hs;
    load_tile(Ks, sld, a.k + kv_off, a.ldkv, k0, T, hs);
    load_tile(Vs, sld, a.v + kv_off, a.ldkv, k0, T, hs);
    float dk[ATT_RW][DC], dv[ATT_RW][DC];
#pragma unroll
    for (int r = 0; r < ATT_RW; r++)
#pragma unroll
        for (int c = 0; c < DC; c++) dk[r][c] = dv[r][c] = 0.0f;
    float *PTw = PT + warp * ATT_RW * ATT_BQ, *dSTw = dST + warp * ATT_RW * ATT_BQ;
    const int nq = ceil_div(T, ATT_BQ);
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        const float *q = a.q + (size_t)b * T * a.ldq + (size_t)h * hs;
        const float *dout = a.dout + (size_t)b * T * a.NH * hs + (size_t)h * hs;
        const float *lse = a.lse + ((size_t)b * a.NH + h) * T, *D = a.D + ((size_t)b * a.NH + h) * T;
        for (int qt = kt; qt < nq; qt++) { /* query tiles before the diagonal see no key here */
            const int q0 = qt * ATT_BQ;
            __syncthreads(); /* the previous tile's Q, dout, lse, D are no longer read */
            load_tile(Qs, sld, q, a.ldq, q0, T, hs);
            load_tile(dOs, sld, dout, a.NH * hs, q0, T, hs);
            for (int i = threadIdx.x; i < ATT_BQ; i += blockDim.x) {
                lse_s[i] = q0 + i < T ? lse[q0 + i] : 0.0f;
                D_s[i] = q0 + i < T ? D[q0 + i] : 0.0f;
            }
            __syncthreads();
            float sT[ATT_RW][2], dpT[ATT_RW][2];
            tile_dots(sT, Ks + warp * ATT_RW * sld, Qs, sld, hs, lane);
            tile_dots(dpT, Vs + warp * ATT_RW * sld, dOs, sld, hs, lane);
            dkdv_tile_probs(a, sT, dpT, lse_s, D_s, PTw, dSTw, b, h, j0, q0, lane);
            __syncwarp();
            const int iend = min(ATT_BQ, T - q0);
            for (int i = 0; i < iend; i++) {
                float gi[DC], qi[DC];
#pragma unroll
                for (int c = 0; c < DC; c++) {
                    const bool in = lane + 32 * c < hs;
                    gi[c] = in ? dOs[i * sld + lane + 32 * c] : 0.0f;
                    qi[c] = in ? Qs[i * sld + lane + 32 * c] : 0.0f;
                }
#pragma unroll
                for (int r = 0; r < ATT_RW; r++) {
                    const float p = PTw[r * ATT_BQ + i], ds = dSTw[r * ATT_BQ + i];
#pragma unroll
                    for (int c = 0; c < DC; c++) {
                        dv[r][c] = fmaf(p, gi[c], dv[r][c]);
                        dk[r][c] = fmaf(ds, qi[c], dk[r][c]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        const int j = j0 + r;
        if (j >= T) continue;
        float *dkrow = a.dk + kv_off + (size_t)j * a.ldkv, *dvrow = a.dv + kv_off + (size_t)j * a.ldkv;
#pragma unroll
        for (int c = 0; c < DC; c++)
            if (lane + 32 * c < hs) {
                dkrow[lane + 32 * c] = dk[r][c];
                dvrow[lane + 32 * c] = dv[r][c];
            }
    }
}

/* Dynamic shared memory of the dq kernel: Q, dout, K, V tiles [64][sld] and dS [64][64]. */
static size_t dq_smem(int hs) {
    return ((size_t)4 * ATT_BQ * tile_stride(hs) + (size_t)ATT_BQ * ATT_BK) * sizeof(float);
}

/* One (this warp's query rows, key tile): dS [* mask] into dSw (row stride ATT_BK), from
 * s = q . k and dp = dout . v (lanes over keys). */
__device__ static void dq_tile_grads(const att_args &a, const float s[ATT_RW][2],
                                     const float dp[ATT_RW][2], const float *lse_r,
                                     const float *D_r, float *dSw, int b, int h, int t0, int k0,
                                     int lane) {
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        const int t = t0 + r;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int j = k0 + lane + 32 * c;
            float ds = 0.0f;
            if (t < a.T && j <= t) {
                const float P = expf(s[r][c] * a.scale - lse_r[r]);
                ds = a.scale * P * (drop_factor(a, b, t, j, h) * dp[r][c] - D_r[r]);
            }
            dSw[r * ATT_BK + lane + 32 * c] = ds;
        }
    }
}

/* dq rows of one (query tile, head, batch row), OVERWRITTEN. */
template <int DC>
__global__ void __launch_bounds__(ATT_THREADS) attention_dq_kernel(att_args a) {
    extern __shared__ float smem[];
    const int hs = a.hs, sld = tile_stride(hs), T = a.T;
    float *Qs = smem, *dOs = Qs + ATT_BQ * sld, *Ks = dOs + ATT_BQ * sld, *Vs = Ks + ATT_BK * sld;
    float *dS = Vs + ATT_BK * sld;
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z; /* costly first */
    const int kvh = h / (a.NH / a.NKV), q0 = qt * ATT_BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t0 = q0 + warp * ATT_RW;
    const size_t kv_off = (size_t)b * T * a.ldkv + (size_t)kvh * hs;
    const size_t q_off = (size_t)b * T * a.ldq + (size_t)h * hs;
    load_tile(Qs, sld, a.q + q_off, a.ldq, q0, T, hs);
    load_tile(dOs, sld, a.dout + (size_t)b * T * a.NH * hs + (size_t)h * hs, a.NH * hs, q0, T, hs);
    float lse_r[ATT_RW], D_r[ATT_RW], dq[ATT_RW][DC];
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        const size_t at = ((size_t)b * a.NH + h) * T + t0 + r;
        lse_r[r] = t0 + r < T ? a.lse[at] : 0.0f;
        D_r[r] = t0 + r < T ? a.D[at] : 0.0f;
#pragma unroll
        for (int c = 0; c < DC; c++) dq[r][c] = 0.0f;
    }
    float *dSw = dS + warp * ATT_RW * ATT_BK;
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * ATT_BK;
        __syncthreads(); /* the previous tile's K, V are no longer read */
        load_tile(Ks, sld, a.k + kv_off, a.ldkv, k0, T, hs);
        load_tile(Vs, sld, a.v + kv_off, a.ldkv, k0, T, hs);
        __syncthreads();
        float s[ATT_RW][2], dp[ATT_RW][2];
        tile_dots(s, Qs + warp * ATT_RW * sld, Ks, sld, hs, lane);
        tile_dots(dp, dOs + warp * ATT_RW * sld, Vs, sld, hs, lane);
        dq_tile_grads(a, s, dp, lse_r, D_r, dSw, b, h, t0, k0, lane);
        __syncwarp();
        tile_accumulate<DC>(dq, dSw, Ks, sld, hs, min(ATT_BK, min(T, t0 + ATT_RW) - k0), lane);
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < ATT_RW; r++) {
        const int t = t0 + r;
        if (t >= T) continue;
        float *row = a.dq + q_off + (size_t)t * a.ldq;
#pragma unroll
        for (int c = 0; c < DC; c++)
            if (lane + 32 * c < hs) row[lane + 32 * c] = dq[r][c];
    }
}

/* ---------------------------------------------------------------- launches */

/* A kernel's dynamic shared memory limit raised once to what its widest head size needs. */
template <typename K>
static void allow_smem(K kernel, size_t bytes, bool *done) {
    if (*done) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

static void check_shape(const att_args &a) {
    if (a.hs < 1 || a.hs > ATT_HS_MAX)
        fatal_user_here("the CUDA attention kernels take head sizes 1 to %d (this model has %d)",
                        ATT_HS_MAX, a.hs);
    ASSERT(a.NKV >= 1 && a.NH % a.NKV == 0);
}

template <int DC>
static void launch_forward(const att_args &a) {
    static bool ready;
    allow_smem(attention_forward_kernel<DC>, forward_smem(32 * DC), &ready);
    const dim3 grid(ceil_div(a.T, ATT_BQ), a.NH, a.B);
    attention_forward_kernel<DC><<<grid, ATT_THREADS, forward_smem(a.hs)>>>(a);
    CUDA_CHECK_LAUNCH();
}

template <int DC>
static void launch_backward(const att_args &a) {
    static bool ready_kv, ready_q;
    allow_smem(attention_dkdv_kernel<DC>, dkdv_smem(32 * DC), &ready_kv);
    allow_smem(attention_dq_kernel<DC>, dq_smem(32 * DC), &ready_q);
    const int nt = ceil_div(a.T, ATT_BQ);
    attention_dkdv_kernel<DC><<<dim3(nt, a.NKV, a.B), ATT_THREADS, dkdv_smem(a.hs)>>>(a);
    CUDA_CHECK_LAUNCH();
    attention_dq_kernel<DC><<<dim3(nt, a.NH, a.B), ATT_THREADS, dq_smem(a.hs)>>>(a);
    CUDA_CHECK_LAUNCH();
}

static void attention_forward(att_args a) {
    check_shape(a);
    if (a.B == 0 || a.T == 0) return;
    switch ((a.hs + 31) / 32) {
    case 1: launch_forward<1>(a); break;
    case 2: launch_forward<2>(a); break;
    case 3: launch_forward<3>(a); break;
    default: launch_forward<4>(a); break;
    }
}

/* D into scratch, then dk, dv and dq. */
static void attention_backward(att_args a, float *scratch, size_t scratch_floats) {
    check_shape(a);
    if (a.B == 0 || a.T == 0) return;
    const size_t rows = (size_t)a.B * a.T * a.NH;
    ASSERT(scratch_floats >= rows);
    a.D_out = scratch, a.D = scratch;
    const int per_block = ATT_THREADS / 32;
    attention_row_dots_kernel<<<(unsigned)((rows + per_block - 1) / per_block), ATT_THREADS>>>(a);
    CUDA_CHECK_LAUNCH();
    switch ((a.hs + 31) / 32) {
    case 1: launch_backward<1>(a); break;
    case 2: launch_backward<2>(a); break;
    case 3: launch_backward<3>(a); break;
    default: launch_backward<4>(a); break;
    }
}

/* The arguments of a call: q, k, v with their row strides, the mask (NULL: none). */
static att_args make_args(const float *q, const float *k, const float *v, int ldq, int ldkv,
                          int B, int T, int NH, int NKV, int hs, const dropout_mask_t *mask) {
    att_args a = {};
    a.q = q, a.k = k, a.v = v, a.ldq = ldq, a.ldkv = ldkv;
    a.B = B, a.T = T, a.NH = NH, a.NKV = NKV, a.hs = hs;
    a.scale = 1.0f / sqrtf((float)hs);
    a.drop = mask != NULL;
    if (mask) a.mask = *mask;
    return a;
}

/* ---------------------------------------------------------------- the ops */

/* D = rowsum(dout * out) of every (b, h, t): the only scratch (forward needs none). */
size_t cuda_attention_scratch_floats(int B, int T, int NH, int hs) {
    (void)hs;
    const size_t n = (size_t)B * T * NH;
    return n ? n : 1;
}

/* attention_forward: qkv[B, T, 3*NH*hs] ([q heads | k heads | v heads]) -> out[B, T, NH*hs],
 * lse[B, NH, T]; _dropout: dropout on the probabilities (mask NULL: none). */
void cuda_attention_forward_dropout(float *out, float *lse, float *scratch, size_t scratch_floats,
                                    const float *qkv, int B, int T, int NH, int hs,
                                    const dropout_mask_t *mask) {
    (void)scratch, (void)scratch_floats;
    const int C = NH * hs;
    att_args a = make_args(qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, hs, mask);
    a.o_out = out, a.lse_out = lse;
    attention_forward(a);
}

void cuda_attention_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                            const float *qkv, int B, int T, int NH, int hs) {
    cuda_attention_forward_dropout(out, lse, scratch, scratch_floats, qkv, B, T, NH, hs, NULL);
}

/* attention_gqa_forward: q[B, T, NH*hs], k, v[B, T, NKV*hs] -> out, lse as above. */
void cuda_attention_gqa_forward_dropout(float *out, float *lse, float *scratch,
                                        size_t scratch_floats, const float *q, const float *k,
                                        const float *v, int B, int T, int NH, int NKV, int hs,
                                        const dropout_mask_t *mask) {
    (void)scratch, (void)scratch_floats;
    att_args a = make_args(q, k, v, NH * hs, NKV * hs, B, T, NH, NKV, hs, mask);
    a.o_out = out, a.lse_out = lse;
    attention_forward(a);
}

void cuda_attention_gqa_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                                const float *q, const float *k, const float *v, int B, int T,
                                int NH, int NKV, int hs) {
    cuda_attention_gqa_forward_dropout(out, lse, scratch, scratch_floats, q, k, v, B, T, NH, NKV,
                                       hs, NULL);
}

/* attention_backward: dqkv[B, T, 3*NH*hs] OVERWRITTEN from dout[B, T, NH*hs] and the forward's
 * qkv, out, lse. */
void cuda_attention_backward_dropout(float *dqkv, float *scratch, size_t scratch_floats,
                                     const float *dout, const float *qkv, const float *out,
                                     const float *lse, int B, int T, int NH, int hs,
                                     const dropout_mask_t *mask) {
    const int C = NH * hs;
    att_args a = make_args(qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, hs, mask);
    a.out = out, a.dout = dout, a.lse = lse;
    a.dq = dqkv, a.dk = dqkv + C, a.dv = dqkv + 2 * C;
    attention_backward(a, scratch, scratch_floats);
}

void cuda_attention_backward(float *dqkv, float *scratch, size_t scratch_floats,
                             const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int T, int NH, int hs) {
    cuda_attention_backward_dropout(dqkv, scratch, scratch_floats, dout, qkv, out, lse, B, T, NH,
                                    hs, NULL);
}

/* attention_gqa_backward: dq[B, T, NH*hs], dk, dv[B, T, NKV*hs] OVERWRITTEN (dk, dv summed over
 * each k/v head's group of query heads, in ascending head order). */
void cuda_attention_gqa_backward_dropout(float *dq, float *dk, float *dv, float *scratch,
                                         size_t scratch_floats, const float *dout, const float *q,
                                         const float *k, const float *v, const float *out,
                                         const float *lse, int B, int T, int NH, int NKV, int hs,
                                         const dropout_mask_t *mask) {
    att_args a = make_args(q, k, v, NH * hs, NKV * hs, B, T, NH, NKV, hs, mask);
    a.out = out, a.dout = dout, a.lse = lse;
    a.dq = dq, a.dk = dk, a.dv = dv;
    attention_backward(a, scratch, scratch_floats);
}

void cuda_attention_gqa_backward(float *dq, float *dk, float *dv, float *scratch,
                                 size_t scratch_floats, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out,
                                 const float *lse, int B, int T, int NH, int NKV, int hs) {
    cuda_attention_gqa_backward_dropout(dq, dk, dv, scratch, scratch_floats, dout, q, k, v, out,
                                        lse, B, T, NH, NKV, hs, NULL);
}
