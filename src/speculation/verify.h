/* verify.h: speculative-decoding verifiers as pure functions over
 * probability arrays (ALGORITHMS.md sections 2-4).
 *
 * Conventions shared by every function here:
 *  - V is the vocabulary size the workspace was created for.
 *  - A "distribution row" is V floats, each finite and >= 0, summing to 1
 *    within SP_VERIFY_SUM_TOL. Rows are used as given (not renormalised);
 *    a violated row is rejected with SP_ERR_ARG and a message naming it.
 *  - Matrices are row-major: q is gamma x V (row i = q_i), p is
 *    (gamma+1) x V (row i = p_i), tree rows are n_nodes x V.
 *  - A drafted token must have positive draft probability: q(x) = 0 for a
 *    drafted/candidate token means q does not describe the drafter, and is
 *    rejected with SP_ERR_ARG (never divided by). A drafted token with zero
 *    target probability is fine (it is simply rejected).
 *  - Randomness comes only from the caller's sp_rng; no global state, no
 *    allocation per call (all scratch lives in the workspace), no printing.
 *    A workspace is not thread-safe: use one per thread.
 *  - On error the outputs are unspecified and err (if non-NULL) holds a
 *    one-line message.
 *
 * Lossless verifiers (output distributed exactly as the target):
 *   token, block (the default), greedy (for one-hot/argmax targets), the
 *   multi-candidate steps with and without replacement, naive multi-candidate,
 *   and tree verification built on them.
 * LOSSY, opt-in only: lenient token verification (sp_verify_lenient). */
#ifndef SP_VERIFY_H
#define SP_VERIFY_H

#include <stdint.h>

#include "rng.h"
#include "sp_spec.h"
#include "sp_status.h"

typedef struct sp_verify_ws sp_verify_ws;

/* How the children of a node (or the k candidates at one position) were drawn
 * from the draft distribution q. */
typedef enum sp_mc_mode {
    SP_MC_REPLACE = 0, /* i.i.d. from q */
    SP_MC_NOREPLACE,   /* x_j ~ q_j, q_{j+1} = norm(q_j with x_j zeroed) */
    SP_MC_NAIVE        /* drawn i.i.d. from q; verified by the naive baseline */
} sp_mc_mode;

/* Result of one chain verification: tau accepted draft tokens X_1..X_tau,
 * then the extra token Y (residual sample or bonus). Emitted: tau + 1 tokens. */
typedef struct sp_verify_result {
    int32_t n_accepted; /* tau in [0, gamma] */
    int32_t token;      /* Y in [0, V) */
} sp_verify_result;

/* Create a workspace for vocabulary size n_vocab in [2, SP_VERIFY_MAX_VOCAB].
 * Allocates about 16 * n_vocab bytes once. SP_ERR_ARG for a bad size,
 * SP_ERR_NOMEM if allocation fails. */
sp_status sp_verify_ws_init(int32_t n_vocab, sp_verify_ws **out, sp_error *err);
void sp_verify_ws_free(sp_verify_ws *ws); /* NULL is fine */
int32_t sp_verify_ws_vocab(const sp_verify_ws *ws);

/* Check one distribution row of n floats: finite, >= 0, sum within
 * SP_VERIFY_SUM_TOL of 1. `what` names the row in the message. */
sp_status sp_verify_check_row(const float *row, int32_t n, const char *what, sp_error *err);

/* ---- single draft chain -------------------------------------------------
 * Common arguments: gamma in [1, SP_VERIFY_MAX_GAMMA]; draft[gamma] tokens in
 * [0, V); q gamma x V; p (gamma+1) x V; rng non-NULL. All rows are validated
 * before any randomness is drawn, so an error never depends on the rng. */

/* Token verification (section 2): accept X_i with prob min(1, p/q); at the
 * first rejection Y ~ norm(max(0, p_{i-1} - q_{i-1})); else Y ~ p_gamma.
 * If that residual is numerically empty (p ~= q) Y is drawn from p_{i-1}. */
sp_status sp_verify_token(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *q,
                          const float *p, sp_rng *rng, sp_verify_result *out, sp_error *err);

/* Block verification (section 3, Sun et al. 2025), exactly as specified, no
 * early break. Implementation note: the per-step stop/continue outcomes are
 * drawn in order and the token y is drawn only for the last step that did not
 * reject; since the steps' draws are independent given the draft this is the
 * same distribution as drawing y at every step. Costs about gamma+2 passes
 * over V. */
sp_status sp_verify_block(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *q,
                          const float *p, sp_rng *rng, sp_verify_result *out, sp_error *err);

/* Greedy: accept while draft[i] == argmax p_i (lowest id on ties);
 * Y = argmax p_tau. q and rng are not used and may be NULL. p rows are
 * validated. Equals plain greedy decoding token for token. */
sp_status sp_verify_greedy(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *p,
                           sp_verify_result *out, sp_error *err);

/* LOSSY, opt-in: lenient token verification. Accept X_i with prob
 * min(1, p/(lenience*q)), lenience in (0, 1]; residual as in token
 * verification. lenience = 1 is token verification. The output is NOT
 * distributed as the target for lenience < 1. */
sp_status sp_verify_lenient(sp_verify_ws *ws, int32_t gamma, const int32_t *draft, const float *q,
                            const float *p, double lenience, sp_rng *rng, sp_verify_result *out,
                            sp_error *err);

/* Dispatcher over the four chain verifiers (TOKEN, BLOCK, GREEDY, LENIENT);
 * lenience is used only by LENIENT. SP_ERR_ARG for the multi-candidate kinds. */
sp_status sp_verify_chain(sp_verify_ws *ws, sp_verifier v, double lenience, int32_t gamma,
                          const int32_t *draft, const float *q, const float *p, sp_rng *rng,
                          sp_verify_result *out, sp_error *err);

/* ---- multi-candidate at one position (section 4) ------------------------
 * k in [1, SP_TREE_MAX_NODES) candidates cand[k] in [0, V), drawn from q (one
 * row; for SP_MC_NOREPLACE the per-candidate q_j are derived from it), target
 * row p. Writes *index = j of the accepted candidate (0-based) or -1 if none
 * was accepted, and *token = the emitted token (cand[j], or the residual /
 * naive sample). For SP_MC_NAIVE q is unused (may be NULL): y ~ p, accepted
 * iff y is a candidate (first match). SP_ERR_ARG if a candidate has zero
 * (remaining) draft probability, which for NOREPLACE includes duplicates and
 * more candidates than q's support. Numerical guard: if a residual
 * max(0, p_cur - q_j) is empty up to rounding (p_cur ~= q_j, so rejecting had
 * ~zero probability) p_cur is kept unchanged instead of dividing by ~0.
 * Cost: about 2 passes over V per rejected candidate. */
sp_status sp_verify_mc(sp_verify_ws *ws, sp_mc_mode mode, int32_t k, const int32_t *cand,
                       const float *q, const float *p, sp_rng *rng, int32_t *index,
                       int32_t *token, sp_error *err);

/* ---- tree verification ----------------------------------------------------
 * A draft tree of n_nodes in [1, SP_TREE_MAX_NODES] nodes. Node 0 is the root
 * (the last committed position; carries no token). For i >= 1: parent[i] in
 * [0, i) (so nodes are in topological order), token[i] in [0, V). The
 * children of a node, in increasing index order, are its candidates in the
 * order they were sampled. p[i] (row i of n_nodes x V) is the target's
 * next-token distribution after the root-to-i path; q[i] is the draft
 * distribution node i's children were sampled from (rows of leaves, and all
 * q rows for SP_MC_NAIVE, are not read; q may then be NULL only if naive).
 * parent[0] and token[0] are ignored. */
typedef struct sp_verify_tree {
    int32_t n_nodes;
    const int32_t *parent; /* [n_nodes] */
    const int32_t *token;  /* [n_nodes] */
    const float *p;        /* [n_nodes][V] */
    const float *q;        /* [n_nodes][V] */
} sp_verify_tree;

/* Walk from the root applying sp_verify_mc over each node's children; move
 * into the accepted child, or emit the residual sample and stop; at an
 * accepted leaf emit a bonus token drawn from p[leaf]. Writes the accepted
 * path (node indices, root excluded) into path[path_cap], its length into
 * *n_path, and the extra token into *token. The structure is validated in
 * full; only the p/q rows the walk reads are validated (a full check would
 * cost n_nodes * V). SP_ERR_RANGE if the path would exceed path_cap
 * (path_cap >= tree depth always suffices). */
sp_status sp_verify_tree_walk(sp_verify_ws *ws, const sp_verify_tree *t, sp_mc_mode mode,
                              sp_rng *rng, int32_t *path, int32_t path_cap, int32_t *n_path,
                              int32_t *token, sp_error *err);

/* Traversal verification (Weng et al., NeurIPS 2025, arXiv 2505.12398):
 * sequence-level acceptance over a draft tree, from the leaves toward the
 * root. Every node v carries a target row Mb_v (p[v] at first), a draft row
 * Ms_v (q[v] normalised at first) and an acceptance weight a_v (a_root = 1):
 *
 *   descend: from the current node go to its first remaining child c
 *            (token x), a_c = min(1, a_v Mb_v(x) / Ms_v(x)), until a node
 *            with no remaining child: the candidate leaf l.
 *   if l is the root: emit Y ~ Mb_root, no draft token accepted; stop.
 *   with probability a_l accept the root-to-l path, emit Y ~ Mb_l; stop.
 *   else delete l; at its parent v:
 *        Mb_v <- norm(max(0, a_v Mb_v - Ms_v))
 *        a_v  <- min(1, sum max(0, a_v Mb_v - Ms_v) / sum max(0, Ms_v - a_v Mb_v))
 *                (both sums over the rows before the update; 1 if the
 *                second is 0)
 *        Ms_v <- Ms_v without x, renormalised      (mode SP_MC_NOREPLACE)
 *        Ms_v unchanged                             (mode SP_MC_REPLACE)
 *        and continue from v.
 * On a chain this is block verification (same output distribution; 11/9
 * accepted tokens on the toy of ALGORITHMS.md section 3); at depth 1 with
 * SP_MC_NOREPLACE its first child is token verification's test. Both modes
 * are lossless: checked by exact enumeration over every draft tree on
 * 3-token toys for shapes 1..3, 1x1, 2x1, 2x2, 3x1, 1x1x1, and by the
 * chi-square suite. The mode must say how the children of each node were
 * drawn from q: without replacement (SP_MC_NOREPLACE; the paper's trees,
 * verifier "traversal") or i.i.d. (SP_MC_REPLACE).
 *
 * GBV. With SP_MC_REPLACE on a tree of K independent chains (shape
 * Kx1x...x1, K i.i.d. draft paths) this is the multi-path block
 * verification we ship as "gbv": each path is verified block-wise from its
 * end, and only when a whole path is rejected does the root's target become
 * the residual the next path is verified against. For K = 1 it is block
 * verification; for the same drafts it accepts at least as many tokens as
 * block verification of the first path (it differs only where that would
 * accept nothing). Thomas & Pal (arXiv 2602.16961) derive their greedy
 * multi-path rule from a linear program; their algorithm text was not
 * available to us, so "gbv" is this construction in the class they
 * describe, not a transcription of theirs.
 *
 * Exact expected accepted tokens on that toy (Mb = (1/3, 2/3), Ms = (2/3,
 * 1/3) context-free, depth 2, by enumeration): block 33/27, gbv K=2 38/27
 * (mc 35/27), gbv K=3 124/81 (mc 115/81); traversal on 2x1 16/9 (mc-norep
 * 15/9).
 *
 * Arguments and outputs as sp_verify_tree_walk; mode SP_MC_REPLACE or
 * SP_MC_NOREPLACE. Every child must have positive draft probability and,
 * for SP_MC_NOREPLACE, the children of a node distinct tokens (SP_ERR_ARG,
 * checked before any randomness). Rows are validated when first read. Cost:
 * about 3 passes over V per rejected node; scratch of (depth + 1) x V
 * doubles in the workspace, allocated on first use of a depth. */
sp_status sp_verify_tree_traversal(sp_verify_ws *ws, const sp_verify_tree *t, sp_mc_mode mode,
                                   sp_rng *rng, int32_t *path, int32_t path_cap, int32_t *n_path,
                                   int32_t *token, sp_error *err);

/* Greedy tree verification (temperature 0, one-hot or argmax targets): from
 * the root, move into the first child (in index order) whose token is the
 * argmax of p[node] (lowest id on ties); where no child matches, emit that
 * argmax and stop. Equals plain greedy decoding token for token. q is not
 * read (may be NULL). Outputs and validation as sp_verify_tree_walk (each
 * p row on the path is validated). */
sp_status sp_verify_tree_greedy(sp_verify_ws *ws, const sp_verify_tree *t, int32_t *path,
                                int32_t path_cap, int32_t *n_path, int32_t *token, sp_error *err);

#endif
