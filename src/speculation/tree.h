/* tree.h: building draft trees from their shape (sp_spec.h): node arrays,
 * the widest level, the ancestor mask. Internal to the speculative loop and
 * its drafters. */
#ifndef SP_TREE_H
#define SP_TREE_H

#include <stdint.h>

#include "sp_spec.h"

/* The shape with the given depth and factors branch[0..depth): the same
 * checks as the parser (factors >= 1, depth and node count in range). */
sp_status sp_tree_shape_make(const int32_t *branch, int32_t depth, sp_tree_shape *out,
                             sp_error *err);
/* The dynamic tree "dyn:k:depth:n" (sp_spec.h): the parser's checks and
 * messages (K in [1, SP_TREE_DYN_MAX_K], depth in [1, SP_TREE_MAX_DEPTH],
 * n in [1, SP_TREE_MAX_NODES - 1]). */
sp_status sp_tree_shape_make_dyn(int32_t k, int32_t depth, int32_t n, sp_tree_shape *out, sp_error *err);
/* Nodes in the widest level (k1, or k1k2, ...; a dynamic tree's K): the
 * largest batch a level-by-level drafter evaluates at once. */
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
