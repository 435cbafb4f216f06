/* sp_draft: drafters, the proposal side of speculative decoding: their kinds
 * and settings (the drafter objects themselves are internal, src/speculation/draft.h).
 *
 * Kinds:
 *   model      a separate small model with the same vocabulary
 *   ngram      prompt lookup: the tokens that followed the most recent earlier
 *              occurrence of the last n tokens (n from ngram_max down to
 *              ngram_min) in prompt + output; its q is one-hot
 *   layerskip  the target itself with some layers skipped (shares weights)
 *   lowbit     a copy of the target re-quantised at load (e.g. Q4_0)
 *   eagle3     an EAGLE-3 head (sp_eagle3.h) reading the target's hidden
 *              states (taps of three layers, set on the target context by
 *              the drafter); chains and trees of a fixed shape
 *   suffix     suffix tries over the request's text and a shared corpus of
 *              earlier outputs (sp_suffix.h); proposes the most frequent
 *              continuation, its length chosen per step (chains: q one-hot),
 *              or a tree of the most frequent continuations (q = their
 *              normalised counts, children drawn from it)
 *   ngram-cache  llama.cpp's n-gram cache lookup (context cache over the
 *              request, dynamic cache over earlier requests, its thresholds;
 *              sp_suffix_propose_lookup), for comparison; q one-hot
 *   ngram-map-k, ngram-map-k4v  llama.cpp's n-gram map drafters (a key of
 *              map_n tokens, continuations of map_m; k4v drafts the most
 *              frequent of four continuations once the key was seen
 *              map_min_hits times), token for token as llama.cpp drafts them
 *              (capped at gamma); for comparison; q one-hot
 *   ngram-mod  llama.cpp's ngram-mod drafter (its default): a hashed table of
 *              mod_n_match-grams to the next token, followed for up to
 *              mod_n_max tokens, nothing if fewer than mod_n_min (capped at
 *              gamma); for comparison; q one-hot
 * A drafter keeps its own KV cache (model-based kinds) in step with the
 * committed text: before drafting it evaluates the committed tokens it has
 * not seen, and after verification the caller tells it what was accepted.
 * Every proposed token comes with the adjusted draft distribution it was
 * sampled from (same sampler settings as the target), as the verifiers need. */
#ifndef SP_DRAFT_H
#define SP_DRAFT_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_eagle3.h"
#include "sp_model.h"
#include "sp_rng.h"
#include "sp_sampler.h"
#include "sp_status.h"
#include "sp_suffix.h"
#include "sp_verify.h"

typedef enum sp_drafter_kind {
    SP_DRAFT_NONE = 0,
    SP_DRAFT_MODEL,
    SP_DRAFT_NGRAM,
    SP_DRAFT_LAYERSKIP,
    SP_DRAFT_LOWBIT,
    SP_DRAFT_EAGLE3,
    SP_DRAFT_SUFFIX,
    SP_DRAFT_NGRAM_CACHE,
    SP_DRAFT_NGRAM_MAP_K,
    SP_DRAFT_NGRAM_MAP_K4V,
    SP_DRAFT_NGRAM_MOD
} sp_drafter_kind;

const char *sp_drafter_name(sp_drafter_kind k);
sp_status sp_drafter_parse(const char *name, sp_drafter_kind *out, sp_error *err);

/* Per-step arbitration (with_suffix): with E the expected accepted tokens of
 * a proposal (suffix: the sum of its running scores; the other drafter:
 * sum_{k=1..gamma} a^k with a its measured per-token acceptance, prior
 * 0.6) and T the measured rest of an iteration (target pass and
 * verification: the time between two drafting calls), the suffix chain is
 * used when (1 + E_suffix) / T >= (1 + E_other) / (T + gamma t_draft),
 * t_draft the other drafter's measured seconds per drafted token; else the
 * other drafter drafts, unless 1 / T (drafting nothing) beats it. The other
 * drafter's cache is not prefilled with the prompt: it catches up when
 * first chosen (after a long gap from the last 32 tokens only). Exact whichever is chosen (each proposal comes with
 * the q it was drawn from). */

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
    int32_t ngram_min, ngram_max; /* SP_DRAFT_NGRAM (and NGRAM_CACHE: max <= 4), default 1 and 4 */
    int32_t map_n, map_m, map_min_hits; /* SP_DRAFT_NGRAM_MAP_*: key and value sizes
                                         * (1..1024), hits before k4v drafts (1..1024);
                                         * default 12, 48, 1 (llama.cpp's) */
    int32_t mod_n_match, mod_n_min, mod_n_max; /* SP_DRAFT_NGRAM_MOD: 1 <= n_match <= 1024,
                                                * 0 <= n_min <= n_max <= 1024; default
                                                * 24, 48, 64 (llama.cpp's) */
    char skip_layers[SP_DRAFT_SKIP_LEN]; /* SP_DRAFT_LAYERSKIP, see sp_parse_skip_layers; "" = default */
    sp_ggml_type lowbit_type;    /* SP_DRAFT_LOWBIT, default Q4_0 */
    const sp_eagle3 *eagle3;     /* SP_DRAFT_EAGLE3: the head, loaded for the target (not owned) */
    int32_t max_batch;           /* largest draft batch (tree level); default SP_CTX_DEFAULT_BATCH */
    sp_suffix_corpus *suffix_corpus; /* SP_DRAFT_SUFFIX (and with_suffix): the shared corpus
                                      * of earlier outputs (not owned); NULL: the drafter
                                      * keeps its own */
    bool with_suffix; /* model, layerskip, lowbit, ngram: per-step arbitration with a suffix
                       * drafter ("model+suffix"): each chain step drafts from the one with
                       * the larger expected emitted tokens per second (chains only) */
} sp_drafter_params;

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
