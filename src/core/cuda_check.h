/* cuda_check.h — the error convention (core/error.h) for CUDA, cuBLAS(Lt) and NCCL calls: a failed
 * call prints "llmtrain: rank R: file:line: CALL failed: <the library's own message>" and aborts
 * the job (die_call), so no rank is left waiting. Launches are checked with CUDA_CHECK_LAUNCH()
 * right after the <<<...>>> (cudaGetLastError: a bad configuration is reported where it happened).
 * Owns: the macros. Uses: core/error.h, the CUDA runtime. Used by: kernels/cuda/ and
 * parallel/comm_nccl.c (CUDA build only: nothing else includes it). */
#ifndef LLMT_CUDA_CHECK_H
#define LLMT_CUDA_CHECK_H
#include <cuda_runtime.h>
#include "core/error.h" /* C linkage and [[noreturn]] for C++ are in the header itself */

#define CUDA_CHECK(call)                                                                 \
    do {                                                                                 \
        cudaError_t cuda_check_rc_ = (call);                                             \
        if (cuda_check_rc_ != cudaSuccess)                                               \
            die_call(__FILE__, __LINE__, #call, cudaGetErrorString(cuda_check_rc_));     \
    } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

/* cuBLAS / cuBLASLt: cublasGetStatusString gives the library's text for a status. */
#define CUBLAS_CHECK(call)                                                               \
    do {                                                                                 \
        cublasStatus_t cublas_check_rc_ = (call);                                        \
        if (cublas_check_rc_ != CUBLAS_STATUS_SUCCESS)                                   \
            die_call(__FILE__, __LINE__, #call, cublasGetStatusString(cublas_check_rc_)); \
    } while (0)

/* NCCL: ncclGetErrorString; ncclGetLastError has the detail of the last failure. */
#define NCCL_CHECK(call)                                                                 \
    do {                                                                                 \
        ncclResult_t nccl_check_rc_ = (call);                                            \
        if (nccl_check_rc_ != ncclSuccess)                                               \
            die_call(__FILE__, __LINE__, #call, ncclGetErrorString(nccl_check_rc_));     \
    } while (0)
#endif
