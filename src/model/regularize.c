/* regularize.c — dropout masks, label smoothing and z-loss of the GPT model (declared in gpt_regular.h: part of the gpt module, on gpt_t). */
#include "model/gpt_regular.h"
#include <math.h>
#include "core/error.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/ring.h"
#include "parallel/comm.h"

void gpt_reg_setup(gpt_t *m, const model_spec_t *spec) {
    gpt_regular_t *r = &m->reg;
    r->attn_p = (float)spec->attn_dropout;
    r->resid_p = (float)spec->resid_dropout;
    r->embd_p = (float)spec->embd_dropout;
    r->label_smoothing = (float)spec->label_smoothing;
    r->z_loss = (float)spec->z_loss;
    r->seed = (uint64_t)spec->seed;
    if (!m->has_head || (r->label_smoothing == 0 && r->z_loss == 0)) return;
    /* two [N] rows next to the head's row_max and row_sumexp, counted as the model's workspace */
    const size_t bytes = (size_t)m->B * m->T * sizeof(float);
    m->planned[MEM_WORKSPACE] += 2.0 * (double)bytes;
    m->head_bytes += 2 * bytes;
    if (m->dry_run) return;
    r->row_sum = m->ops->alloc(bytes, MEM_WORKSPACE);
    r->zloss = m->ops->alloc(bytes, MEM_WORKSPACE);
}

void gpt_reg_free(gpt_t *m) {
    if (m->reg.row_sum) m->ops->free(m->reg.row_sum);
    if (m->reg.zloss) m->ops->free(m->reg.zloss);
    m->reg.row_sum = m->reg.zloss = NULL;
}

void gpt_train_pass(gpt_t *m, int64_t step, uint64_t sample_base) {
    m->reg.training = true;
    m->reg.step = step;
    m->reg.sample_base = sample_base;
    m->reg.z_loss_sum = 0.0;
}

void gpt_eval_pass(gpt_t *m) { m->reg.training = false; }

/* The mask of (site, layer) in this pass: key from (seed, site, layer, step); row0 the global
 * token of the current micro-batch's first row (T: the rank's tokens of a sequence, T x cp the
 * sequence's). */
static dropout_mask_t mask_for(const gpt_t *m, int site, int layer, float p, int B, int T) {
    const gpt_regular_t *r = &m->reg;
    const uint64_t stream = (uint64_t)site << 56 | (uint64_t)(layer & 0xffff) << 40 |
                            ((uint64_t)r->step & ((1ull << 40) - 1));
    const philox_key_t key = rng_key(r->seed, stream);
    const uint64_t sample0 = r->sample_base + (uint64_t)r->micro * (uint64_t)B;
    dropout_mask_t mk = {{key.v[0], key.v[1]}, (uint32_t)ldexp((double)p, 32),
                         (float)(1.0 / (1.0 - (double)p)), sample0 * (uint64_t)T * (uint64_t)m->ring.cp, 0, 0};
    return mk;
}

const float *gpt_dropout(gpt_t *m, int site, int layer, int B, int T, float *out,
                         const float *in) {
    const float p = site == REG_EMBD ? m->reg.embd_p : m->reg.resid_p;
    if (!m->reg.training || p <= 0) return in;
    dropout_mask_t mk = mask_for(m, site, layer, p, B, T);
    size_t lo = 0, hi = (size_t)B * T; /* this rank's rows of the B x T local rows */
    if (m->sp) { /* the residual stream's rows of this tp rank (gpt.h sp), keyed globally */
        const size_t rows = hi / (size_t)m->par.tp;
        lo = (size_t)m->par.tp_rank * rows, hi = lo + rows;
    }
    if (m->ring.cp <= 1) {
        mk.row0 += lo;
        m->ops->dropout_apply(out, in, hi - lo, m->C, &mk);
        return out;
    }
    /* context parallelism: each sequence's local rows are two runs of T / 2 tokens at their
     * chunks' global positions (ring.h), keyed as the one-process run keys them */
    const int c = T / 2, Tg = T * m->ring.cp;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            const size_t r0 = (size_t)b * T + (size_t)h * c, a = r0 > lo ? r0 : lo;
            const size_t e = r0 + c < hi ? r0 + c : hi;
            if (a >= e) continue;
            dropout_mask_t k = mk;
            k.row0 = mk.row0 + (uint64_t)b * (uint64_t)Tg +
                     (uint64_t)ring_position(h * c, T, m->ring.cp, m->ring.rank) + (a - r0);
            m->ops->dropout_apply(out + (a - lo) * m->C, in + (a - lo) * m->C, e - a, m->C, &k);
        }
    return out;
}

const dropout_mask_t *gpt_attn_mask(const gpt_t *m, int layer, int B, int T,
                                    dropout_mask_t *mask) {
    if (!m->reg.training || m->reg.attn_p <= 0) return NULL;
    *mask = mask_for(m, REG_ATTN_PROBS, layer, m->reg.attn_p, B, T);
    mask->word3 = (uint32_t)(m->par.tp_rank * m->NHl); /* global index of local head 0 */
    return mask;
}

bool gpt_router_noise_key(const gpt_t *m, int layer, int B, int T, uint32_t key[2],
                          uint64_t *row0) {
    if (!m->reg.training) return false;
    const dropout_mask_t mk = mask_for(m, REG_ROUTER_NOISE, layer, 0.0f, B, T);
    key[0] = mk.key[0];
    key[1] = mk.key[1];
    *row0 = mk.row0;
    return true;
}

bool gpt_loss_regularized(const gpt_t *m) {
    return m->reg.training && (m->reg.label_smoothing > 0 || m->reg.z_loss > 0);
}

void gpt_reg_losses(gpt_t *m, int N) {
    const ops_t *o = m->ops;
    gpt_regular_t *r = &m->reg;
    o->xent_row_sum(r->row_sum, m->logits, N, m->Vl, m->v_valid);
    comm_allreduce_sum(r->row_sum, (size_t)N, m->par.tp_group, COMM_TP);
    o->xent_losses_regularized(m->losses, r->zloss, m->row_max, m->row_sumexp, m->target_logit,
                               r->row_sum, N, m->V, r->label_smoothing, r->z_loss);
    o->to_host(m->host_losses, r->zloss, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->host_losses[i];
    r->z_loss_sum += sum / N;
}

void gpt_reg_xent_backward(gpt_t *m, const int *targets, int N, float dloss) {
    m->ops->xent_backward_regularized_inplace(m->logits, m->row_max, m->row_sumexp, targets,
                                              dloss, N, m->Vl, m->v_valid, m->v_start, m->V,
                                              m->reg.label_smoothing, m->reg.z_loss);
}
