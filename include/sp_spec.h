/* sp_spec: speculative decoding: the loop (draft, one target pass, verify,
 * commit), its settings by name (text, JSON, CLI flags), the drafters and
 * tree shapes it drafts with, the verifiers it checks with, suffix
 * drafting's shared corpus and the router that picks a draft per request.
 * Sections, in order: tree shapes, verifiers, suffix corpus, drafters, the
 * speculative loop, settings, the router. */
#ifndef SP_SPEC_H
#define SP_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_generate.h"
#include "sp_status.h"
#include "sp_model.h"
#include "sp_sampler.h"

/* ---- draft trees: a tree shape "k1xk2x...xkd" (k1 children of the
 * root, k2 under each of those, ...; ALGORITHMS.md section 4). Building a
 * tree and the attention mask that lets every node see exactly its
 * ancestors is internal (src/speculation/tree.h).
 *
 * Node numbering used everywhere: node 0 is the root (the last committed
 * token, which is already in the cache); nodes are in breadth-first,
 * topological order (parent[i] < i), so node i >= 1 occupies the (i-1)-th
 * slot after the root in a batch or a cache. */
#define SP_TREE_MAX_DEPTH 64   /* levels below the root */
#define SP_TREE_MAX_NODES 1024 /* including the root: budget <= 1023 drafted nodes */
/* Default batch of a drafter's contexts (tree levels, its prompt chunks):
 * draft models are small and many servers' slots each hold one, so they
 * keep a smaller scratch than a target's SP_CTX_DEFAULT_BATCH. */
#define SP_DRAFT_DEFAULT_BATCH 64

/* A dynamic tree "dyn:K:D:N" (EAGLE-2): at each of D levels the K best
 * nodes of the newest level (by score, below) are evaluated and each
 * proposes K children; of everything proposed the N best nodes (root not
 * counted) are kept. A node's score is its parent's times the j-th largest
 * probability of the parent's draft distribution, j the child's rank among
 * its siblings: at temperature 0 (children are the top K tokens; the
 * draft's softmax at temperature 1 scores them) this is the product of the
 * draft probabilities along the path, EAGLE-2's; when sampling it is that
 * product's value before the child is drawn, which keeps the tree exact
 * for the multi-candidate verifiers (the contract is at dyn_tree in
 * src/speculation/draft.c). */
#define SP_TREE_DYN_MAX_K 16

typedef struct sp_tree_shape {
    int32_t depth;                     /* d in [1, SP_TREE_MAX_DEPTH] */
    int32_t branch[SP_TREE_MAX_DEPTH]; /* k1..kd, each >= 1 (dynamic: each dyn_k) */
    int32_t n_nodes;                   /* 1 + k1 + k1k2 + ... (root included; dynamic: N + 1) */
    int32_t dyn_k;                     /* 0: the fixed shape above; else a dynamic tree's K in
                                        * [1, SP_TREE_DYN_MAX_K], depth D, n_nodes N + 1 */
} sp_tree_shape;

/* Parse e.g. "4x2x2" (decimal factors >= 1 separated by 'x', no spaces, no
 * empty factors) or a dynamic tree "dyn:K:D:N" (K in [1, SP_TREE_DYN_MAX_K],
 * D in [1, SP_TREE_MAX_DEPTH], N in [1, SP_TREE_MAX_NODES - 1]). SP_ERR_ARG
 * for malformed text, SP_ERR_RANGE if depth > SP_TREE_MAX_DEPTH or the node
 * count exceeds SP_TREE_MAX_NODES (or K > SP_TREE_DYN_MAX_K). */
sp_status sp_tree_shape_parse(const char *s, sp_tree_shape *out, sp_error *err);

/* The canonical text of a shape ("4x2x2", "dyn:4:6:32") into buf[cap] (always
 * terminated); returns the length it needs, like snprintf. */
int sp_tree_shape_format(const sp_tree_shape *shape, char *buf, size_t cap);

/* ---- verifiers: which one checks the drafts (the verifiers themselves are
 * internal, src/speculation/verify.h; ALGORITHMS.md sections 2-4). */
#define SP_VERIFY_SUM_TOL 1e-3     /* |sum(row) - 1| allowed */
#define SP_VERIFY_MAX_GAMMA 64     /* longest draft chain */
#define SP_VERIFY_MAX_VOCAB (1 << 24)

/* Which single-chain verifier; also used by the simulator for the
 * multi-candidate/tree ones (MC*, NAIVE). */
typedef enum sp_verifier {
    SP_VERIFIER_TOKEN = 0,
    SP_VERIFIER_BLOCK,   /* the default */
    SP_VERIFIER_GREEDY,
    SP_VERIFIER_LENIENT, /* LOSSY */
    SP_VERIFIER_MC,      /* multi-candidate, candidates drawn with replacement */
    SP_VERIFIER_MC_NOREP, /* multi-candidate, candidates drawn without replacement */
    SP_VERIFIER_NAIVE,   /* naive multi-candidate baseline */
    SP_VERIFIER_GBV,     /* multi-path block verification: traversal over i.i.d. children */
    SP_VERIFIER_TRAVERSAL /* traversal verification: children drawn without replacement */
} sp_verifier;

/* Name <-> enum ("token", "block", "greedy", "lenient", "mc", "mc-norep",
 * "naive", "gbv", "traversal"). sp_verifier_parse returns SP_ERR_ARG for an unknown name. */
const char *sp_verifier_name(sp_verifier v);
sp_status sp_verifier_parse(const char *name, sp_verifier *out, sp_error *err);

/* ---- suffix drafting's shared corpus of earlier outputs (the algorithm and
 * the per-request drafter: src/speculation/suffix.h). */
#define SP_SUFFIX_DEPTH 24                /* longest substring a trie holds */
#define SP_SUFFIX_MIN_SCORE 0.3           /* stop a chain below this expected acceptance */
#define SP_SUFFIX_CORPUS_TOKENS 16384     /* default FIFO bound of the global corpus */
#define SP_SUFFIX_REQUEST_TOKENS 8192     /* default bound of a request trie, in tokens */
#define SP_SUFFIX_MAX_TOKENS (1 << 22)    /* largest bound either may be given */

typedef struct sp_suffix_corpus sp_suffix_corpus;
typedef struct sp_suffix sp_suffix;

/* A corpus of earlier outputs holding at most max_tokens tokens in
 * [1, SP_SUFFIX_MAX_TOKENS] (0: SP_SUFFIX_CORPUS_TOKENS). */
sp_status sp_suffix_corpus_init(int32_t max_tokens, sp_suffix_corpus **out, sp_error *err);
void sp_suffix_corpus_free(sp_suffix_corpus *c); /* NULL is fine; no drafter may still use it */
/* Append one output (n tokens, each >= 0) as a document: substrings never
 * span two documents. Outputs longer than the bound keep their last
 * max_tokens tokens. Thread-safe. */
sp_status sp_suffix_corpus_add(sp_suffix_corpus *c, const int32_t *tokens, int32_t n,
                               sp_error *err);

typedef struct sp_suffix_stats {
    int64_t corpus_tokens, corpus_docs; /* held now */
    int64_t corpus_nodes, request_nodes; /* trie nodes in use */
    int64_t bytes;                       /* memory reserved by this drafter and its corpus */
    int64_t proposals, proposed, accepted; /* steps that proposed >= 1 token; tokens */
    int64_t from_corpus;                 /* proposals taken from the corpus */
    int64_t steps;                       /* calls that indexed and looked up */
    double seconds, max_step_seconds;    /* their total and longest wall time */
} sp_suffix_stats;
sp_suffix_stats sp_suffix_corpus_stats(sp_suffix_corpus *c); /* corpus fields only */

/* ---- drafters: the proposal side of speculative decoding: their kinds
 * and settings (the drafter objects themselves are internal, src/speculation/draft.h).
 *
 * Kinds:
 *   model      a separate small model with the same vocabulary
 *   ngram      prompt lookup: the tokens that followed the most recent earlier
 *              occurrence of the last n tokens (n from ngram_max down to
 *              ngram_min) in prompt + output; its q is one-hot
 *   layerskip  the target itself with some layers skipped (shares weights)
 *   lowbit     a copy of the target re-quantised at load (e.g. Q4_0)
 *   eagle3     an EAGLE-3 head (sp_model.h) reading the target's hidden
 *              states (taps of three layers, set on the target context by
 *              the drafter); chains and trees of a fixed shape
 *   mtp        the target's own multi-token-prediction block (qwen35 files
 *              with nextn layers, sp_model_n_mtp): the pair (last token,
 *              the target's normed final state before it) through the
 *              block, then each drafted token with the block's own output
 *              state, as llama.cpp's draft-mtp; its own KV cache; chains
 *              and trees of a fixed shape
 *   suffix     suffix tries over the request's text and a shared corpus of
 *              earlier outputs (suffix.h); proposes the most frequent
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
    SP_DRAFT_NGRAM_MOD,
    SP_DRAFT_MTP
} sp_drafter_kind;

const char *sp_drafter_name(sp_drafter_kind k);

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

#define SP_DRAFT_MAX_LAYERS 1024 /* layer lists and layerskip targets */
#define SP_DRAFT_SKIP_LEN 256    /* longest layer-list text, terminator included */
#define SP_NGRAM_MAX 64          /* longest prompt-lookup n-gram */

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
    const sp_model *lowbit_model; /* SP_DRAFT_LOWBIT: the target already re-quantised to
                                   * lowbit_type (sp_model_requantize; not owned), shared
                                   * by many drafters; NULL: the drafter makes its own copy */
    const sp_eagle3 *eagle3;     /* SP_DRAFT_EAGLE3: the head, loaded for the target (not owned) */
    int32_t max_batch;           /* largest draft batch (tree level); default SP_DRAFT_DEFAULT_BATCH */
    sp_suffix_corpus *suffix_corpus; /* SP_DRAFT_SUFFIX (and with_suffix): the shared corpus
                                      * of earlier outputs (not owned); NULL: the drafter
                                      * keeps its own */
    bool with_suffix; /* model, layerskip, lowbit, ngram: per-step arbitration with a suffix
                       * drafter ("model+suffix"): each chain step drafts from the one with
                       * the larger expected emitted tokens per second (chains only) */
} sp_drafter_params;

/* ---- speculative generation (ALGORITHMS.md section 1).
 *
 * Each iteration: draft (a chain of gamma tokens, or a tree), one batched
 * target forward over every drafted token (trees under a tree mask), verify,
 * commit the accepted tokens plus one more, and roll both KV caches back to
 * the accepted path. Sampler settings apply identically to draft and target,
 * so the output is distributed exactly as plain sampling from the target
 * with those settings (lossless verifiers), and at temperature 0 equals plain
 * greedy decoding token for token. Every statistic is in sp_spec_stats. */
#define SP_SPEC_MAX_GAMMA 32

/* A speculation configuration: a plain value (no pointers to settings, so
 * it can be copied and kept); read and checked by the settings below. */
typedef struct sp_spec_params {
    sp_drafter_params draft;  /* kind NONE = plain decoding */
    sp_verifier verifier;     /* default BLOCK; MC/MC_NOREP/NAIVE/GREEDY for trees */
    double lenience;          /* LENIENT only (lossy) */
    int32_t gamma;            /* draft length (the maximum when adaptive) */
    int32_t draft_n_min;      /* draft at least this many tokens before p_min may stop (default 1) */
    bool adaptive;            /* choose gamma per iteration (section 6) */
    float draft_p_min;        /* stop drafting below this top probability; 0 = off */
    sp_tree_shape tree;       /* depth 0: a chain of gamma tokens */
    bool length_set;          /* gamma or adaptive was given (config layer: without
                               * it a chain drafter defaults to adaptive) */
} sp_spec_params;

/* The longest draft the adaptive controller considers by default. */
#define SP_SPEC_ADAPTIVE_GAMMA 8

/* Plain decoding; block verification, gamma 4, n_min 1 when a drafter is set. */
sp_spec_params sp_spec_default_params(void);

typedef struct sp_spec_stats {
    const char *drafter;
    const char *verifier;
    int64_t iterations;
    int64_t drafted;          /* draft tokens proposed (tree: nodes) */
    int64_t accepted;         /* draft tokens accepted */
    int64_t emitted;          /* tokens emitted by speculative iterations (not the
                               * first, sampled from the prefill's last row) */
    int64_t target_forwards;  /* including prefill */
    int64_t prefill_forwards; /* of which prefill */
    int64_t draft_forwards;
    int64_t accept_hist[SP_SPEC_MAX_GAMMA + 2];  /* iterations with tau accepted */
    int64_t gamma_hist[SP_SPEC_MAX_GAMMA + 2];   /* iterations that drafted gamma */
    double t_draft, t_target, t_verify, t_sample; /* seconds */
} sp_spec_stats;

/* Derived figures (0 when undefined). */
double sp_spec_acceptance_rate(const sp_spec_stats *s);  /* accepted / drafted */
double sp_spec_block_efficiency(const sp_spec_stats *s); /* emitted / target forwards in decode */
double sp_spec_mean_accepted(const sp_spec_stats *s);    /* accepted / iterations */

typedef struct sp_spec sp_spec;

/* Checks the parameters against the target context (sp_spec_config_check;
 * the verifier/temperature combination is checked at generate time) and
 * builds the drafter. */
sp_status sp_spec_init(sp_ctx *target, const sp_spec_params *p, sp_spec **out, sp_error *err);
void sp_spec_free(sp_spec *s);

/* Like sp_generate, with speculation. target must be empty, unless
 * gp->keep_prefix (then it may hold a strict prefix of the prompt). The
 * target's forwards go through gp->forward, else sp_spec_set_forward's. */
sp_status sp_spec_generate(sp_spec *s, const int32_t *prompt, int32_t n_prompt,
                           const sp_gen_params *gp, int32_t *out, int32_t cap,
                           sp_gen_stats *gstats, sp_spec_stats *stats, sp_token_cb cb, void *ud,
                           sp_error *err);

/* Reset the target and draft caches so the object can serve a new prompt
 * from scratch. The adaptive draft-length controller keeps the costs it
 * measured (so the next prompt needs no warm-up) and forgets what the text
 * decided (acceptance); outputs do not depend on it (any draft length is
 * lossless). */
sp_status sp_spec_reset(sp_spec *s, sp_error *err);
/* As sp_spec_reset, but the target keeps its first n_keep cached tokens (a
 * prompt cache: the next generation runs with sp_gen_params.keep_prefix),
 * and so does a draft model's cache when it holds the text from its start
 * (else it restarts empty; an EAGLE-3 head always does). */
sp_status sp_spec_reset_keep(sp_spec *s, int32_t n_keep, sp_error *err);

/* A target forward in place of sp_forward (sp_forward_fn, sp_generate.h),
 * so that a server can evaluate the speculative loop's target passes
 * (prefill chunks, every verification pass over a drafted chain or tree,
 * plain steps; plain decoding's too, when the generation parameters name
 * no forward of their own) together with other sequences' in one shared
 * pass (sp_batch.h). c is the spec object's target context; greedy output
 * equals plain decoding's only when the hook is bit for bit sp_forward.
 * A shared pass should charge, in *cost, this sequence's share of the pass
 * (its part of the fixed cost of reading the weights plus the marginal
 * cost of its rows), so that longer drafts are judged by what they add to
 * the pass. fn NULL restores sp_forward. */
typedef sp_forward_fn sp_spec_forward_fn;
void sp_spec_set_forward(sp_spec *s, sp_spec_forward_fn fn, void *ud);
/* The same for the draft model's forwards (a draft-model drafter; others
 * ignore it): c is then the drafter's context of the draft model, so
 * concurrent requests' drafts can share one pass of the draft model.
 * sp_spec_set_draft_model removes it (a shared pass is of one model). */
void sp_spec_set_draft_forward(sp_spec *s, sp_forward_fn fn, void *ud);

/* Called after each chain iteration (plain steps included) with the
 * target's adjusted distributions of the tokens it committed: row j (of
 * `rows`, V floats each) is the distribution of hist[first + j] given
 * hist[0 .. first + j). The online learner (sp_train.h) takes these. Tree
 * iterations are not reported. fn NULL removes the observer. */
typedef void (*sp_spec_observer)(void *ud, const int32_t *hist, int32_t first, const float *p,
                                 int32_t rows, int32_t V);
void sp_spec_set_observer(sp_spec *s, sp_spec_observer fn, void *ud);

/* Serve a new draft model (a draft-model drafter only; same vocabulary
 * rules as at init). Allowed between generations and from inside the
 * observer (the loop drafts with the new model from its next iteration).
 * The new draft's cache starts empty and is filled from the committed text
 * with the new weights, so nothing computed by the old weights survives.
 * m must stay alive while served; the old model may be freed once this
 * returns SP_OK. On failure the old draft stays. Output stays lossless:
 * verification always sees the q that produced each draft. */
sp_status sp_spec_set_draft_model(sp_spec *s, const sp_model *m, sp_error *err);
/* Inside the observer: the target's tapped hidden states (sp_ctx_set_taps)
 * of the observed rows, tap i: row j (dim floats, rows dim apart) is the
 * state at position first - 1 + j, the one whose distribution is the
 * observer's row j. NULL outside the observer or without taps. */
const float *sp_spec_observed_taps(const sp_spec *s, int32_t i);

/* Draft with the EAGLE-3 head h from now on (an eagle3 drafter; h of the
 * same shape and target layers as the head drafting, e.g. the online
 * learner's snapshot, sp_train.h). Allowed between generations and from
 * inside the observer. Mid-generation the head's cache keeps what the old
 * weights computed for the text so far (the target's states of earlier
 * positions are not kept); new positions use h. h must stay alive while
 * served. Output stays lossless. */
sp_status sp_spec_set_eagle3(sp_spec *s, const sp_eagle3 *h, sp_error *err);
/* The head in use (NULL for other drafters). */
const sp_eagle3 *sp_spec_eagle3(const sp_spec *s);
/* The draft model in use (NULL for drafters without one). */
const sp_model *sp_spec_draft_model(const sp_spec *s);
/* The suffix drafter's statistics (src/speculation/suffix.h; also when arbitrated):
 * false, and *out untouched, when s drafts without one. */
bool sp_spec_suffix_stats(const sp_spec *s, sp_suffix_stats *out);

/* ---- settings: the one place speculation settings are read and checked.
 *
 * A configuration (sp_spec_params, above) is built in layers: start
 * from defaults or a base (a server's defaults), apply settings by name,
 * from `key=value` text, from a JSON object, or one at a time (what the CLI
 * flags map to), then finish the layer, which fills the defaults that
 * depend on other settings and refuses combinations that make no sense.
 * Every message names the setting as the user wrote it ("gamma", "tree",
 * "verifier", ...), never a command-line flag.
 *
 * Settings (aliases in brackets):
 *   drafter [draft]     a drafter kind's name (sp_drafter_name, above), or
 *                       model+suffix (ngram, layerskip, lowbit +suffix): that drafter
 *                       and the suffix drafter arbitrated per step (drafters, above)
 *   verifier [verify]   a verifier's name (sp_verifier_name, above; gbv: K paths as
 *                       tree Kx1x..x1, drawn i.i.d.)
 *   gamma               draft length, 1..SP_SPEC_MAX_GAMMA (the maximum when adaptive)
 *   n_max               llama.cpp's name for gamma; n_max 0 turns speculation off
 *   n_min               draft at least this many tokens whatever p_min says,
 *                       0..gamma (default 1). llama.cpp instead discards drafts
 *                       shorter than n_min; dropping a draft after seeing it
 *                       would bias sampled verification, so Specula does not.
 *   p_min               stop drafting when the draft's top probability falls
 *                       below it, [0, 1] (0 = never; model-based drafters)
 *   tree                draft tree shape "k1xk2x..." instead of a chain
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

/* Checks against the target context: sp_spec_config_check_params, the
 * drafter's needs (draft model vocabulary equal to the target's, layer list
 * within the target's layers, low-bit type), the target batch (the draft
 * budget plus 2 rows <= the context's max batch, SP_ERR_RANGE; the prefill
 * floor of sp_spec_config_batch is not required) and room
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

/* ---- the router: chooses one of several drafts for each request from its
 * prompt (online speculative decoding with per-domain drafts, OSD section
 * 4.2). A light contextual bandit: the prompt's tokens and token pairs are
 * hashed into a sparse binary feature vector x (L2-normalised); each draft d
 * has a linear predictor a_d(x) = b_d + w_d . x of the acceptance rate it
 * would reach on the request. The router picks the draft with the highest
 * prediction, or with probability `explore` a uniformly random one, and
 * after the request learns from the acceptance the chosen draft achieved
 * (normalised least-mean-squares on that draft's predictor only). Biases
 * start at `prior` (optimistic by default, so every draft is tried early).
 * Deterministic given the seed and the sequence of calls. Routing never
 * changes the output distribution: every draft is verified by the target. */
typedef struct sp_router_params {
    int32_t n_drafts;  /* 1..64 */
    int32_t n_buckets; /* hashed features, power of two 16..1<<20 (default 4096) */
    double explore;    /* probability of a random choice, [0, 1] (default 0.1) */
    double lr;         /* NLMS step in (0, 2) (default 0.5) */
    double prior;      /* initial predicted acceptance (default 1.0) */
    uint64_t seed;
} sp_router_params;

sp_router_params sp_router_default_params(int32_t n_drafts);

typedef struct sp_router sp_router;

sp_status sp_router_init(const sp_router_params *p, sp_router **out, sp_error *err);
void sp_router_free(sp_router *r);

/* Predicted acceptance of each draft for this prompt (pred[n_drafts]). */
void sp_router_predict(const sp_router *r, const int32_t *prompt, int32_t n, double *pred);

/* The draft for this prompt; *explored (may be NULL) tells whether it was
 * a random choice. */
int32_t sp_router_choose(sp_router *r, const int32_t *prompt, int32_t n, bool *explored);

/* Learns that `draft` reached acceptance rate `acceptance` (0..1) on this
 * prompt. Out-of-range drafts and non-finite rates are ignored. */
void sp_router_update(sp_router *r, const int32_t *prompt, int32_t n, int32_t draft,
                      double acceptance);

#endif
