/* ops_rate.c — timing a backend's matrix products (see ops_rate.h). */
#include "kernels/ops_rate.h"
#include <stddef.h>
#include "core/alloc.h"
#include "core/timer.h"

double ops_gemm_rate(const ops_t *ops, int N, int C, int OC) {
    float *a = ops->alloc((size_t)N * C * sizeof(float), MEM_WORKSPACE);
    float *b = ops->alloc((size_t)OC * C * sizeof(float), MEM_WORKSPACE);
    float *c = ops->alloc((size_t)N * OC * sizeof(float), MEM_WORKSPACE);
    ops->zero(a, (size_t)N * C);
    ops->zero(b, (size_t)OC * C);
    double best = 1e30;
    for (int i = 0; i < 4; i++) {
        double t0 = now_sec();
        ops->matmul_forward(c, a, b, NULL, N, C, OC);
        double dt = now_sec() - t0;
        if (i > 0 && dt < best) best = dt;
    }
    ops->free(a);
    ops->free(b);
    ops->free(c);
    return 2.0 * N * (double)C * OC / best;
}

double ops_best_gemm_rate(const ops_t *ops, int rows, int C, int F) {
    double square = ops_gemm_rate(ops, 1024, 1024, 1024);
    double mlp = ops_gemm_rate(ops, rows, C, F);
    return square > mlp ? square : mlp;
}
