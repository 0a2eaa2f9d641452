/* gemm_cblas.c — gemm.h on any CBLAS (OpenBLAS, MKL, BLIS: Makefile.inc's BLAS_CFLAGS/BLAS_LIBS).
 * There is no bf16 product in CBLAS (gemm_native_bf16() is false): with precision = 'bf16' the
 * kernels multiply the bf16 values in fp32 — the same products, exactly; only the order of the
 * fp32 additions may differ from a bf16 kernel.
 * Uses: CBLAS. Used by: src/kernels/cpu/ through gemm.h. */
#include "kernels/cpu/gemm.h"
#include "core/error.h"
#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

void gemm_f32(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans(ta), trans(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Never called: gemm_native_bf16() is false, so the CPU kernels multiply the bf16 values in fp32. */
void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
               const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
    (void)ldb, (void)beta, (void)C, (void)ldc;
    ASSERT(!"gemm_bf16 without a bf16 GEMM library");
}

bool gemm_native_bf16(void) { return false; }
bool gemm_bf16_faster(void) { return false; }

/* OPENBLAS_VERSION is " OpenBLAS 0.3.21 ": without the spaces */
static void openblas_version(char *out, size_t size) {
#if defined(OPENBLAS_VERSION)
    const char *v = OPENBLAS_VERSION;
    v += strspn(v, " ");
    int len = (int)strlen(v);
    while (len > 0 && v[len - 1] == ' ') len--;
    snprintf(out, size, "%.*s", len, v);
#else
    snprintf(out, size, "CBLAS");
#endif
}

const char *gemm_describe(void) {
    static char line[128];
    char version[64];
    openblas_version(version, sizeof version);
#if defined(OPENBLAS_VERSION)
    snprintf(line, sizeof line, "%s, core %s, %s threads", version, openblas_get_corename(),
             openblas_get_parallel() == 1 ? "pthread" : openblas_get_parallel() == 2 ? "OpenMP" : "no");
#else
    snprintf(line, sizeof line, "%s (Makefile.inc BLAS_LIBS)", version);
#endif
    return line;
}

/* OpenBLAS with DYNAMIC_ARCH picks its kernels from the CPU model at load time; versions older
 * than the CPU (0.3.21 on Emerald Rapids, model 207) fall back to the Prescott (SSE3) kernels and
 * sgemm runs ~6x slower. The choice is made before main, so all we can do is say how to fix it. */
const char *gemm_slow_fallback(void) {
#if defined(OPENBLAS_VERSION) && defined(__GNUC__)
    static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Nehalem", "Katmai",
                                          "Coppermine", "Northwood", "Banias", "Atom"};
    static char message[320];
    const char *core = openblas_get_corename();
    bool is_generic = false;
    for (size_t i = 0; core && i < sizeof generic / sizeof *generic; i++)
        is_generic |= strcasecmp(core, generic[i]) == 0;
    if (!is_generic || !__builtin_cpu_supports("avx2")) return NULL;
    char version[64];
    openblas_version(version, sizeof version);
    snprintf(message, sizeof message,
             "%s does not know this CPU and uses its '%s' kernels (matrix products several times "
             "slower): set OPENBLAS_CORETYPE=%s in the environment of every rank, or build with "
             "GEMM = onednn (Makefile.inc)",
             version, core, __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
    return message;
#else
    return NULL;
#endif
}

/* OpenBLAS built with pthreads (Debian's default) does not notice that it is called from inside
 * an OpenMP parallel region: a large enough sgemm would start its own threads on top of ours. */
int gemm_serial_begin(void) {
#if defined(OPENBLAS_VERSION)
    /* openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP. Only the pthread build needs
     * (and tolerates) this: the OpenMP build's setter would change omp_set_num_threads. */
    if (openblas_get_parallel() == 1) {
        int previous = openblas_get_num_threads();
        if (previous > 1) {
            openblas_set_num_threads(1);
            return previous;
        }
    }
#endif
    return 0;
}

void gemm_serial_end(int previous) {
#if defined(OPENBLAS_VERSION)
    if (previous > 1) openblas_set_num_threads(previous);
#else
    (void)previous;
#endif
}
