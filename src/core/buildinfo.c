/* buildinfo.c — the build's description (see buildinfo.h). build/buildinfo_gen.h comes from the
^ * Makefile (commit, dirty flag, compiler command, flags, GEMM choice); the Makefile recompiles
 * this file whenever any other object of the program is recompiled, so __DATE__ / __TIME__ are
 * the time of the last build. */
#include "core/buildinfo.h"
#include <hdf5.h>
#include <hwloc.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "buildinfo_gen.h" /* $(BUILD)/buildinfo_gen.h, written by the Makefile */
#include "core/version.h"
#ifdef LLMT_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif
#if LLMT_GEMM_IS_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif
#if defined(__has_include)
#if __has_include(<papi.h>)
#include <papi.h>
#endif
#endif

/* __VERSION__ is "12.2.0" for gcc, "Clang 14.0.6 ..." (or "Intel(R) ...") for the others */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER) && !defined(__INTEL_LLVM_COMPILER)
#define COMPILER_ID "gcc " __VERSION__
#else
#define COMPILER_ID __VERSION__
#endif

/* __DATE__ "Mar  5 2025" and __TIME__ "12:34:56" as "2025-03-05T12:34:56". */
static void iso_build_date(char *out, size_t len) {
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    const char *date = __DATE__;
    char mon[4] = {date[0], date[1], date[2], '\0'};
    const char *at = strstr(months, mon);
    int day = (date[4] == ' ' ? 0 : date[4] - '0') * 10 + (date[5] - '0');
    snprintf(out, len, "%s-%02d-%02dT%s", date + 7, at ? (int)(at - months) / 3 + 1 : 0, day,
             __TIME__);
}

static void mpi_version(char *out, size_t len) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    if (MPI_Get_library_version(text, &n) != MPI_SUCCESS) n = 0;
    text[n < MPI_MAX_LIBRARY_VERSION_STRING ? n : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    text[strcspn(text, "\r\n")] = '\0';
    snprintf(out, len, "%s", n ? text : "unknown");
}

static void gemm_version(char *out, size_t len) {
#if LLMT_GEMM_IS_ONEDNN
    const dnnl_version_t *v = dnnl_version();
    const bool hash = v->hash && v->hash[0] && strcmp(v->hash, "N/A") != 0; /* Debian: "N/A" */
    snprintf(out, len, "oneDNN %d.%d.%d%s%s%s", v->major, v->minor, v->patch, hash ? " (" : "",
             hash ? v->hash : "", hash ? ")" : "");
#elif defined(OPENBLAS_VERSION)
    /* " OpenBLAS 0.3.21 " and the build's configuration ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...") */
    snprintf(out, len, "%s", openblas_get_config());
#else
    snprintf(out, len, "CBLAS (%s)", LLMT_GEMM_LIBS);
#endif
}

static void papi_version(char *out, size_t len) {
#ifdef PAPI_VER_CURRENT
    snprintf(out, len, "%d.%d.%d", PAPI_VERSION_MAJOR(PAPI_VER_CURRENT),
             PAPI_VERSION_MINOR(PAPI_VER_CURRENT), PAPI_VERSION_REVISION(PAPI_VER_CURRENT));
#else
    snprintf(out, len, "not built");
#endif
}

void buildinfo_get(buildinfo_t *b) {
    memset(b, 0, sizeof *b);
    b->version = LLMT_VERSION;
    b->commit = LLMT_GIT_COMMIT;
    b->dirty = LLMT_GIT_DIRTY;
    b->compiler = LLMT_CC " (" COMPILER_ID ")";
    b->cflags = LLMT_CFLAGS;
    iso_build_date(b->build_date, sizeof b->build_date);
    mpi_version(b->mpi, sizeof b->mpi);
    unsigned maj = 0, min = 0, rel = 0;
    if (H5get_libversion(&maj, &min, &rel) >= 0) snprintf(b->hdf5, sizeof b->hdf5, "%u.%u.%u", maj, min, rel);
    else snprintf(b->hdf5, sizeof b->hdf5, "unknown");
    gemm_version(b->gemm, sizeof b->gemm);
    unsigned hw = hwloc_get_api_version();
    snprintf(b->hwloc, sizeof b->hwloc, "%u.%u.%u", hw >> 16, (hw >> 8) & 0xff, hw & 0xff);
    papi_version(b->papi, sizeof b->papi);
#ifdef LLMT_CUDA /* make CUDA=1: the GPU itself is in the startup table */
    static char cuda[48], nccl[48];
    int rt = 0, nv = 0;
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess)
        snprintf(cuda, sizeof cuda, "runtime %d.%d (make CUDA=1)", rt / 1000, rt % 1000 / 10);
    else
        snprintf(cuda, sizeof cuda, "built (make CUDA=1)");
    if (ncclGetVersion(&nv) == ncclSuccess) /* the data path's collectives on GPUs */
        snprintf(nccl, sizeof nccl, "%d.%d.%d", nv / 10000, nv / 100 % 100, nv % 100);
    else
        snprintf(nccl, sizeof nccl, "unknown");
    b->cuda = cuda;
    b->nccl = nccl;
#else
    b->cuda = "not built"; /* CPU-only build: the CUDA backend is not compiled (Makefile.inc CUDA) */
    b->nccl = "not built";
#endif
}

void buildinfo_print_version(FILE *f) {
    buildinfo_t b;
    buildinfo_get(&b);
    fprintf(f, "llmtrain %s, commit %s%s, built %s\n"
            "compiler: %s\nflags: %s\n"
            "libraries: %s; HDF5 %s; GEMM %s; hwloc %s; PAPI %s; CUDA %s; NCCL %s\n",
            b.version, b.commit, !strcmp(b.dirty, "true") ? " (with uncommitted changes)" : "",
            b.build_date, b.compiler, b.cflags, b.mpi, b.hdf5, b.gemm, b.hwloc, b.papi, b.cuda,
            b.nccl);
}
