/* End-to-end tests of `specula verify-sim`: JSON output fields and values,
 * and exit code 2 with one stderr line for every bad flag. The binary is
 * found as ../specula next to the test binary's directory (build/tests ->
 * build/specula, build-san/tests -> build-san/specula). */
#include "cli_testutil.h"

#include <math.h>

/* `specula verify-sim ARGS`, capturing stdout or (stderr_only) stderr. */
static int run_cli(const char *args, int stderr_only, char *buf, size_t cap) {
    char full[4096];
    snprintf(full, sizeof full, "verify-sim %s", args);
    return cli_run(full, stderr_only ? SP_CAPTURE_STDERR : SP_CAPTURE_STDOUT, buf, cap);
}

static json_t *run_json(const char *args) {
    static char buf[65536];
    assert_int_equal(run_cli(args, 0, buf, sizeof buf), 0);
    assert_int_equal(sp_count_lines(buf), 1);
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    if (!j) fprintf(stderr, "bad JSON: %s\n%s\n", je.text, buf);
    assert_non_null(j);
    return j;
}


static void test_json_toy(void **state) {
    (void)state;
    json_t *j = run_json("--verifier block --p 0.3333,0.6667 --q 0.6667,0.3333 --gamma 2 "
                         "--trials 200000 --seed 3 --json");
    assert_string_equal(json_string_value(json_object_get(j, "verifier")), "block");
    assert_int_equal((int)sp_json_num(j, "gamma"), 2);
    assert_int_equal((int)sp_json_num(j, "trials"), 200000);
    double ma = sp_json_num(j, "mean_accepted");
    /* 11/9 with p, q = 0.3333/0.6667 (not exactly thirds): within 0.01 */
    assert_true(fabs(ma - 11.0 / 9) < 0.01);
    assert_true(fabs(sp_json_num(j, "block_efficiency") - (ma + 1)) < 1e-12);
    json_t *h = json_object_get(j, "accept_hist");
    assert_true(json_is_array(h));
    assert_int_equal(json_array_size(h), 3);
    long sum = 0;
    double msum = 0;
    for (size_t i = 0; i < 3; i++) {
        sum += (long)json_integer_value(json_array_get(h, i));
        msum += (double)i * (double)json_integer_value(json_array_get(h, i));
    }
    assert_int_equal(sum, 200000);
    assert_true(fabs(msum / 200000 - ma) < 1e-12);
    assert_int_equal((int)sp_json_num(j, "dof"), 7);
    assert_true(sp_json_num(j, "chi2") >= 0);
    assert_true(sp_json_num(j, "p_value") > 1e-4);
    json_decref(j);
}

static void test_json_markov_tree_lenient(void **state) {
    (void)state;
    json_t *j = run_json("--verifier mc-norep --markov 5 --tree 2x2 --trials 5000 --seed 2 --temp 2 --json");
    assert_string_equal(json_string_value(json_object_get(j, "verifier")), "mc-norep");
    assert_int_equal((int)sp_json_num(j, "gamma"), 2);
    assert_true(sp_json_num(j, "p_value") > 1e-4);
    json_decref(j);
    j = run_json("--verifier mc --markov 4 --candidates 3 --gamma 3 --trials 5000 --json");
    assert_int_equal(json_array_size(json_object_get(j, "accept_hist")), 4);
    json_decref(j);
    j = run_json("--verifier greedy --markov 6 --gamma 4 --temp 0 --trials 1000 --json");
    assert_true(sp_json_num(j, "p_value") == 1.0);
    json_decref(j);
    /* the lossy verifier is caught */
    j = run_json("--verifier lenient --lenience 0.5 --p 0.3333,0.6667 --q 0.6667,0.3333 --gamma 2 "
                 "--trials 20000 --json");
    assert_true(sp_json_num(j, "p_value") < 1e-4);
    json_decref(j);
}

static void test_text_output(void **state) {
    (void)state;
    static char buf[65536];
    assert_int_equal(run_cli("--verifier token --markov 16 --gamma 8 --trials 2000", 0, buf, sizeof buf), 0);
    assert_non_null(strstr(buf, "mean accepted"));
    assert_non_null(strstr(buf, "marginal")); /* 16^9 cells: says it checks a marginal */
    assert_non_null(strstr(buf, "p-value"));
}

static void test_bad_flags(void **state) {
    (void)state;
    static const char *bad[] = {
        "--verifier fast",
        "--verifier",
        "--gamma 0",
        "--gamma 65",
        "--gamma 3x",
        "--markov 1",
        "--markov 100000",
        "--trials -1",
        "--trials 0",
        "--p 0.5,abc --q 0.5,0.5",
        "--p 0.5,0.2 --q 0.5,0.5",
        "--p 0.5,0.5 --q 0.5,0.25,0.25",
        "--p 0.5,0.5",
        "--p ,, --q 0.5,0.5",
        "--p 1 --q 1",
        "--p nan,0.5 --q 0.5,0.5",
        "--verifier mc --tree 2x",
        "--verifier mc --tree 0x2",
        "--verifier mc --tree 64x64",
        "--verifier token --tree 2x2",
        "--verifier token --candidates 2",
        "--verifier mc --candidates 500 --gamma 8",
        "--verifier lenient --lenience 0",
        "--verifier lenient --lenience 1.5",
        "--temp -1",
        "--temp inf",
        "--seed -3",
        "--markov 4 --p 0.5,0.5 --q 0.5,0.5",
        "--bogus",
    };
    char buf[4096];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run_cli(bad[i], 1, buf, sizeof buf);
        if (rc != 2 || sp_count_lines(buf) != 1) fprintf(stderr, "args '%s': rc %d stderr '%s'\n", bad[i], rc, buf);
        assert_int_equal(rc, 2);
        assert_int_equal(sp_count_lines(buf), 1);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_json_toy),
    cmocka_unit_test(test_json_markov_tree_lenient),
    cmocka_unit_test(test_text_output),
    cmocka_unit_test(test_bad_flags),
};
SP_TEST_MAIN(tests)
