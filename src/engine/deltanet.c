/* deltanet: Gated DeltaNet layers, their recurrent state with snapshots and
 * rollback, and the gated-attention helpers of the same models (deltanet.h
 * has the formulas). The arithmetic follows llama.cpp's CPU graph for
 * qwen35 (ggml's ssm_conv, its fused gated_delta_net op, its L2 norm as a
 * scaled RMSNorm), in float, accumulated in the same orders where that is
 * cheap to do. */
#include "deltanet.h"

#include <math.h>
#include <stdatomic.h>
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
    s->grouped = !strcmp(arch, "qwen3next");
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
    if (s->grouped) { /* qwen3next: no scales applied, beta and alpha in one matrix */
        if (!sp_gguf_find_tensor(m->gguf, T("attn_qkv.weight")) && sp_gguf_find_tensor(m->gguf, T("ssm_in.weight")))
            return sp_fail(err, SP_ERR_UNSUPPORTED,
                           "%s: blk.%d has the legacy fused ssm_in (q, k, v, z per key head) without attn_qkv and "
                           "attn_gate, which Specula does not read", path, l);
        sp_weight legacy;
        if ((st = sp_model_bind_matrix(m, path, T("attn_qkv.weight"), dim, s->conv_dim, false, &dn->wqkv, err)) ||
            (st = sp_model_bind_matrix(m, path, T("attn_gate.weight"), dim, vdim, false, &dn->wz, err)) ||
            (st = sp_model_bind_matrix(m, path, T("ssm_ba.weight"), dim, 2 * s->n_v, false, &dn->wba, err)) ||
            (st = sp_model_bind_matrix(m, path, T("ssm_out.weight"), vdim, dim, false, &dn->wout, err)) ||
            (st = sp_model_bind_matrix(m, path, T("ssm_in.weight"), dim, 2 * s->conv_dim - 2 * s->n_k * s->hk, true,
                                       &legacy, err)))
            return st;
    } else if ((st = sp_model_bind_matrix(m, path, T("attn_qkv.weight"), dim, s->conv_dim, false, &dn->wqkv, err)) ||
        (st = sp_model_bind_vector(m, path, T("attn_qkv.scale"), 1, true, &dn->wqkv.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("attn_gate.weight"), dim, vdim, false, &dn->wz, err)) ||
        (st = sp_model_bind_vector(m, path, T("attn_gate.scale"), 1, true, &dn->wz.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("ssm_beta.weight"), dim, s->n_v, false, &dn->wbeta, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_beta.scale"), 1, true, &dn->wbeta.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("ssm_alpha.weight"), dim, s->n_v, false, &dn->walpha, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_alpha.scale"), 1, true, &dn->walpha.scale, err)) ||
        (st = sp_model_bind_matrix(m, path, T("ssm_out.weight"), vdim, dim, false, &dn->wout, err)) ||
        (st = sp_model_bind_vector(m, path, T("ssm_out.scale"), 1, true, &dn->wout.scale, err)))
        return st;
    if ((st = sp_model_bind_matrix(m, path, T("ssm_conv1d.weight"), s->d_conv, s->conv_dim, false, &conv, err)) ||
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
    out[5] = &dn->wba;
}

/* -------------------------------------------------------------- state */

/* Tokens per chunk of the chunked recurrence, and the fewest chain tokens
 * of a forward that take it (deltanet.h). */
#define DN_CHUNK 64
static _Atomic int32_t g_chunk_min = 64;

int32_t sp_deltanet_chunk_min(int32_t n) {
    return n > 0 ? atomic_exchange(&g_chunk_min, n) : atomic_load(&g_chunk_min);
}
/* Floats of one thread's chunk scratch for value heads of hv. */
static size_t chunk_floats(int32_t hv) { return (size_t)DN_CHUNK * (4 + 2 * DN_CHUNK + 3 * (size_t)hv); }

/* The log: entry e is the token at position anchor_pos + e, with its qkv
 * row, decay g [n_v] and beta [n_v] per layer, and its parent entry (-1:
 * the anchor slot's state): the previous token in a chain, the nearest
 * visible earlier token under a tree mask. A forward starts a new log at
 * the current state unless it continues a tree of the logged tokens
 * (mask_from_past below n_past), which appends to it. */
struct sp_rstate {
    const sp_model *m;
    sp_dn_shape s;
    float eps;
    int32_t max_batch, log_cap, nth;
    size_t conv_n, ssm_n;  /* floats of one layer's conv window, S matrices */
    float *conv;           /* [SLOTS][n_layers][d_conv - 1][conv_dim], oldest row first */
    float *ssm;            /* [SLOTS][n_layers][n_v][hv][hk] */
    int32_t pos[SP_RSTATE_SLOTS]; /* tokens each slot's state has seen; -1: free */
    bool prefix[SP_RSTATE_SLOTS]; /* the state of the chain of positions 0..pos-1 (not a tree path) */
    int cur;               /* the current state's slot */
    int pin;               /* a state kept for a later truncate (sp_rstate_pin), -1: none */
    int32_t n_past;        /* tokens the current state has seen */
    int anchor;            /* the log's starting slot (-1: no log) */
    int32_t anchor_pos, n_log;
    int dst;               /* the slot a forward writes */
    int32_t first;         /* a forward's first entry */
    int32_t *parent;       /* [log_cap] */
    size_t log_stride;     /* conv_dim + 2 n_v + n_v hv: qkv row, decay, beta, and the
                            * token's deltas d (per value head and row, as its forward
                            * computed them: a replay needs no dot products) */
    float *log;            /* [n_layers][log_cap][log_stride] */
    bool *done;            /* [n_layers] layers this forward advanced */
    float *cv;             /* [log_cap][conv_dim] conv outputs of the entries a run reads */
    /* scratch of a forward (as the lead context: rows of every sequence) */
    float *qkv, *z, *beta, *alpha, *y; /* [B][conv_dim], [B][vdim], [B][n_v] x 2, [B][vdim] */
    float *ba;             /* [B][2 n_v] qwen3next's ssm_ba outputs */
    int32_t *paths;        /* [nth][log_cap] tree paths of the recurrence's threads */
    float *chunk;          /* [nth][chunk_floats] the chunked recurrence's scratch (prefill) */
};

static float *conv_at(const sp_rstate *rs, int slot, int r) {
    return rs->conv + ((size_t)slot * (size_t)rs->s.n_layers + (size_t)r) * rs->conv_n;
}
static float *ssm_at(const sp_rstate *rs, int slot, int r) {
    return rs->ssm + ((size_t)slot * (size_t)rs->s.n_layers + (size_t)r) * rs->ssm_n;
}
static float *log_at(const sp_rstate *rs, int r, int32_t e) {
    return rs->log + ((size_t)r * (size_t)rs->log_cap + (size_t)e) * rs->log_stride;
}

void sp_rstate_free(sp_rstate *rs) {
    if (!rs) return;
    free(rs->conv);
    free(rs->ssm);
    free(rs->parent);
    free(rs->log);
    free(rs->done);
    free(rs->cv);
    free(rs->qkv);
    free(rs->z);
    free(rs->beta);
    free(rs->alpha);
    free(rs->ba);
    free(rs->y);
    free(rs->paths);
    free(rs->chunk);
    free(rs);
}

static void zero_slot(sp_rstate *rs, int slot) {
    memset(conv_at(rs, slot, 0), 0, (size_t)rs->s.n_layers * rs->conv_n * sizeof(float));
    memset(ssm_at(rs, slot, 0), 0, (size_t)rs->s.n_layers * rs->ssm_n * sizeof(float));
    rs->pos[slot] = 0;
    rs->prefix[slot] = true;
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
    rs->log_cap = 2 * max_batch;
    rs->nth = n_threads < 1 ? 1 : n_threads;
    rs->conv_n = (size_t)(s->d_conv - 1) * (size_t)s->conv_dim;
    rs->ssm_n = (size_t)s->n_v * (size_t)s->hv * (size_t)s->hk;
    rs->log_stride = (size_t)s->conv_dim + 2 * (size_t)s->n_v + (size_t)s->n_v * (size_t)s->hv;
    const size_t B = (size_t)max_batch, L = (size_t)s->n_layers, vdim = (size_t)s->n_v * (size_t)s->hv;
    const size_t cap = (size_t)rs->log_cap;
    rs->conv = malloc((rs->conv_n ? rs->conv_n : 1) * L * SP_RSTATE_SLOTS * sizeof(float));
    rs->ssm = malloc(rs->ssm_n * L * SP_RSTATE_SLOTS * sizeof(float));
    rs->parent = malloc(cap * sizeof(int32_t));
    rs->log = malloc(L * cap * rs->log_stride * sizeof(float));
    rs->done = calloc(L, sizeof(bool));
    rs->cv = malloc(cap * (size_t)s->conv_dim * sizeof(float));
    rs->qkv = malloc(B * (size_t)s->conv_dim * sizeof(float));
    rs->z = malloc(B * vdim * sizeof(float));
    rs->y = malloc(B * vdim * sizeof(float));
    rs->beta = malloc(B * (size_t)s->n_v * sizeof(float));
    rs->alpha = malloc(B * (size_t)s->n_v * sizeof(float));
    rs->ba = malloc(B * 2 * (size_t)s->n_v * sizeof(float));
    rs->paths = malloc((size_t)rs->nth * cap * sizeof(int32_t));
    rs->chunk = malloc((size_t)rs->nth * chunk_floats(s->hv) * sizeof(float));
    if (!rs->conv || !rs->ssm || !rs->parent || !rs->log || !rs->done || !rs->cv || !rs->qkv || !rs->z ||
        !rs->y || !rs->beta || !rs->alpha || !rs->ba || !rs->paths || !rs->chunk) {
        const double mib = (double)(rs->conv_n + rs->ssm_n) * (double)L * SP_RSTATE_SLOTS * 4 / (1 << 20);
        sp_rstate_free(rs);
        return sp_fail(err, SP_ERR_NOMEM, "cannot allocate the recurrent state (%.1f MiB in %d snapshots)", mib,
                       SP_RSTATE_SLOTS);
    }
    for (int i = 0; i < SP_RSTATE_SLOTS; i++) rs->pos[i] = -1;
    zero_slot(rs, 0);
    rs->cur = 0;
    rs->anchor = rs->dst = rs->pin = -1;
    *out = rs;
    return SP_OK;
}

static bool continues_tree(const sp_batch *b, int32_t n_past) {
    return b->mask && b->mask_from_past && b->mask_base < n_past;
}

/* Whether the log holds every cached token since its anchor. */
static bool log_whole(const sp_rstate *rs) {
    return rs->anchor >= 0 && rs->pos[rs->anchor] == rs->anchor_pos && rs->anchor_pos + rs->n_log == rs->n_past;
}

sp_status sp_rstate_check(const sp_rstate *rs, const sp_batch *b, int32_t n_past, sp_error *err) {
    if (!continues_tree(b, n_past)) return SP_OK;
    if (!log_whole(rs) || b->mask_base < rs->anchor_pos || rs->n_log + b->n > rs->log_cap)
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "a model with recurrent layers continues a tree only over the tokens of its last "
                       "forwards (from %d, at most %d tokens), not from mask base %d", rs->anchor_pos,
                       rs->log_cap, b->mask_base);
    return SP_OK;
}

/* A slot to write: a free one, else the oldest; never a or b. */
static int free_slot(const sp_rstate *rs, int a, int b) {
    int best = -1;
    for (int i = 0; i < SP_RSTATE_SLOTS; i++) {
        if (i == a || i == b || i == rs->pin) continue;
        if (rs->pos[i] < 0) return i;
        if (best < 0 || rs->pos[i] < rs->pos[best]) best = i;
    }
    SP_ASSERT(best >= 0);
    return best;
}

static bool is_chain(const int32_t *par, int32_t n) {
    for (int32_t t = 0; t < n; t++)
        if (par[t] != t - 1) return false;
    return true;
}

void sp_rstate_begin(sp_rstate *rs, const sp_batch *b, int32_t n_past) {
    SP_ASSERT(rs->n_past == n_past && b->n <= rs->max_batch);
    const bool cont = continues_tree(b, n_past);
    if (!cont) { /* a new log from the current state */
        rs->anchor = rs->cur;
        rs->anchor_pos = n_past;
        rs->n_log = 0;
    }
    SP_ASSERT(log_whole(rs) && rs->n_log + b->n <= rs->log_cap);
    rs->dst = free_slot(rs, rs->anchor, rs->cur);
    rs->pos[rs->dst] = -1;
    rs->first = rs->n_log;
    /* a token's parent: the nearest earlier slot it sees at or after the
     * mask base, else the slot before the base; as log entries */
    const int32_t base = b->mask ? (b->mask_from_past ? b->mask_base : n_past) : n_past;
    const int32_t w = n_past + b->n - base;
    for (int32_t i = 0; i < b->n; i++) {
        int32_t p = n_past + i - 1;
        if (b->mask) {
            const uint8_t *row = b->mask + (int64_t)i * w;
            while (p >= base && !row[p - base]) p--;
        }
        rs->parent[rs->first + i] = p - rs->anchor_pos;
    }
    rs->n_log += b->n;
    memset(rs->done, 0, (size_t)rs->s.n_layers * sizeof(bool));
}

void sp_rstate_end(sp_rstate *rs) {
    for (int32_t r = 0; r < rs->s.n_layers; r++)
        if (!rs->done[r]) { /* a skipped layer: the state it had (of the last node's path start) */
            memcpy(conv_at(rs, rs->dst, r), conv_at(rs, rs->cur, r), rs->conv_n * sizeof(float));
            memcpy(ssm_at(rs, rs->dst, r), ssm_at(rs, rs->cur, r), rs->ssm_n * sizeof(float));
        }
    rs->n_past = rs->anchor_pos + rs->n_log;
    rs->pos[rs->dst] = rs->n_past;
    rs->prefix[rs->dst] = is_chain(rs->parent, rs->n_log) && rs->prefix[rs->anchor];
    rs->cur = rs->dst;
}

/* ---------------------------------------------------------- recurrence */

/* A run of one layer's recurrence over log entries [first, first + n) from
 * the anchor slot: their outputs (y, optional) and the state after the last
 * one's path (into dst). */
typedef struct dn_run {
    sp_rstate *rs;         /* the sequence's state (log, slots) */
    const sp_deltanet *dn;
    int32_t r;             /* recurrent layer index */
    int src, dst;
    int32_t first, n;
    bool chain;            /* entries 0..first+n-1 form a chain from the anchor and first = 0 */
    float *y;              /* [n][n_v hv] outputs, or NULL */
    int32_t *paths;        /* the lead's per-thread paths [nth][path_cap] */
    int32_t path_cap;
    float *chunk;          /* the lead's per-thread chunk scratch, or NULL: token steps only */
    bool replay;           /* entries with their logged deltas (a rollback's chain) */
} dn_run;

/* The qkv row `back` steps up entry e's path (0: its own), or a row of the
 * anchor's conv window when the path leaves the log. */
static const float *past_row(const dn_run *u, int32_t e, int32_t back) {
    const int32_t *par = u->rs->parent;
    int32_t node = e;
    for (int32_t s = 0; s < back; s++) node = node >= 0 ? par[node] : node - 1;
    if (node >= 0) return log_at(u->rs, u->r, node);
    /* node -1 is the newest row of the window, d_conv - 2 */
    return conv_at(u->rs, u->src, u->r) + (int64_t)(u->rs->s.d_conv - 1 + node) * u->rs->s.conv_dim;
}

/* cv[e] = silu(conv1d) of entry e, then its q and k heads L2-normed as
 * llama.cpp does (RMSNorm with eps / n, times 1 / sqrt(n)). */
static void conv_entries(const dn_run *u, int32_t lo, int32_t hi) {
    const sp_dn_shape *s = &u->rs->s;
    const int32_t K = s->d_conv, C = s->conv_dim;
    const float *rows[64];
    for (int32_t e = lo; e < hi; e++) {
        for (int32_t i = 0; i < K; i++) rows[i] = past_row(u, e, K - 1 - i);
        float *o = u->rs->cv + (int64_t)e * C;
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

/* The conv window after the run's last entry: its path's last d_conv - 1 rows. */
static void conv_window(const dn_run *u) {
    const int32_t K = u->rs->s.d_conv, C = u->rs->s.conv_dim;
    float *dst = conv_at(u->rs, u->dst, u->r);
    SP_ASSERT(u->dst != u->src);
    for (int32_t i = 0; i < K - 1; i++)
        memcpy(dst + (int64_t)i * C, past_row(u, u->first + u->n - 1, K - 2 - i), (size_t)C * sizeof(float));
}

#define DN_INLINE static inline __attribute__((always_inline))

/* Steps of up to DN_CHUNK tokens on head matrix S [hv][hk]: per token
 * decay, delta update, output (o[i] may be NULL), the operations of ggml's
 * fused gated_delta_net (each dot in 8 lanes, lane l summing elements l,
 * l + 8, ..., then the lanes pairwise: a fixed order a compiler vectorises
 * without changing it). A row's update
 * depends on that row alone, so rows go outermost: each row stays in L1
 * over the tokens (the state is read and written once, not once per token)
 * with per row the same operations in the same order as token after token. */
typedef struct dn_steps {
    int32_t n;
    const float *q[DN_CHUNK], *k[DN_CHUNK], *v[DN_CHUNK];
    float eg[DN_CHUNK], beta[DN_CHUNK];
    float *o[DN_CHUNK];
    float *d[DN_CHUNK];   /* [hv] each token's deltas, written (or with replay, read) */
    bool replay;          /* the deltas are known: decay and update only */
} dn_steps;

DN_INLINE void delta_steps(float *restrict S, int32_t hk, int32_t hv, const dn_steps *st) {
    const float scale = 1.0f / sqrtf((float)hv);
    const int32_t n8 = hk / 8 * 8;
    for (int32_t j = 0; j < hv && st->replay; j++) { /* the same decay and update, d as computed */
        float *restrict row = S + (int64_t)j * hk;
        for (int32_t t = 0; t < st->n; t++) {
            const float *restrict k = st->k[t];
            const float eg = st->eg[t], d = st->d[t][j];
            for (int32_t i = 0; i < n8; i += 8)
                for (int l = 0; l < 8; l++) {
                    row[i + l] *= eg;
                    row[i + l] += k[i + l] * d;
                }
            for (int32_t i = n8; i < hk; i++) {
                row[i] *= eg;
                row[i] += k[i] * d;
            }
        }
    }
    for (int32_t j = 0; j < hv && !st->replay; j++) {
        float *restrict row = S + (int64_t)j * hk;
        for (int32_t t = 0; t < st->n; t++) {
            const float *restrict k = st->k[t], *restrict q = st->q[t];
            const float eg = st->eg[t];
            /* decay, and the dot with k */
            float acc[8] = {0};
            for (int32_t i = 0; i < n8; i += 8)
                for (int l = 0; l < 8; l++) {
                    row[i + l] *= eg;
                    acc[l] += row[i + l] * k[i + l];
                }
            for (int32_t i = n8, l = 0; i < hk; i++, l++) {
                row[i] *= eg;
                acc[l] += row[i] * k[i];
            }
            const float sk = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            const float d = (st->v[t][j] - sk) * st->beta[t];
            st->d[t][j] = d;
            if (!st->o[t]) { /* the update alone */
                for (int32_t i = 0; i < n8; i += 8)
                    for (int l = 0; l < 8; l++) row[i + l] += k[i + l] * d;
                for (int32_t i = n8; i < hk; i++) row[i] += k[i] * d;
                continue;
            }
            /* the update, and the dot with q likewise */
            float aq[8] = {0};
            for (int32_t i = 0; i < n8; i += 8)
                for (int l = 0; l < 8; l++) {
                    row[i + l] += k[i + l] * d;
                    aq[l] += row[i + l] * q[i + l];
                }
            for (int32_t i = n8, l = 0; i < hk; i++, l++) {
                row[i] += k[i] * d;
                aq[l] += row[i] * q[i];
            }
            st->o[t][j] = (((aq[0] + aq[4]) + (aq[1] + aq[5])) + ((aq[2] + aq[6]) + (aq[3] + aq[7]))) * scale;
        }
    }
}

/* Entries [e0, e0 + c) of a chain on head h in one pass, the chunked form
 * of the gated delta rule: with G_t the cumulative decay within the chunk
 * and S0 the state before it,
 *   u_t = b_t (v_t - e^G_t S0 k_t) - b_t sum_{i<t} e^(G_t - G_i) (k_t . k_i) u_i
 *   o_t = (e^G_t S0 q_t + sum_{i<=t} e^(G_t - G_i) (q_t . k_i) u_i) / sqrt(hv)
 *   S   = e^G_c S0 + sum_i e^(G_c - G_i) u_i k_i^T
 * (u_t: token t's delta, b_t its beta), equal to c token steps up to float
 * rounding. S is updated in place; o rows vdim apart (NULL: none). */
/* 8 floats as one value (GCC/Clang vector extension): lane-wise IEEE
 * operations, the same bits whatever instructions a build gives them. */
typedef float v8f __attribute__((vector_size(32)));
/* always inlined: no call passes a v8f, so the ABI note does not apply */
#if defined(__clang__)
#if __has_warning("-Wpsabi")
#pragma clang diagnostic ignored "-Wpsabi"
#endif
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
DN_INLINE v8f ld8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
DN_INLINE void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
DN_INLINE float sum8(v8f a) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }
DN_INLINE v8f splat8(float x) { return (v8f){x, x, x, x, x, x, x, x}; }

DN_INLINE void chunk_head(const dn_run *u, int32_t h, int32_t kh, float *restrict S, int32_t e0, int32_t c,
                          float *o, int64_t vdim, float *restrict scr) {
    const sp_dn_shape *s = &u->rs->s;
    const int32_t hk = s->hk, hv = s->hv, C = s->conv_dim, nv = s->n_v;
    float *eg = scr, *beta = eg + DN_CHUNK, *gam = beta + DN_CHUNK;
    float *dec = gam + DN_CHUNK; /* [c] decay from token i to the chunk's end */
    float *KK = dec + DN_CHUNK, *KQ = KK + DN_CHUNK * DN_CHUNK;
    float *W = KQ + DN_CHUNK * DN_CHUNK, *P = W + (size_t)DN_CHUNK * hv;
    float *U = P + (size_t)DN_CHUNK * hv;
    const float *q[DN_CHUNK], *k[DN_CHUNK], *v[DN_CHUNK];
    float acc = 0.0f;
    for (int32_t t = 0; t < c; t++) {
        const float *cv = u->rs->cv + (int64_t)(e0 + t) * C, *l = log_at(u->rs, u->r, e0 + t) + C;
        q[t] = cv + (int64_t)kh * hk;
        k[t] = cv + (int64_t)(s->n_k + kh) * hk;
        v[t] = cv + (int64_t)2 * s->n_k * hk + (int64_t)h * hv;
        acc += l[h];
        eg[t] = expf(l[h]);
        gam[t] = expf(acc);
        beta[t] = l[nv + h];
    }
    const float scale = 1.0f / sqrtf((float)hv);
    /* S0 k_t and S0 q_t, row by row (a row read once for the chunk), two
     * tokens at a time (four independent sums) */
    for (int32_t j = 0; j < hv; j++) {
        const float *row = S + (int64_t)j * hk;
        int32_t t = 0;
        for (; t + 2 <= c; t += 2) {
            v8f ak0 = splat8(0), aq0 = splat8(0), ak1 = splat8(0), aq1 = splat8(0);
            for (int32_t x = 0; x < hk; x += 8) {
                const v8f r = ld8(row + x);
                ak0 += r * ld8(k[t] + x);
                aq0 += r * ld8(q[t] + x);
                ak1 += r * ld8(k[t + 1] + x);
                aq1 += r * ld8(q[t + 1] + x);
            }
            W[(int64_t)t * hv + j] = sum8(ak0), P[(int64_t)t * hv + j] = sum8(aq0);
            W[(int64_t)(t + 1) * hv + j] = sum8(ak1), P[(int64_t)(t + 1) * hv + j] = sum8(aq1);
        }
        for (; t < c; t++) {
            v8f ak = splat8(0), aq = splat8(0);
            for (int32_t x = 0; x < hk; x += 8) {
                const v8f r = ld8(row + x);
                ak += r * ld8(k[t] + x);
                aq += r * ld8(q[t] + x);
            }
            W[(int64_t)t * hv + j] = sum8(ak), P[(int64_t)t * hv + j] = sum8(aq);
        }
    }
    /* decayed key products: d(t, i) = e^(G_t - G_i) as the running product
     * of the per-token decays from i + 1 to t */
    for (int32_t t = 0; t < c; t++) {
        float d = 1.0f;
        for (int32_t i = t; i >= 0; i--) {
            v8f ak = splat8(0), aq = splat8(0);
            for (int32_t x = 0; x < hk; x += 8) {
                const v8f ki = ld8(k[i] + x);
                ak += ld8(k[t] + x) * ki;
                aq += ld8(q[t] + x) * ki;
            }
            KK[t * DN_CHUNK + i] = i < t ? beta[t] * d * sum8(ak) : 0.0f;
            KQ[t * DN_CHUNK + i] = d * sum8(aq);
            d *= eg[i];
        }
    }
    /* the deltas (forward substitution) and the outputs, 32 value rows at
     * a time (four independent sums; hk and hv are multiples of 32) */
    for (int32_t j = 0; j < hv; j += 32) {
        for (int32_t t = 0; t < c; t++) {
            const float *vt = v[t] + j, *wt = W + (int64_t)t * hv + j;
            v8f u0 = beta[t] * (ld8(vt) - gam[t] * ld8(wt)), u1 = beta[t] * (ld8(vt + 8) - gam[t] * ld8(wt + 8));
            v8f u2 = beta[t] * (ld8(vt + 16) - gam[t] * ld8(wt + 16)), u3 = beta[t] * (ld8(vt + 24) - gam[t] * ld8(wt + 24));
            for (int32_t i = 0; i < t; i++) {
                const float a = KK[t * DN_CHUNK + i];
                const float *ui = U + (int64_t)i * hv + j;
                u0 -= a * ld8(ui), u1 -= a * ld8(ui + 8), u2 -= a * ld8(ui + 16), u3 -= a * ld8(ui + 24);
            }
            float *ut = U + (int64_t)t * hv + j;
            st8(ut, u0), st8(ut + 8, u1), st8(ut + 16, u2), st8(ut + 24, u3);
            if (!o) continue;
            const float *pt = P + (int64_t)t * hv + j;
            v8f o0 = gam[t] * ld8(pt), o1 = gam[t] * ld8(pt + 8), o2 = gam[t] * ld8(pt + 16), o3 = gam[t] * ld8(pt + 24);
            for (int32_t i = 0; i <= t; i++) {
                const float a = KQ[t * DN_CHUNK + i];
                const float *ui = U + (int64_t)i * hv + j;
                o0 += a * ld8(ui), o1 += a * ld8(ui + 8), o2 += a * ld8(ui + 16), o3 += a * ld8(ui + 24);
            }
            float *ot = o + (int64_t)t * vdim + j;
            st8(ot, o0 * scale), st8(ot + 8, o1 * scale), st8(ot + 16, o2 * scale), st8(ot + 24, o3 * scale);
        }
    }
    for (int32_t t = 0; t < c; t++) /* the deltas into the log (a rollback replays them) */
        memcpy((float *)log_at(u->rs, u->r, e0 + t) + C + 2 * nv + (int64_t)h * hv, U + (int64_t)t * hv,
               (size_t)hv * sizeof(float));
    /* the state after the chunk: four 8-float blocks of a row kept in
     * registers over the chunk's tokens */
    dec[c - 1] = 1.0f;
    for (int32_t i = c - 2; i >= 0; i--) dec[i] = dec[i + 1] * eg[i + 1];
    const float gc = gam[c - 1];
    for (int32_t j = 0; j < hv; j++) {
        float *row = S + (int64_t)j * hk;
        float a[DN_CHUNK];
        for (int32_t i = 0; i < c; i++) a[i] = dec[i] * U[(int64_t)i * hv + j];
        for (int32_t x = 0; x < hk; x += 32) {
            v8f r0 = ld8(row + x) * gc, r1 = ld8(row + x + 8) * gc;
            v8f r2 = ld8(row + x + 16) * gc, r3 = ld8(row + x + 24) * gc;
            for (int32_t i = 0; i < c; i++) {
                const float *ki = k[i] + x;
                r0 += a[i] * ld8(ki), r1 += a[i] * ld8(ki + 8), r2 += a[i] * ld8(ki + 16), r3 += a[i] * ld8(ki + 24);
            }
            st8(row + x, r0), st8(row + x + 8, r1), st8(row + x + 16, r2), st8(row + x + 24, r3);
        }
    }
}

/* Head h of a run, computed in place in the dst slot's matrix; path and
 * scr: the caller's scratch. One body compiled twice (run_head below):
 * the same float operations in the same order (8 lanes, no FMA: the build's
 * -ffp-contract=off), so both give the same bits. */
DN_INLINE void run_head_body(const dn_run *u, int32_t h, int32_t *path, float *scr) {
    const sp_dn_shape *s = &u->rs->s;
    const int32_t hk = s->hk, hv = s->hv, C = s->conv_dim;
    const int32_t kh = s->grouped ? h / (s->n_v / s->n_k) : h % s->n_k;
    const int64_t vdim = (int64_t)s->n_v * hv;
    const size_t mat = (size_t)hk * (size_t)hv;
    const float *S0 = ssm_at(u->rs, u->src, u->r) + (size_t)h * mat;
    float *S = ssm_at(u->rs, u->dst, u->r) + (size_t)h * mat;
    const int32_t *par = u->rs->parent;
    dn_steps st;
    st.n = 0;
    st.replay = u->replay;
    /* token e of the log into the steps (out: its output row or NULL), run when full */
#define STEP(e, out)                                                                                        \
    do {                                                                                                    \
        const float *c_ = u->rs->cv + (int64_t)(e) * C, *l_ = log_at(u->rs, u->r, e) + C;                   \
        st.q[st.n] = c_ + (int64_t)kh * hk;                                                                 \
        st.k[st.n] = c_ + (int64_t)(s->n_k + kh) * hk;                                                      \
        st.v[st.n] = c_ + (int64_t)2 * s->n_k * hk + (int64_t)h * hv;                                       \
        st.eg[st.n] = expf(l_[h]);                                                                          \
        st.beta[st.n] = l_[s->n_v + h];                                                                     \
        st.d[st.n] = (float *)l_ + 2 * s->n_v + (int64_t)h * hv;                                            \
        st.o[st.n++] = (out);                                                                               \
        if (st.n == DN_CHUNK) delta_steps(S, hk, hv, &st), st.n = 0;                                        \
    } while (0)
#define FLUSH() (st.n ? delta_steps(S, hk, hv, &st), st.n = 0 : 0)
#define OUT(e) (u->y ? u->y + (int64_t)((e) - u->first) * vdim + (int64_t)h * hv : NULL)
    if (u->chain && u->y && u->n >= atomic_load_explicit(&g_chunk_min, memory_order_relaxed) && scr && hk % 32 == 0 &&
        hv % 32 == 0) { /* a prefill: chunk by chunk */
        memcpy(S, S0, mat * sizeof(float));
        for (int32_t e = 0; e < u->n; e += DN_CHUNK) {
            const int32_t c = u->n - e < DN_CHUNK ? u->n - e : DN_CHUNK;
            chunk_head(u, h, kh, S, e, c, OUT(e), vdim, scr);
        }
    } else if (u->chain) {
        memcpy(S, S0, mat * sizeof(float));
        for (int32_t e = 0; e < u->n; e++) STEP(e, OUT(e));
        FLUSH();
    } else {
        /* a tree: each entry from the anchor along its own path */
        for (int32_t e = u->first; e < u->first + u->n; e++) {
            if (!u->y && e < u->first + u->n - 1) continue;
            int32_t len = 0;
            for (int32_t a = e; a >= 0; a = par[a]) {
                SP_ASSERT(len < u->path_cap && par[a] < a);
                path[len++] = a;
            }
            memcpy(S, S0, mat * sizeof(float));
            for (int32_t i = len - 1; i >= 0; i--) STEP(path[i], i == 0 ? OUT(e) : NULL);
            FLUSH();
        }
    }
#undef STEP
#undef FLUSH
#undef OUT
}

static void run_head_scalar(const dn_run *u, int32_t h, int32_t *path, float *scr) { run_head_body(u, h, path, scr); }
#if defined(__x86_64__) || defined(__i386__)
/* The same code with 256-bit vectors (the 8 lanes, the row blocks). */
__attribute__((target("avx2"))) static void run_head_avx2(const dn_run *u, int32_t h, int32_t *path, float *scr) {
    run_head_body(u, h, path, scr);
}
#endif

/* run_head_scalar, or its AVX2 build when the kernels in use (ops.h's ISA)
 * are AVX2 or AVX-512: equal results (test_hybrid's test_isa_equal). */
static void run_head(const dn_run *u, int32_t h, int32_t *path, float *scr) {
#if defined(__x86_64__) || defined(__i386__)
    if (sp_ops_isa() >= SP_ISA_AVX2) {
        run_head_avx2(u, h, path, scr);
        return;
    }
#endif
    run_head_scalar(u, h, path, scr);
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
        run_head(u, (int32_t)(i % j->n_v), u->paths + (size_t)ith * (size_t)u->path_cap,
                 u->chunk ? u->chunk + (size_t)ith * chunk_floats(u->rs->s.hv) : NULL);
    }
}

/* Conv outputs a run reads: its own entries, and in a tree every earlier
 * entry (paths reach back to the anchor). */
static void run_prepare(const dn_run *u) {
    conv_entries(u, u->chain ? u->first : 0, u->first + u->n);
    conv_window(u);
}

void sp_deltanet_forward(sp_ctx *c, const sp_dn_seq *sq, int n_seq, int32_t l, int32_t n,
                         const float *in, int64_t ld_in, float *out) {
    const sp_model *m = sp_ctx_model(c);
    const sp_deltanet *dn = m->layers[l].dn;
    sp_rstate *lead = sq[0].rs;
    const sp_dn_shape *s = &lead->s;
    const int32_t C = s->conv_dim, nv = s->n_v, hv = s->hv, r = dn->index;
    const int64_t vdim = (int64_t)nv * hv, dim = m->cfg.dim;
    if (dn->wba.data) { /* qwen3next: [betas | alphas] of each key head's value heads */
        const sp_mm_out mm[3] = {{&dn->wqkv, lead->qkv, C}, {&dn->wz, lead->z, vdim}, {&dn->wba, lead->ba, 2 * nv}};
        sp_ctx_matmul(c, mm, 3, in, ld_in, n);
        const int32_t rep = nv / s->n_k;
        for (int32_t t = 0; t < n; t++)
            for (int32_t g = 0; g < s->n_k; g++)
                for (int32_t j = 0; j < rep; j++) {
                    const float *ba = lead->ba + (int64_t)t * 2 * nv + (int64_t)g * 2 * rep;
                    lead->beta[(int64_t)t * nv + g * rep + j] = ba[j];
                    lead->alpha[(int64_t)t * nv + g * rep + j] = ba[rep + j];
                }
    } else {
        const sp_mm_out mm[3] = {{&dn->wqkv, lead->qkv, C}, {&dn->wz, lead->z, vdim}, {&dn->wbeta, lead->beta, nv}};
        sp_ctx_matmul(c, mm, 3, in, ld_in, n);
        const sp_mm_out ma = {&dn->walpha, lead->alpha, nv};
        sp_ctx_matmul(c, &ma, 1, in, ld_in, n);
    }
    dn_run runs[SP_FORWARD_MAX_SEQS];
    uint64_t steps = 0;
    for (int i = 0; i < n_seq; i++) {
        sp_rstate *rs = sq[i].rs;
        for (int32_t t = 0; t < sq[i].n; t++) {
            const int64_t row = sq[i].row0 + t;
            float *e = log_at(rs, r, rs->first + t);
            memcpy(e, lead->qkv + row * C, (size_t)C * sizeof(float));
            for (int32_t h = 0; h < nv; h++) {
                const float a = lead->alpha[row * nv + h] + dn->dt_bias[h];
                const float sp = a > 20.0f ? a : logf(1.0f + expf(a));
                e[C + h] = sp * dn->a[h];
                e[C + nv + h] = 1.0f / (1.0f + expf(-lead->beta[row * nv + h]));
            }
        }
        const bool chain = rs->first == 0 && is_chain(rs->parent, rs->n_log);
        runs[i] = (dn_run){.rs = rs, .dn = dn, .r = r, .src = rs->anchor, .dst = rs->dst, .first = rs->first,
                           .n = sq[i].n, .chain = chain, .y = lead->y + (int64_t)sq[i].row0 * vdim,
                           .paths = lead->paths, .path_cap = lead->log_cap, .chunk = lead->chunk};
        run_prepare(&runs[i]);
        rs->done[r] = true;
        steps += chain ? (uint64_t)sq[i].n : (uint64_t)sq[i].n * (uint64_t)rs->n_log;
    }
    dn_job job = {.runs = runs, .n_runs = n_seq, .n_v = nv};
    /* per token step and head about 4 hk hv multiply-adds */
    const uint64_t work = steps * (uint64_t)nv * (uint64_t)hv * (uint64_t)s->hk * 4;
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

/* Log entries 0..len-1 (a chain) from the anchor into a free slot: the
 * state after them, made current at position anchor_pos + len. */
static void recompute(sp_rstate *rs, int32_t len) {
    const sp_model *m = rs->m;
    SP_ASSERT(len >= 1 && is_chain(rs->parent, len));
    const int dst = free_slot(rs, rs->anchor, -1);
    for (int32_t l = 0; l < m->cfg.n_layers; l++) {
        const sp_deltanet *dn = m->layers[l].dn;
        if (!dn) continue;
        dn_run u = {.rs = rs, .dn = dn, .r = dn->index, .src = rs->anchor, .dst = dst, .first = 0, .n = len,
                    .chain = true, .y = NULL, .paths = rs->paths, .path_cap = rs->log_cap, .replay = true};
        run_prepare(&u);
        for (int32_t h = 0; h < rs->s.n_v; h++) run_head(&u, h, rs->paths, NULL);
    }
    rs->n_log = len;
    rs->n_past = rs->anchor_pos + len;
    rs->pos[dst] = rs->n_past;
    rs->prefix[dst] = rs->prefix[rs->anchor];
    rs->cur = dst;
}

/* Frees the slots past n and the tree states. */
static void drop_after(sp_rstate *rs, int32_t n) {
    for (int i = 0; i < SP_RSTATE_SLOTS; i++)
        if (rs->pos[i] > n || (rs->pos[i] >= 0 && !rs->prefix[i])) rs->pos[i] = -1;
    if (rs->pin >= 0 && rs->pos[rs->pin] < 0) rs->pin = -1;
}

void sp_rstate_pin(sp_rstate *rs) { rs->pin = rs->prefix[rs->cur] ? rs->cur : -1; }

sp_status sp_rstate_truncate(sp_rstate *rs, int32_t n, sp_error *err) {
    const int32_t have = rs->n_past;
    if (n < 0 || n > have)
        return sp_fail(err, SP_ERR_ARG, "cannot truncate a recurrent state of %d tokens to %d", have, n);
    if (n == have && rs->prefix[rs->cur]) return SP_OK;
    int exact = -1;
    for (int i = 0; i < SP_RSTATE_SLOTS; i++)
        if (rs->pos[i] == n && rs->prefix[i]) exact = i;
    if (exact >= 0) {
        drop_after(rs, n);
        rs->cur = exact;
        rs->n_past = n;
        if (rs->anchor >= 0 && n >= rs->anchor_pos && rs->pos[rs->anchor] == rs->anchor_pos)
            rs->n_log = n - rs->anchor_pos < rs->n_log ? n - rs->anchor_pos : rs->n_log;
        return SP_OK;
    }
    if (n == 0) {
        drop_after(rs, 0);
        const int z = free_slot(rs, -1, -1);
        zero_slot(rs, z);
        rs->cur = z;
        rs->n_past = 0;
        rs->anchor = -1;
        return SP_OK;
    }
    const int32_t k = n - rs->anchor_pos;
    if (!log_whole(rs) || k <= 0 || !is_chain(rs->parent, k))
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "cannot roll the recurrent state back to %d tokens: it keeps the states after the last "
                       "%d forwards and the chain of tokens its last forwards logged", n, SP_RSTATE_SLOTS - 1);
    drop_after(rs, rs->anchor_pos);
    recompute(rs, k);
    return SP_OK;
}

sp_status sp_rstate_keep(sp_rstate *rs, int32_t start, const int32_t *idx, int32_t m, sp_error *err) {
    const int32_t have = rs->n_past;
    if (start < 0 || start > have || m < 0 || start + m > have)
        return sp_fail(err, SP_ERR_ARG, "bad keep range (start %d, %d entries, %d tokens)", start, m, have);
    bool prefix = true;
    for (int32_t i = 0; i < m; i++) {
        if (idx[i] < 0 || start + idx[i] >= have || (i > 0 && idx[i] <= idx[i - 1]))
            return sp_fail(err, SP_ERR_ARG, "keep index %d (%d) out of order or range", i, idx[i]);
        prefix &= idx[i] == i;
    }
    if (prefix) return sp_rstate_truncate(rs, start + m, err);
    const int32_t p0 = rs->anchor_pos;
    if (!log_whole(rs) || start < p0)
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "a recurrent state keeps only tokens its last forwards logged (from %d), not from %d", p0,
                       start);
    /* the path: the logged tokens before start, then the kept ones */
    const int32_t len = start - p0 + m;
    for (int32_t i = 0; i < len; i++) {
        const int32_t e = i < start - p0 ? i : start - p0 + idx[i - (start - p0)];
        const int32_t want = i == 0 ? -1 : (i - 1 < start - p0 ? i - 1 : start - p0 + idx[i - 1 - (start - p0)]);
        if (rs->parent[e] != want)
            return sp_fail(err, SP_ERR_ARG, "kept token %d is not a child of the one kept before it", p0 + e);
    }
    /* the log holds the path as a chain (entries only move down) */
    for (int32_t i = start - p0; i < len; i++) {
        const int32_t e = start - p0 + idx[i - (start - p0)];
        for (int32_t r = 0; r < rs->s.n_layers && e != i; r++)
            memcpy(log_at(rs, r, i), log_at(rs, r, e), rs->log_stride * sizeof(float));
        rs->parent[i] = i - 1;
    }
    drop_after(rs, p0);
    if (len == 0) { /* nothing since the anchor */
        rs->cur = rs->anchor;
        rs->n_past = p0;
        rs->n_log = 0;
        return SP_OK;
    }
    recompute(rs, len);
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
