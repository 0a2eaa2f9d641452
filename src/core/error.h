/* error.h — the one error convention of llmtrain.
 * Owns: checking macros for MPI / HDF5 / libc / allocation results, user-facing fatal errors,
 * internal assertions. Uses: nothing but libc and MPI. Used by: every other layer.
 *
 * Two kinds of failure:
 *  - internal/library failures (a call that returned an error): *_CHECK macros print
 *    "llmtrain: rank R: file:line: CALL failed: <library message>" and abort the whole job
 *    (MPI_Abort) so no rank is left hanging.
 *  - user errors (bad namelist, missing file, impossible grid): fatal_user() when every rank
 *    detects the same error (rank 0 prints, all ranks exit 2 after MPI_Finalize), or
 *    fatal_user_here() when only this rank knows and no agreement is possible (it prints with its
 *    rank and aborts with 2). Errors that can differ between ranks (a file one node cannot see)
 *    are agreed first: parallel/comm.c comm_agree_or_exit carries the first failing rank's
 *    message to every rank, and fatal_agreed() prints it once and ends every rank together. */
#ifndef LLMT_ERROR_H
#define LLMT_ERROR_H

#include <errno.h>
#ifdef __cplusplus
#define OMPI_SKIP_MPICXX 1  /* MPI's C API only: the C++ bindings warn under -Wextra */
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <stddef.h>

/* The CUDA backend's .cu files (kernels/cuda/) are C++ and include this header too: C linkage,
 * and C++'s spelling of noreturn. */
#ifdef __cplusplus
#define LLMT_NORETURN [[noreturn]]
extern "C" {
#else
#define LLMT_NORETURN _Noreturn
#endif

#define LLMT_EXIT_USER 2     /* bad input: namelist, data files, grid */
#define LLMT_EXIT_INTERNAL 3 /* a library call failed or an invariant broke */
#define LLMT_EXIT_CKPT 5     /* a checkpoint that had to be written could not be (disk full...) */
#define LLMT_EXIT_REQUEUE 75 /* stopped by SIGUSR1/SIGTERM after a checkpoint: requeue me */

/* Called with the library's own message; never returns. */
LLMT_NORETURN void die_call(const char *file, int line, const char *call, const char *msg);
/* A user error seen by every rank alike: rank 0 prints "llmtrain: error: ...", all exit 2. */
LLMT_NORETURN void fatal_user(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The verdict of a collective agreement (parallel/comm.c comm_agree): every rank calls it with
 * the same message; rank 0 prints "llmtrain: error: <msg>", all finish MPI and exit with code. */
LLMT_NORETURN void fatal_agreed(int exit_code, const char *msg);
/* A user error only this rank knows about (e.g. one rank's file): prints with the rank, aborts all. */
LLMT_NORETURN void fatal_user_here(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Format an error message into the caller's buffer — the one helper for functions that report
 * failures as text and let the caller decide (vsnprintf into err[errlen]; nothing when err is
 * NULL or errlen is 0). Returns -1, so a failing function can end with `return errf(...)`. */
int errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Print a warning from rank 0 only (or any rank with rank_prefix when only it knows). */
void warn_user(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The program name that prefixes every message ("llmtrain" unless a tool sets its own). */
void error_set_program_name(const char *name);
/* The MPI rank in MPI_COMM_WORLD, or 0 before MPI_Init / outside MPI programs. */
int error_world_rank(void);
/* When set (unit tests), fatal_user* call this instead of exiting, after printing. */
typedef void (*fatal_hook_t)(int exit_code, const char *message);
void error_set_fatal_hook(fatal_hook_t hook);

/* libc calls that return -1 / set errno. */
#define SYS_CHECK(call)                                                                  \
    do {                                                                                 \
        if ((call) == -1) die_call(__FILE__, __LINE__, #call, strerror(errno));          \
    } while (0)
/* pthread calls, which return an error number (0 = success) instead of setting errno. */
#define PTHREAD_CHECK(call)                                                              \
    do {                                                                                 \
        int pthread_check_rc_ = (call);                                                  \
        if (pthread_check_rc_ != 0)                                                      \
            die_call(__FILE__, __LINE__, #call, strerror(pthread_check_rc_));            \
    } while (0)
/* A pointer result that must not be NULL (malloc, fopen, mmap uses MAP_FAILED: see below). */
#define PTR_CHECK(ptr)                                                                   \
    do {                                                                                 \
        if ((ptr) == NULL) die_call(__FILE__, __LINE__, #ptr, strerror(errno));          \
    } while (0)
/* An invariant that must hold; cheap enough to stay on in release builds. */
#define ASSERT(cond)                                                                     \
    do {                                                                                 \
        if (!(cond)) die_call(__FILE__, __LINE__, #cond, "internal invariant violated"); \
    } while (0)

void die_mpi(const char *file, int line, const char *call, int code);
#define MPI_CHECK(call)                                                                  \
    do {                                                                                 \
        int mpi_check_rc_ = (call);                                                      \
        if (mpi_check_rc_ != MPI_SUCCESS) die_mpi(__FILE__, __LINE__, #call, mpi_check_rc_); \
    } while (0)

/* HDF5: negative return is failure; the HDF5 error stack supplies the message. */
void die_h5(const char *file, int line, const char *call);
/* The innermost (most specific) message of HDF5's current error stack, with the function that
 * raised it, e.g. "file write failed (in H5FD__mpio_write)"; "unknown HDF5 error" if empty. */
void h5_error_text(char *buf, size_t len);
#define H5_CHECK(call)                                                                   \
    do {                                                                                 \
        if ((long long)(call) < 0) die_h5(__FILE__, __LINE__, #call);                    \
    } while (0)

#ifdef __cplusplus
}
#endif
#include <string.h>
#endif
