/* suffix.h: suffix drafting (SuffixDecoding, Oliaro et al., arXiv
 * 2411.04975): continuations proposed from what was already said.
 *
 * Two depth-bounded suffix tries (every substring of at most
 * SP_SUFFIX_DEPTH tokens, each node counting its occurrences):
 *  - the request's own text (prompt and output so far), one per drafter;
 *  - a global corpus of earlier outputs, FIFO-bounded in tokens, shared by
 *    every drafter given the same sp_suffix_corpus (server slots, bench
 *    prompts). Thread-safe: a mutex guards it; lookups hold it for one
 *    bounded match.
 * A step finds, in each trie, the longest suffix of the text (at most
 * SP_SUFFIX_DEPTH - 1 tokens) that occurred before with a continuation, and
 * follows the most frequent child from there (ties: the child that reached
 * the count first), re-matching on the text plus the chain when the trie's
 * depth runs out. Each proposed token is scored by its empirical probability
 * (child count / continuations of the node) times an acceptance rate learned
 * online per source (request, corpus) and match-length bucket (1, 2, 3-4,
 * 5-8, 9-16, 17+) from verification results (accepted / tested tokens,
 * prior 4 of 5, evidence decaying by 0.97 a step so a bucket that stopped
 * proposing is tried again); the chain stops when the
 * product falls below SP_SUFFIX_MIN_SCORE, so its length is chosen per step
 * (0 when nothing is likely). The source with the larger expected accepted
 * length (sum of the products) is used. Proposals are deterministic: no
 * randomness, ties broken by insertion order.
 *
 * Bounds: a request trie holds at most request_tokens x SP_SUFFIX_DEPTH
 * nodes (text past that still matches, but adds no new nodes); the corpus
 * at most corpus_tokens tokens (oldest outputs dropped first; the trie is
 * rebuilt from the kept outputs when outputs are dropped, at add time, not
 * per step). Memory is allocated once at creation, about 48 bytes per node
 * of capacity (pages are touched only as nodes are used). Time per step:
 * O(SP_SUFFIX_DEPTH^2) hash look-ups for the match plus O(length) for the
 * chain, whatever the text length. */
#ifndef SP_SUFFIX_H
#define SP_SUFFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "rng.h"
#include "sp_spec.h"
#include "sp_status.h"

/* A drafter over `corpus` (shared, not owned; NULL: it makes and owns its
 * own, kept across requests). request_tokens bounds the request trie (0:
 * SP_SUFFIX_REQUEST_TOKENS). */
sp_status sp_suffix_init(sp_suffix_corpus *corpus, int32_t request_tokens, sp_suffix **out,
                         sp_error *err);
void sp_suffix_free(sp_suffix *s);

/* End the current request: its output (the text after the length of the
 * text of its first proposal) goes to the corpus, and the request trie is
 * emptied. Also done by sp_suffix_propose when the text it is given is not
 * a continuation of the text it has indexed. */
sp_status sp_suffix_end_request(sp_suffix *s, sp_error *err);

/* Index hist[0..n) (only the tokens not yet indexed) and propose up to
 * max_len (>= 0) tokens continuing it into out; *n_out may be 0. Tokens
 * must be >= 0. */
sp_status sp_suffix_propose(sp_suffix *s, const int32_t *hist, int32_t n, int32_t max_len,
                            int32_t *out, int32_t *n_out, sp_error *err);

/* A draft tree (node 0 = the last token of the text; parent[i] < i; q[i]
 * = the distribution node i's children were drawn from, V floats per
 * row; buffers hold max_nodes nodes). */
typedef struct sp_suffix_tree {
    int32_t n_nodes;
    int32_t *parent, *token, *depth;
    float *q;
} sp_suffix_tree;

/* Index hist[0..n) (n >= 1) and grow a tree of continuations from the
 * better source's longest match: under each node, its (at most branch[d] at
 * depth d) most frequent continuations whose path score (product of
 * empirical probability x learned acceptance) stays >= SP_SUFFIX_MIN_SCORE,
 * to the given depth and at most max_nodes nodes (root included, <=
 * SP_TREE_MAX_NODES). q[node] is those continuations' counts normalised
 * (zero elsewhere); the children are drawn from it: greedy: all, by count;
 * norep: all, in an order drawn without replacement (exactly what
 * verification without replacement assumes); else branch[d] i.i.d. draws.
 * Tokens >= V are never proposed. Only rows of nodes with children are
 * written. t->n_nodes = 1 when nothing is proposed. */
sp_status sp_suffix_propose_tree(sp_suffix *s, const int32_t *hist, int32_t n,
                                 const int32_t *branch, int32_t depth, int32_t max_nodes,
                                 bool greedy, bool norep, sp_rng *rng, int32_t V,
                                 sp_suffix_tree *t, sp_error *err);

/* Verification of the last proposal (chain, or tree: its accepted path)
 * accepted n_accepted of its tokens: updates the acceptance rates that
 * choose the length. n_accepted < 0: the proposal was not used (nothing is
 * learned). */
void sp_suffix_feedback(sp_suffix *s, int32_t n_accepted);

/* llama.cpp's n-gram cache lookup (common/ngram-cache.cpp, "lookup
 * decoding") on the same tries: token by token, the most frequent
 * continuation of the longest n-gram (ngram_max down to ngram_min, 1 <= min
 * <= max <= 4) of the text plus the tokens drafted so far, first in the
 * request (llama.cpp's context cache, thresholds: at least 2, 2, 1, 1
 * samples and 66, 50, 50, 50 % for sizes 1..4), else in the corpus (its
 * dynamic cache: 4, 3, 2, 2 samples, 75, 66, 66, 66 %); stops at the first
 * position neither passes. No static cache. Up to max_len tokens. */
sp_status sp_suffix_propose_lookup(sp_suffix *s, const int32_t *hist, int32_t n, int32_t max_len,
                                   int32_t ngram_min, int32_t ngram_max, int32_t *out,
                                   int32_t *n_out, sp_error *err);

/* Whether the corpus receives a finished request's whole text (prompt and
 * output, as llama.cpp's dynamic cache does) instead of its output. */
void sp_suffix_set_whole_text(sp_suffix *s, bool whole);

/* Expected accepted tokens of the last proposal (sum of its running
 * scores), 0 if it proposed nothing. */
double sp_suffix_last_expect(const sp_suffix *s);

sp_suffix_stats sp_suffix_get_stats(sp_suffix *s);

#endif
