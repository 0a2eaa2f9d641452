/* round_dump.c — the CPU backend's low-precision rounding, for the PyTorch comparison in
 * validation/e2e/precision_rounding.sh: reads float32 values (raw little-endian) from stdin and
 * writes their bf16 and fp16 roundings (float32, raw) to stdout, through the ops table as the
 * model calls it. usage: round_dump bf16|fp16 < in.f32 > out.f32 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "kernels/ops.h"

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "bf16") && strcmp(argv[1], "fp16"))) {
        fprintf(stderr, "usage: round_dump bf16|fp16 < in.f32 > out.f32\n");
        return 2;
    }
    size_t cap = 1 << 20, n = 0;
    float *x = malloc(cap * sizeof(float));
    for (size_t got; (got = fread(x + n, sizeof(float), cap - n, stdin)) > 0;) {
        n += got;
        if (n == cap) x = realloc(x, (cap *= 2) * sizeof(float));
    }
    const ops_t *o = ops_cpu();
    o->quantize(x, n, dtype_from_name(argv[1]));
    fwrite(x, sizeof(float), n, stdout);
    free(x);
    return 0;
}
