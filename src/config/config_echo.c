/* config_echo.c — the effective configuration as a namelist (config_to_namelist): every group
 * with defaults filled in, the &stage groups with the keys each one set, a comment naming the
 * overrides; it reads back as the same configuration. Uses: config_internal.h, stages.h,
 * core/alloc.h. */
#include "config/config.h"
#include "config/config_internal.h"
#include "config/stages.h"
#include "core/alloc.h"
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- echo as a namelist ------------------------------------------------------------------ */

/* snprintf-like output: counts everything, writes what fits. */
typedef struct writer {
    char *buf;
    size_t size;
    size_t len;
} writer_t;

__attribute__((format(printf, 2, 3)))
static void put(writer_t *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = w->len < w->size ? w->buf + w->len : NULL;
    int n = vsnprintf(dst, dst ? w->size - w->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) w->len += (size_t)n;
}

/* The shortest %g that reads back as exactly x, without an exponent where plain digits read
 * better (600.0, not 6e+02), spelled so a Fortran reader sees a real. */
static void format_real(double x, char out[40]) {
    bool plain_reads_better = fabs(x) >= 1e-4 && fabs(x) < 1e15;
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, x);
        if (strtod(out, NULL) == x && !(plain_reads_better && strchr(out, 'e'))) break;
    }
    if (!strpbrk(out, ".eEn")) strcat(out, ".0");
}

static void put_quoted(writer_t *w, const char *s) {
    put(w, "'");
    for (; *s; s++) put(w, *s == '\'' ? "''" : "%c", *s);
    put(w, "'");
}

static void put_key(writer_t *w, const key_spec_t *ks, const config_t *cfg) {
    const void *f = cfg_field_cptr(cfg, ks);
    char real[40];
    if (cfg_is_fp16_key(ks) && cfg->choice.precision != CFG_PRECISION_FP16) { /* refused unless fp16 */
        format_real(ks->type == K_INT ? *(const int *)f : *(const double *)f, real);
        put(w, "  ! %s = %s (loss scaling: precision = 'fp16' only)\n", ks->key, real);
        return;
    }
    if (ks->type == K_INT_ARRAY) {
        int n = *(const int *)((const char *)cfg + ks->count_offset);
        if (n == 0) {
            put(w, "  ! %s: none given\n", ks->key); /* an empty value is not valid namelist syntax */
            return;
        }
        put(w, "  %-15s = ", ks->key);
        for (int i = 0; i < n; i++) put(w, "%s%d", i ? ", " : "", ((const int *)f)[i]);
        put(w, "\n");
        return;
    }
    put(w, "  %-15s = ", ks->key);
    switch (ks->type) {
    case K_INT: put(w, "%d", *(const int *)f); break;
    case K_I64: put(w, "%lld", (long long)*(const int64_t *)f); break;
    case K_REAL:
        format_real(*(const double *)f, real);
        put(w, "%s", real);
        break;
    case K_BOOL: put(w, "%s", *(const bool *)f ? ".true." : ".false."); break;
    case K_STR: put_quoted(w, f); break;
    case K_INT_ARRAY: break;
    }
    put(w, "\n");
}

/* The &stage groups with the keys each one set (the others are inherited, and writing their
 * inherited values would change what the echo means if it were read again). */
static void put_stages(writer_t *w, const config_t *cfg) {
    if (cfg->n_stages == 0) return;
    config_t *at = xmalloc(sizeof *at); /* a copy whose stage_at walks the stages */
    memcpy(at, cfg, sizeof *at);
    for (int i = 0; i < cfg->n_stages; i++) {
        at->stage_at = i;
        put(w, "&stage ! %d of %d\n", i + 1, cfg->n_stages);
        for (int k = 0; k < cfg_n_keys; k++)
            if (cfg_keys[k].group == G_STAGE && cfg->stages[i].key_line[stage_key_index(cfg_keys[k].key)])
                put_key(w, &cfg_keys[k], at);
        put(w, "/\n");
    }
    xfree(at);
}

int config_to_namelist(const config_t *cfg, char *buf, int bufsize) {
    writer_t w = {.buf = buf, .size = buf && bufsize > 0 ? (size_t)bufsize : 0, .len = 0};
    if (w.size) buf[0] = '\0';
    put(&w, "! effective configuration of run '%s' (defaults filled in)\n", cfg->name);
    if (cfg->overrides && cfg->overrides[0])
        put(&w, "! %s with the command-line overrides: %s\n", cfg->source_path, cfg->overrides);
    for (int g = 0; g < G_STAGE; g++) {
        put(&w, "&%s\n", cfg_group_names[g]);
        for (int k = 0; k < cfg_n_keys; k++)
            if (cfg_keys[k].group == g) put_key(&w, &cfg_keys[k], cfg);
        put(&w, "/\n");
    }
    put_stages(&w, cfg);
    return (int)w.len;
}
