/* device.c — opening this rank's GPU and its line in the startup table (see device.h). Plain C:
 * only the CUDA runtime API, no kernels and no MPI, so mpicc compiles it with the CUDA include
 * path. */
#include "kernels/cuda/device.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/cuda_check.h"
#include "kernels/cuda/device_plan.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#define PEERS_TEXT 1024

static int opened_device = -1;

int cuda_device_index(void) { return opened_device; }

/* The runtime's answer to "how many devices", as the plan's failure kinds. */
static cuda_plan_runtime_t count_devices(int *n, char *detail, size_t len) {
    *n = 0;
    const cudaError_t e = cudaGetDeviceCount(n);
    snprintf(detail, len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    if (e == cudaSuccess) return *n > 0 ? CUDA_PLAN_OK : CUDA_PLAN_NO_DEVICE;
    if (e == cudaErrorNoDevice) return CUDA_PLAN_NO_DEVICE;
    if (e == cudaErrorInsufficientDriver) {
        int drv = 0;
        (void)cudaDriverGetVersion(&drv); /* 0 when no driver is installed */
        return drv == 0 ? CUDA_PLAN_NO_DRIVER : CUDA_PLAN_OLD_DRIVER;
    }
    return CUDA_PLAN_OTHER;
}

/* Device `dev` made current, its context created now (so a failure shows here, not in the first
 * op), and checked against the run's precision. */
static int open_device(int dev, dtype_t precision, char *err, size_t len) {
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    if (cuda_plan_check_device(dev, p.name, p.major, p.minor, precision, err, len)) return -1;
    CUDA_CHECK(cudaSetDevice(dev));
    CUDA_CHECK(cudaFree(NULL)); /* creates the primary context */
    opened_device = dev;
    return 0;
}

int cuda_device_open(int local_rank, int ranks_on_node, const int *nearest, dtype_t precision,
                     char *err, size_t len) {
    int n = 0, drv = 0, rt = 0;
    char detail[160];
    const cuda_plan_runtime_t status = count_devices(&n, detail, sizeof detail);
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    if (status != CUDA_PLAN_OK) {
        cuda_plan_runtime_message(status, drv, rt, detail, err, len);
        return -1;
    }
    const int dev = cuda_plan_choose_device(local_rank, ranks_on_node, n, nearest, err, len);
    return dev >= 0 ? open_device(dev, precision, err, len) : -1;
}

/* "NVLink 1,2 | PCIe P2P 3 | no P2P 4": how the open device reaches each other visible one. A
 * link with native atomics is taken for NVLink (PCIe peer-to-peer has none); the runtime API has
 * no direct way to name the link (NVML has). */
static void describe_peers(int dev, char *out, size_t len) {
    int n = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    char group[3][256] = {"", "", ""};
    static const char *const title[3] = {"NVLink", "PCIe P2P", "no P2P"};
    for (int p = 0; p < n; p++) {
        if (p == dev) continue;
        int access = 0, atomics = 0;
        CUDA_CHECK(cudaDeviceCanAccessPeer(&access, dev, p));
        if (access) CUDA_CHECK(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, dev, p));
        const int g = !access ? 2 : atomics ? 0 : 1;
        const size_t used = strlen(group[g]);
        snprintf(group[g] + used, sizeof group[g] - used, "%s%d", used ? "," : "", p);
    }
    out[0] = '\0';
    for (int g = 0; g < 3; g++) {
        if (!group[g][0]) continue;
        const size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s %s", used ? " | " : "", title[g], group[g]);
    }
    if (!out[0]) snprintf(out, len, "none (the only visible GPU)");
}

void cuda_device_describe(int world_rank, const char *host, char *line, size_t len) {
    const int dev = opened_device;
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    char mem[32], peers[PEERS_TEXT];
    format_bytes((double)p.totalGlobalMem, mem);
    describe_peers(dev, peers, sizeof peers);
    snprintf(line, len, "rank %d %s: GPU %d %s (cc %d.%d, %d SMs, %s, PCI %04x:%02x:%02x.0), peers: %s",
             world_rank, host, dev, p.name, p.major, p.minor, p.multiProcessorCount, mem,
             p.pciDomainID, p.pciBusID, p.pciDeviceID, peers);
}
