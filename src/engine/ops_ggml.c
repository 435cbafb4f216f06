/* ops_ggml: quantised matmuls in the float order of llama.cpp's x86 CPU
 * kernels (ops.h, "ggml order"), to reproduce its logits bit for bit. The
 * integer sums are the same as in every other kernel; only where they are
 * cut into float lanes and how those are added differs:
 *  - lanes: ggml's AVX2 kernels (and tinyBLAS's) work on 32 consecutive
 *    elements in a 256-bit vector and sum products in int32 lanes of 4
 *    consecutive elements, so element e of a block or super-block belongs
 *    to lane (e % 32) / 4, one of 8;
 *  - 32-block formats (Q8_0, Q5_0, IQ4_NL: tinyBLAS_Q0_AVX; Q4_1, Q5_1: the
 *    vec_dot kernels): per block, lane j += fma(d_w d_x, lane sum); Q4_1 and
 *    Q5_1 add m_w s_x into a separate scalar sum (an FMA: GCC fused it);
 *  - K-quants and IQ4_XS (vec_dot kernels): per super-block, lane j +=
 *    fma(d_x d, sum over the lane's elements of scale * q_w * q_x); the
 *    mins: Q2_K folds -d_x dmin times the pair (2j, 2j+1) of (min, block
 *    sum) products into lane j first; Q4_K keeps 4 lanes of them (pairs of
 *    32-element sub-blocks); Q5_K one scalar sum (fused);
 *  - the 8 lanes are added as ggml's hsum_float_8: (a_j + a_(j+4)), then
 *    (h_0 + h_2) + (h_1 + h_3); the separate sums are added after.
 *  - Q4_0: llama.cpp repacks Q4_0 matrices (8 rows interleaved) and sums
 *    a block's products in one int32: y = fma(sum, d_w d_x, y), block by
 *    block.
 * One scalar implementation serves every ISA (bit-identical by being the
 * same code); it is a checking path, not a fast one. */
#include <math.h>
#include <string.h>

#include "ops.h"
#include "quant.h"

/* ggml's hsum_float_8. */
static inline float hsum8(const float *a) {
    float h[4];
    for (int i = 0; i < 4; i++) h[i] = a[i] + a[i + 4];
    return (h[0] + h[2]) + (h[1] + h[3]);
}

/* Tokens per pass: a weight block is unpacked once for this many. */
enum { GT = 16 };

/* Block b of a Q8_0 row as integers and scale. */
static void q8_0_values(const uint8_t *w, int64_t b, int32_t q[SP_QK], float *d) {
    const sp_block_q8_0 *blk = (const sp_block_q8_0 *)w + b;
    for (int i = 0; i < SP_QK; i++) q[i] = blk->qs[i];
    *d = sp_fp16_to_fp32(blk->d);
}

static void mm_q4_0_ggml(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t nb = m->k / SP_QK;
    for (int64_t r = r0; r < r1; r++) {
        const sp_block_q4_0 *w = (const sp_block_q4_0 *)(m->w + r * m->w_stride);
        for (int32_t t = 0; t < m->n; t++) {
            const void *xr = (const uint8_t *)m->x + t * m->x_stride;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const int8_t *xq = sp_act_qs(xr) + b * SP_QK;
                int32_t s = 0;
                for (int i = 0; i < SP_QK / 2; i++)
                    s += ((w[b].qs[i] & 0x0F) - 8) * xq[i] + ((w[b].qs[i] >> 4) - 8) * xq[i + SP_QK / 2];
                acc = fmaf((float)s, sp_fp16_to_fp32(w[b].d) * sp_act_d(xr, m->k)[b], acc);
            }
            m->y[t * m->ld_y + r] = acc;
        }
    }
}

static void mm_q32_ggml(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t nb = m->k / SP_QK;
    const bool has_m = m->wtype == SP_GGML_Q4_1 || m->wtype == SP_GGML_Q5_1;
    int32_t q[SP_QK];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = m->w + r * m->w_stride;
        for (int32_t t0 = 0; t0 < m->n; t0 += GT) {
            const int32_t nt = m->n - t0 < GT ? m->n - t0 : GT;
            float acc[GT][8] = {{0}}, summs[GT] = {0};
            for (int64_t b = 0; b < nb; b++) {
                float d, mn = 0;
                if (m->wtype == SP_GGML_Q8_0)
                    q8_0_values(w, b, q, &d);
                else
                    sp_quant_q32_values(m->wtype, w, b, q, &d, &mn);
                for (int32_t t = 0; t < nt; t++) {
                    const void *xr = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
                    const int8_t *xq = sp_act_qs(xr) + b * SP_QK;
                    const float dd = d * sp_act_d(xr, m->k)[b];
                    for (int j = 0; j < 8; j++) {
                        int32_t s = 0;
                        for (int e = 4 * j; e < 4 * j + 4; e++) s += q[e] * xq[e];
                        acc[t][j] = fmaf(dd, (float)s, acc[t][j]);
                    }
                    if (has_m) summs[t] = fmaf(mn, sp_act_s(xr, m->k)[b], summs[t]);
                }
            }
            for (int32_t t = 0; t < nt; t++)
                m->y[(t0 + t) * m->ld_y + r] = has_m ? hsum8(acc[t]) + summs[t] : hsum8(acc[t]);
        }
    }
}

static void mm_k_ggml(const sp_mm *m, int64_t r0, int64_t r1) {
    const int64_t nb = m->k / SP_QK_K;
    const sp_ggml_type ty = m->wtype;
    int32_t q[SP_QK_K], isc[16], imn[16];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = m->w + r * m->w_stride;
        for (int32_t t0 = 0; t0 < m->n; t0 += GT) {
            const int32_t nt = m->n - t0 < GT ? m->n - t0 : GT;
            float acc[GT][8] = {{0}}, accm[GT][4] = {{0}}, summs[GT] = {0};
            for (int64_t b = 0; b < nb; b++) {
                float dw, dmin;
                sp_quant_k_values(ty, w, b, q, isc, imn, &dw, &dmin);
                for (int32_t t = 0; t < nt; t++) {
                    const void *xr = (const uint8_t *)m->x + (t0 + t) * m->x_stride;
                    const int8_t *xq = sp_act_qs(xr) + b * SP_QK_K;
                    const int32_t *bs = sp_actk_bsum(xr, m->k) + b * 16;
                    const float dx = sp_actk_d(xr, m->k)[b];
                    const float d = ty == SP_GGML_IQ4_XS ? dw * dx : dx * dw, dmn = -dx * dmin;
                    int32_t lane[8] = {0};
                    for (int e = 0; e < SP_QK_K; e++) lane[(e % 32) / 4] += isc[e / 16] * q[e] * xq[e];
                    if (ty == SP_GGML_Q2_K)
                        for (int j = 0; j < 8; j++)
                            acc[t][j] = fmaf(dmn, (float)(imn[2 * j] * bs[2 * j] + imn[2 * j + 1] * bs[2 * j + 1]),
                                             acc[t][j]);
                    for (int j = 0; j < 8; j++) acc[t][j] = fmaf(d, (float)lane[j], acc[t][j]);
                    if (ty == SP_GGML_Q4_K)
                        for (int j = 0; j < 4; j++) {
                            int32_t p = 0;
                            for (int s = 4 * j; s < 4 * j + 4; s++) p += imn[s] * bs[s];
                            accm[t][j] = fmaf(dmn, (float)p, accm[t][j]);
                        }
                    if (ty == SP_GGML_Q5_K) {
                        int32_t p = 0;
                        for (int s = 0; s < 16; s++) p += imn[s] * bs[s];
                        summs[t] = fmaf((float)p, dmn, summs[t]);
                    }
                }
            }
            for (int32_t t = 0; t < nt; t++) {
                float y = hsum8(acc[t]);
                if (ty == SP_GGML_Q4_K) y += (accm[t][0] + accm[t][2]) + (accm[t][1] + accm[t][3]);
                if (ty == SP_GGML_Q5_K) y += summs[t];
                m->y[(t0 + t) * m->ld_y + r] = y;
            }
        }
    }
}

sp_mm_kernel sp_ops_mm_ggml_order(sp_ggml_type wtype) {
    switch (wtype) {
    case SP_GGML_Q4_0:
        return mm_q4_0_ggml;
    case SP_GGML_Q8_0: case SP_GGML_Q4_1: case SP_GGML_Q5_0: case SP_GGML_Q5_1: case SP_GGML_IQ4_NL:
        return mm_q32_ggml;
    case SP_GGML_Q2_K: case SP_GGML_Q3_K: case SP_GGML_Q4_K: case SP_GGML_Q5_K: case SP_GGML_Q6_K:
    case SP_GGML_IQ4_XS:
        return mm_k_ggml;
    default:
        return NULL;
    }
}
