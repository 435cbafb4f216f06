/* Hybrid recurrent models (qwen35: Gated DeltaNet layers beside gated
 * attention; ../shared/reference/arch2026/models/qwen35-dense-f16.gguf,
 * whose logits test_arch2026 checks against llama.cpp's): the recurrent
 * state under everything speculation does to a context, each against plain
 * token-by-token decoding, bit for bit:
 *  - a batch gives the logits of the same tokens fed one at a time, with
 *    several sequences in one sp_forward_multi too;
 *  - accepting j of k draft tokens (sp_ctx_truncate into the last batch)
 *    leaves the state of j + 1 plain steps, for every j;
 *  - a tree batch gives each node the logits of its own path, and keeping a
 *    path (sp_ctx_keep) leaves that path's state; also for a tree grown
 *    level by level over several forwards, as the drafters grow theirs;
 *  - a draft context's rollback over its last single-token forwards;
 *  - rollbacks the state cannot serve are refused with one line and leave
 *    the context as it was;
 *  - greedy speculative decoding on the hybrid target equals plain greedy
 *    decoding with n-gram, n-gram cache, suffix, low-bit self-draft,
 *    layer-skip and separate-model drafts, chains and trees. */
#include "testutil.h"

#include <math.h>

#include "deltanet.h"
#include "ops.h"
#include "clock.h"
#include "specula.h"
#include "spec_testutil.h"

#define V 128 /* the reference file's vocabulary */

static sp_model *hybrid(void) {
    return load(sp_shared("reference/arch2026/models/qwen35-dense-f16.gguf"));
}

static sp_ctx *mkctx(const sp_model *m, int32_t max_batch) {
    sp_error err = {0};
    sp_ctx *c = NULL;
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = 256;
    p.max_batch = max_batch;
    /* an F32 cache, as the llama.cpp references' (hybrid_ref.txt) */
    p.type_k = p.type_v = SP_GGML_F32;
    if (sp_ctx_init(m, &p, &c, &err)) fail_msg("ctx: %s", err.msg);
    return c;
}

/* Deterministic ids in [0, V). */
static void ids(int32_t *out, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        out[i] = (int32_t)((seed >> 8) % V);
    }
}

static void fwd(sp_ctx *c, const int32_t *tok, int n, bool all, float *logits) {
    sp_error err = {0};
    sp_batch b = {.tokens = tok, .n = n, .logits_all = all};
    if (sp_forward(c, &b, logits, &err)) fail_msg("forward: %s", err.msg);
}

static void same_rows(const float *a, const float *b, int rows, const char *what) {
    for (int r = 0; r < rows; r++)
        if (memcmp(a + (int64_t)r * V, b + (int64_t)r * V, V * sizeof(float)))
            fail_msg("%s: row %d differs", what, r);
}

/* The cache holds the attention layers only: the recurrent layers have no
 * K/V rows (the reference file's attention.recurrent_layers: layer 0
 * recurrent, layer 1 attention). */
static void test_cache_attention_layers_only(void **state) {
    (void)state;
    sp_model *m = hybrid();
    sp_ctx *c = mkctx(m, 4);
    const sp_model_config *cfg = sp_model_cfg(m);
    const uint64_t row = (uint64_t)cfg->n_kv_heads * (uint64_t)cfg->head_dim * sizeof(float); /* F32 */
    const uint64_t n_att = 1;
    printf("hybrid cache: %d layers, %llu with K/V rows, %llu bytes for %d tokens\n", cfg->n_layers,
           (unsigned long long)n_att, (unsigned long long)sp_ctx_kv_bytes(c), sp_ctx_n_ctx(c));
    assert_int_equal(cfg->n_layers, 2);
    assert_true(sp_ctx_kv_bytes(c) == n_att * 2 * row * (uint64_t)sp_ctx_n_ctx(c));
    sp_ctx_free(c);
    sp_model_free(m);
}

static void test_batch_equals_steps(void **state) {
    (void)state;
    sp_model *m = hybrid();
    sp_ctx *a = mkctx(m, 64), *b = mkctx(m, 64);
    int32_t t[40];
    ids(t, 40, 7);
    float *la = malloc(40 * V * sizeof(float)), *lb = malloc(40 * V * sizeof(float));
    fwd(a, t, 40, true, la);
    for (int i = 0; i < 40; i++) fwd(b, t + i, 1, false, lb + (int64_t)i * V);
    same_rows(la, lb, 40, "one batch against single tokens");
    /* uneven chunks */
    sp_error err = {0};
    assert_int_equal(sp_ctx_truncate(a, 0, &err), SP_OK);
    fwd(a, t, 3, true, la);
    fwd(a, t + 3, 17, true, la + 3 * V);
    fwd(a, t + 20, 20, true, la + 20 * V);
    same_rows(la, lb, 40, "chunks against single tokens");
    /* two sequences in one pass: each its own state */
    sp_ctx *c = mkctx(m, 64);
    assert_int_equal(sp_ctx_truncate(a, 0, &err), SP_OK);
    assert_int_equal(sp_ctx_truncate(b, 0, &err), SP_OK);
    int32_t u[12];
    ids(u, 12, 99);
    fwd(b, t, 12, false, lb);
    sp_ctx *ctxs[2] = {a, c};
    sp_batch bs[2] = {{.tokens = t, .n = 12, .logits_all = true}, {.tokens = u, .n = 5, .logits_all = true}};
    assert_int_equal(sp_forward_multi(ctxs, bs, 2, la, &err), SP_OK);
    sp_ctx *d = mkctx(m, 64);
    fwd(d, u, 5, true, lb);
    same_rows(la + 12 * V, lb, 5, "second sequence of a shared pass");
    fwd(b, t + 12, 1, false, lb); /* b: t[0..12] */
    fwd(a, t + 12, 1, false, la);
    same_rows(la, lb, 1, "first sequence after a shared pass");
    free(la);
    free(lb);
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_ctx_free(c);
    sp_ctx_free(d);
    sp_model_free(m);
}

/* The worst row of n: max |a - b| / max(1, max |b|). */
static double rel_diff(const float *a, const float *b, int n, int v) {
    double worst = 0;
    for (int r = 0; r < n; r++) {
        double big = 1, d = 0;
        for (int i = 0; i < v; i++) big = fmax(big, fabs(b[(int64_t)r * v + i]));
        for (int i = 0; i < v; i++) d = fmax(d, fabs((double)a[(int64_t)r * v + i] - b[(int64_t)r * v + i]));
        worst = fmax(worst, d / big);
    }
    return worst;
}

/* A prefill of 150 tokens runs the recurrence in chunks (64, 64, 22):
 * within 1e-5 of the token-by-token recurrence (the threshold raised so
 * the same batch steps token by token: same matmuls), on a qwen3next file
 * of 4 value heads over 2 key heads, and the state it leaves continues the
 * same way; truncating into the prefill (to 100) replays the logged tokens
 * step by step, within the same 1e-5 of single-token forwards (the cache
 * rows of the attention layers are the chunked prefill's).
 * Prints the forward's time both ways (side by side; under load, a
 * ratio, not a benchmark). */
static void test_chunked_prefill(void **state) {
    (void)state;
    sp_mkmodel_params mp = sp_mkmodel_default_params();
    mp.arch = "qwen3next";
    mp.dim = 512, mp.n_layers = 4, mp.n_heads = 4, mp.n_kv_heads = 2, mp.ffn_dim = 128, mp.n_vocab = 64;
    mp.n_expert = 4, mp.n_expert_used = 2, mp.seed = 11, mp.type = SP_GGML_F32;
    char path[512];
    snprintf(path, sizeof path, "%s/hybrid_chunk.gguf", sp_tmpdir());
    sp_error err = {0};
    if (sp_mkmodel(&mp, path, &err)) fail_msg("mkmodel: %s", err.msg);
    sp_model *m = load(path);
    enum { N = 150, VM = 64 };
    int32_t t[N + 1];
    for (int i = 0; i <= N; i++) t[i] = (i * 37 + 11) % VM;
    float *chunked = malloc((size_t)(N + 1) * VM * sizeof(float)), *steps = malloc((size_t)(N + 1) * VM * sizeof(float));
    sp_ctx *a = mkctx(m, 256), *b = mkctx(m, 256);
    sp_error e2 = {0};
    double tc = 1e9, ts = 1e9;
    const int32_t old = sp_deltanet_chunk_min(0);
    for (int rep = 0; rep < 3; rep++) { /* alternating, the best of 3 each */
        if (rep && (sp_ctx_truncate(a, 0, &e2) || sp_ctx_truncate(b, 0, &e2))) fail_msg("%s", e2.msg);
        double t0 = sp_now();
        fwd(a, t, N, true, chunked);
        tc = fmin(tc, sp_now() - t0);
        sp_deltanet_chunk_min(1 << 20);
        t0 = sp_now();
        fwd(b, t, N, true, steps);
        ts = fmin(ts, sp_now() - t0);
        sp_deltanet_chunk_min(old);
    }
    /* truncating into the chunked prefill: the replayed state of 100 steps */
    sp_ctx *c = mkctx(m, 256);
    float *x = malloc(2 * VM * sizeof(float)), *y = malloc(2 * VM * sizeof(float));
    sp_ctx *a2 = mkctx(m, 256);
    fwd(a2, t, N, false, x);
    assert_int_equal(sp_ctx_truncate(a2, 100, &err), SP_OK);
    fwd(a2, t + 100, 1, false, x);
    for (int i = 0; i <= 100; i++) fwd(c, t + i, 1, false, y);
    const double dt = rel_diff(x, y, 1, VM);
    sp_ctx_free(a2);
    fwd(a, t + N, 1, false, chunked + (int64_t)N * VM);
    fwd(b, t + N, 1, false, steps + (int64_t)N * VM);
    const double d = rel_diff(chunked, steps, N + 1, VM);
    printf("hybrid chunked prefill of %d tokens: max rel|diff| %.2e against token steps (%.2e truncated to 100); "
           "forward %.2f ms chunked, %.2f ms token by token (%.2fx, under load)\n", N, d, dt, tc * 1e3, ts * 1e3,
           ts / tc);
    assert_true(d <= 1e-5 && dt <= 1e-5);
    free(x);
    free(y);
    free(chunked);
    free(steps);
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_ctx_free(c);
    sp_model_free(m);
    unlink(path);
}

/* The recurrence's AVX2 build (deltanet.c's run_head) against its scalar
 * twin, bit for bit: a 100-token prefill (chunked), a verification chain of
 * 5 (token steps), the rollback to 2 of them (replaying the logged deltas)
 * and a tree of 2x2 kept along one path, on an F32 qwen3next file (whose
 * matmuls give the same bits under every ISA). */
static void test_isa_equal(void **state) {
    (void)state;
    sp_mkmodel_params mp = sp_mkmodel_default_params();
    mp.arch = "qwen3next";
    mp.dim = 512, mp.n_layers = 4, mp.n_heads = 4, mp.n_kv_heads = 2, mp.ffn_dim = 128, mp.n_vocab = 64;
    mp.n_expert = 4, mp.n_expert_used = 2, mp.seed = 12, mp.type = SP_GGML_F32;
    char path[512];
    snprintf(path, sizeof path, "%s/hybrid_isa.gguf", sp_tmpdir());
    sp_error err = {0};
    if (sp_mkmodel(&mp, path, &err)) fail_msg("mkmodel: %s", err.msg);
    enum { VM = 64, N = 100 };
    int32_t t[N + 8];
    for (int i = 0; i < N + 8; i++) t[i] = (i * 29 + 3) % VM;
    const sp_isa best = sp_ops_isa();
    float *lg[2];
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(sp_ops_set_isa(pass ? SP_ISA_SCALAR : best, &err), SP_OK);
        sp_model *m = load(path); /* packed for the kernels in use */
        float *o = lg[pass] = malloc((size_t)(N + 10) * VM * sizeof(float));
        sp_ctx *c = mkctx(m, 128);
        fwd(c, t, N, true, o);
        fwd(c, t + N, 5, true, o + (int64_t)N * VM);
        assert_int_equal(sp_ctx_truncate(c, N + 2, &err), SP_OK);
        fwd(c, t + N + 2, 1, false, o + (int64_t)(N + 5) * VM);
        /* a 2x2 tree after it, keeping its second path */
        const uint8_t mask[4 * 4] = {1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1};
        sp_batch tb = {.tokens = t + N + 3, .n = 4, .logits_all = true, .mask = mask};
        if (sp_forward(c, &tb, o + (int64_t)(N + 6) * VM, &err)) fail_msg("tree: %s", err.msg);
        const int32_t keep[2] = {0, 2};
        assert_int_equal(sp_ctx_keep(c, N + 3, keep, 2, &err), SP_OK);
        fwd(c, t + N + 7, 1, false, o + (int64_t)(N + 9) * VM);
        sp_ctx_free(c);
        sp_model_free(m);
    }
    assert_int_equal(sp_ops_set_isa(best, &err), SP_OK);
    for (int r = 0; r < N + 10; r++)
        if (memcmp(lg[0] + (int64_t)r * VM, lg[1] + (int64_t)r * VM, VM * sizeof(float)))
            fail_msg("row %d differs between the %s and scalar recurrence", r, sp_ops_isa_name(best));
    printf("hybrid recurrence: the %s build equal to the scalar one over %d rows\n", sp_ops_isa_name(best), N + 10);
    free(lg[0]);
    free(lg[1]);
    unlink(path);
}

/* A verification batch of the last token and k drafts, j accepted: the
 * context then continues as if it had decoded j + 1 tokens plainly. */
static void test_truncate_after_batch(void **state) {
    (void)state;
    sp_model *m = hybrid();
    sp_ctx *a = mkctx(m, 64), *b = mkctx(m, 64);
    int32_t t[24];
    ids(t, 24, 3);
    float la[8 * V], lb[8 * V];
    sp_error err = {0};
    const int P = 10, K = 6;
    for (int j = 0; j <= K; j++) {
        assert_int_equal(sp_ctx_truncate(a, 0, &err), SP_OK);
        assert_int_equal(sp_ctx_truncate(b, 0, &err), SP_OK);
        fwd(a, t, P, false, la);
        fwd(a, t + P, K + 1, true, la);
        assert_int_equal(sp_ctx_truncate(a, P + j + 1, &err), SP_OK);
        assert_int_equal(sp_ctx_n_past(a), P + j + 1);
        fwd(a, t + 20, 2, true, la);
        fwd(b, t, P, false, lb);
        for (int i = 0; i <= j; i++) fwd(b, t + P + i, 1, false, lb);
        fwd(b, t + 20, 2, true, lb);
        same_rows(la, lb, 2, "after a truncated batch");
        /* and again from there: rolling back within the last batch twice */
        assert_int_equal(sp_ctx_truncate(a, P + j + 1, &err), SP_OK);
        fwd(a, t + 21, 1, false, la);
        assert_int_equal(sp_ctx_truncate(b, P + j + 1, &err), SP_OK);
        fwd(b, t + 21, 1, false, lb);
        same_rows(la, lb, 1, "after a second truncation");
    }
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_model_free(m);
}

/* Tail token 0, nodes 1..7 under it: parents as below. */
static const int32_t PARENT[8] = {-1, 0, 0, 1, 1, 2, 3, 6};

static void test_tree_paths(void **state) {
    (void)state;
    sp_model *m = hybrid();
    sp_ctx *a = mkctx(m, 64), *b = mkctx(m, 64);
    int32_t t[20], pos[8];
    ids(t, 20, 11);
    const int P = 6, N = 8;
    uint8_t mask[8 * 8] = {0};
    int depth[8];
    for (int i = 0; i < N; i++) {
        depth[i] = PARENT[i] < 0 ? 0 : depth[PARENT[i]] + 1;
        pos[i] = P + depth[i];
        for (int a2 = i; a2 >= 0; a2 = PARENT[a2]) mask[i * N + a2] = 1;
    }
    float la[8 * V], lb[8 * V];
    sp_error err = {0};
    fwd(a, t, P, false, la);
    sp_batch tb = {.tokens = t + P, .pos = pos, .n = N, .mask = mask, .logits_all = true};
    assert_int_equal(sp_forward(a, &tb, la, &err), SP_OK);
    /* every node's logits are those of its path decoded plainly */
    for (int i = 0; i < N; i++) {
        int32_t path[8], len = 0;
        for (int a2 = i; a2 >= 0; a2 = PARENT[a2]) path[len++] = a2;
        assert_int_equal(sp_ctx_truncate(b, 0, &err), SP_OK);
        fwd(b, t, P, false, lb);
        for (int k = len - 1; k >= 0; k--) fwd(b, t + P + path[k], 1, false, lb);
        same_rows(la + (int64_t)i * V, lb, 1, "tree node");
    }
    /* keep the path 0-2-5 (batch tokens 0, 2, 5): then continue */
    const int32_t idx[2] = {1, 4}; /* relative to start = P + 1 */
    assert_int_equal(sp_ctx_keep(a, P + 1, idx, 2, &err), SP_OK);
    assert_int_equal(sp_ctx_n_past(a), P + 3);
    fwd(a, t + 18, 2, true, la);
    assert_int_equal(sp_ctx_truncate(b, 0, &err), SP_OK);
    fwd(b, t, P, false, lb);
    const int32_t plain[3] = {t[P], t[P + 2], t[P + 5]};
    fwd(b, plain, 3, false, lb);
    fwd(b, t + 18, 2, true, lb);
    same_rows(la, lb, 2, "after keeping a tree path");
    /* a set of nodes that is not a path is refused, the context unchanged */
    assert_int_equal(sp_ctx_truncate(a, P, &err), SP_OK);
    assert_int_equal(sp_forward(a, &tb, la, &err), SP_OK);
    const int32_t bad[2] = {1, 2}; /* nodes 2 and 3: siblings' children */
    assert_int_equal(sp_ctx_keep(a, P + 1, bad, 2, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "not a child"));
    assert_int_equal(sp_ctx_n_past(a), P + N);
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_model_free(m);
}

/* A draft tree grown level by level (each level one forward whose mask
 * reaches into the earlier levels, as the drafters do): each node gets its
 * path's logits, and keeping a path leaves its state. */
static void test_tree_levels(void **state) {
    (void)state;
    sp_model *m = hybrid();
    sp_ctx *a = mkctx(m, 16), *b = mkctx(m, 16);
    int32_t t[20];
    ids(t, 20, 23);
    const int P = 5;
    float la[4 * V], lb[V];
    sp_error err = {0};
    fwd(a, t, P, false, la);
    /* level 1: A = t[5], B = t[6], both children of the last prefix token */
    int32_t pos1[2] = {P, P};
    uint8_t m1[4] = {1, 0, 0, 1};
    sp_batch l1 = {.tokens = t + P, .pos = pos1, .n = 2, .mask = m1, .mask_from_past = true, .mask_base = P,
                   .logits_all = true};
    assert_int_equal(sp_forward(a, &l1, la, &err), SP_OK);
    /* level 2: C = t[7] under A (slot P), D = t[8] under B (slot P + 1) */
    int32_t pos2[2] = {P + 1, P + 1};
    uint8_t m2[8] = {1, 0, 1, 0, 0, 1, 0, 1};
    sp_batch l2 = {.tokens = t + P + 2, .pos = pos2, .n = 2, .mask = m2, .mask_from_past = true, .mask_base = P,
                   .logits_all = true};
    assert_int_equal(sp_forward(a, &l2, la + 2 * V, &err), SP_OK);
    static const int PATHS[4][2] = {{5, -1}, {6, -1}, {5, 7}, {6, 8}};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sp_ctx_truncate(b, 0, &err), SP_OK);
        fwd(b, t, P, false, lb);
        for (int k = 0; k < 2 && PATHS[i][k] >= 0; k++) fwd(b, t + PATHS[i][k], 1, false, lb);
        same_rows(la + (int64_t)i * V, lb, 1, "node of a tree grown by levels");
    }
    /* keep B, D: then continue */
    const int32_t idx[2] = {1, 3};
    assert_int_equal(sp_ctx_keep(a, P, idx, 2, &err), SP_OK);
    fwd(a, t + 15, 1, false, la);
    assert_int_equal(sp_ctx_truncate(b, 0, &err), SP_OK);
    fwd(b, t, P, false, lb);
    const int32_t path[3] = {t[6], t[8], t[15]};
    fwd(b, path, 3, false, lb);
    same_rows(la, lb, 1, "after keeping a path of a tree grown by levels");
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_model_free(m);
}

/* A draft context: single-token forwards rolled back to an earlier one. */
static void test_draft_rollback(void **state) {
    (void)state;
    sp_model *m = hybrid();
    sp_ctx *a = mkctx(m, 16), *b = mkctx(m, 16);
    int32_t t[30];
    ids(t, 30, 5);
    float la[V], lb[V];
    sp_error err = {0};
    fwd(a, t, 8, false, la);
    for (int i = 0; i < 7; i++) fwd(a, t + 8 + i, 1, false, la);
    assert_int_equal(sp_ctx_truncate(a, 10, &err), SP_OK);
    fwd(a, t + 25, 1, false, la);
    fwd(b, t, 10, false, lb);
    fwd(b, t + 25, 1, false, lb);
    same_rows(la, lb, 1, "draft rollback over single-token forwards");
    /* further back than the snapshots reach: refused, nothing changed */
    assert_int_equal(sp_ctx_truncate(a, 0, &err), SP_OK);
    fwd(a, t, 4, false, la);
    for (int i = 0; i < 12; i++) fwd(a, t + 4 + i, 1, false, la);
    assert_int_equal(sp_ctx_truncate(a, 2, &err), SP_ERR_UNSUPPORTED);
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(sp_ctx_n_past(a), 16);
    assert_int_equal(sp_ctx_truncate(a, 5, &err), SP_ERR_UNSUPPORTED);
    fwd(a, t + 16, 1, false, la);
    assert_int_equal(sp_ctx_truncate(b, 0, &err), SP_OK);
    fwd(b, t, 9, false, lb);
    fwd(b, t + 9, 8, false, lb);
    same_rows(la, lb, 1, "after a refused rollback");
    /* a tree continued from tokens before the last forward: refused */
    uint8_t mask[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int32_t pos = 17;
    sp_batch tb = {.tokens = t, .pos = &pos, .n = 1, .mask = mask, .mask_from_past = true, .mask_base = 10};
    assert_int_equal(sp_forward(a, &tb, la, &err), SP_ERR_UNSUPPORTED);
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(sp_ctx_n_past(a), 17);
    sp_ctx_free(a);
    sp_ctx_free(b);
    sp_model_free(m);
}

/* llama.cpp's logits for qwen35, qwen35moe and qwen3next files from
 * mkmodel (tests/vectors/hybrid_ref.txt, scripts/gen_hybrid_vectors.sh):
 * Q8_0 and F32 weights, fewer key heads than value heads (key head h % n_k;
 * qwen3next h / (n_v / n_k)), a quarter of each head rotated (IMRoPE
 * sections whose last pair falls outside the text sections; qwen3next
 * NeoX), 8 experts of which 2 used plus the shared expert. Every row within
 * 1e-4 of llama.cpp's (relative to the row's largest, absolute below 1) and
 * 16 greedy ids equal. (Quantised activations turn last-bit differences
 * into whole quantisation steps, which the recurrence carries on: with the
 * AVX2 kernels, whose sums are ggml's, every logit of these files is
 * llama.cpp's as printed; the scalar and AVX-512 kernels, bit-identical to
 * each other, sum blocks in another order, and some d512 Q8_0 files then
 * differ by up to 1.5e-2 (SPECULA_GGML_ORDER=1 gives llama.cpp's logits
 * under every ISA), so the Q8_0 cases are ones within 1e-4 under all.) */
static void test_mkmodel_reference(void **state) {
    (void)state;
    FILE *f = fopen("tests/vectors/hybrid_ref.txt", "r");
    if (!f) fail_msg("missing tests/vectors/hybrid_ref.txt");
    char line[1 << 16];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        char name[16], type[16], arch[16];
        int dim, layers, heads, kv, ffn, vocab, seed, experts, used;
        if (sscanf(line, "case %15s %d %d %d %d %d %d %15s %d %15s %d %d", name, &dim, &layers, &heads, &kv, &ffn,
                   &vocab, type, &seed, arch, &experts, &used) != 12)
            continue;
        sp_mkmodel_params mp = sp_mkmodel_default_params();
        mp.arch = arch;
        mp.n_expert = experts, mp.n_expert_used = used;
        mp.dim = dim, mp.n_layers = layers, mp.n_heads = heads, mp.n_kv_heads = kv, mp.ffn_dim = ffn;
        mp.n_vocab = vocab, mp.seed = (uint64_t)seed;
        mp.type = !strcmp(type, "q8_0") ? SP_GGML_Q8_0 : SP_GGML_F32;
        char path[512];
        snprintf(path, sizeof path, "%s/hybrid_ref_%s.gguf", sp_tmpdir(), name);
        sp_error err = {0};
        if (sp_mkmodel(&mp, path, &err)) fail_msg("mkmodel: %s", err.msg);
        sp_model *m = load(path);
        const int Vm = sp_model_cfg(m)->n_vocab;
        int32_t id[256];
        int n = 0;
        if (!fgets(line, sizeof line, f) || strncmp(line, "ids ", 4)) fail_msg("%s: no ids line", name);
        for (char *p = line + 4, *e; n < 256; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p) break;
            id[n++] = (int32_t)v;
        }
        float *want = malloc((size_t)n * Vm * sizeof(float)), *got = malloc((size_t)n * Vm * sizeof(float));
        for (int t = 0; t < n; t++) {
            if (!fgets(line, sizeof line, f)) fail_msg("%s: short logits", name);
            char *p = line;
            for (int i = 0; i < Vm; i++) want[t * Vm + i] = strtof(p, &p);
        }
        sp_ctx *c = mkctx(m, 256);
        sp_batch b = {.tokens = id, .n = n, .logits_all = true};
        if (sp_forward(c, &b, got, &err)) fail_msg("%s: %s", name, err.msg);
        double worst = 0;
        for (int t = 0; t < n; t++) {
            double big = 1, d = 0;
            for (int i = 0; i < Vm; i++) big = fmax(big, fabs(want[t * Vm + i]));
            for (int i = 0; i < Vm; i++) d = fmax(d, fabs((double)got[t * Vm + i] - want[t * Vm + i]));
            worst = fmax(worst, d / big);
        }
        /* greedy: one forward per token after the ids */
        if (!fgets(line, sizeof line, f) || strncmp(line, "greedy ", 7)) fail_msg("%s: no greedy line", name);
        int steps = 0;
        float *lg = got + (int64_t)(n - 1) * Vm;
        char *p = line + 7;
        for (; steps < 16; steps++) {
            const long want_id = strtol(p, &p, 10);
            int32_t top = 0;
            for (int32_t j = 1; j < Vm; j++) top = lg[j] > lg[top] ? j : top;
            if (top != want_id) break;
            sp_batch one = {.tokens = &top, .n = 1};
            if (sp_forward(c, &one, got, &err)) fail_msg("%s: %s", name, err.msg);
            lg = got;
        }
        printf("hybrid mkmodel %-4s %-9s %s: max rel|diff| %.2e, greedy %d/16\n", name, arch, type, worst, steps);
        assert_true(worst <= 1e-4);
        assert_int_equal(steps, 16);
        free(want);
        free(got);
        sp_ctx_free(c);
        sp_model_free(m);
        unlink(path);
        cases++;
    }
    fclose(f);
    assert_int_equal(cases, 5);
}

/* ---- speculation ---- */

static int32_t run(sp_ctx *t, const sp_spec_params *sp, const int32_t *prompt, int32_t np, int32_t n,
                   int32_t *out, sp_spec_stats *stats) {
    sp_error err = {0};
    sp_spec *s = NULL;
    if (sp_spec_init(t, sp, &s, &err)) fail_msg("spec init: %s", err.msg);
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = n;
    gp.sampling.temperature = 0;
    gp.stop_at_eog = false;
    sp_gen_stats gs;
    if (sp_spec_generate(s, prompt, np, &gp, out, n, &gs, stats, NULL, NULL, &err))
        fail_msg("spec generate (%s): %s", sp_drafter_name(sp->draft.kind), err.msg);
    sp_spec_free(s);
    assert_int_equal(sp_ctx_truncate(t, 0, &err), SP_OK);
    return gs.n_generated;
}

/* Greedy speculation on the target file rel (of ../shared) against its
 * plain greedy decoding: every config of CFGS, or with few every third. */
static void greedy_on(const char *rel, bool few);

static void test_greedy_speculation(void **state) {
    (void)state;
    greedy_on("reference/arch2026/models/qwen35-dense-f16.gguf", false);
}

/* The same on the mixture-of-experts hybrids (routed and shared experts). */
static void test_greedy_speculation_moe(void **state) {
    (void)state;
    greedy_on("reference/arch2026/models/qwen35moe-moe-f16.gguf", true);
    greedy_on("reference/arch2026/models/qwen3next-moe-f16.gguf", true);
}

static void greedy_on(const char *rel, bool few) {
    sp_model *tm = load(sp_shared(rel));
    const char *dp = tiny_model(0, V, 17, 3.0f);
    sp_model *dm = load(dp);
    sp_ctx *t = mkctx(tm, 64);
    int32_t prompt[12];
    ids(prompt, 6, 1);
    memcpy(prompt + 6, prompt, 6 * sizeof(int32_t)); /* repetition for the n-gram draft */
    enum { N = 48 };
    int32_t ref[N], out[N];
    sp_spec_params plain = sp_spec_default_params();
    assert_int_equal(run(t, &plain, prompt, 12, N, ref, NULL), N);
    static const struct {
        sp_drafter_kind kind;
        sp_verifier ver;
        int32_t gamma;
        const char *tree;
    } CFGS[] = {
        {SP_DRAFT_NGRAM, SP_VERIFIER_BLOCK, 4, NULL},
        {SP_DRAFT_NGRAM, SP_VERIFIER_TOKEN, 6, NULL},
        {SP_DRAFT_LOWBIT, SP_VERIFIER_BLOCK, 5, NULL},
        {SP_DRAFT_LOWBIT, SP_VERIFIER_TOKEN, 8, NULL},
        {SP_DRAFT_LAYERSKIP, SP_VERIFIER_BLOCK, 3, NULL},
        {SP_DRAFT_MODEL, SP_VERIFIER_BLOCK, 4, NULL},
        {SP_DRAFT_MODEL, SP_VERIFIER_MC_NOREP, 0, "3x2x2"},
        {SP_DRAFT_MODEL, SP_VERIFIER_GREEDY, 0, "2x2"},
        {SP_DRAFT_LOWBIT, SP_VERIFIER_NAIVE, 0, "2x2x2x2"},
        {SP_DRAFT_LOWBIT, SP_VERIFIER_MC, 0, "3x2"},
        {SP_DRAFT_LAYERSKIP, SP_VERIFIER_GREEDY, 0, "4x2x1"},
        {SP_DRAFT_LOWBIT, SP_VERIFIER_MC_NOREP, 0, "dyn:3:4:8"},
        {SP_DRAFT_MODEL, SP_VERIFIER_GREEDY, 0, "dyn:2:3:5"},
        {SP_DRAFT_SUFFIX, SP_VERIFIER_BLOCK, 4, NULL},
        {SP_DRAFT_SUFFIX, SP_VERIFIER_GREEDY, 0, "2x2"},
        {SP_DRAFT_NGRAM_CACHE, SP_VERIFIER_TOKEN, 4, NULL},
    };
    for (size_t i = 0; i < sizeof CFGS / sizeof CFGS[0]; i += few ? 3 : 1) {
        sp_spec_params sp = sp_spec_default_params();
        sp.draft.kind = CFGS[i].kind;
        sp.draft.draft_model = dm;
        sp.draft.lowbit_type = SP_GGML_Q4_0;
        sp.verifier = CFGS[i].ver;
        if (CFGS[i].gamma) sp.gamma = CFGS[i].gamma;
        /* layer 0 (recurrent) skipped: the draft context's state keeps it as it was */
        snprintf(sp.draft.skip_layers, sizeof sp.draft.skip_layers, "0");
        if (CFGS[i].tree) {
            sp_error err = {0};
            if (sp_tree_shape_parse(CFGS[i].tree, &sp.tree, &err)) fail_msg("%s", err.msg);
        }
        sp_spec_stats st;
        const int32_t no = run(t, &sp, prompt, 12, N, out, &st);
        int32_t j = 0;
        while (j < no && j < N && out[j] == ref[j]) j++;
        printf("hybrid greedy %-9s %-9s %-8s %-6s accepted %3lld of %3lld drafted, equal to plain for %d/%d tokens\n",
               sp_model_desc(tm), sp_drafter_name(CFGS[i].kind), sp_verifier_name(CFGS[i].ver), CFGS[i].tree ? CFGS[i].tree : "chain",
               (long long)st.accepted, (long long)st.drafted, j, N);
        if (no != N || j != N) fail_msg("config %zu differs from plain greedy at token %d", i, j);
        if (CFGS[i].kind != SP_DRAFT_MODEL) assert_true(st.accepted > 0); /* rollbacks were exercised */
    }
    sp_ctx_free(t);
    sp_model_free(tm);
    sp_model_free(dm);
    unlink(dp);
}

/* Greedy speculation with the MTP drafter (the target's own nextn block;
 * the random files of tests/data/mtp: qwen35 F32, whose block is right
 * about half of the time, qwen35moe F32 and qwen3next F16, whose blocks
 * carry the experts and the shared expert) equals plain greedy decoding:
 * chains under the block, token and greedy verifiers, the adaptive length
 * (plain steps between drafts), arbitration with suffix drafting, trees
 * (grown level by level in the block's cache); each case accepts some
 * drafts and rejects others, so the block's cache and the target's
 * recurrent state are rolled back many times. The file without MTP layers
 * is refused in one line. */
static void greedy_mtp_file(const char *path) {
    sp_model *tm = load(path);
    sp_ctx *t = mkctx(tm, 64);
    int32_t prompt[12];
    ids(prompt, 12, 7);
    enum { N = 64 };
    int32_t ref[N], out[N];
    sp_spec_params plain = sp_spec_default_params();
    assert_int_equal(run(t, &plain, prompt, 12, N, ref, NULL), N);
    static const struct {
        sp_verifier ver;
        int32_t gamma;
        const char *tree;
        bool with_suffix;
    } CFGS[] = {
        {SP_VERIFIER_BLOCK, 4, NULL, false},  {SP_VERIFIER_TOKEN, 3, NULL, false},
        {SP_VERIFIER_GREEDY, 6, NULL, false}, {SP_VERIFIER_BLOCK, 0, NULL, false},
        {SP_VERIFIER_BLOCK, 4, NULL, true},   {SP_VERIFIER_GREEDY, 0, "2x2", false},
        {SP_VERIFIER_MC_NOREP, 0, "3x2x2", false}, {SP_VERIFIER_MC_NOREP, 0, "dyn:3:4:8", false},
        {SP_VERIFIER_GREEDY, 0, "dyn:2:5:6", false},
    };
    for (size_t i = 0; i < sizeof CFGS / sizeof CFGS[0]; i++) {
        sp_spec_params sp = sp_spec_default_params();
        sp.draft.kind = SP_DRAFT_MTP;
        sp.draft.with_suffix = CFGS[i].with_suffix;
        sp.verifier = CFGS[i].ver;
        if (CFGS[i].gamma) sp.gamma = CFGS[i].gamma;
        sp.adaptive = CFGS[i].gamma == 0 && !CFGS[i].tree;
        if (CFGS[i].tree) {
            sp_error err = {0};
            if (sp_tree_shape_parse(CFGS[i].tree, &sp.tree, &err)) fail_msg("%s", err.msg);
        }
        sp_spec_stats st;
        const int32_t no = run(t, &sp, prompt, 12, N, out, &st);
        int32_t j = 0;
        while (j < no && j < N && out[j] == ref[j]) j++;
        printf("hybrid greedy %-9s mtp%-7s %-8s %-6s accepted %3lld of %3lld drafted, equal to plain for %d/%d "
               "tokens\n", sp_model_desc(tm), CFGS[i].with_suffix ? "+suffix" : "", sp_verifier_name(CFGS[i].ver),
               CFGS[i].tree ? CFGS[i].tree : sp.adaptive ? "adapt" : "chain", (long long)st.accepted,
               (long long)st.drafted, j, N);
        if (no != N || j != N) fail_msg("config %zu differs from plain greedy at token %d", i, j);
        /* the adaptive length drafts a few probes only (plain steps between:
         * the block's cache restarts after such gaps) */
        if (!sp.adaptive) assert_true(st.accepted > 0 && st.accepted < st.drafted);
    }
    sp_ctx_free(t);
    sp_model_free(tm);
}

static void test_greedy_mtp(void **state) {
    (void)state;
    greedy_mtp_file("tests/data/mtp/qwen35-mtp-f32.gguf");
    greedy_mtp_file("tests/data/mtp/qwen35moe-mtp-f32.gguf");
    greedy_mtp_file("tests/data/mtp/qwen3next-mtp-f16.gguf");
    /* a target without MTP layers: refused in one line */
    sp_model *nm = hybrid();
    sp_ctx *c = mkctx(nm, 8);
    sp_spec_params sp = sp_spec_default_params();
    sp.draft.kind = SP_DRAFT_MTP;
    sp.gamma = 4;
    sp_error err = {0};
    sp_spec *s = NULL;
    assert_int_equal(sp_spec_init(c, &sp, &s, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "MTP"));
    assert_null(strchr(err.msg, '\n'));
    sp_ctx_free(c);
    sp_model_free(nm);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mkmodel_reference),
    cmocka_unit_test(test_cache_attention_layers_only),
    cmocka_unit_test(test_batch_equals_steps),
    cmocka_unit_test(test_chunked_prefill),
    cmocka_unit_test(test_isa_equal),
    cmocka_unit_test(test_truncate_after_batch),
    cmocka_unit_test(test_tree_paths),
    cmocka_unit_test(test_tree_levels),
    cmocka_unit_test(test_draft_rollback),
    cmocka_unit_test(test_greedy_speculation),
    cmocka_unit_test(test_greedy_speculation_moe),
    cmocka_unit_test(test_greedy_mtp),
};

SP_TEST_MAIN(tests)
