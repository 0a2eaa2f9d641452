/* ops_cuda.cu — the CUDA backend's ops_t table (ops_cuda()), its memory ops (device memory from
 * cudaMalloc, counted per category), the copies between host and device, and what the backend
 * says about itself (describe: runtime, GPU, cuBLASLt; hardware_peak: the device's dense rate).
 * The kernels themselves are in the other files of this folder (cuda_kernels.h lists them).
 * Uses: the CUDA runtime, cuBLASLt (version), kernels/cuda/device_plan.h (the rate table),
 * core/alloc.h (category names). Used by: main.c (device = 'cuda'), validation/gpu/. */
#include "core/alloc.h"
#include "core/error.h"
#include "core/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/device_plan.h"
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
/* Whether fp32 products run on TF32 tensor cores (&train key, kernels/cuda/matmul.cu): decides
 * which fp32 rate hardware_peak reports. The header comes with the matmul kernels; a tree
 * without them yet compiles this file with TF32 taken as off. */
#if __has_include("kernels/cuda/cuda_matmul.h")
#include "kernels/cuda/cuda_matmul.h"
#define LLMT_TF32_ALLOWED() llmt_cuda_allow_tf32
#else
#define LLMT_TF32_ALLOWED() false
#endif

/* ---- memory ----
 * core/alloc.c counts host blocks through a prefix in the block itself, which device memory
 * cannot carry (and its totals are the host's, compared with the RSS), so device bytes are
 * counted here, per category, from a host-side record of each live block. Allocation happens at
 * setup only (ops.h: none inside an op), so a linear list is enough. */
typedef struct device_block {
    void *p;
    size_t bytes;
    int category;
} device_block_t;
static device_block_t *blocks = NULL;
static size_t n_blocks = 0, cap_blocks = 0;
static mem_tally_t tally; /* the live blocks' bytes per category (core/alloc.h) */

static void remember_block(void *p, size_t bytes, int category) {
    if (n_blocks == cap_blocks) {
        cap_blocks = cap_blocks ? 2 * cap_blocks : 256;
        blocks = (device_block_t *)xrealloc_small(blocks, cap_blocks * sizeof *blocks);
    }
    blocks[n_blocks++] = device_block_t{p, bytes, category};
    mem_tally_add(&tally, category, bytes);
}

static void forget_block(void *p) {
    for (size_t i = 0; i < n_blocks; i++) {
        if (blocks[i].p != p) continue;
        mem_tally_sub(&tally, blocks[i].category, blocks[i].bytes);
        blocks[i] = blocks[--n_blocks];
        return;
    }
    die_call(__FILE__, __LINE__, "cuda_free", "pointer not allocated by cuda_alloc");
}

/* ops.h memory_peak: a category's high-water mark, or the total's (MEM_CATEGORIES) */
static size_t cuda_memory_peak(int category) { return mem_tally_peak(&tally, category); }

/* ops.h memory_capacity: what the tracked buffers may take: the device's free memory at the first
 * call (the context exists: cuda_device_open made it) and what they already hold, less a
 * reserve for the buffers the libraries and this backend keep outside the plan (cuBLASLt's
 * 32 MiB workspace, the 16-bit operand copies of bf16 products, NCCL's channels): 5% of the
 * device, at least 1 GiB. */
static size_t cuda_memory_capacity(void) {
    static size_t capacity;
    if (!capacity) {
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        const size_t reserve = total_b / 20 > ((size_t)1 << 30) ? total_b / 20 : (size_t)1 << 30;
        const size_t usable = free_b + mem_tally_now(&tally, MEM_CATEGORIES);
        capacity = usable > reserve ? usable - reserve : 1;
    }
    return capacity;
}

/* bytes of device memory (256-byte aligned, cudaMalloc's), counted under `category`; dies with
 * the sizes when the GPU has no room. */
void *cuda_alloc(size_t bytes, int category) {
    if (category < 0 || category >= MEM_CATEGORIES) category = MEM_WORKSPACE;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError(); /* clear the error before asking again */
        (void)cudaMemGetInfo(&free_b, &total_b);
        char need[32], avail[32], msg[256];
        format_bytes((double)bytes, need);
        format_bytes((double)free_b, avail);
        snprintf(msg, sizeof msg, "%s: %s for %s, %s free on GPU %d", cudaGetErrorString(e), need,
                 mem_category_name((mem_category_t)category), avail, cuda_device_index());
        die_call(__FILE__, __LINE__, "cudaMalloc", msg);
    }
    remember_block(p, bytes, category);
    return p;
}

void cuda_free(void *p) {
    if (!p) return;
    forget_block(p);
    CUDA_CHECK(cudaFree(p));
}

/* Synchronous copies on the default stream: they wait for the ops before them. */
void cuda_to_device(void *dst, const void *src_host, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src_host, bytes, cudaMemcpyHostToDevice));
}

void cuda_to_host(void *dst_host, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDeviceToHost));
}

/* Page-locked host memory: DMA straight from it, no staging copy inside the driver. */
static void cuda_host_register(void *host, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaHostRegister(host, bytes, cudaHostRegisterDefault));
}
static void cuda_host_unregister(void *host) { CUDA_CHECK(cudaHostUnregister(host)); }

/* ---- about the backend ---- */
static void version_text(int v, char out[16]) { snprintf(out, 16, "%d.%d", v / 1000, (v % 1000) / 10); }

/* "CUDA 13.0 (driver 13.0), NVIDIA H200, cc 9.0, 132 SMs, cuBLASLt 13.1.0" */
const char *cuda_describe(void) {
    static char line[512];
    int dev = 0, rt = 0, drv = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    CUDA_CHECK(cudaDriverGetVersion(&drv));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    const size_t lt = cublasLtGetVersion(); /* major * 10000 + minor * 100 + patch */
    char rts[16], drvs[16];
    version_text(rt, rts);
    version_text(drv, drvs);
    snprintf(line, sizeof line, "CUDA %s (driver %s), %s, cc %d.%d, %d SMs, cuBLASLt %zu.%zu.%zu", rts,
             drvs, p.name, p.major, p.minor, p.multiProcessorCount, lt / 10000, lt / 100 % 100, lt % 100);
    return line;
}

/* Dense peak of products of type t on the current device, from its properties and the rate
 * table of device_plan.c (how[len] shows the product). */
double cuda_hardware_peak(dtype_t t, char *how, size_t len) {
    int dev = 0, clock_khz = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    return cuda_plan_peak(p.major, p.minor, p.multiProcessorCount, clock_khz, t, LLMT_TF32_ALLOWED(),
                          how, len);
}

/* ---- the table ---- */
static ops_t make_table(void) {
    ops_t t = {};
    t.name = "cuda";
    t.alloc = cuda_alloc;
    t.free = cuda_free;
    t.to_device = cuda_to_device;
    t.to_host = cuda_to_host;
    t.host_register = cuda_host_register;
    t.host_unregister = cuda_host_unregister;
    t.memory_capacity = cuda_memory_capacity;
    t.memory_peak = cuda_memory_peak;
    t.zero = cuda_zero;
    t.embed_forward = cuda_embed_forward;
    t.embed_backward = cuda_embed_backward;
    t.layernorm_forward = cuda_layernorm_forward;
    t.layernorm_backward = cuda_layernorm_backward;
    t.matmul_forward = cuda_matmul_forward;
    t.matmul_backward = cuda_matmul_backward;
    t.attention_scratch_floats = cuda_attention_scratch_floats;
    t.attention_forward = cuda_attention_forward;
    t.attention_backward = cuda_attention_backward;
    t.gelu_forward = cuda_gelu_forward;
    t.gelu_backward = cuda_gelu_backward;
    t.add = cuda_add;
    t.xent_row_max = cuda_xent_row_max;
    t.xent_row_sumexp = cuda_xent_row_sumexp;
    t.xent_target_logit = cuda_xent_target_logit;
    t.xent_losses = cuda_xent_losses;
    t.xent_backward_inplace = cuda_xent_backward_inplace;
    t.sumsq = cuda_sumsq;
    t.adamw_update = cuda_adamw_update;
    t.scale = cuda_scale;
    t.quantize = cuda_quantize;
    t.quantize_copy = cuda_quantize_copy;
    t.store_as = cuda_store_as;
    t.load_as = cuda_load_as;
    t.matmul_forward_w = cuda_matmul_forward_w;
    t.matmul_backward_w = cuda_matmul_backward_w;
    t.embed_forward_w = cuda_embed_forward_w;
    t.any_nonfinite = cuda_any_nonfinite;
    t.set_product_type = cuda_set_product_type;
    t.products_native = cuda_products_native;
    t.products_faster = cuda_products_faster;
    t.describe = cuda_describe;
    t.hardware_peak = cuda_hardware_peak;
    t.rmsnorm_forward = cuda_rmsnorm_forward;
    t.rmsnorm_backward = cuda_rmsnorm_backward;
    t.rope_forward = cuda_rope_forward;
    t.rope_backward = cuda_rope_backward;
    t.swiglu_forward = cuda_swiglu_forward;
    t.swiglu_backward = cuda_swiglu_backward;
    t.attention_gqa_forward = cuda_attention_gqa_forward;
    t.attention_gqa_backward = cuda_attention_gqa_backward;
    t.residual_layernorm_forward = cuda_residual_layernorm_forward;
    t.dropout_apply = cuda_dropout_apply;
    t.attention_forward_dropout = cuda_attention_forward_dropout;
    t.attention_backward_dropout = cuda_attention_backward_dropout;
    t.attention_gqa_forward_dropout = cuda_attention_gqa_forward_dropout;
    t.attention_gqa_backward_dropout = cuda_attention_gqa_backward_dropout;
    t.xent_row_sum = cuda_xent_row_sum;
    t.xent_losses_regularized = cuda_xent_losses_regularized;
    t.xent_backward_regularized_inplace = cuda_xent_backward_regularized_inplace;
    t.moe_noise_forward = cuda_moe_noise_forward;
    t.moe_noise_backward = cuda_moe_noise_backward;
    t.moe_softmax_topk = cuda_moe_softmax_topk;
    t.moe_router_backward = cuda_moe_router_backward;
    t.moe_gather_rows = cuda_moe_gather_rows;
    t.moe_scatter_add_rows = cuda_moe_scatter_add_rows;
    t.moe_combine_backward = cuda_moe_combine_backward;
    return t;
}

extern "C" const ops_t *ops_cuda(void) {
    static const ops_t table = make_table();
    return &table;
}
