/* quant: scalar reference conversions between f32 and the weight formats:
 * dequantisation of every loadable format (quant.h), quantisation to every
 * type sp_quant_supported accepts (with ggml's reference quantisers where
 * quant.h says so, else Specula's own). Speed kernels live elsewhere and test against these. */
#include "quant.h"
#include "toint.h"

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

const int8_t sp_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

const int8_t sp_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float sp_e8m0_half(uint8_t e) {
    /* 2^(e-128): a normal float with biased exponent e - 1 for e >= 2,
     * the subnormals with mantissa bit 21 (e = 0) or 22 (e = 1) below */
    return bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

int sp_quant_loadable(sp_ggml_type t) {
    switch (t) {
    case SP_GGML_F32: case SP_GGML_F16: case SP_GGML_BF16: case SP_GGML_Q8_0: case SP_GGML_Q4_0:
    case SP_GGML_Q4_1: case SP_GGML_Q5_0: case SP_GGML_Q5_1: case SP_GGML_IQ4_NL:
    case SP_GGML_Q2_K: case SP_GGML_Q3_K: case SP_GGML_Q4_K: case SP_GGML_Q5_K: case SP_GGML_Q6_K:
    case SP_GGML_IQ4_XS: case SP_GGML_MXFP4:
        return 1;
    default:
        return 0;
    }
}

/* Q3_K keeps 16 6-bit scales in 12 bytes: the low 4 bits of scale j in
 * byte j (j < 8, low nibble) or byte j-8 (high nibble), the top 2 bits in
 * bytes 8..11, two bits per scale, scale j at bits 2*(j/4) of byte 8 + j%4. */
void sp_q3k_scales(const uint8_t packed[12], int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
        int hi = (packed[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

int sp_quant_supported(sp_ggml_type t) {
    switch (t) {
    case SP_GGML_F32: case SP_GGML_F16: case SP_GGML_BF16: case SP_GGML_Q8_0: case SP_GGML_Q4_0:
    case SP_GGML_Q4_1: case SP_GGML_Q5_0: case SP_GGML_Q5_1: case SP_GGML_Q4_K: case SP_GGML_Q5_K:
    case SP_GGML_Q6_K: case SP_GGML_IQ4_NL: case SP_GGML_IQ4_XS: case SP_GGML_MXFP4:
        return 1;
    default:
        return 0;
    }
}

/* ggml's quantize_row_q4_1_ref: the block's range [min, max] in 15 steps,
 * q = min(15, trunc((x - min) / d + 0.5)). Byte-identical to llama-quantize
 * without an importance matrix (tested on the reference files). */
static void quantize_q4_1(const float *x, sp_block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < SP_QK; j++) mn = x[j] < mn ? x[j] : mn, mx = x[j] > mx ? x[j] : mx;
        const float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sp_fp32_to_fp16(d);
        y[i].m = sp_fp32_to_fp16(mn);
        for (int j = 0; j < SP_QK / 2; j++) {
            const int q0 = sp_toint_trunc((x[j] - mn) * id + 0.5f, 0, 15),
                      q1 = sp_toint_trunc((x[j + 16] - mn) * id + 0.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* ggml's quantize_row_q5_0_ref: the element of largest magnitude maps to
 * -16, q = min(31, trunc(x / d + 16.5)), the fifth bits packed into qh. */
static void quantize_q5_0(const float *x, sp_block_q5_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SP_QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        const float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sp_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < SP_QK / 2; j++) {
            const int q0 = sp_toint_trunc(x[j] * id + 16.5f, 0, 31), q1 = sp_toint_trunc(x[j + 16] * id + 16.5f, 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* ggml's quantize_row_q5_1_ref: Q4_1's range in 31 steps, fifth bits in qh. */
static void quantize_q5_1(const float *x, sp_block_q5_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < SP_QK; j++) mn = x[j] < mn ? x[j] : mn, mx = x[j] > mx ? x[j] : mx;
        const float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sp_fp32_to_fp16(d);
        y[i].m = sp_fp32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < SP_QK / 2; j++) {
            const int q0 = sp_toint_trunc((x[j] - mn) * id + 0.5f, 0, 31),
                      q1 = sp_toint_trunc((x[j + 16] - mn) * id + 0.5f, 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)((q0 >> 4) & 1) << j | (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}


/* Specula's own Q4_K / Q5_K quantiser (not llama-quantize's iterative
 * search): per sub-block of 32 the range [min(0, x), max(0, x)] in nmax
 * steps (15 or 31); the 8 scales and 8 offsets are stored as 6-bit multiples
 * of the super-block's d and dmin; then every value is rounded against the
 * stored (dequantised) scale and offset, so the rounding sees what the reader
 * will. Q5_K puts the fifth bit of sub-block s's value l in bit s of qh[l].
 * The two blocks share d, dmin, scales[12] and qs[128]; q5 is NULL for Q4_K. */
static void quantize_k45(const float *x, sp_block_q4_K *y4, sp_block_q5_K *y5) {
    const int nmax = y5 ? 31 : 15;
    uint16_t *pd = y5 ? &y5->d : &y4->d, *pdmin = y5 ? &y5->dmin : &y4->dmin;
    uint8_t *scales = y5 ? y5->scales : y4->scales, *qs = y5 ? y5->qs : y4->qs;
    float sc[8], mn[8], max_sc = 0, max_mn = 0;
    for (int s = 0; s < 8; s++) {
        float lo = 0, hi = 0;
        for (int l = 0; l < 32; l++) lo = fminf(lo, x[32 * s + l]), hi = fmaxf(hi, x[32 * s + l]);
        sc[s] = (hi - lo) / (float)nmax;
        mn[s] = -lo;
        max_sc = fmaxf(max_sc, sc[s]), max_mn = fmaxf(max_mn, mn[s]);
    }
    const float d = max_sc / 63.0f, dmin = max_mn / 63.0f;
    *pd = sp_fp32_to_fp16(d);
    *pdmin = sp_fp32_to_fp16(dmin);
    const float dq = sp_fp16_to_fp32(*pd), dmq = sp_fp16_to_fp32(*pdmin);
    uint8_t isc[8], imn[8];
    for (int s = 0; s < 8; s++) {
        isc[s] = (uint8_t)(dq > 0 ? sp_toint_rne(sc[s] / dq, 0, 63) : 0);
        imn[s] = (uint8_t)(dmq > 0 ? sp_toint_rne(mn[s] / dmq, 0, 63) : 0);
    }
    /* the packing sp_q4k_scale_min reads */
    memset(scales, 0, 12);
    for (int s = 0; s < 8; s++) {
        if (s < 4) {
            scales[s] = isc[s];
            scales[s + 4] = imn[s];
        } else {
            scales[s + 4] = (uint8_t)((isc[s] & 0xF) | (imn[s] & 0xF) << 4);
            scales[s - 4] |= (uint8_t)((isc[s] >> 4) << 6);
            scales[s] |= (uint8_t)((imn[s] >> 4) << 6);
        }
    }
    if (y5) memset(y5->qh, 0, sizeof y5->qh);
    for (int s = 0; s < 8; s++) {
        const float ds = dq * (float)isc[s], ms = dmq * (float)imn[s];
        for (int l = 0; l < 32; l++) {
            int q = ds > 0 ? sp_toint_rne((x[32 * s + l] + ms) / ds, 0, nmax) : 0;
            uint8_t *b = &qs[32 * (s / 2) + l];
            *b = (s & 1) ? (uint8_t)((*b & 0x0F) | (q & 0xF) << 4) : (uint8_t)((*b & 0xF0) | (q & 0xF));
            if (y5 && (q & 0x10)) y5->qh[l] |= (uint8_t)(1u << s);
        }
    }
}

static void quantize_q4_K(const float *x, sp_block_q4_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) quantize_k45(x + i * SP_QK_K, &y[i], NULL);
}

static void quantize_q5_K(const float *x, sp_block_q5_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) quantize_k45(x + i * SP_QK_K, NULL, &y[i]);
}

/* Specula's own IQ4_NL quantiser (llama-quantize searches more scales): per
 * block of 32 the value of largest magnitude maps to the table's entry of
 * largest magnitude (-127; the scale takes the sign), each value to its
 * nearest table entry for that scale; then the scale is refitted by least
 * squares against the chosen entries and the entries chosen again, and the
 * better of the two (squared error) is kept. */
static int iq4_nearest(float v) {
    int best = 0;
    float be = fabsf(v - (float)sp_iq4nl_values[0]);
    for (int j = 1; j < 16; j++) {
        float e = fabsf(v - (float)sp_iq4nl_values[j]);
        if (e < be) be = e, best = j;
    }
    return best;
}

static float iq4_fit(const float *x, float d, uint8_t idx[32]) {
    const float id = d != 0 ? 1.0f / d : 0.0f;
    float err = 0;
    for (int j = 0; j < 32; j++) {
        idx[j] = (uint8_t)iq4_nearest(x[j] * id);
        float r = x[j] - d * (float)sp_iq4nl_values[idx[j]];
        err += r * r;
    }
    return err;
}

static void quantize_iq4_nl(const float *x, sp_block_iq4_nl *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        uint8_t idx[32], idx2[32];
        float d = max / (float)sp_iq4nl_values[0]; /* the most negative entry, -127 */
        d = sp_fp16_to_fp32(sp_fp32_to_fp16(d));
        float err = iq4_fit(x, d, idx);
        double sxq = 0, sqq = 0;
        for (int j = 0; j < 32; j++) {
            const double q = sp_iq4nl_values[idx[j]];
            sxq += x[j] * q, sqq += q * q;
        }
        if (sqq > 0) {
            float d2 = sp_fp16_to_fp32(sp_fp32_to_fp16((float)(sxq / sqq)));
            float err2 = iq4_fit(x, d2, idx2);
            if (err2 < err) d = d2, memcpy(idx, idx2, sizeof idx);
        }
        y[i].d = sp_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)(idx[j] | idx[j + 16] << 4);
    }
}

/* Specula's own IQ4_XS quantiser (a per-256 version of the IQ4_NL one):
 * each sub-block of 32 gets its own scale as quantize_iq4_nl chooses it
 * (largest magnitude to -127, a least-squares refit, the better of the
 * two); the super-block's d maps the sub-scale of largest magnitude to -32
 * (the sign kept), the 8 sub-scales are stored as 6-bit multiples of the
 * stored d (offset 32, clamped to [-32, 31]), and each value is then
 * matched to its nearest table entry against its sub-block's stored
 * scale, so the rounding sees what the reader will. */
static float iq4_subscale(const float *x) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    uint8_t idx[32];
    const float d = max / (float)sp_iq4nl_values[0];
    const float err = iq4_fit(x, d, idx);
    double sxq = 0, sqq = 0;
    for (int j = 0; j < 32; j++) {
        const double q = sp_iq4nl_values[idx[j]];
        sxq += x[j] * q, sqq += q * q;
    }
    if (sqq <= 0) return d;
    const float d2 = (float)(sxq / sqq);
    return iq4_fit(x, d2, idx) < err ? d2 : d;
}

static void quantize_iq4_xs(const float *x, sp_block_iq4_xs *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK_K) {
        float sc[8], amax = 0, max = 0;
        for (int s = 0; s < 8; s++) {
            sc[s] = iq4_subscale(x + 32 * s);
            if (fabsf(sc[s]) > amax) amax = fabsf(sc[s]), max = sc[s];
        }
        y[i].d = sp_fp32_to_fp16(max / -32.0f);
        const float d = sp_fp16_to_fp32(y[i].d), id = d != 0 ? 1.0f / d : 0.0f;
        uint16_t sh = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int s = 0; s < 8; s++) {
            const int ls = sp_toint_rne(sc[s] * id, -32, 31);
            const int st = ls + 32;
            y[i].scales_l[s / 2] |= (uint8_t)((st & 0xF) << (4 * (s % 2)));
            sh |= (uint16_t)((st >> 4) << (2 * s));
            uint8_t idx[32];
            iq4_fit(x + 32 * s, d * (float)ls, idx);
            for (int l = 0; l < 16; l++) y[i].qs[16 * s + l] = (uint8_t)(idx[l] | idx[l + 16] << 4);
        }
        y[i].scales_h = sh;
    }
}

/* Specula's own Q6_K quantiser: per 16 values the element of largest
 * magnitude maps to -32 (as ggml's make_qx_quants starts), the 16 scales
 * stored as int8 multiples of d = max|scale| / 127 (sign kept as ggml), then
 * values rounded against the stored scales, clamped to [-32, 31]. */
static void quantize_q6_K(const float *x, sp_block_q6_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK_K) {
        float sc[16], max_scale = 0, amax_scale = 0;
        for (int s = 0; s < 16; s++) {
            float amax = 0, max = 0;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * s + l]) > amax) amax = fabsf(x[16 * s + l]), max = x[16 * s + l];
            sc[s] = max / -32.0f;
            if (fabsf(sc[s]) > amax_scale) amax_scale = fabsf(sc[s]), max_scale = sc[s];
        }
        memset(y[i].ql, 0, sizeof y[i].ql);
        memset(y[i].qh, 0, sizeof y[i].qh);
        if (amax_scale == 0) {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = 0;
            for (int l = 0; l < 64; l++) y[i].ql[l] = 0; /* q = 0 everywhere: value -32 * 0 */
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = sp_fp32_to_fp16(1.0f / iscale);
        const float d = sp_fp16_to_fp32(y[i].d);
        for (int s = 0; s < 16; s++) y[i].scales[s] = (int8_t)sp_toint_rne(iscale * sc[s], -128, 127);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    const int e = 128 * h + 32 * j + l;
                    const float ds = d * (float)y[i].scales[e / 16];
                    int q = ds != 0 ? sp_toint_rne(x[e] / ds, -32, 31) : 0;
                    q += 32;
                    uint8_t *lo = &y[i].ql[64 * h + l + 32 * (j & 1)];
                    *lo = j >= 2 ? (uint8_t)((*lo & 0x0F) | (q & 0xF) << 4) : (uint8_t)((*lo & 0xF0) | (q & 0xF));
                    y[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * j));
                }
    }
}

/* ggml's quantize_row_q8_0_ref: d = amax/127, q = round(x/d) (away from zero on ties). */
static void quantize_q8_0(const float *x, sp_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float amax = 0.0f;
        for (int j = 0; j < SP_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sp_fp32_to_fp16(d);
        for (int j = 0; j < SP_QK; j++) y[i].qs[j] = (int8_t)sp_toint_round(x[j] * id, -127, 127);
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
            /* x*id + 8.5 lies in [0.5, 16.5] for finite x and id */
            const int q0 = sp_toint_trunc(x[j] * id + 8.5f, 0, 15);
            const int q1 = sp_toint_trunc(x[j + SP_QK / 2] * id + 8.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (0 for an
 * all-zero block), d = 2^(e - 128), and each element the table entry whose
 * d * value is nearest (the first on ties, in table order). Exponents
 * outside the byte are clamped (ggml leaves them undefined). */
static void quantize_mxfp4(const float *x, sp_block_mxfp4 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float amax = 0.0f;
        for (int j = 0; j < SP_QK; j++) amax = amax < fabsf(x[j]) ? fabsf(x[j]) : amax;
        const float ef = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        const uint8_t e = (uint8_t)(ef < 0.0f ? 0.0f : ef > 255.0f ? 255.0f : ef);
        const float d = sp_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < SP_QK / 2; j++) {
            int best[2] = {0, 0};
            for (int h = 0; h < 2; h++) {
                const float v = x[j + h * SP_QK / 2];
                float err = fabsf((float)sp_mxfp4_values[0] * d - v);
                for (int c = 1; c < 16; c++) {
                    const float ec = fabsf((float)sp_mxfp4_values[c] * d - v);
                    if (ec < err) err = ec, best[h] = c;
                }
            }
            y[i].qs[j] = (uint8_t)(best[0] | best[1] << 4);
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
    case SP_GGML_Q4_1: quantize_q4_1(src, dst, n / SP_QK); break;
    case SP_GGML_Q5_0: quantize_q5_0(src, dst, n / SP_QK); break;
    case SP_GGML_Q5_1: quantize_q5_1(src, dst, n / SP_QK); break;
    case SP_GGML_Q4_K: quantize_q4_K(src, dst, n / SP_QK_K); break;
    case SP_GGML_Q5_K: quantize_q5_K(src, dst, n / SP_QK_K); break;
    case SP_GGML_IQ4_NL: quantize_iq4_nl(src, dst, n / SP_QK); break;
    case SP_GGML_Q6_K: quantize_q6_K(src, dst, n / SP_QK_K); break;
    case SP_GGML_IQ4_XS: quantize_iq4_xs(src, dst, n / SP_QK_K); break;
    case SP_GGML_MXFP4: quantize_mxfp4(src, dst, n / SP_QK); break;
    default: SP_ASSERT(0 && "unsupported type");
    }
}

/* The 32 integer values of block b of a 32-block format and its scale and
 * offset: x = d * q[i] + m. */
void sp_quant_q32_values(sp_ggml_type type, const void *src, int64_t b, int32_t q[SP_QK], float *d,
                       float *m) {
    *m = 0;
    switch (type) {
    case SP_GGML_Q4_1: {
        const sp_block_q4_1 *x = (const sp_block_q4_1 *)src + b;
        for (int j = 0; j < 16; j++) q[j] = x->qs[j] & 0xF, q[j + 16] = x->qs[j] >> 4;
        *d = sp_fp16_to_fp32(x->d), *m = sp_fp16_to_fp32(x->m);
        break;
    }
    case SP_GGML_Q5_0: case SP_GGML_Q5_1: {
        const uint8_t *qs, *qhb;
        if (type == SP_GGML_Q5_0) {
            const sp_block_q5_0 *x = (const sp_block_q5_0 *)src + b;
            qs = x->qs, qhb = x->qh, *d = sp_fp16_to_fp32(x->d);
        } else {
            const sp_block_q5_1 *x = (const sp_block_q5_1 *)src + b;
            qs = x->qs, qhb = x->qh, *d = sp_fp16_to_fp32(x->d), *m = sp_fp16_to_fp32(x->m);
        }
        uint32_t qh = (uint32_t)qhb[0] | (uint32_t)qhb[1] << 8 | (uint32_t)qhb[2] << 16 | (uint32_t)qhb[3] << 24;
        const int off = type == SP_GGML_Q5_0 ? 16 : 0;
        for (int j = 0; j < 16; j++) {
            q[j] = (int32_t)((qs[j] & 0xF) | ((qh >> j) & 1) << 4) - off;
            q[j + 16] = (int32_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - off;
        }
        break;
    }
    case SP_GGML_IQ4_NL: {
        const sp_block_iq4_nl *x = (const sp_block_iq4_nl *)src + b;
        for (int j = 0; j < 16; j++)
            q[j] = sp_iq4nl_values[x->qs[j] & 0xF], q[j + 16] = sp_iq4nl_values[x->qs[j] >> 4];
        *d = sp_fp16_to_fp32(x->d);
        break;
    }
    case SP_GGML_MXFP4: {
        const sp_block_mxfp4 *x = (const sp_block_mxfp4 *)src + b;
        for (int j = 0; j < 16; j++)
            q[j] = sp_mxfp4_values[x->qs[j] & 0xF], q[j + 16] = sp_mxfp4_values[x->qs[j] >> 4];
        *d = sp_e8m0_half(x->e);
        break;
    }
    default: SP_ASSERT(0 && "not a 32-block format");
    }
}

static void dequant_q32(sp_ggml_type type, const void *src, float *dst, int64_t nb) {
    int32_t q[SP_QK];
    float d, m;
    for (int64_t b = 0; b < nb; b++) {
        sp_quant_q32_values(type, src, b, q, &d, &m);
        for (int j = 0; j < SP_QK; j++) dst[b * SP_QK + j] = d * (float)q[j] + m;
    }
}

/* Super-block b of a 256-block format as 16 sub-blocks of 16 integer values
 * with a float scale and offset each: x = scale[s] * q[16s + i] - mn[s].
 * sc/mn come from integer sub-scales times the super-block's f16 scales,
 * products ggml also forms in float, so dequantised values match gguf-py's. */
void sp_quant_k_values(sp_ggml_type type, const void *src, int64_t b, int32_t q[SP_QK_K],
                       int32_t isc[16], int32_t imn[16], float *d, float *dmin) {
    *dmin = 0;
    for (int s = 0; s < 16; s++) imn[s] = 0;
    switch (type) {
    case SP_GGML_Q2_K: {
        const sp_block_q2_K *x = (const sp_block_q2_K *)src + b;
        *d = sp_fp16_to_fp32(x->d), *dmin = sp_fp16_to_fp32(x->dmin);
        for (int s = 0; s < 16; s++) isc[s] = x->scales[s] & 0xF, imn[s] = x->scales[s] >> 4;
        /* element 128h + 32j + l (l < 32) is bits 2j of qs[32h + l] */
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) q[128 * h + 32 * j + l] = (x->qs[32 * h + l] >> (2 * j)) & 3;
        break;
    }
    case SP_GGML_Q3_K: {
        const sp_block_q3_K *x = (const sp_block_q3_K *)src + b;
        *d = sp_fp16_to_fp32(x->d);
        int8_t sc[16];
        sp_q3k_scales(x->scales, sc);
        for (int s = 0; s < 16; s++) isc[s] = sc[s];
        /* low bits as Q2_K; the high bit of element 128h + 32j + l is bit
         * 4h + j of hmask[l]; when clear the value is lowered by 4 */
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    int lo = (x->qs[32 * h + l] >> (2 * j)) & 3;
                    int hi = (x->hmask[l] >> (4 * h + j)) & 1;
                    q[128 * h + 32 * j + l] = lo - (hi ? 0 : 4);
                }
        break;
    }
    case SP_GGML_Q4_K: case SP_GGML_Q5_K: {
        const uint8_t *scales, *qs, *qh = NULL;
        if (type == SP_GGML_Q4_K) {
            const sp_block_q4_K *x = (const sp_block_q4_K *)src + b;
            *d = sp_fp16_to_fp32(x->d), *dmin = sp_fp16_to_fp32(x->dmin);
            scales = x->scales, qs = x->qs;
        } else {
            const sp_block_q5_K *x = (const sp_block_q5_K *)src + b;
            *d = sp_fp16_to_fp32(x->d), *dmin = sp_fp16_to_fp32(x->dmin);
            scales = x->scales, qs = x->qs, qh = x->qh;
        }
        /* 8 sub-blocks of 32: sub-block 2p is the low nibbles of qs[32p..],
         * 2p+1 the high nibbles; Q5_K's fifth bit of element 32s + l is bit s of qh[l] */
        for (int s8 = 0; s8 < 8; s8++) {
            uint8_t sc, mn;
            sp_q4k_scale_min(s8, scales, &sc, &mn);
            isc[2 * s8] = isc[2 * s8 + 1] = sc;
            imn[2 * s8] = imn[2 * s8 + 1] = mn;
            for (int l = 0; l < 32; l++) {
                int v = (s8 & 1) ? qs[32 * (s8 / 2) + l] >> 4 : qs[32 * (s8 / 2) + l] & 0xF;
                if (qh) v |= ((qh[l] >> s8) & 1) << 4;
                q[32 * s8 + l] = v;
            }
        }
        break;
    }
    case SP_GGML_Q6_K: {
        const sp_block_q6_K *x = (const sp_block_q6_K *)src + b;
        *d = sp_fp16_to_fp32(x->d);
        for (int s = 0; s < 16; s++) isc[s] = x->scales[s];
        /* per half h (128 elements): element 128h + 32j + l takes the low or
         * high nibble of ql[64h + l + 32(j&1)] (high when j >= 2) and bits
         * 2j of qh[32h + l]; values are offset by 32 */
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    int lo = x->ql[64 * h + l + 32 * (j & 1)];
                    lo = j >= 2 ? lo >> 4 : lo & 0xF;
                    int hi = (x->qh[32 * h + l] >> (2 * j)) & 3;
                    q[128 * h + 32 * j + l] = (lo | hi << 4) - 32;
                }
        break;
    }
    case SP_GGML_IQ4_XS: {
        const sp_block_iq4_xs *x = (const sp_block_iq4_xs *)src + b;
        *d = sp_fp16_to_fp32(x->d);
        for (int s8 = 0; s8 < 8; s8++) {
            int ls = ((x->scales_l[s8 / 2] >> (4 * (s8 % 2))) & 0xF) | (((x->scales_h >> (2 * s8)) & 3) << 4);
            isc[2 * s8] = isc[2 * s8 + 1] = ls - 32;
            for (int l = 0; l < 16; l++) {
                q[32 * s8 + l] = sp_iq4nl_values[x->qs[16 * s8 + l] & 0xF];
                q[32 * s8 + l + 16] = sp_iq4nl_values[x->qs[16 * s8 + l] >> 4];
            }
        }
        break;
    }
    default: SP_ASSERT(0 && "not a K-quant format");
    }
}

static void dequant_k(sp_ggml_type type, const void *src, float *dst, int64_t nb) {
    int32_t q[SP_QK_K], isc[16], imn[16];
    float d, dmin;
    for (int64_t b = 0; b < nb; b++) {
        sp_quant_k_values(type, src, b, q, isc, imn, &d, &dmin);
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)isc[s], ml = dmin * (float)imn[s];
            for (int l = 0; l < 16; l++) dst[b * SP_QK_K + 16 * s + l] = dl * (float)q[16 * s + l] - ml;
        }
    }
}

void sp_dequantize_row(sp_ggml_type type, const void *src, float *dst, int64_t n) {
    SP_ASSERT(sp_quant_loadable(type) && n >= 0 && n % sp_ggml_blck_size(type) == 0);
    switch (type) {
    case SP_GGML_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SP_GGML_Q4_1: case SP_GGML_Q5_0: case SP_GGML_Q5_1: case SP_GGML_IQ4_NL: case SP_GGML_MXFP4:
        dequant_q32(type, src, dst, n / SP_QK);
        break;
    case SP_GGML_Q2_K: case SP_GGML_Q3_K: case SP_GGML_Q4_K: case SP_GGML_Q5_K: case SP_GGML_Q6_K:
    case SP_GGML_IQ4_XS:
        dequant_k(type, src, dst, n / SP_QK_K);
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
