/* tree: draft-tree shapes ("k1xk2x...", "dyn:K:D:N") and tree attention masks; see
 * sp_spec.h. */
#include "sp_spec.h"
#include "tree.h"

#include <stdio.h>
#include <string.h>

sp_status sp_tree_shape_make(const int32_t *branch, int32_t depth, sp_tree_shape *out,
                             sp_error *err) {
    if (!branch || !out) return sp_fail(err, SP_ERR_ARG, "tree shape: NULL argument");
    if (depth < 1 || depth > SP_TREE_MAX_DEPTH)
        return sp_fail(err, depth < 1 ? SP_ERR_ARG : SP_ERR_RANGE,
                       "tree shape: depth %d outside [1, %d]", (int)depth, SP_TREE_MAX_DEPTH);
    sp_tree_shape sh = {.depth = depth};
    long long nodes = 1, level = 1;
    for (int32_t d = 0; d < depth; d++) {
        if (branch[d] < 1)
            return sp_fail(err, SP_ERR_ARG, "tree shape: factor %d is %d (must be >= 1)", (int)d + 1,
                           (int)branch[d]);
        level *= branch[d];
        nodes += level;
        if (nodes > SP_TREE_MAX_NODES)
            return sp_fail(err, SP_ERR_RANGE, "tree shape: more than %d nodes (root included)",
                           SP_TREE_MAX_NODES);
        sh.branch[d] = branch[d];
    }
    sh.n_nodes = (int32_t)nodes;
    *out = sh;
    return SP_OK;
}

sp_status sp_tree_shape_make_dyn(int32_t k, int32_t depth, int32_t n, sp_tree_shape *out, sp_error *err) {
    if (!out) return sp_fail(err, SP_ERR_ARG, "tree shape: NULL argument");
    if (k < 1 || k > SP_TREE_DYN_MAX_K)
        return sp_fail(err, k < 1 ? SP_ERR_ARG : SP_ERR_RANGE, "dynamic tree: K %d outside [1, %d]", (int)k,
                       SP_TREE_DYN_MAX_K);
    if (depth < 1 || depth > SP_TREE_MAX_DEPTH)
        return sp_fail(err, depth < 1 ? SP_ERR_ARG : SP_ERR_RANGE, "dynamic tree: depth %d outside [1, %d]",
                       (int)depth, SP_TREE_MAX_DEPTH);
    if (n < 1 || n > SP_TREE_MAX_NODES - 1)
        return sp_fail(err, n < 1 ? SP_ERR_ARG : SP_ERR_RANGE, "dynamic tree: N %d nodes outside [1, %d]", (int)n,
                       SP_TREE_MAX_NODES - 1);
    sp_tree_shape sh = {.depth = depth, .n_nodes = n + 1, .dyn_k = k};
    for (int32_t d = 0; d < depth; d++) sh.branch[d] = k;
    *out = sh;
    return SP_OK;
}

/* "dyn:K:D:N": three decimal numbers after "dyn:", separated by ':'. */
static sp_status parse_dyn(const char *s, sp_tree_shape *out, sp_error *err) {
    long long v[3];
    const char *c = s + 4;
    for (int i = 0; i < 3; i++) {
        if (*c < '0' || *c > '9') goto bad;
        v[i] = 0;
        while (*c >= '0' && *c <= '9') {
            if (v[i] < 100000000) v[i] = v[i] * 10 + (*c - '0');
            c++;
        }
        if (*c != (i < 2 ? ':' : '\0')) goto bad;
        c++;
    }
    sp_error e = {0};
    sp_status st = sp_tree_shape_make_dyn((int32_t)v[0], (int32_t)v[1], (int32_t)v[2], out, &e);
    const char *why = strncmp(e.msg, "dynamic tree: ", 14) ? e.msg : e.msg + 14;
    if (st) return sp_fail(err, st, "tree shape '%s': %s", s, why);
    return SP_OK;
bad:
    return sp_fail(err, SP_ERR_ARG, "tree shape '%s': expected a dynamic tree like dyn:4:6:32 (K:depth:nodes)", s);
}

sp_status sp_tree_shape_parse(const char *s, sp_tree_shape *out, sp_error *err) {
    if (!s || !out) return sp_fail(err, SP_ERR_ARG, "tree shape: NULL argument");
    if (!strncmp(s, "dyn:", 4)) return parse_dyn(s, out, err);
    int32_t branch[SP_TREE_MAX_DEPTH], depth = 0;
    long long nodes = 1, level = 1;
    const char *c = s;
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
        if (depth >= SP_TREE_MAX_DEPTH)
            return sp_fail(err, SP_ERR_RANGE, "tree shape '%s': deeper than %d", s, SP_TREE_MAX_DEPTH);
        level *= k;
        nodes += level;
        if (nodes > SP_TREE_MAX_NODES)
            return sp_fail(err, SP_ERR_RANGE, "tree shape '%s': %lld nodes exceed %d (root included)",
                           s, nodes, SP_TREE_MAX_NODES);
        branch[depth++] = (int32_t)k;
        if (*c == '\0') break;
        if (*c != 'x' && *c != 'X')
            return sp_fail(err, SP_ERR_ARG, "tree shape '%s': unexpected '%c'", s, *c);
        c++;
    }
    return sp_tree_shape_make(branch, depth, out, err);
}

int sp_tree_shape_format(const sp_tree_shape *shape, char *buf, size_t cap) {
    int len = 0;
    if (cap) buf[0] = 0;
    if (shape->dyn_k)
        return snprintf(buf, cap, "dyn:%d:%d:%d", (int)shape->dyn_k, (int)shape->depth, (int)shape->n_nodes - 1);
    for (int32_t d = 0; d < shape->depth; d++) {
        size_t at = (size_t)len < cap ? (size_t)len : cap;
        int n = snprintf(buf + at, cap - at, d ? "x%d" : "%d", (int)shape->branch[d]);
        len += n;
    }
    return len;
}

int32_t sp_tree_shape_max_level(const sp_tree_shape *shape) {
    if (shape->dyn_k) return shape->dyn_k; /* K nodes evaluated per level */
    int32_t widest = 1, w = 1;
    for (int32_t d = 0; d < shape->depth; d++) {
        w *= shape->branch[d];
        widest = w > widest ? w : widest;
    }
    return widest;
}

sp_status sp_tree_shape_build(const sp_tree_shape *shape, int32_t *parent, int32_t *depth_of,
                              int32_t cap, sp_error *err) {
    if (!shape || !parent) return sp_fail(err, SP_ERR_ARG, "tree shape: NULL argument");
    if (shape->dyn_k) return sp_fail(err, SP_ERR_ARG, "tree shape: a dynamic tree has no fixed layout");
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

void sp_tree_ancestor_mask(const int32_t *parent, int32_t first, int32_t n_rows, int32_t n_prefix,
                           int32_t width, uint8_t *mask) {
    for (int32_t r = 0; r < n_rows; r++) {
        uint8_t *row = mask + (int64_t)r * width;
        memset(row, 0, (size_t)width);
        memset(row, 1, (size_t)n_prefix);
        for (int32_t a = first + r; a > 0; a = parent[a]) row[n_prefix + a - 1] = 1;
    }
}
