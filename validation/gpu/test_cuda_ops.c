/* test_cuda_ops.c — every op of the CUDA backend against the CPU backend (the reference) on
 * random inputs, on one GPU: the same inputs go to ops_cpu() (host) and ops_cuda() (device), and
 * each output is compared by relative L2 error ||gpu - cpu|| / ||cpu|| and the largest absolute
 * difference. Tolerances (the "tol" column): 1e-5 for fp32 ops whose reduction order differs
 * between the backends (layernorm, matmul with TF32 off, attention, cross-entropy, atomics in
 * embed/scatter backward), 1e-6 for element-wise ops (device tanhf/expf are within a few ulp of
 * glibc's), 0 (bit-equal) for bf16/fp16 rounding, Philox dropout masks, gathers and top-k
 * indices, 1e-12 for sumsq (double), 4e-3 for products with bf16 inputs (cuBLASLt's fp32
 * accumulation order; 2^-8 is one bf16 ulp), 1e-3 with fp16 inputs. Prints one row per output and "N passed, N
 * failed"; exit 1 on any failure.
 *   build-cuda/gpu/test_cuda_ops            (run by validation/gpu/run.sh) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "kernels/ops.h"

static const ops_t *CPU, *GPU;
static int n_pass, n_fail;

/* ---- the same tensor on both sides ---- */
typedef struct { float *h, *d; size_t n; } pair_t;
typedef struct { int *h, *d; size_t n; } ipair_t;

static uint64_t lcg = 0x9e3779b97f4a7c15ull;
static float uniform(float lo, float hi) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((lcg >> 40) * (1.0 / 16777216.0));
}

static pair_t upload(const float *src, size_t n) {
    pair_t p = {xmalloc_in(n * sizeof(float) + 4, MEM_WORKSPACE), GPU->alloc(n * sizeof(float) + 4, MEM_WORKSPACE), n};
    memcpy(p.h, src, n * sizeof(float));
    GPU->to_device(p.d, src, n * sizeof(float));
    return p;
}
static pair_t rnd(size_t n, float lo, float hi) {
    float *t = xmalloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) t[i] = uniform(lo, hi);
    pair_t p = upload(t, n);
    xfree(t);
    return p;
}
static pair_t zeros(size_t n) {
    float *t = xcalloc(n + 1, sizeof(float));
    pair_t p = upload(t, n);
    xfree(t);
    return p;
}
static ipair_t irnd(size_t n, int lo, int hi) {
    ipair_t p = {xmalloc(n * sizeof(int) + 4), GPU->alloc(n * sizeof(int) + 4, MEM_WORKSPACE), n};
    for (size_t i = 0; i < n; i++) p.h[i] = lo + (int)(uniform(0, 1) * (float)(hi - lo)) % (hi - lo);
    GPU->to_device(p.d, p.h, n * sizeof(int));
    return p;
}
static void drop(pair_t *p) { xfree(p->h); GPU->free(p->d); }
static void idrop(ipair_t *p) { xfree(p->h); GPU->free(p->d); }

/* ---- comparison ---- */
static void report(const char *op, const char *out, size_t n, double rel, double maxabs, double tol) {
    const int ok = rel <= tol && isfinite(rel);
    ok ? n_pass++ : n_fail++;
    printf("%-34s %-10s %9zu  %9.2e  %9.2e  %7.0e  %s\n", op, out, n, rel, maxabs, tol, ok ? "PASS" : "FAIL");
}
static void check(const char *op, const char *out, const pair_t *p, double tol) {
    float *g = xmalloc(p->n * sizeof(float) + 4);
    GPU->to_host(g, p->d, p->n * sizeof(float));
    double num = 0, den = 0, maxabs = 0;
    for (size_t i = 0; i < p->n; i++) {
        const double d = (double)g[i] - p->h[i];
        if (isnan(g[i]) != isnan(p->h[i]) || (isinf(p->h[i]) && g[i] != p->h[i])) num = INFINITY;
        else if (isfinite(p->h[i])) num += d * d, den += (double)p->h[i] * p->h[i];
        if (fabs(d) > maxabs) maxabs = fabs(d);
    }
    report(op, out, p->n, den > 0 ? sqrt(num / den) : sqrt(num), maxabs, tol);
    xfree(g);
}
static void icheck(const char *op, const char *out, const ipair_t *p) {
    int *g = xmalloc(p->n * sizeof(int) + 4);
    GPU->to_host(g, p->d, p->n * sizeof(int));
    size_t bad = 0;
    for (size_t i = 0; i < p->n; i++) bad += g[i] != p->h[i];
    report(op, out, p->n, (double)bad / (double)p->n, (double)bad, 0);
    xfree(g);
}

/* shapes: GPT-2-like small; Vl > v_valid exercises the padding columns */
enum { B = 2, T = 128, NH = 4, HS = 64, C = NH * HS, N = B * T, OC = 3 * C, V = 1000, VL = 1024, E = 8, K = 2 };

static void test_memory_and_elementwise(void) {
    pair_t x = rnd(N * C, -1, 1);
    CPU->zero(x.h, x.n), GPU->zero(x.d, x.n);
    check("zero", "x", &x, 0);
    pair_t a = rnd(N * C, -2, 2), b = rnd(N * C, -2, 2), o = zeros(N * C);
    CPU->add(o.h, a.h, b.h, o.n), GPU->add(o.d, a.d, b.d, o.n);
    check("add", "out", &o, 0);
    CPU->scale(a.h, 0.37f, a.n), GPU->scale(a.d, 0.37f, a.n);
    check("scale", "x", &a, 0);
    CPU->gelu_forward(o.h, b.h, o.n), GPU->gelu_forward(o.d, b.d, o.n);
    check("gelu_forward", "out", &o, 1e-6);
    pair_t dout = rnd(N * C, -1, 1);
    CPU->gelu_backward(o.h, b.h, dout.h, o.n), GPU->gelu_backward(o.d, b.d, dout.d, o.n);
    check("gelu_backward", "dinp", &o, 1e-6);
    pair_t up = rnd(N * C, -2, 2), dup = zeros(N * C);
    CPU->swiglu_forward(o.h, b.h, up.h, o.n), GPU->swiglu_forward(o.d, b.d, up.d, o.n);
    check("swiglu_forward", "out", &o, 1e-6);
    CPU->swiglu_backward(o.h, dup.h, dout.h, b.h, up.h, o.n), GPU->swiglu_backward(o.d, dup.d, dout.d, b.d, up.d, o.n);
    check("swiglu_backward", "dgate", &o, 1e-6);
    check("swiglu_backward", "dup", &dup, 1e-6);
    drop(&x), drop(&a), drop(&b), drop(&o), drop(&dout), drop(&up), drop(&dup);
}

static void test_precision(void) {
    for (int t = DT_BF16; t <= DT_FP16; t++) {
        pair_t x = rnd(N * C, -70000, 70000), y = zeros(N * C);
        CPU->quantize_copy(y.h, x.h, x.n, (dtype_t)t), GPU->quantize_copy(y.d, x.d, x.n, (dtype_t)t);
        check(t == DT_BF16 ? "quantize_copy bf16" : "quantize_copy fp16 (overflow: inf)", "dst", &y, 0);
        CPU->quantize(x.h, x.n, (dtype_t)t), GPU->quantize(x.d, x.n, (dtype_t)t);
        check(t == DT_BF16 ? "quantize bf16" : "quantize fp16", "x", &x, 0);
        drop(&x), drop(&y);
    }
    pair_t x = rnd(N * C, -1, 1);
    const double sc = CPU->sumsq(x.h, x.n), sg = GPU->sumsq(x.d, x.n);
    report("sumsq (double)", "return", x.n, fabs(sg - sc) / sc, fabs(sg - sc), 1e-12);
    const bool f0c = CPU->any_nonfinite(x.h, x.n), f0g = GPU->any_nonfinite(x.d, x.n);
    const float inf = INFINITY;
    x.h[12345] = inf;
    GPU->to_device(x.d + 12345, &inf, sizeof inf);
    const bool f1c = CPU->any_nonfinite(x.h, x.n), f1g = GPU->any_nonfinite(x.d, x.n);
    report("any_nonfinite (finite, one inf)", "return", x.n, (f0c != f0g) + (f1c != f1g) + (f1g != true), 0, 0);
    drop(&x);
}

static void test_embed_norms(void) {
    ipair_t tok = irnd(N, 0, V);
    pair_t wte = rnd(400 * C, -1, 1), wpe = rnd(T * C, -1, 1), out = zeros(N * C);
    /* a vocab shard [300, 700): tokens outside it contribute 0 */
    CPU->embed_forward(out.h, tok.h, wte.h, wpe.h, B, T, C, 300, 400, true);
    GPU->embed_forward(out.d, tok.d, wte.d, wpe.d, B, T, C, 300, 400, true);
    check("embed_forward (shard 300+400)", "out", &out, 0);
    pair_t dout = rnd(N * C, -1, 1);
    CPU->embed_backward(wte.h, wpe.h, dout.h, tok.h, B, T, C, 300, 400, true);
    GPU->embed_backward(wte.d, wpe.d, dout.d, tok.d, B, T, C, 300, 400, true);
    check("embed_backward (accumulate)", "dwte", &wte, 1e-5);
    check("embed_backward (accumulate)", "dwpe", &wpe, 1e-5);
    pair_t x = rnd(N * C, -3, 3), w = rnd(C, 0.5f, 1.5f), bias = rnd(C, -1, 1), mean = zeros(N), rstd = zeros(N);
    CPU->layernorm_forward(out.h, mean.h, rstd.h, x.h, w.h, bias.h, N, C);
    GPU->layernorm_forward(out.d, mean.d, rstd.d, x.d, w.d, bias.d, N, C);
    check("layernorm_forward", "out", &out, 1e-5), check("layernorm_forward", "mean", &mean, 1e-5);
    check("layernorm_forward", "rstd", &rstd, 1e-5);
    pair_t cm = upload(mean.h, N), cr = upload(rstd.h, N); /* the CPU's statistics to both */
    for (int variant = 0; variant < 2; variant++) {
        pair_t dinp = rnd(N * C, -1, 1), dw = rnd(C, -1, 1), db = rnd(C, -1, 1);
        CPU->layernorm_backward(dinp.h, dw.h, db.h, dout.h, x.h, w.h, cm.h, cr.h, N, C, variant, variant);
        GPU->layernorm_backward(dinp.d, dw.d, db.d, dout.d, x.d, w.d, cm.d, cr.d, N, C, variant, variant);
        const char *name = variant ? "layernorm_backward (acc, overwrite_dw)" : "layernorm_backward";
        check(name, "dinp", &dinp, 1e-5), check(name, "dw", &dw, 1e-5), check(name, "db", &db, 1e-5);
        drop(&dinp), drop(&dw), drop(&db);
    }
    pair_t res = zeros(N * C);
    for (int t = DT_FP32; t <= DT_BF16; t++) {
        CPU->residual_layernorm_forward(res.h, out.h, mean.h, rstd.h, x.h, dout.h, w.h, bias.h, N, C, (dtype_t)t);
        GPU->residual_layernorm_forward(res.d, out.d, mean.d, rstd.d, x.d, dout.d, w.d, bias.d, N, C, (dtype_t)t);
        const char *name = t == DT_FP32 ? "residual_layernorm_forward fp32" : "residual_layernorm_forward bf16";
        check(name, "res", &res, 0);
        check(name, "out", &out, t == DT_FP32 ? 1e-5 : 4e-3); /* bf16: a rounding may fall either side */
        check(name, "rstd", &rstd, 1e-5);
    }
    CPU->rmsnorm_forward(out.h, rstd.h, x.h, w.h, N, C, 1e-5f), GPU->rmsnorm_forward(out.d, rstd.d, x.d, w.d, N, C, 1e-5f);
    check("rmsnorm_forward", "out", &out, 1e-5), check("rmsnorm_forward", "rstd", &rstd, 1e-5);
    pair_t r2 = upload(rstd.h, N), dinp = rnd(N * C, -1, 1), dw = rnd(C, -1, 1);
    CPU->rmsnorm_backward(dinp.h, dw.h, dout.h, x.h, w.h, r2.h, N, C, true, false);
    GPU->rmsnorm_backward(dinp.d, dw.d, dout.d, x.d, w.d, r2.d, N, C, true, false);
    check("rmsnorm_backward (acc)", "dinp", &dinp, 1e-5), check("rmsnorm_backward (acc)", "dw", &dw, 1e-5);
    idrop(&tok), drop(&wte), drop(&wpe), drop(&out), drop(&dout), drop(&x), drop(&w), drop(&bias);
    drop(&mean), drop(&rstd), drop(&cm), drop(&cr), drop(&res), drop(&r2), drop(&dinp), drop(&dw);
}

static void test_matmul(dtype_t t, double tol) {
    CPU->set_product_type(t), GPU->set_product_type(t);
    pair_t x = rnd(N * C, -1, 1), w = rnd(OC * C, -0.1f, 0.1f), bias = rnd(OC, -1, 1), out = zeros(N * OC);
    if (t != DT_FP32) CPU->quantize(x.h, x.n, t), GPU->quantize(x.d, x.n, t), CPU->quantize(w.h, w.n, t), GPU->quantize(w.d, w.n, t);
    const char *f = t == DT_FP32 ? "matmul_forward fp32"
                    : t == DT_BF16 ? "matmul_forward bf16 products" : "matmul_forward fp16 products";
    const char *bname = t == DT_FP32 ? "matmul_backward fp32"
                        : t == DT_BF16 ? "matmul_backward bf16 products" : "matmul_backward fp16 products";
    CPU->matmul_forward(out.h, x.h, w.h, bias.h, N, C, OC), GPU->matmul_forward(out.d, x.d, w.d, bias.d, N, C, OC);
    check(f, "out", &out, tol);
    pair_t dout = rnd(N * OC, -1, 1), dinp = rnd(N * C, -1, 1), dw = rnd(OC * C, -1, 1), db = rnd(OC, -1, 1);
    if (t != DT_FP32) CPU->quantize(dout.h, dout.n, t), GPU->quantize(dout.d, dout.n, t);
    CPU->matmul_backward(dinp.h, dw.h, db.h, dout.h, x.h, w.h, N, C, OC, true, false);
    GPU->matmul_backward(dinp.d, dw.d, db.d, dout.d, x.d, w.d, N, C, OC, true, false);
    check(bname, "dinp (acc)", &dinp, tol), check(bname, "dw (acc)", &dw, tol), check(bname, "dbias", &db, tol);
    CPU->matmul_backward(dinp.h, dw.h, NULL, dout.h, x.h, w.h, N, C, OC, false, true);
    GPU->matmul_backward(dinp.d, dw.d, NULL, dout.d, x.d, w.d, N, C, OC, false, true);
    check(bname, "dinp", &dinp, tol), check(bname, "dw (overw)", &dw, tol);
    CPU->set_product_type(DT_FP32), GPU->set_product_type(DT_FP32);
    drop(&x), drop(&w), drop(&bias), drop(&out), drop(&dout), drop(&dinp), drop(&dw), drop(&db);
}

/* Weights kept as 16-bit elements (ops.h store_as, the _w ops): stored and loaded back they are
 * the CPU's rounded values exactly; products reading them (bf16: as they are; fp16 with fp32
 * products: widened) match the CPU's fp32 ops on the rounded values; the embedding exactly. */
static void test_weights_stored(dtype_t t, dtype_t products, double tol) {
    CPU->set_product_type(products), GPU->set_product_type(products);
    pair_t w = rnd(OC * C, -0.1f, 0.1f), back = zeros(OC * C), x = rnd(N * C, -1, 1);
    void *ws = GPU->alloc(w.n * 2 + 4, MEM_WORKSPACE);
    GPU->store_as(ws, w.d, w.n, t), GPU->load_as(back.d, ws, w.n, t);
    CPU->quantize_copy(back.h, w.h, w.n, t), CPU->quantize(w.h, w.n, t);
    char name[64];
    snprintf(name, sizeof name, "store_as/load_as %s", dtype_name(t));
    check(name, "values", &back, 0);
    CPU->quantize(x.h, x.n, t), GPU->quantize(x.d, x.n, t);
    pair_t out = zeros(N * OC), bias = rnd(OC, -1, 1), dout = rnd(N * OC, -1, 1), dinp = zeros(N * C);
    CPU->quantize(dout.h, dout.n, t), GPU->quantize(dout.d, dout.n, t);
    CPU->matmul_forward(out.h, x.h, w.h, bias.h, N, C, OC);
    GPU->matmul_forward_w(out.d, x.d, ws, t, bias.d, N, C, OC);
    snprintf(name, sizeof name, "matmul_forward_w %s, %s products", dtype_name(t), dtype_name(products));
    check(name, "out", &out, tol);
    CPU->matmul_backward(dinp.h, NULL, NULL, dout.h, x.h, w.h, N, C, OC, false, false);
    GPU->matmul_backward_w(dinp.d, NULL, NULL, dout.d, x.d, ws, t, N, C, OC, false, false);
    snprintf(name, sizeof name, "matmul_backward_w %s, %s products", dtype_name(t), dtype_name(products));
    check(name, "dinp", &dinp, tol);
    ipair_t tok = irnd(N, 0, V);
    pair_t e = zeros(N * C);
    CPU->embed_forward(e.h, tok.h, w.h, w.h + 600 * C, B, T, C, 0, 600, true);
    GPU->embed_forward_w(e.d, tok.d, ws, (const uint16_t *)ws + 600 * C, t, B, T, C, 0, 600, true);
    snprintf(name, sizeof name, "embed_forward_w %s", dtype_name(t));
    check(name, "out", &e, 0);
    CPU->set_product_type(DT_FP32), GPU->set_product_type(DT_FP32);
    GPU->free(ws);
    drop(&w), drop(&back), drop(&x), drop(&out), drop(&bias), drop(&dout), drop(&dinp), drop(&e), idrop(&tok);
}

/* Multi-head attention, with and without dropout on the probabilities; scratch from each
 * backend's own size. */
static void test_attention(const dropout_mask_t *mask) {
    const size_t sc = CPU->attention_scratch_floats(B, T, NH, HS), sg = GPU->attention_scratch_floats(B, T, NH, HS);
    float *scr_c = xmalloc(sc * sizeof(float) + 4), *scr_g = GPU->alloc(sg * sizeof(float) + 4, MEM_WORKSPACE);
    pair_t qkv = rnd(N * 3 * C, -1, 1), out = zeros(N * C), lse = zeros(B * NH * T);
    CPU->attention_forward_dropout(out.h, lse.h, scr_c, sc, qkv.h, B, T, NH, HS, mask);
    GPU->attention_forward_dropout(out.d, lse.d, scr_g, sg, qkv.d, B, T, NH, HS, mask);
    const char *f = mask ? "attention_forward_dropout p=0.1" : "attention_forward", *b = mask ? "attention_backward_dropout" : "attention_backward";
    check(f, "out", &out, 1e-5), check(f, "lse", &lse, 1e-5);
    pair_t co = upload(out.h, out.n), cl = upload(lse.h, lse.n), dout = rnd(N * C, -1, 1), dqkv = zeros(N * 3 * C);
    CPU->attention_backward_dropout(dqkv.h, scr_c, sc, dout.h, qkv.h, co.h, cl.h, B, T, NH, HS, mask);
    GPU->attention_backward_dropout(dqkv.d, scr_g, sg, dout.d, qkv.d, co.d, cl.d, B, T, NH, HS, mask);
    check(b, "dqkv", &dqkv, 1e-5);
    xfree(scr_c), GPU->free(scr_g);
    drop(&qkv), drop(&out), drop(&lse), drop(&co), drop(&cl), drop(&dout), drop(&dqkv);
}

static void test_attention_gqa_rope(const dropout_mask_t *mask) {
    enum { NKV = 2 };
    const size_t sc = CPU->attention_scratch_floats(B, T, NH, HS), sg = GPU->attention_scratch_floats(B, T, NH, HS);
    float *scr_c = xmalloc(sc * sizeof(float) + 4), *scr_g = GPU->alloc(sg * sizeof(float) + 4, MEM_WORKSPACE);
    pair_t q = rnd(N * C, -1, 1), k = rnd(N * NKV * HS, -1, 1), v = rnd(N * NKV * HS, -1, 1);
    pair_t cs = rnd(T * HS / 2, -1, 1), sn = rnd(T * HS / 2, -1, 1);
    if (!mask) {
        CPU->rope_forward(q.h, cs.h, sn.h, B, T, NH, HS), GPU->rope_forward(q.d, cs.d, sn.d, B, T, NH, HS);
        check("rope_forward", "x", &q, 1e-6);
    }
    pair_t out = zeros(N * C), lse = zeros(B * NH * T);
    CPU->attention_gqa_forward_dropout(out.h, lse.h, scr_c, sc, q.h, k.h, v.h, B, T, NH, NKV, HS, mask);
    GPU->attention_gqa_forward_dropout(out.d, lse.d, scr_g, sg, q.d, k.d, v.d, B, T, NH, NKV, HS, mask);
    const char *f = mask ? "attention_gqa_forward_dropout" : "attention_gqa_forward (NKV 2)";
    const char *b = mask ? "attention_gqa_backward_dropout" : "attention_gqa_backward";
    check(f, "out", &out, 1e-5), check(f, "lse", &lse, 1e-5);
    pair_t co = upload(out.h, out.n), cl = upload(lse.h, lse.n), dout = rnd(N * C, -1, 1);
    pair_t dq = zeros(N * C), dk = zeros(N * NKV * HS), dv = zeros(N * NKV * HS);
    CPU->attention_gqa_backward_dropout(dq.h, dk.h, dv.h, scr_c, sc, dout.h, q.h, k.h, v.h, co.h, cl.h, B, T, NH, NKV, HS, mask);
    GPU->attention_gqa_backward_dropout(dq.d, dk.d, dv.d, scr_g, sg, dout.d, q.d, k.d, v.d, co.d, cl.d, B, T, NH, NKV, HS, mask);
    check(b, "dq", &dq, 1e-5), check(b, "dk", &dk, 1e-5), check(b, "dv", &dv, 1e-5);
    if (!mask) {
        CPU->rope_backward(dq.h, cs.h, sn.h, B, T, NH, HS), GPU->rope_backward(dq.d, cs.d, sn.d, B, T, NH, HS);
        check("rope_backward", "d", &dq, 1e-5);
    }
    xfree(scr_c), GPU->free(scr_g);
    drop(&q), drop(&k), drop(&v), drop(&cs), drop(&sn), drop(&out), drop(&lse), drop(&co), drop(&cl);
    drop(&dout), drop(&dq), drop(&dk), drop(&dv);
}

static void test_dropout(const dropout_mask_t *mask) {
    pair_t x = rnd(N * C, -1, 1), y = zeros(N * C);
    CPU->dropout_apply(y.h, x.h, N, C, mask), GPU->dropout_apply(y.d, x.d, N, C, mask);
    check("dropout_apply p=0.1", "out", &y, 0);
    CPU->dropout_apply(x.h, x.h, N, C, mask), GPU->dropout_apply(x.d, x.d, N, C, mask);
    check("dropout_apply in place", "out", &x, 0);
    drop(&x), drop(&y);
}

/* Cross-entropy over a padded shard: each piece gets the CPU's results of the pieces before it. */
static void test_xent(void) {
    pair_t lg = rnd(N * VL, -6, 6), mx = zeros(N), se = zeros(N), tl = zeros(N), loss = zeros(N), rs = zeros(N), z = zeros(N);
    ipair_t tgt = irnd(N, 0, V);
    CPU->xent_row_max(mx.h, lg.h, N, VL, V), GPU->xent_row_max(mx.d, lg.d, N, VL, V);
    check("xent_row_max", "row_max", &mx, 0);
    pair_t cmx = upload(mx.h, N);
    CPU->xent_row_sumexp(se.h, lg.h, cmx.h, N, VL, V), GPU->xent_row_sumexp(se.d, lg.d, cmx.d, N, VL, V);
    check("xent_row_sumexp", "row_sumexp", &se, 1e-5);
    CPU->xent_target_logit(tl.h, lg.h, tgt.h, N, VL, 0), GPU->xent_target_logit(tl.d, lg.d, tgt.d, N, VL, 0);
    check("xent_target_logit", "target", &tl, 0);
    CPU->xent_row_sum(rs.h, lg.h, N, VL, V), GPU->xent_row_sum(rs.d, lg.d, N, VL, V);
    check("xent_row_sum", "row_sum", &rs, 1e-5);
    pair_t cse = upload(se.h, N), ctl = upload(tl.h, N), crs = upload(rs.h, N);
    CPU->xent_losses(loss.h, cmx.h, cse.h, ctl.h, N), GPU->xent_losses(loss.d, cmx.d, cse.d, ctl.d, N);
    check("xent_losses", "losses", &loss, 1e-6);
    CPU->xent_losses_regularized(loss.h, z.h, cmx.h, cse.h, ctl.h, crs.h, N, V, 0.1f, 1e-4f);
    GPU->xent_losses_regularized(loss.d, z.d, cmx.d, cse.d, ctl.d, crs.d, N, V, 0.1f, 1e-4f);
    check("xent_losses_regularized", "losses", &loss, 1e-6), check("xent_losses_regularized", "zloss", &z, 1e-6);
    pair_t lg2 = upload(lg.h, lg.n);
    CPU->xent_backward_inplace(lg.h, cmx.h, cse.h, tgt.h, 1.0f / N, N, VL, V, 0);
    GPU->xent_backward_inplace(lg.d, cmx.d, cse.d, tgt.d, 1.0f / N, N, VL, V, 0);
    check("xent_backward_inplace", "dlogits", &lg, 1e-5);
    CPU->xent_backward_regularized_inplace(lg2.h, cmx.h, cse.h, tgt.h, 1.0f / N, N, VL, V, 0, V, 0.1f, 1e-4f);
    GPU->xent_backward_regularized_inplace(lg2.d, cmx.d, cse.d, tgt.d, 1.0f / N, N, VL, V, 0, V, 0.1f, 1e-4f);
    check("xent_backward_regularized_inplace", "dlogits", &lg2, 1e-5);
    drop(&lg), drop(&mx), drop(&se), drop(&tl), drop(&loss), drop(&rs), drop(&z), idrop(&tgt);
    drop(&cmx), drop(&cse), drop(&ctl), drop(&crs), drop(&lg2);
}

static void test_adamw(void) {
    pair_t p = rnd(N * C, -1, 1), g = rnd(N * C, -1, 1), m = rnd(N * C, -0.1f, 0.1f), v = rnd(N * C, 0, 0.01f);
    CPU->adamw_update(p.h, g.h, m.h, v.h, p.n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    GPU->adamw_update(p.d, g.d, m.d, v.d, p.n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    check("adamw_update (t 3, clip 0.5)", "param", &p, 1e-6);
    check("adamw_update", "m", &m, 1e-6), check("adamw_update", "v", &v, 1e-6);
    drop(&p), drop(&g), drop(&m), drop(&v);
}

static void test_moe(void) {
    enum { M = N * K };
    const uint32_t key[2] = {11, 22};
    pair_t lg = rnd(N * E, -2, 2), noise = rnd(N * E, -2, 2), dn = zeros(N * E), dl = rnd(N * E, -1, 1);
    CPU->moe_noise_forward(lg.h, noise.h, N, E, 0.5f, key, 1000), GPU->moe_noise_forward(lg.d, noise.d, N, E, 0.5f, key, 1000);
    check("moe_noise_forward", "logits", &lg, 1e-6);
    CPU->moe_noise_backward(dn.h, dl.h, noise.h, N, E, 0.5f, key, 1000), GPU->moe_noise_backward(dn.d, dl.d, noise.d, N, E, 0.5f, key, 1000);
    check("moe_noise_backward", "dnoise", &dn, 1e-6);
    pair_t probs = zeros(N * E), lse = zeros(N), gates = zeros(N * K);
    ipair_t idx = irnd(N * K, 0, E);
    pair_t clg = upload(lg.h, lg.n);
    CPU->moe_softmax_topk(probs.h, lse.h, idx.h, gates.h, clg.h, N, E, K), GPU->moe_softmax_topk(probs.d, lse.d, idx.d, gates.d, clg.d, N, E, K);
    check("moe_softmax_topk", "probs", &probs, 1e-6), check("moe_softmax_topk", "lse", &lse, 1e-6);
    icheck("moe_softmax_topk", "idx", &idx), check("moe_softmax_topk", "gates", &gates, 1e-6);
    GPU->to_device(idx.d, idx.h, idx.n * sizeof(int));
    pair_t cp = upload(probs.h, probs.n), cl = upload(lse.h, lse.n), cg = upload(gates.h, gates.n);
    pair_t dg = rnd(N * K, -1, 1), dpb = rnd(E, -1, 1);
    CPU->moe_router_backward(dn.h, cp.h, cl.h, idx.h, cg.h, dg.h, dpb.h, 1e-3f, N, E, K);
    GPU->moe_router_backward(dn.d, cp.d, cl.d, idx.d, cg.d, dg.d, dpb.d, 1e-3f, N, E, K);
    check("moe_router_backward", "dlogits", &dn, 1e-5);
    ipair_t rows = irnd(M, 0, N);
    pair_t x = rnd(N * C, -1, 1), g = zeros(M * C), y = rnd(N * C, -1, 1), w = rnd(M, 0, 1), dw = zeros(M);
    CPU->moe_gather_rows(g.h, x.h, rows.h, M, C), GPU->moe_gather_rows(g.d, x.d, rows.d, M, C);
    check("moe_gather_rows", "out", &g, 0);
    CPU->moe_scatter_add_rows(y.h, g.h, rows.h, w.h, M, C), GPU->moe_scatter_add_rows(y.d, g.d, rows.d, w.d, M, C);
    check("moe_scatter_add_rows", "y", &y, 1e-6);
    CPU->moe_combine_backward(g.h, dw.h, y.h, x.h, rows.h, w.h, M, C);
    GPU->moe_combine_backward(g.d, dw.d, y.d, x.d, rows.d, w.d, M, C);
    check("moe_combine_backward", "din", &g, 1e-6), check("moe_combine_backward", "dw", &dw, 1e-5);
    drop(&lg), drop(&noise), drop(&dn), drop(&dl), drop(&probs), drop(&lse), drop(&gates), idrop(&idx);
    drop(&clg), drop(&cp), drop(&cl), drop(&cg), drop(&dg), drop(&dpb), idrop(&rows), drop(&x), drop(&g);
    drop(&y), drop(&w), drop(&dw);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    CPU = ops_cpu();
    GPU = ops_cuda();
    char how[256];
    printf("backend: %s\n", GPU->describe());
    const double peak = GPU->hardware_peak(DT_BF16, how, sizeof how);
    printf("peak bf16: %.1f TFLOP/s (%s)\nbf16 products native: %d, faster: %d\n\n", peak / 1e12, how,
           GPU->products_native(DT_BF16), GPU->products_faster(DT_BF16));
    printf("%-34s %-10s %9s  %9s  %9s  %7s  %s\n", "op", "output", "n", "rel L2", "max |d|", "tol", "");
    const dropout_mask_t mask = {.key = {0x1234u, 0xabcdu}, .threshold = 429496730u, .scale = 1.0f / 0.9f,
                                 .row0 = 77, .col0 = 5, .word3 = 2};
    test_memory_and_elementwise();
    test_precision();
    test_embed_norms();
    test_matmul(DT_FP32, 1e-5);
    test_matmul(DT_BF16, 4e-3);
    test_matmul(DT_FP16, 1e-3); /* fp16 runs' products on a GPU (gpt_product_type) */
    test_weights_stored(DT_BF16, DT_BF16, 4e-3);
    test_weights_stored(DT_FP16, DT_FP16, 1e-3);
    test_weights_stored(DT_FP16, DT_FP32, 1e-5);
    test_attention(NULL);
    test_attention(&mask);
    test_attention_gqa_rope(NULL);
    test_attention_gqa_rope(&mask);
    test_dropout(&mask);
    test_xent();
    test_adamw();
    test_moe();
    printf("\n%d passed, %d failed\n", n_pass, n_fail);
    MPI_Finalize();
    return n_fail ? 1 : 0;
}
