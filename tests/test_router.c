/* The per-request draft router: on a synthetic two-domain stream (each
 * domain its own tokens; each draft good on one domain) it learns to send
 * each domain to its draft from the acceptance it observes; choices are
 * deterministic given the seed; bad settings are refused. */
#include "testutil.h"

#include "specula.h"

enum { NPROMPT = 24 };

/* A prompt of domain dom: tokens drawn from [100 + 200 dom, 300 + 200 dom)
 * plus a few shared ones (BOS, common words). */
static void make_prompt(sp_rng *rng, int dom, int32_t *t) {
    t[0] = 1;
    for (int i = 1; i < NPROMPT; i++)
        t[i] = i % 5 == 0 ? 2 + (int32_t)sp_rng_below(rng, 8)
                          : 100 + 200 * dom + (int32_t)sp_rng_below(rng, 200);
}

/* Acceptance draft d reaches on domain dom (plus noise): 0.7 on its own domain, 0.15 elsewhere. */
static double acceptance(sp_rng *rng, int d, int dom) {
    return (d == dom ? 0.7 : 0.15) + 0.1 * (sp_rng_uniform(rng) - 0.5);
}

static int run_stream(uint64_t seed, int32_t *choices, int n, int *correct_last) {
    sp_error e = {0};
    sp_router_params p = sp_router_default_params(2);
    p.seed = seed;
    sp_router *r = NULL;
    assert_int_equal(sp_router_init(&p, &r, &e), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 77);
    int explored_n = 0;
    *correct_last = 0;
    for (int i = 0; i < n; i++) {
        const int dom = (int)sp_rng_below(&rng, 2);
        int32_t t[NPROMPT];
        make_prompt(&rng, dom, t);
        bool ex;
        const int32_t d = sp_router_choose(r, t, NPROMPT, &ex);
        choices[i] = d;
        explored_n += ex;
        if (i >= n - 100 && !ex) *correct_last += d == dom;
        if (i >= n - 100 && ex) *correct_last += 1; /* exploration is not a routing error */
        sp_router_update(r, t, NPROMPT, d, acceptance(&rng, d, dom));
    }
    /* after learning, predictions rank the drafts right for fresh prompts */
    for (int dom = 0; dom < 2; dom++) {
        int32_t t[NPROMPT];
        make_prompt(&rng, dom, t);
        double pred[2];
        sp_router_predict(r, t, NPROMPT, pred);
        printf("domain %d: predicted %.3f (its draft) vs %.3f\n", dom, pred[dom], pred[1 - dom]);
        assert_true(pred[dom] > pred[1 - dom] + 0.1); /* the wrong draft is tried only when exploring */
        assert_true(pred[dom] > 0.4 && pred[dom] < 1.0);
    }
    sp_router_free(r);
    return explored_n;
}

static void test_router_learns_domains(void **state) {
    (void)state;
    enum { N = 400 };
    int32_t a[N], b[N];
    int ca, cb;
    const int ex = run_stream(5, a, N, &ca);
    run_stream(5, b, N, &cb);
    printf("router: %d of the last 100 requests routed right (%d explorations in %d)\n", ca, ex, N);
    assert_memory_equal(a, b, sizeof a); /* deterministic */
    assert_true(ca >= 95);
    assert_true(ex > N / 20 && ex < N / 5); /* explore 0.1 */
    /* a router that cannot learn (one draft) always answers 0 */
    sp_error e = {0};
    sp_router *r = NULL;
    sp_router_params p = sp_router_default_params(1);
    assert_int_equal(sp_router_init(&p, &r, &e), SP_OK);
    int32_t t[3] = {1, 2, 3};
    for (int i = 0; i < 50; i++) assert_int_equal(sp_router_choose(r, t, 3, NULL), 0);
    sp_router_update(r, t, 3, 5, 0.5);  /* ignored */
    sp_router_update(r, t, 0, 0, 0.25); /* an empty prompt learns the bias only */
    double pred;
    sp_router_predict(r, t, 0, &pred);
    assert_true(pred < 1.0 && pred > 0.25);
    sp_router_free(r);
}

static void test_router_bad_params(void **state) {
    (void)state;
    sp_error e = {0};
    sp_router *r = (sp_router *)1;
    sp_router_params p = sp_router_default_params(0);
    assert_int_equal(sp_router_init(&p, &r, &e), SP_ERR_ARG);
    assert_null(r);
    p = sp_router_default_params(2);
    p.n_buckets = 1000; /* not a power of two */
    assert_int_equal(sp_router_init(&p, &r, &e), SP_ERR_ARG);
    p = sp_router_default_params(2);
    p.explore = 1.5;
    assert_int_equal(sp_router_init(&p, &r, &e), SP_ERR_ARG);
    p = sp_router_default_params(2);
    p.lr = 0;
    assert_int_equal(sp_router_init(&p, &r, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "router"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_router_learns_domains),
    cmocka_unit_test(test_router_bad_params),
};
SP_TEST_MAIN(tests)
