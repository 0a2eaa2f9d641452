/* fileio.c — atomic file writes and whole-file reads (see fileio.h). */
#include "core/fileio.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int atomic_file_open(atomic_file_t *af, const char *path) {
    memset(af, 0, sizeof *af);
    if (strlen(path) >= sizeof af->path) return (errno = ENAMETOOLONG), -1;
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp", path);
    af->f = fopen(af->tmp, "wb");
    return af->f ? 0 : -1;
}

int atomic_file_write(atomic_file_t *af, const void *buf, size_t n) {
    if (n && fwrite(buf, 1, n, af->f) != n) return errno ? -1 : ((errno = EIO), -1);
    return 0;
}

void atomic_file_abort(atomic_file_t *af) {
    int saved = errno;
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp[0]) unlink(af->tmp);
    errno = saved;
}

int fsync_dir_of(const char *path) {
    char dir[1024];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    /* Some file systems (and some FUSE mounts) refuse fsync on a directory: the rename is still
     * done, so that is not a failure of the write. */
    int rc = fsync(fd) == 0 || errno == EINVAL || errno == EROFS || errno == ENOTSUP ? 0 : -1;
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int atomic_file_commit(atomic_file_t *af) {
    int err = 0;
    if (fflush(af->f) != 0) err = errno;
    if (!err && ferror(af->f)) err = EIO;
    if (!err && fsync(fileno(af->f)) != 0) err = errno;
    if (fclose(af->f) != 0 && !err) err = errno;
    af->f = NULL;
    if (!err && rename(af->tmp, af->path) != 0) err = errno;
    if (err) {
        unlink(af->tmp);
        errno = err;
        return -1;
    }
    return fsync_dir_of(af->path);
}

int file_write_atomic(const char *path, const void *data, size_t n) {
    atomic_file_t af;
    if (atomic_file_open(&af, path) != 0) return -1;
    if (atomic_file_write(&af, data, n) != 0) {
        atomic_file_abort(&af);
        return -1;
    }
    return atomic_file_commit(&af);
}

int file_publish(const char *tmp, const char *path) {
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int err = fsync(fd) != 0 && errno != EINVAL ? errno : 0;
    close(fd);
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) return (errno = err), -1;
    return fsync_dir_of(path);
}

/* EISDIR for a directory, EINVAL for anything else that is not a regular file, 0 for one. */
static int not_regular(const struct stat *st) {
    return S_ISREG(st->st_mode) ? 0 : S_ISDIR(st->st_mode) ? EISDIR : EINVAL;
}

int file_open_regular(const char *path, struct stat *st) {
    struct stat before, after;
    if (stat(path, &before) != 0) return -1;
    if (not_regular(&before)) return (errno = not_regular(&before)), -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    int e = fstat(fd, &after) != 0 ? errno : not_regular(&after);
    int flags = e ? 0 : fcntl(fd, F_GETFL);
    /* O_NONBLOCK means nothing for a regular file's reads; cleared anyway, so the descriptor is
     * an ordinary one for whoever reads it (mmap, read, a library) */
    if (!e && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)) e = errno;
    if (e) {
        close(fd);
        return (errno = e), -1;
    }
    if (st) *st = after;
    return fd;
}

const char *file_strerror(int err) {
    return err == EINVAL ? "not a regular file (a FIFO, socket or device)" : strerror(err);
}

char *file_read_whole(const char *path, size_t max_bytes, size_t *len, int *err) {
    struct stat st;
    int fd = file_open_regular(path, &st);
    if (fd < 0) return (*err = errno), NULL;
    if ((size_t)st.st_size > max_bytes) {
        *err = EFBIG;
        close(fd);
        return NULL;
    }
    /* Read until end of file rather than trusting st_size (a file may grow while we read), but
     * never more than max_bytes: one byte beyond the announced size tells whether it grew. */
    size_t cap = (size_t)st.st_size + 2, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            *err = ENOMEM;
            close(fd);
            return NULL;
        }
        if (n + 1 == cap) {
            if (n >= max_bytes + 1) break;
            size_t grown = cap + cap / 2 + 4096;
            if (grown > max_bytes + 2) grown = max_bytes + 2;
            char *b = realloc(buf, grown);
            if (!b) free(buf);
            buf = b;
            cap = grown;
            continue;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            *err = errno;
            free(buf);
            close(fd);
            return NULL;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max_bytes) {
        free(buf);
        *err = EFBIG;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int make_dirs(const char *path) {
    char tmp[1024];
    if (strlen(path) >= sizeof tmp) return (errno = ENAMETOOLONG), -1;
    snprintf(tmp, sizeof tmp, "%s", path);
    struct stat st;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    if (stat(tmp, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) return (errno = ENOTDIR), -1;
    return 0;
}
