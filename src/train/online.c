/* online: the replay buffer, update loop and serving side of online
 * speculative decoding (see sp_train.h). A draft model's examples are
 * stored in a ring: a context of `window` tokens starting with the text's
 * first token, the index of the predicted position in it, and the target
 * row as top-k ids/probabilities plus the remaining mass. A head's ring
 * holds positions instead: the token, the target's three tapped hidden
 * states and the top-k row of the next token, with a run id that joins
 * consecutive positions of one text into windows. */
#include "sp_train.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "eagle3.h"
#include "head.h"
#include "loss.h"
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
    void *pending;           /* a snapshot (sp_model or sp_eagle3) not yet taken by the serving thread */
    void *served;            /* the newest taken snapshot (owned): the attached spec drafts with it */
    int64_t since_round;     /* positions observed since the last round started */
    sp_online_stats st;
    pthread_t thread;
    sp_error terr;           /* the trainer thread's last error */
    /* an EAGLE-3 head (sp_online_init_head) instead of a draft model */
    sp_thead *hd;
    const sp_eagle3 *hlike;  /* the head first served (snapshots copy its settings) */
    int32_t layers[3], D3;   /* its target layers; 3 x the target's width */
    float *feat;             /* [buffer][D3] */
    int32_t *htok;           /* [buffer] the token at the position */
    int64_t *hrun;           /* [buffer] run id: equal for consecutive positions of one text */
    int64_t run, last_pos;
    int32_t last_tok;
    int32_t *wtok, *wids;    /* [batch][window], [batch][window][topk] */
    float *wfeat, *wprobs;   /* [batch][window][D3], [batch][window][topk] */
    sp_loss_target *wrows;   /* [batch][window] */
    sp_thead_window *win;    /* [batch] */
};

sp_online_params sp_online_default_params(void) {
    sp_online_params p = {.topk = 16, .buffer = 4096, .window = 32, .batch = 16, .lr = 3e-4f, .warmup = 64,
                          .unroll = 3, .loss = {.kind = SP_LOSS_FKL}, .seed = 1};
    return p;
}

/* Snapshots are sp_model (a draft model) or sp_eagle3 (a head). */
static void snap_free(const sp_online *o, void *snap) {
    if (o->hd) sp_eagle3_free(snap);
    else sp_model_free(snap);
}

static sp_status snap_make(sp_online *o, void **snap, sp_error *err) {
    *snap = NULL;
    if (o->hd) return sp_thead_to_eagle3(o->hd, o->hlike, (sp_eagle3 **)snap, err);
    return sp_tmodel_to_model(o->m, o->like, (sp_model **)snap, err);
}

static sp_status snap_serve(sp_online *o, sp_spec *s, const void *snap, sp_error *err) {
    if (o->hd) return sp_spec_set_eagle3(s, snap, err);
    return sp_spec_set_draft_model(s, snap, err);
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
    snap_free(o, o->pending);
    snap_free(o, o->served);
    pthread_mutex_destroy(&o->mu);
    sp_thead_free(o->hd);
    free(o->feat), free(o->htok), free(o->hrun), free(o->wtok), free(o->wids), free(o->wfeat), free(o->wprobs);
    free(o->wrows), free(o->win);
    pthread_cond_destroy(&o->cv);
    free(o->bids), free(o->bprobs);
    sp_tmodel_free(o->m);
    free(o->vocab_from);
    free(o->tok), free(o->at), free(o->ids), free(o->probs), free(o->rest);
    free(o->btok), free(o->targets);
    free(o);
}

static sp_status check_params(const sp_online_params *p, sp_error *err) {
    if (p->warmup < 0 || p->topk < 1 || p->topk > 256 || p->buffer < 1 || p->buffer > (1 << 22) || p->window < 2 ||
        p->window > 4096 || p->batch < 1 || p->batch > 4096 || !(p->lr > 0 && p->lr < 1) || p->unroll < 1 ||
        p->unroll > 8)
        return sp_fail(err, SP_ERR_ARG,
                       "online: topk 1..256, buffer 1..4M, window 2..4096, batch 1..4096, unroll 1..8 and lr in "
                       "(0, 1) are needed");
    return SP_OK;
}

sp_status sp_online_init_head(const char *head_path, const sp_eagle3 *head, const sp_online_params *p,
                              sp_online **out, sp_error *err) {
    *out = NULL;
    sp_status st = check_params(p, err);
    if (st) return st;
    if (p->window < p->unroll + 2)
        return sp_fail(err, SP_ERR_ARG, "online: a head's windows of %d positions are too short for %d unrolled steps",
                       p->window, p->unroll);
    const char *why = sp_eagle3_trainable(head);
    if (why) return sp_fail(err, SP_ERR_UNSUPPORTED, "online: this head cannot learn online (%s)", why);
    const sp_model *target = sp_eagle3_target(head);
    sp_online *o = calloc(1, sizeof *o);
    if (!o) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    o->p = *p;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    float *embd = NULL;
    st = sp_thead_target_embd(target, &embd, err);
    sp_thead *hd = NULL;
    if (!st) st = sp_thead_load(head_path, target, embd, o->layers, &hd, err);
    free(embd);
    o->hd = hd; /* before any failure below: frees go by kind */
    if (st) {
        sp_online_free(o);
        return st;
    }
    o->hlike = head;
    o->V = sp_model_cfg(target)->n_vocab;
    o->D3 = 3 * sp_model_cfg(target)->dim;
    o->last_pos = -2;
    const size_t B = (size_t)p->buffer, W = (size_t)p->window, K = (size_t)p->topk, NB = (size_t)p->batch;
    o->vocab_from = strdup(head_path);
    o->feat = malloc(B * (size_t)o->D3 * sizeof *o->feat);
    o->htok = malloc(B * sizeof *o->htok);
    o->hrun = malloc(B * sizeof *o->hrun);
    o->ids = malloc(B * K * sizeof *o->ids);
    o->probs = malloc(B * K * sizeof *o->probs);
    o->rest = malloc(B * sizeof *o->rest);
    o->wtok = malloc(NB * W * sizeof *o->wtok);
    o->wids = malloc(NB * W * K * sizeof *o->wids);
    o->wfeat = malloc(NB * W * (size_t)o->D3 * sizeof *o->wfeat);
    o->wprobs = malloc(NB * W * K * sizeof *o->wprobs);
    o->wrows = calloc(NB * W, sizeof *o->wrows);
    o->win = calloc(NB, sizeof *o->win);
    if (!o->vocab_from || !o->feat || !o->htok || !o->hrun || !o->ids || !o->probs || !o->rest || !o->wtok ||
        !o->wids || !o->wfeat || !o->wprobs || !o->wrows || !o->win) {
        sp_online_free(o);
        return sp_fail(err, SP_ERR_NOMEM, "online: out of memory for a buffer of %d positions", p->buffer);
    }
    sp_rng_seed(&o->rng, p->seed);
    *out = o;
    return SP_OK;
}

sp_status sp_online_init(const char *draft_path, const sp_online_params *p, sp_online **out,
                         sp_error *err) {
    *out = NULL;
    sp_status cst = check_params(p, err);
    if (cst) return cst;
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

/* The top-k entries of row (sorted by insertion: few inserts once the k-th
 * is high) and the rest into ring entry e. */
static void keep_topk(sp_online *o, int64_t e, const float *row, int32_t V) {
    const int32_t K = o->p.topk;
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
}

static void observe_head_rows(sp_online *o, const int32_t *hist, int32_t first, const float *p, int32_t rows);

/* Adds rows to the ring; the caller holds o->mu when serving. */
static void observe_rows(sp_online *o, const int32_t *hist, int32_t first, const float *p,
                         int32_t rows) {
    if (o->hd) {
        observe_head_rows(o, hist, first, p, rows);
        return;
    }
    const int32_t W = o->p.window, V = o->V;
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
        keep_topk(o, e, row, V);
        o->head = (o->head + 1) % o->p.buffer;
        if (o->count < o->p.buffer) o->count++;
        o->observed++;
    }
}

/* A head's records: position first - 1 + j holds (its token, the target's
 * taps there, the row of the next token); the caller holds o->mu. */
static void observe_head_rows(sp_online *o, const int32_t *hist, int32_t first, const float *p, int32_t rows) {
    const float *taps[3];
    for (int i = 0; i < 3; i++)
        if (!o->spec || !(taps[i] = sp_spec_observed_taps(o->spec, i))) return; /* no states: nothing to learn */
    const int32_t D = o->D3 / 3;
    for (int32_t j = 0; j < rows; j++) {
        const int32_t pos = first - 1 + j;
        const int64_t e = o->head;
        if (!(pos - 1 == o->last_pos && pos >= 1 && hist[pos - 1] == o->last_tok)) o->run++;
        o->last_pos = pos;
        o->last_tok = hist[pos];
        o->htok[e] = hist[pos];
        o->hrun[e] = o->run;
        for (int i = 0; i < 3; i++)
            memcpy(o->feat + e * o->D3 + (int64_t)i * D, taps[i] + (int64_t)j * D, (size_t)D * sizeof(float));
        keep_topk(o, e, p + (int64_t)j * o->V, o->V);
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

/* Ring index of the c-th oldest buffered position. */
static int64_t chrono(const sp_online *o, int64_t c) {
    return (o->head - o->count + c + 2 * (int64_t)o->p.buffer) % o->p.buffer;
}

/* Window b of a head's batch: a run's `window` positions ending at a
 * random position c, or its first `window` when c is nearer its start (the
 * whole run when shorter); false when the run is too short for the
 * unrolled steps. Copies out of the ring (the caller holds o->mu). */
static bool head_window(sp_online *o, int32_t b) {
    const int32_t W = o->p.window, K = o->p.topk;
    const int64_t c = (int64_t)sp_rng_below(&o->rng, (uint64_t)o->count), run = o->hrun[chrono(o, c)];
    int64_t rs = c, re = c;
    while (rs > 0 && o->hrun[chrono(o, rs - 1)] == run) rs--;
    while (re + 1 < o->count && o->hrun[chrono(o, re + 1)] == run) re++;
    int64_t start = c - W + 1;
    int32_t T = W;
    if (start < rs) {
        start = rs;
        T = re - rs + 1 < W ? (int32_t)(re - rs + 1) : W;
    }
    if (T < o->p.unroll + 2) return false;
    int32_t *tok = o->wtok + (int64_t)b * W, *ids = o->wids + (int64_t)b * W * K;
    float *feat = o->wfeat + (int64_t)b * W * o->D3, *probs = o->wprobs + (int64_t)b * W * K;
    sp_loss_target *rows = o->wrows + (int64_t)b * W;
    for (int32_t t = 0; t < T; t++) {
        const int64_t e = chrono(o, start + t);
        tok[t] = o->htok[e];
        memcpy(feat + (int64_t)t * o->D3, o->feat + e * o->D3, (size_t)o->D3 * sizeof(float));
        memcpy(ids + (int64_t)t * K, o->ids + e * K, (size_t)K * sizeof *ids);
        memcpy(probs + (int64_t)t * K, o->probs + e * K, (size_t)K * sizeof *probs);
        rows[t] = (sp_loss_target){.token = -1, .k = K, .ids = ids + (int64_t)t * K, .probs = probs + (int64_t)t * K,
                                   .rest = o->rest[e]};
    }
    o->win[b] = (sp_thead_window){.tokens = tok, .feat = feat, .rows = rows, .T = T};
    return true;
}

/* The learning rate of the next step: the learner starts from a trained
 * draft with empty optimizer moments, so its first steps ramp the rate up
 * linearly and Adam's unit-size first updates do not knock it off. */
static float online_lr(const sp_online *o) {
    return o->steps_done < o->p.warmup ? o->p.lr * (float)(o->steps_done + 1) / (float)o->p.warmup : o->p.lr;
}

static sp_status head_update(sp_online *o, int32_t steps, double *mean_loss, sp_error *err) {
    sp_adamw_params ap = sp_adamw_default_params();
    ap.weight_decay = 0;
    double total = 0;
    int32_t done = 0;
    for (int32_t s = 0; s < steps; s++) {
        ap.lr = online_lr(o);
        int32_t n = 0;
        pthread_mutex_lock(&o->mu);
        for (int32_t tries = 0; n < o->p.batch && tries < 8 * o->p.batch; tries++)
            if (head_window(o, n)) n++;
        pthread_mutex_unlock(&o->mu);
        if (n == 0) break; /* no run long enough yet */
        double l = 0;
        sp_status st = sp_thead_train_step(o->hd, o->win, n, o->p.unroll, &o->p.loss, &ap, &l, NULL, err);
        if (st) return st;
        total += l;
        done++;
        o->steps_done++;
    }
    if (mean_loss) *mean_loss = done ? total / done : 0;
    return SP_OK;
}

sp_status sp_online_update(sp_online *o, int32_t steps, double *mean_loss, sp_error *err) {
    if (mean_loss) *mean_loss = 0;
    pthread_mutex_lock(&o->mu);
    const int64_t count = o->count;
    pthread_mutex_unlock(&o->mu);
    if (count == 0 || steps <= 0) return SP_OK;
    if (o->hd) return head_update(o, steps, mean_loss, err);
    const int32_t W = o->p.window, K = o->p.topk, B = o->p.batch;
    sp_adamw_params ap = sp_adamw_default_params();
    ap.weight_decay = 0;
    double total = 0;
    for (int32_t s = 0; s < steps; s++) {
        ap.lr = online_lr(o);
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
    if (o->hd) return sp_thead_save(o->hd, o->layers, o->vocab_from, path, err);
    return sp_tmodel_save(o->m, path, SP_GGML_F32, o->vocab_from, err);
}

void sp_online_listen(sp_online *o, sp_spec *s) {
    o->spec = s;
    sp_spec_set_observer(s, sp_online_observe, o);
}

/* ---------------------------------------------------------------- serving */

/* One training round and a snapshot of the result; called by the trainer
 * thread, or inline by the observer without a thread. */
static sp_status train_round(sp_online *o, void **snap, sp_error *err) {
    double t0 = sp_now(), loss = 0;
    sp_status st = sp_online_update(o, o->sch.steps, &loss, err);
    if (!st) st = snap_make(o, snap, err);
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
        void *snap = NULL;
        sp_error e = {0};
        sp_status st = train_round(o, &snap, &e);
        pthread_mutex_lock(&o->mu);
        if (st) {
            o->st.errors++;
            o->terr = e;
        } else {
            snap_free(o, o->pending); /* an older snapshot never served */
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
static void swap_in(sp_online *o, void *snap) {
    sp_error e = {0};
    if (o->spec && snap_serve(o, o->spec, snap, &e)) {
        snap_free(o, snap);
        pthread_mutex_lock(&o->mu);
        o->st.errors++;
        o->terr = e;
        pthread_mutex_unlock(&o->mu);
        return;
    }
    snap_free(o, o->served);
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
    void *snap = o->pending;
    o->pending = NULL;
    if (round && o->background) {
        o->want_round = true;
        pthread_cond_signal(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    if (round && !o->background) {
        snap_free(o, snap);
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
    void *snap = o->pending;
    o->pending = NULL;
    pthread_mutex_unlock(&o->mu);
    if (snap) swap_in(o, snap);
}

void sp_online_detach(sp_online *o) {
    if (!o->spec) return;
    sp_spec_set_observer(o->spec, NULL, NULL);
    sp_error e = {0};
    if (o->served) snap_serve(o, o->spec, o->hd ? (const void *)o->hlike : (const void *)o->like, &e); /* cannot fail: it served `like` before */
    o->spec = NULL;
}

sp_status sp_online_attach(sp_online *o, sp_spec *s, sp_error *err) {
    if (!o->serving) return sp_fail(err, SP_ERR_ARG, "online: the learner is not serving (sp_online_serve first)");
    if (o->spec == s) return SP_OK;
    sp_online_detach(o);
    if (o->served) {
        sp_status st = snap_serve(o, s, o->served, err);
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
    if (!o->hd) o->like = like;
    void *probe = NULL;
    sp_status st = snap_make(o, &probe, err);
    if (st) return st;
    snap_free(o, probe);
    if (s && !o->hd && sp_spec_draft_model(s) != like)
        return sp_fail(err, SP_ERR_ARG, "online: the speculation object does not draft with the given draft model");
    if (s && o->hd && sp_spec_eagle3(s) != o->hlike)
        return sp_fail(err, SP_ERR_ARG, "online: the speculation object does not draft with the learner's head");
    o->spec = s;
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
    void *snap = o->pending;
    o->pending = NULL;
    pthread_mutex_unlock(&o->mu);
    if (snap && o->serving) swap_in(o, snap);
    else snap_free(o, snap);
}

const sp_model *sp_online_model(const sp_online *o) {
    return o->hd ? NULL : o->served ? (const sp_model *)o->served : o->like;
}

const sp_eagle3 *sp_online_head(const sp_online *o) {
    return !o->hd ? NULL : o->served ? (const sp_eagle3 *)o->served : o->hlike;
}

sp_online_stats sp_online_get_stats(sp_online *o, sp_error *last_err) {
    pthread_mutex_lock(&o->mu);
    sp_online_stats st = o->st;
    st.observed = o->observed;
    st.buffered = o->count;
    if (last_err) *last_err = o->terr;
    pthread_mutex_unlock(&o->mu);
    return st;
}
