/* gemm_onednn.c — gemm.h on oneDNN (Makefile.inc GEMM = onednn): fp32 products with dnnl_sgemm
 * (oneDNN picks its kernels from CPUID, whatever OPENBLAS_CORETYPE says), bf16 products with the
 * matmul primitive.
 * Uses: oneDNN. Used by: src/kernels/cpu/ through gemm.h. */
#include "kernels/cpu/gemm.h"
#include "core/error.h"
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <stdio.h>
#include <stdint.h>

/* The error convention (core/error.h) for oneDNN calls: file:line, the call, oneDNN's status. */
#define DNNL_CHECK(call)                                                                 \
    do {                                                                                 \
        dnnl_status_t dnnl_check_st_ = (call);                                           \
        if (dnnl_check_st_ != dnnl_success)                                              \
            die_call(__FILE__, __LINE__, #call, dnnl_status2str(dnnl_check_st_));        \
    } while (0)

void gemm_f32(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    /* dnnl_sgemm is row-major; it fails only on bad arguments (a bug here, not bad input) */
    DNNL_CHECK(dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
}

/* ---- bf16: oneDNN's matmul primitive ----
 * A primitive is made for one shape (and alpha, beta, transposes, leading dimensions) and kept:
 * the products of a training step repeat the same few shapes every step. Each OpenMP thread has
 * its own stream and its own primitives (oneDNN streams are not thread-safe; a primitive made on
 * one thread runs single-threaded when called from inside our parallel region). */
#define BF16_CACHE 48

typedef struct {
    bool ta, tb;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
} bf16_prim_t;

static dnnl_engine_t engine; /* one CPU engine per process, made on first use */
static _Thread_local dnnl_stream_t stream;
static _Thread_local bf16_prim_t cache[BF16_CACHE];
static _Thread_local int cache_used, cache_next;

static dnnl_engine_t cpu_engine(void) {
    dnnl_engine_t e;
#pragma omp critical(llmt_dnnl_engine)
    {
        if (!engine) DNNL_CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
        e = engine;
    }
    return e;
}

/* Row-major [rows, cols] with leading dimension ld, or its transpose (stored [cols, rows]). */
static void plain_md(dnnl_memory_desc_t *md, int rows, int cols, int ld, bool transposed,
                     dnnl_data_type_t type) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {ld, 1};
    if (transposed) strides[0] = 1, strides[1] = ld;
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides));
}

static void bf16_prim_make(bf16_prim_t *p) {
    dnnl_engine_t e = cpu_engine();
    dnnl_memory_desc_t a_md, b_md, c_md;
    plain_md(&a_md, p->M, p->K, p->lda, p->ta, dnnl_bf16);
    plain_md(&b_md, p->K, p->N, p->ldb, p->tb, dnnl_bf16);
    plain_md(&c_md, p->M, p->N, p->ldc, false, dnnl_f32);
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));
    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    if (p->alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p->alpha));
    if (p->beta != 0.0f) { /* C = alpha A B + beta C: the sum post-op */
        dnnl_post_ops_t po;
        DNNL_CHECK(dnnl_post_ops_create(&po));
        DNNL_CHECK(dnnl_post_ops_append_sum(po, p->beta));
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        DNNL_CHECK(dnnl_post_ops_destroy(po));
    }
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, e, NULL));
    DNNL_CHECK(dnnl_primitive_create(&p->prim, pd));
    DNNL_CHECK(dnnl_primitive_desc_destroy(pd));
    DNNL_CHECK(dnnl_primitive_attr_destroy(attr));
    DNNL_CHECK(dnnl_memory_create(&p->a, &a_md, e, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&p->b, &b_md, e, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&p->c, &c_md, e, DNNL_MEMORY_NONE));
}

static void bf16_prim_destroy(bf16_prim_t *p) {
    DNNL_CHECK(dnnl_primitive_destroy(p->prim));
    DNNL_CHECK(dnnl_memory_destroy(p->a));
    DNNL_CHECK(dnnl_memory_destroy(p->b));
    DNNL_CHECK(dnnl_memory_destroy(p->c));
}

/* This thread's primitive for the shape: found, or made (replacing the oldest when full). */
static bf16_prim_t *bf16_prim(bool ta, bool tb, int M, int N, int K, float alpha, int lda,
                              int ldb, float beta, int ldc) {
    for (int i = 0; i < cache_used; i++) {
        bf16_prim_t *p = &cache[i];
        if (p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->lda == lda &&
            p->ldb == ldb && p->ldc == ldc && p->alpha == alpha && p->beta == beta)
            return p;
    }
    bf16_prim_t *p;
    if (cache_used < BF16_CACHE) p = &cache[cache_used++];
    else {
        p = &cache[cache_next];
        cache_next = (cache_next + 1) % BF16_CACHE;
        bf16_prim_destroy(p);
    }
    *p = (bf16_prim_t){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb,
                       .ldc = ldc, .alpha = alpha, .beta = beta};
    bf16_prim_make(p);
    return p;
}

void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
               const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    bf16_prim_t *p = bf16_prim(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
    if (!stream) DNNL_CHECK(dnnl_stream_create(&stream, cpu_engine(), dnnl_stream_default_flags));
    DNNL_CHECK(dnnl_memory_set_data_handle(p->a, (void *)A));
    DNNL_CHECK(dnnl_memory_set_data_handle(p->b, (void *)B));
    DNNL_CHECK(dnnl_memory_set_data_handle(p->c, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
    DNNL_CHECK(dnnl_primitive_execute(p->prim, stream, 3, args));
    DNNL_CHECK(dnnl_stream_wait(stream));
}

/* oneDNN's ISA values are sets of feature bits (avx2_vnni is numerically larger than
 * avx512_core_bf16 and has no bf16): test the bits. */
static bool isa_has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t want) { return (isa & want) == want; }

bool gemm_native_bf16(void) {
    return isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16);
}

/* With AMX tiles oneDNN's bf16 matmul is several times its sgemm. With AVX512_BF16 alone it is
 * not: on an Emerald Rapids VM without AMX (oneDNN 2.6.3, one thread, 256x2304x768) the matmul
 * primitive ran at ~80 GFLOP/s, packed weights or not, against ~150 for dnnl_sgemm, although
 * VDPBF16PS itself peaks at 1.6x the fp32 FMA rate there (280 vs 175 GFLOP/s). */
bool gemm_bf16_faster(void) {
    return isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_amx);
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "generic";
    }
}

const char *gemm_describe(void) {
    static char line[128];
    const dnnl_version_t *v = dnnl_version();
    snprintf(line, sizeof line, "oneDNN %d.%d.%d, ISA %s, %s threads", v->major, v->minor,
             v->patch, isa_name(dnnl_get_effective_cpu_isa()),
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "own");
    return line;
}

const char *gemm_slow_fallback(void) {
    static char message[200];
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
#if defined(__GNUC__)
    if (!isa_has(isa, dnnl_cpu_isa_avx2) && __builtin_cpu_supports("avx2")) {
        snprintf(message, sizeof message,
                 "oneDNN runs its '%s' kernels on a CPU with AVX2: is ONEDNN_MAX_CPU_ISA set in "
                 "the environment?", isa_name(isa));
        return message;
    }
#endif
    (void)isa;
    return NULL;
}

/* oneDNN's OpenMP runtime runs single-threaded inside a parallel region by itself. */
int gemm_serial_begin(void) { return 0; }
void gemm_serial_end(int previous) { (void)previous; }
