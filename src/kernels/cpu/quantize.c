/* quantize.c — low-precision stores emulated in fp32 (see kernels/precision.h): round in place,
 * or round while copying (the weights copy of the master weights); and the overflow check of
 * loss scaling. Element-wise, split over the OpenMP threads. */
#include <math.h>
#include "kernels/cpu/cpu_kernels.h"

void cpu_quantize(float *x, size_t n, dtype_t t) {
    if (t == DT_FP32) return;
#pragma omp parallel
    {
        size_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        if (t == DT_BF16)
            for (size_t i = lo; i < hi; i++) x[i] = round_bf16(x[i]);
        else
            for (size_t i = lo; i < hi; i++) x[i] = round_fp16(x[i]);
    }
}

void cpu_quantize_copy(float *dst, const float *src, size_t n, dtype_t t) {
#pragma omp parallel
    {
        size_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        if (t == DT_BF16)
            for (size_t i = lo; i < hi; i++) dst[i] = round_bf16(src[i]);
        else if (t == DT_FP16)
            for (size_t i = lo; i < hi; i++) dst[i] = round_fp16(src[i]);
        else
            memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
    }
}

bool cpu_any_nonfinite(const float *x, size_t n) {
    int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    return bad != 0;
}
