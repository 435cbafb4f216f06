/* End-to-end tests of `specula logits` and `specula generate --prompt-ids`:
 * llama.cpp's logits and greedy ids (../shared/reference/arch2026) through
 * the CLI for a model without a tokenizer, the --json form, prompt ids on a
 * model with a tokenizer, and one stderr line with a non-zero exit for every
 * kind of bad input. */
#include "cli_testutil.h"

#include <math.h>

static const char *model_path(void) {
    return sp_shared("reference/arch2026/models/llama-dense-f16.gguf");
}

/* seqA of the references as "5,17,99,...". */
static const char *seq_a(void) {
    static char buf[256];
    FILE *f = fopen(sp_shared("reference/arch2026/logits/seqA.ids"), "r");
    if (!f) fail_msg("missing seqA.ids");
    int v, n = 0;
    size_t len = 0;
    while (fscanf(f, "%d", &v) == 1) len += (size_t)snprintf(buf + len, sizeof buf - len, n++ ? ",%d" : "%d", v);
    fclose(f);
    assert_int_equal(n, 16);
    return buf;
}

static char *read_text(const char *rel) {
    FILE *f = fopen(sp_shared(rel), "r");
    if (!f) fail_msg("missing reference file %s", sp_shared(rel));
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_logits_text_and_json(void **state) {
    (void)state;
    static char out[1 << 17], args[2048];
    snprintf(args, sizeof args, "logits -m '%s' --ids %s -t 2", model_path(), seq_a());
    assert_int_equal(sp_cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_int_equal(sp_count_lines(out), 16);
    const char *want = read_text("reference/arch2026/logits/llama-dense-f16.seqA.logits.txt");
    /* every value within 1e-4 of llama.cpp's (these logits are below 1) */
    float text_vals[16 * 128];
    const char *p = out, *q = want;
    for (int i = 0; i < 16 * 128; i++) {
        char *e1, *e2;
        const float g = strtof(p, &e1), w = strtof(q, &e2);
        if (e1 == p || e2 == q) fail_msg("value %d missing", i);
        assert_true(fabsf(g - w) <= 1e-4f);
        text_vals[i] = g;
        p = e1, q = e2;
    }
    snprintf(args, sizeof args, "logits -m '%s' --ids %s --json", model_path(), seq_a());
    assert_int_equal(sp_cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_int_equal(sp_count_lines(out), 1);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("bad JSON (%s)", je.text);
    json_t *rows = json_object_get(j, "logits");
    assert_int_equal(json_array_size(rows), 16);
    for (int t = 0; t < 16; t++) {
        json_t *row = json_array_get(rows, (size_t)t);
        assert_int_equal(json_array_size(row), 128);
        for (int v = 0; v < 128; v++) {
            const double x = json_number_value(json_array_get(row, (size_t)v));
            assert_true(fabs(x - text_vals[t * 128 + v]) <= 1e-5 * fmax(1.0, fabs(x)));
        }
    }
    json_decref(j);
}

static void test_prompt_ids(void **state) {
    (void)state;
    static char out[1 << 16], args[2048];
    /* a test-vocabulary model: the ids, llama.cpp's greedy continuation */
    snprintf(args, sizeof args, "generate -m '%s' --prompt-ids %s -n 32 --temp 0", model_path(), seq_a());
    assert_int_equal(sp_cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    const char *want = read_text("reference/arch2026/logits/llama-dense-f16.seqA.greedy32.txt");
    assert_string_equal(out, want);
    snprintf(args, sizeof args, "generate -m '%s' --prompt-ids %s -n 32 --temp 0 --json", model_path(), seq_a());
    assert_int_equal(sp_cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    assert_int_equal((int)sp_json_num(j, "n_prompt"), 16);
    json_t *toks = json_object_get(j, "tokens");
    assert_int_equal(json_array_size(toks), 32);
    char *w = (char *)want;
    for (int i = 0; i < 32; i++)
        assert_int_equal(json_integer_value(json_array_get(toks, (size_t)i)), strtol(w, &w, 10));
    json_decref(j);
    /* a model with a tokenizer: ids as given (BOS included by the caller),
     * the text as from the same prompt written out */
    static char ref[1 << 16];
    snprintf(args, sizeof args, "generate -m '%s' -p 'Once upon a time' -n 24 --temp 0",
             sp_shared("models/stories260K.gguf"));
    assert_int_equal(sp_cli_run(args, SP_CAPTURE_STDOUT, ref, sizeof ref), 0);
    snprintf(args, sizeof args, "generate -m '%s' --prompt-ids 1,403,407,261,378 -n 24 --temp 0",
             sp_shared("models/stories260K.gguf"));
    assert_int_equal(sp_cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    assert_true(strlen(out) > 20);
    assert_string_equal(out, ref + strlen("Once upon a time"));
}

static void test_bad_input(void **state) {
    (void)state;
    static const char *BAD[] = {
        "logits -m '%s' --ids 5,x,7",        "logits -m '%s' --ids 5,128",
        "logits -m '%s' --ids ''",           "logits -m '%s' --ids 5,,7",
        "logits -m '%s' --ids -3",           "logits -m '%s' --ids 1,2,3,4,5 -c 4",
        "logits -m '%s'",                    "logits -m '%s' --ids 99999999999",
        "generate -m '%s' --prompt-ids 1,x", "generate -m '%s' --prompt-ids 130",
        "generate -m '%s' -p hello",         "generate -m '%s' --prompt-ids 1 -p hello",
        "generate -m '%s' --prompt-ids 1,2,3,4,5 -c 4 -n 1",
    };
    static char out[8192], args[2048];
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        snprintf(args, sizeof args, BAD[i], model_path());
        int rc = sp_cli_run(args, SP_CAPTURE_STDERR, out, sizeof out);
        if (rc == 0 || sp_count_lines(out) != 1 || strncmp(out, "specula: ", 9))
            fail_msg("'%s': exit %d, stderr '%s'", BAD[i], rc, out);
    }
    snprintf(args, sizeof args, "logits -m '%s' --ids 1", sp_shared("no/such/model.gguf"));
    assert_int_not_equal(sp_cli_run(args, SP_CAPTURE_STDERR, out, sizeof out), 0);
    assert_int_equal(sp_count_lines(out), 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_logits_text_and_json),
    cmocka_unit_test(test_prompt_ids),
    cmocka_unit_test(test_bad_input),
};

SP_TEST_MAIN(tests)
