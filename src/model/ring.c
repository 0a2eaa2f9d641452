/* ring.c — ring attention over the cp group (see ring.h).
 * Step s of the ring: this rank holds the K/V of rank src = rank - s (mod cp), chunks src and
 * 2 cp - 1 - src; each of its own query chunks sees a key chunk wholly (an earlier chunk), on
 * the diagonal (the same chunk: causal) or not at all (a later chunk). While it works on that
 * block it already sends it on to rank + 1 and receives the next from rank - 1. The order in
 * which a query row meets its keys differs from the one-process kernel's, so results agree to
 * fp32 rounding, not bit for bit.
 * Backward: the K/V blocks travel the same way; with each goes its dK/dV accumulator, which
 * every rank adds its queries' share to and passes on after the block's work (it cannot be
 * overlapped: the next rank adds to it); after cp steps and one more hop it is back home. */
#include "model/ring.h"
#include "core/error.h"

enum { TAG_KV = 31, TAG_DKV = 32 };

size_t ring_floats(int B, int T, int NH, int NKV, int hs) {
    const size_t kv = (size_t)B * T * 2 * NKV * hs;
    return 4 * kv + (size_t)B * NH * T;
}

void ring_bind(ring_t *r, float *mem, int B, int T, int NH, int NKV, int hs) {
    const size_t kv = (size_t)B * T * 2 * NKV * hs;
    (void)NH;
    for (int i = 0; i < 2; i++) {
        r->kv[i] = mem + i * kv;
        r->dkv[i] = mem + (2 + i) * kv;
    }
    r->l = mem + 4 * kv;
}

/* Chunk index (0 .. 2 cp - 1) of local half h (0: rows [0, c), 1: [c, 2c)) on rank `rank`. */
static int chunk_of(const ring_t *r, int rank, int h) { return h ? 2 * r->cp - 1 - rank : rank; }

/* The block of local query half qh against half kh of the K/V block kv (of rank src): false
 * when that key chunk comes after the query chunk (nothing to do). */
static bool block_at(const ring_t *r, const ring_layout_t *L, int src, int qh, int kh,
                     const float *kv, attn_block_t *b) {
    const int qc = chunk_of(r, r->rank, qh), kc = chunk_of(r, src, kh);
    if (kc > qc) return false;
    const int c = L->T / 2, W = L->NKV * L->hs, ldo = L->NH * L->hs;
    *b = (attn_block_t){.q = L->q + (size_t)qh * c * L->ldq, .k = kv + (size_t)kh * c * 2 * W,
                        .v = kv + (size_t)kh * c * 2 * W + W, .B = L->B, .NH = L->NH,
                        .NKV = L->NKV, .hs = L->hs, .rows = c, .ldq = L->ldq, .ldkv = 2 * W,
                        .ldo = ldo, .stat_ld = L->T, .bq = (size_t)L->T * L->ldq,
                        .bkv = (size_t)L->T * 2 * W, .bo = (size_t)L->T * ldo, .diag = kc == qc,
                        .drop = L->drop, .q_pos = (uint64_t)qc * c, .k_pos = (uint64_t)kc * c,
                        .seq = (uint64_t)L->T * r->cp};
    return true;
}

/* k | v of the layout packed into dst [B T, 2 W]. */
static void pack_kv(const ops_t *o, const ring_layout_t *L, float *dst) {
    const int W = L->NKV * L->hs;
    const size_t rows = (size_t)L->B * L->T;
    o->copy_rows(dst, 2 * W, L->k, L->ldkv, rows, W, false);
    o->copy_rows(dst + W, 2 * W, L->v, L->ldkv, rows, W, false);
}

void ring_attention_forward(const ring_t *r, const ops_t *o, const ring_layout_t *L, float *out,
                            float *lse, float *scratch, size_t scratch_floats) {
    const size_t n = (size_t)L->B * L->T * 2 * L->NKV * L->hs, c = (size_t)L->T / 2;
    const int next = (r->rank + 1) % r->cp, prev = (r->rank + r->cp - 1) % r->cp;
    o->zero(out, (size_t)L->B * L->T * L->NH * L->hs);
    o->zero(r->l, (size_t)L->B * L->NH * L->T);
    pack_kv(o, L, r->kv[0]);
    for (int s = 0, cur = 0; s < r->cp; s++, cur ^= 1) {
        comm_req_t send = COMM_REQ_NULL, recv = COMM_REQ_NULL;
        if (s < r->cp - 1) {
            comm_irecv(r->kv[cur ^ 1], n, prev, TAG_KV, r->group, &recv);
            comm_isend(r->kv[cur], n, next, TAG_KV, r->group, COMM_CP, &send);
        }
        const int src = (r->rank - s + r->cp) % r->cp;
        for (int qh = 0; qh < 2; qh++)
            for (int kh = 0; kh < 2; kh++) {
                attn_block_t b;
                if (!block_at(r, L, src, qh, kh, r->kv[cur], &b)) continue;
                b.out = out + qh * c * (size_t)b.ldo;
                b.m = lse + qh * c;
                b.l = r->l + qh * c;
                o->attention_block_forward(&b, scratch, scratch_floats);
            }
        comm_wait(&send, COMM_CP);
        comm_wait(&recv, COMM_CP);
    }
    o->attention_block_finish(out, lse, r->l, L->B, L->T, L->NH, L->hs);
}

void ring_attention_backward(const ring_t *r, const ops_t *o, const ring_layout_t *L,
                             const float *dout, const float *out, const float *lse,
                             float *scratch, size_t scratch_floats) {
    const int W = L->NKV * L->hs;
    const size_t n = (size_t)L->B * L->T * 2 * W, c = (size_t)L->T / 2;
    const int next = (r->rank + 1) % r->cp, prev = (r->rank + r->cp - 1) % r->cp;
    pack_kv(o, L, r->kv[0]);
    o->zero(r->dkv[0], n);
    int cur = 0;
    for (int s = 0; s < r->cp; s++, cur ^= 1) {
        comm_req_t req[4] = {COMM_REQ_NULL, COMM_REQ_NULL, COMM_REQ_NULL, COMM_REQ_NULL};
        if (s < r->cp - 1) {
            comm_irecv(r->kv[cur ^ 1], n, prev, TAG_KV, r->group, &req[0]);
            comm_isend(r->kv[cur], n, next, TAG_KV, r->group, COMM_CP, &req[1]);
        }
        const int src = (r->rank - s + r->cp) % r->cp;
        for (int qh = 0; qh < 2; qh++)
            for (int kh = 0; kh < 2; kh++) {
                attn_block_t b;
                if (!block_at(r, L, src, qh, kh, r->kv[cur], &b)) continue;
                const size_t koff = (size_t)kh * c * 2 * W;
                b.dq = L->dq + qh * c * (size_t)L->ldq;
                b.dk = r->dkv[cur] + koff;
                b.dv = r->dkv[cur] + koff + W;
                b.out = (float *)out + qh * c * (size_t)b.ldo;
                b.dout = dout + qh * c * (size_t)b.ldo;
                b.lse = lse + qh * c;
                o->attention_block_backward(&b, scratch, scratch_floats);
            }
        comm_irecv(r->dkv[cur ^ 1], n, prev, TAG_DKV, r->group, &req[2]);
        comm_isend(r->dkv[cur], n, next, TAG_DKV, r->group, COMM_CP, &req[3]);
        for (int i = 0; i < 4; i++) comm_wait(&req[i], COMM_CP);
    }
    /* after cp steps and the last hop, dkv[cur] is this rank's own accumulator */
    const size_t rows = (size_t)L->B * L->T;
    o->copy_rows(L->dk, L->ldkv, r->dkv[cur], 2 * W, rows, W, false);
    o->copy_rows(L->dv, L->ldkv, r->dkv[cur] + W, 2 * W, rows, W, false);
}
