/* sp_forward_multi (several sequences, each with its own KV cache, in one
 * forward): every sequence's logits and cache equal those of sp_forward
 * over its context alone, bit for bit, for plain steps, prompt chunks,
 * token trees under a mask, on one and on two threads, over stories260K
 * and random models of every architecture (GQA, biases, q/k norms, sliding
 * window, soft-capping); and bad calls are refused without touching any
 * cache. */
#include "testutil.h"
#include "threadpool.h"

static sp_model *load_model(const char *path) {
    sp_model *m;
    sp_error err = {0};
    if (sp_model_load(path, NULL, &m, &err)) fail_msg("load %s: %s", path, err.msg);
    return m;
}

static char *rand_model(const char *arch, sp_ggml_type type) {
    static char path[8][512];
    static int slot;
    char *p = path[slot++ & 7];
    snprintf(p, sizeof path[0], "%s/fm_%s_%d.gguf", sp_tmpdir(), arch, (int)type);
    sp_mkmodel_params mp = sp_mkmodel_default_params();
    mp.arch = arch;
    mp.type = type;
    mp.dim = 64;
    mp.n_layers = 2;
    mp.n_heads = 4;
    mp.n_kv_heads = 2;
    mp.ffn_dim = 96;
    mp.n_vocab = 64;
    mp.n_ctx = 64;
    mp.seed = 5;
    sp_error err = {0};
    if (sp_mkmodel(&mp, p, &err)) fail_msg("mkmodel %s: %s", arch, err.msg);
    return p;
}

#define NS 4

/* Runs the same steps on NS contexts batched and on NS reference contexts
 * one by one, comparing logits and caches after each step. */
static void check_model(sp_model *m, int threads) {
    const int32_t V = sp_model_cfg(m)->n_vocab;
    sp_pool *pool = NULL;
    sp_error err = {0};
    if (threads > 1) assert_int_equal(sp_pool_init(threads, &pool, &err), SP_OK);
    sp_ctx *a[NS], *r[NS];
    for (int i = 0; i < NS; i++) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = 96;
        cp.max_batch = 48;
        cp.pool = pool;
        assert_int_equal(sp_ctx_init(m, &cp, &a[i], &err), SP_OK);
        assert_int_equal(sp_ctx_init(m, &cp, &r[i], &err), SP_OK);
    }
    float *la = malloc((size_t)48 * V * sizeof(float)), *lr = malloc((size_t)48 * V * sizeof(float));
    int32_t tok[NS][16], pos[NS][16];
    uint8_t mask[NS][16 * 64];
    uint64_t x = 12345;
    for (int step = 0; step < 6; step++) {
        sp_batch b[NS];
        for (int i = 0; i < NS; i++) {
            /* step 0: prompts of different lengths; then single tokens, a
             * chunk of 3 with all logits, and (step 4) a 2x2 tree under a mask */
            int32_t n = step == 0 ? 3 + 2 * i : step == 2 && i % 2 ? 3 : step == 4 && i != 1 ? 7 : 1;
            for (int32_t t = 0; t < n; t++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                tok[i][t] = (int32_t)((x >> 33) % (uint64_t)V);
            }
            b[i] = (sp_batch){.tokens = tok[i], .n = n, .logits_all = step != 1};
            if (step == 4 && n == 7) {
                /* nodes 0; 1,2 children of 0; 3,4 of 1; 5,6 of 2 */
                const int par[7] = {-1, 0, 0, 1, 1, 2, 2};
                const int dep[7] = {0, 1, 1, 2, 2, 2, 2};
                const int32_t past = sp_ctx_n_past(a[i]);
                memset(mask[i], 0, sizeof mask[i]);
                for (int t = 0; t < 7; t++) {
                    pos[i][t] = past + dep[t];
                    for (int p = t; p >= 0; p = par[p]) mask[i][t * 7 + p] = 1;
                }
                b[i].mask = mask[i];
                b[i].pos = pos[i];
            }
        }
        int32_t rows = 0;
        assert_int_equal(sp_forward_multi(a, b, NS, la, &err), SP_OK);
        for (int i = 0; i < NS; i++) {
            assert_int_equal(sp_forward(r[i], &b[i], lr, &err), SP_OK);
            const int32_t k = b[i].logits_all ? b[i].n : 1;
            if (memcmp(la + (size_t)rows * V, lr, (size_t)k * V * sizeof(float)))
                fail_msg("step %d sequence %d: logits differ from sp_forward", step, i);
            rows += k;
            assert_int_equal(sp_ctx_n_past(a[i]), sp_ctx_n_past(r[i]));
        }
        /* the trees are rolled back to their first path (keep nodes 0, 1, 3) */
        if (step == 4)
            for (int i = 0; i < NS; i++)
                if (b[i].n == 7) {
                    const int32_t keep[3] = {0, 1, 3}, start = sp_ctx_n_past(a[i]) - 7;
                    assert_int_equal(sp_ctx_keep(a[i], start, keep, 3, &err), SP_OK);
                    assert_int_equal(sp_ctx_keep(r[i], start, keep, 3, &err), SP_OK);
                }
    }
    /* refused calls change no cache */
    int32_t n_past[NS];
    for (int i = 0; i < NS; i++) n_past[i] = sp_ctx_n_past(a[i]);
    int32_t t1 = 1, big[48] = {0};
    sp_batch ok = {.tokens = &t1, .n = 1}, bad_tok = {.tokens = (int32_t[]){V}, .n = 1};
    sp_batch too_many = {.tokens = big, .n = 48};
    sp_ctx *dup[2] = {a[0], a[0]};
    assert_int_equal(sp_forward_multi(dup, (sp_batch[]){ok, ok}, 2, la, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "same context"));
    assert_int_equal(sp_forward_multi(a, (sp_batch[]){ok, bad_tok, ok, ok}, NS, la, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "token id"));
    assert_int_equal(sp_forward_multi(a, (sp_batch[]){ok, too_many, ok, ok}, NS, la, &err), SP_ERR_ARG);
    assert_int_equal(sp_forward_multi(a, &ok, 0, la, &err), SP_ERR_ARG);
    for (int i = 0; i < NS; i++) assert_int_equal(sp_ctx_n_past(a[i]), n_past[i]);
    free(la);
    free(lr);
    for (int i = 0; i < NS; i++) {
        sp_ctx_free(a[i]);
        sp_ctx_free(r[i]);
    }
    sp_pool_free(pool);
}

static void test_stories(void **state) {
    (void)state;
    sp_model *m = load_model(sp_shared("models/stories260K.gguf"));
    check_model(m, 1);
    check_model(m, 2);
    sp_model_free(m);
}

static void test_architectures(void **state) {
    (void)state;
    const char *archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        sp_model *m = load_model(rand_model(archs[i], i % 2 ? SP_GGML_Q8_0 : SP_GGML_F32));
        check_model(m, i % 2 ? 2 : 1);
        sp_model_free(m);
    }
}

static void test_other_model_refused(void **state) {
    (void)state;
    sp_model *m1 = load_model(sp_shared("models/stories260K.gguf"));
    sp_model *m2 = load_model(rand_model("llama", SP_GGML_F32));
    sp_ctx *c[2];
    sp_error err = {0};
    assert_int_equal(sp_ctx_init(m1, NULL, &c[0], &err), SP_OK);
    assert_int_equal(sp_ctx_init(m2, NULL, &c[1], &err), SP_OK);
    int32_t t = 1;
    sp_batch b[2] = {{.tokens = &t, .n = 1}, {.tokens = &t, .n = 1}};
    float *l = malloc(2 * 512 * sizeof(float));
    assert_int_equal(sp_forward_multi(c, b, 2, l, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "another model"));
    free(l);
    sp_ctx_free(c[0]);
    sp_ctx_free(c[1]);
    sp_model_free(m1);
    sp_model_free(m2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_stories),
    cmocka_unit_test(test_architectures),
    cmocka_unit_test(test_other_model_refused),
};
SP_TEST_MAIN(tests)
