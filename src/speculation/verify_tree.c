/* verify_tree: tree verification: multi-candidate steps along a draft tree
 * (sampling) and the greedy walk (temperature 0); see sp_verify.h. Tree
 * shapes and masks are in tree.c. */
#include "sp_verify.h"

#include <stdbool.h>
#include <stdio.h>

#include "sp_sampler.h"

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
