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

static void test_drafts_equal_llamacpp(void **state) {
    (void)state;
    FILE *f = fopen(VEC, "r");
    assert_non_null(f);
    char word[32];
    int cases = 0, nonempty = 0, calls = 0;
    int32_t *tok = NULL, out[2048];
    sp_ngram_map *mp = NULL;
    sp_error e = {0};
    while (fscanf(f, "%31s", word) == 1) {
        if (!strcmp(word, "end")) break;
        if (!strcmp(word, "case")) {
            sp_ngram_map_free(mp);
            int32_t n = read_int(f), m = read_int(f), ko = read_int(f), mh = read_int(f);
            if (sp_ngram_map_new(n, m, ko != 0, mh, &mp, &e)) fail_msg("%s", e.msg);
            cases++;
            continue;
        }
        assert_string_equal(word, "request");
        int32_t prompt = read_int(f), len = read_int(f);
        assert_true(fscanf(f, "%31s", word) == 1 && !strcmp(word, "tokens"));
        free(tok);
        tok = malloc((size_t)len * sizeof *tok);
        for (int32_t i = 0; i < len; i++) tok[i] = read_int(f);
        sp_ngram_map_begin(mp, tok, prompt);
        int32_t p = prompt;
        while (p + 1 < len) {
            assert_true(fscanf(f, "%31s", word) == 1 && !strcmp(word, "draft"));
            assert_int_equal(read_int(f), p);
            int32_t k = read_int(f);
            int32_t got = sp_ngram_map_draft(mp, tok, p, tok[p], out, 2048);
            if (got != k) fail_msg("case %d, position %d: llama.cpp drafted %d tokens, Specula %d", cases, p, k, got);
            int32_t acc = 0;
            for (int32_t i = 0; i < k; i++) {
                int32_t want = read_int(f);
                if (out[i] != want)
                    fail_msg("case %d, position %d, token %d: llama.cpp %d, Specula %d", cases, p, i, want, out[i]);
            }
            while (acc < k && p + 1 + acc < len && out[acc] == tok[p + 1 + acc]) acc++;
            sp_ngram_map_accept(mp, acc);
            nonempty += k > 0;
            calls++;
            p += 1 + acc;
        }
    }
    fclose(f);
    free(tok);
    sp_ngram_map_free(mp);
    print_message("ngram-map: %d settings, %d draft calls, %d drafts, all equal to llama.cpp's\n", cases,
                  calls, nonempty);
    assert_int_equal(cases, 5);
    assert_true(nonempty > 100); /* the vectors exercise drafting, not only refusals */
}

/* llama.cpp's ngram-mod drafter through its speculative pipeline
 * (mod_drafts.txt: the same streams' format, "case N_MATCH N_MIN N_MAX"). */
static void test_mod_drafts_equal_llamacpp(void **state) {
    (void)state;
    const char *path = "tests/data/ngram_map/mod_drafts.txt";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char word[32];
    int cases = 0, nonempty = 0, calls = 0;
    int32_t *tok = NULL, out[2048];
    sp_ngram_mod *md = NULL;
    sp_error e = {0};
    while (fscanf(f, "%31s", word) == 1) {
        if (!strcmp(word, "end")) break;
        if (!strcmp(word, "case")) {
            sp_ngram_mod_free(md);
            int32_t n = read_int(f), lo = read_int(f), hi = read_int(f);
            if (sp_ngram_mod_new(n, lo, hi, &md, &e)) fail_msg("%s", e.msg);
            cases++;
            continue;
        }
        assert_string_equal(word, "request");
        int32_t prompt = read_int(f), len = read_int(f);
        assert_true(fscanf(f, "%31s", word) == 1 && !strcmp(word, "tokens"));
        free(tok);
        tok = malloc((size_t)len * sizeof *tok);
        for (int32_t i = 0; i < len; i++) tok[i] = read_int(f);
        sp_ngram_mod_begin(md, tok, prompt);
        int32_t p = prompt;
        while (p + 1 < len) {
            assert_true(fscanf(f, "%31s", word) == 1 && !strcmp(word, "draft"));
            assert_int_equal(read_int(f), p);
            int32_t k = read_int(f);
            int32_t got = sp_ngram_mod_draft(md, tok, p, tok[p], out, 2048);
            if (got != k) fail_msg("mod case %d, position %d: llama.cpp drafted %d tokens, Specula %d", cases, p, k, got);
            for (int32_t i = 0; i < k; i++) {
                int32_t want = read_int(f);
                if (out[i] != want)
                    fail_msg("mod case %d, position %d, token %d: llama.cpp %d, Specula %d", cases, p, i, want, out[i]);
            }
            int32_t acc = 0;
            while (acc < k && p + 1 + acc < len && out[acc] == tok[p + 1 + acc]) acc++;
            sp_ngram_mod_accept(md, acc);
            nonempty += k > 0;
            calls++;
            p += 1 + acc;
        }
    }
    fclose(f);
    free(tok);
    sp_ngram_mod_free(md);
    print_message("ngram-mod: %d settings, %d draft calls, %d drafts, all equal to llama.cpp's\n", cases, calls,
                  nonempty);
    assert_int_equal(cases, 3);
    assert_true(nonempty > 100);
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
