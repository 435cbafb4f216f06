/* sp_status: result codes and the error record every fallible call fills.
 *
 * Library functions return an sp_status and, when given a non-NULL
 * sp_error, write a one-line human-readable message into it. The library
 * never prints and never exits; front ends decide what to show. */
#ifndef SP_STATUS_H
#define SP_STATUS_H

#include <stdarg.h>

typedef enum sp_status {
    SP_OK = 0,
    SP_ERR_IO,          /* file missing, unreadable, mmap failed */
    SP_ERR_FORMAT,      /* corrupt or truncated file, bad magic/version */
    SP_ERR_UNSUPPORTED, /* valid input we do not handle (arch, tensor type) */
    SP_ERR_ARG,         /* bad parameter or value from the caller */
    SP_ERR_NOMEM,       /* allocation failed */
    SP_ERR_RANGE,       /* exceeds a limit: context length, buffer size */
    SP_ERR_STATE,       /* call out of order / object not ready */
    SP_ERR_NUMERIC      /* a computation produced NaN or inf (non-finite weights or overflow) */
} sp_status;

typedef struct sp_error {
    sp_status code;
    char msg[512];
} sp_error;

/* Record `code` and a printf-style message in err (if non-NULL); returns code
 * so callers can write `return sp_fail(err, SP_ERR_ARG, "...")`. */
sp_status sp_fail(sp_error *err, sp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Short name of a status code, e.g. "format error". */
const char *sp_status_str(sp_status code);

/* Always-on invariant check for internal logic (not for untrusted input). */
void sp_assert_fail(const char *expr, const char *file, int line);
#define SP_ASSERT(e) ((e) ? (void)0 : sp_assert_fail(#e, __FILE__, __LINE__))

#endif
