/* energy.h — the energy a node's processors used, from the Linux powercap interface (RAPL):
 * <root>/intel-rapl:N/energy_uj, a counter in microjoules that wraps around at
 * max_energy_range_uj. Counted: every top-level zone but 'psys' (which contains the packages),
 * plus 'dram' sub-zones (memory is not part of a package); the other sub-zones (core, uncore)
 * are parts of their package and would count twice. The root is /sys/class/powercap, or
 * $LLMT_POWERCAP_ROOT (tests supply a tree with scripted counters).
 * A wrap-around between two reads is undone with max_energy_range_uj, so reads must come more
 * often than a counter wraps (minutes at full power; the trainer reads at least once a step).
 * GPU energy (NVML) belongs to the CUDA backend, which is not built.
 * Owns: the zones and their last readings. Uses: libc. */
#ifndef LLMT_ENERGY_H
#define LLMT_ENERGY_H
#include <stdbool.h>
#include <stddef.h>

#define ENERGY_ZONES_MAX 16
#define ENERGY_PATH_MAX 512

typedef struct energy {
    bool available;
    char why[ENERGY_PATH_MAX + 128]; /* when not available: the reason */
    char zones[256];                 /* "package-0, dram" */
    int n;
    char path[ENERGY_ZONES_MAX][ENERGY_PATH_MAX]; /* .../energy_uj */
    double max_uj[ENERGY_ZONES_MAX], last_uj[ENERGY_ZONES_MAX];
    double joules;                   /* since energy_open */
} energy_t;

/* Find the zones under root (NULL: $LLMT_POWERCAP_ROOT or /sys/class/powercap) and read them
 * once. 0 when available, -1 with e->why ("no RAPL zones under ...", "... Permission denied"). */
int energy_open(energy_t *e, const char *root);
/* Joules used since energy_open, all zones together (0 when not available). */
double energy_read_j(energy_t *e);
/* Grams of CO2 for `joules` at an intensity in gCO2/kWh. */
static inline double energy_emissions_g(double joules, double g_per_kwh) {
    return joules / 3.6e6 * g_per_kwh;
}
#endif
