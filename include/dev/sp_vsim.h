/* sp_vsim: toy-model simulator for the verifiers (what `specula verify-sim`
 * and the statistical tests run) and the chi-square upper tail.
 *
 * Toy models are first-order Markov chains over V tokens, given as two
 * (V+1) x V tables of next-token distributions (target and draft): row c is
 * the distribution after token c, row V the distribution for the empty
 * context. A context-free model has all rows equal.
 *
 * One trial = one iteration of the speculative outer loop from the empty
 * context (ALGORITHMS.md section 1):
 *  - chain verifiers (token, block, greedy, lenient): draft X_1..X_gamma from
 *    the draft chain, take p_0..p_gamma from the target chain, verify, emit
 *    X_1..X_tau, Y;
 *  - multi-candidate verifiers (mc, mc-norep, naive): draft a tree from the
 *    draft chain (the given shape, or with `candidates` K the shape
 *    K x 1 x ... x 1 of depth gamma: K candidates for the first position,
 *    each continued by a single drafted chain), children of a node drawn
 *    i.i.d. from q[node] (mc, naive) or without replacement (mc-norep; a node
 *    gets fewer children if q's support is exhausted), verify with
 *    sp_verify_tree_walk, emit the path tokens and the extra token.
 * Accepted length = tau (chain) or path length (tree), in [0, depth].
 *
 * Losslessness check (Lemma 2 of the block verification paper): the first
 * depth+1 emitted tokens of each trial, continued with target samples where
 * fewer were emitted, must be distributed as depth+1 tokens sampled from the
 * target. The simulator compares the empirical distribution of the first
 * check_len tokens with the exact target distribution by a chi-square test.
 * check_len = depth + 1 when V^(depth+1) <= SP_VSIM_MAX_CELLS (exact
 * enumeration), otherwise the longest prefix marginal that fits (exact = 0).
 * Cells with expected count < 5 are pooled into one cell (merged into the
 * smallest other cell if the pool itself is < 5). Sequences with zero target
 * probability that were observed are counted in `impossible` and force
 * p_value = 0. */
#ifndef SP_VSIM_H
#define SP_VSIM_H

#include <stdint.h>

#include "sp_status.h"
#include "verify.h"

#define SP_VSIM_MAX_VOCAB 1024
#define SP_VSIM_MAX_CELLS (1 << 20)
#define SP_VSIM_MAX_TRIALS 1000000000LL

typedef struct sp_vsim_model {
    int32_t n_vocab;
    float *target; /* [(V+1) * V] */
    float *draft;  /* [(V+1) * V] */
} sp_vsim_model;

/* Context-free model from p[V], q[V] (doubles). Each must be finite, >= 0 and
 * sum to 1 within SP_VERIFY_SUM_TOL; it is then renormalised exactly.
 * V in [2, SP_VSIM_MAX_VOCAB]. SP_ERR_ARG otherwise, SP_ERR_NOMEM. */
sp_status sp_vsim_model_context_free(sp_vsim_model *m, int32_t V, const double *p, const double *q,
                                     sp_error *err);

/* Random first-order Markov chains over V tokens from `seed`: target rows
 * are peaked Dirichlet-like draws, draft rows are the target rows perturbed
 * by independent log-normal noise (so the two differ but agree partly). */
sp_status sp_vsim_model_markov(sp_vsim_model *m, int32_t V, uint64_t seed, sp_error *err);

/* Apply temperature T >= 0 to every row of both tables: p^(1/T) renormalised;
 * T = 0 gives the one-hot argmax (lowest id on ties); T = 1 is a no-op. */
sp_status sp_vsim_model_temperature(sp_vsim_model *m, double T, sp_error *err);
void sp_vsim_model_free(sp_vsim_model *m); /* frees the tables, keeps *m valid as empty */

typedef struct sp_vsim_params {
    sp_verifier verifier;
    double lenience;            /* lenient only, (0, 1] */
    int32_t gamma;              /* chain length, [1, SP_VERIFY_MAX_GAMMA]; depth for `candidates` */
    int32_t candidates;         /* multi-candidate K >= 1 (ignored when tree != NULL) */
    const sp_tree_shape *tree;  /* multi-candidate tree shape, or NULL */
    int64_t trials;             /* [1, SP_VSIM_MAX_TRIALS] */
    uint64_t seed;
} sp_vsim_params;

/* token verifier, lenience 1, gamma 4, candidates 2, no tree, 10000 trials, seed 1 */
sp_vsim_params sp_vsim_default_params(void);

typedef struct sp_vsim_result {
    int32_t depth;                                 /* drafted positions per trial */
    int64_t trials;
    double mean_accepted;                          /* mean accepted draft tokens */
    double block_efficiency;                       /* mean emitted tokens per trial */
    int64_t accept_hist[SP_VERIFY_MAX_GAMMA + 1];  /* [0..depth] */
    int32_t check_len;                             /* tokens compared per trial */
    int exact;                                     /* 1 iff check_len == depth + 1 */
    int64_t n_cells;                               /* V^check_len */
    double chi2;
    int32_t dof;
    double p_value;
    int64_t impossible;
} sp_vsim_result;

/* Run the simulation. SP_ERR_ARG for bad parameters (chain verifier with a
 * tree, multi-candidate verifier whose tree exceeds SP_TREE_MAX_NODES, ...),
 * SP_ERR_NOMEM; verifier errors are passed on. */
sp_status sp_vsim_run(const sp_vsim_model *m, const sp_vsim_params *prm, sp_vsim_result *res,
                      sp_error *err);

/* Exact expected accepted draft tokens per iteration (block efficiency
 * minus 1) of the verifier in prm on the toy model: every draft (a chain,
 * or a tree of prm's shape with children drawn as the verifier assumes) is
 * enumerated with its probability, and for each the verifier's outcome
 * probabilities are followed branch by branch in double arithmetic (no
 * random numbers): an independent re-statement of token, block, mc,
 * mc-norep, gbv and traversal verification. Comparing it with
 * sp_vsim_run's sampled mean checks the implementation; comparing
 * verifiers on it compares them without sampling noise. SP_ERR_UNSUPPORTED
 * for the other verifiers, SP_ERR_RANGE when more than SP_VSIM_MAX_EXACT
 * drafts (V^drafted nodes) would be enumerated. */
#define SP_VSIM_MAX_EXACT 2000000
sp_status sp_vsim_exact(const sp_vsim_model *m, const sp_vsim_params *prm, double *mean_accepted,
                        sp_error *err);

/* Regularised upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a),
 * a > 0, x >= 0 (series for x < a + 1, continued fraction otherwise).
 * Returns NaN for invalid arguments. */
double sp_vsim_gamma_q(double a, double x);

/* Chi-square upper tail P(X >= chi2) with dof degrees of freedom:
 * Q(dof/2, chi2/2); 1 for dof <= 0. */
double sp_vsim_chi2_sf(double chi2, double dof);

/* Pearson chi-square goodness of fit of observed counts against cell
 * probabilities; the one test behind the simulator and the statistical
 * tests. */
typedef struct sp_vsim_chi2 {
    double chi2;
    int32_t dof;        /* cells used - 1 (0 when fewer than two) */
    double p_value;     /* sp_vsim_chi2_sf(chi2, dof); 0 if impossible > 0 */
    int64_t n;          /* observations: sum of the counts */
    int64_t impossible; /* observations in cells of probability 0 */
} sp_vsim_chi2;

/* count[n_cells] observations, prob[n_cells] >= 0 cell probabilities
 * (normalised here by their sum, so rounding in them does not matter).
 * Expected counts are prob * n. Cells with expected count < 5 are pooled
 * into one cell; a pool whose own expected count is < 5 is merged into the
 * smallest unpooled cell. Cells of probability 0 take no part except that
 * any observation in one makes the test fail (p_value 0). */
void sp_vsim_chi2_test(const int64_t *count, const double *prob, int64_t n_cells,
                       sp_vsim_chi2 *out);

#endif
