/* toint: float-to-integer conversions that are defined for every input.
 *
 * C leaves the conversion of NaN, an infinity or a value outside the target
 * type's range undefined (UBSan's float-cast-overflow), and compilers do
 * exploit it; every quantiser and kernel converts through these instead of a
 * cast. Each clamps to [lo, hi] first (so the result is the clamp of the
 * exact rounding: lo and hi are integers) and maps NaN to 0 clamped to
 * [lo, hi]. For finite v in range the result is the plain rounding's:
 *   sp_toint_rne   (int)nearbyintf(v) (round to nearest, ties to even, in the
 *                  default rounding mode), computed as ggml's nearest_int
 *                  (add 1.5 * 2^23, read the mantissa), bit for bit ggml's;
 *   sp_toint_round (int)roundf(v)     (ties away from zero, as ggml's refs);
 *   sp_toint_trunc (int)v             (toward zero).
 * Requires -2^22 <= lo <= hi <= 2^22. */
#ifndef SP_TOINT_H
#define SP_TOINT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float sp_toint_clamp_(float v, int32_t lo, int32_t hi) {
    const float flo = (float)lo, fhi = (float)hi;
    if (v != v) v = 0.0f; /* NaN */
    return v < flo ? flo : v > fhi ? fhi : v;
}

static inline int32_t sp_toint_rne(float v, int32_t lo, int32_t hi) {
    const float t = sp_toint_clamp_(v, lo, hi) + 12582912.0f; /* 1.5 * 2^23: the integer lands in the mantissa */
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007FFFFF) - 0x00400000;
}

static inline int32_t sp_toint_round(float v, int32_t lo, int32_t hi) {
    return (int32_t)roundf(sp_toint_clamp_(v, lo, hi));
}

static inline int32_t sp_toint_trunc(float v, int32_t lo, int32_t hi) {
    return (int32_t)sp_toint_clamp_(v, lo, hi);
}

#endif
