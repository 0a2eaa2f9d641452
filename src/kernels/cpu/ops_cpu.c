/* ops_cpu.c — the CPU backend's ops_t table, its memory ops (plain 64-byte aligned host memory),
 * the element-wise residual/scale ops, and the BLAS threading guard.
 * Uses: core/alloc, kernels/cpu/ kernels. Used by: model/ through ops_cpu(). */
#include "kernels/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include <cblas.h>
#include <string.h>

/* ---- memory: device memory is host memory on the CPU ---- */
static void *cpu_alloc(size_t bytes) { return xmalloc(bytes); }
static void cpu_free(void *p) { xfree(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

/* x[n] = 0, in parallel chunks so first touch and bandwidth are spread over the threads. */
static void cpu_zero(float *x, size_t n) {
    const size_t chunk = 1 << 16;
    const long n_chunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (long c = 0; c < n_chunks; c++) {
        size_t i0 = (size_t)c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        memset(x + i0, 0, len * sizeof *x);
    }
}

/* out[n] = a[n] + b[n]; out may alias a (or b). */
static void cpu_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* x[n] *= s */
static void cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* ---- BLAS threading guard (see cpu_kernels.h) ---- */
int cpu_blas_serial_begin(void) {
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

void cpu_blas_serial_end(int previous) {
#if defined(OPENBLAS_VERSION)
    if (previous > 1) openblas_set_num_threads(previous);
#else
    (void)previous;
#endif
}

static const ops_t cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .zero = cpu_zero,
    .embed_forward = cpu_embed_forward,
    .embed_backward = cpu_embed_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .add = cpu_add,
    .xent_row_max = cpu_xent_row_max,
    .xent_row_sumexp = cpu_xent_row_sumexp,
    .xent_target_logit = cpu_xent_target_logit,
    .xent_losses = cpu_xent_losses,
    .xent_backward_inplace = cpu_xent_backward_inplace,
    .sumsq = cpu_sumsq,
    .adamw_update = cpu_adamw_update,
    .scale = cpu_scale,
};

const ops_t *ops_cpu(void) { return &cpu_ops; }
