/* Tests for the losses: exact values on hand-computed toy rows, gradients
 * against central finite differences, sparse (top-k + rest) rows. */
#include "testutil.h"

#include <math.h>

#include "sp_train.h"
#include "rng.h"
#include "loss.h"

static double row(const char *name, const sp_loss_target *t, const float *z, int32_t V, float *dz) {
    sp_loss l;
    assert_int_equal(sp_loss_parse(name, &l, NULL), SP_OK);
    double scratch[2 * 64];
    assert_true(V <= 64);
    return sp_loss_row(&l, t, z, V, scratch, dz);
}

/* p = (1/2, 1/2), q = softmax(0, log 3) = (1/4, 3/4). */
static void test_toy_values(void **state) {
    (void)state;
    const float p[2] = {0.5f, 0.5f};
    const float z[2] = {0.0f, (float)log(3.0)};
    sp_loss_target t = {.p = p};
    float dz[2];
    const double tol = 1e-7;
    assert_true(fabs(row("fkl", &t, z, 2, dz) - 0.5 * log(4.0 / 3.0)) < tol);
    assert_true(fabs(dz[0] + 0.25) < tol && fabs(dz[1] - 0.25) < tol); /* q - p */
    assert_true(fabs(row("rkl", &t, z, 2, dz) - (0.25 * log(0.5) + 0.75 * log(1.5))) < tol);
    /* tvd = 1/4; h = Q sign(Q-P)/2 = (-1/8, 3/8), dz = h - q sum h = (-3/16, 3/16) */
    assert_true(fabs(row("tvd", &t, z, 2, dz) - 0.25) < tol);
    assert_true(fabs(dz[0] + 3.0 / 16) < tol && fabs(dz[1] - 3.0 / 16) < tol);
    /* m = (3/8, 5/8) */
    double jsd = 0.5 * (0.5 * log(4.0 / 3) + 0.5 * log(4.0 / 5)) + 0.5 * (0.25 * log(2.0 / 3) + 0.75 * log(6.0 / 5));
    assert_true(fabs(row("jsd", &t, z, 2, dz) - jsd) < tol);
    assert_true(fabs(row("jsd:0.5", &t, z, 2, NULL) - jsd) < tol);
    /* beta 0.25: m = (5/16, 11/16) */
    double j25 = 0.25 * (0.5 * log(8.0 / 5) + 0.5 * log(8.0 / 11)) + 0.75 * (0.25 * log(4.0 / 5) + 0.75 * log(12.0 / 11));
    assert_true(fabs(row("jsd:0.25", &t, z, 2, NULL) - j25) < tol);
    sp_loss_target ce = {.token = 1};
    assert_true(fabs(row("ce", &ce, z, 2, dz) - log(4.0 / 3)) < tol);
    assert_true(fabs(dz[0] - 0.25) < tol && fabs(dz[1] + 0.25) < tol);
    /* identical rows: every divergence is 0 and so is its gradient (tvd's
     * is a subgradient at equality: not checked) */
    const float pq[2] = {0.25f, 0.75f};
    sp_loss_target same = {.p = pq};
    const char *names[] = {"fkl", "rkl", "jsd", "tvd"};
    for (int i = 0; i < 4; i++) {
        assert_true(fabs(row(names[i], &same, z, 2, dz)) < 1e-7);
        if (i < 3) assert_true(fabs(dz[0]) < 1e-7 && fabs(dz[1]) < 1e-7);
    }
}

/* V = 3, p = (0.5, 0.3, 0.2) kept as top-1 {0: 0.5} + rest 0.5; q uniform:
 * buckets P = (1/2, 1/2), Q = (1/3, 2/3). */
static void test_sparse_buckets(void **state) {
    (void)state;
    const float p[3] = {0.5f, 0.3f, 0.2f}, z[3] = {0, 0, 0};
    int32_t ids[3];
    float probs[3], rest;
    assert_int_equal(sp_loss_topk(p, 3, 1, ids, probs, &rest), 1);
    assert_int_equal(ids[0], 0);
    assert_true(fabs(rest - 0.5f) < 1e-7);
    sp_loss_target t = {.k = 1, .ids = ids, .probs = probs, .rest = rest};
    assert_true(fabs(row("fkl", &t, z, 3, NULL) - (0.5 * log(1.5) + 0.5 * log(0.75))) < 1e-7);
    assert_true(fabs(row("tvd", &t, z, 3, NULL) - 1.0 / 6) < 1e-7);
    /* k = V is the dense row; the coarse row never exceeds the dense one */
    assert_int_equal(sp_loss_topk(p, 3, 5, ids, probs, &rest), 3);
    assert_true(ids[0] == 0 && ids[1] == 1 && ids[2] == 2 && rest < 1e-7);
    sp_loss_target dense = {.p = p};
    sp_loss_target full = {.k = 3, .ids = ids, .probs = probs, .rest = rest};
    const float z2[3] = {0.3f, -1.0f, 0.7f};
    const char *names[] = {"fkl", "rkl", "jsd:0.3", "tvd"};
    for (int i = 0; i < 4; i++) {
        float d1[3], d2[3];
        double a = row(names[i], &dense, z2, 3, d1), b = row(names[i], &full, z2, 3, d2);
        assert_true(fabs(a - b) < 1e-6);
        for (int j = 0; j < 3; j++) assert_true(fabs(d1[j] - d2[j]) < 1e-6);
        assert_int_equal(sp_loss_topk(p, 3, 2, ids, probs, &rest), 2);
        sp_loss_target two = {.k = 2, .ids = ids, .probs = probs, .rest = rest};
        /* 1e-6: rest is 1 - sum(probs) rounded to float */
        double c = row(names[i], &two, z2, 3, NULL);
        if (!(c <= a + 1e-6)) fprintf(stderr, "%s: top-2 %.9g > dense %.9g\n", names[i], c, a);
        assert_true(c <= a + 1e-6);
        assert_int_equal(sp_loss_topk(p, 3, 3, ids, probs, &rest), 3);
    }
    assert_int_equal(sp_loss_topk(p, 3, 0, ids, probs, &rest), 0);
    assert_true(rest == 1.0f);
}

/* Smallest |p_i - q_i| / q_i over the vocabulary: tvd has kinks where p
 * and q meet. */
static double min_gap(const float *p, const float *z, int32_t V) {
    double s = 0, g = 1e30;
    for (int32_t i = 0; i < V; i++) s += exp(z[i]);
    for (int32_t i = 0; i < V; i++) {
        double q = exp(z[i]) / s;
        g = fmin(g, fabs(p[i] - q) / q);
    }
    return g;
}

/* Central differences on float logits (step h = 1e-2, the value in double):
 * the truncation error is O(h^2 L''') ~ 1e-5 and the float rounding of z +- h
 * is taken into account by dividing by the actual difference. Tolerance
 * 2e-4 absolute + 1e-3 relative. tvd is checked only on rows where every
 * |p_i - q_i| >= 0.05 q_i (a step h moves q_i by at most h q_i = 0.01 q_i),
 * so no kink lies within the step. */
static void fd_check(const char *name, const sp_loss_target *t, float *z, int32_t V, const float *p) {
    float dz[64];
    if (!strcmp(name, "tvd") && min_gap(p, z, V) < 0.05) return;
    row(name, t, z, V, dz);
    for (int32_t i = 0; i < V; i++) {
        float z0 = z[i];
        z[i] = z0 + 1e-2f;
        float up = z[i];
        double lp = row(name, t, z, V, NULL);
        z[i] = z0 - 1e-2f;
        float dn = z[i];
        double lm = row(name, t, z, V, NULL);
        z[i] = z0;
        double fd = (lp - lm) / ((double)up - (double)dn);
        if (fabs(fd - dz[i]) > 2e-4 + 1e-3 * fabs(fd)) {
            fprintf(stderr, "%s: dz[%d] = %g, finite difference %g\n", name, i, dz[i], fd);
            fail();
        }
    }
}

static void test_gradients_fd(void **state) {
    (void)state;
    enum { V = 17 };
    sp_rng r;
    sp_rng_seed(&r, 11);
    const char *names[] = {"fkl", "rkl", "jsd", "jsd:0.1", "jsd:0.9", "tvd", "ce"};
    int tvd_rows = 0;
    for (int trial = 0; trial < 200; trial++) {
        float z[V], p[V], zp[V];
        double s = 0;
        for (int i = 0; i < V; i++) {
            z[i] = (float)(1.5 * sp_rng_normal(&r));
            zp[i] = (float)(1.5 * sp_rng_normal(&r));
            s += exp(zp[i]);
        }
        for (int i = 0; i < V; i++) p[i] = (float)(exp(zp[i]) / s);
        int32_t ids[V];
        float probs[V], rest;
        int32_t k = sp_loss_topk(p, V, 5, ids, probs, &rest);
        sp_loss_target dense = {.p = p, .token = trial % V};
        tvd_rows += min_gap(p, z, V) >= 0.05;
        sp_loss_target sparse = {.k = k, .ids = ids, .probs = probs, .rest = rest};
        for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
            fd_check(names[n], &dense, z, V, p);
            if (strcmp(names[n], "ce")) fd_check(names[n], &sparse, z, V, p);
        }
    }
    assert_true(tvd_rows >= 5); /* tvd was checked on some rows */
}

static void test_parse(void **state) {
    (void)state;
    sp_loss l;
    sp_error e;
    char buf[32];
    assert_int_equal(sp_loss_parse("jsd:0.25", &l, NULL), SP_OK);
    assert_true(l.kind == SP_LOSS_JSD && l.beta == 0.25);
    assert_string_equal(sp_loss_format(&l, buf, sizeof buf), "jsd:0.25");
    assert_int_equal(sp_loss_parse("tvd", &l, NULL), SP_OK);
    assert_string_equal(sp_loss_format(&l, buf, sizeof buf), "tvd");
    const char *bad[] = {"", "kl", "jsd:", "jsd:0", "jsd:1", "jsd:x", "jsd:0.5x", "FKL"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(sp_loss_parse(bad[i], &l, &e), SP_ERR_ARG);
        assert_non_null(strstr(e.msg, "loss"));
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_toy_values),
    cmocka_unit_test(test_sparse_buckets),
    cmocka_unit_test(test_gradients_fd),
    cmocka_unit_test(test_parse),
};
SP_TEST_MAIN(tests)
