/* logits_dump.c — llmtrain's logits for given token ids, for the llmconvert tests (which compare
 * them with transformers and onnxruntime): loads the namelist's &run init_from weights through
 * the same reader as llmtrain (ckpt_load: checksums and the model checked against the namelist),
 * runs the library's forward (gpt_forward, fp32 unless &train precision says otherwise) and
 * writes the logits of every position over the real vocabulary. Single process.
 *   usage: logits_dump input.nml IDS.i32 B T OUT.f32
 *   IDS.i32: B*T int32 token ids (row-major [B, T]); OUT.f32: B*T*vocab_size float32 [B, T, V]. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/gpt.h"

static int *read_ids(const char *path, size_t n, int vocab) {
    FILE *f = fopen(path, "rb");
    if (!f) fatal_user("logits_dump: cannot open %s", path);
    int *ids = xmalloc(sizeof(int) * n);
    if (fread(ids, sizeof(int), n, f) != n) fatal_user("logits_dump: %s holds fewer than %zu ids", path, n);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) fatal_user("logits_dump: id %d out of range", ids[i]);
    return ids;
}

static void load_weights(gpt_t *m, const config_t *cfg) {
    float *host = xcalloc(m->P.total, sizeof(float));
    ckpt_meta_t want = {0, cfg->seed, cfg->vocab_size, config_padded_vocab(cfg), cfg->n_layer,
                        cfg->n_head, cfg->d_model, cfg->d_ff, cfg->seq_len, NULL, "", NULL};
    char msg[4096];
    if (ckpt_load(cfg->init_from, MPI_COMM_WORLD, MPI_COMM_WORLD, MPI_COMM_SELF, &m->P.ckpt, host, NULL, NULL, NULL,
                  &want, NULL, msg, sizeof msg) != 0)
        fatal_user("logits_dump: &run init_from: %s", msg);
    m->ops->to_device(m->params, host, m->P.total * sizeof(float));
    xfree(host);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    if (argc != 6) {
        fprintf(stderr, "usage: logits_dump input.nml IDS.i32 B T OUT.f32\n");
        return 2;
    }
    config_t cfg;
    config_load(argv[1], &cfg);
    const int B = atoi(argv[3]), T = atoi(argv[4]);
    if (B < 1 || T < 1 || T > cfg.seq_len) fatal_user("logits_dump: need 1 <= B and 1 <= T <= seq_len");
    if (!cfg.init_from[0]) fatal_user("logits_dump: %s sets no &run init_from", argv[1]);
    int *ids = read_ids(argv[2], (size_t)B * T, cfg.vocab_size);
    gpt_t m;
    gpt_parallel_t serial = gpt_serial();
    gpt_create(&m, MODEL_SPEC_OF(&cfg), ops_cpu(), B, T, &serial, NULL, NULL);
    load_weights(&m, &cfg);
    const gpt_pass_t pass = {.forward_only = true};
    gpt_forward(&m, &pass, ids, NULL, B, T);
    float *row = xmalloc(sizeof(float) * (size_t)m.V);
    FILE *out = fopen(argv[5], "wb");
    if (!out) fatal_user("logits_dump: cannot create %s", argv[5]);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            gpt_logits_row(&m, b, t, T, row);
            if (fwrite(row, sizeof(float), (size_t)m.V, out) != (size_t)m.V)
                fatal_user("logits_dump: writing %s failed", argv[5]);
        }
    if (fclose(out) != 0) fatal_user("logits_dump: writing %s failed", argv[5]);
    printf("logits_dump: %d x %d positions x %d logits -> %s\n", B, T, m.V, argv[5]);
    xfree(row);
    xfree(ids);
    gpt_destroy(&m);
    config_destroy(&cfg);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
