/* Tests for the seeded RNG: reproducibility and basic uniformity. */
#include "testutil.h"

#include <math.h>

#include "sp_rng.h"

static void test_reproducible(void **state) {
    (void)state;
    sp_rng a, b;
    sp_rng_seed(&a, 42);
    sp_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++) assert_int_equal(sp_rng_u64(&a), sp_rng_u64(&b));
    sp_rng_seed(&b, 43);
    assert_true(sp_rng_u64(&a) != sp_rng_u64(&b));
}

/* Chi-square over 16 equal bins, 160k draws: df 15, critical value at
 * significance 1e-4 is 44.3. */
static void test_uniform_chi2(void **state) {
    (void)state;
    sp_rng r;
    sp_rng_seed(&r, 7);
    enum { B = 16, N = 160000 };
    long cnt[B] = {0};
    for (int i = 0; i < N; i++) {
        double u = sp_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        cnt[(int)(u * B)]++;
    }
    double chi2 = 0, e = (double)N / B;
    for (int i = 0; i < B; i++) chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
    assert_true(chi2 < 44.3);
    for (int i = 0; i < 1000; i++) assert_true(sp_rng_below(&r, 7) < 7);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reproducible),
    cmocka_unit_test(test_uniform_chi2),
};
SP_TEST_MAIN(tests)
