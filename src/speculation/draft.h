/* draft.h: the drafter objects (internal to the library; the kinds and
 * settings are public in sp_spec.h). Used by the speculation loop (spec.c). */
#ifndef SP_DRAFT_INTERNAL_H
#define SP_DRAFT_INTERNAL_H

#include "sp_generate.h"
#include "sp_spec.h"
#include "rng.h"
#include "verify.h"

typedef struct sp_drafter sp_drafter;

/* Makes a drafter for `target` (model-based kinds get a context of the same
 * size, on the target's thread pool). SP_ERR_ARG for a draft model whose
 * vocabulary differs from the target's. */
sp_status sp_drafter_init(const sp_drafter_params *p, sp_ctx *target, sp_drafter **out,
                          sp_error *err);
void sp_drafter_free(sp_drafter *d);
sp_drafter_kind sp_drafter_kind_of(const sp_drafter *d);
/* The draft context (NULL for ngram and suffix). */
sp_ctx *sp_drafter_ctx(sp_drafter *d);
/* The suffix drafter's state (NULL for the other kinds). */
sp_suffix *sp_drafter_suffix(sp_drafter *d);
/* Empty the draft cache (and forget any resync offset) for a new prompt;
 * the suffix drafter ends its request (its output joins the corpus). */
sp_status sp_drafter_reset(sp_drafter *d, sp_error *err);
/* As sp_drafter_reset, but a draft model's cache keeps its first n_keep
 * tokens when it holds the history from its start (no resync, no tree
 * nodes; else, or when a recurrent draft cannot go back there, it restarts
 * empty); the next sp_drafter_prefill evaluates only the rest. */
sp_status sp_drafter_reset_keep(sp_drafter *d, int32_t n_keep, sp_error *err);
/* After sp_drafter_reset_keep: the draft cache keeps at most its first n
 * tokens (those known to equal the new history's). */
sp_status sp_drafter_keep(sp_drafter *d, int32_t n, sp_error *err);
/* The draft model's forwards through fn (sp_forward_fn; NULL: sp_forward):
 * only a draft-model drafter's (SP_DRAFT_MODEL), whose context is of that
 * model; other kinds keep sp_forward. */
void sp_drafter_set_forward(sp_drafter *d, sp_forward_fn fn, void *ud);
/* The eagle3 drafter drafts with head h from now on (sp_spec_set_eagle3). */
sp_status sp_drafter_set_head(sp_drafter *d, const sp_eagle3 *h, sp_error *err);

/* Counters the drafter adds to (forward calls, seconds in them). */
typedef struct sp_draft_counters {
    int64_t forwards;
    double seconds;
    /* of which: catch-up forwards of more than two tokens (the cache brought
     * level after plain steps; while drafting, a catch-up feeds one or two) */
    int64_t gap_forwards;
    double gap_seconds;
} sp_draft_counters;
const sp_draft_counters *sp_drafter_counters(const sp_drafter *d);

/* After every target forward of the loop (prompt chunks, verification
 * passes; chains): the target evaluated hist-consistent rows at positions
 * p0..p0+B-1 of `target` (its taps hold them), and hist[0..n_known) is the
 * committed text known so far. Feature drafters (eagle3) encode the rows
 * and advance their cache; the others ignore it. */
sp_status sp_drafter_target_rows(sp_drafter *d, sp_ctx *target, const int32_t *hist, int32_t n_known,
                                 int32_t p0, int32_t B, sp_error *err);

/* mtp: replace the target row held for position pos (a normed final
 * state, edim floats) with h, and drop the block's slots that read it
 * (position pos + 1 on: the next draft evaluates them again).
 * SP_ERR_RANGE when the row is not held (consumed, or not yet given),
 * SP_ERR_ARG for the other kinds. It exists to reproduce llama.cpp's
 * draft-mtp on targets without partial rollback (qwen3next): after
 * restoring its checkpoint it pairs the first token of the second
 * verification with the last row of the rejected one
 * (tests/test_mtp_llamacpp.c). */
sp_status sp_drafter_replace_row(sp_drafter *d, int32_t pos, const float *h, sp_error *err);

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

sp_status sp_drafter_parse(const char *name, sp_drafter_kind *out, sp_error *err);
/* Prompt lookup over hist[0..len): for n = n_max down to n_min, find the most
 * recent earlier occurrence of the last n tokens and copy up to max_pred of
 * the tokens that followed it into out. Returns how many were proposed (0 if
 * no match). Pure function. */
int32_t sp_ngram_propose(const int32_t *hist, int32_t len, int32_t n_min, int32_t n_max,
                         int32_t max_pred, int32_t *out);
/* Parse a layer list "1,3,5-7" (numbers and ranges separated by single
 * commas) into skip[n_layers]. SP_ERR_ARG for bad syntax (an empty item, a
 * trailing comma), out-of-range layers, or skipping every layer. NULL or ""
 * gives the default: every other layer from 1, never the first or the
 * last. skip == NULL checks the syntax only (n_layers unused). */
sp_status sp_parse_skip_layers(const char *s, int32_t n_layers, bool *skip, sp_error *err);
sp_drafter_params sp_drafter_default_params(void);
/* What a drafter of these parameters needs from the target model: a draft
 * model with the same vocabulary (size and pieces), a layer list within the
 * target's layers that keeps one, n-gram sizes 1 <= min <= max <=
 * SP_NGRAM_MAX, a low-bit type the engine computes with, an EAGLE-3 head
 * loaded for this target. Messages name the settings (drafter, skip_layers,
 * ngram_min, lowbit). */
sp_status sp_drafter_params_check(const sp_drafter_params *p, const sp_model *target,
                                  sp_error *err);

#endif
