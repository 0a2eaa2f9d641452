/* alloc.c — aligned, tracked host allocation (see alloc.h). */
#include "core/alloc.h"
#include "core/error.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each tracked block carries its size in a 64-byte prefix so xfree can subtract it. */
#define ALIGN 64
static _Atomic size_t bytes_now = 0, bytes_peak = 0;

static void track(long long delta) {
    size_t now = atomic_fetch_add(&bytes_now, (size_t)delta) + (size_t)delta;
    size_t peak = atomic_load(&bytes_peak);
    while (now > peak && !atomic_compare_exchange_weak(&bytes_peak, &peak, now)) {}
}

void *xmalloc(size_t bytes) {
    void *base = NULL;
    if (posix_memalign(&base, ALIGN, bytes + ALIGN) != 0 || base == NULL) {
        char msg[128];
        snprintf(msg, sizeof msg, "out of memory allocating %zu bytes", bytes);
        die_call(__FILE__, __LINE__, "posix_memalign", msg);
    }
    *(size_t *)base = bytes;
    track((long long)bytes);
    return (char *)base + ALIGN;
}

void *xcalloc(size_t n, size_t size) {
    if (size && n > (size_t)-1 / size) die_call(__FILE__, __LINE__, "xcalloc", "size overflow");
    void *p = xmalloc(n * size);
    memset(p, 0, n * size);
    return p;
}

void *xrealloc_small(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    PTR_CHECK(q);
    return q;
}

char *xstrdup(const char *s) {
    char *d = strdup(s ? s : "");
    PTR_CHECK(d);
    return d;
}

void xfree(void *p) {
    if (!p) return;
    char *base = (char *)p - ALIGN;
    track(-(long long)*(size_t *)base);
    free(base);
}

size_t alloc_bytes_now(void) { return atomic_load(&bytes_now); }
size_t alloc_bytes_peak(void) { return atomic_load(&bytes_peak); }

size_t alloc_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int ok = fscanf(f, "%lu %lu", &size, &resident) == 2;
    fclose(f);
    return ok ? (size_t)resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}
