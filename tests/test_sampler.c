/* Tests for the sampler: exact toy distributions for every adjustment, greedy
 * and ties, parameter validation, the inverse-CDF draw's edge cases, and a
 * chi-square goodness-of-fit test of sp_sampler_sample. */
#include "testutil.h"

#include <math.h>

#include "sampler_internal.h"
#include "sp_sampler.h"
#include "dev/sp_vsim.h"

static sp_sampler *mk(float t, int32_t k, float top_p, float min_p, int32_t n) {
    sp_sampler_params p = {.temperature = t, .top_k = k, .top_p = top_p, .min_p = min_p};
    sp_sampler *s = NULL;
    sp_error e = {0};
    assert_int_equal(sp_sampler_init(&p, n, &s, &e), SP_OK);
    return s;
}

static void expect_probs(float t, int32_t k, float top_p, float min_p, const float *logits,
                         const double *want, int32_t n) {
    sp_sampler *s = mk(t, k, top_p, min_p, n);
    float probs[64];
    sp_sampler_probs(s, logits, probs);
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        assert_true(fabs(probs[i] - want[i]) < 1e-6);
        sum += probs[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-6);
    sp_sampler_free(s);
}

/* logits {0, ln 2, ln 3}: softmax {1,2,3}/6; at T=0.5 the weights square. */
static void test_temperature_exact(void **state) {
    (void)state;
    const float l[3] = {0.0f, logf(2.0f), logf(3.0f)};
    const double w1[3] = {1.0 / 6, 2.0 / 6, 3.0 / 6};
    const double w05[3] = {1.0 / 14, 4.0 / 14, 9.0 / 14};
    expect_probs(1.0f, 0, 1.0f, 0.0f, l, w1, 3);
    expect_probs(0.5f, 0, 1.0f, 0.0f, l, w05, 3);
    /* T=2 takes square roots. */
    const double r = 1 + sqrt(2.0) + sqrt(3.0);
    const double w2[3] = {1 / r, sqrt(2.0) / r, sqrt(3.0) / r};
    expect_probs(2.0f, 0, 1.0f, 0.0f, l, w2, 3);
}

static void test_top_k(void **state) {
    (void)state;
    const float l[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)};
    const double k2[4] = {0, 0, 3.0 / 7, 4.0 / 7};
    expect_probs(1.0f, 2, 1.0f, 0.0f, l, k2, 4);
    const double k1[4] = {0, 0, 0, 1};
    expect_probs(1.0f, 1, 1.0f, 0.0f, l, k1, 4);
    const double k9[4] = {0.1, 0.2, 0.3, 0.4}; /* k >= n: off */
    expect_probs(1.0f, 9, 1.0f, 0.0f, l, k9, 4);
    /* Ties at the boundary keep the lowest ids. */
    const float t[5] = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
    const double kt[5] = {0, 0.5, 0.5, 0, 0};
    expect_probs(1.0f, 2, 1.0f, 0.0f, t, kt, 5);
}

static void test_top_p(void **state) {
    (void)state;
    const float l[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)};
    /* {.1,.2,.3,.4}: p=0.5 needs {.4,.3} (mass .7 >= .5; .4 alone is < .5). */
    const double p5[4] = {0, 0, 3.0 / 7, 4.0 / 7};
    expect_probs(1.0f, 0, 0.5f, 0.0f, l, p5, 4);
    /* p=0.39 is met by the top token alone (0.4 itself would sit on a float
     * rounding boundary). */
    const double p4[4] = {0, 0, 0, 1};
    expect_probs(1.0f, 0, 0.39f, 0.0f, l, p4, 4);
    /* p=0.75 needs three tokens (.4+.3 = .7 < .75). */
    const double p75[4] = {0, 2.0 / 9, 3.0 / 9, 4.0 / 9};
    expect_probs(1.0f, 0, 0.75f, 0.0f, l, p75, 4);
    /* After top-k=3 the kept mass is {.2,.3,.4}/.9; p=0.7 of it is .63, so
     * {.4,.3} (.7 >= .63) suffices. */
    expect_probs(1.0f, 3, 0.7f, 0.0f, l, p5, 4);
}

static void test_min_p(void **state) {
    (void)state;
    const float l[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)};
    /* max .4; min_p .45 drops below .18: keeps {.2,.3,.4}; .6 keeps {.3,.4}. */
    const double m5[4] = {0, 2.0 / 9, 3.0 / 9, 4.0 / 9};
    expect_probs(1.0f, 0, 1.0f, 0.45f, l, m5, 4);
    const double m6[4] = {0, 0, 3.0 / 7, 4.0 / 7};
    expect_probs(1.0f, 0, 1.0f, 0.6f, l, m6, 4);
    const double m1[4] = {0, 0, 0, 1};
    expect_probs(1.0f, 0, 1.0f, 1.0f, l, m1, 4);
}

/* Large vocabulary: top-p over many tokens exercises the growing prefix. */
static void test_top_p_large(void **state) {
    (void)state;
    enum { N = 5000 };
    static float l[N], probs[N];
    for (int i = 0; i < N; i++) l[i] = (float)((i * 7919) % N) * 1e-3f;
    sp_sampler *s = mk(1.0f, 0, 0.9f, 0.0f, N);
    sp_sampler_probs(s, l, probs);
    /* Reference: the full softmax sorted by descending value. */
    static double w[N];
    double tot = 0;
    for (int i = 0; i < N; i++) tot += (w[i] = exp((double)l[i] - l[0]));
    int kept = 0;
    double kept_mass = 0, min_kept = 1e300, max_dropped = 0;
    for (int i = 0; i < N; i++) {
        if (probs[i] > 0) {
            kept++;
            kept_mass += w[i] / tot;
            if (w[i] < min_kept) min_kept = w[i];
        } else if (w[i] > max_dropped) {
            max_dropped = w[i];
        }
    }
    assert_true(kept_mass >= 0.9 - 1e-6);
    assert_true(kept_mass - min_kept / tot < 0.9 + 1e-6); /* smallest such set */
    assert_true(max_dropped <= min_kept);
    assert_true(kept > 64 && kept < N);
    sp_sampler_free(s);
}

static void test_greedy_and_ties(void **state) {
    (void)state;
    const float l[5] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
    const double g[5] = {0, 1, 0, 0, 0};
    expect_probs(0.0f, 0, 1.0f, 0.0f, l, g, 5);
    expect_probs(0.0f, 3, 0.2f, 0.7f, l, g, 5);
    assert_int_equal(sp_argmax(l, 5), 1);
    sp_sampler *s = mk(0.0f, 0, 1.0f, 0.0f, 5);
    sp_rng r;
    sp_rng_seed(&r, 1);
    for (int i = 0; i < 50; i++) assert_int_equal(sp_sampler_sample(s, l, &r, NULL), 1);
    sp_sampler_free(s);
    /* -inf logits get probability 0 and never win. */
    const float li[3] = {-INFINITY, 0.0f, -INFINITY};
    const double gi[3] = {0, 1, 0};
    expect_probs(1.0f, 0, 1.0f, 0.0f, li, gi, 3);
}

static void test_invalid_params(void **state) {
    (void)state;
    sp_sampler_params bad[] = {
        {-0.1f, 0, 1.0f, 0.0f}, {NAN, 0, 1.0f, 0.0f},  {INFINITY, 0, 1.0f, 0.0f},
        {1.0f, -1, 1.0f, 0.0f}, {1.0f, 0, 0.0f, 0.0f}, {1.0f, 0, 1.5f, 0.0f},
        {1.0f, 0, NAN, 0.0f},   {1.0f, 0, 1.0f, -0.1f}, {1.0f, 0, 1.0f, 1.1f},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sp_error e = {0};
        sp_sampler *s = (sp_sampler *)1;
        assert_int_equal(sp_sampler_params_check(&bad[i], &e), SP_ERR_ARG);
        assert_true(strlen(e.msg) > 0);
        assert_int_equal(sp_sampler_init(&bad[i], 10, &s, &e), SP_ERR_ARG);
        assert_null(s);
    }
    sp_sampler_params d = sp_sampler_default_params();
    sp_error e = {0};
    assert_int_equal(sp_sampler_params_check(&d, &e), SP_OK);
    sp_sampler *s = NULL;
    assert_int_equal(sp_sampler_init(&d, 0, &s, &e), SP_ERR_ARG);
    assert_int_equal(sp_sampler_init(&d, 4, &s, &e), SP_OK);
    assert_true(sp_sampler_params_of(s)->temperature == 1.0f);
    sp_sampler_free(s);
}

static void test_from_probs_edges(void **state) {
    (void)state;
    const float p[6] = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f, 0.0f};
    assert_int_equal(sp_sample_from_probs(p, 6, 0.0), 1);
    assert_int_equal(sp_sample_from_probs(p, 6, 0.2499), 1);
    assert_int_equal(sp_sample_from_probs(p, 6, 0.25), 3);
    assert_int_equal(sp_sample_from_probs(p, 6, 0.999999), 3);
    assert_int_equal(sp_sample_from_probs(p, 6, nextafter(1.0, 0.0)), 3);
    /* Mass that sums to slightly less than 1 with trailing zeros. */
    const float q[5] = {0.3f, 0.3f, 0.3f, 0.0f, 0.0f};
    assert_int_equal(sp_sample_from_probs(q, 5, nextafter(1.0, 0.0)), 2);
    const float z[3] = {0.0f, 1.0f, 0.0f};
    for (double u = 0.0; u < 1.0; u += 0.0625) assert_int_equal(sp_sample_from_probs(z, 3, u), 1);
    const float first[3] = {1.0f, 0.0f, 0.0f};
    assert_int_equal(sp_sample_from_probs(first, 3, 0.9999999), 0);
}

/* The double-weight draw is the same routine: unnormalised weights give the
 * index the normalised float row gives, at every u (boundaries included);
 * all-zero weights give -1 instead of an index. */
static void test_from_weights(void **state) {
    (void)state;
    const double w[6] = {0.0, 1.0, 0.0, 3.0, 0.0, 0.0}; /* = 4 x {0, .25, 0, .75, 0, 0} */
    const float p[6] = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f, 0.0f};
    for (int k = 0; k <= 64; k++) {
        double u = k < 64 ? k / 64.0 : nextafter(1.0, 0.0);
        assert_int_equal(sp_sample_from_weights(w, 6, u), sp_sample_from_probs(p, 6, u));
    }
    assert_int_equal(sp_sample_from_weights(w, 6, 0.2499), 1);
    assert_int_equal(sp_sample_from_weights(w, 6, 0.25), 3);
    const double z[3] = {0.0, 0.0, -0.0};
    assert_int_equal(sp_sample_from_weights(z, 3, 0.5), -1);
}

/* 100k draws from softmax(logits) at T=1 with top-k 5 over 8 tokens:
 * chi-square against the adjusted distribution (4 degrees of freedom) at
 * significance 1e-4; a draw outside the top 5 fails the test outright. */
static void test_chi_square(void **state) {
    (void)state;
    enum { N = 8, DRAWS = 100000 };
    const float l[N] = {0.1f, 1.2f, -0.5f, 0.7f, 2.0f, 0.0f, 1.0f, -3.0f};
    sp_sampler *s = mk(1.0f, 5, 1.0f, 0.0f, N);
    float probs[N];
    sp_sampler_probs(s, l, probs);
    sp_rng r;
    sp_rng_seed(&r, 12345);
    int64_t cnt[N] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = sp_sampler_sample(s, l, &r, NULL);
        assert_true(t >= 0 && t < N);
        assert_true(probs[t] > 0.0f);
        cnt[t]++;
    }
    double pd[N];
    for (int i = 0; i < N; i++) pd[i] = probs[i];
    sp_vsim_chi2 c2;
    sp_vsim_chi2_test(cnt, pd, N, &c2);
    assert_int_equal(c2.dof, 4);
    assert_int_equal(c2.n, DRAWS);
    assert_true(c2.p_value > 1e-4);
    sp_sampler_free(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_temperature_exact), cmocka_unit_test(test_top_k),
    cmocka_unit_test(test_top_p),             cmocka_unit_test(test_min_p),
    cmocka_unit_test(test_top_p_large),       cmocka_unit_test(test_greedy_and_ties),
    cmocka_unit_test(test_invalid_params),    cmocka_unit_test(test_from_probs_edges),
    cmocka_unit_test(test_from_weights),
    cmocka_unit_test(test_chi_square),
};
SP_TEST_MAIN(tests)
