/* metrics.c — JSONL metrics sink (see metrics.h). */
#include "io/metrics.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "core/error.h"

int metrics_open(metrics_t *mx, const char *path, int enabled, int append) {
    memset(mx, 0, sizeof *mx);
    snprintf(mx->path, sizeof mx->path, "%s", path);
    if (!enabled) return 0;
    mx->f = fopen(path, append ? "a" : "w");
    return mx->f ? 0 : -1;
}

void metrics_write(metrics_t *mx, const char *fmt, ...) {
    if (!mx->f) return;
    va_list ap;
    va_start(ap, fmt);
    fputc('{', mx->f);
    vfprintf(mx->f, fmt, ap);
    fputs("}\n", mx->f);
    va_end(ap);
    fflush(mx->f);
}

void metrics_close(metrics_t *mx) {
    /* every line was flushed when written; a failure to close loses nothing but is still news */
    if (mx->f && fclose(mx->f) != 0)
        fprintf(stderr, "llmtrain: warning: closing %s: %s\n", mx->path, strerror(errno));
    mx->f = NULL;
}

const char *metrics_num(char *buf, size_t len, double x) {
    if (isfinite(x)) snprintf(buf, len, "%.9g", x);
    else snprintf(buf, len, "null");
    return buf;
}
