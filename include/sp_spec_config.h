/* sp_spec_config: the one place speculation settings are read and checked.
 *
 * A configuration (sp_spec_params, see sp_spec.h) is built in layers: start
 * from defaults or a base (a server's defaults), apply settings by name,
 * from `key=value` text, from a JSON object, or one at a time (what the CLI
 * flags map to), then finish the layer, which fills the defaults that
 * depend on other settings and refuses combinations that make no sense.
 * Every message names the setting as the user wrote it ("gamma", "tree",
 * "verifier", ...), never a command-line flag.
 *
 * Settings (aliases in brackets):
 *   drafter [draft]     none | model | ngram | layerskip | lowbit | suffix |
 *                       ngram-cache, or
 *                       model+suffix (ngram, layerskip, lowbit +suffix): that drafter
 *                       and the suffix drafter arbitrated per step (sp_draft.h)
 *   verifier [verify]   token | block | greedy | lenient | mc | mc-norep | naive |
 *                       gbv | traversal (gbv: K paths as tree Kx1x..x1, drawn i.i.d.)
 *   gamma               draft length, 1..SP_SPEC_MAX_GAMMA (the maximum when adaptive)
 *   n_max               llama.cpp's name for gamma; n_max 0 turns speculation off
 *   n_min               draft at least this many tokens whatever p_min says,
 *                       0..gamma (default 1). llama.cpp instead discards drafts
 *                       shorter than n_min; dropping a draft after seeing it
 *                       would bias sampled verification, so Specula does not.
 *   p_min               stop drafting when the draft's top probability falls
 *                       below it, [0, 1] (0 = never; model-based drafters)
 *   tree                draft tree shape "k1xk2x..." (sp_tree.h) instead of a chain
 *   adaptive            choose gamma per iteration (ALGORITHMS.md section 6)
 *   ngram_min, ngram_max  prompt-lookup n-gram sizes, 1..64 (ngram-cache: 1..4)
 *   skip_layers [skip]  layers the layerskip drafter leaves out, "1,3,5-7"
 *   lowbit              weight type of the low-bit self-draft: any ggml type
 *                       name (case-insensitive) the engine computes with
 *                       (sp_quant_supported), e.g. q4_0, q8_0, f16, bf16
 *   lenience            (0, 1], lenient verification only (LOSSY)
 *
 * Text form (`specula bench --configs`, one configuration):
 *   config := "plain" | item ("," item)*
 *   item   := key "=" value | "adaptive"
 * A skip_layers list continues over the following comma-separated items
 * that are layer numbers or ranges ("skip=1,3,gamma=2"). Empty items (",,")
 * are errors.
 *
 * JSON form (a request's "speculative" object): an object whose keys are
 * the settings above; strings for names, shapes and layer lists, integers
 * for counts, numbers for p_min and lenience, a boolean for adaptive. A
 * null value means "not given". Unknown keys and wrong JSON types are
 * errors naming the key.
 *
 * Finishing a layer (sp_spec_config_finish):
 *  - without a drafter setting, the drafter is `model` when a draft model
 *    is available (an unchanged base drafter otherwise);
 *  - a tree given without a verifier is verified with mc-norep; a draft
 *    length given without a tree makes a chain (a base tree is dropped);
 *  - a draft length (gamma or n_max) given in a layer without adaptive in
 *    that layer is a static length: a base's adaptive is turned off (a
 *    request's gamma on a server started with --adaptive drafts exactly
 *    gamma tokens, so seeded requests reproduce whatever the load);
 *  - settings the chosen drafter or verifier would ignore are errors (a
 *    typo must not silently measure something else), except that n_min and
 *    p_min sent along with n_max 0 are ignored, as llama.cpp clients send
 *    them together;
 *  - a tree needs a model-based or the suffix drafter and verifier mc, mc-norep, naive,
 *    gbv, traversal or greedy; mc, mc-norep, naive, gbv and traversal need a
 *    tree; a tree and a draft length
 *    given together are an error (the shape sets the length).
 * What needs the model (vocabulary, layer count, batch and context sizes)
 * is checked by sp_spec_config_check, which sp_spec_init calls. */
#ifndef SP_SPEC_CONFIG_H
#define SP_SPEC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_sampler.h"
#include "sp_spec.h"

typedef struct sp_spec_config {
    sp_spec_params params; /* the configuration so far */
    uint32_t given;        /* settings given since init (internal bookkeeping) */
    bool off_by_n_max;     /* speculation was turned off by n_max 0 */
} sp_spec_config;

/* Start a layer over `base` (NULL: sp_spec_default_params()). */
void sp_spec_config_init(sp_spec_config *c, const sp_spec_params *base);

/* Apply one setting from text. key is a setting name or alias; value is its
 * text (NULL only for adaptive, meaning true). SP_ERR_ARG with a message
 * "<key>: ..." for an unknown key, a malformed or out-of-range value, or a
 * setting given twice in this layer. */
sp_status sp_spec_config_set(sp_spec_config *c, const char *key, const char *value,
                             sp_error *err);

/* Apply a text configuration (grammar above). */
sp_status sp_spec_config_parse(sp_spec_config *c, const char *text, sp_error *err);

/* Apply a JSON object (see above) given as text (len bytes, need not be
 * terminated). Not an object: SP_ERR_ARG naming what it is. */
sp_status sp_spec_config_json_text(sp_spec_config *c, const char *text, size_t len,
                                   sp_error *err);

/* Finish the layer (rules above). has_draft_model: a draft file was given
 * (a draft model for params.draft.draft_model, or with drafter eagle3 the
 * head for params.draft.eagle3). On success c->params is complete
 * and valid in itself (sp_spec_config_check_params). */
sp_status sp_spec_config_finish(sp_spec_config *c, bool has_draft_model, sp_error *err);

/* Checks that need no model: value ranges and the drafter/verifier/tree
 * combinations, for parameters however they were built. */
sp_status sp_spec_config_check_params(const sp_spec_params *p, sp_error *err);

/* Checks against the target context: sp_spec_config_check_params, the
 * drafter's needs (draft model vocabulary equal to the target's, layer list
 * within the target's layers, low-bit type), the target batch
 * (sp_spec_config_batch <= the context's max batch, SP_ERR_RANGE) and room
 * for the draft budget in the context. Plain decoding needs nothing. */
sp_status sp_spec_config_check(const sp_spec_params *p, const sp_ctx *target, sp_error *err);

/* Checks against the sampler settings of a generation: the greedy verifier
 * needs temperature 0 (it is lossy otherwise). */
sp_status sp_spec_config_check_sampling(const sp_spec_params *p, const sp_sampler_params *s,
                                        sp_error *err);

/* Target batch the configuration needs: the uncommitted token plus the
 * draft budget (chain: gamma + 1 rows of logits plus the tail token; tree:
 * its nodes plus one), and never less than SP_CTX_DEFAULT_BATCH (prefill).
 * Create the target context with at least this max_batch. */
int32_t sp_spec_config_batch(const sp_spec_params *p);

/* Context slots needed beyond prompt + new tokens: a tree evaluates its
 * whole budget before rolling back (its node count); a chain needs none
 * (its draft is trimmed to the token budget). */
int32_t sp_spec_config_extra_ctx(const sp_spec_params *p);

/* The drafted-token budget per iteration: gamma, or the tree's drafted
 * nodes; 0 for plain decoding. */
int32_t sp_spec_config_budget(const sp_spec_params *p);

/* Parse a weight type name for the low-bit self-draft: any ggml type name,
 * case-insensitive, of a type the engine computes with. SP_ERR_ARG (with
 * the accepted names) otherwise. */
sp_status sp_spec_lowbit_parse(const char *name, sp_ggml_type *out, sp_error *err);

#endif
