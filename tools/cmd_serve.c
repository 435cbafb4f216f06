/* cmd_serve: `specula serve`, an OpenAI-compatible HTTP server on
 * libmicrohttpd (one thread per connection) with jansson for JSON.
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions, GET
 * /v1/models, GET /health, GET /metrics (Prometheus text). A request's
 * "speculative" object goes through the speculation configuration layer
 * (sp_spec_config_json_text over the server's defaults), so it is validated with
 * the CLI's messages. Requests run on --parallel slots, each with its own
 * KV cache and speculation state; beyond them requests wait in a queue of
 * --queue places, then get 503. With --parallel above 1, requests are
 * batched continuously (see "batching" below: one forward pass of the
 * target per step for all of them, speculative requests' verification
 * passes included; their drafts run on their slots), unless a forward of
 * the model is too cheap for that to pay (--batching auto). A streamed
 * response is written by a generation thread into a pipe that the
 * connection's reader drains; a client that
 * disconnects closes the pipe, which cancels its generation. SIGINT and
 * SIGTERM stop the daemon: in-flight generations are cancelled, every
 * connection finishes, everything is freed, exit 0. The request side
 * (routing, body parsing and validation, stop strings, response objects)
 * is tools/serve_request.c, which fuzz/fuzz_serve_request.c drives alone. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "serve_request.h"
#include "sp_chat.h"
#include "sp_clock.h"
#include "specula.h"


/* ---------------------------------------------------------------- state */

/* A slot's speculation objects are kept for reuse (building one can mean
 * re-quantising the whole model for a low-bit self-draft): the last
 * SPEC_CACHE settings used, so plain and speculative requests alternating
 * do not rebuild them. */
#define SPEC_CACHE 2
typedef struct slot {
    sp_ctx *ctx;
    sp_spec *spec[SPEC_CACHE];
    sp_spec_params sp[SPEC_CACHE];
    uint64_t used[SPEC_CACHE]; /* last use (request counter), for eviction */
    uint64_t uses;
    bool busy;
    /* --online: the slot's learner of each draft (per slot: a slot runs one
     * request at a time; per draft: each draft learns from its requests) */
    sp_online *on[SP_CLI_MAX_DRAFTS];
    sp_spec *attached[SP_CLI_MAX_DRAFTS]; /* the spec each learner observes, or NULL */
} slot;

static const double TTFT_B[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double TPOT_B[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
#define NB 11

static struct server {
    sp_model *m, *dm;                    /* dm: the first draft, dms[0] */
    sp_eagle3 *head;                     /* -md was an EAGLE-3 head (--draft eagle3) */
    sp_model *dms[SP_CLI_MAX_DRAFTS];    /* every -md */
    int n_dm;
    sp_router *router;                   /* several drafts: one is chosen per request */
    pthread_mutex_t rmu;                 /* router and routed[] */
    uint64_t routed[SP_CLI_MAX_DRAFTS], explored;
    cli_online_opts online;
    const sp_tokenizer *tok;
    char model_id[256];
    sp_spec_params defaults;
    sp_sampler_params sampling;
    uint64_t seed;
    sp_chat_tmpl tmpl;
    const char *api_key;
    int32_t n_ctx, parallel, queue_max, threads;
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;
    atomic_bool stopping;
    bool batching;          /* plain requests share forward passes (continuous batching) */
    bool spec_batching;     /* ... and speculative requests' target forwards too */
    bool spec_cost_wall;    /* adaptive draft length: charge a shared pass's wall time, not the share */
    sp_pool *pool;          /* batching: the one pool every slot computes on */
    /* metrics (under mmu) */
    pthread_mutex_t mmu;
    uint64_t req[SP_SERVE_EP_N][600];
    uint64_t tok_in, tok_out, drafts, draft_tokens, accepted, acc_pos[SP_SPEC_MAX_GAMMA + 2];
    uint64_t ttft[NB + 1], tpot[NB + 1];
    double ttft_sum, tpot_sum;
    uint64_t ttft_n, tpot_n;
    sp_suffix_corpus *suffix_corpus; /* earlier outputs, shared by every slot's suffix drafter */
} S;

/* ----------------------------------------------------------- generation */

typedef struct run {
    serve_req r;
    slot *sl;
    int32_t *prompt, n_prompt, *out;
    char *text;             /* generated text after stop handling */
    size_t len, cap, sent;  /* sent: bytes streamed so far */
    int32_t prev, n_gen;
    bool stop_hit, failed;
    atomic_bool cancel;
    int wfd, rfd;           /* streaming pipe (-1 when not streaming) */
    pthread_t thread;
    bool thread_started;
    double t0, t_first, t_last;
    sp_gen_stats gst;
    sp_spec_stats sst;
    int draft;               /* the -md index it drafted with, -1 for none */
    char id[40];
    long long created;
    serve_err err;
} run;

static bool write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

static const char *finish_reason(const run *g) {
    return g->stop_hit || g->gst.hit_eog ? "stop" : "length";
}

/* What the response objects report about g. */
static serve_out out_of(const run *g) {
    return (serve_out){.id = g->id, .model = S.model_id, .created = g->created, .text = g->text, .len = g->len,
                          .finish = finish_reason(g), .n_prompt = g->n_prompt, .n_gen = g->n_gen, .sst = &g->sst,
                          .draft = g->draft};
}

/* The server's settings requests are checked against. */
static serve_limits limits(void) {
    return (serve_limits){.n_ctx = S.n_ctx, .sampling = S.sampling, .seed = S.seed, .defaults = S.defaults,
                             .has_draft = S.dm != NULL || S.head != NULL, .tmpl = S.tmpl};
}

/* One SSE chunk with text delta s[0..n) (n may be 0) and finish (NULL while running). */
static bool send_chunk(run *g, const char *s, size_t n, const char *finish, bool usage_only) {
    const serve_out o = out_of(g);
    json_t *c = serve_chunk_json(&g->r, &o, s, n, g->sent == 0, finish, usage_only);
    if (!c) return false;
    char *txt = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    if (!txt) return false;
    bool ok = write_all(g->wfd, "data: ", 6) && write_all(g->wfd, txt, strlen(txt)) && write_all(g->wfd, "\n\n", 2);
    free(txt);
    return ok;
}

/* Streams the text that can no longer be cut by a stop string. */
static bool stream_ready(run *g, bool final) {
    const size_t upto = serve_ready(&g->r, g->text, g->len, final);
    if (upto <= g->sent) return true;
    bool ok = send_chunk(g, g->text + g->sent, upto - g->sent, NULL, false);
    g->sent = upto;
    return ok;
}

static bool on_tokens(void *ud, const int32_t *ids, int32_t n) {
    run *g = ud;
    const double now = sp_now();
    for (int32_t i = 0; i < n; i++) {
        if (g->n_gen == 0) g->t_first = now;
        g->n_gen++;
        char piece[256];
        size_t k = sp_tokenizer_decode_token(S.tok, g->prev, ids[i], piece, sizeof piece);
        g->prev = ids[i];
        if (g->len + k + 1 > g->cap) {
            size_t nc = (g->cap + k + 1) * 2;
            char *t = realloc(g->text, nc);
            if (!t) {
                g->failed = true;
                return false;
            }
            g->text = t, g->cap = nc;
        }
        memcpy(g->text + g->len, piece, k);
        g->len += k;
        g->text[g->len] = 0;
        if (serve_stop_scan(&g->r, g->text, &g->len, k, g->sent)) g->stop_hit = true;
        if (g->stop_hit) break;
    }
    g->t_last = now;
    if (g->wfd >= 0 && !g->stop_hit && !stream_ready(g, false)) return false; /* client gone */
    return !g->stop_hit && !atomic_load(&g->cancel) && !atomic_load(&S.stopping);
}

static void record_metrics(const run *g) {
    pthread_mutex_lock(&S.mmu);
    S.tok_in += (uint64_t)g->n_prompt;
    S.tok_out += (uint64_t)g->n_gen;
    S.drafts += (uint64_t)(g->sst.iterations - g->sst.gamma_hist[0]);
    S.draft_tokens += (uint64_t)g->sst.drafted;
    S.accepted += (uint64_t)g->sst.accepted;
    for (int i = 0; i < SP_SPEC_MAX_GAMMA; i++)
        for (int t = i + 1; t < SP_SPEC_MAX_GAMMA + 2; t++) S.acc_pos[i] += (uint64_t)g->sst.accept_hist[t];
    if (g->n_gen > 0) {
        double ttft = g->t_first - g->t0;
        int b = 0;
        while (b < NB && ttft > TTFT_B[b]) b++;
        S.ttft[b]++, S.ttft_sum += ttft, S.ttft_n++;
    }
    if (g->n_gen > 1) {
        double tpot = (g->t_last - g->t_first) / (g->n_gen - 1);
        int b = 0;
        while (b < NB && tpot > TPOT_B[b]) b++;
        S.tpot[b]++, S.tpot_sum += tpot, S.tpot_n++;
    }
    pthread_mutex_unlock(&S.mmu);
}

/* ------------------------------------------------------------- batching */

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
typedef struct bjob {
    sp_ctx *ctx;
    sp_batch b;             /* its arrays belong to the waiting caller */
    float *logits;          /* out: (b.logits_all ? b.n : 1) rows of n_vocab floats */
    double cost;            /* out: seconds of the pass charged to it */
    bool spec;              /* a speculative request's (for the metrics) */
    sp_status st;
    sp_error err;
    bool done;
    struct bjob *next;
} bjob;

#define PREFILL_CHUNK SP_CTX_DEFAULT_BATCH
#define FIT_DECAY 0.99 /* weight of the past in the pass-time fit, per pass */

static struct batcher {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work arrived, a request left, a pass finished */
    bjob *head, *tail;      /* jobs waiting for a pass */
    int32_t n_pending, n_active; /* active: requests decoding now (plain and speculative) */
    bool running;           /* a pass is running */
    double last_pass;       /* seconds the last pass took */
    int32_t max_rows;       /* tokens per pass (the contexts' max batch) */
    float *logits;          /* [max_rows][n_vocab] */
    /* metrics: passes run, the sequences and tokens they carried, of which
     * speculative requests' */
    uint64_t steps, rows, tokens, spec_seqs, spec_tokens, spec_shared;
    double fw, fx, fy, fxx, fxy; /* decayed sums of 1, R, T, R^2, R T over passes */
    double fit_a, fit_b;    /* the current fit T = a + b R (seconds; 0 before one exists) */
} B;

/* Updates the pass-time fit with a pass of R rows that took T seconds and
 * returns the per-row cost b to charge this pass with (see above). Under B.mu. */
static double fit_pass(int32_t R, double T) {
    B.fw = FIT_DECAY * B.fw + 1;
    B.fx = FIT_DECAY * B.fx + R;
    B.fy = FIT_DECAY * B.fy + T;
    B.fxx = FIT_DECAY * B.fxx + (double)R * R;
    B.fxy = FIT_DECAY * B.fxy + R * T;
    const double mx = B.fx / B.fw, var = B.fxx / B.fw - mx * mx;
    double b = T / R;
    if (var > 0.25) { /* batch sizes spread by at least about one row */
        B.fit_b = (B.fxy / B.fw - mx * (B.fy / B.fw)) / var;
        B.fit_a = B.fy / B.fw - B.fit_b * mx;
        b = B.fit_b < 0 ? 0 : B.fit_b < T / R ? B.fit_b : T / R;
    }
    return b;
}

/* Rows of logits a batch returns. */
static int32_t out_rows(const sp_batch *b) { return b->logits_all ? b->n : 1; }

/* Runs one pass over the waiting jobs (called with B.mu held, by the
 * combiner; unlocks it during the forward): takes jobs in arrival order
 * while their tokens fit one pass, evaluates them with sp_forward_multi,
 * hands each its logits and cost, marks them done and wakes the waiters. */
static void run_pass(void) {
    static sp_ctx *ctxs[SP_FORWARD_MAX_SEQS];
    static sp_batch batches[SP_FORWARD_MAX_SEQS];
    static bjob *jobs[SP_FORWARD_MAX_SEQS];
    const int32_t V = sp_model_cfg(S.m)->n_vocab;
    int32_t k = 0, rows = 0;
    bjob **pp = &B.head, *prev = NULL;
    while (*pp && k < SP_FORWARD_MAX_SEQS) {
        bjob *j = *pp;
        if (k > 0 && rows + j->b.n > B.max_rows) {
            prev = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (B.tail == j) B.tail = prev;
        B.n_pending--;
        jobs[k] = j;
        ctxs[k] = j->ctx;
        batches[k] = j->b;
        rows += j->b.n;
        k++;
    }
    B.running = true;
    pthread_mutex_unlock(&B.mu);
    sp_error err = {0};
    const double t0 = sp_now();
    sp_status st = sp_forward_multi(ctxs, batches, k, B.logits, &err);
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
        else memcpy(jobs[i]->logits, B.logits + (size_t)off * V,
                    (size_t)out_rows(&batches[i]) * (size_t)V * sizeof(float));
    }
    pthread_mutex_lock(&B.mu);
    B.last_pass = T;
    const double b = st ? 0 : fit_pass(rows, T);
    B.steps++;
    B.rows += (uint64_t)k;
    B.tokens += (uint64_t)rows;
    for (int32_t i = 0; i < k; i++) {
        jobs[i]->cost = alone ? -1 : (T - b * rows) / k + b * batches[i].n;
        if (jobs[i]->spec) B.spec_seqs++, B.spec_tokens += (uint64_t)batches[i].n, B.spec_shared += k > 1;
        jobs[i]->done = true;
    }
    B.running = false;
    pthread_cond_broadcast(&B.cv);
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
static sp_status batch_forward(sp_ctx *ctx, const sp_batch *b, bool spec, float *logits, double *cost,
                               sp_error *err) {
    bjob j = {.ctx = ctx, .b = *b, .logits = logits, .spec = spec};
    pthread_mutex_lock(&B.mu);
    if (B.tail) B.tail->next = &j;
    else B.head = &j;
    B.tail = &j;
    B.n_pending++;
    /* half the last pass, clamped to [20 us, 1 ms] before the conversion */
    const double half = B.last_pass * 0.5e9;
    const long wait_ns = !(half >= 20000) ? 20000 : half > 1000000 ? 1000000 : (long)half;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += wait_ns;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    bool waited = false;
    pthread_cond_broadcast(&B.cv); /* a waiting combiner may now have everyone */
    while (!j.done) {
        if (!B.running && (waited || B.n_pending >= B.n_active)) run_pass();
        else if (B.running) pthread_cond_wait(&B.cv, &B.mu);
        else waited = pthread_cond_timedwait(&B.cv, &B.mu, &dl) != 0;
    }
    pthread_mutex_unlock(&B.mu);
    if (j.st && err) *err = j.err;
    if (cost) *cost = j.cost;
    return j.st;
}

/* sp_spec's target-forward hook (sp_spec_set_forward): the shared pass. */
static sp_status spec_forward(void *ud, sp_ctx *c, const sp_batch *b, float *logits, double *cost, sp_error *err) {
    (void)ud;
    return batch_forward(c, b, true, logits, S.spec_cost_wall ? NULL : cost, err);
}

static void batch_active(int delta) {
    pthread_mutex_lock(&B.mu);
    B.n_active += delta;
    pthread_cond_broadcast(&B.cv); /* fewer to wait for: a waiting job may go now */
    pthread_mutex_unlock(&B.mu);
}

/* sp_generate's loop (prefill, then sample, emit, stop at EOG or the
 * budget, evaluate the token) with every forward in the shared pass. */
static sp_status generate_batched(run *g, sp_ctx *ctx, const sp_gen_params *p, sp_error *err) {
    const int32_t V = sp_model_cfg(S.m)->n_vocab;
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
        st = batch_forward(ctx, &b, false, logits, NULL, err);
        g->gst.target_forwards++;
    }
    const double t1 = sp_now();
    g->gst.t_prefill = t1 - t0;
    batch_active(+1);
    int32_t n = 0;
    while (!st && n < p->n_predict) {
        int32_t id = sp_sampler_sample(smp, logits, &rng, NULL);
        g->out[n++] = id;
        bool go = on_tokens(g, &id, 1);
        if (p->stop_at_eog && sp_tokenizer_is_eog(S.tok, id)) {
            g->gst.hit_eog = true;
            break;
        }
        if (!go || n == p->n_predict) break;
        const sp_batch b = {.tokens = &id, .n = 1};
        st = batch_forward(ctx, &b, false, logits, NULL, err);
        g->gst.target_forwards++;
    }
    batch_active(-1);
    g->gst.t_generate = sp_now() - t1;
    g->gst.n_generated = n;
    free(logits);
    sp_sampler_free(smp);
    return st;
}

/* Runs the generation on the run's slot (prompt already tokenised). */
static void generate(run *g) {
    slot *sl = g->sl;
    sp_error se = {0};
    /* the draft model: the router's choice for this prompt when there are several */
    g->draft = -1;
    if (g->r.spec.draft.kind == SP_DRAFT_MODEL && S.n_dm > 0) {
        bool explored = false;
        int d = 0;
        pthread_mutex_lock(&S.rmu);
        if (S.router) d = sp_router_choose(S.router, g->prompt, g->n_prompt, &explored);
        S.routed[d]++;
        S.explored += explored;
        pthread_mutex_unlock(&S.rmu);
        g->r.spec.draft.draft_model = S.dms[d];
        g->draft = d;
    }
    if (g->r.spec.draft.kind == SP_DRAFT_SUFFIX) g->r.spec.draft.suffix_corpus = S.suffix_corpus;
    int c = -1, lru = 0;
    for (int i = 0; i < SPEC_CACHE && c < 0; i++)
        if (sl->spec[i] && !memcmp(&sl->sp[i], &g->r.spec, sizeof sl->sp[i])) c = i;
    for (int i = 1; i < SPEC_CACHE; i++)
        if (!sl->spec[i] || (sl->spec[lru] && sl->used[i] < sl->used[lru])) lru = i;
    sp_status st = SP_OK;
    const bool batched = S.batching && g->r.spec.draft.kind == SP_DRAFT_NONE;
    sp_spec *spec = NULL;
    if (!batched) {
        if (c < 0) {
            c = lru;
            for (int d = 0; d < S.n_dm; d++)
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
            sp_spec_draft_model(spec) == S.dms[d]) {
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
        const bool shared = S.batching && S.spec_batching;
        sp_spec_set_forward(spec, shared ? spec_forward : NULL, NULL);
        if (shared) batch_active(+1);
        st = sp_spec_generate(spec, g->prompt, g->n_prompt, &gp, g->out, gp.n_predict, &g->gst, &g->sst,
                              on_tokens, g, &se);
        if (shared) batch_active(-1);
    }
    sp_ctx_truncate(sl->ctx, 0, NULL);
    if (st) serve_bad(&g->err, st == SP_ERR_ARG || st == SP_ERR_RANGE ? 400 : 500, NULL, NULL, "%s", se.msg);
    else if (g->failed) serve_bad(&g->err, 500, NULL, NULL, "out of memory keeping the generated text");
    else record_metrics(g);
    if (!st && S.router && g->draft >= 0 && g->sst.drafted > 0) { /* the router learns what it reached */
        pthread_mutex_lock(&S.rmu);
        sp_router_update(S.router, g->prompt, g->n_prompt, g->draft, sp_spec_acceptance_rate(&g->sst));
        pthread_mutex_unlock(&S.rmu);
    }
}

/* Takes a free slot, waiting in the queue; NULL (and 503) when it is full. */
static slot *slot_acquire(serve_err *e) {
    pthread_mutex_lock(&S.mu);
    slot *got = NULL;
    for (;;) {
        for (int i = 0; i < S.parallel && !got; i++)
            if (!S.slots[i].busy) got = &S.slots[i];
        if (got || atomic_load(&S.stopping)) break;
        if (S.waiting >= S.queue_max) break;
        S.waiting++;
        pthread_cond_wait(&S.cv, &S.mu);
        S.waiting--;
    }
    if (got) got->busy = true;
    pthread_mutex_unlock(&S.mu);
    if (!got) serve_bad(e, 503, NULL, "server_busy", "the server is busy (%d requests running, %d waiting); retry later",
                  S.parallel, S.queue_max);
    return got;
}

static void slot_release(slot *s) {
    pthread_mutex_lock(&S.mu);
    s->busy = false;
    pthread_cond_signal(&S.cv);
    pthread_mutex_unlock(&S.mu);
}

static void run_free(run *g) {
    serve_req_free(&g->r);
    free(g->prompt);
    free(g->out);
    free(g->text);
    free(g);
}

/* Tokenises the prompt and checks the budget against the context. */
static int prepare(run *g) {
    sp_error se = {0};
    g->prompt = malloc((size_t)S.n_ctx * sizeof *g->prompt);
    if (!g->prompt) return serve_bad(&g->err, 500, NULL, NULL, "out of memory");
    sp_tok_encode_params ep = {.add_bos = sp_tokenizer_add_bos(S.tok), .parse_special = g->r.ep == SP_SERVE_CHAT};
    sp_status st = sp_tokenizer_encode_ex(S.tok, g->r.text, strlen(g->r.text), &ep, g->prompt, S.n_ctx,
                                          &g->n_prompt, &se);
    if (st == SP_ERR_RANGE)
        return serve_bad(&g->err, 400, g->r.ep == SP_SERVE_CHAT ? "messages" : "prompt", "context_length_exceeded",
                   "the prompt is %d tokens, more than the context size %d", g->n_prompt, S.n_ctx);
    if (st) return serve_bad(&g->err, 400, NULL, NULL, "%s", se.msg);
    if (g->n_prompt == 0) return serve_bad(&g->err, 400, "prompt", NULL, "the prompt is empty and the model adds no BOS token");
    const int32_t extra = sp_spec_config_extra_ctx(&g->r.spec);
    const int32_t room = S.n_ctx - g->n_prompt - extra;
    if (g->r.max_tokens < 0) g->r.max_tokens = g->r.ep == SP_SERVE_CHAT ? room : (room < 16 ? room : 16);
    if (room < 1 || g->r.max_tokens > room)
        return serve_bad(&g->err, 400, "max_tokens", "context_length_exceeded",
                   "the prompt (%d tokens) plus max_tokens %d%s exceed the context size %d", g->n_prompt,
                   g->r.max_tokens < 0 ? 1 : g->r.max_tokens, extra ? " plus the draft tree" : "", S.n_ctx);
    g->out = malloc((size_t)g->r.max_tokens * sizeof *g->out);
    if (!g->out) return serve_bad(&g->err, 500, NULL, NULL, "out of memory");
    return 0;
}

static json_t *final_json(run *g) {
    const serve_out o = out_of(g);
    return serve_final_json(&g->r, &o);
}

static void *stream_thread(void *arg) {
    run *g = arg;
    generate(g);
    if (g->err.status) {
        json_t *e = serve_err_json(&g->err);
        char *t = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        if (t) write_all(g->wfd, "data: ", 6), write_all(g->wfd, t, strlen(t)), write_all(g->wfd, "\n\n", 2);
        free(t);
    } else if (stream_ready(g, true) && send_chunk(g, "", 0, finish_reason(g), false) &&
               (!g->r.include_usage || send_chunk(g, "", 0, NULL, true))) {
    }
    write_all(g->wfd, "data: [DONE]\n\n", 14);
    close(g->wfd);
    g->wfd = -1;
    return NULL;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    run *g = cls;
    for (;;) {
        ssize_t k = read(g->rfd, buf, max);
        if (k > 0) return k;
        if (k == 0) return MHD_CONTENT_READER_END_OF_STREAM;
        if (errno != EINTR) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* Called by libmicrohttpd when the streamed response ends or the client
 * goes away: cancel, wait for the generation, release the slot. */
static void stream_free(void *cls) {
    run *g = cls;
    atomic_store(&g->cancel, true);
    close(g->rfd); /* a blocked writer gets EPIPE and stops */
    if (g->thread_started) pthread_join(g->thread, NULL);
    if (g->wfd >= 0) close(g->wfd);
    slot_release(g->sl);
    run_free(g);
}

/* ------------------------------------------------------------------ HTTP */

static void count(int ep, unsigned status) {
    pthread_mutex_lock(&S.mmu);
    S.req[ep][status < 600 ? status : 599]++;
    pthread_mutex_unlock(&S.mmu);
}

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, json_t *j, int ep) {
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!txt) return MHD_NO;
    size_t n = strlen(txt);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, txt, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    count(ep, status);
    return ret;
}

static enum MHD_Result reply_err(struct MHD_Connection *c, const serve_err *e, int ep) {
    return reply_json(c, e->status, serve_err_json(e), ep);
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, char *txt, const char *type, int ep) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    count(ep, status);
    return ret;
}

/* The Authorization header against the key, in time independent of where
 * they differ. */
static bool authorized(struct MHD_Connection *c) {
    return serve_key_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), S.api_key);
}

static char *metrics_text(void) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
#define OUT(...) (n += (size_t)snprintf(s + n, n < cap ? cap - n : 0, __VA_ARGS__))
    pthread_mutex_lock(&S.mmu);
    OUT("# HELP specula:requests_total HTTP requests by endpoint and status.\n# TYPE specula:requests_total counter\n");
    for (int e = 0; e < SP_SERVE_EP_N; e++)
        for (int st = 0; st < 600; st++)
            if (S.req[e][st]) OUT("specula:requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", SP_SERVE_EP_NAMES[e], st,
                                  (unsigned long long)S.req[e][st]);
    OUT("# TYPE specula:prompt_tokens_total counter\nspecula:prompt_tokens_total %llu\n", (unsigned long long)S.tok_in);
    OUT("# TYPE specula:generation_tokens_total counter\nspecula:generation_tokens_total %llu\n",
        (unsigned long long)S.tok_out);
    OUT("# TYPE specula:spec_decode_num_drafts counter\nspecula:spec_decode_num_drafts %llu\n",
        (unsigned long long)S.drafts);
    OUT("# TYPE specula:spec_decode_num_draft_tokens counter\nspecula:spec_decode_num_draft_tokens %llu\n",
        (unsigned long long)S.draft_tokens);
    OUT("# TYPE specula:spec_decode_num_accepted_tokens counter\nspecula:spec_decode_num_accepted_tokens %llu\n",
        (unsigned long long)S.accepted);
    OUT("# TYPE specula:spec_decode_num_accepted_tokens_per_pos counter\n");
    for (int i = 0; i < SP_SPEC_MAX_GAMMA; i++)
        if (S.acc_pos[i] || i == 0)
            OUT("specula:spec_decode_num_accepted_tokens_per_pos{position=\"%d\"} %llu\n", i,
                (unsigned long long)S.acc_pos[i]);
    if (S.online.on) {
        sp_online_stats t = {0};
        for (int i = 0; i < S.parallel; i++)
            for (int d = 0; d < S.n_dm; d++) {
                sp_online_stats o = sp_online_get_stats(S.slots[i].on[d], NULL);
                t.observed += o.observed, t.rounds += o.rounds, t.steps += o.steps;
                t.swaps += o.swaps, t.errors += o.errors, t.t_train += o.t_train;
            }
        OUT("# HELP specula:online_observed_positions_total Target rows the draft learners took in.\n"
            "# TYPE specula:online_observed_positions_total counter\nspecula:online_observed_positions_total %lld\n",
            (long long)t.observed);
        OUT("# TYPE specula:online_rounds_total counter\nspecula:online_rounds_total %lld\n", (long long)t.rounds);
        OUT("# TYPE specula:online_steps_total counter\nspecula:online_steps_total %lld\n", (long long)t.steps);
        OUT("# HELP specula:online_swaps_total Trained drafts swapped into serving.\n"
            "# TYPE specula:online_swaps_total counter\nspecula:online_swaps_total %lld\n", (long long)t.swaps);
        OUT("# TYPE specula:online_errors_total counter\nspecula:online_errors_total %lld\n", (long long)t.errors);
        OUT("# TYPE specula:online_train_seconds_total counter\nspecula:online_train_seconds_total %.3f\n", t.t_train);
    }
    if (S.n_dm > 0) {
        pthread_mutex_lock(&S.rmu);
        OUT("# HELP specula:draft_requests_total Requests drafted by each draft model (-md index).\n"
            "# TYPE specula:draft_requests_total counter\n");
        for (int d = 0; d < S.n_dm; d++)
            OUT("specula:draft_requests_total{draft=\"%d\"} %llu\n", d, (unsigned long long)S.routed[d]);
        OUT("# TYPE specula:route_explored_total counter\nspecula:route_explored_total %llu\n",
            (unsigned long long)S.explored);
        pthread_mutex_unlock(&S.rmu);
    }
    const char *hn[2] = {"specula:time_to_first_token_seconds", "specula:time_per_output_token_seconds"};
    const double *hb[2] = {TTFT_B, TPOT_B};
    const uint64_t *hc[2] = {S.ttft, S.tpot};
    const double hs[2] = {S.ttft_sum, S.tpot_sum};
    const uint64_t hnn[2] = {S.ttft_n, S.tpot_n};
    for (int h = 0; h < 2; h++) {
        OUT("# TYPE %s histogram\n", hn[h]);
        uint64_t cum = 0;
        for (int b = 0; b < NB; b++) {
            cum += hc[h][b];
            OUT("%s_bucket{le=\"%g\"} %llu\n", hn[h], hb[h][b], (unsigned long long)cum);
        }
        OUT("%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", hn[h], (unsigned long long)hnn[h], hn[h],
            hs[h], hn[h], (unsigned long long)hnn[h]);
    }
    pthread_mutex_lock(&S.mu);
    int busy = 0;
    for (int i = 0; i < S.parallel; i++) busy += S.slots[i].busy;
    OUT("# TYPE specula:num_requests_running gauge\nspecula:num_requests_running %d\n", busy);
    OUT("# TYPE specula:num_requests_waiting gauge\nspecula:num_requests_waiting %d\n", S.waiting);
    pthread_mutex_unlock(&S.mu);
    pthread_mutex_lock(&B.mu);
    OUT("# HELP specula:batch_steps_total Shared forward passes run (continuous batching).\n"
        "# TYPE specula:batch_steps_total counter\nspecula:batch_steps_total %llu\n"
        "# HELP specula:batch_sequences_total Sequences those passes carried (over steps: the mean batch).\n"
        "# TYPE specula:batch_sequences_total counter\nspecula:batch_sequences_total %llu\n"
        "# HELP specula:batch_tokens_total Tokens (rows) those passes evaluated.\n"
        "# TYPE specula:batch_tokens_total counter\nspecula:batch_tokens_total %llu\n"
        "# HELP specula:batch_spec_sequences_total Of the sequences, speculative requests' target forwards.\n"
        "# TYPE specula:batch_spec_sequences_total counter\nspecula:batch_spec_sequences_total %llu\n"
        "# HELP specula:batch_spec_shared_total Of those, the ones that shared their pass with another sequence.\n"
        "# TYPE specula:batch_spec_shared_total counter\nspecula:batch_spec_shared_total %llu\n"
        "# HELP specula:batch_spec_tokens_total Of the tokens, speculative requests' (drafted tokens verified included).\n"
        "# TYPE specula:batch_spec_tokens_total counter\nspecula:batch_spec_tokens_total %llu\n"
        "# HELP specula:batch_pass_fixed_seconds Fitted pass time a + b R: the fixed part a (0 before a fit).\n"
        "# TYPE specula:batch_pass_fixed_seconds gauge\nspecula:batch_pass_fixed_seconds %.6g\n"
        "# HELP specula:batch_pass_row_seconds Fitted pass time a + b R: the per-row part b, the marginal cost of a drafted token.\n"
        "# TYPE specula:batch_pass_row_seconds gauge\nspecula:batch_pass_row_seconds %.6g\n",
        (unsigned long long)B.steps, (unsigned long long)B.rows, (unsigned long long)B.tokens,
        (unsigned long long)B.spec_seqs, (unsigned long long)B.spec_shared, (unsigned long long)B.spec_tokens,
        B.fit_a, B.fit_b);
    pthread_mutex_unlock(&B.mu);
    pthread_mutex_unlock(&S.mmu);
#undef OUT
    if (n >= cap) {
        free(s);
        return NULL;
    }
    return s;
}

typedef struct conn {
    char *body;
    size_t len;
    bool too_big;
} conn;

static void conn_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)cls, (void)c, (void)t;
    conn *k = *con_cls;
    if (k) free(k->body), free(k);
    *con_cls = NULL;
}

static enum MHD_Result handle_generate(struct MHD_Connection *c, conn *k, int ep) {
    run *g = calloc(1, sizeof *g);
    if (!g) return MHD_NO;
    g->wfd = g->rfd = -1;
    g->t0 = sp_now();
    g->created = (long long)time(NULL);
    static atomic_ullong next_id;
    snprintf(g->id, sizeof g->id, "%s-%llu", ep == SP_SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&next_id, 1) + 1);
    const serve_limits lim = limits();
    if (serve_parse(&lim, k->body ? k->body : "", k->len, (serve_ep)ep, &g->r, &g->err) || prepare(g) ||
        !(g->sl = slot_acquire(&g->err))) {
        enum MHD_Result ret = reply_err(c, &g->err, ep);
        run_free(g);
        return ret;
    }
    if (!g->r.stream) {
        generate(g);
        slot_release(g->sl);
        enum MHD_Result ret = g->err.status ? reply_err(c, &g->err, ep) : reply_json(c, 200, final_json(g), ep);
        run_free(g);
        return ret;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        slot_release(g->sl);
        serve_bad(&g->err, 500, NULL, NULL, "cannot create a pipe");
        enum MHD_Result ret = reply_err(c, &g->err, ep);
        run_free(g);
        return ret;
    }
    g->rfd = fds[0], g->wfd = fds[1];
    if (pthread_create(&g->thread, NULL, stream_thread, g) == 0) g->thread_started = true;
    else close(g->wfd), g->wfd = -1;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, stream_reader, g, stream_free);
    if (!r) {
        stream_free(g);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    count(ep, 200);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls, (void)version;
    conn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!k->too_big && k->len + *upload_size <= SP_SERVE_BODY_MAX) {
            char *b = realloc(k->body, k->len + *upload_size + 1);
            if (b) {
                memcpy(b + k->len, upload, *upload_size);
                k->body = b, k->len += *upload_size, b[k->len] = 0;
            } else {
                k->too_big = true;
            }
        } else {
            k->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const serve_ep ep = serve_endpoint(url);
    serve_err e = {0};
    if (serve_route(ep, method, url, ep == SP_SERVE_HEALTH || authorized(c), k->too_big, &e))
        return reply_err(c, &e, ep);
    if (ep == SP_SERVE_HEALTH) return reply_json(c, 200, json_pack("{s:s}", "status", "ok"), ep);
    if (ep == SP_SERVE_MODELS)
        return reply_json(c, 200,
                          json_pack("{s:s, s:[{s:s, s:s, s:i, s:s}]}", "object", "list", "data", "id", S.model_id,
                                    "object", "model", "created", 0, "owned_by", "specula"),
                          ep);
    if (ep == SP_SERVE_METRICS) {
        char *t = metrics_text();
        if (!t) return MHD_NO;
        return reply_text(c, 200, t, "text/plain; version=0.0.4", ep);
    }
    if (atomic_load(&S.stopping)) {
        serve_bad(&e, 503, NULL, "shutting_down", "the server is shutting down");
        return reply_err(c, &e, ep);
    }
    return handle_generate(c, k, ep);
}

/* ------------------------------------------------------------------ main */

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: specula serve -m MODEL [-md DRAFT | --draft eagle3 -md HEAD.gguf | --draft mtp] [--host 127.0.0.1] [--port 8080] [--parallel N]\n"
            "         [--queue N] [-c CTX] [-t THREADS] [--api-key KEY] [--chat-template NAME]\n"
            "         [--alias NAME] [--batching auto|on|off] [--no-batching] [--no-spec-batching]\n"
            "         [--spec-cost share|wall]\n"
            "         [sampling and speculation defaults as for generate]\n"
            "  OpenAI-compatible endpoints: POST /v1/completions, POST /v1/chat/completions,\n"
            "  GET /v1/models, GET /health, GET /metrics. --port 0 picks a free port (printed).\n"
            "  With --parallel above 1, requests share forward passes (continuous batching:\n"
            "  one pass over the target's weights per step for all of them, speculative\n"
            "  requests' verification passes included). --batching auto (the default) does\n"
            "  so when a one-token forward takes 0.5 ms or more (below, a hand-off costs\n"
            "  more than sharing saves); on forces it; off (--no-batching) runs each slot\n"
            "  on its own; --no-spec-batching keeps only the speculative requests apart.\n"
            "  --spec-cost: what the adaptive draft length is charged for a shared pass: its\n"
            "  share (the default: an equal part of the pass's fixed cost plus its rows'\n"
            "  marginal cost) or, for comparison, the pass's whole wall time.\n"
            "  Chat templates: %s (default: recognised from the model's\n"
            "  tokenizer.chat_template). A request's \"speculative\" object overrides the\n"
            "  speculation defaults (n_max, n_min, p_min, drafter, verifier, gamma, tree, adaptive, ...).\n"
            SP_CLI_ONLINE_USAGE
            "  In the server each slot has its own learner per draft, fed by the requests that\n"
            "  draft with it in a chain; /metrics reports specula:online_*.\n"
            "  Several -md: a router picks the draft per request from its prompt, learning from\n"
            "  the acceptance each request reached ([--explore E], default 0.1; responses name\n"
            "  metrics.speculative_decoding.draft_model, /metrics specula:draft_requests_total).\n",
            sp_chat_names());
}

/* --batching auto: share passes only when a one-token forward takes at
 * least this long. Below it (a model of a few MB, whose weights stay in
 * cache) a pass saves next to nothing while handing each forward to a
 * shared pass costs thread wake-ups and serialises the slots onto one
 * pass at a time (stories260K: ~0.02 ms per forward, 2-3x the throughput
 * unbatched; synth-110m: ~4 ms, 1.7x batched at 4 slots). */
#define BATCH_AUTO_MIN 0.5e-3

/* Seconds of a one-token forward of m with `threads` threads, the best of
 * 5 after a warm-up, on a context of its own. */
static sp_status one_token_seconds(const sp_model *m, int32_t threads, double *out, sp_error *e) {
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 8;
    cp.max_batch = 1;
    cp.n_threads = threads;
    sp_ctx *c = NULL;
    sp_status st = sp_ctx_init(m, &cp, &c, e);
    float *logits = st ? NULL : malloc((size_t)sp_model_cfg(m)->n_vocab * sizeof(float));
    if (!st && !logits) st = sp_fail(e, SP_ERR_NOMEM, "out of memory");
    double best = 1e9;
    const int32_t tok = 0;
    for (int i = 0; !st && i < 6; i++) {
        const sp_batch b = {.tokens = &tok, .n = 1};
        const double t0 = sp_now();
        st = sp_forward(c, &b, logits, e);
        const double t = sp_now() - t0;
        if (i > 0 && t < best) best = t;
        if (!st) st = sp_ctx_truncate(c, 0, e);
    }
    free(logits);
    sp_ctx_free(c);
    *out = best;
    return st;
}

static sp_chat_tmpl model_template(const char *path) {
    sp_gguf *g = NULL;
    sp_error e = {0};
    sp_chat_tmpl t = SP_CHAT_NONE;
    if (sp_gguf_open(path, &g, &e)) return t; /* llama2.c checkpoints have none */
    sp_str s;
    if (!sp_gguf_get_str(g, "tokenizer.chat_template", &s, &e)) {
        char *z = strndup(s.ptr, s.len);
        if (z) t = sp_chat_detect(z);
        free(z);
    }
    sp_gguf_close(g);
    return t;
}

int cmd_serve(int argc, char **argv) {
    enum { O_HOST = SP_OPT_CMD, O_PORT, O_PAR, O_QUEUE, O_KEY, O_TMPL, O_ALIAS, O_NOBATCH, O_BATCH, O_NOSPECBATCH, O_EXPLORE,
           O_SPECCOST };
    static const struct option LONGOPTS[] = {
        SP_CLI_RUN_OPTIONS,
        SP_CLI_SPEC_OPTIONS,
        SP_CLI_ONLINE_OPTIONS,
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {"parallel", required_argument, NULL, O_PAR},
        {"np", required_argument, NULL, O_PAR},
        {"queue", required_argument, NULL, O_QUEUE},
        {"api-key", required_argument, NULL, O_KEY},
        {"chat-template", required_argument, NULL, O_TMPL},
        {"alias", required_argument, NULL, O_ALIAS},
        {"no-batching", no_argument, NULL, O_NOBATCH},
        {"batching", required_argument, NULL, O_BATCH},
        {"no-spec-batching", no_argument, NULL, O_NOSPECBATCH},
        {"explore", required_argument, NULL, O_EXPLORE},
        {"spec-cost", required_argument, NULL, O_SPECCOST},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cli_run_opts run;
    cli_run_opts_default(&run);
    run.n_ctx = 2048;
    run.multi_draft = true;
    double explore = 0.1;
    sp_spec_config cfg;
    sp_spec_config_init(&cfg, NULL);
    cli_online_opts_default(&S.online);
    const char *host = "127.0.0.1", *tmpl_name = NULL, *alias = NULL, *flag;
    long long port = 8080, par = 1, queue = 64;
    enum { B_AUTO, B_ON, B_OFF } batch_mode = B_AUTO;
    bool no_spec_batching = false;
    int c, r;
    optind = 0;
    while ((c = cli_next(argc, argv, SP_CLI_RUN_SHORTOPTS "h", LONGOPTS, "serve", &flag)) != -1) {
        if (c == '?') return 2;
        if ((r = cli_run_opt(c, flag, optarg, &run)) || (r = cli_spec_opt(c, optarg, &cfg)) ||
            (r = cli_online_opt(c, flag, optarg, &S.online))) {
            if (r < 0) return 2;
            continue;
        }
        switch (c) {
        case O_HOST: host = optarg; break;
        case O_PORT: if (cli_int(flag, optarg, 0, 65535, &port)) return 2; break;
        case O_PAR: if (cli_int(flag, optarg, 1, 64, &par)) return 2; break;
        case O_QUEUE: if (cli_int(flag, optarg, 0, 4096, &queue)) return 2; break;
        case O_KEY: S.api_key = optarg; break;
        case O_TMPL: tmpl_name = optarg; break;
        case O_ALIAS: alias = optarg; break;
        case O_NOBATCH: batch_mode = B_OFF; break;
        case O_BATCH:
            if (!strcmp(optarg, "auto")) batch_mode = B_AUTO;
            else if (!strcmp(optarg, "on")) batch_mode = B_ON;
            else if (!strcmp(optarg, "off")) batch_mode = B_OFF;
            else {
                fprintf(stderr, "specula: %s must be auto, on or off, got '%s'\n", flag, optarg);
                return 2;
            }
            break;
        case O_NOSPECBATCH: no_spec_batching = true; break;
        case O_EXPLORE:
            if (cli_float(flag, optarg, 0, 1, &explore)) return 2;
            break;
        case O_SPECCOST:
            if (strcmp(optarg, "share") && strcmp(optarg, "wall")) {
                fprintf(stderr, "specula: %s must be share or wall, got '%s'\n", flag, optarg);
                return 2;
            }
            S.spec_cost_wall = !strcmp(optarg, "wall");
            break;
        case 'h': serve_usage(stdout); return 0;
        default: return 2;
        }
    }
    if (!run.model) {
        fprintf(stderr, "specula: serve needs a model (-m MODEL)\n");
        return 2;
    }
    if (S.api_key && !*S.api_key) {
        fprintf(stderr, "specula: --api-key must not be empty\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "specula: --host must be an IPv4 address, got '%s'\n", host);
        return 2;
    }
    sp_error e = {0};
    if (sp_spec_config_finish(&cfg, run.draft_model != NULL, &e) || sp_sampler_params_check(&run.sampling, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        return 2;
    }
    if (tmpl_name && sp_chat_by_name(tmpl_name) == SP_CHAT_NONE) {
        fprintf(stderr, "specula: --chat-template must be one of %s, got '%s'\n", sp_chat_names(), tmpl_name);
        return 2;
    }
    const bool head = run.draft_model && cli_is_eagle3(run.draft_model);
    if (S.online.on && (!run.draft_model || head)) {
        fprintf(stderr, "specula: --online trains a draft model: give one with -md DRAFT\n");
        return 2;
    }
    if (head && run.n_draft_models > 1) {
        fprintf(stderr, "specula: %s is an EAGLE-3 head: give it as the only -md\n", run.draft_model);
        return 2;
    }
    if (cli_load_models(&run, &S.m, &S.dm)) return 1;
    if (head && cli_load_head(run.draft_model, cfg.params.draft.kind, S.m, &S.head)) {
        sp_model_free(S.m);
        return 1;
    }
    S.dms[0] = S.dm;
    S.n_dm = S.dm ? run.n_draft_models : 0;
    if (cli_load_more_drafts(&run, S.dms)) {
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S.dms[d]);
        sp_model_free(S.m);
        return 1;
    }
    pthread_mutex_init(&S.rmu, NULL);
    if (S.n_dm > 1) {
        sp_router_params rp = sp_router_default_params(S.n_dm);
        rp.explore = explore;
        rp.seed = (uint64_t)run.seed;
        if (sp_router_init(&rp, &S.router, &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            return 1;
        }
    }
    S.tok = sp_model_tokenizer(S.m);
    S.defaults = cfg.params;
    S.defaults.draft.draft_model = S.dm;
    S.defaults.draft.eagle3 = S.head;
    if (S.defaults.draft.kind == SP_DRAFT_MTP && sp_drafter_params_check(&S.defaults.draft, S.m, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg); /* a file without MTP layers */
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S.dms[d]);
        sp_model_free(S.m);
        return 2;
    }
    if (sp_suffix_corpus_init(0, &S.suffix_corpus, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S.dms[d]);
        sp_model_free(S.m);
        return 1;
    }
    S.sampling = run.sampling;
    S.seed = (uint64_t)run.seed;
    S.tmpl = tmpl_name ? sp_chat_by_name(tmpl_name) : model_template(run.model);
    const char *base = strrchr(run.model, '/');
    snprintf(S.model_id, sizeof S.model_id, "%s", alias ? alias : base ? base + 1 : run.model);
    S.parallel = (int32_t)par;
    S.queue_max = (int32_t)queue;
    S.threads = (int32_t)run.threads;
    S.spec_batching = !no_spec_batching;
    double t_one = 0; /* auto: seconds of a one-token forward */
    if (S.parallel > 1 && batch_mode == B_AUTO && one_token_seconds(S.m, S.threads, &t_one, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        return 1;
    }
    S.batching = S.parallel > 1 && (batch_mode == B_ON || (batch_mode == B_AUTO && t_one >= BATCH_AUTO_MIN));
    pthread_mutex_init(&S.mu, NULL);
    pthread_mutex_init(&S.mmu, NULL);
    pthread_cond_init(&S.cv, NULL);
    S.slots = calloc((size_t)S.parallel, sizeof *S.slots);
    int rc = S.slots ? 0 : 1;
    if (!rc && S.batching && sp_pool_init(S.threads, &S.pool, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        rc = 1;
    }
    for (int i = 0; !rc && i < S.parallel; i++) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = (int32_t)run.n_ctx;
        cp.max_batch = 128;
        /* batching: every slot computes on one pool of all the threads (the
         * shared pass and speculative slots take turns per job); else the
         * threads are split between the slots */
        cp.n_threads = S.threads / S.parallel > 0 ? S.threads / S.parallel : 1;
        cp.pool = S.pool;
        cli_ctx_types(&run, &cp);
        if (sp_ctx_init(S.m, &cp, &S.slots[i].ctx, &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            rc = 1;
        }
    }
    for (int i = 0; !rc && S.online.on && i < S.parallel; i++)
        for (int d = 0; !rc && d < S.n_dm; d++) {
            sp_online_params op = S.online.p;
            op.seed = (uint64_t)run.seed + (uint64_t)(i * SP_CLI_MAX_DRAFTS + d);
            if (sp_online_init(run.draft_models[d], &op, &S.slots[i].on[d], &e) ||
                sp_online_serve(S.slots[i].on[d], NULL, S.dms[d], &S.online.sch, &e)) {
                fprintf(stderr, "specula: online learning: %s\n", e.msg);
                rc = 1;
            }
        }
    if (!rc) S.n_ctx = sp_ctx_n_ctx(S.slots[0].ctx);
    pthread_mutex_init(&B.mu, NULL);
    pthread_cond_init(&B.cv, NULL);
    if (!rc && S.batching) {
        B.max_rows = 128;
        B.logits = malloc((size_t)B.max_rows * (size_t)sp_model_cfg(S.m)->n_vocab * sizeof(float));
        if (!B.logits) {
            fprintf(stderr, "specula: out of memory for the shared pass's logits\n");
            rc = 1;
        }
    }
    /* SIGINT/SIGTERM are taken by sigwait below; every thread inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = NULL;
    if (!rc) {
        d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                             0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                             MHD_OPTION_NOTIFY_COMPLETED, conn_done, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
                             (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_END);
        if (!d) {
            fprintf(stderr, "specula: cannot listen on %s:%lld (in use, or not allowed)\n", host, port);
            rc = 1;
        }
    }
    if (!rc) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        char how[96] = "";
        if (S.parallel > 1)
            snprintf(how, sizeof how, ", %s%s", S.batching ? "continuous batching" : "no batching",
                     t_one > 0 ? (S.batching ? " (auto)" : " (auto: a forward is cheaper than a hand-off)") : "");
        fprintf(stderr, "specula: serving %s (%s, chat template %s, %d slot%s, speculation %s%s) on http://%s:%u\n",
                S.model_id, sp_model_desc(S.m), sp_chat_name(S.tmpl), S.parallel, S.parallel > 1 ? "s" : "",
                S.defaults.draft.kind == SP_DRAFT_NONE ? "off" : sp_drafter_name(S.defaults.draft.kind), how,
                host, di ? (unsigned)di->port : (unsigned)port);
        cli_kv_print(S.slots[0].ctx); /* per slot */
        int sig = 0;
        sigwait(&set, &sig);
        fprintf(stderr, "specula: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        atomic_store(&S.stopping, true);
        pthread_mutex_lock(&S.mu);
        pthread_cond_broadcast(&S.cv);
        pthread_mutex_unlock(&S.mu);
        MHD_stop_daemon(d);
    }
    free(B.logits);
    for (int i = 0; S.slots && i < S.parallel; i++) {
        for (int j = 0; j < SPEC_CACHE; j++) sp_spec_free(S.slots[i].spec[j]);
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++)
            sp_online_free(S.slots[i].on[d]); /* after the specs: one of them may draft with its snapshot */
        sp_ctx_free(S.slots[i].ctx);
    }
    free(S.slots);
    sp_pool_free(S.pool);
    sp_router_free(S.router);
    sp_suffix_corpus_free(S.suffix_corpus);
    for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S.dms[d]); /* dms[0] is dm */
    sp_eagle3_free(S.head);
    sp_model_free(S.m);
    return rc;
}
