/* Tests for sp_quant: exhaustive fp16/bf16 round trips, known encodings and
 * ties, hand-computed Q8_0/Q4_0 blocks following ggml's reference rounding,
 * and error bounds on random data. */
#include "testutil.h"

#include <math.h>

#include "quant.h"
#include "gguf.h"
#include "rng.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_fp16_exhaustive(void **state) {
    (void)state;
    int nans = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sp_fp16_to_fp32((uint16_t)h);
        bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
        assert_int_equal(isnan(f) != 0, is_nan);
        nans += is_nan;
        if (sp_fp32_to_fp16(f) != h) fail_msg("half 0x%04x -> %a -> 0x%04x", h, (double)f, sp_fp32_to_fp16(f));
        /* Halves are ordered like their floats (finite, same sign). */
        if (!is_nan && (h & 0x7FFF) < 0x7C00 && (h & 0x7FFF) > 0) {
            float prev = sp_fp16_to_fp32((uint16_t)(h - 1));
            assert_true(fabsf(prev) < fabsf(f));
        }
    }
    assert_int_equal(nans, 2 * 1023);
}

static void test_fp16_known(void **state) {
    (void)state;
    assert_int_equal(sp_fp32_to_fp16(1.0f), 0x3C00);
    assert_int_equal(sp_fp32_to_fp16(-2.0f), 0xC000);
    assert_int_equal(sp_fp32_to_fp16(65504.0f), 0x7BFF);
    assert_int_equal(sp_fp32_to_fp16(0x1p-24f), 0x0001);
    assert_int_equal(sp_fp32_to_fp16(0x1p-14f), 0x0400);
    assert_int_equal(sp_fp32_to_fp16(0.1f), 0x2E66);
    assert_int_equal(sp_fp32_to_fp16(0.0f), 0x0000);
    assert_int_equal(sp_fp32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(sp_fp32_to_fp16(INFINITY), 0x7C00);
    assert_int_equal(sp_fp32_to_fp16(-INFINITY), 0xFC00);
    assert_int_equal(sp_fp32_to_fp16(1e10f), 0x7C00);
    assert_true(isnan(sp_fp16_to_fp32(sp_fp32_to_fp16(NAN))));
    assert_true(isnan(sp_fp16_to_fp32(sp_fp32_to_fp16(from_bits(0x7F800001))))); /* payload below half precision */
    assert_true(sp_fp16_to_fp32(0x3555) == 0x1.554p-2f);
    /* Ties to even. */
    assert_int_equal(sp_fp32_to_fp16(1.0f + 0x1p-11f), 0x3C00);           /* between 3C00 and 3C01 */
    assert_int_equal(sp_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);       /* between 3C01 and 3C02 */
    assert_int_equal(sp_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01); /* just above the tie */
    assert_int_equal(sp_fp32_to_fp16(65520.0f), 0x7C00);                   /* tie 7BFF/inf goes up */
    assert_int_equal(sp_fp32_to_fp16(65519.0f), 0x7BFF);
    assert_int_equal(sp_fp32_to_fp16(0x1p-25f), 0x0000);                   /* tie 0/1 -> 0 */
    assert_int_equal(sp_fp32_to_fp16(0x1.000002p-25f), 0x0001);
    assert_int_equal(sp_fp32_to_fp16(3 * 0x1p-25f), 0x0002);               /* tie 1/2 -> 2 */
    assert_int_equal(sp_fp32_to_fp16(5 * 0x1p-25f), 0x0002);               /* tie 2/3 -> 2 */
    assert_int_equal(sp_fp32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);       /* tie 3FF/400 -> 400 */
    assert_int_equal(sp_fp32_to_fp16(-0x1p-26f), 0x8000);
}

/* Random floats round to a nearest half (checked against both neighbours). */
static void test_fp16_nearest_random(void **state) {
    (void)state;
    sp_rng r;
    sp_rng_seed(&r, 5);
    for (int i = 0; i < 200000; i++) {
        /* Magnitudes 2^-30 .. 2^16 to cover subnormals and overflow. */
        uint32_t u = (uint32_t)(sp_rng_u64(&r) & 0x807FFFFF) | (uint32_t)(97 + sp_rng_below(&r, 47)) << 23;
        float f = from_bits(u);
        uint16_t h = sp_fp32_to_fp16(f);
        double err = fabs((double)sp_fp16_to_fp32(h) - (double)f);
        uint16_t mag = h & 0x7FFF;
        if (mag == 0x7C00) {
            assert_true(fabsf(f) >= 65520.0f);
            continue;
        }
        if (mag < 0x7BFF) assert_true(err <= fabs((double)sp_fp16_to_fp32((uint16_t)(h + 1)) - (double)f));
        if (mag > 0) assert_true(err <= fabs((double)sp_fp16_to_fp32((uint16_t)(h - 1)) - (double)f));
    }
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(sp_fp32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(sp_fp32_to_bf16(-2.0f), 0xC000);
    assert_int_equal(sp_fp32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(sp_fp32_to_bf16(1.0f + 0x1p-8f), 0x3F80);      /* tie -> even */
    assert_int_equal(sp_fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  /* tie -> even */
    assert_int_equal(sp_fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    assert_int_equal(sp_fp32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80); /* FLT_MAX rounds to inf */
    assert_true(sp_bf16_to_fp32(0x4049) == 3.140625f);
    /* NaNs, including one whose payload lies only in the low bits. */
    assert_true(isnan(sp_bf16_to_fp32(sp_fp32_to_bf16(NAN))));
    assert_true(isnan(sp_bf16_to_fp32(sp_fp32_to_bf16(from_bits(0x7F800001)))));
    assert_true(isnan(sp_bf16_to_fp32(sp_fp32_to_bf16(from_bits(0xFFFFFFFF)))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sp_bf16_to_fp32((uint16_t)h);
        assert_int_equal(bits(f), h << 16);
        if (isnan(f)) assert_true(isnan(sp_bf16_to_fp32(sp_fp32_to_bf16(f))));
        else assert_int_equal(sp_fp32_to_bf16(f), h);
    }
}

static void test_supported(void **state) {
    (void)state;
    assert_true(sp_quant_supported(SP_GGML_F32));
    assert_true(sp_quant_supported(SP_GGML_F16));
    assert_true(sp_quant_supported(SP_GGML_BF16));
    assert_true(sp_quant_supported(SP_GGML_Q8_0));
    assert_true(sp_quant_supported(SP_GGML_Q4_0));
    /* writable: ggml's reference quantisers (Q4_1, Q5_0, Q5_1) and
     * Specula's own for Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS; the rest are load-only */
    assert_true(sp_quant_supported(SP_GGML_Q4_1));
    assert_true(sp_quant_supported(SP_GGML_Q5_0));
    assert_true(sp_quant_supported(SP_GGML_Q5_1));
    assert_true(sp_quant_supported(SP_GGML_Q4_K));
    assert_true(sp_quant_supported(SP_GGML_Q6_K));
    assert_true(sp_quant_supported(SP_GGML_Q5_K));
    assert_true(sp_quant_supported(SP_GGML_IQ4_NL));
    assert_false(sp_quant_supported(SP_GGML_Q3_K));
    assert_true(sp_quant_supported(SP_GGML_IQ4_XS));
    assert_true(sp_quant_loadable(SP_GGML_IQ4_XS));
    assert_false(sp_quant_loadable(SP_GGML_IQ2_XXS));
    assert_false(sp_quant_supported((sp_ggml_type)99));
}

/* amax 127 gives d = 1 exactly, so qs = roundf(x) (ties away from zero). */
static void test_q8_0_block(void **state) {
    (void)state;
    float x[2 * SP_QK];
    x[0] = 127.0f;
    x[1] = -127.0f;
    for (int j = 2; j < SP_QK; j++) x[j] = (float)j - 15.5f;   /* -13.5 .. 15.5 */
    for (int j = 0; j < SP_QK; j++) x[SP_QK + j] = 2.0f * x[j]; /* same codes, d = 2 */
    sp_block_q8_0 b[2];
    sp_quantize_row(SP_GGML_Q8_0, x, b, 2 * SP_QK);
    assert_int_equal(b[0].d, 0x3C00);
    assert_int_equal(b[1].d, 0x4000);
    int8_t want[SP_QK];
    want[0] = 127;
    want[1] = -127;
    for (int j = 2; j < SP_QK; j++) want[j] = (int8_t)(j < 16 ? j - 16 : j - 15);
    assert_memory_equal(b[0].qs, want, SP_QK);
    assert_memory_equal(b[1].qs, want, SP_QK);
    /* Raw bytes: f16 d little-endian then the codes. */
    const uint8_t *raw = (const uint8_t *)b;
    assert_int_equal(raw[0], 0x00);
    assert_int_equal(raw[1], 0x3C);
    assert_int_equal(raw[2], 127);
    assert_int_equal(raw[3], 0x81);
    float y[2 * SP_QK];
    sp_dequantize_row(SP_GGML_Q8_0, b, y, 2 * SP_QK);
    for (int j = 0; j < SP_QK; j++) {
        assert_true(y[j] == (float)want[j]);
        assert_true(y[SP_QK + j] == 2.0f * (float)want[j]);
    }
}

static void test_q4_0_block(void **state) {
    (void)state;
    float x[2 * SP_QK];
    /* Block 0: largest |x| is x[0] = -8, so d = -8 / -8 = 1 and q = min(15, trunc(x + 8.5)). */
    for (int j = 0; j < 16; j++) x[j] = (float)j - 8.0f;  /* -8..7 -> codes 0..15 */
    static const float hi[16] = {7.6f, -7.6f, 0.49f, 0.5f, -0.5f, 3.2f, -3.2f, 7.99f,
                                 -7.99f, 1, 2, 3, 4, 5, 6, 7};
    static const uint8_t hi_code[16] = {15, 0, 8, 9, 8, 11, 5, 15, 0, 9, 10, 11, 12, 13, 14, 15};
    for (int j = 0; j < 16; j++) x[16 + j] = hi[j];
    /* Block 1: +8 comes first and ties with -8 in magnitude: max = +8, d = -1. */
    for (int j = 0; j < SP_QK; j++) x[SP_QK + j] = 0.0f;
    x[SP_QK + 0] = 8.0f;
    x[SP_QK + 1] = -8.0f;
    x[SP_QK + 16] = 3.0f;
    sp_block_q4_0 b[2];
    sp_quantize_row(SP_GGML_Q4_0, x, b, 2 * SP_QK);
    assert_int_equal(b[0].d, 0x3C00);
    for (int j = 0; j < 16; j++) assert_int_equal(b[0].qs[j], (uint8_t)(j | hi_code[j] << 4));
    assert_int_equal(b[1].d, 0xBC00);
    assert_int_equal(b[1].qs[0], 0x5 << 4 | 0);   /* 8 -> 0.5 -> 0; 3 -> -3+8.5 = 5.5 -> 5 */
    assert_int_equal(b[1].qs[1], 0x8 << 4 | 15);  /* -8 -> 16.5 -> 16 -> clamp 15 */
    for (int j = 2; j < 16; j++) assert_int_equal(b[1].qs[j], 0x88);
    float y[2 * SP_QK];
    sp_dequantize_row(SP_GGML_Q4_0, b, y, 2 * SP_QK);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == x[j]);
        assert_true(y[16 + j] == (float)hi_code[j] - 8.0f);
    }
    assert_true(y[SP_QK] == 8.0f && y[SP_QK + 1] == -7.0f && y[SP_QK + 16] == 3.0f);
}

static void test_zero_block(void **state) {
    (void)state;
    float x[SP_QK] = {0}, y[SP_QK];
    x[3] = -0.0f;
    sp_block_q8_0 b8;
    sp_quantize_row(SP_GGML_Q8_0, x, &b8, SP_QK);
    assert_int_equal(b8.d, 0);
    for (int j = 0; j < SP_QK; j++) assert_int_equal(b8.qs[j], 0);
    sp_dequantize_row(SP_GGML_Q8_0, &b8, y, SP_QK);
    for (int j = 0; j < SP_QK; j++) assert_true(y[j] == 0.0f);
    sp_block_q4_0 b4;
    sp_quantize_row(SP_GGML_Q4_0, x, &b4, SP_QK);
    /* ggml computes d = max / -8 with max = 0.0f: negative zero, 0x8000. */
    assert_int_equal(b4.d, 0x8000);
    for (int j = 0; j < 16; j++) assert_int_equal(b4.qs[j], 0x88);  /* code 8 = zero */
    sp_dequantize_row(SP_GGML_Q4_0, &b4, y, SP_QK);
    for (int j = 0; j < SP_QK; j++) assert_true(y[j] == 0.0f);
}

/* Error bounds on random rows. The stored scale dh is d rounded to f16, so
 * beyond the d/2 rounding error each element carries |q| * |d - dh|. */
static void test_random_round_trip(void **state) {
    (void)state;
    enum { N = 32 * 64 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    sp_block_q8_0 *b8 = malloc(N / SP_QK * sizeof *b8);
    sp_block_q4_0 *b4 = malloc(N / SP_QK * sizeof *b4);
    uint16_t *h = malloc(N * sizeof *h);
    sp_rng r;
    sp_rng_seed(&r, 2024);
    for (int i = 0; i < N; i++) {
        double scale = (i / SP_QK) % 3 == 0 ? 1e-3 : (i / SP_QK) % 3 == 1 ? 1.0 : 50.0;
        x[i] = (float)(sp_rng_normal(&r) * scale);
    }

    sp_quantize_row(SP_GGML_Q8_0, x, b8, N);
    sp_dequantize_row(SP_GGML_Q8_0, b8, y, N);
    for (int i = 0; i < N / SP_QK; i++) {
        float amax = 0;
        for (int j = 0; j < SP_QK; j++) amax = fmaxf(amax, fabsf(x[i * SP_QK + j]));
        float d = amax / 127.0f, dh = sp_fp16_to_fp32(b8[i].d);
        for (int j = 0; j < SP_QK; j++) {
            int k = i * SP_QK + j;
            float bound = d / 2 + fabsf((float)b8[i].qs[j]) * fabsf(d - dh) + 1e-6f * amax;
            if (fabsf(x[k] - y[k]) > bound) fail_msg("q8_0 elem %d: %g vs %g (bound %g)", k, x[k], y[k], bound);
        }
    }

    sp_quantize_row(SP_GGML_Q4_0, x, b4, N);
    sp_dequantize_row(SP_GGML_Q4_0, b4, y, N);
    for (int i = 0; i < N / SP_QK; i++) {
        float amax = 0, max = 0;
        for (int j = 0; j < SP_QK; j++) {
            float v = x[i * SP_QK + j];
            if (amax < fabsf(v)) amax = fabsf(v), max = v;
        }
        float d = fabsf(max / -8.0f), dh = fabsf(sp_fp16_to_fp32(b4[i].d));
        for (int j = 0; j < SP_QK; j++) {
            int k = i * SP_QK + j;
            /* Code 15 is the clamp for values up to +8d: error up to one step. */
            int code = j < 16 ? b4[i].qs[j] & 15 : b4[i].qs[j - 16] >> 4;
            float step = code == 15 ? d : d / 2;
            float bound = step + 8 * fabsf(d - dh) + 1e-6f * amax;
            if (fabsf(x[k] - y[k]) > bound) fail_msg("q4_0 elem %d: %g vs %g (bound %g)", k, x[k], y[k], bound);
        }
    }

    /* F16/BF16 rows match the scalar conversions; F32 is a copy. */
    sp_quantize_row(SP_GGML_F16, x, h, N);
    sp_dequantize_row(SP_GGML_F16, h, y, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(h[i], sp_fp32_to_fp16(x[i]));
        assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f);
    }
    sp_quantize_row(SP_GGML_BF16, x, h, N);
    sp_dequantize_row(SP_GGML_BF16, h, y, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(h[i], sp_fp32_to_bf16(x[i]));
        assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-8f);
    }
    float *z = malloc(N * sizeof *z);
    sp_quantize_row(SP_GGML_F32, x, z, N);
    sp_dequantize_row(SP_GGML_F32, z, y, N);
    assert_memory_equal(x, y, N * sizeof *x);
    free(z);
    free(x);
    free(y);
    free(b8);
    free(b4);
    free(h);
}

/* Specula's IQ4_XS quantiser (sp_quant.h): the stored values dequantise
 * to step * table[q] with step = d * (ls - 32) per sub-block of 32; each
 * value is matched to its nearest entry against the stored step, so it
 * lies within half the widest table gap (24, between 89 and 113) of it,
 * plus whatever of |x| lies beyond 113 steps; an all-zero row stays zero,
 * and a row of table values times 0.25 comes back exactly. */
static void test_iq4_xs_quantiser(void **state) {
    (void)state;
    enum { N = 256 * 8 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    sp_block_iq4_xs *b = malloc(N / 256 * sizeof *b);
    sp_rng r;
    sp_rng_seed(&r, 77);
    for (int i = 0; i < N; i++) x[i] = (float)(sp_rng_normal(&r) * ((i / 32) % 4 == 0 ? 0.01 : 1.0));
    sp_quantize_row(SP_GGML_IQ4_XS, x, b, N);
    sp_dequantize_row(SP_GGML_IQ4_XS, b, y, N);
    for (int sb = 0; sb < N / 32; sb++) {
        const sp_block_iq4_xs *blk = &b[sb / 8];
        const int s8 = sb % 8;
        const int ls = ((blk->scales_l[s8 / 2] >> (4 * (s8 % 2))) & 0xF) | (((blk->scales_h >> (2 * s8)) & 3) << 4);
        const float step = fabsf(sp_fp16_to_fp32(blk->d) * (float)(ls - 32));
        for (int l = 0; l < 32; l++) {
            const int k = 32 * sb + l;
            /* the part of |x| beyond the table's shorter end (113 steps) */
            const float bound = 12.5f * step + fmaxf(0.0f, fabsf(x[k]) - 113 * step) + 1e-6f;
            if (fabsf(x[k] - y[k]) > bound) fail_msg("iq4_xs elem %d: %g vs %g (bound %g)", k, x[k], y[k], bound);
        }
    }
    double se = 0, sx = 0;
    for (int i = 0; i < N; i++) se += (double)(x[i] - y[i]) * (x[i] - y[i]), sx += (double)x[i] * x[i];
    assert_true(se < 0.02 * sx); /* 4.25 bits: well under 2% of the energy */
    for (int i = 0; i < 256; i++) x[i] = 0;
    sp_quantize_row(SP_GGML_IQ4_XS, x, b, 256);
    sp_dequantize_row(SP_GGML_IQ4_XS, b, y, 256);
    for (int i = 0; i < 256; i++) assert_true(y[i] == 0.0f);
    for (int i = 0; i < 256; i++) x[i] = 0.25f * (float)sp_iq4nl_values[(i * 7) % 16];
    x[3] = 0.25f * -127.0f; /* the largest magnitude maps to -127 */
    sp_quantize_row(SP_GGML_IQ4_XS, x, b, 256);
    sp_dequantize_row(SP_GGML_IQ4_XS, b, y, 256);
    for (int i = 0; i < 256; i++)
        if (y[i] != x[i]) fail_msg("iq4_xs exact row elem %d: %g vs %g", i, y[i], x[i]);
    free(x), free(y), free(b);
}


/* MXFP4 against gguf-py (tests/vectors/mxfp4.txt, scripts/gen_mxfp4_vectors.py):
 * the quantiser gives gguf-py's 17 bytes for every block (ggml's reference
 * rounding: exponent, nearest table value, first on ties), and rows of
 * llama-quantize's gpt-oss-moe-mxfp4.gguf dequantise to gguf-py's values
 * exactly; plus the E8M0 scale at its ends and the block layout. */
static void test_mxfp4_against_gguf_py(void **state) {
    (void)state;
    assert_int_equal(sp_ggml_type_size(SP_GGML_MXFP4), 17);
    assert_int_equal(sp_ggml_blck_size(SP_GGML_MXFP4), 32);
    assert_string_equal(sp_ggml_type_name(SP_GGML_MXFP4), "mxfp4");
    assert_true(sp_quant_loadable(SP_GGML_MXFP4) && sp_quant_supported(SP_GGML_MXFP4));
    assert_true(sp_e8m0_half(0) == ldexpf(1.0f, -128) && sp_e8m0_half(1) == ldexpf(1.0f, -127));
    assert_true(sp_e8m0_half(128) == 1.0f && sp_e8m0_half(254) == ldexpf(1.0f, 126));
    FILE *f = fopen("tests/vectors/mxfp4.txt", "r");
    assert_non_null(f);
    int nq = 0;
    assert_int_equal(fscanf(f, " quant %d", &nq), 1);
    assert_true(nq > 0);
    for (int i = 0; i < nq; i++) {
        float x[32], back[32];
        char hex[40];
        for (int j = 0; j < 32; j++) assert_int_equal(fscanf(f, "%f", &x[j]), 1);
        assert_int_equal(fscanf(f, " : %39s", hex), 1);
        assert_int_equal(strlen(hex), 34);
        uint8_t want[17], got[17];
        for (int j = 0; j < 17; j++) {
            unsigned v;
            assert_int_equal(sscanf(hex + 2 * j, "%2x", &v), 1);
            want[j] = (uint8_t)v;
        }
        sp_quantize_row(SP_GGML_MXFP4, x, got, 32);
        if (memcmp(got, want, 17)) fprintf(stderr, "mxfp4 block %d differs from gguf-py's\n", i);
        assert_memory_equal(got, want, 17);
        /* and the round trip stays within half a step of the largest table value */
        sp_dequantize_row(SP_GGML_MXFP4, got, back, 32);
        const float d = sp_e8m0_half(got[0]);
        for (int j = 0; j < 32; j++) assert_true(fabsf(back[j] - x[j]) <= 2.0f * d || fabsf(x[j]) > 12.0f * d);
    }
    int tensors = 0;
    char name[64];
    int rows, k;
    while (fscanf(f, " dequant %63s %d %d", name, &rows, &k) == 3) {
        sp_gguf *g = NULL;
        sp_error err = {0};
        assert_int_equal(sp_gguf_open(sp_shared("reference/arch2026/models/gpt-oss-moe-mxfp4.gguf"), &g, &err), SP_OK);
        const sp_gguf_tensor *t = sp_gguf_find_tensor(g, name);
        assert_non_null(t);
        assert_int_equal(t->type, SP_GGML_MXFP4);
        assert_int_equal(t->ne[0], k);
        float *got = malloc((size_t)k * sizeof(float));
        for (int r = 0; r < rows; r++) {
            sp_dequantize_row(SP_GGML_MXFP4, (const uint8_t *)t->data + (size_t)r * sp_ggml_row_size(SP_GGML_MXFP4, k), got, k);
            for (int i = 0; i < k; i++) {
                float want;
                assert_int_equal(fscanf(f, "%f", &want), 1);
                if (got[i] != want) fprintf(stderr, "%s row %d elem %d: %.9g, gguf-py %.9g\n", name, r, i, (double)got[i], (double)want);
                assert_true(got[i] == want);
            }
        }
        free(got);
        sp_gguf_close(g);
        tensors++;
    }
    fclose(f);
    assert_int_equal(tensors, 2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_fp16_exhaustive),
    cmocka_unit_test(test_fp16_known),
    cmocka_unit_test(test_fp16_nearest_random),
    cmocka_unit_test(test_bf16),
    cmocka_unit_test(test_supported),
    cmocka_unit_test(test_iq4_xs_quantiser),
    cmocka_unit_test(test_q8_0_block),
    cmocka_unit_test(test_q4_0_block),
    cmocka_unit_test(test_zero_block),
    cmocka_unit_test(test_random_round_trip),
    cmocka_unit_test(test_mxfp4_against_gguf_py),
};
SP_TEST_MAIN(tests)
