/* test_fatal.h — a user error (fatal_user) caught instead of ending the test program, for the
 * configuration tests (test_config.c, test_overrides.c, test_curriculum.c). install_hook, as the
 * group setup, routes fatal errors to capture_fatal, which records the exit code and message and
 * longjmps to fatal_jump: a test calls setjmp(fatal_jump) around the call that must (or must not)
 * fail. The hook has no user pointer, hence the globals. Include once, after cmocka.h. */
#ifndef LLMT_TEST_FATAL_H
#define LLMT_TEST_FATAL_H
#include "core/error.h"
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

static jmp_buf fatal_jump;
static char fatal_message[4096];
static int fatal_code;

static inline void capture_fatal(int exit_code, const char *message) {
    fatal_code = exit_code;
    snprintf(fatal_message, sizeof fatal_message, "%s", message);
    longjmp(fatal_jump, 1);
}

static inline int install_hook(void **state) {
    (void)state;
    error_set_fatal_hook(capture_fatal);
    return 0;
}

/* After fatal_jump was reached: a user error (exit 2) whose message is one line; returns it. */
static inline const char *caught_user_error(void) {
    assert_int_equal(fatal_code, LLMT_EXIT_USER);
    if (strchr(fatal_message, '\n')) fail_msg("message is more than one line: %s", fatal_message);
    return fatal_message;
}

/* The same, the message starting "llmtrain: error: "; returns what follows that prefix. */
static inline const char *caught_user_error_text(void) {
    static const char prefix[] = "llmtrain: error: ";
    const char *message = caught_user_error();
    if (strncmp(message, prefix, sizeof prefix - 1) != 0) fail_msg("no prefix: %s", message);
    return message + sizeof prefix - 1;
}
#endif
