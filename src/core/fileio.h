/* fileio.h — the one way to write a file that must never be seen half-written, and the one way
 * to read a whole small file. Owns: the write-".tmp", fsync, rename, fsync-the-directory
 * sequence (so a crash at any moment leaves either the old file or the complete new one, and
 * the rename itself survives a power loss), the opening of an input that must be a regular file,
 * whole-file reads with a size bound, mkdir -p.
 * Uses: libc. Used by: io/ (shards, tokenizer, checkpoints), train/checkpointing, tools/.
 * Nothing here exits or prints: every function returns 0 / a pointer, or -1 / NULL with errno. */
#ifndef LLMT_FILEIO_H
#define LLMT_FILEIO_H
#include <stdio.h>
#include <stddef.h>
#include <sys/stat.h>

/* A file being written under "<path>.tmp" and published by atomic_file_commit. */
typedef struct atomic_file {
    FILE *f;          /* write with fwrite/fprintf, or atomic_file_write */
    char path[1024];  /* the final name */
    char tmp[1040];   /* "<path>.tmp" */
} atomic_file_t;

/* Create "<path>.tmp" (truncated). 0, or -1 with errno (ENAMETOOLONG for a too long path). */
int atomic_file_open(atomic_file_t *af, const char *path);
/* fwrite everything; 0 or -1 with errno. */
int atomic_file_write(atomic_file_t *af, const void *buf, size_t n);
/* Flush, fsync and close the tmp file (each result checked: a write error that only shows at
 * close is not lost), rename it over `path`, fsync the directory. On any failure the tmp file is
 * removed, the old `path` is untouched, and -1 is returned with errno of the first failure. */
int atomic_file_commit(atomic_file_t *af);
/* Give up: close and remove the tmp file (the old `path` is untouched). */
void atomic_file_abort(atomic_file_t *af);
/* All of the above for one buffer. */
int file_write_atomic(const char *path, const void *data, size_t n);

/* For a file another library wrote and closed under `tmp` (HDF5): fsync it, rename it over
 * `path`, fsync the directory. 0 or -1 with errno (tmp is left in place on failure). */
int file_publish(const char *tmp, const char *path);
/* fsync the directory that holds `path` (makes a rename or unlink in it durable). */
int fsync_dir_of(const char *path);

/* Open `path` read-only, but only a regular file, and never wait doing it: a FIFO, socket,
 * device or directory is refused by stat() before any open (opening a FIFO for reading waits
 * for a writer, forever), and the open uses O_NONBLOCK (then cleared) and is confirmed by fstat,
 * so a file swapped for a FIFO in between cannot block either. The one way llmtrain and its
 * tools open an input file (shards, namelists, tokenizers, llmprep's texts, llmmerge's models).
 * The descriptor (O_CLOEXEC; its stat in *st when st is not NULL), or -1 with errno: EISDIR for
 * a directory, EINVAL for any other file that is not regular; file_strerror says which. */
int file_open_regular(const char *path, struct stat *st);
/* strerror(err), but for file_open_regular's EINVAL "not a regular file (a FIFO, socket or
 * device)" rather than "Invalid argument". */
const char *file_strerror(int err);

/* The whole file as a NUL-terminated malloc'd buffer (free with free()), its length in *len;
 * opened with file_open_regular. NULL with *err = errno on failure; EFBIG when the file is
 * larger than max_bytes; EISDIR / EINVAL when it is a directory / not a regular file. */
char *file_read_whole(const char *path, size_t max_bytes, size_t *len, int *err);

/* mkdir -p with mode 0755; 0, or -1 with errno (ENOTDIR when a component is a file). */
int make_dirs(const char *path);
#endif
