/* gemm_onednn.c — gemm.h on oneDNN (Makefile.inc GEMM = onednn): fp32 products with dnnl_sgemm
 * (oneDNN picks its kernels from CPUID, whatever OPENBLAS_CORETYPE says), bf16 products with the
 * matmul primitive.
 * Uses: oneDNN. Used by: src/kernels/cpu/ through gemm.h. */
#include "kernels/cpu/gemm.h"
#include "core/error.h"
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <stdio.h>

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

void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
    gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool gemm_native_bf16(void) { return false; }

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
    if (isa < dnnl_cpu_isa_avx2 && __builtin_cpu_supports("avx2")) {
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
