/* trainer_validate.h — the validation loss: val_batches micro-batches of the validation set,
 * the same batches every time, every rank running the same number of passes; and its line
 * and metrics record. Works through val_ctx_t, pointers into the trainer's state set once at
 * setup; never the trainer itself. Uses: train/pipeline (the model's forward), io/sampler,
 * io/metrics, parallel/. Used by: train/trainer (the loop, anomaly handling, mode 'eval'). */
#ifndef LLMT_TRAINER_VALIDATE_H
#define LLMT_TRAINER_VALIDATE_H
#include <stdint.h>
#include "io/metrics.h"
#include "io/sampler.h"
#include "parallel/grid.h"
#include "train/curriculum.h"
#include "train/pipeline.h"

typedef struct val_ctx {
    const grid_t *grid;
    pipe_t *pipe;                /* the model's forward, through the pipeline runner */
    sampler_t *sampler;          /* the validation set's (&model seq_len windows) */
    const batch_shape_t *shape;  /* micro_batch: a validation batch's sequences */
    int *inputs, *targets;       /* host buffers of at least micro_batch * seq_len tokens */
    int val_batches;             /* &data val_batches */
    const char *source_path;     /* the namelist, for a data error's message */
    const int64_t *step;         /* the optimizer steps taken, for the line and the record */
    metrics_t *metrics;
} val_ctx_t;

/* Mean loss over val_batches micro-batches of the validation set (collective; all ranks get
 * it). */
double val_loss(const val_ctx_t *v);
/* val_loss, printed (rank 0) and recorded; returns the loss. */
double val_run(const val_ctx_t *v);
#endif
