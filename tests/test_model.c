/* Tests for model loading and the forward pass: the independent llama.cpp /
 * llama2.c greedy reference, GGUF vs llama2.c equality, batch/tree/thread
 * consistency, KV rollback and compaction, and refusal of bad files. */
#include "testutil.h"
#include "gguf_write.h"

#include <math.h>
#include <fcntl.h>
#include <unistd.h>

#include "ops.h"
#include "specula.h"
#include "requant.h"

/* ../shared/reference/llamacpp_stories260K.md */
static const int32_t REF_PROMPT[] = {1, 403, 407, 261, 378};
static const int32_t REF_GEN[64] = {
    432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394,
    261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
    398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336};

static void expect_load_error(const char *path, sp_status want, const char *needle);

static sp_model *load(const char *path, const char *tok) {
    sp_error err = {0};
    sp_model *m = NULL;
    sp_model_params p = sp_model_default_params();
    p.tokenizer_path = tok;
    if (sp_model_load(path, &p, &m, &err)) fail_msg("load %s: %s", path, err.msg);
    return m;
}

static sp_ctx *mkctx(const sp_model *m, int32_t n_ctx, int32_t threads) {
    sp_error err = {0};
    sp_ctx *c = NULL;
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = threads;
    p.max_batch = 128;
    if (sp_ctx_init(m, &p, &c, &err)) fail_msg("ctx: %s", err.msg);
    return c;
}

static void fwd(sp_ctx *c, const int32_t *tok, const int32_t *pos, int32_t n, const uint8_t *mask,
                bool all, float *logits) {
    sp_error err = {0};
    sp_batch b = {.tokens = tok, .pos = pos, .n = n, .mask = mask, .logits_all = all};
    if (sp_forward(c, &b, logits, &err)) fail_msg("forward: %s", err.msg);
}

/* Greedy decode of 64 tokens after the reference prompt, one token a call. */
static void greedy_matches_reference(const char *path) {
    sp_model *m = load(path, NULL);
    sp_ctx *c = mkctx(m, 256, 1);
    int32_t V = sp_model_cfg(m)->n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    fwd(c, REF_PROMPT, NULL, 5, NULL, false, logits);
    for (int i = 0; i < 64; i++) {
        int32_t id = sp_argmax(logits, V);
        if (id != REF_GEN[i]) fail_msg("%s: token %d is %d, reference %d", path, i, id, REF_GEN[i]);
        fwd(c, &id, NULL, 1, NULL, false, logits);
    }
    free(logits);
    sp_ctx_free(c);
    sp_model_free(m);
}

static void test_reference_gguf(void **state) {
    (void)state;
    greedy_matches_reference(sp_shared("models/stories260K.gguf"));
}

static void test_reference_llama2c(void **state) {
    (void)state;
    greedy_matches_reference(sp_shared("models/stories260K.bin"));
}

/* The two files hold the same f32 weights: logits must agree to 1e-5. */
static void test_gguf_equals_llama2c(void **state) {
    (void)state;
    sp_model *a = load(sp_shared("models/stories260K.gguf"), NULL);
    sp_model *b = load(sp_shared("models/stories260K.bin"), NULL);
    const sp_model_config *ca = sp_model_cfg(a), *cb = sp_model_cfg(b);
    assert_int_equal(ca->dim, cb->dim);
    assert_int_equal(ca->n_layers, cb->n_layers);
    assert_int_equal(ca->n_kv_heads, 4);
    assert_int_equal(ca->n_vocab, cb->n_vocab);
    sp_ctx *x = mkctx(a, 128, 1), *y = mkctx(b, 128, 1);
    int32_t V = ca->n_vocab, n = 5 + 64;
    int32_t toks[69];
    memcpy(toks, REF_PROMPT, sizeof REF_PROMPT);
    memcpy(toks + 5, REF_GEN, sizeof REF_GEN);
    float *la = malloc((size_t)(n * V) * sizeof(float)), *lb = malloc((size_t)(n * V) * sizeof(float));
    fwd(x, toks, NULL, n, NULL, true, la);
    fwd(y, toks, NULL, n, NULL, true, lb);
    double md = 0;
    for (int64_t i = 0; i < (int64_t)n * V; i++) md = fmax(md, fabs(la[i] - lb[i]) / fmax(1.0, fabs(la[i])));
    assert_true(md <= 1e-5);
    free(la);
    free(lb);
    sp_ctx_free(x);
    sp_ctx_free(y);
    sp_model_free(a);
    sp_model_free(b);
}

/* n tokens in one call vs n one-token calls: bit-identical. */
static void batch_equals_sequential(sp_model *m, int32_t threads) {
    int32_t V = sp_model_cfg(m)->n_vocab, n = 40;
    int32_t toks[40];
    sp_rng r;
    sp_rng_seed(&r, 3);
    for (int i = 0; i < n; i++) toks[i] = (int32_t)sp_rng_below(&r, (uint64_t)V);
    sp_ctx *a = mkctx(m, 64, threads), *b = mkctx(m, 64, 1);
    float *la = malloc((size_t)(n * V) * sizeof(float)), *lb = malloc((size_t)(n * V) * sizeof(float));
    fwd(a, toks, NULL, 17, NULL, true, la); /* 17 + 23: exercises the 8/4/1 groups */
    fwd(a, toks + 17, NULL, n - 17, NULL, true, la + 17 * V);
    for (int i = 0; i < n; i++) fwd(b, toks + i, NULL, 1, NULL, false, lb + (int64_t)i * V);
    assert_memory_equal(la, lb, (size_t)(n * V) * sizeof(float));
    assert_int_equal(sp_ctx_n_past(a), n);
    free(la);
    free(lb);
    sp_ctx_free(a);
    sp_ctx_free(b);
}

static char *tmp_model(const char *tag, sp_ggml_type type, int32_t dim, int32_t layers) {
    static char path[8][512];
    static int slot;
    char *p = path[slot++ & 7];
    snprintf(p, sizeof path[0], "%s/specula_test_%s_%d.gguf", sp_tmpdir(), tag, (int)getpid());
    sp_mkmodel_params mp = sp_mkmodel_default_params();
    mp.type = type;
    mp.dim = dim;
    mp.n_layers = layers;
    mp.n_heads = dim / 32;
    mp.n_kv_heads = mp.n_heads > 1 ? mp.n_heads / 2 : 1;
    mp.ffn_dim = 2 * dim + 64;
    mp.n_vocab = 64;
    mp.seed = 11;
    sp_error err = {0};
    if (sp_mkmodel(&mp, p, &err)) fail_msg("mkmodel: %s", err.msg);
    return p;
}

static void test_batch_equals_sequential(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("models/stories260K.gguf"), NULL);
    batch_equals_sequential(m, 1);
    sp_model_free(m);
    const sp_ggml_type types[] = {SP_GGML_F32, SP_GGML_F16, SP_GGML_BF16, SP_GGML_Q8_0, SP_GGML_Q4_0};
    for (size_t i = 0; i < 5; i++) {
        char *p = tmp_model(sp_ggml_type_name(types[i]), types[i], 64, 2);
        m = load(p, NULL);
        assert_int_equal(sp_model_cfg(m)->wtype, types[i]);
        batch_equals_sequential(m, 1);
        sp_model_free(m);
        unlink(p);
    }
}

/* A small random model of weight type `type` at `path` (dim 256, 2 layers,
 * 8 heads / 4 KV heads, FFN 512, 72 vocabulary rows: a partial group of 16);
 * arch NULL: mkmodel's default. */
static void make_small_model(const char *path, const char *arch, sp_ggml_type type, uint64_t seed) {
    sp_mkmodel_params mp = sp_mkmodel_default_params();
    if (arch) mp.arch = arch;
    mp.type = type;
    mp.dim = 256;
    mp.n_layers = 2;
    mp.n_heads = 8;
    mp.n_kv_heads = 4;
    mp.ffn_dim = 512;
    mp.n_vocab = 72;
    mp.seed = seed;
    sp_error err = {0};
    if (sp_mkmodel(&mp, path, &err)) fail_msg("mkmodel: %s", err.msg);
}

/* The other formats with packed kernels (K-quants and IQ4_XS: rows of 256;
 * Q4_1, Q5_0, Q5_1, IQ4_NL; the float types again) the same way, on 1 and 2
 * threads; 72 vocabulary rows end in a partial group of 16 rows. */
static void test_batch_equals_sequential_kquants(void **state) {
    (void)state;
    const sp_ggml_type types[] = {SP_GGML_Q4_K, SP_GGML_Q5_K, SP_GGML_Q6_K,  SP_GGML_Q4_1,
                                  SP_GGML_Q5_0, SP_GGML_Q5_1, SP_GGML_IQ4_NL, SP_GGML_IQ4_XS,
                                  SP_GGML_F32,  SP_GGML_F16,  SP_GGML_BF16};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/specula_test_k%d_%d.gguf", sp_tmpdir(), (int)i, (int)getpid());
        make_small_model(p, NULL, types[i], 12);
        sp_model *m = load(p, NULL);
        assert_int_equal(sp_model_cfg(m)->wtype, types[i]);
        batch_equals_sequential(m, 1);
        batch_equals_sequential(m, 2);
        sp_model_free(m);
        unlink(p);
    }
}

/* Real llama-quantize mixes of the formats Specula reads but does not write
 * (Q2_K, Q3_K, next to Q4_K/Q5_K/Q6_K and small rows kept in other types):
 * batch logits equal one-at-a-time on 1 and 2 threads through the packed
 * kernels. */
static void test_batch_equals_sequential_mixes(void **state) {
    (void)state;
    static const char *files[] = {"reference/formats/mix-Q2_K.gguf", "reference/formats/mix-Q3_K_M.gguf"};
    for (size_t i = 0; i < 2; i++) {
        sp_model *m = load(sp_shared(files[i]), NULL);
        batch_equals_sequential(m, 1);
        batch_equals_sequential(m, 2);
        sp_model_free(m);
    }
}

/* Tied embeddings (qwen2: the token embedding is also the output matrix)
 * with packed float weights: the packed output copy serves the logits while
 * the lookup reads the original rows. Batch = sequential on 1 and 2 threads,
 * and the logits agree with a lower ISA's on the unpacked rows (float
 * order differs between ISAs: relative tolerance). */
static void test_tied_embeddings_packed(void **state) {
    (void)state;
    const sp_ggml_type types[] = {SP_GGML_F16, SP_GGML_BF16, SP_GGML_F32};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        char p[512];
        snprintf(p, sizeof p, "%s/specula_test_tied%d_%d.gguf", sp_tmpdir(), (int)ti, (int)getpid());
        make_small_model(p, "qwen2", types[ti], 13);
        sp_error err = {0};
        enum { N = 9 };
        const int32_t toks[N] = {1, 5, 9, 14, 20, 33, 41, 60, 71};
        float la[N * 72], lb[N * 72];
        sp_model *m = load(p, NULL);
        assert_int_equal(sp_model_cfg(m)->n_vocab, 72);
        batch_equals_sequential(m, 1);
        batch_equals_sequential(m, 2);
        sp_ctx *c = mkctx(m, 64, 1);
        fwd(c, toks, NULL, N, NULL, true, la);
        sp_ctx_free(c);
        sp_model_free(m);
        const sp_isa saved = sp_ops_isa();
        if (saved > SP_ISA_SCALAR) {
            assert_int_equal(sp_ops_set_isa((sp_isa)(saved - 1), &err), SP_OK);
            m = load(p, NULL);
            c = mkctx(m, 64, 1);
            fwd(c, toks, NULL, N, NULL, true, lb);
            sp_ctx_free(c);
            sp_model_free(m);
            assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
            double mx = 0, md = 0;
            for (int i = 0; i < N * 72; i++) {
                mx = fmax(mx, fabs(la[i]));
                md = fmax(md, fabs((double)la[i] - lb[i]));
            }
            assert_true(mx > 0);
            if (md > 1e-3 * mx) fail_msg("%s tied: logits differ by %g (max %g)", sp_ggml_type_name(types[ti]), md, mx);
        }
        unlink(p);
    }
}

/* Results do not depend on the thread count (a model big enough that the
 * matmuls and attention really run on the pool). */
static void test_threads_invariant(void **state) {
    (void)state;
    char *p = tmp_model("threads", SP_GGML_Q8_0, 512, 2);
    sp_model *m = load(p, NULL);
    batch_equals_sequential(m, 2);
    sp_model_free(m);
    unlink(p);
}

/* A token tree under a tree mask: every node's logits equal those of its
 * root-to-node path evaluated alone; then keeping one path in the KV cache
 * continues exactly like a fresh sequential run of that path. */
static void test_tree_mask_and_keep(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("models/stories260K.gguf"), NULL);
    int32_t V = sp_model_cfg(m)->n_vocab;
    /* tree over the prompt:      0     1
     *                           / \    |
     *                          2   3   4
     *                          |
     *                          5                                            */
    const int32_t parent[6] = {-1, -1, 0, 0, 1, 2};
    const int32_t tok[6] = {432, 300, 383, 286, 261, 286};
    int32_t depth[6], pos[6];
    uint8_t mask[36] = {0};
    for (int i = 0; i < 6; i++) {
        depth[i] = parent[i] < 0 ? 0 : depth[parent[i]] + 1;
        pos[i] = 5 + depth[i];
        for (int a = i; a >= 0; a = parent[a]) mask[i * 6 + a] = 1;
    }
    sp_ctx *c = mkctx(m, 64, 1);
    float *lt = malloc((size_t)(6 * V) * sizeof(float)), *lp = malloc((size_t)(4 * V) * sizeof(float));
    float *tmp = malloc((size_t)V * sizeof(float));
    fwd(c, REF_PROMPT, NULL, 5, NULL, false, tmp);
    fwd(c, tok, pos, 6, mask, true, lt);
    assert_int_equal(sp_ctx_n_past(c), 11);
    sp_ctx *s = mkctx(m, 64, 1);
    for (int i = 0; i < 6; i++) {
        int32_t path[4], n = 0;
        for (int a = i; a >= 0; a = parent[a]) path[n++] = tok[a];
        for (int j = 0; j < n / 2; j++) {
            int32_t t = path[j];
            path[j] = path[n - 1 - j];
            path[n - 1 - j] = t;
        }
        sp_error err = {0};
        assert_int_equal(sp_ctx_truncate(s, 0, &err), SP_OK);
        fwd(s, REF_PROMPT, NULL, 5, NULL, false, tmp);
        fwd(s, path, NULL, n, NULL, true, lp);
        assert_memory_equal(lt + (int64_t)i * V, lp + (int64_t)(n - 1) * V, (size_t)V * sizeof(float));
    }
    /* keep path 0 -> 2 -> 5 (tree slots 0, 2, 5) and continue with one token */
    sp_error err = {0};
    const int32_t keep[3] = {0, 2, 5};
    assert_int_equal(sp_ctx_keep(c, 5, keep, 3, &err), SP_OK);
    assert_int_equal(sp_ctx_n_past(c), 8);
    int32_t next = 261;
    fwd(c, &next, NULL, 1, NULL, false, lt);
    const int32_t seq[9] = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    sp_ctx_truncate(s, 0, &err);
    for (int i = 0; i < 9; i++) fwd(s, seq + i, NULL, 1, NULL, false, lp);
    assert_memory_equal(lt, lp, (size_t)V * sizeof(float));
    /* truncate (rollback) then re-evaluate gives the same logits again */
    assert_int_equal(sp_ctx_truncate(c, 8, &err), SP_OK);
    fwd(c, &next, NULL, 1, NULL, false, lt);
    assert_memory_equal(lt, lp, (size_t)V * sizeof(float));
    assert_int_not_equal(sp_ctx_keep(c, 5, (const int32_t[]){2, 1}, 2, &err), SP_OK);
    free(lt);
    free(lp);
    free(tmp);
    sp_ctx_free(c);
    sp_ctx_free(s);
    sp_model_free(m);
}

/* A tree grown level by level (as a drafter does): level 2 sees its level-1
 * parent in the cache but not the parent's siblings, via mask_from_past. */
static void test_tree_levels_from_past(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("models/stories260K.gguf"), NULL);
    int32_t V = sp_model_cfg(m)->n_vocab;
    sp_ctx *c = mkctx(m, 64, 1), *s = mkctx(m, 64, 1);
    float *l = malloc((size_t)(4 * V) * sizeof(float)), *ref = malloc((size_t)(4 * V) * sizeof(float));
    fwd(c, REF_PROMPT, NULL, 5, NULL, false, l);
    /* level 1: two siblings at slots 5, 6 (position 5) */
    const int32_t l1[2] = {432, 300}, p1[2] = {5, 5};
    const uint8_t m1[4] = {1, 0, 0, 1};
    fwd(c, l1, p1, 2, m1, true, l);
    /* level 2: children of slot 6 ("300"): tokens at position 6 */
    const int32_t l2[2] = {383, 286}, p2[2] = {6, 6};
    /* mask over slots 5..8: sibling 5 hidden, parent 6 visible, self */
    const uint8_t m2[8] = {0, 1, 1, 0, 0, 1, 0, 1};
    sp_batch b = {.tokens = l2, .pos = p2, .n = 2, .mask = m2, .mask_from_past = true,
                  .mask_base = 5, .logits_all = true};
    sp_error err = {0};
    assert_int_equal(sp_forward(c, &b, l, &err), SP_OK);
    for (int i = 0; i < 2; i++) {
        sp_ctx_truncate(s, 0, &err);
        int32_t seq[7] = {1, 403, 407, 261, 378, 300, l2[i]};
        fwd(s, seq, NULL, 7, NULL, false, ref);
        assert_memory_equal(l + (int64_t)i * V, ref, (size_t)V * sizeof(float));
    }
    /* a mask row that hides the token from itself is refused */
    const uint8_t bad[8] = {0, 1, 0, 0, 0, 1, 0, 1};
    b.mask = bad;
    assert_int_equal(sp_forward(c, &b, l, &err), SP_ERR_ARG);
    free(l);
    free(ref);
    sp_ctx_free(c);
    sp_ctx_free(s);
    sp_model_free(m);
}

/* Generation stops at every end-of-generation id, not only EOS: a
 * stories260K copy whose tokenizer.ggml.eot_token_id is the sixth greedy
 * token (298, not among the five before it) stops right after emitting it,
 * in plain and in speculative decoding (Q8_0 self-draft); without stopping,
 * the 64 tokens are llama.cpp's. */
static void test_generation_stops_at_eot(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/specula_eot_%d.gguf", sp_tmpdir(), (int)getpid());
    sp_error err = {0};
    sp_write_eot_copy(sp_shared("models/stories260K.gguf"), path, REF_GEN[5]);
    sp_model *m = load(path, NULL);
    const sp_tokenizer *tok = sp_model_tokenizer(m);
    assert_true(sp_tokenizer_is_eog(tok, REF_GEN[5]) && sp_tokenizer_is_eog(tok, sp_tokenizer_eos(tok)));
    for (int stop = 0; stop < 2; stop++)
        for (int spec = 0; spec < 2; spec++) {
            sp_gen_params gp = sp_gen_default_params();
            gp.n_predict = 64;
            gp.sampling.temperature = 0;
            gp.stop_at_eog = stop;
            int32_t out[64];
            sp_gen_stats st = {0};
            sp_ctx *c = mkctx(m, 128, 1);
            if (spec) {
                sp_spec_params sp = sp_spec_default_params();
                sp.draft.kind = SP_DRAFT_LOWBIT;
                sp.draft.lowbit_type = SP_GGML_Q8_0;
                sp.gamma = 4;
                sp_spec *s = NULL;
                if (sp_spec_init(c, &sp, &s, &err)) fail_msg("%s", err.msg);
                if (sp_spec_generate(s, REF_PROMPT, 5, &gp, out, 64, &st, NULL, NULL, NULL, &err))
                    fail_msg("%s", err.msg);
                sp_spec_free(s);
            } else if (sp_generate(c, REF_PROMPT, 5, &gp, out, 64, &st, NULL, NULL, &err)) {
                fail_msg("%s", err.msg);
            }
            assert_int_equal(st.n_generated, stop ? 6 : 64);
            assert_int_equal(st.hit_eog, stop);
            assert_memory_equal(out, REF_GEN, (size_t)st.n_generated * sizeof out[0]);
            sp_ctx_free(c);
        }
    sp_model_free(m);
}

/* stories260K copied with extra RoPE metadata: variant 0 linear scaling x2,
 * 1 rope_freqs.weight all 2.0 (Llama 3.1 style), 2 longrope (unsupported;
 * YaRN is held to llama.cpp's logits in test_moe). */
static const char *rope_variant(int variant) {
    static char path[512];
    snprintf(path, sizeof path, "%s/specula_rope_%d_%d.gguf", sp_tmpdir(), variant, (int)getpid());
    sp_error err = {0};
    sp_gguf *g = NULL;
    if (sp_gguf_open(sp_shared("models/stories260K.gguf"), &g, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer *w = sp_gguf_writer_init();
    sp_gguf_writer_copy_kv(w, g, NULL);
    if (variant == 0) {
        sp_gguf_writer_set_str(w, "llama.rope.scaling.type", "linear");
        sp_gguf_writer_set_f32(w, "llama.rope.scaling.factor", 2.0f);
    } else if (variant == 2) {
        sp_gguf_writer_set_str(w, "llama.rope.scaling.type", "longrope");
    }
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        assert_int_equal(sp_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, true, &err), SP_OK);
    }
    float twos[4] = {2, 2, 2, 2}; /* head 8 -> 4 frequencies */
    int64_t ne[1] = {4};
    if (variant == 1)
        assert_int_equal(sp_gguf_writer_add_tensor(w, "rope_freqs.weight", SP_GGML_F32, 1, ne, twos, false, &err), SP_OK);
    if (sp_gguf_writer_write(w, path, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer_free(w);
    sp_gguf_close(g);
    return path;
}

/* Halving every RoPE angle, by linear scaling or by frequency factors, makes
 * positions 0,2,4,.. behave exactly like 0,1,2,.. of the plain model; an
 * unsupported scaling type is refused by name. */
static void test_rope_scaling(void **state) {
    (void)state;
    sp_model *base = load(sp_shared("models/stories260K.gguf"), NULL);
    int32_t V = sp_model_cfg(base)->n_vocab;
    float *ref = malloc((size_t)(5 * V) * sizeof(float)), *got = malloc((size_t)(5 * V) * sizeof(float));
    sp_ctx *c = mkctx(base, 64, 1);
    fwd(c, REF_PROMPT, NULL, 5, NULL, true, ref);
    sp_ctx_free(c);
    const int32_t even[5] = {0, 2, 4, 6, 8};
    for (int v = 0; v < 2; v++) {
        const char *p = rope_variant(v);
        sp_model *m = load(p, NULL);
        c = mkctx(m, 64, 1);
        fwd(c, REF_PROMPT, even, 5, NULL, true, got);
        assert_memory_equal(ref, got, (size_t)(5 * V) * sizeof(float));
        fwd(c, REF_PROMPT, NULL, 5, NULL, true, got); /* positions 5..9: really different */
        assert_true(memcmp(ref, got, (size_t)(5 * V) * sizeof(float)) != 0);
        sp_ctx_free(c);
        sp_model_free(m);
        unlink(p);
    }
    const char *p = rope_variant(2);
    expect_load_error(p, SP_ERR_UNSUPPORTED, "longrope");
    unlink(p);
    free(ref);
    free(got);
    sp_model_free(base);
}

/* The low-precision self-draft copy: same shapes, close logits. */
static void test_requantize(void **state) {
    (void)state;
    char *p = tmp_model("requant", SP_GGML_F32, 64, 2);
    sp_model *m = load(p, NULL);
    sp_model *q = NULL;
    sp_error err = {0};
    assert_int_equal(sp_model_requantize(m, SP_GGML_Q8_0, &q, &err), SP_OK);
    assert_int_equal(sp_model_cfg(q)->wtype, SP_GGML_Q8_0);
    sp_ctx *a = mkctx(m, 32, 1), *b = mkctx(q, 32, 1);
    int32_t V = sp_model_cfg(m)->n_vocab;
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
    int32_t toks[4] = {1, 5, 9, 12};
    fwd(a, toks, NULL, 4, NULL, false, la);
    fwd(b, toks, NULL, 4, NULL, false, lb);
    double md = 0, mx = 0;
    for (int i = 0; i < V; i++) md = fmax(md, fabs(la[i] - lb[i])), mx = fmax(mx, fabs(la[i]));
    assert_true(md < 0.05 * mx);
    assert_true(md > 0); /* it really is a different model */
    sp_model *q2 = NULL;
    assert_int_equal(sp_model_requantize(m, SP_GGML_Q3_K, &q2, &err), SP_ERR_UNSUPPORTED);
    assert_null(q2);
    free(la);
    free(lb);
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_model_free(q);
    sp_model_free(m);
    unlink(p);
}

static void test_forward_errors(void **state) {
    (void)state;
    sp_model *m = load(sp_shared("models/stories260K.gguf"), NULL);
    sp_ctx *c = mkctx(m, 8, 1);
    float *l = malloc(512 * sizeof(float) * 16);
    sp_error err = {0};
    int32_t bad = 512, toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    sp_batch b = {.tokens = &bad, .n = 1};
    assert_int_equal(sp_forward(c, &b, l, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "token id 512"));
    b = (sp_batch){.tokens = toks, .n = 9};
    assert_int_equal(sp_forward(c, &b, l, &err), SP_ERR_RANGE);
    b.n = 0;
    assert_int_equal(sp_forward(c, &b, l, &err), SP_ERR_ARG);
    assert_int_equal(sp_ctx_n_past(c), 0); /* failed calls change nothing */
    b.n = 8;
    assert_int_equal(sp_forward(c, &b, l, &err), SP_OK);
    b.n = 1;
    assert_int_equal(sp_forward(c, &b, l, &err), SP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "context"));
    assert_int_equal(sp_ctx_truncate(c, 9, &err), SP_ERR_ARG);
    free(l);
    sp_ctx_free(c);
    sp_model_free(m);
}

static char *write_tmp(const char *tag, const void *data, size_t n) {
    static char path[4][512];
    static int slot;
    char *p = path[slot++ & 3];
    snprintf(p, sizeof path[0], "%s/specula_bad_%s_%d", sp_tmpdir(), tag, (int)getpid());
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    return p;
}

static void expect_load_error(const char *path, sp_status want, const char *needle) {
    sp_error err = {0};
    sp_model *m = NULL;
    sp_status st = sp_model_load(path, NULL, &m, &err);
    if (st == SP_OK) fail_msg("%s loaded but should not", path);
    assert_null(m);
    if (want != SP_OK && st != want) fail_msg("%s: status %d (%s), want %d", path, st, err.msg, want);
    assert_true(strlen(err.msg) > 0 && !strchr(err.msg, '\n'));
    if (needle && !strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_bad_model_files(void **state) {
    (void)state;
    expect_load_error("/nonexistent/model.gguf", SP_ERR_IO, "cannot open");
    { /* a tokenizer for a GGUF model (which has its own) is refused, not ignored */
        sp_error err = {0};
        sp_model *m = NULL;
        sp_model_params mp = sp_model_default_params();
        mp.tokenizer_path = sp_shared("models/tok512.bin");
        assert_int_equal(sp_model_load(sp_shared("models/stories260K.gguf"), &mp, &m, &err), SP_ERR_ARG);
        assert_null(m);
        assert_non_null(strstr(err.msg, "tokenizer_path"));
    }
    char *p = write_tmp("empty", "", 0);
    expect_load_error(p, SP_ERR_FORMAT, NULL);
    p = write_tmp("text", "hello, this is not a model file at all........", 47);
    expect_load_error(p, SP_ERR_FORMAT, NULL);
    unlink(p);

    /* the llama2.c checkpoint truncated at many lengths */
    FILE *f = fopen(sp_shared("models/stories260K.bin"), "rb");
    assert_non_null(f);
    size_t n = 1056540;
    uint8_t *buf = malloc(n);
    assert_int_equal(fread(buf, 1, n, f), n);
    fclose(f);
    const size_t cuts[] = {0, 3, 27, 28, 100, 4096, 500000, n - 4 * 64 * 8 - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        p = write_tmp("trunc", buf, cuts[i]);
        expect_load_error(p, SP_ERR_FORMAT, NULL);
    }
    /* absurd header values */
    int32_t *h = (int32_t *)buf;
    h[3] = 7; /* 64 % 7 != 0 */
    p = write_tmp("heads", buf, n);
    expect_load_error(p, SP_ERR_FORMAT, "divide");
    h[3] = 8;
    h[0] = -64;
    p = write_tmp("dim", buf, n);
    expect_load_error(p, SP_ERR_FORMAT, NULL);
    unlink(p);
    free(buf);

    /* GGUF with an unsupported architecture / tensor type / missing tensor */
    sp_error err = {0};
    for (int variant = 0; variant < 3; variant++) {
        sp_gguf_writer *w = sp_gguf_writer_init();
        sp_gguf_writer_set_str(w, "general.architecture", variant == 0 ? "mamba" : "llama");
        sp_gguf_writer_set_u32(w, "llama.embedding_length", 32);
        sp_gguf_writer_set_u32(w, "llama.block_count", 1);
        sp_gguf_writer_set_u32(w, "llama.attention.head_count", 2);
        sp_gguf_writer_set_u32(w, "llama.feed_forward_length", 64);
        sp_gguf_writer_set_u32(w, "llama.context_length", 64);
        sp_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
        int64_t ne_e[2] = {32, 16};
        static uint8_t zeros[16 * 32 * 4];
        sp_gguf_writer_add_tensor(w, "token_embd.weight", SP_GGML_F32, 2, ne_e, zeros, false, &err);
        if (variant == 1) {
            int64_t ne_k[2] = {256, 2};
            static uint8_t kq[2 * 144];
            sp_gguf_writer_add_tensor(w, "output_norm.weight", SP_GGML_Q4_K, 1, ne_k, kq, false, &err);
        }
        char path[512];
        snprintf(path, sizeof path, "%s/specula_bad_arch_%d.gguf", sp_tmpdir(), (int)getpid());
        assert_int_equal(sp_gguf_writer_write(w, path, &err), SP_OK);
        sp_gguf_writer_free(w);
        if (variant == 0) expect_load_error(path, SP_ERR_UNSUPPORTED, "mamba");
        if (variant == 1) expect_load_error(path, SP_ERR_FORMAT, "output_norm");
        if (variant == 2) expect_load_error(path, SP_ERR_FORMAT, "missing");
        unlink(path);
    }
}

/* Random byte mutations of stories260K.gguf's metadata and tensor table
 * (fixed seed): loading must either fail with a message or give a model
 * whose tokenizer and forward pass run; never a crash (run under ASan). */
static void test_fuzz_model_load(void **state) {
    (void)state;
    const char *src = sp_shared("models/stories260K.gguf");
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    static uint8_t orig[1 << 21];
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    sp_gguf *g = NULL;
    sp_error err = {0};
    assert_int_equal(sp_gguf_open(src, &g, &err), SP_OK);
    uint64_t hdr = sp_gguf_data_offset(g);
    sp_gguf_close(g);
    char path[512];
    snprintf(path, sizeof path, "%s/specula_fuzz_model_%d.gguf", sp_tmpdir(), (int)getpid());
    f = fopen(path, "wb");
    assert_int_equal(fwrite(orig, 1, n, f), n);
    fclose(f);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    sp_rng r;
    sp_rng_seed(&r, 777);
    int loaded = 0, failed = 0;
    const int iters = 2000;
    for (int it = 0; it < iters; it++) {
        uint64_t pos[3];
        int k = 1 + (int)sp_rng_below(&r, 3);
        for (int j = 0; j < k; j++) {
            pos[j] = sp_rng_below(&r, hdr);
            uint8_t v = (uint8_t)sp_rng_below(&r, 256);
            if (sp_rng_below(&r, 2)) v = orig[pos[j]] ^ (uint8_t)(1u << sp_rng_below(&r, 8));
            assert_int_equal(pwrite(fd, &v, 1, (off_t)pos[j]), 1);
        }
        sp_model *m = NULL;
        err.msg[0] = 0;
        if (sp_model_load(path, NULL, &m, &err) == SP_OK) {
            loaded++;
            const sp_model_config *c = sp_model_cfg(m);
            sp_ctx *ctx = NULL;
            sp_ctx_params cp = sp_ctx_default_params();
            cp.n_ctx = 16;
            if (sp_ctx_init(m, &cp, &ctx, &err) == SP_OK) {
                int32_t toks[2] = {1, c->n_vocab > 5 ? 5 : 0};
                float *l = malloc((size_t)c->n_vocab * sizeof(float));
                sp_batch b = {.tokens = toks, .n = 2};
                (void)sp_forward(ctx, &b, l, &err);
                free(l);
                sp_ctx_free(ctx);
            }
            int32_t ids[64], nid = 0;
            (void)sp_tokenizer_encode(sp_model_tokenizer(m), "Once upon a time", 16, true, ids, 64,
                                      &nid, &err);
            sp_model_free(m);
        } else {
            failed++;
            assert_true(strlen(err.msg) > 0);
            assert_null(m);
        }
        for (int j = 0; j < k; j++) assert_int_equal(pwrite(fd, &orig[pos[j]], 1, (off_t)pos[j]), 1);
    }
    close(fd);
    unlink(path);
    assert_true(loaded > 0 && failed > 0); /* both outcomes were exercised */
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reference_gguf),
    cmocka_unit_test(test_reference_llama2c),
    cmocka_unit_test(test_gguf_equals_llama2c),
    cmocka_unit_test(test_batch_equals_sequential),
    cmocka_unit_test(test_threads_invariant),
    cmocka_unit_test(test_tree_mask_and_keep),
    cmocka_unit_test(test_tree_levels_from_past),
    cmocka_unit_test(test_rope_scaling),
    cmocka_unit_test(test_batch_equals_sequential_kquants),
    cmocka_unit_test(test_tied_embeddings_packed),
    cmocka_unit_test(test_batch_equals_sequential_mixes),
    cmocka_unit_test(test_requantize),
    cmocka_unit_test(test_generation_stops_at_eot),
    cmocka_unit_test(test_forward_errors),
    cmocka_unit_test(test_bad_model_files),
    cmocka_unit_test(test_fuzz_model_load),
};
SP_TEST_MAIN(tests)
