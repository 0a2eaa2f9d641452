/* bench_kset.h — the non-GEMM kernels that bench_ops times, as one table of function pointers
 * that does not depend on ops_t's layout: bench_kset.c fills it from an ops_t table by field
 * name, compiled once against this tree's kernels/ops.h (kset_new) and, for a comparison, once
 * against an older commit's (kset_base, see the Makefile's bench_ops_vs target). So the two
 * kernel sets run side by side in one process even when ops_t gained or moved entries between
 * the commits. A fused op the older table lacks is NULL (the bench then runs the unfused
 * composition). Matrix products and attention are not here: bench_ops takes them from ops_cpu().
 * Prototypes as in kernels/ops.h. */
#ifndef BENCH_KSET_H
#define BENCH_KSET_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/precision.h"

typedef struct {
    const char *name;
    void (*zero)(float *x, size_t n);
    void (*embed_forward)(float *out, const int *tokens, const float *wte, const float *wpe,
                          int B, int T, int C, int v_start, int v_count, bool add_pos);
    void (*embed_backward)(float *dwte, float *dwpe, const float *dout, const int *tokens,
                           int B, int T, int C, int v_start, int v_count, bool add_pos);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C, bool accumulate_dinp,
                               bool overwrite_dw);
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*add)(float *out, const float *a, const float *b, size_t n);
    void (*xent_row_max)(float *row_max, const float *logits, int N, int Vl, int v_valid);
    void (*xent_row_sumexp)(float *row_sumexp, const float *logits, const float *row_max,
                            int N, int Vl, int v_valid);
    void (*xent_target_logit)(float *target_logit, const float *logits, const int *targets,
                              int N, int Vl, int v_start);
    void (*xent_losses)(float *losses, const float *row_max, const float *row_sumexp,
                        const float *target_logit, int N);
    void (*xent_backward_inplace)(float *logits, const float *row_max, const float *row_sumexp,
                                  const int *targets, float dloss, int N, int Vl, int v_valid,
                                  int v_start);
    double (*sumsq)(const float *x, size_t n);
    void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale, int t);
    void (*scale)(float *x, float s, size_t n);
    void (*quantize)(float *x, size_t n, dtype_t t);
    void (*quantize_copy)(float *dst, const float *src, size_t n, dtype_t t);
    bool (*any_nonfinite)(const float *x, size_t n);
    /* fused ops (NULL where the table has none) */
    void (*residual_layernorm_forward)(float *res, float *out, float *mean, float *rstd,
                                       const float *a, const float *b, const float *w,
                                       const float *bias, int N, int C, dtype_t t);
} kset_t;

kset_t kset_new(void);  /* this tree's ops_cpu() */
kset_t kset_base(void); /* the older commit's (only in the bench_ops_vs build) */
#endif
