/* testutil.h: shared test scaffolding (cmocka). Each tests/test_*.c is its own
 * binary; SP_TEST_MAIN runs its tests and prints "SP_RESULT <passed> <failed>"
 * for scripts/run_tests.sh to sum. Model files come from ../shared (or
 * $SPECULA_SHARED); they are never copied into the repository. */
#ifndef SP_TESTUTIL_H
#define SP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Path of a file under the shared directory, e.g. sp_shared("models/stories260K.gguf"). */
static inline const char *sp_shared(const char *rel) {
    static char buf[8][1024];
    static int slot;
    const char *root = getenv("SPECULA_SHARED");
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", root && *root ? root : "../shared", rel);
    return b;
}

/* A scratch directory for files the tests make (broken models etc.). */
static inline const char *sp_tmpdir(void) {
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

/* SP_TEST_FILTER=pattern runs only the matching tests (cmocka's filter; the
 * SP_RESULT count then still counts the whole table). */
#define SP_TEST_MAIN(tests)                                                          \
    int main(void) {                                                                 \
        int n_ = (int)(sizeof(tests) / sizeof((tests)[0]));                          \
        if (getenv("SP_TEST_FILTER")) cmocka_set_test_filter(getenv("SP_TEST_FILTER")); \
        int failed_ = cmocka_run_group_tests(tests, NULL, NULL);                     \
        printf("SP_RESULT %d %d\n", n_ - failed_, failed_);                          \
        return failed_ ? 1 : 0;                                                      \
    }

#endif
