/* Traversal verification and GBV (sp_verify_tree_traversal): the exact toy
 * figures (expected accepted tokens computed by enumerating every draft tree
 * with rational weights, see verify.h), chi-square losslessness through
 * the sp_vsim outer loop on random Markov chains (significance 1e-4, fixed
 * seeds, temperatures 0, 0.5, 1, 2), the papers' direction (GBV >= block
 * verification with the same first path, traversal >= multi-candidate on the
 * same trees), and bad input. */
#include "testutil.h"

#include <math.h>

#include "vsim_testutil.h"

#define ALPHA 1e-4

static sp_vsim_result run(const sp_vsim_model *m, sp_verifier v, int gamma, int cand,
                          const char *tree, long trials, uint64_t seed) {
    sp_vsim_params prm = sp_vsim_default_params();
    sp_tree_shape sh;
    prm.verifier = v;
    prm.gamma = gamma;
    prm.candidates = cand;
    if (tree) {
        assert_int_equal(sp_tree_shape_parse(tree, &sh, NULL), SP_OK);
        prm.tree = &sh;
    }
    prm.trials = trials;
    prm.seed = seed;
    sp_vsim_result r;
    sp_error e = {0};
    sp_status st = sp_vsim_run(m, &prm, &r, &e);
    if (st) fprintf(stderr, "sim failed: %s\n", e.msg);
    assert_int_equal(st, SP_OK);
    return r;
}


/* |mean - exact| within 5 standard errors, and the chi-square check passes. */
static void near_exact(const sp_vsim_result *r, double exact, const char *what) {
    double se = sqrt(acc_var(r) / (double)r->trials);
    if (!(fabs(r->mean_accepted - exact) < 5 * se + 1e-9))
        fail_msg("%s: mean accepted %.5f, exact %.5f (se %.5f)", what, r->mean_accepted, exact, se);
    assert_true(r->exact);
    assert_true(r->p_value > ALPHA);
}

/* The toy of ALGORITHMS.md section 3 (Mb = (1/3, 2/3), Ms = (2/3, 1/3),
 * depth 2). Exact expected accepted tokens by enumeration: traversal on a
 * chain = block = 11/9; gbv K=2 38/27 vs mc 35/27; gbv K=3 124/81 vs mc
 * 115/81; traversal on 2x1 16/9 vs mc-norep 15/9. */
static void test_toy_exact(void **state) {
    (void)state;
    const double p[2] = {1.0 / 3, 2.0 / 3}, q[2] = {2.0 / 3, 1.0 / 3};
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_context_free(&m, 2, p, q, NULL), SP_OK);
    const long N = 200000;
    sp_vsim_result r;
    r = run(&m, SP_VERIFIER_TRAVERSAL, 0, 0, "1x1", N, 1);
    near_exact(&r, 11.0 / 9, "traversal 1x1");
    r = run(&m, SP_VERIFIER_GBV, 2, 1, NULL, N, 2);
    near_exact(&r, 11.0 / 9, "gbv K=1");
    r = run(&m, SP_VERIFIER_GBV, 2, 2, NULL, N, 3);
    near_exact(&r, 38.0 / 27, "gbv K=2");
    r = run(&m, SP_VERIFIER_MC, 2, 2, NULL, N, 4);
    near_exact(&r, 35.0 / 27, "mc K=2");
    r = run(&m, SP_VERIFIER_GBV, 2, 3, NULL, N, 5);
    near_exact(&r, 124.0 / 81, "gbv K=3");
    r = run(&m, SP_VERIFIER_MC, 2, 3, NULL, N, 6);
    near_exact(&r, 115.0 / 81, "mc K=3");
    r = run(&m, SP_VERIFIER_TRAVERSAL, 0, 0, "2x1", N, 7);
    near_exact(&r, 16.0 / 9, "traversal 2x1");
    r = run(&m, SP_VERIFIER_MC_NOREP, 0, 0, "2x1", N, 8);
    near_exact(&r, 15.0 / 9, "mc-norep 2x1");
    sp_vsim_model_free(&m);
}

static double exact(const sp_vsim_model *m, sp_verifier v, int gamma, int cand, const char *tree) {
    sp_vsim_params prm = sp_vsim_default_params();
    sp_tree_shape sh;
    prm.verifier = v;
    prm.gamma = gamma;
    prm.candidates = cand;
    if (tree) {
        assert_int_equal(sp_tree_shape_parse(tree, &sh, NULL), SP_OK);
        prm.tree = &sh;
    }
    double ex = -1;
    sp_error e = {0};
    if (sp_vsim_exact(m, &prm, &ex, &e)) fail_msg("exact: %s", e.msg);
    return ex;
}

/* The exact enumeration (sp_vsim_exact) reproduces the rational toy figures,
 * and on Markov chains: gbv with one path and traversal on a chain equal
 * block verification; gbv is never below block and traversal never below
 * mc-norep on the same trees (the papers' direction, without sampling
 * noise); the sampled simulator agrees with it (5 standard errors). */
static void test_exact(void **state) {
    (void)state;
    const double p[2] = {1.0 / 3, 2.0 / 3}, q[2] = {2.0 / 3, 1.0 / 3};
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_context_free(&m, 2, p, q, NULL), SP_OK);
    const struct {
        sp_verifier v;
        int gamma, cand;
        const char *tree;
        double want;
    } toy[] = {
        {SP_VERIFIER_TOKEN, 2, 0, NULL, 10.0 / 9},      {SP_VERIFIER_BLOCK, 2, 0, NULL, 11.0 / 9},
        {SP_VERIFIER_GBV, 2, 2, NULL, 38.0 / 27},       {SP_VERIFIER_MC, 2, 2, NULL, 35.0 / 27},
        {SP_VERIFIER_GBV, 2, 3, NULL, 124.0 / 81},      {SP_VERIFIER_MC, 2, 3, NULL, 115.0 / 81},
        {SP_VERIFIER_TRAVERSAL, 0, 0, "2x1", 16.0 / 9}, {SP_VERIFIER_MC_NOREP, 0, 0, "2x1", 15.0 / 9},
        {SP_VERIFIER_TRAVERSAL, 0, 0, "1x1", 11.0 / 9},
    };
    for (size_t i = 0; i < sizeof toy / sizeof toy[0]; i++) {
        double ex = exact(&m, toy[i].v, toy[i].gamma, toy[i].cand, toy[i].tree);
        if (fabs(ex - toy[i].want) > 1e-6)
            fail_msg("toy %zu (%s): exact %.9f, want %.9f", i, sp_verifier_name(toy[i].v), ex,
                     toy[i].want);
    }
    sp_vsim_model_free(&m);
    static const double temps[] = {0.5, 1.0, 2.0};
    for (int t = 0; t < 3; t++) {
        assert_int_equal(sp_vsim_model_markov(&m, 4, 30 + t, NULL), SP_OK);
        assert_int_equal(sp_vsim_model_temperature(&m, temps[t], NULL), SP_OK);
        const double blk = exact(&m, SP_VERIFIER_BLOCK, 3, 0, NULL);
        /* equal up to the float rows' rounding (the verifiers normalise
         * differently: block reads q as given, traversal divides by its sum) */
        assert_true(fabs(exact(&m, SP_VERIFIER_GBV, 3, 1, NULL) - blk) < 1e-6);
        assert_true(fabs(exact(&m, SP_VERIFIER_TRAVERSAL, 0, 0, "1x1x1") - blk) < 1e-6);
        assert_true(exact(&m, SP_VERIFIER_TOKEN, 3, 0, NULL) <= blk + 1e-6);
        const double g2 = exact(&m, SP_VERIFIER_GBV, 3, 2, NULL);
        assert_true(g2 >= blk - 1e-6);
        const double tr = exact(&m, SP_VERIFIER_TRAVERSAL, 0, 0, "2x2x1");
        const double mn = exact(&m, SP_VERIFIER_MC_NOREP, 0, 0, "2x2x1");
        printf("markov V=4 T=%g: block %.5f gbv(K=2) %.5f | mc-norep(2x2x1) %.5f traversal %.5f\n",
               temps[t], blk, g2, mn, tr);
        assert_true(tr >= mn - 1e-6);
        /* the sampled simulator agrees with the enumeration */
        const long N = 20000;
        sp_vsim_result r = run(&m, SP_VERIFIER_TRAVERSAL, 0, 0, "2x2x1", N, 60 + t);
        assert_true(fabs(r.mean_accepted - tr) < 5 * sqrt(acc_var(&r) / N) + 1e-9);
        r = run(&m, SP_VERIFIER_GBV, 3, 2, NULL, N, 70 + t);
        assert_true(fabs(r.mean_accepted - g2) < 5 * sqrt(acc_var(&r) / N) + 1e-9);
        sp_vsim_model_free(&m);
    }
    /* verifiers without an exact form, and enumerations too large */
    assert_int_equal(sp_vsim_model_markov(&m, 16, 1, NULL), SP_OK);
    sp_vsim_params prm = sp_vsim_default_params();
    double ex;
    prm.verifier = SP_VERIFIER_NAIVE;
    assert_int_equal(sp_vsim_exact(&m, &prm, &ex, NULL), SP_ERR_UNSUPPORTED);
    prm.verifier = SP_VERIFIER_BLOCK;
    prm.gamma = 8;
    assert_int_equal(sp_vsim_exact(&m, &prm, &ex, NULL), SP_ERR_RANGE);
    sp_vsim_model_free(&m);
}

/* Chi-square losslessness on random Markov chains for both verifiers over
 * several shapes and temperatures, and the direction: GBV's mean accepted
 * length not below block verification's, traversal's not below mc-norep's
 * on the same tree (4 standard errors; independent seeds). */
static void test_markov_lossless(void **state) {
    (void)state;
    static const struct {
        int V, gamma, K;
        const char *tree;
        unsigned seed;
        double temp;
    } cfg[] = {
        {2, 3, 2, "2x1x1", 1, 1.0}, {3, 2, 3, "3x2", 2, 2.0},   {4, 3, 2, "2x2x2", 3, 0.5},
        {5, 2, 4, "4x1", 4, 1.0},   {8, 4, 2, "2x2x1x1", 5, 2.0}, {16, 2, 3, "3x3", 6, 1.0},
    };
    const long N = 12000;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sp_vsim_model m;
        assert_int_equal(sp_vsim_model_markov(&m, cfg[c].V, cfg[c].seed, NULL), SP_OK);
        assert_int_equal(sp_vsim_model_temperature(&m, cfg[c].temp, NULL), SP_OK);
        sp_vsim_result g = run(&m, SP_VERIFIER_GBV, cfg[c].gamma, cfg[c].K, NULL, N, 10 + c);
        sp_vsim_result b = run(&m, SP_VERIFIER_BLOCK, cfg[c].gamma, 0, NULL, N, 20 + c);
        sp_vsim_result t = run(&m, SP_VERIFIER_TRAVERSAL, 0, 0, cfg[c].tree, N, 30 + c);
        sp_vsim_result mc = run(&m, SP_VERIFIER_MC_NOREP, 0, 0, cfg[c].tree, N, 40 + c);
        sp_vsim_result gt = run(&m, SP_VERIFIER_GBV, 0, 0, cfg[c].tree, N, 50 + c);
        const sp_vsim_result *all[] = {&g, &t, &gt};
        for (int i = 0; i < 3; i++) {
            if (all[i]->p_value <= ALPHA)
                fail_msg("V=%d T=%g case %d: chi2 %g dof %d p %g", cfg[c].V, cfg[c].temp, i,
                         all[i]->chi2, all[i]->dof, all[i]->p_value);
            assert_int_equal(all[i]->impossible, 0);
        }
        double se = sqrt((acc_var(&g) + acc_var(&b)) / N);
        assert_true(g.mean_accepted >= b.mean_accepted - 4 * se);
        se = sqrt((acc_var(&t) + acc_var(&mc)) / N);
        assert_true(t.mean_accepted >= mc.mean_accepted - 4 * se);
        sp_vsim_model_free(&m);
    }
}

/* Where the draft is poor (the toy, and a Markov chain at T = 2 with depth
 * 4), GBV with 3 paths beats block verification and traversal beats
 * mc-norep by more than 4 standard errors. */
static void test_direction(void **state) {
    (void)state;
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_markov(&m, 6, 11, NULL), SP_OK);
    assert_int_equal(sp_vsim_model_temperature(&m, 2.0, NULL), SP_OK);
    const long N = 20000;
    sp_vsim_result g = run(&m, SP_VERIFIER_GBV, 4, 3, NULL, N, 1);
    sp_vsim_result b = run(&m, SP_VERIFIER_BLOCK, 4, 0, NULL, N, 2);
    sp_vsim_result t = run(&m, SP_VERIFIER_TRAVERSAL, 0, 0, "3x2x1x1", N, 3);
    sp_vsim_result mc = run(&m, SP_VERIFIER_MC_NOREP, 0, 0, "3x2x1x1", N, 4);
    printf("markov V=6 T=2 depth 4: block %.4f gbv(K=3) %.4f | mc-norep %.4f traversal %.4f\n",
           b.mean_accepted, g.mean_accepted, mc.mean_accepted, t.mean_accepted);
    double se = sqrt((acc_var(&g) + acc_var(&b)) / N);
    assert_true(g.mean_accepted > b.mean_accepted + 4 * se);
    se = sqrt((acc_var(&t) + acc_var(&mc)) / N);
    assert_true(t.mean_accepted > mc.mean_accepted + 4 * se);
    sp_vsim_model_free(&m);
}

/* Temperature 0 (argmax models): only the greedy chain is ever emitted. */
static void test_temp0(void **state) {
    (void)state;
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_markov(&m, 6, 9, NULL), SP_OK);
    assert_int_equal(sp_vsim_model_temperature(&m, 0.0, NULL), SP_OK);
    sp_vsim_result r[2] = {run(&m, SP_VERIFIER_GBV, 4, 2, NULL, 2000, 3),
                           run(&m, SP_VERIFIER_TRAVERSAL, 0, 0, "2x2", 2000, 4)};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].impossible, 0);
        assert_int_equal(r[i].dof, 0);
        assert_true(r[i].p_value == 1.0);
    }
    sp_vsim_model_free(&m);
}

/* Bad trees and rows: every error is a clean SP_ERR_* before any randomness. */
static void test_bad_input(void **state) {
    (void)state;
    enum { V = 3 };
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 2);
    float p[4 * V], q[4 * V];
    for (int i = 0; i < 4 * V; i++) p[i] = q[i] = 1.0f / 3;
    int32_t parent[4] = {-1, 0, 0, 1}, token[4] = {0, 1, 2, 0}, path[8], n, y;
    sp_verify_tree t = {4, parent, token, p, q};
    sp_error e;
    /* p == q: the first leaf's path (nodes 1, 3) is always accepted */
    for (int i = 0; i < 50; i++) {
        assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_NOREPLACE, &rng, path, 8, &n, &y, &e),
                         SP_OK);
        assert_int_equal(n, 2);
        assert_int_equal(path[0], 1);
        assert_int_equal(path[1], 3);
        assert_true(y >= 0 && y < V);
    }
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_NOREPLACE, &rng, path, 1, &n, &y, &e),
                     SP_ERR_RANGE);
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_NAIVE, &rng, path, 8, &n, &y, &e),
                     SP_ERR_ARG);
    token[2] = 1; /* duplicate sibling: fine i.i.d., an error without replacement */
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_REPLACE, &rng, path, 8, &n, &y, &e), SP_OK);
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_NOREPLACE, &rng, path, 8, &n, &y, &e),
                     SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "duplicate"));
    token[2] = 2;
    q[2] = 0.0f, q[0] = 2.0f / 3; /* node 2's token has zero draft probability */
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_REPLACE, &rng, path, 8, &n, &y, &e),
                     SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "zero draft probability"));
    q[2] = q[0] = 1.0f / 3;
    p[V] = 0.9f; /* row p[1] sums to 1.567 */
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_REPLACE, &rng, path, 8, &n, &y, &e),
                     SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "p[1]"));
    p[V] = 1.0f / 3;
    parent[3] = 3; /* not topological */
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_REPLACE, &rng, path, 8, &n, &y, &e),
                     SP_ERR_ARG);
    parent[3] = 1;
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_REPLACE, NULL, path, 8, &n, &y, &e),
                     SP_ERR_ARG);
    t.n_nodes = 1; /* bare root: a target sample */
    assert_int_equal(sp_verify_tree_traversal(ws, &t, SP_MC_REPLACE, &rng, path, 8, &n, &y, &e), SP_OK);
    assert_int_equal(n, 0);
    sp_verify_ws_free(ws);
    sp_verifier v;
    assert_int_equal(sp_verifier_parse("gbv", &v, NULL), SP_OK);
    assert_int_equal(v, SP_VERIFIER_GBV);
    assert_int_equal(sp_verifier_parse("traversal", &v, NULL), SP_OK);
    assert_string_equal(sp_verifier_name(v), "traversal");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_toy_exact), cmocka_unit_test(test_markov_lossless),
    cmocka_unit_test(test_direction), cmocka_unit_test(test_temp0),
    cmocka_unit_test(test_bad_input),   cmocka_unit_test(test_exact),
};
SP_TEST_MAIN(tests)
