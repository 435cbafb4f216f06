/* ops: scalar reference kernels, activation preparation, ISA dispatch. */
#include "ops.h"
#include "kv.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "toint.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---------------- scalar reference matmuls ---------------- */

/* F32/F16/BF16 weights: widen each weight to f32; per output 16 lanes
 * a[l] = fmaf(w_i, x_i, a[l]) over the elements i = l mod 16 in order, then
 * sp_reduce16(a): the arithmetic of the AVX2 and AVX-512 kernels (one
 * 16-lane FMA vector, _mm512_reduce_add_ps) and of llama.cpp's F32 matmuls
 * (tinyBLAS), so every ISA gives the same bits and the scalar tier gives
 * llama.cpp's logits on F32 files too. W is the stored element type, CONV
 * turns one into a float; IDX(i) is element i's index in the row. */
#define FLOAT_DOT16(W, CONV, IDX)                                                        \
    float a[16] = {0};                                                                   \
    for (int64_t i = 0; i < m->k; i++) a[i % 16] = fmaf(CONV(w[IDX(i)]), x[i], a[i % 16]); \
    m->y[t * m->ld_y + r] = sp_reduce16(a)
#define ROW_IDX(i) (i)
#define DEFINE_FLOAT_REF(NAME, W, CONV)                                                  \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                          \
        for (int64_t r = r0; r < r1; r++) {                                              \
            const W *w = (const W *)(m->w + r * m->w_stride);                            \
            for (int32_t t = 0; t < m->n; t++) {                                         \
                const float *x = (const float *)((const uint8_t *)m->x + t * m->x_stride); \
                FLOAT_DOT16(W, CONV, ROW_IDX);                                           \
            }                                                                            \
        }                                                                                \
    }

static inline float f32_id(float v) { return v; }
DEFINE_FLOAT_REF(mm_f32_ref, float, f32_id)
DEFINE_FLOAT_REF(mm_f16_ref, uint16_t, sp_fp16_to_fp32)
DEFINE_FLOAT_REF(mm_bf16_ref, uint16_t, sp_bf16_to_fp32)

/* Packed F32/F16/BF16 (ops.h): element i of row 16g + l is at byte
 * (i / 16) * 256 * ESZ + l * 16 * ESZ + (i % 16) * ESZ of group g. The twin
 * of the references above over that layout (the same sums, so
 * bit-identical to them); W, CONV as above. */
static bool is_fpk(sp_ggml_type t) { return t == SP_GGML_F32 || t == SP_GGML_F16 || t == SP_GGML_BF16; }
#define PACKED_IDX(i) ((i) / 16 * 256 + (i) % 16)
#define DEFINE_FLOAT_PK_REF(NAME, W, CONV)                                                \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                           \
        for (int64_t r = r0; r < r1; r++) {                                               \
            const W *w = (const W *)(m->w + (r / SP_PACK_ROWS) * m->w_stride) + 16 * (r % SP_PACK_ROWS); \
            for (int32_t t = 0; t < m->n; t++) {                                          \
                const float *x = (const float *)((const uint8_t *)m->x + t * m->x_stride); \
                FLOAT_DOT16(W, CONV, PACKED_IDX);                                         \
            }                                                                             \
        }                                                                                 \
    }
DEFINE_FLOAT_PK_REF(mm_f32_pk_ref, float, f32_id)
DEFINE_FLOAT_PK_REF(mm_f16_pk_ref, uint16_t, sp_fp16_to_fp32)
DEFINE_FLOAT_PK_REF(mm_bf16_pk_ref, uint16_t, sp_bf16_to_fp32)

/* ggml's vec_dot_f16 order (ops.h: sp_ops_mm_f16_vecdot). */
static void mm_f16_vecdot_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t np = m->k / 64 * 64;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)(m->w + r * m->w_stride);
        for (int32_t t = 0; t < m->n; t++) {
            const float *x = (const float *)((const uint8_t *)m->x + t * m->x_stride);
            float a[4][16] = {{0}};
            for (int64_t i = 0; i < np; i += 64)
                for (int j = 0; j < 4; j++)
                    for (int l = 0; l < 16; l++)
                        a[j][l] = fmaf(sp_fp16_to_fp32(w[i + 16 * j + l]), x[i + 16 * j + l], a[j][l]);
            for (int l = 0; l < 16; l++) a[0][l] = (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]);
            double s = sp_reduce16(a[0]);
            for (int64_t i = np; i < m->k; i++) s += (double)(sp_fp16_to_fp32(w[i]) * x[i]);
            m->y[t * m->ld_y + r] = (float)s;
        }
    }
}

/* Element size of a packable float type, and the packing (past the row end
 * and past the last row: zeros, from the caller's memset). */
static size_t fpk_esz(sp_ggml_type t) { return t == SP_GGML_F32 ? 4 : 2; }
static void pack_float(sp_ggml_type t, const uint8_t *w, size_t w_stride, int64_t rows, int64_t k,
                       uint8_t *dst) {
    const size_t esz = fpk_esz(t), gs = sp_ops_pack_stride(t, k);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *lane = dst + (size_t)(r / SP_PACK_ROWS) * gs + (size_t)(r % SP_PACK_ROWS) * 16 * esz;
        for (int64_t i = 0; i < k; i += 16) {
            const size_t ne = (size_t)(k - i < 16 ? k - i : 16);
            memcpy(lane + (size_t)(i / 16) * 256 * esz, w + (size_t)r * w_stride + (size_t)i * esz, ne * esz);
        }
    }
}

/* Exact integer dot of one weight block with 32 int8 activations. */
static inline int32_t block_dot_q8_0(const sp_block_q8_0 *w, const int8_t *xq) {
    int32_t s = 0;
    for (int i = 0; i < SP_QK; i++) s += (int32_t)w->qs[i] * xq[i];
    return s;
}

static inline int32_t block_dot_q4_0(const sp_block_q4_0 *w, const int8_t *xq) {
    int32_t s = 0;
    for (int i = 0; i < SP_QK / 2; i++) {
        s += ((w->qs[i] & 0x0F) - 8) * xq[i];
        s += ((w->qs[i] >> 4) - 8) * xq[i + SP_QK / 2];
    }
    return s;
}

/* Block formats against q8 activations: per block, exact integer dot times
 * (weight scale * activation scale), summed in block order. */
#define DEFINE_BLOCK_REF(NAME, BLOCK, DOT)                                                \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                           \
        const int64_t nb = m->k / SP_QK;                                                  \
        for (int64_t r = r0; r < r1; r++) {                                               \
            const BLOCK *w = (const BLOCK *)(m->w + r * m->w_stride);                     \
            for (int32_t t = 0; t < m->n; t++) {                                          \
                const void *xr = (const uint8_t *)m->x + t * m->x_stride;                 \
                const int8_t *xq = sp_act_qs(xr);                                         \
                const float *xd = sp_act_d(xr, m->k);                                     \
                float acc = 0;                                                            \
                for (int64_t b = 0; b < nb; b++)                                          \
                    acc += (float)DOT(&w[b], xq + b * SP_QK) * (sp_fp16_to_fp32(w[b].d) * xd[b]); \
                m->y[t * m->ld_y + r] = acc;                                              \
            }                                                                             \
        }                                                                                 \
    }

DEFINE_BLOCK_REF(mm_q8_0_ref, sp_block_q8_0, block_dot_q8_0)
DEFINE_BLOCK_REF(mm_q4_0_ref, sp_block_q4_0, block_dot_q4_0)

/* Bytes of one block's quants for 16 rows in the packed layout (ops.h). */
static size_t pack_qb(sp_ggml_type t) { return t == SP_GGML_Q4_0 ? 256 : 512; }

/* The reference over packed Q8_0/Q4_0 weights (ops.h): the same integer
 * dot and float expression per block as mm_q8_0_ref / mm_q4_0_ref, read
 * from the interleaved bytes, so the outputs are the same bits. */
static void mm_packed_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    const bool q4 = m->wtype == SP_GGML_Q4_0;
    const int64_t nb = m->k / SP_QK;
    const size_t qb = pack_qb(m->wtype), us = 2 * qb + 64;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *grp = m->w + (r / SP_PACK_ROWS) * m->w_stride;
        const int i = (int)(r % SP_PACK_ROWS);
        for (int32_t t = 0; t < m->n; t++) {
            const void *xr = (const uint8_t *)m->x + t * m->x_stride;
            const int8_t *xq = sp_act_qs(xr);
            const float *xd = sp_act_d(xr, m->k);
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *unit = grp + (size_t)(b / 2) * us;
                const uint8_t *q = unit + (size_t)(b % 2) * qb;
                const int8_t *xb = xq + b * SP_QK;
                int32_t dot = 0;
                for (int j = 0; j < (q4 ? 4 : 8); j++)
                    for (int e = 0; e < 4; e++) {
                        const uint8_t v = q[64 * j + 4 * i + e];
                        if (q4) {
                            dot += ((v & 0x0F) - 8) * xb[4 * j + e];
                            dot += ((v >> 4) - 8) * xb[16 + 4 * j + e];
                        } else {
                            dot += (int32_t)(int8_t)(v ^ 0x80) * xb[4 * j + e];
                        }
                    }
                uint16_t d;
                memcpy(&d, unit + 2 * qb + 32 * (size_t)(b % 2) + 2 * (size_t)i, 2);
                acc += (float)dot * (sp_fp16_to_fp32(d) * xd[b]);
            }
            m->y[t * m->ld_y + r] = acc;
        }
    }
}

/* Packed Q4_K and Q5_K (ops.h): one unit per super-block; Q5_K's holds the
 * qh chunks after the quants, and everything after them moves on. */
typedef struct pk45_layout { size_t unit, qh, sc, mn, d, dmin; } pk45_layout;
static pk45_layout pk45(sp_ggml_type t) {
    if (t == SP_GGML_Q5_K) return (pk45_layout){2880, 2048, 2560, 2688, 2816, 2848};
    return (pk45_layout){2368, 0, 2048, 2176, 2304, 2336};
}

/* The reference over packed Q4_K / Q5_K: mm_k_ref's integer sums (sumi
 * over the 8 sub-blocks of 32 with their scales, summ over the mins and
 * activation sums) and float expression, read from the interleaved bytes. */
static void mm_packed_q45k_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const pk45_layout L = pk45(m->wtype);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *grp = m->w + (r / SP_PACK_ROWS) * m->w_stride;
        const int i = (int)(r % SP_PACK_ROWS);
        for (int32_t t = 0; t < m->n; t++) {
            const void *xr = (const uint8_t *)m->x + t * m->x_stride;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *unit = grp + (size_t)b * L.unit;
                const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                const int32_t *bs = sp_actk_bsum(xr, k) + b * 16;
                int32_t sumi = 0, summ = 0;
                for (int s8 = 0; s8 < 8; s8++) {
                    int32_t dot = 0;
                    for (int j = 0; j < 8; j++)
                        for (int e = 0; e < 4; e++) {
                            const uint8_t v = unit[64 * (8 * (s8 / 2) + j) + 4 * i + e];
                            int q = (s8 & 1) ? v >> 4 : v & 0x0F;
                            if (L.qh) q |= ((unit[L.qh + 64 * s8 + 8 * j + (4 * i + e) / 8] >> ((4 * i + e) % 8)) & 1) << 4;
                            dot += q * xq[32 * s8 + 4 * j + e];
                        }
                    sumi += unit[L.sc + 16 * s8 + i] * dot;
                    summ += unit[L.mn + 32 * (s8 / 2) + 2 * i + (s8 & 1)] * (bs[2 * s8] + bs[2 * s8 + 1]);
                }
                uint16_t hd, hm;
                memcpy(&hd, unit + L.d + 2 * i, 2);
                memcpy(&hm, unit + L.dmin + 2 * i, 2);
                const float xd = sp_actk_d(xr, k)[b];
                acc += (xd * sp_fp16_to_fp32(hd)) * (float)sumi - (xd * sp_fp16_to_fp32(hm)) * (float)summ;
            }
            m->y[t * m->ld_y + r] = acc;
        }
    }
}

static void pack_q45k(sp_ggml_type wtype, const uint8_t *w, size_t w_stride, int64_t rows, int64_t k,
                      uint8_t *dst) {
    const int64_t nb = k / SP_QK_K;
    const pk45_layout L = pk45(wtype);
    const size_t gs = (size_t)nb * L.unit;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *grp = dst + (size_t)(r / SP_PACK_ROWS) * gs;
        const size_t i = (size_t)(r % SP_PACK_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *row = w + (size_t)r * w_stride;
            const uint8_t *d, *scales, *qs, *qh = NULL; /* d, dmin: 4 bytes */
            if (wtype == SP_GGML_Q5_K) {
                const sp_block_q5_K *x = (const sp_block_q5_K *)row + b;
                d = (const uint8_t *)&x->d, scales = x->scales, qs = x->qs, qh = x->qh;
            } else {
                const sp_block_q4_K *x = (const sp_block_q4_K *)row + b;
                d = (const uint8_t *)&x->d, scales = x->scales, qs = x->qs;
            }
            uint8_t *unit = grp + (size_t)b * L.unit;
            for (int c = 0; c < 32; c++) memcpy(unit + 64 * c + 4 * i, qs + 4 * c, 4); /* c = 8p + j */
            for (int s8 = 0; qh && s8 < 8; s8++) /* fifth-bit masks: bits 4i..4i+3 of mask (s8, j) */
                for (int j = 0; j < 8; j++) {
                    uint32_t v;
                    memcpy(&v, qh + 4 * j, 4);
                    v = (v >> s8) & 0x01010101u; /* bit s8 of the 4 bytes, gathered into a nibble: */
                    const uint32_t nib = (uint32_t)(((uint64_t)v * 0x01020408u) >> 24) & 0xF;
                    unit[L.qh + 64 * (size_t)s8 + 8 * (size_t)j + i / 2] |= (uint8_t)(nib << (4 * (i % 2)));
                }
            for (int s8 = 0; s8 < 8; s8++) {
                uint8_t sc, mn;
                sp_q4k_scale_min(s8, scales, &sc, &mn);
                unit[L.sc + 16 * s8 + i] = sc;
                unit[L.mn + 32 * (s8 / 2) + 2 * i + (size_t)(s8 & 1)] = mn;
            }
            memcpy(unit + L.d + 2 * i, d, 2);
            memcpy(unit + L.dmin + 2 * i, d + 2, 2);
        }
    }
}

/* Packed Q6_K (ops.h): one unit per super-block. */
enum { PK6K_UNIT = 3456, PK6K_QH = 2048, PK6K_SC = 3072, PK6K_NC = 3328, PK6K_D = 3392 };

/* Value of element e (< 256) of row i in a packed Q6_K unit: the low four
 * bits from an ql chunk, the high two from a qh chunk, minus 32. */
static int pk6k_value(const uint8_t *unit, int i, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint8_t lo = unit[64 * (16 * h + 8 * (j & 1) + l / 4) + 4 * i + l % 4];
    const uint8_t hi = unit[PK6K_QH + 64 * (8 * h + l / 4) + 4 * i + l % 4];
    return (((j >= 2 ? lo >> 4 : lo & 0x0F) | ((hi >> (2 * j)) & 3) << 4)) - 32;
}

/* Scale of sub-block s16 (of 16) of row i in a packed Q6_K unit. */
static int pk6k_scale(const uint8_t *unit, int i, int s16) { return (int8_t)unit[PK6K_SC + 16 * s16 + i]; }

/* The reference over a packed K-quant without mins (Q6_K, IQ4_XS):
 * mm_k_ref's integer sum (sub-blocks of 16 with signed scales) and float
 * expression (dmin = 0, summ = 0), the values read from the interleaved
 * bytes: value(unit, i, e) is element e (< 256) of row i, scale(unit, i,
 * s16) its sub-block's scale; the rows' f16 d sit at d_off in the unit. */
typedef int (*pk_value_fn)(const uint8_t *unit, int i, int e);
static void mm_packed_nomin_ref(const sp_mm *m, int64_t r0, int64_t r1, size_t unit_bytes, size_t d_off,
                                pk_value_fn value, pk_value_fn scale) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *grp = m->w + (r / SP_PACK_ROWS) * m->w_stride;
        const int i = (int)(r % SP_PACK_ROWS);
        for (int32_t t = 0; t < m->n; t++) {
            const void *xr = (const uint8_t *)m->x + t * m->x_stride;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *unit = grp + (size_t)b * unit_bytes;
                const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                int32_t sumi = 0;
                const int32_t summ = 0;
                for (int s16 = 0; s16 < 16; s16++) {
                    int32_t dot = 0;
                    for (int l = 0; l < 16; l++) dot += value(unit, i, 16 * s16 + l) * xq[16 * s16 + l];
                    sumi += scale(unit, i, s16) * dot;
                }
                uint16_t hd;
                memcpy(&hd, unit + d_off + 2 * (size_t)i, 2);
                const float xd = sp_actk_d(xr, k)[b], dmin = 0.0f;
                acc += (xd * sp_fp16_to_fp32(hd)) * (float)sumi - (xd * dmin) * (float)summ;
            }
            m->y[t * m->ld_y + r] = acc;
        }
    }
}

static void mm_packed_q6k_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    mm_packed_nomin_ref(m, r0, r1, PK6K_UNIT, PK6K_D, pk6k_value, pk6k_scale);
}

static void pack_q6k(const uint8_t *w, size_t w_stride, int64_t rows, int64_t k, uint8_t *dst) {
    const int64_t nb = k / SP_QK_K;
    const size_t gs = (size_t)nb * PK6K_UNIT;
    int32_t q[SP_QK_K], isc[16], imn[16];
    float d, dmin;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *grp = dst + (size_t)(r / SP_PACK_ROWS) * gs;
        const size_t i = (size_t)(r % SP_PACK_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            const sp_block_q6_K *x = (const sp_block_q6_K *)(w + (size_t)r * w_stride) + b;
            uint8_t *unit = grp + (size_t)b * PK6K_UNIT;
            for (int c = 0; c < 32; c++) memcpy(unit + 64 * c + 4 * i, x->ql + 4 * c, 4);
            for (int c = 0; c < 16; c++) memcpy(unit + PK6K_QH + 64 * c + 4 * i, x->qh + 4 * c, 4);
            sp_quant_k_values(SP_GGML_Q6_K, w + (size_t)r * w_stride, b, q, isc, imn, &d, &dmin);
            int32_t nc = 0;
            for (int s16 = 0; s16 < 16; s16++) {
                int32_t ws = 0;
                for (int l = 0; l < 16; l++) ws += q[16 * s16 + l];
                nc -= 128 * isc[s16] * ws; /* |.| <= 128 * 16 * 128 * 512: fits */
                unit[PK6K_SC + 16 * s16 + i] = (uint8_t)x->scales[s16];
            }
            memcpy(unit + PK6K_NC + 4 * i, &nc, 4);
            memcpy(unit + PK6K_D + 2 * i, &x->d, 2);
        }
    }
}

/* Packed Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (ops.h): units of two blocks c =
 * 0, 1, Q4_0's quants, then (Q5_*) the fifth-bit masks, the f16 d (MXFP4:
 * the f32 d = 2^(e - 128), 64 bytes per block, as f16 cannot hold it) and
 * (Q4_1, Q5_1) the f16 m of each block. */
typedef struct pk32_layout { size_t unit, mask, d, m; } pk32_layout; /* mask, m: 0 when none */
static pk32_layout pk32(sp_ggml_type t) {
    if (t == SP_GGML_MXFP4) return (pk32_layout){640, 0, 512, 0};
    const bool q5 = t == SP_GGML_Q5_0 || t == SP_GGML_Q5_1, hm = t == SP_GGML_Q4_1 || t == SP_GGML_Q5_1;
    const size_t d = 512 + (q5 ? 128 : 0);
    return (pk32_layout){d + (hm ? 128 : 64), q5 ? 512 : 0, d, hm ? d + 64 : 0};
}

static bool is_pk32(sp_ggml_type t) {
    return t == SP_GGML_Q4_1 || t == SP_GGML_Q5_0 || t == SP_GGML_Q5_1 || t == SP_GGML_IQ4_NL ||
           t == SP_GGML_MXFP4;
}

/* The reference over packed Q4_1/Q5_0/Q5_1/IQ4_NL: mm_q32_ref's integer dot
 * and float expression per block (v = (d_w d_x) sumi, + m_w s_x when m_w is
 * not 0, y += v in block order), the values read from the interleaved
 * bytes: nibble (and fifth bit) as sp_quant_q32_values turns them into q. */
static void mm_packed_q32_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    const sp_ggml_type t = m->wtype;
    const int64_t nb = m->k / SP_QK;
    const pk32_layout L = pk32(t);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *grp = m->w + (r / SP_PACK_ROWS) * m->w_stride;
        const int i = (int)(r % SP_PACK_ROWS);
        for (int32_t tk = 0; tk < m->n; tk++) {
            const void *xr = (const uint8_t *)m->x + tk * m->x_stride;
            const int8_t *xq = sp_act_qs(xr);
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *unit = grp + (size_t)(b / 2) * L.unit;
                const size_t c = (size_t)(b % 2);
                int32_t sumi = 0;
                for (int e = 0; e < SP_QK; e++) { /* element e: chunk e/4 of the low (e < 16) or high nibbles */
                    const uint8_t v = unit[256 * c + 64 * (size_t)((e % 16) / 4) + 4 * (size_t)i + (size_t)(e % 4)];
                    int q = e < 16 ? v & 0x0F : v >> 4;
                    if (L.mask) q |= ((unit[L.mask + 64 * c + 8 * (size_t)(e / 4) + (4 * (size_t)i + (size_t)(e % 4)) / 8] >>
                                       ((4 * i + e % 4) % 8)) & 1) << 4;
                    if (t == SP_GGML_Q5_0) q -= 16;
                    if (t == SP_GGML_IQ4_NL) q = sp_iq4nl_values[q];
                    if (t == SP_GGML_MXFP4) q = sp_mxfp4_values[q];
                    sumi += q * xq[b * SP_QK + e];
                }
                uint16_t hd, hm = 0;
                float d;
                if (t == SP_GGML_MXFP4) {
                    memcpy(&d, unit + L.d + 64 * c + 4 * (size_t)i, 4);
                } else {
                    memcpy(&hd, unit + L.d + 32 * c + 2 * (size_t)i, 2);
                    d = sp_fp16_to_fp32(hd);
                }
                if (L.m) memcpy(&hm, unit + L.m + 32 * c + 2 * (size_t)i, 2);
                const float mn = sp_fp16_to_fp32(hm);
                float v = (d * sp_act_d(xr, m->k)[b]) * (float)sumi;
                if (mn != 0) v += mn * sp_act_s(xr, m->k)[b];
                acc += v;
            }
            m->y[tk * m->ld_y + r] = acc;
        }
    }
}

static void pack_q32(sp_ggml_type t, const uint8_t *w, size_t w_stride, int64_t rows, int64_t k, uint8_t *dst) {
    const int64_t nb = k / SP_QK;
    const pk32_layout L = pk32(t);
    const size_t gs = (size_t)((nb + 1) / 2) * L.unit, bsz = sp_ggml_row_size(t, SP_QK);
    /* field offsets in the block: d first, then m, qh, qs as the format has them */
    size_t om = 0, oqh = 0, oqs;
    switch (t) {
    case SP_GGML_Q4_1: om = 2, oqs = 4; break;
    case SP_GGML_Q5_0: oqh = 2, oqs = 6; break;
    case SP_GGML_Q5_1: om = 2, oqh = 4, oqs = 8; break;
    case SP_GGML_MXFP4: oqs = 1; break;
    default: oqs = 2; break; /* IQ4_NL */
    }
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *grp = dst + (size_t)(r / SP_PACK_ROWS) * gs;
        const size_t i = (size_t)(r % SP_PACK_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (size_t)r * w_stride + (size_t)b * bsz;
            uint8_t *unit = grp + (size_t)(b / 2) * L.unit;
            const size_t c = (size_t)(b % 2);
            for (size_t j = 0; j < 4; j++) memcpy(unit + 256 * c + 64 * j + 4 * i, blk + oqs + 4 * j, 4);
            if (L.mask) {
                const uint32_t qh = (uint32_t)blk[oqh] | (uint32_t)blk[oqh + 1] << 8 | (uint32_t)blk[oqh + 2] << 16 |
                                    (uint32_t)blk[oqh + 3] << 24;
                for (size_t j = 0; j < 8; j++) /* mask j, bits 4i..4i+3: elements 4j..4j+3's fifth bits */
                    unit[L.mask + 64 * c + 8 * j + i / 2] |= (uint8_t)(((qh >> (4 * j)) & 0xF) << (4 * (i % 2)));
            }
            if (t == SP_GGML_MXFP4) {
                const float d = sp_e8m0_half(blk[0]);
                memcpy(unit + L.d + 64 * c + 4 * i, &d, 4);
            } else {
                memcpy(unit + L.d + 32 * c + 2 * i, blk, 2);
            }
            if (L.m) memcpy(unit + L.m + 32 * c + 2 * i, blk + om, 2);
        }
    }
}

/* Packed IQ4_XS (ops.h): one unit of 2240 bytes per super-block. */
enum { PKXS_UNIT = 2240, PKXS_SC = 2048, PKXS_D = 2176 };

/* Value of element e (< 256) of row i in a packed IQ4_XS unit: sub-block
 * s8 = e / 32 holds its 32 nibbles in Q4_0's chunk order, looked up in the
 * IQ4_NL grid; and the scale of sub-block s16 (of 16: s8 = s16 / 2). */
static int pkxs_value(const uint8_t *unit, int i, int e) {
    const int s8 = e / 32, j = e % 32;
    const uint8_t v = unit[256 * s8 + 64 * ((j % 16) / 4) + 4 * i + j % 4];
    return sp_iq4nl_values[j < 16 ? v & 0x0F : v >> 4];
}
static int pkxs_scale(const uint8_t *unit, int i, int s16) {
    const int s8 = s16 / 2;
    return (int8_t)unit[PKXS_SC + 32 * (s8 / 2) + 2 * i + s8 % 2];
}

static void mm_packed_iq4xs_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    mm_packed_nomin_ref(m, r0, r1, PKXS_UNIT, PKXS_D, pkxs_value, pkxs_scale);
}

static void pack_iq4xs(const uint8_t *w, size_t w_stride, int64_t rows, int64_t k, uint8_t *dst) {
    const int64_t nb = k / SP_QK_K;
    const size_t gs = (size_t)nb * PKXS_UNIT;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *grp = dst + (size_t)(r / SP_PACK_ROWS) * gs;
        const size_t i = (size_t)(r % SP_PACK_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            const sp_block_iq4_xs *x = (const sp_block_iq4_xs *)(w + (size_t)r * w_stride) + b;
            uint8_t *unit = grp + (size_t)b * PKXS_UNIT;
            for (int s8 = 0; s8 < 8; s8++) {
                for (int j = 0; j < 4; j++) memcpy(unit + 256 * s8 + 64 * j + 4 * i, x->qs + 16 * s8 + 4 * j, 4);
                const int ls = ((x->scales_l[s8 / 2] >> (4 * (s8 % 2))) & 0xF) | (((x->scales_h >> (2 * s8)) & 3) << 4);
                unit[PKXS_SC + 32 * (s8 / 2) + 2 * i + (size_t)(s8 % 2)] = (uint8_t)(int8_t)(ls - 32);
            }
            memcpy(unit + PKXS_D + 2 * i, &x->d, 2);
        }
    }
}

/* Packed Q3_K and Q2_K (ops.h): the 2-bit quants as 16 chunks c = 8h + cc
 * (row i's qs[4c..4c+3] at bytes 4i..; bits 2j give elements 128h + 32j +
 * 4cc + e), then Q3_K: inverted high-bit masks, int8 scales [s][i], int32 nc
 * and the f16 d; Q2_K: the raw scale bytes as [q][i][2], f16 d and dmin. */
enum { PK3K_UNIT = 1920, PK3K_HM = 1024, PK3K_SC = 1536, PK3K_NC = 1792, PK3K_D = 1856 };
enum { PK2K_UNIT = 1344, PK2K_SC = 1024, PK2K_D = 1280, PK2K_DMIN = 1312 };

/* Low bits (0..3) of element e of row i in a packed Q2_K/Q3_K unit. */
static int pk2bit(const uint8_t *unit, int i, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    return (unit[64 * (8 * h + l / 4) + 4 * i + l % 4] >> (2 * j)) & 3;
}

/* Bit 4i + e of the 64-bit little-endian mask at p. */
static int mask_bit(const uint8_t *p, int i, int e) { return (p[(4 * i + e) / 8] >> ((4 * i + e) % 8)) & 1; }

/* Q3_K value of element e: the low bits minus 4 where the mask of (h, j,
 * cc) (index 32h + 8j + cc) has the bit set. */
static int pk3k_value(const uint8_t *unit, int i, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    return pk2bit(unit, i, e) - 4 * mask_bit(unit + PK3K_HM + 8 * (32 * h + 8 * j + l / 4), i, l % 4);
}

/* The references over packed Q3_K and Q2_K: mm_k_ref's integer sums (per
 * sub-block of 16, its scale times the dot; Q2_K's mins times the
 * activation's 16-sums) and float expression (Q3_K: dmin = 0, summ = 0). */
static void mm_packed_q23k_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const bool q3 = m->wtype == SP_GGML_Q3_K;
    const size_t us = q3 ? PK3K_UNIT : PK2K_UNIT;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *grp = m->w + (r / SP_PACK_ROWS) * m->w_stride;
        const int i = (int)(r % SP_PACK_ROWS);
        for (int32_t t = 0; t < m->n; t++) {
            const void *xr = (const uint8_t *)m->x + t * m->x_stride;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *unit = grp + (size_t)b * us;
                const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                const int32_t *bs = sp_actk_bsum(xr, k) + b * 16;
                int32_t sumi = 0, summ = 0;
                for (int s16 = 0; s16 < 16; s16++) {
                    int32_t dot = 0;
                    for (int l = 0; l < 16; l++) {
                        const int e = 16 * s16 + l;
                        dot += (q3 ? pk3k_value(unit, i, e) : pk2bit(unit, i, e)) * xq[e];
                    }
                    if (q3) {
                        sumi += (int8_t)unit[PK3K_SC + 16 * s16 + i] * dot;
                    } else {
                        const uint8_t sc = unit[PK2K_SC + 32 * (s16 / 2) + 2 * i + s16 % 2];
                        sumi += (sc & 0xF) * dot;
                        summ += (sc >> 4) * bs[s16];
                    }
                }
                uint16_t hd, hm = 0;
                memcpy(&hd, unit + (q3 ? PK3K_D : PK2K_D) + 2 * i, 2);
                if (!q3) memcpy(&hm, unit + PK2K_DMIN + 2 * i, 2);
                const float xd = sp_actk_d(xr, k)[b], dmin = q3 ? 0.0f : sp_fp16_to_fp32(hm);
                acc += (xd * sp_fp16_to_fp32(hd)) * (float)sumi - (xd * dmin) * (float)summ;
            }
            m->y[t * m->ld_y + r] = acc;
        }
    }
}

static void pack_q23k(sp_ggml_type wtype, const uint8_t *w, size_t w_stride, int64_t rows, int64_t k, uint8_t *dst) {
    const int64_t nb = k / SP_QK_K;
    const bool q3 = wtype == SP_GGML_Q3_K;
    const size_t us = q3 ? PK3K_UNIT : PK2K_UNIT, gs = (size_t)nb * us;
    int32_t q[SP_QK_K], isc[16], imn[16];
    float d, dmin;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *grp = dst + (size_t)(r / SP_PACK_ROWS) * gs;
        const size_t i = (size_t)(r % SP_PACK_ROWS);
        const uint8_t *row = w + (size_t)r * w_stride;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *unit = grp + (size_t)b * us;
            const uint8_t *qs = q3 ? ((const sp_block_q3_K *)row + b)->qs : ((const sp_block_q2_K *)row + b)->qs;
            for (int c = 0; c < 16; c++) memcpy(unit + 64 * c + 4 * i, qs + 4 * c, 4);
            if (q3) {
                const sp_block_q3_K *x = (const sp_block_q3_K *)row + b;
                sp_quant_k_values(SP_GGML_Q3_K, row, b, q, isc, imn, &d, &dmin);
                int32_t nc = 0;
                for (int e = 0; e < SP_QK_K; e++) {
                    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
                    if (q[e] < 0) /* high bit clear: lowered by 4 */
                        unit[PK3K_HM + 8 * (32 * h + 8 * j + l / 4) + (4 * i + (size_t)(l % 4)) / 8] |=
                            (uint8_t)(1u << ((4 * i + (size_t)(l % 4)) % 8));
                    nc -= 128 * isc[e / 16] * q[e]; /* |.| <= 128 * 32 * 4 * 256: fits */
                }
                for (int s16 = 0; s16 < 16; s16++) unit[PK3K_SC + 16 * s16 + i] = (uint8_t)(int8_t)isc[s16];
                memcpy(unit + PK3K_NC + 4 * i, &nc, 4);
                memcpy(unit + PK3K_D + 2 * i, &x->d, 2);
            } else {
                const sp_block_q2_K *x = (const sp_block_q2_K *)row + b;
                for (int s16 = 0; s16 < 16; s16++) unit[PK2K_SC + 32 * (s16 / 2) + 2 * i + (size_t)(s16 % 2)] = x->scales[s16];
                memcpy(unit + PK2K_D + 2 * i, &x->d, 2);
                memcpy(unit + PK2K_DMIN + 2 * i, &x->dmin, 2);
            }
        }
    }
}

bool sp_ops_packable(sp_ggml_type wtype) {
    return is_fpk(wtype) || wtype == SP_GGML_Q8_0 || wtype == SP_GGML_Q4_0 || wtype == SP_GGML_Q4_K ||
           wtype == SP_GGML_Q5_K || wtype == SP_GGML_Q6_K || wtype == SP_GGML_IQ4_XS || wtype == SP_GGML_Q3_K ||
           wtype == SP_GGML_Q2_K || is_pk32(wtype);
}

size_t sp_ops_pack_stride(sp_ggml_type wtype, int64_t k) {
    if (is_fpk(wtype)) return (size_t)((k + 15) / 16) * 256 * fpk_esz(wtype);
    if (wtype == SP_GGML_Q4_K || wtype == SP_GGML_Q5_K) return (size_t)(k / SP_QK_K) * pk45(wtype).unit;
    if (wtype == SP_GGML_Q6_K) return (size_t)(k / SP_QK_K) * PK6K_UNIT;
    if (is_pk32(wtype)) return (size_t)((k / SP_QK + 1) / 2) * pk32(wtype).unit;
    if (wtype == SP_GGML_IQ4_XS) return (size_t)(k / SP_QK_K) * PKXS_UNIT;
    if (wtype == SP_GGML_Q3_K) return (size_t)(k / SP_QK_K) * PK3K_UNIT;
    if (wtype == SP_GGML_Q2_K) return (size_t)(k / SP_QK_K) * PK2K_UNIT;
    return (size_t)((k / SP_QK + 1) / 2) * (2 * pack_qb(wtype) + 64);
}

size_t sp_ops_pack_bytes(sp_ggml_type wtype, int64_t rows, int64_t k) {
    return (size_t)((rows + SP_PACK_ROWS - 1) / SP_PACK_ROWS) * sp_ops_pack_stride(wtype, k);
}

void sp_ops_pack(sp_ggml_type wtype, const uint8_t *w, size_t w_stride, int64_t rows, int64_t k,
                 uint8_t *dst) {
    const bool q4 = wtype == SP_GGML_Q4_0;
    const int64_t nb = k / SP_QK;
    const size_t qb = pack_qb(wtype), us = 2 * qb + 64, gs = sp_ops_pack_stride(wtype, k);
    const size_t bsz = q4 ? sizeof(sp_block_q4_0) : sizeof(sp_block_q8_0);
    memset(dst, 0, sp_ops_pack_bytes(wtype, rows, k));
    if (is_fpk(wtype)) {
        pack_float(wtype, w, w_stride, rows, k, dst);
        return;
    }
    if (wtype == SP_GGML_Q4_K || wtype == SP_GGML_Q5_K) {
        pack_q45k(wtype, w, w_stride, rows, k, dst);
        return;
    }
    if (wtype == SP_GGML_Q6_K) {
        pack_q6k(w, w_stride, rows, k, dst);
        return;
    }
    if (is_pk32(wtype)) {
        pack_q32(wtype, w, w_stride, rows, k, dst);
        return;
    }
    if (wtype == SP_GGML_IQ4_XS) {
        pack_iq4xs(w, w_stride, rows, k, dst);
        return;
    }
    if (wtype == SP_GGML_Q3_K || wtype == SP_GGML_Q2_K) {
        pack_q23k(wtype, w, w_stride, rows, k, dst);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *grp = dst + (size_t)(r / SP_PACK_ROWS) * gs;
        const size_t i = (size_t)(r % SP_PACK_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (size_t)r * w_stride + (size_t)b * bsz; /* d, then qs */
            uint8_t *unit = grp + (size_t)(b / 2) * us, *q = unit + (size_t)(b % 2) * qb;
            for (int j = 0; j < (q4 ? 4 : 8); j++)
                for (int e = 0; e < 4; e++)
                    q[64 * j + 4 * i + (size_t)e] = (uint8_t)(blk[2 + 4 * j + e] ^ (q4 ? 0 : 0x80));
            memcpy(unit + 2 * qb + 32 * (size_t)(b % 2) + 2 * i, blk, 2);
        }
    }
}

/* The other 32-block formats (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) against q8
 * activations: a block's weights are unpacked once to integers and applied
 * to every token; per block y += (d_w d_x) * sum(q_w q_x) + m_w * s_x, the
 * formula and the float products of ggml's vec_dot (s_x: see ops.h).
 * Per-token sums run in block order whatever n or the row range. */
static void mm_q32_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t nb = m->k / SP_QK;
    int32_t q[SP_QK];
    float d, mn;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = m->w + r * m->w_stride;
        for (int32_t t = 0; t < m->n; t++) m->y[t * m->ld_y + r] = 0;
        for (int64_t b = 0; b < nb; b++) {
            sp_quant_q32_values(m->wtype, w, b, q, &d, &mn);
            for (int32_t t = 0; t < m->n; t++) {
                const void *xr = (const uint8_t *)m->x + t * m->x_stride;
                const int8_t *xq = sp_act_qs(xr) + b * SP_QK;
                int32_t sumi = 0;
                for (int j = 0; j < SP_QK; j++) sumi += q[j] * xq[j];
                float v = (d * sp_act_d(xr, m->k)[b]) * (float)sumi;
                if (mn != 0) v += mn * sp_act_s(xr, m->k)[b];
                m->y[t * m->ld_y + r] += v;
            }
        }
    }
}

/* K-quants against q8_K activations: per super-block the exact integer sums
 * sumi = sum_s isc[s] * (q_w . q_x over sub-block s) and
 * summ = sum_s imn[s] * bsum_x[s], then y += (d_x d) sumi - (d_x dmin) summ,
 * as ggml's vec_dot forms them. */
static void mm_k_ref(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t nb = m->k / SP_QK_K;
    int32_t q[SP_QK_K], isc[16], imn[16];
    float d, dmin;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = m->w + r * m->w_stride;
        for (int32_t t = 0; t < m->n; t++) m->y[t * m->ld_y + r] = 0;
        for (int64_t b = 0; b < nb; b++) {
            sp_quant_k_values(m->wtype, w, b, q, isc, imn, &d, &dmin);
            for (int32_t t = 0; t < m->n; t++) {
                const void *xr = (const uint8_t *)m->x + t * m->x_stride;
                const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                const int32_t *bs = sp_actk_bsum(xr, m->k) + b * 16;
                int32_t sumi = 0, summ = 0;
                for (int s16 = 0; s16 < 16; s16++) {
                    int32_t dot = 0;
                    for (int l = 0; l < 16; l++) dot += q[16 * s16 + l] * xq[16 * s16 + l];
                    sumi += isc[s16] * dot;
                    summ += imn[s16] * bs[s16];
                }
                const float xd = sp_actk_d(xr, m->k)[b];
                m->y[t * m->ld_y + r] += (xd * d) * (float)sumi - (xd * dmin) * (float)summ;
            }
        }
    }
}

/* ggml's AVX-512 vec_dot_f32 order (ops.h). */
static float dot_ggml(const float *x, const float *y, int32_t n) {
    float a[4][16] = {{0}};
    const int32_t np = n / 64 * 64;
    for (int32_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) a[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], a[j][l]);
    for (int l = 0; l < 16; l++) a[0][l] = (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]);
    float s = sp_reduce16(a[0]);
    const int32_t n8 = np + (n - np) / 8 * 8;
    for (int32_t i = np; i < n8; i++) s += x[i] * y[i];
    for (int32_t i = n8; i < n; i++) s = fmaf(x[i], y[i], s);
    return s;
}

static void att_scores_ref(const float *q, const float *k, int64_t stride, int32_t n, int32_t hd,
                           float scale, float *out) {
    for (int32_t s = 0; s < n; s++) out[s] = dot_ggml(q, k + s * stride, hd) * scale;
}

/* Accumulating mixes (ops.h): rank r into acc row r mod 16. */
static void att_mix_acc_f32_ref(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0,
                                int32_t r1, int32_t hd, float *acc, int32_t ld) {
    for (int32_t r = r0; r < r1; r++) {
        if (p[r] == 0.0f) continue;
        const float *vr = (const float *)((const uint8_t *)v + (size_t)(idx ? idx[r] : r) * stride);
        float *a = acc + (r & 15) * (int64_t)ld;
        for (int32_t i = 0; i < hd; i++) a[i] = fmaf(vr[i], p[r], a[i]);
    }
}

static void act_q8_ref(const float *x, int64_t k, void *dst);
static void act_q8k(const float *x, int64_t k, void *dst);
/* ---- attention over F16 / Q8_0 caches (ops.h) ---- */

static inline float h2f(uint16_t h) { return sp_fp16_to_fp32(h); }

/* ggml's vec_dot_f16 (x86: 4 x 16 lanes over 64-dim steps, a double tail). */
static float dot_f16_ggml(const uint16_t *x, const uint16_t *y, int32_t n) {
    const int32_t np = n / 64 * 64;
    float a[4][16] = {{0}};
    for (int32_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                a[j][l] = fmaf(h2f(x[i + 16 * j + l]), h2f(y[i + 16 * j + l]), a[j][l]);
    float t[16];
    for (int l = 0; l < 16; l++) t[l] = (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]);
    double s = sp_reduce16(t);
    for (int32_t i = np; i < n; i++) s += (double)(h2f(x[i]) * h2f(y[i]));
    return (float)s;
}

static void att_scores_f16_ref(const void *q, const void *k, size_t stride, int32_t n, int32_t hd,
                               float scale, float *out) {
    const uint16_t *qh = q;
    for (int32_t s = 0; s < n; s++) {
        const uint16_t *ks = (const uint16_t *)((const uint8_t *)k + (size_t)s * stride);
        if (hd % 16) {
            out[s] = dot_f16_ggml(ks, qh, hd) * scale;
            continue;
        }
        float a[16] = {0};
        for (int32_t i = 0; i < hd; i++) a[i % 16] = fmaf(h2f(ks[i]), h2f(qh[i]), a[i % 16]);
        out[s] = sp_reduce16(a) * scale;
    }
}

static void att_mix_acc_f16_ref(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0,
                                int32_t r1, int32_t hd, float *acc, int32_t ld) {
    for (int32_t r = r0; r < r1; r++) {
        const float pr = h2f(sp_fp32_to_fp16(p[r]));
        if (pr == 0.0f) continue;
        const uint16_t *vr = (const uint16_t *)((const uint8_t *)v + (size_t)(idx ? idx[r] : r) * stride);
        float *a = acc + (r & 15) * (int64_t)ld;
        for (int32_t i = 0; i < hd; i++) a[i] = fmaf(h2f(vr[i]), pr, a[i]);
    }
}

static void att_widen_ref(const void *src, size_t stride, int32_t n, int32_t w, float *dst) {
    for (int32_t s = 0; s < n; s++) {
        const uint16_t *r = (const uint16_t *)((const uint8_t *)src + (size_t)s * stride);
        for (int32_t i = 0; i < w; i++) dst[(size_t)s * w + i] = h2f(r[i]);
    }
}

static void att_scores_wide_ref(const float *q, const float *k, int32_t n, int32_t hd, float scale, float *out) {
    for (int32_t s = 0; s < n; s++) {
        float a[16] = {0};
        for (int32_t i = 0; i < hd; i++) a[i % 16] = fmaf(k[(size_t)s * hd + i], q[i], a[i % 16]);
        out[s] = sp_reduce16(a) * scale;
    }
}

static void att_mix_acc_wide_ref(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0,
                                 int32_t r1, int32_t hd, float *acc, int32_t ld) {
    for (int32_t r = r0; r < r1; r++) {
        const float pr = h2f(sp_fp32_to_fp16(p[r]));
        if (pr == 0.0f) continue;
        const float *vr = (const float *)((const uint8_t *)v + (size_t)(idx ? idx[r] : r) * stride);
        float *a = acc + (r & 15) * (int64_t)ld;
        for (int32_t i = 0; i < hd; i++) a[i] = fmaf(vr[i], pr, a[i]);
    }
}

static void att_scores_q8_ref(const void *q, const void *k, size_t stride, int32_t n, int32_t hd,
                              float scale, float *out) {
    const sp_block_q8_0 *qb = q;
    for (int32_t s = 0; s < n; s++) {
        const sp_block_q8_0 *kb = (const sp_block_q8_0 *)((const uint8_t *)k + (size_t)s * stride);
        float a[8] = {0};
        for (int32_t b = 0; b < hd / SP_QK; b++) {
            const float d = h2f(kb[b].d) * h2f(qb[b].d);
            for (int j = 0; j < 8; j++) {
                int32_t sum = 0;
                for (int e = 4 * j; e < 4 * j + 4; e++) sum += kb[b].qs[e] * qb[b].qs[e];
                a[j] = fmaf(d, (float)sum, a[j]);
            }
        }
        float h[4];
        for (int j = 0; j < 4; j++) h[j] = a[j] + a[j + 4];
        out[s] = ((h[0] + h[2]) + (h[1] + h[3])) * scale;
    }
}

static void att_mix_acc_q8_ref(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0,
                               int32_t r1, int32_t hd, float *acc, int32_t ld) {
    for (int32_t r = r0; r < r1; r++) {
        if (p[r] == 0.0f) continue;
        const sp_block_q8_0 *vb = (const sp_block_q8_0 *)((const uint8_t *)v + (size_t)(idx ? idx[r] : r) * stride);
        float *a = acc + (r & 15) * (int64_t)ld;
        for (int32_t i = 0; i < hd; i++) {
            const float x = h2f(vb[i / SP_QK].d) * (float)vb[i / SP_QK].qs[i % SP_QK];
            a[i] = fmaf(x, p[r], a[i]);
        }
    }
}


/* The sum of the 64-bit words mod 2^64 (every ISA returns the same), with
 * four independent accumulators: bound by loads, not by a chain. */
static uint64_t read_sum_ref(const void *p, size_t bytes) {
    const uint64_t *w = p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= bytes / 8; i += 4) {
        a += w[i];
        b += w[i + 1];
        c += w[i + 2];
        d += w[i + 3];
    }
    return a + b + c + d;
}

void sp_ops_fill_scalar(sp_ops_table *t) {
    memset(t, 0, sizeof *t);
    t->mm[SP_GGML_F32] = mm_f32_ref;
    t->mm[SP_GGML_F16] = mm_f16_ref;
    t->mm[SP_GGML_BF16] = mm_bf16_ref;
    t->mm[SP_GGML_Q8_0] = mm_q8_0_ref;
    t->mm[SP_GGML_Q4_0] = mm_q4_0_ref;
    t->mm_packed[SP_GGML_Q8_0] = t->mm_packed[SP_GGML_Q4_0] = mm_packed_ref;
    t->mm_packed[SP_GGML_Q4_1] = t->mm_packed[SP_GGML_Q5_0] = t->mm_packed[SP_GGML_Q5_1] =
        t->mm_packed[SP_GGML_IQ4_NL] = t->mm_packed[SP_GGML_MXFP4] = mm_packed_q32_ref;
    t->mm_packed[SP_GGML_IQ4_XS] = mm_packed_iq4xs_ref;
    t->mm_packed[SP_GGML_Q3_K] = t->mm_packed[SP_GGML_Q2_K] = mm_packed_q23k_ref;
    t->mm_packed[SP_GGML_Q4_K] = t->mm_packed[SP_GGML_Q5_K] = mm_packed_q45k_ref;
    t->mm_packed[SP_GGML_Q6_K] = mm_packed_q6k_ref;
    t->mm_packed[SP_GGML_F32] = mm_f32_pk_ref;
    t->mm_packed[SP_GGML_F16] = mm_f16_pk_ref;
    t->mm_packed[SP_GGML_BF16] = mm_bf16_pk_ref;
    t->mm[SP_GGML_Q4_1] = t->mm[SP_GGML_Q5_0] = t->mm[SP_GGML_Q5_1] = t->mm[SP_GGML_IQ4_NL] =
        t->mm[SP_GGML_MXFP4] = mm_q32_ref;
    t->mm[SP_GGML_Q2_K] = t->mm[SP_GGML_Q3_K] = t->mm[SP_GGML_Q4_K] = t->mm[SP_GGML_Q5_K] =
        t->mm[SP_GGML_Q6_K] = t->mm[SP_GGML_IQ4_XS] = mm_k_ref;
    t->mm_f16_vecdot = mm_f16_vecdot_ref;
    t->att_scores = att_scores_ref;
    t->softmax = sp_softmax;
    t->att_scores_kv[0] = att_scores_f16_ref;
    t->att_scores_kv[1] = att_scores_q8_ref;
    t->att_mix_acc[0] = att_mix_acc_f32_ref;
    t->att_mix_acc[1] = att_mix_acc_f16_ref;
    t->att_mix_acc[2] = att_mix_acc_q8_ref;
    t->att_widen = att_widen_ref;
    t->att_scores_wide = att_scores_wide_ref;
    t->att_mix_acc_wide = att_mix_acc_wide_ref;
    t->swiglu = sp_swiglu;
    t->act_q8 = act_q8_ref;
    t->act_q8k = act_q8k;
    t->read_sum = read_sum_ref;
}

/* ---------------- activations ---------------- */

sp_act_kind sp_ops_act_kind(sp_ggml_type wtype) {
    switch (wtype) {
    case SP_GGML_Q8_0: case SP_GGML_Q4_0: case SP_GGML_Q4_1: case SP_GGML_Q5_0: case SP_GGML_Q5_1:
    case SP_GGML_IQ4_NL: case SP_GGML_MXFP4:
        return SP_ACT_Q8;
    case SP_GGML_Q2_K: case SP_GGML_Q3_K: case SP_GGML_Q4_K: case SP_GGML_Q5_K: case SP_GGML_Q6_K:
    case SP_GGML_IQ4_XS:
        return SP_ACT_Q8_K;
    default:
        return SP_ACT_F32;
    }
}

bool sp_ops_act_is_q8(sp_ggml_type wtype) { return sp_ops_act_kind(wtype) != SP_ACT_F32; }

static bool has_g4(sp_ggml_type wtype) { return wtype == SP_GGML_Q8_0 || wtype == SP_GGML_Q4_0; }
/* q8_K rows that carry the 32-element pair sums (ops.h). */
static bool has_pairs(sp_ggml_type wtype) {
    return wtype == SP_GGML_Q4_K || wtype == SP_GGML_Q5_K || wtype == SP_GGML_IQ4_XS;
}

size_t sp_ops_act_bytes(sp_ggml_type wtype, int64_t k) {
    size_t b;
    switch (sp_ops_act_kind(wtype)) {
    case SP_ACT_Q8: b = (size_t)k + 12 * (size_t)(k / SP_QK); break;
    case SP_ACT_Q8_K:
        b = (size_t)sp_actk_base_bytes(k);
        if (has_pairs(wtype)) b += (16 * (size_t)(k / SP_QK_K) + 63) & ~(size_t)63;
        if (wtype == SP_GGML_Q6_K || wtype == SP_GGML_Q3_K) b += ((size_t)k + 63) & ~(size_t)63;
        if (wtype == SP_GGML_Q2_K) b += (32 * (size_t)(k / SP_QK_K) + 63) & ~(size_t)63;
        break;
    default: b = 4 * (size_t)k; break;
    }
    b = (b + 63) & ~(size_t)63;
    if (has_g4(wtype)) b += (size_t)(sp_act_g4_bytes(k) + sp_act_corr_bytes(k));
    return b;
}

static sp_ops_table g_tables[SP_ISA_COUNT];

/* 127 / amax overflows for amax < 127 / FLT_MAX (a subnormal or tiny
 * normal block maximum): such a block is multiplied by 2^64 first. The
 * scaling is exact and the products x * id are the same real numbers, so a
 * block whose scale did not overflow quantises to the same bits either way. */
#define ACT_TINY 0x1p-64f
#define ACT_UP 0x1p64f

/* Scalar reference of the q8 layout (ops.h) without s: per 32-block,
 * d = f16(amax / 127), q = rne(x * (127 / amax)) (ACT_TINY blocks scaled
 * first), sum = sum(q); a block holding inf or NaN gets q = 0, d = NaN. */
static void act_q8_ref(const float *x, int64_t k, void *dst) {
    int8_t *qs = (int8_t *)dst;
    float *d = (float *)((uint8_t *)dst + k);
    int32_t *sum = (int32_t *)((uint8_t *)dst + k + 4 * (k / SP_QK));
    for (int64_t b = 0; b < k / SP_QK; b++) {
        const float *xb = x + b * SP_QK;
        float amax = 0;
        bool finite = true;
        for (int i = 0; i < SP_QK; i++) {
            finite &= isfinite(xb[i]) != 0;
            amax = fmaxf(amax, fabsf(xb[i]));
        }
        if (!finite) {
            memset(qs + b * SP_QK, 0, SP_QK);
            d[b] = NAN;
            sum[b] = 0;
            continue;
        }
        const float up = amax < ACT_TINY ? ACT_UP : 1.0f;
        const float id = amax != 0 ? 127.0f / (amax * up) : 0.0f;
        int32_t s = 0;
        for (int i = 0; i < SP_QK; i++) {
            const int32_t v = sp_toint_rne(xb[i] * up * id, -127, 127); /* |x * id| <= 127.00002 */
            qs[b * SP_QK + i] = (int8_t)v;
            s += v;
        }
        d[b] = sp_fp16_to_fp32(sp_fp32_to_fp16(amax / 127.0f));
        sum[b] = s;
    }
}

/* s = f16(d * sum) with d = amax/127 before its f16 rounding, as ggml's q8_1. */
static void act_q8_s(const float *x, int64_t k, void *dst) {
    const int32_t *sum = sp_act_sum(dst, k);
    float *s = (float *)((uint8_t *)dst + k + 8 * (k / SP_QK));
    for (int64_t b = 0; b < k / SP_QK; b++) {
        float amax = 0;
        for (int i = 0; i < SP_QK; i++) amax = fmaxf(amax, fabsf(x[b * SP_QK + i]));
        s[b] = isnan(sp_act_d(dst, k)[b]) ? NAN
                                           : sp_fp16_to_fp32(sp_fp32_to_fp16(amax / 127.0f * (float)sum[b]));
    }
}

/* The q8_K layout (ops.h), ggml's quantize_row_q8_K. */
static void act_q8k(const float *x, int64_t k, void *dst) {
    int8_t *qs = (int8_t *)dst;
    float *d = (float *)((uint8_t *)dst + k);
    int32_t *bsum = (int32_t *)((uint8_t *)dst + k + 4 * (k / SP_QK_K));
    for (int64_t b = 0; b < k / SP_QK_K; b++) {
        const float *xb = x + b * SP_QK_K;
        float amax = 0, max = 0;
        bool finite = true;
        for (int i = 0; i < SP_QK_K; i++) {
            finite &= isfinite(xb[i]) != 0;
            if (fabsf(xb[i]) > amax) amax = fabsf(xb[i]), max = xb[i];
        }
        if (!finite || amax == 0) {
            memset(qs + b * SP_QK_K, 0, SP_QK_K);
            memset(bsum + b * 16, 0, 16 * sizeof *bsum);
            d[b] = finite ? 0.0f : NAN;
            continue;
        }
        const float up = amax < ACT_TINY ? ACT_UP : 1.0f;
        const float iscale = -127.0f / (max * up);
        for (int i = 0; i < SP_QK_K; i++) /* iscale * x in [-128, 128], 128 stored as 127 */
            qs[b * SP_QK_K + i] = (int8_t)sp_toint_rne(iscale * (xb[i] * up), -128, 127);
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int i = 0; i < 16; i++) s += qs[b * SP_QK_K + 16 * j + i];
            bsum[b * 16 + j] = s;
        }
        d[b] = 1.0f / iscale / up;
    }
}

/* The group-of-4 extension (ops.h), derived from the q8 row by plain copies
 * and integer arithmetic, so it is the same whichever ISA made the row. */
static void act_g4_fill(int64_t k, int32_t corr, void *dst) {
    const int64_t nb = k / SP_QK, ng = (nb + 3) / 4;
    const int8_t *qs = sp_act_qs(dst);
    const float *d = sp_act_d(dst, k);
    const int32_t *sum = sp_act_sum(dst, k);
    int8_t *gq = sp_act_g4_qs(dst, k);
    float *gd = sp_act_g4_d(dst, k);
    int32_t *gc = sp_act_g4_corr(dst, k), *cw = sp_act_corr(dst, k);
    memset(gq, 0, (size_t)(sp_act_g4_bytes(k) + sp_act_corr_bytes(k)));
    for (int64_t b = 0; b < nb; b++) cw[b] = 4 * corr * sum[b];
    for (int64_t g = 0; g < ng; g++)
        for (int c = 0; c < 4 && 4 * g + c < nb; c++) {
            const int64_t b = 4 * g + c;
            memcpy(gq + g * 128 + 16 * c, qs + b * SP_QK, 16);
            memcpy(gq + g * 128 + 64 + 16 * c, qs + b * SP_QK + 16, 16);
            for (int i = 0; i < 4; i++) {
                gd[g * 16 + 4 * c + i] = d[b];
                gc[g * 16 + 4 * c + i] = corr * sum[b];
            }
        }
}

/* No inf or NaN in x: no element with every exponent bit set (16 lanes of
 * integer ORs, which compilers vectorise; a float sum in order would not). */
static bool row_finite(const float *x, int64_t k) {
    uint32_t bad[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        uint32_t u[16];
        memcpy(u, x + i, sizeof u);
        for (int l = 0; l < 16; l++) bad[l] |= (u[l] & 0x7F800000u) + 0x00800000u; /* bit 31 set: exponent all ones */
    }
    uint32_t any = 0;
    for (int l = 0; l < 16; l++) any |= bad[l];
    for (; i < k; i++) any |= isfinite(x[i]) ? 0u : 0x80000000u;
    return !(any & 0x80000000u);
}

void sp_ops_act_prepare(sp_ggml_type wtype, const float *x, int64_t k, void *dst) {
    switch (sp_ops_act_kind(wtype)) {
    case SP_ACT_F32:
        memcpy(dst, x, 4 * (size_t)k);
        return;
    case SP_ACT_Q8_K:
        if (g_tables[sp_ops_isa()].act_q8k)
            g_tables[sp_ops_isa()].act_q8k(x, k, dst);
        else
            act_q8k(x, k, dst);
        if (has_pairs(wtype)) { /* pair sums for the packed kernels (ops.h) */
            const int32_t *bs = sp_actk_bsum(dst, k);
            int32_t *pr = sp_actk_pairs(dst, k);
            memset(pr, 0, (16 * (size_t)(k / SP_QK_K) + 63) & ~(size_t)63);
            for (int64_t i = 0; i < k / 64; i++) { /* |sum of 32| <= 4064: fits int16 */
                const int32_t lo = bs[4 * i] + bs[4 * i + 1], hi = bs[4 * i + 2] + bs[4 * i + 3];
                pr[i] = (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xFFFFu));
            }
        }
        if (wtype == SP_GGML_Q2_K) { /* 16-sum pairs for the packed kernel (ops.h) */
            const int32_t *bs = sp_actk_bsum(dst, k);
            int32_t *pr = sp_actk_pairs16(dst, k);
            memset(pr, 0, (32 * (size_t)(k / SP_QK_K) + 63) & ~(size_t)63);
            for (int64_t i = 0; i < k / 32; i++) /* |sum of 16| <= 2032: fits int16 */
                pr[i] = (int32_t)(((uint32_t)bs[2 * i + 1] << 16) | ((uint32_t)bs[2 * i] & 0xFFFFu));
        }
        if (wtype == SP_GGML_Q6_K || wtype == SP_GGML_Q3_K) { /* unsigned bytes for the packed kernels (ops.h) */
            const int8_t *qs = sp_act_qs(dst);
            uint8_t *u = sp_actk_u8(dst, k);
            for (int64_t i = 0; i < k; i += 8) { /* q + 128 is q with its sign bit flipped; k % 256 == 0 */
                uint64_t v;
                memcpy(&v, qs + i, 8);
                v ^= 0x8080808080808080u;
                memcpy(u + i, &v, 8);
            }
        }
        return;
    case SP_ACT_Q8:
        /* SIMD versions need not handle non-finite input */
        if (row_finite(x, k))
            g_tables[sp_ops_isa()].act_q8(x, k, dst);
        else
            act_q8_ref(x, k, dst);
        if (wtype == SP_GGML_Q4_1 || wtype == SP_GGML_Q5_1) act_q8_s(x, k, dst);
        if (has_g4(wtype)) act_g4_fill(k, wtype == SP_GGML_Q4_0 ? -2 : -32, dst);
        return;
    }
}

/* ---------------- row kernels ---------------- */

/* The sum of squares is accumulated in double and the mean rounded to float
 * before eps is added, as ggml's rms_norm does: the normalised values feed
 * the int8 activation quantiser, where a last-bit difference can flip a
 * rounding and move quantised logits away from llama.cpp's. */
void sp_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float mean = (float)(ss / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * scale);
}

void sp_rope_cs(float *cs, int32_t pos, const sp_rope_freqs *f, int32_t rot_dim) {
    float theta = (float)pos;
    if (f->yarn) {
        /* ggml's rope_yarn with the FMAs GCC forms in it (checked against
         * llama.cpp's logits, tests/test_moe.c) */
        float mscale = f->attn_factor;
        if (f->ext_factor != 0.0f) mscale *= fmaf(0.1f, logf(1.0f / f->freq_scale), 1.0f);
        for (int32_t i = 0; i < rot_dim / 2; i++) {
            const float te = f->factors ? theta / f->factors[i] : theta, ti = f->freq_scale * te;
            float a = ti;
            if (f->ext_factor != 0.0f) {
                const float y = ((float)i - f->corr[0]) / fmaxf(0.001f, f->corr[1] - f->corr[0]);
                const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * f->ext_factor;
                a = fmaf(ti, 1.0f - mix, te * mix);
            }
            cs[2 * i] = cosf(a) * mscale;
            cs[2 * i + 1] = sinf(a) * mscale;
            theta *= f->theta_scale;
        }
        return;
    }
    for (int32_t i = 0; i < rot_dim / 2; i++) {
        const float a = f->freq_scale * (f->factors ? theta / f->factors[i] : theta);
        cs[2 * i] = cosf(a);
        cs[2 * i + 1] = sinf(a);
        theta *= f->theta_scale;
    }
}

static float yarn_corr_dim(int32_t rot_dim, int32_t n_ctx_orig, float beta, float base) {
    return (float)rot_dim * logf((float)n_ctx_orig / (beta * 2 * (float)M_PI)) / (2 * logf(base));
}

void sp_rope_yarn_corr(int32_t rot_dim, int32_t n_ctx_orig, float base, float beta_fast, float beta_slow,
                       float corr[2]) {
    const float start = floorf(yarn_corr_dim(rot_dim, n_ctx_orig, beta_fast, base));
    const float end = ceilf(yarn_corr_dim(rot_dim, n_ctx_orig, beta_slow, base));
    corr[0] = start > 0 ? start : 0;
    corr[1] = end < (float)(rot_dim - 1) ? end : (float)(rot_dim - 1);
}

void sp_rope_apply(float *x, int32_t n_heads, int32_t head_dim, int32_t rot_dim, const float *cs,
                   bool neox) {
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < rot_dim / 2; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            int32_t i0 = neox ? i : 2 * i, i1 = neox ? i + rot_dim / 2 : 2 * i + 1;
            float v0 = v[i0], v1 = v[i1];
            v[i0] = fmaf(v0, c, -(v1 * s));
            v[i1] = fmaf(v0, s, v1 * c);
        }
    }
}

void sp_fwht(float *x, int64_t len, int32_t n) {
    const float scale = 1.0f / sqrtf((float)n);
    for (int64_t r = 0; r + n <= len; r += n) {
        float *y = x + r;
        for (int32_t j = 0; j < n; j++) y[j] *= scale;
        for (int32_t span = 1; span < n; span <<= 1)
            for (int32_t i = 0; i < n; i += 2 * span)
                for (int32_t j = 0; j < span; j++) {
                    const float u = y[i + j], v = y[i + span + j];
                    y[i + j] = u + v;
                    y[i + span + j] = u - v;
                }
    }
}

void sp_softmax(float *x, int64_t n) {
    /* a plain compare, not fmaxf (a libm call here), as ggml's max */
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int64_t g = 0; g < n; g += 16) {
        float e[16] = {0};
        for (int64_t l = 0; l < 16 && g + l < n; l++) e[l] = x[g + l] = sp_exp_ggml(x[g + l] - mx);
        sum += (double)sp_reduce16(e);
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void sp_softmax_sink(float *x, int64_t n, float sink) {
    float mx = sink;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int64_t g = 0; g < n; g += 16) {
        float e[16] = {0};
        for (int64_t l = 0; l < 16 && g + l < n; l++) e[l] = x[g + l] = sp_exp_ggml(x[g + l] - mx);
        sum += (double)sp_reduce16(e);
    }
    sum += (double)expf(sink - mx);
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* 2^e as a float, for -126 <= e <= 127. */
static inline float pow2i(int e) {
    const uint32_t b = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* j * 2^n, rounded once (as AVX-512 scalef), for normal j and integral
 * |n| <= 192: the first product of each two-step case is exact. */
static inline float scale2(float j, float n) {
    const int e = (int)n;
    if (e < -126) return j * pow2i(e + 100) * pow2i(-100);
    if (e > 127) return j * pow2i(e - 100) * pow2i(100);
    return j * pow2i(e);
}

float sp_exp_ggml(float x) {
    const float r = 0x1.8p23f;
    const float n = fmaf(x, 0x1.715476p+0f, r) - r; /* round(x / ln2) */
    if (isnan(n)) return n;
    if (fabsf(n) > 192.0f) return n <= 0 ? 0.0f : INFINITY;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x)); /* x - n ln2 */
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    return scale2(j, n);
}

void sp_swiglu(float *out, const float *g, const float *u, int64_t n) {
    const int64_t nv = n / 16 * 16;
    for (int64_t i = 0; i < nv; i++) out[i] = g[i] / (1.0f + sp_exp_ggml(0.0f - g[i])) * u[i];
    for (int64_t i = nv; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---------------- dispatch ----------------
 *
 * The CPU's features are read with cpuid/xgetbv (not the compiler's
 * __builtin_cpu_supports, which clang refuses for f16c). Code compiled for an
 * ISA (every function in ops_avx2.c / ops_avx512.c, table fills included: the
 * compiler vectorises them) runs only after that check says the ISA exists:
 * a table is filled once, in ops_init_once, and only up to the best ISA. */

static sp_isa g_best = SP_ISA_SCALAR; /* best ISA of this CPU */
static _Atomic bool g_ggml_order;     /* ops.h: ggml order */
static sp_isa g_isa = SP_ISA_SCALAR;  /* ISA in use */
static char g_env_err[200];           /* why $SPECULA_ISA was refused, or "" */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static sp_isa detect_best_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return SP_ISA_SCALAR;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
               f16c = c & (1u << 29);
    if (!osxsave || !avx) return SP_ISA_SCALAR;
    /* the OS must save the YMM (bits 1-2) and, for AVX-512, opmask/ZMM state (5-7) */
    const uint64_t xcr0 = xgetbv0();
    const bool os_ymm = (xcr0 & 0x06) == 0x06, os_zmm = (xcr0 & 0xe6) == 0xe6;
    if (!os_ymm || __get_cpuid_max(0, NULL) < 7) return SP_ISA_SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17),
               avx512bw = b & (1u << 30), avx512vl = b & (1u << 31), vnni = c & (1u << 11);
    if (os_zmm && avx512f && avx512dq && avx512bw && avx512vl && vnni && avx2 && fma && f16c)
        return SP_ISA_AVX512;
    if (avx2 && fma && f16c) return SP_ISA_AVX2;
#endif
    return SP_ISA_SCALAR;
}

const char *sp_ops_isa_name(sp_isa isa) {
    switch (isa) {
    case SP_ISA_SCALAR: return "scalar";
    case SP_ISA_AVX2: return "avx2";
    case SP_ISA_AVX512: return "avx512";
    default: return "unknown";
    }
}

/* A SIMD table lacking a kernel falls back to the reference. */
static void fill_missing(sp_ops_table *t) {
    const sp_ops_table *ref = &g_tables[SP_ISA_SCALAR];
    for (int i = 0; i < SP_GGML_TYPE_COUNT; i++)
        if (!t->mm[i]) t->mm[i] = ref->mm[i];
    if (!t->mm_f16_vecdot) t->mm_f16_vecdot = ref->mm_f16_vecdot;
    if (!t->att_scores) t->att_scores = ref->att_scores;
    if (!t->softmax) t->softmax = ref->softmax;
    for (int i = 0; i < 2; i++) {
        if (!t->att_scores_kv[i]) t->att_scores_kv[i] = ref->att_scores_kv[i];
    }
    for (int i = 0; i < 3; i++)
        if (!t->att_mix_acc[i]) t->att_mix_acc[i] = ref->att_mix_acc[i];
    if (!t->att_widen) t->att_widen = ref->att_widen;
    if (!t->att_scores_wide) t->att_scores_wide = ref->att_scores_wide;
    if (!t->att_mix_acc_wide) t->att_mix_acc_wide = ref->att_mix_acc_wide;
    if (!t->swiglu) t->swiglu = ref->swiglu;
    if (!t->act_q8) t->act_q8 = ref->act_q8;
    if (!t->act_q8k) t->act_q8k = ref->act_q8k;
    if (!t->read_sum) t->read_sum = ref->read_sum;
}

static void ops_init_once(void) {
    g_best = detect_best_isa();
    sp_ops_fill_scalar(&g_tables[SP_ISA_SCALAR]);
    if (g_best >= SP_ISA_AVX2) {
        sp_ops_fill_avx2(&g_tables[SP_ISA_AVX2]);
        fill_missing(&g_tables[SP_ISA_AVX2]);
    }
    if (g_best >= SP_ISA_AVX512) {
        sp_ops_fill_avx512(&g_tables[SP_ISA_AVX512]);
        fill_missing(&g_tables[SP_ISA_AVX512]);
    }
    g_isa = g_best;
    const char *go = getenv("SPECULA_GGML_ORDER");
    if (go && !strcmp(go, "1")) atomic_store(&g_ggml_order, true);
    const char *env = getenv("SPECULA_ISA");
    if (!env || !*env) return;
    for (int i = 0; i < SP_ISA_COUNT; i++) {
        if (strcmp(env, sp_ops_isa_name((sp_isa)i))) continue;
        if (i > (int)g_best)
            snprintf(g_env_err, sizeof g_env_err,
                     "SPECULA_ISA=%s: this CPU lacks those instructions (best: %s)", env,
                     sp_ops_isa_name(g_best));
        else
            g_isa = (sp_isa)i;
        return;
    }
    snprintf(g_env_err, sizeof g_env_err,
             "SPECULA_ISA='%.60s' is not one of scalar, avx2, avx512", env);
}

sp_status sp_ops_init(sp_error *err) {
    pthread_once(&g_once, ops_init_once);
    if (g_env_err[0]) return sp_fail(err, SP_ERR_ARG, "%s", g_env_err);
    return SP_OK;
}

sp_isa sp_ops_best_isa(void) {
    pthread_once(&g_once, ops_init_once);
    return g_best;
}

sp_status sp_ops_set_isa(sp_isa isa, sp_error *err) {
    pthread_once(&g_once, ops_init_once);
    if (isa >= SP_ISA_COUNT || isa > g_best)
        return sp_fail(err, SP_ERR_UNSUPPORTED, "this CPU does not support the %s kernels",
                       sp_ops_isa_name(isa));
    g_isa = isa;
    return SP_OK;
}

sp_isa sp_ops_isa(void) {
    pthread_once(&g_once, ops_init_once);
    return g_isa;
}

void sp_ops_set_ggml_order(bool on) {
    pthread_once(&g_once, ops_init_once);
    atomic_store(&g_ggml_order, on);
}

bool sp_ops_ggml_order(void) {
    pthread_once(&g_once, ops_init_once);
    return atomic_load(&g_ggml_order);
}

/* The ggml-order kernel for wtype when that order is on, else NULL. */
static sp_mm_kernel ggml_order_mm(sp_ggml_type wtype) {
    return atomic_load(&g_ggml_order) ? sp_ops_mm_ggml_order(wtype) : NULL;
}

sp_mm_kernel sp_ops_mm_isa(sp_ggml_type wtype, sp_isa isa) {
    pthread_once(&g_once, ops_init_once);
    if ((unsigned)wtype >= SP_GGML_TYPE_COUNT || isa > g_best) return NULL;
    sp_mm_kernel g = ggml_order_mm(wtype);
    return g ? g : g_tables[isa].mm[wtype];
}

sp_mm_kernel sp_ops_mm(sp_ggml_type wtype) { return sp_ops_mm_isa(wtype, sp_ops_isa()); }

sp_mm_kernel sp_ops_mm_f16_vecdot_isa(sp_isa isa) {
    pthread_once(&g_once, ops_init_once);
    return isa > g_best ? NULL : g_tables[isa].mm_f16_vecdot;
}

sp_mm_kernel sp_ops_mm_f16_vecdot(void) { return sp_ops_mm_f16_vecdot_isa(sp_ops_isa()); }

sp_mm_kernel sp_ops_mm_packed_isa(sp_ggml_type wtype, sp_isa isa) {
    pthread_once(&g_once, ops_init_once);
    if ((unsigned)wtype >= SP_GGML_TYPE_COUNT || isa > g_best || ggml_order_mm(wtype)) return NULL;
    return g_tables[isa].mm_packed[wtype];
}

sp_mm_kernel sp_ops_mm_packed(sp_ggml_type wtype) { return sp_ops_mm_packed_isa(wtype, sp_ops_isa()); }

bool sp_ops_packs(sp_ggml_type wtype) {
    return sp_ops_isa() != SP_ISA_SCALAR && sp_ops_mm_packed(wtype) != NULL;
}

sp_att_scores_fn sp_ops_att_scores(void) { return g_tables[sp_ops_isa()].att_scores; }
sp_softmax_fn sp_ops_softmax(void) { return g_tables[sp_ops_isa()].softmax; }

/* F32 through the float kernels (stride in floats there) */
static void att_scores_f32_kv(const void *q, const void *k, size_t stride, int32_t n, int32_t hd,
                              float scale, float *out) {
    g_tables[sp_ops_isa()].att_scores(q, k, (int64_t)(stride / sizeof(float)), n, hd, scale, out);
}
sp_att_scores_kv_fn sp_ops_att_scores_kv(sp_ggml_type ktype) {
    return ktype == SP_GGML_F32 ? att_scores_f32_kv : g_tables[sp_ops_isa()].att_scores_kv[ktype == SP_GGML_Q8_0];
}

static int mix_index(sp_ggml_type t) { return t == SP_GGML_F32 ? 0 : t == SP_GGML_F16 ? 1 : 2; }
sp_att_mix_acc_fn sp_ops_att_mix_acc(sp_ggml_type vtype) { return g_tables[sp_ops_isa()].att_mix_acc[mix_index(vtype)]; }

void sp_att_mix_finish(const float *acc, int32_t ld, int32_t hd, float *o) {
    /* sp_reduce16 of each column, written so that the loops vectorise */
    for (int32_t i = 0; i < hd; i++) {
        float h[8], q[4];
        for (int l = 0; l < 8; l++) h[l] = acc[l * (int64_t)ld + i] + acc[(l + 8) * (int64_t)ld + i];
        for (int l = 0; l < 4; l++) q[l] = h[l] + h[l + 4];
        o[i] = (q[0] + q[2]) + (q[1] + q[3]);
    }
}

/* The whole mix: acc on the stack for heads up to 1024, zeroed, one piece, finish. */
enum { MIX_WHOLE_MAX = 1024 };
static void mix_whole(sp_ggml_type t, const float *p, const int32_t *idx, const void *v, size_t stride, int32_t n,
                      int32_t hd, float *o) {
    SP_ASSERT(hd <= MIX_WHOLE_MAX);
    float acc[16 * MIX_WHOLE_MAX] __attribute__((aligned(64)));
    memset(acc, 0, sizeof(float) * 16 * (size_t)hd);
    sp_ops_att_mix_acc(t)(p, idx, v, stride, 0, n, hd, acc, hd);
    sp_att_mix_finish(acc, hd, hd, o);
}
static void mix_f32(const float *p, const int32_t *idx, const float *v, int64_t stride, int32_t n, int32_t hd,
                    float *o) {
    mix_whole(SP_GGML_F32, p, idx, v, (size_t)stride * sizeof(float), n, hd, o);
}
static void mix_f32_kv(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t n, int32_t hd,
                       float *o) {
    mix_whole(SP_GGML_F32, p, idx, v, stride, n, hd, o);
}
static void mix_f16_kv(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t n, int32_t hd,
                       float *o) {
    mix_whole(SP_GGML_F16, p, idx, v, stride, n, hd, o);
}
static void mix_q8_kv(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t n, int32_t hd,
                      float *o) {
    mix_whole(SP_GGML_Q8_0, p, idx, v, stride, n, hd, o);
}
sp_att_mix_fn sp_ops_att_mix(void) { return mix_f32; }
sp_att_mix_kv_fn sp_ops_att_mix_kv(sp_ggml_type vtype) {
    return vtype == SP_GGML_F32 ? mix_f32_kv : vtype == SP_GGML_F16 ? mix_f16_kv : mix_q8_kv;
}
void sp_ops_att_query(sp_ggml_type ktype, const float *q, int32_t hd, void *dst) {
    sp_kv_convert_row(ktype, q, dst, hd);
}
sp_att_widen_fn sp_ops_att_widen(void) { return g_tables[sp_ops_isa()].att_widen; }
sp_att_scores_wide_fn sp_ops_att_scores_wide(void) { return g_tables[sp_ops_isa()].att_scores_wide; }
sp_att_mix_acc_fn sp_ops_att_mix_acc_wide(void) { return g_tables[sp_ops_isa()].att_mix_acc_wide; }
sp_att_scores_grp_fn sp_ops_att_scores_grp(void) { return g_tables[sp_ops_isa()].att_scores_grp; }
sp_att_mix_grp_fn sp_ops_att_mix_grp(void) { return g_tables[sp_ops_isa()].att_mix_grp; }
sp_swiglu_fn sp_ops_swiglu(void) { return g_tables[sp_ops_isa()].swiglu; }
uint64_t sp_ops_read_sum(const void *p, size_t bytes) { return g_tables[sp_ops_isa()].read_sum(p, bytes); }
