/* Statistical end-to-end tests of the verifiers through the sp_vsim outer
 * loop: the toy example's acceptance figures, chi-square losslessness on
 * random Markov chains (significance 1e-4, fixed seeds), lenient failing the
 * check, trees, and block >= token. */
#include "testutil.h"

#include <math.h>

#include "vsim_testutil.h"

#define ALPHA 1e-4

#if defined(__SANITIZE_ADDRESS__)
#define SP_SAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SP_SAN 1
#endif
#endif
#ifndef SP_SAN
#define SP_SAN 0
#endif

static sp_vsim_result run(const sp_vsim_model *m, sp_verifier v, int gamma, int cand,
                          const sp_tree_shape *tree, long trials, uint64_t seed) {
    sp_vsim_params prm = sp_vsim_default_params();
    prm.verifier = v;
    prm.gamma = gamma;
    prm.candidates = cand;
    prm.tree = tree;
    prm.trials = trials;
    prm.seed = seed;
    prm.lenience = 0.5;
    sp_vsim_result r;
    sp_error e = {0};
    sp_status st = sp_vsim_run(m, &prm, &r, &e);
    if (st) fprintf(stderr, "sim failed: %s\n", e.msg);
    assert_int_equal(st, SP_OK);
    return r;
}


/* ALGORITHMS.md section 3: 10/9 (token) and 11/9 (block) accepted tokens,
 * within 0.005 at 10^6 trials (std error ~0.0009, so > 5 sigma margin);
 * 3*10^5 trials under the sanitizers with the same 0.005 bound (~3 sigma). */
static void test_toy_figures(void **state) {
    (void)state;
    const double p[2] = {1.0 / 3, 2.0 / 3}, q[2] = {2.0 / 3, 1.0 / 3};
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_context_free(&m, 2, p, q, NULL), SP_OK);
    long N = SP_SAN ? 300000 : 1000000;
    sp_vsim_result t = run(&m, SP_VERIFIER_TOKEN, 2, 0, NULL, N, 1);
    sp_vsim_result b = run(&m, SP_VERIFIER_BLOCK, 2, 0, NULL, N, 2);
    assert_true(fabs(t.mean_accepted - 10.0 / 9) < 0.005);
    assert_true(fabs(b.mean_accepted - 11.0 / 9) < 0.005);
    assert_true(t.exact && b.exact);
    assert_true(t.p_value > ALPHA);
    assert_true(b.p_value > ALPHA);
    sp_vsim_model_free(&m);
}

/* Every lossless verifier passes the chi-square test on random Markov chains
 * (V 2..16, gamma 1..8, temperatures 0.5, 1, 2), and block's mean accepted
 * length is never below token's by more than 4 standard errors. */
static void test_markov_lossless(void **state) {
    (void)state;
    static const struct {
        int V, gamma;
        unsigned seed;
        double temp;
    } cfg[] = {
        {2, 1, 1, 1.0}, {2, 8, 2, 0.5}, {3, 3, 3, 2.0}, {4, 4, 4, 1.0},
        {5, 2, 5, 0.5}, {8, 5, 6, 2.0}, {16, 2, 7, 1.0}, {16, 8, 8, 0.5},
    };
    static const sp_verifier lossless[] = {SP_VERIFIER_TOKEN, SP_VERIFIER_BLOCK, SP_VERIFIER_MC,
                                           SP_VERIFIER_MC_NOREP, SP_VERIFIER_NAIVE};
    const long N = 12000;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sp_vsim_model m;
        assert_int_equal(sp_vsim_model_markov(&m, cfg[c].V, cfg[c].seed, NULL), SP_OK);
        assert_int_equal(sp_vsim_model_temperature(&m, cfg[c].temp, NULL), SP_OK);
        sp_vsim_result r[5];
        for (size_t v = 0; v < 5; v++) {
            r[v] = run(&m, lossless[v], cfg[c].gamma, 2, NULL, N, 100 + c * 10 + v);
            if (r[v].p_value <= ALPHA)
                fprintf(stderr, "V=%d gamma=%d T=%g %s: chi2 %g dof %d p %g\n", cfg[c].V, cfg[c].gamma,
                        cfg[c].temp, sp_verifier_name(lossless[v]), r[v].chi2, r[v].dof, r[v].p_value);
            assert_true(r[v].p_value > ALPHA);
            assert_int_equal(r[v].impossible, 0);
            assert_true(r[v].dof > 0 || cfg[c].V == 2);
        }
        double se = sqrt((acc_var(&r[0]) + acc_var(&r[1])) / N);
        assert_true(r[1].mean_accepted >= r[0].mean_accepted - 4 * se);
        sp_vsim_model_free(&m);
    }
}

/* At temperature 0 (argmax models) greedy, token and block are all lossless:
 * every emitted sequence is the target's greedy chain. */
static void test_markov_temp0(void **state) {
    (void)state;
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_markov(&m, 6, 9, NULL), SP_OK);
    assert_int_equal(sp_vsim_model_temperature(&m, 0.0, NULL), SP_OK);
    static const sp_verifier vs[] = {SP_VERIFIER_GREEDY, SP_VERIFIER_TOKEN, SP_VERIFIER_BLOCK,
                                     SP_VERIFIER_MC_NOREP};
    for (size_t v = 0; v < 4; v++) {
        sp_vsim_result r = run(&m, vs[v], 4, 1, NULL, 2000, 3);
        assert_int_equal(r.impossible, 0);
        assert_int_equal(r.dof, 0);
        assert_true(r.p_value == 1.0);
    }
    sp_vsim_model_free(&m);
}

/* Block verification strictly beats token verification where the paper says
 * it should (gamma 8, T = 1), by more than 4 standard errors. */
static void test_block_beats_token(void **state) {
    (void)state;
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_markov(&m, 8, 1, NULL), SP_OK);
    const long N = 20000;
    sp_vsim_result t = run(&m, SP_VERIFIER_TOKEN, 8, 0, NULL, N, 1);
    sp_vsim_result b = run(&m, SP_VERIFIER_BLOCK, 8, 0, NULL, N, 2);
    double se = sqrt((acc_var(&t) + acc_var(&b)) / N);
    assert_true(b.mean_accepted > t.mean_accepted + 4 * se);
    sp_vsim_model_free(&m);
}

/* The check has teeth: lenient verification (l = 0.5, lossy) fails it on the
 * toy model and on a Markov chain, while token verification on the same
 * models and seeds passes. */
static void test_lenient_fails(void **state) {
    (void)state;
    const double p[2] = {1.0 / 3, 2.0 / 3}, q[2] = {2.0 / 3, 1.0 / 3};
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_context_free(&m, 2, p, q, NULL), SP_OK);
    sp_vsim_result l = run(&m, SP_VERIFIER_LENIENT, 2, 0, NULL, 20000, 1);
    sp_vsim_result t = run(&m, SP_VERIFIER_TOKEN, 2, 0, NULL, 20000, 1);
    assert_true(l.p_value < ALPHA);
    assert_true(t.p_value > ALPHA);
    assert_true(l.mean_accepted > t.mean_accepted);
    sp_vsim_model_free(&m);
    assert_int_equal(sp_vsim_model_markov(&m, 4, 3, NULL), SP_OK);
    l = run(&m, SP_VERIFIER_LENIENT, 3, 0, NULL, 20000, 1);
    t = run(&m, SP_VERIFIER_TOKEN, 3, 0, NULL, 20000, 1);
    assert_true(l.p_value < ALPHA);
    assert_true(t.p_value > ALPHA);
    sp_vsim_model_free(&m);
}

/* Tree verification on 2x2 and 3x2 trees, with and without replacement (and
 * the naive baseline): the first depth+1 emitted tokens are distributed as the
 * target's (exact enumeration of all V^3 sequences). Without replacement
 * accepts at least as much as with replacement (4 standard errors). */
static void test_tree_lossless(void **state) {
    (void)state;
    static const char *shapes[] = {"2x2", "3x2"};
    static const double temps[] = {1.0, 2.0};
    const long N = 15000;
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 2; t++) {
            sp_tree_shape sh;
            assert_int_equal(sp_tree_shape_parse(shapes[s], &sh, NULL), SP_OK);
            sp_vsim_model m;
            assert_int_equal(sp_vsim_model_markov(&m, 5, 20 + s * 2 + t, NULL), SP_OK);
            assert_int_equal(sp_vsim_model_temperature(&m, temps[t], NULL), SP_OK);
            sp_vsim_result rep = run(&m, SP_VERIFIER_MC, 0, 0, &sh, N, 1);
            sp_vsim_result nor = run(&m, SP_VERIFIER_MC_NOREP, 0, 0, &sh, N, 2);
            sp_vsim_result nai = run(&m, SP_VERIFIER_NAIVE, 0, 0, &sh, N, 3);
            assert_int_equal(rep.depth, 2);
            assert_true(rep.exact && nor.exact && nai.exact);
            assert_true(rep.p_value > ALPHA);
            assert_true(nor.p_value > ALPHA);
            assert_true(nai.p_value > ALPHA);
            double se = sqrt((acc_var(&rep) + acc_var(&nor)) / N);
            assert_true(nor.mean_accepted >= rep.mean_accepted - 4 * se);
            sp_vsim_model_free(&m);
        }
}

static void test_sim_bad_params(void **state) {
    (void)state;
    sp_vsim_model m;
    sp_error e;
    assert_int_equal(sp_vsim_model_markov(&m, 1, 1, &e), SP_ERR_ARG);
    assert_int_equal(sp_vsim_model_markov(&m, SP_VSIM_MAX_VOCAB + 1, 1, &e), SP_ERR_ARG);
    const double bad[2] = {0.5, 0.2}, good[2] = {0.5, 0.5}, neg[2] = {1.5, -0.5};
    assert_int_equal(sp_vsim_model_context_free(&m, 2, bad, good, &e), SP_ERR_ARG);
    assert_int_equal(sp_vsim_model_context_free(&m, 2, good, neg, &e), SP_ERR_ARG);
    assert_int_equal(sp_vsim_model_markov(&m, 3, 1, &e), SP_OK);
    assert_int_equal(sp_vsim_model_temperature(&m, -1, &e), SP_ERR_ARG);
    assert_int_equal(sp_vsim_model_temperature(&m, NAN, &e), SP_ERR_ARG);
    sp_vsim_params p = sp_vsim_default_params();
    sp_vsim_result r;
    p.gamma = 0;
    assert_int_equal(sp_vsim_run(&m, &p, &r, &e), SP_ERR_ARG);
    p.gamma = SP_VERIFY_MAX_GAMMA + 1;
    assert_int_equal(sp_vsim_run(&m, &p, &r, &e), SP_ERR_ARG);
    p = sp_vsim_default_params();
    p.trials = 0;
    assert_int_equal(sp_vsim_run(&m, &p, &r, &e), SP_ERR_ARG);
    p = sp_vsim_default_params();
    sp_tree_shape sh;
    assert_int_equal(sp_tree_shape_parse("2x2", &sh, &e), SP_OK);
    p.tree = &sh; /* a tree with a chain verifier */
    assert_int_equal(sp_vsim_run(&m, &p, &r, &e), SP_ERR_ARG);
    p = sp_vsim_default_params();
    p.verifier = SP_VERIFIER_MC;
    p.candidates = 200;
    p.gamma = 8;
    assert_int_equal(sp_vsim_run(&m, &p, &r, &e), SP_ERR_ARG);
    sp_vsim_model_free(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_toy_figures),    cmocka_unit_test(test_markov_lossless),
    cmocka_unit_test(test_markov_temp0),   cmocka_unit_test(test_block_beats_token),
    cmocka_unit_test(test_lenient_fails),  cmocka_unit_test(test_tree_lossless),
    cmocka_unit_test(test_sim_bad_params),
};
SP_TEST_MAIN(tests)
