/* alloc.h — aligned, tracked host allocation, by category.
 * Owns: every large host buffer (64-byte aligned, counted per category so the startup memory
 * plan, the per-step line and the end-of-run table can report it, and the planner's prediction
 * can be checked against it). Uses: error.h. Used by: all layers.
 * Allocate once at setup and reuse: no allocation in a step's hot path. */
#ifndef LLMT_ALLOC_H
#define LLMT_ALLOC_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" { /* included by the CUDA backend (C++) too */
#endif

/* What a buffer holds (the categories of the memory plan). */
typedef enum mem_category {
    MEM_PARAMETERS,  /* the model's weights (or their ZeRO partition and gathered copies) */
    MEM_GRADIENTS,   /* parameter gradients (full, partition, staging) */
    MEM_OPTIMIZER,   /* AdamW moments */
    MEM_MASTER,      /* fp32 master weights of a bf16/fp16 weights copy */
    MEM_ACTIVATIONS, /* tensors kept between a micro-batch's forward and its backward */
    MEM_COMM,        /* communication buffers (received parts of reductions) */
    MEM_WORKSPACE,   /* scratch, host copies, batches, everything else */
    MEM_CATEGORIES
} mem_category_t;
const char *mem_category_name(mem_category_t c); /* "parameters", "gradients", ... */

void *xmalloc_in(size_t bytes, mem_category_t c); /* aligned to 64 bytes; dies on failure */
void *xmalloc(size_t bytes);          /* = xmalloc_in(bytes, MEM_WORKSPACE) */
void *xcalloc(size_t n, size_t size); /* zeroed, MEM_WORKSPACE */
void *xrealloc_small(void *p, size_t bytes); /* plain realloc for small, untracked arrays */
char *xstrdup(const char *s);
void xfree(void *p); /* accepts NULL */

size_t alloc_bytes_now(void);  /* tracked bytes currently allocated, all categories */
size_t alloc_bytes_peak(void); /* high-water mark of the total */
size_t alloc_bytes_now_in(mem_category_t c);
size_t alloc_bytes_peak_in(mem_category_t c); /* the category's own high-water mark */
size_t alloc_rss_bytes(void);  /* resident set size of the process (from /proc), 0 if unknown */
/* Memory that is not the host's (a GPU's, the simulated device's arena), counted per category by
 * the backend that allocates it, as the functions above count host blocks. Not thread-safe:
 * device memory is allocated at setup, on the main thread. */
typedef struct mem_tally {
    size_t now[MEM_CATEGORIES + 1], peak[MEM_CATEGORIES + 1]; /* [MEM_CATEGORIES]: the total */
} mem_tally_t;
void mem_tally_add(mem_tally_t *t, int category, size_t bytes);
void mem_tally_sub(mem_tally_t *t, int category, size_t bytes);
/* now / high-water mark of a category; MEM_CATEGORIES (or anything out of range): the total */
size_t mem_tally_now(const mem_tally_t *t, int category);
size_t mem_tally_peak(const mem_tally_t *t, int category);
/* For people: "1.5 GiB", "3.0 TiB", "12.3 MiB", "12345 bytes". */
void format_bytes(double bytes, char out[32]);
#ifdef __cplusplus
}
#endif
#endif
