/* counters_papi.c — the PAPI backend of core/counters.h. Every PAPI call goes through PAPI_CALL,
 * which names file:line, the call and PAPI_strerror: fatal where a failure is a bug, written
 * into the caller's `why` where it is what this machine allows (a disabled component). */
#include <papi.h>
#include <stdio.h>
#include <string.h>
#include "core/counters.h"
#include "core/error.h"

/* rc of `call`; on failure, "file:line: call: PAPI message" into why (why == NULL: fatal). */
#define PAPI_CALL(call, why, len) papi_call_((call), __FILE__, __LINE__, #call, why, len)
static int papi_call_(int rc, const char *file, int line, const char *call, char *why,
                      size_t len) {
    if (rc == PAPI_OK) return rc;
    if (!why) die_call(file, line, call, PAPI_strerror(rc));
    snprintf(why, len, "%s:%d: %s: %s", file, line, call, PAPI_strerror(rc));
    return rc;
}

static int event_set = PAPI_NULL;

/* Why the CPU component counts nothing here ("perf_event: Error libpfm4 no default PMU found"). */
static void cpu_component_reason(char *why, size_t len) {
    const PAPI_component_info_t *ci = PAPI_get_component_info(0);
    if (ci && ci->disabled)
        snprintf(why + strlen(why), len - strlen(why), " (component %s disabled: %s)", ci->name,
                 ci->disabled_reason);
}

static int papi_init(char *why, size_t len) {
    const int v = PAPI_library_init(PAPI_VER_CURRENT); /* returns the version, not PAPI_OK */
    if (v != PAPI_VER_CURRENT) {
        PAPI_CALL(v > 0 ? PAPI_EBUG : v, why, len);
        return -1;
    }
    return 0;
}

static int papi_lookup(const char *event, int *code) {
    char name[PAPI_MAX_STR_LEN];
    snprintf(name, sizeof name, "%s", event);
    char why[256]; /* unknown: the caller's message lists what is offered instead */
    return PAPI_CALL(PAPI_event_name_to_code(name, code), why, sizeof why) == PAPI_OK ? 0 : -1;
}

/* The preset events available here (PAPI_enum_event over the presets that can be counted; its
 * PAPI_ENOEVNT ends the enumeration, and an event without info is skipped: neither is a failure). */
static void papi_list_available(char *out, size_t len) {
    int code = PAPI_PRESET_MASK;
    out[0] = '\0';
    if (PAPI_enum_event(&code, PAPI_ENUM_FIRST) != PAPI_OK) return;
    do {
        PAPI_event_info_t info;
        if (PAPI_get_event_info(code, &info) != PAPI_OK || info.count == 0) continue;
        const size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s", used ? ", " : "", info.symbol);
    } while (PAPI_enum_event(&code, PAPI_PRESET_ENUM_AVAIL) == PAPI_OK);
}

static int papi_start(const int *codes, int n, char *why, size_t len) {
    PAPI_CALL(PAPI_create_eventset(&event_set), NULL, 0);
    for (int i = 0; i < n; i++) {
        if (PAPI_CALL(PAPI_add_event(event_set, codes[i]), why, len) != PAPI_OK) {
            cpu_component_reason(why, len);
            PAPI_CALL(PAPI_cleanup_eventset(event_set), NULL, 0);
            PAPI_CALL(PAPI_destroy_eventset(&event_set), NULL, 0);
            return -1;
        }
    }
    if (PAPI_CALL(PAPI_start(event_set), why, len) != PAPI_OK) return -1;
    return 0;
}

static void papi_read(long long *values) { PAPI_CALL(PAPI_read(event_set, values), NULL, 0); }

static void papi_stop(void) {
    long long ignored[COUNTERS_MAX];
    PAPI_CALL(PAPI_stop(event_set, ignored), NULL, 0);
    PAPI_CALL(PAPI_cleanup_eventset(event_set), NULL, 0);
    PAPI_CALL(PAPI_destroy_eventset(&event_set), NULL, 0);
}

const counters_backend_t counters_papi = {"PAPI",      papi_init, papi_lookup, papi_list_available,
                                          papi_start, papi_read, papi_stop};
