/* Tests for sp_verify: exact enumeration of the verifiers' output
 * distributions (independent reference code below), sampled agreement of the
 * library with that reference, edge cases and input validation.
 * Statistical tests use fixed seeds; significance level 1e-4 unless stated. */
#include "testutil.h"

#include <math.h>

#include "verify.h"
#include "dev/sp_vsim.h"
#include "tree.h"

#define ALPHA 1e-4

/* ---------- independent exact references (double arithmetic) ---------- */

/* Exact P(tau = t, Y = y) of token (lenience 1) or block verification for a
 * fixed draft block; out[(t) * V + y], (gamma+1) x V. */
static void ref_chain(int block, int V, int gamma, const int *x, const double *q, const double *p,
                      double *out) {
    memset(out, 0, sizeof(double) * (size_t)(gamma + 1) * V);
    if (!block) {
        double reach = 1.0;
        for (int i = 0; i < gamma; i++) {
            const double *pi = p + i * V, *qi = q + i * V;
            double a = fmin(1.0, pi[x[i]] / qi[x[i]]);
            double rs = 0;
            for (int y = 0; y < V; y++) rs += fmax(0.0, pi[y] - qi[y]);
            for (int y = 0; y < V; y++)
                if (rs > 0) out[i * V + y] += reach * (1 - a) * fmax(0.0, pi[y] - qi[y]) / rs;
            reach *= a;
        }
        for (int y = 0; y < V; y++) out[gamma * V + y] += reach * p[gamma * V + y];
        return;
    }
    double pacc[80], s[80];
    pacc[0] = 1.0;
    for (int i = 0; i < gamma; i++)
        pacc[i + 1] = fmin(1.0, pacc[i] * p[i * V + x[i]] / q[i * V + x[i]]);
    for (int i = 0; i <= gamma; i++) {
        double w = 0;
        for (int y = 0; y < V; y++) w += fmax(0.0, pacc[i] * p[i * V + y] - (i < gamma ? q[i * V + y] : 0));
        double tot = w + 1 - pacc[i];
        s[i] = tot > 0 ? w / tot : 0;
    }
    for (int i = 0; i <= gamma; i++) {
        double pb = s[i];
        for (int j = i + 1; j <= gamma; j++) pb *= 1 - s[j];
        double w = 0;
        for (int y = 0; y < V; y++) w += fmax(0.0, pacc[i] * p[i * V + y] - (i < gamma ? q[i * V + y] : 0));
        for (int y = 0; y < V; y++)
            if (w > 0)
                out[i * V + y] +=
                    pb * fmax(0.0, pacc[i] * p[i * V + y] - (i < gamma ? q[i * V + y] : 0)) / w;
    }
}

/* Random Markov chain tables (V+1) x V in double; row V = empty context. */
static void rand_tables(int V, unsigned seed, double temp, double *P, double *Q) {
    sp_rng r;
    sp_rng_seed(&r, seed);
    for (int row = 0; row <= V; row++) {
        double sp = 0, sq = 0;
        for (int i = 0; i < V; i++) {
            double a = -log(1 - sp_rng_uniform(&r)), b = -log(1 - sp_rng_uniform(&r));
            P[row * V + i] = pow(a, 1 / temp);
            Q[row * V + i] = pow(b, 1 / temp);
            sp += P[row * V + i];
            sq += Q[row * V + i];
        }
        for (int i = 0; i < V; i++) {
            P[row * V + i] /= sp;
            Q[row * V + i] /= sq;
        }
    }
}

/* Exact losslessness by enumeration: sum over every draft block (weighted by
 * its draft probability) of the verifier's exact output distribution,
 * continued with the target up to gamma+1 tokens, compared with the target's
 * joint distribution of gamma+1 tokens. Returns the max abs difference and
 * the expected number of accepted tokens in *mean_tau. */
static double enum_lossless(int block, int V, int gamma, const double *P, const double *Q,
                            double *mean_tau) {
    int L = gamma + 1;
    long ncell = 1, nblk = 1;
    for (int i = 0; i < L; i++) ncell *= V;
    for (int i = 0; i < gamma; i++) nblk *= V;
    double *got = calloc((size_t)ncell, sizeof(double));
    double *p = malloc(sizeof(double) * (size_t)(L * V)), *q = malloc(sizeof(double) * (size_t)(gamma * V));
    double *out = malloc(sizeof(double) * (size_t)(L * V));
    *mean_tau = 0;
    for (long b = 0; b < nblk; b++) {
        int x[16];
        long t = b;
        for (int i = gamma - 1; i >= 0; i--) {
            x[i] = (int)(t % V);
            t /= V;
        }
        double wq = 1;
        int ctx = V;
        for (int i = 0; i < gamma; i++) {
            memcpy(q + i * V, Q + ctx * V, sizeof(double) * V);
            memcpy(p + i * V, P + ctx * V, sizeof(double) * V);
            wq *= Q[ctx * V + x[i]];
            ctx = x[i];
        }
        memcpy(p + gamma * V, P + ctx * V, sizeof(double) * V);
        ref_chain(block, V, gamma, x, q, p, out);
        for (int tau = 0; tau <= gamma; tau++)
            for (int y = 0; y < V; y++) {
                double pr = wq * out[tau * V + y];
                if (pr == 0) continue;
                *mean_tau += pr * tau;
                /* emitted prefix x_1..x_tau, y; spread over continuations */
                long base = 0;
                for (int i = 0; i < tau; i++) base = base * V + x[i];
                base = base * V + y;
                int rest = L - tau - 1;
                long nrest = 1;
                for (int i = 0; i < rest; i++) nrest *= V;
                for (long c = 0; c < nrest; c++) {
                    long cc = c, div = nrest / V, cell = base;
                    int last = y;
                    double pc = pr;
                    for (int i = 0; i < rest; i++) {
                        int tok = (int)(cc / div);
                        cc %= div;
                        if (div > 1) div /= V;
                        pc *= P[last * V + tok];
                        last = tok;
                        cell = cell * V + tok;
                    }
                    got[cell] += pc;
                }
            }
    }
    double maxd = 0;
    for (long c = 0; c < ncell; c++) {
        long cc = c, div = ncell / V;
        int ctx = V;
        double pt = 1;
        for (int i = 0; i < L; i++) {
            int tok = (int)(cc / div);
            cc %= div;
            if (div > 1) div /= V;
            pt *= P[ctx * V + tok];
            ctx = tok;
        }
        maxd = fmax(maxd, fabs(pt - got[c]));
    }
    free(got);
    free(p);
    free(q);
    free(out);
    return maxd;
}

static void test_toy_exact(void **state) {
    (void)state;
    double P[6] = {1. / 3, 2. / 3, 1. / 3, 2. / 3, 1. / 3, 2. / 3};
    double Q[6] = {2. / 3, 1. / 3, 2. / 3, 1. / 3, 2. / 3, 1. / 3};
    double mt, mb;
    assert_true(enum_lossless(0, 2, 2, P, Q, &mt) < 1e-14);
    assert_true(enum_lossless(1, 2, 2, P, Q, &mb) < 1e-14);
    assert_true(fabs(mt - 10.0 / 9) < 1e-12);
    assert_true(fabs(mb - 11.0 / 9) < 1e-12);
}

/* Token and block are exactly lossless on random Markov chains, V 2..4,
 * gamma 1..5, temperatures 0.5/1/2, and block's expectation >= token's. */
static void test_markov_exact(void **state) {
    (void)state;
    static const int cfg[][3] = {{2, 1, 1}, {2, 5, 2}, {3, 3, 3}, {3, 4, 4}, {4, 2, 5}, {4, 3, 6}};
    static const double temps[3] = {0.5, 1.0, 2.0};
    double P[5 * 4], Q[5 * 4];
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
        for (int t = 0; t < 3; t++) {
            rand_tables(cfg[c][0], (unsigned)cfg[c][2], temps[t], P, Q);
            double mt, mb;
            double dt = enum_lossless(0, cfg[c][0], cfg[c][1], P, Q, &mt);
            double db = enum_lossless(1, cfg[c][0], cfg[c][1], P, Q, &mb);
            assert_true(dt < 1e-13);
            assert_true(db < 1e-13);
            assert_true(mb >= mt - 1e-12);
        }
}

/* Chi-square p-value of counts against exact probabilities. */
static double chi2_p(const int64_t *cnt, const double *prob, int n) {
    sp_vsim_chi2 r;
    sp_vsim_chi2_test(cnt, prob, n, &r);
    return r.p_value;
}

static void to_float(const double *d, float *f, int n) {
    for (int i = 0; i < n; i++) f[i] = (float)d[i];
}

/* The library's (tau, Y) distribution for fixed draft blocks matches the
 * exact reference (chi-square, 40000 calls per block). */
static void test_chain_matches_reference(void **state) {
    (void)state;
    enum { V = 5, G = 3, N = 40000 };
    double P[(V + 1) * V], Q[(V + 1) * V];
    rand_tables(V, 11, 1.0, P, Q);
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 5);
    for (int blk = 0; blk < 4; blk++) {
        int x[G];
        double q[G * V], p[(G + 1) * V], ref[(G + 1) * V];
        float qf[G * V], pf[(G + 1) * V];
        int ctx = V;
        for (int i = 0; i < G; i++) {
            x[i] = (blk * 7 + i * 3) % V;
            memcpy(q + i * V, Q + ctx * V, sizeof(double) * V);
            memcpy(p + i * V, P + ctx * V, sizeof(double) * V);
            ctx = x[i];
        }
        memcpy(p + G * V, P + ctx * V, sizeof(double) * V);
        to_float(q, qf, G * V);
        to_float(p, pf, (G + 1) * V);
        for (int block = 0; block < 2; block++) {
            ref_chain(block, V, G, x, q, p, ref);
            int64_t cnt[(G + 1) * V] = {0};
            int32_t xd[G] = {x[0], x[1], x[2]};
            for (int n = 0; n < N; n++) {
                sp_verify_result r;
                sp_status st = block ? sp_verify_block(ws, G, xd, qf, pf, &rng, &r, NULL)
                                     : sp_verify_token(ws, G, xd, qf, pf, &rng, &r, NULL);
                assert_int_equal(st, SP_OK);
                cnt[r.n_accepted * V + r.token]++;
            }
            assert_true(chi2_p(cnt, ref, (G + 1) * V) > ALPHA);
        }
    }
    sp_verify_ws_free(ws);
}

/* Exact output distribution of one multi-candidate step over all candidate
 * tuples (k <= 3): out[y] = P(emitted token = y); *acc = P(some accepted). */
static void ref_mc(int norep, int V, int k, const double *q, const double *p, double *out, double *acc) {
    memset(out, 0, sizeof(double) * V);
    *acc = 0;
    long n = 1;
    for (int i = 0; i < k; i++) n *= V;
    for (long t = 0; t < n; t++) {
        int x[3];
        long tt = t;
        for (int i = 0; i < k; i++) {
            x[i] = (int)(tt % V);
            tt /= V;
        }
        double qc[16], pc[16], w = 1;
        memcpy(qc, q, sizeof(double) * V);
        memcpy(pc, p, sizeof(double) * V);
        int ok = 1;
        for (int j = 0; j < k && ok; j++) {
            double qs = 0;
            for (int i = 0; i < V; i++) qs += qc[i];
            if (qc[x[j]] <= 0) ok = 0;
            else {
                w *= qc[x[j]] / qs;
                if (norep) qc[x[j]] = 0;
            }
        }
        if (!ok) continue; /* tuple impossible */
        memcpy(qc, q, sizeof(double) * V);
        double reach = w;
        for (int j = 0; j < k; j++) {
            double qs = 0;
            for (int i = 0; i < V; i++) qs += qc[i];
            double a = fmin(1.0, pc[x[j]] / (qc[x[j]] / qs));
            out[x[j]] += reach * a;
            *acc += reach * a;
            reach *= 1 - a;
            double rs = 0;
            for (int i = 0; i < V; i++) rs += fmax(0.0, pc[i] - qc[i] / qs);
            if (rs > 0)
                for (int i = 0; i < V; i++) pc[i] = fmax(0.0, pc[i] - qc[i] / qs) / rs;
            if (norep) qc[x[j]] = 0;
        }
        for (int i = 0; i < V; i++) out[i] += reach * pc[i];
    }
}

static void test_mc_exact(void **state) {
    (void)state;
    double P[5 * 4], Q[5 * 4];
    for (int V = 2; V <= 4; V++)
        for (int k = 1; k <= 3; k++) {
            if (k > V) continue; /* without replacement needs k <= support */
            rand_tables(V, (unsigned)(V * 10 + k), 1.0, P, Q);
            double orep[4], onorep[4], arep, anorep;
            ref_mc(0, V, k, Q, P, orep, &arep);
            ref_mc(1, V, k, Q, P, onorep, &anorep);
            for (int i = 0; i < V; i++) {
                assert_true(fabs(orep[i] - P[i]) < 1e-13);
                assert_true(fabs(onorep[i] - P[i]) < 1e-13);
            }
            assert_true(anorep >= arep - 1e-13);
            if (k > 1) assert_true(anorep > arep); /* strictly, for these full-support models */
        }
}

/* Library mc step for fixed candidates matches the exact per-tuple reference
 * (emitted token and accepted index), with and without replacement; and the
 * sampled acceptance without replacement is at least that with replacement. */
static void test_mc_sampled(void **state) {
    (void)state;
    enum { V = 4, N = 60000 };
    double P[(V + 1) * V], Q[(V + 1) * V];
    rand_tables(V, 77, 1.0, P, Q);
    float pf[V], qf[V];
    to_float(P, pf, V);
    to_float(Q, qf, V);
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 9);
    long acc_mode[2] = {0, 0};
    for (int norep = 0; norep < 2; norep++) {
        int64_t cnt[V] = {0};
        int32_t cand[3];
        for (int n = 0; n < N; n++) {
            /* draw candidates as the drafter would */
            double qc[V];
            for (int i = 0; i < V; i++) qc[i] = Q[i];
            for (int j = 0; j < 3; j++) {
                double s = 0;
                for (int i = 0; i < V; i++) s += qc[i];
                double u = sp_rng_uniform(&rng) * s, c = 0;
                int t = V - 1;
                for (int i = 0; i < V; i++) {
                    c += qc[i];
                    if (u < c && qc[i] > 0) {
                        t = i;
                        break;
                    }
                }
                cand[j] = t;
                if (norep) qc[t] = 0;
            }
            int32_t idx, tok;
            assert_int_equal(sp_verify_mc(ws, norep ? SP_MC_NOREPLACE : SP_MC_REPLACE, 3, cand, qf, pf,
                                          &rng, &idx, &tok, NULL),
                             SP_OK);
            if (idx >= 0) {
                assert_int_equal(cand[idx], tok);
                acc_mode[norep]++;
            }
            cnt[tok]++;
        }
        assert_true(chi2_p(cnt, P, V) > ALPHA);
    }
    /* exact acceptance probabilities, and the samples agree within 5 sigma */
    double o[V], ar, an;
    ref_mc(0, V, 3, Q, P, o, &ar);
    ref_mc(1, V, 3, Q, P, o, &an);
    assert_true(an >= ar);
    assert_true(fabs(acc_mode[0] - ar * N) < 5 * sqrt(N * ar * (1 - ar)) + 1);
    assert_true(fabs(acc_mode[1] - an * N) < 5 * sqrt(N * an * (1 - an)) + 1);
    assert_true(acc_mode[1] >= acc_mode[0] - 5 * sqrt((double)N));
    sp_verify_ws_free(ws);
}

/* Greedy verification reproduces the target argmax chain token for token. */
static void test_greedy_chain(void **state) {
    (void)state;
    enum { V = 8, G = 6 };
    sp_vsim_model m;
    assert_int_equal(sp_vsim_model_markov(&m, V, 3, NULL), SP_OK);
    int am[V + 1];
    for (int r = 0; r <= V; r++) {
        am[r] = 0;
        for (int i = 1; i < V; i++)
            if (m.target[r * V + i] > m.target[r * V + am[r]]) am[r] = i;
    }
    /* plain greedy decoding from the empty context */
    int chain[G + 1], ctx = V;
    for (int i = 0; i <= G; i++) chain[i] = ctx = am[ctx];
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 4);
    float p[(G + 1) * V];
    for (int trial = 0; trial < 2000; trial++) {
        int32_t x[G];
        /* drafts that follow the greedy chain for a random number of steps */
        int follow = (int)sp_rng_below(&rng, G + 1);
        ctx = V;
        for (int i = 0; i < G; i++) {
            x[i] = i < follow ? chain[i] : (int32_t)sp_rng_below(&rng, V);
            memcpy(p + i * V, m.target + ctx * V, sizeof(float) * V);
            ctx = x[i];
        }
        memcpy(p + G * V, m.target + ctx * V, sizeof(float) * V);
        sp_verify_result r;
        assert_int_equal(sp_verify_greedy(ws, G, x, p, &r, NULL), SP_OK);
        int match = 0;
        while (match < G && x[match] == chain[match]) match++;
        assert_int_equal(r.n_accepted, match);
        for (int i = 0; i < r.n_accepted; i++) assert_int_equal(x[i], chain[i]);
        assert_int_equal(r.token, chain[r.n_accepted]);
    }
    /* ties: lowest id */
    float tie[4] = {0.25f, 0.375f, 0.375f, 0.0f}, tie2[8];
    memcpy(tie2, tie, sizeof tie);
    memcpy(tie2 + 4, tie, sizeof tie);
    sp_verify_ws *w4;
    assert_int_equal(sp_verify_ws_init(4, &w4, NULL), SP_OK);
    int32_t xd = 2;
    sp_verify_result r;
    assert_int_equal(sp_verify_greedy(w4, 1, &xd, tie2, &r, NULL), SP_OK);
    assert_int_equal(r.n_accepted, 0);
    assert_int_equal(r.token, 1);
    sp_verify_ws_free(w4);
    sp_verify_ws_free(ws);
    sp_vsim_model_free(&m);
}

/* ---------- edge cases ---------- */

/* Reliability probe (issue 11, item 3): rows the validator accepts (sums
 * within the tolerance, p_0 <= q_0 elementwise, p_0 of the drafted token 0)
 * made block verification abort on an internal assertion. Every verifier
 * must return a result for them, with a target-supported extra token. */
static void test_block_rows_within_tolerance(void **state) {
    (void)state;
    enum { V = 4, G = 1 };
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    const float q[G * V] = {0.0005f, 0.4995f, 0.25f, 0.25f};
    const float p[(G + 1) * V] = {0.0f, 0.4995f, 0.25f, 0.25f, /* sums to 0.9995 */
                                  0.25f, 0.25f, 0.25f, 0.25f};
    const int32_t x[G] = {0};
    sp_error e;
    assert_int_equal(sp_verify_check_row(p, V, "p_0", &e), SP_OK);
    assert_int_equal(sp_verify_check_row(q, V, "q_0", &e), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 3);
    for (int n = 0; n < 200; n++) {
        sp_verify_result r = {-1, -1};
        assert_int_equal(sp_verify_block(ws, G, x, q, p, &rng, &r, &e), SP_OK);
        assert_int_equal(r.n_accepted, 0); /* p_0(X_1) = 0: never accepted */
        assert_true(r.token >= 1 && r.token < V);
        assert_int_equal(sp_verify_token(ws, G, x, q, p, &rng, &r, &e), SP_OK);
        assert_int_equal(r.n_accepted, 0);
        assert_true(r.token >= 1 && r.token < V);
    }
    sp_verify_ws_free(ws);
}

static void test_edges(void **state) {
    (void)state;
    enum { V = 4, G = 2 };
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 21);
    const float pr[V] = {0.1f, 0.2f, 0.3f, 0.4f};
    float p[(G + 1) * V], q[G * V];
    for (int i = 0; i <= G; i++) memcpy(p + i * V, pr, sizeof pr);
    sp_verify_result r;
    int32_t idx, tok;

    /* p == q: everything accepted, by every lossless verifier */
    memcpy(q, p, sizeof q);
    int32_t x[G] = {3, 1};
    for (int n = 0; n < 500; n++) {
        assert_int_equal(sp_verify_token(ws, G, x, q, p, &rng, &r, NULL), SP_OK);
        assert_int_equal(r.n_accepted, G);
        assert_int_equal(sp_verify_block(ws, G, x, q, p, &rng, &r, NULL), SP_OK);
        assert_int_equal(r.n_accepted, G);
        assert_int_equal(sp_verify_mc(ws, SP_MC_REPLACE, 2, x, q, p, &rng, &idx, &tok, NULL), SP_OK);
        assert_int_equal(idx, 0);
    }

    /* one-hot draft with p(x) = 0.3 at gamma 1: acceptance 0.3 (5 sigma),
     * and a rejected step never emits x (the residual is zero there) */
    float oh[V] = {0, 0, 1, 0};
    int32_t x1 = 2;
    for (int block = 0; block < 2; block++) {
        long acc = 0;
        for (int n = 0; n < 20000; n++) {
            assert_int_equal((block ? sp_verify_block : sp_verify_token)(ws, 1, &x1, oh, p, &rng, &r, NULL),
                             SP_OK);
            if (r.n_accepted) acc++;
            else assert_int_not_equal(r.token, 2);
        }
        assert_true(fabs(acc - 6000.0) < 5 * sqrt(20000 * 0.21));
    }

    /* zero target probability for a drafted token: never accepted */
    float pz[(G + 1) * V], qz[G * V];
    const float pz0[V] = {0.5f, 0.5f, 0.0f, 0.0f}, qz0[V] = {0.25f, 0.25f, 0.25f, 0.25f};
    for (int i = 0; i <= G; i++) memcpy(pz + i * V, pz0, sizeof pz0);
    for (int i = 0; i < G; i++) memcpy(qz + i * V, qz0, sizeof qz0);
    int32_t xz[G] = {3, 0};
    for (int n = 0; n < 500; n++) {
        assert_int_equal(sp_verify_token(ws, G, xz, qz, pz, &rng, &r, NULL), SP_OK);
        assert_int_equal(r.n_accepted, 0);
        assert_true(r.token == 0 || r.token == 1);
        assert_int_equal(sp_verify_block(ws, G, xz, qz, pz, &rng, &r, NULL), SP_OK);
        assert_int_equal(r.n_accepted, 0);
        assert_true(r.token == 0 || r.token == 1);
    }

    /* disjoint supports: nothing accepted; the residual is the target */
    const float pd[V] = {0.0f, 0.0f, 0.25f, 0.75f}, qd[V] = {0.5f, 0.5f, 0.0f, 0.0f};
    for (int i = 0; i <= G; i++) memcpy(pz + i * V, pd, sizeof pd);
    for (int i = 0; i < G; i++) memcpy(qz + i * V, qd, sizeof qd);
    int32_t xd[G] = {0, 1};
    int64_t cnt[3][V] = {{0}};
    for (int n = 0; n < 20000; n++) {
        assert_int_equal(sp_verify_token(ws, G, xd, qz, pz, &rng, &r, NULL), SP_OK);
        assert_int_equal(r.n_accepted, 0);
        cnt[0][r.token]++;
        assert_int_equal(sp_verify_block(ws, G, xd, qz, pz, &rng, &r, NULL), SP_OK);
        assert_int_equal(r.n_accepted, 0);
        cnt[1][r.token]++;
        assert_int_equal(sp_verify_mc(ws, SP_MC_NOREPLACE, 2, xd, qd, pd, &rng, &idx, &tok, NULL), SP_OK);
        assert_int_equal(idx, -1);
        cnt[2][tok]++;
    }
    double pdd[V] = {0, 0, 0.25, 0.75};
    for (int k = 0; k < 3; k++) {
        assert_true(chi2_p(cnt[k], pdd, V) > ALPHA);
    }
    sp_verify_ws_free(ws);
}

static void test_rejects_bad_input(void **state) {
    (void)state;
    enum { V = 3, G = 1 };
    sp_verify_ws *ws;
    sp_error e = {0};
    assert_int_equal(sp_verify_ws_init(1, &ws, &e), SP_ERR_ARG);
    assert_null(ws);
    assert_int_equal(sp_verify_ws_init(SP_VERIFY_MAX_VOCAB + 1, &ws, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_ws_init(V, &ws, &e), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 1);
    const float good[V] = {0.2f, 0.3f, 0.5f};
    const float bad[][V] = {{NAN, 0.5f, 0.5f}, {-0.1f, 0.6f, 0.5f}, {0.2f, 0.3f, 0.4f},
                            {INFINITY, 0.0f, 0.0f}, {0.5f, 0.5f, 0.5f}};
    float p[(G + 1) * V], q[G * V];
    int32_t x = 1, idx, tok;
    sp_verify_result r;
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
        for (int where = 0; where < 3; where++) { /* bad q_0, p_0 or p_1 */
            memcpy(q, where == 0 ? bad[b] : good, sizeof good);
            memcpy(p, where == 1 ? bad[b] : good, sizeof good);
            memcpy(p + V, where == 2 ? bad[b] : good, sizeof good);
            e.msg[0] = 0;
            assert_int_equal(sp_verify_token(ws, G, &x, q, p, &rng, &r, &e), SP_ERR_ARG);
            assert_true(strlen(e.msg) > 0);
            assert_int_equal(sp_verify_block(ws, G, &x, q, p, &rng, &r, &e), SP_ERR_ARG);
            assert_int_equal(sp_verify_lenient(ws, G, &x, q, p, 0.5, &rng, &r, &e), SP_ERR_ARG);
            if (where) assert_int_equal(sp_verify_greedy(ws, G, &x, p, &r, &e), SP_ERR_ARG);
            if (where < 2)
                assert_int_equal(sp_verify_mc(ws, SP_MC_REPLACE, 1, &x, q, p, &rng, &idx, &tok, &e),
                                 SP_ERR_ARG);
        }
    memcpy(q, good, sizeof good);
    memcpy(p, good, sizeof good);
    memcpy(p + V, good, sizeof good);
    /* a drafted token with zero draft probability is an input error */
    const float qz[V] = {0.5f, 0.0f, 0.5f};
    assert_int_equal(sp_verify_token(ws, G, &x, qz, p, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_block(ws, G, &x, qz, p, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_mc(ws, SP_MC_REPLACE, 1, &x, qz, p, &rng, &idx, &tok, &e), SP_ERR_ARG);
    /* duplicates or more candidates than the support, without replacement */
    int32_t dup[2] = {1, 1};
    assert_int_equal(sp_verify_mc(ws, SP_MC_NOREPLACE, 2, dup, q, p, &rng, &idx, &tok, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_mc(ws, SP_MC_REPLACE, 2, dup, q, p, &rng, &idx, &tok, &e), SP_OK);
    /* token out of range, bad gamma, bad lenience, NULLs */
    int32_t xb = 3;
    assert_int_equal(sp_verify_token(ws, G, &xb, q, p, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_token(ws, 0, &x, q, p, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_token(ws, SP_VERIFY_MAX_GAMMA + 1, &x, q, p, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_lenient(ws, G, &x, q, p, 0.0, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_lenient(ws, G, &x, q, p, 1.5, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_token(ws, G, &x, NULL, p, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_chain(ws, SP_VERIFIER_MC, 1, G, &x, q, p, &rng, &r, &e), SP_ERR_ARG);
    assert_int_equal(sp_verify_chain(ws, SP_VERIFIER_BLOCK, 1, G, &x, q, p, &rng, &r, &e), SP_OK);
    /* unnormalised within tolerance is accepted */
    const float near[V] = {0.2f, 0.3f, 0.5005f};
    assert_int_equal(sp_verify_token(ws, G, &x, near, p, &rng, &r, &e), SP_OK);
    sp_verifier v;
    assert_int_equal(sp_verifier_parse("mc-norep", &v, &e), SP_OK);
    assert_int_equal(v, SP_VERIFIER_MC_NOREP);
    assert_int_equal(sp_verifier_parse("fast", &v, &e), SP_ERR_ARG);
    sp_verify_ws_free(ws);
}

/* ---------- tree shapes and tree walk ---------- */

static void test_tree_shape(void **state) {
    (void)state;
    sp_tree_shape s;
    sp_error e;
    assert_int_equal(sp_tree_shape_parse("4x2x2", &s, &e), SP_OK);
    assert_int_equal(s.depth, 3);
    assert_int_equal(s.n_nodes, 1 + 4 + 8 + 16);
    int32_t par[29], dep[29];
    assert_int_equal(sp_tree_shape_build(&s, par, dep, 28, &e), SP_ERR_RANGE);
    assert_int_equal(sp_tree_shape_build(&s, par, dep, 29, &e), SP_OK);
    assert_int_equal(par[0], -1);
    for (int i = 1; i <= 4; i++) assert_int_equal(par[i], 0);
    assert_int_equal(par[5], 1);
    assert_int_equal(par[6], 1);
    assert_int_equal(par[7], 2);
    assert_int_equal(par[13], 5);
    assert_int_equal(par[28], 12);
    assert_int_equal(dep[28], 3);
    for (int i = 1; i < 29; i++) assert_true(par[i] < i);
    const char *bad[] = {"", "x", "4x", "x4", "4xx2", "0x2", "4x-1", "a", "4 x2", "4x2 ", "2.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(sp_tree_shape_parse(bad[i], &s, &e), SP_ERR_ARG);
    assert_int_equal(sp_tree_shape_parse("1024", &s, &e), SP_ERR_RANGE);
    assert_int_equal(sp_tree_shape_parse("99999999999999999999", &s, &e), SP_ERR_RANGE);
    assert_int_equal(sp_tree_shape_parse("32x32", &s, &e), SP_ERR_RANGE);
    assert_int_equal(sp_tree_shape_parse("1023", &s, &e), SP_OK);
    /* dynamic trees: K, depth, kept nodes; the canonical text back */
    assert_int_equal(sp_tree_shape_parse("dyn:4:6:32", &s, &e), SP_OK);
    assert_true(s.dyn_k == 4 && s.depth == 6 && s.n_nodes == 33);
    char txt[32];
    assert_int_equal(sp_tree_shape_format(&s, txt, sizeof txt), 10);
    assert_string_equal(txt, "dyn:4:6:32");
    assert_int_equal(sp_tree_shape_build(&s, par, dep, 29, &e), SP_ERR_ARG); /* no fixed layout */
    assert_int_equal(sp_tree_shape_parse("dyn:16:64:1023", &s, &e), SP_OK);
    const char *bad_dyn[] = {"dyn:", "dyn:4", "dyn:4:6", "dyn:4:6:", "dyn:4:6:32:", "dyn:a:6:32", "dyn: 4:6:32",
                             "dyn:4:6:32 ", "dyn:0:6:32", "dyn:4:0:32", "dyn:4:6:0", "dyn:-1:6:32", "dyn4:6:32"};
    for (size_t i = 0; i < sizeof bad_dyn / sizeof bad_dyn[0]; i++)
        assert_int_equal(sp_tree_shape_parse(bad_dyn[i], &s, &e), SP_ERR_ARG);
    const char *big_dyn[] = {"dyn:17:6:32", "dyn:4:65:32", "dyn:4:6:1024", "dyn:4:6:99999999999999999999"};
    for (size_t i = 0; i < sizeof big_dyn / sizeof big_dyn[0]; i++)
        assert_int_equal(sp_tree_shape_parse(big_dyn[i], &s, &e), SP_ERR_RANGE);
    char deep[200] = "1";
    for (int i = 0; i < SP_TREE_MAX_DEPTH; i++) strcat(deep, "x1");
    assert_int_equal(sp_tree_shape_parse(deep, &s, &e), SP_ERR_RANGE);
}

/* The mask of a 2x2 tree (nodes 1,2 under the root; 3,4 under 1; 5,6
 * under 2) written out by hand, with a 2-token prefix every node sees; the
 * shape helpers on hand-counted shapes. */
static void test_tree_mask_and_helpers(void **state) {
    (void)state;
    sp_tree_shape s;
    sp_error e;
    assert_int_equal(sp_tree_shape_parse("2x2", &s, &e), SP_OK);
    int32_t par[7];
    assert_int_equal(sp_tree_shape_build(&s, par, NULL, 7, &e), SP_OK);
    enum { W = 2 + 6 };
    static const uint8_t want[6][W] = {
        /* prefix | nodes 1 2 3 4 5 6 */
        {1, 1, 1, 0, 0, 0, 0, 0}, /* node 1 */
        {1, 1, 0, 1, 0, 0, 0, 0}, /* node 2 */
        {1, 1, 1, 0, 1, 0, 0, 0}, /* node 3: 1 */
        {1, 1, 1, 0, 0, 1, 0, 0}, /* node 4: 1 */
        {1, 1, 0, 1, 0, 0, 1, 0}, /* node 5: 2 */
        {1, 1, 0, 1, 0, 0, 0, 1}, /* node 6: 2 */
    };
    uint8_t m[6][W];
    memset(m, 7, sizeof m); /* every byte must be written */
    sp_tree_ancestor_mask(par, 1, 6, 2, W, &m[0][0]);
    assert_memory_equal(m, want, sizeof want);
    /* one level (nodes 3..6) against cache slots, no prefix */
    uint8_t lv[4][6];
    sp_tree_ancestor_mask(par, 3, 4, 0, 6, &lv[0][0]);
    for (int r = 0; r < 4; r++) assert_memory_equal(lv[r], want[2 + r] + 2, 6);

    char buf[64];
    assert_int_equal(sp_tree_shape_parse("4x2x1", &s, &e), SP_OK);
    assert_int_equal(sp_tree_shape_format(&s, buf, sizeof buf), 5);
    assert_string_equal(buf, "4x2x1");
    assert_int_equal(sp_tree_shape_format(&s, buf, 3), 5); /* truncated, still terminated */
    assert_string_equal(buf, "4x");
    assert_int_equal(sp_tree_shape_max_level(&s), 8);
    const int32_t br[3] = {3, 1, 1};
    assert_int_equal(sp_tree_shape_make(br, 3, &s, &e), SP_OK);
    assert_int_equal(s.n_nodes, 10);
    assert_int_equal(sp_tree_shape_max_level(&s), 3);
    const int32_t bad[2] = {2, 0}, big[2] = {32, 32};
    assert_int_equal(sp_tree_shape_make(bad, 2, &s, &e), SP_ERR_ARG);
    assert_int_equal(sp_tree_shape_make(big, 2, &s, &e), SP_ERR_RANGE);
    assert_int_equal(sp_tree_shape_make(br, 0, &s, &e), SP_ERR_ARG);
}

/* Greedy tree verification on one-hot rows: it follows the child equal to
 * the argmax (the first such child when two siblings share a token), stops
 * where none matches and emits that argmax; bad rows are refused. */
static void test_tree_greedy(void **state) {
    (void)state;
    enum { V = 3, N = 6 };
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    /* root -> {1: tok 2, 2: tok 1}; 1 -> {3: tok 0, 4: tok 0}; 2 -> {5: tok 1} */
    int32_t parent[N] = {-1, 0, 0, 1, 1, 2}, token[N] = {0, 2, 1, 0, 0, 1};
    float p[N * V] = {0};
    const int32_t amax[N] = {2, 0, 0, 1, 2, 0}; /* argmax of p[node] */
    for (int i = 0; i < N; i++) p[i * V + amax[i]] = 1.0f;
    sp_verify_tree t = {N, parent, token, p, NULL};
    int32_t path[4], n, y;
    sp_error e;
    assert_int_equal(sp_verify_tree_greedy(ws, &t, path, 4, &n, &y, &e), SP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(path[0], 1);
    assert_int_equal(path[1], 3); /* node 3 before its twin 4 */
    assert_int_equal(y, 1);       /* argmax of p[3]; node 3 has no children */
    p[0 * V + 2] = 0.0f;
    p[0 * V + 0] = 1.0f; /* no child of the root has token 0 */
    assert_int_equal(sp_verify_tree_greedy(ws, &t, path, 4, &n, &y, &e), SP_OK);
    assert_int_equal(n, 0);
    assert_int_equal(y, 0);
    p[0] = 0.5f; /* row sums to 0.5 */
    assert_int_equal(sp_verify_tree_greedy(ws, &t, path, 4, &n, &y, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "p[0]"));
    sp_verify_ws_free(ws);
}

static void test_tree_walk_bad(void **state) {
    (void)state;
    enum { V = 2 };
    sp_verify_ws *ws;
    assert_int_equal(sp_verify_ws_init(V, &ws, NULL), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, 2);
    float rows[3 * V] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    int32_t parent[3] = {-1, 0, 2}, token[3] = {0, 1, 0}, path[4], n, y;
    sp_verify_tree t = {3, parent, token, rows, rows};
    sp_error e;
    assert_int_equal(sp_verify_tree_walk(ws, &t, SP_MC_REPLACE, &rng, path, 4, &n, &y, &e), SP_ERR_ARG);
    parent[2] = 1;
    token[2] = 5;
    assert_int_equal(sp_verify_tree_walk(ws, &t, SP_MC_REPLACE, &rng, path, 4, &n, &y, &e), SP_ERR_ARG);
    token[2] = 0;
    /* p == q: the whole chain is accepted and the bonus comes from the leaf */
    for (int i = 0; i < 100; i++) {
        assert_int_equal(sp_verify_tree_walk(ws, &t, SP_MC_REPLACE, &rng, path, 4, &n, &y, &e), SP_OK);
        assert_int_equal(n, 2);
        assert_int_equal(path[0], 1);
        assert_int_equal(path[1], 2);
    }
    assert_int_equal(sp_verify_tree_walk(ws, &t, SP_MC_REPLACE, &rng, path, 1, &n, &y, &e), SP_ERR_RANGE);
    t.n_nodes = 1; /* bare root: just a target sample */
    assert_int_equal(sp_verify_tree_walk(ws, &t, SP_MC_NAIVE, &rng, path, 4, &n, &y, &e), SP_OK);
    assert_int_equal(n, 0);
    sp_verify_ws_free(ws);
}

/* ---------- chi-square tail ---------- */

/* Closed form for integer dof: sf(x;1) = erfc(sqrt(x/2)), sf(x;2) = e^{-x/2},
 * sf(x;k+2) = sf(x;k) + (x/2)^{k/2} e^{-x/2} / Gamma(k/2 + 1). */
static double sf_closed(double x, int k) {
    double s = (k % 2) ? erfc(sqrt(x / 2)) : exp(-x / 2);
    for (int j = (k % 2) ? 1 : 2; j < k; j += 2) s += exp(j / 2.0 * log(x / 2) - x / 2 - lgamma(j / 2.0 + 1));
    return s;
}

static void test_chi2_tail(void **state) {
    (void)state;
    assert_true(fabs(sp_vsim_chi2_sf(3.841459, 1) - 0.05) < 1e-6);
    double p15 = sp_vsim_chi2_sf(44.3, 15);
    assert_true(p15 > 0.9e-4 && p15 < 1.1e-4);
    assert_true(fabs(sp_vsim_chi2_sf(0, 3) - 1) < 1e-15);
    assert_true(sp_vsim_chi2_sf(5, 0) == 1.0);
    static const int ks[] = {1, 2, 3, 4, 7, 15, 30, 101};
    static const double xs[] = {0.01, 0.5, 1, 3, 10, 25, 60, 150};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        for (size_t j = 0; j < sizeof xs / sizeof xs[0]; j++) {
            double a = sp_vsim_chi2_sf(xs[j], ks[i]), b = sf_closed(xs[j], ks[i]);
            assert_true(fabs(a - b) <= 1e-10 * fmax(b, 1e-300) + 1e-300);
        }
    assert_true(isnan(sp_vsim_gamma_q(-1, 1)));
    assert_true(fabs(sp_vsim_gamma_q(1, 2) - exp(-2)) < 1e-15);
}

/* The goodness-of-fit statistic on hand-computed cases: four equal cells
 * (chi2 = (15^2 + 5^2 + 5^2 + 15^2) / 25 = 20, 3 dof); unnormalised
 * probabilities; a pool of small cells (expected 1 + 2 < 5) merged into the
 * smallest cell; an observation in an impossible cell. */
static void test_chi2_test(void **state) {
    (void)state;
    sp_vsim_chi2 r;
    const int64_t c4[4] = {10, 20, 30, 40};
    const double p4[4] = {0.25, 0.25, 0.25, 0.25}, w4[4] = {2, 2, 2, 2};
    sp_vsim_chi2_test(c4, p4, 4, &r);
    assert_true(fabs(r.chi2 - 20.0) < 1e-12);
    assert_int_equal(r.dof, 3);
    assert_int_equal(r.n, 100);
    assert_true(fabs(r.p_value - sf_closed(20.0, 3)) < 1e-12);
    sp_vsim_chi2_test(c4, w4, 4, &r);
    assert_true(fabs(r.chi2 - 20.0) < 1e-12);
    /* e = 1, 2, 47, 50: the pool (e 3, o 5) joins the 47-cell (o 40), which
     * becomes e 50, o 45; the 50-cell has o 55: chi2 = 25/50 + 25/50 = 1 */
    const int64_t c5[4] = {2, 3, 40, 55};
    const double p5[4] = {0.01, 0.02, 0.47, 0.5};
    sp_vsim_chi2_test(c5, p5, 4, &r);
    assert_int_equal(r.n, 100);
    assert_true(fabs(r.chi2 - 1.0) < 1e-12);
    assert_int_equal(r.dof, 1);
    const int64_t c6[3] = {0, 5, 5};
    const double p6[3] = {0.0, 0.5, 0.5};
    sp_vsim_chi2_test(c6, p6, 3, &r);
    assert_int_equal(r.impossible, 0);
    assert_true(r.p_value == 1.0);
    const int64_t c7[3] = {1, 5, 5};
    sp_vsim_chi2_test(c7, p6, 3, &r);
    assert_int_equal(r.impossible, 1);
    assert_true(r.p_value == 0.0);
}

/* Validation over long rows (the vectorised chunk path): a single bad entry
 * anywhere is found and named; -0.0 is a valid zero. */
static void test_validation_large(void **state) {
    (void)state;
    enum { V = 1000 };
    static float row[V];
    static const int where[] = {0, 255, 256, 700, 767, 768, 999};
    static const float badv[] = {NAN, -1e-30f, INFINITY, -INFINITY, 2.0f};
    sp_error e;
    for (size_t w = 0; w < sizeof where / sizeof where[0]; w++)
        for (size_t b = 0; b < sizeof badv / sizeof badv[0]; b++) {
            for (int i = 0; i < V; i++) row[i] = 1.0f / V;
            row[where[w]] = badv[b];
            assert_int_equal(sp_verify_check_row(row, V, "row", &e), SP_ERR_ARG);
            if (b < 4) {
                char want[32];
                snprintf(want, sizeof want, "entry %d ", where[w]);
                assert_non_null(strstr(e.msg, want));
            }
        }
    for (int i = 0; i < V; i++) row[i] = i < 500 ? 2.0f / V : -0.0f;
    assert_int_equal(sp_verify_check_row(row, V, "row", &e), SP_OK);
    for (int i = 0; i < V; i++) row[i] = 1.0f / V * 1.002f; /* sum 1.002 */
    assert_int_equal(sp_verify_check_row(row, V, "row", &e), SP_ERR_ARG);
    for (int i = 0; i < V; i++) row[i] = 1.0f / V * 1.0005f;
    assert_int_equal(sp_verify_check_row(row, V, "row", &e), SP_OK);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_toy_exact),          cmocka_unit_test(test_markov_exact),
    cmocka_unit_test(test_chain_matches_reference), cmocka_unit_test(test_mc_exact),
    cmocka_unit_test(test_mc_sampled),         cmocka_unit_test(test_greedy_chain),
    cmocka_unit_test(test_edges),              cmocka_unit_test(test_rejects_bad_input),
    cmocka_unit_test(test_tree_shape),         cmocka_unit_test(test_tree_walk_bad),
    cmocka_unit_test(test_chi2_tail),
    cmocka_unit_test(test_chi2_test),
    cmocka_unit_test(test_tree_mask_and_helpers),
    cmocka_unit_test(test_tree_greedy),
    cmocka_unit_test(test_block_rows_within_tolerance),          cmocka_unit_test(test_validation_large),
};
SP_TEST_MAIN(tests)
