/* Tests of the adaptive draft-length controller alone (src/speculation/adapt.h),
 * fed simulated iterations: a target whose k-token forward costs
 * t1 (1 + slope (k - 1)), a draft costing `draft` per token whose tokens
 * are each accepted with probability `accept` (a seeded RNG), so every
 * measured cost and acceptance is known. The speculation loop's own tests
 * (test_spec) drive it through real forwards. */
#include "testutil.h"

#include "adapt.h"
#include "rng.h"

typedef struct sim {
    double t1, slope, draft, over, accept;
    sp_rng rng;
} sim;

/* One iteration: propose, "run" it, observe; returns the draft length. */
static int32_t step(sp_adapt *a, sim *m, int32_t gmax) {
    const int32_t g = sp_adapt_propose(a, gmax);
    assert_true(g >= 0 && g <= gmax);
    int32_t tau = 0;
    while (tau < g && sp_rng_uniform(&m->rng) < m->accept) tau++;
    sp_adapt_observe_target(a, g + 1, m->t1 * (1 + m->slope * g));
    const sp_adapt_step st = {.drafted = g, .accepted = tau, .emitted = tau + 1,
                              .draft_seconds = g * m->draft, .over_seconds = m->over,
                              .draft_forwards = g, .draft_forward_seconds = g * m->draft};
    sp_adapt_observe_step(a, &st);
    return g;
}

/* Iterations from..to-1 of n that drafted, running all n from the current state. */
static int run(sp_adapt *a, sim *m, int32_t gmax, int n, int from, int to, double *mean_g) {
    int drafted = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        int32_t g = step(a, m, gmax);
        if (i >= from && i < to) {
            drafted += g > 0;
            sum += g;
        }
    }
    if (mean_g) *mean_g = sum / (to - from);
    return drafted;
}

static sim model(double slope, double draft, double accept) {
    sim m = {.t1 = 1e-3, .slope = slope, .draft = draft * 1e-3, .over = 1e-5, .accept = accept};
    sp_rng_seed(&m.rng, 7);
    return m;
}

/* The first iterations measure both sides: a short warm-up draft, two
 * plain steps, one draft of 4 (each capped by gmax). */
static void test_first_iterations(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.05, 0.05, 0.9);
    sp_adapt_init(&a);
    const int32_t want8[] = {2, 0, 0, 4};
    for (int i = 0; i < 4; i++) assert_int_equal(step(&a, &m, 8), want8[i]);
    sp_adapt_init(&a);
    const int32_t want1[] = {1, 0, 0, 1};
    for (int i = 0; i < 4; i++) assert_int_equal(step(&a, &m, 1), want1[i]);
}

/* A cheap draft that is nearly always right: long drafts, almost never plain. */
static void test_good_draft_drafts_long(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.05, 0.05, 0.95);
    sp_adapt_init(&a);
    double mean_g;
    int drafted = run(&a, &m, 8, 200, 100, 200, &mean_g);
    printf("good draft: %d of 100 iterations drafted, mean length %.2f\n", drafted, mean_g);
    assert_true(drafted >= 95);
    assert_true(mean_g >= 6);
}

/* A draft that is never right: plain decoding, with spaced probes that go
 * on (so a change would be noticed) but cost little. */
static void test_bad_draft_goes_plain_and_probes(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.05, 0.2, 0.0);
    sp_adapt_init(&a);
    int early = run(&a, &m, 8, 100, 50, 100, NULL);
    int late = run(&a, &m, 8, 3000, 0, 3000, NULL);
    printf("bad draft: %d of 50, then %d of 3000 iterations drafted\n", early, late);
    assert_true(early <= 5);
    assert_true(late >= 1 && late <= 100);
}

/* When no draft length could pay even with every token accepted (the draft
 * costs more than a target forward, and the target gains nothing from
 * batching), speculation is not even probed for a long while. */
static void test_hopeless_draft_is_left_alone(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(1.0, 1.2, 1.0);
    sp_adapt_init(&a);
    int drafted = run(&a, &m, 8, 1000, 4, 1000, NULL);
    assert_int_equal(drafted, 0);
    /* a new text: no first probe either */
    sp_adapt_new_text(&a);
    assert_int_equal(step(&a, &m, 8), 0);
}

/* A new text keeps the measured costs: no warm-up and plain measuring
 * steps again (a good draft drafts from its first iteration on). Before
 * both costs are measured, it starts from scratch. */
static void test_new_text(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.05, 0.05, 0.9);
    sp_adapt_init(&a);
    run(&a, &m, 8, 30, 0, 30, NULL);
    sp_adapt_new_text(&a);
    for (int i = 0; i < 4; i++) assert_true(step(&a, &m, 8) > 0);
    sp_adapt_init(&a);
    step(&a, &m, 8); /* the warm-up only: nothing measured */
    sp_adapt_new_text(&a);
    const int32_t want[] = {2, 0, 0, 4};
    for (int i = 0; i < 4; i++) assert_int_equal(step(&a, &m, 8), want[i]);
}

/* A draft that pays only when it is nearly always right: at the prior
 * acceptance no length pays, so a new text's first iteration drafts 4
 * anyway, to measure the new text, and drafting goes on when it pays. */
static void test_new_text_probes_first(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.05, 0.8, 1.0);
    sp_adapt_init(&a);
    double mean_g;
    int drafted = run(&a, &m, 8, 100, 50, 100, &mean_g);
    printf("expensive, always right draft: %d of 50 drafted, mean length %.2f\n", drafted, mean_g);
    assert_true(drafted >= 45);
    sp_adapt_new_text(&a);
    assert_int_equal(step(&a, &m, 8), 4);
    assert_true(run(&a, &m, 8, 20, 10, 20, NULL) >= 9);
}

/* The text turns predictable after a long bad stretch: a probe notices and
 * drafting resumes and stays. */
static void test_recovers_when_acceptance_rises(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.05, 0.05, 0.0);
    sp_adapt_init(&a);
    run(&a, &m, 8, 500, 0, 500, NULL);
    m.accept = 0.95;
    int i = 0;
    while (i < 3000 && step(&a, &m, 8) == 0) i++;
    printf("recovery: first draft %d iterations after the change\n", i);
    assert_true(i < 3000);
    int drafted = run(&a, &m, 8, 300, 200, 300, NULL);
    assert_true(drafted >= 95);
}

/* A preempted timing (100x) moves the cost estimates by a bounded step:
 * one spike in the draft's cost does not make a good draft go plain. */
static void test_spike_does_not_steer(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.05, 0.05, 0.95);
    sp_adapt_init(&a);
    run(&a, &m, 8, 100, 0, 100, NULL);
    const double d = m.draft;
    m.draft = 100 * d;
    int32_t g = step(&a, &m, 8);
    m.draft = d;
    assert_true(g > 0);
    assert_true(step(&a, &m, 8) > 0);
}

/* Tokens per second over n iterations of a run at a depth (the simulated
 * seconds: draft, target forward, the rest), sp_adapt_set_depth told the
 * depth when `aware`. */
static double rate_at(sp_adapt *a, sim *m, int64_t depth, bool aware, int n) {
    double tok = 0, sec = 0;
    for (int i = 0; i < n; i++) {
        if (aware) sp_adapt_set_depth(a, depth + i);
        const int32_t g = sp_adapt_propose(a, 8);
        int32_t tau = 0;
        while (tau < g && sp_rng_uniform(&m->rng) < m->accept) tau++;
        const double fwd = m->t1 * (1 + m->slope * g);
        sp_adapt_observe_target(a, g + 1, fwd);
        const sp_adapt_step st = {.drafted = g, .accepted = tau, .emitted = tau + 1,
                                  .draft_seconds = g * m->draft, .over_seconds = m->over,
                                  .draft_forwards = g, .draft_forward_seconds = g * m->draft};
        sp_adapt_observe_step(a, &st);
        tok += tau + 1;
        sec += g * m->draft + fwd + m->over;
    }
    return tok / sec;
}

/* Verification priced at the current depth: a draft right 60% of the time
 * pays at a shallow depth (k-token forward t1 (1 + 0.05 (k - 1)): drafting
 * 3 gives 1.67 tokens per t1, plain 1) but not at depth 4096, where a
 * forward costs twice and each further token 0.6 of it (drafting 1 gives
 * 0.98 of plain, longer less). With the depth told, the controller there
 * keeps at least 0.97 of plain decoding's rate; back at the shallow depth
 * its costs are still that bucket's and drafting resumes at once. */
static void test_depth_prices_verification(void **state) {
    (void)state;
    for (int aware = 1; aware >= 0; aware--) {
        sp_adapt a;
        sim m = model(0.05, 0.05, 0.6);
        sp_adapt_init(&a);
        const double shallow = rate_at(&a, &m, 100, aware, 80);
        assert_true(shallow * m.t1 > 1.2);
        m.t1 = 2e-3, m.slope = 0.6;
        rate_at(&a, &m, 4096, aware, 50); /* settling */
        const double deep = rate_at(&a, &m, 4146, aware, 300) * (m.t1 + m.over);
        printf("depth-%s: shallow %.2f, deep %.3f of plain\n", aware ? "aware" : "blind", shallow * 1e-3, deep);
        if (aware) {
            assert_true(deep >= 0.97);
            m.t1 = 1e-3, m.slope = 0.05;
            sp_adapt_new_text(&a);
            assert_true(rate_at(&a, &m, 100, true, 1) > 0 && a.bucket == 0);
            int drafted = 0;
            for (int i = 0; i < 10; i++) {
                sp_adapt_set_depth(&a, 101 + i);
                drafted += step(&a, &m, 8) > 0;
            }
            assert_true(drafted >= 9);
        }
    }
}

/* Tokens per second over texts of n_tok generated tokens each (a new text
 * each time, costs carried), with the draft's catch-up: after plain steps
 * the draft first evaluates the tokens it missed in one forward (its cost
 * d (1 + slope (m - 1)) for m tokens), as the speculation loop does. */
static double rate_texts(sp_adapt *a, sim *m, int texts, int n_tok) {
    double tok = 0, sec = 0;
    for (int t = 0; t < texts; t++) {
        sp_adapt_new_text(a);
        int32_t missed = 0;
        for (int n = 0; n < n_tok;) {
            const int32_t g = sp_adapt_propose(a, 8);
            int32_t tau = 0;
            while (tau < g && sp_rng_uniform(&m->rng) < m->accept) tau++;
            const double fwd = m->t1 * (1 + m->slope * g);
            const double catchup = g > 0 && missed > 0 ? m->draft * (1 + m->slope * (missed - 1)) : 0;
            sp_adapt_observe_target(a, g + 1, fwd);
            const sp_adapt_step st = {.drafted = g, .accepted = tau, .emitted = tau + 1,
                                      .draft_seconds = catchup + g * m->draft, .over_seconds = m->over,
                                      .draft_forwards = g, .draft_forward_seconds = g * m->draft};
            sp_adapt_observe_step(a, &st);
            missed = g > 0 ? 0 : missed + 1;
            n += tau + 1;
            tok += tau + 1;
            sec += catchup + g * m->draft + fwd + m->over;
        }
    }
    return tok / sec * (m->t1 + m->over);
}

/* A draft that never pays, met again by every short request: synth-1b's
 * Q4_K_M file drafting for its Q8_0 file at T = 0 (a draft forward 0.55 of
 * a target one, each token right 35% of the time, a k-token target
 * forward 1 + 0.04 (k - 1) of a one-token one). Over 24 requests of 64
 * tokens the controller keeps at least 0.97 of plain decoding's rate: what
 * one request learnt about the draft is not thrown away by the next (0.94
 * when it was); and it still drafts when later requests make it pay.
 * (A text's start is a new request: sp_adapt_new_text.) */
static void test_losing_draft_over_short_requests(void **state) {
    (void)state;
    sp_adapt a;
    sim m = model(0.04, 0.55, 0.35);
    sp_adapt_init(&a);
    const double r = rate_texts(&a, &m, 24, 64);
    printf("losing draft, 24 requests of 64 tokens: %.3f of plain\n", r);
    assert_true(r >= 0.97);
    /* then requests where the draft is nearly always right: a request's
     * one-token look, when right, is followed by another, and after three
     * right in a row the request starts afresh, so drafting pays again */
    m.accept = 0.95;
    const double later = rate_texts(&a, &m, 8, 64);
    printf("then 8 requests where it pays: %.3f of plain\n", later);
    assert_true(later >= 1.2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_first_iterations),
    cmocka_unit_test(test_good_draft_drafts_long),
    cmocka_unit_test(test_bad_draft_goes_plain_and_probes),
    cmocka_unit_test(test_hopeless_draft_is_left_alone),
    cmocka_unit_test(test_new_text),
    cmocka_unit_test(test_new_text_probes_first),
    cmocka_unit_test(test_recovers_when_acceptance_rises),
    cmocka_unit_test(test_spike_does_not_steer),
    cmocka_unit_test(test_depth_prices_verification),
    cmocka_unit_test(test_losing_draft_over_short_requests),
};

SP_TEST_MAIN(tests)
