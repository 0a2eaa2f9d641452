/* lr.h — learning-rate schedules. Uses: config/. Used by: train/trainer. */
#ifndef LLMT_LR_H
#define LLMT_LR_H
#include "config/config.h"

/* The learning rate for optimizer step `step` (0-based) of `max_steps`:
 *  warmup : lr * (step + 1) / warmup_steps for step < warmup_steps (all schedules)
 *  constant: lr
 *  cosine : min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * p)),  p = (step - warmup) / (max_steps - warmup)
 *  linear : lr + (min_lr - lr) * p
 *  wsd    : warmup, then lr (stable) until the last decay_fraction of the steps, then linear to min_lr
 * p is clamped to [0, 1]. */
double lr_at(const config_t *cfg, int step);

/* One schedule over `total` steps: what lr_at computes from &train, and what a &stage with its own
 * lr keys computes over its own steps (train/curriculum). */
typedef struct lr_piece {
    double lr, min_lr, decay_fraction;
    int warmup_steps, total;
    char schedule[16];
} lr_piece_t;

lr_piece_t lr_piece_from(const config_t *cfg);
/* The formulas above for step (0-based) of the piece. */
double lr_piece_at(const lr_piece_t *p, int step);
#endif
