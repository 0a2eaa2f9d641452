/* energy.c — RAPL energy through powercap sysfs (see energy.h). */
#include "core/energy.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One number from a sysfs file; -1 with errno's text in why when it cannot be read. */
static int read_number(const char *path, double *x, char *why, size_t len) {
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    int ok = f && fscanf(f, "%llu", &v) == 1;
    if (!ok) snprintf(why, len, "%s: %s", path, f ? "not a number" : strerror(errno));
    if (f) fclose(f);
    *x = (double)v;
    return ok ? 0 : -1;
}

static void read_name(const char *dir, char *name, size_t len) {
    char path[ENERGY_PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/name", dir);
    FILE *f = fopen(path, "r");
    name[0] = '\0';
    if (f && fgets(name, (int)len, f)) name[strcspn(name, "\n")] = '\0';
    if (f) fclose(f);
}

/* "intel-rapl:0" is a top-level zone, "intel-rapl:0:1" a sub-zone. */
static bool counted_zone(const char *entry, const char *name) {
    if (strncmp(entry, "intel-rapl:", 11) != 0) return false;
    const bool sub = strchr(entry + 11, ':') != NULL;
    return sub ? strcmp(name, "dram") == 0 : strcmp(name, "psys") != 0;
}

static int add_zone(energy_t *e, const char *root, const char *entry, const char *name) {
    if (e->n == ENERGY_ZONES_MAX) return 0;
    char dir[ENERGY_PATH_MAX], max_path[ENERGY_PATH_MAX + 32];
    const int k = e->n;
    snprintf(dir, sizeof dir, "%s/%s", root, entry);
    snprintf(e->path[k], sizeof e->path[k], "%.*s/energy_uj", ENERGY_PATH_MAX - 16, dir);
    snprintf(max_path, sizeof max_path, "%s/max_energy_range_uj", dir);
    if (read_number(max_path, &e->max_uj[k], e->why, sizeof e->why) != 0 ||
        read_number(e->path[k], &e->last_uj[k], e->why, sizeof e->why) != 0)
        return -1;
    const size_t used = strlen(e->zones);
    snprintf(e->zones + used, sizeof e->zones - used, "%s%s", used ? ", " : "", name);
    e->n++;
    return 0;
}

int energy_open(energy_t *e, const char *root) {
    memset(e, 0, sizeof *e);
    if (!root) root = getenv("LLMT_POWERCAP_ROOT");
    if (!root || !root[0]) root = "/sys/class/powercap";
    /* sorted, so zones (and their order in messages) do not depend on the directory order */
    struct dirent **list;
    const int n = scandir(root, &list, NULL, alphasort);
    if (n < 0) {
        snprintf(e->why, sizeof e->why, "%s: %s", root, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char dir[ENERGY_PATH_MAX], name[64];
        snprintf(dir, sizeof dir, "%s/%s", root, list[i]->d_name);
        read_name(dir, name, sizeof name);
        if (rc == 0 && counted_zone(list[i]->d_name, name))
            rc = add_zone(e, root, list[i]->d_name, name);
        free(list[i]);
    }
    free(list);
    if (rc == 0 && e->n == 0) snprintf(e->why, sizeof e->why, "no RAPL zones under %s", root);
    e->available = rc == 0 && e->n > 0;
    return e->available ? 0 : -1;
}

double energy_read_j(energy_t *e) {
    if (!e->available) return 0.0;
    char ignored[ENERGY_PATH_MAX + 64];
    for (int k = 0; k < e->n; k++) {
        double now;
        if (read_number(e->path[k], &now, ignored, sizeof ignored) != 0) continue; /* next read */
        double delta = now - e->last_uj[k];
        if (delta < 0) delta += e->max_uj[k] + 1; /* the counter wrapped around past its maximum */
        e->joules += delta * 1e-6;
        e->last_uj[k] = now;
    }
    return e->joules;
}
