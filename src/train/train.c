/* train: the training engine for small Llama models (see sp_train.h).
 *
 * Layers are free functions over raw arrays, llm.c style. Shapes: BT = B*T
 * rows (row r is sequence r / T, position r % T), C = dim, KVD = kv heads *
 * head size, F = ffn, V = vocabulary, H / KVH heads. Matrices are [O][I]
 * (row o holds the weights of output o), as in GGUF. Every parallel loop
 * gives each thread its own outputs and sums in a fixed order, so results do
 * not depend on the thread count. */
#include "sp_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_write.h"
#include "model_plain.h"
#include "ops.h"
#include "train_mm.h"
#include "quant.h"
#include "sp_model.h"
#include "rng.h"
#include "threadpool.h"
#include "loss.h"
#include "train.h"

/* The loops below are written so they vectorise with the baseline ISA
 * (SSE2 on x86-64) without reassociating sums: clang does at -O2; gcc 12
 * needs the vectoriser turned on for this file. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

enum { T_EMB, T_ATTN_NORM, T_WQ, T_WK, T_WV, T_WO, T_FFN_NORM, T_W1, T_W2, T_W3, T_OUT_NORM, T_OUTPUT, N_T };

typedef struct tview {
    char name[48];
    int64_t rows, cols; /* GGUF ne = {cols, rows}; rows 1 for vectors */
    float *p, *g;
    bool matrix;
} tview;

struct sp_tmodel {
    sp_train_shape s;
    int32_t hd, kvd;
    int64_t size[N_T];      /* elements of each kind over all layers */
    int64_t n_params;
    float *params, *grads, *m1, *m2;
    float *p[N_T], *g[N_T];
    int64_t t_step;
    tview *views;
    int32_t n_views;
    sp_pool *pool;
    sp_rope_freqs rope;     /* RoPE angles (ops.h) */
    /* activations of the last forward */
    int32_t B, T;
    int64_t cap_bt, cap_btt; /* rows and attention entries the buffers hold */
    int32_t cap_t;
    int32_t *tokens;        /* [BT] */
    float *res;             /* [L+1][BT][C] layer inputs; res[L] the final residual */
    float *xn1, *q, *ao, *mid, *xn2; /* [L][BT][C] */
    float *rstd1, *rstd2;   /* [L][BT] */
    float *k, *v;           /* [L][BT][KVD] (q, k after RoPE) */
    float *att;             /* [L][B][H][T][T] probabilities */
    float *h1, *h3, *hg;    /* [L][BT][F] */
    float *xf, *rstdf;      /* [BT][C], [BT] */
    float *logits, *dlogits; /* [BT][V] */
    float *cs, *cs_inv;     /* [T][hd] RoPE cos/sin; sin negated */
    /* backward scratch */
    float *dx, *dxn, *dq, *dao; /* [BT][C] */
    float *dk, *dv;         /* [BT][KVD] */
    float *dh1, *dh3, *dhg; /* [BT][F] */
    float *wt;              /* transposed weight, max O*I */
    float *datt;            /* [threads][T] */
    int32_t cap_threads;
    double *loss_scratch;   /* [2V] */
};

/* ------------------------------------------------------------------ shapes */

sp_train_shape sp_train_default_shape(void) {
    sp_train_shape s = {.dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 128,
                        .n_vocab = 512, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    return s;
}

sp_status sp_train_shape_check(const sp_train_shape *s, sp_error *err) {
    if (s->dim < 2 || s->dim > 8192 || s->n_layers < 1 || s->n_layers > 128 || s->n_heads < 1 ||
        s->n_kv_heads < 1 || s->dim % s->n_heads || s->n_heads % s->n_kv_heads ||
        (s->dim / s->n_heads) % 2 || s->ffn_dim < 1 || s->ffn_dim > 65536 || s->n_vocab < 2 ||
        s->n_vocab > 1 << 20 || !(s->rope_theta > 0) || !(s->norm_eps > 0))
        return sp_fail(err, SP_ERR_ARG,
                       "draft_shape: bad model shape dim %d, layers %d, heads %d, kv heads %d, "
                       "ffn %d, vocabulary %d (need heads | dim, kv heads | heads, even head size)",
                       s->dim, s->n_layers, s->n_heads, s->n_kv_heads, s->ffn_dim, s->n_vocab);
    return SP_OK;
}

sp_status sp_train_shape_parse(const char *str, sp_train_shape *s, sp_error *err) {
    long v[5];
    const char *c = str ? str : "";
    for (int i = 0; i < 5; i++) {
        char *end;
        v[i] = strtol(c, &end, 10);
        if (end == c || v[i] < 1 || v[i] > 65536 || (i < 4 ? *end != ',' : *end != 0))
            return sp_fail(err, SP_ERR_ARG,
                           "draft_shape: expected DIM,LAYERS,HEADS,KV_HEADS,FFN (positive numbers), got '%s'",
                           str ? str : "");
        c = end + 1;
    }
    sp_train_shape t = *s;
    t.dim = (int32_t)v[0], t.n_layers = (int32_t)v[1], t.n_heads = (int32_t)v[2];
    t.n_kv_heads = (int32_t)v[3], t.ffn_dim = (int32_t)v[4];
    sp_status st = sp_train_shape_check(&t, err);
    if (!st) *s = t;
    return st;
}

/* -------------------------------------------------------------- allocation */

static void *alloc_f(int64_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float))) return NULL;
    memset(p, 0, (size_t)(n > 0 ? n : 1) * sizeof(float));
    return p;
}

static void free_acts(sp_tmodel *m) {
    float **bufs[] = {&m->res, &m->xn1, &m->q, &m->ao, &m->mid, &m->xn2, &m->rstd1, &m->rstd2,
                      &m->k, &m->v, &m->att, &m->h1, &m->h3, &m->hg, &m->xf, &m->rstdf,
                      &m->logits, &m->dlogits, &m->cs, &m->cs_inv, &m->dx, &m->dxn, &m->dq,
                      &m->dao, &m->dk, &m->dv, &m->dh1, &m->dh3, &m->dhg, &m->datt};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(m->tokens);
    m->tokens = NULL;
    m->cap_bt = m->cap_btt = m->cap_t = m->cap_threads = 0;
}

void sp_tmodel_free(sp_tmodel *m) {
    if (!m) return;
    free_acts(m);
    free(m->params);
    free(m->grads);
    free(m->m1);
    free(m->m2);
    free(m->views);
    free(m->wt);
    free(m->loss_scratch);
    free(m);
}

static sp_status tmodel_alloc(const sp_train_shape *s, sp_tmodel **out, sp_error *err) {
    *out = NULL;
    sp_status st = sp_train_shape_check(s, err);
    if (st) return st;
    sp_tmodel *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    m->s = *s;
    const int64_t C = s->dim, L = s->n_layers, F = s->ffn_dim, V = s->n_vocab;
    m->hd = s->dim / s->n_heads;
    m->kvd = s->n_kv_heads * m->hd;
    const int64_t KVD = m->kvd;
    const int64_t sz[N_T] = {V * C, L * C, L * C * C, L * KVD * C, L * KVD * C, L * C * C,
                             L * C, L * F * C, L * C * F, L * F * C, C, V * C};
    m->n_params = 0;
    for (int i = 0; i < N_T; i++) m->size[i] = sz[i], m->n_params += sz[i];
    m->params = alloc_f(m->n_params);
    m->grads = alloc_f(m->n_params);
    m->m1 = alloc_f(m->n_params);
    m->m2 = alloc_f(m->n_params);
    int64_t wmax = C * C > F * C ? C * C : F * C;
    if (V * C > wmax) wmax = V * C;
    if (KVD * C > wmax) wmax = KVD * C;
    m->wt = alloc_f(wmax);
    m->loss_scratch = malloc((size_t)(2 * V) * sizeof(double));
    m->n_views = (int32_t)(3 + 9 * L);
    m->views = calloc((size_t)m->n_views, sizeof *m->views);
    if (!m->params || !m->grads || !m->m1 || !m->m2 || !m->wt || !m->loss_scratch ||
        !m->views) {
        sp_tmodel_free(m);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for a model of %lld parameters",
                       (long long)(sz[0] + sz[11] + L * (2 * C + 2 * C * C + 2 * KVD * C + 3 * F * C)));
    }
    int64_t off = 0;
    for (int i = 0; i < N_T; i++) {
        m->p[i] = m->params + off;
        m->g[i] = m->grads + off;
        off += sz[i];
    }
    /* the same frequencies as the inference context (model.c) */
    m->rope = (sp_rope_freqs){.theta_scale = powf(s->rope_theta, -2.0f / (float)m->hd), .freq_scale = 1.0f};
    /* tensor views in GGUF order: embedding, output norm, output, then layers */
    int32_t n = 0;
#define VIEW(nm, kind, idx, r, c, mat)                                                     \
    do {                                                                                   \
        tview *t_ = &m->views[n++];                                                        \
        snprintf(t_->name, sizeof t_->name, "%s", nm);                                     \
        t_->rows = (r), t_->cols = (c), t_->matrix = (mat);                                \
        t_->p = m->p[kind] + (int64_t)(idx) * (r) * (c);                                   \
        t_->g = m->g[kind] + (int64_t)(idx) * (r) * (c);                                   \
    } while (0)
    VIEW("token_embd.weight", T_EMB, 0, V, C, true);
    VIEW("output_norm.weight", T_OUT_NORM, 0, 1, C, false);
    VIEW("output.weight", T_OUTPUT, 0, V, C, true);
    char nm[48];
    for (int32_t l = 0; l < L; l++) {
#define NM(s) (snprintf(nm, sizeof nm, "blk.%d." s ".weight", l), nm)
        VIEW(NM("attn_norm"), T_ATTN_NORM, l, 1, C, false);
        VIEW(NM("attn_q"), T_WQ, l, C, C, true);
        VIEW(NM("attn_k"), T_WK, l, KVD, C, true);
        VIEW(NM("attn_v"), T_WV, l, KVD, C, true);
        VIEW(NM("attn_output"), T_WO, l, C, C, true);
        VIEW(NM("ffn_norm"), T_FFN_NORM, l, 1, C, false);
        VIEW(NM("ffn_gate"), T_W1, l, F, C, true);
        VIEW(NM("ffn_down"), T_W2, l, C, F, true);
        VIEW(NM("ffn_up"), T_W3, l, F, C, true);
#undef NM
    }
#undef VIEW
    SP_ASSERT(n == m->n_views);
    *out = m;
    return SP_OK;
}

sp_status sp_tmodel_init(const sp_train_shape *s, uint64_t seed, sp_tmodel **out, sp_error *err) {
    sp_tmodel *m;
    sp_status st = tmodel_alloc(s, &m, err);
    if (st) return st;
    sp_rng r;
    sp_rng_seed(&r, seed);
    const float res_scale = 1.0f / sqrtf(2.0f * (float)s->n_layers);
    for (int32_t i = 0; i < m->n_views; i++) {
        tview *t = &m->views[i];
        int64_t n = t->rows * t->cols;
        if (!t->matrix) {
            for (int64_t j = 0; j < n; j++) t->p[j] = 1.0f;
            continue;
        }
        float sd = strcmp(t->name, "token_embd.weight") ? 1.0f / sqrtf((float)t->cols) : 1.0f;
        if (strstr(t->name, "attn_output") || strstr(t->name, "ffn_down")) sd *= res_scale;
        for (int64_t j = 0; j < n; j++) t->p[j] = sd * (float)sp_rng_normal(&r);
    }
    *out = m;
    return SP_OK;
}

const sp_train_shape *sp_tmodel_shape(const sp_tmodel *m) { return &m->s; }
uint64_t sp_tmodel_n_params(const sp_tmodel *m) { return (uint64_t)m->n_params; }
void sp_tmodel_set_pool(sp_tmodel *m, sp_pool *pool) { m->pool = pool; }
int32_t sp_tmodel_n_tensors(const sp_tmodel *m) { return m->n_views; }
float *sp_tmodel_logits(sp_tmodel *m) { return m->logits; }

const char *sp_tmodel_tensor(sp_tmodel *m, int32_t i, int64_t *n, float **value, float **grad) {
    if (i < 0 || i >= m->n_views) return NULL;
    tview *t = &m->views[i];
    if (n) *n = t->rows * t->cols;
    if (value) *value = t->p;
    if (grad) *grad = t->g;
    return t->name;
}

/* Activation buffers for B sequences of T tokens. */
static sp_status ensure_acts(sp_tmodel *m, int32_t B, int32_t T, sp_error *err) {
    const int64_t BT = (int64_t)B * T, BTT = BT * T, C = m->s.dim, L = m->s.n_layers;
    const int64_t KVD = m->kvd, F = m->s.ffn_dim, V = m->s.n_vocab, H = m->s.n_heads;
    const int32_t nth = m->pool ? sp_pool_n_threads(m->pool) : 1;
    if (BT <= m->cap_bt && BTT <= m->cap_btt && T <= m->cap_t && nth <= m->cap_threads) return SP_OK;
    free_acts(m);
    m->tokens = malloc((size_t)BT * sizeof(int32_t));
    m->res = alloc_f((L + 1) * BT * C);
    m->xn1 = alloc_f(L * BT * C);
    m->q = alloc_f(L * BT * C);
    m->ao = alloc_f(L * BT * C);
    m->mid = alloc_f(L * BT * C);
    m->xn2 = alloc_f(L * BT * C);
    m->rstd1 = alloc_f(L * BT);
    m->rstd2 = alloc_f(L * BT);
    m->k = alloc_f(L * BT * KVD);
    m->v = alloc_f(L * BT * KVD);
    m->att = alloc_f(L * H * BTT);
    m->h1 = alloc_f(L * BT * F);
    m->h3 = alloc_f(L * BT * F);
    m->hg = alloc_f(L * BT * F);
    m->xf = alloc_f(BT * C);
    m->rstdf = alloc_f(BT);
    m->logits = alloc_f(BT * V);
    m->dlogits = alloc_f(BT * V);
    m->cs = alloc_f((int64_t)T * m->hd);
    m->cs_inv = alloc_f((int64_t)T * m->hd);
    m->dx = alloc_f(BT * C);
    m->dxn = alloc_f(BT * C);
    m->dq = alloc_f(BT * C);
    m->dao = alloc_f(BT * C);
    m->dk = alloc_f(BT * KVD);
    m->dv = alloc_f(BT * KVD);
    m->dh1 = alloc_f(BT * F);
    m->dh3 = alloc_f(BT * F);
    m->dhg = alloc_f(BT * F);
    m->datt = alloc_f((int64_t)nth * T);
    if (!m->tokens || !m->res || !m->xn1 || !m->q || !m->ao || !m->mid || !m->xn2 || !m->rstd1 ||
        !m->rstd2 || !m->k || !m->v || !m->att || !m->h1 || !m->h3 || !m->hg || !m->xf ||
        !m->rstdf || !m->logits || !m->dlogits || !m->cs || !m->cs_inv || !m->dx || !m->dxn ||
        !m->dq || !m->dao || !m->dk || !m->dv || !m->dh1 || !m->dh3 || !m->dhg || !m->datt) {
        free_acts(m);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for activations of %d x %d tokens", B, T);
    }
    m->cap_bt = BT, m->cap_btt = BTT, m->cap_t = T, m->cap_threads = nth;
    return SP_OK;
}

/* ------------------------------------------------------------------ layers */

/* out[r] = w * x[r] / rms(x[r]) with rstd[r] = 1 / rms; the arithmetic of
 * sp_rmsnorm (inference) exactly. */
static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int64_t BT,
                            int64_t C, float eps) {
    for (int64_t r = 0; r < BT; r++) {
        const float *xr = x + r * C;
        float ss = 0;
        for (int64_t i = 0; i < C; i++) ss += xr[i] * xr[i];
        float sc = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[r] = sc;
        for (int64_t i = 0; i < C; i++) out[r * C + i] = w[i] * (xr[i] * sc);
    }
}

/* dx += d/dx, dw += d/dw of y = w * x * rstd, rstd = (mean(x^2) + eps)^-1/2:
 * dx_i = rstd (w_i dy_i) - rstd^3 / C x_i sum_j w_j dy_j x_j. */
static void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                             const float *rstd, int64_t BT, int64_t C) {
    for (int64_t r = 0; r < BT; r++) {
        const float *xr = x + r * C, *dyr = dy + r * C;
        const float s = rstd[r];
        double dot = 0;
        for (int64_t i = 0; i < C; i++) dot += (double)w[i] * dyr[i] * xr[i];
        const float c2 = (float)(dot * s * s * s / (double)C);
        for (int64_t i = 0; i < C; i++) {
            dx[r * C + i] += s * w[i] * dyr[i] - c2 * xr[i];
            dw[i] += dyr[i] * xr[i] * s;
        }
    }
}

static void transpose_job(void *arg, int ith, int nth) {
    const mm_args *a = arg;
    float *wt = (float *)a->wt;
    for (int64_t i = a->I * ith / nth; i < a->I * (ith + 1) / nth; i++)
        for (int64_t o = 0; o < a->O; o++) wt[i * a->O + o] = a->w[o * a->I + i];
}

/* out[n][O] = inp[n][I] W^T for W [O][I]. */
static void matmul_forward(sp_tmodel *m, float *out, const float *inp, const float *w, int64_t n,
                           int64_t I, int64_t O) {
    mm_args a = {.out = out, .inp = inp, .w = w, .wt = m->wt, .n = n, .I = I, .O = O};
    sp_pool_run(m->pool, transpose_job, &a);
    sp_pool_run(m->pool, sp_train_mm_active()->fwd, &a);
}

static void matmul_backward(sp_tmodel *m, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, int64_t n, int64_t I, int64_t O) {
    mm_args a = {.inp = inp, .w = w, .dinp = dinp, .dw = dw, .dout = dout, .n = n, .I = I, .O = O};
    const sp_train_mm *k = sp_train_mm_active();
    sp_pool_run(m->pool, k->bwd_inp, &a);
    sp_pool_run(m->pool, k->bwd_w, &a);
}

/* RoPE of every row (position r % T) in place; cs: [T][hd] cos/sin pairs
 * (cs_inv for the backward pass: the inverse rotation). */
static void rope_forward(float *x, const float *cs, int64_t BT, int32_t T, int32_t n_heads,
                         int32_t hd) {
    for (int64_t r = 0; r < BT; r++)
        sp_rope_apply(x + r * n_heads * hd, n_heads, hd, hd, cs + (r % T) * hd, false);
}

typedef struct att_args {
    sp_tmodel *m;
    int32_t B, T, H, KVH, hd;
    float *out, *att;              /* forward: ao [BT][C], probs [B][H][T][T] */
    const float *q, *k, *v;        /* [BT][C], [BT][KVD] */
    const float *dout;             /* backward: dao */
    float *dq, *dk, *dv;
} att_args;

/* softmax(q k^T / sqrt(hd)) v over positions s <= t, per (sequence, head). */
static void att_fwd_job(void *arg, int ith, int nth) {
    const att_args *a = arg;
    const int32_t T = a->T, H = a->H, hd = a->hd, group = H / a->KVH;
    const int64_t C = (int64_t)H * hd, KVD = (int64_t)a->KVH * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t tasks = (int64_t)a->B * H;
    for (int64_t task = tasks * ith / nth; task < tasks * (ith + 1) / nth; task++) {
        const int32_t b = (int32_t)(task / H), h = (int32_t)(task % H), kh = h / group;
        for (int32_t t = 0; t < T; t++) {
            const float *qt = a->q + ((int64_t)b * T + t) * C + (int64_t)h * hd;
            float *p = a->att + (task * T + t) * T;
            float mx = -INFINITY;
            for (int32_t s = 0; s <= t; s++) {
                const float *ks = a->k + ((int64_t)b * T + s) * KVD + (int64_t)kh * hd;
                float d = 0;
                for (int32_t i = 0; i < hd; i++) d += qt[i] * ks[i];
                p[s] = d * scale;
                mx = p[s] > mx ? p[s] : mx;
            }
            float sum = 0;
            for (int32_t s = 0; s <= t; s++) sum += (p[s] = expf(p[s] - mx));
            const float inv = 1.0f / sum;
            for (int32_t s = 0; s <= t; s++) p[s] *= inv;
            for (int32_t s = t + 1; s < T; s++) p[s] = 0;
            float *o = a->out + ((int64_t)b * T + t) * C + (int64_t)h * hd;
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int32_t s = 0; s <= t; s++) {
                const float *vs = a->v + ((int64_t)b * T + s) * KVD + (int64_t)kh * hd;
                for (int32_t i = 0; i < hd; i++) o[i] += p[s] * vs[i];
            }
        }
    }
}

/* Backward per (sequence, kv head): the heads of a group add into the same
 * dk, dv rows, so one thread owns them all. dq, dk, dv are set here. */
static void att_bwd_job(void *arg, int ith, int nth) {
    const att_args *a = arg;
    const int32_t T = a->T, H = a->H, hd = a->hd, KVH = a->KVH, group = H / KVH;
    const int64_t C = (int64_t)H * hd, KVD = (int64_t)KVH * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *datt = a->m->datt + (int64_t)ith * T;
    const int64_t tasks = (int64_t)a->B * KVH;
    for (int64_t task = tasks * ith / nth; task < tasks * (ith + 1) / nth; task++) {
        const int32_t b = (int32_t)(task / KVH), kh = (int32_t)(task % KVH);
        for (int32_t t = 0; t < T; t++) {
            memset(a->dk + ((int64_t)b * T + t) * KVD + (int64_t)kh * hd, 0, (size_t)hd * sizeof(float));
            memset(a->dv + ((int64_t)b * T + t) * KVD + (int64_t)kh * hd, 0, (size_t)hd * sizeof(float));
        }
        for (int32_t h = kh * group; h < (kh + 1) * group; h++) {
            for (int32_t t = 0; t < T; t++) {
                const int64_t row = (int64_t)b * T + t;
                const float *p = a->att + (((int64_t)b * H + h) * T + t) * T;
                const float *d = a->dout + row * C + (int64_t)h * hd;
                const float *qt = a->q + row * C + (int64_t)h * hd;
                float *dqt = a->dq + row * C + (int64_t)h * hd;
                float dot = 0;
                for (int32_t s = 0; s <= t; s++) {
                    const float *vs = a->v + ((int64_t)b * T + s) * KVD + (int64_t)kh * hd;
                    float *dvs = a->dv + ((int64_t)b * T + s) * KVD + (int64_t)kh * hd;
                    float g = 0;
                    for (int32_t i = 0; i < hd; i++) {
                        g += d[i] * vs[i];
                        dvs[i] += p[s] * d[i];
                    }
                    datt[s] = g;
                    dot += p[s] * g;
                }
                memset(dqt, 0, (size_t)hd * sizeof(float));
                for (int32_t s = 0; s <= t; s++) {
                    const float ds = p[s] * (datt[s] - dot) * scale;
                    const float *ks = a->k + ((int64_t)b * T + s) * KVD + (int64_t)kh * hd;
                    float *dks = a->dk + ((int64_t)b * T + s) * KVD + (int64_t)kh * hd;
                    for (int32_t i = 0; i < hd; i++) {
                        dqt[i] += ds * ks[i];
                        dks[i] += ds * qt[i];
                    }
                }
            }
        }
    }
}

/* out = silu(g) u */
static void swiglu_forward(float *out, const float *g, const float *u, int64_t n) {
    sp_swiglu(out, g, u, n);
}

static void swiglu_backward(float *dg, float *du, const float *dout, const float *g, const float *u,
                            int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float sg = 1.0f / (1.0f + expf(-g[i]));
        const float silu = g[i] * sg;
        dg[i] = dout[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
        du[i] = dout[i] * silu;
    }
}

/* ----------------------------------------------------------- whole model */

sp_status sp_tmodel_forward(sp_tmodel *m, const int32_t *tokens, int32_t B, int32_t T, sp_error *err) {
    if (B < 1 || T < 1 || (int64_t)B * T > (1 << 24))
        return sp_fail(err, SP_ERR_ARG, "batch of %d sequences of %d tokens", B, T);
    for (int64_t i = 0; i < (int64_t)B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= m->s.n_vocab)
            return sp_fail(err, SP_ERR_ARG, "token id %d out of range [0, %d)", tokens[i], m->s.n_vocab);
    sp_status st = ensure_acts(m, B, T, err);
    if (st) return st;
    m->B = B, m->T = T;
    const int64_t BT = (int64_t)B * T, C = m->s.dim, KVD = m->kvd, F = m->s.ffn_dim, V = m->s.n_vocab;
    const int32_t H = m->s.n_heads, KVH = m->s.n_kv_heads, hd = m->hd;
    const float eps = m->s.norm_eps;
    memcpy(m->tokens, tokens, (size_t)BT * sizeof(int32_t));
    for (int32_t t = 0; t < T; t++) {
        sp_rope_cs(m->cs + (int64_t)t * hd, t, &m->rope, hd);
        for (int32_t i = 0; i < hd; i += 2) {
            m->cs_inv[(int64_t)t * hd + i] = m->cs[(int64_t)t * hd + i];
            m->cs_inv[(int64_t)t * hd + i + 1] = -m->cs[(int64_t)t * hd + i + 1];
        }
    }
    for (int64_t r = 0; r < BT; r++) memcpy(m->res + r * C, m->p[T_EMB] + (int64_t)tokens[r] * C, (size_t)C * sizeof(float));
    for (int32_t l = 0; l < m->s.n_layers; l++) {
        const float *x = m->res + l * BT * C;
        float *xn1 = m->xn1 + l * BT * C, *q = m->q + l * BT * C, *ao = m->ao + l * BT * C;
        float *mid = m->mid + l * BT * C, *xn2 = m->xn2 + l * BT * C;
        float *k = m->k + l * BT * KVD, *v = m->v + l * BT * KVD;
        float *h1 = m->h1 + l * BT * F, *h3 = m->h3 + l * BT * F, *hg = m->hg + l * BT * F;
        float *xo = m->res + (l + 1) * BT * C;
        rmsnorm_forward(xn1, m->rstd1 + l * BT, x, m->p[T_ATTN_NORM] + l * C, BT, C, eps);
        matmul_forward(m, q, xn1, m->p[T_WQ] + l * C * C, BT, C, C);
        matmul_forward(m, k, xn1, m->p[T_WK] + l * KVD * C, BT, C, KVD);
        matmul_forward(m, v, xn1, m->p[T_WV] + l * KVD * C, BT, C, KVD);
        rope_forward(q, m->cs, BT, T, H, hd);
        rope_forward(k, m->cs, BT, T, KVH, hd);
        att_args aa = {.m = m, .B = B, .T = T, .H = H, .KVH = KVH, .hd = hd, .out = ao,
                       .att = m->att + l * H * BT * T, .q = q, .k = k, .v = v};
        sp_pool_run(m->pool, att_fwd_job, &aa);
        matmul_forward(m, mid, ao, m->p[T_WO] + l * C * C, BT, C, C);
        for (int64_t i = 0; i < BT * C; i++) mid[i] += x[i];
        rmsnorm_forward(xn2, m->rstd2 + l * BT, mid, m->p[T_FFN_NORM] + l * C, BT, C, eps);
        matmul_forward(m, h1, xn2, m->p[T_W1] + l * F * C, BT, C, F);
        matmul_forward(m, h3, xn2, m->p[T_W3] + l * F * C, BT, C, F);
        swiglu_forward(hg, h1, h3, BT * F);
        matmul_forward(m, xo, hg, m->p[T_W2] + l * C * F, BT, F, C);
        for (int64_t i = 0; i < BT * C; i++) xo[i] += mid[i];
    }
    rmsnorm_forward(m->xf, m->rstdf, m->res + m->s.n_layers * BT * C, m->p[T_OUT_NORM], BT, C, eps);
    matmul_forward(m, m->logits, m->xf, m->p[T_OUTPUT], BT, C, V);
    return SP_OK;
}

double sp_tmodel_loss(sp_tmodel *m, const sp_loss *loss, const sp_loss_target *targets,
                      double grad_scale, int64_t *n_used) {
    const int64_t BT = (int64_t)m->B * m->T, V = m->s.n_vocab;
    double sum = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < BT; r++) {
        const sp_loss_target *t = &targets[r];
        float *d = m->dlogits + r * V;
        bool skip = loss->kind == SP_LOSS_CE ? t->token < 0 : (!t->p && t->k <= 0);
        if (skip) {
            memset(d, 0, (size_t)V * sizeof(float));
            continue;
        }
        sum += sp_loss_row(loss, t, m->logits + r * V, (int32_t)V, m->loss_scratch, d);
        for (int64_t i = 0; i < V; i++) d[i] = (float)(d[i] * grad_scale);
        n++;
    }
    if (n_used) *n_used = n;
    return sum;
}

void sp_tmodel_backward(sp_tmodel *m) {
    const int32_t B = m->B, T = m->T, H = m->s.n_heads, KVH = m->s.n_kv_heads, hd = m->hd;
    const int64_t BT = (int64_t)B * T, C = m->s.dim, KVD = m->kvd, F = m->s.ffn_dim, V = m->s.n_vocab;
    const int32_t L = m->s.n_layers;
    float *dx = m->dx, *dxn = m->dxn;
    memset(dxn, 0, (size_t)(BT * C) * sizeof(float));
    matmul_backward(m, dxn, m->g[T_OUTPUT], m->dlogits, m->xf, m->p[T_OUTPUT], BT, C, V);
    memset(dx, 0, (size_t)(BT * C) * sizeof(float));
    rmsnorm_backward(dx, m->g[T_OUT_NORM], dxn, m->res + L * BT * C, m->p[T_OUT_NORM], m->rstdf, BT, C);
    for (int32_t l = L - 1; l >= 0; l--) {
        /* dx = dL/d(layer output) = dL/dmid through the residual, plus the FFN's part */
        const float *x = m->res + l * BT * C;
        const float *xn1 = m->xn1 + l * BT * C, *q = m->q + l * BT * C, *ao = m->ao + l * BT * C;
        const float *mid = m->mid + l * BT * C, *xn2 = m->xn2 + l * BT * C;
        const float *k = m->k + l * BT * KVD, *v = m->v + l * BT * KVD;
        const float *h1 = m->h1 + l * BT * F, *h3 = m->h3 + l * BT * F, *hg = m->hg + l * BT * F;
        memset(m->dhg, 0, (size_t)(BT * F) * sizeof(float));
        matmul_backward(m, m->dhg, m->g[T_W2] + l * C * F, dx, hg, m->p[T_W2] + l * C * F, BT, F, C);
        swiglu_backward(m->dh1, m->dh3, m->dhg, h1, h3, BT * F);
        memset(dxn, 0, (size_t)(BT * C) * sizeof(float));
        matmul_backward(m, dxn, m->g[T_W1] + l * F * C, m->dh1, xn2, m->p[T_W1] + l * F * C, BT, C, F);
        matmul_backward(m, dxn, m->g[T_W3] + l * F * C, m->dh3, xn2, m->p[T_W3] + l * F * C, BT, C, F);
        rmsnorm_backward(dx, m->g[T_FFN_NORM] + l * C, dxn, mid, m->p[T_FFN_NORM] + l * C,
                         m->rstd2 + l * BT, BT, C);
        /* dx = dL/dmid = dL/dx through the residual, plus attention's part */
        memset(m->dao, 0, (size_t)(BT * C) * sizeof(float));
        matmul_backward(m, m->dao, m->g[T_WO] + l * C * C, dx, ao, m->p[T_WO] + l * C * C, BT, C, C);
        att_args aa = {.m = m, .B = B, .T = T, .H = H, .KVH = KVH, .hd = hd,
                       .att = m->att + l * H * BT * T, .q = q, .k = k, .v = v, .dout = m->dao,
                       .dq = m->dq, .dk = m->dk, .dv = m->dv};
        sp_pool_run(m->pool, att_bwd_job, &aa);
        rope_forward(m->dq, m->cs_inv, BT, T, H, hd);
        rope_forward(m->dk, m->cs_inv, BT, T, KVH, hd);
        memset(dxn, 0, (size_t)(BT * C) * sizeof(float));
        matmul_backward(m, dxn, m->g[T_WQ] + l * C * C, m->dq, xn1, m->p[T_WQ] + l * C * C, BT, C, C);
        matmul_backward(m, dxn, m->g[T_WK] + l * KVD * C, m->dk, xn1, m->p[T_WK] + l * KVD * C, BT, C, KVD);
        matmul_backward(m, dxn, m->g[T_WV] + l * KVD * C, m->dv, xn1, m->p[T_WV] + l * KVD * C, BT, C, KVD);
        rmsnorm_backward(dx, m->g[T_ATTN_NORM] + l * C, dxn, x, m->p[T_ATTN_NORM] + l * C,
                         m->rstd1 + l * BT, BT, C);
    }
    for (int64_t r = 0; r < BT; r++) {
        float *g = m->g[T_EMB] + (int64_t)m->tokens[r] * C;
        for (int64_t i = 0; i < C; i++) g[i] += dx[r * C + i];
    }
}

void sp_tmodel_zero_grad(sp_tmodel *m) { memset(m->grads, 0, (size_t)m->n_params * sizeof(float)); }

/* ----------------------------------------------------------------- optimiser */

sp_adamw_params sp_adamw_default_params(void) {
    sp_adamw_params p = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .clip = 1.0f};
    return p;
}

float sp_train_lr(int64_t step, int64_t total, int64_t warmup, float lr_max, float lr_min) {
    if (warmup > 0 && step < warmup) return lr_max * (float)(step + 1) / (float)warmup;
    if (total <= warmup) return lr_max;
    double frac = (double)(step - warmup) / (double)(total - warmup);
    if (frac > 1) frac = 1;
    return (float)(lr_min + 0.5 * (lr_max - lr_min) * (1.0 + cos(M_PI * frac)));
}

float sp_tmodel_step(sp_tmodel *m, const sp_adamw_params *p) {
    double ss = 0;
    for (int64_t i = 0; i < m->n_params; i++) ss += (double)m->grads[i] * m->grads[i];
    const float norm = (float)sqrt(ss);
    const float gs = p->clip > 0 && norm > p->clip ? p->clip / norm : 1.0f;
    m->t_step++;
    const float bc1 = 1.0f - powf(p->beta1, (float)m->t_step);
    const float bc2 = 1.0f - powf(p->beta2, (float)m->t_step);
    for (int32_t vi = 0; vi < m->n_views; vi++) {
        const tview *t = &m->views[vi];
        const int64_t n = t->rows * t->cols, off = t->p - m->params;
        const float wd = t->matrix ? p->weight_decay : 0.0f;
        for (int64_t j = off; j < off + n; j++) {
            const float g = m->grads[j] * gs;
            m->m1[j] = p->beta1 * m->m1[j] + (1.0f - p->beta1) * g;
            m->m2[j] = p->beta2 * m->m2[j] + (1.0f - p->beta2) * g * g;
            const float mh = m->m1[j] / bc1, vh = m->m2[j] / bc2;
            m->params[j] -= p->lr * (mh / (sqrtf(vh) + p->eps) + wd * m->params[j]);
        }
    }
    return norm;
}

/* ------------------------------------------------------------ checkpoints */

sp_status sp_tmodel_save(const sp_tmodel *m, const char *path, sp_ggml_type type,
                         const char *vocab_from, sp_error *err) {
    if (type != SP_GGML_F32 && type != SP_GGML_F16 && type != SP_GGML_Q8_0)
        return sp_fail(err, SP_ERR_UNSUPPORTED, "checkpoint type must be f32, f16 or q8_0, got %s",
                       sp_ggml_type_name(type));
    const int64_t blk = sp_ggml_blck_size(type);
    if (m->s.dim % blk || m->s.ffn_dim % blk)
        return sp_fail(err, SP_ERR_ARG, "checkpoint type %s needs dim %d and ffn %d to be multiples of %lld",
                       sp_ggml_type_name(type), m->s.dim, m->s.ffn_dim, (long long)blk);
    sp_gguf *g = NULL;
    sp_status st = sp_gguf_open(vocab_from, &g, err);
    if (st) return st;
    const sp_gguf_kv *tk = sp_gguf_find(g, "tokenizer.ggml.tokens");
    if (!tk || tk->type != SP_GGUF_ARRAY || (int64_t)tk->arr_n != m->s.n_vocab) {
        sp_gguf_close(g);
        return sp_fail(err, SP_ERR_ARG, "%s: its vocabulary does not have the model's %d tokens",
                       vocab_from, m->s.n_vocab);
    }
    sp_gguf_writer *w = sp_gguf_writer_init();
    if (!w) {
        sp_gguf_close(g);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    sp_gguf_writer_copy_kv(w, g, "tokenizer.");
    sp_gguf_close(g);
    const sp_train_shape *s = &m->s;
    sp_gguf_writer_set_str(w, "general.architecture", "llama");
    sp_gguf_writer_set_str(w, "general.name", "specula-trained");
    sp_gguf_writer_set_u32(w, "llama.context_length", 2048);
    sp_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)s->dim);
    sp_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)s->n_layers);
    sp_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)s->ffn_dim);
    sp_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)s->n_heads);
    sp_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)s->n_kv_heads);
    sp_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)m->hd);
    sp_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)s->n_vocab);
    sp_gguf_writer_set_f32(w, "llama.rope.freq_base", s->rope_theta);
    sp_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", s->norm_eps);
    for (int32_t i = 0; i < m->n_views && !st; i++) {
        const tview *t = &m->views[i];
        const sp_ggml_type tt = t->matrix ? type : SP_GGML_F32;
        const size_t rb = sp_ggml_row_size(tt, t->cols);
        uint8_t *data = malloc(rb * (size_t)t->rows);
        if (!data) {
            st = sp_fail(err, SP_ERR_NOMEM, "out of memory writing %s", t->name);
            break;
        }
        for (int64_t r = 0; r < t->rows; r++) sp_quantize_row(tt, t->p + r * t->cols, data + (size_t)r * rb, t->cols);
        int64_t ne[2] = {t->cols, t->rows};
        st = sp_gguf_writer_add_tensor(w, t->name, tt, t->matrix ? 2 : 1, ne, data, false, err);
        free(data);
    }
    if (!st) st = sp_gguf_writer_write(w, path, err);
    sp_gguf_writer_free(w);
    return st;
}

/* The trainer's tensors in model_plain.h's order. */
static void plain_view(const sp_tmodel *m, float *t[SP_PT_COUNT]) {
    t[SP_PT_EMB] = m->p[T_EMB];
    t[SP_PT_ATTN_NORM] = m->p[T_ATTN_NORM];
    t[SP_PT_WQ] = m->p[T_WQ];
    t[SP_PT_WK] = m->p[T_WK];
    t[SP_PT_WV] = m->p[T_WV];
    t[SP_PT_WO] = m->p[T_WO];
    t[SP_PT_FFN_NORM] = m->p[T_FFN_NORM];
    t[SP_PT_W1] = m->p[T_W1];
    t[SP_PT_W2] = m->p[T_W2];
    t[SP_PT_W3] = m->p[T_W3];
    t[SP_PT_OUT_NORM] = m->p[T_OUT_NORM];
    t[SP_PT_OUTPUT] = m->p[T_OUTPUT];
}

sp_status sp_tmodel_load(const char *path, sp_tmodel **out, sp_error *err) {
    *out = NULL;
    sp_model *sm = NULL;
    sp_status st = sp_model_load(path, NULL, &sm, err);
    if (st) return st;
    const sp_model_config *cfg = sp_model_cfg(sm);
    if (!sp_model_is_plain(sm)) {
        sp_model_free(sm);
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "%s: only plain Llama models can be trained (no biases, q/k norms, NeoX "
                       "RoPE, RoPE scaling, sliding windows or soft caps)", path);
    }
    sp_train_shape s = {.dim = cfg->dim, .n_layers = cfg->n_layers, .n_heads = cfg->n_heads,
                        .n_kv_heads = cfg->n_kv_heads, .ffn_dim = cfg->ffn_dim,
                        .n_vocab = cfg->n_vocab, .rope_theta = cfg->rope_theta, .norm_eps = cfg->norm_eps};
    sp_tmodel *m;
    st = tmodel_alloc(&s, &m, err);
    if (st) {
        sp_model_free(sm);
        return st;
    }
    float *t[SP_PT_COUNT];
    plain_view(m, t);
    sp_model_read_plain(sm, t);
    sp_model_free(sm);
    *out = m;
    return SP_OK;
}

sp_status sp_tmodel_clone(const sp_tmodel *src, sp_tmodel **out, sp_error *err) {
    sp_status st = tmodel_alloc(&src->s, out, err);
    if (st) return st;
    memcpy((*out)->params, src->params, (size_t)src->n_params * sizeof(float));
    (*out)->pool = src->pool;
    return SP_OK;
}

void sp_tmodel_copy_weights(sp_tmodel *dst, const sp_tmodel *src) {
    SP_ASSERT(dst->n_params == src->n_params);
    memcpy(dst->params, src->params, (size_t)src->n_params * sizeof(float));
    memcpy(dst->m1, src->m1, (size_t)src->n_params * sizeof(float));
    memcpy(dst->m2, src->m2, (size_t)src->n_params * sizeof(float));
    dst->t_step = src->t_step;
}

/* ------------------------------------------------------- serving snapshot */

sp_status sp_tmodel_to_model(const sp_tmodel *t, const sp_model *like, sp_model **out,
                             sp_error *err) {
    *out = NULL;
    const sp_model_config *c = sp_model_cfg(like);
    const sp_train_shape *s = &t->s;
    if (c->dim != s->dim || c->n_layers != s->n_layers || c->n_heads != s->n_heads ||
        c->n_kv_heads != s->n_kv_heads || c->ffn_dim != s->ffn_dim || c->n_vocab != s->n_vocab ||
        c->head_dim != t->hd || c->rope_neox || c->rope_theta != s->rope_theta ||
        c->norm_eps != s->norm_eps)
        return sp_fail(err, SP_ERR_ARG,
                       "draft snapshot: the trained shape (dim %d, layers %d, vocabulary %d) does "
                       "not match the served draft's (dim %d, layers %d, vocabulary %d)",
                       s->dim, s->n_layers, s->n_vocab, c->dim, c->n_layers, c->n_vocab);
    char desc[64];
    snprintf(desc, sizeof desc, "online draft (step %lld)", (long long)t->t_step);
    float *v[SP_PT_COUNT];
    plain_view(t, v);
    return sp_model_from_plain(like, (const float *const *)v, desc, out, err);
}
