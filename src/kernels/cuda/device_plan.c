/* device_plan.c — the CUDA backend's GPU-free decisions (see device_plan.h). */
#include "kernels/cuda/device_plan.h"
#include <stdio.h>
#include <stdlib.h>

static void version_text(int v, char out[16]) {
    snprintf(out, 16, "%d.%d", v / 1000, (v % 1000) / 10);
}

void cuda_plan_runtime_message(cuda_plan_runtime_t what, int driver_version, int runtime_version,
                               const char *detail, char *msg, size_t len) {
    char drv[16], rt[16];
    version_text(driver_version, drv);
    version_text(runtime_version, rt);
    switch (what) {
    case CUDA_PLAN_OK: snprintf(msg, len, "no error"); break;
    case CUDA_PLAN_NO_DRIVER:
        snprintf(msg, len, "&run device = 'cuda': no NVIDIA driver found (libcuda.so could not be "
                           "loaded): run on a GPU node, or use device = 'cpu'");
        break;
    case CUDA_PLAN_OLD_DRIVER:
        snprintf(msg, len, "&run device = 'cuda': the NVIDIA driver supports CUDA %s, older than "
                           "the CUDA %s runtime llmtrain was built with: update the driver or "
                           "build with an older CUDA toolkit (CUDA_HOME, see INSTALL)", drv, rt);
        break;
    case CUDA_PLAN_NO_DEVICE:
        snprintf(msg, len, "&run device = 'cuda': no CUDA device visible (driver CUDA %s; check "
                           "CUDA_VISIBLE_DEVICES and the job's GPU request)", drv);
        break;
    case CUDA_PLAN_OTHER:
        snprintf(msg, len, "&run device = 'cuda': the CUDA runtime cannot list devices: %s",
                 detail ? detail : "unknown error");
        break;
    }
}

/* Whether the topology gives every node-local rank its own valid device. */
static bool topology_choice_usable(const int *topo_index, int ranks_on_node, int n_devices) {
    if (!topo_index) return false;
    for (int r = 0; r < ranks_on_node; r++) {
        if (topo_index[r] < 0 || topo_index[r] >= n_devices) return false;
        for (int q = 0; q < r; q++)
            if (topo_index[q] == topo_index[r]) return false;
    }
    return true;
}

int cuda_plan_choose_device(int local_rank, int ranks_on_node, int n_devices,
                            const int *topo_index, char *msg, size_t len) {
    if (n_devices <= 0 || ranks_on_node > n_devices) {
        snprintf(msg, len, "&run device = 'cuda': %d rank%s on this node but %d GPU%s visible: "
                           "start at most %d rank%s per node (one GPU each), or make more GPUs "
                           "visible (CUDA_VISIBLE_DEVICES)",
                 ranks_on_node, ranks_on_node == 1 ? "" : "s", n_devices, n_devices == 1 ? "" : "s",
                 n_devices, n_devices == 1 ? "" : "s");
        return -1;
    }
    if (topology_choice_usable(topo_index, ranks_on_node, n_devices)) return topo_index[local_rank];
    return local_rank;
}

int cuda_plan_check_device(int dev, const char *name, int major, int minor, dtype_t p, char *msg,
                           size_t len) {
    /* bf16 arithmetic (and cuBLASLt bf16 products) needs Ampere, sm_80 */
    if (p == DT_BF16 && major < 8) {
        snprintf(msg, len, "&train precision = 'bf16': GPU %d (%s, compute capability %d.%d) has "
                           "no bf16: use precision = 'fp16' or 'fp32' on a GPU of compute "
                           "capability 8.0 or newer", dev, name, major, minor);
        return -1;
    }
    if (major < 8) {
        snprintf(msg, len, "&run device = 'cuda': GPU %d (%s) has compute capability %d.%d, too "
                           "old: needs sm_80 or newer (Ampere, Hopper; llmtrain is built for "
                           "sm_80 and sm_90)", dev, name, major, minor);
        return -1;
    }
    return 0;
}

/* Dense FLOP/cycle/SM by architecture (from NVIDIA's data sheets: rate / (SMs x clock)):
 *   row     bf16/fp16  tf32  fp32   e.g. (data sheet, dense)
 *   sm_80     2048     1024   128   A100: 312 TF bf16 = 108 SMs x 2048 x 1.41 GHz; 19.5 TF fp32
 *   sm_86     1024      512   256   A40: 149.7 TF bf16 = 84 x 1024 x 1.74 GHz; 37.4 TF fp32
 *   sm_89     1024      512   256   L40S: 362 TF bf16 = 142 x 1024 x 2.52 GHz; 91.6 TF fp32
 *   sm_90     4096     2048   256   H100/H200 SXM: 989.4 TF bf16 = 132 x 4096 x 1.83 GHz;
 *                                   67 TF fp32 = 132 x 256 x 1.98 GHz
 *   sm_100    8192     4096   256   B200: 2.25 PF bf16 = 148 x 8192 x 1.86 GHz
 * (GeForce parts of sm_86/89 run bf16 with fp32 accumulation at half the rate: this overstates
 * them; a cc between rows takes the row below it.) */
typedef struct rate_row {
    int major, minor;
    const char *family;
    double half, tf32, fp32;
} rate_row_t;
static const rate_row_t rate_rows[] = {
    {8, 0, "sm_80", 2048, 1024, 128}, {8, 6, "sm_86", 1024, 512, 256},
    {8, 9, "sm_89", 1024, 512, 256},  {9, 0, "sm_90", 4096, 2048, 256},
    {10, 0, "sm_100", 8192, 4096, 256},
};
#define N_RATE_ROWS (sizeof rate_rows / sizeof rate_rows[0])

double cuda_plan_flop_per_cycle_sm(int major, int minor, dtype_t t, bool tf32, const char **family) {
    const rate_row_t *row = NULL;
    for (size_t i = 0; i < N_RATE_ROWS; i++)
        if (major > rate_rows[i].major || (major == rate_rows[i].major && minor >= rate_rows[i].minor))
            row = &rate_rows[i];
    if (family) *family = row ? row->family : "none";
    if (!row) return 0;
    if (t != DT_FP32) return row->half;
    return tf32 ? row->tf32 : row->fp32;
}

/* Parts whose data sheet rates tensor cores at a clock below the maximum the device reports
 * (matched on cc, SM count and that maximum within 5%). */
typedef struct tensor_clock {
    int major, minor, sms, max_khz, tensor_khz;
    const char *part;
} tensor_clock_t;
static const tensor_clock_t tensor_clocks[] = {
    {9, 0, 132, 1980000, 1830000, "H100/H200 SXM"},
    {9, 0, 114, 1755000, 1620000, "H100 PCIe"},
};

static const tensor_clock_t *find_tensor_clock(int major, int minor, int sms, int clock_khz) {
    for (size_t i = 0; i < sizeof tensor_clocks / sizeof tensor_clocks[0]; i++) {
        const tensor_clock_t *c = &tensor_clocks[i];
        if (c->major == major && c->minor == minor && c->sms == sms &&
            labs((long)clock_khz - c->max_khz) * 20 <= c->max_khz)
            return c;
    }
    return NULL;
}

double cuda_plan_peak(int major, int minor, int sms, int clock_khz, dtype_t t, bool tf32, char *how,
                      size_t len) {
    const char *family;
    const double fpc = cuda_plan_flop_per_cycle_sm(major, minor, t, tf32, &family);
    const bool tensor = t != DT_FP32 || tf32;
    const tensor_clock_t *tc = tensor ? find_tensor_clock(major, minor, sms, clock_khz) : NULL;
    const int khz = tc ? tc->tensor_khz : clock_khz;
    const double peak = (double)sms * fpc * khz * 1e3;
    const char *kind = t != DT_FP32 ? dtype_name(t) : tf32 ? "tf32" : "fp32 (FP32 cores)";
    if (how && len) {
        if (fpc == 0)
            snprintf(how, len, "compute capability %d.%d: not in the rate table (needs sm_80+)",
                     major, minor);
        else if (tc)
            snprintf(how, len, "%d SMs x %.0f FLOP/cycle/SM (%s dense %s) x %.2f GHz (%s data-sheet "
                               "tensor clock; the device reports %.2f GHz max) = %.1f TFLOP/s",
                     sms, fpc, family, kind, khz / 1e6, tc->part, clock_khz / 1e6, peak / 1e12);
        else
            snprintf(how, len, "%d SMs x %.0f FLOP/cycle/SM (%s dense %s) x %.2f GHz (device max "
                               "clock) = %.1f TFLOP/s", sms, fpc, family, kind, khz / 1e6, peak / 1e12);
    }
    return peak;
}
