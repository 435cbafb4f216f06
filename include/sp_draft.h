/* sp_draft: drafters, the proposal side of speculative decoding.
 *
 * Kinds:
 *   model      a separate small model with the same vocabulary
 *   ngram      prompt lookup: the tokens that followed the most recent earlier
 *              occurrence of the last n tokens (n from ngram_max down to
 *              ngram_min) in prompt + output; its q is one-hot
 *   layerskip  the target itself with some layers skipped (shares weights)
 *   lowbit     a copy of the target re-quantised at load (e.g. Q4_0)
 * A drafter keeps its own KV cache (model-based kinds) in step with the
 * committed text: before drafting it evaluates the committed tokens it has
 * not seen, and after verification the caller tells it what was accepted.
 * Every proposed token comes with the adjusted draft distribution it was
 * sampled from (same sampler settings as the target), as the verifiers need. */
#ifndef SP_DRAFT_H
#define SP_DRAFT_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_model.h"
#include "sp_rng.h"
#include "sp_sampler.h"
#include "sp_status.h"
#include "sp_verify.h"

typedef enum sp_drafter_kind {
    SP_DRAFT_NONE = 0,
    SP_DRAFT_MODEL,
    SP_DRAFT_NGRAM,
    SP_DRAFT_LAYERSKIP,
    SP_DRAFT_LOWBIT
} sp_drafter_kind;

const char *sp_drafter_name(sp_drafter_kind k);
sp_status sp_drafter_parse(const char *name, sp_drafter_kind *out, sp_error *err);

/* Prompt lookup over hist[0..len): for n = n_max down to n_min, find the most
 * recent earlier occurrence of the last n tokens and copy up to max_pred of
 * the tokens that followed it into out. Returns how many were proposed (0 if
 * no match). Pure function. */
int32_t sp_ngram_propose(const int32_t *hist, int32_t len, int32_t n_min, int32_t n_max,
                         int32_t max_pred, int32_t *out);

#define SP_DRAFT_MAX_LAYERS 1024 /* layer lists and layerskip targets */
#define SP_DRAFT_SKIP_LEN 256    /* longest layer-list text, terminator included */
#define SP_NGRAM_MAX 64          /* longest prompt-lookup n-gram */

/* Parse a layer list "1,3,5-7" (numbers and ranges separated by single
 * commas) into skip[n_layers]. SP_ERR_ARG for bad syntax (an empty item, a
 * trailing comma), out-of-range layers, or skipping every layer. NULL or ""
 * gives the default: every other layer from 1, never the first or the
 * last. skip == NULL checks the syntax only (n_layers unused). */
sp_status sp_parse_skip_layers(const char *s, int32_t n_layers, bool *skip, sp_error *err);

typedef struct sp_drafter_params {
    sp_drafter_kind kind;
    const sp_model *draft_model; /* SP_DRAFT_MODEL (not owned) */
    int32_t ngram_min, ngram_max; /* SP_DRAFT_NGRAM, default 1 and 4 */
    char skip_layers[SP_DRAFT_SKIP_LEN]; /* SP_DRAFT_LAYERSKIP, see sp_parse_skip_layers; "" = default */
    sp_ggml_type lowbit_type;    /* SP_DRAFT_LOWBIT, default Q4_0 */
    int32_t max_batch;           /* largest draft batch (tree level); default SP_CTX_DEFAULT_BATCH */
} sp_drafter_params;

sp_drafter_params sp_drafter_default_params(void);

/* What a drafter of these parameters needs from the target model: a draft
 * model with the same vocabulary (size and pieces), a layer list within the
 * target's layers that keeps one, n-gram sizes 1 <= min <= max <=
 * SP_NGRAM_MAX, a low-bit type the engine computes with. Messages name the
 * settings (drafter, skip_layers, ngram_min, lowbit). */
sp_status sp_drafter_params_check(const sp_drafter_params *p, const sp_model *target,
                                  sp_error *err);

typedef struct sp_drafter sp_drafter;

/* Makes a drafter for `target` (model-based kinds get a context of the same
 * size, on the target's thread pool). SP_ERR_ARG for a draft model whose
 * vocabulary differs from the target's. */
sp_status sp_drafter_init(const sp_drafter_params *p, sp_ctx *target, sp_drafter **out,
                          sp_error *err);
void sp_drafter_free(sp_drafter *d);
sp_drafter_kind sp_drafter_kind_of(const sp_drafter *d);
/* The draft context (NULL for ngram). */
sp_ctx *sp_drafter_ctx(sp_drafter *d);
/* Empty the draft cache (and forget any resync offset) for a new prompt. */
sp_status sp_drafter_reset(sp_drafter *d, sp_error *err);

/* Counters the drafter adds to (forward calls, seconds in them). */
typedef struct sp_draft_counters {
    int64_t forwards;
    double seconds;
} sp_draft_counters;
const sp_draft_counters *sp_drafter_counters(const sp_drafter *d);

/* Prefill: make the drafter's cache hold hist[0..n) (model kinds). */
sp_status sp_drafter_prefill(sp_drafter *d, const int32_t *hist, int32_t n, sp_error *err);

/* Draft a chain of up to gamma tokens continuing hist[0..n) into draft[],
 * with their distributions q (gamma x V rows). Model kinds stop early when
 * the draft's top probability falls below p_min (0 = never), but only after
 * n_min tokens (n_min 0: even before the first). ngram may propose 0
 * tokens. smp provides the adjusted distribution (temperature 0: one-hot
 * argmax). */
sp_status sp_drafter_chain(sp_drafter *d, const int32_t *hist, int32_t n, int32_t gamma,
                           int32_t n_min, float p_min, sp_sampler *smp, sp_rng *rng,
                           int32_t *draft, float *q, int32_t *n_draft, sp_error *err);

/* After a chain of n_draft tokens continuing hist[0..n) was verified with tau
 * accepted: drop the rejected tokens from the draft cache. */
sp_status sp_drafter_accept_chain(sp_drafter *d, int32_t n, int32_t tau, sp_error *err);

/* A draft tree grown breadth-first from the last committed token (node 0).
 * Buffers have room for shape->n_nodes nodes; q is n_nodes x V. */
typedef struct sp_draft_tree {
    int32_t n_nodes;
    int32_t *parent;
    int32_t *token;
    int32_t *depth;
    float *q;  /* q[node]: distribution node's children were drawn from */
} sp_draft_tree;

/* Grow a tree of the given shape (model kinds only). greedy: children are
 * the top-k draft tokens (temperature 0); else children are drawn from q
 * with or without replacement (mode). Fewer children are made when q has
 * fewer tokens than asked without replacement. max_depth (<= shape depth)
 * trims the tree near the end of the token budget. */
sp_status sp_drafter_tree(sp_drafter *d, const int32_t *hist, int32_t n,
                          const sp_tree_shape *shape, int32_t max_depth, bool greedy,
                          sp_mc_mode mode, sp_sampler *smp, sp_rng *rng, sp_draft_tree *t,
                          sp_error *err);

/* After tree verification accepted path[0..n_path) (node indices): keep
 * those nodes' entries in the draft cache and drop the rest. */
sp_status sp_drafter_accept_tree(sp_drafter *d, int32_t n, const sp_draft_tree *t,
                                 const int32_t *path, int32_t n_path, sp_error *err);

#endif
