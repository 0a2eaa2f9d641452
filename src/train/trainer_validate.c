/* trainer_validate.c — the validation loss (the same batches every time, every rank running
 * the same number of passes) and its line and record. */
#include "train/trainer_internal.h"
#include <stdio.h>

double trainer_validate(trainer_t *tr) {
    /* &model seq_len, whatever the stage: validation losses stay comparable */
    const int B = tr->micro_batch, T = tr->val_sampler.seq_len, n = tr->cfg->val_batches;
    double sum = 0.0;
    /* Batch i goes to dp rank i % dp; the same batches every time, so curves are comparable.
     * Every rank runs the same number of forward passes, ceil(n / dp): a forward has dp-group
     * collectives (ZeRO-3's gathers, the experts' all-to-all), so where n is not a multiple of dp
     * a rank without a batch of its own runs one more pass (on batch i mod n) whose loss it
     * leaves out. A bad window is agreed by every rank before the pass, so none is left waiting
     * in one. */
    char err[1024] = "";
    /* context parallelism: the cp ranks of a data rank read the same batch, each keeping its
     * chunks (trainer_cp_local); each adds its rows' mean loss, so a batch is counted cp times */
    const int dp = tr->grid->data_dp, cp = tr->grid->cp, passes = (n + dp - 1) / dp;
    for (int k = 0; k < passes; k++) {
        const int i = tr->grid->rank_data + k * dp;
        const int bad = sampler_fill(&tr->val_sampler, (uint64_t)(i % n) * B, B, tr->inputs,
                                     tr->targets, err, sizeof err) != 0;
        trainer_agree_data_error(tr->cfg, MPI_COMM_WORLD, bad, err);
        trainer_cp_local(tr, tr->inputs, B, T);
        trainer_cp_local(tr, tr->targets, B, T);
        const double loss = pipe_run(&tr->pipe, tr->inputs, tr->targets, 1, B, T / cp, false, 0.0f);
        if (i < n) sum += loss;
    }
    comm_allreduce_sum_double(&sum, 1, tr->grid->pp_group, COMM_OTHER);
    comm_allreduce_sum_double(&sum, 1, tr->grid->dp_group, COMM_OTHER);
    return sum / ((double)n * cp);
}

double trainer_run_validation(trainer_t *tr) {
    double v = trainer_validate(tr);
    char n1[32];
    if (is_root(tr)) printf("val  %lld | val_loss %.4f\n", (long long)tr->prog.step, v);
    metrics_write(&tr->metrics, "\"step\":%lld,\"val_loss\":%s", (long long)tr->prog.step,
                  metrics_num(n1, sizeof n1, v));
    return v;
}
