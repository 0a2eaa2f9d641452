/* ring.h — context parallelism's attention (&parallel cp): ring attention over the cp group.
 * Each sequence of T tokens is cut into 2 cp chunks of c = T / (2 cp) tokens; cp rank i holds
 * chunks i and 2 cp - 1 - i (rows [0, c) and [c, 2c) of its T / cp local rows), so every rank
 * has the same causal work. Everything but attention is token-local and runs on the local rows;
 * attention passes each rank's K and V around the cp ring (rank i sends to i + 1), every rank
 * running the online softmax of its queries over each K/V block it holds (ops.h
 * attention_block_forward), the transfer of the next block overlapped with the current block's
 * work (non-blocking send and receive). Backward passes K/V around again with a dK/dV
 * accumulator that travels with them and comes home after one more hop.
 * Owns: the ring's buffers (two K/V blocks, two dK/dV accumulators, the running sums).
 * Uses: kernels/ops.h, parallel/comm.h, core/. Used by: model/gpt.c; ring_keep_local by train/
 * (a batch cut to this rank's chunks). */
#ifndef LLMT_RING_H
#define LLMT_RING_H
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include "kernels/ops.h"
#include "parallel/comm.h"

typedef struct ring {
    int cp, rank;                 /* the ring's size and this rank's place */
    const comm_group_t *group;
    float *kv[2], *dkv[2];        /* [B, T, 2 NKV hs] each: a rank's k | v rows, their gradient */
    float *l;                     /* [B, NH, T] the online softmax's running sums */
} ring_t;

/* Where one call's tensors live: q [B, T, NH hs] rows of stride ldq, k, v [B, T, NKV hs] of
 * stride ldkv (views into a fused qkv, or separate tensors); the gradients alike (backward);
 * the attention dropout's mask (NULL: none), row0 the global token of batch row 0's position 0
 * (model/regularize.c gpt_attn_mask), drawn by the blocks at the chunks' global positions. */
typedef struct ring_layout {
    const float *q, *k, *v;
    float *dq, *dk, *dv;
    int ldq, ldkv, B, T, NH, NKV, hs;
    const dropout_mask_t *drop;
} ring_layout_t;

/* The global position of local row t (of T local rows) on cp rank `rank`. */
static inline int ring_position(int t, int T, int cp, int rank) {
    const int c = T / 2;
    return t < c ? rank * c + t : (2 * cp - 1 - rank) * c + (t - c);
}
/* n sequences of T tokens in x, each cut into 2 cp chunks, compacted in place to cp rank
 * `rank`'s two chunks (T / cp tokens a sequence); nothing when cp = 1. Every destination lies
 * at or before its source and the sources rise with the destinations, so nothing is
 * overwritten before it is read. */
static inline void ring_keep_local(int *x, int n, int T, int cp, int rank) {
    if (cp == 1) return;
    const int Tl = T / cp, c = Tl / 2;
    for (int s = 0; s < n; s++)
        for (int h = 0; h < 2; h++)
            memmove(x + (size_t)s * Tl + (size_t)h * c,
                    x + (size_t)s * T + ring_position(h * c, Tl, cp, rank), sizeof(int) * (size_t)c);
}
/* The floats of the buffers ring_t holds for B x T local rows. */
size_t ring_floats(int B, int T, int NH, int NKV, int hs);
/* Point the buffers into `mem` (ring_floats of them). */
void ring_bind(ring_t *r, float *mem, int B, int T, int NH, int NKV, int hs);
/* out[B, T, NH hs] = causal attention of the local queries over the whole sequence's keys;
 * lse[B, NH, T] as attention_forward's. */
void ring_attention_forward(const ring_t *r, const ops_t *o, const ring_layout_t *L, float *out,
                            float *lse, float *scratch, size_t scratch_floats);
/* dq += (zero it first), dk, dv overwritten, from dout and the forward's out and lse. */
void ring_attention_backward(const ring_t *r, const ops_t *o, const ring_layout_t *L,
                             const float *dout, const float *out, const float *lse,
                             float *scratch, size_t scratch_floats);
#endif
