/* Tests for the formats beyond Q8_0/Q4_0 (Q4_1, Q5_0, Q5_1, IQ4_NL, the
 * K-quants, IQ4_XS, MXFP4):
 *  - dequantisation against gguf-py's numpy dequantiser on real llama-quantize
 *    output (../shared/reference/formats/dequant-rows.txt), relative 1e-6;
 *  - every ISA's matmul kernel against a double-precision dot product of the
 *    dequantised weights with the dequantised activations;
 *  - the invariances speculative decoding relies on: n tokens at once give
 *    bit-identical outputs to one at a time, whatever the row split. */
#include "testutil.h"

#include <math.h>

#include "ops.h"
#include "gguf.h"
#include "sp_model.h"
#include "quant.h"
#include "rng.h"
#include "requant.h"

static const sp_ggml_type NEW_TYPES[] = {SP_GGML_Q4_1, SP_GGML_Q5_0, SP_GGML_Q5_1, SP_GGML_IQ4_NL,
                                         SP_GGML_Q2_K, SP_GGML_Q3_K, SP_GGML_Q4_K, SP_GGML_Q5_K,
                                         SP_GGML_Q6_K, SP_GGML_IQ4_XS, SP_GGML_MXFP4};
#define N_NEW (sizeof NEW_TYPES / sizeof NEW_TYPES[0])

static sp_ggml_type type_by_name(const char *name) {
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++)
        if (!strcasecmp(sp_ggml_type_name((sp_ggml_type)t), name)) return (sp_ggml_type)t;
    return SP_GGML_TYPE_COUNT;
}

/* Every record of dequant-rows.txt: the first two rows of a tensor of a real
 * file, dequantised by gguf-py. */
static void test_dequant_matches_gguf_py(void **state) {
    (void)state;
    FILE *f = fopen(sp_shared("reference/formats/dequant-rows.txt"), "r");
    assert_non_null(f);
    char line[256];
    int records = 0;
    bool seen[SP_GGML_TYPE_COUNT] = {0};
    while (fgets(line, sizeof line, f)) {
        char file[64], tensor[64], tname[16];
        long long len;
        if (line[0] == '#' || sscanf(line, "%63s %63s %15s %lld", file, tensor, tname, &len) != 4) continue;
        sp_ggml_type type = type_by_name(tname);
        assert_true(type < SP_GGML_TYPE_COUNT);
        assert_true(sp_quant_loadable(type));
        char rel[128];
        snprintf(rel, sizeof rel, "reference/formats/%s", file);
        sp_gguf *g = NULL;
        sp_error err = {0};
        assert_int_equal(sp_gguf_open(sp_shared(rel), &g, &err), SP_OK);
        const sp_gguf_tensor *t = sp_gguf_find_tensor(g, tensor);
        assert_non_null(t);
        assert_int_equal(t->type, type);
        assert_int_equal(t->ne[0], len);
        float *got = malloc((size_t)len * sizeof(float));
        double maxrel = 0;
        for (int r = 0; r < 2; r++) {
            sp_dequantize_row(type, (const uint8_t *)t->data + r * sp_ggml_row_size(type, len), got, len);
            for (long long i = 0; i < len; i++) {
                double want;
                assert_int_equal(fscanf(f, "%lf", &want), 1);
                double diff = fabs((double)got[i] - want);
                if (diff > 1e-6 * fabs(want) + 1e-12) {
                    fprintf(stderr, "%s %s row %d elem %lld: got %.9g want %.9g\n", file, tname, r, i,
                            (double)got[i], want);
                    fail();
                }
                if (want != 0 && diff / fabs(want) > maxrel) maxrel = diff / fabs(want);
            }
        }
        printf("dequant %-18s %-7s max rel diff %.2g\n", file, tname, maxrel);
        seen[type] = true;
        records++;
        free(got);
        sp_gguf_close(g);
    }
    fclose(f);
    assert_true(records >= 12);
    for (size_t i = 0; i < N_NEW; i++) {
        /* MXFP4's dequantisation is held to gguf-py in test_quant */
        if (NEW_TYPES[i] != SP_GGML_MXFP4) assert_true(seen[NEW_TYPES[i]]);
    }
}

/* Random but valid weight rows: random bytes, then every f16 scale field set
 * to a small finite value (random bytes there would give inf/NaN). */
static void random_row(sp_ggml_type type, uint8_t *row, int64_t k, sp_rng *r) {
    const size_t bytes = sp_ggml_row_size(type, k);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)sp_rng_below(r, 256);
    const int64_t nb = k / sp_ggml_blck_size(type);
#define SCALE() sp_fp32_to_fp16((float)(0.002 + 0.01 * sp_rng_uniform(r)))
    for (int64_t b = 0; b < nb; b++) {
        switch (type) {
        case SP_GGML_Q4_1: ((sp_block_q4_1 *)row)[b].d = SCALE(), ((sp_block_q4_1 *)row)[b].m = SCALE(); break;
        case SP_GGML_Q5_0: ((sp_block_q5_0 *)row)[b].d = SCALE(); break;
        case SP_GGML_Q5_1: ((sp_block_q5_1 *)row)[b].d = SCALE(), ((sp_block_q5_1 *)row)[b].m = SCALE(); break;
        case SP_GGML_IQ4_NL: ((sp_block_iq4_nl *)row)[b].d = SCALE(); break;
        case SP_GGML_Q2_K: ((sp_block_q2_K *)row)[b].d = SCALE(), ((sp_block_q2_K *)row)[b].dmin = SCALE(); break;
        case SP_GGML_Q3_K: ((sp_block_q3_K *)row)[b].d = SCALE(); break;
        case SP_GGML_Q4_K: ((sp_block_q4_K *)row)[b].d = SCALE(), ((sp_block_q4_K *)row)[b].dmin = SCALE(); break;
        case SP_GGML_Q5_K: ((sp_block_q5_K *)row)[b].d = SCALE(), ((sp_block_q5_K *)row)[b].dmin = SCALE(); break;
        case SP_GGML_Q6_K: ((sp_block_q6_K *)row)[b].d = SCALE(); break;
        case SP_GGML_IQ4_XS: ((sp_block_iq4_xs *)row)[b].d = SCALE(); break;
        case SP_GGML_MXFP4: ((sp_block_mxfp4 *)row)[b].e = (uint8_t)(118 + sp_rng_below(r, 6)); break;
        default: fail();
        }
    }
#undef SCALE
}

/* The activation values a prepared row stands for (q * d per block). */
static void act_values(sp_ggml_type type, const void *act, int64_t k, double *out) {
    const int8_t *qs = sp_act_qs(act);
    for (int64_t i = 0; i < k; i++) {
        double d = sp_ops_act_kind(type) == SP_ACT_Q8_K ? sp_actk_d(act, k)[i / 256] : sp_act_d(act, k)[i / 32];
        out[i] = d * qs[i];
    }
}

typedef struct fixture {
    sp_ggml_type type;
    int64_t rows, k;
    int32_t n;
    uint8_t *w, *act;
    size_t w_stride, act_stride;
    double *want, *bound; /* [n][rows] */
} fixture;

static void fx_make(fixture *f, sp_ggml_type type, int64_t rows, int64_t k, int32_t n, uint64_t seed) {
    sp_rng r;
    sp_rng_seed(&r, seed);
    *f = (fixture){.type = type, .rows = rows, .k = k, .n = n};
    f->w_stride = sp_ggml_row_size(type, k);
    f->w = malloc(f->w_stride * (size_t)rows);
    f->act_stride = sp_ops_act_bytes(type, k);
    f->act = aligned_alloc(64, f->act_stride * (size_t)n);
    f->want = calloc((size_t)(n * rows), sizeof(double));
    f->bound = calloc((size_t)(n * rows), sizeof(double));
    float *x = malloc((size_t)k * sizeof(float)), *deq = malloc((size_t)k * sizeof(float));
    double *xv = malloc((size_t)(n * k) * sizeof(double));
    for (int32_t t = 0; t < n; t++) {
        for (int64_t i = 0; i < k; i++) x[i] = (float)sp_rng_normal(&r) * (i % 13 == 0 ? 4.0f : 1.0f);
        sp_ops_act_prepare(type, x, k, f->act + t * f->act_stride);
        act_values(type, f->act + t * f->act_stride, k, xv + t * k);
    }
    for (int64_t j = 0; j < rows; j++) {
        random_row(type, f->w + j * f->w_stride, k, &r);
        sp_dequantize_row(type, f->w + j * f->w_stride, deq, k);
        for (int32_t t = 0; t < n; t++)
            for (int64_t i = 0; i < k; i++) {
                f->want[t * rows + j] += (double)deq[i] * xv[t * k + i];
                f->bound[t * rows + j] += fabs((double)deq[i] * xv[t * k + i]);
            }
    }
    free(x);
    free(deq);
    free(xv);
}

static void fx_free(fixture *f) {
    free(f->w);
    free(f->act);
    free(f->want);
    free(f->bound);
}

static sp_mm fx_mm(const fixture *f, int32_t t0, int32_t n, float *y) {
    return (sp_mm){.wtype = f->type, .w = f->w, .w_stride = f->w_stride, .k = f->k,
                   .x = f->act + t0 * f->act_stride, .x_stride = f->act_stride, .n = n, .y = y,
                   .ld_y = f->rows};
}

/* Kernel output against the double dot of dequantised operands. The only
 * approximation the kernels make is the offset term of Q4_1/Q5_1 (m * s
 * with s = f16(d * sum), as ggml), hence 2e-3 of sum |w x| there and 1e-5
 * elsewhere. */
static void test_kernels_match_dequantised_dot(void **state) {
    (void)state;
    for (size_t ti = 0; ti < N_NEW; ti++) {
        fixture f;
        fx_make(&f, NEW_TYPES[ti], 9, 768, 6, 100 + ti); /* 6 tokens: a group of 4 and 2 one at a time */
        const double rel = (f.type == SP_GGML_Q4_1 || f.type == SP_GGML_Q5_1) ? 2e-3 : 1e-5;
        float *y = malloc((size_t)(f.n * f.rows) * sizeof(float));
        for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
            sp_mm_kernel kern = sp_ops_mm_isa(f.type, (sp_isa)isa);
            assert_non_null(kern);
            sp_mm m = fx_mm(&f, 0, f.n, y);
            kern(&m, 0, f.rows);
            double worst = 0;
            for (int64_t i = 0; i < f.n * f.rows; i++) {
                double e = fabs(y[i] - f.want[i]) / (f.bound[i] + 1e-30);
                if (e > worst) worst = e;
                if (e > rel) {
                    fprintf(stderr, "%s %s: y[%lld] = %.8g, want %.8g (bound %.3g)\n",
                            sp_ggml_type_name(f.type), sp_ops_isa_name((sp_isa)isa), (long long)i, y[i],
                            f.want[i], f.bound[i]);
                    fail();
                }
            }
            printf("kernel %-7s %-6s max |err|/sum|wx| %.2g\n", sp_ggml_type_name(f.type),
                   sp_ops_isa_name((sp_isa)isa), worst);
        }
        free(y);
        fx_free(&f);
    }
}

/* n tokens at once == one at a time, bit for bit, and any row split gives
 * the same values (what makes speculative greedy equal plain greedy). */
static void test_batch_and_split_invariance(void **state) {
    (void)state;
    for (size_t ti = 0; ti < N_NEW; ti++) {
        fixture f;
        fx_make(&f, NEW_TYPES[ti], 12, 512, 19, 200 + ti); /* 19: a group of 16 and a partial one */
        float *ya = malloc((size_t)(f.n * f.rows) * sizeof(float));
        float *yb = malloc((size_t)(f.n * f.rows) * sizeof(float));
        for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
            sp_mm_kernel kern = sp_ops_mm_isa(f.type, (sp_isa)isa);
            sp_mm m = fx_mm(&f, 0, f.n, ya);
            kern(&m, 0, f.rows);
            for (int32_t t = 0; t < f.n; t++) {
                sp_mm one = fx_mm(&f, t, 1, yb + t * f.rows);
                kern(&one, 0, 5);
                kern(&one, 5, f.rows);
            }
            assert_memory_equal(ya, yb, (size_t)(f.n * f.rows) * sizeof(float));
        }
        free(ya);
        free(yb);
        fx_free(&f);
    }
}

/* The SIMD kernels of these formats form the same exact integer sums as the
 * scalar reference and the same float expression, so they are bit-identical
 * to it. */
static void test_simd_bit_identical(void **state) {
    (void)state;
    for (size_t ti = 0; ti < N_NEW; ti++) {
        fixture f;
        fx_make(&f, NEW_TYPES[ti], 7, 1280, 19, 300 + ti); /* 40 32-blocks: groups of 16, 16, 8 */
        float *ya = malloc((size_t)(f.n * f.rows) * sizeof(float));
        float *yb = malloc((size_t)(f.n * f.rows) * sizeof(float));
        sp_mm m = fx_mm(&f, 0, f.n, ya);
        sp_ops_mm_isa(f.type, SP_ISA_SCALAR)(&m, 0, f.rows);
        for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
            m = fx_mm(&f, 0, f.n, yb);
            sp_ops_mm_isa(f.type, (sp_isa)isa)(&m, 0, f.rows);
            assert_memory_equal(ya, yb, (size_t)(f.n * f.rows) * sizeof(float));
        }
        free(ya);
        free(yb);
        fx_free(&f);
    }
}

/* Quantisers against llama-quantize on the same weights (base-f32 ->
 * pure-TYPE): Q4_1, Q5_0, Q5_1 follow ggml's reference quantisers and must
 * give the same bytes for every matrix; Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS are Specula's own
 * simpler quantisers (llama-quantize searches scales iteratively), held to a
 * root-mean-square error at most 1.3x llama-quantize's. */
static void test_quantisers_against_llama_quantize(void **state) {
    (void)state;
    static const struct { sp_ggml_type t; const char *file; bool exact; } cases[] = {
        {SP_GGML_Q4_1, "pure-Q4_1", true},      {SP_GGML_Q5_0, "pure-Q5_0", true},
        {SP_GGML_Q5_1, "pure-Q5_1", true},      {SP_GGML_Q4_K, "pure-Q4_K_M", false},
        {SP_GGML_Q6_K, "pure-Q6_K", false},     {SP_GGML_Q5_K, "pure-Q5_K_M", false},
        {SP_GGML_IQ4_NL, "pure-IQ4_NL", false}, {SP_GGML_IQ4_XS, "pure-IQ4_XS", false},
    };
    sp_gguf *base = NULL;
    sp_error err = {0};
    assert_int_equal(sp_gguf_open(sp_shared("reference/formats/base-f32.gguf"), &base, &err), SP_OK);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char rel[128];
        snprintf(rel, sizeof rel, "reference/formats/%s.gguf", cases[ci].file);
        sp_gguf *ref = NULL;
        assert_int_equal(sp_gguf_open(sp_shared(rel), &ref, &err), SP_OK);
        double se_ours = 0, se_ref = 0;
        int matrices = 0;
        for (uint64_t i = 0; i < sp_gguf_n_tensors(base); i++) {
            const sp_gguf_tensor *bt = sp_gguf_tensor_at(base, i);
            char name[96];
            snprintf(name, sizeof name, "%.*s", (int)bt->name.len, bt->name.ptr);
            const sp_gguf_tensor *rt = sp_gguf_find_tensor(ref, name);
            if (!rt || rt->type != cases[ci].t) continue;
            const int64_t cols = bt->ne[0], rows = bt->ne[1];
            const size_t rb = sp_ggml_row_size(cases[ci].t, cols);
            uint8_t *q = malloc(rb);
            float *deq = malloc((size_t)cols * sizeof(float)), *deq_ref = malloc((size_t)cols * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                const float *x = (const float *)bt->data + r * cols;
                const uint8_t *want = (const uint8_t *)rt->data + (size_t)r * rb;
                sp_quantize_row(cases[ci].t, x, q, cols);
                if (cases[ci].exact && memcmp(q, want, rb) != 0) {
                    fprintf(stderr, "%s %s row %lld differs from llama-quantize\n", cases[ci].file, name, (long long)r);
                    fail();
                }
                sp_dequantize_row(cases[ci].t, q, deq, cols);
                sp_dequantize_row(cases[ci].t, want, deq_ref, cols);
                for (int64_t j = 0; j < cols; j++) {
                    se_ours += (deq[j] - x[j]) * (double)(deq[j] - x[j]);
                    se_ref += (deq_ref[j] - x[j]) * (double)(deq_ref[j] - x[j]);
                }
            }
            free(q), free(deq), free(deq_ref);
            matrices++;
        }
        printf("quantise %-7s %2d matrices: rmse ours / llama-quantize = %.4f%s\n", sp_ggml_type_name(cases[ci].t),
               matrices, sqrt(se_ours / se_ref), cases[ci].exact ? " (byte-identical)" : "");
        assert_true(matrices >= 14);
        assert_true(se_ours <= 1.3 * 1.3 * se_ref);
        sp_gguf_close(ref);
    }
    sp_gguf_close(base);
}

/* A low-bit self-draft in the new writable types: base-f32 (rows of 256 and
 * 768) re-quantised at load keeps its shape, reports the type, and its
 * logits stay close to the F32 model's (4-bit: within 15% of the logit
 * range; 5-bit: 7%; 6-bit: 5%). */
static void test_requantize_new_types(void **state) {
    (void)state;
    static const struct { sp_ggml_type t; double tol; } cases[] = {
        {SP_GGML_Q4_K, 0.15}, {SP_GGML_Q6_K, 0.05}, {SP_GGML_Q5_0, 0.07}, {SP_GGML_Q5_1, 0.07}, {SP_GGML_Q4_1, 0.15},
        {SP_GGML_Q5_K, 0.07}, {SP_GGML_IQ4_NL, 0.15}, {SP_GGML_IQ4_XS, 0.15}};
    sp_model *m = NULL;
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    assert_int_equal(sp_model_load(sp_shared("reference/formats/base-f32.gguf"), &mp, &m, &err), SP_OK);
    const int V = sp_model_cfg(m)->n_vocab;
    const int32_t toks[6] = {1, 403, 407, 261, 378, 432};
    float *ref = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
    for (int k = -1; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        sp_model *q = NULL;
        if (k >= 0) {
            assert_int_equal(sp_model_requantize(m, cases[k].t, &q, &err), SP_OK);
            assert_int_equal(sp_model_cfg(q)->wtype, cases[k].t);
        }
        sp_ctx *c = NULL;
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = 16;
        assert_int_equal(sp_ctx_init(k >= 0 ? q : m, &cp, &c, &err), SP_OK);
        sp_batch b = {.tokens = toks, .n = 6};
        assert_int_equal(sp_forward(c, &b, k >= 0 ? got : ref, &err), SP_OK);
        sp_ctx_free(c);
        if (k < 0) continue;
        double md = 0, lo = ref[0], hi = ref[0];
        for (int i = 0; i < V; i++) {
            md = fmax(md, fabs((double)got[i] - ref[i]));
            lo = fmin(lo, ref[i]), hi = fmax(hi, ref[i]);
        }
        printf("requantize %-5s max |logit diff| %.3f of range %.3f\n", sp_ggml_type_name(cases[k].t), md, hi - lo);
        assert_true(md < cases[k].tol * (hi - lo));
        sp_model_free(q);
    }
    free(ref), free(got);
    sp_model_free(m);
}

/* The q8_K activation layout (ops.h) on a hand-made block: the element of
 * largest magnitude maps to -127 * sign, d = max / -127, 16-sums. */
static void test_act_q8k_layout(void **state) {
    (void)state;
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 16) - 7.0f; /* -7 .. 8 */
    x[5] = -20.0f;                                                /* max: -20 */
    uint8_t *buf = aligned_alloc(64, sp_ops_act_bytes(SP_GGML_Q4_K, 256));
    sp_ops_act_prepare(SP_GGML_Q4_K, x, 256, buf);
    const int8_t *q = sp_act_qs(buf);
    assert_true(sp_actk_d(buf, 256)[0] == 1.0f / (-127.0f / -20.0f));
    assert_int_equal(q[5], -127);
    assert_int_equal(q[7], 0);                        /* x = 0 */
    assert_int_equal(q[15], (int)nearbyintf(8 * 127.0f / 20.0f)); /* 50.8 -> 51 */
    for (int j = 0; j < 16; j++) {
        int32_t s = 0;
        for (int i = 0; i < 16; i++) s += q[16 * j + i];
        assert_int_equal(sp_actk_bsum(buf, 256)[j], s);
    }
    /* a NaN makes d NaN and q 0, never an undefined conversion */
    x[100] = NAN;
    sp_ops_act_prepare(SP_GGML_Q4_K, x, 256, buf);
    assert_true(isnan(sp_actk_d(buf, 256)[0]));
    assert_int_equal(q[5], 0);
    free(buf);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_dequant_matches_gguf_py),
    cmocka_unit_test(test_kernels_match_dequantised_dot),
    cmocka_unit_test(test_batch_and_split_invariance),
    cmocka_unit_test(test_simd_bit_identical),
    cmocka_unit_test(test_act_q8k_layout),
    cmocka_unit_test(test_quantisers_against_llama_quantize),
    cmocka_unit_test(test_requantize_new_types),
};

SP_TEST_MAIN(tests)
