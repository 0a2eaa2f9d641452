/* trainer_validate.c — the validation loss (the same batches every time, every rank running
 * the same number of passes) and its line and record (trainer_validate.h). */
#include "train/trainer_validate.h"
#include <stdio.h>
#include "model/ring.h"
#include "parallel/comm_host.h"

double val_loss(const val_ctx_t *v) {
    /* &model seq_len, whatever the stage: validation losses stay comparable */
    const int B = v->shape->micro_batch, T = v->sampler->seq_len, n = v->val_batches;
    const grid_t *g = v->grid;
    double sum = 0.0;
    /* Batch i goes to dp rank i % dp; the same batches every time, so curves are comparable.
     * Every rank runs the same number of forward passes, ceil(n / dp): a forward has dp-group
     * collectives (ZeRO-3's gathers, the experts' all-to-all), so where n is not a multiple of dp
     * a rank without a batch of its own runs one more pass (on batch i mod n) whose loss it
     * leaves out. A bad window is agreed by every rank before the pass, so none is left waiting
     * in one. */
    char err[1024] = "";
    /* context parallelism: the cp ranks of a data rank read the same batch, each keeping its
     * chunks (ring_keep_local); each adds its rows' mean loss, so a batch is counted cp times */
    const int dp = g->data_dp, cp = g->cp, passes = (n + dp - 1) / dp;
    for (int k = 0; k < passes; k++) {
        const int i = g->rank_data + k * dp;
        const int bad = sampler_fill(v->sampler, (uint64_t)(i % n) * B, B, v->inputs, v->targets,
                                     err, sizeof err) != 0;
        curric_agree_data_error(v->source_path, MPI_COMM_WORLD, bad, err);
        ring_keep_local(v->inputs, B, T, cp, g->rank_cp);
        ring_keep_local(v->targets, B, T, cp, g->rank_cp);
        const double loss = pipe_run(v->pipe, v->inputs, v->targets, 1, B, T / cp, false, 0.0f);
        if (i < n) sum += loss;
    }
    comm_allreduce_sum_double(&sum, 1, g->pp_group, COMM_OTHER);
    comm_allreduce_sum_double(&sum, 1, g->dp_group, COMM_OTHER);
    return sum / ((double)n * cp);
}

double val_run(const val_ctx_t *v) {
    double loss = val_loss(v);
    char n1[32];
    if (v->grid->world_rank == 0) printf("val  %lld | val_loss %.4f\n", (long long)*v->step, loss);
    metrics_write(v->metrics, "\"step\":%lld,\"val_loss\":%s", (long long)*v->step,
                  metrics_num(n1, sizeof n1, loss));
    return loss;
}
