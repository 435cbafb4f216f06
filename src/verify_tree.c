/* verify_tree: tree verification (multi-candidate steps along a draft tree)
 * and the "k1xk2x..." tree-shape helpers; see sp_verify.h. */
#include "sp_verify.h"

#include "sp_sampler.h"

#include <stdio.h>

sp_status sp_verify_tree_walk(sp_verify_ws *ws, const sp_verify_tree *t, sp_mc_mode mode,
                              sp_rng *rng, int32_t *path, int32_t path_cap, int32_t *n_path,
                              int32_t *token, sp_error *err) {
    if (!ws || !t || !rng || !path || !n_path || !token)
        return sp_fail(err, SP_ERR_ARG, "verify tree: NULL argument");
    const int32_t n = t->n_nodes, V = sp_verify_ws_vocab(ws);
    if (n < 1 || n > SP_TREE_MAX_NODES)
        return sp_fail(err, SP_ERR_RANGE, "verify tree: %d nodes outside [1, %d]", (int)n,
                       SP_TREE_MAX_NODES);
    if (!t->parent || !t->token || !t->p || (!t->q && mode != SP_MC_NAIVE))
        return sp_fail(err, SP_ERR_ARG, "verify tree: NULL parent/token/p/q array");
    for (int32_t i = 1; i < n; i++) {
        if (t->parent[i] < 0 || t->parent[i] >= i)
            return sp_fail(err, SP_ERR_ARG, "verify tree: parent[%d] = %d not in [0, %d)", (int)i,
                           (int)t->parent[i], (int)i);
        if (t->token[i] < 0 || t->token[i] >= V)
            return sp_fail(err, SP_ERR_ARG, "verify tree: token[%d] = %d outside [0, %d)", (int)i,
                           (int)t->token[i], (int)V);
    }
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
            char what[64];
            snprintf(what, sizeof what, "verify tree: target row p[%d]", (int)node);
            sp_status st = sp_verify_check_row(pn, V, what, err);
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

sp_status sp_tree_shape_parse(const char *s, sp_tree_shape *out, sp_error *err) {
    if (!s || !out) return sp_fail(err, SP_ERR_ARG, "tree shape: NULL argument");
    sp_tree_shape sh = {0};
    const char *c = s;
    long long nodes = 1, level = 1;
    for (;;) {
        if (*c < '0' || *c > '9')
            return sp_fail(err, SP_ERR_ARG, "tree shape '%s': expected factors like 4x2x2", s);
        long long k = 0;
        while (*c >= '0' && *c <= '9') {
            k = k * 10 + (*c - '0');
            if (k > SP_TREE_MAX_NODES)
                return sp_fail(err, SP_ERR_RANGE, "tree shape '%s': more than %d nodes", s,
                               SP_TREE_MAX_NODES);
            c++;
        }
        if (k < 1) return sp_fail(err, SP_ERR_ARG, "tree shape '%s': factor 0", s);
        if (sh.depth >= SP_TREE_MAX_DEPTH)
            return sp_fail(err, SP_ERR_RANGE, "tree shape '%s': deeper than %d", s, SP_TREE_MAX_DEPTH);
        level *= k;
        nodes += level;
        if (nodes > SP_TREE_MAX_NODES)
            return sp_fail(err, SP_ERR_RANGE, "tree shape '%s': %lld nodes exceed %d (root included)",
                           s, nodes, SP_TREE_MAX_NODES);
        sh.branch[sh.depth++] = (int32_t)k;
        if (*c == '\0') break;
        if (*c != 'x' && *c != 'X')
            return sp_fail(err, SP_ERR_ARG, "tree shape '%s': unexpected '%c'", s, *c);
        c++;
    }
    sh.n_nodes = (int32_t)nodes;
    *out = sh;
    return SP_OK;
}

sp_status sp_tree_shape_build(const sp_tree_shape *shape, int32_t *parent, int32_t *depth_of,
                              int32_t cap, sp_error *err) {
    if (!shape || !parent) return sp_fail(err, SP_ERR_ARG, "tree shape: NULL argument");
    if (shape->depth < 1 || shape->depth > SP_TREE_MAX_DEPTH || shape->n_nodes < 2 ||
        shape->n_nodes > SP_TREE_MAX_NODES)
        return sp_fail(err, SP_ERR_ARG, "tree shape: invalid shape (depth %d, %d nodes)",
                       (int)shape->depth, (int)shape->n_nodes);
    if (cap < shape->n_nodes)
        return sp_fail(err, SP_ERR_RANGE, "tree shape: capacity %d < %d nodes", (int)cap,
                       (int)shape->n_nodes);
    parent[0] = -1;
    if (depth_of) depth_of[0] = 0;
    int32_t lo = 0, hi = 1, n = 1; /* nodes of the previous level: [lo, hi) */
    for (int32_t d = 0; d < shape->depth; d++) {
        if (shape->branch[d] < 1)
            return sp_fail(err, SP_ERR_ARG, "tree shape: factor %d is %d", (int)d, (int)shape->branch[d]);
        for (int32_t a = lo; a < hi; a++)
            for (int32_t j = 0; j < shape->branch[d]; j++) {
                if (n >= shape->n_nodes)
                    return sp_fail(err, SP_ERR_ARG, "tree shape: node count inconsistent with factors");
                parent[n] = a;
                if (depth_of) depth_of[n] = d + 1;
                n++;
            }
        lo = hi;
        hi = n;
    }
    if (n != shape->n_nodes)
        return sp_fail(err, SP_ERR_ARG, "tree shape: node count inconsistent with factors");
    return SP_OK;
}
