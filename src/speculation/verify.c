/* verify: single-chain (token, block, greedy, lenient) and multi-candidate
 * verifiers over probability arrays; see verify.h for the contracts. */
#include "verify.h"
#include "sampler_internal.h"
#include "verify_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sp_verify_ws {
    int32_t n_vocab;
    double *a; /* [V] scratch: residual / p_cur */
    double *b; /* [V] scratch: q_cur for sampling without replacement */
    double *rows;      /* [n_rows][V] residual rows of traversal verification */
    int32_t n_rows;    /* grown on demand, never shrunk */
};

static const char *const VERIFIER_NAMES[] = {"token", "block",    "greedy", "lenient", "mc",
                                             "mc-norep", "naive", "gbv",    "traversal"};

const char *sp_verifier_name(sp_verifier v) {
    if ((unsigned)v < sizeof VERIFIER_NAMES / sizeof VERIFIER_NAMES[0]) return VERIFIER_NAMES[v];
    return "?";
}

sp_status sp_verifier_parse(const char *name, sp_verifier *out, sp_error *err) {
    for (size_t i = 0; name && i < sizeof VERIFIER_NAMES / sizeof VERIFIER_NAMES[0]; i++)
        if (!strcmp(name, VERIFIER_NAMES[i])) {
            *out = (sp_verifier)i;
            return SP_OK;
        }
    return sp_fail(err, SP_ERR_ARG,
                   "unknown verifier '%s' (token, block, greedy, lenient, mc, mc-norep, naive, "
                   "gbv, traversal)",
                   name ? name : "(null)");
}

sp_status sp_verify_ws_init(int32_t n_vocab, sp_verify_ws **out, sp_error *err) {
    if (!out) return sp_fail(err, SP_ERR_ARG, "verify workspace: NULL output pointer");
    *out = NULL;
    if (n_vocab < 2 || n_vocab > SP_VERIFY_MAX_VOCAB)
        return sp_fail(err, SP_ERR_ARG, "verify workspace: vocabulary size %d outside [2, %d]",
                       (int)n_vocab, SP_VERIFY_MAX_VOCAB);
    sp_verify_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return sp_fail(err, SP_ERR_NOMEM, "verify workspace: out of memory");
    ws->n_vocab = n_vocab;
    ws->a = malloc(sizeof(double) * (size_t)n_vocab);
    ws->b = malloc(sizeof(double) * (size_t)n_vocab);
    if (!ws->a || !ws->b) {
        sp_verify_ws_free(ws);
        return sp_fail(err, SP_ERR_NOMEM, "verify workspace: out of memory for V=%d", (int)n_vocab);
    }
    *out = ws;
    return SP_OK;
}

void sp_verify_ws_free(sp_verify_ws *ws) {
    if (!ws) return;
    free(ws->a);
    free(ws->b);
    free(ws->rows);
    free(ws);
}

int32_t sp_verify_ws_vocab(const sp_verify_ws *ws) { return ws ? ws->n_vocab : 0; }

double *sp_verify_ws_rows(sp_verify_ws *ws, int32_t n_rows) {
    if (n_rows > ws->n_rows) {
        double *r = realloc(ws->rows, sizeof(double) * (size_t)n_rows * (size_t)ws->n_vocab);
        if (!r) return NULL;
        ws->rows = r;
        ws->n_rows = n_rows;
    }
    return ws->rows;
}

static double row_sum_check(const float *row, int32_t n, int *suspect_out);

sp_status sp_verify_check_row(const float *row, int32_t n, const char *what, sp_error *err) {
    if (!row) return sp_fail(err, SP_ERR_ARG, "%s: NULL distribution", what);
    int suspect;
    double sum = row_sum_check(row, n, &suspect);
    if (suspect) { /* exact rescan names the entry (or finds only -0.0) */
        for (int32_t i = 0; i < n; i++)
            if (!(row[i] >= 0.0f) || !(row[i] <= FLT_MAX))
                return sp_fail(err, SP_ERR_ARG, "%s: entry %d is %g (must be finite and >= 0)", what,
                               (int)i, (double)row[i]);
    }
    if (!(fabs(sum - 1.0) <= SP_VERIFY_SUM_TOL))
        return sp_fail(err, SP_ERR_ARG, "%s: sums to %.6g, not 1 (tolerance %g)", what, sum,
                       SP_VERIFY_SUM_TOL);
    return SP_OK;
}

/* ---- kernels over V ----
 * Sums use several independent accumulators so they pipeline at -O2 without
 * reassociation flags; residual sums are double so tiny residual masses stay
 * exact enough (validation alone uses float lanes, see below). */

#define LANES 8

/* sum(row) for validation only: 8 float lanes within chunks of 256
 * (relative error < 1e-5, far below SP_VERIFY_SUM_TOL), chunk sums added in
 * double. NaN or inf entries make the sum non-finite; a negative entry sets
 * the sign bit in the OR of all bit patterns (-0.0 does too: the caller's
 * exact rescan then finds nothing wrong). *suspect_out is set if either. */
static double row_sum_check(const float *row, int32_t n, int *suspect_out) {
    double total = 0.0;
    uint32_t sign = 0;
    int32_t i = 0;
    /* full chunks of 256: two 4-float vector accumulators (GCC/Clang vector
     * extensions; plain SSE2 on x86-64), bit patterns OR-ed as integers */
    typedef float v4f __attribute__((vector_size(16)));
    typedef uint32_t v4u __attribute__((vector_size(16)));
    for (; i + 256 <= n; i += 256) {
        const float *r = row + i;
        v4f s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
        v4u o = {0, 0, 0, 0};
        for (int k = 0; k < 256; k += 8) {
            v4f a, b;
            v4u ua, ub;
            memcpy(&a, r + k, sizeof a);
            memcpy(&b, r + k + 4, sizeof b);
            memcpy(&ua, r + k, sizeof ua);
            memcpy(&ub, r + k + 4, sizeof ub);
            s0 += a;
            s1 += b;
            o |= ua | ub;
        }
        total += ((double)s0[0] + s0[1] + s0[2] + s0[3]) + ((double)s1[0] + s1[1] + s1[2] + s1[3]);
        sign |= o[0] | o[1] | o[2] | o[3];
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, row + i, sizeof u);
        total += (double)row[i];
        sign |= u;
    }
    *suspect_out = (sign >> 31) || !isfinite(total);
    return total;
}

/* sum_i max(0, a p[i] - q[i]); q == NULL means q = 0 */
static double resid_sum(const float *p, double a, const float *q, int32_t n) {
    double s[LANES] = {0}, t = 0.0;
    int32_t i = 0;
    if (q) {
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) {
                double d = a * (double)p[i + j] - (double)q[i + j];
                s[j] += d > 0.0 ? d : 0.0;
            }
        for (; i < n; i++) {
            double d = a * (double)p[i] - (double)q[i];
            t += d > 0.0 ? d : 0.0;
        }
    } else {
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) s[j] += a * (double)p[i + j];
        for (; i < n; i++) t += a * (double)p[i];
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

static inline double resid_at(const float *p, double a, const float *q, int32_t i) {
    double d = a * (double)p[i] - (q ? (double)q[i] : 0.0);
    return d > 0.0 ? d : 0.0;
}

#define CHUNK 512

/* Inverse-CDF draw of index i with probability w(i) / total, where
 * w(i) = max(0, a p[i] - q[i]) and total = resid_sum(p, a, q, n) > 0;
 * u in [0, 1). Two-level scan: chunk sums first, then one chunk element by
 * element. Never returns an index with w(i) == 0 (rounding past the end
 * falls back to the last positive entry). */
static int32_t sample_resid(const float *p, double a, const float *q, int32_t n, double total,
                            double u) {
    double target = u * total, c = 0.0;
    int32_t last_chunk = -1;
    for (int32_t lo = 0; lo < n; lo += CHUNK) {
        int32_t len = n - lo < CHUNK ? n - lo : CHUNK;
        double cs = resid_sum(p + lo, a, q ? q + lo : NULL, len);
        if (!(cs > 0.0)) continue;
        last_chunk = lo;
        if (target < c + cs) {
            int32_t last = -1;
            for (int32_t i = lo; i < lo + len; i++) {
                double d = resid_at(p, a, q, i);
                if (d > 0.0) {
                    c += d;
                    last = i;
                    if (target < c) return i;
                }
            }
            return last;
        }
        c += cs;
    }
    SP_ASSERT(last_chunk >= 0);
    int32_t end = n - last_chunk < CHUNK ? n : last_chunk + CHUNK;
    for (int32_t i = end - 1; i >= last_chunk; i--)
        if (resid_at(p, a, q, i) > 0.0) return i;
    return last_chunk;
}

/* Draw from a validated distribution row. */
static int32_t sample_f(const float *p, int32_t n, double u) {
    return sample_resid(p, 1.0, NULL, n, resid_sum(p, 1.0, NULL, n), u);
}

/* Lowest index of the maximum (max first with 8 lanes, then the first hit). */
static int32_t argmax_f(const float *p, int32_t n) {
    float m[LANES];
    for (int j = 0; j < LANES; j++) m[j] = p[0];
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) m[j] = p[i + j] > m[j] ? p[i + j] : m[j];
    float mx = m[0];
    for (int j = 1; j < LANES; j++) mx = m[j] > mx ? m[j] : mx;
    for (; i < n; i++) mx = p[i] > mx ? p[i] : mx;
    for (i = 0; i < n; i++)
        if (p[i] == mx) return i;
    return 0;
}

/* Residual mass below this (relative to 1) is treated as empty: it can only
 * come from rounding when p ~= q, where rejection has ~zero probability. */
#define RESID_EPS 1e-12

/* ---- single chain ---- */

static sp_status check_chain(const sp_verify_ws *ws, int32_t gamma, const int32_t *draft,
                             const float *q, const float *p, int need_q, sp_error *err) {
    if (!ws) return sp_fail(err, SP_ERR_ARG, "verify: NULL workspace");
    if (gamma < 1 || gamma > SP_VERIFY_MAX_GAMMA)
        return sp_fail(err, SP_ERR_ARG, "verify: gamma %d outside [1, %d]", (int)gamma,
                       SP_VERIFY_MAX_GAMMA);
    if (!draft || !p || (need_q && !q))
        return sp_fail(err, SP_ERR_ARG, "verify: NULL draft/q/p array");
    const int32_t V = ws->n_vocab;
    char what[64];
    for (int32_t i = 0; i < gamma; i++) {
        if (draft[i] < 0 || draft[i] >= V)
            return sp_fail(err, SP_ERR_ARG, "verify: draft token %d = %d outside [0, %d)", (int)i + 1,
                           (int)draft[i], (int)V);
    }
    for (int32_t i = 0; i <= gamma; i++) {
        snprintf(what, sizeof what, "verify: target row p_%d", (int)i);
        sp_status st = sp_verify_check_row(p + (size_t)i * V, V, what, err);
        if (st) return st;
    }
    if (need_q) {
        for (int32_t i = 0; i < gamma; i++) {
            snprintf(what, sizeof what, "verify: draft row q_%d", (int)i);
            sp_status st = sp_verify_check_row(q + (size_t)i * V, V, what, err);
            if (st) return st;
            if (!(q[(size_t)i * V + draft[i]] > 0.0f))
                return sp_fail(err, SP_ERR_ARG,
                               "verify: draft token X_%d = %d has zero draft probability in q_%d",
                               (int)i + 1, (int)draft[i], (int)i);
        }
    }
    return SP_OK;
}

/* Shared body of token (lenience 1) and lenient verification. */
static sp_status token_like(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *q,
                            const float *p, double lenience, sp_rng *rng, sp_verify_result *out,
                            sp_error *err) {
    sp_status st = check_chain(ws, gamma, draft, q, p, 1, err);
    if (st) return st;
    if (!rng || !out) return sp_fail(err, SP_ERR_ARG, "verify: NULL rng or output");
    const int32_t V = ws->n_vocab;
    for (int32_t i = 0; i < gamma; i++) {
        const float *pi = p + (size_t)i * V, *qi = q + (size_t)i * V;
        int32_t x = draft[i];
        /* accept iff u < p/(l q), written without division; q(x) > 0 checked */
        double u = sp_rng_uniform(rng);
        if (u * lenience * (double)qi[x] < (double)pi[x]) continue;
        out->n_accepted = i;
        double s = resid_sum(pi, 1.0, qi, V);
        double u2 = sp_rng_uniform(rng);
        out->token = s > RESID_EPS ? sample_resid(pi, 1.0, qi, V, s, u2) : sample_f(pi, V, u2);
        return SP_OK;
    }
    out->n_accepted = gamma;
    out->token = sample_f(p + (size_t)gamma * V, V, sp_rng_uniform(rng));
    return SP_OK;
}

sp_status sp_verify_token(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *q,
                          const float *p, sp_rng *rng, sp_verify_result *out, sp_error *err) {
    return token_like(ws, gamma, draft, q, p, 1.0, rng, out, err);
}

sp_status sp_verify_lenient(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *q,
                            const float *p, double lenience, sp_rng *rng, sp_verify_result *out,
                            sp_error *err) {
    if (!(lenience > 0.0 && lenience <= 1.0))
        return sp_fail(err, SP_ERR_ARG, "verify: lenience %g outside (0, 1]", lenience);
    return token_like(ws, gamma, draft, q, p, lenience, rng, out, err);
}

sp_status sp_verify_block(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *q,
                          const float *p, sp_rng *rng, sp_verify_result *out, sp_error *err) {
    sp_status st = check_chain(ws, gamma, draft, q, p, 1, err);
    if (st) return st;
    if (!rng || !out) return sp_fail(err, SP_ERR_ARG, "verify: NULL rng or output");
    const int32_t V = ws->n_vocab;
    double pacc = 1.0, best_pacc = 1.0;
    int32_t best = -1;
    for (int32_t i = 0; i <= gamma; i++) {
        const float *pi = p + (size_t)i * V;
        const float *qi = i < gamma ? q + (size_t)i * V : NULL; /* q_gamma = 0 */
        double w = resid_sum(pi, pacc, qi, V);
        double r = 1.0 - pacc;
        double total = w + r;
        double u = sp_rng_uniform(rng);
        /* outcome "token" with probability w / (w + r); an empty step
         * (w + r == 0) is a reject */
        if (total > 0.0 && u * total < w) {
            best = i;
            best_pacc = pacc;
        }
        if (i < gamma) {
            int32_t x = draft[i];
            double ratio = (double)pi[x] / (double)qi[x]; /* q(x) > 0 checked */
            pacc = fmin(1.0, pacc * ratio);
        }
    }
    /* In exact arithmetic step 0 never rejects (p_acc = 1, so r = 0 and w > 0
     * unless p_0 == q_0), hence best >= 0. Rows are only normalised within
     * SP_VERIFY_SUM_TOL, though: p_0 <= q_0 elementwise with p_0(X_1) = 0
     * passes validation, makes step 0 empty (treated as a reject) and every
     * later step reject too (p_acc = 0). That empty step 0 means p_0 ~= q_0
     * up to rounding, where emitting nothing accepted has probability ~1:
     * take it, and draw y from p_0 as token verification does for an empty
     * residual (below, s == 0 falls through to sample_f). */
    if (best < 0) {
        best = 0;
        best_pacc = 1.0;
    }
    const float *pb = p + (size_t)best * V;
    const float *qb = best < gamma ? q + (size_t)best * V : NULL;
    double s = resid_sum(pb, best_pacc, qb, V);
    double u = sp_rng_uniform(rng);
    out->n_accepted = best;
    out->token = s > 0.0 ? sample_resid(pb, best_pacc, qb, V, s, u) : sample_f(pb, V, u);
    return SP_OK;
}

sp_status sp_verify_greedy(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *p,
                           sp_verify_result *out, sp_error *err) {
    sp_status st = check_chain(ws, gamma, draft, NULL, p, 0, err);
    if (st) return st;
    if (!out) return sp_fail(err, SP_ERR_ARG, "verify: NULL output");
    const int32_t V = ws->n_vocab;
    int32_t i = 0;
    while (i < gamma && draft[i] == argmax_f(p + (size_t)i * V, V)) i++;
    out->n_accepted = i;
    out->token = argmax_f(p + (size_t)i * V, V);
    return SP_OK;
}

sp_status sp_verify_chain(sp_verify_ws *ws, sp_verifier v, double lenience, int32_t gamma,
                          const int32_t *draft, const float *q, const float *p, sp_rng *rng,
                          sp_verify_result *out, sp_error *err) {
    switch (v) {
    case SP_VERIFIER_TOKEN: return sp_verify_token(ws, gamma, draft, q, p, rng, out, err);
    case SP_VERIFIER_BLOCK: return sp_verify_block(ws, gamma, draft, q, p, rng, out, err);
    case SP_VERIFIER_GREEDY: return sp_verify_greedy(ws, gamma, draft, p, out, err);
    case SP_VERIFIER_LENIENT:
        return sp_verify_lenient(ws, gamma, draft, q, p, lenience, rng, out, err);
    default:
        return sp_fail(err, SP_ERR_ARG, "verify: '%s' is not a single-chain verifier",
                       sp_verifier_name(v));
    }
}

/* ---- multi-candidate ---- */

sp_status sp_verify_mc(sp_verify_ws *ws, sp_mc_mode mode, int32_t k, const int32_t *cand,
                       const float *q, const float *p, sp_rng *rng, int32_t *index,
                       int32_t *token, sp_error *err) {
    if (!ws) return sp_fail(err, SP_ERR_ARG, "verify mc: NULL workspace");
    if (mode != SP_MC_REPLACE && mode != SP_MC_NOREPLACE && mode != SP_MC_NAIVE)
        return sp_fail(err, SP_ERR_ARG, "verify mc: unknown mode %d", (int)mode);
    if (k < 1 || k >= SP_TREE_MAX_NODES)
        return sp_fail(err, SP_ERR_ARG, "verify mc: k = %d outside [1, %d]", (int)k,
                       SP_TREE_MAX_NODES - 1);
    if (!cand || !rng || !index || !token)
        return sp_fail(err, SP_ERR_ARG, "verify mc: NULL candidates, rng or output");
    const int32_t V = ws->n_vocab;
    for (int32_t j = 0; j < k; j++)
        if (cand[j] < 0 || cand[j] >= V)
            return sp_fail(err, SP_ERR_ARG, "verify mc: candidate %d = %d outside [0, %d)", (int)j,
                           (int)cand[j], (int)V);
    sp_status st = sp_verify_check_row(p, V, "verify mc: target row p", err);
    if (st) return st;
    if (mode == SP_MC_NAIVE) {
        int32_t y = sample_f(p, V, sp_rng_uniform(rng));
        *index = -1;
        for (int32_t j = 0; j < k; j++)
            if (cand[j] == y) {
                *index = j;
                break;
            }
        *token = y;
        return SP_OK;
    }
    st = sp_verify_check_row(q, V, "verify mc: draft row q", err);
    if (st) return st;
    if (mode == SP_MC_NOREPLACE) {
        /* Check up front that every candidate has positive remaining mass
         * (no zero-q candidate, no duplicate), so errors never depend on rng. */
        for (int32_t j = 0; j < k; j++) {
            if (!(q[cand[j]] > 0.0f))
                return sp_fail(err, SP_ERR_ARG, "verify mc: candidate %d = %d has zero draft probability",
                               (int)j, (int)cand[j]);
            for (int32_t i = 0; i < j; i++)
                if (cand[i] == cand[j])
                    return sp_fail(err, SP_ERR_ARG,
                                   "verify mc: duplicate candidate %d without replacement", (int)cand[j]);
        }
    } else {
        for (int32_t j = 0; j < k; j++)
            if (!(q[cand[j]] > 0.0f))
                return sp_fail(err, SP_ERR_ARG, "verify mc: candidate %d = %d has zero draft probability",
                               (int)j, (int)cand[j]);
    }
    /* pc: unnormalised p_cur with total S; qc: unnormalised q_j with total Q. */
    double *pc = ws->a, *qc = ws->b;
    double S = 0.0, Q = 0.0;
    for (int32_t i = 0; i < V; i++) {
        pc[i] = (double)p[i];
        S += pc[i];
    }
    if (mode == SP_MC_NOREPLACE) {
        for (int32_t i = 0; i < V; i++) {
            qc[i] = (double)q[i];
            Q += qc[i];
        }
    }
    for (int32_t j = 0; j < k; j++) {
        int32_t x = cand[j];
        /* accept with min(1, (pc[x]/S) / (q_j[x])) */
        double qx = mode == SP_MC_NOREPLACE ? qc[x] / Q : (double)q[x];
        double u = sp_rng_uniform(rng);
        if (u * qx * S < pc[x]) {
            *index = j;
            *token = x;
            return SP_OK;
        }
        /* p_cur <- norm(max(0, p_cur - q_j)), kept unnormalised as
         * max(0, pc - S q_j). First the new mass, then the update: an empty
         * residual can only be rounding (rejection had ~0 probability), and
         * then p_cur is kept as it is. */
        const double *qrow = mode == SP_MC_NOREPLACE ? qc : NULL;
        double f = mode == SP_MC_NOREPLACE ? S / Q : S;
        double S2 = 0.0;
        for (int32_t i = 0; i < V; i++) {
            double d = pc[i] - f * (qrow ? qrow[i] : (double)q[i]);
            S2 += d > 0.0 ? d : 0.0;
        }
        if (S2 > RESID_EPS * S) {
            for (int32_t i = 0; i < V; i++) {
                double d = pc[i] - f * (qrow ? qrow[i] : (double)q[i]);
                pc[i] = d > 0.0 ? d : 0.0;
            }
            S = S2;
        }
        if (mode == SP_MC_NOREPLACE) {
            qc[x] = 0.0;
            if (j + 1 < k) {
                Q = 0.0;
                for (int32_t i = 0; i < V; i++) Q += qc[i];
                if (!(Q > 0.0))
                    return sp_fail(err, SP_ERR_ARG,
                                   "verify mc: %d candidates exceed the draft support", (int)k);
            }
        }
    }
    /* S > 0 here: it starts as p's mass and only ever takes a residual mass
     * above RESID_EPS * S, so the draw finds a positive weight */
    int32_t y = sp_sample_from_weights(pc, V, sp_rng_uniform(rng));
    *index = -1;
    *token = y >= 0 ? y : 0;
    return SP_OK;
}
