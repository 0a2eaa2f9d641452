/* gpt_dump.c — writes what the PyTorch reference test compares against:
 *   OUT/weights.h5  the step-0 weights (/model/<name>, global shapes)
 *   OUT/grads.h5    the step-0 gradient of the global-batch mean loss (same layout)
 *   OUT/loss.txt    the step-0 loss
 * for the namelist given, computed through the library exactly as a training step does
 * (micro-batches with gradient accumulation, sampler order). Single process.
 * usage: gpt_dump input.nml OUT_DIR */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/sampler.h"
#include "model/gpt.h"

static void write_tensor_file(const char *dir, const char *file, const gpt_t *m, const float *dev,
                              const config_t *cfg) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    float *host = xmalloc(m->P.total * sizeof(float));
    m->ops->to_host(host, dev, m->P.total * sizeof(float));
    ckpt_meta_t meta = {0, cfg->seed, m->V, m->Vp, cfg->n_layer, cfg->n_head, cfg->d_model,
                        cfg->d_ff, cfg->seq_len, cfg->text, "", NULL};
    char err[2048];
    if (ckpt_write_weights(path, MPI_COMM_WORLD, &m->P.ckpt, host, &meta, CKPT_OWNS_ALL, err, sizeof err) != 0)
        fatal_user("%s", err);
    xfree(host);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    if (argc != 3) {
        fprintf(stderr, "usage: gpt_dump input.nml OUT_DIR\n");
        return 2;
    }
    config_t cfg;
    config_load(argv[1], &cfg);
    const int B = cfg.micro_batch, T = cfg.seq_len;
    const int G = cfg.global_batch > 0 ? cfg.global_batch : B, accum = G / B;
    shard_set_t set;
    sampler_t s;
    char err[1024];
    if (shard_set_open(&set, cfg.train_files, "train_files", cfg.choice.data_format, err, sizeof err))
        fatal_user("%s", err);
    if (shard_set_check_tokens(&set, cfg.vocab_size, 0, 1, err, sizeof err)) fatal_user("%s", err);
    if (sampler_create(&s, &set, T, cfg.vocab_size, cfg.shuffle, (uint64_t)cfg.seed, err, sizeof err))
        fatal_user("%s", err);
    gpt_t m;
    gpt_parallel_t serial = gpt_serial();
    gpt_create(&m, MODEL_SPEC_OF(&cfg), ops_cpu(), B, T, &serial, NULL, NULL);
    gpt_init_params(&m, (uint64_t)cfg.seed);
    int *in = xmalloc(sizeof(int) * (size_t)B * T), *tg = xmalloc(sizeof(int) * (size_t)B * T);
    double loss = 0.0;
    for (int a = 0; a < accum; a++) {
        if (sampler_fill(&s, (uint64_t)a * B, B, in, tg, err, sizeof err)) fatal_user("%s", err);
        const gpt_pass_t pass = {.micro = a, .dloss = 1.0f / ((float)B * T * accum)};
        loss += gpt_forward(&m, &pass, in, tg, B, T) / accum;
        gpt_backward(&m, &pass, B, T, a == 0);
    }
    write_tensor_file(argv[2], "weights.h5", &m, m.params, &cfg);
    write_tensor_file(argv[2], "grads.h5", &m, m.grads, &cfg);
    char path[1024];
    snprintf(path, sizeof path, "%s/loss.txt", argv[2]);
    FILE *f = fopen(path, "w");
    PTR_CHECK(f);
    fprintf(f, "%.9g\n", loss);
    fclose(f);
    printf("gpt_dump: step-0 loss %.6f over %d sequences (%d micro-batches)\n", loss, G, accum);
    xfree(in);
    xfree(tg);
    gpt_destroy(&m);
    sampler_destroy(&s);
    shard_set_close(&set);
    config_destroy(&cfg);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
