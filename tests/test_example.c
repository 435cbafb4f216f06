/* Runs examples/simple (built by `make check` into BUILD/examples) on the
 * shared stories260K: speculating with the model as its own draft at
 * temperature 0, it prints exactly the text plain greedy decoding gives
 * (`specula generate --draft none --temp 0`, the same prompt and budget),
 * every draft token is accepted, and a missing model is one error line
 * and exit 1. */
#include "cli_testutil.h"

static const char *example_bin(void) {
    static char bin[1100];
    const char *cli = cli_bin(); /* BUILD/tests/../specula */
    snprintf(bin, sizeof bin, "%.*s/examples/simple", (int)(strrchr(cli, '/') - cli), cli);
    return bin;
}

static int run(const char *args, int capture, char *buf, size_t cap) {
    return bin_run(example_bin(), args, capture, buf, cap);
}

static void test_simple_matches_greedy(void **state) {
    (void)state;
    const char *m = sp_shared("models/stories260K.gguf");
    char args[2048], got[8192], want[8192], info[1024];
    snprintf(args, sizeof args, "'%s' '%s' 'Once upon a time' 40", m, m);
    assert_int_equal(run(args, SP_CAPTURE_STDOUT, got, sizeof got), 0);
    assert_int_equal(run(args, SP_CAPTURE_STDERR, info, sizeof info), 0);
    snprintf(args, sizeof args, "generate -m '%s' -p 'Once upon a time' -n 40 --temp 0 --draft none", m);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, want, sizeof want), 0);
    printf("simple: %s%s", got, info);
    assert_true(strlen(got) > strlen("Once upon a time") + 20);
    assert_string_equal(got, want);
    assert_non_null(strstr(info, "40 tokens"));
    assert_non_null(strstr(info, "100% of draft tokens accepted"));
}

static void test_simple_bad_model(void **state) {
    (void)state;
    char err[1024];
    assert_int_equal(run("/nonexistent/model.gguf /nonexistent/model.gguf", SP_CAPTURE_STDERR, err,
                         sizeof err), 1);
    assert_non_null(strstr(err, "simple: "));
    assert_int_equal(sp_count_lines(err), 1);
    assert_int_equal(run("", SP_CAPTURE_STDERR, err, sizeof err), 2);
    assert_non_null(strstr(err, "usage"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_simple_matches_greedy),
    cmocka_unit_test(test_simple_bad_model),
};

SP_TEST_MAIN(tests)
