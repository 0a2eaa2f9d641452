/* xent_reg_dump.c — the CPU backend's cross-entropy with label smoothing and z-loss, for the
 * PyTorch comparison in validation/e2e/label_smoothing_zloss_torch.sh. The logits [N, Vp]
 * (Vp - V padding columns) are split into tp vocabulary shards of Vp / tp columns and run
 * through the ops table as model/gpt.c runs them, the all-reduces done here by hand (max of the
 * maxima; sums of the sums of exp, target logits and row sums). Writes losses[N], zloss[N] and
 * dlogits[N, Vp] (the gradient of mean(losses + zloss), dloss = 1/N), float32 raw.
 * usage: xent_reg_dump N V Vp tp smoothing z_coef logits.f32 targets.i32 out.f32 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "kernels/ops.h"

static void *read_all(const char *path, size_t bytes) {
    FILE *f = fopen(path, "rb");
    void *p = malloc(bytes);
    if (!f || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %s\n", path); exit(1); }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: xent_reg_dump N V Vp tp smoothing z_coef logits.f32 targets.i32 out.f32\n");
        return 2;
    }
    const int N = atoi(argv[1]), V = atoi(argv[2]), Vp = atoi(argv[3]), tp = atoi(argv[4]);
    const float e = strtof(argv[5], NULL), zc = strtof(argv[6], NULL);
    const int Vl = Vp / tp;
    float *logits = read_all(argv[7], (size_t)N * Vp * sizeof(float));
    int *targets = read_all(argv[8], (size_t)N * sizeof(int));
    const ops_t *o = ops_cpu();
    float *sh = calloc((size_t)tp * N * Vl, sizeof(float)), *part = calloc((size_t)N, sizeof(float));
    float *mx = calloc(N, sizeof(float)), *se = calloc(N, sizeof(float)), *tl = calloc(N, sizeof(float));
    float *rs = calloc(N, sizeof(float)), *loss = calloc(N, sizeof(float)), *z = calloc(N, sizeof(float));
    for (int r = 0; r < tp; r++)
        for (int i = 0; i < N; i++)
            memcpy(sh + ((size_t)r * N + i) * Vl, logits + (size_t)i * Vp + (size_t)r * Vl, Vl * sizeof(float));
    for (int i = 0; i < N; i++) mx[i] = -INFINITY;
#define SHARD(r) (sh + (size_t)(r) * N * Vl)
#define VALID(r) (V - (r) * Vl < 0 ? 0 : V - (r) * Vl > Vl ? Vl : V - (r) * Vl)
    for (int r = 0; r < tp; r++) {
        o->xent_row_max(part, SHARD(r), N, Vl, VALID(r));
        for (int i = 0; i < N; i++) mx[i] = fmaxf(mx[i], part[i]);
    }
    for (int r = 0; r < tp; r++) {
        o->xent_row_sumexp(part, SHARD(r), mx, N, Vl, VALID(r));
        for (int i = 0; i < N; i++) se[i] += part[i];
        o->xent_target_logit(part, SHARD(r), targets, N, Vl, r * Vl);
        for (int i = 0; i < N; i++) tl[i] += part[i];
        o->xent_row_sum(part, SHARD(r), N, Vl, VALID(r));
        for (int i = 0; i < N; i++) rs[i] += part[i];
    }
    o->xent_losses_regularized(loss, z, mx, se, tl, rs, N, V, e, zc);
    FILE *out = fopen(argv[9], "wb");
    fwrite(loss, sizeof(float), N, out);
    fwrite(z, sizeof(float), N, out);
    for (int r = 0; r < tp; r++)
        o->xent_backward_regularized_inplace(SHARD(r), mx, se, targets, 1.0f / N, N, Vl, VALID(r),
                                             r * Vl, V, e, zc);
    for (int i = 0; i < N; i++)
        for (int r = 0; r < tp; r++) fwrite(SHARD(r) + (size_t)i * Vl, sizeof(float), Vl, out);
    fclose(out);
    free(logits), free(targets), free(sh), free(part), free(mx), free(se), free(tl), free(rs);
    free(loss), free(z);
    return 0;
}
