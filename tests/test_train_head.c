/* Tests for the EAGLE-3 head trainer (src/train/head.c): every parameter's
 * gradient of the unrolled training-time-test loss against central finite
 * differences, and a written head loaded by the engine (sp_eagle3) giving
 * the trainer's logits at step 1 and, fed its own pre-norm output, step 2. */
#include "testutil.h"

#include <math.h>

#include "eagle3.h"
#include "head.h"
#include "model_internal.h"
#include "quant.h"
#include "rng.h"

static void rand_fill(sp_rng *r, float *x, int64_t n, float sd) {
    for (int64_t i = 0; i < n; i++) x[i] = sd * (float)sp_rng_normal(r);
}

/* T rows of softmax(random) over V */
static void rand_rows(sp_rng *r, float *p, int32_t T, int32_t V) {
    for (int32_t t = 0; t < T; t++) {
        float *row = p + (int64_t)t * V, sum = 0;
        for (int32_t v = 0; v < V; v++) sum += row[v] = expf(2.0f * (float)sp_rng_normal(r));
        for (int32_t v = 0; v < V; v++) row[v] /= sum;
    }
}

/* nbf: norm_before_fc; n_draft > 0: a draft vocabulary of the ids 1, 3, 4, ... */
static void gradcheck(const char *loss_name, bool nbf, int32_t n_draft) {
    sp_error err = {0};
    const sp_thead_shape s = {.dim = 8, .n_heads = 2, .n_kv_heads = 1, .ffn_dim = 12, .tgt_dim = 5, .n_vocab = 11,
                              .n_draft = n_draft, .norm_before_fc = nbf, .rope_theta = 10000.0f, .eps = 1e-5f};
    const int32_t d2t[] = {1, 3, 4, 5, 7, 8, 10};
    SP_ASSERT(n_draft <= 7);
    enum { T = 7, K = 3 };
    sp_rng r;
    sp_rng_seed(&r, 5);
    float embd[11 * 8], feat[T * 15], p[T * 11];
    rand_fill(&r, embd, 11 * 8, 1.0f);
    rand_fill(&r, feat, T * 15, 1.0f);
    rand_rows(&r, p, T, 11);
    int32_t tok[T];
    for (int t = 0; t < T; t++) tok[t] = (int32_t)(sp_rng_below(&r, 11));
    sp_thead *h = NULL;
    assert_int_equal(sp_thead_init(&s, embd, n_draft ? d2t : NULL, 3, &h, &err), SP_OK);
    assert_int_equal(sp_thead_n_tensors(h), nbf ? 14 : 13);
    /* norms away from 1 so that their gradients are generic */
    for (int32_t i = 0; i < sp_thead_n_tensors(h); i++) {
        int64_t n;
        float *v, *g;
        sp_thead_tensor(h, i, &n, &v, &g);
        for (int64_t j = 0; j < n; j++) v[j] *= 1.0f + 0.3f * (float)sp_rng_normal(&r);
    }
    sp_loss loss;
    assert_int_equal(sp_loss_parse(loss_name, &loss, &err), SP_OK);
    double m0;
    sp_thead_zero_grad(h);
    assert_int_equal(sp_thead_run(h, tok, feat, p, T, K, &loss, true, 1.0f, &m0, &err), SP_OK);
    int checked = 0, big = 0;
    double worst = 0;
    for (int32_t i = 0; i < sp_thead_n_tensors(h); i++) {
        int64_t n;
        float *v, *g;
        const char *name = sp_thead_tensor(h, i, &n, &v, &g);
        for (int64_t j = 0; j < n; j += 1 + n / 9) {
            const float keep = v[j], e = 1e-2f;
            double lp, lm;
            v[j] = keep + e;
            assert_int_equal(sp_thead_run(h, tok, feat, p, T, K, &loss, false, 1.0f, &lp, &err), SP_OK);
            v[j] = keep - e;
            assert_int_equal(sp_thead_run(h, tok, feat, p, T, K, &loss, false, 1.0f, &lm, &err), SP_OK);
            v[j] = keep;
            const double num = (lp - lm) / (2.0 * e), an = g[j];
            const double bad = fabs(num - an) / (1e-4 + fabs(num));
            if (bad > worst) worst = bad;
            if (fabs(num) > 1e-3) big++;
            if (fabs(num - an) > 2e-4 + 3e-2 * fabs(num))
                fail_msg("%s %s[%lld]: analytic %.6g, numeric %.6g", loss_name, name, (long long)j, an, num);
            checked++;
        }
    }
    assert_true(checked > 100 && big > checked / 2); /* the check sees real gradients */
    if (getenv("SP_TEST_VERBOSE"))
        printf("gradcheck %s%s%s: %d entries, worst relative %.3g\n", loss_name, nbf ? " norm_before_fc" : "",
               n_draft ? " draft vocabulary" : "", checked, worst);
    sp_thead_free(h);
}

static void test_gradcheck_fkl(void **state) {
    (void)state;
    gradcheck("fkl", false, 0);
    gradcheck("fkl", true, 0);
    gradcheck("rkl", true, 7);
}

static void test_gradcheck_jsd_ce(void **state) {
    (void)state;
    gradcheck("jsd", false, 0); /* tvd has kinks: finite differences do not apply */
    gradcheck("ce", false, 0);
    gradcheck("ce", false, 7); /* next tokens outside the draft vocabulary are skipped */
}

/* The engine's forward of a written head equals the trainer's (nbf:
 * norm_before_fc; n_draft: a draft vocabulary of every third id). */
static void engine_agrees(bool nbf, int32_t n_draft) {
    sp_error err = {0};
    const char *tpath = sp_shared("models/stories260K.gguf");
    sp_model *tm = NULL;
    if (sp_model_load(tpath, NULL, &tm, &err)) fail_msg("%s", err.msg);
    const sp_model_config *tc = sp_model_cfg(tm);
    const int32_t V = tc->n_vocab, D = tc->dim;
    float *embd = malloc((size_t)V * D * sizeof(float));
    for (int32_t v = 0; v < V; v++)
        sp_dequantize_row(tm->tok_embd.type, tm->tok_embd.data + (size_t)v * tm->tok_embd.row_bytes,
                          embd + (int64_t)v * D, D);
    const sp_thead_shape s = {.dim = D, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 96, .tgt_dim = D, .n_vocab = V,
                              .n_draft = n_draft, .norm_before_fc = nbf, .rope_theta = 10000.0f, .eps = 1e-5f};
    enum { T = 12, K = 2 };
    sp_rng r;
    sp_rng_seed(&r, 9);
    sp_thead *h = NULL;
    int32_t *d2t = malloc((size_t)V * sizeof *d2t);
    for (int32_t i = 0; i < V; i++) d2t[i] = n_draft ? 3 * i : i;
    const int32_t Vd = n_draft ? n_draft : V;
    assert_int_equal(sp_thead_init(&s, embd, d2t, 4, &h, &err), SP_OK);
    if (nbf) { /* taps' norm weights away from 1 */
        int64_t n;
        float *v, *g;
        assert_string_equal(sp_thead_tensor(h, 13, &n, &v, &g), "enc.output_norm.weight");
        for (int64_t j = 0; j < n; j++) v[j] = 0.5f + (float)sp_rng_uniform(&r);
    }
    float *feat = malloc((size_t)T * 3 * D * sizeof(float)), *p = malloc((size_t)T * V * sizeof(float));
    rand_fill(&r, feat, (int64_t)T * 3 * D, 1.0f);
    rand_rows(&r, p, T, V);
    int32_t tok[T];
    for (int t = 0; t < T; t++) tok[t] = (int32_t)(sp_rng_below(&r, (uint64_t)V));
    sp_loss loss = {.kind = SP_LOSS_FKL};
    double mean;
    assert_int_equal(sp_thead_run(h, tok, feat, p, T, K, &loss, false, 1.0f, &mean, &err), SP_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/head.gguf", sp_tmpdir());
    const int32_t layers[3] = {1, 2, 4};
    assert_int_equal(sp_thead_save(h, layers, tpath, path, &err), SP_OK);
    sp_eagle3 *e = NULL;
    if (sp_eagle3_load(path, tm, &e, &err)) fail_msg("%s", err.msg);
    remove(path);
    float *tap[3], *g = malloc((size_t)T * D * sizeof(float)), *lg = malloc((size_t)T * V * sizeof(float));
    float *pre = malloc((size_t)T * D * sizeof(float));
    for (int i = 0; i < 3; i++) {
        tap[i] = malloc((size_t)T * D * sizeof(float));
        for (int t = 0; t < T; t++) memcpy(tap[i] + t * D, feat + ((int64_t)t * 3 + i) * D, (size_t)D * sizeof(float));
    }
    double worst = 0;
    for (int32_t sl = 0; sl < T - K; sl += 3) {
        sp_eagle3_ctx *c = NULL;
        assert_int_equal(sp_eagle3_ctx_init(e, 64, T, NULL, &c, &err), SP_OK);
        const float *const tp[3] = {tap[0], tap[1], tap[2]};
        assert_int_equal(sp_eagle3_encode(c, tp, sl + 1, g, &err), SP_OK);
        assert_int_equal(sp_eagle3_decode(c, tok + 1, g, sl + 1, true, lg, pre, &err), SP_OK);
        const float *ref = sp_thead_logits(h, T, 1, sl);
        for (int32_t v = 0; v < Vd; v++) worst = fmax(worst, fabs(lg[(int64_t)sl * V + d2t[v]] - ref[v]));
        if (n_draft) assert_true(isinf(lg[(int64_t)sl * V + 1]) && lg[(int64_t)sl * V + 1] < 0);
        /* step 2: (token sl + 2, the pre-norm output of slot sl) at slot sl + 1 */
        assert_int_equal(sp_eagle3_decode(c, tok + sl + 2, pre + (int64_t)sl * D, 1, false, lg, NULL, &err), SP_OK);
        ref = sp_thead_logits(h, T, 2, sl);
        for (int32_t v = 0; v < Vd; v++) worst = fmax(worst, fabs(lg[d2t[v]] - ref[v]));
        sp_eagle3_ctx_free(c);
    }
    if (getenv("SP_TEST_VERBOSE"))
        printf("engine vs trainer%s%s: max |logit diff| %.3g\n", nbf ? " norm_before_fc" : "",
               n_draft ? " draft vocabulary" : "", worst);
    assert_true(worst < 1e-3);
    for (int i = 0; i < 3; i++) free(tap[i]);
    free(g), free(lg), free(pre), free(feat), free(p), free(embd), free(d2t);
    sp_eagle3_free(e);
    sp_thead_free(h);
    sp_model_free(tm);
}

static void test_engine_agrees(void **state) {
    (void)state;
    engine_agrees(false, 0);
    engine_agrees(true, 0);
    engine_agrees(true, 100);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gradcheck_fkl),
    cmocka_unit_test(test_gradcheck_jsd_ce),
    cmocka_unit_test(test_engine_agrees),
};
SP_TEST_MAIN(tests)
