/* `specula tokenize`: ids of a text on a full model, a vocabulary-only GGUF
 * (the real Llama 3 and Qwen3 vocabularies) and a llama2.c checkpoint;
 * special-token parsing on request; bad inputs give one line and exit 1/2. */
#include "cli_testutil.h"

static void test_tokenize_cli(void **state) {
    (void)state;
    char cmd[2048], out[8192];
    /* stories260K: llama.cpp's ids for "Once upon a time" (BOS first) */
    snprintf(cmd, sizeof cmd, "tokenize -m '%s' -p 'Once upon a time' --ids", sp_shared("models/stories260K.gguf"));
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_string_equal(out, "[1, 403, 407, 261, 378]\n");
    snprintf(cmd, sizeof cmd, "tokenize -m '%s' -p 'Once upon a time'", sp_shared("models/stories260K.gguf"));
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_non_null(strstr(out, "   407 -> ' upon'\n"));
    /* the llama2.c checkpoint with its tokenizer.bin gives the same ids */
    snprintf(cmd, sizeof cmd, "tokenize -m '%s' -z '%s' -p 'Once upon a time' --ids",
             sp_shared("models/stories260K.bin"), sp_shared("models/tok512.bin"));
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_string_equal(out, "[1, 403, 407, 261, 378]\n");
    /* a vocabulary-only GGUF; a control token's text is plain text unless
     * --special is given, then it is the single token */
    const char *l3 = sp_shared("reference/tokenizers/llama3-vocab.gguf");
    snprintf(cmd, sizeof cmd, "tokenize -m '%s' -p '<|begin_of_text|>Hello world' --ids --no-bos", l3);
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_string_equal(out, "[27, 91, 7413, 3659, 4424, 91, 29, 9906, 1917]\n");
    snprintf(cmd, sizeof cmd, "tokenize -m '%s' -p '<|begin_of_text|>Hello world' --ids --no-bos --special", l3);
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_string_equal(out, "[128000, 9906, 1917]\n");
    snprintf(cmd, sizeof cmd, "tokenize -m '%s' -p '<|im_start|>user' --special --ids",
             sp_shared("reference/tokenizers/qwen3-vocab.gguf"));
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_string_equal(out, "[151644, 872]\n");
    /* --json: ids with their pieces */
    snprintf(cmd, sizeof cmd, "tokenize -m '%s' -p '<|im_start|>user' --special --json",
             sp_shared("reference/tokenizers/qwen3-vocab.gguf"));
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_string_equal(out, "{\"ids\":[151644,872],\"pieces\":[\"<|im_start|>\",\"user\"]}\n");
    /* every vocabulary of the reference folder tokenises */
    static const char *vocabs[] = {"ggml-vocab-deepseek-coder.gguf", "ggml-vocab-deepseek-llm.gguf",
                                   "ggml-vocab-falcon.gguf", "ggml-vocab-gpt-2.gguf",
                                   "ggml-vocab-llama-spm.gguf", "ggml-vocab-mpt.gguf",
                                   "ggml-vocab-phi-3.gguf", "ggml-vocab-refact.gguf",
                                   "ggml-vocab-starcoder.gguf"};
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "reference/tokenizers/%s", vocabs[i]);
        snprintf(cmd, sizeof cmd, "tokenize -m '%s' -p 'Hello world' --ids", sp_shared(rel));
        if (cli_run(cmd, SP_CAPTURE_STDOUT, out, sizeof out) != 0 || out[0] != '[')
            fail_msg("%s: %s", vocabs[i], out);
    }
    /* bad inputs */
    static const struct { const char *args; int rc; const char *msg; } bad[] = {
        {"tokenize -p x", 2, "needs a model"},
        {"tokenize -m /tmp -p x", 1, "is a directory"},
        {"tokenize -m /nonexistent.gguf -p x", 1, "cannot open"},
        {"tokenize -m x.gguf", 2, "exactly one of"},
        {"tokenize -m x.gguf -p a -f b", 2, "exactly one of"},
        {"tokenize --bogus", 2, "unknown option"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cli_run(bad[i].args, SP_CAPTURE_STDERR, out, sizeof out);
        if (rc != bad[i].rc || !strstr(out, bad[i].msg) || sp_count_lines(out) != 1)
            fail_msg("'%s': rc %d, stderr '%s'", bad[i].args, rc, out);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_tokenize_cli),
};

SP_TEST_MAIN(tests)
