/* planner.h — what a run needs in memory, per rank and category, before anything is allocated;
 * and which setup fits a memory limit, fastest first.
 * The prediction is not a formula beside the code: the model part is gpt_create run dry
 * (gpt_plan counts every buffer it would allocate), and the rest follows the same steps
 * trainer_setup takes (ZeRO partitions, gather and staging buffers, AdamW moments, the fp32
 * master copy, batches, and the transient host copies of setup, checkpoints and weight files).
 * Per category the planner predicts the category's own peak; the rank's peak is at most their
 * sum, which is what is compared with &run memory_limit_gb. With a backend that has memory of its
 * own (a GPU: cfg->device_memory) the categories count that memory, compared with the device's
 * capacity, and the host-resident buffers are planned beside them (mem_plan_t host[]).
 * Cost model of the alternatives table (a ranking, not a promise): compute at &log peak_flops
 * per rank (else 1e11 FLOP/s) times n / (n + 128) for products of n = micro_batch * seq_len rows,
 * model FLOPs plus what recomputation repeats, stretched by the pipeline bubble (pp-1)/(m+pp-1); communication at 10 GB/s per rank: tensor-parallel
 * all-reduces, the data-parallel reduction of each ZeRO stage, ZeRO-3's gathers; no overlap.
 * Ties go to the smaller plan.
 * Owns: nothing (pure). Uses: model/gpt (gpt_plan), model/params, train/pipeline, config/.
 * Used by: main (llmtrain --plan), train/trainer (the fit check and micro_batch = 0). */
#ifndef LLMT_PLANNER_H
#define LLMT_PLANNER_H
#include <stdbool.h>
#include "config/config.h"
#include "core/alloc.h"
#include "kernels/ops.h"

typedef struct mem_plan {
    double bytes[MEM_CATEGORIES]; /* predicted peak of each category (of the device's memory,
                                     when the backend has its own: cfg->device_memory) */
    double total;                 /* their sum: the rank's peak at most, held to the limit */
    double host[MEM_CATEGORIES];  /* device_memory: what stays in host memory (the batches, the
                                     transient copies of setup and checkpoints, an offloaded
                                     optimizer's state); all zero otherwise (in bytes[]) */
    double host_total;
    int tp_rank, pp_rank;         /* the rank this plan is for (dp rank 0: the largest partition) */
    int micro_batch, accum;
    double step_seconds;          /* the cost model's step time */
    double params;                /* the rank's parameters (its registry's elements) */
    double flops_per_token;       /* model FLOPs per token, whole model (gpt_flops_per_token) */
} mem_plan_t;

/* The plan of one rank of cfg's grid (cfg's dp, tp, pp, zero_stage, recompute, precision) with
 * micro_batch mb and accumulation accum. */
void plan_rank(const config_t *cfg, int tp_rank, int pp_rank, int mb, int accum, mem_plan_t *out);
/* The rank with the largest total, and per category the largest over all ranks (max_cat). */
void plan_worst(const config_t *cfg, int mb, int accum, mem_plan_t *worst, mem_plan_t *max_cat);
/* This node's memory shared by ranks_per_node ranks, in bytes. */
double plan_node_share_bytes(int ranks_per_node);
/* Bytes a rank may use: &run memory_limit_gb, else the node's memory shared by ranks_per_node. */
double plan_limit_bytes(const config_t *cfg, int ranks_per_node);
/* micro_batch = 0: the largest micro-batch (a divisor of global_batch / dp) whose worst rank
 * fits `limit`; 0 when none does. */
int plan_auto_micro_batch(const config_t *cfg, double limit);
/* The best alternative (zero_stage x recompute x micro_batch) that fits, fastest first, written
 * as namelist keys into buf ("zero_stage = 3, recompute = 'full', micro_batch = 2"); returns
 * false when nothing fits. */
bool plan_suggest(const config_t *cfg, double limit, char *buf, size_t len);
/* llmtrain --plan: the namelist's grid per category and the alternatives that fit; true when the
 * namelist's own setup fits (micro_batch = 0: the planner's choice). */
bool plan_print(const config_t *cfg, double limit, int ranks_per_node);
#endif
