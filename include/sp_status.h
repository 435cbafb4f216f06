/* sp_status: result codes and the error record every fallible call fills,
 * and the tensor type enum the file reader, models and KV caches share.
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

/* ggml tensor types (numbering as in ggml.h). The file reader accepts any
 * known type; the model loader computes with those README.md lists and
 * refuses the others by name. */
typedef enum sp_ggml_type {
    SP_GGML_F32 = 0, SP_GGML_F16 = 1, SP_GGML_Q4_0 = 2, SP_GGML_Q4_1 = 3,
    SP_GGML_Q5_0 = 6, SP_GGML_Q5_1 = 7, SP_GGML_Q8_0 = 8, SP_GGML_Q8_1 = 9,
    SP_GGML_Q2_K = 10, SP_GGML_Q3_K = 11, SP_GGML_Q4_K = 12, SP_GGML_Q5_K = 13,
    SP_GGML_Q6_K = 14, SP_GGML_Q8_K = 15, SP_GGML_IQ2_XXS = 16, SP_GGML_IQ2_XS = 17,
    SP_GGML_IQ3_XXS = 18, SP_GGML_IQ1_S = 19, SP_GGML_IQ4_NL = 20, SP_GGML_IQ3_S = 21,
    SP_GGML_IQ2_S = 22, SP_GGML_IQ4_XS = 23, SP_GGML_I8 = 24, SP_GGML_I16 = 25,
    SP_GGML_I32 = 26, SP_GGML_I64 = 27, SP_GGML_F64 = 28, SP_GGML_IQ1_M = 29,
    SP_GGML_BF16 = 30, SP_GGML_TQ1_0 = 34, SP_GGML_TQ2_0 = 35,
    SP_GGML_MXFP4 = 39, SP_GGML_TYPE_COUNT = 40
} sp_ggml_type;
/* Name of a ggml type ("q4_K", ...), "unknown" if out of range. */
const char *sp_ggml_type_name(sp_ggml_type t);

#endif
