/* Tests for the training engine: every parameter tensor's gradient against
 * central finite differences, the forward pass against the inference
 * engine's (same weights through a GGUF checkpoint), checkpoints in each
 * type, determinism, and a short run whose loss falls. */
#include "testutil.h"

#include <math.h>

#include "ops.h"
#include "sp_model.h"
#include "rng.h"
#include "threadpool.h"
#include "sp_train.h"
#include "train.h"

static const char *vocab512(void) { return sp_shared("models/stories260K.gguf"); }

static sp_tmodel *tiny(int32_t dim, int32_t layers, int32_t heads, int32_t kv, int32_t ffn, int32_t V,
                       uint64_t seed) {
    sp_train_shape s = sp_train_default_shape();
    s.dim = dim, s.n_layers = layers, s.n_heads = heads, s.n_kv_heads = kv, s.ffn_dim = ffn, s.n_vocab = V;
    sp_tmodel *m;
    sp_error e;
    if (sp_tmodel_init(&s, seed, &m, &e)) fail_msg("init: %s", e.msg);
    return m;
}

/* Mean forward-KL loss of the model against fixed random target rows. */
typedef struct fd_case {
    int32_t B, T, V;
    int32_t tokens[64];
    float p[64][16];
    sp_loss_target t[64];
} fd_case;

static double fd_loss(sp_tmodel *m, fd_case *c, bool grad) {
    sp_loss l = {.kind = SP_LOSS_JSD, .beta = 0.3};
    assert_int_equal(sp_tmodel_forward(m, c->tokens, c->B, c->T, NULL), SP_OK);
    int64_t n;
    double s = sp_tmodel_loss(m, &l, c->t, 1.0 / 9, &n);
    assert_int_equal(n, 9);
    if (grad) {
        sp_tmodel_zero_grad(m);
        sp_tmodel_backward(m);
    }
    return s / 9;
}

/* Central differences with step 1e-2 on every element of every tensor of a
 * tiny model (dim 8, 2 layers, 4 heads over 2 KV heads, head size 2, ffn 12,
 * vocabulary 16, 2 sequences of 5 tokens, JSD(0.3) on 9 of the 10 positions
 * against random targets). The forward runs in float, so the difference
 * quotient carries about 1e-7 / 1e-2 = 1e-5 of rounding noise and O(h^2) =
 * 1e-4 relative truncation; an element passes when |fd - grad| <= 2e-4 +
 * 1e-2 |fd| and the whole tensor's relative error
 * ||fd - grad|| / ||fd|| <= 2e-3 (measured: at most 6.3e-4, ffn_down of
 * layer 0; elements at most 5e-5). Prints the largest errors. */
static void test_gradcheck_every_tensor(void **state) {
    (void)state;
    sp_tmodel *m = tiny(8, 2, 4, 2, 12, 16, 5);
    static fd_case c;
    c.B = 2, c.T = 5, c.V = 16;
    sp_rng r;
    sp_rng_seed(&r, 3);
    for (int i = 0; i < 10; i++) {
        c.tokens[i] = (int32_t)sp_rng_below(&r, 16);
        double s = 0;
        for (int j = 0; j < 16; j++) s += (c.p[i][j] = (float)exp(2 * sp_rng_normal(&r)));
        for (int j = 0; j < 16; j++) c.p[i][j] = (float)(c.p[i][j] / s);
        c.t[i] = (sp_loss_target){.p = c.p[i], .token = -1};
    }
    c.t[7] = (sp_loss_target){.token = -1}; /* a skipped position */
    fd_loss(m, &c, true);
    double worst_rel = 0;
    for (int32_t ti = 0; ti < sp_tmodel_n_tensors(m); ti++) {
        int64_t n;
        float *w, *g;
        const char *name = sp_tmodel_tensor(m, ti, &n, &w, &g);
        float *an = malloc((size_t)n * sizeof(float));
        memcpy(an, g, (size_t)n * sizeof(float));
        double num = 0, den = 0, worst = 0;
        for (int64_t j = 0; j < n; j++) {
            const float w0 = w[j];
            w[j] = w0 + 1e-2f;
            const float up = w[j];
            double lp = fd_loss(m, &c, false);
            w[j] = w0 - 1e-2f;
            const float dn = w[j];
            double lm = fd_loss(m, &c, false);
            w[j] = w0;
            double fd = (lp - lm) / ((double)up - dn), d = fabs(fd - an[j]);
            num += d * d, den += fd * fd;
            if (d > worst) worst = d;
            if (d > 2e-4 + 1e-2 * fabs(fd)) fail_msg("%s[%lld]: gradient %g, finite difference %g", name, (long long)j, an[j], fd);
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        printf("gradcheck %-26s n %4lld  max |fd - grad| %.2e  rel %.2e\n", name, (long long)n, worst, rel);
        if (rel > worst_rel) worst_rel = rel;
        assert_true(rel <= 2e-3);
        free(an);
    }
    printf("gradcheck: worst tensor relative error %.2e\n", worst_rel);
    sp_tmodel_free(m);
}

/* The trainer's logits equal the inference engine's on the same weights
 * (an F32 checkpoint) for every position, within 1e-5. */
static void test_forward_matches_inference(void **state) {
    (void)state;
    sp_tmodel *m = tiny(32, 2, 4, 2, 64, 512, 9);
    char path[512];
    snprintf(path, sizeof path, "%s/fwd.gguf", sp_tmpdir());
    sp_error e;
    if (sp_tmodel_save(m, path, SP_GGML_F32, vocab512(), &e)) fail_msg("save: %s", e.msg);
    sp_model *im;
    if (sp_model_load(path, NULL, &im, &e)) fail_msg("load: %s", e.msg);
    sp_ctx *ctx;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 64;
    cp.type_k = cp.type_v = SP_GGML_F32; /* training computes attention in f32 */
    assert_int_equal(sp_ctx_init(im, &cp, &ctx, &e), SP_OK);
    enum { T = 20 };
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (i * 37 + 1) % 512;
    static float ref[T * 512];
    sp_batch b = {.tokens = tok, .n = T, .logits_all = true};
    assert_int_equal(sp_forward(ctx, &b, ref, &e), SP_OK);
    assert_int_equal(sp_tmodel_forward(m, tok, 1, T, &e), SP_OK);
    const float *lg = sp_tmodel_logits(m);
    double worst = 0, mag = 0;
    for (int i = 0; i < T * 512; i++) {
        worst = fmax(worst, fabs(lg[i] - ref[i]));
        mag = fmax(mag, fabs(ref[i]));
    }
    printf("forward vs inference: max |diff| %.3e over %d logits (max |logit| %.2f)\n", worst, T * 512, mag);
    assert_true(worst <= 1e-5);
    /* the checkpoint loads back bit for bit */
    sp_tmodel *m2;
    assert_int_equal(sp_tmodel_load(path, &m2, &e), SP_OK);
    for (int32_t ti = 0; ti < sp_tmodel_n_tensors(m); ti++) {
        int64_t n1, n2;
        float *w1, *w2;
        sp_tmodel_tensor(m, ti, &n1, &w1, NULL);
        sp_tmodel_tensor(m2, ti, &n2, &w2, NULL);
        assert_int_equal(n1, n2);
        assert_memory_equal(w1, w2, (size_t)n1 * sizeof(float));
    }
    sp_tmodel_free(m2);
    /* F16 and Q8_0 checkpoints load and stay close (error budget of the type) */
    const sp_ggml_type types[2] = {SP_GGML_F16, SP_GGML_Q8_0};
    const double budget[2] = {2e-2, 0.2};
    for (int k = 0; k < 2; k++) {
        if (sp_tmodel_save(m, path, types[k], vocab512(), &e)) fail_msg("save: %s", e.msg);
        sp_model *qm;
        sp_ctx *qc;
        assert_int_equal(sp_model_load(path, NULL, &qm, &e), SP_OK);
        assert_int_equal(sp_ctx_init(qm, &cp, &qc, &e), SP_OK);
        static float ql[T * 512];
        assert_int_equal(sp_forward(qc, &b, ql, &e), SP_OK);
        double d = 0;
        for (int i = 0; i < T * 512; i++) d = fmax(d, fabs(ql[i] - ref[i]));
        printf("checkpoint %s: max |logit diff| %.3e\n", sp_ggml_type_name(types[k]), d);
        assert_true(d < budget[k]);
        assert_true(d > 0);
        sp_ctx_free(qc);
        sp_model_free(qm);
    }
    /* Q8_0 needs multiples of 32 */
    sp_tmodel *odd = tiny(8, 1, 2, 1, 12, 512, 1);
    assert_int_equal(sp_tmodel_save(odd, path, SP_GGML_Q8_0, vocab512(), &e), SP_ERR_ARG);
    /* a vocabulary of another size */
    sp_tmodel *small = tiny(8, 1, 2, 1, 12, 16, 1);
    assert_int_equal(sp_tmodel_save(small, path, SP_GGML_F32, vocab512(), &e), SP_ERR_ARG);
    sp_tmodel_free(small);
    sp_tmodel_free(odd);
    sp_ctx_free(ctx);
    sp_model_free(im);
    sp_tmodel_free(m);
}

/* 40 AdamW steps of cross-entropy on a periodic token sequence: the loss
 * must fall below a third of its start; two runs with the same seed (one on
 * 1 thread, one on 2) give bit-identical weights. */
static double short_run(int threads, sp_tmodel **out) {
    sp_tmodel *m = tiny(16, 2, 2, 1, 32, 24, 7);
    sp_pool *pool = NULL;
    assert_int_equal(sp_pool_init(threads, &pool, NULL), SP_OK);
    sp_tmodel_set_pool(m, pool);
    enum { B = 4, T = 16 };
    int32_t tok[B * T];
    sp_loss_target tg[B * T];
    sp_loss ce = {.kind = SP_LOSS_CE};
    sp_adamw_params ap = sp_adamw_default_params();
    double first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        sp_tmodel_zero_grad(m);
        for (int acc = 0; acc < 2; acc++) { /* two accumulated micro-batches */
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    int off = (step * 7 + b * 3 + acc) % 5;
                    tok[b * T + t] = (3 + (t + off) % 5 * 4) % 24;
                }
            for (int i = 0; i < B * T; i++)
                tg[i] = (sp_loss_target){.token = i % T == T - 1 ? -1 : tok[i + 1]};
            assert_int_equal(sp_tmodel_forward(m, tok, B, T, NULL), SP_OK);
            int64_t n;
            double s = sp_tmodel_loss(m, &ce, tg, 1.0 / (B * (T - 1) * 2), &n);
            sp_tmodel_backward(m);
            if (step == 0 && acc == 0) first = s / n;
            last = s / n;
        }
        ap.lr = sp_train_lr(step, 40, 5, 1e-2f, 1e-3f);
        sp_tmodel_step(m, &ap);
    }
    sp_pool_free(pool);
    sp_tmodel_set_pool(m, NULL);
    *out = m;
    printf("short run (%d threads): loss %.4f -> %.4f\n", threads, first, last);
    assert_true(last < first / 3);
    return last;
}

static void test_training_deterministic_and_falls(void **state) {
    (void)state;
    sp_tmodel *a, *b;
    double la = short_run(1, &a), lb = short_run(2, &b);
    assert_true(la == lb);
    for (int32_t ti = 0; ti < sp_tmodel_n_tensors(a); ti++) {
        int64_t n;
        float *wa, *wb;
        sp_tmodel_tensor(a, ti, &n, &wa, NULL);
        sp_tmodel_tensor(b, ti, NULL, &wb, NULL);
        assert_memory_equal(wa, wb, (size_t)n * sizeof(float));
    }
    sp_tmodel_free(a);
    sp_tmodel_free(b);
}

/* The trainer's matmul loops are built per ISA with register tiles as wide
 * as the ISA's registers (train_mm.h): three training steps on a model
 * whose sizes give full and partial tiles (dim 64, FFN 160, vocabulary 72;
 * 21 rows, 2 threads) end with bit-identical weights on every ISA this
 * CPU has. */
static void test_isa_bit_identical(void **state) {
    (void)state;
    sp_error err = {0};
    const sp_isa saved = sp_ops_isa();
    float *ref = NULL;
    int64_t total = 0;
    for (int isa = SP_ISA_SCALAR; isa <= (int)sp_ops_best_isa(); isa++) {
        assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
        sp_tmodel *m = tiny(64, 1, 4, 2, 160, 72, 11);
        sp_pool *pool = NULL;
        assert_int_equal(sp_pool_init(2, &pool, NULL), SP_OK);
        sp_tmodel_set_pool(m, pool);
        enum { B = 3, T = 7 };
        int32_t tok[B * T];
        sp_loss_target tg[B * T];
        sp_loss ce = {.kind = SP_LOSS_CE};
        sp_adamw_params ap = sp_adamw_default_params();
        for (int step = 0; step < 3; step++) {
            for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + step * 5 + 1) % 72;
            for (int i = 0; i < B * T; i++) tg[i] = (sp_loss_target){.token = i % T == T - 1 ? -1 : tok[i + 1]};
            sp_tmodel_zero_grad(m);
            assert_int_equal(sp_tmodel_forward(m, tok, B, T, NULL), SP_OK);
            int64_t n;
            sp_tmodel_loss(m, &ce, tg, 1.0 / (B * (T - 1)), &n);
            sp_tmodel_backward(m);
            sp_tmodel_step(m, &ap);
        }
        sp_pool_free(pool);
        sp_tmodel_set_pool(m, NULL);
        int64_t off = 0;
        if (!ref) {
            for (int32_t ti = 0; ti < sp_tmodel_n_tensors(m); ti++) {
                int64_t n;
                sp_tmodel_tensor(m, ti, &n, NULL, NULL);
                total += n;
            }
            ref = malloc((size_t)total * sizeof *ref);
        }
        for (int32_t ti = 0; ti < sp_tmodel_n_tensors(m); ti++) {
            int64_t n;
            float *w;
            const char *name = sp_tmodel_tensor(m, ti, &n, &w, NULL);
            if (isa == SP_ISA_SCALAR) memcpy(ref + off, w, (size_t)n * sizeof(float));
            else if (memcmp(ref + off, w, (size_t)n * sizeof(float)))
                fail_msg("%s: weights after training differ from the scalar build's", name);
            off += n;
        }
        printf("training on %s: bit-identical to the scalar build\n", sp_ops_isa_name((sp_isa)isa));
        sp_tmodel_free(m);
    }
    free(ref);
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
}

static void test_lr_and_shapes(void **state) {
    (void)state;
    assert_true(fabsf(sp_train_lr(0, 100, 10, 1.0f, 0.1f) - 0.1f) < 1e-6f);
    assert_true(fabsf(sp_train_lr(9, 100, 10, 1.0f, 0.1f) - 1.0f) < 1e-6f);
    assert_true(fabsf(sp_train_lr(55, 100, 10, 1.0f, 0.1f) - 0.55f) < 1e-6f); /* cosine midpoint */
    assert_true(fabsf(sp_train_lr(100, 100, 10, 1.0f, 0.1f) - 0.1f) < 1e-6f);
    sp_train_shape s = sp_train_default_shape();
    sp_error e;
    assert_int_equal(sp_train_shape_parse("48,2,4,2,128", &s, &e), SP_OK);
    assert_true(s.dim == 48 && s.n_layers == 2 && s.n_heads == 4 && s.n_kv_heads == 2 && s.ffn_dim == 128);
    const char *bad[] = {"", "48,2,4,2", "48,2,4,2,128,1", "48,2,5,1,128", "48,2,4,3,128", "a,2,4,2,128",
                         "48,0,4,2,128", "6,1,2,1,8", "48,,4,2,128"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(sp_train_shape_parse(bad[i], &s, &e), SP_ERR_ARG);
        assert_non_null(strstr(e.msg, "draft_shape"));
    }
    int32_t tok[2] = {0, 99};
    sp_tmodel *m = tiny(8, 1, 2, 1, 8, 16, 1);
    assert_int_equal(sp_tmodel_forward(m, tok, 1, 2, &e), SP_ERR_ARG);
    sp_tmodel_free(m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gradcheck_every_tensor),
    cmocka_unit_test(test_forward_matches_inference),
    cmocka_unit_test(test_training_deterministic_and_falls),
    cmocka_unit_test(test_lr_and_shapes),
    cmocka_unit_test(test_isa_bit_identical),
};
SP_TEST_MAIN(tests)
