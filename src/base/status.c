/* status: error recording and the always-on invariant check. */
#include "sp_status.h"

#include <stdio.h>
#include <stdlib.h>

sp_status sp_fail(sp_error *err, sp_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

const char *sp_status_str(sp_status code) {
    switch (code) {
    case SP_OK: return "ok";
    case SP_ERR_IO: return "i/o error";
    case SP_ERR_FORMAT: return "format error";
    case SP_ERR_UNSUPPORTED: return "unsupported";
    case SP_ERR_ARG: return "invalid argument";
    case SP_ERR_NOMEM: return "out of memory";
    case SP_ERR_RANGE: return "out of range";
    case SP_ERR_STATE: return "invalid state";
    case SP_ERR_NUMERIC: return "numeric error";
    }
    return "unknown error";
}

/* An internal invariant broke: this is a bug in Specula, not bad input.
 * Printing here is the one exception to "the library never prints". */
void sp_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "specula: internal error: %s (%s:%d)\n", expr, file, line);
    abort();
}
