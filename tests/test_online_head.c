/* Online learning of an EAGLE-3 head (sp_online_init_head) with stories260K
 * as the target and the small head Specula trained (tests/data/eagle3):
 * the buffer holds the target's own hidden states and distributions at the
 * verified positions (checked against one independent forward over the
 * whole text); one online update on that buffer is one train-head step on
 * the same examples (same loss, same weights); and on a stream with the
 * head learning between generations, acceptance beats the same stream with
 * updates off while greedy output stays plain decoding's, token for token. */
#include "testutil.h"

#include <math.h>

#include "eagle3.h"
#include "head.h"
#include "loss.h"
#include "specula.h"
#include "sp_train.h"
#include "train.h"

static const char *HEAD = "tests/data/eagle3/stories260K-trained-head.gguf";
static const int32_t PROMPT[] = {1, 403, 407, 261, 378}; /* "Once upon a time" */

typedef struct fixture {
    sp_model *tm;
    sp_eagle3 *head;
    sp_ctx *ctx;
    sp_spec *s;
} fixture;

static void fx_init(fixture *f, const char *head, int32_t gamma) {
    sp_error e = {0};
    memset(f, 0, sizeof *f);
    if (sp_model_load(sp_shared("models/stories260K.gguf"), NULL, &f->tm, &e)) fail_msg("%s", e.msg);
    if (sp_eagle3_load(head, f->tm, &f->head, &e)) fail_msg("%s", e.msg);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 256;
    cp.type_k = cp.type_v = SP_GGML_F32;
    assert_int_equal(sp_ctx_init(f->tm, &cp, &f->ctx, &e), SP_OK);
    sp_spec_params sp = sp_spec_default_params();
    sp.draft.kind = SP_DRAFT_EAGLE3;
    sp.draft.eagle3 = f->head;
    sp.gamma = gamma;
    if (sp_spec_init(f->ctx, &sp, &f->s, &e)) fail_msg("%s", e.msg);
}

static void fx_free(fixture *f) {
    sp_spec_free(f->s);
    sp_ctx_free(f->ctx);
    sp_eagle3_free(f->head);
    sp_model_free(f->tm);
}

static sp_gen_params gen_params(int32_t n, float temp, uint64_t seed) {
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = n;
    gp.sampling = sp_sampler_default_params();
    gp.sampling.temperature = temp;
    gp.seed = seed;
    gp.stop_at_eog = false;
    return gp;
}

/* One learner update on the buffer of one generation equals one train-head
 * step on the same positions taken from an independent forward. */
static void update_is_a_train_step(const char *head_path) {
    sp_error e = {0};
    fixture f;
    fx_init(&f, head_path, 4);
    enum { N = 40, T = 24, K = 3 };
    sp_online_params op = sp_online_default_params();
    op.buffer = T; /* the last T positions of the generation: one window */
    op.window = T;
    op.batch = 1;
    op.unroll = K;
    op.lr = 1e-3f;
    op.warmup = 1;
    sp_online *on = NULL;
    if (sp_online_init_head(head_path, f.head, &op, &on, &e)) fail_msg("%s", e.msg);
    sp_online_listen(on, f.s);
    int32_t hist[5 + N];
    memcpy(hist, PROMPT, sizeof PROMPT);
    sp_gen_params gp = gen_params(N, 1.0f, 7);
    sp_spec_stats st;
    if (sp_spec_generate(f.s, PROMPT, 5, &gp, hist + 5, N, NULL, &st, NULL, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(sp_online_observed(on), N);
    assert_int_equal(sp_online_buffered(on), T);
    double l_on = 0;
    assert_int_equal(sp_online_update(on, 1, &l_on, &e), SP_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/online-head.gguf", sp_tmpdir());
    assert_int_equal(sp_online_export(on, path, &e), SP_OK);

    /* the same positions from one forward over the whole text: the buffer
     * holds positions 5 + N - 1 - T .. 5 + N - 2 (each with the next token's row) */
    const int32_t n_all = 5 + N, p0 = n_all - 1 - T, D = sp_model_cfg(f.tm)->dim, V = sp_model_cfg(f.tm)->n_vocab;
    sp_ctx *c = NULL;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 64;
    cp.type_k = cp.type_v = SP_GGML_F32;
    assert_int_equal(sp_ctx_init(f.tm, &cp, &c, &e), SP_OK);
    assert_int_equal(sp_ctx_set_taps(c, sp_eagle3_target_layers(f.head), 3, &e), SP_OK);
    float *logits = malloc((size_t)n_all * V * sizeof(float)), *feat = malloc((size_t)T * 3 * D * sizeof(float));
    sp_batch b = {.tokens = hist, .n = n_all, .logits_all = true};
    assert_int_equal(sp_forward(c, &b, logits, &e), SP_OK);
    int32_t ids[T][16];
    float probs[T][16];
    sp_loss_target rows[T];
    for (int32_t t = 0; t < T; t++) {
        for (int i = 0; i < 3; i++) {
            int32_t nr;
            const float *tp = sp_ctx_taps(c, i, &nr);
            assert_int_equal(nr, n_all);
            memcpy(feat + ((int64_t)t * 3 + i) * D, tp + (int64_t)(p0 + t) * D, (size_t)D * sizeof(float));
        }
        float *row = logits + (int64_t)(p0 + t) * V, mx = -INFINITY, sum = 0;
        for (int32_t v = 0; v < V; v++) mx = fmaxf(mx, row[v]);
        for (int32_t v = 0; v < V; v++) sum += row[v] = expf(row[v] - mx);
        for (int32_t v = 0; v < V; v++) row[v] /= sum;
        rows[t] = (sp_loss_target){.token = -1, .ids = ids[t], .probs = probs[t]};
        rows[t].k = sp_loss_topk(row, V, op.topk, ids[t], probs[t], &rows[t].rest);
    }
    float *embd = NULL;
    sp_thead *ref = NULL, *got = NULL;
    int32_t layers[3];
    assert_int_equal(sp_thead_target_embd(f.tm, &embd, &e), SP_OK);
    if (sp_thead_load(head_path, f.tm, embd, layers, &ref, &e)) fail_msg("%s", e.msg);
    if (sp_thead_load(path, f.tm, embd, layers, &got, &e)) fail_msg("%s", e.msg);
    const sp_thead_window w = {.tokens = hist + p0, .feat = feat, .rows = rows, .T = T};
    sp_adamw_params ap = sp_adamw_default_params();
    ap.lr = op.lr;
    ap.weight_decay = 0;
    double l_off = 0;
    assert_int_equal(sp_thead_train_step(ref, &w, 1, K, &op.loss, &ap, &l_off, NULL, &e), SP_OK);
    /* weights: Adam's first step moves each by about lr; a weight whose
     * gradient is at the level of float noise may move differently, so
     * the bound is on the typical and the worst difference */
    double worst = 0, mean = 0, moved = 0;
    int64_t total = 0;
    for (int32_t i = 0; i < sp_thead_n_tensors(ref); i++) {
        int64_t n;
        float *a, *g, *bb, *gg;
        sp_thead_tensor(ref, i, &n, &a, &g);
        sp_thead_tensor(got, i, &n, &bb, &gg);
        for (int64_t j = 0; j < n; j++) {
            const double d = fabs((double)a[j] - bb[j]);
            worst = fmax(worst, d);
            mean += d;
        }
        total += n;
    }
    mean /= (double)total;
    /* and the step did move the weights (the export is not the input) */
    sp_thead *orig = NULL;
    if (sp_thead_load(head_path, f.tm, embd, layers, &orig, &e)) fail_msg("%s", e.msg);
    for (int32_t i = 0; i < sp_thead_n_tensors(orig); i++) {
        int64_t n;
        float *a, *g, *bb, *gg;
        sp_thead_tensor(orig, i, &n, &a, &g);
        sp_thead_tensor(got, i, &n, &bb, &gg);
        for (int64_t j = 0; j < n; j++) moved += fabs((double)a[j] - bb[j]) / (double)total;
    }
    if (getenv("SP_TEST_VERBOSE"))
        printf("online %.6f offline %.6f; weights: max diff %.3g mean %.3g, mean move %.3g\n", l_on, l_off, worst,
               mean, moved);
    assert_true(fabs(l_on - l_off) < 1e-4 * fmax(1.0, fabs(l_off)));
    assert_true(moved > 0.5 * op.lr);
    assert_true(mean < 1e-3 * op.lr);
    assert_true(worst < 0.25 * op.lr);
    free(logits), free(feat), free(embd);
    sp_thead_free(ref), sp_thead_free(got), sp_thead_free(orig);
    sp_ctx_free(c);
    sp_online_free(on);
    fx_free(&f);
}

static void test_update_is_a_train_step(void **state) {
    (void)state;
    update_is_a_train_step(HEAD);
    update_is_a_train_step("tests/data/eagle3/stories260K-nbf-head.gguf"); /* norm_before_fc */
}

/* A stream of greedy generations: with the learner serving (inline, so the
 * run is reproducible) acceptance beats the same stream without updates,
 * and every generation's tokens are plain decoding's. */
static double stream(bool learn, int32_t (*outs)[48], int gens) {
    sp_error e = {0};
    fixture f;
    fx_init(&f, HEAD, 4);
    sp_online *on = NULL;
    sp_online_params op = sp_online_default_params();
    op.batch = 4;
    op.window = 24;
    op.lr = 3e-3f;
    op.warmup = 4;
    if (sp_online_init_head(HEAD, f.head, &op, &on, &e)) fail_msg("%s", e.msg);
    sp_online_schedule sch = {.every = 48, .steps = learn ? 12 : 1, .background = false};
    if (learn && sp_online_serve(on, f.s, NULL, &sch, &e)) fail_msg("%s", e.msg);
    if (!learn) sp_online_listen(on, f.s); /* observes; never updates */
    const int32_t prompts[2][5] = {{1, 403, 407, 261, 378}, {1, 403, 407, 261, 290}};
    int64_t acc = 0, drafted = 0;
    for (int g = 0; g < gens; g++) {
        sp_gen_params gp = gen_params(48, 0.0f, 1);
        sp_spec_stats st;
        assert_int_equal(sp_spec_reset(f.s, &e), SP_OK);
        if (sp_spec_generate(f.s, prompts[g % 2], 5, &gp, outs[g], 48, NULL, &st, NULL, NULL, &e))
            fail_msg("%s", e.msg);
        if (g >= 2) acc += st.accepted, drafted += st.drafted; /* after the first pass over both prompts */
    }
    if (learn) {
        sp_online_stats os = sp_online_get_stats(on, NULL);
        assert_true(os.swaps >= 3);
        assert_int_equal(os.errors, 0);
        assert_ptr_equal(sp_spec_eagle3(f.s), sp_online_head(on));
    }
    sp_online_detach(on);
    assert_ptr_equal(sp_spec_eagle3(f.s), f.head);
    sp_online_free(on);
    fx_free(&f);
    return drafted ? (double)acc / (double)drafted : 0;
}

static void test_stream_learns_exactly(void **state) {
    (void)state;
    enum { G = 6 };
    int32_t with[G][48], without[G][48];
    const double a1 = stream(true, with, G), a0 = stream(false, without, G);
    if (getenv("SP_TEST_VERBOSE")) printf("acceptance: learning %.3f, static %.3f\n", a1, a0);
    assert_true(a1 > a0 + 0.05);
    /* plain decoding, greedy */
    sp_error e = {0};
    sp_model *tm = NULL;
    if (sp_model_load(sp_shared("models/stories260K.gguf"), NULL, &tm, &e)) fail_msg("%s", e.msg);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 256;
    cp.type_k = cp.type_v = SP_GGML_F32;
    sp_ctx *c = NULL;
    assert_int_equal(sp_ctx_init(tm, &cp, &c, &e), SP_OK);
    const int32_t prompts[2][5] = {{1, 403, 407, 261, 378}, {1, 403, 407, 261, 290}};
    for (int p = 0; p < 2; p++) {
        int32_t plain[48];
        sp_gen_params gp = gen_params(48, 0.0f, 1);
        assert_int_equal(sp_ctx_truncate(c, 0, &e), SP_OK);
        if (sp_generate(c, prompts[p], 5, &gp, plain, 48, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
        for (int g = p; g < G; g += 2) {
            assert_memory_equal(plain, with[g], sizeof plain);
            assert_memory_equal(plain, without[g], sizeof plain);
        }
    }
    sp_ctx_free(c);
    sp_model_free(tm);
}

/* A head the trainer does not model is refused in one line. */
static void test_refuses_untrainable(void **state) {
    (void)state;
    sp_error e = {0};
    sp_model *tm = NULL;
    sp_eagle3 *h = NULL;
    if (sp_model_load(sp_shared("models/stories260K.gguf"), NULL, &tm, &e)) fail_msg("%s", e.msg);
    const char *path = "tests/data/eagle3/stories260K-head.gguf"; /* a 16-token draft vocabulary */
    if (sp_eagle3_load(path, tm, &h, &e)) fail_msg("%s", e.msg);
    sp_online_params op = sp_online_default_params();
    sp_online *on = NULL;
    assert_int_equal(sp_online_init_head(path, h, &op, &on, &e), SP_ERR_UNSUPPORTED);
    assert_null(on);
    assert_non_null(strstr(e.msg, "draft vocabulary"));
    sp_eagle3_free(h);
    sp_model_free(tm);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_update_is_a_train_step),
    cmocka_unit_test(test_stream_learns_exactly),
    cmocka_unit_test(test_refuses_untrainable),
};
SP_TEST_MAIN(tests)
