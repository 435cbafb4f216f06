/* deltanet: Gated DeltaNet layers, their recurrent state with snapshots and
 * rollback, and the gated-attention helpers of the same models (deltanet.h
 * has the formulas). The arithmetic follows llama.cpp's CPU graph for
 * qwen35 (ggml's ssm_conv, its fused gated_delta_net op, its L2 norm as a
 * scaled RMSNorm), in float, accumulated in the same orders where that is
 * cheap to do. */
#include "deltanet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "quant.h"
#include "threadpool.h"

/* ------------------------------------------------------------ loading */

static sp_status key_u32(const sp_gguf *g, const char *path, const char *arch, const char *name,
                         int32_t *out, sp_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    if (!sp_gguf_find(g, key)) return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is missing", path, key);
    uint32_t u;
    sp_status st = sp_gguf_get_u32(g, key, &u, err);
    if (st) return st;
    if (u > 1u << 20) return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s = %u is too large", path, key, u);
    *out = (int32_t)u;
    return SP_OK;
}

sp_status sp_deltanet_config(sp_model *m, const char *path, const char *arch, bool *recurrent,
                             sp_error *err) {
    const sp_gguf *g = m->gguf;
    sp_dn_shape *s = &m->dn;
    int32_t inner = 0, L = m->cfg.n_layers;
    sp_status st;
    if ((st = key_u32(g, path, arch, "ssm.conv_kernel", &s->d_conv, err)) ||
        (st = key_u32(g, path, arch, "ssm.inner_size", &inner, err)) ||
        (st = key_u32(g, path, arch, "ssm.state_size", &s->hk, err)) ||
        (st = key_u32(g, path, arch, "ssm.time_step_rank", &s->n_v, err)) ||
        (st = key_u32(g, path, arch, "ssm.group_count", &s->n_k, err)))
        return st;
    if (s->d_conv < 1 || s->d_conv > 64 || s->hk < 1 || s->n_v < 1 || s->n_k < 1 || s->n_v % s->n_k ||
        inner % s->n_v || inner / s->n_v != s->hk)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: bad recurrent layer shape (conv %d, inner %d, state %d, %d value heads, %d key "
                       "heads): value heads must be a multiple of key heads and inner = value heads x state",
                       path, s->d_conv, inner, s->hk, s->n_v, s->n_k);
    s->hv = s->hk;
    s->conv_dim = 2 * s->n_k * s->hk + s->n_v * s->hv;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (kv && kv->type == SP_GGUF_ARRAY) {
        if (kv->arr_type != SP_GGUF_BOOL && !(kv->arr_type <= SP_GGUF_INT32 || kv->arr_type == SP_GGUF_UINT64 ||
                                             kv->arr_type == SP_GGUF_INT64))
            return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is not an array of integers", path, key);
        if (kv->arr_n < (uint64_t)L)
            return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s has %llu entries for %d layers", path, key,
                           (unsigned long long)kv->arr_n, L);
        for (int32_t l = 0; l < L; l++) recurrent[l] = sp_gguf_arr_int(kv, (uint64_t)l) != 0;
    } else if (kv) {
        return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is not an array", path, key);
    } else {
        int32_t every = 4;
        snprintf(key, sizeof key, "%s.full_attention_interval", arch);
        if (sp_gguf_find(g, key)) {
            uint32_t u;
            if ((st = sp_gguf_get_u32(g, key, &u, err))) return st;
            if (u < 1 || u > 1u << 20) return sp_fail(err, SP_ERR_FORMAT, "%s: bad %s = %u", path, key, u);
            every = (int32_t)u;
        }
        for (int32_t l = 0; l < L; l++) recurrent[l] = (l + 1) % every != 0;
    }
    s->n_layers = 0;
    for (int32_t l = 0; l < L; l++) s->n_layers += recurrent[l];
    return SP_OK;
}

sp_status sp_deltanet_bind(sp_model *m, const char *path, int32_t l, sp_error *err) {
    const sp_dn_shape *s = &m->dn;
    const int64_t dim = m->cfg.dim, vdim = (int64_t)s->n_v * s->hv;
    sp_deltanet *dn = sp_model_alloc(m, sizeof *dn);
    if (!dn) return sp_fail(err, SP_ERR_NOMEM, "out of memory for recurrent layers");
    memset(dn, 0, sizeof *dn);
    int32_t index = 0;
    for (int32_t i = 0; i < l; i++) index += m->layers[i].dn != NULL;
    dn->index = index;
    char nm[96];
#define T(x) (snprintf(nm, sizeof nm, "blk.%d." x, l), nm)
    sp_weight conv;
    sp_status st;
    if ((st = sp_model_bind_matrix(m, path, T("attn_qkv.weight"), dim, s->conv_dim, false, &dn->wqkv, err)) ||
        (st = sp_model_bind_vector(m, path, T("attn_qkv.scale"), 1, true, &dn->wqkv.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("attn_gate.weight"), dim, vdim, false, &dn->wz, err)) ||
        (st = sp_model_bind_vector(m, path, T("attn_gate.scale"), 1, true, &dn->wz.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("ssm_beta.weight"), dim, s->n_v, false, &dn->wbeta, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_beta.scale"), 1, true, &dn->wbeta.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("ssm_alpha.weight"), dim, s->n_v, false, &dn->walpha, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_alpha.scale"), 1, true, &dn->walpha.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("ssm_out.weight"), vdim, dim, false, &dn->wout, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_out.scale"), 1, true, &dn->wout.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("ssm_conv1d.weight"), s->d_conv, s->conv_dim, false, &conv, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_dt.bias"), s->n_v, false, &dn->dt_bias, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_a"), s->n_v, false, &dn->a, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_norm.weight"), s->hv, false, &dn->norm, err)))
        return st;
#undef T
    if (conv.type == SP_GGML_F32) {
        dn->conv = (const float *)conv.data;
    } else {
        float *f = sp_model_alloc(m, (size_t)s->conv_dim * (size_t)s->d_conv * sizeof(float));
        if (!f) return sp_fail(err, SP_ERR_NOMEM, "out of memory converting blk.%d.ssm_conv1d.weight", l);
        for (int32_t r = 0; r < s->conv_dim; r++)
            sp_dequantize_row(conv.type, conv.data + (size_t)r * conv.row_bytes, f + (int64_t)r * s->d_conv,
                              s->d_conv);
        dn->conv = f;
    }
    m->layers[l].dn = dn;
    return SP_OK;
}

void sp_deltanet_weights(sp_deltanet *dn, sp_weight *out[SP_DELTANET_N_WEIGHTS]) {
    out[0] = &dn->wqkv;
    out[1] = &dn->wz;
    out[2] = &dn->wbeta;
    out[3] = &dn->walpha;
    out[4] = &dn->wout;
}

/* -------------------------------------------------------------- state */

struct sp_rstate {
    const sp_model *m;
    sp_dn_shape s;
    float eps;
    int32_t max_batch, nth;
    size_t conv_n, ssm_n;  /* floats of one layer's conv window, S matrices */
    float *conv;           /* [SLOTS][n_layers][d_conv - 1][conv_dim], oldest row first */
    float *ssm;            /* [SLOTS][n_layers][n_v][hv][hk] */
    int32_t pos[SP_RSTATE_SLOTS]; /* tokens each slot's state has seen; -1: free */
    int cur;
    /* the last forward: started at last_n_past from slot src, writing dst */
    int src, dst;
    int32_t last_n_past, last_n; /* last_n 0: no log */
    int32_t *parent;       /* [max_batch] each token's parent in the batch, -1: the state before */
    size_t log_stride;     /* conv_dim + 2 n_v */
    float *log;            /* [n_layers][max_batch][log_stride]: qkv row, g [n_v], beta [n_v] */
    bool *done;            /* [n_layers] layers this forward advanced */
    /* scratch of a forward (as the lead context: rows of every sequence) */
    float *qkv, *z, *beta, *alpha, *cv, *y; /* [B][conv_dim], [B][vdim], [B][n_v] x 2, [B][conv_dim], [B][vdim] */
    float *work;           /* [nth][hv * hk] */
    int32_t *ent, *par;    /* [max_batch] node lists of a recomputation */
    int32_t *iota;         /* [max_batch] 0, 1, ...: a forward's log entries */
    int32_t *paths;        /* [nth][max_batch] tree paths of the recurrence's threads */
};

static float *conv_at(const sp_rstate *rs, int slot, int r) {
    return rs->conv + ((size_t)slot * (size_t)rs->s.n_layers + (size_t)r) * rs->conv_n;
}
static float *ssm_at(const sp_rstate *rs, int slot, int r) {
    return rs->ssm + ((size_t)slot * (size_t)rs->s.n_layers + (size_t)r) * rs->ssm_n;
}
static float *log_at(const sp_rstate *rs, int r, int32_t e) {
    return rs->log + ((size_t)r * (size_t)rs->max_batch + (size_t)e) * rs->log_stride;
}

void sp_rstate_free(sp_rstate *rs) {
    if (!rs) return;
    free(rs->conv);
    free(rs->ssm);
    free(rs->parent);
    free(rs->log);
    free(rs->done);
    free(rs->qkv);
    free(rs->z);
    free(rs->beta);
    free(rs->alpha);
    free(rs->cv);
    free(rs->y);
    free(rs->work);
    free(rs->ent);
    free(rs->par);
    free(rs->iota);
    free(rs->paths);
    free(rs);
}

static void zero_slot(sp_rstate *rs, int slot) {
    memset(conv_at(rs, slot, 0), 0, (size_t)rs->s.n_layers * rs->conv_n * sizeof(float));
    memset(ssm_at(rs, slot, 0), 0, (size_t)rs->s.n_layers * rs->ssm_n * sizeof(float));
    rs->pos[slot] = 0;
}

sp_status sp_rstate_init(const sp_model *m, int32_t max_batch, int n_threads, sp_rstate **out,
                         sp_error *err) {
    *out = NULL;
    sp_rstate *rs = calloc(1, sizeof *rs);
    if (!rs) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    const sp_dn_shape *s = &m->dn;
    rs->m = m;
    rs->s = *s;
    rs->eps = m->cfg.norm_eps;
    rs->max_batch = max_batch;
    rs->nth = n_threads < 1 ? 1 : n_threads;
    rs->conv_n = (size_t)(s->d_conv - 1) * (size_t)s->conv_dim;
    rs->ssm_n = (size_t)s->n_v * (size_t)s->hv * (size_t)s->hk;
    rs->log_stride = (size_t)s->conv_dim + 2 * (size_t)s->n_v;
    const size_t B = (size_t)max_batch, L = (size_t)s->n_layers, vdim = (size_t)s->n_v * (size_t)s->hv;
    rs->conv = malloc((rs->conv_n ? rs->conv_n : 1) * L * SP_RSTATE_SLOTS * sizeof(float));
    rs->ssm = malloc(rs->ssm_n * L * SP_RSTATE_SLOTS * sizeof(float));
    rs->parent = malloc(B * sizeof(int32_t));
    rs->log = malloc(L * B * rs->log_stride * sizeof(float));
    rs->done = calloc(L, sizeof(bool));
    rs->qkv = malloc(B * (size_t)s->conv_dim * sizeof(float));
    rs->cv = malloc(B * (size_t)s->conv_dim * sizeof(float));
    rs->z = malloc(B * vdim * sizeof(float));
    rs->y = malloc(B * vdim * sizeof(float));
    rs->beta = malloc(B * (size_t)s->n_v * sizeof(float));
    rs->alpha = malloc(B * (size_t)s->n_v * sizeof(float));
    rs->work = malloc((size_t)rs->nth * (size_t)s->hv * (size_t)s->hk * sizeof(float));
    rs->ent = malloc(B * sizeof(int32_t));
    rs->par = malloc(B * sizeof(int32_t));
    rs->iota = malloc(B * sizeof(int32_t));
    rs->paths = malloc((size_t)rs->nth * B * sizeof(int32_t));
    if (!rs->conv || !rs->ssm || !rs->parent || !rs->log || !rs->done || !rs->qkv || !rs->cv || !rs->z ||
        !rs->y || !rs->beta || !rs->alpha || !rs->work || !rs->ent || !rs->par || !rs->iota || !rs->paths) {
        const double mib = (double)(rs->conv_n + rs->ssm_n) * (double)L * SP_RSTATE_SLOTS * 4 / (1 << 20);
        sp_rstate_free(rs);
        return sp_fail(err, SP_ERR_NOMEM, "cannot allocate the recurrent state (%.1f MiB in %d snapshots)", mib,
                       SP_RSTATE_SLOTS);
    }
    for (int32_t i = 0; i < max_batch; i++) rs->iota[i] = i;
    for (int i = 0; i < SP_RSTATE_SLOTS; i++) rs->pos[i] = -1;
    zero_slot(rs, 0);
    rs->cur = 0;
    rs->src = rs->dst = -1;
    *out = rs;
    return SP_OK;
}

sp_status sp_rstate_check(const sp_rstate *rs, const sp_batch *b, int32_t n_past, sp_error *err) {
    (void)rs;
    if (b->mask && b->mask_from_past && b->mask_base < n_past)
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "a model with recurrent layers cannot continue a tree cached by an earlier batch "
                       "(mask base %d below the %d cached tokens)", b->mask_base, n_past);
    return SP_OK;
}

/* A slot to write: a free one, else the oldest snapshot; never `keep`. */
static int free_slot(const sp_rstate *rs, int keep) {
    int best = -1;
    for (int i = 0; i < SP_RSTATE_SLOTS; i++) {
        if (i == keep) continue;
        if (rs->pos[i] < 0) return i;
        if (best < 0 || rs->pos[i] < rs->pos[best]) best = i;
    }
    SP_ASSERT(best >= 0);
    return best;
}

void sp_rstate_begin(sp_rstate *rs, const sp_batch *b, int32_t n_past) {
    SP_ASSERT(rs->pos[rs->cur] == n_past && b->n <= rs->max_batch);
    rs->src = rs->cur;
    rs->dst = free_slot(rs, rs->cur);
    rs->pos[rs->dst] = -1;
    rs->last_n_past = n_past;
    rs->last_n = b->n;
    /* a token's parent: the nearest earlier token of the batch it sees */
    for (int32_t i = 0; i < b->n; i++) {
        int32_t p = i - 1;
        if (b->mask) {
            const uint8_t *row = b->mask + (int64_t)i * b->n;
            while (p >= 0 && !row[p]) p--;
        }
        rs->parent[i] = p;
    }
    memset(rs->done, 0, (size_t)rs->s.n_layers * sizeof(bool));
}

void sp_rstate_end(sp_rstate *rs) {
    for (int32_t r = 0; r < rs->s.n_layers; r++)
        if (!rs->done[r]) { /* a skipped layer keeps its state */
            memcpy(conv_at(rs, rs->dst, r), conv_at(rs, rs->src, r), rs->conv_n * sizeof(float));
            memcpy(ssm_at(rs, rs->dst, r), ssm_at(rs, rs->src, r), rs->ssm_n * sizeof(float));
        }
    rs->pos[rs->dst] = rs->last_n_past + rs->last_n;
    rs->cur = rs->dst;
}

/* ---------------------------------------------------------- recurrence */

/* A run of the recurrence of one layer over nodes 0..n-1: node t is log
 * entry ent[t], its parent node par[t] (-1: the state of slot src). */
typedef struct dn_run {
    sp_rstate *rs;         /* the sequence's state (log, slots) */
    const sp_deltanet *dn;
    int32_t r;             /* recurrent layer index */
    int src, dst;
    const int32_t *ent, *par;
    int32_t n;
    bool chain;            /* par[t] == t - 1 for every t */
    float *cv;             /* [n][conv_dim] scratch: conv outputs */
    float *y;              /* [n][n_v hv] outputs, or NULL */
    float *work;           /* the lead's per-thread matrices [nth][hv hk] */
    int32_t *paths;        /* the lead's per-thread node paths [nth][path_cap] */
    int32_t path_cap;
} dn_run;

/* The qkv row `back` steps up node t's path (0: its own), or a row of the
 * source conv window when the path leaves the batch. */
static const float *past_row(const dn_run *u, int32_t t, int32_t back) {
    int32_t node = t;
    for (int32_t s = 0; s < back; s++) node = node >= 0 ? u->par[node] : node - 1;
    if (node >= 0) return log_at(u->rs, u->r, u->ent[node]);
    /* node -1 is the newest row of the window, d_conv - 2 */
    return conv_at(u->rs, u->src, u->r) + (int64_t)(u->rs->s.d_conv - 1 + node) * u->rs->s.conv_dim;
}

/* cv[t] = silu(conv1d) of node t, then q and k heads L2-normed as
 * llama.cpp does (RMSNorm with eps / n, times 1 / sqrt(n)). */
static void conv_nodes(const dn_run *u) {
    const sp_dn_shape *s = &u->rs->s;
    const int32_t K = s->d_conv, C = s->conv_dim;
    const float *rows[64];
    for (int32_t t = 0; t < u->n; t++) {
        for (int32_t i = 0; i < K; i++) rows[i] = past_row(u, t, K - 1 - i);
        float *o = u->cv + (int64_t)t * C;
        for (int32_t c = 0; c < C; c++) {
            const float *w = u->dn->conv + (int64_t)c * K;
            float sum = 0.0f;
            for (int32_t i = 0; i < K; i++) sum += rows[i][c] * w[i];
            o[c] = sum / (1.0f + expf(-sum));
        }
        for (int32_t h = 0; h < 2 * s->n_k; h++) {
            float *x = o + (int64_t)h * s->hk;
            double ss = 0;
            for (int32_t i = 0; i < s->hk; i++) ss += (double)(x[i] * x[i]);
            const float n = (float)s->hk;
            const float scale = 1.0f / sqrtf((float)(ss / s->hk) + u->rs->eps / n);
            const float post = 1.0f / sqrtf(n);
            for (int32_t i = 0; i < s->hk; i++) x[i] = (x[i] * scale) * post;
        }
    }
}

/* The conv window after the last node: its path's last d_conv - 1 rows. */
static void conv_window(const dn_run *u) {
    const int32_t K = u->rs->s.d_conv, C = u->rs->s.conv_dim;
    float *dst = conv_at(u->rs, u->dst, u->r);
    SP_ASSERT(u->dst != u->src);
    for (int32_t i = 0; i < K - 1; i++)
        memcpy(dst + (int64_t)i * C, past_row(u, u->n - 1, K - 2 - i), (size_t)C * sizeof(float));
}

/* One token on head matrix S [hv][hk]: decay, delta update, output (o may
 * be NULL), as ggml's fused gated_delta_net. */
static void delta_step(float *S, int32_t hk, int32_t hv, const float *q, const float *k, const float *v,
                       float g, float beta, float *o) {
    const float eg = expf(g), scale = 1.0f / sqrtf((float)hv);
    for (int64_t i = 0; i < (int64_t)hk * hv; i++) S[i] *= eg;
    for (int32_t j = 0; j < hv; j++) {
        float *row = S + (int64_t)j * hk;
        float sum = 0.0f;
        for (int32_t i = 0; i < hk; i++) sum += row[i] * k[i];
        const float d = (v[j] - sum) * beta;
        for (int32_t i = 0; i < hk; i++) row[i] += k[i] * d;
    }
    if (o)
        for (int32_t j = 0; j < hv; j++) {
            const float *row = S + (int64_t)j * hk;
            float sum = 0.0f;
            for (int32_t i = 0; i < hk; i++) sum += row[i] * q[i];
            o[j] = sum * scale;
        }
}

/* Head h of a run on matrix S (the caller's scratch). */
static void run_head(const dn_run *u, int32_t h, float *S, int32_t *path) {
    const sp_dn_shape *s = &u->rs->s;
    const int32_t hk = s->hk, hv = s->hv, kh = h % s->n_k, C = s->conv_dim;
    const int64_t vdim = (int64_t)s->n_v * hv;
    const size_t mat = (size_t)hk * (size_t)hv;
    const float *S0 = ssm_at(u->rs, u->src, u->r) + (size_t)h * mat;
#define STEP(t, out)                                                                                        \
    do {                                                                                                    \
        const float *c_ = u->cv + (int64_t)(t) * C, *l_ = log_at(u->rs, u->r, u->ent[t]) + C;               \
        delta_step(S, hk, hv, c_ + (int64_t)kh * hk, c_ + (int64_t)(s->n_k + kh) * hk,                      \
                   c_ + (int64_t)2 * s->n_k * hk + (int64_t)h * hv, l_[h], l_[s->n_v + h], out);            \
    } while (0)
    if (u->chain) {
        memcpy(S, S0, mat * sizeof(float));
        for (int32_t t = 0; t < u->n; t++) STEP(t, u->y ? u->y + (int64_t)t * vdim + (int64_t)h * hv : NULL);
    } else {
        /* a tree: each node from the source along its own path */
        for (int32_t t = 0; t < u->n; t++) {
            if (!u->y && t < u->n - 1) continue;
            int32_t len = 0;
            for (int32_t a = t; a >= 0; a = u->par[a]) {
                SP_ASSERT(len < u->path_cap && u->par[a] < a);
                path[len++] = a;
            }
            memcpy(S, S0, mat * sizeof(float));
            for (int32_t i = len - 1; i >= 0; i--)
                STEP(path[i], i == 0 && u->y ? u->y + (int64_t)t * vdim + (int64_t)h * hv : NULL);
        }
    }
#undef STEP
    memcpy(ssm_at(u->rs, u->dst, u->r) + (size_t)h * mat, S, mat * sizeof(float));
}

/* Several runs' heads as one pool job: task i = run i / n_v, head i % n_v. */
typedef struct dn_job {
    const dn_run *runs;
    int n_runs;
    int32_t n_v;
} dn_job;

static void dn_job_run(void *arg, int ith, int nth) {
    const dn_job *j = arg;
    const int64_t tasks = (int64_t)j->n_runs * j->n_v;
    for (int64_t i = ith; i < tasks; i += nth) {
        const dn_run *u = &j->runs[i / j->n_v];
        run_head(u, (int32_t)(i % j->n_v), u->work + (size_t)ith * (size_t)u->rs->s.hk * (size_t)u->rs->s.hv,
                 u->paths + (size_t)ith * (size_t)u->path_cap);
    }
}

static bool is_chain(const int32_t *par, int32_t n) {
    for (int32_t t = 0; t < n; t++)
        if (par[t] != t - 1) return false;
    return true;
}

void sp_deltanet_forward(sp_ctx *c, const sp_dn_seq *sq, int n_seq, int32_t l, int32_t n,
                         const float *in, int64_t ld_in, float *out) {
    const sp_model *m = sp_ctx_model(c);
    const sp_deltanet *dn = m->layers[l].dn;
    sp_rstate *lead = sq[0].rs;
    const sp_dn_shape *s = &lead->s;
    const int32_t C = s->conv_dim, nv = s->n_v, hv = s->hv, r = dn->index;
    const int64_t vdim = (int64_t)nv * hv, dim = m->cfg.dim;
    const sp_mm_out mm[3] = {{&dn->wqkv, lead->qkv, C}, {&dn->wz, lead->z, vdim}, {&dn->wbeta, lead->beta, nv}};
    sp_ctx_matmul(c, mm, 3, in, ld_in, n);
    const sp_mm_out ma = {&dn->walpha, lead->alpha, nv};
    sp_ctx_matmul(c, &ma, 1, in, ld_in, n);
    dn_run runs[SP_FORWARD_MAX_SEQS];
    for (int i = 0; i < n_seq; i++) {
        sp_rstate *rs = sq[i].rs;
        for (int32_t t = 0; t < sq[i].n; t++) {
            const int64_t row = sq[i].row0 + t;
            float *e = log_at(rs, r, t);
            memcpy(e, lead->qkv + row * C, (size_t)C * sizeof(float));
            for (int32_t h = 0; h < nv; h++) {
                const float a = lead->alpha[row * nv + h] + dn->dt_bias[h];
                const float sp = a > 20.0f ? a : logf(1.0f + expf(a));
                e[C + h] = sp * dn->a[h];
                e[C + nv + h] = 1.0f / (1.0f + expf(-lead->beta[row * nv + h]));
            }
        }
        runs[i] = (dn_run){.rs = rs, .dn = dn, .r = r, .src = rs->src, .dst = rs->dst, .ent = rs->iota,
                           .par = rs->parent, .n = sq[i].n, .chain = is_chain(rs->parent, sq[i].n),
                           .cv = lead->cv + (int64_t)sq[i].row0 * C, .y = lead->y + (int64_t)sq[i].row0 * vdim,
                           .work = lead->work, .paths = lead->paths, .path_cap = lead->max_batch};
        conv_nodes(&runs[i]);
        conv_window(&runs[i]);
        rs->done[r] = true;
    }
    dn_job job = {.runs = runs, .n_runs = n_seq, .n_v = nv};
    /* per token and head about 4 hk hv multiply-adds */
    const uint64_t work = (uint64_t)n * (uint64_t)nv * (uint64_t)hv * (uint64_t)s->hk * 4;
    if (work < (1u << 17) || lead->nth == 1)
        dn_job_run(&job, 0, 1);
    else
        sp_pool_run(sp_ctx_pool(c), dn_job_run, &job);
    /* gated RMSNorm of each head's output, then the output projection */
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < nv; h++) {
            float *y = lead->y + (int64_t)t * vdim + (int64_t)h * hv;
            const float *z = lead->z + (int64_t)t * vdim + (int64_t)h * hv;
            sp_rmsnorm(y, y, dn->norm, hv, m->cfg.norm_eps);
            for (int32_t j = 0; j < hv; j++) y[j] *= z[j] / (1.0f + expf(-z[j]));
        }
    const sp_mm_out mo = {&dn->wout, out, dim};
    sp_ctx_matmul(c, &mo, 1, lead->y, vdim, n);
}

/* ------------------------------------------------------------ rollback */

/* Recomputes, from the last forward's source slot, the state after the
 * path ent[0..len-1] of its log (a chain) into a free slot at position
 * `pos`; makes it current. */
static void recompute(sp_rstate *rs, int32_t len, int32_t pos) {
    const sp_model *m = rs->m;
    int dst = -1;
    for (int i = 0; i < SP_RSTATE_SLOTS && dst < 0; i++)
        if (rs->pos[i] < 0 && i != rs->src) dst = i;
    SP_ASSERT(dst >= 0);
    for (int32_t t = 0; t < len; t++) rs->par[t] = t - 1;
    for (int32_t l = 0; l < m->cfg.n_layers; l++) {
        const sp_deltanet *dn = m->layers[l].dn;
        if (!dn) continue;
        dn_run u = {.rs = rs, .dn = dn, .r = dn->index, .src = rs->src, .dst = dst, .ent = rs->ent,
                    .par = rs->par, .n = len, .chain = true, .cv = rs->cv, .y = NULL, .work = rs->work,
                    .paths = rs->paths, .path_cap = rs->max_batch};
        conv_nodes(&u);
        conv_window(&u);
        for (int32_t h = 0; h < rs->s.n_v; h++) run_head(&u, h, rs->work, rs->paths);
    }
    rs->pos[dst] = pos;
    rs->cur = dst;
}

/* Frees every slot past n (states of tokens rolled back). */
static void drop_after(sp_rstate *rs, int32_t n) {
    for (int i = 0; i < SP_RSTATE_SLOTS; i++)
        if (rs->pos[i] > n) rs->pos[i] = -1;
}

/* Whether the last forward's log can serve positions (last_n_past, n]. */
static bool log_covers(const sp_rstate *rs, int32_t n) {
    return rs->last_n > 0 && rs->src >= 0 && rs->pos[rs->src] == rs->last_n_past && n > rs->last_n_past &&
           n <= rs->last_n_past + rs->last_n;
}

sp_status sp_rstate_truncate(sp_rstate *rs, int32_t n, sp_error *err) {
    const int32_t have = rs->pos[rs->cur];
    if (n < 0 || n > have)
        return sp_fail(err, SP_ERR_ARG, "cannot truncate a recurrent state of %d tokens to %d", have, n);
    if (n == have) return SP_OK;
    int exact = -1;
    for (int i = 0; i < SP_RSTATE_SLOTS; i++)
        if (rs->pos[i] == n) exact = i;
    if (exact >= 0) {
        drop_after(rs, n);
        rs->cur = exact;
        return SP_OK;
    }
    if (n == 0) {
        drop_after(rs, 0);
        const int z = free_slot(rs, -1);
        zero_slot(rs, z);
        rs->cur = z;
        rs->last_n = 0;
        return SP_OK;
    }
    if (!log_covers(rs, n))
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "cannot roll the recurrent state back to %d tokens: it keeps the states after the last "
                       "%d forwards and the positions inside the last one", n, SP_RSTATE_SLOTS - 1);
    /* the path of batch token n - last_n_past - 1 */
    int32_t len = 0;
    for (int32_t a = n - rs->last_n_past - 1; a >= 0; a = rs->parent[a]) len++;
    int32_t i = len;
    for (int32_t a = n - rs->last_n_past - 1; a >= 0; a = rs->parent[a]) rs->ent[--i] = a;
    drop_after(rs, n);
    recompute(rs, len, n);
    return SP_OK;
}

sp_status sp_rstate_keep(sp_rstate *rs, int32_t start, const int32_t *idx, int32_t m, sp_error *err) {
    const int32_t have = rs->pos[rs->cur];
    if (start < 0 || start > have || m < 0 || start + m > have)
        return sp_fail(err, SP_ERR_ARG, "bad keep range (start %d, %d entries, %d tokens)", start, m, have);
    bool prefix = true;
    for (int32_t i = 0; i < m; i++) {
        if (idx[i] < 0 || start + idx[i] >= have || (i > 0 && idx[i] <= idx[i - 1]))
            return sp_fail(err, SP_ERR_ARG, "keep index %d (%d) out of order or range", i, idx[i]);
        prefix &= idx[i] == i;
    }
    if (prefix) return sp_rstate_truncate(rs, start + m, err);
    const int32_t p0 = rs->last_n_past;
    if (!log_covers(rs, have) || rs->last_n_past + rs->last_n != have || start < p0)
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "a recurrent state keeps only tokens of the last forward (from %d), not from %d", p0, start);
    /* the path: the batch's tokens before start, then the kept ones */
    int32_t len = 0;
    for (int32_t e = 0; e < start - p0; e++) rs->ent[len++] = e;
    for (int32_t i = 0; i < m; i++) rs->ent[len++] = start - p0 + idx[i];
    for (int32_t i = 0; i < len; i++)
        if (rs->parent[rs->ent[i]] != (i ? rs->ent[i - 1] : -1))
            return sp_fail(err, SP_ERR_ARG, "kept token %d is not a child of the one kept before it", rs->ent[i]);
    drop_after(rs, start);
    recompute(rs, len, start + m);
    /* the log now holds the path as a chain */
    for (int32_t r = 0; r < rs->s.n_layers; r++)
        for (int32_t i = 0; i < len; i++)
            if (rs->ent[i] != i) memcpy(log_at(rs, r, i), log_at(rs, r, rs->ent[i]), rs->log_stride * sizeof(float));
    for (int32_t i = 0; i < len; i++) rs->parent[i] = i - 1;
    rs->last_n = len;
    return SP_OK;
}

/* ------------------------------------------------- gated attention bits */

void sp_gated_attn_split(float *q, float *gate, int32_t n, int32_t n_heads, int32_t hd) {
    const int64_t q_dim = (int64_t)n_heads * hd;
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < n_heads; h++) {
            const float *src = q + (int64_t)t * 2 * q_dim + (int64_t)h * 2 * hd;
            memcpy(gate + (int64_t)t * q_dim + (int64_t)h * hd, src + hd, (size_t)hd * sizeof(float));
            memmove(q + (int64_t)t * q_dim + (int64_t)h * hd, src, (size_t)hd * sizeof(float));
        }
}

void sp_gated_attn_apply(float *out, int64_t ld, const float *gate, int32_t n, int64_t q_dim) {
    for (int32_t t = 0; t < n; t++)
        for (int64_t i = 0; i < q_dim; i++) {
            const float g = gate[(int64_t)t * q_dim + i];
            out[(int64_t)t * ld + i] *= 1.0f / (1.0f + expf(-g));
        }
}

void sp_imrope_text(float *cs, const int32_t sections[4], int32_t rot_dim) {
    const int32_t total = sections[0] + sections[1] + sections[2] + sections[3];
    if (total <= 0) return;
    for (int32_t p = 0; p < rot_dim / 2; p++) {
        const int32_t sec = p % total;
        const bool pos = (sec % 3 == 0 && sec < 3 * sections[0]) || (sec % 3 == 1 && sec < 3 * sections[1]) ||
                         (sec % 3 == 2 && sec < 3 * sections[2]);
        if (!pos) cs[2 * p] = 1.0f, cs[2 * p + 1] = 0.0f;
    }
}
