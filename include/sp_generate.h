/* sp_generate: the generation loop over a context: prompt prefill in
 * batches, then token-by-token sampling until EOS or the token budget, with
 * a callback for streaming. Speculative generation (sp_spec.h) reports
 * through the same stats and callback. */
#ifndef SP_GENERATE_H
#define SP_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_model.h"
#include "sp_sampler.h"
#include "sp_status.h"

/* A forward in place of sp_forward, e.g. a shared pass of many sequences
 * (sp_batch.h). Contract: exactly sp_forward(c, b, logits, err): evaluate
 * the batch under its positions and mask, appending its n tokens to c's
 * cache, and write its logits (n_vocab floats per row: all n rows when
 * b->logits_all, else the last), bit for bit sp_forward's; errors as
 * sp_forward's, leaving the cache unchanged. b and its arrays are valid
 * only during the call. cost: seconds to charge this forward in the
 * adaptive draft-length controller's cost model (ALGORITHMS.md section 6);
 * left negative (as on entry), the call's wall time is charged. */
typedef sp_status (*sp_forward_fn)(void *ud, sp_ctx *c, const sp_batch *b, float *logits, double *cost,
                                   sp_error *err);

typedef struct sp_gen_params {
    int32_t n_predict;          /* most tokens to generate (>= 1) */
    sp_sampler_params sampling;
    uint64_t seed;
    bool stop_at_eog;           /* stop at EOS/EOT (default true) */
    sp_forward_fn forward;      /* the target's forwards; NULL (default): sp_forward */
    void *forward_ud;
    /* A prompt cache: the context may hold a prefix of the prompt, its
     * n_past < n_prompt tokens (the caller vouches they are
     * prompt[0..n_past)), which are kept, and only the rest is evaluated;
     * after the prompt the context is marked (sp_ctx_pin, stats n_pinned)
     * so a later request can return there. false (default): the context
     * must be empty. */
    bool keep_prefix;
} sp_gen_params;

sp_gen_params sp_gen_default_params(void);

typedef struct sp_gen_stats {
    int32_t n_prompt;
    int32_t n_cached;    /* prompt tokens the context already held (keep_prefix) */
    int32_t n_pinned;    /* keep_prefix: the length marked with sp_ctx_pin after the prompt */
    int32_t n_generated;
    double t_prefill;    /* seconds */
    double t_generate;   /* seconds after prefill */
    int64_t target_forwards;
    bool hit_eog;
} sp_gen_stats;

/* Called with newly emitted tokens (in order). Return false to stop. */
typedef bool (*sp_token_cb)(void *ud, const int32_t *tokens, int32_t n);

/* Evaluates prompt[0..n_prompt) into ctx (which must be empty, unless
 * p->keep_prefix) and generates
 * up to p->n_predict tokens into out (cap >= n_predict). The prompt plus
 * budget must fit the context (SP_ERR_RANGE otherwise, checked up front). */
sp_status sp_generate(sp_ctx *ctx, const int32_t *prompt, int32_t n_prompt,
                      const sp_gen_params *p, int32_t *out, int32_t cap, sp_gen_stats *stats,
                      sp_token_cb cb, void *ud, sp_error *err);

/* Prefill helper shared with speculative generation: evaluates tokens in
 * batches of the context's max batch, each through fn (NULL: sp_forward);
 * logits of the last token go to last_logits (n_vocab floats). */
sp_status sp_prefill(sp_ctx *ctx, const int32_t *tokens, int32_t n, float *last_logits,
                     int64_t *forwards, sp_forward_fn fn, void *ud, sp_error *err);

#endif
