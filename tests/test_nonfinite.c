/* Non-finite weights and overflowing activations (issue: reliability item 2):
 * the forward pass must report them as an error, never run undefined float
 * to int conversions (UBSan checks that in CI) or hand garbage to a sampler.
 * The weights are altered in memory on a real model (stories260K): a NaN in
 * the final norm, and a norm weight of 3e38 that overflows the activations
 * of the first layer's quantised-or-float matmuls to inf. */
#include "testutil.h"

#include <math.h>

#include "model_internal.h"
#include "sp_model.h"
#include "requant.h"

static sp_status run_forward(sp_model *m, sp_error *err) {
    sp_ctx *c = NULL;
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = 32;
    assert_int_equal(sp_ctx_init(m, &p, &c, err), SP_OK);
    const int32_t toks[3] = {1, 403, 407};
    float *lg = malloc((size_t)sp_model_cfg(m)->n_vocab * sizeof(float));
    sp_batch b = {.tokens = toks, .n = 3};
    sp_status st = sp_forward(c, &b, lg, err);
    free(lg);
    sp_ctx_free(c);
    return st;
}

static void check_model(sp_model *m) {
    const int32_t dim = sp_model_cfg(m)->dim;
    sp_error err = {0};
    assert_int_equal(run_forward(m, &err), SP_OK);
    /* a NaN in the output norm */
    const float *saved = m->out_norm;
    float *bad = sp_model_alloc(m, (size_t)dim * sizeof(float));
    memcpy(bad, saved, (size_t)dim * sizeof(float));
    bad[3] = NAN;
    m->out_norm = bad;
    assert_int_equal(run_forward(m, &err), SP_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "non-finite"));
    m->out_norm = saved;
    /* overflow: the first attention norm scaled to 1e30 */
    const float *saved_an = m->layers[0].attn_norm;
    float *big = sp_model_alloc(m, (size_t)dim * sizeof(float));
    for (int32_t i = 0; i < dim; i++) big[i] = 1e30f;
    m->layers[0].attn_norm = big;
    assert_int_equal(run_forward(m, &err), SP_ERR_NUMERIC);
    /* tiny: the first attention norm scaled to 1e-39 (issue 25), so the
     * first layer's matmuls see subnormal activations: 127 / max overflowed
     * in the q8 and q8_K quantisers; the pass must run, finite */
    float *tiny = sp_model_alloc(m, (size_t)dim * sizeof(float));
    for (int32_t i = 0; i < dim; i++) tiny[i] = saved_an[i] * 1e-39f;
    m->layers[0].attn_norm = tiny;
    assert_int_equal(run_forward(m, &err), SP_OK);
    for (int32_t i = 0; i < dim; i++) tiny[i] = saved_an[i] * 1e-44f; /* a few subnormal steps */
    assert_int_equal(run_forward(m, &err), SP_OK);
    m->layers[0].attn_norm = saved_an;
    assert_int_equal(run_forward(m, &err), SP_OK);
}

static void test_nonfinite_f32(void **state) {
    (void)state;
    sp_model *m = NULL;
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    assert_int_equal(sp_model_load(sp_shared("models/stories260K.gguf"), &mp, &m, &err), SP_OK);
    check_model(m);
    sp_model_free(m);
}

/* The same through the int8 activation quantisers (Q8_0 copy of the model). */
static void test_nonfinite_q8_0(void **state) {
    (void)state;
    sp_model *m = NULL, *q = NULL;
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    assert_int_equal(sp_model_load(sp_shared("models/stories260K.gguf"), &mp, &m, &err), SP_OK);
    assert_int_equal(sp_model_requantize(m, SP_GGML_Q8_0, &q, &err), SP_OK);
    check_model(q);
    sp_model_free(q);
    sp_model_free(m);
}

/* The same through the K-quant, IQ4 and legacy kernels: llama-quantize
 * files of ../shared/reference/formats (K-quant rows take q8_K activations). */
static void test_nonfinite_formats(void **state) {
    (void)state;
    const char *files[] = {"mix-Q4_K_M", "mix-Q2_K", "mix-Q3_K_S", "mix-Q5_K_S", "mix-IQ4_XS", "mix-Q4_1", "mix-Q5_0"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "reference/formats/%s.gguf", files[i]);
        sp_model *m = NULL;
        sp_error err = {0};
        sp_model_params mp = sp_model_default_params();
        if (sp_model_load(sp_shared(rel), &mp, &m, &err) != SP_OK) fail_msg("%s: %s", rel, err.msg);
        check_model(m);
        sp_model_free(m);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_nonfinite_f32),
    cmocka_unit_test(test_nonfinite_q8_0),
    cmocka_unit_test(test_nonfinite_formats),
};

SP_TEST_MAIN(tests)
