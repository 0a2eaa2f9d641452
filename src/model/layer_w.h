/* layer_w.h — the views of one block's tensors inside a flat buffer (parameters or gradients):
 * a type of its own so that the block's parts (model/gpt.c, model/moe.c) share it without
 * including each other; gpt_weight_at, a view into a 16-bit weights copy.
 * Owns: gpt_layer_w_t. Uses: kernels/precision.h. Used by: model/gpt.h, model/moe.c. */
#ifndef LLMT_LAYER_W_H
#define LLMT_LAYER_W_H
#include <stddef.h>
#include "kernels/precision.h"

/* Pointers to one block's tensors inside a flat buffer (parameters or gradients). */
typedef struct gpt_layer_w {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *mprojw, *mprojb;
    /* separate q, k, v (fused qkv NULL); SwiGLU's gate (fc is its up); NULL where absent (no
     * bias, RMSNorm's b) */
    float *qw, *qb, *kw, *kb, *vw, *vb, *gatew, *gateb;
    /* an MoE block (model/moe.h; the dense MLP's views NULL): router (and its hidden layer,
     * noise projection), experts' input (fc, or SwiGLU's gate), up, proj as [El, ...] local
     * tensors, and the shared experts' */
    float *r_fcw, *routerw, *noisew;
    float *e_inw, *e_inb, *e_upw, *e_upb, *e_projw, *e_projb;
    float *s_inw, *s_inb, *s_upw, *s_upb, *s_projw, *s_projb;
} gpt_layer_w_t;

/* A weight view advanced by `elems` elements of its storage type t (gpt_t wtype). */
static inline float *gpt_weight_at(const void *w, dtype_t t, size_t elems) {
    return (float *)((const char *)w + elems * dtype_bytes(t));
}
#endif
