/* Tests for the seeded RNG: reproducibility and basic uniformity. */
#include "testutil.h"


#include "dev/sp_vsim.h"
#include "rng.h"

static void test_reproducible(void **state) {
    (void)state;
    sp_rng a, b;
    sp_rng_seed(&a, 42);
    sp_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++) assert_int_equal(sp_rng_u64(&a), sp_rng_u64(&b));
    sp_rng_seed(&b, 43);
    assert_true(sp_rng_u64(&a) != sp_rng_u64(&b));
}

/* 16 equal bins, 160k draws, through the one chi-square test
 * (sp_vsim_chi2_test): uniform at significance 1e-4; and a draw skewed by
 * 1% toward the first half is refused by the same test, so it can fail. */
static void test_uniform_chi2(void **state) {
    (void)state;
    sp_rng r;
    sp_rng_seed(&r, 7);
    enum { B = 16, N = 160000 };
    int64_t cnt[B] = {0}, skew[B] = {0};
    double prob[B];
    for (int i = 0; i < B; i++) prob[i] = 1.0 / B;
    for (int i = 0; i < N; i++) {
        double u = sp_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        cnt[(int)(u * B)]++;
        skew[(int)(u * 0.99 * B)]++;
    }
    sp_vsim_chi2 c;
    sp_vsim_chi2_test(cnt, prob, B, &c);
    assert_int_equal(c.dof, B - 1);
    assert_true(c.p_value > 1e-4);
    sp_vsim_chi2_test(skew, prob, B, &c);
    assert_true(c.p_value < 1e-4);
    for (int i = 0; i < 1000; i++) assert_true(sp_rng_below(&r, 7) < 7);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reproducible),
    cmocka_unit_test(test_uniform_chi2),
};
SP_TEST_MAIN(tests)
