/* ops_avx512: AVX-512 (F, DQ, BW, VL, VNNI) matmul kernels; compiled with
 * -mavx512* and only called when cpuid reports support (see ops.c).
 *
 * Each kernel works on tiles of RR weight rows x NT activation rows: every
 * weight vector is loaded (and widened) once per tile and every activation
 * vector once per tile, so a tile of RR*NT outputs does RR + NT loads per
 * RR*NT multiply-adds (register reuse; decode is RR x 1, verification of k
 * tokens RR x NT). An output's sequence of operations is the same whatever
 * the tile shape is, so results do not depend on the batch size or on how
 * rows are split (tests/test_ops.c checks this bit for bit).
 *
 * Weights are streamed from memory once per call; software prefetch runs
 * one tile ahead (see PF_TILES) because the hardware prefetcher stops at
 * 4 KiB page boundaries and restarts slowly on each new row. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "ops.h"
#include "quant.h"

#define AI __attribute__((always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 16")

/* Prefetch distance ahead of the current weight position, in bytes. */
/* Prefetch target: the same offset in the next tile's rows, RR rows on
 * (PF_TILES tiles ahead). Rows are only a few KiB, so prefetching ahead
 * within a row mostly lands in data already streaming; the next tile is
 * where the misses are. Measured single-threaded on synth-1b: q8_0 8.0 ->
 * 10.6 GB/s, f16 10.4 -> 12.6 GB/s, vs 1 KiB ahead within the row. */
#ifndef PF_TILES
#define PF_TILES 1
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif

AI void prefetch(const void *p) { _mm_prefetch((const char *)p, PF_HINT); }

/* Masked load of the f32 tail; k % 16 lanes. */
AI __m512 load_x(const float *x, int64_t i, int64_t k) {
    if (i + 16 <= k) return _mm512_loadu_ps(x + i);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << (k - i)) - 1), x + i);
}

/* ---- F32 / F16 / BF16: weights widened to f32, FMA into 16 lanes ---- */

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

/* Pins a loaded vector in a register: without it GCC folds each activation
 * load into every FMA using it (RR loads per vector instead of one), and
 * with two loads per FMA the loop was load-port bound. */
#define KEEP_IN_REG(v) __asm__("" : "+v"(v))

/* Full 16-element weight vectors (no tail mask). */
AI __m512 loadw_f32_full(const uint8_t *w, int64_t i) { return _mm512_loadu_ps((const float *)w + i); }
AI __m512 loadw_f16_full(const uint8_t *w, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
}
AI __m512 loadw_bf16_full(const uint8_t *w, int64_t i) {
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One tile: rows r..r+RR-1, activations t0..t0+NT-1, elements i0..i1-1 of
 * k (i0 a multiple of 64). For each output: acc = 0 (i0 = 0) or buf; acc =
 * fma(w[i:i+16], x[i:i+16], acc) for i = i0, i0 + 16, ...; then, if i1 = k,
 * y = _mm512_reduce_add_ps(acc), else acc is parked in buf. Storing and
 * reloading a vector does not change it, so the result does not depend on
 * how k is cut. The main loop does two unmasked steps per iteration with
 * one unconditional prefetch per 64 weight bytes at pf_delta bytes ahead
 * (branches and mask arithmetic in the loop compete with the FMAs for
 * port 0); the masked tail step only runs at the end of a row. ESZ is the
 * weight element size in bytes. */
#define DEFINE_FLOAT_TILE(NAME, LOADW, LOADW_FULL, ESZ)                                     \
    AI void NAME##_run(const sp_mm *m, int64_t r, int32_t t0, const int RR, const int NT,   \
                       int64_t i0, int64_t i1, __m512 *buf, int64_t pf_delta) {             \
        __m512 acc[4][8];                                                                   \
        const float *xs[8];                                                                 \
        const uint8_t *ws[4], *pw[4];                                                       \
        const int64_t k = m->k;                                                             \
        UNROLL for (int t = 0; t < NT; t++)                                                 \
            xs[t] = (const float *)((const uint8_t *)m->x + (t0 + t) * m->x_stride);        \
        UNROLL for (int q = 0; q < RR; q++) {                                               \
            ws[q] = m->w + (r + q) * m->w_stride;                                           \
            pw[q] = ws[q] + pf_delta;                                                       \
            UNROLL for (int t = 0; t < NT; t++)                                             \
                acc[q][t] = i0 == 0 ? _mm512_setzero_ps() : buf[q * NT + t];                \
        }                                                                                   \
        const int64_t ifull = i1 < k ? i1 : k / 16 * 16;                                    \
        int64_t i = i0;                                                                     \
        for (; i + 32 <= ifull; i += 32) {                                                  \
            UNROLL for (int q = 0; q < RR; q++)                                             \
                UNROLL for (int o = 0; o < 32 * ESZ; o += 64) prefetch(pw[q] + i * ESZ + o); \
            UNROLL for (int h = 0; h < 32; h += 16) {                                       \
                __m512 xv[8];                                                               \
                UNROLL for (int t = 0; t < NT; t++) {                                       \
                    xv[t] = _mm512_loadu_ps(xs[t] + i + h);                                 \
                    KEEP_IN_REG(xv[t]);                                                     \
                }                                                                           \
                UNROLL for (int q = 0; q < RR; q++) {                                       \
                    __m512 w = LOADW_FULL(ws[q], i + h);                                    \
                    UNROLL for (int t = 0; t < NT; t++)                                     \
                        acc[q][t] = _mm512_fmadd_ps(w, xv[t], acc[q][t]);                   \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        for (; i < i1; i += 16) {                                                           \
            __m512 xv[8];                                                                   \
            UNROLL for (int t = 0; t < NT; t++) xv[t] = load_x(xs[t], i, k);                \
            UNROLL for (int q = 0; q < RR; q++) {                                           \
                if ((i * ESZ) % 64 == 0) prefetch(pw[q] + i * ESZ);                         \
                __m512 w = LOADW(ws[q], i, k);                                              \
                UNROLL for (int t = 0; t < NT; t++) acc[q][t] = _mm512_fmadd_ps(w, xv[t], acc[q][t]); \
            }                                                                               \
        }                                                                                   \
        if (i1 < k) {                                                                       \
            UNROLL for (int q = 0; q < RR; q++)                                             \
                UNROLL for (int t = 0; t < NT; t++) buf[q * NT + t] = acc[q][t];            \
        } else {                                                                            \
            UNROLL for (int q = 0; q < RR; q++)                                             \
                UNROLL for (int t = 0; t < NT; t++)                                         \
                    m->y[(t0 + t) * m->ld_y + r + q] = _mm512_reduce_add_ps(acc[q][t]);     \
        }                                                                                   \
    }                                                                                       \
    /* A whole row tile; prefetch the next tile's rows (PF_TILES on). */                    \
    AI void NAME(const sp_mm *m, int64_t r, int32_t t0, const int RR, const int NT) {       \
        NAME##_run(m, r, t0, RR, NT, 0, m->k, NULL, PF_TILES * RR * (int64_t)m->w_stride);  \
    }                                                                                       \
    /* Panel (see below): rows r0..r1 (at most PANEL_ROWS), tokens tb..te-1 (8 or 16). */   \
    static void NAME##_panel(const sp_mm *m, int64_t r0, int64_t r1, int32_t tb, int32_t te, int64_t kc) { \
        __m512 buf[PANEL_ROWS * 8 * 2];                                                     \
        const int64_t k = m->k;                                                             \
        for (int64_t i0 = 0; i0 < k; i0 += kc) {                                            \
            const int64_t i1 = i0 + kc < k ? i0 + kc : k;                                   \
            for (int32_t t0 = tb; t0 < te; t0 += 8) {                                       \
                __m512 *b = buf + ((t0 - tb) / 8) * PANEL_ROWS * 8;                         \
                const int last_t = t0 + 8 >= te;                                            \
                for (int64_t r = r0; r < r1; r += 2) {                                      \
                    const int RR = r + 2 <= r1 ? 2 : 1;                                     \
                    int64_t pf = RR * (int64_t)m->w_stride;                                 \
                    if (r + RR >= r1) /* next: the panel's first rows, same or next chunk */ \
                        pf = (r0 - r) * (int64_t)m->w_stride + (last_t ? kc * ESZ : 0);     \
                    if (RR == 2)                                                            \
                        NAME##_run(m, r, t0, 2, 8, i0, i1, b + (r - r0) * 8, pf);           \
                    else                                                                    \
                        NAME##_run(m, r, t0, 1, 8, i0, i1, b + (r - r0) * 8, pf);           \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

/* Batches of 8 tokens: k-blocked panels. A 2 x 8 tile reads 8 activation
 * vectors per 2 weight vectors; with all 8 activation rows (8 x 4k bytes)
 * bigger than L1 they stream from L2 for every row pair. So a panel of
 * PANEL_ROWS rows is swept in KC-element chunks of k: the 8 x KC activation
 * floats of a chunk stay in L1 for all the panel's rows, and each tile's 16
 * accumulators are parked in a buffer between chunks (bit-identical, see
 * above). Prefetch targets the next tile's rows in the same chunk, or after
 * the panel's last tile the panel's first rows in the next chunk. */
#ifndef PANEL_ROWS
#define PANEL_ROWS 16
#endif

DEFINE_FLOAT_TILE(tile_f32, loadw_f32, loadw_f32_full, 4)
DEFINE_FLOAT_TILE(tile_f16, loadw_f16, loadw_f16_full, 2)
DEFINE_FLOAT_TILE(tile_bf16, loadw_bf16, loadw_bf16_full, 2)


/* ---- Q8_0 / Q4_0 against q8 activations, four 32-blocks per step ----
 *
 * Both are u8 x s8 dot products (VNNI dpbusd) with a per-block correction:
 * Q8_0 weights are made unsigned by flipping the sign bit (w + 128), so
 * sum(w x) = sum((w + 128) x) - 128 sum(x); Q4_0 nibbles n are unsigned
 * already and w = n - 8, so sum(w x) = sum(n x) - 8 sum(x). sum(x) comes with
 * the activation row.
 *
 * A step covers blocks b..b+3 in two byte vectors: 128-bit lane c of "lo"
 * holds elements 0-15 of block b+c and lane c of "hi" elements 16-31 (for
 * Q4_0 these are exactly the low and high nibbles of the block's 16 bytes,
 * so unpacking is one and, one shift, one and for four blocks). The
 * activations come in the same order, with the scales and corrections
 * already broadcast per lane, from the group-of-4 extension of the
 * activation row (ops.h), made once per token. Two dpbusd into one
 * accumulator leave each block's sum in the four int32 lanes of its 128-bit
 * lane; the correction is spread over those lanes (c/4 each) and preloaded,
 * so the block sums are exact. Then one convert and one fma per four blocks:
 * acc = fma(float(dot), wd*xd, acc) with wd*xd broadcast per 128-bit lane;
 * reduced at the end. Blocks past the row end are zero with zero scales. */

/* 128-bit lane c of the result = 16 bytes at p[c] (c < nbg), else 0. */
AI __m512i load4x16(const void *p0, const void *p1, const void *p2, const void *p3, int nbg) {
    __m512i v = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    if (nbg > 1) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p1), 1);
    if (nbg > 2) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p2), 2);
    if (nbg > 3) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p3), 3);
    return v;
}
AI void q4_wbytes4(const sp_block_q4_0 *b, int nbg, __m512i *lo, __m512i *hi) {
    __m512i v = load4x16(b[0].qs, b[1].qs, b[2].qs, b[3].qs, nbg);
    *lo = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
}
AI void q8_wbytes4(const sp_block_q8_0 *b, int nbg, __m512i *lo, __m512i *hi) {
    const __m512i flip = _mm512_set1_epi8(-128);
    /* missing blocks: bytes 0x80 flip to 0 */
    *lo = _mm512_xor_si512(load4x16(b[0].qs, b[1].qs, b[2].qs, b[3].qs, nbg), flip);
    *hi = _mm512_xor_si512(load4x16(b[0].qs + 16, b[1].qs + 16, b[2].qs + 16, b[3].qs + 16, nbg), flip);
    if (nbg < 4) {
        const __mmask64 live = (__mmask64)(((uint64_t)1 << (16 * nbg)) - 1);
        *lo = _mm512_maskz_mov_epi8(live, *lo);
        *hi = _mm512_maskz_mov_epi8(live, *hi);
    }
}

/* fp16 scales d (the first field) of ns <= 16 consecutive blocks of bsz
 * bytes, as f32; lanes past ns are 0. The gather reads 4 bytes per block,
 * which stay inside the block. */
AI __m512 block_scales(const void *blk0, int bsz, int64_t ns) {
    const __m512i off = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(bsz));
    const __mmask16 live = ns >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << ns) - 1);
    __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, off, blk0, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* BLK: block type; WBYTES4: four blocks -> lo, hi. The activation side comes
 * ready-shuffled from the Q4_0 activation extension (ops.h). */
#define DEFINE_Q_TILE(NAME, BLK, WBYTES4)                                             \
    AI void NAME(const sp_mm *m, int64_t r, int32_t t0, const int RR, const int NT) {        \
        const int64_t k = m->k, nb = k / SP_QK;                                              \
        __m512 acc[4][8];                                                                    \
        const uint8_t *xs[8];                                                                \
        const BLK *ws[4];                                                                    \
        UNROLL for (int t = 0; t < NT; t++) xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride; \
        UNROLL for (int q = 0; q < RR; q++) {                                                \
            ws[q] = (const BLK *)(m->w + (r + q) * m->w_stride);                             \
            UNROLL for (int t = 0; t < NT; t++) acc[q][t] = _mm512_setzero_ps();             \
        }                                                                                    \
        const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3); \
        for (int64_t s0 = 0; s0 < nb; s0 += 16) {                                            \
            /* the weight scales of the next 16 blocks of each row, as f32 */                \
            const int64_t ns = nb - s0 < 16 ? nb - s0 : 16;                                  \
            __m512 wds[4];                                                                   \
            UNROLL for (int q = 0; q < RR; q++) wds[q] = block_scales(ws[q] + s0, sizeof(BLK), ns); \
            __m512i pick = spread;                                                           \
            for (int64_t j = 0; j < ns; j += 4) {                                            \
                const int64_t b = s0 + j;                                                    \
                const int nbg = ns - j < 4 ? (int)(ns - j) : 4;                              \
                __m512i lo[4], hi[4];                                                        \
                __m512 wd[4];                                                                \
                UNROLL for (int q = 0; q < RR; q++) {                                        \
                    const uint8_t *pf = (const uint8_t *)(ws[q] + b) + PF_TILES * RR * m->w_stride; \
                    prefetch(pf);                                                            \
                    prefetch(pf + 64);                                                       \
                    if (sizeof(BLK) * 4 > 128) prefetch(pf + 128);                           \
                    WBYTES4(ws[q] + b, nbg, &lo[q], &hi[q]);                                 \
                    wd[q] = _mm512_permutexvar_ps(pick, wds[q]); /* 0 past the row end */    \
                }                                                                            \
                pick = _mm512_add_epi32(pick, _mm512_set1_epi32(4));                         \
                const int64_t g = b / 4;                                                     \
                UNROLL for (int t = 0; t < NT; t++) {                                        \
                    const int8_t *gq = sp_act_g4_qs(xs[t], k) + g * 128;                     \
                    __m512i xlo = _mm512_loadu_si512(gq);                                    \
                    __m512i xhi = _mm512_loadu_si512(gq + 64);                               \
                    __m512 xd = _mm512_loadu_ps(sp_act_g4_d(xs[t], k) + g * 16);             \
                    __m512i xc = _mm512_loadu_si512(sp_act_g4_corr(xs[t], k) + g * 16);      \
                    UNROLL for (int q = 0; q < RR; q++) {                                    \
                        __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(xc, lo[q], xlo), hi[q], xhi); \
                        acc[q][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),                 \
                                                    _mm512_mul_ps(wd[q], xd), acc[q][t]);    \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        UNROLL for (int q = 0; q < RR; q++)                                                  \
            UNROLL for (int t = 0; t < NT; t++)                                              \
                m->y[(t0 + t) * m->ld_y + r + q] = _mm512_reduce_add_ps(acc[q][t]);          \
    }

DEFINE_Q_TILE(tile_q4_0, sp_block_q4_0, q4_wbytes4)
DEFINE_Q_TILE(tile_q8_0, sp_block_q8_0, q8_wbytes4)


/* Float types: complete groups of 8 tokens go through k-blocked panels
 * (above), the rest through 4-row tiles of 4, 2, 1 tokens. KC: the chunk's
 * activations (n8 x KC floats) take about half of a 48 KiB L1. */
#ifndef PANEL_X_BYTES
#define PANEL_X_BYTES (24 * 1024)
#endif
#define DEFINE_MM_F(NAME, TILE)                                                       \
    AI void rows_##NAME(const sp_mm *m, int64_t r, const int RR, int32_t t) {         \
        for (; t + 4 <= m->n; t += 4) TILE(m, r, t, RR, 4);                           \
        for (; t + 2 <= m->n; t += 2) TILE(m, r, t, RR, 2);                           \
        for (; t < m->n; t++) TILE(m, r, t, RR, 1);                                   \
    }                                                                                 \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                       \
        const int32_t n8 = m->n / 8 * 8;                                              \
        /* token blocks of 16 (two panel buffers), then one of 8 */                   \
        for (int32_t tb = 0; tb < n8;) {                                              \
            const int32_t te = tb + 16 <= n8 ? tb + 16 : tb + 8;                      \
            const int64_t kc = PANEL_X_BYTES / (4 * (te - tb)) / 64 * 64;             \
            for (int64_t r = r0; r < r1; r += PANEL_ROWS)                             \
                TILE##_panel(m, r, r + PANEL_ROWS < r1 ? r + PANEL_ROWS : r1, tb, te, kc); \
            tb = te;                                                                  \
        }                                                                             \
        if (n8 == m->n) return;                                                       \
        int64_t r = r0;                                                               \
        for (; r + 4 <= r1; r += 4) rows_##NAME(m, r, 4, n8);                         \
        for (; r < r1; r++) rows_##NAME(m, r, 1, n8);                                 \
    }

DEFINE_MM_F(mm_f32, tile_f32)
DEFINE_MM_F(mm_f16, tile_f16)
DEFINE_MM_F(mm_bf16, tile_bf16)

/* ---- F32 / F16 / BF16 over packed weights (ops.h): one stream per group ----
 *
 * A tile is RR consecutive rows of one 16-row group (their 16-element
 * vectors lie side by side in each 256-element step) by NT tokens, and does
 * exactly the unpacked tile's per-output work: acc = fma(w[i:i+16],
 * x[i:i+16], acc) for i = i0, i0 + 16, ... (the padded weights past the row
 * end are zero, as the unpacked tail's masked load gives), then
 * _mm512_reduce_add_ps, or acc parked in buf between k chunks. So every
 * output is bit-identical to mm_f32 / mm_f16 / mm_bf16 on the original rows.
 * Decode (one token, whole group): a 16 x 1 tile, 16 accumulators, reading
 * the group front to back with no software prefetch (FPK_PF_BYTES: L1
 * prefetches that far ahead): the one sequential stream is what the
 * hardware prefetcher follows best. bench-forward synth-1b F16 -t 1, A/B in
 * one run at load 1: prefetches 4 KiB ahead 86-93% of the bound, none
 * 101-103%. The tiles below read strided lines and need their prefetches
 * (FPK_PANEL_HINT, FPK_REST_HINT 0: n = 8 2.1x, n = 2 2.3x slower).
 * Blocks of 8 tokens: the 2 x 8 k-blocked panels of the unpacked kernels
 * over the group's rows (compute-bound: 8 FMAs per weight vector), their
 * lines prefetched to L2 one k chunk ahead. Other tokens (fewer than 8):
 * 4-row tiles of 4, 2, 1 tokens over FPK_REST_BYTES chunks of the group's
 * stream, lines prefetched to L2 one chunk ahead (a stream bench of 512 MB
 * f16, k = 2048, n = 2: unpacked 31 ms; these tiles over the whole row 45
 * ms, in 8 KiB chunks with L1 prefetches 45-51 ms, with L2 prefetches
 * 21-24 ms; 4 KiB chunks 25-28 ms, 16 KiB 25 ms). */
#ifndef FPK_PF_BYTES
#define FPK_PF_BYTES 0
#endif
#ifndef FPK_REST_BYTES
#define FPK_REST_BYTES 8192
#endif
#ifndef FPK_PANEL_HINT
#define FPK_PANEL_HINT 2
#endif
#ifndef FPK_REST_HINT
#define FPK_REST_HINT 2
#endif

/* PFH: 0 no prefetch, 1 to L1, 2 to L2; pf_delta: bytes ahead of the lines read. */
#define DEFINE_FPK_TILE(NAME, LOADW_FULL, ESZ)                                              \
    AI void NAME(const sp_mm *m, const uint8_t *w0, int64_t r, int32_t t0, const int RR,    \
                 const int NT, int64_t i0, int64_t i1, __m512 *buf, int64_t pf_delta,       \
                 const int PFH) {                                                           \
        const size_t SB = 256 * ESZ;                                                        \
        __m512 acc[16][8];                                                                  \
        const float *xs[8];                                                                 \
        const int64_t k = m->k;                                                             \
        UNROLL for (int t = 0; t < NT; t++)                                                 \
            xs[t] = (const float *)((const uint8_t *)m->x + (t0 + t) * m->x_stride);        \
        UNROLL for (int q = 0; q < RR; q++)                                                 \
            UNROLL for (int t = 0; t < NT; t++)                                             \
                acc[q][t] = i0 == 0 || !buf ? _mm512_setzero_ps() : buf[q * NT + t];        \
        const uint8_t *p = w0 + (size_t)(i0 / 16) * SB;                                     \
        const int64_t ifull = i1 < k ? i1 : k / 16 * 16;                                    \
        int64_t i = i0;                                                                     \
        for (; i < ifull; i += 16, p += SB) {                                               \
            if (PFH == 1)                                                                   \
                UNROLL for (int o = 0; o < RR * 16 * ESZ; o += 64)                          \
                    _mm_prefetch((const char *)(p + pf_delta + o), _MM_HINT_T0);            \
            if (PFH == 2)                                                                   \
                UNROLL for (int o = 0; o < RR * 16 * ESZ; o += 64)                          \
                    _mm_prefetch((const char *)(p + pf_delta + o), _MM_HINT_T1);            \
            __m512 xv[8];                                                                   \
            UNROLL for (int t = 0; t < NT; t++) {                                           \
                xv[t] = _mm512_loadu_ps(xs[t] + i);                                         \
                KEEP_IN_REG(xv[t]);                                                         \
            }                                                                               \
            UNROLL for (int q = 0; q < RR; q++) {                                           \
                __m512 w = LOADW_FULL(p + q * 16 * ESZ, 0);                                 \
                UNROLL for (int t = 0; t < NT; t++) acc[q][t] = _mm512_fmadd_ps(w, xv[t], acc[q][t]); \
            }                                                                               \
        }                                                                                   \
        if (i < i1) { /* the row's partial last vector */                                   \
            __m512 xv[8];                                                                   \
            UNROLL for (int t = 0; t < NT; t++) xv[t] = load_x(xs[t], i, k);                \
            UNROLL for (int q = 0; q < RR; q++) {                                           \
                __m512 w = LOADW_FULL(p + q * 16 * ESZ, 0);                                 \
                UNROLL for (int t = 0; t < NT; t++) acc[q][t] = _mm512_fmadd_ps(w, xv[t], acc[q][t]); \
            }                                                                               \
        }                                                                                   \
        if (buf && i1 < k) { /* buf: NULL for whole rows */                                 \
            UNROLL for (int q = 0; q < RR; q++)                                             \
                UNROLL for (int t = 0; t < NT; t++) buf[q * NT + t] = acc[q][t];            \
        } else {                                                                            \
            UNROLL for (int q = 0; q < RR; q++)                                             \
                UNROLL for (int t = 0; t < NT; t++)                                         \
                    m->y[(t0 + t) * m->ld_y + r + q] = _mm512_reduce_add_ps(acc[q][t]);     \
        }                                                                                   \
    }

DEFINE_FPK_TILE(fpk_tile_f32, loadw_f32_full, 4)
DEFINE_FPK_TILE(fpk_tile_f16, loadw_f16_full, 2)
DEFINE_FPK_TILE(fpk_tile_bf16, loadw_bf16_full, 2)

/* The driver: per group, rows [lo, hi) of it (row g * 16 + lo ...): complete
 * blocks of 8 tokens in panels (as DEFINE_MM_F: 16 then 8 tokens, KC-element
 * chunks), then the other tokens: one token over a whole group as one
 * 16 x 1 tile, else NAME##_rest's chunked 4-row tiles. */
#define DEFINE_MM_FPK(NAME, TILE, ESZ)                                                    \
    /* Tokens t0..n-1 (fewer than 8), rows [lo, hi) of the group: k in chunks \
     * of FPK_REST_BYTES of the group's stream, each swept by 4-row (and      \
     * 1-row) tiles of 4, 2, 1 tokens with their accumulators parked in buf;  \
     * the first token tile of each row tile prefetches its lines one chunk   \
     * ahead (so the group streams once, in order). */                        \
    AI void NAME##_rows(const sp_mm *m, const uint8_t *grp, int64_t rb, int64_t r, const int RR, \
                        int32_t t0, int64_t i0, int64_t i1, __m512 *b, int64_t pfd) {       \
        const uint8_t *w0 = grp + r * 16 * ESZ;                                            \
        int32_t t = t0;                                                                    \
        if (t + 4 <= m->n) {                                                               \
            TILE(m, w0, rb + r, t, RR, 4, i0, i1, b, pfd, FPK_REST_HINT);                   \
            t += 4;                                                                        \
        }                                                                                  \
        if (t + 2 <= m->n) {                                                               \
            if (t == t0) TILE(m, w0, rb + r, t, RR, 2, i0, i1, b + (t - t0) * RR, pfd, FPK_REST_HINT); \
            else TILE(m, w0, rb + r, t, RR, 2, i0, i1, b + (t - t0) * RR, pfd, 0);         \
            t += 2;                                                                        \
        }                                                                                  \
        if (t < m->n) {                                                                    \
            if (t == t0) TILE(m, w0, rb + r, t, RR, 1, i0, i1, b + (t - t0) * RR, pfd, FPK_REST_HINT); \
            else TILE(m, w0, rb + r, t, RR, 1, i0, i1, b + (t - t0) * RR, pfd, 0);         \
        }                                                                                  \
    }                                                                                      \
    static void NAME##_rest(const sp_mm *m, const uint8_t *grp, int64_t rb, int64_t lo, int64_t hi, \
                            int32_t t0) {                                                  \
        __m512 buf[SP_PACK_ROWS * 8];                                                      \
        const int64_t k = m->k, kc = FPK_REST_BYTES / (16 * ESZ), pfd = FPK_REST_BYTES;    \
        for (int64_t i0 = 0; i0 < k; i0 += kc) {                                           \
            const int64_t i1 = i0 + kc < k ? i0 + kc : k;                                  \
            int64_t r = lo;                                                                \
            for (; r + 4 <= hi; r += 4) NAME##_rows(m, grp, rb, r, 4, t0, i0, i1, buf + (r - lo) * 8, pfd); \
            for (; r < hi; r++) NAME##_rows(m, grp, rb, r, 1, t0, i0, i1, buf + (r - lo) * 8, pfd); \
        }                                                                                  \
    }                                                                                      \
    static void NAME##_panel(const sp_mm *m, const uint8_t *grp, int64_t rb, int64_t lo, int64_t hi, \
                             int32_t tb, int32_t te, int64_t kc) {                         \
        __m512 buf[SP_PACK_ROWS * 8 * 2];                                                  \
        const int64_t k = m->k, pfd = kc / 16 * 256 * ESZ; /* the next chunk */            \
        for (int64_t i0 = 0; i0 < k; i0 += kc) {                                           \
            const int64_t i1 = i0 + kc < k ? i0 + kc : k;                                  \
            for (int32_t t0 = tb; t0 < te; t0 += 8) {                                      \
                __m512 *b = buf + ((t0 - tb) / 8) * SP_PACK_ROWS * 8;                      \
                for (int64_t r = lo; r < hi; r += 2) {                                     \
                    const uint8_t *w0 = grp + r * 16 * ESZ;                                \
                    if (r + 2 > hi)                                                        \
                        TILE(m, w0, rb + r, t0, 1, 8, i0, i1, b + (r - lo) * 8, pfd, t0 == tb ? FPK_PANEL_HINT : 0); \
                    else if (t0 == tb)                                                     \
                        TILE(m, w0, rb + r, t0, 2, 8, i0, i1, b + (r - lo) * 8, pfd, FPK_PANEL_HINT); \
                    else                                                                   \
                        TILE(m, w0, rb + r, t0, 2, 8, i0, i1, b + (r - lo) * 8, pfd, 0);   \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                             \
        const int32_t n8 = m->n / 8 * 8;                                                   \
        for (int64_t g = r0 / SP_PACK_ROWS; g * SP_PACK_ROWS < r1; g++) {                  \
            const uint8_t *grp = m->w + g * m->w_stride;                                   \
            const int64_t rb = g * SP_PACK_ROWS;                                           \
            const int64_t lo = r0 > rb ? r0 - rb : 0;                                      \
            const int64_t hi = r1 < rb + SP_PACK_ROWS ? r1 - rb : SP_PACK_ROWS;            \
            for (int32_t tb = 0; tb < n8;) {                                               \
                const int32_t te = tb + 16 <= n8 ? tb + 16 : tb + 8;                       \
                const int64_t kc = PANEL_X_BYTES / (4 * (te - tb)) / 64 * 64;              \
                NAME##_panel(m, grp, rb, lo, hi, tb, te, kc);                              \
                tb = te;                                                                   \
            }                                                                              \
            if (n8 == m->n) continue;                                                      \
            if (n8 + 1 == m->n && lo == 0 && hi == SP_PACK_ROWS) {                         \
                TILE(m, grp, rb, n8, 16, 1, 0, m->k, NULL, FPK_PF_BYTES, FPK_PF_BYTES ? 1 : 0); \
                continue;                                                                  \
            }                                                                              \
            NAME##_rest(m, grp, rb, lo, hi, n8);                                           \
        }                                                                                  \
    }

DEFINE_MM_FPK(mm_f32_pk, fpk_tile_f32, 4)
DEFINE_MM_FPK(mm_f16_pk, fpk_tile_f16, 2)
DEFINE_MM_FPK(mm_bf16_pk, fpk_tile_bf16, 2)
/* Quantised tiles use at most RR x NT = 4 x 4: a 2 x 8 tile measured no
 * faster (Q_NT_MAX=8 to try again; about 6% faster single-threaded with the
 * data in L3), and neither did 2 x 8 tiles in k-blocked panels like the
 * float ones (slightly slower). The 4 x 4 step spends ~40 of its ~150
 * vector uops on weight unpacking (vinserti32x4, xor, permute), which a
 * wider token tile does not remove. */
#ifndef Q_NT_MAX
#define Q_NT_MAX 4
#endif
#define DEFINE_MM_Q(NAME, TILE)                                                       \
    AI void rows_##NAME(const sp_mm *m, int64_t r, const int RR) {                    \
        int32_t t = 0;                                                                \
        if (Q_NT_MAX >= 8 && RR <= 2)                                                 \
            for (; t + 8 <= m->n; t += 8) TILE(m, r, t, RR, 8);                       \
        for (; t + 4 <= m->n; t += 4) TILE(m, r, t, RR, 4);                           \
        for (; t + 2 <= m->n; t += 2) TILE(m, r, t, RR, 2);                           \
        for (; t < m->n; t++) TILE(m, r, t, RR, 1);                                   \
    }                                                                                 \
    static void NAME(const sp_mm *m, int64_t r0, int64_t r1) {                       \
        int64_t r = r0;                                                               \
        if (Q_NT_MAX >= 8 && m->n >= 8)                                               \
            for (; r + 2 <= r1; r += 2) rows_##NAME(m, r, 2);                         \
        for (; r + 4 <= r1; r += 4) rows_##NAME(m, r, 4);                             \
        for (; r < r1; r++) rows_##NAME(m, r, 1);                                     \
    }

DEFINE_MM_Q(mm_q4_0, tile_q4_0)
DEFINE_MM_Q(mm_q8_0, tile_q8_0)

/* ---- Q8_0 / Q4_0 over packed weights (ops.h): lanes = 16 rows ----
 *
 * Per block, the 16 rows' quants are 8 vectors of 16 x 4 bytes (Q4_0: 4
 * vectors, each giving a low- and a high-nibble vector), unpacked once per
 * block and token tile; per token, 8 dpbusd against broadcast 4-byte groups
 * of the activation block, started from its whole correction (-128 or -8
 * times its sum, so the block dot is exact), then the scalar reference's
 * float step on 16 lanes: acc += float(dot) * (d_w * d_x). No reduction
 * across lanes, and blocks are added in order, so every output is
 * bit-identical to mm_q8_0_ref / mm_q4_0_ref. Tokens go in tiles of up to
 * 16 (one accumulator register each); the weights stream once per group
 * for the first tile (software prefetch ahead in the one linear stream a
 * row range is, see pk_prefetch) and come from L1/L2 for the others. */
#ifndef PK_PF_BYTES
#define PK_PF_BYTES 2048
#endif
#ifndef PK_PF_BYTES_N
#define PK_PF_BYTES_N 8192
#endif

/* Prefetch of a packed unit's line, for a token tile of NT. One token
 * (decode) streams at the memory bound with prefetches to L1 2 KiB ahead;
 * a tile of several tokens spends ~8x longer per byte, and there L1
 * prefetches that close arrive late while farther ones overflow L1's miss
 * buffers: prefetches to L2, 8 KiB ahead. matmul_bench, weights streamed
 * from memory at n = 8 (one thread, loaded machine): Q8_0 72 -> 133, Q4_0
 * 126 -> 154, Q4_K 100 -> 153 GMAC/s; decode kept on the first form. */
AI void pk_prefetch(const uint8_t *p, const int NT) {
    if (NT == 1) _mm_prefetch((const char *)(p + PK_PF_BYTES), _MM_HINT_T0);
    else _mm_prefetch((const char *)(p + PK_PF_BYTES_N), _MM_HINT_T1);
}

/* acc += dpbusd(w, the 4 bytes at p broadcast): the broadcast embedded in
 * the instruction ({1to16}), which compilers do not form from set1. */
AI __m512i dpbusd_b(__m512i acc, __m512i w, const void *p) {
#ifdef PK_NO_EMBEDDED_BCAST
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(*(const int32_t *)p));
#else
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
#endif
}

AI void pk_unpack(const uint8_t *q, const bool q4, __m512i w[8]) {
    if (q4) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        UNROLL for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_load_si512(q + 64 * j);
            w[j] = _mm512_and_si512(v, m4);                           /* elements 4j.. */
            w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4); /* elements 16+4j.. */
        }
    } else {
        UNROLL for (int j = 0; j < 8; j++) w[j] = _mm512_load_si512(q + 64 * j);
    }
}

AI void pk_tile(const sp_mm *m, int64_t g, int32_t t0, const int NT, const bool q4, bool pf,
                __mmask16 live) {
    const int64_t k = m->k, nb = k / SP_QK;
    const size_t qb = q4 ? 256 : 512, us = 2 * qb + 64;
    const uint8_t *grp = m->w + g * m->w_stride;
    __m512 acc[16];
    const uint8_t *xs[16];
    UNROLL for (int t = 0; t < NT; t++) {
        xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
        acc[t] = _mm512_setzero_ps();
    }
    const float *xd0 = sp_act_d(xs[0], k);
    const int32_t *xc0 = sp_act_corr(xs[0], k);
    const int64_t dd = (const uint8_t *)xd0 - xs[0], dc = (const uint8_t *)xc0 - xs[0];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *unit = grp + (size_t)(b >> 1) * us;
        if (pf && !(b & 1))
            for (size_t o = 0; o < us; o += 64) pk_prefetch(unit + o, NT);
        __m512i w[8];
        pk_unpack(unit + (size_t)(b & 1) * qb, q4, w);
        const __m512 wd = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(unit + 2 * qb + 32 * (b & 1))));
        UNROLL for (int t = 0; t < NT; t++) {
            const uint8_t *xr = xs[t];
            const int32_t *xq = (const int32_t *)(xr + 32 * b);
            __m512i dot = _mm512_set1_epi32(((const int32_t *)(xr + dc))[b]);
            UNROLL for (int j = 0; j < 8; j++) dot = dpbusd_b(dot, w[j], xq + j);
            const __m512 s = _mm512_mul_ps(wd, _mm512_set1_ps(((const float *)(xr + dd))[b]));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(dot), s));
        }
    }
    UNROLL for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(m->y + (t0 + t) * m->ld_y + g * SP_PACK_ROWS, live, acc[t]);
}

/* The driver of every packed kernel: for each 16-row group g overlapping
 * rows [r0, r1) (`live` masks the group's rows in range), the tokens in
 * tiles of 16 (when nt16), 8, 4, 2 and 1, each through TILE(nt), a macro
 * that sees g, t (the tile's first token), t_first (true for the first
 * tile of a token block: it prefetches the weights) and live. A macro
 * rather than a function taking the tile function, so that every tile
 * width stays a compile-time constant inside the (always-inlined) tile
 * kernels.
 *
 * Large batches (prefill) are blocked for the caches: the groups go in
 * panels of about PK_W_BUDGET bytes of weights and, within a panel, the
 * tokens in blocks of about PK_X_BUDGET bytes of activations (a multiple
 * of 16 tokens), so that a block's activation rows stay in L2 while the
 * panel's groups read them, and the panel's weights stay in L2 while the
 * blocks read them. Without it every 16-row group streamed all n
 * activation rows from L3 (512 tokens of a 2048-wide Q4_K input: 1.3 MB
 * per group). Up to one block of tokens the order is the unblocked one;
 * each output is computed by the same tile code whatever the blocking, so
 * the results are bit-identical to it. */
#ifndef PK_W_BUDGET
#define PK_W_BUDGET (256 * 1024)
#endif
#ifndef PK_X_BUDGET
#define PK_X_BUDGET (256 * 1024)
#endif
#define PK_FOR_TILES(m, r0, r1, nt16, TILE)                                                     \
    {                                                                                           \
        const int64_t g_lo = (r0) / SP_PACK_ROWS, g_hi = ((r1) + SP_PACK_ROWS - 1) / SP_PACK_ROWS; \
        int64_t gp = (int64_t)(PK_W_BUDGET / (m)->w_stride);                                   \
        gp = gp < 1 ? 1 : gp;                                                                   \
        int32_t tbs = (int32_t)(PK_X_BUDGET / (m)->x_stride) / 16 * 16;                        \
        tbs = tbs < 16 ? 16 : tbs;                                                              \
        if ((m)->n <= tbs) gp = g_hi - g_lo; /* one token block: no panels */                   \
        for (int64_t g0 = g_lo; g0 < g_hi; g0 += gp)                                            \
            for (int32_t tb = 0; tb < (m)->n; tb += tbs) {                                      \
                const int32_t te = (m)->n - tb > tbs ? tb + tbs : (m)->n;                       \
                for (int64_t g = g0; g < g_hi && g < g0 + gp; g++) {                            \
                    const int64_t lo = (r0) > g * SP_PACK_ROWS ? (r0) - g * SP_PACK_ROWS : 0;  \
                    const int64_t hi = (r1) < (g + 1) * SP_PACK_ROWS ? (r1) - g * SP_PACK_ROWS : SP_PACK_ROWS; \
                    const __mmask16 live = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1)); \
                    int32_t t = tb;                                                             \
                    if (nt16)                                                                   \
                        for (; t + 16 <= te; t += 16) TILE(16);                                 \
                    for (; t + 8 <= te; t += 8) TILE(8);                                        \
                    for (; t + 4 <= te; t += 4) TILE(4);                                        \
                    for (; t + 2 <= te; t += 2) TILE(2);                                        \
                    for (; t < te; t++) TILE(1);                                                \
                }                                                                               \
            }                                                                                   \
    }

/* Largest token tile of the Q8_0, Q4_0 and 32-block kernels (Q4_1, Q5_0,
 * Q5_1, IQ4_NL, MXFP4; 16 or 8): 8, as PK_K_NT_MAX. On Zen 5, A/B in one
 * run, 512-token prefill / 16-token forward: l1b-q8_0 343-350 -> 389-394
 * tok/s / 57-59 -> 50-53 ms; Q4_1 318-355 -> 372-380 / 72-74 -> 50-52;
 * Q5_0 370-379 -> 395-397 / 51-53 -> 49-50. */
#ifndef PK_NT_MAX
#define PK_NT_MAX 8
#endif
static void mm_q8_0_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define Q8_TILE(nt) pk_tile(m, g, t, nt, false, t == tb, live)
    PK_FOR_TILES(m, r0, r1, PK_NT_MAX >= 16, Q8_TILE)
#undef Q8_TILE
}
static void mm_q4_0_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define Q4_TILE(nt) pk_tile(m, g, t, nt, true, t == tb, live)
    PK_FOR_TILES(m, r0, r1, PK_NT_MAX >= 16, Q4_TILE)
#undef Q4_TILE
}

/* Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 over packed weights (ops.h): per block, the 16
 * rows' quants become 8 vectors of unsigned bytes u (chunk c: elements
 * 4c..4c+3 of each row): nibbles, plus 16 under the fifth-bit masks (Q5_*),
 * or looked up in the IQ4_NL / MXFP4 table plus 128 (vpshufb: a nibble index stays
 * inside its 128-bit lane). Per token 8 dpbusd against broadcast 4-byte
 * groups, started from -off * sum(x) (off = 16 for Q5_0, 128 for IQ4_NL and MXFP4,
 * else 0), give sumi = sum(q x) exactly; then mm_q32_ref's float step on
 * 16 lanes: v = (d_w d_x) sumi, v += m_w s_x in the lanes whose m_w != 0,
 * y += v, blocks in order: bit-identical to the scalar reference. */
AI void pk32_tile(const sp_mm *m, int64_t g, int32_t t0, const int NT, const sp_ggml_type ty, bool pf,
                  __mmask16 live) {
    const bool q5 = ty == SP_GGML_Q5_0 || ty == SP_GGML_Q5_1, hm = ty == SP_GGML_Q4_1 || ty == SP_GGML_Q5_1;
    const bool mx = ty == SP_GGML_MXFP4, nl = ty == SP_GGML_IQ4_NL || mx;
    const int32_t off = ty == SP_GGML_Q5_0 ? 16 : nl ? 128 : 0;
    const size_t od = 512 + (q5 ? 128 : 0), us = mx ? 640 : od + (hm ? 128 : 64);
    const int64_t k = m->k, nb = k / SP_QK;
    const uint8_t *grp = m->w + g * m->w_stride;
    const __m512i m4 = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16);
    const int8_t *values = mx ? sp_mxfp4_values : sp_iq4nl_values;
    const __m512i tab = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)values)),
                                         _mm512_set1_epi8(-128)); /* table + 128 as unsigned bytes */
    __m512 acc[16];
    const uint8_t *xs[16];
    UNROLL for (int t = 0; t < NT; t++) {
        xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
        acc[t] = _mm512_setzero_ps();
    }
    const int64_t dd = (const uint8_t *)sp_act_d(xs[0], k) - xs[0];
    const int64_t dsum = (const uint8_t *)sp_act_sum(xs[0], k) - xs[0];
    const int64_t ds = (const uint8_t *)sp_act_s(xs[0], k) - xs[0];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *unit = grp + (size_t)(b >> 1) * us;
        const size_t c = (size_t)(b & 1);
        if (pf && !c)
            for (size_t o = 0; o < us; o += 64) pk_prefetch(unit + o, q5 ? 2 : NT);
        __m512i w[8];
        UNROLL for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_load_si512(unit + 256 * c + 64 * j);
            w[j] = _mm512_and_si512(v, m4);
            w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        if (q5)
            UNROLL for (int j = 0; j < 8; j++) {
                __mmask64 h;
                memcpy(&h, unit + 512 + 64 * c + 8 * j, 8);
                w[j] = _mm512_mask_add_epi8(w[j], h, w[j], c16);
            }
        if (nl)
            UNROLL for (int j = 0; j < 8; j++) w[j] = _mm512_shuffle_epi8(tab, w[j]);
        const __m512 wd = mx ? _mm512_load_ps(unit + od + 64 * c)
                             : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(unit + od + 32 * c)));
        __m512 wm = _mm512_setzero_ps();
        __mmask16 mlive = 0;
        if (hm) {
            wm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(unit + od + 64 + 32 * c)));
            mlive = _mm512_cmp_ps_mask(wm, _mm512_setzero_ps(), _CMP_NEQ_UQ);
        }
        UNROLL for (int t = 0; t < NT; t++) {
            const uint8_t *xr = xs[t];
            const int32_t *xq = (const int32_t *)(xr + 32 * b);
            __m512i dot = off ? _mm512_set1_epi32(-off * ((const int32_t *)(xr + dsum))[b]) : _mm512_setzero_si512();
            UNROLL for (int j = 0; j < 8; j++) dot = dpbusd_b(dot, w[j], xq + j);
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(wd, _mm512_set1_ps(((const float *)(xr + dd))[b])), _mm512_cvtepi32_ps(dot));
            if (hm) v = _mm512_mask_add_ps(v, mlive, v, _mm512_mul_ps(wm, _mm512_set1_ps(((const float *)(xr + ds))[b])));
            acc[t] = _mm512_add_ps(acc[t], v);
        }
    }
    UNROLL for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(m->y + (t0 + t) * m->ld_y + g * SP_PACK_ROWS, live, acc[t]);
}

#define PK32_TILE_Q41(nt) pk32_tile(m, g, t, nt, SP_GGML_Q4_1, t == tb, live)
#define PK32_TILE_Q50(nt) pk32_tile(m, g, t, nt, SP_GGML_Q5_0, t == tb, live)
#define PK32_TILE_Q51(nt) pk32_tile(m, g, t, nt, SP_GGML_Q5_1, t == tb, live)
#define PK32_TILE_NL(nt) pk32_tile(m, g, t, nt, SP_GGML_IQ4_NL, t == tb, live)
#define PK32_TILE_MX(nt) pk32_tile(m, g, t, nt, SP_GGML_MXFP4, t == tb, live)
static void mm_q4_1_pk(const sp_mm *m, int64_t r0, int64_t r1) { PK_FOR_TILES(m, r0, r1, PK_NT_MAX >= 16, PK32_TILE_Q41) }
static void mm_q5_0_pk(const sp_mm *m, int64_t r0, int64_t r1) { PK_FOR_TILES(m, r0, r1, PK_NT_MAX >= 16, PK32_TILE_Q50) }
static void mm_q5_1_pk(const sp_mm *m, int64_t r0, int64_t r1) { PK_FOR_TILES(m, r0, r1, PK_NT_MAX >= 16, PK32_TILE_Q51) }
static void mm_iq4_nl_pk(const sp_mm *m, int64_t r0, int64_t r1) { PK_FOR_TILES(m, r0, r1, PK_NT_MAX >= 16, PK32_TILE_NL) }
static void mm_mxfp4_pk(const sp_mm *m, int64_t r0, int64_t r1) { PK_FOR_TILES(m, r0, r1, PK_NT_MAX >= 16, PK32_TILE_MX) }
#undef PK32_TILE_Q41
#undef PK32_TILE_Q50
#undef PK32_TILE_Q51
#undef PK32_TILE_NL
#undef PK32_TILE_MX

/* The start of a packed K-quant tile: the token rows' activations, zeroed
 * outputs; returns the offset at which an activation row keeps its
 * per-super-block d. */
AI int64_t pk_k_begin(const sp_mm *m, int32_t t0, const int NT, const uint8_t **xs, __m512 *y) {
    UNROLL for (int t = 0; t < NT; t++) {
        xs[t] = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
        y[t] = _mm512_setzero_ps();
    }
    return (const uint8_t *)sp_actk_d(xs[0], m->k) - xs[0];
}

/* Q4_K and Q5_K over packed weights (ops.h): per super-block and token
 * tile, the 8 sub-blocks of 32 go one at a time: 8 weight vectors (one
 * nibble half of 8 chunks; Q5_K adds 16 under its fifth-bit masks),
 * the 16 rows' scales widened to int32; per token 8 dpbusd give the
 * sub-block dots of 16 rows, times the scales into sumi (vpmulld, exact);
 * the mins enter through 4 dpwssd of the rows' (min, min) int16 pairs with
 * the activation's pair sums. Then mm_k_ref's float expression on 16 lanes:
 * y += (d_x d) sumi - (d_x dmin) summ, super-blocks in order: bit-identical
 * to the scalar reference. Q5 selects Q5_K's unit (2880 bytes: the masks
 * at 2048, the rest 512 on). */
#define PK4K_UNIT 2368
#define PK5K_UNIT 2880
/* Largest token tile of the K-quant kernels (16 or 8): 8, since a 16-token
 * tile's accumulators (32 vectors with the sums) spill. On Zen 5 (2 threads,
 * l1b-q4_K_M, bench-forward, A/B in one run): 512-token prefill 358 -> 425-431
 * tok/s, a 16-token forward 65 -> 49-50 ms. */
#ifndef PK_K_NT_MAX
#define PK_K_NT_MAX 8
#endif

AI void pk45k_tile(const sp_mm *m, int64_t g, int32_t t0, const int NT, bool pf, __mmask16 live, const bool q5) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const size_t us = q5 ? PK5K_UNIT : PK4K_UNIT, o = q5 ? 512 : 0; /* o: offset of the fields after the quants */
    const uint8_t *grp = m->w + g * m->w_stride;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const uint8_t *xs[16];
    __m512 y[16];
    const int64_t dd = pk_k_begin(m, t0, NT, xs, y);
    const int64_t dp = (const uint8_t *)sp_actk_pairs(xs[0], k) - xs[0];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *unit = grp + (size_t)b * us;
        if (pf)
            for (size_t c = 0; c < us; c += 64) pk_prefetch(unit + c, q5 ? 2 : NT);
        __m512i sumi[16];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
        UNROLL for (int s8 = 0; s8 < 8; s8++) {
            const uint8_t *q = unit + 512 * (s8 >> 1);
            __m512i w[8];
            if (s8 & 1) {
                UNROLL for (int j = 0; j < 8; j++) w[j] = _mm512_and_si512(_mm512_srli_epi16(_mm512_load_si512(q + 64 * j), 4), m4);
            } else {
                UNROLL for (int j = 0; j < 8; j++) w[j] = _mm512_and_si512(_mm512_load_si512(q + 64 * j), m4);
            }
            if (q5)
                UNROLL for (int j = 0; j < 8; j++) { /* + 16 where the fifth bit is set */
                    __mmask64 h;
                    memcpy(&h, unit + 2048 + 64 * s8 + 8 * j, 8);
                    w[j] = _mm512_mask_add_epi8(w[j], h, w[j], m10);
                }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(unit + o + 2048 + 16 * s8)));
            UNROLL for (int t = 0; t < NT; t++) {
                const int32_t *xq = (const int32_t *)(xs[t] + 256 * b + 32 * s8);
                __m512i dot = dpbusd_b(_mm512_setzero_si512(), w[0], xq);
                UNROLL for (int j = 1; j < 8; j++) dot = dpbusd_b(dot, w[j], xq + j);
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(dot, sc));
            }
        }
        __m512i mn[4];
        UNROLL for (int p = 0; p < 4; p++)
            mn[p] = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(unit + o + 2176 + 32 * p)));
        const __m512 wd = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(unit + o + 2304)));
        const __m512 wm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(unit + o + 2336)));
        UNROLL for (int t = 0; t < NT; t++) {
            const int32_t *pr = (const int32_t *)(xs[t] + dp) + 4 * b;
            __m512i summ = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn[0], _mm512_set1_epi32(pr[0]));
            UNROLL for (int p = 1; p < 4; p++) summ = _mm512_dpwssd_epi32(summ, mn[p], _mm512_set1_epi32(pr[p]));
            const __m512 xd = _mm512_set1_ps(((const float *)(xs[t] + dd))[b]);
            const __m512 a = _mm512_mul_ps(_mm512_mul_ps(xd, wd), _mm512_cvtepi32_ps(sumi[t]));
            const __m512 c = _mm512_mul_ps(_mm512_mul_ps(xd, wm), _mm512_cvtepi32_ps(summ));
            y[t] = _mm512_add_ps(y[t], _mm512_sub_ps(a, c));
        }
    }
    UNROLL for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(m->y + (t0 + t) * m->ld_y + g * SP_PACK_ROWS, live, y[t]);
}

/* The float step of a packed K-quant without mins (IQ4_XS, Q6_K), 16 rows
 * at once: y[t] += (d_x d_w) float(sumi[t]), mm_k_ref's expression with
 * dmin = 0; d16 holds the rows' f16 d, dd is where the activation rows keep
 * their per-super-block d. */
AI void pk_nomin_step(__m512 *y, const __m512i *sumi, const uint8_t *const *xs, int64_t dd, int64_t b,
                      const uint8_t *d16, const int NT) {
    const __m512 wd = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)d16));
    UNROLL for (int t = 0; t < NT; t++) {
        const __m512 xd = _mm512_set1_ps(((const float *)(xs[t] + dd))[b]);
        y[t] = _mm512_add_ps(y[t], _mm512_mul_ps(_mm512_mul_ps(xd, wd), _mm512_cvtepi32_ps(sumi[t])));
    }
}

/* IQ4_XS over packed weights (ops.h): per super-block and token tile, the
 * 8 sub-blocks of 32 go one at a time: 8 vectors of unsigned bytes u = table
 * value + 128 (vpshufb of the nibbles), the rows' signed scales widened to
 * int32; per token 8 dpbusd give sum(u x) per sub-block, times the scale
 * into sumi (vpmulld), which starts at -128 sum_s scale_s sum_s(x) (4
 * dpwssd of the rows' scale pairs times -128 with the activation's pair
 * sums), so sumi is mm_k_ref's integer exactly. Float step: y += (d_x d)
 * sumi; mm_k_ref also subtracts (d_x * 0) * 0, a zero that cannot change y
 * (as for Q6_K below), so the outputs are its bits. */
#define PKXS_UNIT 2240

AI void pkxs_tile(const sp_mm *m, int64_t g, int32_t t0, const int NT, bool pf, __mmask16 live) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const uint8_t *grp = m->w + g * m->w_stride;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i tab = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)sp_iq4nl_values)),
                                         _mm512_set1_epi8(-128)); /* table + 128 as unsigned bytes */
    const uint8_t *xs[16];
    __m512 y[16];
    const int64_t dd = pk_k_begin(m, t0, NT, xs, y);
    const int64_t dp = (const uint8_t *)sp_actk_pairs(xs[0], k) - xs[0];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *unit = grp + (size_t)b * PKXS_UNIT;
        if (pf)
            for (int o = 0; o < PKXS_UNIT; o += 64) pk_prefetch(unit + o, NT);
        __m512i sc2[4], sumi[16];
        UNROLL for (int p = 0; p < 4; p++) /* lane i: int16 scales of sub-blocks 2p, 2p+1 */
            sc2[p] = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)(unit + 2048 + 32 * p)));
        UNROLL for (int t = 0; t < NT; t++) {
            const int32_t *pr = (const int32_t *)(xs[t] + dp) + 4 * b;
            __m512i c = _mm512_setzero_si512();
            UNROLL for (int p = 0; p < 4; p++)
                c = _mm512_dpwssd_epi32(c, _mm512_mullo_epi16(sc2[p], _mm512_set1_epi16(-128)), _mm512_set1_epi32(pr[p]));
            sumi[t] = c;
        }
        UNROLL for (int s8 = 0; s8 < 8; s8++) {
            const uint8_t *q = unit + 256 * s8;
            __m512i w[8];
            UNROLL for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_load_si512(q + 64 * j);
                w[j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4));
                w[4 + j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
            const __m512i sp = sc2[s8 >> 1];
            const __m512i sc = (s8 & 1) ? _mm512_srai_epi32(sp, 16) : _mm512_srai_epi32(_mm512_slli_epi32(sp, 16), 16);
            UNROLL for (int t = 0; t < NT; t++) {
                const int32_t *xq = (const int32_t *)(xs[t] + 256 * b + 32 * s8);
                __m512i dot = dpbusd_b(_mm512_setzero_si512(), w[0], xq);
                UNROLL for (int j = 1; j < 8; j++) dot = dpbusd_b(dot, w[j], xq + j);
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(dot, sc));
            }
        }
        pk_nomin_step(y, sumi, xs, dd, b, unit + 2176, NT);
    }
    UNROLL for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(m->y + (t0 + t) * m->ld_y + g * SP_PACK_ROWS, live, y[t]);
}

static void mm_iq4_xs_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define XS_TILE(nt) pkxs_tile(m, g, t, nt, t == tb, live)
    PK_FOR_TILES(m, r0, r1, PK_K_NT_MAX >= 16, XS_TILE)
#undef XS_TILE
}

/* Q3_K and Q2_K over packed weights (ops.h): per super-block and token
 * tile, the 8 runs of 32 elements (h, j) are unpacked once into 8 vectors
 * of 2-bit values (bits 2j of the qs chunks); Q3_K subtracts 4 under the
 * masks (signed values -4..3, taken against the activation bytes q + 128
 * with sumi starting at the rows' nc, as Q6_K), Q2_K keeps them unsigned
 * (against the signed activation bytes, broadcast inside dpbusd). Per token
 * 2 x 4 dpbusd give the two 16-element sub-block dots of 16 rows, each times
 * its scale (vpmulld) into sumi; Q2_K's mins enter through 8 dpwssd of the
 * rows' (min, min) int16 pairs with the activation's 16-sum pairs. Then
 * mm_k_ref's float expression on 16 lanes (for Q3_K the (d_x * 0) * 0 term
 * cannot change y, as for Q6_K): bit-identical to the scalar reference. */
#define PK3K_UNIT 1920
#define PK2K_UNIT 1344

AI void pk23k_tile(const sp_mm *m, int64_t g, int32_t t0, const int NT, bool pf, __mmask16 live, const bool q3) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const size_t us = q3 ? PK3K_UNIT : PK2K_UNIT;
    const uint8_t *grp = m->w + g * m->w_stride;
    const __m512i m3 = _mm512_set1_epi8(3), c4 = _mm512_set1_epi8(4), lo4 = _mm512_set1_epi32(0xF);
    const uint8_t *xs[16];
    __m512 y[16];
    const int64_t dd = pk_k_begin(m, t0, NT, xs, y);
    const int64_t du = q3 ? sp_actk_u8(xs[0], k) - xs[0] : 0;
    const int64_t dp = q3 ? 0 : (const uint8_t *)sp_actk_pairs16(xs[0], k) - xs[0];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *unit = grp + (size_t)b * us;
        if (pf)
            for (size_t o = 0; o < us; o += 64) pk_prefetch(unit + o, NT);
        __m512i sumi[16], summ[16];
        if (q3) {
            const __m512i nc = _mm512_load_si512(unit + 1792);
            UNROLL for (int t = 0; t < NT; t++) sumi[t] = nc;
        } else {
            UNROLL for (int t = 0; t < NT; t++) {
                const int32_t *pr = (const int32_t *)(xs[t] + dp) + 8 * b;
                __m512i c = _mm512_setzero_si512();
                UNROLL for (int p = 0; p < 8; p++) {
                    const __m512i mp = _mm512_srli_epi16(_mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(unit + 1024 + 32 * p))), 4);
                    c = _mm512_dpwssd_epi32(c, mp, _mm512_set1_epi32(pr[p]));
                }
                summ[t] = c;
                sumi[t] = _mm512_setzero_si512();
            }
        }
        for (int hj = 0; hj < 8; hj++) {
            const int h = hj >> 2, j = hj & 3;
            const __m128i sh = _mm_cvtsi32_si128(2 * j);
            __m512i w[8];
            UNROLL for (int c = 0; c < 8; c++) {
                w[c] = _mm512_and_si512(_mm512_srl_epi16(_mm512_load_si512(unit + 64 * (8 * h + c)), sh), m3);
                if (q3) {
                    __mmask64 lowered;
                    memcpy(&lowered, unit + 1024 + 8 * (32 * h + 8 * j + c), 8);
                    w[c] = _mm512_mask_sub_epi8(w[c], lowered, w[c], c4);
                }
            }
            __m512i sa, sb;
            if (q3) {
                sa = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(unit + 1536 + 16 * (2 * hj))));
                sb = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(unit + 1536 + 16 * (2 * hj + 1))));
            } else { /* lane i: the scale bytes of sub-blocks 2hj, 2hj+1 as int16 halves; scales: low nibbles */
                const __m512i sp = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(unit + 1024 + 32 * hj)));
                sa = _mm512_and_si512(sp, lo4);
                sb = _mm512_and_si512(_mm512_srli_epi32(sp, 16), lo4);
            }
            UNROLL for (int t = 0; t < NT; t++) {
                __m512i da, db;
                if (q3) {
                    const int32_t *xu = (const int32_t *)(xs[t] + du + 256 * b + 32 * hj);
                    da = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(xu[0]), w[0]);
                    db = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(xu[4]), w[4]);
                    UNROLL for (int c = 1; c < 4; c++) {
                        da = _mm512_dpbusd_epi32(da, _mm512_set1_epi32(xu[c]), w[c]);
                        db = _mm512_dpbusd_epi32(db, _mm512_set1_epi32(xu[4 + c]), w[4 + c]);
                    }
                } else {
                    const int32_t *xq = (const int32_t *)(xs[t] + 256 * b + 32 * hj);
                    da = dpbusd_b(_mm512_setzero_si512(), w[0], xq);
                    db = dpbusd_b(_mm512_setzero_si512(), w[4], xq + 4);
                    UNROLL for (int c = 1; c < 4; c++) {
                        da = dpbusd_b(da, w[c], xq + c);
                        db = dpbusd_b(db, w[4 + c], xq + 4 + c);
                    }
                }
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(da, sa), _mm512_mullo_epi32(db, sb)));
            }
        }
        const __m512 wd = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(unit + (q3 ? 1856 : 1280))));
        const __m512 wm = q3 ? _mm512_setzero_ps() : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(unit + 1312)));
        UNROLL for (int t = 0; t < NT; t++) {
            const __m512 xd = _mm512_set1_ps(((const float *)(xs[t] + dd))[b]);
            const __m512 a = _mm512_mul_ps(_mm512_mul_ps(xd, wd), _mm512_cvtepi32_ps(sumi[t]));
            if (q3) {
                y[t] = _mm512_add_ps(y[t], a);
            } else {
                const __m512 c = _mm512_mul_ps(_mm512_mul_ps(xd, wm), _mm512_cvtepi32_ps(summ[t]));
                y[t] = _mm512_add_ps(y[t], _mm512_sub_ps(a, c));
            }
        }
    }
    UNROLL for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(m->y + (t0 + t) * m->ld_y + g * SP_PACK_ROWS, live, y[t]);
}

static void mm_q3_K_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define Q3K_TILE(nt) pk23k_tile(m, g, t, nt, t == tb, live, true)
    PK_FOR_TILES(m, r0, r1, PK_K_NT_MAX >= 16, Q3K_TILE)
#undef Q3K_TILE
}

static void mm_q2_K_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define Q2K_TILE(nt) pk23k_tile(m, g, t, nt, t == tb, live, false)
    PK_FOR_TILES(m, r0, r1, PK_K_NT_MAX >= 16, Q2K_TILE)
#undef Q2K_TILE
}

/* The unsigned 6-bit weights (ql nibble | qh bits << 4, 0..63) of run j of
 * half h of a packed Q6_K unit: 8 vectors of 64 bytes, one per 4-column
 * step of the 32-element run (pk6k_tile subtracts 32; pk6k_tile1 keeps them
 * unsigned). */
AI void pk6k_unpack(const uint8_t *unit, int h, int j, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const uint8_t *ql = unit + 64 * (16 * h + 8 * (j & 1)), *qh = unit + 2048 + 64 * 8 * h;
    UNROLL for (int c = 0; c < 8; c++) {
        const __m512i l = _mm512_load_si512(ql + 64 * c), hb = _mm512_load_si512(qh + 64 * c);
        const __m512i lo = _mm512_and_si512(j >= 2 ? _mm512_srli_epi16(l, 4) : l, m4);
        const __m512i hs = j == 0 ? _mm512_slli_epi16(hb, 4) : j == 1 ? _mm512_slli_epi16(hb, 2)
                         : j == 2 ? hb : _mm512_srli_epi16(hb, 2);
        w[c] = _mm512_ternarylogic_epi32(lo, hs, m30, 0xF8); /* lo | (hs & m30) */
    }
}

/* Q6_K over packed weights (ops.h): per super-block, the 8 runs of 32
 * elements (h, j) are unpacked once per token tile into 8 vectors of signed
 * values (ql nibble | qh bits << 4, minus 32); per token 2 x 4 dpbusd of the
 * activation's unsigned bytes (q + 128) give the two 16-element sub-block
 * dots of 16 rows, each times its scale (vpmulld) into sumi, which starts at
 * the rows' nc; sumi is then mm_k_ref's integer exactly. Float step: y +=
 * (d_x d) sumi; mm_k_ref also subtracts (d_x * 0) * 0, a zero that cannot
 * change y (y is never -0, and d_x non-finite makes both sides NaN), so the
 * outputs are its bits. */
#define PK6K_UNIT 3456

AI void pk6k_tile(const sp_mm *m, int64_t g, int32_t t0, const int NT, bool pf, __mmask16 live) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const uint8_t *grp = m->w + g * m->w_stride;
    const __m512i c32 = _mm512_set1_epi8(32);
    const uint8_t *xs[16];
    __m512 y[16];
    const int64_t dd = pk_k_begin(m, t0, NT, xs, y);
    const int64_t du = sp_actk_u8(xs[0], k) - xs[0];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *unit = grp + (size_t)b * PK6K_UNIT;
        if (pf)
            for (int o = 0; o < PK6K_UNIT; o += 64) pk_prefetch(unit + o, 2); /* the far form even for
                * one token: unpacking 6-bit values costs Q6_K decode as much per byte as a tile
                * of several tokens costs the others (forward_cpu_bench, synth-1b Q6_K, k=1:
                * 42.9 -> 30.1 ms; matmul_bench stream 16 -> 28 GB/s) */
        __m512i sumi[16];
        const __m512i nc = _mm512_load_si512(unit + 3328);
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = nc;
        for (int hj = 0; hj < 8; hj++) {
            const int h = hj >> 2, j = hj & 3;
            __m512i w[8];
            pk6k_unpack(unit, h, j, w);
            UNROLL for (int c = 0; c < 8; c++) w[c] = _mm512_sub_epi8(w[c], c32);
            const __m512i sa = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(unit + 3072 + 16 * (2 * hj))));
            const __m512i sb = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(unit + 3072 + 16 * (2 * hj + 1))));
            UNROLL for (int t = 0; t < NT; t++) {
                const int32_t *xu = (const int32_t *)(xs[t] + du + 256 * b + 32 * hj);
                __m512i da = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(xu[0]), w[0]);
                __m512i db = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(xu[4]), w[4]);
                UNROLL for (int c = 1; c < 4; c++) {
                    da = _mm512_dpbusd_epi32(da, _mm512_set1_epi32(xu[c]), w[c]);
                    db = _mm512_dpbusd_epi32(db, _mm512_set1_epi32(xu[4 + c]), w[4 + c]);
                }
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(da, sa), _mm512_mullo_epi32(db, sb)));
            }
        }
        pk_nomin_step(y, sumi, xs, dd, b, unit + 3392, NT);
    }
    UNROLL for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(m->y + (t0 + t) * m->ld_y + g * SP_PACK_ROWS, live, y[t]);
}

/* Q6_K over packed weights for one token (decode): the tile's integers by
 * fewer operations. The weights stay unsigned (ql nibble | qh bits << 4,
 * 0..63) against the activation's signed q (dpbusd with the 4 bytes
 * broadcast in the instruction), and each 16-element dot starts at -32
 * times that sub-block's sum of q (the q8_K bsum), so it is
 * sum((q_w - 32) q_x) exactly: pk6k_tile's sumi with nc's correction
 * already applied, hence the same outputs bit for bit. Saves per run of 32
 * the 8 subtractions of 32 and the 8 broadcasts of unsigned activation
 * bytes. */
AI void pk6k_tile1(const sp_mm *m, int64_t g, int32_t t0, bool pf, __mmask16 live) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const uint8_t *grp = m->w + g * m->w_stride;
    const uint8_t *xs[1];
    __m512 y[1];
    const int64_t dd = pk_k_begin(m, t0, 1, xs, y);
    const int32_t *bsum = sp_actk_bsum(xs[0], k);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *unit = grp + (size_t)b * PK6K_UNIT;
        if (pf)
            for (int o = 0; o < PK6K_UNIT; o += 64) pk_prefetch(unit + o, 2); /* as pk6k_tile */
        __m512i sumi[1] = {_mm512_setzero_si512()};
        const int32_t *xq = (const int32_t *)(xs[0] + 256 * b);
        UNROLL for (int hj = 0; hj < 8; hj++) { /* unrolled: the shifts are constants */
            const int h = hj >> 2, j = hj & 3;
            __m512i w[8];
            pk6k_unpack(unit, h, j, w);
            const __m512i sa = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(unit + 3072 + 16 * (2 * hj))));
            const __m512i sb = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(unit + 3072 + 16 * (2 * hj + 1))));
            const int32_t *xr = xq + 8 * hj;
            __m512i da = _mm512_set1_epi32(-32 * bsum[16 * b + 2 * hj]);
            __m512i db = _mm512_set1_epi32(-32 * bsum[16 * b + 2 * hj + 1]);
            UNROLL for (int c = 0; c < 4; c++) {
                da = dpbusd_b(da, w[c], xr + c);
                db = dpbusd_b(db, w[4 + c], xr + 4 + c);
            }
            sumi[0] = _mm512_add_epi32(sumi[0], _mm512_add_epi32(_mm512_mullo_epi32(da, sa), _mm512_mullo_epi32(db, sb)));
        }
        pk_nomin_step(y, sumi, xs, dd, b, unit + 3392, 1);
    }
    _mm512_mask_storeu_ps(m->y + t0 * m->ld_y + g * SP_PACK_ROWS, live, y[0]);
}

static void mm_q6_K_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define Q6K_TILE(nt) ((nt) == 1 ? pk6k_tile1(m, g, t, t == tb, live) : pk6k_tile(m, g, t, nt, t == tb, live))
    PK_FOR_TILES(m, r0, r1, PK_K_NT_MAX >= 16, Q6K_TILE)
#undef Q6K_TILE
}

static void mm_q4_K_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define Q4K_TILE(nt) pk45k_tile(m, g, t, nt, t == tb, live, false)
    PK_FOR_TILES(m, r0, r1, PK_K_NT_MAX >= 16, Q4K_TILE)
#undef Q4K_TILE
}

static void mm_q5_K_pk(const sp_mm *m, int64_t r0, int64_t r1) {
#define Q5K_TILE(nt) pk45k_tile(m, g, t, nt, t == tb, live, true)
    PK_FOR_TILES(m, r0, r1, PK_K_NT_MAX >= 16, Q5K_TILE)
#undef Q5K_TILE
}

/* ---- attention (see ops.h), bit-identical to the scalar reference ---- */

AI __mmask16 lanes(int32_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

/* sp_reduce16 on one vector, with explicit shuffles (not the compilers'
 * _mm512_reduce_add_ps, whose order is theirs to choose). */
AI float hsum16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 r = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

/* The last two levels of the batched reductions below: q[k]'s 128-bit
 * lane m holds the 4 partial sums q_0..q_3 of vector 4k + m; the result,
 * lane s, is vector s's (q_0 + q_2) + (q_1 + q_3). After the shuffles
 * element 4m + j holds vector m + 4j's sum, hence the final permutation. */
AI __m512 hsum_tail16(const __m512 *q) {
    __m512 r[2];
    for (int j = 0; j < 2; j++)
        r[j] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * j], q[2 * j + 1], 0x44), _mm512_shuffle_ps(q[2 * j], q[2 * j + 1], 0xEE));
    const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], 0x88), _mm512_shuffle_ps(r[0], r[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), f);
}

/* sp_reduce16 of 16 vectors at once, lane s of the result that of a[s]:
 * the same additions (a_i + a_(i+8), then h_i + h_(i+4), then q_0 + q_2 and
 * q_1 + q_3, then their sum), paired across vectors by shuffles. */
AI __m512 hsum16x16(const __m512 *a) {
    __m512 p[8], q[4];
    for (int j = 0; j < 8; j++)
        p[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xEE));
    for (int j = 0; j < 4; j++)
        q[j] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0xDD));
    return hsum_tail16(q);
}

/* ggml's hsum_float_8 of 16 8-lane vectors at once (lane s: a[s]'s
 * (h_0 + h_2) + (h_1 + h_3) with h_j = a_j + a_(j+4)), the same additions. */
AI __m512 hsum8x16(const __m256 *a) {
    __m512 z[8], q[4];
    for (int j = 0; j < 8; j++) z[j] = _mm512_insertf32x8(_mm512_castps256_ps512(a[2 * j]), a[2 * j + 1], 1);
    for (int j = 0; j < 4; j++)
        q[j] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * j], z[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(z[2 * j], z[2 * j + 1], 0xDD));
    return hsum_tail16(q);
}

/* q . k_s in ggml's vec_dot_f32 order (ops.h). */
static void att_scores(const float *q, const float *k, int64_t stride, int32_t n, int32_t hd,
                       float scale, float *out) {
    const int32_t np = hd / 64 * 64;
    for (int32_t s = 0; s < n; s++) {
        const float *ks = k + s * stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t i = 0; i < np; i += 64) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(ks + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(ks + i + 16), a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 32), _mm512_loadu_ps(ks + i + 32), a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 48), _mm512_loadu_ps(ks + i + 48), a3);
        }
        float d = hsum16(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
        const int32_t n8 = np + (hd - np) / 8 * 8;
        for (int32_t i = np; i < n8; i++) d += q[i] * ks[i];
        for (int32_t i = n8; i < hd; i++) d = fmaf(q[i], ks[i], d);
        out[s] = d * scale;
    }
}

/* tinyBLAS's order (ops.h), accumulating. Lane l of acc (the ranks r with
 * r mod 16 == l) is a chain of its own: for a head of 16 NB dims (NB = 1,
 * 2, 4, 8, 16) the lanes are walked LG at a time (LG x NB <= 16
 * accumulators) with their vectors held in registers across all their
 * ranks, each rank's value row read once; other head sizes keep the 16
 * accumulator rows in L1 (up to MIX_HD_MAX dims at once) and walk the
 * ranks in order. Either way each lane adds its ranks in rank order: the
 * same bits. VLOAD(row, d, m) loads 16 values of a value row (its bytes)
 * from dim d, widened to f32 (lanes outside mask m zero). */
enum { MIX_HD_MAX = 256 };
/* x rounded to f16 and back by F16C: round to nearest even, subnormals
 * and overflow as sp_fp32_to_fp16 (the default MXCSR: no DAZ/FTZ). */
AI float round_f16(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
#define MIX_ROW(r) ((const uint8_t *)v + (size_t)(idx ? idx[r] : (r)) * stride)
#define MIX_REG(PR, VLOAD, NB, LG)                                                                \
    for (int l0 = 0; l0 < 16; l0 += (LG)) {                                                       \
        __m512 a[LG][NB];                                                                         \
        _Pragma("GCC unroll 16") for (int j = 0; j < (LG); j++)                                   \
        _Pragma("GCC unroll 16") for (int b = 0; b < (NB); b++)                                   \
            a[j][b] = _mm512_loadu_ps(acc + (l0 + j) * (int64_t)ld + 16 * b);                     \
        for (int32_t base = r0 & ~15; base < r1; base += 16)                                      \
            _Pragma("GCC unroll 16") for (int j = 0; j < (LG); j++) {                             \
                const int32_t r = base + l0 + j;                                                  \
                if (r < r0 || r >= r1) continue;                                                  \
                const float pf = PR;                                                              \
                if (pf == 0.0f) continue;                                                         \
                const __m512 pr = _mm512_set1_ps(pf);                                             \
                const uint8_t *row = MIX_ROW(r);                                                  \
                _Pragma("GCC unroll 16") for (int b = 0; b < (NB); b++)                           \
                    a[j][b] = _mm512_fmadd_ps(VLOAD(row, 16 * b, (__mmask16)0xFFFF), pr, a[j][b]); \
            }                                                                                     \
        _Pragma("GCC unroll 16") for (int j = 0; j < (LG); j++)                                   \
        _Pragma("GCC unroll 16") for (int b = 0; b < (NB); b++)                                   \
            _mm512_storeu_ps(acc + (l0 + j) * (int64_t)ld + 16 * b, a[j][b]);                     \
    }
#define MIX_MEM(PR, VLOAD)                                                                        \
    for (int32_t d0 = 0; d0 < hd; d0 += MIX_HD_MAX) {                                             \
        const int32_t w = hd - d0 < MIX_HD_MAX ? hd - d0 : MIX_HD_MAX, nb = (w + 15) / 16;        \
        __m512 a[16][MIX_HD_MAX / 16];                                                            \
        for (int l = 0; l < 16; l++)                                                              \
            for (int32_t b = 0; b < nb; b++)                                                      \
                a[l][b] = _mm512_maskz_loadu_ps(lanes(w - 16 * b), acc + l * (int64_t)ld + d0 + 16 * b); \
        for (int32_t r = r0; r < r1; r++) {                                                       \
            const float pf = PR;                                                                  \
            if (pf == 0.0f) continue;                                                             \
            const __m512 pr = _mm512_set1_ps(pf);                                                 \
            const uint8_t *row = MIX_ROW(r);                                                      \
            __m512 *ar = a[r & 15];                                                               \
            for (int32_t b = 0; b < nb; b++)                                                      \
                ar[b] = _mm512_fmadd_ps(VLOAD(row, d0 + 16 * b, lanes(w - 16 * b)), pr, ar[b]);   \
        }                                                                                         \
        for (int l = 0; l < 16; l++)                                                              \
            for (int32_t b = 0; b < nb; b++)                                                      \
                _mm512_mask_storeu_ps(acc + l * (int64_t)ld + d0 + 16 * b, lanes(w - 16 * b), a[l][b]); \
    }
#define MIX_ACC_BODY(PR, VLOAD)                                                                   \
    switch (hd) {                                                                                 \
    case 16: MIX_REG(PR, VLOAD, 1, 4) break;                                                      \
    case 32: MIX_REG(PR, VLOAD, 2, 4) break;                                                      \
    case 64: MIX_REG(PR, VLOAD, 4, 4) break;                                                      \
    case 128: MIX_REG(PR, VLOAD, 8, 2) break;                                                     \
    case 256: MIX_REG(PR, VLOAD, 16, 1) break;                                                    \
    default: MIX_MEM(PR, VLOAD) break;                                                            \
    }

#define VLOAD_F32(row, d, m) _mm512_maskz_loadu_ps((m), (const float *)(row) + (d))
#define VLOAD_F16(row, d, m) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((m), (const uint16_t *)(row) + (d)))
/* a Q8_0 head is whole 32-blocks: 16 dims never straddle blocks, m is full */
AI __m512 vload_q8(const uint8_t *row, int32_t d) {
    const sp_block_q8_0 *blk = (const sp_block_q8_0 *)row + d / SP_QK;
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(blk->d)),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk->qs + d % SP_QK)))));
}
#define VLOAD_Q8(row, d, m) vload_q8((row), (d))

static void att_mix_acc_f32(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0, int32_t r1,
                            int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(p[r], VLOAD_F32)
}

/* F16 values, p rounded to f16 (ops.h) */
static void att_mix_acc_f16(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0, int32_t r1,
                            int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(round_f16(p[r]), VLOAD_F16)
}

/* As the F32 mix over the values d * q (one float product each). */
static void att_mix_acc_q8(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0, int32_t r1,
                           int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(p[r], VLOAD_Q8)
}

/* ---- attention over an F16 cache (ops.h), bit-identical to the scalar
 * references in ops.c ---- */

AI __m512 load_h16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

static void att_scores_f16(const void *q, const void *k, size_t stride, int32_t n, int32_t hd, float scale,
                           float *out) {
    const uint16_t *qh = q;
    if (hd % 16) { /* ggml's vec_dot_f16 */
        const int32_t np = hd / 64 * 64;
        for (int32_t s = 0; s < n; s++) {
            const uint16_t *ks = (const uint16_t *)((const uint8_t *)k + (size_t)s * stride);
            __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int32_t i = 0; i < np; i += 64)
                for (int j = 0; j < 4; j++)
                    a[j] = _mm512_fmadd_ps(load_h16(ks + i + 16 * j), load_h16(qh + i + 16 * j), a[j]);
            double d = hsum16(_mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3])));
            for (int32_t i = np; i < hd; i++) d += (double)(sp_fp16_to_fp32(ks[i]) * sp_fp16_to_fp32(qh[i]));
            out[s] = (float)d * scale;
        }
        return;
    }
    enum { QMAX = 512 };
    if (hd <= QMAX) { /* the query widened once; 16 slots at a time, then one by one */
        float qf[QMAX] __attribute__((aligned(64)));
        for (int32_t i = 0; i < hd; i += 16) _mm512_store_ps(qf + i, load_h16(qh + i));
        const __m512 sc = _mm512_set1_ps(scale);
        int32_t s = 0;
        for (; s + 16 <= n; s += 16) {
            const uint8_t *k0 = (const uint8_t *)k + (size_t)s * stride;
            __m512 a[16];
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
            for (int32_t i = 0; i < hd; i += 16) {
                const __m512 qv = _mm512_load_ps(qf + i);
                _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)
                    a[j] = _mm512_fmadd_ps(load_h16((const uint16_t *)(k0 + (size_t)j * stride) + i), qv, a[j]);
            }
            _mm512_storeu_ps(out + s, _mm512_mul_ps(hsum16x16(a), sc));
        }
        for (; s < n; s++) {
            const uint16_t *ks = (const uint16_t *)((const uint8_t *)k + (size_t)s * stride);
            __m512 a = _mm512_setzero_ps();
            for (int32_t i = 0; i < hd; i += 16) a = _mm512_fmadd_ps(load_h16(ks + i), _mm512_load_ps(qf + i), a);
            out[s] = hsum16(a) * scale;
        }
        return;
    }
    for (int32_t s = 0; s < n; s++) {
        const uint16_t *ks = (const uint16_t *)((const uint8_t *)k + (size_t)s * stride);
        __m512 a = _mm512_setzero_ps();
        for (int32_t i = 0; i < hd; i += 16) a = _mm512_fmadd_ps(load_h16(ks + i), load_h16(qh + i), a);
        out[s] = hsum16(a) * scale;
    }
}

/* ---- the widened F16 kernels (ops.h): the F16 kernels' operations on
 * rows converted once ---- */

static void att_widen(const void *src, size_t stride, int32_t n, int32_t w, float *dst) {
    for (int32_t s = 0; s < n; s++) {
        const uint16_t *r = (const uint16_t *)((const uint8_t *)src + (size_t)s * stride);
        float *d = dst + (size_t)s * w;
        int32_t i = 0;
        for (; i + 16 <= w; i += 16) _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + i))));
        if (i < w) {
            const __mmask16 m = lanes(w - i);
            _mm512_mask_storeu_ps(d + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, r + i)));
        }
    }
}

static void att_scores_wide(const float *q, const float *k, int32_t n, int32_t hd, float scale, float *out) {
    const __m512 sc = _mm512_set1_ps(scale);
    int32_t s = 0;
    for (; s + 16 <= n; s += 16) {
        const float *k0 = k + (size_t)s * hd;
        __m512 a[16];
        UNROLL for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
        for (int32_t i = 0; i < hd; i += 16) {
            const __m512 qv = _mm512_loadu_ps(q + i);
            UNROLL for (int j = 0; j < 16; j++) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(k0 + (size_t)j * hd + i), qv, a[j]);
        }
        _mm512_storeu_ps(out + s, _mm512_mul_ps(hsum16x16(a), sc));
    }
    for (; s < n; s++) {
        __m512 a = _mm512_setzero_ps();
        for (int32_t i = 0; i < hd; i += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(k + (size_t)s * hd + i), _mm512_loadu_ps(q + i), a);
        out[s] = hsum16(a) * scale;
    }
}

static void att_mix_acc_wide(const float *p, const int32_t *idx, const void *v, size_t stride, int32_t r0,
                             int32_t r1, int32_t hd, float *acc, int32_t ld) {
    MIX_ACC_BODY(round_f16(p[r]), VLOAD_F32)
}

/* ---- the grouped F16 kernels (ops.h): up to 4 query rows at a time,
 * each key and value vector converted once for all of them ---- */

enum { GRP_ROWS = 4, GRP_QMAX = 512, GRP_PCHUNK = 256 };

/* RG rows' scores over 16 slots from k0: 4 slots x RG rows of
 * accumulators at a time over the head (row j's query widened at qf + j
 * hd), each row's 16 slot vectors then reduced together, as the F16
 * kernel's 16-slot step. */
AI void scores_grp16(const float *qf, const uint8_t *k0, size_t stride, int32_t hd, const int RG, __m512 sc,
                     float *out, size_t out_ld) {
    __m512 st[GRP_ROWS][16];
    for (int g = 0; g < 4; g++) {
        const uint8_t *kg = k0 + (size_t)(4 * g) * stride;
        __m512 a[GRP_ROWS][4];
        UNROLL for (int j = 0; j < RG; j++) UNROLL for (int s = 0; s < 4; s++) a[j][s] = _mm512_setzero_ps();
        for (int32_t i = 0; i < hd; i += 16) {
            __m512 kv[4];
            UNROLL for (int s = 0; s < 4; s++) kv[s] = load_h16((const uint16_t *)(kg + (size_t)s * stride) + i);
            UNROLL for (int j = 0; j < RG; j++) {
                const __m512 qv = _mm512_load_ps(qf + (size_t)j * hd + i);
                UNROLL for (int s = 0; s < 4; s++) a[j][s] = _mm512_fmadd_ps(kv[s], qv, a[j][s]);
            }
        }
        UNROLL for (int j = 0; j < RG; j++) UNROLL for (int s = 0; s < 4; s++) st[j][4 * g + s] = a[j][s];
    }
    UNROLL for (int j = 0; j < RG; j++) _mm512_storeu_ps(out + (size_t)j * out_ld, _mm512_mul_ps(hsum16x16(st[j]), sc));
}

static void att_scores_grp(const void *q, size_t q_stride, int32_t rows, const void *k, size_t stride, int32_t n,
                           int32_t hd, float scale, float *out, size_t out_ld) {
    if (hd > GRP_QMAX) { /* the widened queries would not fit: row by row */
        for (int32_t j = 0; j < rows; j++)
            att_scores_f16((const uint8_t *)q + (size_t)j * q_stride, k, stride, n, hd, scale, out + (size_t)j * out_ld);
        return;
    }
    float qf[GRP_ROWS * GRP_QMAX] __attribute__((aligned(64)));
    const __m512 sc = _mm512_set1_ps(scale);
    for (int32_t j0 = 0; j0 < rows; j0 += GRP_ROWS) {
        const int32_t rg = rows - j0 < GRP_ROWS ? rows - j0 : GRP_ROWS;
        for (int32_t j = 0; j < rg; j++) {
            const uint16_t *qh = (const uint16_t *)((const uint8_t *)q + (size_t)(j0 + j) * q_stride);
            for (int32_t i = 0; i < hd; i += 16) _mm512_store_ps(qf + (size_t)j * hd + i, load_h16(qh + i));
        }
        float *o = out + (size_t)j0 * out_ld;
        int32_t s = 0;
        for (; s + 16 <= n; s += 16) {
            const uint8_t *k0 = (const uint8_t *)k + (size_t)s * stride;
            switch (rg) {
            case 4: scores_grp16(qf, k0, stride, hd, 4, sc, o + s, out_ld); break;
            case 3: scores_grp16(qf, k0, stride, hd, 3, sc, o + s, out_ld); break;
            case 2: scores_grp16(qf, k0, stride, hd, 2, sc, o + s, out_ld); break;
            default: scores_grp16(qf, k0, stride, hd, 1, sc, o + s, out_ld); break;
            }
        }
        for (; s < n; s++) { /* the F16 kernel's slot-by-slot tail */
            const uint16_t *ks = (const uint16_t *)((const uint8_t *)k + (size_t)s * stride);
            for (int32_t j = 0; j < rg; j++) {
                __m512 a = _mm512_setzero_ps();
                for (int32_t i = 0; i < hd; i += 16)
                    a = _mm512_fmadd_ps(load_h16(ks + i), _mm512_load_ps(qf + (size_t)j * hd + i), a);
                o[(size_t)j * out_ld + s] = hsum16(a) * scale;
            }
        }
    }
}

/* RG rows' mixes over dims [d0, d0 + 16 NB) and ranks [r0, r1) (slots):
 * lane by lane (the ranks r = l mod 16, in order), the RG x NB
 * accumulators in registers, each value vector converted once for the RG
 * rows; a row whose probability is 0 leaves its accumulators alone (the
 * F16 kernel skips it). pr: row j's probabilities rounded to f16 at pr +
 * j GRP_PCHUNK, rank r at index r - r0. */
AI void mix_grp_blk(const float *pr, const uint8_t *v, size_t stride, int32_t r0, int32_t r1, int32_t d0, float *acc,
                    size_t acc_stride, int32_t ld, const int RG, const int NB) {
    for (int l = 0; l < 16; l++) {
        int32_t r = (r0 & ~15) + l;
        if (r < r0) r += 16;
        if (r >= r1) continue;
        __m512 a[GRP_ROWS][4];
        UNROLL for (int j = 0; j < RG; j++) UNROLL for (int b = 0; b < NB; b++)
            a[j][b] = _mm512_loadu_ps(acc + (size_t)j * acc_stride + (size_t)l * ld + d0 + 16 * b);
        for (; r < r1; r += 16) {
            const uint16_t *row = (const uint16_t *)(v + (size_t)r * stride) + d0;
            __m512 x[4];
            UNROLL for (int b = 0; b < NB; b++) x[b] = load_h16(row + 16 * b);
            UNROLL for (int j = 0; j < RG; j++) {
                const float pf = pr[j * GRP_PCHUNK + (r - r0)];
                const __mmask16 m = pf != 0.0f ? (__mmask16)0xFFFF : 0;
                const __m512 pv = _mm512_set1_ps(pf);
                UNROLL for (int b = 0; b < NB; b++) a[j][b] = _mm512_mask3_fmadd_ps(x[b], pv, a[j][b], m);
            }
        }
        UNROLL for (int j = 0; j < RG; j++) UNROLL for (int b = 0; b < NB; b++)
            _mm512_storeu_ps(acc + (size_t)j * acc_stride + (size_t)l * ld + d0 + 16 * b, a[j][b]);
    }
}

#define MIX_GRP_NB(RG)                                                                                   \
    switch (nb) {                                                                                        \
    case 4: mix_grp_blk(pr, vb, stride, c0, c1, d0, ag, acc_stride, ld, RG, 4); break;                   \
    case 3: mix_grp_blk(pr, vb, stride, c0, c1, d0, ag, acc_stride, ld, RG, 3); break;                   \
    case 2: mix_grp_blk(pr, vb, stride, c0, c1, d0, ag, acc_stride, ld, RG, 2); break;                   \
    default: mix_grp_blk(pr, vb, stride, c0, c1, d0, ag, acc_stride, ld, RG, 1); break;                  \
    }

static void att_mix_grp(const float *p, size_t p_ld, int32_t rows, const void *v, size_t stride, int32_t r0,
                        int32_t r1, int32_t hd, float *acc, size_t acc_stride, int32_t ld) {
    float pr[GRP_ROWS * GRP_PCHUNK] __attribute__((aligned(64)));
    const uint8_t *vb = v;
    for (int32_t j0 = 0; j0 < rows; j0 += GRP_ROWS) {
        const int32_t rg = rows - j0 < GRP_ROWS ? rows - j0 : GRP_ROWS;
        float *ag = acc + (size_t)j0 * acc_stride;
        for (int32_t c0 = r0; c0 < r1; c0 += GRP_PCHUNK) {
            const int32_t c1 = r1 - c0 < GRP_PCHUNK ? r1 : c0 + GRP_PCHUNK;
            for (int32_t j = 0; j < rg; j++) /* round_f16 of each probability */
                for (int32_t i = 0; i < c1 - c0; i += 16) {
                    const __mmask16 m = lanes(c1 - c0 - i);
                    const __m512 x = _mm512_maskz_loadu_ps(m, p + (size_t)(j0 + j) * p_ld + c0 + i);
                    _mm512_store_ps(pr + j * GRP_PCHUNK + i,
                                    _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
                }
            for (int32_t d0 = 0; d0 < hd; d0 += 64) {
                const int32_t nb = (hd - d0) / 16 < 4 ? (hd - d0) / 16 : 4;
                switch (rg) {
                case 4: MIX_GRP_NB(4) break;
                case 3: MIX_GRP_NB(3) break;
                case 2: MIX_GRP_NB(2) break;
                default: MIX_GRP_NB(1) break;
                }
            }
        }
    }
}
#undef MIX_GRP_NB

/* ---- attention over a Q8_0 cache (ops.h), bit-identical to the scalar
 * references: the int8 products summed exactly in 8 lanes of 4 (maddubs
 * on |k| and sign-moved q, then pairs), per block lane j += fma(d_k d_q,
 * sum_j), the lanes added as hsum_float_8 ---- */

/* One slot's block b: its 8 lanes of 4 int8 products, fma'd by d_k d_q. */
AI __m256 q8_block(const sp_block_q8_0 *kb, __m256i qv, float dq, __m256 a) {
    const __m256i kv = _mm256_loadu_si256((const __m256i *)kb->qs);
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(kv, kv), _mm256_sign_epi8(qv, kv));
    const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(kb->d) * dq), sum, a);
}

static void att_scores_q8(const void *q, const void *k, size_t stride, int32_t n, int32_t hd, float scale,
                          float *out) {
    const sp_block_q8_0 *qb = q;
    const int32_t nb = hd / SP_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    int32_t s0 = 0;
    for (; s0 + 16 <= n; s0 += 16) { /* 16 slots, one batched reduction */
        const uint8_t *k0 = (const uint8_t *)k + (size_t)s0 * stride;
        __m256 a[16];
        UNROLL for (int j = 0; j < 16; j++) a[j] = _mm256_setzero_ps();
        for (int32_t b = 0; b < nb; b++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)qb[b].qs);
            const float dq = _cvtsh_ss(qb[b].d);
            UNROLL for (int j = 0; j < 16; j++)
                a[j] = q8_block((const sp_block_q8_0 *)(k0 + (size_t)j * stride) + b, qv, dq, a[j]);
        }
        _mm512_storeu_ps(out + s0, _mm512_mul_ps(hsum8x16(a), _mm512_set1_ps(scale)));
    }
    for (int32_t s = s0; s < n; s++) {
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
        const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        const __m128 t = _mm_add_ps(h, _mm_movehl_ps(h, h));
        out[s] = _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t))) * scale;
    }
}

/* ---- q8 activations, bit-identical to act_q8_ref in ops.c (finite input
 * only; the caller routes rows holding inf/NaN to the reference) ----
 * max |x| is exact in any order; 127 / amax and x * id are the same scalar
 * IEEE operations (one rounding per lane); roundscale to nearest-even is
 * nearbyintf under the default rounding mode and leaves |v| <= 127, so the
 * conversion is exact; d is rounded to f16 by the same scalar conversion. */
static void act_q8(const float *x, int64_t k, void *dst) {
    int8_t *qs = (int8_t *)dst;
    float *d = (float *)((uint8_t *)dst + k);
    int32_t *sum = (int32_t *)((uint8_t *)dst + k + 4 * (k / SP_QK));
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < k / SP_QK; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * SP_QK), x1 = _mm512_loadu_ps(x + b * SP_QK + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, absmask), _mm512_and_ps(x1, absmask)));
        const float up = amax < 0x1p-64f ? 0x1p64f : 1.0f; /* as act_q8_ref: 127 / amax must not overflow */
        if (up != 1.0f) x0 = _mm512_mul_ps(x0, _mm512_set1_ps(up)), x1 = _mm512_mul_ps(x1, _mm512_set1_ps(up));
        float id = amax != 0 ? 127.0f / (amax * up) : 0.0f;
        __m512i q[2];
        for (int h = 0; h < 2; h++) {
            __m512 v = _mm512_mul_ps(h ? x1 : x0, _mm512_set1_ps(id));
            v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q[h] = _mm512_cvttps_epi32(v);
        }
        _mm_storeu_si128((__m128i *)(qs + b * SP_QK), _mm512_cvtepi32_epi8(q[0]));
        _mm_storeu_si128((__m128i *)(qs + b * SP_QK + 16), _mm512_cvtepi32_epi8(q[1]));
        d[b] = sp_fp16_to_fp32(sp_fp32_to_fp16(amax / 127.0f));
        sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
    }
}

/* The q8_K layout (ops.h), bit-identical to act_q8k in ops.c (a block
 * with an inf or NaN: zeros and d = NAN, as there): max is the first element of largest |x| in
 * index order (the first lane of the first vector holding amax); iscale *
 * (x * up) are the same scalar IEEE products per lane; clamping to
 * [-128, 127] then rounding to nearest-even (cvtps2dq under the default
 * MXCSR) is the scalar clamp-then-magic-number rounding for |v| < 2^22;
 * each 16-sum is exact in int32. */
static void act_q8k(const float *x, int64_t k, void *dst) {
    int8_t *qs = (int8_t *)dst;
    float *d = (float *)((uint8_t *)dst + k);
    int32_t *bsum = (int32_t *)((uint8_t *)dst + k + 4 * (k / SP_QK_K));
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (int64_t b = 0; b < k / SP_QK_K; b++) {
        const float *xb = x + b * SP_QK_K;
        __m512 v[16], m = _mm512_setzero_ps();
        __mmask16 bad = 0;
        UNROLL for (int j = 0; j < 16; j++) {
            v[j] = _mm512_loadu_ps(xb + 16 * j);
            bad |= _mm512_fpclass_ps_mask(v[j], 0x99); /* QNaN, +inf, -inf, SNaN */
            m = _mm512_max_ps(m, _mm512_and_ps(v[j], absmask));
        }
        const float amax = _mm512_reduce_max_ps(m);
        if (bad || amax == 0) {
            memset(qs + b * SP_QK_K, 0, SP_QK_K);
            memset(bsum + b * 16, 0, 16 * sizeof *bsum);
            d[b] = bad ? NAN : 0.0f;
            continue;
        }
        float max = 0;
        for (int j = 0; j < 16; j++) {
            const __mmask16 e = _mm512_cmp_ps_mask(_mm512_and_ps(v[j], absmask), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (e) {
                max = xb[16 * j + __builtin_ctz(e)];
                break;
            }
        }
        const float up = amax < 0x1p-64f ? 0x1p64f : 1.0f; /* ACT_TINY, ACT_UP in ops.c */
        const float iscale = -127.0f / (max * up);
        const __m512 vs = _mm512_set1_ps(iscale), vu = _mm512_set1_ps(up);
        UNROLL for (int j = 0; j < 16; j++) {
            __m512 t = _mm512_mul_ps(vs, _mm512_mul_ps(v[j], vu));
            t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);
            const __m512i q = _mm512_cvtps_epi32(t);
            _mm_storeu_si128((__m128i *)(qs + b * SP_QK_K + 16 * j), _mm512_cvtepi32_epi8(q));
            bsum[b * 16 + j] = _mm512_reduce_add_epi32(q);
        }
        d[b] = 1.0f / iscale / up;
    }
}

/* sp_exp_ggml on 16 lanes: the same operations (scalef is j 2^n rounded
 * once, as the scalar reference's two-step product). */
AI __m512 exp_ggml(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r), r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (!big) return res;
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                            _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, alt);
}

/* sp_softmax (ops.h) on 16-rank groups. */
static void softmax(float *x, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (int64_t g = 0; g < n; g += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, lanes((int32_t)(n - g < 16 ? n - g : 16)), x + g));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)); /* exact in any order */
    double sum = 0;
    for (int64_t g = 0; g < n; g += 16) {
        const __mmask16 k = lanes((int32_t)(n - g < 16 ? n - g : 16));
        const __m512 e = exp_ggml(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, k, x + g), m));
        _mm512_mask_storeu_ps(x + g, k, e);
        sum += (double)hsum16(e);
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (int64_t g = 0; g < n; g += 16) {
        const __mmask16 k = lanes((int32_t)(n - g < 16 ? n - g : 16));
        _mm512_mask_storeu_ps(x + g, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + g), inv));
    }
}

/* sp_swiglu (ops.h): 16-lane groups with exp_ggml, the tail as the scalar
 * reference (expf). */
static void swiglu(float *out, const float *g, const float *u, int64_t n) {
    const int64_t nv = n / 16 * 16;
    for (int64_t i = 0; i < nv; i += 16) {
        const __m512 x = _mm512_loadu_ps(g + i);
        const __m512 e = exp_ggml(_mm512_sub_ps(_mm512_setzero_ps(), x));
        const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
    }
    if (nv < n) sp_swiglu(out + nv, g + nv, u + nv, n - nv);
}

/* Streaming read for the bandwidth probe: four 512-bit accumulators. */
static uint64_t read_sum(const void *p, size_t bytes) {
    const uint8_t *b = p;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 256 <= bytes; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512(b + i));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512(b + i + 64));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512(b + i + 128));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512(b + i + 192));
    }
    /* not _mm512_reduce_add_epi64: GCC's adds signed 64-bit lanes in C,
     * which overflows (undefined behaviour) on a checksum */
    uint64_t lanes[8], sum = 0;
    _mm512_storeu_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    for (int i = 0; i < 8; i++) sum += lanes[i];
    return sum;
}

/* ---- Q4_K and Q6_K against q8_K activations (VNNI) ----
 * Per super-block the 256 weights are unpacked once into four 64-byte
 * vectors of unsigned values in element order (Q4_K: the low and high
 * nibbles of 32 bytes, one per 256-bit half; Q6_K: 4 low bits plus 2 high
 * bits, stored value + 32), with per-lane int16 scale vectors (Q4_K: 6-bit
 * scale per 32 elements; Q6_K: int8 scale per 16). Each token then costs
 * four (maddubs, dpwssd) pairs: maddubs sums element pairs u x (at most
 * 2 * 63 * 128, no saturation) and dpwssd multiplies those by the scales
 * and accumulates, exactly, in int32. The block-sum terms (Q4_K mins, Q6_K
 * offset -32) come from the activation block sums. The integer results are
 * the scalar reference's, and so is the float expression
 * y += (d_x d) sumi - (d_x dmin) summ, block by block: the outputs are
 * bit-identical to mm_k_ref (tests/test_formats.c). */
typedef struct kq512 {
    __m512i u[4], sc[4];
    __m512i cm;  /* Q4_K: per-16 mins as int32 (madd with the block sums) */
    __m512i ca;  /* Q6_K: per-16 -32 * scale as int32 (mullo) */
    float d, dmin;
} kq512;

AI void kq512_q4_K(const sp_block_q4_K *x, kq512 *kb) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i sh = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    UNROLL for (int p = 0; p < 4; p++) {
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * p)));
        kb->u[p] = _mm512_and_si512(_mm512_srlv_epi64(v, sh), m4);
    }
    uint32_t w0, w1, w2;
    memcpy(&w0, x->scales, 4), memcpy(&w1, x->scales + 4, 4), memcpy(&w2, x->scales + 8, 4);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu, mn_lo = w1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
    const uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
    const __m512i sc16 = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo)));
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x00010001, 0x00010001, 0x00010001,
                                           0x00010001, 0x00010001, 0x00010001, 0x00010001, 0x00010001);
    UNROLL for (int p = 0; p < 4; p++) /* lanes 0-15: scale 2p, 16-31: scale 2p+1 */
        kb->sc[p] = _mm512_permutexvar_epi16(_mm512_add_epi16(half, _mm512_set1_epi16((short)(2 * p))), sc16);
    const __m128i mnb = _mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo);
    kb->cm = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(mnb, mnb)); /* each min for its two 16s */
    kb->d = _cvtsh_ss(x->d);
    kb->dmin = _cvtsh_ss(x->dmin);
}

/* Q5_K: Q4_K's nibbles plus bit s of qh[l] as the fifth bit of sub-block s. */
AI void kq512_q5_K(const sp_block_q5_K *x, kq512 *kb) {
    kq512_q4_K((const sp_block_q4_K *)(const void *)x, kb); /* scales, mins, d, dmin: same place */
    const __m512i m4 = _mm512_set1_epi8(0x0F), m1 = _mm512_set1_epi8(0x01);
    const __m512i sh = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qh));
    UNROLL for (int p = 0; p < 4; p++) {
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * p)));
        const __m512i hs = _mm512_setr_epi64(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(qh, hs), m1);
        kb->u[p] = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi64(v, sh), m4), _mm512_slli_epi16(hi, 4));
    }
}

AI void kq512_q6_K(const sp_block_q6_K *x, kq512 *kb) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
    UNROLL for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
        UNROLL for (int j = 0; j < 2; j++) { /* elements 128h + 64j .. +63 */
            const __m512i lo = _mm512_and_si512(j ? _mm512_srli_epi16(ql, 4) : ql, m4);
            const __m512i sh = _mm512_setr_epi64(4 * j, 4 * j, 4 * j, 4 * j, 4 * j + 2, 4 * j + 2, 4 * j + 2, 4 * j + 2);
            const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(qh, sh), m2);
            kb->u[2 * h + j] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
        }
    }
    const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
    const __m512i sc16 = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(s8));
    const __m512i eighth = _mm512_setr_epi32(0, 0, 0, 0, 0x00010001, 0x00010001, 0x00010001, 0x00010001,
                                             0x00020002, 0x00020002, 0x00020002, 0x00020002,
                                             0x00030003, 0x00030003, 0x00030003, 0x00030003);
    UNROLL for (int z = 0; z < 4; z++) /* 8 lanes per 16 elements: scales 4z .. 4z+3 */
        kb->sc[z] = _mm512_permutexvar_epi16(_mm512_add_epi16(eighth, _mm512_set1_epi16((short)(4 * z))), sc16);
    kb->ca = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(s8), _mm512_set1_epi32(-32));
    kb->d = _cvtsh_ss(x->d);
    kb->dmin = 0;
}

#ifndef KQ_PF_BYTES
#define KQ_PF_BYTES 8192
#endif
/* r[t] = the sum of v[t]'s 16 int32 lanes, for t < 16 (a transposing
 * reduction: 45 instructions for 16 sums instead of ~10 each). */
#ifndef KQ_GROUP_MIN
#define KQ_GROUP_MIN 8
#endif
AI __m512i reduce16(const __m512i v[16]) {
    __m512i w[8], u[4];
    UNROLL for (int t = 0; t < 8; t++) /* tokens 2t, 2t+1 at 32-bit positions 0,2 / 1,3 */
        w[t] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * t], v[2 * t + 1]),
                                _mm512_unpackhi_epi32(v[2 * t], v[2 * t + 1]));
    UNROLL for (int t = 0; t < 4; t++) /* tokens 4t..4t+3 at positions 0..3 of every 128-bit lane */
        u[t] = _mm512_add_epi32(_mm512_unpacklo_epi64(w[2 * t], w[2 * t + 1]),
                                _mm512_unpackhi_epi64(w[2 * t], w[2 * t + 1]));
    const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
    const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88), _mm512_shuffle_i32x4(u[2], u[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(s01, s23, 0x88), _mm512_shuffle_i32x4(s01, s23, 0xDD));
}

/* Rows r0..r1 of a Q4_K, Q5_K or Q6_K matrix (kind 4, 5, 6). Weights are
 * prefetched KQ_PF_BYTES ahead (measured on synth-1b Q4_K, 2 threads: 4, 8,
 * 16 KiB within noise of each other, one row ahead ~8% slower). Tokens go in
 * groups of 16 when there are at least KQ_GROUP_MIN of them: each token's
 * int32 vectors are reduced for all 16 at once (reduce16) and the float
 * expression runs on 16 lanes, one per token; smaller batches go one token
 * at a time with scalar reductions (synth-1b Q4_K, 2 threads, k = 8: 92 ->
 * 70 ms, k = 16: 163 -> 115 ms; k = 4 is faster one at a time). Per
 * token the same exact integers and the same IEEE operations in the same
 * order, so a token's output does not depend on its group (bit-identical
 * to the scalar reference either way). */
AI void mm_k512(const sp_mm *m, int64_t r0, int64_t r1, const int kind) {
    const int64_t k = m->k, nb = k / SP_QK_K;
    const bool is6 = kind == 6;
    const size_t bsz = is6 ? sizeof(sp_block_q6_K) : kind == 5 ? sizeof(sp_block_q5_K) : sizeof(sp_block_q4_K);
    const int32_t nv = m->n >= KQ_GROUP_MIN ? m->n : 0; /* tokens done in groups (the last may be partial) */
    __m512 yv[8]; /* groups of up to 16 tokens: at most 128 tokens per call in groups */
    float ys[4];
    const __m512i tix = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    kq512 kb;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = m->w + r * m->w_stride;
        for (int32_t t0 = 0; t0 < m->n; t0 += nv > 0 ? 128 : 4) {
            const int32_t nt = nv > 0 ? (m->n - t0 < 128 ? m->n - t0 : 128) : (m->n - t0 < 4 ? m->n - t0 : 4);
            const int32_t ngc = nv > 0 ? (nt + 15) / 16 : 0;
            for (int g = 0; g < ngc; g++) yv[g] = _mm512_setzero_ps();
            for (int32_t t = 0; t < 4; t++) ys[t] = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *pf = w + b * bsz + KQ_PF_BYTES;
                prefetch(pf), prefetch(pf + 64), prefetch(pf + 128);
                if (bsz > 192) prefetch(pf + 192);
                if (is6) kq512_q6_K((const sp_block_q6_K *)w + b, &kb);
                else if (kind == 5) kq512_q5_K((const sp_block_q5_K *)w + b, &kb);
                else kq512_q4_K((const sp_block_q4_K *)w + b, &kb);
                for (int g = 0; g < ngc; g++) {
                    const int32_t tg = t0 + 16 * g, cnt = nt - 16 * g < 16 ? nt - 16 * g : 16;
                    __m512i v[16];
                    UNROLL for (int t = 0; t < 16; t++) {
                        if (t >= cnt) {
                            v[t] = _mm512_setzero_si512();
                            continue;
                        }
                        const void *xr = (const uint8_t *)m->x + (tg + t) * m->x_stride;
                        const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                        __m512i a2[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
                        UNROLL for (int z = 0; z < 4; z++) {
                            const __m512i p16 = _mm512_maddubs_epi16(kb.u[z], _mm512_loadu_si512(xq + 64 * z));
                            a2[z & 1] = _mm512_dpwssd_epi32(a2[z & 1], p16, kb.sc[z]);
                        }
                        v[t] = _mm512_add_epi32(a2[0], a2[1]);
                        if (is6)
                            v[t] = _mm512_add_epi32(v[t], _mm512_mullo_epi32(_mm512_loadu_si512(sp_actk_bsum(xr, k) + b * 16), kb.ca));
                    }
                    const __m512i sumi = reduce16(v);
                    __m512i summ = _mm512_setzero_si512();
                    if (!is6) {
                        UNROLL for (int t = 0; t < 16; t++) {
                            const void *xr = (const uint8_t *)m->x + (tg + t) * m->x_stride;
                            v[t] = t < cnt ? _mm512_madd_epi16(_mm512_loadu_si512(sp_actk_bsum(xr, k) + b * 16), kb.cm)
                                           : _mm512_setzero_si512();
                        }
                        summ = reduce16(v);
                    }
                    const __mmask16 live = (__mmask16)((1u << cnt) - 1);
                    const __m512 xd = _mm512_mask_i32gather_ps(
                        _mm512_setzero_ps(), live, _mm512_mullo_epi32(tix, _mm512_set1_epi32((int)m->x_stride)),
                        (const uint8_t *)sp_actk_d((const uint8_t *)m->x + tg * m->x_stride, k) + 4 * b, 1);
                    const __m512 a = _mm512_mul_ps(_mm512_mul_ps(xd, _mm512_set1_ps(kb.d)), _mm512_cvtepi32_ps(sumi));
                    const __m512 c = _mm512_mul_ps(_mm512_mul_ps(xd, _mm512_set1_ps(kb.dmin)), _mm512_cvtepi32_ps(summ));
                    yv[g] = _mm512_add_ps(yv[g], _mm512_sub_ps(a, c));
                }
                for (int32_t t = 0; nv == 0 && t < nt; t++) {
                    const void *xr = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
                    const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                    __m512i a2[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
                    UNROLL for (int z = 0; z < 4; z++) {
                        const __m512i p16 = _mm512_maddubs_epi16(kb.u[z], _mm512_loadu_si512(xq + 64 * z));
                        a2[z & 1] = _mm512_dpwssd_epi32(a2[z & 1], p16, kb.sc[z]);
                    }
                    __m512i acc = _mm512_add_epi32(a2[0], a2[1]);
                    const __m512i bs = _mm512_loadu_si512(sp_actk_bsum(xr, k) + b * 16);
                    __m512i mv;
                    if (is6) {
                        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(bs, kb.ca));
                        mv = _mm512_setzero_si512();
                    } else {
                        /* |bsum| < 2^15 and mins < 2^6 with zero high halves: exact */
                        mv = _mm512_madd_epi16(bs, kb.cm);
                    }
                    const __m256i a8 = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
                    const __m256i m8 = _mm256_add_epi32(_mm512_castsi512_si256(mv), _mm512_extracti64x4_epi64(mv, 1));
                    const __m256i h = _mm256_hadd_epi32(a8, m8);
                    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                    q = _mm_hadd_epi32(q, q);
                    const int32_t sumi = _mm_cvtsi128_si32(q), summ = _mm_extract_epi32(q, 1);
                    const float xd = sp_actk_d(xr, k)[b];
                    ys[t] += (xd * kb.d) * (float)sumi - (xd * kb.dmin) * (float)summ;
                }
            }
            for (int g = 0; g < ngc; g++) {
                float out[16];
                _mm512_storeu_ps(out, yv[g]);
                for (int32_t t = 0; t < 16 && 16 * g + t < nt; t++) m->y[(t0 + 16 * g + t) * m->ld_y + r] = out[t];
            }
            for (int32_t t = 0; nv == 0 && t < nt; t++) m->y[(t0 + t) * m->ld_y + r] = ys[t];
        }
    }
}

static void mm_q4_K(const sp_mm *m, int64_t r0, int64_t r1) { mm_k512(m, r0, r1, 4); }
static void mm_q5_K(const sp_mm *m, int64_t r0, int64_t r1) { mm_k512(m, r0, r1, 5); }
static void mm_q6_K(const sp_mm *m, int64_t r0, int64_t r1) { mm_k512(m, r0, r1, 6); }

/* ---- Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 against q8 activations (VNNI) ----
 * Blocks go in groups of 16. A block's 32 weights are unpacked once per
 * group into unsigned bytes u = q + off (Q4_1, Q5_1: the stored 4/5-bit
 * values, off 0; Q5_0: value + 16; IQ4_NL: table value + 128), so for every
 * token one dpbusd gives sum(u x) exactly in int32 lanes, and
 * sumi = sum(q x) = sum(u x) - off * sum(x) (the activation block sums).
 * The 16 blocks' sums are reduced together (reduce16), the per-block float
 * value v = (d_w d_x) sumi (+ m_w s_x when m_w != 0) is formed on 16 lanes
 * with the scalar reference's operations, and y += v runs block by block in
 * order, so outputs are bit-identical to mm_q32_ref. */
AI __m256i nib32(const uint8_t *qs) { /* elements 0-15: low nibbles, 16-31: high */
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                   _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
}

AI __m256i qh5(const uint8_t qh[4]) { /* bit j of qh as 0x10 in byte j */
    uint32_t v;
    memcpy(&v, qh, 4);
    return _mm256_maskz_mov_epi8((__mmask32)v, _mm256_set1_epi8(0x10));
}

AI __m256i q32_unpack(sp_ggml_type t, const uint8_t *blk) {
    switch (t) {
    case SP_GGML_Q4_1: return nib32(((const sp_block_q4_1 *)blk)->qs);
    case SP_GGML_Q5_0: {
        const sp_block_q5_0 *x = (const sp_block_q5_0 *)blk;
        return _mm256_or_si256(nib32(x->qs), qh5(x->qh));
    }
    case SP_GGML_Q5_1: {
        const sp_block_q5_1 *x = (const sp_block_q5_1 *)blk;
        return _mm256_or_si256(nib32(x->qs), qh5(x->qh));
    }
    case SP_GGML_MXFP4: { /* as IQ4_NL with the FP4 table, quants after the exponent byte */
        const __m128i tab = _mm_loadu_si128((const __m128i *)sp_mxfp4_values);
        const __m256i v = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tab),
                                              nib32(((const sp_block_mxfp4 *)blk)->qs));
        return _mm256_xor_si256(v, _mm256_set1_epi8(-128));
    }
    default: { /* IQ4_NL: table lookup, then + 128 (flip the sign bit) */
        const __m128i tab = _mm_loadu_si128((const __m128i *)sp_iq4nl_values);
        const __m256i v = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tab),
                                              nib32(((const sp_block_iq4_nl *)blk)->qs));
        return _mm256_xor_si256(v, _mm256_set1_epi8(-128));
    }
    }
}

/* out[b] = the sum of block b's 8 int32 lanes, for 16 blocks held two per
 * vector (z[j]: lanes 0-7 block 2j, lanes 8-15 block 2j+1). */
AI __m512i reduce_pairs8(const __m512i z[8]) {
    __m512i w[4], u[2];
    UNROLL for (int j = 0; j < 4; j++)
        w[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2 * j], z[2 * j + 1]),
                                _mm512_unpackhi_epi32(z[2 * j], z[2 * j + 1]));
    UNROLL for (int j = 0; j < 2; j++) /* 128-bit lane L of u[j]: lane sums of z[4j..4j+3] */
        u[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(w[2 * j], w[2 * j + 1]),
                                _mm512_unpackhi_epi64(w[2 * j], w[2 * j + 1]));
    const __m512i r = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
    /* r = blocks 0 2 4 6 1 3 5 7 8 10 12 14 9 11 13 15 */
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), r);
}

/* Rows go four at a time so that four rows' in-order float sums (a chain
 * of dependent adds per row) interleave; the rest of the work is per row. */
#define Q32_RB 4
static void mm_q32_512(const sp_mm *m, int64_t r0, int64_t r1) {
    const sp_ggml_type t = m->wtype;
    const int64_t k = m->k, nb = k / SP_QK;
    const size_t bsz = sp_ggml_row_size(t, SP_QK);
    const bool has_m = t == SP_GGML_Q4_1 || t == SP_GGML_Q5_1;
    const int off_shift = t == SP_GGML_Q5_0 ? 4 : t == SP_GGML_IQ4_NL || t == SP_GGML_MXFP4 ? 7 : -1; /* off = 16 or 128 */
    float yacc[Q32_RB][32];
    for (int64_t r = r0; r < r1; r += Q32_RB) {
        const int rb = r1 - r < Q32_RB ? (int)(r1 - r) : Q32_RB;
        for (int32_t t0 = 0; t0 < m->n; t0 += 32) {
            const int32_t nt = m->n - t0 < 32 ? m->n - t0 : 32;
            for (int q = 0; q < rb; q++)
                for (int32_t i = 0; i < nt; i++) yacc[q][i] = 0;
            for (int64_t g = 0; g < nb; g += 16) {
                const int ng = nb - g < 16 ? (int)(nb - g) : 16;
                const __mmask16 live = (__mmask16)((1u << ng) - 1);
                __m512i u[Q32_RB][8]; /* blocks 2j and 2j+1 in the halves of u[q][j] */
                __m512 wd[Q32_RB], wm[Q32_RB];
                __mmask16 mlive[Q32_RB];
                for (int q = 0; q < rb; q++) {
                    const uint8_t *blk = m->w + (r + q) * m->w_stride + g * bsz;
                    for (int64_t o = 0; o < ng * (int64_t)bsz; o += 64) prefetch(blk + o + KQ_PF_BYTES);
                    for (int j = 0; j < 8; j++) {
                        const __m256i lo = 2 * j < ng ? q32_unpack(t, blk + 2 * j * bsz) : _mm256_setzero_si256();
                        const __m256i hi = 2 * j + 1 < ng ? q32_unpack(t, blk + (2 * j + 1) * bsz) : _mm256_setzero_si256();
                        u[q][j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                    }
                    if (t == SP_GGML_MXFP4) { /* E8M0 exponents, not f16 scales */
                        float ds[16] = {0};
                        for (int b = 0; b < ng; b++) ds[b] = sp_e8m0_half(blk[(size_t)b * bsz]);
                        wd[q] = _mm512_loadu_ps(ds);
                    } else {
                        wd[q] = block_scales(blk, (int)bsz, ng);
                    }
                    wm[q] = has_m ? block_scales(blk + 2, (int)bsz, ng) : _mm512_setzero_ps();
                    mlive[q] = _mm512_cmp_ps_mask(wm[q], _mm512_setzero_ps(), _CMP_NEQ_UQ) & live;
                }
                for (int32_t i = 0; i < nt; i++) {
                    const void *xr = (const uint8_t *)m->x + (t0 + i) * m->x_stride;
                    const int8_t *xq = sp_act_qs(xr) + g * SP_QK;
                    const __m512 xd = _mm512_maskz_loadu_ps(live, sp_act_d(xr, k) + g);
                    const __m512i xoff = off_shift > 0
                        ? _mm512_slli_epi32(_mm512_maskz_loadu_epi32(live, sp_act_sum(xr, k) + g), (unsigned)off_shift)
                        : _mm512_setzero_si512();
                    __m512i xv[8]; /* past the row's end: zero weights make the dots 0 */
                    for (int j = 0; j < 8; j++)
                        xv[j] = 2 * j < ng ? _mm512_maskz_loadu_epi64(2 * j + 1 < ng ? 0xFF : 0x0F, xq + 64 * j)
                                           : _mm512_setzero_si512();
                    float vs[Q32_RB][16];
                    for (int q = 0; q < rb; q++) {
                        __m512i v[8];
                        UNROLL for (int j = 0; j < 8; j++) v[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[q][j], xv[j]);
                        const __m512i sumi = _mm512_sub_epi32(reduce_pairs8(v), xoff);
                        __m512 val = _mm512_mul_ps(_mm512_mul_ps(wd[q], xd), _mm512_cvtepi32_ps(sumi));
                        if (has_m)
                            val = _mm512_mask_add_ps(val, mlive[q], val,
                                                     _mm512_mul_ps(wm[q], _mm512_maskz_loadu_ps(mlive[q], sp_act_s(xr, k) + g)));
                        _mm512_storeu_ps(vs[q], val);
                    }
                    /* y += v block by block, the rows' chains side by side */
                    float y[Q32_RB];
                    for (int q = 0; q < Q32_RB; q++) y[q] = q < rb ? yacc[q][i] : 0;
                    for (int b = 0; b < ng; b++)
                        for (int q = 0; q < Q32_RB; q++) y[q] += q < rb ? vs[q][b] : 0;
                    for (int q = 0; q < rb; q++) yacc[q][i] = y[q];
                }
            }
            for (int q = 0; q < rb; q++)
                for (int32_t i = 0; i < nt; i++) m->y[(t0 + i) * m->ld_y + r + q] = yacc[q][i];
        }
    }
}

/* ggml's vec_dot_f16 order (ops.h: sp_ops_mm_f16_vecdot): 4 accumulators
 * of 16 lanes over 64 elements per step. */
static void mm_f16_vecdot(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t np = m->k / 64 * 64;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)(m->w + r * m->w_stride);
        for (int32_t t = 0; t < m->n; t++) {
            const float *x = (const float *)((const uint8_t *)m->x + t * m->x_stride);
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t i = 0; i < np; i += 64) {
                a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))), _mm512_loadu_ps(x + i), a0);
                a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 16))), _mm512_loadu_ps(x + i + 16), a1);
                a2 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 32))), _mm512_loadu_ps(x + i + 32), a2);
                a3 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 48))), _mm512_loadu_ps(x + i + 48), a3);
            }
            float v[16];
            _mm512_storeu_ps(v, _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
            double s = sp_reduce16(v);
            for (int64_t i = np; i < m->k; i++) s += (double)(_cvtsh_ss(w[i]) * x[i]);
            m->y[t * m->ld_y + r] = (float)s;
        }
    }
}

void sp_ops_fill_avx512(sp_ops_table *t) {
    t->mm_f16_vecdot = mm_f16_vecdot;
    t->read_sum = read_sum;
    t->act_q8 = act_q8;
    t->act_q8k = act_q8k;
    t->att_scores = att_scores;
    t->att_scores_kv[0] = att_scores_f16;
    t->att_mix_acc[0] = att_mix_acc_f32;
    t->att_mix_acc[1] = att_mix_acc_f16;
    t->att_scores_kv[1] = att_scores_q8;
    t->att_mix_acc[2] = att_mix_acc_q8;
    t->att_widen = att_widen;
    t->att_scores_wide = att_scores_wide;
    t->att_mix_acc_wide = att_mix_acc_wide;
    t->att_scores_grp = att_scores_grp;
    t->att_mix_grp = att_mix_grp;
    t->softmax = softmax;
    t->swiglu = swiglu;
    t->mm[SP_GGML_F32] = mm_f32;
    t->mm[SP_GGML_F16] = mm_f16;
    t->mm[SP_GGML_BF16] = mm_bf16;
    t->mm[SP_GGML_Q8_0] = mm_q8_0;
    t->mm[SP_GGML_Q4_0] = mm_q4_0;
    t->mm_packed[SP_GGML_Q8_0] = mm_q8_0_pk;
    t->mm_packed[SP_GGML_Q4_0] = mm_q4_0_pk;
    t->mm_packed[SP_GGML_Q4_K] = mm_q4_K_pk;
    t->mm_packed[SP_GGML_Q5_K] = mm_q5_K_pk;
    t->mm_packed[SP_GGML_Q4_1] = mm_q4_1_pk;
    t->mm_packed[SP_GGML_Q5_0] = mm_q5_0_pk;
    t->mm_packed[SP_GGML_Q5_1] = mm_q5_1_pk;
    t->mm_packed[SP_GGML_IQ4_NL] = mm_iq4_nl_pk;
    t->mm_packed[SP_GGML_MXFP4] = mm_mxfp4_pk;
    t->mm_packed[SP_GGML_IQ4_XS] = mm_iq4_xs_pk;
    t->mm_packed[SP_GGML_Q3_K] = mm_q3_K_pk;
    t->mm_packed[SP_GGML_Q2_K] = mm_q2_K_pk;
    t->mm_packed[SP_GGML_Q6_K] = mm_q6_K_pk;
    t->mm_packed[SP_GGML_F32] = mm_f32_pk;
    t->mm_packed[SP_GGML_F16] = mm_f16_pk;
    t->mm_packed[SP_GGML_BF16] = mm_bf16_pk;
    /* Every quantised and float format has a packed kernel above, which the
     * forward pass uses; the kernels over the original rows below serve
     * whatever is not packed (tests, other callers of sp_ops_mm). K-quants
     * and the other formats there: the AVX2 kernels (every AVX-512 CPU
     * has AVX2), with the VNNI row kernels for Q4_K/Q5_K/Q6_K and the
     * 32-block formats. */
    sp_ops_fill_kquants_avx2(t);
    t->mm[SP_GGML_Q4_K] = mm_q4_K;
    t->mm[SP_GGML_Q5_K] = mm_q5_K;
    t->mm[SP_GGML_Q6_K] = mm_q6_K;
    t->mm[SP_GGML_Q4_1] = t->mm[SP_GGML_Q5_0] = t->mm[SP_GGML_Q5_1] = t->mm[SP_GGML_IQ4_NL] =
        t->mm[SP_GGML_MXFP4] = mm_q32_512;
}
