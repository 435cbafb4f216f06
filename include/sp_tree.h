/* sp_tree: draft trees. A tree shape "k1xk2x...xkd" (k1 children of the
 * root, k2 under each of those, ...; ALGORITHMS.md section 4), and the
 * attention mask that lets every node of a tree see exactly its ancestors
 * when a whole tree (or one level of it) is evaluated in one forward pass.
 *
 * Node numbering used everywhere: node 0 is the root (the last committed
 * token, which is already in the cache); nodes are in breadth-first,
 * topological order (parent[i] < i), so node i >= 1 occupies the (i-1)-th
 * slot after the root in a batch or a cache. */
#ifndef SP_TREE_H
#define SP_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "sp_status.h"

#define SP_TREE_MAX_DEPTH 64   /* levels below the root */
#define SP_TREE_MAX_NODES 1024 /* including the root: budget <= 1023 drafted nodes */

typedef struct sp_tree_shape {
    int32_t depth;                     /* d in [1, SP_TREE_MAX_DEPTH] */
    int32_t branch[SP_TREE_MAX_DEPTH]; /* k1..kd, each >= 1 */
    int32_t n_nodes;                   /* 1 + k1 + k1k2 + ... (root included) */
} sp_tree_shape;

/* Parse e.g. "4x2x2" (decimal factors >= 1 separated by 'x', no spaces, no
 * empty factors). SP_ERR_ARG for malformed text, SP_ERR_RANGE if depth >
 * SP_TREE_MAX_DEPTH or the node count exceeds SP_TREE_MAX_NODES. */
sp_status sp_tree_shape_parse(const char *s, sp_tree_shape *out, sp_error *err);

/* The shape with the given depth and factors branch[0..depth): the same
 * checks as the parser (factors >= 1, depth and node count in range). */
sp_status sp_tree_shape_make(const int32_t *branch, int32_t depth, sp_tree_shape *out,
                             sp_error *err);

/* The canonical text of a shape ("4x2x2") into buf[cap] (always
 * terminated); returns the length it needs, like snprintf. */
int sp_tree_shape_format(const sp_tree_shape *shape, char *buf, size_t cap);

/* Nodes in the widest level (k1, or k1k2, ...): the largest batch a
 * level-by-level drafter evaluates at once. */
int32_t sp_tree_shape_max_level(const sp_tree_shape *shape);

/* Fill parent[n_nodes] and depth_of[n_nodes] (depth_of may be NULL) for the
 * full tree of the shape in breadth-first order: root 0, then level 1, ...;
 * the children of a node are contiguous and in sampling order. cap is the
 * capacity of the arrays; SP_ERR_RANGE if cap < shape->n_nodes. */
sp_status sp_tree_shape_build(const sp_tree_shape *shape, int32_t *parent, int32_t *depth_of,
                              int32_t cap, sp_error *err);

/* Rows of a tree attention mask (1 = may attend), row-major with `width`
 * columns: row r describes node first + r (first >= 1) and gets 1 in
 * columns [0, n_prefix) (the tokens every node sees: the committed tail of
 * a target pass; 0 when the committed text is outside the mask), 1 in
 * column n_prefix + a - 1 for the node itself and for each ancestor a >= 1
 * (the root has no column of its own: it is committed text), 0 elsewhere.
 * Needs parent[] for nodes up to first + n_rows - 1 and
 * n_prefix + first + n_rows - 1 <= width. */
void sp_tree_ancestor_mask(const int32_t *parent, int32_t first, int32_t n_rows, int32_t n_prefix,
                           int32_t width, uint8_t *mask);

#endif
