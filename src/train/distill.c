/* distill: pre-training and distillation loops over text (see sp_train.h). */
#include "sp_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "rng.h"
#include "sp_tokenizer.h"
#include "loss.h"
#include "train.h"

sp_distill_params sp_distill_default_params(void) {
    sp_distill_params p = {.loss = {.kind = SP_LOSS_CE, .beta = 0.5}, .steps = 100, .batch = 8,
                           .seq_len = 64, .accum = 1, .lr = 3e-3f, .lr_min = 3e-4f, .warmup = 10,
                           .adamw = sp_adamw_default_params(), .on_policy = 0,
                           .on_policy_refresh = 10, .topk = 0, .seed = 1, .vocab_from = NULL};
    return p;
}

sp_status sp_distill_tokenize(const sp_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                              int64_t *n, sp_error *err) {
    *ids = NULL;
    *n = 0;
    int64_t cap = (int64_t)len + 16, used = 0;
    int32_t *out = malloc((size_t)cap * sizeof(int32_t));
    if (!out) return sp_fail(err, SP_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
    const bool bos = sp_tokenizer_bos(tok) >= 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && (text[i] == '\n' || text[i] == '\r')) i++;
        size_t j = i;
        while (j < len && !(text[j] == '\n' && j + 1 < len && text[j + 1] == '\n')) j++;
        size_t e = j;
        while (e > i && (text[e - 1] == '\n' || text[e - 1] == ' ' || text[e - 1] == '\r')) e--;
        if (e > i) {
            int32_t got = 0;
            /* at most one token per byte, plus BOS */
            sp_status st = sp_tokenizer_encode(tok, text + i, e - i, bos, out + used,
                                               (int32_t)(cap - used), &got, err);
            if (st) {
                free(out);
                return st;
            }
            used += got;
        }
        i = j;
    }
    if (used < 2) {
        free(out);
        return sp_fail(err, SP_ERR_ARG, "training text has fewer than 2 tokens");
    }
    *ids = out;
    *n = used;
    return SP_OK;
}

/* Teacher rows for one sequence: dense softmax rows into p[T][V]. */
static sp_status teacher_rows(sp_ctx *tc, const int32_t *tok, int32_t T, float *p, int32_t V,
                              sp_error *err) {
    sp_status st = sp_ctx_truncate(tc, 0, err);
    if (st) return st;
    sp_batch b = {.tokens = tok, .n = T, .logits_all = true};
    st = sp_forward(tc, &b, p, err);
    if (st) return st;
    for (int32_t t = 0; t < T; t++) {
        float *r = p + (int64_t)t * V;
        float mx = r[0];
        for (int32_t i = 1; i < V; i++) mx = r[i] > mx ? r[i] : mx;
        double s = 0;
        for (int32_t i = 0; i < V; i++) s += (r[i] = expf(r[i] - mx));
        for (int32_t i = 0; i < V; i++) r[i] = (float)(r[i] / s);
    }
    return SP_OK;
}

/* A sampling copy of the student (inference engine) via a temporary GGUF. */
typedef struct sampler_copy {
    sp_model *m;
    sp_ctx *c;
    char path[256];
} sampler_copy;

static void copy_free(sampler_copy *s) {
    sp_ctx_free(s->c);
    sp_model_free(s->m);
    s->c = NULL;
    s->m = NULL;
}

static sp_status copy_refresh(sampler_copy *s, const sp_tmodel *m, const char *vocab_from,
                              int32_t n_ctx, sp_error *err) {
    copy_free(s);
    const char *td = getenv("TMPDIR");
    snprintf(s->path, sizeof s->path, "%s/specula-student-XXXXXX", td && *td ? td : "/tmp");
    int fd = mkstemp(s->path);
    if (fd < 0) return sp_fail(err, SP_ERR_IO, "cannot make a temporary file in %s", td && *td ? td : "/tmp");
    close(fd);
    sp_status st = sp_tmodel_save(m, s->path, SP_GGML_F32, vocab_from, err);
    if (!st) st = sp_model_load(s->path, NULL, &s->m, err);
    unlink(s->path);
    if (st) return st;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.max_batch = n_ctx;
    return sp_ctx_init(s->m, &cp, &s->c, err);
}

/* Replaces tok[h..T) by tokens sampled from the copy at temperature 1. */
static sp_status sample_tail(sampler_copy *s, int32_t *tok, int32_t h, int32_t T, int32_t V,
                             float *logits, sp_rng *rng, sp_error *err) {
    sp_status st = sp_ctx_truncate(s->c, 0, err);
    sp_batch b = {.tokens = tok, .n = h};
    if (!st) st = sp_forward(s->c, &b, logits, err);
    for (int32_t t = h; t < T && !st; t++) {
        float mx = logits[0];
        for (int32_t i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
        double sum = 0;
        for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
        double u = sp_rng_uniform(rng) * sum, c = 0;
        int32_t pick = V - 1;
        for (int32_t i = 0; i < V; i++) {
            c += exp((double)logits[i] - mx);
            if (u < c) {
                pick = i;
                break;
            }
        }
        tok[t] = pick;
        if (t + 1 < T) {
            sp_batch one = {.tokens = &tok[t], .n = 1};
            st = sp_forward(s->c, &one, logits, err);
        }
    }
    return st;
}

sp_status sp_distill_run(sp_tmodel *student, const sp_model *teacher, const int32_t *data, int64_t n,
                         const sp_distill_params *p, sp_distill_cb cb, void *ud, sp_error *err) {
    const sp_train_shape *sh = sp_tmodel_shape(student);
    const int32_t V = sh->n_vocab, B = p->batch, T = p->seq_len;
    const bool ce = p->loss.kind == SP_LOSS_CE;
    if (p->steps < 1 || B < 1 || T < 2 || p->accum < 1 || (int64_t)B * T > (1 << 22))
        return sp_fail(err, SP_ERR_ARG, "steps %lld, batch %d, seq_len %d, accum %d: need steps, batch, accum >= 1, seq_len >= 2",
                       (long long)p->steps, B, T, p->accum);
    if (!(p->on_policy >= 0 && p->on_policy <= 1))
        return sp_fail(err, SP_ERR_ARG, "on_policy must be a fraction in [0, 1], got %g", p->on_policy);
    if (n < T + 2) return sp_fail(err, SP_ERR_ARG, "training text of %lld tokens is shorter than a sequence of %d", (long long)n, T + 2);
    if (!ce && !teacher) return sp_fail(err, SP_ERR_ARG, "distillation needs a teacher model");
    if (!ce && sp_model_cfg(teacher)->n_vocab != V)
        return sp_fail(err, SP_ERR_ARG, "teacher vocabulary %d differs from the student's %d",
                       sp_model_cfg(teacher)->n_vocab, V);
    if (!ce && p->on_policy > 0 && !p->vocab_from)
        return sp_fail(err, SP_ERR_ARG, "on-policy distillation needs the vocabulary file (vocab_from)");
    for (int64_t i = 0; i < n; i++)
        if (data[i] < 0 || data[i] >= V) return sp_fail(err, SP_ERR_ARG, "token %d of the text is outside the vocabulary", data[i]);
    const int64_t BT = (int64_t)B * T;
    int32_t *tok = malloc((size_t)BT * sizeof(int32_t));
    sp_loss_target *tg = calloc((size_t)BT, sizeof *tg);
    float *rows = ce ? NULL : malloc((size_t)BT * (size_t)V * sizeof(float));
    const int32_t k = p->topk > 0 && p->topk < V ? p->topk : 0;
    int32_t *ids = k ? malloc((size_t)BT * (size_t)k * sizeof(int32_t)) : NULL;
    float *probs = k ? malloc((size_t)BT * (size_t)k * sizeof(float)) : NULL;
    float *lg = malloc((size_t)V * sizeof(float));
    sp_ctx *tc = NULL;
    sampler_copy sc = {0};
    sp_status st = SP_OK;
    if (!tok || !tg || (!ce && !rows) || (k && (!ids || !probs)) || !lg)
        st = sp_fail(err, SP_ERR_NOMEM, "out of memory for a batch of %d x %d", B, T);
    if (!st && !ce) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = T;
        cp.max_batch = T;
        st = sp_ctx_init(teacher, &cp, &tc, err);
    }
    sp_rng rng;
    sp_rng_seed(&rng, p->seed ^ 0x5deece66dULL);
    sp_adamw_params ap = p->adamw;
    const double t0 = sp_now();
    for (int64_t step = 0; step < p->steps && !st; step++) {
        if (!ce && p->on_policy > 0 && step % (p->on_policy_refresh > 0 ? p->on_policy_refresh : 1) == 0)
            st = copy_refresh(&sc, student, p->vocab_from, T, err);
        sp_tmodel_zero_grad(student);
        double loss_sum = 0;
        int64_t loss_n = 0;
        for (int32_t a = 0; a < p->accum && !st; a++) {
            for (int32_t b = 0; b < B && !st; b++) {
                /* ce windows are T+1 long: inputs and next tokens */
                int64_t start = (int64_t)sp_rng_below(&rng, (uint64_t)(n - T - 1));
                memcpy(tok + (int64_t)b * T, data + start, (size_t)T * sizeof(int32_t));
                if (ce) {
                    for (int32_t t = 0; t < T; t++)
                        tg[(int64_t)b * T + t] = (sp_loss_target){.token = data[start + t + 1]};
                    continue;
                }
                if (p->on_policy > 0 && sp_rng_uniform(&rng) < p->on_policy)
                    st = sample_tail(&sc, tok + (int64_t)b * T, T / 2, T, V, lg, &rng, err);
                if (!st) st = teacher_rows(tc, tok + (int64_t)b * T, T, rows + (int64_t)b * T * V, V, err);
                for (int32_t t = 0; t < T && !st; t++) {
                    const int64_t r = (int64_t)b * T + t;
                    if (k) {
                        float rest;
                        int32_t kk = sp_loss_topk(rows + r * V, V, k, ids + r * k, probs + r * k, &rest);
                        tg[r] = (sp_loss_target){.token = -1, .k = kk, .ids = ids + r * k, .probs = probs + r * k, .rest = rest};
                    } else {
                        tg[r] = (sp_loss_target){.token = -1, .p = rows + r * V};
                    }
                }
            }
            if (st) break;
            st = sp_tmodel_forward(student, tok, B, T, err);
            if (st) break;
            int64_t used;
            loss_sum += sp_tmodel_loss(student, &p->loss, tg, 1.0 / ((double)BT * p->accum), &used);
            loss_n += used;
            sp_tmodel_backward(student);
        }
        if (st) break;
        ap.lr = sp_train_lr(step, p->steps, p->warmup, p->lr, p->lr_min);
        float gn = sp_tmodel_step(student, &ap);
        if (cb) {
            double el = sp_now() - t0;
            sp_distill_progress pr = {.step = step + 1, .steps = p->steps, .loss = loss_sum / (double)loss_n,
                                      .lr = ap.lr, .grad_norm = gn, .elapsed = el,
                                      .tokens_per_s = el > 0 ? (double)(step + 1) * BT * p->accum / el : 0};
            cb(&pr, ud);
        }
    }
    copy_free(&sc);
    sp_ctx_free(tc);
    free(tok);
    free(tg);
    free(rows);
    free(ids);
    free(probs);
    free(lg);
    return st;
}

sp_status sp_distill_eval(sp_tmodel *student, const sp_model *teacher, const int32_t *data, int64_t n,
                          const sp_loss *loss, int32_t seq_len, int32_t windows, double *mean,
                          sp_error *err) {
    const int32_t T = seq_len, V = sp_tmodel_shape(student)->n_vocab;
    const bool ce = loss->kind == SP_LOSS_CE;
    if (T < 2 || windows < 1 || n < T + 2) return sp_fail(err, SP_ERR_ARG, "evaluation text too short for %d windows of %d tokens", windows, T);
    if (!ce && (!teacher || sp_model_cfg(teacher)->n_vocab != V))
        return sp_fail(err, SP_ERR_ARG, "evaluation needs a teacher with the student's vocabulary");
    sp_loss_target *tg = calloc((size_t)T, sizeof *tg);
    float *rows = ce ? NULL : malloc((size_t)T * (size_t)V * sizeof(float));
    sp_ctx *tc = NULL;
    sp_status st = !tg || (!ce && !rows) ? sp_fail(err, SP_ERR_NOMEM, "out of memory") : SP_OK;
    if (!st && !ce) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = T;
        cp.max_batch = T;
        st = sp_ctx_init(teacher, &cp, &tc, err);
    }
    double sum = 0;
    int64_t cnt = 0;
    for (int32_t w = 0; w < windows && !st; w++) {
        int64_t start = (n - T - 1) * w / windows;
        const int32_t *tok = data + start;
        if (ce)
            for (int32_t t = 0; t < T; t++) tg[t] = (sp_loss_target){.token = tok[t + 1]};
        else {
            st = teacher_rows(tc, tok, T, rows, V, err);
            for (int32_t t = 0; t < T; t++) tg[t] = (sp_loss_target){.token = -1, .p = rows + (int64_t)t * V};
        }
        if (!st) st = sp_tmodel_forward(student, tok, 1, T, err);
        if (st) break;
        int64_t used;
        sum += sp_tmodel_loss(student, loss, tg, 0.0, &used);
        cnt += used;
    }
    sp_ctx_free(tc);
    free(tg);
    free(rows);
    if (!st) *mean = sum / (double)cnt;
    return st;
}
