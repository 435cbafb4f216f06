/* serve_slots.c: where `specula serve` runs a request: its slot (a context,
 * the slot's speculation objects and its prompt cache) taken from the
 * queue, the prompt checked against the context, and the generation on the
 * slot, one loop (sp_spec_generate, plain decoding included) whose forwards
 * go to the shared passes of the library's batcher (sp_batch.h).
 *
 * Continuous batching: every forward a request's target needs (prompt
 * chunks, then plain steps or a speculative request's verification passes
 * over drafted chains or trees under their masks) joins the next shared
 * pass of the target, and every forward of a request's draft model joins
 * the next shared pass of that draft model. Requests join and leave between
 * steps. Each sequence's logits equal sp_forward's over its context alone,
 * bit for bit, so a request's tokens are exactly `specula generate`'s for
 * the same request, whatever else runs.
 *
 * Prompt cache: after a request a slot keeps its context (the KV cache and,
 * on hybrid models, the recurrent state) and the tokens it holds. A new
 * request takes the free slot whose tokens share the longest prefix with
 * its prompt and evaluates only the rest (at least its last token); a
 * draft model's cache likewise (sp_spec_reset_keep). The bytes kept over
 * all slots are bounded by --cache-budget-mb, least recently used slots'
 * caches going first. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"
#include "sp_batch.h"
#include "clock.h"

/* sp_spec's target-forward hooks (ud: the server): the shared pass, as a
 * plain request's or a speculative one's (statistics, and the cost its
 * adaptive draft length is charged: its share, or with --spec-cost wall
 * the wall time). */
static sp_status plain_forward(void *ud, sp_ctx *c, const sp_batch *b, float *logits, double *cost, sp_error *err) {
    server *S = ud;
    return sp_batch_submit(S->bat, c, b, 0, logits, cost, err);
}

static sp_status spec_forward(void *ud, sp_ctx *c, const sp_batch *b, float *logits, double *cost, sp_error *err) {
    server *S = ud;
    return sp_batch_submit(S->bat, c, b, 1, logits, S->spec_cost_wall ? NULL : cost, err);
}

/* After a request on g's slot: records the tokens its context holds (the
 * prompt and the generated tokens it evaluated) for the next request, or
 * forgets them (failed: the context is emptied), then evicts the least
 * recently used idle slots' caches while the kept bytes exceed the budget. */
static void cache_keep(server *S, serve_run *g, bool ok) {
    serve_slot *sl = g->sl;
    int32_t n = ok ? sp_ctx_n_past(sl->ctx) : 0;
    if (n > g->n_prompt + g->gst.n_generated) n = g->n_prompt + g->gst.n_generated;
    if (!ok || S->cache_budget == 0) sp_ctx_truncate(sl->ctx, 0, NULL), n = 0;
    const double per_tok = (double)sp_ctx_kv_bytes(sl->ctx) / sp_ctx_n_ctx(sl->ctx);
    pthread_mutex_lock(&S->mu);
    for (int32_t i = 0; i < n; i++) sl->toks[i] = i < g->n_prompt ? g->prompt[i] : g->out[i - g->n_prompt];
    sl->n_toks = n;
    sl->pin = g->gst.n_pinned <= n ? g->gst.n_pinned : 0;
    for (;;) {
        double kept = 0;
        serve_slot *old = NULL;
        for (int i = 0; i < S->parallel; i++) {
            serve_slot *o = &S->slots[i];
            kept += per_tok * o->n_toks;
            if (o != sl && !o->busy && o->n_toks > 0 && (!old || o->last < old->last)) old = o;
        }
        if (kept <= (double)S->cache_budget) break;
        if (!old) old = sl; /* this one alone is over the budget */
        old->n_toks = 0;    /* its context is truncated when next used */
        if (old == sl) break;
    }
    pthread_mutex_unlock(&S->mu);
}

/* Runs the generation on the run's slot (prompt already tokenised). */
void serve_generate(serve_run *g) {
    server *S = g->srv;
    serve_slot *sl = g->sl;
    sp_error se = {0};
    /* the draft model: the router's choice for this prompt when there are several */
    g->draft = -1;
    if (g->r.spec.draft.kind == SP_DRAFT_MODEL && S->n_dm > 0) {
        bool explored = false;
        int d = 0;
        pthread_mutex_lock(&S->rmu);
        if (S->router) d = sp_router_choose(S->router, g->prompt, g->n_prompt, &explored);
        S->routed[d]++;
        S->explored += explored;
        pthread_mutex_unlock(&S->rmu);
        g->r.spec.draft.draft_model = S->dms[d];
        g->draft = d;
    }
    if (g->r.spec.draft.kind == SP_DRAFT_SUFFIX) g->r.spec.draft.suffix_corpus = S->suffix_corpus;
    /* a low-bit draft drafts with the server's one shared copy of its type */
    if (g->r.spec.draft.kind == SP_DRAFT_LOWBIT &&
        serve_lowbit_get(S->lowbit, g->r.spec.draft.lowbit_type, &g->r.spec.draft.lowbit_model, &se)) {
        serve_bad(&g->err, 400, "speculative", NULL, "%s", se.msg);
        return;
    }
    int c = -1, lru = 0;
    for (int i = 0; i < SERVE_SPEC_CACHE && c < 0; i++)
        if (sl->spec[i] && !memcmp(&sl->sp[i], &g->r.spec, sizeof sl->sp[i])) c = i;
    for (int i = 1; i < SERVE_SPEC_CACHE; i++)
        if (!sl->spec[i] || (sl->spec[lru] && sl->used[i] < sl->used[lru])) lru = i;
    sp_status st = SP_OK;
    sp_spec *spec = NULL;
    if (g->r.spec.draft.kind == SP_DRAFT_NONE) { /* plain decoding: the slot's own object */
        if (!sl->plain) {
            sp_spec_params pp = g->r.spec;
            st = sp_spec_init(sl->ctx, &pp, &sl->plain, &se);
        }
        spec = sl->plain;
    } else {
        if (c < 0) {
            c = lru;
            for (int d = 0; d < serve_n_learners(S); d++)
                if (sl->on[d] && sl->attached[d] == sl->spec[c]) { /* the learner lets it go first */
                    sp_online_detach(sl->on[d]);
                    sl->attached[d] = NULL;
                }
            sp_spec_free(sl->spec[c]);
            sl->spec[c] = NULL;
            sl->sp[c] = g->r.spec;
            st = sp_spec_init(sl->ctx, &sl->sp[c], &sl->spec[c], &se);
        }
        sl->used[c] = ++sl->uses;
        spec = sl->spec[c];
        /* --online: requests drafting with the served draft model (chains)
         * teach it and draft with what it has learned so far */
        const int d = g->draft;
        if (!st && d >= 0 && sl->on[d] && spec != sl->attached[d] && sl->sp[c].tree.depth == 0 &&
            sp_spec_draft_model(spec) == S->dms[d]) {
            st = sp_online_attach(sl->on[d], spec, &se);
            if (!st) sl->attached[d] = spec;
        }
        /* and so do requests drafting with the served EAGLE-3 head */
        if (!st && S->head && sl->on[0] && spec != sl->attached[0] && sl->sp[c].tree.depth == 0 &&
            sp_spec_eagle3(spec) == S->head) {
            st = sp_online_attach(sl->on[0], spec, &se);
            if (!st) sl->attached[0] = spec;
        }
    }
    /* the prompt cache: keep the common prefix (an EAGLE-3 head needs the
     * target's hidden states of the whole prompt: it starts cold) */
    int32_t keep = 0;
    if (!st && g->r.cache_prompt && g->r.spec.draft.kind != SP_DRAFT_EAGLE3) {
        while (keep < sl->n_toks && keep < g->n_prompt - 1 && sl->toks[keep] == g->prompt[keep]) keep++;
        if (sp_ctx_n_past(sl->ctx) < keep) keep = 0; /* cannot happen: the tokens describe the context */
    }
    pthread_mutex_lock(&S->mu);
    sl->n_toks = 0; /* stale until the request ends */
    pthread_mutex_unlock(&S->mu);
    if (!st && (st = sp_spec_reset_keep(spec, keep, &se)) && keep > 0) {
        /* a recurrent state that cannot go back there: back to the mark
         * after the last request's prompt (sp_ctx_pin), else cold */
        keep = sl->pin <= keep ? sl->pin : 0;
        if ((st = sp_spec_reset_keep(spec, keep, &se)) && keep > 0) keep = 0, st = sp_spec_reset_keep(spec, 0, &se);
    }
    if (!st) {
        sp_gen_params gp = sp_gen_default_params();
        gp.n_predict = g->r.max_tokens;
        gp.sampling = g->r.smp;
        gp.seed = g->r.seed;
        gp.stop_at_eog = !g->r.ignore_eos;
        gp.keep_prefix = true;
        g->prev = g->prompt[g->n_prompt - 1];
        /* the forwards join the shared passes: the target's, and the draft
         * model's when it is the served one (an --online snapshot is not) */
        const bool plain = g->r.spec.draft.kind == SP_DRAFT_NONE;
        const bool shared = S->batching && (plain || S->spec_batching);
        sp_spec_set_forward(spec, shared ? plain ? plain_forward : spec_forward : NULL, S);
        sp_batcher *db = shared && g->draft >= 0 && sp_spec_draft_model(spec) == S->dms[g->draft]
                             ? S->dbat[g->draft] : NULL;
        sp_spec_set_draft_forward(spec, db ? sp_batch_forward : NULL, db);
        if (shared) sp_batch_join(S->bat, +1);
        if (db) sp_batch_join(db, +1);
        st = sp_spec_generate(spec, g->prompt, g->n_prompt, &gp, g->out, gp.n_predict, &g->gst, &g->sst,
                              serve_on_tokens, g, &se);
        if (db) sp_batch_join(db, -1);
        if (shared) sp_batch_join(S->bat, -1);
        g->n_cached = g->gst.n_cached;
    }
    cache_keep(S, g, st == SP_OK);
    if (st) serve_bad(&g->err, st == SP_ERR_ARG || st == SP_ERR_RANGE ? 400 : 500, NULL, NULL, "%s", se.msg);
    else if (g->failed) serve_bad(&g->err, 500, NULL, NULL, "out of memory keeping the generated text");
    else serve_metrics_record(&S->met, g);
    if (!st && S->router && g->draft >= 0 && g->sst.drafted > 0) { /* the router learns what it reached */
        pthread_mutex_lock(&S->rmu);
        sp_router_update(S->router, g->prompt, g->n_prompt, g->draft, sp_spec_acceptance_rate(&g->sst));
        pthread_mutex_unlock(&S->rmu);
    }
}

serve_slot *serve_slot_acquire(server *S, const int32_t *prompt, int32_t n_prompt, bool cache, serve_err *e) {
    pthread_mutex_lock(&S->mu);
    serve_slot *got = NULL;
    for (;;) {
        /* a cache counts when it shares more than a BOS token and at least
         * a tenth of the prompt (else a short unrelated prompt would take,
         * and spoil, a long conversation's cache) */
        int32_t best = -1;
        for (int i = 0; i < S->parallel; i++) {
            serve_slot *o = &S->slots[i];
            if (o->busy) continue;
            int32_t l = 0;
            while (cache && l < o->n_toks && l < n_prompt && o->toks[l] == prompt[l]) l++;
            if (l <= 1 || 10 * (int64_t)l < n_prompt) l = 0;
            if (l > best || (l == best && o->last < got->last)) best = l, got = o;
        }
        if (got || atomic_load(&S->draining)) break;
        if (S->waiting >= S->queue_max) break;
        S->waiting++;
        pthread_cond_wait(&S->cv, &S->mu);
        S->waiting--;
    }
    if (got && atomic_load(&S->draining)) got = NULL;
    if (got) got->busy = true, got->last = ++S->clock;
    pthread_mutex_unlock(&S->mu);
    if (!got && atomic_load(&S->draining))
        serve_bad(e, 503, NULL, "shutting_down", "the server is shutting down; retry on another replica");
    else if (!got)
        serve_bad(e, 503, NULL, "server_busy", "the server is busy (%d requests running, %d waiting); retry later",
                  S->parallel, S->queue_max);
    return got;
}

void serve_slot_release(server *S, serve_slot *sl) {
    pthread_mutex_lock(&S->mu);
    sl->busy = false;
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
}

int serve_prepare(serve_run *g) {
    const server *S = g->srv;
    sp_error se = {0};
    g->prompt = malloc((size_t)S->n_ctx * sizeof *g->prompt);
    if (!g->prompt) return serve_bad(&g->err, 500, NULL, NULL, "out of memory");
    sp_tok_encode_params ep = {.add_bos = sp_tokenizer_add_bos(S->tok), .parse_special = g->r.ep == SP_SERVE_CHAT};
    sp_status st = sp_tokenizer_encode_ex(S->tok, g->r.text, strlen(g->r.text), &ep, g->prompt, S->n_ctx,
                                          &g->n_prompt, &se);
    if (st == SP_ERR_RANGE)
        return serve_bad(&g->err, 400, g->r.ep == SP_SERVE_CHAT ? "messages" : "prompt", "context_length_exceeded",
                   "the prompt is %d tokens, more than the context size %d", g->n_prompt, S->n_ctx);
    if (st) return serve_bad(&g->err, 400, NULL, NULL, "%s", se.msg);
    if (g->n_prompt == 0) return serve_bad(&g->err, 400, "prompt", NULL, "the prompt is empty and the model adds no BOS token");
    const int32_t extra = sp_spec_config_extra_ctx(&g->r.spec);
    const int32_t room = S->n_ctx - g->n_prompt - extra;
    if (g->r.max_tokens < 0) g->r.max_tokens = g->r.ep == SP_SERVE_CHAT ? room : (room < 16 ? room : 16);
    if (room < 1 || g->r.max_tokens > room)
        return serve_bad(&g->err, 400, "max_tokens", "context_length_exceeded",
                   "the prompt (%d tokens) plus max_tokens %d%s exceed the context size %d", g->n_prompt,
                   g->r.max_tokens < 0 ? 1 : g->r.max_tokens, extra ? " plus the draft tree" : "", S->n_ctx);
    g->out = malloc((size_t)g->r.max_tokens * sizeof *g->out);
    if (!g->out) return serve_bad(&g->err, 500, NULL, NULL, "out of memory");
    return 0;
}
