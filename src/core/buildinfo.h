/* buildinfo.h — what built this program and what it runs on: the git commit of the source and
 * whether the tree had uncommitted changes, the compiler and its flags, the build date (all
 * compiled in: the Makefile writes build/buildinfo_gen.h, "unknown" without git), and the versions
 * of the libraries it is linked with, asked of the libraries themselves at run time (MPI, HDF5,
 * the GEMM library, hwloc; PAPI from its header; CUDA and NCCL: not built).
 * Owns: that description and the one paragraph `llmtrain --version` prints. Uses: the
 * libraries named, libc. Used by: core/provenance (every artefact's provenance), main. */
#ifndef LLMT_BUILDINFO_H
#define LLMT_BUILDINFO_H
#include <stdio.h>

typedef struct buildinfo {
    const char *version;    /* LLMT_VERSION */
    const char *commit;     /* git rev-parse HEAD at build time, or "unknown" */
    const char *dirty;      /* "true" (tracked files differed from the commit), "false", "unknown" */
    const char *compiler;   /* the compiler command and its version string */
    const char *cflags;     /* Makefile.inc CFLAGS */
    char build_date[32];    /* ISO 8601, local time of the build machine */
    char mpi[160];          /* MPI_Get_library_version, first line */
    char hdf5[32];
    char gemm[160];         /* the GEMM library and its version (or configuration) */
    char hwloc[32];
    char papi[32];
    const char *cuda, *nccl;
} buildinfo_t;

/* Fill *b. Callable before MPI_Init (MPI_Get_library_version is). */
void buildinfo_get(buildinfo_t *b);
/* The paragraph of `llmtrain --version`: version, commit, build date, compiler, libraries. */
void buildinfo_print_version(FILE *f);
#endif
