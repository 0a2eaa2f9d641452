/* metrics.c — JSONL metrics sink, mirrored to TensorBoard (see metrics.h). */
#include "io/metrics.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/timer.h"

int metrics_open(metrics_t *mx, const char *path, int enabled) {
    memset(mx, 0, sizeof *mx);
    snprintf(mx->path, sizeof mx->path, "%s", path);
    if (!enabled) return 0;
    mx->f = fopen(path, "a");
    return mx->f ? 0 : -1;
}

/* The value of the record's top-level "step" member, if it has one (our records are flat, and
 * "step" is always written as an integer). */
static bool record_step(const char *line, const char *end, long long *step) {
    static const char key[] = "\"step\":";
    for (const char *p = line; p + sizeof key - 1 < end; p++) {
        if (memcmp(p, key, sizeof key - 1) != 0) continue;
        char *after;
        *step = strtoll(p + sizeof key - 1, &after, 10);
        return after != p + sizeof key - 1;
    }
    return false;
}

long metrics_supersede_after(const char *path, long long step) {
    static const char mark[] = "\"superseded\":true,", marked_line[] = "{\"superseded\"";
    size_t len;
    int err;
    char *text = file_read_whole(path, (size_t)1 << 34, &len, &err);
    if (!text) {
        if (err == ENOENT) return 0;
        errno = err;
        return -1;
    }
    long marked = 0;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    char *out = malloc(len + lines * (sizeof mark - 1) + 2), *o = out;
    if (!out) {
        free(text);
        errno = ENOMEM;
        return -1;
    }
    for (char *line = text; line < text + len;) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        char *end = nl ? nl : text + len;
        long long s;
        const bool mark_it = line[0] == '{' && strncmp(line, marked_line, sizeof marked_line - 1) != 0 &&
                             record_step(line, end, &s) && s > step;
        if (end > line) {
            *o++ = *line;
            if (mark_it) {
                memcpy(o, mark, sizeof mark - 1);
                o += sizeof mark - 1;
                marked++;
            }
            memcpy(o, line + 1, (size_t)(end - line - 1));
            o += end - line - 1;
        }
        *o++ = '\n'; /* also ends a torn last line */
        line = end + 1;
    }
    int rc = 0;
    if (marked > 0 || (len > 0 && text[len - 1] != '\n')) rc = file_write_atomic(path, out, (size_t)(o - out));
    free(text);
    free(out);
    return rc == 0 ? marked : -1;
}

long metrics_supersede_open(metrics_t *mx, long long step) {
    if (!mx->f) return 0;
    if (fclose(mx->f) != 0) {
        mx->f = NULL;
        return -1;
    }
    long marked = metrics_supersede_after(mx->path, step);
    mx->f = fopen(mx->path, "a");
    return mx->f ? marked : -1;
}

int metrics_open_tensorboard(metrics_t *mx, const char *dir) {
    return tb_open(&mx->tb, dir);
}

/* A TensorBoard failure costs the events, not the run: said once, the JSONL goes on. */
static void mirror_to_tensorboard(metrics_t *mx, const char *record) {
    int rc = tb_write_record(&mx->tb, record, wall_sec());
    if (rc == 0 || mx->tb_warned) return;
    mx->tb_warned = true;
    if (rc == -1)
        fprintf(stderr, "llmtrain: warning: writing %s: %s; no more TensorBoard events (the "
                "metrics file goes on)\n", mx->tb.path, strerror(errno));
    else
        fprintf(stderr, "llmtrain: warning: a metrics record is not JSON the TensorBoard writer "
                "reads, not mirrored (said once): %.200s\n", record);
    if (rc == -1) tb_close(&mx->tb);
}

void metrics_write(metrics_t *mx, const char *fmt, ...) {
    if (!mx->f && !mx->tb.f) return;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    char small[2048], *record = small;
    int n = vsnprintf(small + 1, sizeof small - 3, fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n + 3 >= sizeof small) { /* a long record (the provenance): format it again */
        record = xrealloc_small(NULL, (size_t)n + 3);
        vsnprintf(record + 1, (size_t)n + 1, fmt, again);
    }
    va_end(again);
    va_end(ap);
    record[0] = '{';
    record[n + 1] = '}';
    record[n + 2] = '\0';
    if (mx->f) {
        fputs(record, mx->f);
        fputc('\n', mx->f);
        fflush(mx->f);
    }
    if (mx->tb.f) mirror_to_tensorboard(mx, record);
    if (record != small) free(record);
}

void metrics_close(metrics_t *mx) {
    /* every line was flushed when written; a failure to close loses nothing but is still news */
    if (mx->f && fclose(mx->f) != 0)
        fprintf(stderr, "llmtrain: warning: closing %s: %s\n", mx->path, strerror(errno));
    mx->f = NULL;
    tb_close(&mx->tb);
}

const char *metrics_num(char *buf, size_t len, double x) {
    if (isfinite(x)) snprintf(buf, len, "%.9g", x);
    else snprintf(buf, len, "null");
    return buf;
}
