/* alloc.h — aligned, tracked host allocation.
 * Owns: every large host buffer (64-byte aligned, counted so the startup memory plan and the
 * per-step line can report it). Uses: error.h. Used by: all layers.
 * Allocate once at setup and reuse: no allocation in a step's hot path. */
#ifndef LLMT_ALLOC_H
#define LLMT_ALLOC_H
#include <stddef.h>

void *xmalloc(size_t bytes);          /* aligned to 64 bytes, dies with a message on failure */
void *xcalloc(size_t n, size_t size); /* zeroed */
void *xrealloc_small(void *p, size_t bytes); /* plain realloc for small, untracked arrays */
char *xstrdup(const char *s);
void xfree(void *p); /* accepts NULL */

size_t alloc_bytes_now(void);  /* tracked bytes currently allocated */
size_t alloc_bytes_peak(void); /* high-water mark */
size_t alloc_rss_bytes(void);  /* resident set size of the process (from /proc), 0 if unknown */
#endif
