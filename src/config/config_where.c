/* config_where.c — where each key of a loaded configuration got its value, kept after loading.
 * Owns: the copy of the parse's positions into config_t.where (the file's entry of each key,
 * the override that replaced it, each group's header, the overrides' labels), config_key_where,
 * and the two wordings of every message that names several keys: where a value came from
 * ("line 7", "command line argument 2", "default") and where the message points
 * ("path:line:col: " or the override's label). config's own checks and the rules above it
 * (model/spec.c's shape rules) say both alike. Uses: config_internal.h, core/. */
#include "config/config.h"
#include "config/config_internal.h"
#include "core/alloc.h"
#include "core/error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CFG_KEYS_MAX == CFG_MAX_KEYS, "config.h and config_internal.h: one key capacity");
_Static_assert(CFG_GROUPS_MAX == N_GROUPS, "config.h and config_internal.h: one group count");

void cfg_keep_positions(const parse_ctx_t *ctx, int n_over, struct config *cfg) {
    config_positions_t *w = &cfg->where;
    free(w->labels);
    memset(w, 0, sizeof *w);
    snprintf(w->file, sizeof w->file, "%s", ctx->path);
    for (int k = 0; k < cfg_n_keys; k++) {
        const nl_entry_t *e = ctx->set_by[k];
        if (!e) continue;
        if (e->line < 0) {
            w->arg[k] = -e->line; /* the entry's line is -1 - i for override i */
            w->argno[k] = ctx->over[-1 - e->line].argno;
        } else {
            w->line[k] = e->line, w->col[k] = e->col;
        }
    }
    for (int g = 0; g < N_GROUPS; g++)
        if (ctx->group_at[g]) w->group_line[g] = ctx->group_at[g]->line, w->group_col[g] = ctx->group_at[g]->col;
    size_t len = 1;
    for (int i = 0; i < n_over; i++) len += strlen(ctx->over[i].label) + 1;
    w->labels = xrealloc_small(NULL, len);
    for (size_t i = 0, at = 0; i < (size_t)n_over; i++) {
        const size_t n = strlen(ctx->over[i].label) + 1;
        memcpy(w->labels + at, ctx->over[i].label, n);
        at += n;
    }
}

config_where_t config_key_where(const config_positions_t *where, const char *group, const char *key) {
    const int g = cfg_find_group(group), k = g >= 0 ? cfg_find_key(g, key) : -1;
    ASSERT(k >= 0); /* a literal name in a rule: a typo is a bug */
    config_where_t w = {.file = where->file[0] ? where->file : "<namelist>",
                        .line = where->line[k], .col = where->col[k], .argno = where->argno[k],
                        .group_line = where->group_line[g], .group_col = where->group_col[g]};
    if (where->arg[k] > 0 && where->labels) {
        const char *label = where->labels;
        for (int i = 1; i < where->arg[k]; i++) label += strlen(label) + 1;
        w.arg = label;
    }
    return w;
}

const char *config_where_text(const config_where_t *w, char buf[32]) {
    if (w->argno > 0) snprintf(buf, 32, "command line argument %u", (unsigned)w->argno % 1000000000u);
    else if (w->line > 0) snprintf(buf, 32, "line %d", w->line);
    else return "default";
    return buf;
}

char *config_where_start(const config_where_t *a, const config_where_t *b, char *buf, size_t size) {
    const config_where_t *given = a->argno > 0 || a->line > 0 ? a : b->argno > 0 || b->line > 0 ? b : NULL;
    if (given && given->argno > 0) {
        snprintf(buf, size, "%s: ", given->arg ? given->arg : "command line");
        return buf;
    }
    int line = 1, col = 1;
    if (given) line = given->line, col = given->col;
    else if (a->group_line > 0) line = a->group_line, col = a->group_col;
    else if (b->group_line > 0) line = b->group_line, col = b->group_col;
    snprintf(buf, size, "%s:%d:%d: ", a->file, line, col);
    return buf;
}
