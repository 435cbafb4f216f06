/* cli_testutil.h: helpers for tests that drive the `specula` binary end to
 * end. The binary is ../specula relative to the test binary's directory
 * (build/tests -> build/specula, build-san/tests -> build-san/specula). */
#ifndef SP_CLI_TESTUTIL_H
#define SP_CLI_TESTUTIL_H

#include "testutil.h"

#include <jansson.h>
#include <libgen.h>
#include <sys/wait.h>
#include <unistd.h>

static inline const char *cli_bin(void) {
    static char bin[1024];
    if (bin[0]) return bin;
    char exe[900];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = 0;
    snprintf(bin, sizeof bin, "%s/../specula", dirname(exe));
    return bin;
}

enum { SP_CAPTURE_STDOUT = 0, SP_CAPTURE_STDERR = 1 };

/* Runs the shell command cmd and reads its stdout into buf (NUL-terminated,
 * at most cap - 1 bytes); returns its exit code (-1: it did not exit). */
static inline int sh_capture(const char *cmd, char *buf, size_t cap) {
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(buf, 1, cap - 1, f);
    buf[len] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs `BIN ARGS` (ARGS is shell text), captures stdout (the other stream
 * discarded) or stderr into buf; returns the exit code. */
static inline int bin_run(const char *bin, const char *args, int capture, char *buf, size_t cap) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' %s %s", bin, args,
             capture == SP_CAPTURE_STDERR ? "2>&1 >/dev/null" : "2>/dev/null");
    return sh_capture(cmd, buf, cap);
}

/* Runs `specula ARGS`, as bin_run. */
static inline int cli_run(const char *args, int capture, char *buf, size_t cap) {
    return bin_run(cli_bin(), args, capture, buf, cap);
}

static inline int sp_count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Numeric field k of object j (fails the test when absent). */
static inline double sp_json_num(json_t *j, const char *k) {
    json_t *v = json_object_get(j, k);
    if (!v || !json_is_number(v)) fail_msg("JSON field '%s' missing or not a number", k);
    return json_number_value(v);
}

#endif
