/* ops_avx512: AVX-512 (F, DQ, BW, VL, VNNI) matmul kernels; compiled with
 * -mavx512* and only called when cpuid reports support (see ops.c).
 *
 * Each kernel handles up to NT activation rows per pass over a weight row
 * (weights loaded once, NT accumulators). An output's sequence of operations
 * is the same whatever NT is, so results do not depend on the batch size. */
#include <immintrin.h>

#include "ops.h"
#include "sp_quant.h"

#define AI __attribute__((always_inline)) static inline

/* Masked load of the f32 tail; k % 16 lanes. */
AI __m512 load_x(const float *x, int64_t i, int64_t k) {
    if (i + 16 <= k) return _mm512_loadu_ps(x + i);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << (k - i)) - 1), x + i);
}

/* ---- F32 / F16 / BF16: weights widened to f32, FMA into 16 lanes ---- */
#define DEFINE_FLOAT_ROW(NAME, LOADW)                                                       \
    AI void NAME(const uint8_t *wrow, const sp_mm *m, int32_t t0, int nt, float *out) {     \
        __m512 acc[8];                                                                      \
        const float *xs[8];                                                                 \
        for (int t = 0; t < nt; t++) {                                                      \
            acc[t] = _mm512_setzero_ps();                                                   \
            xs[t] = (const float *)((const uint8_t *)m->x + (t0 + t) * m->x_stride);        \
        }                                                                                   \
        const int64_t k = m->k;                                                             \
        for (int64_t i = 0; i < k; i += 16) {                                               \
            __m512 w = LOADW(wrow, i, k);                                                   \
            for (int t = 0; t < nt; t++) acc[t] = _mm512_fmadd_ps(w, load_x(xs[t], i, k), acc[t]); \
        }                                                                                   \
        for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);                 \
    }

AI __m512 loadw_f32(const uint8_t *w, int64_t i, int64_t k) { return load_x((const float *)w, i, k); }
AI __m512 loadw_f16(const uint8_t *w, int64_t i, int64_t k) {
    const uint16_t *p = (const uint16_t *)w + i;
    __m256i h = i + 16 <= k ? _mm256_loadu_si256((const __m256i *)p)
                            : _mm256_maskz_loadu_epi16((__mmask16)((1u << (k - i)) - 1), p);
    return _mm512_cvtph_ps(h);
}
AI __m512 loadw_bf16(const uint8_t *w, int64_t i, int64_t k) {
    const uint16_t *p = (const uint16_t *)w + i;
    __m256i h = i + 16 <= k ? _mm256_loadu_si256((const __m256i *)p)
                            : _mm256_maskz_loadu_epi16((__mmask16)((1u << (k - i)) - 1), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

DEFINE_FLOAT_ROW(row_f32, loadw_f32)
DEFINE_FLOAT_ROW(row_f16, loadw_f16)
DEFINE_FLOAT_ROW(row_bf16, loadw_bf16)

/* ---- Q8_0 / Q4_0 against q8 activations, two 32-blocks per 512-bit op ---- */

/* 16 lanes: lanes 0-7 carry block b's scale, lanes 8-15 block b+1's. */
AI __m512 two_scales(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* Signed x signed int8 dot via VNNI (u8 x s8): |w| times x with w's sign. */
AI __m512i dot_s8(__m512i w, __m512i x) {
    __m512i aw = _mm512_abs_epi8(w);
    __mmask64 neg = _mm512_movepi8_mask(w);
    __m512i sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sx);
}

AI void row_q8_0(const uint8_t *wrow, const sp_mm *m, int32_t t0, int nt, float *out) {
    const sp_block_q8_0 *w = (const sp_block_q8_0 *)wrow;
    const int64_t nb = m->k / SP_QK;
    __m512 acc[8];
    const uint8_t *xs[8];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm512_setzero_ps();
        xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
    }
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m256i w0 = _mm256_loadu_si256((const __m256i *)w[b].qs);
        __m256i w1 = two ? _mm256_loadu_si256((const __m256i *)w[b + 1].qs) : _mm256_setzero_si256();
        __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
        __m512 ws = two_scales(_cvtsh_ss(w[b].d), two ? _cvtsh_ss(w[b + 1].d) : 0.0f);
        for (int t = 0; t < nt; t++) {
            const int8_t *xq = sp_act_qs(xs[t]) + b * SP_QK;
            const float *xd = sp_act_d(xs[t], m->k) + b;
            __m512i xv = two ? _mm512_loadu_si512(xq)
                             : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xq));
            if (!two) xv = _mm512_inserti64x4(xv, _mm256_setzero_si256(), 1);
            __m512 sc = _mm512_mul_ps(ws, two_scales(xd[0], two ? xd[1] : 0.0f));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_s8(wv, xv)), sc, acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

/* Q4_0: unsigned nibbles (0..15) times int8 x via VNNI, then subtract
 * 8 * sum(x) per block (spread as sum(x) over 8 lanes). */
AI __m256i q4_nibbles(const sp_block_q4_0 *blk) {
    __m128i v = _mm_loadu_si128((const __m128i *)blk->qs);
    __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x0F));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

AI void row_q4_0(const uint8_t *wrow, const sp_mm *m, int32_t t0, int nt, float *out) {
    const sp_block_q4_0 *w = (const sp_block_q4_0 *)wrow;
    const int64_t nb = m->k / SP_QK;
    __m512 acc[8];
    const uint8_t *xs[8];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm512_setzero_ps();
        xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
    }
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m256i n0 = q4_nibbles(&w[b]);
        __m256i n1 = two ? q4_nibbles(&w[b + 1]) : _mm256_setzero_si256();
        __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(n0), n1, 1);
        __m512 ws = two_scales(_cvtsh_ss(w[b].d), two ? _cvtsh_ss(w[b + 1].d) : 0.0f);
        for (int t = 0; t < nt; t++) {
            const int8_t *xq = sp_act_qs(xs[t]) + b * SP_QK;
            const float *xd = sp_act_d(xs[t], m->k) + b;
            const int32_t *xsum = sp_act_sum(xs[t], m->k) + b;
            __m512i xv = two ? _mm512_loadu_si512(xq)
                             : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xq));
            if (!two) xv = _mm512_inserti64x4(xv, _mm256_setzero_si256(), 1);
            __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
            __m512i corr = _mm512_inserti64x4(_mm512_set1_epi32(xsum[0]),
                                              _mm256_set1_epi32(two ? xsum[1] : 0), 1);
            dot = _mm512_sub_epi32(dot, corr);
            __m512 sc = _mm512_mul_ps(ws, two_scales(xd[0], two ? xd[1] : 0.0f));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

/* Driver: rows r0..r1, activations in groups of 8, 4, 2, 1 (constant NT per
 * call so the accumulators stay in registers). */
#define DEFINE_MM(NAME, ROW)                                                          \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                       \
        float out[8];                                                                 \
        for (int64_t r = r0; r < r1; r++) {                                           \
            const uint8_t *wrow = m->w + r * m->w_stride;                             \
            int32_t t = 0;                                                            \
            for (; t + 8 <= m->n; t += 8) {                                           \
                ROW(wrow, m, t, 8, out);                                              \
                for (int j = 0; j < 8; j++) m->y[(t + j) * m->ld_y + r] = out[j];     \
            }                                                                         \
            for (; t + 4 <= m->n; t += 4) {                                           \
                ROW(wrow, m, t, 4, out);                                              \
                for (int j = 0; j < 4; j++) m->y[(t + j) * m->ld_y + r] = out[j];     \
            }                                                                         \
            for (; t < m->n; t++) {                                                   \
                ROW(wrow, m, t, 1, out);                                              \
                m->y[t * m->ld_y + r] = out[0];                                       \
            }                                                                         \
        }                                                                             \
    }

DEFINE_MM(mm_f32, row_f32)
DEFINE_MM(mm_f16, row_f16)
DEFINE_MM(mm_bf16, row_bf16)
DEFINE_MM(mm_q8_0, row_q8_0)
DEFINE_MM(mm_q4_0, row_q4_0)

void sp_ops_fill_avx512(sp_ops_table *t) {
    t->mm[SP_GGML_F32] = mm_f32;
    t->mm[SP_GGML_F16] = mm_f16;
    t->mm[SP_GGML_BF16] = mm_bf16;
    t->mm[SP_GGML_Q8_0] = mm_q8_0;
    t->mm[SP_GGML_Q4_0] = mm_q4_0;
}
