/* moe.h — Mixture-of-Experts MLP blocks with expert parallelism (&model n_experts ...,
 * &parallel ep). Every moe_every-th block's MLP (params_moe_layer) is n_experts expert MLPs of
 * width d_ff_expert, chosen per token by a router, plus n_shared_experts always-on experts.
 *
 * Forward of one block's MLP on x = ln2(res2), N = B*T rows of one micro-batch:
 *   router logits z = x Wr^T ('mlp': gelu(x W1^T) Wr^T); training with router_noise s > 0:
 *   z += s * eps * softplus(x Wn^T) (Shazeer et al. 2017; eps from Philox keyed by (seed, step,
 *   layer, global token, expert): the same on every grid); p = softmax(z); top-k of p with
 *   gates renormalised over the k (k > 1); capacity and drop policy (model/moe_route.h);
 *   y = sum over kept choices of gate * expert(x) + shared(x).
 * Losses per micro-batch and MoE layer, added to the objective with the micro-batch's weight
 * (the trainer's per-token dloss times N) and reported apart from the cross-entropy:
 *   aux = aux_loss_coef * E * sum_e f_e P_e (f_e: share of the assignments routed to e, counted
 *         before dropping, a constant; P_e: mean router probability), and
 *   z   = z_loss_coef * mean(logsumexp(z)^2).
 * Context parallelism (cp > 1): a micro-batch's sequences are spread over the cp group, so the
 * cp ranks gather each other's choices and probabilities (host, an all-gather over cp), build
 * the plan of the whole micro-batch in the sequences' token order (capacity, drops and the aux
 * loss's f_e and P_e as on one rank) and each keeps its own tokens' part; the router noise is
 * keyed by each chunk's global tokens.
 * Expert parallelism: the ep consecutive dp ranks of an ep group (parallel/grid.h) each hold
 * n_experts / ep experts of every MoE block. Each rank routes its own tokens and applies the
 * capacity to its own micro-batch (so the drops do not depend on ep), sends the per-expert
 * counts and then the rows to the ranks owning the experts (MPI_Alltoallv), the owners run
 * their experts on every row received, and the outputs come back in the same order. Every
 * rank calls both exchanges in every MoE block, forward and backward, whether it has rows to
 * send or not: no rank waits for a collective another skipped. Under tp every tp rank routes
 * the same (replicated) tokens identically and exchanges its own tp part of the experts' work;
 * the experts are column / row parallel inside like the dense MLP, so the output is a partial
 * sum that the block all-reduces over tp as before.
 * The block sees the model it lives in through moe_ctx_t (the ops, the widths, the tp group, the
 * model's arena and its router-noise keys), never gpt_t: model/gpt.c calls this file, not the
 * reverse.
 * Owns: the MoE activations of each slot (moe_acts_t), the exchange scratch and the per-layer
 * routing statistics. Uses: kernels/ops.h, model/moe_route, model/layer_w, model/params,
 * parallel/comm. Used by: model/gpt.c (the block), train/ (statistics). */
#ifndef LLMT_MOE_H
#define LLMT_MOE_H
#include <stdbool.h>
#include <stdint.h>
#include "core/alloc.h"
#include "kernels/ops.h"
#include "model/layer_w.h"
#include "model/moe_route.h"
#include "model/params.h"
#include "model/spec.h"
#include "parallel/comm.h"

/* What the MoE blocks see of the model they live in (gpt.c fills it before moe_setup). */
typedef struct moe_ctx {
    const ops_t *ops;
    int C, L;                      /* d_model, n_layer */
    int N_max;                     /* rows of one micro-batch at most (B x T) */
    dtype_t wtype;                 /* the weights copy's storage */
    bool swiglu, dry_run;          /* dry_run: buffers counted, not allocated (gpt_plan) */
    int tp, tp_rank;
    const comm_group_t *tp_group;
    const bool *training;          /* the model's: inside a training pass */
    void *model;                   /* passed back to the two callbacks */
    void *(*alloc)(void *model, size_t bytes, mem_category_t cat); /* the model's arena */
    /* the router noise's Philox key and the global token of row 0 for `layer` in the current
     * slot; false outside training passes (model/gpt_regular.h gpt_router_noise_key) */
    bool (*noise_key)(const void *model, int layer, int B, int T, uint32_t key[2], uint64_t *row0);
    /* context parallelism (model/ring.h): the cp ranks that hold the other chunks of the
     * micro-batch's sequences; cp 1: none */
    int cp, cp_rank;
    const comm_group_t *cp_group;
} moe_ctx_t;

/* Routing statistics of one MoE block since the last moe_stats_reset (training passes). */
typedef struct moe_stats {
    double *load;          /* [E] assignments per expert before dropping */
    double assigned, dropped;
    double aux, z, entropy; /* sums over micro-batches of each micro-batch's value */
    double micro;          /* micro-batches counted */
} moe_stats_t;

/* One MoE block's activations for one in-flight micro-batch (slot). */
typedef struct moe_acts {
    float *probs, *lse, *gates;    /* [N, E], [N], [N, k] */
    int *idx;                      /* [N, k] chosen experts */
    float *noise;                  /* [N, E] x Wn^T (router_noise > 0) */
    float *rpre, *rhid;            /* [N, C] router 'mlp': hidden before / after the GELU */
    bool noisy;                    /* this pass drew noise */
    uint32_t key[2];
    uint64_t row0;
    moe_plan_t plan;               /* host: this micro-batch's kept assignments */
    int *rows;                     /* [N k] dispatch row -> token (backend memory) */
    float *wr;                     /* [N k] dispatch row -> its gate */
    float *yd;                     /* [N k, C] the experts' outputs for this rank's rows */
    /* the expert side: rows received, grouped by local expert */
    int *send, *recv;              /* host [ep]: rows sent to / received from each ep rank */
    int *ecnt;                     /* host [ep, El]: rows from each ep rank per local expert */
    int R;                         /* rows received */
    int *perm;                     /* [R] expert-major row -> its place in the received order */
    int *iperm;                    /* [R] the inverse */
    float *xe;                     /* [R, C] expert inputs, expert-major */
    float *eh, *eu, *ea;           /* [R, Fe/tp] pre-activation (SwiGLU: gate), up, activation */
    float *sh, *su, *sa;           /* [N, S Fe / tp] the shared experts' */
} moe_acts_t;

typedef struct moe {
    moe_ctx_t ctx;
    int E, k, El, Fe, Fel, Sl;     /* experts, choices, local experts, expert width (local) */
    double cf;
    moe_drop_t policy;
    float noise, aux_coef, z_coef;
    bool mlp_router, swiglu;
    int ep, ep_rank;
    const comm_group_t *ep_group;
    int N_max, R_max;              /* rows of one micro-batch; expert rows received at most */
    double mlp_matrix;             /* moe_block_mlp_matrix */
    /* scratch shared by every block and slot */
    float *logits, *dlogits, *dnoise, *dgates, *dbias, *drin; /* [N,E] x3, [N,k], [E], [N,C] */
    float *sendbuf, *recvbuf;      /* [R_max, C] */
    float *eout;                   /* [R_max, C] expert outputs / gradients, expert-major */
    float *dh, *du;                /* [R_max or N, max(Fe, S Fe)/tp] */
    float *dw;                     /* [N k] */
    int *h_idx;                    /* host [N k] */
    float *h_probs, *h_gates, *h_lse, *h_w; /* host [N E], [N k], [N], [N k] */
    float *h_dgates, *h_bias;      /* host [N k], [E]: the router backward's inputs */
    int *h_rows, *h_perm;          /* host [N k], [R_max] x 2 */
    int *h_start;                  /* host [ep El]: first received row of each (source, expert) */
    /* context parallelism: the whole micro-batch's routing gathered over cp (host) */
    float *h_pack, *h_packall;     /* [N, k + E] this rank's choices | probabilities; [cp N, k + E] */
    int *h_gidx, *h_local_of;      /* [cp N, k] in the sequences' token order; [cp N] -> local or -1 */
    float *h_gprobs;               /* [cp N, E] likewise */
    moe_plan_t gplan;              /* the whole micro-batch's plan */
    moe_stats_t *stats;            /* [n_layer] (MoE blocks only have load) */
    int *collapsed_for;            /* [n_layer] steps in a row one expert took > collapse_share */
    double collapse_share;
    int collapse_steps;
    float dloss;                   /* the per-token loss gradient of the pass (trainer sets it) */
} moe_t;

/* From the spec (n_experts > 0); ep group of the grid (MPI_COMM_SELF, 1, 0 without). Counts or
 * allocates through the model's arena. */
moe_t *moe_setup(const moe_ctx_t *ctx, const model_spec_t *spec, int ep, int ep_rank,
                 const comm_group_t *ep_group);
void moe_free(moe_t *q); /* accepts NULL */
/* One MoE block's per-slot activations. */
moe_acts_t *moe_alloc_acts(moe_t *q, size_t *bytes);
void moe_free_acts(moe_t *q, moe_acts_t *a);

/* The block's MLP output y[N, C] (partial over tp: the caller all-reduces it) from x[N, C]. */
void moe_forward(moe_t *q, int layer, moe_acts_t *a, const gpt_layer_w_t *w,
                 const float *x, int B, int T, float *y);
/* Backward from dy[N, C] (the full gradient of y): dx[N, C] OVERWRITTEN with d(x), partial over
 * tp like a column-parallel input gradient (the router's share is added on tp rank 0 only);
 * the weight gradients accumulated (first: overwritten), the aux and z losses included. */
void moe_backward(moe_t *q, int layer, moe_acts_t *a, const gpt_layer_w_t *w,
                  const gpt_layer_w_t *g, const float *x, const float *dy, int B, int T,
                  bool first, float *dx);

/* The startup line: which blocks, k of E, widths, capacity, losses, the ep split, and the
 * parameters in all vs active per token. */
void moe_print_summary(const moe_t *q, const params_t *P, const model_spec_t *spec);
/* Multiply-adds per token of an MoE block's MLP as it runs (router, k experts, shared ones). */
double moe_block_mlp_matrix(const model_spec_t *spec);

/* Statistics: reset at a step's start; moe_stats_reduce sums them over `comm` (the world:
 * each block lives on one stage; tp ranks other than 0 contribute nothing) into out[], on every
 * rank: for block l, out[l * (E + MOE_STAT_SCALARS) ...] holds load[E], then the scalars below
 * (moe_stats_t's sums). moe_stats_floats is the length of out[]. */
enum { MOE_STAT_ASSIGNED, MOE_STAT_DROPPED, MOE_STAT_AUX, MOE_STAT_Z, MOE_STAT_ENTROPY,
       MOE_STAT_MICRO, MOE_STAT_SCALARS };
void moe_stats_reset(moe_t *q);           /* q NULL (a dense model): nothing */
int moe_stats_floats(const moe_t *q);     /* 0 for NULL */
void moe_stats_reduce(moe_t *q, const comm_group_t *g, double *out);
#endif
