/* sp_batch (continuous batching in the library) and the generation loop's
 * hooks: threads generating through one batcher get exactly the tokens
 * sp_generate gives each alone (sampled, on a vocabulary with padding
 * rows), their passes are shared, and the statistics add up; a prompt
 * cache (keep_prefix) gives a cold run's tokens, also on a hybrid
 * recurrent model returning to its mark (sp_ctx_pin); bad calls are
 * refused with one-line errors. */
#include "testutil.h"
#include "threadpool.h"

#include <pthread.h>

static char *rand_model(const char *arch, int32_t pad, const char *tag) {
    static char path[4][512];
    static int slot;
    char *p = path[slot++ & 3];
    snprintf(p, sizeof path[0], "%s/batch_%s.gguf", sp_tmpdir(), tag);
    sp_mkmodel_params mp = sp_mkmodel_default_params();
    mp.arch = arch;
    mp.type = SP_GGML_F32;
    mp.dim = 64;
    mp.n_layers = 4;
    mp.n_heads = 4;
    mp.n_kv_heads = 2;
    mp.ffn_dim = 96;
    mp.n_vocab = 128;
    mp.pad_vocab = pad;
    mp.n_ctx = 256;
    mp.seed = 9;
    sp_error err = {0};
    if (sp_mkmodel(&mp, p, &err)) fail_msg("mkmodel %s: %s", arch, err.msg);
    return p;
}

static sp_model *load_model(const char *path) {
    sp_model *m;
    sp_error err = {0};
    if (sp_model_load(path, NULL, &m, &err)) fail_msg("load %s: %s", path, err.msg);
    return m;
}

enum { NT = 4, NP = 9, NG = 48 };

typedef struct job {
    sp_ctx *ctx;
    sp_batcher *b;
    uint64_t seed;
    int32_t out[NG];
    int32_t n;
    sp_status st;
} job;

static const int32_t PROMPT[NP] = {1, 17, 33, 5, 90, 64, 3, 12, 77};

static sp_gen_params gen_params(uint64_t seed) {
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = NG;
    gp.sampling.temperature = 1.0f;
    gp.seed = seed;
    gp.stop_at_eog = false;
    return gp;
}

static void *job_main(void *arg) {
    job *j = arg;
    sp_gen_params gp = gen_params(j->seed);
    gp.forward = sp_batch_forward;
    gp.forward_ud = j->b;
    sp_gen_stats gs;
    sp_error err = {0};
    j->st = sp_generate(j->ctx, PROMPT, NP, &gp, j->out, NG, &gs, NULL, NULL, &err);
    sp_batch_join(j->b, -1);
    j->n = gs.n_generated;
    return NULL;
}

static void test_batched_equals_alone(void **state) {
    (void)state;
    sp_model *m = load_model(rand_model("llama", 256, "pad"));
    assert_int_equal(sp_model_n_valid_vocab(m), 128);
    sp_error err = {0};
    sp_pool *pool;
    assert_int_equal(sp_pool_init(2, &pool, &err), SP_OK);
    sp_batcher *b;
    assert_int_equal(sp_batch_init(m, 64, &b, &err), SP_OK);
    job jobs[NT];
    pthread_t th[NT];
    sp_batch_join(b, NT); /* all of them decode from the start; each leaves when done */
    for (int i = 0; i < NT; i++) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = 128;
        cp.pool = pool;
        assert_int_equal(sp_ctx_init(m, &cp, &jobs[i].ctx, &err), SP_OK);
        jobs[i].b = b;
        jobs[i].seed = 100 + (uint64_t)i;
        pthread_create(&th[i], NULL, job_main, &jobs[i]);
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    int64_t pads = 0;
    for (int i = 0; i < NT; i++) {
        assert_int_equal(jobs[i].st, SP_OK);
        assert_int_equal(jobs[i].n, NG);
        /* alone, on a fresh context */
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = 128;
        sp_ctx *c;
        assert_int_equal(sp_ctx_init(m, &cp, &c, &err), SP_OK);
        sp_gen_params gp = gen_params(jobs[i].seed);
        int32_t want[NG];
        assert_int_equal(sp_generate(c, PROMPT, NP, &gp, want, NG, NULL, NULL, NULL, &err), SP_OK);
        assert_memory_equal(jobs[i].out, want, sizeof want);
        for (int t = 0; t < NG; t++) pads += jobs[i].out[t] >= 128;
        sp_ctx_free(c);
        sp_ctx_free(jobs[i].ctx);
    }
    assert_int_equal(pads, 0); /* padding ids are never drawn */
    const sp_batch_stats s = sp_batch_get_stats(b);
    printf("batch: %llu sequences, %llu tokens in %llu passes\n", (unsigned long long)s.seqs,
           (unsigned long long)s.tokens, (unsigned long long)s.passes);
    /* every forward went through it: a prompt chunk and NG - 1 steps each */
    assert_int_equal(s.seqs, NT * NG);
    assert_int_equal(s.tokens, NT * (NP + NG - 1));
    assert_true(s.passes < s.seqs); /* some passes were shared */
    sp_batch_free(b);
    sp_pool_free(pool);
    sp_model_free(m);
}

/* A context holding a prefix of the prompt (keep_prefix) evaluates the rest
 * and gives the tokens of a cold run; on a hybrid model after a whole
 * generation it returns to its mark. */
static void check_prefix(const char *arch) {
    sp_model *m = load_model(rand_model(arch, 0, arch));
    sp_error err = {0};
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 128;
    sp_ctx *warm, *cold;
    assert_int_equal(sp_ctx_init(m, &cp, &warm, &err), SP_OK);
    assert_int_equal(sp_ctx_init(m, &cp, &cold, &err), SP_OK);
    int32_t out[NG], want[NG], prompt2[NP + 4];
    sp_gen_params gp = gen_params(7);
    gp.keep_prefix = true;
    sp_gen_stats gs;
    assert_int_equal(sp_generate(warm, PROMPT, NP, &gp, out, NG, &gs, NULL, NULL, &err), SP_OK);
    assert_int_equal(gs.n_pinned, NP);
    /* the next prompt shares the first one; return to its end */
    memcpy(prompt2, PROMPT, sizeof PROMPT);
    for (int i = 0; i < 4; i++) prompt2[NP + i] = 40 + i;
    assert_int_equal(sp_ctx_truncate(warm, NP, &err), SP_OK);
    gp.seed = 8;
    assert_int_equal(sp_generate(warm, prompt2, NP + 4, &gp, out, NG, &gs, NULL, NULL, &err), SP_OK);
    assert_int_equal(gs.n_cached, NP);
    sp_gen_params gc = gen_params(8);
    assert_int_equal(sp_generate(cold, prompt2, NP + 4, &gc, want, NG, NULL, NULL, NULL, &err), SP_OK);
    assert_memory_equal(out, want, sizeof want);
    /* without keep_prefix a context must be empty */
    assert_int_equal(sp_generate(warm, prompt2, NP + 4, &gc, want, NG, NULL, NULL, NULL, &err), SP_ERR_STATE);
    /* with it, the context must hold less than the prompt */
    assert_int_equal(sp_generate(warm, PROMPT, 2, &gp, want, NG, NULL, NULL, NULL, &err), SP_ERR_STATE);
    assert_non_null(strstr(err.msg, "not a strict prefix"));
    sp_ctx_free(warm);
    sp_ctx_free(cold);
    sp_model_free(m);
}

static void test_prefix(void **state) {
    (void)state;
    check_prefix("llama");
    check_prefix("qwen35");
}


/* Speculation with a draft model through the prompt cache: after
 * sp_spec_reset_keep the target keeps the shared prefix and the draft model
 * its own cache of it, so the second prompt costs fewer draft forwards, and
 * the tokens (sampled, static draft length) equal a cold run's. */
static void test_spec_prefix(void **state) {
    (void)state;
    sp_model *m = load_model(rand_model("llama", 0, "spec"));
    sp_model *dm = load_model(rand_model("llama", 0, "spec"));
    sp_error err = {0};
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 128;
    sp_ctx *cw, *cc;
    assert_int_equal(sp_ctx_init(m, &cp, &cw, &err), SP_OK);
    assert_int_equal(sp_ctx_init(m, &cp, &cc, &err), SP_OK);
    sp_spec_params sp = sp_spec_default_params();
    sp.draft.kind = SP_DRAFT_MODEL;
    sp.draft.draft_model = dm;
    sp.gamma = 3;
    sp_spec *warm, *cold;
    assert_int_equal(sp_spec_init(cw, &sp, &warm, &err), SP_OK);
    assert_int_equal(sp_spec_init(cc, &sp, &cold, &err), SP_OK);
    enum { NEW = 16 }; /* cold, the draft's prefill takes 2 passes of 64; kept, 1 */
    int32_t out[NG], want[NG], prompt2[NP + NG + NEW];
    sp_gen_params gp = gen_params(11);
    gp.keep_prefix = true;
    sp_gen_stats gs;
    sp_spec_stats ss, sc;
    assert_int_equal(sp_spec_generate(warm, PROMPT, NP, &gp, out, NG, &gs, &ss, NULL, NULL, &err), SP_OK);
    /* the next prompt: the first, its output, new tokens */
    memcpy(prompt2, PROMPT, sizeof PROMPT);
    memcpy(prompt2 + NP, out, (size_t)gs.n_generated * sizeof *out);
    const int32_t n2 = NP + gs.n_generated + NEW;
    for (int i = 0; i < NEW; i++) prompt2[n2 - NEW + i] = 50 + i;
    const int32_t keep = sp_ctx_n_past(cw) < n2 - 1 ? sp_ctx_n_past(cw) : n2 - 1;
    assert_true(keep > NP);
    assert_int_equal(sp_spec_reset_keep(warm, keep, &err), SP_OK);
    gp.seed = 12;
    assert_int_equal(sp_spec_generate(warm, prompt2, n2, &gp, out, NG, &gs, &ss, NULL, NULL, &err), SP_OK);
    assert_int_equal(gs.n_cached, keep);
    sp_gen_params gc = gen_params(12);
    assert_int_equal(sp_spec_generate(cold, prompt2, n2, &gc, want, NG, NULL, &sc, NULL, NULL, &err), SP_OK);
    assert_memory_equal(out, want, sizeof want);
    printf("spec prefix: %d of %d prompt tokens kept; draft forwards %lld (cold %lld), target prefill %lld (cold %lld)\n",
           keep, n2, (long long)ss.draft_forwards, (long long)sc.draft_forwards, (long long)ss.prefill_forwards,
           (long long)sc.prefill_forwards);
    assert_true(ss.draft_forwards < sc.draft_forwards); /* the draft's prefill was shorter */
    sp_spec_free(warm);
    sp_spec_free(cold);
    sp_ctx_free(cw);
    sp_ctx_free(cc);
    sp_model_free(dm);
    sp_model_free(m);
}

static void test_bad_calls(void **state) {
    (void)state;
    sp_model *m = load_model(rand_model("llama", 0, "bad"));
    sp_error err = {0};
    sp_batcher *b = (sp_batcher *)&err;
    assert_int_equal(sp_batch_init(m, 0, &b, &err), SP_ERR_ARG);
    assert_null(b);
    assert_non_null(strstr(err.msg, "max_rows"));
    sp_batch_free(NULL);
    sp_model_free(m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_batched_equals_alone),
    cmocka_unit_test(test_prefix),
    cmocka_unit_test(test_spec_prefix),
    cmocka_unit_test(test_bad_calls),
};
SP_TEST_MAIN(tests)
