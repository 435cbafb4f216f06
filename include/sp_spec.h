/* sp_spec: speculative generation (ALGORITHMS.md section 1).
 *
 * Each iteration: draft (a chain of gamma tokens, or a tree), one batched
 * target forward over every drafted token (trees under a tree mask), verify,
 * commit the accepted tokens plus one more, and roll both KV caches back to
 * the accepted path. Sampler settings apply identically to draft and target,
 * so the output is distributed exactly as plain sampling from the target
 * with those settings (lossless verifiers), and at temperature 0 equals plain
 * greedy decoding token for token. Every statistic is in sp_spec_stats. */
#ifndef SP_SPEC_H
#define SP_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_draft.h"
#include "sp_generate.h"
#include "sp_verify.h"

#define SP_SPEC_MAX_GAMMA 32

/* A speculation configuration: a plain value (no pointers to settings, so
 * it can be copied and kept); read and checked by sp_spec_config.h. */
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
    int64_t emitted;          /* tokens emitted by speculative iterations */
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
 * hist[0 .. first + j). The online learner (sp_online.h) takes these. Tree
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
/* The draft model in use (NULL for drafters without one). */
const sp_model *sp_spec_draft_model(const sp_spec *s);
/* The suffix drafter's statistics (sp_suffix.h; also when arbitrated):
 * false, and *out untouched, when s drafts without one. */
bool sp_spec_suffix_stats(const sp_spec *s, sp_suffix_stats *out);

#endif
