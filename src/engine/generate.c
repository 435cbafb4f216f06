/* generate: plain (non-speculative) generation loop and prompt prefill,
 * over sp_forward or a forward hook (a shared pass, sp_batch.h). */
#include "sp_generate.h"

#include <stdlib.h>

#include "clock.h"
#include "rng.h"
#include "sampler_internal.h"

sp_gen_params sp_gen_default_params(void) {
    sp_gen_params p = {.n_predict = 128, .sampling = sp_sampler_default_params(), .seed = 42,
                       .stop_at_eog = true};
    return p;
}

/* One forward through fn, or sp_forward. */
static sp_status forward(sp_forward_fn fn, void *ud, sp_ctx *ctx, const sp_batch *b, float *logits,
                         sp_error *err) {
    double cost = -1;
    return fn ? fn(ud, ctx, b, logits, &cost, err) : sp_forward(ctx, b, logits, err);
}

sp_status sp_prefill(sp_ctx *ctx, const int32_t *tokens, int32_t n, float *last_logits,
                     int64_t *forwards, sp_forward_fn fn, void *ud, sp_error *err) {
    const int32_t B = sp_ctx_max_batch(ctx);
    for (int32_t i = 0; i < n; i += B) {
        int32_t m = n - i < B ? n - i : B;
        sp_batch b = {.tokens = tokens + i, .n = m, .logits_all = false};
        sp_status st = forward(fn, ud, ctx, &b, last_logits, err);
        if (st) return st;
        if (forwards) (*forwards)++;
    }
    return SP_OK;
}

sp_status sp_generate(sp_ctx *ctx, const int32_t *prompt, int32_t n_prompt,
                      const sp_gen_params *p, int32_t *out, int32_t cap, sp_gen_stats *stats,
                      sp_token_cb cb, void *ud, sp_error *err) {
    const sp_model *m = sp_ctx_model(ctx);
    const int32_t V = sp_model_cfg(m)->n_vocab;
    const sp_tokenizer *tok = sp_model_tokenizer(m);
    sp_gen_stats st_local = {0};
    if (!stats) stats = &st_local;
    *stats = (sp_gen_stats){.n_prompt = n_prompt};
    if (n_prompt < 1) return sp_fail(err, SP_ERR_ARG, "empty prompt (need at least one token)");
    if (p->n_predict < 1 || p->n_predict > cap)
        return sp_fail(err, SP_ERR_ARG, "token budget %d must be in [1, %d]", p->n_predict, cap);
    const int32_t cached = sp_ctx_n_past(ctx);
    if (cached != 0 && !p->keep_prefix) return sp_fail(err, SP_ERR_STATE, "context is not empty");
    if (cached >= n_prompt)
        return sp_fail(err, SP_ERR_STATE, "the context holds %d tokens, not a strict prefix of the %d-token prompt",
                       cached, n_prompt);
    stats->n_cached = cached;
    if ((int64_t)n_prompt + p->n_predict > sp_ctx_n_ctx(ctx))
        return sp_fail(err, SP_ERR_RANGE,
                       "prompt (%d tokens) plus %d new tokens exceed the context size %d",
                       n_prompt, p->n_predict, sp_ctx_n_ctx(ctx));
    sp_sampler *smp;
    sp_status st = sp_sampler_init(&p->sampling, V, &smp, err);
    if (st) return st;
    if ((st = sp_sampler_set_n_valid(smp, sp_model_n_valid_vocab(m), err))) {
        sp_sampler_free(smp);
        return st;
    }
    float *logits = malloc((size_t)V * sizeof(float));
    if (!logits) {
        sp_sampler_free(smp);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    sp_rng rng;
    sp_rng_seed(&rng, p->seed);
    double t0 = sp_now();
    st = sp_prefill(ctx, prompt + cached, n_prompt - cached, logits, &stats->target_forwards, p->forward,
                    p->forward_ud, err);
    double t1 = sp_now();
    stats->t_prefill = t1 - t0;
    if (!st && p->keep_prefix) stats->n_pinned = sp_ctx_pin(ctx);
    int32_t n = 0;
    while (!st && n < p->n_predict) {
        int32_t id = sp_sampler_sample(smp, logits, &rng, NULL);
        out[n++] = id;
        bool go = cb ? cb(ud, &id, 1) : true;
        if (p->stop_at_eog && tok && sp_tokenizer_is_eog(tok, id)) {
            stats->hit_eog = true;
            break;
        }
        if (!go || n == p->n_predict) break;
        sp_batch b = {.tokens = &id, .n = 1};
        st = forward(p->forward, p->forward_ud, ctx, &b, logits, err);
        stats->target_forwards++;
    }
    stats->t_generate = sp_now() - t1;
    stats->n_generated = n;
    free(logits);
    sp_sampler_free(smp);
    return st;
}
