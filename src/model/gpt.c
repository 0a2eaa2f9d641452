/* gpt.c — GPT-2 forward and backward over the op interface (see gpt.h).
 * Notation: N = B*T rows, C = d_model, F = d_ff, NH heads of size hs, Vp padded vocabulary. */
#include "model/gpt.h"
#include <stdio.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"

/* Pointer to a named parameter (or its gradient) inside a flat buffer. Looked up by name once
 * at create time, so the registry stays the single source of truth for the layout. */
static float *gpt_param(const gpt_t *m, float *flat, const char *fmt, int layer) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    const param_t *p = params_find(&m->P, name);
    ASSERT(p != NULL);
    return flat + p->offset;
}

static gpt_layer_w_t layer_weights(const gpt_t *m, float *flat, int l) {
    gpt_layer_w_t w = {
        gpt_param(m, flat, "h.%d.ln1.w", l),       gpt_param(m, flat, "h.%d.ln1.b", l),
        gpt_param(m, flat, "h.%d.attn.qkv.w", l),  gpt_param(m, flat, "h.%d.attn.qkv.b", l),
        gpt_param(m, flat, "h.%d.attn.proj.w", l), gpt_param(m, flat, "h.%d.attn.proj.b", l),
        gpt_param(m, flat, "h.%d.ln2.w", l),       gpt_param(m, flat, "h.%d.ln2.b", l),
        gpt_param(m, flat, "h.%d.mlp.fc.w", l),    gpt_param(m, flat, "h.%d.mlp.fc.b", l),
        gpt_param(m, flat, "h.%d.mlp.proj.w", l),  gpt_param(m, flat, "h.%d.mlp.proj.b", l),
    };
    return w;
}

static gpt_global_w_t global_weights(const gpt_t *m, float *flat) {
    gpt_global_w_t w = {gpt_param(m, flat, "wte", 0), gpt_param(m, flat, "wpe", 0),
                        gpt_param(m, flat, "lnf.w", 0), gpt_param(m, flat, "lnf.b", 0)};
    return w;
}

static void resolve_views(gpt_t *m) {
    m->lw = xcalloc((size_t)m->L, sizeof(gpt_layer_w_t));
    m->lg = xcalloc((size_t)m->L, sizeof(gpt_layer_w_t));
    for (int l = 0; l < m->L; l++) {
        m->lw[l] = layer_weights(m, m->params, l);
        m->lg[l] = layer_weights(m, m->grads, l);
    }
    m->gw = global_weights(m, m->params);
    m->gg = global_weights(m, m->grads);
}

static float *falloc(const gpt_t *m, size_t n, size_t *counter) {
    *counter += n * sizeof(float);
    return m->ops->alloc(n * sizeof(float));
}

static void alloc_activations(gpt_t *m) {
    const size_t N = (size_t)m->B * m->T, C = m->C, F = m->F;
    const size_t att = (size_t)m->B * m->NH * m->T * m->T;
    size_t *c = &m->act_bytes;
    m->tokens = m->ops->alloc(N * sizeof(int));
    m->targets = m->ops->alloc(N * sizeof(int));
    m->encoded = falloc(m, N * C, c);
    m->layer = xcalloc((size_t)m->L, sizeof(gpt_layer_acts_t));
    for (int l = 0; l < m->L; l++) {
        gpt_layer_acts_t *a = &m->layer[l];
        a->ln1 = falloc(m, N * C, c);
        a->ln1_mean = falloc(m, N, c);
        a->ln1_rstd = falloc(m, N, c);
        a->qkv = falloc(m, N * 3 * C, c);
        a->atty = falloc(m, N * C, c);
        a->att = falloc(m, att, c);
        a->res2 = falloc(m, N * C, c);
        a->ln2 = falloc(m, N * C, c);
        a->ln2_mean = falloc(m, N, c);
        a->ln2_rstd = falloc(m, N, c);
        a->fch = falloc(m, N * F, c);
        a->fch_gelu = falloc(m, N * F, c);
        a->res3 = falloc(m, N * C, c);
    }
    m->lnf = falloc(m, N * C, c);
    m->lnf_mean = falloc(m, N, c);
    m->lnf_rstd = falloc(m, N, c);
    m->logits = falloc(m, N * (size_t)m->Vp, c);
    m->row_max = falloc(m, N, c);
    m->row_sumexp = falloc(m, N, c);
    m->target_logit = falloc(m, N, c);
    m->losses = falloc(m, N, c);
    m->dres = falloc(m, N * C, c);
    m->dC = falloc(m, N * C, c);
    m->dC2 = falloc(m, N * C, c);
    m->dbig = falloc(m, N * (3 * C > F ? 3 * C : F), c);
    m->datt = falloc(m, att, c);
    m->host_losses = xmalloc(N * sizeof(float));
}

void gpt_create(gpt_t *m, const config_t *cfg, const ops_t *ops, int B, int T) {
    memset(m, 0, sizeof *m);
    m->L = cfg->n_layer;
    m->C = cfg->d_model;
    m->NH = cfg->n_head;
    m->hs = cfg->d_model / cfg->n_head;
    m->F = cfg->d_ff;
    m->V = cfg->vocab_size;
    m->Vp = config_padded_vocab(cfg);
    m->B = B;
    m->T = T;
    m->ops = ops;
    params_create(&m->P, cfg, 1, 0);
    m->params = ops->alloc(m->P.total * sizeof(float));
    m->grads = ops->alloc(m->P.total * sizeof(float));
    ops->zero(m->params, m->P.total);
    ops->zero(m->grads, m->P.total);
    resolve_views(m);
    alloc_activations(m);
}

void gpt_destroy(gpt_t *m) {
    const ops_t *o = m->ops;
    for (int l = 0; l < m->L; l++) {
        gpt_layer_acts_t *a = &m->layer[l];
        float *bufs[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att, a->res2,
                         a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->res3};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) o->free(bufs[i]);
    }
    float *bufs[] = {m->params, m->grads, m->encoded, m->lnf, m->lnf_mean, m->lnf_rstd,
                     m->logits, m->row_max, m->row_sumexp, m->target_logit, m->losses, m->dres,
                     m->dC, m->dC2, m->dbig, m->datt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) o->free(bufs[i]);
    o->free(m->tokens);
    o->free(m->targets);
    xfree(m->layer);
    xfree(m->lw);
    xfree(m->lg);
    xfree(m->host_losses);
    params_destroy(&m->P);
    memset(m, 0, sizeof *m);
}

void gpt_init_params(gpt_t *m, uint64_t seed) {
    float *host = xmalloc(m->P.total * sizeof(float));
    memset(host, 0, m->P.total * sizeof(float));
    params_init(&m->P, host, seed);
    m->ops->to_device(m->params, host, m->P.total * sizeof(float));
    xfree(host);
}

/* One pre-LN block: res_out = res_in + attn(ln1(res_in)); res3 = res2 + mlp(ln2(res2)). */
static void block_forward(gpt_t *m, int l, const float *res_in, int B, int T) {
    const ops_t *o = m->ops;
    const int N = B * T, C = m->C, F = m->F;
    gpt_layer_acts_t *a = &m->layer[l];
    const gpt_layer_w_t w = m->lw[l];
    o->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, res_in, w.ln1w, w.ln1b, N, C);
    o->matmul_forward(a->qkv, a->ln1, w.qkvw, w.qkvb, N, C, 3 * C);
    o->attention_forward(a->atty, a->att, a->qkv, B, T, m->NH, m->hs);
    o->matmul_forward(a->res2, a->atty, w.projw, w.projb, N, C, C);
    o->add(a->res2, a->res2, res_in, (size_t)N * C);
    o->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w.ln2w, w.ln2b, N, C);
    o->matmul_forward(a->fch, a->ln2, w.fcw, w.fcb, N, C, F);
    o->gelu_forward(a->fch_gelu, a->fch, (size_t)N * F);
    o->matmul_forward(a->res3, a->fch_gelu, w.mprojw, w.mprojb, N, F, C);
    o->add(a->res3, a->res3, a->res2, (size_t)N * C);
}

float gpt_forward(gpt_t *m, const int *inputs, const int *targets, int B, int T) {
    ASSERT(B <= m->B && T <= m->T);
    const ops_t *o = m->ops;
    const int N = B * T, C = m->C;
    o->to_device(m->tokens, inputs, (size_t)N * sizeof(int));
    o->embed_forward(m->encoded, m->tokens, m->gw.wte, m->gw.wpe, B, T,
                     C, 0, m->Vp, true);
    const float *res = m->encoded;
    for (int l = 0; l < m->L; l++) {
        block_forward(m, l, res, B, T);
        res = m->layer[l].res3;
    }
    o->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, res, m->gw.lnfw,
                         m->gw.lnfb, N, C);
    o->matmul_forward(m->logits, m->lnf, m->gw.wte, NULL, N, C, m->Vp);
    if (!targets) return 0.0f;
    o->to_device(m->targets, targets, (size_t)N * sizeof(int));
    o->xent_row_max(m->row_max, m->logits, N, m->Vp, m->V);
    o->xent_row_sumexp(m->row_sumexp, m->logits, m->row_max, N, m->Vp, m->V);
    o->xent_target_logit(m->target_logit, m->logits, m->targets, N, m->Vp, 0);
    o->xent_losses(m->losses, m->row_max, m->row_sumexp, m->target_logit, N);
    o->to_host(m->host_losses, m->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->host_losses[i];
    return (float)(sum / N);
}

/* Backward of one block. On entry m->dres holds dL/d(res3); on exit dL/d(res_in). */
static void block_backward(gpt_t *m, int l, const float *res_in, int B, int T, bool first) {
    const ops_t *o = m->ops;
    const int N = B * T, C = m->C, F = m->F;
    gpt_layer_acts_t *a = &m->layer[l];
    const gpt_layer_w_t w = m->lw[l], g = m->lg[l];
    /* MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))) */
    o->matmul_backward(m->dbig, g.mprojw, g.mprojb, m->dres, a->fch_gelu, w.mprojw, N, F, C,
                       false, first);
    o->gelu_backward(m->dbig, a->fch, m->dbig, (size_t)N * F);
    o->matmul_backward(m->dC, g.fcw, g.fcb, m->dbig, a->ln2, w.fcw, N, C, F, false, first);
    o->layernorm_backward(m->dres, g.ln2w, g.ln2b, m->dC, a->res2, w.ln2w, a->ln2_mean,
                          a->ln2_rstd, N, C, true, first);
    /* attention: res2 = res_in + proj(attn(qkv(ln1(res_in)))) */
    o->matmul_backward(m->dC2, g.projw, g.projb, m->dres, a->atty, w.projw, N, C, C, false,
                       first);
    o->attention_backward(m->dbig, m->datt, m->dC2, a->qkv, a->att, B, T, m->NH, m->hs);
    o->matmul_backward(m->dC, g.qkvw, g.qkvb, m->dbig, a->ln1, w.qkvw, N, C, 3 * C, false,
                       first);
    o->layernorm_backward(m->dres, g.ln1w, g.ln1b, m->dC, res_in, w.ln1w, a->ln1_mean,
                          a->ln1_rstd, N, C, true, first);
}

void gpt_backward(gpt_t *m, int B, int T, float dloss, bool first_micro) {
    const ops_t *o = m->ops;
    const int N = B * T, C = m->C;
    float *wte = m->gw.wte, *dwte = m->gg.wte, *dwpe = m->gg.wpe;
    o->xent_backward_inplace(m->logits, m->row_max, m->row_sumexp, m->targets, dloss, N, m->Vp,
                             m->V, 0);
    o->matmul_backward(m->dC, dwte, NULL, m->logits, m->lnf, wte, N, C, m->Vp, false,
                       first_micro);
    const float *res_last = m->L > 0 ? m->layer[m->L - 1].res3 : m->encoded;
    o->layernorm_backward(m->dres, m->gg.lnfw, m->gg.lnfb, m->dC,
                          res_last, m->gw.lnfw, m->lnf_mean, m->lnf_rstd, N, C,
                          false, first_micro);
    for (int l = m->L - 1; l >= 0; l--) {
        const float *res_in = l > 0 ? m->layer[l - 1].res3 : m->encoded;
        block_backward(m, l, res_in, B, T, first_micro);
    }
    /* wte already holds the LM-head gradient of this micro-batch: the embedding adds to it. */
    if (first_micro) o->zero(dwpe, params_find(&m->P, "wpe")->numel);
    o->embed_backward(dwte, dwpe, m->dres, m->tokens, B, T, C, 0, m->Vp, true);
}

void gpt_logits_row(const gpt_t *m, int b, int t, int T, float *out) {
    const float *row = m->logits + ((size_t)b * T + t) * m->Vp;
    m->ops->to_host(out, row, (size_t)m->V * sizeof(float));
}

double gpt_flops_per_token(const gpt_t *m, int T) {
    /* 6 FLOPs per parameter per token (2 forward, 4 backward) for every matrix product,
     * counting the tied LM head once, plus attention scores and weighted sums:
     * 2 * 2 * T * C per layer forward (QK^T and AV), times 3 for forward + backward. */
    double mat = (double)m->L * (4.0 * m->C * m->C + 2.0 * m->C * m->F) + (double)m->Vp * m->C;
    double attn = (double)m->L * 2.0 * 2.0 * T * m->C;
    return 6.0 * mat + 3.0 * attn;
}
