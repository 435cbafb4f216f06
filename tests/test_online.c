/* Online speculative decoding: a fresh random draft serving stories260K
 * learns from the target rows its own verifications produce. Over rounds of
 * generation on the same kind of text (the same prompt, new seeds, T = 1)
 * its acceptance rate rises; greedy output with the learning draft stays
 * token for token the target's; the buffer holds what was observed. */
#include "testutil.h"

#include <unistd.h>

#include "specula.h"
#include "sp_train.h"

static const char *tgt(void) { return sp_shared("models/stories260K.gguf"); }

typedef struct round_result {
    double acceptance;
    int64_t drafted;
} round_result;

/* One round: `gens` generations of n tokens with the draft at path, the
 * online learner observing. */
static round_result run_round(sp_model *tm, const char *draft_path, sp_online *on, int gens, int n,
                              float temp, uint64_t seed, int32_t *out_first) {
    sp_error e = {0};
    sp_model *dm = NULL;
    if (sp_model_load(draft_path, NULL, &dm, &e)) fail_msg("draft: %s", e.msg);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 256;
    sp_ctx *c = NULL;
    assert_int_equal(sp_ctx_init(tm, &cp, &c, &e), SP_OK);
    sp_spec_params sp = sp_spec_default_params();
    sp.draft.kind = SP_DRAFT_MODEL;
    sp.draft.draft_model = dm;
    sp.gamma = 4;
    sp_spec *s = NULL;
    if (sp_spec_init(c, &sp, &s, &e)) fail_msg("spec: %s", e.msg);
    if (on) sp_spec_set_observer(s, sp_online_observe, on);
    const int32_t prompt[] = {1, 403, 407, 261, 378}; /* "Once upon a time" */
    round_result rr = {0};
    int64_t acc = 0;
    int32_t *out = malloc((size_t)n * sizeof *out);
    for (int g = 0; g < gens; g++) {
        sp_gen_params gp = sp_gen_default_params();
        gp.n_predict = n;
        gp.sampling.temperature = temp;
        gp.seed = seed + (uint64_t)g;
        gp.stop_at_eog = false;
        sp_spec_stats st;
        assert_int_equal(sp_spec_reset(s, &e), SP_OK);
        if (sp_spec_generate(s, prompt, 5, &gp, out, n, NULL, &st, NULL, NULL, &e)) fail_msg("%s", e.msg);
        if (g == 0 && out_first) memcpy(out_first, out, (size_t)n * sizeof *out);
        acc += st.accepted;
        rr.drafted += st.drafted;
    }
    rr.acceptance = rr.drafted ? (double)acc / (double)rr.drafted : 0;
    free(out);
    sp_spec_free(s);
    sp_ctx_free(c);
    sp_model_free(dm);
    return rr;
}

static void test_online_learning(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/online-draft.gguf", sp_tmpdir());
    sp_error e = {0};
    /* a fresh draft: dim 32, 1 layer, stories260K's vocabulary */
    sp_train_shape sh = sp_train_default_shape();
    sh.dim = 32, sh.n_layers = 1, sh.n_heads = 2, sh.n_kv_heads = 1, sh.ffn_dim = 64, sh.n_vocab = 512;
    sp_tmodel *fresh = NULL;
    assert_int_equal(sp_tmodel_init(&sh, 5, &fresh, &e), SP_OK);
    assert_int_equal(sp_tmodel_save(fresh, path, SP_GGML_F32, tgt(), &e), SP_OK);
    sp_tmodel_free(fresh);

    sp_model *tm = NULL;
    assert_int_equal(sp_model_load(tgt(), NULL, &tm, &e), SP_OK);
    sp_online_params op = sp_online_default_params();
    op.lr = 3e-3f;
    sp_online *on = NULL;
    if (sp_online_init(path, &op, &on, &e)) fail_msg("%s", e.msg);
    enum { ROUNDS = 4, GENS = 3, N = 96 };
    double acc[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        round_result rr = run_round(tm, path, on, GENS, N, 1.0f, 100 + 10 * (uint64_t)r, NULL);
        acc[r] = rr.acceptance;
        double loss;
        assert_int_equal(sp_online_update(on, 100, &loss, &e), SP_OK);
        assert_int_equal(sp_online_export(on, path, &e), SP_OK);
        printf("online round %d: acceptance %.3f over %lld draft tokens, buffer %lld of %lld observed, "
               "loss after %.3f\n",
               r, rr.acceptance, (long long)rr.drafted, (long long)sp_online_buffered(on),
               (long long)sp_online_observed(on), loss);
    }
    assert_true(sp_online_observed(on) >= ROUNDS * GENS * N / 2);
    /* the draft learned the target's text: acceptance several times the fresh draft's */
    assert_true(acc[ROUNDS - 1] > 0.05 && acc[ROUNDS - 1] > 4 * acc[0]);

    /* lossless at every moment: greedy output with the learning draft equals plain greedy */
    int32_t spec_out[64], plain_out[64];
    run_round(tm, path, on, 1, 64, 0.0f, 7, spec_out);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 256;
    sp_ctx *c = NULL;
    assert_int_equal(sp_ctx_init(tm, &cp, &c, &e), SP_OK);
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = 64;
    gp.sampling.temperature = 0;
    gp.stop_at_eog = false;
    const int32_t prompt[] = {1, 403, 407, 261, 378};
    assert_int_equal(sp_generate(c, prompt, 5, &gp, plain_out, 64, NULL, NULL, NULL, &e), SP_OK);
    assert_memory_equal(spec_out, plain_out, sizeof plain_out);
    sp_ctx_free(c);

    /* bad settings */
    sp_online *bad = NULL;
    op.topk = 0;
    assert_int_equal(sp_online_init(path, &op, &bad, &e), SP_ERR_ARG);
    assert_null(bad);
    sp_online_free(on);
    sp_model_free(tm);
    unlink(path);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_online_learning),
};
SP_TEST_MAIN(tests)
