/* online: the replay buffer, update loop and serving side of online
 * speculative decoding (see sp_train.h). Examples are stored in a ring: a
 * context of `window` tokens starting with the text's first token, the
 * index of the predicted position in it, and the target row as top-k
 * ids/probabilities plus the remaining mass. */
#include "sp_train.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "rng.h"
#include "sp_spec.h"
#include "train.h"

struct sp_online {
    sp_online_params p;
    sp_tmodel *m;
    char *vocab_from;
    int32_t V;
    int32_t *tok;     /* [buffer][window] */
    int32_t *at;      /* [buffer] window index of the predicted position */
    int32_t *ids;     /* [buffer][topk] */
    float *probs;     /* [buffer][topk] */
    float *rest;      /* [buffer] */
    int64_t head, count, observed;
    sp_rng rng;
    /* batch scratch */
    int32_t *btok;           /* [batch][window] */
    sp_loss_target *targets; /* [batch][window] */
    int32_t *bids;           /* [batch][topk] target rows of the batch (copied under the lock) */
    float *bprobs;           /* [batch][topk] */
    int64_t steps_done;
    /* serving (sp_online_serve) */
    pthread_mutex_t mu;      /* the buffer, the pending snapshot, the counters below */
    pthread_cond_t cv;
    bool serving, background, thread_up, stop, busy, want_round;
    sp_online_schedule sch;
    sp_spec *spec;
    const sp_model *like;
    sp_model *pending;       /* a snapshot not yet taken by the serving thread */
    sp_model *served;        /* the newest taken snapshot (owned): the attached spec drafts with it */
    int64_t since_round;     /* positions observed since the last round started */
    sp_online_stats st;
    pthread_t thread;
    sp_error terr;           /* the trainer thread's last error */
};

sp_online_params sp_online_default_params(void) {
    sp_online_params p = {.topk = 16, .buffer = 4096, .window = 32, .batch = 16, .lr = 3e-4f, .warmup = 64,
                          .loss = {.kind = SP_LOSS_FKL}, .seed = 1};
    return p;
}

static void stop_thread(sp_online *o) {
    if (!o->thread_up) return;
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    o->thread_up = false;
}

void sp_online_free(sp_online *o) {
    if (!o) return;
    stop_thread(o);
    sp_model_free(o->pending);
    sp_model_free(o->served);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->bids), free(o->bprobs);
    sp_tmodel_free(o->m);
    free(o->vocab_from);
    free(o->tok), free(o->at), free(o->ids), free(o->probs), free(o->rest);
    free(o->btok), free(o->targets);
    free(o);
}

sp_status sp_online_init(const char *draft_path, const sp_online_params *p, sp_online **out,
                         sp_error *err) {
    *out = NULL;
    if (p->warmup < 0 || p->topk < 1 || p->topk > 256 || p->buffer < 1 || p->buffer > (1 << 22) || p->window < 2 ||
        p->window > 4096 || p->batch < 1 || p->batch > 4096 || !(p->lr > 0 && p->lr < 1))
        return sp_fail(err, SP_ERR_ARG,
                       "online: topk 1..256, buffer 1..4M, window 2..4096, batch 1..4096 and lr in (0, 1) "
                       "are needed");
    sp_online *o = calloc(1, sizeof *o);
    if (!o) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    o->p = *p;
    sp_status st = sp_tmodel_load(draft_path, &o->m, err);
    if (st) {
        free(o);
        return st;
    }
    o->V = sp_tmodel_shape(o->m)->n_vocab;
    const size_t B = (size_t)p->buffer, W = (size_t)p->window, K = (size_t)p->topk;
    o->vocab_from = strdup(draft_path);
    o->tok = malloc(B * W * sizeof *o->tok);
    o->at = malloc(B * sizeof *o->at);
    o->ids = malloc(B * K * sizeof *o->ids);
    o->probs = malloc(B * K * sizeof *o->probs);
    o->rest = malloc(B * sizeof *o->rest);
    o->btok = malloc((size_t)p->batch * W * sizeof *o->btok);
    o->targets = malloc((size_t)p->batch * W * sizeof *o->targets);
    o->bids = malloc((size_t)p->batch * K * sizeof *o->bids);
    o->bprobs = malloc((size_t)p->batch * K * sizeof *o->bprobs);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (!o->vocab_from || !o->tok || !o->at || !o->ids || !o->probs || !o->rest || !o->btok || !o->targets ||
        !o->bids || !o->bprobs) {
        sp_online_free(o);
        return sp_fail(err, SP_ERR_NOMEM, "online: out of memory for a buffer of %d positions", p->buffer);
    }
    sp_rng_seed(&o->rng, p->seed);
    *out = o;
    return SP_OK;
}

int64_t sp_online_buffered(const sp_online *o) { return o->count; }
int64_t sp_online_observed(const sp_online *o) { return o->observed; }

sp_online_schedule sp_online_default_schedule(void) {
    return (sp_online_schedule){.every = 256, .steps = 32, .background = true};
}

/* Adds rows to the ring; the caller holds o->mu when serving. */
static void observe_rows(sp_online *o, const int32_t *hist, int32_t first, const float *p,
                         int32_t rows) {
    const int32_t W = o->p.window, K = o->p.topk, V = o->V;
    for (int32_t j = 0; j < rows; j++) {
        const int32_t pos = first + j; /* predicts hist[pos] from hist[0..pos) */
        const float *row = p + (int64_t)j * V;
        const int64_t e = o->head;
        int32_t *t = o->tok + e * W;
        /* the context as the served draft sees it, from its first token
         * (BOS, which small models attend to): hist[0..pos) when it fits,
         * else hist[0] and the last W-1 tokens; the prediction sits at the
         * context's last position (later slots are padding, never seen) */
        if (pos <= W) {
            memcpy(t, hist, (size_t)pos * sizeof *t);
            for (int32_t i = pos; i < W; i++) t[i] = hist[0];
            o->at[e] = pos - 1;
        } else {
            t[0] = hist[0];
            memcpy(t + 1, hist + pos - (W - 1), (size_t)(W - 1) * sizeof *t);
            o->at[e] = W - 1;
        }
        /* top-k kept sorted by insertion (few inserts once the k-th is high) */
        float *pr = o->probs + e * K;
        int32_t *id = o->ids + e * K;
        int32_t n = 0;
        for (int32_t v = 0; v < V; v++) {
            const float x = row[v];
            if (n == K && !(x > pr[K - 1])) continue;
            int32_t at = n < K ? n++ : K - 1;
            while (at > 0 && pr[at - 1] < x) {
                pr[at] = pr[at - 1], id[at] = id[at - 1];
                at--;
            }
            pr[at] = x, id[at] = v;
        }
        for (int32_t k = n; k < K; k++) pr[k] = 0, id[k] = 0;
        double kept = 0;
        for (int32_t k = 0; k < n; k++) kept += pr[k];
        o->rest[e] = kept < 1.0 ? (float)(1.0 - kept) : 0.0f;
        o->head = (o->head + 1) % o->p.buffer;
        if (o->count < o->p.buffer) o->count++;
        o->observed++;
    }
}

void sp_online_observe(void *online, const int32_t *hist, int32_t first, const float *p, int32_t rows,
                       int32_t V) {
    sp_online *o = online;
    if (V != o->V || first < 1) return; /* a vocabulary the draft does not have: nothing to learn */
    pthread_mutex_lock(&o->mu);
    observe_rows(o, hist, first, p, rows);
    pthread_mutex_unlock(&o->mu);
}

sp_status sp_online_update(sp_online *o, int32_t steps, double *mean_loss, sp_error *err) {
    if (mean_loss) *mean_loss = 0;
    pthread_mutex_lock(&o->mu);
    const int64_t count = o->count;
    pthread_mutex_unlock(&o->mu);
    if (count == 0 || steps <= 0) return SP_OK;
    const int32_t W = o->p.window, K = o->p.topk, B = o->p.batch;
    sp_adamw_params ap = sp_adamw_default_params();
    const float lr_full = o->p.lr;
    ap.weight_decay = 0;
    double total = 0;
    for (int32_t s = 0; s < steps; s++) {
        /* the learner starts from a trained draft with empty optimizer
         * moments: its first steps ramp the rate up linearly, so Adam's
         * unit-size first updates do not knock the draft off its warm-up */
        ap.lr = o->steps_done < o->p.warmup ? lr_full * (float)(o->steps_done + 1) / (float)o->p.warmup : lr_full;
        /* the batch is copied out of the ring under the lock: the serving
         * thread may be adding rows meanwhile */
        pthread_mutex_lock(&o->mu);
        for (int32_t b = 0; b < B; b++) {
            const int64_t e = (int64_t)sp_rng_below(&o->rng, (uint64_t)o->count);
            memcpy(o->btok + (int64_t)b * W, o->tok + e * W, (size_t)W * sizeof *o->btok);
            memcpy(o->bids + (int64_t)b * K, o->ids + e * K, (size_t)K * sizeof *o->bids);
            memcpy(o->bprobs + (int64_t)b * K, o->probs + e * K, (size_t)K * sizeof *o->bprobs);
            for (int32_t i = 0; i < W; i++) {
                sp_loss_target *tg = &o->targets[(int64_t)b * W + i];
                *tg = (sp_loss_target){.token = -1};
                if (i == o->at[e]) {
                    tg->k = K;
                    tg->ids = o->bids + (int64_t)b * K;
                    tg->probs = o->bprobs + (int64_t)b * K;
                    tg->rest = o->rest[e];
                }
            }
        }
        pthread_mutex_unlock(&o->mu);
        sp_status st = sp_tmodel_forward(o->m, o->btok, B, W, err);
        if (st) return st;
        int64_t used = 0;
        double l = sp_tmodel_loss(o->m, &o->p.loss, o->targets, 1.0 / B, &used);
        sp_tmodel_zero_grad(o->m);
        sp_tmodel_backward(o->m);
        sp_tmodel_step(o->m, &ap);
        total += used ? l / (double)used : 0;
        o->steps_done++;
    }
    if (mean_loss) *mean_loss = total / steps;
    return SP_OK;
}

sp_status sp_online_export(sp_online *o, const char *path, sp_error *err) {
    return sp_tmodel_save(o->m, path, SP_GGML_F32, o->vocab_from, err);
}

/* ---------------------------------------------------------------- serving */

/* One training round and a snapshot of the result; called by the trainer
 * thread, or inline by the observer without a thread. */
static sp_status train_round(sp_online *o, sp_model **snap, sp_error *err) {
    double t0 = sp_now(), loss = 0;
    sp_status st = sp_online_update(o, o->sch.steps, &loss, err);
    if (!st) st = sp_tmodel_to_model(o->m, o->like, snap, err);
    pthread_mutex_lock(&o->mu);
    o->st.rounds++;
    o->st.steps += o->sch.steps;
    o->st.last_loss = loss;
    o->st.t_train += sp_now() - t0;
    pthread_mutex_unlock(&o->mu);
    return st;
}

static void *trainer_main(void *arg) {
    sp_online *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->stop && !o->want_round) pthread_cond_wait(&o->cv, &o->mu);
        if (o->stop) break;
        o->want_round = false;
        o->busy = true;
        pthread_mutex_unlock(&o->mu);
        sp_model *snap = NULL;
        sp_error e = {0};
        sp_status st = train_round(o, &snap, &e);
        pthread_mutex_lock(&o->mu);
        if (st) {
            o->st.errors++;
            o->terr = e;
        } else {
            sp_model_free(o->pending); /* an older snapshot never served */
            o->pending = snap;
        }
        o->busy = false;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* Serves snap (owned): the attached spec (if any) drafts with it from its
 * next iteration; the snapshot it replaces is freed (a detached spec was
 * given back `like`, so nothing else uses it). Runs on the serving thread. */
static void swap_in(sp_online *o, sp_model *snap) {
    sp_error e = {0};
    if (o->spec && sp_spec_set_draft_model(o->spec, snap, &e)) {
        sp_model_free(snap);
        pthread_mutex_lock(&o->mu);
        o->st.errors++;
        o->terr = e;
        pthread_mutex_unlock(&o->mu);
        return;
    }
    sp_model_free(o->served);
    o->served = snap;
    pthread_mutex_lock(&o->mu);
    o->st.swaps++;
    pthread_mutex_unlock(&o->mu);
}

/* The spec observer while serving: keep the rows, start a round every
 * `every` positions, serve a finished snapshot. */
static void serve_observe(void *ud, const int32_t *hist, int32_t first, const float *p,
                          int32_t rows, int32_t V) {
    sp_online *o = ud;
    if (V != o->V || first < 1) return;
    pthread_mutex_lock(&o->mu);
    observe_rows(o, hist, first, p, rows);
    o->since_round += rows;
    bool round = o->since_round >= o->sch.every && !o->busy && !o->want_round;
    if (round) o->since_round = 0;
    sp_model *snap = o->pending;
    o->pending = NULL;
    if (round && o->background) {
        o->want_round = true;
        pthread_cond_signal(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    if (round && !o->background) {
        sp_model_free(snap);
        snap = NULL;
        sp_error e = {0};
        if (train_round(o, &snap, &e)) {
            pthread_mutex_lock(&o->mu);
            o->st.errors++;
            o->terr = e;
            pthread_mutex_unlock(&o->mu);
            snap = NULL;
        }
    }
    if (snap) swap_in(o, snap);
}

/* Takes a finished snapshot, if any (serving thread). */
static void take_pending(sp_online *o) {
    pthread_mutex_lock(&o->mu);
    sp_model *snap = o->pending;
    o->pending = NULL;
    pthread_mutex_unlock(&o->mu);
    if (snap) swap_in(o, snap);
}

void sp_online_detach(sp_online *o) {
    if (!o->spec) return;
    sp_spec_set_observer(o->spec, NULL, NULL);
    sp_error e = {0};
    if (o->served) sp_spec_set_draft_model(o->spec, o->like, &e); /* cannot fail: it served `like` before */
    o->spec = NULL;
}

sp_status sp_online_attach(sp_online *o, sp_spec *s, sp_error *err) {
    if (!o->serving) return sp_fail(err, SP_ERR_ARG, "online: the learner is not serving (sp_online_serve first)");
    if (o->spec == s) return SP_OK;
    sp_online_detach(o);
    if (o->served) {
        sp_status st = sp_spec_set_draft_model(s, o->served, err);
        if (st) return st;
    }
    o->spec = s;
    sp_spec_set_observer(s, serve_observe, o);
    take_pending(o);
    return SP_OK;
}

sp_status sp_online_serve(sp_online *o, sp_spec *s, const sp_model *like,
                          const sp_online_schedule *sch, sp_error *err) {
    if (o->serving) return sp_fail(err, SP_ERR_ARG, "online: the learner already serves a speculation object");
    if (sch->every < 1 || sch->steps < 1)
        return sp_fail(err, SP_ERR_ARG, "online: every and steps must be at least 1 (got %d, %d)",
                       sch->every, sch->steps);
    /* the learner's weights must fit the served draft: a snapshot proves it */
    sp_model *probe = NULL;
    sp_status st = sp_tmodel_to_model(o->m, like, &probe, err);
    if (st) return st;
    sp_model_free(probe);
    if (s && sp_spec_draft_model(s) != like)
        return sp_fail(err, SP_ERR_ARG, "online: the speculation object does not draft with the given draft model");
    o->spec = s;
    o->like = like;
    o->sch = *sch;
    o->background = sch->background;
    if (o->background) {
        if (pthread_create(&o->thread, NULL, trainer_main, o))
            return sp_fail(err, SP_ERR_IO, "online: cannot start the trainer thread");
        o->thread_up = true;
    }
    o->serving = true;
    if (s) sp_spec_set_observer(s, serve_observe, o);
    return SP_OK;
}

void sp_online_wait(sp_online *o) {
    pthread_mutex_lock(&o->mu);
    while (o->busy || o->want_round) pthread_cond_wait(&o->cv, &o->mu);
    sp_model *snap = o->pending;
    o->pending = NULL;
    pthread_mutex_unlock(&o->mu);
    if (snap && o->serving) swap_in(o, snap);
    else sp_model_free(snap);
}

const sp_model *sp_online_model(const sp_online *o) { return o->served ? o->served : o->like; }

sp_online_stats sp_online_get_stats(sp_online *o, sp_error *last_err) {
    pthread_mutex_lock(&o->mu);
    sp_online_stats st = o->st;
    st.observed = o->observed;
    st.buffered = o->count;
    if (last_err) *last_err = o->terr;
    pthread_mutex_unlock(&o->mu);
    return st;
}
