/* The suffix drafter (suffix.h): deterministic proposals on toy texts,
 * the corpus of earlier outputs (FIFO bound, documents never joined), bounded
 * memory of the request trie, the length learned from verification results,
 * bad input, and concurrent use of one corpus. Exactness of speculation with
 * it is in test_spec.c (greedy parity, chi-square). */
#include "testutil.h"

#include <math.h>
#include <pthread.h>

#include "sp_spec.h"
#include "suffix.h"

static sp_suffix *mk(sp_suffix_corpus *c, int32_t req) {
    sp_suffix *s = NULL;
    sp_error e = {0};
    if (sp_suffix_init(c, req, &s, &e)) fail_msg("suffix init: %s", e.msg);
    return s;
}

static int32_t propose(sp_suffix *s, const int32_t *h, int32_t n, int32_t max, int32_t *out) {
    int32_t k = -1;
    sp_error e = {0};
    if (sp_suffix_propose(s, h, n, max, out, &k, &e)) fail_msg("propose: %s", e.msg);
    return k;
}

/* "1 2 3 4 5 1 2 3": the continuation seen after "1 2 3" is "4 5 1 2 3 ..."
 * and, as the text repeats, the chain re-matches through its own proposal.
 * Two drafters fed the same text propose the same tokens. */
static void test_deterministic(void **state) {
    (void)state;
    const int32_t h[] = {1, 2, 3, 4, 5, 1, 2, 3};
    sp_suffix *a = mk(NULL, 0), *b = mk(NULL, 0);
    int32_t oa[16], ob[16];
    int32_t ka = propose(a, h, 8, 7, oa), kb = propose(b, h, 8, 7, ob);
    assert_int_equal(ka, kb);
    assert_memory_equal(oa, ob, sizeof(int32_t) * (size_t)ka);
    /* the first tokens follow the earlier occurrence: 4 5, then 1 2 3 again */
    assert_true(ka >= 2);
    const int32_t want[] = {4, 5, 1, 2, 3, 4, 5};
    assert_memory_equal(oa, want, sizeof(int32_t) * (size_t)ka);
    /* no earlier occurrence of the last token: nothing to propose */
    const int32_t fresh[] = {7, 8, 9};
    assert_int_equal(propose(a, fresh, 3, 8, oa), 0);
    /* max_len 0 only indexes */
    assert_int_equal(propose(b, h, 8, 0, ob), 0);
    /* the most frequent continuation of the longest match wins: after "6"
     * came 7 twice and 8 once ("3 6" never occurred before) */
    sp_suffix *c = mk(NULL, 0);
    const int32_t f[] = {9, 6, 7, 1, 6, 8, 2, 6, 7, 3, 6};
    assert_true(propose(c, f, 11, 1, oa) == 1);
    assert_int_equal(oa[0], 7);
    sp_suffix_free(a);
    sp_suffix_free(b);
    sp_suffix_free(c);
}

/* A finished request's output joins the corpus; a later request that
 * repeats it is drafted from the corpus, shared by two drafters. */
static void test_corpus(void **state) {
    (void)state;
    sp_suffix_corpus *c = NULL;
    assert_int_equal(sp_suffix_corpus_init(0, &c, NULL), SP_OK);
    sp_suffix *a = mk(c, 0), *b = mk(c, 0);
    int32_t out[32];
    int32_t req[40] = {100, 101};
    /* request 1: prompt 100 101, output 10 11 ... 29 */
    assert_int_equal(propose(a, req, 2, 4, out), 0);
    for (int i = 0; i < 20; i++) req[2 + i] = 10 + i;
    propose(a, req, 22, 4, out);
    assert_int_equal(sp_suffix_end_request(a, NULL), SP_OK);
    sp_suffix_stats st = sp_suffix_corpus_stats(c);
    assert_int_equal(st.corpus_tokens, 20); /* the output only */
    assert_int_equal(st.corpus_docs, 1);
    /* request 2 on the other drafter: a different prompt ending in 14 15 16 */
    const int32_t r2[] = {200, 14, 15, 16};
    int32_t k = propose(b, r2, 4, 8, out);
    assert_true(k >= 4);
    for (int i = 0; i < k; i++) assert_int_equal(out[i], 17 + i);
    assert_int_equal(sp_suffix_get_stats(b).from_corpus, 1);
    /* documents are not joined: the end of one output does not continue
     * into the next */
    const int32_t d2[] = {50, 51, 52};
    assert_int_equal(sp_suffix_corpus_add(c, d2, 3, NULL), SP_OK);
    sp_suffix *x = mk(c, 0);
    const int32_t r3[] = {300, 28, 29};
    assert_int_equal(propose(x, r3, 3, 8, out), 0);
    sp_suffix_free(a);
    sp_suffix_free(b);
    sp_suffix_free(x);
    sp_suffix_corpus_free(c);
}

/* Memory stays within the bounds: the corpus drops its oldest outputs, the
 * request trie stops growing at its token bound (and still proposes). */
static void test_bounded(void **state) {
    (void)state;
    sp_suffix_corpus *c = NULL;
    assert_int_equal(sp_suffix_corpus_init(100, &c, NULL), SP_OK);
    int32_t doc[30];
    for (int d = 0; d < 50; d++) {
        for (int i = 0; i < 30; i++) doc[i] = d * 30 + i;
        assert_int_equal(sp_suffix_corpus_add(c, doc, 30, NULL), SP_OK);
        sp_suffix_stats st = sp_suffix_corpus_stats(c);
        assert_true(st.corpus_tokens <= 100);
        assert_true(st.corpus_nodes <= 100 * SP_SUFFIX_DEPTH + 1);
    }
    sp_suffix *s = mk(c, 0);
    int32_t out[8];
    const int32_t newest[] = {9, 49 * 30 + 3};
    assert_true(propose(s, newest, 2, 2, out) >= 1); /* the newest output is kept */
    assert_int_equal(out[0], 49 * 30 + 4);
    const int32_t oldest[] = {9, 3};
    assert_int_equal(propose(s, oldest, 2, 2, out), 0); /* the oldest is gone */
    int64_t bytes0 = sp_suffix_get_stats(s).bytes;
    sp_suffix_free(s);
    /* a request longer than its bound */
    s = mk(c, 64);
    int32_t *h = malloc(sizeof(int32_t) * 1000);
    for (int i = 0; i < 1000; i++) h[i] = i % 7;
    for (int n = 1; n <= 1000; n += 37) propose(s, h, n, 4, out);
    sp_suffix_stats st = sp_suffix_get_stats(s);
    assert_true(st.request_nodes <= 64 * SP_SUFFIX_DEPTH + 1);
    assert_true(st.bytes > 0 && st.bytes <= bytes0);
    free(h);
    sp_suffix_free(s);
    sp_suffix_corpus_free(c);
}

/* Rejections shorten the chain (to nothing), acceptances lengthen it. */
static void test_learned_length(void **state) {
    (void)state;
    sp_suffix *s = mk(NULL, 0);
    int32_t h[64], out[32];
    for (int i = 0; i < 64; i++) h[i] = i % 5; /* period 5: every continuation certain */
    int32_t k0 = propose(s, h, 40, 16, out);
    assert_true(k0 >= 1);
    for (int r = 0; r < 40; r++) {
        propose(s, h, 40, 16, out);
        sp_suffix_feedback(s, 0);
    }
    int32_t k1 = propose(s, h, 40, 16, out);
    assert_true(k1 < k0);
    sp_suffix_feedback(s, k1);
    for (int r = 0; r < 80; r++) {
        int32_t k = propose(s, h, 40, 16, out);
        sp_suffix_feedback(s, k);
    }
    int32_t k2 = propose(s, h, 40, 16, out);
    assert_true(k2 > k0 || k2 == 16);
    sp_suffix_stats st = sp_suffix_get_stats(s);
    assert_true(st.proposals > 0 && st.accepted <= st.proposed);
    assert_true(st.steps >= st.proposals && st.seconds > 0);
    assert_true(st.max_step_seconds >= st.seconds / (double)st.steps);
    sp_suffix_free(s);
}

/* Trees of continuations: on "5 1 2 3 0 6 1 2 4 0 7 1 2 3 0 9 1 2 4 0 10 1
 * 2 3 0 8 1 2" the longest match is "1 2", whose continuations are 3 (3
 * times) and 4 (twice): q = (0.6, 0.4), both scoring >= 0.3 with the prior
 * acceptance 0.8; greedy orders them by count, without replacement both
 * appear once, i.i.d. draws branch[0] of them. */
static void test_tree(void **state) {
    (void)state;
    enum { V = 16, CAP = 16 };
    const int32_t h[] = {5, 1, 2, 3, 0, 6, 1, 2, 4, 0, 7, 1, 2, 3, 0, 9, 1, 2, 4, 0, 10, 1, 2, 3, 0, 8, 1, 2};
    int32_t parent[CAP], token[CAP], depth[CAP];
    float q[CAP * V];
    sp_suffix_tree t = {0, parent, token, depth, q};
    const int32_t branch[] = {3, 1, 1};
    sp_rng rng;
    sp_rng_seed(&rng, 5);
    for (int mode = 0; mode < 3; mode++) {
        sp_suffix *s = mk(NULL, 0);
        sp_error e = {0};
        if (sp_suffix_propose_tree(s, h, 28, branch, 3, CAP, mode == 0, mode == 1, &rng, V, &t, &e))
            fail_msg("tree: %s", e.msg);
        assert_true(t.n_nodes >= 3);
        assert_int_equal(token[0], 2);
        assert_true(fabsf(q[3] - 0.6f) < 1e-6f && fabsf(q[4] - 0.4f) < 1e-6f);
        int n1 = 0, seen3 = 0, seen4 = 0;
        for (int i = 1; i < t.n_nodes; i++) {
            assert_true(parent[i] >= 0 && parent[i] < i);
            assert_int_equal(depth[i], depth[parent[i]] + 1);
            if (parent[i] == 0) {
                n1++;
                seen3 += token[i] == 3;
                seen4 += token[i] == 4;
            }
        }
        if (mode == 0) assert_int_equal(token[1], 3); /* greedy: by count */
        if (mode < 2) {
            assert_int_equal(n1, 2);
            assert_true(seen3 == 1 && seen4 == 1);
        } else {
            assert_int_equal(n1, 3); /* i.i.d.: branch[0] draws */
        }
        /* under 3 comes 0 then 1: a chain */
        for (int i = 1; i < t.n_nodes; i++)
            if (parent[i] > 0 && token[parent[i]] == 3 && depth[i] == 2) assert_int_equal(token[i], 0);
        sp_suffix_feedback(s, 1);
        sp_suffix_free(s);
    }
}

/* llama.cpp's lookup thresholds on the same tries: "3 1 2" was followed by
 * 3 once (size 3: 1 sample and 50% suffice), and so on; a single sighting
 * of a 1-gram is not enough (size 1 needs 2 samples); the corpus (dynamic
 * cache) holds whole requests and uses the strict thresholds. */
static void test_lookup(void **state) {
    (void)state;
    sp_suffix *s = mk(NULL, 0);
    sp_suffix_set_whole_text(s, true);
    int32_t out[8], k = -1;
    sp_error e = {0};
    const int32_t h[] = {1, 2, 3, 1, 2, 3, 1, 2};
    assert_int_equal(sp_suffix_propose_lookup(s, h, 8, 4, 1, 4, out, &k, &e), SP_OK);
    const int32_t want[] = {3, 1, 2, 3};
    assert_int_equal(k, 4);
    assert_memory_equal(out, want, sizeof want);
    const int32_t once[] = {5, 6, 7, 8, 9, 5, 6, 8};
    assert_int_equal(sp_suffix_propose_lookup(s, once, 8, 4, 1, 4, out, &k, &e), SP_OK);
    assert_int_equal(k, 0);
    /* a new request: "9 5 6" continues from the corpus only if seen often
     * enough (strict: a 3-gram needs 2 samples at 66%) */
    assert_int_equal(sp_suffix_end_request(s, NULL), SP_OK);
    const int32_t r2[] = {40, 9, 5, 6};
    assert_int_equal(sp_suffix_propose_lookup(s, r2, 4, 4, 1, 4, out, &k, &e), SP_OK);
    assert_int_equal(k, 0); /* "9 5 6" -> 8 seen once: below the strict 2 samples */
    const int32_t r3[] = {41, 1, 2, 3};
    assert_int_equal(sp_suffix_end_request(s, NULL), SP_OK);
    assert_int_equal(sp_suffix_propose_lookup(s, r3, 4, 2, 1, 4, out, &k, &e), SP_OK);
    assert_true(k >= 0);
    assert_int_equal(sp_suffix_propose_lookup(s, r3, 4, 2, 2, 5, out, &k, &e), SP_ERR_ARG);
    sp_suffix_free(s);
}

static void test_bad_input(void **state) {
    (void)state;
    sp_suffix_corpus *c = NULL;
    sp_suffix *s = NULL;
    sp_error e;
    assert_int_equal(sp_suffix_corpus_init(-1, &c, &e), SP_ERR_ARG);
    assert_int_equal(sp_suffix_corpus_init(SP_SUFFIX_MAX_TOKENS + 1, &c, &e), SP_ERR_ARG);
    assert_int_equal(sp_suffix_init(NULL, -5, &s, &e), SP_ERR_ARG);
    assert_int_equal(sp_suffix_corpus_init(10, &c, &e), SP_OK);
    const int32_t bad[] = {1, -2};
    assert_int_equal(sp_suffix_corpus_add(c, bad, 2, &e), SP_ERR_ARG);
    assert_int_equal(sp_suffix_corpus_stats(c).corpus_tokens, 0);
    s = mk(c, 0);
    int32_t out[4], k;
    assert_int_equal(sp_suffix_propose(s, bad, 2, 4, out, &k, &e), SP_ERR_ARG);
    assert_int_equal(sp_suffix_propose(s, bad, 1, -1, out, &k, &e), SP_ERR_ARG);
    assert_int_equal(sp_suffix_propose(s, NULL, 3, 4, out, &k, &e), SP_ERR_ARG);
    /* a text that is not a continuation starts a new request */
    const int32_t a[] = {1, 2, 1}, b[] = {5, 6};
    assert_int_equal(sp_suffix_propose(s, a, 3, 4, out, &k, &e), SP_OK);
    assert_int_equal(sp_suffix_propose(s, b, 2, 4, out, &k, &e), SP_OK);
    assert_int_equal(sp_suffix_corpus_stats(c).corpus_tokens, 0); /* no output yet */
    sp_suffix_feedback(NULL, 3);
    sp_suffix_free(s);
    sp_suffix_corpus_free(c);
}

/* Two threads draft from and add to one corpus at once (what server slots
 * do); the corpus stays within its bound. Run under TSan/ASan in CI. */
typedef struct worker {
    sp_suffix_corpus *c;
    int id;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    sp_suffix *s = NULL;
    if (sp_suffix_init(w->c, 256, &s, NULL)) return (void *)1;
    int32_t h[200], out[16], k;
    for (int r = 0; r < 20; r++) {
        for (int i = 0; i < 200; i++) h[i] = (i * (w->id + 2) + r) % 23;
        for (int n = 10; n <= 200; n += 19)
            if (sp_suffix_propose(s, h, n, 8, out, &k, NULL)) return (void *)1;
        if (sp_suffix_end_request(s, NULL)) return (void *)1;
    }
    sp_suffix_free(s);
    return NULL;
}

static void test_shared_threads(void **state) {
    (void)state;
    sp_suffix_corpus *c = NULL;
    assert_int_equal(sp_suffix_corpus_init(1000, &c, NULL), SP_OK);
    pthread_t t[2];
    worker w[2] = {{c, 0}, {c, 1}};
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    sp_suffix_stats st = sp_suffix_corpus_stats(c);
    assert_true(st.corpus_tokens > 0 && st.corpus_tokens <= 1000);
    sp_suffix_corpus_free(c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_deterministic), cmocka_unit_test(test_corpus),
    cmocka_unit_test(test_bounded),       cmocka_unit_test(test_learned_length),
    cmocka_unit_test(test_bad_input),     cmocka_unit_test(test_shared_threads),
    cmocka_unit_test(test_tree),          cmocka_unit_test(test_lookup),
};
SP_TEST_MAIN(tests)
