/* ops_cpu.c — the CPU backend's ops_t table, its memory ops (plain 64-byte aligned host memory),
 * the element-wise residual/scale ops, and the warning for a slow GEMM fallback.
 * Uses: core/alloc, kernels/cpu/ kernels. Used by: model/ through ops_cpu(). */
#include "kernels/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include <stdbool.h>
#include <string.h>

/* ---- memory: device memory is host memory on the CPU ---- */
static void *cpu_alloc(size_t bytes, int category) { return xmalloc_in(bytes, (mem_category_t)category); }
/* host memory: core/alloc.c's counters, which the planner's host limit covers */
static size_t cpu_memory_capacity(void) { return 0; }
static size_t cpu_memory_peak(int category) {
    return category >= 0 && category < MEM_CATEGORIES ? alloc_bytes_peak_in((mem_category_t)category)
                                                      : alloc_bytes_peak();
}
static void cpu_free(void *p) { xfree(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

/* x[n] = 0, split over the threads so first touch and bandwidth are spread over them. */
static void cpu_zero(float *x, size_t n) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        if (i1 > i0) memset(x + i0, 0, (i1 - i0) * sizeof *x);
    }
}

static void add_range(float *out, const float *a, const float *b, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) out[i] = a[i] + b[i];
}

/* out[n] = a[n] + b[n]; out may alias a (or b). */
static void cpu_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        add_range(out, a, b, i0, i1);
    }
}

static void scale_range(float *x, float s, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) x[i] *= s;
}

/* x[n] *= s */
static void cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        scale_range(x, s, i0, i1);
    }
}

/* Host memory is the CPU backend's own: nothing to lock. */
static void cpu_host_register(void *host, size_t bytes) { (void)host, (void)bytes; }
static void cpu_host_unregister(void *host) { (void)host; }

/* A known slow GEMM fallback (OpenBLAS without kernels for this CPU): said once per process. */
static void check_gemm_kernels(void) {
    const char *why = gemm_slow_fallback();
    if (why) warn_user("%s", why);
}

static const ops_t cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .memory_capacity = cpu_memory_capacity,
    .memory_peak = cpu_memory_peak,
    .zero = cpu_zero,
    .embed_forward = cpu_embed_forward,
    .embed_backward = cpu_embed_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_scratch_floats = cpu_attention_scratch_floats,
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
    .quantize = cpu_quantize,
    .quantize_copy = cpu_quantize_copy,
    .store_as = cpu_store_as,
    .load_as = cpu_load_as,
    .matmul_forward_w = cpu_matmul_forward_w,
    .matmul_backward_w = cpu_matmul_backward_w,
    .embed_forward_w = cpu_embed_forward_w,
    .any_nonfinite = cpu_any_nonfinite,
    .set_product_type = cpu_set_product_type,
    .products_native = cpu_products_native,
    .products_faster = cpu_products_faster,
    .describe = gemm_describe,
    .hardware_peak = cpu_hardware_peak,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .attention_gqa_forward = cpu_attention_gqa_forward,
    .attention_gqa_backward = cpu_attention_gqa_backward,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    .dropout_apply = cpu_dropout_apply,
    .attention_forward_dropout = cpu_attention_forward_dropout,
    .attention_backward_dropout = cpu_attention_backward_dropout,
    .attention_gqa_forward_dropout = cpu_attention_gqa_forward_dropout,
    .attention_gqa_backward_dropout = cpu_attention_gqa_backward_dropout,
    .attention_block_forward = cpu_attention_block_forward,
    .attention_block_finish = cpu_attention_block_finish,
    .attention_block_backward = cpu_attention_block_backward,
    .copy_rows = cpu_copy_rows,
    .xent_row_sum = cpu_xent_row_sum,
    .xent_losses_regularized = cpu_xent_losses_regularized,
    .xent_backward_regularized_inplace = cpu_xent_backward_regularized_inplace,
    .moe_noise_forward = cpu_moe_noise_forward,
    .moe_noise_backward = cpu_moe_noise_backward,
    .moe_softmax_topk = cpu_moe_softmax_topk,
    .moe_router_backward = cpu_moe_router_backward,
    .moe_gather_rows = cpu_moe_gather_rows,
    .moe_scatter_add_rows = cpu_moe_scatter_add_rows,
    .moe_combine_backward = cpu_moe_combine_backward,
};

const ops_t *ops_cpu(void) {
    static bool checked = false; /* warn once per process, not per call */
    if (!checked) check_gemm_kernels();
    checked = true;
    return &cpu_ops;
}
