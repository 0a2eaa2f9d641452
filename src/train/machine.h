/* machine.h — a machine description for the performance model (train/perfmodel.h): the &machine
 * group of a namelist file (inputs/machines/NAME.nml), read by the namelist parser with its own key
 * table (config/schema.h), every key required, every rate > 0. Per device: peak FLOP/s per
 * precision (dense), a GEMM-efficiency model, memory capacity and bandwidth; per node: devices
 * and the link between them; between nodes: the bandwidth of a node's adapters together, and
 * latency; the all-reduce algorithm. `llmtrain --calibrate` writes one measured here
 * (train/calibrate.c).
 *
 * GEMM efficiency: a product out[M, N] = a[M, K] b[K, N] runs at
 *   peak * gemm_efficiency * M/(M + h) * N/(N + h) * K/(K + h),   h = gemm_half_size
 * (a large product reaches gemm_efficiency of the peak; each dimension far below h starves the
 * device in proportion). The form is the documented assumption of docs/planning.md; the two
 * numbers come from measurement (local.nml) or from the file's stated source.
 * Owns: machine_t. Uses: config/namelist, config/schema, core/. Used by: train/perfmodel,
 * train/calibrate, main (--machine). */
#ifndef LLMT_MACHINE_H
#define LLMT_MACHINE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum { MACHINE_RING, MACHINE_TREE } machine_collective_t;

typedef struct machine {
    char name[64];
    bool gpu;                  /* device = 'gpu': the devices have memory of their own */
    double peak_bf16, peak_fp16, peak_fp32; /* FLOP/s per device, dense */
    double gemm_efficiency;    /* fraction of peak of a large product, (0, 1] */
    double gemm_half_size;     /* h of the efficiency model, elements */
    double memory_bytes;       /* per device */
    double memory_bw;          /* bytes/s per device */
    int devices_per_node;
    int max_nodes;             /* 0: as many as asked; local.nml: 1 (more ranks share cores) */
    double intra_bw, intra_lat;  /* bytes/s per device and direction, seconds */
    double inter_bw, inter_lat;  /* bytes/s per node (all its adapters), seconds */
    machine_collective_t collective;
} machine_t;

/* Read the &machine group of `path` into m; 0, or -1 with one message naming the file and key
 * in err ("path:line:col: &machine key: ..." or "path: &machine: missing key 'x'"). */
int machine_load(const char *path, machine_t *m, char *err, size_t errlen);
/* Write m as a &machine namelist with `comment` lines ('! ...') above each key's value. */
void machine_write(FILE *f, const machine_t *m, const char *const comments[]);
/* Names of the keys in machine_write's order (comments[] is indexed by them). */
extern const char *const machine_key_names[];
extern const int machine_n_keys;
/* FLOP/s of one product out[M, N] = a[M, K] b[K, N] at peak `peak` (the model above). */
double machine_gemm_rate(const machine_t *m, double peak, double M, double N, double K);
#endif
