/* online: the replay buffer and update loop of online speculative decoding
 * (see sp_online.h). Examples are stored in a ring: window tokens (left-
 * padded with the first token when the context is shorter) and the target
 * row as top-k ids/probabilities plus the remaining mass. */
#include "sp_online.h"

#include <stdlib.h>
#include <string.h>

#include "sp_rng.h"
#include "sp_train.h"

struct sp_online {
    sp_online_params p;
    sp_tmodel *m;
    char *vocab_from;
    int32_t V;
    int32_t *tok;     /* [buffer][window] */
    int32_t *ids;     /* [buffer][topk] */
    float *probs;     /* [buffer][topk] */
    float *rest;      /* [buffer] */
    int64_t head, count, observed;
    sp_rng rng;
    /* batch scratch */
    int32_t *btok;           /* [batch][window] */
    sp_loss_target *targets; /* [batch][window] */
    int32_t *sel;            /* [V] scratch for top-k */
    int64_t steps_done;
};

sp_online_params sp_online_default_params(void) {
    sp_online_params p = {.topk = 16, .buffer = 4096, .window = 32, .batch = 16, .lr = 1e-3f,
                          .loss = {.kind = SP_LOSS_FKL}, .seed = 1};
    return p;
}

void sp_online_free(sp_online *o) {
    if (!o) return;
    sp_tmodel_free(o->m);
    free(o->vocab_from);
    free(o->tok), free(o->ids), free(o->probs), free(o->rest);
    free(o->btok), free(o->targets), free(o->sel);
    free(o);
}

sp_status sp_online_init(const char *draft_path, const sp_online_params *p, sp_online **out,
                         sp_error *err) {
    *out = NULL;
    if (p->topk < 1 || p->topk > 256 || p->buffer < 1 || p->buffer > (1 << 22) || p->window < 2 ||
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
    o->ids = malloc(B * K * sizeof *o->ids);
    o->probs = malloc(B * K * sizeof *o->probs);
    o->rest = malloc(B * sizeof *o->rest);
    o->btok = malloc((size_t)p->batch * W * sizeof *o->btok);
    o->targets = malloc((size_t)p->batch * W * sizeof *o->targets);
    o->sel = malloc((size_t)o->V * sizeof *o->sel);
    if (!o->vocab_from || !o->tok || !o->ids || !o->probs || !o->rest || !o->btok || !o->targets || !o->sel) {
        sp_online_free(o);
        return sp_fail(err, SP_ERR_NOMEM, "online: out of memory for a buffer of %d positions", p->buffer);
    }
    sp_rng_seed(&o->rng, p->seed);
    *out = o;
    return SP_OK;
}

int64_t sp_online_buffered(const sp_online *o) { return o->count; }
int64_t sp_online_observed(const sp_online *o) { return o->observed; }

void sp_online_observe(void *online, const int32_t *hist, int32_t first, const float *p, int32_t rows,
                       int32_t V) {
    sp_online *o = online;
    if (V != o->V || first < 1) return; /* a vocabulary the draft does not have: nothing to learn */
    const int32_t W = o->p.window, K = o->p.topk;
    for (int32_t j = 0; j < rows; j++) {
        const int32_t pos = first + j; /* predicts hist[pos] from hist[0..pos) */
        const float *row = p + (int64_t)j * V;
        const int64_t e = o->head;
        int32_t *t = o->tok + e * W;
        for (int32_t i = 0; i < W; i++) {
            int32_t src = pos - W + i;
            t[i] = hist[src < 0 ? 0 : src];
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

sp_status sp_online_update(sp_online *o, int32_t steps, double *mean_loss, sp_error *err) {
    if (mean_loss) *mean_loss = 0;
    if (o->count == 0 || steps <= 0) return SP_OK;
    const int32_t W = o->p.window, K = o->p.topk, B = o->p.batch;
    sp_adamw_params ap = sp_adamw_default_params();
    ap.lr = o->p.lr;
    ap.weight_decay = 0;
    double total = 0;
    for (int32_t s = 0; s < steps; s++) {
        for (int32_t b = 0; b < B; b++) {
            const int64_t e = (int64_t)sp_rng_below(&o->rng, (uint64_t)o->count);
            memcpy(o->btok + (int64_t)b * W, o->tok + e * W, (size_t)W * sizeof *o->btok);
            for (int32_t i = 0; i < W; i++) {
                sp_loss_target *tg = &o->targets[(int64_t)b * W + i];
                *tg = (sp_loss_target){.token = -1};
                if (i == W - 1) {
                    tg->k = K;
                    tg->ids = o->ids + e * K;
                    tg->probs = o->probs + e * K;
                    tg->rest = o->rest[e];
                }
            }
        }
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
