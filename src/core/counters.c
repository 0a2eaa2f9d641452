/* counters.c — event lists and per-slot sums over a counters backend (see counters.h). */
#include "core/counters.h"
#include <stdio.h>
#include <string.h>
#include "core/error.h"

/* The i-th comma-separated item of list, blanks trimmed, into out; -1 when it is empty or too
 * long. Returns the position after the item. */
static const char *next_item(const char *s, char *out, size_t len, int *bad) {
    while (*s == ' ' || *s == '\t') s++;
    const char *end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    const char *e = end;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
    const size_t n = (size_t)(e - s);
    *bad = n == 0 || n >= len;
    if (!*bad) {
        memcpy(out, s, n);
        out[n] = '\0';
    }
    return *end ? end + 1 : end;
}

static int parse_list(counters_t *c, const char *list, char *err, size_t errlen) {
    const char *s = list;
    while (*s) {
        char name[COUNTERS_NAME_MAX];
        int bad;
        s = next_item(s, name, sizeof name, &bad);
        if (bad)
            return errf(err, errlen, "&log papi_events = '%s': an empty or over-long (>= %d "
                        "characters) event name; give names separated by commas, e.g. "
                        "'PAPI_TOT_INS,PAPI_TOT_CYC'", list, COUNTERS_NAME_MAX);
        if (c->n == COUNTERS_MAX)
            return errf(err, errlen, "&log papi_events: more than %d events", COUNTERS_MAX);
        if (counters_find(c, name) >= 0)
            return errf(err, errlen, "&log papi_events: event '%s' is listed twice", name);
        snprintf(c->names[c->n++], COUNTERS_NAME_MAX, "%s", name);
    }
    return 0;
}

int counters_open(counters_t *c, const counters_backend_t *be, const char *list, char *err,
                  size_t errlen) {
    memset(c, 0, sizeof *c);
    c->be = be;
    if (parse_list(c, list, err, errlen) != 0) return -1;
    if (be->init(c->why, sizeof c->why) != 0) return 0; /* no library here: not counting */
    for (int i = 0; i < c->n; i++) {
        if (be->lookup(c->names[i], &c->codes[i]) == 0) continue;
        char offered[400] = "";
        be->list_available(offered, sizeof offered);
        errf(err, errlen, "&log papi_events: unknown event '%s'; this machine offers: %s",
             c->names[i], offered[0] ? offered : "none (no hardware counters are exposed here)");
        c->n = 0;
        return -1;
    }
    c->counting = be->start(c->codes, c->n, c->why, sizeof c->why) == 0;
    if (c->counting) be->read(c->last);
    return 0;
}

void counters_charge(counters_t *c, int slot) {
    if (!c->counting) return;
    long long now[COUNTERS_MAX];
    c->be->read(now);
    for (int i = 0; i < c->n; i++) {
        c->sum[slot][i] += now[i] - c->last[i];
        c->last[i] = now[i];
    }
}

int counters_find(const counters_t *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], name)) return i;
    return -1;
}

void counters_close(counters_t *c) {
    if (c->counting) c->be->stop();
    c->counting = false;
}
