/* gelu.c — GELU with the tanh approximation, forward and backward, element-wise.
 * Uses the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) =: s, so both directions need one
 * (vectorised) exp and no tanhf call, and 1 - tanh(u)^2 = 4 s (1 - s) = 4 e s^2 with e = exp(-2u):
 * e s^2 = (e s) s, where e s = e / (1 + e) is taken as e * s while s >= 1/2 (accurate where s is
 * close to 1) and as 1 - s below (exact there, and right when e overflows to +Inf for x < -10,
 * where e * s would be Inf * 0). Uses: cpu_expf. */
#include "kernels/cpu/cpu_kernels.h"

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

static void gelu_forward_range(float *out, const float *inp, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        const float x = inp[i];
        const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        out[i] = x / (1.0f + cpu_expf(-2.0f * u));
    }
}

/* gelu_forward: out[n] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) = x * s */
void cpu_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        gelu_forward_range(out, inp, i0, i1);
    }
}

static void gelu_backward_range(float *dinp, const float *inp, const float *dout, size_t i0,
                                size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        const float x = inp[i];
        const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
        const float e = cpu_expf(-2.0f * u);
        const float s = 1.0f / (1.0f + e);
        const float es = s < 0.5f ? 1.0f - s : e * s; /* e / (1 + e), also for e = +Inf */
        const float es2 = es * s;
        dinp[i] = dout[i] * (s + 2.0f * x * du * es2);
    }
}

/* gelu_backward: dinp[n] = dout * (s + 0.5 x (1 - tanh^2(u)) u') with u' = sqrt(2/pi)(1 + 3 k x^2)
 *                        = dout * (s + 2 x e s^2 u');  dinp may alias dout. */
void cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel if (n > CPU_PAR_MIN)
    {
        size_t i0, i1;
        cpu_thread_range(n, &i0, &i1);
        gelu_backward_range(dinp, inp, dout, i0, i1);
    }
}
