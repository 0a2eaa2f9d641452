/* thread.c — helper threads started with a chosen signal mask (see thread.h). */
#include "core/thread.h"
#include <stdio.h>
#include <string.h>
#include "core/error.h"

void thread_start_masked(pthread_t *thread, void *(*fn)(void *), void *arg, const sigset_t *mask,
                         const char *what) {
    sigset_t old;
    /* a new thread inherits its creator's mask: set it for the moment of the creation */
    PTHREAD_CHECK(pthread_sigmask(SIG_SETMASK, mask, &old));
    const int rc = pthread_create(thread, NULL, fn, arg);
    PTHREAD_CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL));
    if (rc != 0) {
        char call[96];
        snprintf(call, sizeof call, "pthread_create(%s)", what);
        die_call(__FILE__, __LINE__, call, strerror(rc));
    }
}
