/* moe_log.h — what the Mixture-of-Experts blocks did in a step, for people: the step record's
 * MoE members (per block: load per expert, share dropped, coefficient of variation of the load,
 * router entropy, aux and z losses; in all: moe_aux_loss, moe_z_loss, moe_dropped), a compact
 * summary for the step line, and the collapse warning (one expert taking more than
 * &model collapse_share of a block's assignments collapse_steps steps in a row).
 * Owns: the record text. Uses: model/moe, parallel/comm. Used by: train/trainer. */
#ifndef LLMT_MOE_LOG_H
#define LLMT_MOE_LOG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model/gpt.h"

typedef struct moe_log {
    char *record;          /* ",\"moe_aux_loss\":...": members of the step record ("" if none) */
    size_t cap;
    char line[96];         /* " | moe load max/mean 1.32 drop 0.4%" for the step line */
    double aux, z;         /* moe_aux_loss, moe_z_loss of the step */
} moe_log_t;

/* After a step's gradients (collective over the world: every rank calls it, MoE or not; does
 * nothing without experts). step is 1-based as logged; root prints the warning. */
void moe_log_step(moe_log_t *lg, gpt_t *m, const comm_group_t *world, int64_t step, bool root);
void moe_log_free(moe_log_t *lg);
#endif
