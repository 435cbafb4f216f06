/* ops_avx2: AVX2+FMA+F16C matmul kernels; compiled with -mavx2 -mfma -mf16c
 * and only called when cpuid reports support (see ops.c).
 *
 * Same structure as ops_avx512.c: each kernel handles NT activation rows per
 * pass over a weight row (weights loaded and widened once, NT accumulators).
 * An output's sequence of operations is the same whatever NT is, so results
 * do not depend on the batch size or on the row split. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "ops.h"
#include "quant.h"

#define AI __attribute__((always_inline)) static inline

/* Horizontal sum of 8 lanes, always in the same order. */
AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes [0, n) set, for tails of n < 8 elements. */
AI __m256i tail_mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AI __m256 load_x(const float *x, int64_t i, int64_t k) {
    if (i + 8 <= k) return _mm256_loadu_ps(x + i);
    return _mm256_maskload_ps(x + i, tail_mask(k - i));
}

/* 8 16-bit values (a partial tail is zero-filled; never reads past k). */
AI __m128i load_h8(const uint16_t *p, int64_t i, int64_t k) {
    if (i + 8 <= k) return _mm_loadu_si128((const __m128i *)(p + i));
    uint16_t tmp[8] = {0};
    for (int64_t j = 0; j < k - i; j++) tmp[j] = p[i + j];
    return _mm_loadu_si128((const __m128i *)tmp);
}

AI __m256 loadw_f32(const uint8_t *w, int64_t i, int64_t k) { return load_x((const float *)w, i, k); }
AI __m256 loadw_f16(const uint8_t *w, int64_t i, int64_t k) {
    return _mm256_cvtph_ps(load_h8((const uint16_t *)w, i, k));
}
AI __m256 loadw_bf16(const uint8_t *w, int64_t i, int64_t k) {
    __m256i v = _mm256_cvtepu16_epi32(load_h8((const uint16_t *)w, i, k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* Software prefetch this many bytes ahead of the weights being read (the
 * hardware prefetcher alone left one thread at 4-8 GB/s on a 16 GB/s
 * machine; docs/results/2026-11-24-2-decode-kquants-server.md). */
#ifndef PF_AHEAD
#define PF_AHEAD 4096
#endif
AI void prefetch(const void *p) { _mm_prefetch((const char *)p, _MM_HINT_T0); }

/* ---- F32 / F16 / BF16: weights widened to f32, FMA into 8 lanes ----
 * Two accumulators per activation row (elements 16j..16j+7 and
 * 16j+8..16j+15), added at the end: two FMA chains hide the FMA latency at
 * batch 1. ESZ: weight element size in bytes. */
#define DEFINE_FLOAT_ROW(NAME, LOADW, ESZ)                                                   \
    AI void NAME(const uint8_t *wrow, const sp_mm *m, int32_t t0, int nt, float *out) {      \
        __m256 acc[4][2];                                                                    \
        const float *xs[4];                                                                  \
        for (int t = 0; t < nt; t++) {                                                       \
            acc[t][0] = acc[t][1] = _mm256_setzero_ps();                                     \
            xs[t] = (const float *)((const uint8_t *)m->x + (t0 + t) * m->x_stride);         \
        }                                                                                    \
        const int64_t k = m->k;                                                              \
        for (int64_t i = 0; i < k; i += 16) {                                                \
            if ((i * ESZ) % 64 == 0) prefetch(wrow + i * ESZ + PF_AHEAD);                    \
            if (ESZ == 4) prefetch(wrow + i * ESZ + 32 + PF_AHEAD);                          \
            __m256 w0 = LOADW(wrow, i, k);                                                   \
            __m256 w1 = i + 8 < k ? LOADW(wrow, i + 8, k) : _mm256_setzero_ps();             \
            for (int t = 0; t < nt; t++) {                                                   \
                acc[t][0] = _mm256_fmadd_ps(w0, load_x(xs[t], i, k), acc[t][0]);             \
                if (i + 8 < k) acc[t][1] = _mm256_fmadd_ps(w1, load_x(xs[t], i + 8, k), acc[t][1]); \
            }                                                                                \
        }                                                                                    \
        for (int t = 0; t < nt; t++) out[t] = hsum8(_mm256_add_ps(acc[t][0], acc[t][1]));    \
    }

DEFINE_FLOAT_ROW(row_f32, loadw_f32, 4)
DEFINE_FLOAT_ROW(row_f16, loadw_f16, 2)
DEFINE_FLOAT_ROW(row_bf16, loadw_bf16, 2)

/* ---- Q8_0 / Q4_0 against q8 activations, one 32-block per 256-bit op ---- */

/* Q8_0: signed x signed int8 dot of one block into 8 int32 lanes. maddubs
 * takes u8 x s8, so feed |w| (hoisted: shared by all NT rows) and x with
 * w's sign. |w| <= 128 and |x| <= 127 (the activation quantiser rounds into
 * [-127, 127]), so a pair sum is at most 32512: the int16 step never
 * saturates and the block sum is exact. */
AI void row_q8_0(const uint8_t *wrow, const sp_mm *m, int32_t t0, int nt, float *out) {
    const sp_block_q8_0 *w = (const sp_block_q8_0 *)wrow;
    const int64_t nb = m->k / SP_QK;
    __m256 acc[4];
    const uint8_t *xs[4];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
    }
    for (int64_t b = 0; b < nb; b++) {
        if (b % 2 == 0) prefetch((const uint8_t *)&w[b] + PF_AHEAD);
        __m256i wv = _mm256_loadu_si256((const __m256i *)w[b].qs);
        __m256i aw = _mm256_sign_epi8(wv, wv);
        const float wd = _cvtsh_ss(w[b].d);
        for (int t = 0; t < nt; t++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(sp_act_qs(xs[t]) + b * SP_QK));
            __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv));
            __m256i dot = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
            __m256 sc = _mm256_set1_ps(wd * sp_act_d(xs[t], m->k)[b]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]);
}

/* Q4_0: unsigned nibbles (0..15) times int8 x via maddubs (a pair is at most
 * 2*15*128, no saturation), then subtract 8 * sum(x) per block (sum(x) in
 * each of the 8 lanes). */
AI __m256i q4_nibbles(const sp_block_q4_0 *blk) {
    __m128i v = _mm_loadu_si128((const __m128i *)blk->qs);
    __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x0F));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

AI void row_q4_0(const uint8_t *wrow, const sp_mm *m, int32_t t0, int nt, float *out) {
    const sp_block_q4_0 *w = (const sp_block_q4_0 *)wrow;
    const int64_t nb = m->k / SP_QK;
    __m256 acc[4];
    const uint8_t *xs[4];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
    }
    for (int64_t b = 0; b < nb; b++) {
        if (b % 4 == 0) prefetch((const uint8_t *)&w[b] + PF_AHEAD);
        __m256i wv = q4_nibbles(&w[b]);
        const float wd = _cvtsh_ss(w[b].d);
        for (int t = 0; t < nt; t++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(sp_act_qs(xs[t]) + b * SP_QK));
            __m256i p = _mm256_maddubs_epi16(wv, xv);
            __m256i dot = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
            dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(sp_act_sum(xs[t], m->k)[b]));
            __m256 sc = _mm256_set1_ps(wd * sp_act_d(xs[t], m->k)[b]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hsum8(acc[t]);
}

/* Driver: rows r0..r1, activations in groups of 4, then 1 (constant NT per
 * call so the accumulators stay in registers; 16 ymm registers). */
#define DEFINE_MM(NAME, ROW)                                                          \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                       \
        float out[4];                                                                 \
        for (int64_t r = r0; r < r1; r++) {                                           \
            const uint8_t *wrow = m->w + r * m->w_stride;                             \
            int32_t t = 0;                                                            \
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

/* Streaming read for the bandwidth probe: four 256-bit accumulators. */
static uint64_t read_sum(const void *p, size_t bytes) {
    const uint8_t *b = p;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(b + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(b + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(b + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(b + i + 96)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, s);
    return out[0] + out[1] + out[2] + out[3];
}

/* ---- K-quants (Q2_K..Q6_K) against q8_K activations ----
 * Per super-block the weights are unpacked once into 256 unsigned bytes u
 * (value + off, off = 32 for Q6_K, 4 for Q3_K, else 0) and 16 sub-block
 * scales/mins; each token then costs 8 maddubs (u8 x s8 pairs, at most
 * 2 * 63 * 127, no saturation) and 8 madds with the per-16 scales. The
 * integer sums are exact, so with the scalar reference's float expression
 * y += (d_x d) sumi - (d_x dmin) summ the outputs are bit-identical to it. */
typedef struct kq_block {
    __m256i u[8];     /* elements 32g .. 32g+31 */
    __m256i sc[8];    /* 16-bit scales: lanes 0-7 sub-block 2g, lanes 8-15 sub-block 2g+1 */
    int32_t isc[16], imn[16], off;
    bool is_signed;   /* u holds signed values (IQ4_XS): |u| x sign(x, u) */
    bool has_min;     /* imn not all zero */
    /* per-16 integer coefficients of the activation block sums bsum[16]:
     * ca = -off * isc (added to sumi), cm = imn (summ); [0] sub-blocks 0-7 */
    __m256i ca[2], cm[2];
    float d, dmin;
} kq_block;

/* sc[], ca[], cm[] from isc/imn/off (the unpackers without a faster way). */
AI void kq_scales(kq_block *kb) {
    for (int g = 0; g < 8; g++)
        kb->sc[g] = _mm256_set_m128i(_mm_set1_epi16((int16_t)kb->isc[2 * g + 1]),
                                     _mm_set1_epi16((int16_t)kb->isc[2 * g]));
    const __m256i noff = _mm256_set1_epi32(-kb->off);
    kb->ca[0] = _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)kb->isc), noff);
    kb->ca[1] = _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(kb->isc + 8)), noff);
    kb->cm[0] = _mm256_loadu_si256((const __m256i *)kb->imn);
    kb->cm[1] = _mm256_loadu_si256((const __m256i *)(kb->imn + 8));
    kb->has_min = kb->dmin != 0;
}

/* Q4_K: sub-block 2p = low nibbles of qs[32p..], 2p+1 = high nibbles.
 * The 8 6-bit scales and mins from the 12 packed bytes as 32-bit words
 * w0..w2 (sp_q4k_scale_min's layout): scales 0-3 = w0 & 63 per byte,
 * mins 0-3 = w1 & 63, scales 4-7 = low nibbles of w2 | top 2 bits of w0,
 * mins 4-7 = high nibbles of w2 | top 2 bits of w1. */
static void kq_unpack_q4_K(const uint8_t *w, int64_t b, kq_block *kb) {
    const sp_block_q4_K *x = (const sp_block_q4_K *)w + b;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; p++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * p));
        kb->u[2 * p] = _mm256_and_si256(v, m4);
        kb->u[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    uint32_t w0, w1, w2;
    memcpy(&w0, x->scales, 4), memcpy(&w1, x->scales + 4, 4), memcpy(&w2, x->scales + 8, 4);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu, mn_lo = w1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
    const uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
    const __m128i scb = _mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo);  /* 8 scale bytes */
    const __m128i mnb = _mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo);  /* 8 min bytes */
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scb)); /* 8 x int16, both lanes */
    static const int8_t pick[8][32] = {
#define PK(g) {2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, \
               2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1, 2*g, 2*g+1}
        PK(0), PK(1), PK(2), PK(3), PK(4), PK(5), PK(6), PK(7)
#undef PK
    };
    for (int g = 0; g < 8; g++) kb->sc[g] = _mm256_shuffle_epi8(sc16, _mm256_loadu_si256((const __m256i *)pick[g]));
    /* per-16 mins: each of the 8 doubled */
    const __m128i mn2 = _mm_unpacklo_epi8(mnb, mnb);
    kb->cm[0] = _mm256_cvtepu8_epi32(mn2);
    kb->cm[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(mn2, 8));
    kb->ca[0] = kb->ca[1] = _mm256_setzero_si256();
    kb->off = 0;
    kb->d = _cvtsh_ss(x->d);
    kb->dmin = _cvtsh_ss(x->dmin);
    kb->has_min = kb->dmin != 0;
}

/* Q6_K: per half h, element 128h + 32j + l from ql[64h + l + 32(j&1)]
 * (high nibble for j >= 2) and bits 2j of qh[32h + l]; stored value + 32. */
static void kq_unpack_q6_K(const uint8_t *w, int64_t b, kq_block *kb) {
    const sp_block_q6_K *x = (const sp_block_q6_K *)w + b;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    for (int h = 0; h < 2; h++) {
        __m256i la = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        __m256i lb = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        __m256i lo[4] = {_mm256_and_si256(la, m4), _mm256_and_si256(lb, m4),
                         _mm256_and_si256(_mm256_srli_epi16(la, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(lb, 4), m4)};
        for (int j = 0; j < 4; j++) {
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), m2);
            kb->u[4 * h + j] = _mm256_or_si256(lo[j], _mm256_slli_epi16(hi, 4));
        }
    }
    /* 16 int8 scales: group g takes scales 2g (lanes 0-7) and 2g+1 (8-15) */
    const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
    for (int g = 0; g < 8; g++) {
        __m128i a = _mm_set1_epi16((int16_t)x->scales[2 * g]), c = _mm_set1_epi16((int16_t)x->scales[2 * g + 1]);
        kb->sc[g] = _mm256_set_m128i(c, a);
    }
    kb->ca[0] = _mm256_mullo_epi32(_mm256_cvtepi8_epi32(s8), _mm256_set1_epi32(-32));
    kb->ca[1] = _mm256_mullo_epi32(_mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8)), _mm256_set1_epi32(-32));
    kb->cm[0] = kb->cm[1] = _mm256_setzero_si256();
    kb->off = 32;
    kb->d = _cvtsh_ss(x->d);
    kb->dmin = 0;
    kb->has_min = false;
}

/* Q5_K: Q4_K's nibbles plus bit s of qh[l] as the fifth bit of sub-block s. */
static void kq_unpack_q5_K(const uint8_t *w, int64_t b, kq_block *kb) {
    const sp_block_q5_K *x = (const sp_block_q5_K *)w + b;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(0x01);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
    for (int p = 0; p < 4; p++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * p));
        __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), m1);
        __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), m1);
        kb->u[2 * p] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(h0, 4));
        kb->u[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_slli_epi16(h1, 4));
    }
    for (int s8 = 0; s8 < 8; s8++) {
        uint8_t sc, mn;
        sp_q4k_scale_min(s8, x->scales, &sc, &mn);
        kb->isc[2 * s8] = kb->isc[2 * s8 + 1] = sc;
        kb->imn[2 * s8] = kb->imn[2 * s8 + 1] = mn;
    }
    kb->off = 0;
    kb->d = _cvtsh_ss(x->d);
    kb->dmin = _cvtsh_ss(x->dmin);
}

/* Q2_K / Q3_K: element 128h + 32j + l is bits 2j of qs[32h + l]; Q3_K adds
 * 4 * (bit 4h + j of hmask[l]) to the stored (value + 4). */
static void kq_unpack_q23_K(sp_ggml_type type, const uint8_t *w, int64_t b, kq_block *kb) {
    const __m256i m2 = _mm256_set1_epi8(0x03), m1 = _mm256_set1_epi8(0x01);
    const uint8_t *qs;
    if (type == SP_GGML_Q2_K) {
        const sp_block_q2_K *x = (const sp_block_q2_K *)w + b;
        qs = x->qs;
        for (int s = 0; s < 16; s++) kb->isc[s] = x->scales[s] & 0xF, kb->imn[s] = x->scales[s] >> 4;
        kb->d = _cvtsh_ss(x->d);
        kb->dmin = _cvtsh_ss(x->dmin);
        kb->off = 0;
        for (int h = 0; h < 2; h++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
            for (int j = 0; j < 4; j++) kb->u[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
        }
    } else {
        const sp_block_q3_K *x = (const sp_block_q3_K *)w + b;
        int8_t sc[16];
        sp_q3k_scales(x->scales, sc);
        for (int s = 0; s < 16; s++) kb->isc[s] = sc[s], kb->imn[s] = 0;
        kb->d = _cvtsh_ss(x->d);
        kb->dmin = 0;
        kb->off = 4;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        for (int h = 0; h < 2; h++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), m1);
                kb->u[4 * h + j] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
            }
        }
    }
}

AI int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* The 16 IQ4_NL / IQ4_XS values, for byte shuffles (both 128-bit lanes). */
AI __m256i iq4_table(void) {
    const __m128i t = _mm_loadu_si128((const __m128i *)sp_iq4nl_values);
    return _mm256_set_m128i(t, t);
}

/* IQ4_XS: sub-block s of 32 = table values of the low (first 16) and high
 * nibbles of qs[16s..16s+15], scale ls - 32. */
static void kq_unpack_iq4_xs(const uint8_t *w, int64_t b, kq_block *kb) {
    const sp_block_iq4_xs *x = (const sp_block_iq4_xs *)w + b;
    const __m256i m4 = _mm256_set1_epi8(0x0F), tab = iq4_table();
    for (int p = 0; p < 4; p++) {
        /* sub-blocks 2p and 2p+1: 32 bytes of qs */
        __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * p));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        /* sub-block 2p = [lo of bytes 0-15, hi of bytes 0-15], 2p+1 likewise for bytes 16-31 */
        __m256i a = _mm256_permute2x128_si256(lo, hi, 0x20), c = _mm256_permute2x128_si256(lo, hi, 0x31);
        kb->u[2 * p] = _mm256_shuffle_epi8(tab, a);
        kb->u[2 * p + 1] = _mm256_shuffle_epi8(tab, c);
    }
    for (int s8 = 0; s8 < 8; s8++) {
        int ls = ((x->scales_l[s8 / 2] >> (4 * (s8 % 2))) & 0xF) | (((x->scales_h >> (2 * s8)) & 3) << 4);
        kb->isc[2 * s8] = kb->isc[2 * s8 + 1] = ls - 32;
        kb->imn[2 * s8] = kb->imn[2 * s8 + 1] = 0;
    }
    kb->off = 0;
    kb->is_signed = true;
    kb->d = _cvtsh_ss(x->d);
    kb->dmin = 0;
}

static void mm_kquant(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t nb = m->k / SP_QK_K;
    kq_block kb;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = m->w + r * m->w_stride;
        for (int32_t t = 0; t < m->n; t++) m->y[t * m->ld_y + r] = 0;
        for (int64_t b = 0; b < nb; b++) {
            kb.is_signed = false;
            __m256i au[8];
            if (m->wtype == SP_GGML_Q4_K) kq_unpack_q4_K(w, b, &kb);
            else if (m->wtype == SP_GGML_Q6_K) kq_unpack_q6_K(w, b, &kb);
            else {
                if (m->wtype == SP_GGML_IQ4_XS) kq_unpack_iq4_xs(w, b, &kb);
                else if (m->wtype == SP_GGML_Q5_K) kq_unpack_q5_K(w, b, &kb);
                else kq_unpack_q23_K(m->wtype, w, b, &kb);
                kq_scales(&kb);
            }
            if (kb.is_signed)
                for (int g = 0; g < 8; g++) au[g] = _mm256_sign_epi8(kb.u[g], kb.u[g]);
            for (int32_t t = 0; t < m->n; t++) {
                const void *xr = (const uint8_t *)m->x + t * m->x_stride;
                const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                const int32_t *bs = sp_actk_bsum(xr, m->k) + b * 16;
                __m256i acc = _mm256_setzero_si256();
                for (int g = 0; g < 8; g++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 32 * g));
                    __m256i p16 = kb.is_signed ? _mm256_maddubs_epi16(au[g], _mm256_sign_epi8(xv, kb.u[g]))
                                               : _mm256_maddubs_epi16(kb.u[g], xv);
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, kb.sc[g]));
                }
                /* the block-sum terms, exact in int32 lanes */
                const __m256i bs0 = _mm256_loadu_si256((const __m256i *)bs);
                const __m256i bs1 = _mm256_loadu_si256((const __m256i *)(bs + 8));
                acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_mullo_epi32(bs0, kb.ca[0]),
                                                             _mm256_mullo_epi32(bs1, kb.ca[1])));
                const int32_t sumi = hsum_i32(acc);
                const int32_t summ = kb.has_min ? hsum_i32(_mm256_add_epi32(_mm256_mullo_epi32(bs0, kb.cm[0]),
                                                                             _mm256_mullo_epi32(bs1, kb.cm[1])))
                                                : 0;
                const float xd = sp_actk_d(xr, m->k)[b];
                m->y[t * m->ld_y + r] += (xd * kb.d) * (float)sumi - (xd * kb.dmin) * (float)summ;
            }
        }
    }
}

/* ---- Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 against q8 activations ----
 * A block's 32 values unpacked once to signed bytes; per token one
 * maddubs(|w|, sign(x, w)) (pairs at most 2 * 127 * 127) and a madd give the
 * exact integer dot; the float expression is the scalar reference's, so the
 * outputs are bit-identical to it. */
AI __m256i nibbles32(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x0F));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* Bit i of the 32-bit qh as 0x10 in byte i. */
AI __m256i qh_bytes(const uint8_t qh[4]) {
    uint32_t v = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                         3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), sel);
    b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

static void mm_q32(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t nb = m->k / SP_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = m->w + r * m->w_stride;
        for (int32_t t = 0; t < m->n; t++) m->y[t * m->ld_y + r] = 0;
        for (int64_t b = 0; b < nb; b++) {
            __m256i v;
            float d, mn = 0;
            switch (m->wtype) {
            case SP_GGML_Q4_1: {
                const sp_block_q4_1 *x = (const sp_block_q4_1 *)w + b;
                v = nibbles32(x->qs), d = _cvtsh_ss(x->d), mn = _cvtsh_ss(x->m);
                break;
            }
            case SP_GGML_Q5_0: {
                const sp_block_q5_0 *x = (const sp_block_q5_0 *)w + b;
                v = _mm256_sub_epi8(_mm256_or_si256(nibbles32(x->qs), qh_bytes(x->qh)), _mm256_set1_epi8(16));
                d = _cvtsh_ss(x->d);
                break;
            }
            case SP_GGML_Q5_1: {
                const sp_block_q5_1 *x = (const sp_block_q5_1 *)w + b;
                v = _mm256_or_si256(nibbles32(x->qs), qh_bytes(x->qh));
                d = _cvtsh_ss(x->d), mn = _cvtsh_ss(x->m);
                break;
            }
            case SP_GGML_MXFP4: {
                const sp_block_mxfp4 *x = (const sp_block_mxfp4 *)w + b;
                const __m128i tab = _mm_loadu_si128((const __m128i *)sp_mxfp4_values);
                v = _mm256_shuffle_epi8(_mm256_set_m128i(tab, tab), nibbles32(x->qs));
                d = sp_e8m0_half(x->e);
                break;
            }
            default: { /* IQ4_NL */
                const sp_block_iq4_nl *x = (const sp_block_iq4_nl *)w + b;
                v = _mm256_shuffle_epi8(iq4_table(), nibbles32(x->qs));
                d = _cvtsh_ss(x->d);
                break;
            }
            }
            const __m256i av = _mm256_sign_epi8(v, v);
            for (int32_t t = 0; t < m->n; t++) {
                const void *xr = (const uint8_t *)m->x + t * m->x_stride;
                __m256i xv = _mm256_loadu_si256((const __m256i *)(sp_act_qs(xr) + b * SP_QK));
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(xv, v)), ones);
                float val = (d * sp_act_d(xr, m->k)[b]) * (float)hsum_i32(p);
                if (mn != 0) val += mn * sp_act_s(xr, m->k)[b];
                m->y[t * m->ld_y + r] += val;
            }
        }
    }
}

void sp_ops_fill_kquants_avx2(sp_ops_table *t) {
    t->mm[SP_GGML_Q2_K] = t->mm[SP_GGML_Q3_K] = t->mm[SP_GGML_Q4_K] = t->mm[SP_GGML_Q5_K] =
        t->mm[SP_GGML_Q6_K] = t->mm[SP_GGML_IQ4_XS] = mm_kquant;
    t->mm[SP_GGML_Q4_1] = t->mm[SP_GGML_Q5_0] = t->mm[SP_GGML_Q5_1] = t->mm[SP_GGML_IQ4_NL] =
        t->mm[SP_GGML_MXFP4] = mm_q32;
}

/* ---- attention, softmax, SwiGLU (see ops.h), bit-identical to the scalar
 * references: 16 lanes as two 8-lane halves ---- */

/* sp_reduce16 of lanes lo (0-7) and hi (8-15). */
AI float hsum16(__m256 lo, __m256 hi) {
    const __m256 h = _mm256_add_ps(lo, hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* ggml's vec_dot_f32 order (ops.h). */
static void att_scores(const float *q, const float *k, int64_t stride, int32_t n, int32_t hd,
                       float scale, float *out) {
    const int32_t np = hd / 64 * 64;
    for (int32_t s = 0; s < n; s++) {
        const float *ks = k + s * stride;
        __m256 a[8];
        for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
        for (int32_t i = 0; i < np; i += 64)
            for (int j = 0; j < 8; j++) /* a[2c], a[2c+1]: lanes 0-7, 8-15 of accumulator c */
                a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8 * j), _mm256_loadu_ps(ks + i + 8 * j), a[j]);
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
        float d = hsum16(lo, hi);
        const int32_t n8 = np + (hd - np) / 8 * 8;
        for (int32_t i = np; i < n8; i++) d += q[i] * ks[i];
        for (int32_t i = n8; i < hd; i++) d = fmaf(q[i], ks[i], d);
        out[s] = d * scale;
    }
}

/* tinyBLAS's order (ops.h), accumulating. Lane l of acc (the ranks r with
 * r mod 16 == l) is a chain of its own: for a head of a multiple of 16
 * dims the lanes are walked LG at a time over DW = 8 NB dims at once (LG x
 * NB <= 8 accumulators) held in registers across all their ranks; other
 * head sizes keep the 16 accumulator rows in L1 (up to MIX_HD_MAX dims at
 * once) and walk the ranks in order. Either way each lane adds its ranks
 * in rank order: the same bits. VLOAD8(row, d, w): 8 values of a value
 * row (its bytes) from dim d widened to f32 (dims from w on: zero). */
enum { MIX_HD_MAX = 256 };
AI __m256 acc_load(const float *a, int32_t b, int32_t w) {
    return 8 * b + 8 <= w ? _mm256_loadu_ps(a + 8 * b) : _mm256_maskload_ps(a + 8 * b, tail_mask(w - 8 * b));
}
AI void acc_store(float *a, int32_t b, int32_t w, __m256 x) {
    if (8 * b + 8 <= w)
        _mm256_storeu_ps(a + 8 * b, x);
    else
        _mm256_maskstore_ps(a + 8 * b, tail_mask(w - 8 * b), x);
}
/* x rounded to f16 and back by F16C: round to nearest even, subnormals
 * and overflow as sp_fp32_to_fp16 (the default MXCSR: no DAZ/FTZ). */
AI float round_f16(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
#define MIX_ROW(r) ((const uint8_t *)v + (size_t)(idx ? idx[r] : (r)) * stride)
#define MIX_REG(PR, VLOAD8, NB, LG)                                                               \
    for (int32_t d0 = 0; d0 < hd; d0 += 8 * (NB))                                                 \
        for (int l0 = 0; l0 < 16; l0 += (LG)) {                                                   \
            __m256 a[LG][NB];                                                                     \
            _Pragma("GCC unroll 16") for (int j = 0; j < (LG); j++)                               \
            _Pragma("GCC unroll 16") for (int b = 0; b < (NB); b++)                               \
                a[j][b] = _mm256_loadu_ps(acc + (l0 + j) * (int64_t)ld + d0 + 8 * b);             \
            for (int32_t base = r0 & ~15; base < r1; base += 16)                                  \
                _Pragma("GCC unroll 16") for (int j = 0; j < (LG); j++) {                         \
                    const int32_t r = base + l0 + j;                                              \
                    if (r < r0 || r >= r1) continue;                                              \
                    const float pf = PR;                                                          \
                    if (pf == 0.0f) continue;                                                     \
                    const __m256 pr = _mm256_set1_ps(pf);                                         \
                    const uint8_t *row = MIX_ROW(r);                                              \
                    _Pragma("GCC unroll 16") for (int b = 0; b < (NB); b++)                       \
                        a[j][b] = _mm256_fmadd_ps(VLOAD8(row, d0 + 8 * b, hd), pr, a[j][b]);      \
                }                                                                                 \
            _Pragma("GCC unroll 16") for (int j = 0; j < (LG); j++)                               \
            _Pragma("GCC unroll 16") for (int b = 0; b < (NB); b++)                               \
                _mm256_storeu_ps(acc + (l0 + j) * (int64_t)ld + d0 + 8 * b, a[j][b]);             \
        }
#define MIX_MEM(PR, VLOAD8)                                                                       \
    for (int32_t d0 = 0; d0 < hd; d0 += MIX_HD_MAX) {                                             \
        const int32_t w = hd - d0 < MIX_HD_MAX ? hd - d0 : MIX_HD_MAX, nb = (w + 7) / 8;          \
        __m256 a[16][MIX_HD_MAX / 8];                                                             \
        for (int l = 0; l < 16; l++)                                                              \
            for (int32_t b = 0; b < nb; b++) a[l][b] = acc_load(acc + l * (int64_t)ld + d0, b, w); \
        for (int32_t r = r0; r < r1; r++) {                                                       \
            const float pf = PR;                                                                  \
            if (pf == 0.0f) continue;                                                             \
            const __m256 pr = _mm256_set1_ps(pf);                                                 \
            const uint8_t *row = MIX_ROW(r);                                                      \
            __m256 *ar = a[r & 15];                                                               \
            for (int32_t b = 0; b < nb; b++) ar[b] = _mm256_fmadd_ps(VLOAD8(row, d0 + 8 * b, hd), pr, ar[b]); \
        }                                                                                         \
        for (int l = 0; l < 16; l++)                                                              \
            for (int32_t b = 0; b < nb; b++) acc_store(acc + l * (int64_t)ld + d0, b, w, a[l][b]); \
    }
#define MIX_ACC_BODY(PR, VLOAD8)                                                                  \
    if (hd % 64 == 0) {                                                                           \
        MIX_REG(PR, VLOAD8, 8, 1)                                                                 \
    } else if (hd % 32 == 0) {                                                                    \
        MIX_REG(PR, VLOAD8, 4, 2)                                                                 \
    } else if (hd % 16 == 0) {                                                                    \
        MIX_REG(PR, VLOAD8, 2, 4)                                                                 \
    } else {                                                                                      \
        MIX_MEM(PR, VLOAD8)                                                                       \
    }

#define VLOAD8_F32(row, d, w) load_x((const float *)(row), (d), (w))
#define VLOAD8_F16(row, d, w) _mm256_cvtph_ps(load_h8((const uint16_t *)(row), (d), (w)))
/* a Q8_0 head is whole 32-blocks: 8 dims never straddle blocks */
AI __m256 vload8_q8(const uint8_t *row, int32_t d) {
    const sp_block_q8_0 *blk = (const sp_block_q8_0 *)row + d / SP_QK;
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(blk->d)),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk->qs + d % SP_QK)))));
}
#define VLOAD8_Q8(row, d, w) vload8_q8((row), (d))

static void att_mix_acc_f32(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0, int32_t r1,
                            int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(p[r], VLOAD8_F32)
}

static void att_mix_acc_f16(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0, int32_t r1,
                            int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(round_f16(p[r]), VLOAD8_F16)
}

/* As the F32 mix over the values d * q (one float product each). */
static void att_mix_acc_q8(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0, int32_t r1,
                           int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(p[r], VLOAD8_Q8)
}

/* ---- attention over an F16 cache (ops.h): 16 lanes as two halves ---- */

AI __m256 load_h8f(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

static void att_scores_f16(const void *q, const void *k, size_t stride, int32_t n, int32_t hd, float scale,
                           float *out) {
    const uint16_t *qh = q;
    const bool tiny = hd % 16 != 0; /* ggml's vec_dot_f16 (4 accumulators over 64-dim steps) */
    const int32_t np = tiny ? hd / 64 * 64 : hd;
    for (int32_t s = 0; s < n; s++) {
        const uint16_t *ks = (const uint16_t *)((const uint8_t *)k + (size_t)s * stride);
        __m256 lo, hi;
        if (tiny) {
            __m256 a[8];
            for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
            for (int32_t i = 0; i < np; i += 64)
                for (int j = 0; j < 8; j++)
                    a[j] = _mm256_fmadd_ps(load_h8f(ks + i + 8 * j), load_h8f(qh + i + 8 * j), a[j]);
            lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
            hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
        } else {
            lo = hi = _mm256_setzero_ps();
            for (int32_t i = 0; i < hd; i += 16) {
                lo = _mm256_fmadd_ps(load_h8f(ks + i), load_h8f(qh + i), lo);
                hi = _mm256_fmadd_ps(load_h8f(ks + i + 8), load_h8f(qh + i + 8), hi);
            }
        }
        if (!tiny) {
            out[s] = hsum16(lo, hi) * scale;
            continue;
        }
        double d = hsum16(lo, hi);
        for (int32_t i = np; i < hd; i++) d += (double)(sp_fp16_to_fp32(ks[i]) * sp_fp16_to_fp32(qh[i]));
        out[s] = (float)d * scale;
    }
}

/* ---- attention over a Q8_0 cache (ops.h), bit-identical to the scalar
 * references: the int8 products summed exactly in 8 lanes of 4 (maddubs on
 * |k| and sign-moved q, then pairs), per block lane j += fma(d_k d_q,
 * sum_j), the lanes added as hsum_float_8 ---- */

static void att_scores_q8(const void *q, const void *k, size_t stride, int32_t n, int32_t hd, float scale,
                          float *out) {
    const sp_block_q8_0 *qb = q;
    const int32_t nb = hd / SP_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int32_t s = 0; s < n; s++) {
        const sp_block_q8_0 *kb = (const sp_block_q8_0 *)((const uint8_t *)k + (size_t)s * stride);
        __m256 a = _mm256_setzero_ps();
        for (int32_t b = 0; b < nb; b++) {
            const __m256i kv = _mm256_loadu_si256((const __m256i *)kb[b].qs);
            const __m256i qv = _mm256_loadu_si256((const __m256i *)qb[b].qs);
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(kv, kv), _mm256_sign_epi8(qv, kv));
            const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            const float d = _cvtsh_ss(kb[b].d) * _cvtsh_ss(qb[b].d);
            a = _mm256_fmadd_ps(_mm256_set1_ps(d), sum, a);
        }
        out[s] = hsum8(a) * scale;
    }
}

/* ---- the widened F16 kernels (ops.h): the F16 kernels' operations on
 * rows converted once ---- */

static void att_widen(const void *src, size_t stride, int32_t n, int32_t w, float *dst) {
    for (int32_t s = 0; s < n; s++) {
        const uint16_t *r = (const uint16_t *)((const uint8_t *)src + (size_t)s * stride);
        float *d = dst + (size_t)s * w;
        for (int32_t b = 0; 8 * b < w; b++) acc_store(d, b, w, _mm256_cvtph_ps(load_h8(r, 8 * b, w)));
    }
}

static void att_scores_wide(const float *q, const float *k, int32_t n, int32_t hd, float scale, float *out) {
    for (int32_t s = 0; s < n; s++) {
        const float *ks = k + (size_t)s * hd;
        __m256 lo = _mm256_setzero_ps(), hi = lo;
        for (int32_t i = 0; i < hd; i += 16) {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(ks + i), _mm256_loadu_ps(q + i), lo);
            hi = _mm256_fmadd_ps(_mm256_loadu_ps(ks + i + 8), _mm256_loadu_ps(q + i + 8), hi);
        }
        out[s] = hsum16(lo, hi) * scale;
    }
}

static void att_mix_acc_wide(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0,
                             int32_t r1, int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(round_f16(p[r]), VLOAD8_F32)
}

/* 2^e for integer lanes -126 <= e <= 127. */
AI __m256 pow2i(__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); }

/* sp_exp_ggml on 8 lanes: the same operations, j 2^n as the reference's
 * two-step product (the first step exact). */
AI __m256 exp_ggml(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r), r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    /* n clamped before the conversion (lanes beyond +-192 are replaced below) */
    const __m256i e = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-192)), _mm256_set1_ps(192)));
    const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), e), hi = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(127));
    const __m256i second = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(-100)),
                                           _mm256_and_si256(hi, _mm256_set1_epi32(100)));
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, pow2i(_mm256_sub_epi32(e, second))), pow2i(second));
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 alt = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_set1_ps(INFINITY));
    return _mm256_blendv_ps(res, alt, big);
}

/* sp_softmax (ops.h) on 16-rank groups; a partial last group is padded
 * with -inf (weight 0) in a local copy. */
static void softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    const __m256 m = _mm256_set1_ps(mx);
    double sum = 0;
    for (int64_t g = 0; g < n; g += 16) {
        float buf[16];
        float *e = x + g;
        if (g + 16 > n) {
            for (int l = 0; l < 16; l++) buf[l] = g + l < n ? x[g + l] : -INFINITY;
            e = buf;
        }
        const __m256 lo = exp_ggml(_mm256_sub_ps(_mm256_loadu_ps(e), m));
        const __m256 hi = exp_ggml(_mm256_sub_ps(_mm256_loadu_ps(e + 8), m));
        _mm256_storeu_ps(e, lo);
        _mm256_storeu_ps(e + 8, hi);
        if (e == buf) memcpy(x + g, buf, (size_t)(n - g) * sizeof(float));
        sum += (double)hsum16(lo, hi);
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* sp_swiglu (ops.h): 16-lane groups with exp_ggml, the tail as the scalar
 * reference (expf). */
static void swiglu(float *out, const float *g, const float *u, int64_t n) {
    const int64_t nv = n / 16 * 16;
    for (int64_t i = 0; i < nv; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = exp_ggml(_mm256_sub_ps(_mm256_setzero_ps(), x));
        const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (nv < n) sp_swiglu(out + nv, g + nv, u + nv, n - nv);
}

/* ggml's vec_dot_f16 order of its AVX-512 build (ops.h: sp_ops_mm_f16_vecdot),
 * so every tier gives the expert matmuls the same bits: 4 accumulators of 16
 * lanes (two 8-lane halves each) over 64 elements per step, combined as
 * (a0 + a2) + (a1 + a3), then sp_reduce16 into a double and the tail added
 * in double; per lane the same fused multiply-adds as the scalar twin. */
static void mm_f16_vecdot(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t np = m->k / 64 * 64;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)(m->w + r * m->w_stride);
        for (int32_t t = 0; t < m->n; t++) {
            const float *x = (const float *)((const uint8_t *)m->x + t * m->x_stride);
            __m256 a[8];
            for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
            for (int64_t i = 0; i < np; i += 64)
                for (int j = 0; j < 8; j++)
                    a[j] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8 * j))),
                                           _mm256_loadu_ps(x + i + 8 * j), a[j]);
            /* lanes 0-7 of accumulator q are a[2q], lanes 8-15 a[2q + 1] */
            float v[16];
            _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])));
            _mm256_storeu_ps(v + 8, _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
            double s = sp_reduce16(v);
            for (int64_t i = np; i < m->k; i++) s += (double)(_cvtsh_ss(w[i]) * x[i]);
            m->y[t * m->ld_y + r] = (float)s;
        }
    }
}

void sp_ops_fill_avx2(sp_ops_table *t) {
    t->mm_f16_vecdot = mm_f16_vecdot;
    t->read_sum = read_sum;
    t->mm[SP_GGML_F32] = mm_f32;
    t->mm[SP_GGML_F16] = mm_f16;
    t->mm[SP_GGML_BF16] = mm_bf16;
    t->mm[SP_GGML_Q8_0] = mm_q8_0;
    t->mm[SP_GGML_Q4_0] = mm_q4_0;
    t->att_scores = att_scores;
    t->att_scores_kv[0] = att_scores_f16;
    t->att_mix_acc[0] = att_mix_acc_f32;
    t->att_mix_acc[1] = att_mix_acc_f16;
    t->att_scores_kv[1] = att_scores_q8;
    t->att_mix_acc[2] = att_mix_acc_q8;
    t->att_widen = att_widen;
    t->att_scores_wide = att_scores_wide;
    t->att_mix_acc_wide = att_mix_acc_wide;
    t->softmax = softmax;
    t->swiglu = swiglu;
    sp_ops_fill_kquants_avx2(t);
}
