/* metrics.c — JSONL metrics sink (see metrics.h). */
#include "io/metrics.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "core/error.h"

void metrics_open(metrics_t *mx, const char *path, int enabled, int append) {
    memset(mx, 0, sizeof *mx);
    snprintf(mx->path, sizeof mx->path, "%s", path);
    if (!enabled) return;
    mx->f = fopen(path, append ? "a" : "w");
    if (!mx->f) fatal_user_here("cannot create metrics file %s: %s", path, strerror(errno));
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
    if (mx->f) fclose(mx->f);
    mx->f = NULL;
}

const char *metrics_num(char *buf, size_t len, double x) {
    if (isfinite(x)) snprintf(buf, len, "%.9g", x);
    else snprintf(buf, len, "null");
    return buf;
}
