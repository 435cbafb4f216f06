/* head: the EAGLE-3 head trainer (head.h): forward and backward of the
 * unrolled training-time test over one window, AdamW, and the eagle3 GGUF
 * writer. Scalar loops: heads are one layer wide. */
#include "head.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eagle3.h"
#include "gguf_write.h"
#include "quant.h"
#include "train.h"
#include "clock.h"
#include "sp_train.h"
#include "sp_model.h"
#include "rng.h"

/* P_ENORM (norm_before_fc only) is last: without it the head has P_COUNT - 1 tensors */
enum { P_FC, P_ANORM, P_HNORM, P_WQ, P_WK, P_WV, P_WO, P_FNORM, P_W1, P_W3, P_W2, P_ONORM, P_OUT, P_ENORM, P_COUNT };
static const char *const pname[P_COUNT] = {
    "fc.weight", "blk.0.attn_norm.weight", "blk.0.attn_norm_2.weight", "blk.0.attn_q.weight",
    "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_norm.weight",
    "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "output_norm.weight",
    "output.weight", "enc.output_norm.weight"};

enum { MAX_K = 8 };

struct sp_thead {
    sp_thead_shape s;
    int32_t hd, qd, kvd;
    int64_t rows[P_COUNT], cols[P_COUNT], off[P_COUNT], n_params;
    float *w, *g, *m1, *m2; /* values, gradients, Adam moments */
    int64_t t_step;
    float *embd;            /* [V][dim], frozen */
    int32_t Vd;             /* the draft vocabulary: output rows */
    int32_t *d2t;           /* [Vd] target ids (ascending) */
    float *pd;              /* [Vd] scratch: a target row restricted to the draft vocabulary */
    float *a_fe, *a_rs0;    /* norm_before_fc: the normed taps [T][3 tgt_dim] and their rms */
    /* activations, per step k: [T][...] */
    int32_t cap_T;
    float *a_g, *a_cat, *a_rs1, *a_rs2, *a_q, *a_k, *a_v, *a_att, *a_ao, *a_h, *a_fn, *a_rs3, *a_h1, *a_h3,
        *a_sw, *a_o, *a_on, *a_rs4, *a_p; /* a_p: attention probs [K][T][H][K+T] */
    float *a_logit, *a_dlogit;
};

static float *P(const sp_thead *h, int i) { return h->w + h->off[i]; }
static float *G(const sp_thead *h, int i) { return h->g + h->off[i]; }

void sp_thead_free(sp_thead *h) {
    if (!h) return;
    free(h->w);
    free(h->g);
    free(h->m1);
    free(h->m2);
    free(h->embd);
    free(h->d2t);
    free(h->pd);
    free(h->a_fe);
    free(h->a_rs0);
    float **acts[] = {&h->a_g, &h->a_cat, &h->a_rs1, &h->a_rs2, &h->a_q, &h->a_k, &h->a_v, &h->a_att,
                      &h->a_ao, &h->a_h, &h->a_fn, &h->a_rs3, &h->a_h1, &h->a_h3, &h->a_sw, &h->a_o,
                      &h->a_on, &h->a_rs4, &h->a_p, &h->a_logit, &h->a_dlogit};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) free(*acts[i]);
    free(h);
}

int32_t sp_thead_n_tensors(const sp_thead *h) { return h->s.norm_before_fc ? P_COUNT : P_COUNT - 1; }

const char *sp_thead_tensor(sp_thead *h, int32_t i, int64_t *n, float **value, float **grad) {
    SP_ASSERT(i >= 0 && i < sp_thead_n_tensors(h));
    *n = h->rows[i] * h->cols[i];
    *value = P(h, i);
    *grad = G(h, i);
    return pname[i];
}

sp_status sp_thead_init(const sp_thead_shape *s, const float *embd, const int32_t *d2t, uint64_t seed,
                        sp_thead **out, sp_error *err) {
    *out = NULL;
    const int32_t Vd = s->n_draft > 0 ? s->n_draft : s->n_vocab;
    if (s->dim < 2 || s->n_heads < 1 || s->n_kv_heads < 1 || s->n_heads % s->n_kv_heads ||
        s->dim % s->n_heads || (s->dim / s->n_heads) % 2 || s->ffn_dim < 1 || s->tgt_dim < 1 || s->n_vocab < 2 ||
        Vd < 2 || Vd > s->n_vocab || (Vd < s->n_vocab && !d2t))
        return sp_fail(err, SP_ERR_ARG, "train-head: bad head shape (dim %d, heads %d/%d, ffn %d, vocabulary %d of %d)",
                       s->dim, s->n_heads, s->n_kv_heads, s->ffn_dim, Vd, s->n_vocab);
    for (int32_t i = 0; d2t && i < Vd; i++)
        if (d2t[i] < 0 || d2t[i] >= s->n_vocab || (i > 0 && d2t[i] <= d2t[i - 1]))
            return sp_fail(err, SP_ERR_ARG, "train-head: the draft vocabulary must be ascending target ids");
    sp_thead *h = calloc(1, sizeof *h);
    if (!h) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    h->s = *s;
    h->hd = s->dim / s->n_heads;
    h->qd = s->dim;
    h->kvd = s->n_kv_heads * h->hd;
    const int64_t d = s->dim, r[P_COUNT][2] = {
        {d, 3 * (int64_t)s->tgt_dim}, {1, d}, {1, d}, {h->qd, 2 * d}, {h->kvd, 2 * d}, {h->kvd, 2 * d},
        {d, h->qd}, {1, d}, {s->ffn_dim, d}, {s->ffn_dim, d}, {d, s->ffn_dim}, {1, d}, {Vd, d},
        {1, s->norm_before_fc ? 3 * (int64_t)s->tgt_dim : 0}};
    for (int i = 0; i < P_COUNT; i++) {
        h->rows[i] = r[i][0];
        h->cols[i] = r[i][1];
        h->off[i] = h->n_params;
        h->n_params += r[i][0] * r[i][1];
    }
    h->w = calloc((size_t)h->n_params, sizeof(float));
    h->g = calloc((size_t)h->n_params, sizeof(float));
    h->m1 = calloc((size_t)h->n_params, sizeof(float));
    h->m2 = calloc((size_t)h->n_params, sizeof(float));
    h->embd = malloc((size_t)s->n_vocab * (size_t)d * sizeof(float));
    h->Vd = Vd;
    h->d2t = malloc((size_t)Vd * sizeof *h->d2t);
    h->pd = malloc((size_t)Vd * sizeof *h->pd);
    if (!h->w || !h->g || !h->m1 || !h->m2 || !h->embd || !h->d2t || !h->pd) {
        sp_thead_free(h);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for the head");
    }
    memcpy(h->embd, embd, (size_t)s->n_vocab * (size_t)d * sizeof(float));
    for (int32_t i = 0; i < Vd; i++) h->d2t[i] = d2t ? d2t[i] : i;
    sp_rng rng;
    sp_rng_seed(&rng, seed);
    for (int i = 0; i < P_COUNT; i++) {
        float *w = P(h, i);
        const int64_t n = h->rows[i] * h->cols[i];
        if (h->rows[i] == 1 || n == 0) {
            for (int64_t j = 0; j < n; j++) w[j] = 1.0f;
            continue;
        }
        const float sd = 1.0f / sqrtf((float)h->cols[i]);
        for (int64_t j = 0; j < n; j++) w[j] = sd * (float)sp_rng_normal(&rng);
    }
    *out = h;
    return SP_OK;
}

const float *sp_thead_logits(const sp_thead *h, int32_t T, int32_t k, int32_t s) {
    return h->a_logit + ((int64_t)(k - 1) * T + s) * h->Vd;
}

void sp_thead_zero_grad(sp_thead *h) { memset(h->g, 0, (size_t)h->n_params * sizeof(float)); }

static sp_status ensure(sp_thead *h, int32_t T, int32_t K, sp_error *err) {
    if (T <= h->cap_T) return SP_OK;
    const size_t n = (size_t)MAX_K * (size_t)T, d = (size_t)h->s.dim, f = (size_t)h->s.ffn_dim;
    const size_t V = (size_t)h->Vd, H = (size_t)h->s.n_heads;
    struct { float **p; size_t w; } a[] = {
        {&h->a_g, d}, {&h->a_cat, 2 * d}, {&h->a_rs1, 1}, {&h->a_rs2, 1}, {&h->a_q, (size_t)h->qd},
        {&h->a_k, (size_t)h->kvd}, {&h->a_v, (size_t)h->kvd}, {&h->a_att, (size_t)h->qd}, {&h->a_ao, d},
        {&h->a_h, d}, {&h->a_fn, d}, {&h->a_rs3, 1}, {&h->a_h1, f}, {&h->a_h3, f}, {&h->a_sw, f},
        {&h->a_o, d}, {&h->a_on, d}, {&h->a_rs4, 1}, {&h->a_p, H * (size_t)(T + MAX_K)},
        {&h->a_logit, V}, {&h->a_dlogit, V}};
    (void)K;
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        free(*a[i].p);
        *a[i].p = calloc(n * a[i].w, sizeof(float));
        if (!*a[i].p) return sp_fail(err, SP_ERR_NOMEM, "out of memory for the head's activations");
    }
    if (h->s.norm_before_fc) {
        free(h->a_fe);
        free(h->a_rs0);
        h->a_fe = malloc((size_t)T * 3 * (size_t)h->s.tgt_dim * sizeof(float));
        h->a_rs0 = malloc((size_t)T * sizeof(float));
        if (!h->a_fe || !h->a_rs0) return sp_fail(err, SP_ERR_NOMEM, "out of memory for the head's activations");
    }
    h->cap_T = T;
    return SP_OK;
}

/* y[O] = W[O][I] x[I] */
static void mv(float *y, const float *W, const float *x, int64_t O, int64_t I) {
    for (int64_t o = 0; o < O; o++) {
        const float *wr = W + o * I;
        float acc = 0;
        for (int64_t i = 0; i < I; i++) acc += wr[i] * x[i];
        y[o] = acc;
    }
}

/* dx[I] += W^T dy, dW += dy x^T */
static void mv_back(float *dx, float *dW, const float *dy, const float *W, const float *x, int64_t O, int64_t I) {
    for (int64_t o = 0; o < O; o++) {
        const float *wr = W + o * I;
        float *dwr = dW + o * I;
        const float g = dy[o];
        if (g == 0) continue;
        if (dx)
            for (int64_t i = 0; i < I; i++) dx[i] += g * wr[i];
        for (int64_t i = 0; i < I; i++) dwr[i] += g * x[i];
    }
}

static float rmsnorm(float *y, const float *x, const float *w, int64_t C, float eps) {
    float ss = 0;
    for (int64_t i = 0; i < C; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    for (int64_t i = 0; i < C; i++) y[i] = w[i] * x[i] * r;
    return r;
}

static void rmsnorm_back(float *dx, float *dw, const float *dy, const float *x, const float *w, float r, int64_t C) {
    double dot = 0;
    for (int64_t i = 0; i < C; i++) dot += (double)w[i] * dy[i] * x[i];
    const float c2 = (float)(dot * r * r * r / (double)C);
    for (int64_t i = 0; i < C; i++) {
        if (dx) dx[i] += r * w[i] * dy[i] - c2 * x[i];
        dw[i] += dy[i] * x[i] * r;
    }
}

/* Adjacent-pair RoPE (llama's) of n_heads heads at position pos; inverse
 * when sign < 0. */
static void rope(float *x, int32_t n_heads, int32_t hd, int32_t pos, float theta, float sign) {
    for (int32_t i = 0; i < hd / 2; i++) {
        const float freq = powf(theta, -2.0f * (float)i / (float)hd);
        const float a = (float)pos * freq, c = cosf(a), s = sign * sinf(a);
        for (int32_t hh = 0; hh < n_heads; hh++) {
            float *v = x + hh * hd + 2 * i;
            const float x0 = v[0], x1 = v[1];
            v[0] = x0 * c - x1 * s;
            v[1] = x0 * s + x1 * c;
        }
    }
}

/* Key slot j of query (k, s): j <= s are step-1 rows j; j = s + m - 1 for
 * m = 2..k are step m's rows s. Row index into [K][T] arrays. */
static int64_t key_row(int32_t T, int32_t s, int32_t j) {
    return j <= s ? j : (int64_t)(j - s) * T + s;
}

sp_status sp_thead_run(sp_thead *h, const int32_t *tokens, const float *feat, const float *p, int32_t T,
                       int32_t K, const sp_loss *loss, bool backward, float grad_scale, double *mean,
                       sp_error *err) {
    sp_loss_target *rows = calloc((size_t)(T > 0 ? T : 1), sizeof *rows);
    if (!rows) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    for (int32_t t = 0; t < T; t++) rows[t].p = p + (int64_t)t * h->s.n_vocab;
    sp_status st = sp_thead_run_rows(h, tokens, feat, rows, T, K, loss, backward, grad_scale, mean, err);
    free(rows);
    return st;
}

sp_status sp_thead_run_rows(sp_thead *h, const int32_t *tokens, const float *feat, const sp_loss_target *rows,
                            int32_t T, int32_t K, const sp_loss *loss, bool backward, float grad_scale,
                            double *mean, sp_error *err) {
    if (K < 1 || K > MAX_K || T < K + 2)
        return sp_fail(err, SP_ERR_ARG, "train-head: window of %d tokens, %d unrolled steps (1..%d)", T, K, MAX_K);
    sp_status st = ensure(h, T, K, err);
    if (st) return st;
    const sp_thead_shape *s = &h->s;
    const int64_t d = s->dim, f = s->ffn_dim, V = h->Vd, td3 = 3 * (int64_t)s->tgt_dim;
    const int32_t H = s->n_heads, hd = h->hd, grp = s->n_heads / s->n_kv_heads, KW = T + MAX_K;
    const int64_t qd = h->qd, kvd = h->kvd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int32_t t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= s->n_vocab)
            return sp_fail(err, SP_ERR_ARG, "train-head: token %d out of range", tokens[t]);
    if (V < s->n_vocab)
        for (int32_t t = 0; t < T; t++)
            if (!rows[t].p && loss->kind != SP_LOSS_CE)
                return sp_fail(err, SP_ERR_ARG, "train-head: a draft vocabulary needs dense target rows");
    double *scratch = malloc((size_t)(2 * V) * sizeof(double));
    if (!scratch) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    int64_t n_used = 0;
    for (int32_t k = 1; k <= K; k++) n_used += T - k > 0 ? T - k : 0;
    double total = 0;
    int64_t n_skip = 0; /* ce: next tokens outside the draft vocabulary */
    /* ---- forward, step by step (step k reads keys of steps <= k) */
    for (int32_t k = 1; k <= K; k++) {
        const int32_t n = T - k;
        for (int32_t sl = 0; sl < n; sl++) {
            const int64_t r = (int64_t)(k - 1) * T + sl;
            float *g = h->a_g + r * d, *cat = h->a_cat + r * 2 * d;
            if (k == 1 && s->norm_before_fc) {
                float *fe = h->a_fe + (int64_t)sl * td3;
                h->a_rs0[sl] = rmsnorm(fe, feat + (int64_t)sl * td3, P(h, P_ENORM), td3, s->eps);
                mv(g, P(h, P_FC), fe, d, td3);
            } else if (k == 1) mv(g, P(h, P_FC), feat + (int64_t)sl * td3, d, td3);
            else memcpy(g, h->a_o + ((int64_t)(k - 2) * T + sl) * d, (size_t)d * sizeof(float));
            h->a_rs1[r] = rmsnorm(cat, h->embd + (int64_t)tokens[sl + k] * d, P(h, P_ANORM), d, s->eps);
            h->a_rs2[r] = rmsnorm(cat + d, g, P(h, P_HNORM), d, s->eps);
            float *q = h->a_q + r * qd, *kk = h->a_k + r * kvd, *vv = h->a_v + r * kvd;
            mv(q, P(h, P_WQ), cat, qd, 2 * d);
            mv(kk, P(h, P_WK), cat, kvd, 2 * d);
            mv(vv, P(h, P_WV), cat, kvd, 2 * d);
            rope(q, H, hd, sl + k - 1, s->rope_theta, 1);
            rope(kk, s->n_kv_heads, hd, sl + k - 1, s->rope_theta, 1);
        }
        for (int32_t sl = 0; sl < n; sl++) {
            const int64_t r = (int64_t)(k - 1) * T + sl;
            const int32_t nk = sl + k; /* key slots 0 .. sl + k - 1 */
            float *att = h->a_att + r * qd;
            for (int32_t hh = 0; hh < H; hh++) {
                const float *q = h->a_q + r * qd + hh * hd;
                float *pr = h->a_p + (r * H + hh) * KW, mx = -INFINITY;
                const int64_t ko = (int64_t)(hh / grp) * hd;
                for (int32_t j = 0; j < nk; j++) {
                    const float *kr = h->a_k + key_row(T, sl, j) * kvd + ko;
                    float dot = 0;
                    for (int32_t i = 0; i < hd; i++) dot += q[i] * kr[i];
                    pr[j] = dot * scale;
                    if (pr[j] > mx) mx = pr[j];
                }
                float sum = 0;
                for (int32_t j = 0; j < nk; j++) sum += pr[j] = expf(pr[j] - mx);
                for (int32_t j = 0; j < nk; j++) pr[j] /= sum;
                float *o = att + hh * hd;
                memset(o, 0, (size_t)hd * sizeof(float));
                for (int32_t j = 0; j < nk; j++) {
                    const float *vr = h->a_v + key_row(T, sl, j) * kvd + ko;
                    for (int32_t i = 0; i < hd; i++) o[i] += pr[j] * vr[i];
                }
            }
            float *ao = h->a_ao + r * d, *hr = h->a_h + r * d, *fn = h->a_fn + r * d;
            mv(ao, P(h, P_WO), att, d, qd);
            const float *g = h->a_g + r * d;
            for (int64_t i = 0; i < d; i++) hr[i] = g[i] + ao[i];
            h->a_rs3[r] = rmsnorm(fn, hr, P(h, P_FNORM), d, s->eps);
            float *h1 = h->a_h1 + r * f, *h3 = h->a_h3 + r * f, *sw = h->a_sw + r * f;
            mv(h1, P(h, P_W1), fn, f, d);
            mv(h3, P(h, P_W3), fn, f, d);
            for (int64_t i = 0; i < f; i++) sw[i] = h1[i] / (1.0f + expf(-h1[i])) * h3[i];
            float *o = h->a_o + r * d, *on = h->a_on + r * d;
            mv(o, P(h, P_W2), sw, d, f);
            for (int64_t i = 0; i < d; i++) o[i] += hr[i];
            h->a_rs4[r] = rmsnorm(on, o, P(h, P_ONORM), d, s->eps);
            float *lg = h->a_logit + r * V, *dl = h->a_dlogit + r * V;
            mv(lg, P(h, P_OUT), on, V, d);
            if (loss->kind == SP_LOSS_CE && sl + k + 1 >= T) { /* no next token in the window */
                memset(dl, 0, (size_t)V * sizeof(float));
                continue;
            }
            sp_loss_target tg = rows[sl + k];
            if (loss->kind == SP_LOSS_CE)
                tg = (sp_loss_target){.token = tokens[sl + k + 1 < T ? sl + k + 1 : T - 1]};
            if (V < s->n_vocab) { /* the target's row restricted to the draft vocabulary, renormalised */
                if (loss->kind == SP_LOSS_CE) {
                    int32_t lo = 0, hi = (int32_t)V; /* the draft id of the token, or skip it */
                    while (lo < hi) {
                        const int32_t mid = (lo + hi) / 2;
                        if (h->d2t[mid] < tg.token) lo = mid + 1;
                        else hi = mid;
                    }
                    if (lo == V || h->d2t[lo] != tg.token) {
                        memset(dl, 0, (size_t)V * sizeof(float));
                        n_skip++;
                        continue;
                    }
                    tg.token = lo;
                } else {
                    double z = 0;
                    for (int64_t i = 0; i < V; i++) z += h->pd[i] = tg.p[h->d2t[i]];
                    for (int64_t i = 0; i < V; i++) h->pd[i] = z > 0 ? (float)(h->pd[i] / z) : 1.0f / (float)V;
                    tg.p = h->pd;
                }
            }
            total += sp_loss_row(loss, &tg, lg, (int32_t)V, scratch, backward ? dl : NULL);
        }
    }
    free(scratch);
    if (loss->kind == SP_LOSS_CE) n_used -= K; /* the last chain of each step has no next token */
    n_used -= n_skip;
    if (n_used < 1) return sp_fail(err, SP_ERR_ARG, "train-head: window of %d tokens scores nothing", T);
    *mean = total / (double)n_used;
    if (!backward) return SP_OK;

    /* ---- backward, steps in reverse: step k's keys collect their gradients
     * from steps >= k before step k's projections run backward */
    const float gs = grad_scale / (float)n_used;
    const size_t rowsK = (size_t)MAX_K * (size_t)T;
    float *dq = calloc(rowsK * (size_t)qd, sizeof(float)), *dk = calloc(rowsK * (size_t)kvd, sizeof(float));
    float *dv = calloc(rowsK * (size_t)kvd, sizeof(float)), *dgo = calloc(rowsK * (size_t)d, sizeof(float));
    float *tmp = malloc((size_t)(2 * d + 2 * f + qd + 4 * d + KW) * sizeof(float));
    if (!dq || !dk || !dv || !dgo || !tmp) {
        free(dq), free(dk), free(dv), free(dgo), free(tmp);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for the head's backward pass");
    }
    float *don = tmp, *dsw = don + d, *dh1 = dsw + f, *dfn = dh1 + f, *dh = dfn + d, *datt = dh + d,
          *dcat = datt + qd, *dpr = dcat + 2 * d;
    (void)dpr;
    for (int32_t k = K; k >= 1; k--) {
        const int32_t n = T - k;
        for (int32_t sl = n - 1; sl >= 0; sl--) {
            const int64_t r = (int64_t)(k - 1) * T + sl;
            float *dl = h->a_dlogit + r * V;
            for (int64_t i = 0; i < V; i++) dl[i] *= gs;
            /* do = from the logits + the next step's g (dgo[r]) */
            float *dor = dgo + r * d;
            memset(don, 0, (size_t)d * sizeof(float));
            mv_back(don, G(h, P_OUT), dl, P(h, P_OUT), h->a_on + r * d, V, d);
            rmsnorm_back(dor, G(h, P_ONORM), don, h->a_o + r * d, P(h, P_ONORM), h->a_rs4[r], d);
            /* ffn */
            memset(dsw, 0, (size_t)f * sizeof(float));
            mv_back(dsw, G(h, P_W2), dor, P(h, P_W2), h->a_sw + r * f, d, f);
            const float *h1 = h->a_h1 + r * f, *h3 = h->a_h3 + r * f;
            float *dh3 = dh1 + 0; /* reuse below */
            (void)dh3;
            float *du = malloc((size_t)f * sizeof(float));
            if (!du) {
                free(dq), free(dk), free(dv), free(dgo), free(tmp);
                return sp_fail(err, SP_ERR_NOMEM, "out of memory");
            }
            for (int64_t i = 0; i < f; i++) {
                const float sg = 1.0f / (1.0f + expf(-h1[i])), silu = h1[i] * sg;
                du[i] = dsw[i] * silu;
                dh1[i] = dsw[i] * h3[i] * (sg + silu * (1.0f - sg));
            }
            memset(dfn, 0, (size_t)d * sizeof(float));
            mv_back(dfn, G(h, P_W1), dh1, P(h, P_W1), h->a_fn + r * d, f, d);
            mv_back(dfn, G(h, P_W3), du, P(h, P_W3), h->a_fn + r * d, f, d);
            free(du);
            memcpy(dh, dor, (size_t)d * sizeof(float));
            rmsnorm_back(dh, G(h, P_FNORM), dfn, h->a_h + r * d, P(h, P_FNORM), h->a_rs3[r], d);
            /* residual: dg += dh; attention output */
            float *dg = dor; /* reuse: dor is consumed; dg accumulates below */
            memset(datt, 0, (size_t)qd * sizeof(float));
            mv_back(datt, G(h, P_WO), dh, P(h, P_WO), h->a_att + r * qd, d, qd);
            memcpy(dg, dh, (size_t)d * sizeof(float));
            const int32_t nk = sl + k;
            for (int32_t hh = 0; hh < H; hh++) {
                const float *pr = h->a_p + (r * H + hh) * KW, *q = h->a_q + r * qd + hh * hd;
                const float *dout = datt + hh * hd;
                const int64_t ko = (int64_t)(hh / grp) * hd;
                float dsum = 0;
                for (int32_t j = 0; j < nk; j++) {
                    const int64_t kr = key_row(T, sl, j);
                    const float *vr = h->a_v + kr * kvd + ko;
                    float dp = 0;
                    for (int32_t i = 0; i < hd; i++) {
                        dp += dout[i] * vr[i];
                        dv[kr * kvd + ko + i] += pr[j] * dout[i];
                    }
                    dpr[j] = dp;
                    dsum += dp * pr[j];
                }
                for (int32_t j = 0; j < nk; j++) {
                    const int64_t kr = key_row(T, sl, j);
                    const float ds = pr[j] * (dpr[j] - dsum) * scale;
                    const float *kv = h->a_k + kr * kvd + ko;
                    for (int32_t i = 0; i < hd; i++) {
                        dq[r * qd + hh * hd + i] += ds * kv[i];
                        dk[kr * kvd + ko + i] += ds * q[i];
                    }
                }
            }
        }
        /* this step's projections: its keys are complete now */
        for (int32_t sl = n - 1; sl >= 0; sl--) {
            const int64_t r = (int64_t)(k - 1) * T + sl;
            float *dqr = dq + r * qd, *dkr = dk + r * kvd, *dvr = dv + r * kvd, *dg = dgo + r * d;
            rope(dqr, H, hd, sl + k - 1, s->rope_theta, -1);
            rope(dkr, s->n_kv_heads, hd, sl + k - 1, s->rope_theta, -1);
            const float *cat = h->a_cat + r * 2 * d;
            memset(dcat, 0, (size_t)(2 * d) * sizeof(float));
            mv_back(dcat, G(h, P_WQ), dqr, P(h, P_WQ), cat, qd, 2 * d);
            mv_back(dcat, G(h, P_WK), dkr, P(h, P_WK), cat, kvd, 2 * d);
            mv_back(dcat, G(h, P_WV), dvr, P(h, P_WV), cat, kvd, 2 * d);
            rmsnorm_back(NULL, G(h, P_ANORM), dcat, h->embd + (int64_t)tokens[sl + k] * d, P(h, P_ANORM),
                         h->a_rs1[r], d);
            rmsnorm_back(dg, G(h, P_HNORM), dcat + d, h->a_g + r * d, P(h, P_HNORM), h->a_rs2[r], d);
            if (k == 1 && s->norm_before_fc) {
                float *dfe = malloc((size_t)td3 * sizeof(float));
                if (!dfe) {
                    free(dq), free(dk), free(dv), free(dgo), free(tmp);
                    return sp_fail(err, SP_ERR_NOMEM, "out of memory");
                }
                memset(dfe, 0, (size_t)td3 * sizeof(float));
                mv_back(dfe, G(h, P_FC), dg, P(h, P_FC), h->a_fe + (int64_t)sl * td3, d, td3);
                rmsnorm_back(NULL, G(h, P_ENORM), dfe, feat + (int64_t)sl * td3, P(h, P_ENORM), h->a_rs0[sl], td3);
                free(dfe);
            } else if (k == 1) mv_back(NULL, G(h, P_FC), dg, P(h, P_FC), feat + (int64_t)sl * td3, d, td3);
            else {
                float *prev = dgo + ((int64_t)(k - 2) * T + sl) * d;
                for (int64_t i = 0; i < d; i++) prev[i] += dg[i];
            }
        }
    }
    free(dq), free(dk), free(dv), free(dgo), free(tmp);
    return SP_OK;
}

float sp_thead_step(sp_thead *h, const sp_adamw_params *p) {
    double ss = 0;
    for (int64_t i = 0; i < h->n_params; i++) ss += (double)h->g[i] * h->g[i];
    const float norm = (float)sqrt(ss);
    const float clip = p->clip > 0 && norm > p->clip ? p->clip / norm : 1.0f;
    h->t_step++;
    const float b1c = 1.0f - powf(p->beta1, (float)h->t_step), b2c = 1.0f - powf(p->beta2, (float)h->t_step);
    for (int i = 0; i < P_COUNT; i++) {
        const float decay = h->rows[i] > 1 ? p->weight_decay : 0.0f;
        float *w = P(h, i), *g = G(h, i), *m1 = h->m1 + h->off[i], *m2 = h->m2 + h->off[i];
        for (int64_t j = 0; j < h->rows[i] * h->cols[i]; j++) {
            const float gj = g[j] * clip;
            m1[j] = p->beta1 * m1[j] + (1 - p->beta1) * gj;
            m2[j] = p->beta2 * m2[j] + (1 - p->beta2) * gj * gj;
            w[j] -= p->lr * ((m1[j] / b1c) / (sqrtf(m2[j] / b2c) + p->eps) + decay * w[j]);
        }
    }
    return norm;
}

sp_status sp_thead_train_step(sp_thead *h, const sp_thead_window *w, int32_t n, int32_t K, const sp_loss *loss,
                              const sp_adamw_params *ap, double *mean, float *gnorm, sp_error *err) {
    if (n < 1) return sp_fail(err, SP_ERR_ARG, "train-head: a step needs at least one window");
    sp_thead_zero_grad(h);
    double total = 0;
    for (int32_t b = 0; b < n; b++) {
        double m;
        sp_status st = sp_thead_run_rows(h, w[b].tokens, w[b].feat, w[b].rows, w[b].T, K, loss, true,
                                         1.0f / (float)n, &m, err);
        if (st) return st;
        total += m / (double)n;
    }
    const float gn = sp_thead_step(h, ap);
    if (mean) *mean = total;
    if (gnorm) *gnorm = gn;
    return SP_OK;
}

sp_status sp_thead_save(const sp_thead *h, const int32_t layers[3], const char *target_path,
                        const char *path, sp_error *err) {
    sp_gguf *tg = NULL;
    sp_status st = sp_gguf_open(target_path, &tg, err);
    if (st) return st;
    sp_gguf_writer *w = sp_gguf_writer_init();
    int64_t *d2t = malloc((size_t)h->Vd * sizeof *d2t);
    if (!w || !d2t) {
        sp_gguf_close(tg);
        sp_gguf_writer_free(w);
        free(d2t);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    const sp_thead_shape *s = &h->s;
    sp_gguf_writer_set_str(w, "general.architecture", "eagle3");
    sp_gguf_writer_set_str(w, "general.name", "specula-trained-eagle3");
    sp_gguf_writer_set_u32(w, "eagle3.context_length", 2048);
    sp_gguf_writer_set_u32(w, "eagle3.embedding_length", (uint32_t)s->dim);
    sp_gguf_writer_set_u32(w, "eagle3.feed_forward_length", (uint32_t)s->ffn_dim);
    sp_gguf_writer_set_u32(w, "eagle3.block_count", 1);
    sp_gguf_writer_set_u32(w, "eagle3.attention.head_count", (uint32_t)s->n_heads);
    sp_gguf_writer_set_u32(w, "eagle3.attention.head_count_kv", (uint32_t)s->n_kv_heads);
    sp_gguf_writer_set_f32(w, "eagle3.rope.freq_base", s->rope_theta);
    sp_gguf_writer_set_f32(w, "eagle3.attention.layer_norm_rms_epsilon", s->eps);
    sp_gguf_writer_set_u32(w, "general.file_type", 0);
    sp_gguf_writer_set_u32(w, "eagle3.vocab_size", (uint32_t)s->n_vocab);
    sp_gguf_writer_set_u32(w, "eagle3.rope.dimension_count", (uint32_t)h->hd);
    sp_gguf_writer_set_arr_i32(w, "eagle3.target_layers", layers, 3);
    sp_gguf_writer_set_u32(w, "eagle3.target_hidden_size", (uint32_t)s->tgt_dim);
    sp_gguf_writer_set_bool(w, "eagle3.norm_before_residual", false);
    sp_gguf_writer_set_bool(w, "eagle3.norm_before_fc", s->norm_before_fc);
    sp_gguf_writer_copy_kv(w, tg, "tokenizer.");
    sp_gguf_close(tg);
    const int order[P_COUNT] = {P_FC, P_ENORM, P_ONORM, P_OUT, P_ANORM, P_HNORM, P_WQ, P_WK, P_WV, P_WO, P_FNORM, P_W1, P_W3, P_W2};
    for (int i = 0; i < P_COUNT && !st; i++) {
        if (order[i] == P_ENORM && !s->norm_before_fc) continue;
        const int t = order[i];
        const int64_t ne[2] = {h->cols[t], h->rows[t]};
        st = sp_gguf_writer_add_tensor(w, pname[t], SP_GGML_F32, h->rows[t] > 1 ? 2 : 1, ne, P(h, t), true, err);
    }
    for (int32_t i = 0; i < h->Vd; i++) d2t[i] = h->d2t[i]; /* absolute target ids, as the converter writes them */
    const int64_t ne1 = h->Vd;
    if (!st) st = sp_gguf_writer_add_tensor(w, "d2t", SP_GGML_I64, 1, &ne1, d2t, true, err);
    if (!st) st = sp_gguf_writer_write(w, path, err);
    sp_gguf_writer_free(w);
    free(d2t);
    return st;
}

/* ------------------------------------------------ heads from the target */

/* The target's embedding rows [V][D]: its layer-0 taps (the embedding as
 * the forward pass reads it), a window at a time. */
static sp_status read_embd(sp_ctx *ctx, int32_t V, int32_t D, int32_t T, float *embd, float *logits, sp_error *err) {
    const int32_t zero = 0;
    sp_status st = sp_ctx_set_taps(ctx, &zero, 1, err);
    int32_t *ids = malloc((size_t)T * sizeof *ids);
    if (!ids) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    for (int32_t v0 = 0; !st && v0 < V; v0 += T) {
        const int32_t n = V - v0 < T ? V - v0 : T;
        for (int32_t i = 0; i < n; i++) ids[i] = v0 + i;
        sp_batch b = {.tokens = ids, .n = n};
        int32_t rows = 0;
        if ((st = sp_ctx_truncate(ctx, 0, err)) || (st = sp_forward(ctx, &b, logits, err))) break;
        const float *t = sp_ctx_taps(ctx, 0, &rows);
        SP_ASSERT(t && rows == n);
        memcpy(embd + (int64_t)v0 * D, t, (size_t)n * (size_t)D * sizeof(float));
    }
    free(ids);
    return st;
}

sp_status sp_thead_target_embd(const sp_model *target, float **embd, sp_error *err) {
    const sp_model_config *tc = sp_model_cfg(target);
    const int32_t V = tc->n_vocab, D = tc->dim, T = 64;
    *embd = malloc((size_t)V * D * sizeof(float));
    float *logits = malloc((size_t)T * V * sizeof(float));
    sp_ctx *ctx = NULL;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = T;
    cp.max_batch = T;
    cp.type_k = cp.type_v = SP_GGML_F32;
    sp_status st = !*embd || !logits ? sp_fail(err, SP_ERR_NOMEM, "out of memory") : SP_OK;
    if (!st) st = sp_ctx_init(target, &cp, &ctx, err);
    if (!st) st = read_embd(ctx, V, D, T, *embd, logits, err);
    sp_ctx_free(ctx);
    free(logits);
    if (st) {
        free(*embd);
        *embd = NULL;
    }
    return st;
}

/* A tensor of the head file as F32 (any loadable type: sp_eagle3_load has
 * checked its shape and type), rows x cols. */
static sp_status read_f32(const sp_gguf *g, const char *path, const char *name, int64_t cols, int64_t rows, float *out,
                          sp_error *err) {
    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, name);
    if (!t || t->ne[0] != cols || t->ne[1] * t->ne[2] * t->ne[3] != rows)
        return sp_fail(err, SP_ERR_FORMAT, "%s: tensor '%s' is missing or not [%lld, %lld]", path, name,
                       (long long)cols, (long long)rows);
    const uint64_t rb = sp_ggml_row_size(t->type, cols);
    for (int64_t r = 0; r < rows; r++)
        sp_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, out + r * cols, cols);
    return SP_OK;
}

sp_status sp_thead_load(const char *path, const sp_model *target, const float *embd, int32_t layers[3],
                        sp_thead **out, sp_error *err) {
    *out = NULL;
    sp_eagle3 *e = NULL;
    sp_status st = sp_eagle3_load(path, target, &e, err); /* every check of the engine's loader */
    if (st) return st;
    sp_gguf *g = NULL;
    const sp_model_config *tc = sp_model_cfg(target);
    sp_thead_shape hs;
    st = sp_eagle3_shape(e, &hs.dim, &hs.n_heads, &hs.n_kv_heads, &hs.ffn_dim, &hs.rope_theta, &hs.eps);
    hs.tgt_dim = tc->dim;
    hs.n_vocab = tc->n_vocab;
    memcpy(layers, sp_eagle3_target_layers(e), 3 * sizeof(int32_t));
    const char *why = sp_eagle3_trainable(e);
    const bool nbf = sp_eagle3_norm_before_fc(e);
    sp_eagle3_free(e);
    if (why) return sp_fail(err, SP_ERR_UNSUPPORTED, "%s: the head trainer cannot learn this head: %s", path, why);
    hs.norm_before_fc = nbf;
    hs.n_draft = 0;
    if (!st) st = sp_thead_init(&hs, embd, NULL, 1, out, err);
    if (!st) st = sp_gguf_open(path, &g, err);
    for (int i = 0; !st && i < sp_thead_n_tensors(*out); i++) st = read_f32(g, path, pname[i], (*out)->cols[i], (*out)->rows[i], P(*out, i), err);
    sp_gguf_close(g);
    if (st) {
        sp_thead_free(*out);
        *out = NULL;
    }
    return st;
}

sp_status sp_thead_to_eagle3(const sp_thead *h, const sp_eagle3 *like, sp_eagle3 **out, sp_error *err) {
    const sp_eagle3_f32 w = {.fc = P(h, P_FC), .enc_norm = h->s.norm_before_fc ? P(h, P_ENORM) : NULL, .attn_norm = P(h, P_ANORM), .hidden_norm = P(h, P_HNORM),
                             .wq = P(h, P_WQ), .wk = P(h, P_WK), .wv = P(h, P_WV), .wo = P(h, P_WO),
                             .ffn_norm = P(h, P_FNORM), .w1 = P(h, P_W1), .w3 = P(h, P_W3), .w2 = P(h, P_W2),
                             .out_norm = P(h, P_ONORM), .output = P(h, P_OUT)};
    int32_t dim, nh, nkv, ffn;
    float theta, eps;
    sp_status st = sp_eagle3_shape(like, &dim, &nh, &nkv, &ffn, &theta, &eps);
    if (st || dim != h->s.dim || nh != h->s.n_heads || nkv != h->s.n_kv_heads || ffn != h->s.ffn_dim ||
        sp_eagle3_trainable(like) || sp_eagle3_norm_before_fc(like) != h->s.norm_before_fc || h->Vd != h->s.n_vocab)
        return sp_fail(err, SP_ERR_ARG, "online: the served head's shape differs from the learner's");
    return sp_eagle3_with_weights(like, &w, out, err);
}

/* ------------------------------------------------------ training on text */

sp_head_params sp_head_default_params(int32_t n) {
    sp_head_params p = {.layers = {2, n / 2, n - 3}, .steps = 200, .warmup = 10, .batch = 4, .seq_len = 64,
                        .unroll = 3, .lr = 3e-3f, .lr_min = 3e-4f, .loss = {.kind = SP_LOSS_FKL}, .seed = 1,
                        .threads = 1};
    for (int i = 0; i < 3; i++) p.layers[i] = p.layers[i] < 0 ? 0 : p.layers[i] > n ? n : p.layers[i];
    return p;
}

typedef struct id_count {
    int64_t count;
    int32_t id;
} id_count;

static int by_count(const void *a, const void *b) {
    const id_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The n most frequent ids of data[0..len) (ties: the lower id), ascending
 * (EAGLE-3's draft vocabulary, d2t); malloc'd, NULL when out of memory. */
static int32_t *draft_vocab(const int32_t *data, int64_t len, int32_t V, int32_t n) {
    id_count *c = malloc((size_t)V * sizeof *c);
    uint8_t *pick = calloc((size_t)V, 1);
    int32_t *out = malloc((size_t)n * sizeof *out);
    if (!c || !pick || !out) {
        free(c), free(pick), free(out);
        return NULL;
    }
    for (int32_t v = 0; v < V; v++) c[v] = (id_count){0, v};
    for (int64_t i = 0; i < len; i++)
        if (data[i] >= 0 && data[i] < V) c[data[i]].count++;
    qsort(c, (size_t)V, sizeof *c, by_count);
    for (int32_t i = 0; i < n; i++) pick[c[i].id] = 1;
    for (int32_t v = 0, k = 0; v < V; v++)
        if (pick[v]) out[k++] = v;
    free(c), free(pick);
    return out;
}

sp_status sp_distill_head(const sp_model *target, const char *target_path, const int32_t *data, int64_t n,
                          const sp_head_params *p, const char *out_path, sp_distill_cb cb, void *ud,
                          double *first, double *last, sp_error *err) {
    const sp_model_config *tc = sp_model_cfg(target);
    const int32_t D = tc->dim, V = tc->n_vocab, T = p->seq_len, K = p->unroll, B = p->batch;
    if (p->loss.kind == SP_LOSS_CE) return sp_fail(err, SP_ERR_ARG, "train-head: a head distils (fkl, rkl, jsd, tvd)");
    if (K < 1 || K > MAX_K || T < K + 2 || p->batch < 1 || p->steps < 1)
        return sp_fail(err, SP_ERR_ARG, "train-head: %d unrolled steps (1..%d) in windows of %d tokens", K, MAX_K, T);
    for (int i = 0; i < 3; i++)
        if (p->layers[i] < 0 || p->layers[i] > tc->n_layers)
            return sp_fail(err, SP_ERR_ARG, "train-head: layer %d is outside the target's [0, %d]", p->layers[i],
                           tc->n_layers);
    if (n < T + 1)
        return sp_fail(err, SP_ERR_ARG, "train-head: %lld text tokens, fewer than a window of %d", (long long)n, T + 1);
    if (p->draft_vocab < 0 || p->draft_vocab == 1)
        return sp_fail(err, SP_ERR_ARG, "train-head: a draft vocabulary of %d tokens (2 or more; 0: the target's)",
                       p->draft_vocab);
    sp_thead_shape hs = {.dim = D, .n_heads = p->n_heads ? p->n_heads : tc->n_heads,
                         .n_kv_heads = p->n_kv_heads ? p->n_kv_heads : tc->n_kv_heads,
                         .ffn_dim = p->ffn_dim ? p->ffn_dim : tc->ffn_dim, .tgt_dim = D, .n_vocab = V,
                         .n_draft = p->draft_vocab > 0 && p->draft_vocab < V ? p->draft_vocab : 0,
                         .norm_before_fc = p->norm_before_fc, .rope_theta = tc->rope_theta, .eps = tc->norm_eps};
    int32_t *d2t = hs.n_draft ? draft_vocab(data, n, V, hs.n_draft) : NULL;
    if (hs.n_draft && !d2t) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    sp_ctx *ctx = NULL;
    sp_thead *h = NULL;
    float *embd = malloc((size_t)V * D * sizeof(float)), *logits = malloc((size_t)B * T * V * sizeof(float));
    float *feat = malloc((size_t)B * T * 3 * D * sizeof(float));
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
    sp_loss_target *rows = calloc((size_t)B * T, sizeof *rows);
    sp_thead_window *win = calloc((size_t)B, sizeof *win);
    sp_status st = SP_OK;
    if (!embd || !logits || !feat || !tok || !rows || !win) st = sp_fail(err, SP_ERR_NOMEM, "out of memory");
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = T;
    cp.max_batch = T;
    cp.n_threads = p->threads;
    cp.type_k = cp.type_v = SP_GGML_F32;
    if (!st) st = sp_ctx_init(target, &cp, &ctx, err);
    if (!st) st = read_embd(ctx, V, D, T, embd, logits, err);
    if (!st) st = sp_thead_init(&hs, embd, d2t, p->seed, &h, err);
    if (!st) st = sp_ctx_set_taps(ctx, p->layers, 3, err);
    for (int32_t b = 0; !st && b < B; b++) {
        win[b] = (sp_thead_window){.tokens = tok + (int64_t)b * T, .feat = feat + (int64_t)b * T * 3 * D,
                                   .rows = rows + (int64_t)b * T, .T = T};
        for (int32_t t = 0; t < T; t++) rows[(int64_t)b * T + t].p = logits + ((int64_t)b * T + t) * V;
    }
    sp_rng rng;
    sp_rng_seed(&rng, p->seed ^ 0x9e3779b97f4a7c15ULL);
    sp_adamw_params ap = sp_adamw_default_params();
    const double t0 = sp_now();
    const int64_t avg = p->steps < 10 ? p->steps : 10;
    double f = 0, l = 0;
    for (int64_t s = 0; !st && s < p->steps; s++) {
        ap.lr = sp_train_lr(s, p->steps, p->warmup, p->lr, p->lr_min);
        for (int32_t b = 0; !st && b < B; b++) {
            const int64_t start = (int64_t)sp_rng_below(&rng, (uint64_t)(n - T));
            int32_t *wt = tok + (int64_t)b * T;
            float *wf = feat + (int64_t)b * T * 3 * D, *wl = logits + (int64_t)b * T * V;
            memcpy(wt, data + start, (size_t)T * sizeof(int32_t));
            sp_batch bt = {.tokens = wt, .n = T, .logits_all = true};
            if ((st = sp_ctx_truncate(ctx, 0, err)) || (st = sp_forward(ctx, &bt, wl, err))) break;
            for (int i = 0; i < 3; i++) {
                int32_t nr;
                const float *tp = sp_ctx_taps(ctx, i, &nr);
                SP_ASSERT(tp && nr == T);
                for (int32_t t = 0; t < T; t++)
                    memcpy(wf + ((int64_t)t * 3 + i) * D, tp + (int64_t)t * D, (size_t)D * sizeof(float));
            }
            for (int32_t t = 0; t < T; t++) { /* the target's distributions at temperature 1 */
                float *row = wl + (int64_t)t * V, mx = -INFINITY, sum = 0;
                for (int32_t v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
                for (int32_t v = 0; v < V; v++) sum += row[v] = expf(row[v] - mx);
                for (int32_t v = 0; v < V; v++) row[v] /= sum;
            }
        }
        double step_loss = 0;
        float gn = 0;
        if (!st) st = sp_thead_train_step(h, win, B, K, &p->loss, &ap, &step_loss, &gn, err);
        if (st) break;
        if (s < avg) f += step_loss / (double)avg;
        if (s >= p->steps - avg) l += step_loss / (double)avg;
        const double el = sp_now() - t0;
        sp_distill_progress pr = {.step = s + 1, .steps = p->steps, .loss = step_loss, .lr = ap.lr, .grad_norm = gn,
                                  .tokens_per_s = el > 0 ? (double)(s + 1) * p->batch * T / el : 0, .elapsed = el};
        if (cb) cb(&pr, ud);
    }
    if (!st) st = sp_thead_save(h, p->layers, target_path, out_path, err);
    if (!st && first) *first = f;
    if (!st && last) *last = l;
    sp_thead_free(h);
    sp_ctx_free(ctx);
    free(embd), free(logits), free(feat), free(tok), free(rows), free(win), free(d2t);
    return st;
}
