/* Tests for hidden-state taps (sp_ctx_set_taps): a batch's taps equal
 * one-token-at-a-time taps bit for bit, layer 0 is the token embedding, the
 * final tap normed and projected gives the forward's logits, skipped layers
 * pass their input on, sp_forward_multi records each sequence's own rows,
 * and bad tap lists are refused. */
#include "testutil.h"

#include <math.h>

#include "model_internal.h"
#include "ops.h"

static const int32_t SEQ[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
#define NSEQ ((int32_t)(sizeof SEQ / sizeof SEQ[0]))

static sp_model *load(const char *path) {
    sp_error err = {0};
    sp_model *m = NULL;
    if (sp_model_load(path, NULL, &m, &err)) fail_msg("load %s: %s", path, err.msg);
    return m;
}

static sp_ctx *mkctx(const sp_model *m, int32_t threads) {
    sp_error err = {0};
    sp_ctx *c = NULL;
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = 128;
    p.n_threads = threads;
    p.max_batch = 32;
    if (sp_ctx_init(m, &p, &c, &err)) fail_msg("ctx: %s", err.msg);
    return c;
}

static void set_taps(sp_ctx *c, const int32_t *layers, int32_t n) {
    sp_error err = {0};
    if (sp_ctx_set_taps(c, layers, n, &err)) fail_msg("taps: %s", err.msg);
}

static void fwd(sp_ctx *c, const int32_t *tok, int32_t n, float *logits) {
    sp_error err = {0};
    sp_batch b = {.tokens = tok, .n = n, .logits_all = true};
    if (sp_forward(c, &b, logits, &err)) fail_msg("forward: %s", err.msg);
}

/* Every tap of one batch over SEQ equals the taps of one-token forwards,
 * bit for bit, on each model (the forward's batch invariance, DESIGN.md). */
static void batch_equals_sequential(const char *path) {
    sp_model *m = load(sp_shared(path));
    const int32_t L = sp_model_cfg(m)->n_layers, dim = sp_model_cfg(m)->dim;
    const int32_t V = sp_model_cfg(m)->n_vocab;
    const int32_t layers[] = {0, 1, L / 2, L};
    sp_ctx *a = mkctx(m, 2), *b = mkctx(m, 1);
    set_taps(a, layers, 4);
    set_taps(b, layers, 4);
    assert_int_equal(sp_ctx_n_taps(a), 4);
    float *logits = malloc((size_t)NSEQ * (size_t)V * sizeof(float));
    int32_t rows = -1;
    assert_null(sp_ctx_taps(a, 0, &rows)); /* nothing recorded yet */
    assert_int_equal(rows, 0);
    fwd(a, SEQ, NSEQ, logits);
    for (int32_t t = 0; t < NSEQ; t++) {
        fwd(b, SEQ + t, 1, logits);
        for (int32_t k = 0; k < 4; k++) {
            int32_t ra, rb;
            const float *x = sp_ctx_taps(a, k, &ra), *y = sp_ctx_taps(b, k, &rb);
            assert_int_equal(ra, NSEQ);
            assert_int_equal(rb, 1);
            if (memcmp(x + (int64_t)t * dim, y, (size_t)dim * sizeof(float)))
                fail_msg("%s: tap of layer %d, token %d: batch and one-token rows differ", path,
                         layers[k], t);
        }
    }
    /* distinct layers hold distinct states (a tap that ignored its layer would pass the above) */
    int32_t r;
    const float *t0 = sp_ctx_taps(b, 0, &r), *t1 = sp_ctx_taps(b, 1, &r), *tl = sp_ctx_taps(b, 3, &r);
    assert_true(memcmp(t0, t1, (size_t)dim * sizeof(float)) != 0);
    assert_true(memcmp(t1, tl, (size_t)dim * sizeof(float)) != 0);
    assert_null(sp_ctx_taps(b, 4, &r));
    assert_int_equal(r, 0);
    free(logits);
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_model_free(m);
}

static void test_batch_equals_sequential(void **state) {
    (void)state;
    batch_equals_sequential("models/stories260K.gguf");
    batch_equals_sequential("reference/arch/models/llama-gqa4-f32.gguf");
    batch_equals_sequential("reference/arch/models/qwen3-q8_0.gguf");
}

/* Layer 0 is the embedding row; the final tap through the output norm and
 * the output matrix (here in double, from the dequantised rows) gives the
 * forward's logits. */
static void test_ends_of_the_stream(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("reference/arch/models/llama-gqa4-f32.gguf"));
    const sp_model_config *cfg = sp_model_cfg(m);
    const int32_t dim = cfg->dim, V = cfg->n_vocab, L = cfg->n_layers;
    sp_ctx *c = mkctx(m, 1);
    const int32_t layers[] = {L, 0};
    set_taps(c, layers, 2);
    float *logits = malloc((size_t)NSEQ * (size_t)V * sizeof(float));
    float *row = malloc((size_t)dim * sizeof(float)), *w = malloc((size_t)dim * sizeof(float));
    fwd(c, SEQ, NSEQ, logits);
    int32_t r;
    const float *fin = sp_ctx_taps(c, 0, &r), *emb = sp_ctx_taps(c, 1, &r);
    assert_int_equal(r, NSEQ);
    double worst = 0;
    for (int32_t t = 0; t < NSEQ; t++) {
        sp_dequantize_row(m->tok_embd.type, m->tok_embd.data + (size_t)SEQ[t] * m->tok_embd.row_bytes, row, dim);
        assert_memory_equal(emb + (int64_t)t * dim, row, (size_t)dim * sizeof(float));
        sp_rmsnorm(row, fin + (int64_t)t * dim, m->out_norm, dim, cfg->norm_eps);
        for (int32_t v = 0; v < V; v++) {
            sp_dequantize_row(m->output.type, m->output.data + (size_t)v * m->output.row_bytes, w, dim);
            double s = 0;
            for (int32_t i = 0; i < dim; i++) s += (double)row[i] * w[i];
            double d = fabs(s - logits[(int64_t)t * V + v]) / (1 + fabs(s));
            if (d > worst) worst = d;
        }
    }
    if (worst > 1e-4) fail_msg("final tap normed and projected differs from the logits by %g", worst);
    free(logits);
    free(row);
    free(w);
    sp_ctx_free(c);
    sp_model_free(m);
}

/* A skipped layer passes its input on: with layer 1 skipped, the taps of
 * layers 1 and 2 are the same rows. */
static void test_skipped_layer(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("models/stories260K.gguf"));
    const int32_t dim = sp_model_cfg(m)->dim, V = sp_model_cfg(m)->n_vocab;
    sp_ctx *c = mkctx(m, 1);
    bool skip[5] = {false, true, false, false, false};
    sp_error err = {0};
    assert_int_equal(sp_ctx_set_skip_layers(c, skip, &err), SP_OK);
    const int32_t layers[] = {1, 2, 3};
    set_taps(c, layers, 3);
    float *logits = malloc((size_t)4 * (size_t)V * sizeof(float));
    fwd(c, SEQ, 4, logits);
    int32_t r;
    const float *a = sp_ctx_taps(c, 0, &r), *b = sp_ctx_taps(c, 1, &r), *d = sp_ctx_taps(c, 2, &r);
    assert_memory_equal(a, b, (size_t)4 * (size_t)dim * sizeof(float));
    assert_true(memcmp(b, d, (size_t)4 * (size_t)dim * sizeof(float)) != 0);
    free(logits);
    sp_ctx_free(c);
    sp_model_free(m);
}

/* sp_forward_multi: each sequence's context records its own rows, equal to
 * those of sp_forward over that context alone; a context without taps
 * records nothing. */
static void test_forward_multi(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("reference/arch/models/llama-gqa4-f32.gguf"));
    const int32_t dim = sp_model_cfg(m)->dim, V = sp_model_cfg(m)->n_vocab, L = sp_model_cfg(m)->n_layers;
    sp_ctx *c[3] = {mkctx(m, 1), mkctx(m, 1), mkctx(m, 1)};
    const int32_t layers[] = {2, L};
    set_taps(c[0], layers, 2);
    set_taps(c[2], layers + 1, 1);
    sp_batch b[3] = {{.tokens = SEQ, .n = 5, .logits_all = true},
                     {.tokens = SEQ + 5, .n = 3, .logits_all = true},
                     {.tokens = SEQ + 2, .n = 4, .logits_all = true}};
    float *logits = malloc((size_t)NSEQ * (size_t)V * sizeof(float));
    sp_error err = {0};
    if (sp_forward_multi(c, b, 3, logits, &err)) fail_msg("multi: %s", err.msg);
    int32_t r0, r2;
    const float *x0 = sp_ctx_taps(c[0], 1, &r0), *x2 = sp_ctx_taps(c[2], 0, &r2);
    assert_int_equal(r0, 5);
    assert_int_equal(r2, 4);
    assert_int_equal(sp_ctx_n_taps(c[1]), 0);
    assert_null(sp_ctx_taps(c[1], 0, NULL));
    float *keep0 = malloc((size_t)5 * (size_t)dim * sizeof(float)), *keep2 = malloc((size_t)4 * (size_t)dim * sizeof(float));
    memcpy(keep0, x0, (size_t)5 * (size_t)dim * sizeof(float));
    memcpy(keep2, x2, (size_t)4 * (size_t)dim * sizeof(float));
    sp_ctx *d = mkctx(m, 1);
    set_taps(d, layers, 2);
    fwd(d, SEQ, 5, logits);
    assert_memory_equal(sp_ctx_taps(d, 1, NULL), keep0, (size_t)5 * (size_t)dim * sizeof(float));
    assert_int_equal(sp_ctx_truncate(d, 0, &err), SP_OK);
    fwd(d, SEQ + 2, 4, logits);
    assert_memory_equal(sp_ctx_taps(d, 1, NULL), keep2, (size_t)4 * (size_t)dim * sizeof(float));
    free(keep0);
    free(keep2);
    free(logits);
    for (int i = 0; i < 3; i++) sp_ctx_free(c[i]);
    sp_ctx_free(d);
    sp_model_free(m);
}

static void test_bad_taps(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("models/stories260K.gguf"));
    sp_ctx *c = mkctx(m, 1);
    sp_error err = {0};
    const int32_t bad[] = {0, 6}, neg[] = {-1}, many[SP_MAX_TAPS + 1] = {0};
    assert_int_equal(sp_ctx_set_taps(c, bad, 2, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "layer 6"));
    assert_int_equal(sp_ctx_set_taps(c, neg, 1, &err), SP_ERR_ARG);
    assert_int_equal(sp_ctx_set_taps(c, many, SP_MAX_TAPS + 1, &err), SP_ERR_ARG);
    assert_int_equal(sp_ctx_set_taps(c, NULL, 2, &err), SP_ERR_ARG);
    const int32_t ok[] = {5};
    assert_int_equal(sp_ctx_set_taps(c, ok, 1, &err), SP_OK);
    assert_int_equal(sp_ctx_set_taps(c, NULL, 0, &err), SP_OK); /* off */
    assert_int_equal(sp_ctx_n_taps(c), 0);
    sp_ctx_free(c);
    sp_model_free(m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_batch_equals_sequential),
    cmocka_unit_test(test_ends_of_the_stream),
    cmocka_unit_test(test_skipped_layer),
    cmocka_unit_test(test_forward_multi),
    cmocka_unit_test(test_bad_taps),
};
SP_TEST_MAIN(tests)
