/* verify_tree: tree verification: multi-candidate steps along a draft tree
 * (sampling), traversal verification from the leaves up (and GBV, its
 * multi-path form) and the greedy walk (temperature 0); see verify.h. Tree
 * shapes and masks are in tree.c. */
#include "verify.h"

#include <stdbool.h>
#include <stdio.h>

#include "sampler_internal.h"
#include "sp_sampler.h"
#include "verify_internal.h"

/* The structure of a tree in full (not its rows): sizes, topological
 * parents, tokens in range, non-NULL arrays and outputs. */
static sp_status check_tree(const sp_verify_ws *ws, const sp_verify_tree *t, bool need_q,
                            const int32_t *path, const int32_t *n_path, const int32_t *token,
                            sp_error *err) {
    if (!ws || !t || !path || !n_path || !token)
        return sp_fail(err, SP_ERR_ARG, "verify tree: NULL argument");
    const int32_t n = t->n_nodes, V = sp_verify_ws_vocab(ws);
    if (n < 1 || n > SP_TREE_MAX_NODES)
        return sp_fail(err, SP_ERR_RANGE, "verify tree: %d nodes outside [1, %d]", (int)n,
                       SP_TREE_MAX_NODES);
    if (!t->parent || !t->token || !t->p || (!t->q && need_q))
        return sp_fail(err, SP_ERR_ARG, "verify tree: NULL parent/token/p/q array");
    for (int32_t i = 1; i < n; i++) {
        if (t->parent[i] < 0 || t->parent[i] >= i)
            return sp_fail(err, SP_ERR_ARG, "verify tree: parent[%d] = %d not in [0, %d)", (int)i,
                           (int)t->parent[i], (int)i);
        if (t->token[i] < 0 || t->token[i] >= V)
            return sp_fail(err, SP_ERR_ARG, "verify tree: token[%d] = %d outside [0, %d)", (int)i,
                           (int)t->token[i], (int)V);
    }
    return SP_OK;
}

static sp_status check_p_row(const sp_verify_tree *t, int32_t node, int32_t V, sp_error *err) {
    char what[64];
    snprintf(what, sizeof what, "verify tree: target row p[%d]", (int)node);
    return sp_verify_check_row(t->p + (size_t)node * V, V, what, err);
}

sp_status sp_verify_tree_walk(sp_verify_ws *ws, const sp_verify_tree *t, sp_mc_mode mode,
                              sp_rng *rng, int32_t *path, int32_t path_cap, int32_t *n_path,
                              int32_t *token, sp_error *err) {
    if (!rng) return sp_fail(err, SP_ERR_ARG, "verify tree: NULL rng");
    sp_status st0 = check_tree(ws, t, mode != SP_MC_NAIVE, path, n_path, token, err);
    if (st0) return st0;
    const int32_t n = t->n_nodes, V = sp_verify_ws_vocab(ws);
    int32_t kids[SP_TREE_MAX_NODES], cand[SP_TREE_MAX_NODES];
    int32_t node = 0, len = 0;
    for (;;) {
        const float *pn = t->p + (size_t)node * V;
        int32_t k = 0;
        for (int32_t i = node + 1; i < n; i++)
            if (t->parent[i] == node) {
                kids[k] = i;
                cand[k] = t->token[i];
                k++;
            }
        if (k == 0) { /* accepted leaf (or bare root): bonus token from p[leaf] */
            sp_status st = check_p_row(t, node, V, err);
            if (st) return st;
            *token = sp_sample_from_probs(pn, V, sp_rng_uniform(rng));
            *n_path = len;
            return SP_OK;
        }
        int32_t idx, tok;
        const float *qn = t->q ? t->q + (size_t)node * V : NULL;
        sp_status st = sp_verify_mc(ws, mode, k, cand, qn, pn, rng, &idx, &tok, err);
        if (st) return st;
        if (idx < 0) {
            *token = tok;
            *n_path = len;
            return SP_OK;
        }
        if (len >= path_cap)
            return sp_fail(err, SP_ERR_RANGE, "verify tree: path longer than path_cap %d",
                           (int)path_cap);
        node = kids[idx];
        path[len++] = node;
    }
}

sp_status sp_verify_tree_greedy(sp_verify_ws *ws, const sp_verify_tree *t, int32_t *path,
                                int32_t path_cap, int32_t *n_path, int32_t *token, sp_error *err) {
    sp_status st = check_tree(ws, t, false, path, n_path, token, err);
    if (st) return st;
    const int32_t n = t->n_nodes, V = sp_verify_ws_vocab(ws);
    int32_t node = 0, len = 0;
    for (;;) {
        if ((st = check_p_row(t, node, V, err))) return st;
        const int32_t a = sp_argmax(t->p + (size_t)node * V, V);
        int32_t next = -1;
        for (int32_t c = node + 1; c < n && next < 0; c++)
            if (t->parent[c] == node && t->token[c] == a) next = c;
        if (next < 0) {
            *token = a;
            *n_path = len;
            return SP_OK;
        }
        if (len >= path_cap)
            return sp_fail(err, SP_ERR_RANGE, "verify tree: path longer than path_cap %d",
                           (int)path_cap);
        path[len++] = node = next;
    }
}

/* ---- traversal verification (algorithm in verify.h) ---- */

/* Residual mass below this is treated as empty (rounding when a_v Mb_v ~=
 * Ms_v, where the rejection that led here had ~zero probability): the row
 * is then kept as it was instead of dividing by ~0. */
#define TRAV_EPS 1e-12

/* The draft-side checks every node's children need, before any randomness:
 * positive draft probability, and distinct tokens without replacement. */
static sp_status check_children(const sp_verify_tree *t, int32_t V, sp_mc_mode mode,
                                const int32_t *first_child, const int32_t *next_sib,
                                sp_error *err) {
    for (int32_t v = 0; v < t->n_nodes; v++) {
        const float *qv = t->q + (size_t)v * V;
        for (int32_t c = first_child[v]; c >= 0; c = next_sib[c]) {
            if (!(qv[t->token[c]] > 0.0f))
                return sp_fail(err, SP_ERR_ARG,
                               "verify tree: node %d (token %d) has zero draft probability in q[%d]",
                               (int)c, (int)t->token[c], (int)v);
            if (mode == SP_MC_NOREPLACE)
                for (int32_t o = first_child[v]; o != c; o = next_sib[o])
                    if (t->token[o] == t->token[c])
                        return sp_fail(err, SP_ERR_ARG,
                                       "verify tree: duplicate child token %d under node %d "
                                       "without replacement",
                                       (int)t->token[c], (int)v);
        }
    }
    return SP_OK;
}

static double row_sum_d(const float *r, int32_t V) {
    double s = 0.0;
    for (int32_t i = 0; i < V; i++) s += (double)r[i];
    return s;
}

sp_status sp_verify_tree_traversal(sp_verify_ws *ws, const sp_verify_tree *t, sp_mc_mode mode,
                                   sp_rng *rng, int32_t *path, int32_t path_cap, int32_t *n_path,
                                   int32_t *token, sp_error *err) {
    if (!rng) return sp_fail(err, SP_ERR_ARG, "verify tree: NULL rng");
    if (mode != SP_MC_REPLACE && mode != SP_MC_NOREPLACE)
        return sp_fail(err, SP_ERR_ARG, "verify tree: traversal needs mode replace or no-replace");
    sp_status st = check_tree(ws, t, true, path, n_path, token, err);
    if (st) return st;
    const int32_t n = t->n_nodes, V = sp_verify_ws_vocab(ws);
    /* children lists in index order; depth of the tree */
    int32_t first_child[SP_TREE_MAX_NODES], next_sib[SP_TREE_MAX_NODES], cursor[SP_TREE_MAX_NODES];
    int32_t dep[SP_TREE_MAX_NODES], max_depth = 0;
    for (int32_t i = 0; i < n; i++) first_child[i] = next_sib[i] = -1;
    dep[0] = 0;
    for (int32_t i = 1; i < n; i++) {
        dep[i] = dep[t->parent[i]] + 1;
        if (dep[i] > max_depth) max_depth = dep[i];
    }
    if (max_depth > SP_TREE_MAX_DEPTH)
        return sp_fail(err, SP_ERR_RANGE, "verify tree: depth %d above %d", (int)max_depth,
                       SP_TREE_MAX_DEPTH);
    for (int32_t i = n - 1; i >= 1; i--) {
        next_sib[i] = first_child[t->parent[i]];
        first_child[t->parent[i]] = i;
    }
    if ((st = check_children(t, V, mode, first_child, next_sib, err))) return st;
    for (int32_t i = 0; i < n; i++) cursor[i] = first_child[i];
    double *rows = NULL;
    if (max_depth > 0 && !(rows = sp_verify_ws_rows(ws, max_depth)))
        return sp_fail(err, SP_ERR_NOMEM, "verify tree: out of memory for %d residual rows",
                       (int)max_depth);
    /* the current root-to-node path: node, acceptance weight a, draft mass Q
     * (Ms = q / Q with the removed children zeroed), whether Mb is the
     * residual row rows[d] instead of p */
    int32_t stack[SP_TREE_MAX_DEPTH + 1];
    double a[SP_TREE_MAX_DEPTH + 1], Q[SP_TREE_MAX_DEPTH + 1];
    bool mod[SP_TREE_MAX_DEPTH + 1];
    int32_t rm_tok[SP_TREE_MAX_NODES];
    double rm_val[SP_TREE_MAX_NODES];
    int32_t d = 0;
    stack[0] = 0;
    a[0] = 1.0;
    mod[0] = false;
    if ((st = check_p_row(t, 0, V, err))) return st;
    Q[0] = 1.0;
    if (first_child[0] >= 0) {
        char what[64];
        snprintf(what, sizeof what, "verify tree: draft row q[%d]", 0);
        if ((st = sp_verify_check_row(t->q, V, what, err))) return st;
        Q[0] = row_sum_d(t->q, V);
    }
    for (;;) {
        /* descend along first remaining children to a candidate leaf */
        while (cursor[stack[d]] >= 0) {
            const int32_t v = stack[d], c = cursor[v], x = t->token[c];
            const double mb = mod[d] ? rows[(size_t)d * V + x] : (double)t->p[(size_t)v * V + x];
            const double ms = (double)t->q[(size_t)v * V + x] / Q[d];
            const double r = a[d] * mb / ms;
            d++;
            stack[d] = c;
            a[d] = r < 1.0 ? r : 1.0;
            mod[d] = false;
            Q[d] = 1.0;
            if ((st = check_p_row(t, c, V, err))) return st;
            if (first_child[c] >= 0) {
                char what[64];
                snprintf(what, sizeof what, "verify tree: draft row q[%d]", (int)c);
                const float *qc = t->q + (size_t)c * V;
                if ((st = sp_verify_check_row(qc, V, what, err))) return st;
                Q[d] = row_sum_d(qc, V);
            }
        }
        const int32_t l = stack[d];
        const bool accept = d == 0 || sp_rng_uniform(rng) < a[d];
        if (accept) {
            if (d > path_cap)
                return sp_fail(err, SP_ERR_RANGE, "verify tree: path longer than path_cap %d",
                               (int)path_cap);
            for (int32_t i = 1; i <= d; i++) path[i - 1] = stack[i];
            *n_path = d;
            const double u = sp_rng_uniform(rng);
            int32_t y = mod[d] ? sp_sample_from_weights(rows + (size_t)d * V, V, u)
                               : sp_sample_from_probs(t->p + (size_t)l * V, V, u);
            *token = y >= 0 ? y : 0;
            return SP_OK;
        }
        /* reject l: residual at its parent v (depth d-1), then continue there */
        const int32_t v = stack[d - 1], x = t->token[l];
        const int32_t dv = d - 1;
        const float *pv = t->p + (size_t)v * V, *qv = t->q + (size_t)v * V;
        double *rv = rows + (size_t)dv * V;
        const double al = a[dv], invQ = 1.0 / Q[dv];
        double nb = 0.0, den = 0.0;
        for (int32_t y = 0; y < V; y++) {
            const double mb = mod[dv] ? rv[y] : (double)pv[y];
            const double e = al * mb - (double)qv[y] * invQ;
            if (e > 0.0) nb += e;
            else den -= e;
        }
        /* removed children (without replacement) have Ms = 0: correct the
         * sums, and keep their old Mb values for the row update */
        int32_t n_rm = 0;
        if (mode == SP_MC_NOREPLACE)
            for (int32_t o = first_child[v]; o != l; o = next_sib[o]) {
                const int32_t y = t->token[o];
                const double mb = mod[dv] ? rv[y] : (double)pv[y];
                const double e = al * mb - (double)qv[y] * invQ;
                if (e > 0.0) nb -= e;
                else den += e;
                nb += al * mb;
                rm_tok[n_rm] = y;
                rm_val[n_rm++] = al * mb;
            }
        if (nb > TRAV_EPS) {
            const double inv = 1.0 / nb;
            for (int32_t y = 0; y < V; y++) {
                const double mb = mod[dv] ? rv[y] : (double)pv[y];
                const double e = al * mb - (double)qv[y] * invQ;
                rv[y] = e > 0.0 ? e * inv : 0.0;
            }
            for (int32_t i = 0; i < n_rm; i++) rv[rm_tok[i]] = rm_val[i] * inv;
            mod[dv] = true;
        }
        a[dv] = den > 0.0 ? (nb / den < 1.0 ? nb / den : 1.0) : 1.0;
        if (mode == SP_MC_NOREPLACE) {
            Q[dv] -= (double)qv[x];
            if (!(Q[dv] > 0.0)) Q[dv] = TRAV_EPS;
        }
        cursor[v] = next_sib[l];
        d = dv;
    }
}
