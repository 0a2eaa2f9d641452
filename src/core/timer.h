/* timer.h — time for step timing and ETAs (now_sec: monotonic) and for timestamps and deadlines
 * (wall_sec: seconds since the epoch). Uses: nothing. */
#ifndef LLMT_TIMER_H
#define LLMT_TIMER_H
#include <time.h>
static inline double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static inline double wall_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif
