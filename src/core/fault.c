/* fault.c — test-only fault injection points (see fault.h). */
#include "core/fault.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Send sig to this process and return once a thread has taken it. raise() would pend on the
 * calling thread, which blocks the stop signals (train/checkpointing.c), and the point's
 * "a signal at this moment" must hold when fault_point returns, not a moment later. */
static void deliver(int sig) {
    kill(getpid(), sig);
    if (sig == SIGSTOP || sig == SIGKILL) return;
    for (int i = 0; i < 1000; i++) {
        sigset_t pending;
        if (sigpending(&pending) != 0 || !sigismember(&pending, sig)) break;
        usleep(1000);
    }
    usleep(1000); /* the handler's store follows its delivery by nanoseconds */
}

void fault_point(const char *point, int world_rank) {
    static const char *spec = NULL;
    static int looked = 0;
    if (!looked) {
        spec = getenv("LLMT_FAULT");
        looked = 1;
    }
    if (!spec || !*spec) return;
    char want[96];
    int w = snprintf(want, sizeof want, "%s@%d", point, world_rank);
    static const struct {
        const char *name;
        int sig;
    } actions[] = {{"stop", SIGSTOP}, {"term", SIGTERM}, {"usr1", SIGUSR1}, {"kill", SIGKILL}};
    for (const char *s = spec; *s;) {
        size_t n = strcspn(s, ",");
        if (n >= (size_t)w && strncmp(s, want, (size_t)w) == 0 && (n == (size_t)w || s[w] == ':')) {
            const char *act = n == (size_t)w ? "stop" : s + w + 1;
            size_t alen = n == (size_t)w ? 4 : n - (size_t)w - 1;
            if (alen > 5 && strncmp(act, "fsize", 5) == 0) {
                /* a real resource limit from here on: writes past it fail with EFBIG */
                struct rlimit rl;
                getrlimit(RLIMIT_FSIZE, &rl);
                rl.rlim_cur = (rlim_t)strtoull(act + 5, NULL, 10);
                setrlimit(RLIMIT_FSIZE, &rl);
                fprintf(stderr, "llmtrain: rank %d: LLMT_FAULT: file size limit %llu bytes from '%s'\n",
                        world_rank, (unsigned long long)rl.rlim_cur, point);
                return;
            }
            if (alen > 5 && strncmp(act, "sleep", 5) == 0) {
                /* every time the point is passed: a slow node or file system, steps of a
                 * known length for the time-limit tests */
                usleep((useconds_t)(1000 * strtoul(act + 5, NULL, 10)));
                return;
            }
            for (size_t a = 0; a < sizeof actions / sizeof actions[0]; a++)
                if (strlen(actions[a].name) == alen && strncmp(act, actions[a].name, alen) == 0) {
                    fprintf(stderr, "llmtrain: rank %d: LLMT_FAULT: %s at '%s' (pid %d)\n",
                            world_rank, actions[a].name, point, (int)getpid());
                    fflush(stderr);
                    deliver(actions[a].sig);
                    return;
                }
        }
        s += n + (s[n] == ',');
    }
}
