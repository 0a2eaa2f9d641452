/* attention.c — causal multi-head self-attention without the T x T matrix (FlashAttention-2
 * style, on the CPU), forward and backward.
 *
 * Forward: the queries of one (batch, head) go in blocks of ATT_BQ rows; each block walks the
 * key blocks of ATT_BK keys up to the diagonal (blocks wholly above it are skipped). A tile of
 * scores S = scale q k^T is one gemm_f32 into per-thread scratch; an online softmax then keeps
 * each row's running max m and sum l, exponentiates the tile against the new max and rescales
 * the partial output by exp(m_old - m_new), and one more gemm adds P v to it. The output is
 * accumulated in place in `out`; only lse = m + log(l) per row is kept for backward.
 * Backward recomputes each tile's probabilities from q, k and lse (P = exp(S - lse)) and, with
 * D = rowsum(dout * out) per query row:
 *   dv += P^T dout;  dS = scale * P * (dout v^T - D);  dq += dS k;  dk += dS^T q.
 * Every product reads q, k, v (and dout) and writes out, dq, dk, dv straight in qkv / dqkv
 * [B, T, 3*NH*hs] and out [B, T, NH*hs] through their leading dimensions: no copies.
 * Memory: ATT_SCRATCH_PER_THREAD floats per OpenMP thread (two tiles and a few rows, 130 KiB),
 * whatever T is: activations saved for backward are out and lse, linear in T.
 *
 * Threading (results never depend on the thread count; test_ops checks 1, 2 and 3 threads):
 *  - forward: one unit of work per (batch, head, query block). A unit writes only its own rows
 *    of out and lse, and computes them the same way whichever thread runs it, so the dynamic
 *    schedule (block i costs i + 1 tiles: static chunks would leave threads idle) is safe;
 *  - backward: dk and dv of a key block receive from every later query block. With at least as
 *    many (batch, head) pairs as threads, a unit is one pair and runs its tiles in a fixed order
 *    (query block outer, key block inner). With fewer pairs than threads (B = 1 at tp > 1 on a
 *    many-core node) the pairs alone would leave threads idle: two passes instead, one unit per
 *    (pair, key block) for dk and dv, then one per (pair, query block) for dq, at the price of
 *    recomputing each tile's scores and dout v^T (7 products per tile instead of 5). Either way every gradient block is the sum of the same tile
 *    products (same gemm calls on the same values) added in ascending block order, so the bits
 *    are the same.
 * The GEMM runs single-threaded inside the parallel regions (tile_gemms_begin/end).
 * Dropout on the probabilities (attention_*_dropout, FlashAttention's way): the online softmax
 * sums the undropped P (lse is unchanged), then each tile's row is multiplied by its mask
 * factors (0 or 1/(1-p), dropout.c, keyed by global query token, key position and global query
 * head: with grouped-query attention the k/v head a query head shares does not enter the key)
 * before P v. Backward draws the same factors f per recomputed tile: dv += (f P)^T dout and
 * dS = scale * P * (f (dout v^T) - D), where D = rowsum(dout * out) still holds because
 * out = (f P) v. No mask is stored. Ring attention's blocks (context parallelism) draw the
 * same factors at their chunks' global query and key positions, so the masks are these.
 * Uses: gemm.h, dropout.c. */
#include "kernels/cpu/cpu_kernels.h"
#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include <math.h>
#include <omp.h>
#include <string.h>

/* Tile sizes. 128 x 128 (64 KiB a tile: two tiles and the q, k, v, dout rows they multiply
 * stay in L2) was the fastest of 64 x 64, 64 x 128, 128 x 64 and 128 x 128, forward + backward
 * on one core, B = 1, NH = 12, hs = 64, medians, all in one run: 0.85-0.90 of 64 x 64's time at
 * T = 1024, 0.86 at T = 2048, 1.02 at T = 256. Fewer, larger products amortise the GEMM's
 * per-call cost by more than the larger diagonal tiles waste. */
#define ATT_BQ 128
#define ATT_BK 128
#define ATT_TILE (ATT_BQ * ATT_BK)
/* Per thread: tiles p and ds [ATT_BQ, ATT_BK], rows m, l (forward) and D (backward) [ATT_BQ],
 * one row of dropout factors [ATT_BK] at ATT_DROP_ROW (3 ATT_BQ past the tiles: free in forward
 * and backward); a multiple of 16 floats, so every thread's share starts on its own cache line. */
#define ATT_SCRATCH_PER_THREAD (2 * ATT_TILE + 4 * ATT_BQ)
#define ATT_DROP_ROW (2 * ATT_TILE + 3 * ATT_BQ)
_Static_assert(ATT_BK <= ATT_BQ, "the dropout row [ATT_BK] must fit in the last ATT_BQ floats");

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline int n_blocks(int T, int block) { return (T + block - 1) / block; }

/* One (batch, query head): q [T, hs] with row stride ldq, and its k, v [T, hs] with row stride
 * ldkv (inside qkv: both 3*NH*hs; grouped-query attention: separate q and k, v tensors); out,
 * dout [T, hs] with row stride ldo; lse [T]; dq (stride ldq), dk, dv (stride ldkv) in backward.
 * acc_kv: add to dk, dv from the first tile on (a later query head of a k/v head's group). */
typedef struct att_head {
    const float *q, *k, *v, *out, *dout, *lse;
    float *dq, *dk, *dv;
    int T, hs, ldq, ldkv, ldo;
    bool acc_kv;
    float scale;
    const dropout_mask_t *drop; /* NULL: no dropout */
    uint64_t row0;              /* global token of query 0 of this batch row (dropout) */
    uint32_t head;              /* global query head (dropout's counter word 3) */
    bool full;                  /* ring block: every key visible (not causal) */
    bool acc_q;                 /* ring block: add to dq from the first tile on */
    uint64_t key0;              /* ring block: global position of key 0 (dropout's column) */
} att_head_t;

/* Where the tensors of one call live: q, k, v with their row strides, NH query heads, NKV k/v
 * heads (query head h reads k/v head h / (NH / NKV)); the gradients alike in backward; the
 * dropout mask of the probabilities (NULL: none). */
typedef struct att_layout {
    const float *q, *k, *v;
    float *dq, *dk, *dv;
    int ldq, ldkv, NH, NKV;
    const dropout_mask_t *drop;
} att_layout_t;

/* Where head h of batch b starts in a tensor of row stride ld, inside out / dout, and inside
 * lse. */
static size_t row_offset(int b, int h, int T, int ld, int hs) {
    return (size_t)b * T * ld + (size_t)h * hs;
}
static size_t out_offset(int b, int h, int T, int NH, int hs) {
    return (size_t)b * T * NH * hs + (size_t)h * hs;
}
static size_t lse_offset(int b, int h, int T, int NH) { return ((size_t)b * NH + h) * T; }

static att_head_t head_at(const att_layout_t *L, const float *out, const float *lse, int b,
                          int h, int T, int hs) {
    const int NH = L->NH, kvh = h / (NH / L->NKV);
    att_head_t a = {L->q + row_offset(b, h, T, L->ldq, hs), L->k + row_offset(b, kvh, T, L->ldkv, hs),
                    L->v + row_offset(b, kvh, T, L->ldkv, hs), out + out_offset(b, h, T, NH, hs), NULL,
                    lse + lse_offset(b, h, T, NH), NULL, NULL, NULL, T, hs, L->ldq, L->ldkv, NH * hs,
                    false, 1.0f / sqrtf((float)hs), L->drop,
                    L->drop ? L->drop->row0 + (uint64_t)b * T : 0,
                    L->drop ? L->drop->word3 + (uint32_t)h : 0, false, false, 0};
    return a;
}

/* Dropout: p[0, cols) *= the factors of query row t (local), keys [c0, c0 + cols). f: scratch. */
static void drop_tile_row(const att_head_t *h, float *p, int t, int c0, int cols, float *f) {
    cpu_dropout_factors(f, h->drop, h->row0 + (uint64_t)t, h->key0 + (uint64_t)c0, cols, h->head);
#pragma omp simd
    for (int j = 0; j < cols; j++) p[j] *= f[j];
}

/* The fused qkv[B, T, 3*NH*hs] of multi-head attention as a layout. */
static att_layout_t fused_layout(const float *qkv, float *dqkv, int NH, int hs,
                                 const dropout_mask_t *drop) {
    const int C = NH * hs;
    att_layout_t L = {qkv, qkv + C, qkv + 2 * C, dqkv, dqkv ? dqkv + C : NULL,
                      dqkv ? dqkv + 2 * C : NULL, 3 * C, 3 * C, NH, NH, drop};
    return L;
}

/* How many threads the scratch serves (at most one share per thread). */
/* The tile products run on the thread that owns the tile, whatever the team: the library's own
 * threads stay off (gemm_serial_begin), and so does its OpenMP threading, through nthreads-var 1
 * (every region below names its team size, so only the library sees it). A team of one is not an
 * active parallel region to oneDNN (omp_in_parallel() is false), which would otherwise thread the
 * products itself and split K: the sums would then change with the thread count (AVX2 machines). */
typedef struct tile_gemms {
    int lib_threads, omp_threads;
} tile_gemms_t;

static tile_gemms_t tile_gemms_begin(void) {
    tile_gemms_t t = {gemm_serial_begin(), omp_get_max_threads()};
    omp_set_num_threads(1);
    return t;
}

static void tile_gemms_end(tile_gemms_t t) {
    omp_set_num_threads(t.omp_threads);
    gemm_serial_end(t.lib_threads);
}

static int scratch_threads(size_t scratch_floats) {
    const size_t shares = scratch_floats / ATT_SCRATCH_PER_THREAD;
    const int n = omp_get_max_threads();
    ASSERT(shares >= 1);
    return shares < (size_t)n ? (int)shares : n;
}

/* Scratch: enough for every thread that can have work (forward: a unit per query block). */
size_t cpu_attention_scratch_floats(int B, int T, int NH, int hs) {
    (void)hs;
    const size_t units = (size_t)B * NH * n_blocks(T, ATT_BQ > ATT_BK ? ATT_BK : ATT_BQ);
    const size_t threads = (size_t)omp_get_max_threads();
    return (units < threads ? (units ? units : 1) : threads) * ATT_SCRATCH_PER_THREAD;
}

/* ---------------------------------------------------------------- forward */

/* Row a of a tile: scores p[0, cols), of which keys [0, valid) are visible (causal mask).
 * Exponentiates them in place against the row's new running max (masked keys become 0), adds
 * them to the running sum and rescales the partial output o[hs] by exp(old max - new max). The
 * first key block starts the statistics (o is not read: the product after it overwrites o). */
static void online_softmax_row(float *p, int valid, int cols, float *m, float *l, float *o,
                               int hs, bool first) {
    float mx = first ? -INFINITY : *m;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < valid; j++) mx = p[j] > mx ? p[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < valid; j++) {
        p[j] = cpu_expf(p[j] - mx);
        sum += p[j];
    }
    for (int j = valid > 0 ? valid : 0; j < cols; j++) p[j] = 0.0f;
    if (first) { /* key 0 is visible to every query: mx is finite */
        *m = mx, *l = sum;
        return;
    }
    const float corr = cpu_expf(*m - mx);
    *l = *l * corr + sum;
    *m = mx;
    if (corr != 1.0f)
#pragma omp simd
        for (int d = 0; d < hs; d++) o[d] *= corr;
}

/* Query block i of one head: out rows [r0, r0 + rows) = softmax_causal(q k^T scale) v, and
 * lse of those rows. scratch: one thread's share. */
static void forward_query_block(const att_head_t *h, float *out, float *lse, int i,
                                float *scratch) {
    const int r0 = i * ATT_BQ, rows = min_int(ATT_BQ, h->T - r0), hs = h->hs;
    const int ldq = h->ldq, ldkv = h->ldkv;
    float *p = scratch, *m = scratch + 2 * ATT_TILE, *l = m + ATT_BQ;
    float *o = out + (size_t)r0 * h->ldo;
    const int last_kb = (r0 + rows - 1) / ATT_BK; /* the block holding the diagonal */
    for (int j = 0; j <= last_kb; j++) {
        const int c0 = j * ATT_BK, cols = min_int(ATT_BK, h->T - c0);
        gemm_f32(false, true, rows, cols, hs, h->scale, h->q + (size_t)r0 * ldq, ldq,
                 h->k + (size_t)c0 * ldkv, ldkv, 0.0f, p, ATT_BK);
        for (int a = 0; a < rows; a++) {
            online_softmax_row(p + (size_t)a * ATT_BK, min_int(cols, r0 + a - c0 + 1), cols,
                               &m[a], &l[a], o + (size_t)a * h->ldo, hs, j == 0);
            if (h->drop) drop_tile_row(h, p + (size_t)a * ATT_BK, r0 + a, c0, cols,
                                       scratch + ATT_DROP_ROW);
        }
        gemm_f32(false, false, rows, hs, cols, 1.0f, p, ATT_BK, h->v + (size_t)c0 * ldkv, ldkv,
                 j == 0 ? 0.0f : 1.0f, o, h->ldo);
    }
    for (int a = 0; a < rows; a++) {
        float *oa = o + (size_t)a * h->ldo;
        const float inv = 1.0f / l[a];
#pragma omp simd
        for (int d = 0; d < hs; d++) oa[d] *= inv;
        lse[r0 + a] = m[a] + logf(l[a]);
    }
}

/* The forward on any layout: out[B, T, NH*hs], lse[B, NH, T]. */
static void attention_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                              const att_layout_t *L, int B, int T, int hs) {
    const int NH = L->NH, nq = n_blocks(T, ATT_BQ), pairs = B * NH, n_threads = scratch_threads(scratch_floats);
    const tile_gemms_t gemms = tile_gemms_begin();
    /* units in order of falling cost (the last query blocks first) for the dynamic schedule */
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int u = 0; u < pairs * nq; u++) {
        const int i = nq - 1 - u / pairs, b = u % pairs / NH, h = u % NH;
        const att_head_t hd = head_at(L, out, lse, b, h, T, hs);
        forward_query_block(&hd, out + out_offset(b, h, T, NH, hs), lse + lse_offset(b, h, T, NH),
                            i, scratch + (size_t)omp_get_thread_num() * ATT_SCRATCH_PER_THREAD);
    }
    tile_gemms_end(gemms);
}

/* attention_forward: qkv[B, T, 3*NH*hs] ([q heads | k heads | v heads]) ->
 * out[B, T, NH*hs], lse[B, NH, T] (log-sum-exp of each row's scaled scores, fp32);
 * scratch[scratch_floats] (cpu_attention_scratch_floats) is clobbered. _dropout: with dropout
 * on the probabilities (mask NULL: none). */
void cpu_attention_forward_dropout(float *out, float *lse, float *scratch, size_t scratch_floats,
                                   const float *qkv, int B, int T, int NH, int hs,
                                   const dropout_mask_t *mask) {
    const att_layout_t L = fused_layout(qkv, NULL, NH, hs, mask);
    attention_forward(out, lse, scratch, scratch_floats, &L, B, T, hs);
}

void cpu_attention_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                           const float *qkv, int B, int T, int NH, int hs) {
    cpu_attention_forward_dropout(out, lse, scratch, scratch_floats, qkv, B, T, NH, hs, NULL);
}

/* attention_gqa_forward: q[B, T, NH*hs], k, v[B, T, NKV*hs] -> out, lse as above. */
void cpu_attention_gqa_forward_dropout(float *out, float *lse, float *scratch,
                                       size_t scratch_floats, const float *q, const float *k,
                                       const float *v, int B, int T, int NH, int NKV, int hs,
                                       const dropout_mask_t *mask) {
    const att_layout_t L = {q, k, v, NULL, NULL, NULL, NH * hs, NKV * hs, NH, NKV, mask};
    attention_forward(out, lse, scratch, scratch_floats, &L, B, T, hs);
}

void cpu_attention_gqa_forward(float *out, float *lse, float *scratch, size_t scratch_floats,
                               const float *q, const float *k, const float *v, int B, int T,
                               int NH, int NKV, int hs) {
    cpu_attention_gqa_forward_dropout(out, lse, scratch, scratch_floats, q, k, v, B, T, NH, NKV,
                                      hs, NULL);
}

/* ---------------------------------------------------------------- backward */

/* D[a] = dout[r0 + a] . out[r0 + a] for the rows of a query block: sum_j P dP of the row,
 * the softmax backward's correction, without P. */
static void row_dots(float *D, const att_head_t *h, int r0, int rows) {
    for (int a = 0; a < rows; a++) {
        const float *g = h->dout + (size_t)(r0 + a) * h->ldo, *o = h->out + (size_t)(r0 + a) * h->ldo;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < h->hs; d++) s += g[d] * o[d];
        D[a] = s;
    }
}

/* The same with dropout: f = the row's mask factors, p = f P (for dv), ds = scale P (f dP - D). */
static void tile_row_dropout(const att_head_t *h, float *pa, float *da, int t, int c0, int valid,
                             float lse, float Da, float *f) {
    const float scale = h->scale;
    cpu_dropout_factors(f, h->drop, h->row0 + (uint64_t)t, h->key0 + (uint64_t)c0, valid, h->head);
#pragma omp simd
    for (int j = 0; j < valid; j++) {
        const float P = cpu_expf(pa[j] - lse);
        da[j] = scale * P * (f[j] * da[j] - Da);
        pa[j] = f[j] * P;
    }
}

/* One tile, query rows [r0, r0 + rows) x keys [c0, c0 + cols), recomputed:
 *   p  = exp(scale q k^T - lse)                 (0 where the key is after the query)
 *   ds = scale * p * (dout v^T - D)             (the gradient of the scaled-away scores)
 * both [rows, cols] with row stride ATT_BK (dropout: tile_row_dropout). f: scratch row. */
static void tile_probs_and_grads(const att_head_t *h, int r0, int rows, int c0, int cols,
                                 const float *D, float *p, float *ds, float *f) {
    const int hs = h->hs, ldq = h->ldq, ldkv = h->ldkv;
    gemm_f32(false, true, rows, cols, hs, h->scale, h->q + (size_t)r0 * ldq, ldq,
             h->k + (size_t)c0 * ldkv, ldkv, 0.0f, p, ATT_BK);
    gemm_f32(false, true, rows, cols, hs, 1.0f, h->dout + (size_t)r0 * h->ldo, h->ldo,
             h->v + (size_t)c0 * ldkv, ldkv, 0.0f, ds, ATT_BK);
    for (int a = 0; a < rows; a++) {
        float *pa = p + (size_t)a * ATT_BK, *da = ds + (size_t)a * ATT_BK;
        const int valid = h->full ? cols : min_int(cols, r0 + a - c0 + 1);
        const float lse = h->lse[r0 + a], Da = D[a], scale = h->scale;
        if (h->drop && valid > 0) {
            tile_row_dropout(h, pa, da, r0 + a, c0, valid, lse, Da, f);
        } else {
#pragma omp simd
            for (int j = 0; j < valid; j++) {
                pa[j] = cpu_expf(pa[j] - lse);
                da[j] = scale * pa[j] * (da[j] - Da);
            }
        }
        for (int j = valid > 0 ? valid : 0; j < cols; j++) pa[j] = da[j] = 0.0f;
    }
}

/* dv, dk of key block [c0, c0 + cols) += the tile's p^T dout and ds^T q; the first query block
 * that sees the key block overwrites instead (beta 0), unless an earlier query head of the
 * group has written them (acc_kv). */
static void tile_add_dkv(const att_head_t *h, int r0, int rows, int c0, int cols,
                         const float *p, const float *ds) {
    const float beta = r0 / ATT_BQ == c0 / ATT_BQ && !h->acc_kv ? 0.0f : 1.0f;
    gemm_f32(true, false, cols, h->hs, rows, 1.0f, p, ATT_BK, h->dout + (size_t)r0 * h->ldo,
             h->ldo, beta, h->dv + (size_t)c0 * h->ldkv, h->ldkv);
    gemm_f32(true, false, cols, h->hs, rows, 1.0f, ds, ATT_BK, h->q + (size_t)r0 * h->ldq, h->ldq,
             beta, h->dk + (size_t)c0 * h->ldkv, h->ldkv);
}

/* dq of query rows [r0, r0 + rows) += the tile's ds k (key block 0 overwrites). */
static void tile_add_dq(const att_head_t *h, int r0, int rows, int c0, int cols,
                        const float *ds) {
    gemm_f32(false, false, rows, h->hs, cols, 1.0f, ds, ATT_BK, h->k + (size_t)c0 * h->ldkv,
             h->ldkv, c0 == 0 && !h->acc_q ? 0.0f : 1.0f, h->dq + (size_t)r0 * h->ldq, h->ldq);
}

/* One head whole: query blocks outer, their key blocks up to the diagonal inner. */
static void backward_head(const att_head_t *h, float *scratch) {
    float *p = scratch, *ds = scratch + ATT_TILE, *D = scratch + 2 * ATT_TILE;
    for (int r0 = 0; r0 < h->T; r0 += ATT_BQ) {
        const int rows = min_int(ATT_BQ, h->T - r0);
        row_dots(D, h, r0, rows);
        for (int c0 = 0; c0 < (h->full ? h->T : r0 + rows); c0 += ATT_BK) {
            const int cols = min_int(ATT_BK, h->T - c0);
            tile_probs_and_grads(h, r0, rows, c0, cols, D, p, ds, scratch + ATT_DROP_ROW);
            tile_add_dkv(h, r0, rows, c0, cols, p, ds);
            tile_add_dq(h, r0, rows, c0, cols, ds);
        }
    }
}

/* Pass 1 of two: dk, dv of key block [c0, ...) from every query block that sees it, in
 * ascending order (as backward_head adds them). */
static void backward_key_block(const att_head_t *h, int c0, float *scratch) {
    float *p = scratch, *ds = scratch + ATT_TILE, *D = scratch + 2 * ATT_TILE;
    const int cols = min_int(ATT_BK, h->T - c0);
    for (int r0 = c0 / ATT_BQ * ATT_BQ; r0 < h->T; r0 += ATT_BQ) {
        const int rows = min_int(ATT_BQ, h->T - r0);
        row_dots(D, h, r0, rows);
        tile_probs_and_grads(h, r0, rows, c0, cols, D, p, ds, scratch + ATT_DROP_ROW);
        tile_add_dkv(h, r0, rows, c0, cols, p, ds);
    }
}

/* Pass 2 of two: dq of query block [r0, ...) from its key blocks, in ascending order. */
static void backward_query_block(const att_head_t *h, int r0, float *scratch) {
    float *p = scratch, *ds = scratch + ATT_TILE, *D = scratch + 2 * ATT_TILE;
    const int rows = min_int(ATT_BQ, h->T - r0);
    row_dots(D, h, r0, rows);
    for (int c0 = 0; c0 < r0 + rows; c0 += ATT_BK) {
        const int cols = min_int(ATT_BK, h->T - c0);
        tile_probs_and_grads(h, r0, rows, c0, cols, D, p, ds, scratch + ATT_DROP_ROW);
        tile_add_dq(h, r0, rows, c0, cols, ds);
    }
}

/* Query head h of batch b with its gradients; the first head of its k/v group overwrites dk, dv,
 * the others add to them. */
static att_head_t grad_head_at(const att_layout_t *L, const float *dout, const float *out,
                               const float *lse, int b, int h, int T, int hs) {
    const int NH = L->NH, group = NH / L->NKV, kvh = h / group;
    att_head_t a = head_at(L, out, lse, b, h, T, hs);
    a.dout = dout + out_offset(b, h, T, NH, hs);
    a.dq = L->dq + row_offset(b, h, T, L->ldq, hs);
    a.dk = L->dk + row_offset(b, kvh, T, L->ldkv, hs);
    a.dv = L->dv + row_offset(b, kvh, T, L->ldkv, hs);
    a.acc_kv = h % group != 0;
    return a;
}

/* The backward on any layout. A unit of the one-pass form is a (batch, k/v head) pair: the
 * query heads of its group in ascending order, each a whole head (dk, dv receive from all of
 * them); the two-pass form's key-block units walk the group's heads alike, so both forms add
 * the same products in the same order. */
static void attention_backward(const att_layout_t *L, float *scratch, size_t scratch_floats,
                               const float *dout, const float *out, const float *lse, int B,
                               int T, int hs) {
    const int NH = L->NH, NKV = L->NKV, group = NH / NKV;
    const int pairs = B * NKV, nq = n_blocks(T, ATT_BQ), nk = n_blocks(T, ATT_BK);
    const int n_threads = scratch_threads(scratch_floats);
    const tile_gemms_t gemms = tile_gemms_begin();
    if (pairs >= n_threads || (nq == 1 && nk == 1)) {
#pragma omp parallel for schedule(static) num_threads(n_threads) if (pairs > 1)
        for (int bk = 0; bk < pairs; bk++) {
            float *mine = scratch + (size_t)omp_get_thread_num() * ATT_SCRATCH_PER_THREAD;
            for (int h = bk % NKV * group; h < (bk % NKV + 1) * group; h++) {
                const att_head_t hd = grad_head_at(L, dout, out, lse, bk / NKV, h, T, hs);
                backward_head(&hd, mine);
            }
        }
    } else {
#pragma omp parallel num_threads(n_threads)
        {
            float *mine = scratch + (size_t)omp_get_thread_num() * ATT_SCRATCH_PER_THREAD;
            /* key block j costs nq - j tiles, query block i costs i + 1: costly ones first */
#pragma omp for schedule(dynamic, 1)
            for (int u = 0; u < pairs * nk; u++) {
                const int bk = u % pairs;
                for (int h = bk % NKV * group; h < (bk % NKV + 1) * group; h++) {
                    const att_head_t hd = grad_head_at(L, dout, out, lse, bk / NKV, h, T, hs);
                    backward_key_block(&hd, (u / pairs) * ATT_BK, mine);
                }
            }
#pragma omp for schedule(dynamic, 1)
            for (int u = 0; u < B * NH * nq; u++) {
                const int bh = u % (B * NH);
                const att_head_t hd = grad_head_at(L, dout, out, lse, bh / NH, bh % NH, T, hs);
                backward_query_block(&hd, (nq - 1 - u / (B * NH)) * ATT_BQ, mine);
            }
        }
    }
    tile_gemms_end(gemms);
}

/* attention_backward: dout[B, T, NH*hs], qkv[B, T, 3*NH*hs], out[B, T, NH*hs] and lse[B, NH, T]
 * of the forward -> dqkv[B, T, 3*NH*hs] (overwritten); scratch[scratch_floats] is clobbered. */
void cpu_attention_backward_dropout(float *dqkv, float *scratch, size_t scratch_floats,
                                    const float *dout, const float *qkv, const float *out,
                                    const float *lse, int B, int T, int NH, int hs,
                                    const dropout_mask_t *mask) {
    const att_layout_t L = fused_layout(qkv, dqkv, NH, hs, mask);
    attention_backward(&L, scratch, scratch_floats, dout, out, lse, B, T, hs);
}

void cpu_attention_backward(float *dqkv, float *scratch, size_t scratch_floats,
                            const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int NH, int hs) {
    cpu_attention_backward_dropout(dqkv, scratch, scratch_floats, dout, qkv, out, lse, B, T, NH,
                                   hs, NULL);
}

/* attention_gqa_backward: dq[B, T, NH*hs], dk, dv[B, T, NKV*hs] (overwritten) from dout and the
 * forward's q, k, v, out, lse. */
void cpu_attention_gqa_backward_dropout(float *dq, float *dk, float *dv, float *scratch,
                                        size_t scratch_floats, const float *dout, const float *q,
                                        const float *k, const float *v, const float *out,
                                        const float *lse, int B, int T, int NH, int NKV, int hs,
                                        const dropout_mask_t *mask) {
    const att_layout_t L = {q, k, v, dq, dk, dv, NH * hs, NKV * hs, NH, NKV, mask};
    attention_backward(&L, scratch, scratch_floats, dout, out, lse, B, T, hs);
}

void cpu_attention_gqa_backward(float *dq, float *dk, float *dv, float *scratch,
                                size_t scratch_floats, const float *dout, const float *q,
                                const float *k, const float *v, const float *out,
                                const float *lse, int B, int T, int NH, int NKV, int hs) {
    cpu_attention_gqa_backward_dropout(dq, dk, dv, scratch, scratch_floats, dout, q, k, v, out,
                                       lse, B, T, NH, NKV, hs, NULL);
}

/* ---------------------------------------------------------------- ring attention's blocks */

/* Head h of batch b of a ring block as one head of the tiled kernel: its q, k, v, out, the
 * dropout mask's row of its query 0 and column of its key 0 (the chunks' global positions). */
static att_head_t block_head(const attn_block_t *k, int b, int h) {
    const int hs = k->hs, kvh = h / (k->NH / k->NKV);
    const size_t qo = b * k->bq + (size_t)h * hs, ko = b * k->bkv + (size_t)kvh * hs;
    const size_t oo = b * k->bo + (size_t)h * hs;
    att_head_t hd = {.q = k->q + qo, .k = k->k + ko, .v = k->v + ko, .out = k->out + oo,
                     .T = k->rows, .hs = hs, .ldq = k->ldq, .ldkv = k->ldkv, .ldo = k->ldo,
                     .scale = 1.0f / sqrtf((float)hs), .drop = k->drop, .full = !k->diag};
    if (k->dout) hd.dout = k->dout + oo;
    if (k->dq) hd.dq = k->dq + qo, hd.dk = k->dk + ko, hd.dv = k->dv + ko;
    if (k->drop) {
        hd.row0 = k->drop->row0 + (uint64_t)b * k->seq + k->q_pos;
        hd.key0 = k->k_pos;
        hd.head = k->drop->word3 + (uint32_t)h;
    }
    return hd;
}

/* Query block i of head h, batch b of a ring block: the online softmax of its rows over the
 * block's keys, into the running m, l and the unnormalised out (online_softmax_row's `first`
 * is a row that has seen no key yet: l = 0; out is zero then, so the product adds to it); with
 * dropout, each row's probabilities masked after the statistics, as forward_query_block. */
static void block_forward_query_block(const attn_block_t *k, int b, int h, int i, float *scratch) {
    const int hs = k->hs, kvh = h / (k->NH / k->NKV), r0 = i * ATT_BQ;
    const int rows = min_int(ATT_BQ, k->rows - r0);
    const float *q = k->q + b * k->bq + (size_t)h * hs + (size_t)r0 * k->ldq;
    const float *kk = k->k + b * k->bkv + (size_t)kvh * hs, *v = k->v + b * k->bkv + (size_t)kvh * hs;
    float *o = k->out + b * k->bo + (size_t)h * hs + (size_t)r0 * k->ldo;
    const size_t st = ((size_t)b * k->NH + h) * k->stat_ld + r0;
    float *m = k->m + st, *l = k->l + st, *p = scratch;
    const float scale = 1.0f / sqrtf((float)hs);
    const att_head_t hd = block_head(k, b, h);
    const int last_kb = k->diag ? (r0 + rows - 1) / ATT_BK : n_blocks(k->rows, ATT_BK) - 1;
    for (int j = 0; j <= last_kb; j++) {
        const int c0 = j * ATT_BK, cols = min_int(ATT_BK, k->rows - c0);
        gemm_f32(false, true, rows, cols, hs, scale, q, k->ldq, kk + (size_t)c0 * k->ldkv, k->ldkv,
                 0.0f, p, ATT_BK);
        for (int a = 0; a < rows; a++) {
            online_softmax_row(p + (size_t)a * ATT_BK, k->diag ? min_int(cols, r0 + a - c0 + 1) : cols,
                               cols, &m[a], &l[a], o + (size_t)a * k->ldo, hs, l[a] == 0.0f);
            if (k->drop) drop_tile_row(&hd, p + (size_t)a * ATT_BK, r0 + a, c0, cols,
                                       scratch + ATT_DROP_ROW);
        }
        gemm_f32(false, false, rows, hs, cols, 1.0f, p, ATT_BK, v + (size_t)c0 * k->ldkv, k->ldkv,
                 1.0f, o, k->ldo);
    }
}

/* attention_block_forward: one unit per (batch, head, query block), each writing its own rows. */
void cpu_attention_block_forward(const attn_block_t *blk, float *scratch, size_t scratch_floats) {
    const int nq = n_blocks(blk->rows, ATT_BQ), NH = blk->NH, units = blk->B * NH * nq;
    const int n_threads = scratch_threads(scratch_floats);
    const tile_gemms_t gemms = tile_gemms_begin();
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int u = 0; u < units; u++)
        block_forward_query_block(blk, u / (NH * nq), u / nq % NH, u % nq,
                                  scratch + (size_t)omp_get_thread_num() * ATT_SCRATCH_PER_THREAD);
    tile_gemms_end(gemms);
}

/* attention_block_finish: out[B, T, NH*hs] /= l; m_lse[B, NH, T] = m + log(l). */
void cpu_attention_block_finish(float *out, float *m_lse, const float *l, int B, int T, int NH,
                                int hs) {
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        for (int t = 0; t < T; t++) {
            const size_t s = (size_t)bh * T + t;
            float *o = out + ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
            const float inv = 1.0f / l[s];
#pragma omp simd
            for (int d = 0; d < hs; d++) o[d] *= inv;
            m_lse[s] += logf(l[s]);
        }
    }
}

/* attention_block_backward: one unit per (batch, k/v head), its query heads in ascending order,
 * each a whole head (backward_head, with every key visible unless diag, the dropout mask drawn
 * at the block's global positions), adding to dq, dk, dv. */
void cpu_attention_block_backward(const attn_block_t *k, float *scratch, size_t scratch_floats) {
    const int NH = k->NH, NKV = k->NKV, group = NH / NKV, pairs = k->B * NKV;
    const int n_threads = scratch_threads(scratch_floats);
    const tile_gemms_t gemms = tile_gemms_begin();
#pragma omp parallel for schedule(static) num_threads(n_threads) if (pairs > 1)
    for (int bk = 0; bk < pairs; bk++) {
        const int b = bk / NKV, kvh = bk % NKV;
        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
            att_head_t hd = block_head(k, b, h);
            hd.lse = k->lse + ((size_t)b * NH + h) * k->stat_ld;
            hd.acc_kv = hd.acc_q = true;
            backward_head(&hd, scratch + (size_t)omp_get_thread_num() * ATT_SCRATCH_PER_THREAD);
        }
    }
    tile_gemms_end(gemms);
}

/* copy_rows: dst[rows, cols] (stride ld_dst) = or += src (stride ld_src). */
void cpu_copy_rows(float *dst, int ld_dst, const float *src, int ld_src, size_t rows, int cols,
                   bool accumulate) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float *d = dst + r * ld_dst;
        const float *s = src + r * ld_src;
        if (accumulate) {
#pragma omp simd
            for (int c = 0; c < cols; c++) d[c] += s[c];
        } else {
            memcpy(d, s, sizeof(float) * cols);
        }
    }
}
