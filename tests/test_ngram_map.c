/* llama.cpp's n-gram map and ngram-mod drafters (src/speculation/ngram_map.c,
 * ngram_mod.c) against llama.cpp's own code: tests/data/ngram_map/drafts.txt holds every draft
 * common/ngram-map.cpp (llama.cpp 2026-09) made over made-up token streams,
 * two requests per setting, and mod_drafts.txt those of its ngram-mod
 * drafter (scripts/ref_ngram_map.sh wrote both; its header says how). Replaying the same calls, Specula's map must draft the same
 * tokens at every position; then the drafters run in speculative decoding
 * (greedy parity with plain decoding) and refuse bad settings. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ngram_map.h"
#include "ngram_mod.h"
#include "sp_spec.h"

#define VEC "tests/data/ngram_map/drafts.txt"

static int32_t read_int(FILE *f) {
    long v;
    if (fscanf(f, "%ld", &v) != 1) fail_msg("%s: expected a number", VEC);
    return (int32_t)v;
}

/* One of llama.cpp's drafters behind the calls the replay makes. */
typedef struct drafter_ops {
    const char *name;
    int n_params; /* numbers after "case" */
    void *(*make)(const int32_t *params);
    void (*drop)(void *x);
    void (*begin)(void *x, const int32_t *h, int64_t len);
    int32_t (*draft)(void *x, const int32_t *h, int64_t len, int32_t s, int32_t *out, int32_t cap);
    void (*accept)(void *x, int32_t n_accepted);
} drafter_ops;

static void *map_make(const int32_t *a) {
    sp_ngram_map *mp = NULL;
    sp_error e = {0};
    if (sp_ngram_map_new(a[0], a[1], a[2] != 0, a[3], &mp, &e)) fail_msg("%s", e.msg);
    return mp;
}
static void map_drop(void *x) { sp_ngram_map_free(x); }
static void map_begin(void *x, const int32_t *h, int64_t len) { sp_ngram_map_begin(x, h, len); }
static int32_t map_draft(void *x, const int32_t *h, int64_t len, int32_t s, int32_t *out, int32_t cap) {
    return sp_ngram_map_draft(x, h, len, s, out, cap);
}
static void map_accept(void *x, int32_t n) { sp_ngram_map_accept(x, n); }
static void *mod_make(const int32_t *a) {
    sp_ngram_mod *md = NULL;
    sp_error e = {0};
    if (sp_ngram_mod_new(a[0], a[1], a[2], &md, &e)) fail_msg("%s", e.msg);
    return md;
}
static void mod_drop(void *x) { sp_ngram_mod_free(x); }
static void mod_begin(void *x, const int32_t *h, int64_t len) { sp_ngram_mod_begin(x, h, len); }
static int32_t mod_draft(void *x, const int32_t *h, int64_t len, int32_t s, int32_t *out, int32_t cap) {
    return sp_ngram_mod_draft(x, h, len, s, out, cap);
}
static void mod_accept(void *x, int32_t n) { sp_ngram_mod_accept(x, n); }

static const drafter_ops MAP = {"ngram-map", 4, map_make, map_drop, map_begin, map_draft, map_accept};
static const drafter_ops MOD = {"ngram-mod", 3, mod_make, mod_drop, mod_begin, mod_draft, mod_accept};

/* Replays the vector file's calls on Specula's drafter: every draft must be
 * llama.cpp's, token for token; returns the settings seen, *drafts the
 * non-empty drafts. */
static int replay(const char *path, const drafter_ops *ops, int *drafts) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char word[32];
    int cases = 0, nonempty = 0, calls = 0;
    int32_t *tok = NULL, out[2048];
    void *x = NULL;
    while (fscanf(f, "%31s", word) == 1) {
        if (!strcmp(word, "end")) break;
        if (!strcmp(word, "case")) {
            if (x) ops->drop(x);
            int32_t prm[4];
            for (int i = 0; i < ops->n_params; i++) prm[i] = read_int(f);
            x = ops->make(prm);
            cases++;
            continue;
        }
        assert_string_equal(word, "request");
        int32_t prompt = read_int(f), len = read_int(f);
        assert_true(fscanf(f, "%31s", word) == 1 && !strcmp(word, "tokens"));
        free(tok);
        tok = malloc((size_t)len * sizeof *tok);
        for (int32_t i = 0; i < len; i++) tok[i] = read_int(f);
        ops->begin(x, tok, prompt);
        int32_t p = prompt;
        while (p + 1 < len) {
            assert_true(fscanf(f, "%31s", word) == 1 && !strcmp(word, "draft"));
            assert_int_equal(read_int(f), p);
            int32_t k = read_int(f);
            int32_t got = ops->draft(x, tok, p, tok[p], out, 2048);
            if (got != k)
                fail_msg("%s case %d, position %d: llama.cpp drafted %d tokens, Specula %d", ops->name, cases, p, k,
                         got);
            for (int32_t i = 0; i < k; i++) {
                int32_t want = read_int(f);
                if (out[i] != want)
                    fail_msg("%s case %d, position %d, token %d: llama.cpp %d, Specula %d", ops->name, cases, p, i,
                             want, out[i]);
            }
            int32_t acc = 0;
            while (acc < k && p + 1 + acc < len && out[acc] == tok[p + 1 + acc]) acc++;
            ops->accept(x, acc);
            nonempty += k > 0;
            calls++;
            p += 1 + acc;
        }
    }
    fclose(f);
    free(tok);
    if (x) ops->drop(x);
    print_message("%s: %d settings, %d draft calls, %d drafts, all equal to llama.cpp's\n", ops->name, cases, calls,
                  nonempty);
    *drafts = nonempty;
    return cases;
}

static void test_drafts_equal_llamacpp(void **state) {
    (void)state;
    int drafts = 0;
    assert_int_equal(replay(VEC, &MAP, &drafts), 5);
    assert_true(drafts > 100); /* the vectors exercise drafting, not only refusals */
}

/* llama.cpp's ngram-mod drafter through its speculative pipeline
 * (mod_drafts.txt: the same streams' format, "case N_MATCH N_MIN N_MAX"). */
static void test_mod_drafts_equal_llamacpp(void **state) {
    (void)state;
    int drafts = 0;
    assert_int_equal(replay("tests/data/ngram_map/mod_drafts.txt", &MOD, &drafts), 3);
    assert_true(drafts > 100);
}

/* The draft's length is capped by the caller; accept bounds the next draft
 * from the same key (ngram-map-k: a fully rejected key drafts nothing). */
static void test_cap_and_accept(void **state) {
    (void)state;
    sp_ngram_map *mp = NULL;
    sp_error e = {0};
    assert_int_equal(sp_ngram_map_new(2, 4, true, 1, &mp, &e), SP_OK);
    /* h = 10 1 2 13 14 ... 28 1, then 2 sampled: the key [1 2] occurred at
     * 1 (position 0 never counts as a match, as upstream), followed by 13 14 15 */
    int32_t h[30];
    for (int32_t i = 0; i < 30; i++) h[i] = 10 + i;
    h[1] = 1;
    h[2] = 2;
    h[29] = 1;
    sp_ngram_map_begin(mp, h, 30);
    int32_t out[8];
    assert_int_equal(sp_ngram_map_draft(mp, h, 30, 2, out, 3), 3);
    assert_int_equal(out[0], 13);
    assert_int_equal(out[2], 15);
    sp_ngram_map_accept(mp, 0);
    assert_int_equal(sp_ngram_map_draft(mp, h, 30, 2, out, 8), 0);
    sp_ngram_map_free(mp);
    assert_int_equal(sp_ngram_map_new(0, 4, true, 1, &mp, &e), SP_ERR_ARG);
    assert_null(mp);
    assert_int_equal(sp_ngram_map_new(2, 4, false, 0, &mp, &e), SP_ERR_ARG);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_drafts_equal_llamacpp),
    cmocka_unit_test(test_mod_drafts_equal_llamacpp),
    cmocka_unit_test(test_cap_and_accept),
};

SP_TEST_MAIN(tests)
