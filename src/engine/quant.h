/* sp_quant: the GGUF/ggml weight formats Specula computes with, bit-exact.
 *
 *   F16   IEEE half, BF16 bfloat16 (upper half of an f32)
 *   Q8_0  blocks of 32: f16 scale d, int8 qs[32];       x = d * qs[i]
 *   Q4_0  blocks of 32: f16 scale d, uint8 qs[16];      x = d * (nibble - 8),
 *         element i < 16 in the low nibble of qs[i], element i+16 in the high nibble.
 *   Q4_1  as Q4_0 plus an f16 offset m:                 x = d * nibble + m
 *   Q5_0  Q4_0's nibbles plus a fifth bit per element in qh (bit i of the
 *         little-endian u32 qh is element i's):        x = d * (q - 16)
 *   Q5_1  Q5_0 with an offset m:                        x = d * q + m
 *   IQ4_NL blocks of 32, nibbles index a fixed non-linear table:  x = d * kv[nibble]
 *   MXFP4 blocks of 32 (OCP microscaling FP4, ggml type 39): a shared E8M0
 *         exponent byte e, then IQ4_NL's nibble order; x = d * fp4[nibble]
 *         with fp4 = twice the E2M1 values (0, 1, 2, 3, 4, 6, 8, 12 and
 *         their negatives) and d = 2^(e - 128) (half the E8M0 scale, so the
 *         table stays integer; e = 0, 1 give the subnormals 2^-128, 2^-127).
 * K-quants: super-blocks of 256 with sub-block scales (the layouts of
 * ggml's block_q2_K ... block_q6_K, block_iq4_xs; see sp_quant.c for each
 * element's formula). The block layouts are facts of the file format;
 * every line here was written for Specula.
 * Quantisation follows ggml's reference rounding so files we write load in
 * llama.cpp with the same values. */
#ifndef SP_QUANT_H
#define SP_QUANT_H

#include <stdint.h>

#include "gguf.h"

#define SP_QK 32

typedef struct {
    uint16_t d;
    int8_t qs[SP_QK];
} sp_block_q8_0;

typedef struct {
    uint16_t d;
    uint8_t qs[SP_QK / 2];
} sp_block_q4_0;

typedef struct {
    uint16_t d, m;
    uint8_t qs[SP_QK / 2];
} sp_block_q4_1;

typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[SP_QK / 2];
} sp_block_q5_0;

typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[SP_QK / 2];
} sp_block_q5_1;

typedef struct {
    uint16_t d;
    uint8_t qs[SP_QK / 2];
} sp_block_iq4_nl;

typedef struct {
    uint8_t e;          /* E8M0 exponent */
    uint8_t qs[SP_QK / 2];
} sp_block_mxfp4;

#define SP_QK_K 256

typedef struct {
    uint8_t scales[16]; /* low nibble: scale, high nibble: min, per 16 elements */
    uint8_t qs[64];     /* 2-bit values */
    uint16_t d, dmin;
} sp_block_q2_K;

typedef struct {
    uint8_t hmask[32];  /* high bit of each 3-bit value (set: no -4) */
    uint8_t qs[64];     /* low 2 bits */
    uint8_t scales[12]; /* 16 packed 6-bit scales, offset 32 */
    uint16_t d;
} sp_block_q3_K;

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12]; /* 8 packed 6-bit scales and 8 mins */
    uint8_t qs[128];
} sp_block_q4_K;

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} sp_block_q5_K;

typedef struct {
    uint8_t ql[128];    /* low 4 bits */
    uint8_t qh[64];     /* high 2 bits */
    int8_t scales[16];  /* per 16 elements */
    uint16_t d;
} sp_block_q6_K;

typedef struct {
    uint16_t d;
    uint16_t scales_h;  /* high 2 bits of the 8 sub-block scales */
    uint8_t scales_l[4];/* low 4 bits */
    uint8_t qs[128];
} sp_block_iq4_xs;

_Static_assert(sizeof(sp_block_q8_0) == 34, "q8_0 block layout");
_Static_assert(sizeof(sp_block_q4_0) == 18, "q4_0 block layout");
_Static_assert(sizeof(sp_block_q4_1) == 20, "q4_1 block layout");
_Static_assert(sizeof(sp_block_q5_0) == 22, "q5_0 block layout");
_Static_assert(sizeof(sp_block_q5_1) == 24, "q5_1 block layout");
_Static_assert(sizeof(sp_block_iq4_nl) == 18, "iq4_nl block layout");
_Static_assert(sizeof(sp_block_mxfp4) == 17, "mxfp4 block layout");
_Static_assert(sizeof(sp_block_q2_K) == 84, "q2_K block layout");
_Static_assert(sizeof(sp_block_q3_K) == 110, "q3_K block layout");
_Static_assert(sizeof(sp_block_q4_K) == 144, "q4_K block layout");
_Static_assert(sizeof(sp_block_q5_K) == 176, "q5_K block layout");
_Static_assert(sizeof(sp_block_q6_K) == 210, "q6_K block layout");
_Static_assert(sizeof(sp_block_iq4_xs) == 136, "iq4_xs block layout");

/* The 16 values an IQ4_NL / IQ4_XS nibble stands for. */
extern const int8_t sp_iq4nl_values[16];
/* The 16 values an MXFP4 nibble stands for (twice E2M1). */
extern const int8_t sp_mxfp4_values[16];
/* An MXFP4 block's scale d = 2^(e - 128) from its E8M0 byte (exact). */
float sp_e8m0_half(uint8_t e);
/* Unpack the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. */
static inline void sp_q4k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* Block b of a 32-block row (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) as integer values q,
 * scale d and offset m: x[i] = d * q[i] + m. */
void sp_quant_q32_values(sp_ggml_type type, const void *src, int64_t b, int32_t q[SP_QK], float *d,
                         float *m);
/* Super-block b of a K-quant row (Q2_K..Q6_K, IQ4_XS) as 16 sub-blocks of
 * 16: integer values q, integer sub-scales isc and sub-mins imn (0 where the
 * format has none), super-block scales d and dmin:
 *   x[16s + i] = (d * isc[s]) * q[16s + i] - (dmin * imn[s]). */
void sp_quant_k_values(sp_ggml_type type, const void *src, int64_t b, int32_t q[SP_QK_K],
                       int32_t isc[16], int32_t imn[16], float *d, float *dmin);
/* Unpack the 16 signed 6-bit scales (already minus 32) of a Q3_K block. */
void sp_q3k_scales(const uint8_t packed[12], int8_t out[16]);

float sp_fp16_to_fp32(uint16_t h);
uint16_t sp_fp32_to_fp16(float f);      /* round to nearest even */
float sp_bf16_to_fp32(uint16_t h);
uint16_t sp_fp32_to_bf16(float f);      /* round to nearest even */

/* True for the types a model's tensors may have (loaded and computed with). */
int sp_quant_loadable(sp_ggml_type t);
/* True for the types Specula can also write (sp_quantize_row), e.g. as a
 * low-bit self-draft: the float types, the block formats with ggml's
 * reference quantisers and those with Specula's own (quant.c). */
int sp_quant_supported(sp_ggml_type t);
/* Convert n floats (n multiple of the block size) to `type`; dst holds
 * sp_ggml_row_size(type, n) bytes. */
void sp_quantize_row(sp_ggml_type type, const float *src, void *dst, int64_t n);
/* Convert n elements of a loadable `type` back to floats. */
void sp_dequantize_row(sp_ggml_type type, const void *src, float *dst, int64_t n);

#endif
