/* cli_util: strict flag-value parsing shared by all subcommands. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int sp_cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    if (!s) {
        fprintf(stderr, "specula: %s needs a value\n", flag);
        return -1;
    }
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "specula: %s must be an integer in [%lld, %lld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int sp_cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    if (!s) {
        fprintf(stderr, "specula: %s needs a value\n", flag);
        return -1;
    }
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "specula: %s must be a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("specula 0.1.0\n");
    return 0;
}
