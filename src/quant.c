/* quant: scalar reference conversions between f32 and the weight formats
 * Specula computes with (F16, BF16, Q8_0, Q4_0), bit-exact with ggml's
 * reference quantisers. Speed kernels live elsewhere and test against these. */
#include "sp_quant.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Exact: every half is representable as a float. */
float sp_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000 | man << 13);  /* inf / NaN, payload kept */
    if (exp != 0) return bits_f32(sign | (exp + 112) << 23 | man << 13);  /* rebias 15 -> 127 */
    /* Zero or subnormal: man * 2^-24, exact in float. */
    return bits_f32(sign | f32_bits((float)man * 0x1p-24f));
}

/* Round to nearest, ties to even; overflow to inf; NaN stays NaN (the top
 * payload bits are kept, and a payload that would vanish becomes quiet). */
uint16_t sp_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFF;
    if (ax > 0x7F800000) {
        uint16_t man = (uint16_t)((ax >> 13) & 0x3FF);
        return sign | 0x7C00 | (man ? man : 0x200);
    }
    if (ax >= 0x477FF000) return sign | 0x7C00;  /* >= 65520 rounds to inf (includes inf) */
    if (ax >= 0x38800000) {
        /* Normal half: drop 13 mantissa bits with RNE; a carry into the
         * exponent is the correct result. */
        ax += 0xFFF + ((ax >> 13) & 1);
        return sign | (uint16_t)((ax - 0x38000000) >> 13);
    }
    if (ax <= 0x33000000) return sign;  /* <= 2^-25: rounds to zero (the tie goes to even 0) */
    /* Subnormal half: value = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e). */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7FFFFF) | 0x800000;
    uint32_t shift = 126 - e;  /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;  /* may reach 0x400, the smallest normal */
    return sign | (uint16_t)q;
}

float sp_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* RNE on the low 16 bits; NaNs are made quiet so truncation cannot turn
 * them into infinities. */
uint16_t sp_fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

int sp_quant_supported(sp_ggml_type t) {
    return t == SP_GGML_F32 || t == SP_GGML_F16 || t == SP_GGML_BF16 || t == SP_GGML_Q8_0 ||
           t == SP_GGML_Q4_0;
}

/* ggml's quantize_row_q8_0_ref: d = amax/127, q = round(x/d) (away from zero on ties). */
static void quantize_q8_0(const float *x, sp_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float amax = 0.0f;
        for (int j = 0; j < SP_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sp_fp32_to_fp16(d);
        for (int j = 0; j < SP_QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* ggml's quantize_row_q4_0_ref: the element of largest magnitude (with its
 * sign) maps to -8; d = max / -8, q = min(15, trunc(x/d + 8.5)). */
static void quantize_q4_0(const float *x, sp_block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SP_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sp_fp32_to_fp16(d);
        for (int j = 0; j < SP_QK / 2; j++) {
            /* x*id + 8.5 lies in [0.5, 16.5], so the truncation is in range. */
            int q0 = (int)(x[j] * id + 8.5f);
            int q1 = (int)(x[j + SP_QK / 2] * id + 8.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void sp_quantize_row(sp_ggml_type type, const float *src, void *dst, int64_t n) {
    SP_ASSERT(sp_quant_supported(type) && n >= 0 && n % sp_ggml_blck_size(type) == 0);
    switch (type) {
    case SP_GGML_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SP_GGML_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = sp_fp32_to_fp16(src[i]);
        break;
    }
    case SP_GGML_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = sp_fp32_to_bf16(src[i]);
        break;
    }
    case SP_GGML_Q8_0: quantize_q8_0(src, dst, n / SP_QK); break;
    case SP_GGML_Q4_0: quantize_q4_0(src, dst, n / SP_QK); break;
    default: SP_ASSERT(0 && "unsupported type");
    }
}

void sp_dequantize_row(sp_ggml_type type, const void *src, float *dst, int64_t n) {
    SP_ASSERT(sp_quant_supported(type) && n >= 0 && n % sp_ggml_blck_size(type) == 0);
    switch (type) {
    case SP_GGML_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SP_GGML_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = sp_fp16_to_fp32(h[i]);
        break;
    }
    case SP_GGML_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = sp_bf16_to_fp32(h[i]);
        break;
    }
    case SP_GGML_Q8_0: {
        const sp_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / SP_QK; i++) {
            const float d = sp_fp16_to_fp32(b[i].d);
            for (int j = 0; j < SP_QK; j++) dst[i * SP_QK + j] = d * (float)b[i].qs[j];
        }
        break;
    }
    case SP_GGML_Q4_0: {
        const sp_block_q4_0 *b = src;
        for (int64_t i = 0; i < n / SP_QK; i++) {
            const float d = sp_fp16_to_fp32(b[i].d);
            for (int j = 0; j < SP_QK / 2; j++) {
                dst[i * SP_QK + j] = d * (float)((b[i].qs[j] & 0x0F) - 8);
                dst[i * SP_QK + j + SP_QK / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
            }
        }
        break;
    }
    default: SP_ASSERT(0 && "unsupported type");
    }
}
