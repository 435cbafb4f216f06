/* serve_slots.c: where `specula serve` runs a request: its slot (a context
 * and the slot's speculation objects) taken from the queue, the prompt
 * checked against the context, the generation on the slot, and the
 * continuous batcher that evaluates the target's forwards of all running
 * requests in one shared pass. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"
#include "sp_clock.h"

/* Continuous batching: every forward pass a request's target needs (a
 * plain request's prompt in chunks, then one token per step; a speculative
 * request's prompt chunks, its verification passes over drafted chains or
 * trees under their masks, and its plain steps) waits for the next shared
 * pass, which evaluates all waiting ones together with sp_forward_multi
 * (run by one of the waiting requests' threads, see batch_forward):
 * one pass over the weights for all of them, each sequence in its own
 * slot's KV cache under its own positions and mask. Requests join and
 * leave between steps. Each sequence's logits equal those of sp_forward
 * over its context alone, bit for bit, the plain sampling loop below is
 * sp_generate's and the speculative one is sp_spec_generate's (its target
 * forwards hooked here, sp_spec_set_forward), so every request's tokens
 * are exactly `specula generate`'s for the same request, whatever else
 * runs. Draft models' forwards stay on their slots (small, and of other
 * weights).
 *
 * Cost attribution for the adaptive draft length: a pass of R rows for N
 * sequences is modelled as T(R) = a + b R (a: reading the weights and the
 * fixed overheads; b: the arithmetic per row), b fitted over recent passes
 * by least squares (exponentially weighted). A sequence of n rows is
 * charged (T - b R) / N + b n of the measured pass time T: an equal share
 * of the fixed part plus its own rows' marginal cost; the charges add up
 * to T. Alone in a pass (N = 1) a sequence pays all of T, as unbatched; in
 * a full pass extra draft tokens cost only b each, so the controller
 * drafts longer exactly when the pass is shared. Before the fit has two
 * distinct batch sizes, b = T / R (a proportional split, the cautious
 * choice). */
#define PREFILL_CHUNK SP_CTX_DEFAULT_BATCH
#define FIT_DECAY 0.99 /* weight of the past in the pass-time fit, per pass */

/* Updates the pass-time fit with a pass of R rows that took T seconds and
 * returns the per-row cost b to charge this pass with (see above). Under B->mu. */
static double fit_pass(serve_batcher *B, int32_t R, double T) {
    B->fw = FIT_DECAY * B->fw + 1;
    B->fx = FIT_DECAY * B->fx + R;
    B->fy = FIT_DECAY * B->fy + T;
    B->fxx = FIT_DECAY * B->fxx + (double)R * R;
    B->fxy = FIT_DECAY * B->fxy + R * T;
    const double mx = B->fx / B->fw, var = B->fxx / B->fw - mx * mx;
    double b = T / R;
    if (var > 0.25) { /* batch sizes spread by at least about one row */
        B->fit_b = (B->fxy / B->fw - mx * (B->fy / B->fw)) / var;
        B->fit_a = B->fy / B->fw - B->fit_b * mx;
        b = B->fit_b < 0 ? 0 : B->fit_b < T / R ? B->fit_b : T / R;
    }
    return b;
}

/* Rows of logits a batch returns. */
static int32_t out_rows(const sp_batch *b) { return b->logits_all ? b->n : 1; }

/* Runs one pass over the waiting jobs (called with B->mu held, by the
 * combiner; unlocks it during the forward): takes jobs in arrival order
 * while their tokens fit one pass, evaluates them with sp_forward_multi,
 * hands each its logits and cost, marks them done and wakes the waiters. */
static void run_pass(serve_batcher *B) {
    sp_ctx **ctxs = B->ctxs;
    sp_batch *batches = B->batches;
    serve_bjob **jobs = B->jobs;
    const int32_t V = B->n_vocab;
    int32_t k = 0, rows = 0;
    serve_bjob **pp = &B->head, *prev = NULL;
    while (*pp && k < SP_FORWARD_MAX_SEQS) {
        serve_bjob *j = *pp;
        if (k > 0 && rows + j->b.n > B->max_rows) {
            prev = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (B->tail == j) B->tail = prev;
        B->n_pending--;
        jobs[k] = j;
        ctxs[k] = j->ctx;
        batches[k] = j->b;
        rows += j->b.n;
        k++;
    }
    B->running = true;
    pthread_mutex_unlock(&B->mu);
    sp_error err = {0};
    const double t0 = sp_now();
    sp_status st = sp_forward_multi(ctxs, batches, k, B->logits, &err);
    const double T = sp_now() - t0;
    const bool alone = st && st != SP_ERR_NUMERIC && k > 1;
    for (int32_t i = 0, off = 0; i < k; off += out_rows(&batches[i]), i++) {
        if (alone) { /* one sequence's bad batch failed the pass before any
                      * cache changed: run each alone, so only it fails */
            jobs[i]->st = sp_forward(ctxs[i], &batches[i], jobs[i]->logits, &jobs[i]->err);
            continue;
        }
        jobs[i]->st = st;
        if (st) jobs[i]->err = err;
        else memcpy(jobs[i]->logits, B->logits + (size_t)off * V,
                    (size_t)out_rows(&batches[i]) * (size_t)V * sizeof(float));
    }
    pthread_mutex_lock(&B->mu);
    B->last_pass = T;
    const double b = st ? 0 : fit_pass(B, rows, T);
    B->steps++;
    B->rows += (uint64_t)k;
    B->tokens += (uint64_t)rows;
    for (int32_t i = 0; i < k; i++) {
        jobs[i]->cost = alone ? -1 : (T - b * rows) / k + b * batches[i].n;
        if (jobs[i]->spec) B->spec_seqs++, B->spec_tokens += (uint64_t)batches[i].n, B->spec_shared += k > 1;
        jobs[i]->done = true;
    }
    B->running = false;
    pthread_cond_broadcast(&B->cv);
}

/* One forward of batch b on ctx in the shared pass, as sp_forward (logits
 * of the rows b asks for); *cost (may be NULL): the seconds charged to it
 * (negative: none, the caller's wall time stands). Flat combining: there
 * is no batcher thread; a caller whose job is waiting and finds no pass
 * running runs the next pass itself, for every waiting job, once every
 * active request has handed in its forward, or once it has waited half
 * as long as the last pass took (20 us to 1 ms): a straggler (a slow
 * client reading its stream, a request still drafting) must not stall the
 * others for long. The last request to hand in runs the pass at once, so
 * a full batch costs no thread hand-off. */
static sp_status batch_forward(serve_batcher *B, sp_ctx *ctx, const sp_batch *b, bool spec, float *logits, double *cost,
                               sp_error *err) {
    serve_bjob j = {.ctx = ctx, .b = *b, .logits = logits, .spec = spec};
    pthread_mutex_lock(&B->mu);
    if (B->tail) B->tail->next = &j;
    else B->head = &j;
    B->tail = &j;
    B->n_pending++;
    /* half the last pass, clamped to [20 us, 1 ms] before the conversion */
    const double half = B->last_pass * 0.5e9;
    const long wait_ns = !(half >= 20000) ? 20000 : half > 1000000 ? 1000000 : (long)half;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += wait_ns;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    bool waited = false;
    pthread_cond_broadcast(&B->cv); /* a waiting combiner may now have everyone */
    while (!j.done) {
        if (!B->running && (waited || B->n_pending >= B->n_active)) run_pass(B);
        else if (B->running) pthread_cond_wait(&B->cv, &B->mu);
        else waited = pthread_cond_timedwait(&B->cv, &B->mu, &dl) != 0;
    }
    pthread_mutex_unlock(&B->mu);
    if (j.st && err) *err = j.err;
    if (cost) *cost = j.cost;
    return j.st;
}

/* sp_spec's target-forward hook (sp_spec_set_forward): the shared pass. */
static sp_status spec_forward(void *ud, sp_ctx *c, const sp_batch *b, float *logits, double *cost, sp_error *err) {
    server *S = ud;
    return batch_forward(&S->bat, c, b, true, logits, S->spec_cost_wall ? NULL : cost, err);
}

static void batch_active(serve_batcher *B, int delta) {
    pthread_mutex_lock(&B->mu);
    B->n_active += delta;
    pthread_cond_broadcast(&B->cv); /* fewer to wait for: a waiting job may go now */
    pthread_mutex_unlock(&B->mu);
}

/* sp_generate's loop (prefill, then sample, emit, stop at EOG or the
 * budget, evaluate the token) with every forward in the shared pass. */
static sp_status generate_batched(serve_run *g, sp_ctx *ctx, const sp_gen_params *p, sp_error *err) {
    server *S = g->srv;
    serve_batcher *B = &S->bat;
    const int32_t V = sp_model_cfg(S->m)->n_vocab;
    g->gst = (sp_gen_stats){.n_prompt = g->n_prompt};
    sp_sampler *smp;
    sp_status st = sp_sampler_init(&p->sampling, V, &smp, err);
    if (st) return st;
    float *logits = malloc((size_t)V * sizeof(float));
    if (!logits) {
        sp_sampler_free(smp);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    sp_rng rng;
    sp_rng_seed(&rng, p->seed);
    const double t0 = sp_now();
    for (int32_t i = 0; !st && i < g->n_prompt; i += PREFILL_CHUNK) {
        int32_t m = g->n_prompt - i < PREFILL_CHUNK ? g->n_prompt - i : PREFILL_CHUNK;
        const sp_batch b = {.tokens = g->prompt + i, .n = m};
        st = batch_forward(B, ctx, &b, false, logits, NULL, err);
        g->gst.target_forwards++;
    }
    const double t1 = sp_now();
    g->gst.t_prefill = t1 - t0;
    batch_active(B, +1);
    int32_t n = 0;
    while (!st && n < p->n_predict) {
        int32_t id = sp_sampler_sample(smp, logits, &rng, NULL);
        g->out[n++] = id;
        bool go = serve_on_tokens(g, &id, 1);
        if (p->stop_at_eog && sp_tokenizer_is_eog(S->tok, id)) {
            g->gst.hit_eog = true;
            break;
        }
        if (!go || n == p->n_predict) break;
        const sp_batch b = {.tokens = &id, .n = 1};
        st = batch_forward(B, ctx, &b, false, logits, NULL, err);
        g->gst.target_forwards++;
    }
    batch_active(B, -1);
    g->gst.t_generate = sp_now() - t1;
    g->gst.n_generated = n;
    free(logits);
    sp_sampler_free(smp);
    return st;
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
    const bool batched = S->batching && g->r.spec.draft.kind == SP_DRAFT_NONE;
    sp_spec *spec = NULL;
    if (!batched) {
        if (c < 0) {
            c = lru;
            for (int d = 0; d < S->n_dm; d++)
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
        if (!st) st = sp_spec_reset(spec, &se);
    }
    if (!st) st = sp_ctx_truncate(sl->ctx, 0, &se);
    if (!st && batched) {
        sp_gen_params gp = sp_gen_default_params();
        gp.n_predict = g->r.max_tokens;
        gp.sampling = g->r.smp;
        gp.seed = g->r.seed;
        g->prev = g->prompt[g->n_prompt - 1];
        g->sst = (sp_spec_stats){.drafter = "none", .verifier = "none"};
        st = generate_batched(g, sl->ctx, &gp, &se);
    } else if (!st) {
        sp_gen_params gp = sp_gen_default_params();
        gp.n_predict = g->r.max_tokens;
        gp.sampling = g->r.smp;
        gp.seed = g->r.seed;
        g->prev = g->prompt[g->n_prompt - 1];
        /* speculative: the target's forwards join the shared pass */
        const bool shared = S->batching && S->spec_batching;
        sp_spec_set_forward(spec, shared ? spec_forward : NULL, S);
        if (shared) batch_active(&S->bat, +1);
        st = sp_spec_generate(spec, g->prompt, g->n_prompt, &gp, g->out, gp.n_predict, &g->gst, &g->sst,
                              serve_on_tokens, g, &se);
        if (shared) batch_active(&S->bat, -1);
    }
    sp_ctx_truncate(sl->ctx, 0, NULL);
    if (st) serve_bad(&g->err, st == SP_ERR_ARG || st == SP_ERR_RANGE ? 400 : 500, NULL, NULL, "%s", se.msg);
    else if (g->failed) serve_bad(&g->err, 500, NULL, NULL, "out of memory keeping the generated text");
    else serve_metrics_record(&S->met, g);
    if (!st && S->router && g->draft >= 0 && g->sst.drafted > 0) { /* the router learns what it reached */
        pthread_mutex_lock(&S->rmu);
        sp_router_update(S->router, g->prompt, g->n_prompt, g->draft, sp_spec_acceptance_rate(&g->sst));
        pthread_mutex_unlock(&S->rmu);
    }
}

serve_slot *serve_slot_acquire(server *S, serve_err *e) {
    pthread_mutex_lock(&S->mu);
    serve_slot *got = NULL;
    for (;;) {
        for (int i = 0; i < S->parallel && !got; i++)
            if (!S->slots[i].busy) got = &S->slots[i];
        if (got || atomic_load(&S->draining)) break;
        if (S->waiting >= S->queue_max) break;
        S->waiting++;
        pthread_cond_wait(&S->cv, &S->mu);
        S->waiting--;
    }
    if (got && atomic_load(&S->draining)) got = NULL;
    if (got) got->busy = true;
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

int serve_batcher_init(serve_batcher *B, int32_t max_rows, int32_t n_vocab) {
    pthread_mutex_init(&B->mu, NULL);
    pthread_cond_init(&B->cv, NULL);
    B->n_vocab = n_vocab;
    B->max_rows = max_rows;
    if (max_rows > 0 && !(B->logits = malloc((size_t)max_rows * (size_t)n_vocab * sizeof(float)))) return -1;
    return 0;
}

void serve_batcher_free(serve_batcher *B) {
    free(B->logits);
    B->logits = NULL;
    pthread_cond_destroy(&B->cv);
    pthread_mutex_destroy(&B->mu);
}
