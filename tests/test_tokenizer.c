/* Tests for the tokenizer: the llama2.c and GGUF stories260K vocabularies
 * against llama.cpp's reference ids and text, round trips (including byte
 * fallback for UTF-8 outside the vocabulary), BPE on a hand-built byte-level
 * vocabulary (merge ranks, pre-tokenisation, all 256 bytes), a gpt2
 * vocabulary written to and loaded from GGUF, load errors, and speed. */
#include "testutil.h"

#include "unicode.h"
#include "gguf_write.h"

#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "gguf.h"
#include "rng.h"
#include "sp_tokenizer.h"
#include "tokenizer.h"
#include "tokenizer_load.h"

static const int32_t REF_PROMPT[5] = {1, 403, 407, 261, 378};
static const int32_t REF_GEN[64] = {
    432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394,
    261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
    398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336};
static const char REF_TEXT[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said";

static sp_tokenizer *load_l2c(void) {
    sp_tokenizer *t = NULL;
    sp_error e = {0};
    sp_status st = sp_tokenizer_load_llama2c(sp_shared("models/tok512.bin"), 512, &t, &e);
    if (st != SP_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, SP_OK);
    return t;
}

static sp_tokenizer *load_gguf_tok(void) {
    sp_gguf *g = NULL;
    sp_error e = {0};
    assert_int_equal(sp_gguf_open(sp_shared("models/stories260K.gguf"), &g, &e), SP_OK);
    sp_tokenizer *t = NULL;
    sp_status st = sp_tokenizer_load_gguf(g, &t, &e);
    if (st != SP_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, SP_OK);
    sp_gguf_close(g); /* the tokenizer owns copies of everything */
    return t;
}

static int32_t encode(const sp_tokenizer *t, const char *s, size_t n, bool bos, int32_t *out,
                      int32_t cap) {
    int32_t n_out = -1;
    sp_error e = {0};
    sp_status st = sp_tokenizer_encode(t, s, n, bos, out, cap, &n_out, &e);
    if (st != SP_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, SP_OK);
    return n_out;
}

/* decode(encode(s)) == s, both as a whole and token by token. */
static void check_roundtrip(const sp_tokenizer *t, const char *s, size_t n, bool bos) {
    static int32_t ids[65536];
    static char buf[1 << 18], stream[1 << 18];
    int32_t k = encode(t, s, n, bos, ids, 65536);
    size_t len = sp_tokenizer_decode(t, ids, k, buf, sizeof buf);
    assert_int_equal(len, n);
    assert_memory_equal(buf, s, n);
    size_t m = 0;
    for (int32_t i = 0; i < k; i++)
        m += sp_tokenizer_decode_token(t, i ? ids[i - 1] : -1, ids[i], stream + m, 64);
    assert_int_equal(m, n);
    assert_memory_equal(stream, s, n);
}

/* Reads the first `max_lines` non-empty lines of the TinyStories sample into
 * one buffer, NUL-separated; returns the count. */
static int read_lines(char *buf, size_t cap, const char **lines, int max_lines) {
    FILE *f = fopen(sp_shared("data/tinystories_val_sample.txt"), "rb");
    assert_non_null(f);
    int n = 0;
    size_t used = 0;
    char line[8192];
    while (n < max_lines && fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\n");
        line[l] = '\0';
        if (l == 0 || used + l + 1 > cap) continue;
        memcpy(buf + used, line, l + 1);
        lines[n++] = buf + used;
        used += l + 1;
    }
    fclose(f);
    return n;
}

/* ---- llama2.c tok512.bin ---- */

static void test_l2c_prompt_ids(void **state) {
    (void)state;
    sp_tokenizer *t = load_l2c();
    assert_int_equal(sp_tokenizer_kind_of(t), SP_TOK_SPM);
    assert_int_equal(sp_tokenizer_n_vocab(t), 512);
    assert_int_equal(sp_tokenizer_bos(t), 1);
    assert_int_equal(sp_tokenizer_eos(t), 2);
    assert_true(sp_tokenizer_add_bos(t));
    assert_true(sp_tokenizer_is_eog(t, 2));
    assert_false(sp_tokenizer_is_eog(t, 1));
    int32_t ids[16];
    assert_int_equal(encode(t, "Once upon a time", 16, true, ids, 16), 5);
    assert_memory_equal(ids, REF_PROMPT, sizeof REF_PROMPT);
    assert_int_equal(encode(t, "", 0, true, ids, 16), 1);
    assert_int_equal(encode(t, "", 0, false, ids, 16), 0);
    sp_tokenizer_free(t);
}

static void check_reference_decode(const sp_tokenizer *t) {
    int32_t all[69];
    memcpy(all, REF_PROMPT, sizeof REF_PROMPT);
    memcpy(all + 5, REF_GEN, sizeof REF_GEN);
    char buf[1024];
    size_t n = sp_tokenizer_decode(t, all, 69, buf, sizeof buf);
    assert_int_equal(n, strlen(REF_TEXT));
    assert_string_equal(buf, REF_TEXT);
    /* The generated part streamed after the prompt. */
    size_t m = 0;
    for (int i = 0; i < 64; i++)
        m += sp_tokenizer_decode_token(t, i ? REF_GEN[i - 1] : 378, REF_GEN[i], buf + m, 64);
    buf[m] = '\0';
    assert_string_equal(buf, REF_TEXT + strlen("Once upon a time"));
    /* Re-encoding the whole text gives exactly BOS + prompt + generated. */
    int32_t ids[128];
    assert_int_equal(encode(t, REF_TEXT, strlen(REF_TEXT), true, ids, 128), 69);
    assert_memory_equal(ids, all, sizeof all);
    /* snprintf-like truncation. */
    char small[8];
    assert_int_equal(sp_tokenizer_decode(t, all, 69, small, sizeof small), strlen(REF_TEXT));
    assert_string_equal(small, "Once up");
}

static void test_l2c_reference_decode(void **state) {
    (void)state;
    sp_tokenizer *t = load_l2c();
    check_reference_decode(t);
    sp_tokenizer_free(t);
}

static void test_l2c_roundtrip_sample(void **state) {
    (void)state;
    sp_tokenizer *t = load_l2c();
    static char buf[1 << 20];
    static const char *lines[1000];
    int n = read_lines(buf, sizeof buf, lines, 1000);
    assert_true(n >= 500);
    for (int i = 0; i < n; i++) check_roundtrip(t, lines[i], strlen(lines[i]), true);
    /* Without BOS the dummy-prefix space stays in the output. */
    int32_t ids[16];
    char out[64];
    int32_t k = encode(t, "Once upon", 9, false, ids, 16);
    sp_tokenizer_decode(t, ids, k, out, sizeof out);
    assert_string_equal(out, " Once upon");
    sp_tokenizer_free(t);
}

static void check_utf8_fallback(const sp_tokenizer *t) {
    const char *s = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83 \xe6\x97\xa5\xe6\x9c\xac"; /* héllo wörld ☃ 日本 */
    int32_t ids[64];
    int32_t k = encode(t, s, strlen(s), true, ids, 64);
    int n_byte = 0;
    for (int32_t i = 0; i < k; i++) n_byte += ids[i] >= 3 && ids[i] < 259;
    assert_true(n_byte >= 2 + 3 + 6); /* ö ☃ 日本 via <0xNN> (é is a token in this vocabulary) */
    check_roundtrip(t, s, strlen(s), true);
    /* Bytes stream one at a time: ☃ is three byte tokens whose pieces
     * concatenate to the exact UTF-8. */
    int32_t sn[8];
    int32_t kn = encode(t, "\xe2\x98\x83", 3, false, sn, 8);
    char piece[8], cat[16];
    size_t m = 0;
    for (int32_t i = 0; i < kn; i++) {
        size_t l = sp_tokenizer_decode_token(t, i ? sn[i - 1] : -1, sn[i], piece, sizeof piece);
        memcpy(cat + m, piece, l);
        m += l;
    }
    assert_int_equal(m, 4);
    assert_memory_equal(cat, " \xe2\x98\x83", 4);
    /* Control tokens print nothing; out-of-range ids too. */
    assert_int_equal(sp_tokenizer_decode_token(t, -1, 1, piece, sizeof piece), 0);
    assert_int_equal(sp_tokenizer_decode_token(t, -1, 2, piece, sizeof piece), 0);
    assert_int_equal(sp_tokenizer_decode_token(t, -1, 99999, piece, sizeof piece), 0);
    assert_int_equal(sp_tokenizer_decode_token(t, -1, 13, piece, sizeof piece), 1);
    assert_int_equal(piece[0], '\n');
}

static void test_l2c_byte_fallback(void **state) {
    (void)state;
    sp_tokenizer *t = load_l2c();
    check_utf8_fallback(t);
    /* All 255 non-NUL bytes, including invalid UTF-8, survive. */
    char all[255];
    for (int i = 0; i < 255; i++) all[i] = (char)(i + 1);
    check_roundtrip(t, all, 255, true);
    check_roundtrip(t, "\xff\xfe\xc3 \x80\xe2\x98", 7, true);
    sp_tokenizer_free(t);
}

static void test_l2c_cap_and_errors(void **state) {
    (void)state;
    sp_tokenizer *t = load_l2c();
    int32_t ids[3], n = -1;
    sp_error e = {0};
    assert_int_equal(sp_tokenizer_encode(t, "Once upon a time", 16, true, ids, 3, &n, &e),
                     SP_ERR_RANGE);
    assert_int_equal(n, 5);
    assert_true(strlen(e.msg) > 0);
    assert_int_equal(sp_tokenizer_encode(t, "Once", 4, true, NULL, 0, &n, &e), SP_ERR_RANGE);
    assert_int_equal(n, 2);
    sp_tokenizer_free(t);

    sp_tokenizer *bad = (sp_tokenizer *)1;
    assert_int_equal(sp_tokenizer_load_llama2c("/nonexistent/tok.bin", 512, &bad, &e), SP_ERR_IO);
    assert_null(bad);
    /* Truncated copy of tok512.bin. */
    FILE *f = fopen(sp_shared("models/tok512.bin"), "rb");
    assert_non_null(f);
    static char data[8192];
    size_t sz = fread(data, 1, sizeof data, f);
    fclose(f);
    char path[1024];
    snprintf(path, sizeof path, "%s/sp_tok_trunc_%d.bin", sp_tmpdir(), (int)getpid());
    f = fopen(path, "wb");
    fwrite(data, 1, sz / 2, f);
    fclose(f);
    assert_int_equal(sp_tokenizer_load_llama2c(path, 512, &bad, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "truncated"));
    /* A negative token length. */
    int32_t neg = -5;
    memcpy(data + 4 + 4, &neg, 4);
    f = fopen(path, "wb");
    fwrite(data, 1, sz, f);
    fclose(f);
    assert_int_equal(sp_tokenizer_load_llama2c(path, 512, &bad, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "bad length"));
    remove(path);
    assert_int_equal(sp_tokenizer_load_llama2c(sp_shared("models/tok512.bin"), 2, &bad, &e),
                     SP_ERR_ARG);
}

/* ---- GGUF stories260K (SPM with U+2581 and token types) ---- */

static void test_gguf_spm_reference(void **state) {
    (void)state;
    sp_tokenizer *t = load_gguf_tok();
    assert_int_equal(sp_tokenizer_kind_of(t), SP_TOK_SPM);
    assert_int_equal(sp_tokenizer_n_vocab(t), 512);
    sp_str s = sp_tokenizer_token_text(t, 259);
    assert_int_equal(s.len, 4);
    assert_memory_equal(s.ptr, "\xe2\x96\x81t", 4);
    int32_t ids[16];
    assert_int_equal(encode(t, "Once upon a time", 16, true, ids, 16), 5);
    assert_memory_equal(ids, REF_PROMPT, sizeof REF_PROMPT);
    check_reference_decode(t);
    check_utf8_fallback(t);
    sp_tokenizer_free(t);
}

static void test_gguf_agrees_with_l2c(void **state) {
    (void)state;
    sp_tokenizer *a = load_l2c(), *b = load_gguf_tok();
    static char buf[1 << 19];
    static const char *lines[200];
    static int32_t ia[8192], ib[8192];
    int n = read_lines(buf, sizeof buf, lines, 200);
    assert_int_equal(n, 200);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(lines[i]);
        int32_t ka = encode(a, lines[i], l, true, ia, 8192);
        int32_t kb = encode(b, lines[i], l, true, ib, 8192);
        assert_int_equal(ka, kb);
        assert_memory_equal(ia, ib, (size_t)ka * sizeof *ia);
        check_roundtrip(b, lines[i], l, true);
    }
    sp_tokenizer_free(a);
    sp_tokenizer_free(b);
}

/* Invalid UTF-8 lead bytes before escaped spaces (issue 11, item 1): the
 * symbol array was sized by input bytes while an escaped space is three, so
 * "\xc3 x" repeated wrote past it (ASan: heap overflow; release: abort in
 * free). A lead byte without its continuation bytes is its own symbol now,
 * so the text also decodes back byte for byte ("\xE4 " came back as
 * E4 E2 96 81). A literal U+2581 decodes as a space, as in SentencePiece and
 * llama.cpp (it is the escape character). */
static void test_spm_invalid_lead_before_space(void **state) {
    (void)state;
    sp_tokenizer *t = load_gguf_tok();
    static char s[3000];
    size_t n = 0;
    for (int i = 0; i < 900; i++) s[n++] = (char)0xc3, s[n++] = ' ', s[n++] = i % 2 ? 'x' : (char)0xe4;
    check_roundtrip(t, s, n, true);
    check_roundtrip(t, "\xc3 x", 3, true);
    check_roundtrip(t, "\xe4 ", 2, true);
    check_roundtrip(t, "\xf0 \xe2 \xc3", 6, true);
    int32_t ids[8];
    int32_t k = encode(t, "a\xe2\x96\x81" "b", 5, false, ids, 8);
    char out[16];
    size_t len = sp_tokenizer_decode(t, ids, k, out, sizeof out);
    /* without BOS the dummy-prefix space stays in the text */
    assert_int_equal(len, 4);
    assert_memory_equal(out, " a b", 4);
    sp_tokenizer_free(t);
}

/* The generated Unicode classes (scripts/gen_unicode_tables.py from the
 * UCD), on code points whose categories are facts of the standard. */
static void test_unicode_classes(void **state) {
    (void)state;
    static const struct { uint32_t cp; sp_ucl want; } cases[] = {
        {0xE9, SP_UCL_LETTER},   /* e acute, Ll */
        {0x5D0, SP_UCL_LETTER},  /* Hebrew alef, Lo */
        {0x4E00, SP_UCL_LETTER}, /* CJK ideograph (a First/Last range) */
        {0x2B5, SP_UCL_LETTER},  /* modifier letter, Lm */
        {0x661, SP_UCL_NUMBER},  /* Arabic-Indic digit one, Nd */
        {0x966, SP_UCL_NUMBER},  /* Devanagari digit zero, Nd */
        {0xBD, SP_UCL_NUMBER},   /* one half, No */
        {0x2167, SP_UCL_NUMBER}, /* Roman numeral eight, Nl */
        {0x3000, SP_UCL_SPACE},  /* ideographic space */
        {0xA0, SP_UCL_SPACE},    /* no-break space (White_Space) */
        {0x85, SP_UCL_SPACE},    /* next line, a control that is White_Space */
        {0x301, SP_UCL_MARK},    /* combining acute, Mn */
        {0x93E, SP_UCL_MARK},    /* Devanagari vowel sign AA, Mc */
        {0x5BF, SP_UCL_MARK},    /* Hebrew point rafe, Mn */
        {0x20DD, SP_UCL_MARK},   /* combining enclosing circle, Me */
        {0xE3F, SP_UCL_OTHER},   /* Thai baht, Sc */
        {0x3001, SP_UCL_PUNCT},  /* ideographic comma, Po */
        {0x21, SP_UCL_PUNCT},    /* exclamation mark, Po */
        {0x2014, SP_UCL_PUNCT},  /* em dash, Pd */
        {0x24, SP_UCL_OTHER},    /* dollar, Sc */
        {0x1F600, SP_UCL_OTHER}, /* emoji, So */
        {0x378, SP_UCL_OTHER},   /* unassigned */
        {0x110000, SP_UCL_OTHER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (sp_unicode_class(cases[i].cp) != cases[i].want)
            fail_msg("U+%04X: class %d, want %d", cases[i].cp, (int)sp_unicode_class(cases[i].cp),
                     (int)cases[i].want);
    for (int i = 1; i < sp_ucl_n_ranges; i++) /* sorted, disjoint */
        assert_true(sp_ucl_ranges[i].first > sp_ucl_ranges[i - 1].last);
}

/* ---- BPE on a hand-built byte-level vocabulary ---- */

/* Tokens 0..255: the byte-level character of each byte; 256 <|endoftext|>
 * (control); then merge results. */
static const char *const BPE_MERGES[] = {
    "h e", "l l", "\xc4\xa0 t", "\xc4\xa0t he", "he ll", "hell o", "b c", "a b", "a bc", "ab c",
};
static const char *const BPE_EXTRA[] = {
    "<|endoftext|>", "he", "ll", "\xc4\xa0t", "\xc4\xa0the", "hell", "hello", "bc", "ab", "abc",
};
enum { BPE_NV = 256 + 10 };

typedef struct bpe_vocab {
    char chars[256][4];
    sp_str toks[BPE_NV];
    int32_t types[BPE_NV];
    sp_str merges[10];
} bpe_vocab;

static void bpe_vocab_build(bpe_vocab *v) {
    for (int b = 0; b < 256; b++) {
        size_t l = sp_utf8_encode(sp_tok_byte_to_cp((uint8_t)b), v->chars[b]);
        v->toks[b].ptr = v->chars[b];
        v->toks[b].len = l;
        v->types[b] = SP_TOKT_NORMAL;
    }
    for (int i = 0; i < 10; i++) {
        v->toks[256 + i].ptr = BPE_EXTRA[i];
        v->toks[256 + i].len = strlen(BPE_EXTRA[i]);
        v->types[256 + i] = i == 0 ? SP_TOKT_CONTROL : SP_TOKT_NORMAL;
        v->merges[i].ptr = BPE_MERGES[i];
        v->merges[i].len = strlen(BPE_MERGES[i]);
    }
}

static sp_tokenizer *bpe_tok(sp_tok_pre pre) {
    static bpe_vocab v;
    bpe_vocab_build(&v);
    sp_tokenizer_spec spec = {
        .kind = SP_TOK_BPE, .n_vocab = BPE_NV, .tokens = v.toks, .types = v.types,
        .merges = v.merges, .n_merges = 10, .bos = 256, .eos = 256, .unk = -1, .eot = -1,
        .eom = -1, .add_bos = false, .pre = pre,
    };
    sp_tokenizer *t = NULL;
    sp_error e = {0};
    sp_status st = sp_tokenizer_init_spec(&spec, &t, &e);
    if (st != SP_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, SP_OK);
    return t;
}

static void test_bpe_byte_map(void **state) {
    (void)state;
    assert_int_equal(sp_tok_byte_to_cp(' '), 0x120);  /* Ġ */
    assert_int_equal(sp_tok_byte_to_cp('\n'), 0x10A); /* Ċ */
    assert_int_equal(sp_tok_byte_to_cp('A'), 'A');
    assert_int_equal(sp_tok_byte_to_cp(0xAD), 0x143);
    bool seen[324] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = sp_tok_byte_to_cp((uint8_t)b);
        assert_true(cp < 324);
        assert_false(seen[cp]);
        seen[cp] = true;
        assert_int_equal(sp_tok_cp_to_byte(cp), b);
    }
    assert_int_equal(sp_tok_cp_to_byte(0x20), -1);
    assert_int_equal(sp_tok_cp_to_byte(0x144), -1);
}

static void test_bpe_merges_by_rank(void **state) {
    (void)state;
    sp_tokenizer *t = bpe_tok(SP_PRE_GPT2);
    assert_int_equal(sp_tokenizer_kind_of(t), SP_TOK_BPE);
    assert_false(sp_tokenizer_add_bos(t));
    assert_true(sp_tokenizer_is_eog(t, 256));
    int32_t ids[32];
    /* "hello": he(0) ll(1) hell(4) hello(5); " the": he, Ġt, Ġthe;
     * " abc": bc (rank 6) beats ab (rank 7), then a+bc; " ab": ab. */
    const int32_t want[] = {262, 260, ' ', 265, ' ', 264};
    int32_t k = encode(t, "hello the abc ab", 16, false, ids, 32);
    assert_int_equal(k, 6);
    assert_memory_equal(ids, want, sizeof want);
    /* Equal ranks: left-most first ("lll" -> ll l). */
    k = encode(t, "lll", 3, false, ids, 32);
    assert_int_equal(k, 2);
    assert_int_equal(ids[0], 258);
    assert_int_equal(ids[1], 'l');
    /* Control token text is plain text, not the control id. */
    k = encode(t, "<|endoftext|>", 13, false, ids, 32);
    assert_true(k > 1);
    for (int32_t i = 0; i < k; i++) assert_int_not_equal(ids[i], 256);
    check_roundtrip(t, "<|endoftext|>", 13, false);
    /* BOS on request; control tokens decode to nothing. */
    k = encode(t, "hello", 5, true, ids, 32);
    assert_int_equal(k, 2);
    assert_int_equal(ids[0], 256);
    char out[16];
    assert_int_equal(sp_tokenizer_decode(t, ids, k, out, sizeof out), 5);
    assert_string_equal(out, "hello");
    sp_tokenizer_free(t);
}

static void expect_split(sp_tok_pre pre, const char *s, const char *const *want, int n) {
    size_t len = strlen(s), pos = 0;
    uint8_t *cut = calloc(len + 1, 1);
    sp_tok_pretok_split(pre, s, len, cut);
    assert_true(cut[0] && cut[len]);
    int i = 0;
    while (pos < len) {
        size_t end = pos + 1;
        while (!cut[end]) end++;
        assert_true(i < n);
        if (end - pos != strlen(want[i]) || memcmp(s + pos, want[i], end - pos) != 0)
            print_error("word %d: got \"%.*s\" want \"%s\"\n", i, (int)(end - pos), s + pos,
                        want[i]);
        assert_int_equal(end - pos, strlen(want[i]));
        assert_memory_equal(s + pos, want[i], end - pos);
        pos = end;
        i++;
    }
    assert_int_equal(i, n);
    free(cut);
}

static void test_bpe_pretokenize(void **state) {
    (void)state;
    const char *g[] = {"Hello", " world", "'s", " ", " foo", "\n", "\n", "bar", " 123",
                       "!!", " x", " \xc3\xa9t\xc3\xa9", " \xe2\x98\x83", "   "};
    expect_split(SP_PRE_GPT2, "Hello world's  foo\n\nbar 123!! x \xc3\xa9t\xc3\xa9 \xe2\x98\x83   ",
                 g, 14);
    const char *g2[] = {"I", "'ll", " '", "S", "\t", "a", " \xff\xfe", "z"};
    expect_split(SP_PRE_GPT2, "I'll 'S\ta \xff\xfez", g2, 8);
    const char *l[] = {"Hello", " WORLD", "'S", " ", "123", "45", " \n\n", " x", "!!\n",
                       "(a", " ...", "  ", " b"};
    expect_split(SP_PRE_LLAMA3, "Hello WORLD'S 12345 \n\n x!!\n(a ...   b", l, 13);
    /* llama.cpp's default list: [\p{P}$+<=>^~|]+ (the backtick is a symbol,
     * Sk), GPT-2, \p{N}+, [0-9]{3}, each splitting the previous pieces */
    const char *d[] = {"a", " ", "123", "4", ",", " b", "`", "c", " ", "\xd9\xa3\xd9\xa4"};
    expect_split(SP_PRE_DEFAULT, "a 1234, b`c \xd9\xa3\xd9\xa4", d, 10);
    /* deepseek-coder: [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK]+, \p{N}, each splitting
     * the pieces of the ones before ("+" is a symbol: left between "(" and ")") */
    const char *dc[] = {"don", "'", "t", " (", "+", ")", "\n", "\n", " ", " x", " ", "1", "2",
                        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"};
    expect_split(SP_PRE_DEEPSEEK_CODER, "don't (+)\n\n  x 12\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", dc, 14);
    /* U+3000 is white space (\s) to llama.cpp, not punctuation; Arabic letters
     * are in no class */
    const char *dc2[] = {"\xce\xa9mega", "\xe3\x80\x80\xc2\xab", "ok", "\xc2\xbb", " ", " \xd9\x85\xd8\xb1", " ",
                         "\xd9\xa3", "\xd9\xa4", "5", "  "};
    const char *om = "\xce\xa9mega\xe3\x80\x80\xc2\xabok\xc2\xbb  \xd9\x85\xd8\xb1 \xd9\xa3\xd9\xa4" "5  ";
    expect_split(SP_PRE_DEEPSEEK_CODER, om, dc2, 11);
    /* deepseek-llm: [\r\n], \s?[cased letters]+, \s?[!-/:-~ and CJK
     * punctuation]+ (which holds the ASCII letters: "mega" leaves the Greek
     * capital), \s+$, [CJK]+, \p{N}+ */
    const char *dl[] = {"don", "'", "t", " (+)", "\n", "\n", " ", " x", " ", "12",
                        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"};
    expect_split(SP_PRE_DEEPSEEK_LLM, "don't (+)\n\n  x 12\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", dl, 11);
    const char *dl2[] = {"\xce\xa9", "mega", "\xe3\x80\x80\xc2\xab", "ok", "\xc2\xbb  \xd9\x85\xd8\xb1 ",
                         "\xd9\xa3\xd9\xa4\x35", "  "}; /* \x35: "5" */
    expect_split(SP_PRE_DEEPSEEK_LLM, om, dl2, 7);
    /* qwen35: letter runs take combining marks (U+0301 here), qwen2's do not */
    const char *mk = "ne\xcc\x81\x65 1\xcc\x81 \xcc\x81\xcc\x81\x61"; /* \x65 e, \x61 a */
    const char *q35[] = {"ne\xcc\x81\x65", " ", "1", "\xcc\x81", " \xcc\x81\xcc\x81\x61"};
    expect_split(SP_PRE_QWEN35, mk, q35, 5);
    const char *q2[] = {"ne", "\xcc\x81\x65", " ", "1", "\xcc\x81", " \xcc\x81\xcc\x81", "a"};
    expect_split(SP_PRE_QWEN2, mk, q2, 7);
}

static void test_bpe_byte_roundtrip(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        sp_tokenizer *t = bpe_tok(p ? SP_PRE_LLAMA3 : SP_PRE_GPT2);
        char all[256];
        for (int i = 0; i < 256; i++) all[i] = (char)i;
        check_roundtrip(t, all, 256, false);
        check_roundtrip(t, "\xff\xfe\xc3 \x80\xe2\x98 abc\r\n\x00x", 15, false);
        const char *u = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83 \xe6\x97\xa5\xe6\x9c\xac";
        check_roundtrip(t, u, strlen(u), false);
        /* Pseudo-random bytes. */
        sp_rng r;
        sp_rng_seed(&r, 99);
        static char rnd[4096];
        for (int i = 0; i < 4096; i++) rnd[i] = (char)sp_rng_below(&r, 256);
        check_roundtrip(t, rnd, sizeof rnd, false);
        sp_tokenizer_free(t);
    }
}

/* User-defined tokens are matched literally before pre-tokenisation (longest
 * first) and print as their raw text. */
static void test_bpe_user_defined(void **state) {
    (void)state;
    static bpe_vocab v;
    bpe_vocab_build(&v);
    v.types[257] = SP_TOKT_USER_DEFINED; /* "he" */
    v.types[261] = SP_TOKT_USER_DEFINED; /* "hell" */
    sp_tokenizer_spec spec = {
        .kind = SP_TOK_BPE, .n_vocab = BPE_NV, .tokens = v.toks, .types = v.types,
        .merges = v.merges, .n_merges = 10, .bos = 256, .eos = 256, .unk = -1, .eot = -1,
        .eom = -1,
    };
    sp_tokenizer *t = NULL;
    sp_error e = {0};
    assert_int_equal(sp_tokenizer_init_spec(&spec, &t, &e), SP_OK);
    int32_t ids[16];
    /* "the hello": t, he(ud), ' ', hell(ud), o */
    const int32_t want[] = {'t', 257, ' ', 261, 'o'};
    assert_int_equal(encode(t, "the hello", 9, false, ids, 16), 5);
    assert_memory_equal(ids, want, sizeof want);
    check_roundtrip(t, "the hello", 9, false);
    sp_tokenizer_free(t);
}

static void test_spec_errors(void **state) {
    (void)state;
    static bpe_vocab v;
    bpe_vocab_build(&v);
    sp_tokenizer_spec spec = {
        .kind = SP_TOK_BPE, .n_vocab = BPE_NV, .tokens = v.toks, .types = v.types,
        .merges = v.merges, .n_merges = 10, .bos = BPE_NV, .eos = -1, .unk = -1, .eot = -1,
        .eom = -1,
    };
    sp_tokenizer *t = NULL;
    sp_error e = {0};
    assert_int_equal(sp_tokenizer_init_spec(&spec, &t, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "bos"));
    spec.bos = -1;
    sp_str bad_merge = {"nospace", 7};
    spec.merges = &bad_merge;
    spec.n_merges = 1;
    assert_int_equal(sp_tokenizer_init_spec(&spec, &t, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "merge"));
    spec.merges = v.merges;
    spec.n_merges = 10;
    v.types[5] = 9;
    assert_int_equal(sp_tokenizer_init_spec(&spec, &t, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "type"));
    assert_null(t);
}

/* ---- gpt2 vocabulary through GGUF ---- */

static sp_status write_bpe_gguf_pre(const char *path, const char *model, const char *pre,
                                    bool with_merges, int32_t n_types, uint32_t eos, sp_error *e) {
    static bpe_vocab v;
    bpe_vocab_build(&v);
    sp_gguf_writer *w = sp_gguf_writer_init();
    sp_gguf_writer_set_str(w, "general.architecture", "llama");
    sp_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    if (pre) sp_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    sp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.toks, BPE_NV);
    sp_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v.types, (uint64_t)n_types);
    if (with_merges) sp_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v.merges, 10);
    sp_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256);
    sp_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", eos);
    sp_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    sp_status st = sp_gguf_writer_write(w, path, e);
    sp_gguf_writer_free(w);
    return st;
}

static sp_status write_bpe_gguf(const char *path, const char *model, bool with_merges,
                                int32_t n_types, uint32_t eos, sp_error *e) {
    return write_bpe_gguf_pre(path, model, "llama-bpe", with_merges, n_types, eos, e);
}

static sp_status load_from(const char *path, sp_tokenizer **t, sp_error *e) {
    sp_gguf *g = NULL;
    sp_status st = sp_gguf_open(path, &g, e);
    assert_int_equal(st, SP_OK);
    st = sp_tokenizer_load_gguf(g, t, e);
    sp_gguf_close(g);
    return st;
}

static void test_gguf_bpe(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/sp_tok_bpe_%d.gguf", sp_tmpdir(), (int)getpid());
    sp_error e = {0};
    sp_tokenizer *t = NULL;
    assert_int_equal(write_bpe_gguf(path, "gpt2", true, BPE_NV, 256, &e), SP_OK);
    assert_int_equal(load_from(path, &t, &e), SP_OK);
    assert_int_equal(sp_tokenizer_kind_of(t), SP_TOK_BPE);
    assert_true(sp_tokenizer_add_bos(t));
    int32_t ids[32];
    /* llama-bpe pre-tokeniser: " the" is a whole token (ignore_merges). */
    const int32_t want[] = {256, 262, 260, ' ', 265};
    assert_int_equal(encode(t, "hello the abc", 13, true, ids, 32), 5);
    assert_memory_equal(ids, want, sizeof want);
    check_roundtrip(t, "hello the abc \xe2\x98\x83\n", strlen("hello the abc \xe2\x98\x83\n"), true);
    sp_tokenizer_free(t);

    assert_int_equal(write_bpe_gguf(path, "gpt2", false, BPE_NV, 256, &e), SP_OK);
    assert_int_equal(load_from(path, &t, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "tokenizer.ggml.merges"));
    assert_int_equal(write_bpe_gguf(path, "gpt2", true, BPE_NV - 1, 256, &e), SP_OK);
    assert_int_equal(load_from(path, &t, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "token_type"));
    assert_int_equal(write_bpe_gguf(path, "gpt2", true, BPE_NV, 1000, &e), SP_OK);
    assert_int_equal(load_from(path, &t, &e), SP_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "eos_token_id"));
    assert_int_equal(write_bpe_gguf(path, "t5", true, BPE_NV, 256, &e), SP_OK);
    assert_int_equal(load_from(path, &t, &e), SP_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "t5"));
    assert_null(t);
    /* an unknown pre-tokeniser is refused by name, never split as GPT-2; it
     * loads when the caller forces known rules; no key means "default" */
    assert_int_equal(write_bpe_gguf_pre(path, "gpt2", "xyz-unknown", true, BPE_NV, 256, &e), SP_OK);
    assert_int_equal(load_from(path, &t, &e), SP_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "\"xyz-unknown\""));
    assert_non_null(strstr(e.msg, "tokenizer_pre"));
    assert_null(t);
    sp_gguf *g = NULL;
    assert_int_equal(sp_gguf_open(path, &g, &e), SP_OK);
    assert_int_equal(sp_tokenizer_load_gguf_pre(g, "nonsense", &t, &e), SP_ERR_UNSUPPORTED);
    assert_int_equal(sp_tokenizer_load_gguf_pre(g, "gpt-2", &t, &e), SP_OK);
    sp_tokenizer_free(t);
    sp_gguf_close(g);
    assert_true(sp_tokenizer_pre_known("qwen2") && sp_tokenizer_pre_known("default"));
    assert_false(sp_tokenizer_pre_known("xyz-unknown") || sp_tokenizer_pre_known(NULL));
    assert_int_equal(write_bpe_gguf_pre(path, "gpt2", NULL, true, BPE_NV, 256, &e), SP_OK);
    assert_int_equal(load_from(path, &t, &e), SP_OK);
    sp_tokenizer_free(t);
    remove(path);
}

/* The end-of-generation ids of a vocabulary file: eos, eot and eom from
 * the metadata plus the control tokens llama.cpp ends generation at by name. */
static int eog_ids(const char *path, const char *key, uint32_t id, int32_t *ids, int cap) {
    sp_error e = {0};
    sp_gguf *g = NULL;
    sp_tokenizer *t = NULL;
    if (sp_gguf_open(path, &g, &e)) fail_msg("%s", e.msg);
    if (key) { /* a copy with one id key set */
        char out[512];
        snprintf(out, sizeof out, "%s/eog_%d.gguf", sp_tmpdir(), (int)getpid());
        sp_gguf_writer *w = sp_gguf_writer_init();
        sp_gguf_writer_copy_kv(w, g, NULL);
        sp_gguf_writer_set_u32(w, key, id);
        if (sp_gguf_writer_write(w, out, &e)) fail_msg("%s", e.msg);
        sp_gguf_writer_free(w);
        sp_gguf_close(g);
        if (sp_gguf_open(out, &g, &e)) fail_msg("%s", e.msg);
    }
    if (sp_tokenizer_load_gguf(g, &t, &e)) fail_msg("%s", e.msg);
    int n = 0;
    for (int32_t i = 0; i < sp_tokenizer_n_vocab(t); i++)
        if (sp_tokenizer_is_eog(t, i) && n < cap) ids[n++] = i;
    sp_tokenizer_free(t);
    sp_gguf_close(g);
    return n;
}

static void test_eog_sets(void **state) {
    (void)state;
    const char *l3 = sp_shared("reference/tokenizers/llama3-vocab.gguf");
    int32_t ids[8];
    /* Llama 3: eos <|end_of_text|> 128001, <|eom_id|> 128008, <|eot_id|> 128009 */
    const int32_t want_l3[] = {128001, 128008, 128009};
    assert_int_equal(eog_ids(l3, NULL, 0, ids, 8), 3);
    assert_memory_equal(ids, want_l3, sizeof want_l3);
    /* as Llama 3 Instruct files declare it (eos = <|eot_id|>): the same set,
     * <|end_of_text|> by its name */
    assert_int_equal(eog_ids(l3, "tokenizer.ggml.eos_token_id", 128009, ids, 8), 3);
    assert_memory_equal(ids, want_l3, sizeof want_l3);
    /* an eot id from the metadata joins them, whatever its type */
    const int32_t want_eot[] = {9906, 128001, 128008, 128009};
    assert_int_equal(eog_ids(l3, "tokenizer.ggml.eot_token_id", 9906, ids, 8), 4);
    assert_memory_equal(ids, want_eot, sizeof want_eot);
    /* Qwen3: <|endoftext|> 151643 and eos <|im_end|> 151645 */
    const int32_t want_q3[] = {151643, 151645};
    assert_int_equal(eog_ids(sp_shared("reference/tokenizers/qwen3-vocab.gguf"), NULL, 0, ids, 8), 2);
    assert_memory_equal(ids, want_q3, sizeof want_q3);
    /* gpt-oss (o200k_harmony), as llama.cpp de3ff81's llama_vocab_is_eog
     * gives it: <|endoftext|> 199999, <|return|> 200002, <|call|> 200012;
     * <|end|> 200007 ends a harmony message, not the run */
    const char *go = sp_shared("reference/tokenizers/gptoss-vocab.gguf");
    const int32_t want_go[] = {199999, 200002, 200012};
    assert_int_equal(eog_ids(go, NULL, 0, ids, 8), 3);
    assert_memory_equal(ids, want_go, sizeof want_go);
}

/* llama.cpp's harmony rule: <|start|>, <|message|>, <|channel|>,
 * <|constrain|> and <|end|> are matched in plain text (user-defined), other
 * control tokens (<|return|>) only when specials are parsed. */
static void test_harmony_user_defined(void **state) {
    (void)state;
    sp_gguf *g = NULL;
    sp_tokenizer *t = NULL;
    sp_error err = {0};
    assert_int_equal(sp_gguf_open(sp_shared("reference/tokenizers/gptoss-vocab.gguf"), &g, &err), SP_OK);
    assert_int_equal(sp_tokenizer_load_gguf(g, &t, &err), SP_OK);
    const char *s = "<|start|>user<|message|>hi<|end|><|return|>";
    int32_t ids[64], n = 0;
    assert_int_equal(sp_tokenizer_encode(t, s, strlen(s), false, ids, 64, &n, &err), SP_OK);
    /* llama_tokenize(parse_special false): 200006 1428 200008 3686 200007 27 91 1034 91 29 */
    const int32_t want[] = {200006, 1428, 200008, 3686, 200007, 27, 91, 1034, 91, 29};
    assert_int_equal(n, 10);
    assert_memory_equal(ids, want, sizeof want);
    sp_tokenizer_free(t);
    sp_gguf_close(g);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_l2c_prompt_ids),      cmocka_unit_test(test_l2c_reference_decode),
    cmocka_unit_test(test_l2c_roundtrip_sample), cmocka_unit_test(test_l2c_byte_fallback),
    cmocka_unit_test(test_l2c_cap_and_errors),  cmocka_unit_test(test_gguf_spm_reference),
    cmocka_unit_test(test_gguf_agrees_with_l2c), cmocka_unit_test(test_harmony_user_defined),
    cmocka_unit_test(test_spm_invalid_lead_before_space),
    cmocka_unit_test(test_unicode_classes), cmocka_unit_test(test_bpe_byte_map),
    cmocka_unit_test(test_bpe_merges_by_rank),  cmocka_unit_test(test_bpe_pretokenize),
    cmocka_unit_test(test_bpe_byte_roundtrip),  cmocka_unit_test(test_bpe_user_defined),
    cmocka_unit_test(test_spec_errors),
    cmocka_unit_test(test_gguf_bpe),        cmocka_unit_test(test_eog_sets),        };
SP_TEST_MAIN(tests)
