/* alloc.c — aligned, tracked host allocation by category (see alloc.h). */
#include "core/alloc.h"
#include "core/error.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each tracked block carries its size and category in a 64-byte prefix so xfree can subtract. */
#define ALIGN 64
typedef struct prefix {
    size_t bytes;
    int category;
} prefix_t;

static _Atomic size_t bytes_now = 0, bytes_peak = 0;
static _Atomic size_t cat_now[MEM_CATEGORIES], cat_peak[MEM_CATEGORIES];

static void raise_peak(_Atomic size_t *peak, size_t now) {
    size_t p = atomic_load(peak);
    while (now > p && !atomic_compare_exchange_weak(peak, &p, now)) {}
}

static void track(int c, long long delta) {
    raise_peak(&bytes_peak, atomic_fetch_add(&bytes_now, (size_t)delta) + (size_t)delta);
    raise_peak(&cat_peak[c], atomic_fetch_add(&cat_now[c], (size_t)delta) + (size_t)delta);
}

const char *mem_category_name(mem_category_t c) {
    static const char *names[MEM_CATEGORIES] = {"parameters", "gradients", "optimizer", "master",
                                                "activations", "comm", "workspace"};
    return c < MEM_CATEGORIES ? names[c] : "?";
}

void *xmalloc_in(size_t bytes, mem_category_t c) {
    void *base = NULL;
    if (posix_memalign(&base, ALIGN, bytes + ALIGN) != 0 || base == NULL) {
        char msg[160];
        snprintf(msg, sizeof msg, "out of memory allocating %zu bytes (%s)", bytes,
                 mem_category_name(c));
        die_call(__FILE__, __LINE__, "posix_memalign", msg);
    }
    prefix_t *p = base;
    p->bytes = bytes;
    p->category = (int)c;
    track((int)c, (long long)bytes);
    return (char *)base + ALIGN;
}

void *xmalloc(size_t bytes) { return xmalloc_in(bytes, MEM_WORKSPACE); }

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
    prefix_t *base = (prefix_t *)((char *)p - ALIGN);
    track(base->category, -(long long)base->bytes);
    free(base);
}

size_t alloc_bytes_now(void) { return atomic_load(&bytes_now); }
size_t alloc_bytes_peak(void) { return atomic_load(&bytes_peak); }
size_t alloc_bytes_now_in(mem_category_t c) { return atomic_load(&cat_now[c]); }
size_t alloc_bytes_peak_in(mem_category_t c) { return atomic_load(&cat_peak[c]); }

static int tally_index(int category) {
    return category >= 0 && category < MEM_CATEGORIES ? category : MEM_CATEGORIES;
}

void mem_tally_add(mem_tally_t *t, int category, size_t bytes) {
    const int ks[2] = {tally_index(category), MEM_CATEGORIES};
    for (int i = 0; i < (ks[0] == MEM_CATEGORIES ? 1 : 2); i++) {
        t->now[ks[i]] += bytes;
        if (t->now[ks[i]] > t->peak[ks[i]]) t->peak[ks[i]] = t->now[ks[i]];
    }
}

void mem_tally_sub(mem_tally_t *t, int category, size_t bytes) {
    const int k = tally_index(category);
    t->now[k] -= bytes;
    if (k != MEM_CATEGORIES) t->now[MEM_CATEGORIES] -= bytes;
}

size_t mem_tally_now(const mem_tally_t *t, int category) { return t->now[tally_index(category)]; }
size_t mem_tally_peak(const mem_tally_t *t, int category) { return t->peak[tally_index(category)]; }

size_t alloc_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int ok = fscanf(f, "%lu %lu", &size, &resident) == 2;
    fclose(f);
    return ok ? (size_t)resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

void format_bytes(double b, char out[32]) {
    if (b >= 1099511627776.0) snprintf(out, 32, "%.1f TiB", b / 1099511627776.0);
    else if (b >= 1073741824.0) snprintf(out, 32, "%.1f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(out, 32, "%.1f MiB", b / 1048576.0);
    else snprintf(out, 32, "%.0f bytes", b);
}
