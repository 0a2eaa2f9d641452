/* device_plan.h — the CUDA backend's decisions that need no GPU: which device a rank opens, whether
 * a device is usable for a run, the message for each failure, and the peak FLOP/s of a device from
 * its properties. Pure functions (no CUDA headers), compiled in every build so they are unit-tested
 * on CPU machines (validation/unit/test_cuda_plan.c).
 * Owns: the peak-rate table, the device-choice rule, the wording of device errors.
 * Uses: kernels/precision.h. Used by: kernels/cuda/device.c, kernels/cuda/ops_cuda.cu. */
#ifndef LLMT_DEVICE_PLAN_H
#define LLMT_DEVICE_PLAN_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/precision.h"
#ifdef __cplusplus
extern "C" {
#endif

/* What the CUDA runtime said when asked for devices (device.c maps cudaError_t onto these). */
typedef enum cuda_plan_runtime {
    CUDA_PLAN_OK = 0,
    CUDA_PLAN_NO_DRIVER,    /* cudaErrorInsufficientDriver with no driver at all (version 0) */
    CUDA_PLAN_OLD_DRIVER,   /* cudaErrorInsufficientDriver: the driver is older than the runtime */
    CUDA_PLAN_NO_DEVICE,    /* cudaErrorNoDevice, or a count of 0 */
    CUDA_PLAN_OTHER         /* anything else: the runtime's own text is quoted */
} cuda_plan_runtime_t;

/* The message for a failed device query: names the cause and what to do. driver_version and
 * runtime_version are CUDA's encoding (1000 * major + 10 * minor; 0 = none); detail is the
 * runtime's text (used for CUDA_PLAN_OTHER). */
void cuda_plan_runtime_message(cuda_plan_runtime_t what, int driver_version, int runtime_version,
                               const char *detail, char *msg, size_t len);

/* The device index this rank opens, of n_devices visible ones (CUDA_VISIBLE_DEVICES already
 * applied by the runtime). topo_index[ranks_on_node]: each node-local rank's nearest GPU from
 * hwloc (topology_t.gpu_index, -1 = none), or NULL. The topology's choice is taken when every
 * node-local rank has one, each in [0, n_devices) and no two equal (one GPU per rank); otherwise
 * device = local_rank. Returns -1 with msg set when ranks_on_node > n_devices (or n_devices <= 0). */
int cuda_plan_choose_device(int local_rank, int ranks_on_node, int n_devices,
                            const int *topo_index, char *msg, size_t len);

/* Whether device `dev` (name, compute capability major.minor) can run with storage precision p:
 * 0, or -1 with msg set (bf16 on a GPU without bf16; compute capability below 8.0). */
int cuda_plan_check_device(int dev, const char *name, int major, int minor, dtype_t p, char *msg,
                           size_t len);

/* Dense FLOP per cycle per SM of products of type t on compute capability major.minor (fp32 with
 * tf32: TF32 tensor cores; fp32 without: the FP32 cores' FMA rate). 0 for cc < 8.0. *family gets
 * the table row used ("sm_90"; a newer cc than the table's takes its newest row). */
double cuda_plan_flop_per_cycle_sm(int major, int minor, dtype_t t, bool tf32, const char **family);

/* Peak FLOP/s of products of type t: SMs x clock x FLOP/cycle/SM. clock_khz is the device's
 * maximum clock (cudaDevAttrClockRate); for the parts whose data sheet rates tensor cores at a
 * lower clock (H100/H200 SXM: 1.83 GHz, H100 PCIe: 1.62 GHz) that clock is used instead, so the
 * peak is the data sheet's (989.4 TFLOP/s dense bf16 on H200 SXM). how[len] shows the product. */
double cuda_plan_peak(int major, int minor, int sms, int clock_khz, dtype_t t, bool tf32, char *how,
                      size_t len);
#ifdef __cplusplus
}
#endif
#endif
