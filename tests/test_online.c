/* Online speculative decoding: a fresh random draft serving stories260K
 * learns from the target rows its own verifications produce. Over rounds of
 * generation on the same kind of text (the same prompt, new seeds, T = 1)
 * its acceptance rate rises; greedy output with the learning draft stays
 * token for token the target's; the buffer holds what was observed. */
#include "testutil.h"

#include <unistd.h>

#include "specula.h"
#include "sp_train.h"
#include "train.h"

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

/* A fresh random draft (dim 32, 1 layer, stories260K's vocabulary) at path. */
static void write_fresh_draft(const char *path) {
    sp_error e = {0};
    sp_train_shape sh = sp_train_default_shape();
    sh.dim = 32, sh.n_layers = 1, sh.n_heads = 2, sh.n_kv_heads = 1, sh.ffn_dim = 64, sh.n_vocab = 512;
    sp_tmodel *fresh = NULL;
    assert_int_equal(sp_tmodel_init(&sh, 5, &fresh, &e), SP_OK);
    assert_int_equal(sp_tmodel_save(fresh, path, SP_GGML_F32, tgt(), &e), SP_OK);
    sp_tmodel_free(fresh);
}

static void test_online_learning(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/online-draft.gguf", sp_tmpdir());
    sp_error e = {0};
    write_fresh_draft(path);

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


/* The serving snapshot of the trainer's weights computes what the inference
 * engine computes from the same weights loaded from the file: stories260K
 * through sp_tmodel_load -> sp_tmodel_to_model gives bit-identical logits.
 * A snapshot of another shape is refused. */
static void test_snapshot_forward(void **state) {
    (void)state;
    sp_error e = {0};
    sp_model *tm = NULL, *snap = NULL;
    sp_tmodel *t = NULL;
    assert_int_equal(sp_model_load(tgt(), NULL, &tm, &e), SP_OK);
    assert_int_equal(sp_tmodel_load(tgt(), &t, &e), SP_OK);
    assert_int_equal(sp_tmodel_to_model(t, tm, &snap, &e), SP_OK);
    const int32_t toks[] = {1, 403, 407, 261, 378, 300, 290, 281};
    const int32_t V = 512, n = 8;
    float *a = malloc((size_t)n * V * sizeof *a), *b = malloc((size_t)n * V * sizeof *b);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 64;
    const sp_model *ms[2] = {tm, snap};
    float *outs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        sp_ctx *c = NULL;
        assert_int_equal(sp_ctx_init(ms[k], &cp, &c, &e), SP_OK);
        sp_batch bt = {.tokens = toks, .n = n, .logits_all = true};
        if (sp_forward(c, &bt, outs[k], &e)) fail_msg("%s", e.msg);
        sp_ctx_free(c);
    }
    assert_memory_equal(a, b, (size_t)n * V * sizeof *a);
    free(a), free(b);
    sp_model_free(snap);
    /* another shape */
    sp_train_shape sh = sp_train_default_shape();
    sp_tmodel *other = NULL;
    assert_int_equal(sp_tmodel_init(&sh, 1, &other, &e), SP_OK);
    snap = (sp_model *)1;
    assert_int_equal(sp_tmodel_to_model(other, tm, &snap, &e), SP_ERR_ARG);
    assert_null(snap);
    sp_tmodel_free(other);
    sp_tmodel_free(t);
    sp_model_free(tm);
}

/* After a draft swap the draft's cache is rebuilt from the committed text
 * with the new weights: a greedy run that starts with one draft and swaps
 * in another after 70 iterations (70 tokens: more than the drafter's
 * resynchronisation gap, so a lazily caught-up cache would differ) continues exactly as a fresh run with
 * the second draft on the text committed so far (same accepted count in
 * every iteration, same tokens). The second draft is stories260K with
 * noisy weights, so its acceptance varies from iteration to iteration and
 * depends on the whole context. */
typedef struct swap_probe {
    sp_spec *s;
    const sp_model *next;
    int iters, swap_at;
    int32_t hist[512], n_swap;
    int32_t taus[256];
    int n_taus;
} swap_probe;

static void swap_observer(void *ud, const int32_t *hist, int32_t first, const float *p, int32_t rows,
                          int32_t V) {
    (void)p, (void)V;
    swap_probe *sp = ud;
    if (sp->iters >= sp->swap_at && sp->n_taus < 256) sp->taus[sp->n_taus++] = rows;
    if (++sp->iters == sp->swap_at) {
        sp_error e = {0};
        if (sp_spec_set_draft_model(sp->s, sp->next, &e)) fail_msg("swap: %s", e.msg);
        sp->n_swap = first + rows;
        memcpy(sp->hist, hist, (size_t)sp->n_swap * sizeof *hist);
    }
}

static void test_swap_rebuilds_draft_cache(void **state) {
    (void)state;
    sp_error e = {0};
    sp_model *tm = NULL;
    assert_int_equal(sp_model_load(tgt(), NULL, &tm, &e), SP_OK);
    /* draft 1: random weights of stories260K's shape; draft 2: noisy stories260K */
    sp_tmodel *t1 = NULL, *t2 = NULL;
    sp_train_shape sh = {.dim = 64, .n_layers = 5, .n_heads = 8, .n_kv_heads = 4, .ffn_dim = 172,
                         .n_vocab = 512, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    assert_int_equal(sp_tmodel_init(&sh, 3, &t1, &e), SP_OK);
    assert_int_equal(sp_tmodel_load(tgt(), &t2, &e), SP_OK);
    sp_rng r;
    sp_rng_seed(&r, 9);
    for (int32_t i = 0; i < sp_tmodel_n_tensors(t2); i++) {
        int64_t n;
        float *v, *g;
        sp_tmodel_tensor(t2, i, &n, &v, &g);
        for (int64_t j = 0; j < n; j++) v[j] *= (float)(1.0 + 0.1 * sp_rng_normal(&r));
    }
    sp_model *d1 = NULL, *d2 = NULL;
    assert_int_equal(sp_tmodel_to_model(t1, tm, &d1, &e), SP_OK);
    assert_int_equal(sp_tmodel_to_model(t2, tm, &d2, &e), SP_OK);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 256;
    sp_ctx *c = NULL;
    assert_int_equal(sp_ctx_init(tm, &cp, &c, &e), SP_OK);
    sp_spec_params sp = sp_spec_default_params();
    sp.draft.kind = SP_DRAFT_MODEL;
    sp.draft.draft_model = d1;
    sp.gamma = 4;
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = 120;
    gp.sampling.temperature = 0;
    gp.stop_at_eog = false;
    const int32_t prompt[] = {1, 403, 407, 261, 378};
    int32_t out_a[120], out_c[120];
    sp_spec_stats st;

    swap_probe *pr = calloc(1, sizeof *pr);
    pr->next = d2, pr->swap_at = 70;
    sp_spec *s = NULL;
    assert_int_equal(sp_spec_init(c, &sp, &s, &e), SP_OK);
    pr->s = s;
    sp_spec_set_observer(s, swap_observer, pr);
    if (sp_spec_generate(s, prompt, 5, &gp, out_a, 120, NULL, &st, NULL, NULL, &e)) fail_msg("%s", e.msg);
    sp_spec_free(s);
    const int n_a = pr->n_taus;
    int32_t taus_a[256];
    memcpy(taus_a, pr->taus, sizeof taus_a);

    /* a fresh run with draft 2 from the text committed at the swap */
    const int32_t n_swap = pr->n_swap, done = n_swap - 5;
    sp.draft.draft_model = d2;
    assert_int_equal(sp_spec_init(c, &sp, &s, &e), SP_OK);
    swap_probe *pc = calloc(1, sizeof *pc);
    pc->swap_at = 0; /* record every iteration, never swap */
    pc->iters = 0;
    sp_spec_set_observer(s, swap_observer, pc);
    assert_int_equal(sp_spec_reset(s, &e), SP_OK);
    gp.n_predict = 120 - done;
    if (sp_spec_generate(s, pr->hist, n_swap, &gp, out_c, 120, NULL, &st, NULL, NULL, &e)) fail_msg("%s", e.msg);
    sp_spec_free(s);
    printf("swap after %d tokens; %d iterations after it, accepted lengths:", done, n_a);
    for (int i = 0; i < n_a && i < 24; i++) printf(" %d", taus_a[i] - 1);
    printf("\n");
    assert_int_equal(pc->n_taus, n_a);
    assert_memory_equal(pc->taus, taus_a, (size_t)n_a * sizeof *taus_a);
    assert_memory_equal(out_c, out_a + done, (size_t)(120 - done) * sizeof *out_a);
    /* the run exercised partial acceptance */
    int full = 0, partial = 0;
    for (int i = 0; i < n_a - 1; i++) {
        if (taus_a[i] == 5) full++;
        else partial++;
    }
    assert_true(full > 0 && partial > 0);
    free(pr), free(pc);
    sp_ctx_free(c);
    sp_model_free(d1), sp_model_free(d2);
    sp_tmodel_free(t1), sp_tmodel_free(t2);
    sp_model_free(tm);
}

/* The background learner serving a fresh draft: it trains while the spec
 * generates (no round waits for another) and its snapshots are swapped in;
 * greedy output stays the target's, and the learner reports its rounds. */
static void test_background_serving(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/online-bg.gguf", sp_tmpdir());
    sp_error e = {0};
    write_fresh_draft(path);
    sp_model *tm = NULL, *dm = NULL;
    assert_int_equal(sp_model_load(tgt(), NULL, &tm, &e), SP_OK);
    assert_int_equal(sp_model_load(path, NULL, &dm, &e), SP_OK);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 256;
    sp_ctx *c = NULL, *c2 = NULL;
    assert_int_equal(sp_ctx_init(tm, &cp, &c, &e), SP_OK);
    assert_int_equal(sp_ctx_init(tm, &cp, &c2, &e), SP_OK);
    sp_spec_params sp = sp_spec_default_params();
    sp.draft.kind = SP_DRAFT_MODEL;
    sp.draft.draft_model = dm;
    sp.gamma = 4;
    sp_spec *s = NULL;
    assert_int_equal(sp_spec_init(c, &sp, &s, &e), SP_OK);
    sp_online_params op = sp_online_default_params();
    op.lr = 3e-3f;
    sp_online *on = NULL;
    assert_int_equal(sp_online_init(path, &op, &on, &e), SP_OK);
    sp_online_schedule sch = sp_online_default_schedule();
    sch.every = 64, sch.steps = 20;
    assert_int_equal(sp_online_serve(on, s, dm, &sch, &e), SP_OK);
    assert_int_equal(sp_online_serve(on, s, dm, &sch, &e), SP_ERR_ARG); /* once */
    const int32_t prompt[] = {1, 403, 407, 261, 378};
    int32_t out[96], plain[96];
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = 96;
    gp.stop_at_eog = false;
    for (int g = 0; g < 12; g++) {
        gp.seed = 40 + (uint64_t)g;
        gp.sampling.temperature = g % 3 == 2 ? 0.0f : 1.0f;
        assert_int_equal(sp_spec_reset(s, &e), SP_OK);
        if (sp_spec_generate(s, prompt, 5, &gp, out, 96, NULL, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
        if (gp.sampling.temperature == 0) {
            sp_ctx_truncate(c2, 0, &e);
            assert_int_equal(sp_generate(c2, prompt, 5, &gp, plain, 96, NULL, NULL, NULL, &e), SP_OK);
            assert_memory_equal(out, plain, sizeof out);
        }
        if (g == 5) sp_online_wait(on); /* a checkpoint between requests */
    }
    sp_online_wait(on);
    sp_error le = {0};
    sp_online_stats os = sp_online_get_stats(on, &le);
    printf("background: %lld observed, %lld rounds, %lld steps, %lld swaps, loss %.3f, %.2f s training\n",
           (long long)os.observed, (long long)os.rounds, (long long)os.steps, (long long)os.swaps,
           os.last_loss, os.t_train);
    assert_int_equal(os.errors, 0);
    assert_true(os.rounds >= 2 && os.swaps >= 2 && os.swaps <= os.rounds);
    assert_int_equal(os.steps, os.rounds * 20);
    sp_spec_free(s);
    sp_online_free(on);
    sp_ctx_free(c), sp_ctx_free(c2);
    sp_model_free(dm), sp_model_free(tm);
    unlink(path);
}

/* One learner for two speculation objects in turn (a server slot): the
 * attached one drafts with the newest snapshot, the detached one gets the
 * original draft back and outlives the learner; greedy output stays the
 * target's throughout. */
static void greedy_check(sp_spec *s, sp_ctx *plain_ctx) {
    sp_error e = {0};
    const int32_t prompt[] = {1, 403, 407, 261, 378};
    int32_t out[64], plain[64];
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = 64;
    gp.sampling.temperature = 0;
    gp.stop_at_eog = false;
    assert_int_equal(sp_spec_reset(s, &e), SP_OK);
    if (sp_spec_generate(s, prompt, 5, &gp, out, 64, NULL, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    sp_ctx_truncate(plain_ctx, 0, &e);
    assert_int_equal(sp_generate(plain_ctx, prompt, 5, &gp, plain, 64, NULL, NULL, NULL, &e), SP_OK);
    assert_memory_equal(out, plain, sizeof out);
}

static void test_attach_detach(void **state) {
    (void)state;
    sp_error e = {0};
    sp_model *tm = NULL;
    assert_int_equal(sp_model_load(tgt(), NULL, &tm, &e), SP_OK);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 256;
    sp_ctx *ca = NULL, *cb = NULL, *cplain = NULL;
    assert_int_equal(sp_ctx_init(tm, &cp, &ca, &e), SP_OK);
    assert_int_equal(sp_ctx_init(tm, &cp, &cb, &e), SP_OK);
    assert_int_equal(sp_ctx_init(tm, &cp, &cplain, &e), SP_OK);
    sp_spec_params sp = sp_spec_default_params();
    sp.draft.kind = SP_DRAFT_MODEL;
    sp.draft.draft_model = tm; /* stories260K drafting for itself, learning online */
    sp.gamma = 3;
    sp_spec *a = NULL, *b = NULL;
    assert_int_equal(sp_spec_init(ca, &sp, &a, &e), SP_OK);
    assert_int_equal(sp_spec_init(cb, &sp, &b, &e), SP_OK);
    sp_online_params op = sp_online_default_params();
    sp_online *on = NULL;
    assert_int_equal(sp_online_init(tgt(), &op, &on, &e), SP_OK);
    assert_int_equal(sp_online_attach(on, a, &e), SP_ERR_ARG); /* not serving yet */
    sp_online_schedule sch = sp_online_default_schedule();
    sch.every = 32, sch.steps = 2, sch.background = false;
    sp_model *other = NULL;
    assert_int_equal(sp_model_load(tgt(), NULL, &other, &e), SP_OK);
    assert_int_equal(sp_online_serve(on, a, other, &sch, &e), SP_ERR_ARG); /* a drafts with tm, not other */
    sp_model_free(other);
    assert_int_equal(sp_online_serve(on, NULL, tm, &sch, &e), SP_OK);
    assert_int_equal(sp_online_attach(on, a, &e), SP_OK);
    greedy_check(a, cplain);
    assert_true(sp_online_model(on) != tm); /* rounds ran inline and were swapped in */
    assert_ptr_equal(sp_spec_draft_model(a), sp_online_model(on));
    assert_int_equal(sp_online_attach(on, b, &e), SP_OK);
    assert_ptr_equal(sp_spec_draft_model(a), tm);
    assert_ptr_equal(sp_spec_draft_model(b), sp_online_model(on));
    greedy_check(b, cplain);
    sp_online_stats os = sp_online_get_stats(on, NULL);
    assert_true(os.rounds >= 3 && os.swaps == os.rounds && os.errors == 0);
    sp_online_detach(on);
    assert_ptr_equal(sp_spec_draft_model(b), tm);
    sp_online_free(on); /* a and b outlive it */
    greedy_check(a, cplain);
    greedy_check(b, cplain);
    sp_spec_free(a), sp_spec_free(b);
    sp_ctx_free(ca), sp_ctx_free(cb), sp_ctx_free(cplain);
    sp_model_free(tm);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_attach_detach),
    cmocka_unit_test(test_online_learning),
    cmocka_unit_test(test_snapshot_forward),
    cmocka_unit_test(test_swap_rebuilds_draft_cache),
    cmocka_unit_test(test_background_serving),
};
SP_TEST_MAIN(tests)
