/* Float-to-int conversions at their extremes (issue 25): every site that
 * converts a float to an integer in the kernels and quantisers (toint.h's
 * helpers, the q8 / q8_K activation quantisers of every ISA, the weight
 * quantisers, the vector exp) fed subnormal, tiny-normal, huge and
 * non-finite values. Under `make check SAN=1` UBSan aborts on any
 * undefined conversion; the assertions check the values are the exact
 * roundings (or the stated non-finite contract) and that every ISA tier
 * gives the scalar tier's bytes. */
#include "testutil.h"

#include <float.h>
#include <math.h>

#include "ops.h"
#include "quant.h"
#include "rng.h"
#include "toint.h"

/* In range, each helper is the plain C rounding; outside, the clamp; NaN 0. */
static void test_toint_helpers(void **state) {
    (void)state;
    sp_rng r;
    sp_rng_seed(&r, 25);
    for (int i = 0; i < 200000; i++) {
        float v = (float)((sp_rng_uniform(&r) - 0.5) * 300.0);
        if (i % 4 == 0) v = nearbyintf(v * 2) / 2; /* exact ties */
        if (i % 8 == 1) v = (float)((sp_rng_uniform(&r) - 0.5) * 8e6); /* past 2^22: clamped */
        const float c = v < -4194304.0f ? -4194304.0f : v > 4194304.0f ? 4194304.0f : v;
        assert_int_equal(sp_toint_rne(v, -4194304, 4194304), (int32_t)nearbyintf(c));
        assert_int_equal(sp_toint_round(v, -4194304, 4194304), (int32_t)roundf(c));
        assert_int_equal(sp_toint_trunc(v, -4194304, 4194304), (int32_t)c);
        const float cc = v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v;
        assert_int_equal(sp_toint_rne(v, -128, 127), (int32_t)nearbyintf(cc));
    }
    const float odd[] = {NAN, -NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 3e9f, -3e9f, 0x1p-149f, -0x1p-149f,
                         FLT_MIN, -0.0f, 127.5f, -128.5f, 0.5f, -0.5f, 1.5f};
    const int32_t rne[] = {0, 0, 127, -128, 127, -128, 127, -128, 0, 0, 0, 0, 127, -128, 0, 0, 2};
    const int32_t rnd[] = {0, 0, 127, -128, 127, -128, 127, -128, 0, 0, 0, 0, 127, -128, 1, -1, 2};
    const int32_t trn[] = {0, 0, 127, -128, 127, -128, 127, -128, 0, 0, 0, 0, 127, -128, 0, 0, 1};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        assert_int_equal(sp_toint_rne(odd[i], -128, 127), rne[i]);
        assert_int_equal(sp_toint_round(odd[i], -128, 127), rnd[i]);
        assert_int_equal(sp_toint_trunc(odd[i], -128, 127), trn[i]);
    }
    /* NaN maps to 0 clamped into the range */
    assert_int_equal(sp_toint_trunc(NAN, 3, 15), 3);
    assert_int_equal(sp_toint_rne(NAN, -32, -1), -1);
}

enum { K = 1024 }; /* 32 blocks of 32, 4 super-blocks of 256 */

/* Activation rows whose blocks of 32 cover the cases: T tokens of K. */
enum { T = 4 };
static void extreme_rows(float *x) {
    sp_rng r;
    sp_rng_seed(&r, 2525);
    for (int64_t i = 0; i < T * K; i++) x[i] = (float)sp_rng_normal(&r);
    float *a = x, *b = x + K, *c = x + 2 * K, *d = x + 3 * K;
    /* token 0: super-block 0 subnormal (max 1e-40, zeros among), 1 the
     * smallest subnormal alone, 2 tiny normal (127 / 2e-37 overflows; the
     * maximum negative), 3 normal */
    for (int i = 0; i < 256; i++) a[i] = i % 5 == 0 ? 0.0f : (float)(i % 7 - 3) * 3.3e-41f;
    a[77] = 1e-40f;
    for (int i = 256; i < 512; i++) a[i] = 0.0f;
    a[300] = 0x1p-149f;
    for (int i = 512; i < 768; i++) a[i] = (float)(i % 11 - 5) * 3e-38f;
    a[600] = -2e-37f;
    /* token 1: finite but huge: FLT_MAX, -3e38, mixtures with 1 and 1e-30 */
    for (int i = 0; i < 512; i++) b[i] = (float)(i % 9 - 4) * 8e37f;
    b[5] = FLT_MAX, b[300] = -FLT_MAX, b[301] = 1.0f, b[302] = 1e-30f, b[303] = 0x1p-149f;
    /* token 2: blocks of 32 each with a different case (some non-finite) */
    const float specials[] = {INFINITY, -INFINITY, NAN, 1e-40f, 2e-37f, FLT_MAX, 0.0f, -0x1p-149f};
    for (int blk = 0; blk < 8; blk++)
        for (int i = 0; i < 32; i++) {
            float *e = c + 32 * (4 * blk + 1) + i;
            if (specials[blk] == 0.0f) *e = 0.0f;
            else if (isfinite(specials[blk]) && fabsf(specials[blk]) < 1e-30f) *e = specials[blk] * (float)(i % 3);
            else if (i == 9) *e = specials[blk];
        }
    /* token 3: every super-block holds one non-finite value, except the last
     * (subnormal) */
    d[10] = NAN, d[256 + 200] = INFINITY, d[512 + 3] = -INFINITY;
    for (int i = 768; i < K; i++) d[i] = (float)(i % 3) * -1e-42f;
}

static float block_amax(const float *x, int n, bool *finite) {
    float m = 0;
    *finite = true;
    for (int i = 0; i < n; i++) {
        *finite &= isfinite(x[i]) != 0;
        m = fmaxf(m, fabsf(x[i]));
    }
    return m;
}

/* The q8 layout: q = rne(x * 127 / amax) up to the float rounding of the
 * product (within 1), |q| = 127 at the maximum, sums, d = f16(amax / 127);
 * non-finite blocks q = 0, d = NaN. */
static void check_q8(const float *x, const uint8_t *row) {
    for (int b = 0; b < K / 32; b++) {
        bool fin;
        const float amax = block_amax(x + 32 * b, 32, &fin);
        const int8_t *q = sp_act_qs(row) + 32 * b;
        int32_t s = 0;
        for (int i = 0; i < 32; i++) {
            s += q[i];
            if (!fin) {
                assert_int_equal(q[i], 0);
                continue;
            }
            const double want = amax == 0 ? 0 : nearbyint((double)x[32 * b + i] * 127.0 / (double)amax);
            if (fabs(q[i] - want) > 1) fail_msg("q8 block %d [%d]: q %d, want %.0f (x %g)", b, i, q[i], want, x[32 * b + i]);
            if (amax != 0 && fabsf(x[32 * b + i]) == amax) assert_int_equal(abs(q[i]), 127);
        }
        assert_int_equal(sp_act_sum(row, K)[b], s);
        if (fin) assert_true(sp_act_d(row, K)[b] == sp_fp16_to_fp32(sp_fp32_to_fp16(amax / 127.0f)));
        else assert_true(isnan(sp_act_d(row, K)[b]));
    }
}

/* The q8_K layout: q = rne(-127 x / max) (max the signed value of largest
 * magnitude), 128 stored as 127, d = max / -127 (to float rounding, also
 * subnormal), block sums; non-finite super-blocks q = 0, d = NaN. */
static void check_q8k(const float *x, const uint8_t *row) {
    for (int b = 0; b < K / 256; b++) {
        bool fin;
        const float *xb = x + 256 * b;
        const float amax = block_amax(xb, 256, &fin);
        float max = 0;
        for (int i = 0; i < 256; i++)
            if (fabsf(xb[i]) == amax && max == 0) max = xb[i];
        const int8_t *q = sp_act_qs(row) + 256 * b;
        const float d = sp_actk_d(row, K)[b];
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int i = 0; i < 16; i++) s += q[16 * j + i];
            assert_int_equal(sp_actk_bsum(row, K)[16 * b + j], s);
        }
        if (!fin) {
            assert_true(isnan(d));
            for (int i = 0; i < 256; i++) assert_int_equal(q[i], 0);
            continue;
        }
        if (amax == 0) {
            assert_true(d == 0);
            continue;
        }
        for (int i = 0; i < 256; i++) {
            double want = nearbyint(-127.0 * (double)xb[i] / (double)max);
            want = want > 127 ? 127 : want;
            if (fabs(q[i] - want) > 1) fail_msg("q8_K block %d [%d]: q %d, want %.0f (x %g)", b, i, q[i], want, xb[i]);
            if (xb[i] == max) assert_int_equal(q[i], -127);
        }
        const double dw = (double)max / -127.0;
        if (fabs(d - dw) > 1e-6 * fabs(dw) + 0x1p-149) fail_msg("q8_K block %d: d %g, want %g", b, d, dw);
    }
}

static const sp_ggml_type ACT_TYPES[] = {SP_GGML_Q8_0, SP_GGML_Q4_0, SP_GGML_Q4_1, SP_GGML_Q5_0,
                                         SP_GGML_Q5_1, SP_GGML_IQ4_NL, SP_GGML_Q2_K, SP_GGML_Q3_K,
                                         SP_GGML_Q4_K, SP_GGML_Q5_K, SP_GGML_Q6_K, SP_GGML_IQ4_XS};
#define N_ACT (sizeof ACT_TYPES / sizeof ACT_TYPES[0])

/* The activation quantisers (ops.c act_q8_ref, act_q8k; ops_avx512.c
 * act_q8) on every ISA: exact values, and the scalar tier's bytes. Then each
 * type's matmul (ordinary and packed) over those rows on every ISA: the
 * sanitizers watch the integer arithmetic; finite tokens of small values
 * give finite outputs within the bound sum |w| |x|. */
static void test_act_extremes_every_isa(void **state) {
    (void)state;
    float *x = malloc((size_t)T * K * sizeof(float));
    extreme_rows(x);
    sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    for (size_t ti = 0; ti < N_ACT; ti++) {
        const sp_ggml_type type = ACT_TYPES[ti];
        const size_t ab = sp_ops_act_bytes(type, K);
        uint8_t *ref = aligned_alloc(64, ab * T), *got = aligned_alloc(64, ab * T);
        memset(ref, 0, ab * T);
        assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
        for (int t = 0; t < T; t++) {
            sp_ops_act_prepare(type, x + t * K, K, ref + t * ab);
            if (sp_ops_act_kind(type) == SP_ACT_Q8) check_q8(x + t * K, ref + t * ab);
            else check_q8k(x + t * K, ref + t * ab);
        }
        for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
            memset(got, 0, ab * T);
            assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
            for (int t = 0; t < T; t++) sp_ops_act_prepare(type, x + t * K, K, got + t * ab);
            assert_memory_equal(ref, got, ab * T);
        }
        /* matmuls over these rows: 16 weight rows of ordinary values */
        const int64_t rows = 16;
        const size_t ws = sp_ggml_row_size(type, K);
        uint8_t *w = malloc(ws * rows);
        float *wr = malloc(K * sizeof(float)), *y = malloc(T * rows * sizeof(float));
        double *bound = calloc(T * rows, sizeof(double));
        sp_rng r;
        sp_rng_seed(&r, 900 + ti);
        for (int64_t j = 0; j < rows; j++) {
            for (int i = 0; i < K; i++) wr[i] = (float)sp_rng_normal(&r) * 0.1f;
            if (sp_quant_supported(type)) {
                sp_quantize_row(type, wr, w + j * ws, K);
            } else { /* Q2_K, Q3_K: Specula only reads them; random bytes with small scales */
                for (size_t i = 0; i < ws; i++) w[j * ws + i] = (uint8_t)sp_rng_below(&r, 256);
                for (int b = 0; b < K / 256; b++) {
                    const uint16_t dd = sp_fp32_to_fp16(0.01f);
                    if (type == SP_GGML_Q2_K) ((sp_block_q2_K *)(w + j * ws))[b].d = dd, ((sp_block_q2_K *)(w + j * ws))[b].dmin = dd;
                    else ((sp_block_q3_K *)(w + j * ws))[b].d = dd;
                }
            }
            sp_dequantize_row(type, w + j * ws, wr, K);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < K; i++) bound[t * rows + j] += fabs((double)wr[i] * x[t * K + i]);
        }
        uint8_t *pk = aligned_alloc(64, sp_ops_pack_bytes(type, rows, K));
        sp_ops_pack(type, w, ws, rows, K, pk);
        for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++)
            for (int packed = 0; packed < 2; packed++) {
                sp_mm_kernel kern = packed ? sp_ops_mm_packed_isa(type, (sp_isa)isa) : sp_ops_mm_isa(type, (sp_isa)isa);
                if (!kern) continue;
                sp_mm m = {.wtype = type, .w = packed ? pk : w, .w_stride = packed ? sp_ops_pack_stride(type, K) : ws,
                           .k = K, .x = ref, .x_stride = ab, .n = T, .y = y, .ld_y = rows};
                kern(&m, 0, rows);
                for (int64_t j = 0; j < rows; j++) /* token 0 holds only small finite values */
                    if (!(fabs(y[j]) <= 1.01 * bound[j] + 1e-37))
                        fail_msg("%s %s%s: y[%lld] = %g, bound %g", sp_ops_isa_name((sp_isa)isa),
                                 sp_ggml_type_name(type), packed ? " packed" : "", (long long)j, y[j], bound[j]);
            }
        free(pk);
        free(w);
        free(wr);
        free(y);
        free(bound);
        free(ref);
        free(got);
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(x);
}

/* The weight quantisers (quant.c) on rows of each case: no undefined
 * conversion (UBSan), and what is stored dequantises to finite values for
 * finite rows within the f16 range, to zero for rows too small for an f16
 * scale. Every ISA quantises with the same scalar code. */
static void test_quantize_extremes(void **state) {
    (void)state;
    const sp_ggml_type types[] = {SP_GGML_Q8_0, SP_GGML_Q4_0, SP_GGML_Q4_1, SP_GGML_Q5_0, SP_GGML_Q5_1,
                                  SP_GGML_IQ4_NL, SP_GGML_Q4_K, SP_GGML_Q5_K, SP_GGML_Q6_K, SP_GGML_IQ4_XS,
                                  SP_GGML_F16, SP_GGML_BF16};
    float *x = malloc((size_t)T * K * sizeof(float)), *deq = malloc(K * sizeof(float));
    extreme_rows(x);
    /* a row spanning more than FLT_MAX (max - min overflows: Q4_1, Q5_1) */
    float *wide = malloc(K * sizeof(float));
    for (int i = 0; i < K; i++) wide[i] = i % 2 ? FLT_MAX : -FLT_MAX;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const size_t rs = sp_ggml_row_size(types[ti], K);
        uint8_t *q = malloc(rs);
        for (int t = 0; t <= T; t++) {
            const float *row = t < T ? x + t * K : wide;
            sp_quantize_row(types[ti], row, q, K);
            sp_dequantize_row(types[ti], q, deq, K);
            if (t == 0)
                for (int i = 0; i < 768; i++) { /* token 0's first three super-blocks */
                    /* tiny rows: an f16 scale of 0 (or a subnormal f16 one) */
                    if (!(fabsf(deq[i]) <= 1e-3f))
                        fail_msg("%s: tiny x[%d] = %g dequantised to %g", sp_ggml_type_name(types[ti]), i, row[i], deq[i]);
                }
        }
        free(q);
    }
    free(wide);
    free(x);
    free(deq);
}

/* The vector exp (ops_avx2.c converts n = round(x / ln2) to an integer):
 * softmax and swiglu on every ISA over huge, infinite and NaN inputs give
 * the scalar reference's values (NaN where it is NaN). */
static void test_exp_extremes_every_isa(void **state) {
    (void)state;
    const float v[] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e30f, -1e30f, 3e9f, -3e9f, 200.0f,
                       -200.0f, 0x1p-149f, 0.0f, 1.0f, -1.0f, 88.0f, -103.0f, 5e4f, -5e4f, 1e38f};
    enum { N = 40 };
    float g[N], u[N], ref[N], y[N];
    for (int i = 0; i < N; i++) g[i] = v[i % 20], u[i] = i % 3 ? 1.0f : -2.0f;
    sp_swiglu(ref, g, u, N);
    sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
        assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
        sp_ops_swiglu()(y, g, u, N);
        for (int i = 0; i < N; i++)
            if (!(isnan(ref[i]) ? isnan(y[i]) : memcmp(&y[i], &ref[i], 4) == 0))
                fail_msg("%s swiglu(%g): %g, reference %g", sp_ops_isa_name((sp_isa)isa), g[i], y[i], ref[i]);
        /* softmax: rows with and without a NaN, with inf, with huge finite spreads */
        float a[3][N], b[3][N];
        for (int i = 0; i < N; i++) {
            a[0][i] = i % 2 ? -FLT_MAX : FLT_MAX / (float)(i + 1);
            a[1][i] = v[i % 20];
            a[2][i] = i == 3 ? INFINITY : (float)i * -1e30f;
        }
        memcpy(b, a, sizeof a);
        for (int j = 0; j < 3; j++) {
            sp_softmax(a[j], N);
            sp_ops_softmax()(b[j], N);
            for (int i = 0; i < N; i++)
                if (!(isnan(a[j][i]) ? isnan(b[j][i]) : memcmp(&a[j][i], &b[j][i], 4) == 0))
                    fail_msg("%s softmax row %d [%d]: %g, reference %g", sp_ops_isa_name((sp_isa)isa), j, i,
                             b[j][i], a[j][i]);
        }
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_toint_helpers),
    cmocka_unit_test(test_act_extremes_every_isa),
    cmocka_unit_test(test_quantize_extremes),
    cmocka_unit_test(test_exp_extremes_every_isa),
};
SP_TEST_MAIN(tests)
