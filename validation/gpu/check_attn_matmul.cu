/* check_attn_matmul.cu — GPU check of kernels/cuda/attention.cu and matmul.cu against naive
 * double-precision host references written here (independent of both the CUDA and the CPU
 * kernels). Needs a GPU; prints the largest differences and exits 1 on a failure.
 *   attention (fused MHA and GQA, with and without dropout; T = 130 and hs = 40 so tiles and
 *   lanes are partly empty): out, lse, dq, dk, dv within 2e-4 (absolute, values O(1));
 *   backward run twice: bit-identical (no atomics).
 *   matmul fp32: out, dinp (overwrite and accumulate), dw (overwrite and accumulate), dbias
 *   within 1e-4 relative to the largest |value|; bf16 products of bf16 inputs within 1e-4 too
 *   (the products are exact, only the order of fp32 additions differs).
 * Build: make CUDA=1 build-cuda/gpu/check_attn_matmul (validation/gpu/run.sh runs it). */
#include "kernels/cuda/cuda_kernels.h"
#include "core/cuda_check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static int failures;

static void check(const char *what, const std::vector<float> &got, const std::vector<double> &want,
                  double tol) {
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < want.size(); i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d, at = i; /* NaN counts as worst */
    }
    const bool ok = worst <= tol;
    printf("%-34s max |diff| %.3g at %zu (got %.6g want %.6g) tol %.1g %s\n", what, worst, at,
           (double)got[at], want[at], tol, ok ? "ok" : "FAIL");
    failures += !ok;
}

/* host Philox-4x32-10 and the dropout factor, as core/rng.c / kernels/cpu/dropout.c */
static float host_drop(const dropout_mask_t &m, uint64_t row, uint64_t col, uint32_t w3) {
    uint32_t c0 = (uint32_t)(col >> 2), c1 = (uint32_t)row, c2 = (uint32_t)(row >> 32), c3 = w3;
    uint32_t k0 = m.key[0], k1 = m.key[1];
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        c1 = (uint32_t)p1;
        c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    const uint32_t w[4] = {c0, c1, c2, c3};
    return w[col & 3] >= m.threshold ? m.scale : 0.0f;
}

static std::vector<float> randv(size_t n, unsigned *seed, float amp) {
    std::vector<float> v(n);
    for (auto &x : v) {
        *seed = *seed * 1664525u + 1013904223u;
        x = amp * ((float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
    return v;
}

static float *dev(const std::vector<float> &h) {
    float *d;
    CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(float) + 4));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> host(const float *d, size_t n) {
    std::vector<float> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* Naive causal GQA attention in double: q [B,T,NH,hs] (row stride ldq), k, v (ldkv). */
struct ref_att {
    std::vector<double> out, lse, dq, dk, dv;
};

static ref_att reference(const float *q, const float *k, const float *v, const float *dout,
                         int ldq, int ldkv, int B, int T, int NH, int NKV, int hs,
                         const dropout_mask_t *mask) {
    ref_att r;
    r.out.assign((size_t)B * T * NH * hs, 0), r.lse.assign((size_t)B * NH * T, 0);
    r.dq.assign((size_t)B * T * ldq, 0), r.dk.assign((size_t)B * T * ldkv, 0);
    r.dv.assign((size_t)B * T * ldkv, 0);
    const double scale = 1.0 / sqrt((double)hs);
    std::vector<double> P(T), F(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kh = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                const float *qt = q + ((size_t)b * T + t) * ldq + h * hs;
                double mx = -1e300;
                for (int j = 0; j <= t; j++) {
                    const float *kj = k + ((size_t)b * T + j) * ldkv + kh * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)qt[d] * kj[d];
                    P[j] = s * scale, mx = fmax(mx, P[j]);
                }
                double l = 0;
                for (int j = 0; j <= t; j++) P[j] = exp(P[j] - mx), l += P[j];
                for (int j = 0; j <= t; j++) {
                    P[j] /= l;
                    F[j] = mask ? host_drop(*mask, mask->row0 + (uint64_t)b * T + t, j, mask->word3 + h) : 1.0;
                }
                r.lse[((size_t)b * NH + h) * T + t] = mx + log(l);
                double *o = &r.out[((size_t)b * T + t) * NH * hs + h * hs];
                const float *g = dout + ((size_t)b * T + t) * NH * hs + h * hs;
                for (int j = 0; j <= t; j++) {
                    const float *vj = v + ((size_t)b * T + j) * ldkv + kh * hs;
                    for (int d = 0; d < hs; d++) o[d] += F[j] * P[j] * vj[d];
                }
                double D = 0;
                for (int d = 0; d < hs; d++) D += (double)g[d] * o[d];
                for (int j = 0; j <= t; j++) {
                    const float *vj = v + ((size_t)b * T + j) * ldkv + kh * hs;
                    const float *kj = k + ((size_t)b * T + j) * ldkv + kh * hs;
                    double gv = 0;
                    for (int d = 0; d < hs; d++) gv += (double)g[d] * vj[d];
                    const double ds = scale * P[j] * (F[j] * gv - D);
                    double *dqt = &r.dq[((size_t)b * T + t) * ldq + h * hs];
                    double *dkj = &r.dk[((size_t)b * T + j) * ldkv + kh * hs];
                    double *dvj = &r.dv[((size_t)b * T + j) * ldkv + kh * hs];
                    for (int d = 0; d < hs; d++) {
                        dqt[d] += ds * kj[d];
                        dkj[d] += ds * qt[d];
                        dvj[d] += F[j] * P[j] * g[d];
                    }
                }
            }
        }
    return r;
}

/* The reference's values at the columns of a head-strided tensor (q, k or v part). */
static std::vector<double> part(const std::vector<double> &x, size_t rows, int ld, int off, int w) {
    std::vector<double> y(rows * w);
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < w; c++) y[i * w + c] = x[i * ld + off + c];
    return y;
}

static std::vector<float> partf(const std::vector<float> &x, size_t rows, int ld, int off, int w) {
    std::vector<float> y(rows * w);
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < w; c++) y[i * w + c] = x[i * ld + off + c];
    return y;
}

static void check_gqa(int B, int T, int NH, int NKV, int hs, const dropout_mask_t *mask) {
    unsigned seed = 12345u + (unsigned)(hs * 7 + NKV);
    const size_t nq = (size_t)B * T * NH * hs, nkv = (size_t)B * T * NKV * hs;
    const auto q = randv(nq, &seed, 1.0f), k = randv(nkv, &seed, 1.0f), v = randv(nkv, &seed, 1.0f);
    const auto g = randv(nq, &seed, 1.0f);
    const ref_att r = reference(q.data(), k.data(), v.data(), g.data(), NH * hs, NKV * hs, B, T, NH,
                                NKV, hs, mask);
    float *dq_ = dev(q), *dk_ = dev(k), *dv_ = dev(v), *dg = dev(g), *out = dev(q), *lse;
    float *gq = dev(q), *gk = dev(k), *gv = dev(v), *scratch;
    CUDA_CHECK(cudaMalloc(&lse, (size_t)B * NH * T * sizeof(float)));
    const size_t sf = cuda_attention_scratch_floats(B, T, NH, hs);
    CUDA_CHECK(cudaMalloc(&scratch, sf * sizeof(float)));
    cuda_attention_gqa_forward_dropout(out, lse, scratch, sf, dq_, dk_, dv_, B, T, NH, NKV, hs, mask);
    cuda_attention_gqa_backward_dropout(gq, gk, gv, scratch, sf, dg, dq_, dk_, dv_, out, lse, B, T,
                                        NH, NKV, hs, mask);
    const auto gq1 = host(gq, nq), gk1 = host(gk, nkv), gv1 = host(gv, nkv);
    cuda_attention_gqa_backward_dropout(gq, gk, gv, scratch, sf, dg, dq_, dk_, dv_, out, lse, B, T,
                                        NH, NKV, hs, mask);
    char what[64];
    snprintf(what, sizeof what, "gqa NH%d NKV%d hs%d T%d%s", NH, NKV, hs, T, mask ? " drop" : "");
    printf("%s\n", what);
    check("  out", host(out, nq), r.out, 2e-4);
    check("  lse", host(lse, (size_t)B * NH * T), r.lse, 2e-4);
    check("  dq", gq1, r.dq, 2e-4);
    check("  dk", gk1, r.dk, 2e-4);
    check("  dv", gv1, r.dv, 2e-4);
    const bool same = host(gq, nq) == gq1 && host(gk, nkv) == gk1 && host(gv, nkv) == gv1;
    printf("  backward twice bit-identical: %s\n", same ? "ok" : "FAIL");
    failures += !same;
    for (float *p : {dq_, dk_, dv_, dg, out, lse, gq, gk, gv, scratch}) CUDA_CHECK(cudaFree(p));
}

static void check_fused(int B, int T, int NH, int hs, const dropout_mask_t *mask) {
    unsigned seed = 777u + (unsigned)hs;
    const int C = NH * hs;
    const size_t rows = (size_t)B * T;
    const auto qkv = randv(rows * 3 * C, &seed, 1.0f), g = randv(rows * C, &seed, 1.0f);
    const ref_att r = reference(qkv.data(), qkv.data() + C, qkv.data() + 2 * C, g.data(), 3 * C,
                                3 * C, B, T, NH, NH, hs, mask);
    float *dqkv_in = dev(qkv), *dg = dev(g), *out, *lse, *dqkv, *scratch;
    CUDA_CHECK(cudaMalloc(&out, rows * C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&lse, (size_t)B * NH * T * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dqkv, rows * 3 * C * sizeof(float)));
    CUDA_CHECK(cudaMemset(dqkv, 0xff, rows * 3 * C * sizeof(float))); /* NaN: all must be written */
    const size_t sf = cuda_attention_scratch_floats(B, T, NH, hs);
    CUDA_CHECK(cudaMalloc(&scratch, sf * sizeof(float)));
    cuda_attention_forward_dropout(out, lse, scratch, sf, dqkv_in, B, T, NH, hs, mask);
    cuda_attention_backward_dropout(dqkv, scratch, sf, dg, dqkv_in, out, lse, B, T, NH, hs, mask);
    const auto d = host(dqkv, rows * 3 * C);
    printf("fused NH%d hs%d T%d%s\n", NH, hs, T, mask ? " drop" : "");
    check("  out", host(out, rows * C), r.out, 2e-4);
    check("  dq", partf(d, rows, 3 * C, 0, C), part(r.dq, rows, 3 * C, 0, C), 2e-4);
    check("  dk", partf(d, rows, 3 * C, C, C), part(r.dk, rows, 3 * C, 0, C), 2e-4);
    check("  dv", partf(d, rows, 3 * C, 2 * C, C), part(r.dv, rows, 3 * C, 0, C), 2e-4);
    for (float *p : {dqkv_in, dg, out, lse, dqkv, scratch}) CUDA_CHECK(cudaFree(p));
}

static float bf16_round(float x) { /* values exactly representable in bf16 */
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static double max_abs(const std::vector<double> &x) {
    double m = 0;
    for (double y : x) m = fmax(m, fabs(y));
    return m;
}

static void check_matmul(dtype_t t) {
    const int N = 67, C = 96, OC = 80;
    unsigned seed = 99u;
    auto inp = randv((size_t)N * C, &seed, 1.0f), w = randv((size_t)OC * C, &seed, 1.0f);
    auto bias = randv(OC, &seed, 1.0f), dout = randv((size_t)N * OC, &seed, 1.0f);
    auto dinp0 = randv((size_t)N * C, &seed, 1.0f), dw0 = randv((size_t)OC * C, &seed, 1.0f);
    auto db0 = randv(OC, &seed, 1.0f);
    if (t != DT_FP32)
        for (auto *vec : {&inp, &w, &dout})
            for (auto &x : *vec) x = bf16_round(x);
    std::vector<double> out((size_t)N * OC), dinp((size_t)N * C), dw((size_t)OC * C), db(OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int c = 0; c < C; c++) s += (double)inp[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = dinp0[n * C + c];
            for (int o = 0; o < OC; o++) s += (double)dout[n * OC + o] * w[o * C + c];
            dinp[n * C + c] = s;
        }
    for (int o = 0; o < OC; o++) {
        double sb = db0[o];
        for (int n = 0; n < N; n++) sb += dout[n * OC + o];
        db[o] = sb;
        for (int c = 0; c < C; c++) {
            double s = dw0[o * C + c];
            for (int n = 0; n < N; n++) s += (double)dout[n * OC + o] * inp[n * C + c];
            dw[o * C + c] = s;
        }
    }
    cuda_set_product_type(t);
    float *d_inp = dev(inp), *d_w = dev(w), *d_b = dev(bias), *d_dout = dev(dout);
    float *d_out = dev(std::vector<float>((size_t)N * OC)), *d_dinp = dev(dinp0), *d_dw = dev(dw0);
    float *d_db = dev(db0);
    cuda_matmul_forward(d_out, d_inp, d_w, d_b, N, C, OC);
    cuda_matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, true, false);
    printf("matmul %s (accumulate)\n", t == DT_FP32 ? "fp32" : "bf16");
    check("  out", host(d_out, out.size()), out, 1e-4 * max_abs(out));
    check("  dinp +=", host(d_dinp, dinp.size()), dinp, 1e-4 * max_abs(dinp));
    check("  dw +=", host(d_dw, dw.size()), dw, 1e-4 * max_abs(dw));
    check("  dbias +=", host(d_db, db.size()), db, 1e-4 * max_abs(db));
    /* overwrite: the same minus the initial values */
    for (size_t i = 0; i < dinp.size(); i++) dinp[i] -= dinp0[i];
    for (size_t i = 0; i < dw.size(); i++) dw[i] -= dw0[i];
    for (size_t i = 0; i < db.size(); i++) db[i] -= db0[i];
    cuda_matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, false, true);
    check("  dinp =", host(d_dinp, dinp.size()), dinp, 1e-4 * max_abs(dinp));
    check("  dw =", host(d_dw, dw.size()), dw, 1e-4 * max_abs(dw));
    check("  dbias =", host(d_db, db.size()), db, 1e-4 * max_abs(db));
    for (float *p : {d_inp, d_w, d_b, d_dout, d_out, d_dinp, d_dw, d_db}) CUDA_CHECK(cudaFree(p));
    cuda_set_product_type(DT_FP32);
}

int main(void) {
    dropout_mask_t mask = {};
    mask.key[0] = 0x1234u, mask.key[1] = 0xabcdu;
    mask.threshold = 429496730u; /* p = 0.1 */
    mask.scale = 1.0f / 0.9f, mask.row0 = 1000, mask.word3 = 5;
    check_gqa(2, 130, 4, 2, 40, NULL);
    check_gqa(2, 130, 4, 2, 40, &mask);
    check_gqa(1, 200, 4, 4, 128, NULL);
    check_fused(2, 130, 3, 64, NULL);
    check_fused(2, 70, 3, 64, &mask);
    check_fused(1, 64, 2, 96, NULL);
    check_matmul(DT_FP32);
    check_matmul(DT_BF16);
    printf("%s (%d failed)\n", failures ? "FAIL" : "all ok", failures);
    return failures ? 1 : 0;
}
