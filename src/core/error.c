/* error.c — the error convention (see error.h). */
#include "core/error.h"
#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static fatal_hook_t fatal_hook = NULL;
static const char *program = "llmtrain"; /* the prefix of every message */

void error_set_program_name(const char *name) { program = name; }

void error_set_fatal_hook(fatal_hook_t hook) { fatal_hook = hook; }

int error_world_rank(void) {
    int init = 0, fin = 0, rank = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

static int world_size(void) {
    int init = 0, fin = 0, size = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

/* Abort every rank with `code`; outside MPI, plain exit. */
_Noreturn static void abort_all(int code) {
    int init = 0, fin = 0;
    fflush(stdout);
    fflush(stderr);
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin && world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

_Noreturn void die_call(const char *file, int line, const char *call, const char *msg) {
    fprintf(stderr, "%s: rank %d: %s:%d: %s failed: %s\n", program, error_world_rank(), file, line,
            call, msg);
    abort_all(LLMT_EXIT_INTERNAL);
}

void die_mpi(const char *file, int line, const char *call, int code) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", code);
    die_call(file, line, call, msg);
}

/* Walk the HDF5 error stack and keep the innermost message (the most specific one): the
 * visitor is called outermost first when walking downward, so the last call wins. Where a
 * system call failed HDF5 puts its errno text into the description. */
typedef struct h5_text {
    char *buf;
    size_t len;
} h5_text_t;

static herr_t h5_walk(unsigned n, const H5E_error2_t *e, void *data) {
    (void)n;
    h5_text_t *t = data;
    snprintf(t->buf, t->len, "%s (in %s)", e->desc ? e->desc : "?", e->func_name ? e->func_name : "?");
    return 0;
}

void h5_error_text(char *buf, size_t len) {
    if (!buf || len == 0) return;
    snprintf(buf, len, "unknown HDF5 error");
    h5_text_t t = {buf, len};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_walk, &t);
}

void die_h5(const char *file, int line, const char *call) {
    char msg[512];
    h5_error_text(msg, sizeof msg);
    die_call(file, line, call, msg);
}

_Noreturn void fatal_agreed(int exit_code, const char *body) {
    char msg[2304];
    snprintf(msg, sizeof msg, "%s: error: %s", program, body);
    if (error_world_rank() == 0) fprintf(stderr, "%s\n", msg);
    if (fatal_hook) {
        fatal_hook(exit_code, msg);
        abort(); /* the hook must not return; unit tests longjmp out of it */
    }
    fflush(stdout);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    /* Every rank knows the same verdict: finish MPI cleanly so the launcher reports the code
     * of every rank instead of an abort. */
    if (init && !fin) MPI_Finalize();
    exit(exit_code);
}

_Noreturn void fatal_user(const char *fmt, ...) {
    char body[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    fatal_agreed(LLMT_EXIT_USER, body);
}

_Noreturn void fatal_user_here(const char *fmt, ...) {
    char body[2048], msg[2304];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s: error (rank %d): %s", program, error_world_rank(), body);
    fprintf(stderr, "%s\n", msg);
    if (fatal_hook) {
        fatal_hook(LLMT_EXIT_USER, msg);
        abort();
    }
    abort_all(LLMT_EXIT_USER);
}

int errf(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

void warn_user(const char *fmt, ...) {
    if (error_world_rank() != 0) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: warning: ", program);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}
