/* perfmodel.h — the time of one training step of a namelist on a described machine
 * (train/machine.h), part by part, and from it tokens/s, model TFLOP/s per device, MFU; with the
 * memory per device and whether it fits from the memory planner (train/planner.h).
 *
 * One source of truth: the layer partition is params_partition_layers (the code's), the model
 * FLOPs gpt_flops_per_token (the step line's MFU), the memory plan_rank (gpt_create run dry),
 * the parameters per rank the planner's registry, and the pipeline's idle time the schedule
 * generators' own per-rank action lists run by sched_simulate with the stage's modelled F, B, W
 * costs (train/schedule.h). A rank's rows per micro-batch are mb x T / cp (T = seq_len; context
 * parallelism gives each rank T / cp tokens of each sequence, model/ring.h). What is modelled
 * per micro-batch and stage:
 *   gemm        every linear layer's forward, input gradient and weight gradient as a product of
 *               its shape (tp shard, the rank's rows), at machine_gemm_rate; the LM head on the
 *               last stage
 *   attention   scores and weighted sums as products of (T / cp, T, head size): the rank's
 *               queries over the sequence's keys, the ring's balanced 1/cp share of the causal
 *               work; backward 2.5 x the forward (the kernel recomputes the scores, kernels/ops.h)
 *   elementwise norms, residual adds, activation functions, embedding, cross-entropy: bytes
 *               over the device's memory bandwidth
 *   tp          two all-reduces of the block's output per block forward and two backward, not
 *               overlapped (model/gpt.c waits for them)
 *   cp          ring attention's exchange (model/ring.c), K/V blocks of T / cp tokens x the tp
 *               shard's kv heads, fp32: forward cp - 1 sends overlapped with each step's 1/cp of
 *               the attention (the excess shows); backward the same, plus cp dK/dV hops after
 *               each step's work, not overlapped; the packing passes at memory bandwidth
 *   recompute   the forward again (full) or the attention forward (selective) in the backward,
 *               the ring's exchange included
 *   p2p         one activation message per chunk boundary and micro-batch each way
 *   bubble      the simulator's makespan less the stage's busy time
 *   dp          the gradient reduction (all-reduce, or reduce-scatter with ZeRO >= 2) over the
 *               replica group dp x cp less the last micro-batch's backward it overlaps with
 *               (bucketed, train/dp_sync.c)
 *   zero        ZeRO 1/2: the all-gather of the updated weights; ZeRO 3: the per-micro-batch
 *               gathers (prefetched: what exceeds the compute)
 *   optimizer   AdamW over the rank's elements, bandwidth-bound
 *   moe         the all-to-all exchanges of the MoE blocks (dispatch and combine, each way)
 * Communication carries fp32 floats, as the code's collectives do. A group whose ranks span
 * nodes (ranks placed tp fastest, then cp, then dp, then pp: parallel/grid.c) shares the node's
 * adapters among the node's devices. World = dp x cp x tp x pp; tokens per step global_batch x
 * seq_len and FLOPs per token of the whole sequence (tokens/s and MFU as without cp). cp > 1 on
 * a GPU machine times the ring the trainer runs on device 'cpu' only (config_cp_error's rules
 * but the device's). More ranks than the machine has devices (max_nodes): ranks share devices, every
 * device time scales by the ratio (oversubscribed).
 * Owns: nothing (pure). Uses: train/machine, train/planner, train/schedule, model/. Used by:
 * train/perfplan (--plan --machine, --search), the unit test. */
#ifndef LLMT_PERFMODEL_H
#define LLMT_PERFMODEL_H
#include <stdbool.h>
#include <stddef.h>
#include "config/config.h"
#include "train/machine.h"
#include "train/schedule.h"

typedef enum {
    PERF_GEMM, PERF_ATTENTION, PERF_ELEMENTWISE, PERF_TP, PERF_CP, PERF_RECOMPUTE, PERF_P2P,
    PERF_BUBBLE, PERF_DP, PERF_ZERO, PERF_OPTIMIZER, PERF_MOE, PERF_PARTS
} perf_part_t;

typedef struct perf {
    double part[PERF_PARTS];  /* seconds per step on the slowest stage */
    double step_s, tokens_per_s, tflops_per_device, mfu;
    double memory_gib;        /* the fullest rank's plan (device memory on a GPU machine) */
    double bubble_fraction;   /* bubble / step */
    bool fits, oversubscribed;
    bool sp;                  /* sequence parallelism */
    int dp, cp, tp, pp, v, mb, accum, zero;
    char schedule[16], recompute[16];
} perf_t;

/* A's name in tables and JSON ("gemm", "tp", ...). */
const char *perf_part_name(perf_part_t p);
/* The configuration as the machine's devices run it: device 'cuda' with device memory on a GPU
 * machine, the CPU's otherwise (the plan of a GPU machine needs no GPU here). */
void perf_config_for(const config_t *cfg, const machine_t *mc, config_t *out);
/* Why cfg's grid cannot run on mc (shape rules of model/spec.c, the ring's rules of
 * config_cp_error but the device's, the schedule's constraints, devices per node not dividing
 * the grid), naming the key; NULL when it can. */
const char *perf_grid_error(const config_t *cfg, const machine_t *mc, char *buf, size_t len);
/* The prediction for cfg (micro_batch > 0; perf_config_for's) on mc; cfg's grid must pass
 * perf_grid_error. perf_predict = perf_memory, then perf_time. */
void perf_predict(const config_t *cfg, const machine_t *mc, perf_t *out);
/* memory_gib and fits; the rank's parameters and the model's FLOPs per token from the same plan
 * (either pointer may be NULL). */
void perf_memory(const config_t *cfg, const machine_t *mc, perf_t *out, double *params,
                 double *flops_per_token);
/* Everything but memory_gib and fits, for a rank of `params` elements (the search plans memory
 * only for the candidates it must). */
void perf_time(const config_t *cfg, const machine_t *mc, double params, double flops_per_token,
               perf_t *out);

/* Collective costs on n ranks over links of bw bytes/s and lat seconds (ring: 2(n-1)/n bytes/bw
 * + 2(n-1) lat; tree: 2 bytes/bw + 2 ceil(log2 n) lat); all-gather, reduce-scatter and
 * all-to-all of `bytes` (the whole) (n-1)/n bytes/bw + (n-1) lat. */
double perf_allreduce_s(machine_collective_t alg, double bytes, int n, double bw, double lat);
double perf_allgather_s(double bytes, int n, double bw, double lat);
/* The pipeline's time of m micro-batches of a stage's F, B, W on p ranks (v chunks each): the
 * schedule simulator's makespan; extrapolate: m beyond 6p simulated as 4p + m mod p and the
 * rest added at f + b + w each (what perf_time does). */
double perf_pipeline_s(sched_kind_t kind, int p, int v, int m, double f, double b, double w,
                       bool extrapolate);
#endif
