/* eagle3: EAGLE-3 draft heads: loading a head written by llama.cpp's
 * converter (architecture `eagle3`) against its target model, and the
 * head's encoder (fc fusion of three target taps) and one-layer decoder
 * with its own KV cache. See sp_model.h for the model, eagle3.h for the
 * pair convention. Kernels are ops.h's, as the target's forward uses them. */
#include "eagle3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "model_internal.h"
#include "ops.h"
#include "quant.h"
#include "tokenizer_load.h"

struct sp_eagle3 {
    sp_gguf *gguf;
    const sp_model *target;
    char desc[128];
    int32_t dim, n_heads, n_kv_heads, head_dim, rot_dim, ffn_dim;
    int32_t tgt_dim, V, n_draft_vocab;
    int32_t layers[3];
    float eps, rope_theta;
    bool norm_before_residual, norm_before_fc;
    sp_weight fc, tok_embd, output, wq, wk, wv, wo, w1, w2, w3;
    float *enc_norm;   /* [3 * tgt_dim] or NULL */
    float *attn_norm, *hidden_norm, *ffn_norm, *out_norm; /* [dim] */
    float *rope_factors; /* [rot_dim / 2] or NULL */
    int32_t *d2t;      /* [n_draft_vocab] target ids, or NULL (the identity) */
    void *owned[32];   /* packed matrices, and a snapshot's own weights */
    int n_owned;
};

int32_t sp_eagle3_dim(const sp_eagle3 *h) { return h->dim; }
const sp_model *sp_eagle3_target(const sp_eagle3 *h) { return h->target; }
int32_t sp_eagle3_target_dim(const sp_eagle3 *h) { return h->tgt_dim; }
const char *sp_eagle3_desc(const sp_eagle3 *h) { return h->desc; }
const int32_t *sp_eagle3_target_layers(const sp_eagle3 *h) { return h->layers; }

void sp_eagle3_free(sp_eagle3 *h) {
    if (!h) return;
    free(h->enc_norm);
    free(h->attn_norm);
    free(h->hidden_norm);
    free(h->ffn_norm);
    free(h->out_norm);
    free(h->rope_factors);
    free(h->d2t);
    for (int i = 0; i < h->n_owned; i++) free(h->owned[i]);
    sp_gguf_close(h->gguf);
    free(h);
}

/* ------------------------------------------------------------------ load */

static sp_status bind(sp_eagle3 *h, const char *path, const char *name, int64_t cols, int64_t rows,
                      bool optional, sp_weight *w, sp_error *err) {
    return sp_weight_from_tensor(sp_gguf_find_tensor(h->gguf, name), path, name, cols, rows, optional, w, err);
}

/* A vector (norm weights, RoPE factors) as an owned f32 copy. */
static sp_status bind_vec(sp_eagle3 *h, const char *path, const char *name, int64_t n, float **out,
                          sp_error *err) {
    sp_weight w;
    sp_status st = bind(h, path, name, n, 1, false, &w, err);
    if (st) return st;
    *out = malloc((size_t)n * sizeof(float));
    if (!*out) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    sp_dequantize_row(w.type, w.data, *out, n);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite((*out)[i])) return sp_fail(err, SP_ERR_FORMAT, "%s: tensor '%s' is not finite", path, name);
    return SP_OK;
}

static sp_status get_u32(const sp_gguf *g, const char *path, const char *key, bool req, uint32_t def,
                         int32_t lo, int32_t hi, int32_t *out, sp_error *err) {
    uint32_t v = def;
    if (sp_gguf_find(g, key)) {
        sp_status st = sp_gguf_get_u32(g, key, &v, err);
        if (st) return st;
    } else if (req) {
        return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is missing", path, key);
    }
    if ((int64_t)v < lo || (int64_t)v > hi)
        return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s = %u outside [%d, %d]", path, key, v, lo, hi);
    *out = (int32_t)v;
    return SP_OK;
}

static sp_status get_bool(const sp_gguf *g, const char *path, const char *key, bool *out, sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    *out = false;
    if (!kv) return SP_OK;
    if (kv->type != SP_GGUF_BOOL) return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is not a bool", path, key);
    *out = kv->v.b;
    return SP_OK;
}

/* The head's vocabulary is the target's: same size and pieces (llama.cpp's
 * converter copies the target's tokenizer into the head). */
static sp_status check_vocab(const sp_eagle3 *h, const char *path, sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(h->gguf, "tokenizer.ggml.tokens");
    if (!kv) return SP_OK;
    if (kv->type != SP_GGUF_ARRAY || kv->arr_type != SP_GGUF_STRING)
        return sp_fail(err, SP_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not a string array", path);
    if (kv->arr_n != (uint64_t)h->V)
        return sp_fail(err, SP_ERR_ARG, "%s: the head's vocabulary has %llu tokens, the target's %d", path,
                       (unsigned long long)kv->arr_n, h->V);
    const sp_tokenizer *tok = sp_model_tokenizer(h->target);
    if (!tok) return SP_OK;
    for (int32_t i = 0; i < h->V; i++) {
        sp_str a = sp_gguf_arr_str(kv, (uint64_t)i), b = sp_tokenizer_token_text(tok, i);
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len))
            return sp_fail(err, SP_ERR_ARG, "%s: the head's vocabulary differs from the target's at token %d",
                           path, i);
    }
    return SP_OK;
}

static sp_status bind_d2t(sp_eagle3 *h, const char *path, const sp_gguf_tensor *t, sp_error *err) {
    if (t->type != SP_GGML_I64 || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] < 1 ||
        t->ne[0] > h->V)
        return sp_fail(err, SP_ERR_FORMAT, "%s: tensor 'd2t' must be i64 [n] with 1 <= n <= %d (type %s, %lld)",
                       path, h->V, sp_ggml_type_name(t->type), (long long)t->ne[0]);
    h->n_draft_vocab = (int32_t)t->ne[0];
    h->d2t = malloc((size_t)h->n_draft_vocab * sizeof *h->d2t);
    uint8_t *seen = calloc((size_t)h->V, 1);
    sp_status st = SP_OK;
    if (!h->d2t || !seen) st = sp_fail(err, SP_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; !st && i < h->n_draft_vocab; i++) {
        int64_t v;
        memcpy(&v, (const uint8_t *)t->data + (size_t)i * 8, 8);
        if (v < 0 || v >= h->V)
            st = sp_fail(err, SP_ERR_FORMAT, "%s: d2t[%d] = %lld is not a target id (vocabulary %d)", path, i,
                         (long long)v, h->V);
        else if (seen[v]++)
            st = sp_fail(err, SP_ERR_FORMAT, "%s: d2t maps two draft ids to target id %lld", path, (long long)v);
        else
            h->d2t[i] = (int32_t)v;
    }
    free(seen);
    return st;
}

static sp_status pack(sp_eagle3 *h, sp_weight *w, sp_error *err) {
    if (!w->data || w->packed || !sp_ops_packs(w->type)) return SP_OK;
    SP_ASSERT(h->n_owned < (int)(sizeof h->owned / sizeof h->owned[0]));
    void *buf = NULL;
    if (posix_memalign(&buf, 64, sp_ops_pack_bytes(w->type, w->rows, w->cols)))
        return sp_fail(err, SP_ERR_NOMEM, "out of memory packing the head's weights");
    h->owned[h->n_owned++] = buf;
    sp_ops_pack(w->type, w->data, w->row_bytes, w->rows, w->cols, buf);
    w->packed = buf;
    w->packed_stride = sp_ops_pack_stride(w->type, w->cols);
    return SP_OK;
}

static sp_status load(sp_eagle3 *h, const char *path, sp_error *err) {
    sp_status st = sp_gguf_open(path, &h->gguf, err);
    if (st) return st;
    const sp_gguf *g = h->gguf;
    const sp_model_config *tc = sp_model_cfg(h->target);
    sp_str arch;
    if ((st = sp_gguf_get_str(g, "general.architecture", &arch, err))) return st;
    if (arch.len != 6 || memcmp(arch.ptr, "eagle3", 6))
        return sp_fail(err, SP_ERR_ARG, "%s: architecture '%.*s' is not an EAGLE-3 head (eagle3)", path,
                       (int)(arch.len < 40 ? arch.len : 40), arch.ptr);
    int32_t n_layers;
    if ((st = get_u32(g, path, "eagle3.block_count", true, 0, 1, 1, &n_layers, err)) ||
        (st = get_u32(g, path, "eagle3.embedding_length", true, 0, 1, 1 << 16, &h->dim, err)) ||
        (st = get_u32(g, path, "eagle3.attention.head_count", true, 0, 1, 1024, &h->n_heads, err)) ||
        (st = get_u32(g, path, "eagle3.attention.head_count_kv", false, (uint32_t)h->n_heads, 1, h->n_heads,
                      &h->n_kv_heads, err)) ||
        (st = get_u32(g, path, "eagle3.feed_forward_length", true, 0, 1, 1 << 18, &h->ffn_dim, err)) ||
        (st = get_u32(g, path, "eagle3.target_hidden_size", true, 0, 1, 1 << 16, &h->tgt_dim, err)))
        return st;
    if (h->n_heads % h->n_kv_heads)
        return sp_fail(err, SP_ERR_FORMAT, "%s: %d heads are not a multiple of %d key/value heads", path,
                       h->n_heads, h->n_kv_heads);
    if ((st = get_u32(g, path, "eagle3.attention.key_length", false, (uint32_t)(h->dim / h->n_heads), 2, 1024,
                      &h->head_dim, err)))
        return st;
    int32_t vlen;
    if ((st = get_u32(g, path, "eagle3.attention.value_length", false, (uint32_t)h->head_dim, 1, 1024, &vlen,
                      err)))
        return st;
    if (vlen != h->head_dim)
        return sp_fail(err, SP_ERR_UNSUPPORTED, "%s: value length %d differs from key length %d", path, vlen,
                       h->head_dim);
    if ((st = get_u32(g, path, "eagle3.rope.dimension_count", false, (uint32_t)h->head_dim, 2, h->head_dim,
                      &h->rot_dim, err)))
        return st;
    if (h->rot_dim % 2) return sp_fail(err, SP_ERR_FORMAT, "%s: odd RoPE dimension count %d", path, h->rot_dim);
    h->rope_theta = 10000.0f;
    h->eps = 1e-5f;
    if (sp_gguf_find(g, "eagle3.rope.freq_base") &&
        (st = sp_gguf_get_f32(g, "eagle3.rope.freq_base", &h->rope_theta, err)))
        return st;
    if (sp_gguf_find(g, "eagle3.attention.layer_norm_rms_epsilon") &&
        (st = sp_gguf_get_f32(g, "eagle3.attention.layer_norm_rms_epsilon", &h->eps, err)))
        return st;
    if (!(h->rope_theta > 0) || !(h->eps > 0 && h->eps < 1))
        return sp_fail(err, SP_ERR_FORMAT, "%s: bad RoPE base or norm epsilon", path);
    const sp_gguf_kv *sk = sp_gguf_find(g, "eagle3.rope.scaling.type");
    if (sk && !(sk->type == SP_GGUF_STRING && sk->v.str.len == 4 && !memcmp(sk->v.str.ptr, "none", 4)))
        return sp_fail(err, SP_ERR_UNSUPPORTED, "%s: RoPE scaling of a head is not supported", path);
    if ((st = get_bool(g, path, "eagle3.norm_before_residual", &h->norm_before_residual, err)) ||
        (st = get_bool(g, path, "eagle3.norm_before_fc", &h->norm_before_fc, err)))
        return st;

    /* target layers: three, each in [0, target layers] */
    const sp_gguf_kv *tl = sp_gguf_find(g, "eagle3.target_layers");
    if (!tl) return sp_fail(err, SP_ERR_FORMAT, "%s: metadata eagle3.target_layers is missing", path);
    if (tl->type != SP_GGUF_ARRAY || tl->arr_n != 3 || tl->arr_type == SP_GGUF_STRING ||
        tl->arr_type == SP_GGUF_ARRAY || tl->arr_type == SP_GGUF_FLOAT32 || tl->arr_type == SP_GGUF_FLOAT64 ||
        tl->arr_type == SP_GGUF_BOOL)
        return sp_fail(err, SP_ERR_FORMAT, "%s: eagle3.target_layers must be an array of 3 integers", path);
    for (int i = 0; i < 3; i++) {
        int64_t l = sp_gguf_arr_int(tl, (uint64_t)i);
        if (l < 0 || l > tc->n_layers)
            return sp_fail(err, SP_ERR_ARG, "%s: target layer %lld outside the target's [0, %d]", path,
                           (long long)l, tc->n_layers);
        h->layers[i] = (int32_t)l;
    }
    if (h->tgt_dim != tc->dim)
        return sp_fail(err, SP_ERR_ARG, "%s: the head reads hidden states of width %d, the target's are %d", path,
                       h->tgt_dim, tc->dim);
    h->V = tc->n_vocab;
    if ((st = check_vocab(h, path, err))) return st;

    const int64_t dim = h->dim, q_dim = (int64_t)h->n_heads * h->head_dim;
    const int64_t kv_dim = (int64_t)h->n_kv_heads * h->head_dim;
    const sp_gguf_tensor *d2t = sp_gguf_find_tensor(g, "d2t");
    h->n_draft_vocab = h->V;
    if (d2t && (st = bind_d2t(h, path, d2t, err))) return st;
    if ((st = bind(h, path, "fc.weight", 3 * (int64_t)h->tgt_dim, dim, false, &h->fc, err))) return st;
    if (h->norm_before_fc &&
        (st = bind_vec(h, path, "enc.output_norm.weight", 3 * (int64_t)h->tgt_dim, &h->enc_norm, err)))
        return st;
    if ((st = bind_vec(h, path, "output_norm.weight", dim, &h->out_norm, err))) return st;
    if ((st = bind(h, path, "output.weight", dim, h->n_draft_vocab, true, &h->output, err))) return st;
    if (!h->output.data) { /* the target's output head: its width must be the target's */
        if (dim != tc->dim)
            return sp_fail(err, SP_ERR_FORMAT, "%s: no output.weight, and the head's width %lld is not the "
                           "target's %d", path, (long long)dim, tc->dim);
        if (h->n_draft_vocab != h->V)
            return sp_fail(err, SP_ERR_FORMAT, "%s: no output.weight, yet d2t maps a draft vocabulary of %d", path,
                           h->n_draft_vocab);
        h->output = h->target->output;
    }
    if ((st = bind(h, path, "token_embd.weight", dim, h->V, true, &h->tok_embd, err))) return st;
    if (!h->tok_embd.data) {
        if (dim != tc->dim)
            return sp_fail(err, SP_ERR_FORMAT, "%s: no token_embd.weight, and the head's width %lld is not the "
                           "target's %d", path, (long long)dim, tc->dim);
        h->tok_embd = h->target->tok_embd;
    }
    if ((st = bind_vec(h, path, "blk.0.attn_norm.weight", dim, &h->attn_norm, err)) ||
        (st = bind_vec(h, path, "blk.0.attn_norm_2.weight", dim, &h->hidden_norm, err)) ||
        (st = bind_vec(h, path, "blk.0.ffn_norm.weight", dim, &h->ffn_norm, err)) ||
        (st = bind(h, path, "blk.0.attn_q.weight", 2 * dim, q_dim, false, &h->wq, err)) ||
        (st = bind(h, path, "blk.0.attn_k.weight", 2 * dim, kv_dim, false, &h->wk, err)) ||
        (st = bind(h, path, "blk.0.attn_v.weight", 2 * dim, kv_dim, false, &h->wv, err)) ||
        (st = bind(h, path, "blk.0.attn_output.weight", q_dim, dim, false, &h->wo, err)) ||
        (st = bind(h, path, "blk.0.ffn_gate.weight", dim, h->ffn_dim, false, &h->w1, err)) ||
        (st = bind(h, path, "blk.0.ffn_down.weight", h->ffn_dim, dim, false, &h->w2, err)) ||
        (st = bind(h, path, "blk.0.ffn_up.weight", dim, h->ffn_dim, false, &h->w3, err)))
        return st;
    if (sp_gguf_find_tensor(g, "rope_freqs.weight")) {
        if ((st = bind_vec(h, path, "rope_freqs.weight", h->rot_dim / 2, &h->rope_factors, err))) return st;
        for (int32_t i = 0; i < h->rot_dim / 2; i++)
            if (!(h->rope_factors[i] > 0))
                return sp_fail(err, SP_ERR_FORMAT, "%s: rope_freqs.weight[%d] is not positive", path, i);
    }
    /* the head's own matrices get packed copies where the kernels want them
     * (the target's are packed already) */
    sp_weight *own[] = {&h->fc, &h->wq, &h->wk, &h->wv, &h->wo, &h->w1, &h->w2, &h->w3,
                        h->output.data != h->target->output.data ? &h->output : NULL};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own[i] && (st = pack(h, own[i], err))) return st;
    snprintf(h->desc, sizeof h->desc, "eagle3 d%d h%d/%d ffn%d vocab %d->%d layers %d,%d,%d%s%s", h->dim,
             h->n_heads, h->n_kv_heads, h->ffn_dim, h->n_draft_vocab, h->V, h->layers[0], h->layers[1],
             h->layers[2], h->norm_before_fc ? " norm_before_fc" : "",
             h->norm_before_residual ? " norm_before_residual" : "");
    return SP_OK;
}

sp_status sp_eagle3_load(const char *path, const sp_model *target, sp_eagle3 **out, sp_error *err) {
    *out = NULL;
    if (!path || !target) return sp_fail(err, SP_ERR_ARG, "eagle3: a head file and a target model are needed");
    sp_status st = sp_ops_init(err);
    if (st) return st;
    sp_eagle3 *h = calloc(1, sizeof *h);
    if (!h) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    h->target = target;
    st = load(h, path, err);
    if (st) {
        sp_eagle3_free(h);
        return st;
    }
    *out = h;
    return SP_OK;
}

sp_status sp_eagle3_shape(const sp_eagle3 *h, int32_t *dim, int32_t *n_heads, int32_t *n_kv_heads, int32_t *ffn_dim,
                          float *rope_theta, float *eps) {
    *dim = h->dim, *n_heads = h->n_heads, *n_kv_heads = h->n_kv_heads, *ffn_dim = h->ffn_dim;
    *rope_theta = h->rope_theta, *eps = h->eps;
    return SP_OK;
}

bool sp_eagle3_norm_before_fc(const sp_eagle3 *h) { return h->norm_before_fc; }

const char *sp_eagle3_trainable(const sp_eagle3 *h) {
    const sp_model_config *tc = sp_model_cfg(h->target);
    if (h->dim != tc->dim) return "its width differs from the target's";
    if (h->head_dim * h->n_heads != h->dim || h->rot_dim != h->head_dim || h->rope_factors)
        return "its attention shape (key length, partial RoPE or RoPE factors)";
    if (h->norm_before_residual) return "norm_before_residual";
    if (h->tok_embd.data != h->target->tok_embd.data) return "its own token embeddings";
    if (h->output.data == h->target->output.data) return "it has no output matrix of its own";
    if (h->n_draft_vocab != h->V) return "a reduced draft vocabulary (d2t)";
    for (int32_t i = 0; h->d2t && i < h->n_draft_vocab; i++)
        if (h->d2t[i] != i) return "a permuted draft vocabulary (d2t)";
    return NULL;
}

/* An owned F32 matrix of rows x cols from w, packed where the kernels want it. */
static sp_status own_f32(sp_eagle3 *h, sp_weight *dst, const float *w, sp_error *err) {
    SP_ASSERT(h->n_owned < (int)(sizeof h->owned / sizeof h->owned[0]));
    const int64_t rows = dst->rows, cols = dst->cols;
    const size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    void *buf = NULL;
    if (posix_memalign(&buf, 64, bytes ? bytes : 64)) return sp_fail(err, SP_ERR_NOMEM, "out of memory for a head");
    h->owned[h->n_owned++] = buf;
    memcpy(buf, w, bytes);
    memset(dst, 0, sizeof *dst);
    dst->type = SP_GGML_F32;
    dst->rows = rows;
    dst->cols = cols;
    dst->row_bytes = (size_t)cols * sizeof(float);
    dst->data = buf;
    return pack(h, dst, err);
}

static sp_status own_vec(float **dst, const float *src, int64_t n, sp_error *err) {
    *dst = malloc((size_t)n * sizeof(float));
    if (!*dst) return sp_fail(err, SP_ERR_NOMEM, "out of memory for a head");
    memcpy(*dst, src, (size_t)n * sizeof(float));
    return SP_OK;
}

sp_status sp_eagle3_with_weights(const sp_eagle3 *like, const sp_eagle3_f32 *w, sp_eagle3 **out, sp_error *err) {
    *out = NULL;
    if (sp_eagle3_trainable(like) || !w->fc || !w->output)
        return sp_fail(err, SP_ERR_ARG, "eagle3: new weights only for heads the trainer models");
    sp_eagle3 *h = calloc(1, sizeof *h);
    if (!h) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    *h = *like;
    h->gguf = NULL; /* the matrices below are owned; the embeddings are the target's */
    h->n_owned = 0;
    h->enc_norm = h->attn_norm = h->hidden_norm = h->ffn_norm = h->out_norm = h->rope_factors = NULL;
    h->d2t = NULL;
    const int64_t d = h->dim;
    sp_status st = SP_OK;
    const struct { sp_weight *dst; const float *src; } m[] = {
        {&h->fc, w->fc}, {&h->wq, w->wq}, {&h->wk, w->wk}, {&h->wv, w->wv}, {&h->wo, w->wo},
        {&h->w1, w->w1}, {&h->w2, w->w2}, {&h->w3, w->w3}, {&h->output, w->output}};
    for (size_t i = 0; !st && i < sizeof m / sizeof m[0]; i++) st = own_f32(h, m[i].dst, m[i].src, err);
    if (!st && like->norm_before_fc) {
        if (!w->enc_norm) st = sp_fail(err, SP_ERR_ARG, "eagle3: norm_before_fc needs the taps' norm weights");
        else st = own_vec(&h->enc_norm, w->enc_norm, 3 * (int64_t)h->tgt_dim, err);
    }
    if (!st) st = own_vec(&h->attn_norm, w->attn_norm, d, err);
    if (!st) st = own_vec(&h->hidden_norm, w->hidden_norm, d, err);
    if (!st) st = own_vec(&h->ffn_norm, w->ffn_norm, d, err);
    if (!st) st = own_vec(&h->out_norm, w->out_norm, d, err);
    if (st) {
        sp_eagle3_free(h);
        return st;
    }
    *out = h;
    return SP_OK;
}

/* --------------------------------------------------------------- context */

struct sp_eagle3_ctx {
    const sp_eagle3 *h;
    sp_kv kv;
    int32_t max_batch;
    sp_pool *pool;
    float *feat;    /* [B][3 * tgt_dim] fused taps */
    float *cat;     /* [B][2 * dim] [normed embedding; normed g] */
    float *x;       /* [B][dim] residual stream */
    float *xb;      /* [B][max(dim, q_dim)] normed input / attention output */
    float *q;       /* [B][q_dim] */
    float *hb, *hb2; /* [B][ffn] */
    float *x2;      /* [B][dim] */
    float *dlog;    /* [B][n_draft_vocab] */
    float *att;     /* [nth][n_ctx] */
    int32_t *att_idx; /* [nth][n_ctx] visible slots under a tree mask */
    float *rope_cs; /* [B][rot_dim] */
    uint8_t *act;   /* [B][act_stride] */
    size_t act_stride;
};

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

void sp_eagle3_ctx_free(sp_eagle3_ctx *c) {
    if (!c) return;
    sp_kv_free(&c->kv);
    free(c->feat);
    free(c->cat);
    free(c->x);
    free(c->xb);
    free(c->q);
    free(c->hb);
    free(c->hb2);
    free(c->x2);
    free(c->dlog);
    free(c->att);
    free(c->att_idx);
    free(c->rope_cs);
    free(c->act);
    free(c);
}

int32_t sp_eagle3_ctx_n_past(const sp_eagle3_ctx *c) { return c->kv.n; }

sp_status sp_eagle3_ctx_set_head(sp_eagle3_ctx *c, const sp_eagle3 *h, sp_error *err) {
    const sp_eagle3 *o = c->h;
    if (h->target != o->target || h->dim != o->dim || h->n_heads != o->n_heads || h->n_kv_heads != o->n_kv_heads ||
        h->head_dim != o->head_dim || h->rot_dim != o->rot_dim || h->ffn_dim != o->ffn_dim ||
        h->tgt_dim != o->tgt_dim || h->n_draft_vocab != o->n_draft_vocab || memcmp(h->layers, o->layers, sizeof h->layers))
        return sp_fail(err, SP_ERR_ARG, "eagle3: the new head's shape differs from the one drafting");
    const sp_weight *ws[] = {&h->fc, &h->wq, &h->wk, &h->wv, &h->wo, &h->w1, &h->w2, &h->w3, &h->output};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        if (sp_ops_act_bytes(ws[i]->type, ws[i]->cols) > c->act_stride)
            return sp_fail(err, SP_ERR_ARG, "eagle3: the new head's weight types need more scratch");
    c->h = h;
    return SP_OK;
}

sp_status sp_eagle3_ctx_truncate(sp_eagle3_ctx *c, int32_t n, sp_error *err) {
    return sp_kv_truncate(&c->kv, n, err);
}

sp_status sp_eagle3_ctx_init(const sp_eagle3 *h, int32_t n_ctx, int32_t max_batch, sp_pool *pool,
                             sp_eagle3_ctx **out, sp_error *err) {
    *out = NULL;
    if (n_ctx < 1 || max_batch < 1 || max_batch > 4096)
        return sp_fail(err, SP_ERR_ARG, "eagle3: context of %d slots, batch %d", n_ctx, max_batch);
    sp_eagle3_ctx *c = calloc(1, sizeof *c);
    if (!c) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    c->h = h;
    c->max_batch = max_batch;
    c->pool = pool;
    /* an F32 cache (the head's attention uses the float kernels of ops.h) */
    sp_status st = sp_kv_init(&c->kv, 1, h->n_kv_heads * h->head_dim, h->head_dim, n_ctx, SP_GGML_F32,
                              SP_GGML_F32, 0, err);
    if (st) {
        sp_eagle3_ctx_free(c);
        return st;
    }
    const size_t B = (size_t)max_batch, dim = (size_t)h->dim, q_dim = (size_t)h->n_heads * (size_t)h->head_dim;
    const size_t wide = q_dim > dim ? q_dim : dim, enc = 3 * (size_t)h->tgt_dim;
    size_t maxk = enc > 2 * dim ? enc : 2 * dim;
    if ((size_t)h->ffn_dim > maxk) maxk = (size_t)h->ffn_dim;
    if (q_dim > maxk) maxk = q_dim;
    const sp_weight *ws[] = {&h->fc, &h->wq, &h->wk, &h->wv, &h->wo, &h->w1, &h->w2, &h->w3, &h->output};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        size_t b = sp_ops_act_bytes(ws[i]->type, (int64_t)maxk);
        if (b > c->act_stride) c->act_stride = b;
    }
    const int nth = pool ? sp_pool_n_threads(pool) : 1;
    c->feat = alloc64(B * enc * 4);
    c->cat = alloc64(B * 2 * dim * 4);
    c->x = alloc64(B * dim * 4);
    c->xb = alloc64(B * wide * 4);
    c->q = alloc64(B * q_dim * 4);
    c->hb = alloc64(B * (size_t)h->ffn_dim * 4);
    c->hb2 = alloc64(B * (size_t)h->ffn_dim * 4);
    c->x2 = alloc64(B * dim * 4);
    c->dlog = alloc64(B * (size_t)h->n_draft_vocab * 4);
    c->att = alloc64((size_t)nth * (size_t)n_ctx * 4);
    c->att_idx = malloc((size_t)nth * (size_t)n_ctx * sizeof *c->att_idx);
    c->rope_cs = alloc64(B * (size_t)h->rot_dim * 4);
    c->act = alloc64(B * c->act_stride);
    if (!c->feat || !c->cat || !c->x || !c->xb || !c->q || !c->hb || !c->hb2 || !c->x2 || !c->dlog ||
        !c->att || !c->att_idx || !c->rope_cs || !c->act) {
        sp_eagle3_ctx_free(c);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for the head's scratch");
    }
    *out = c;
    return SP_OK;
}

/* ------------------------------------------------------------- forward */

/* One matmul y = W x over n rows, rows of W split across the pool in
 * groups of SP_PACK_ROWS (a row's value does not depend on the split). */
typedef struct mm_run {
    sp_mm mm;
    sp_mm_kernel fn;
    int64_t rows;
} mm_run;

static void mm_run_fn(void *arg, int ith, int nth) {
    const mm_run *r = arg;
    const int64_t groups = (r->rows + SP_PACK_ROWS - 1) / SP_PACK_ROWS;
    int64_t r0 = groups * ith / nth * SP_PACK_ROWS, r1 = groups * (ith + 1) / nth * SP_PACK_ROWS;
    if (r1 > r->rows) r1 = r->rows;
    if (r0 < r1) r->fn(&r->mm, r0, r1);
}

static void matmul(sp_eagle3_ctx *c, const sp_weight *w, const float *x, int64_t x_stride, int32_t n, float *y,
                   int64_t ld_y) {
    const void *a = x;
    size_t stride = (size_t)x_stride * sizeof(float);
    if (sp_ops_act_is_q8(w->type)) {
        for (int32_t i = 0; i < n; i++)
            sp_ops_act_prepare(w->type, x + i * x_stride, w->cols, c->act + (size_t)i * c->act_stride);
        a = c->act;
        stride = c->act_stride;
    }
    sp_mm_kernel pk = w->packed ? sp_ops_mm_packed(w->type) : NULL;
    mm_run r = {.mm = {.wtype = w->type, .w = pk ? w->packed : w->data,
                       .w_stride = pk ? w->packed_stride : w->row_bytes, .k = w->cols, .x = a,
                       .x_stride = stride, .n = n, .y = y, .ld_y = ld_y},
                .fn = pk ? pk : sp_ops_mm(w->type), .rows = w->rows};
    SP_ASSERT(r.fn != NULL);
    const uint64_t work = (uint64_t)w->rows * (uint64_t)w->cols * (uint64_t)n;
    if (!c->pool || work < (1u << 17)) mm_run_fn(&r, 0, 1);
    else sp_pool_run(c->pool, mm_run_fn, &r);
}

sp_status sp_eagle3_encode(sp_eagle3_ctx *c, const float *const taps[3], int32_t n, float *g, sp_error *err) {
    const sp_eagle3 *h = c->h;
    if (n < 1 || n > c->max_batch)
        return sp_fail(err, SP_ERR_ARG, "eagle3: %d rows to encode (1 to %d)", n, c->max_batch);
    const int64_t td = h->tgt_dim, enc = 3 * td;
    for (int32_t t = 0; t < n; t++) {
        float *f = c->feat + t * enc;
        for (int i = 0; i < 3; i++) memcpy(f + i * td, taps[i] + t * td, (size_t)td * sizeof(float));
        if (h->enc_norm) sp_rmsnorm(f, f, h->enc_norm, enc, h->eps);
    }
    matmul(c, &h->fc, c->feat, enc, n, g, h->dim);
    return SP_OK;
}

/* Attention of the n new rows (queries in c->q, slots n_past..) over the
 * cache, causal or under a mask over slots [mask_base, n_past + n), into
 * c->xb (stride wide). */
typedef struct att_run {
    sp_eagle3_ctx *c;
    int32_t n, n_past;
    int64_t wide;
    const uint8_t *mask;
    int32_t mask_base, mask_w;
} att_run;

static void att_run_fn(void *arg, int ith, int nth) {
    const att_run *a = arg;
    sp_eagle3_ctx *c = a->c;
    const sp_eagle3 *h = c->h;
    const int32_t hd = h->head_dim, H = h->n_heads, group = h->n_heads / h->n_kv_heads;
    const int64_t q_dim = (int64_t)H * hd, tasks = (int64_t)a->n * H;
    const float scale = 1.0f / sqrtf((float)hd);
    float *att = c->att + (size_t)ith * (size_t)c->kv.n_ctx;
    const sp_att_scores_fn scores = sp_ops_att_scores();
    const sp_att_mix_fn mix = sp_ops_att_mix();
    const sp_softmax_fn softmax = sp_ops_softmax();
    for (int64_t task = tasks * ith / nth; task < tasks * (ith + 1) / nth; task++) {
        const int32_t hh = (int32_t)(task / a->n), t = (int32_t)(task % a->n);
        const int64_t koff = (int64_t)(hh / group) * hd;
        const int32_t ns = a->mask ? a->n_past + a->n : a->n_past + t + 1;
        scores(c->q + t * q_dim + (int64_t)hh * hd, (const float *)sp_kv_k(&c->kv, 0, 0) + koff, c->kv.kv_dim, ns, hd, scale, att);
        /* under a mask, the visible slots in slot order become ranks (ops.h) */
        int32_t nv = ns, *idx = NULL;
        if (a->mask) {
            idx = c->att_idx + (size_t)ith * (size_t)c->kv.n_ctx;
            nv = 0;
            for (int32_t sl = 0; sl < ns; sl++)
                if (sl < a->mask_base || a->mask[(int64_t)t * a->mask_w + (sl - a->mask_base)]) {
                    idx[nv] = sl;
                    att[nv++] = att[sl];
                }
        }
        softmax(att, nv);
        mix(att, idx, (const float *)sp_kv_v(&c->kv, 0, 0) + koff, c->kv.kv_dim, nv, hd, c->xb + t * a->wide + (int64_t)hh * hd);
    }
}

sp_status sp_eagle3_decode(sp_eagle3_ctx *c, const int32_t *tokens, const float *g, int32_t n, bool all,
                           float *logits, float *prenorm, sp_error *err) {
    return sp_eagle3_decode_tree(c, tokens, g, NULL, n, NULL, 0, all, logits, prenorm, err);
}

sp_status sp_eagle3_decode_tree(sp_eagle3_ctx *c, const int32_t *tokens, const float *g, const int32_t *pos,
                                int32_t n, const uint8_t *mask, int32_t mask_base, bool all, float *logits,
                                float *prenorm, sp_error *err) {
    const sp_eagle3 *h = c->h;
    const int32_t n_past = c->kv.n;
    if (mask && (mask_base < 0 || mask_base > n_past))
        return sp_fail(err, SP_ERR_ARG, "eagle3: mask base %d outside the cache (0..%d)", mask_base, n_past);
    for (int32_t t = 0; mask && t < n; t++)
        if (!mask[(int64_t)t * (n_past + n - mask_base) + (n_past + t - mask_base)])
            return sp_fail(err, SP_ERR_ARG, "eagle3: mask row %d does not let it see itself", t);
    if (n < 1 || n > c->max_batch)
        return sp_fail(err, SP_ERR_ARG, "eagle3: batch of %d pairs (1 to %d)", n, c->max_batch);
    if (n_past + n > c->kv.n_ctx)
        return sp_fail(err, SP_ERR_RANGE, "eagle3: context full: %d cached + %d new exceed %d", n_past, n,
                       c->kv.n_ctx);
    for (int32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= h->V || (pos && (pos[t] < 0 || pos[t] >= (1 << 24))))
            return sp_fail(err, SP_ERR_ARG, "eagle3: token id %d or position out of range", tokens[t]);
    const int64_t dim = h->dim, hd = h->head_dim, q_dim = (int64_t)h->n_heads * hd;
    const int64_t kv_dim = (int64_t)h->n_kv_heads * hd, wide = q_dim > dim ? q_dim : dim, ffn = h->ffn_dim;
    const sp_rope_freqs rf = {.theta_scale = powf(h->rope_theta, -2.0f / (float)h->rot_dim), .freq_scale = 1.0f,
                              .factors = h->rope_factors};
    for (int32_t t = 0; t < n; t++) {
        float *cat = c->cat + t * 2 * dim, *x = c->x + t * dim;
        const float *gt = g + t * dim;
        sp_dequantize_row(h->tok_embd.type, h->tok_embd.data + (size_t)tokens[t] * h->tok_embd.row_bytes, x, dim);
        sp_rmsnorm(cat, x, h->attn_norm, dim, h->eps);
        sp_rmsnorm(cat + dim, gt, h->hidden_norm, dim, h->eps);
        memcpy(x, h->norm_before_residual ? cat + dim : gt, (size_t)dim * sizeof(float));
        sp_rope_cs(c->rope_cs + (int64_t)t * h->rot_dim, pos ? pos[t] : n_past + t, &rf, h->rot_dim);
    }
    sp_status rst = sp_kv_reserve(&c->kv, n_past + n, err); /* the cache grows as tokens arrive */
    if (rst) return rst;
    float *kd = (float *)sp_kv_k(&c->kv, 0, n_past), *vd = (float *)sp_kv_v(&c->kv, 0, n_past);
    matmul(c, &h->wq, c->cat, 2 * dim, n, c->q, q_dim);
    matmul(c, &h->wk, c->cat, 2 * dim, n, kd, kv_dim);
    matmul(c, &h->wv, c->cat, 2 * dim, n, vd, kv_dim);
    for (int32_t t = 0; t < n; t++) {
        const float *cs = c->rope_cs + (int64_t)t * h->rot_dim;
        sp_rope_apply(c->q + t * q_dim, h->n_heads, (int32_t)hd, h->rot_dim, cs, false);
        sp_rope_apply(kd + t * kv_dim, h->n_kv_heads, (int32_t)hd, h->rot_dim, cs, false);
    }
    att_run ar = {.c = c, .n = n, .n_past = n_past, .wide = wide, .mask = mask, .mask_base = mask_base,
                  .mask_w = n_past + n - mask_base};
    const uint64_t att_work = (uint64_t)n * (uint64_t)(n_past + n) * (uint64_t)q_dim;
    if (!c->pool || att_work < (1u << 15)) att_run_fn(&ar, 0, 1);
    else sp_pool_run(c->pool, att_run_fn, &ar);
    matmul(c, &h->wo, c->xb, wide, n, c->x2, dim);
    for (int64_t i = 0; i < n * dim; i++) c->x[i] = c->x2[i] + c->x[i];
    for (int32_t t = 0; t < n; t++) sp_rmsnorm(c->xb + t * wide, c->x + t * dim, h->ffn_norm, dim, h->eps);
    matmul(c, &h->w1, c->xb, wide, n, c->hb, ffn);
    matmul(c, &h->w3, c->xb, wide, n, c->hb2, ffn);
    for (int32_t t = 0; t < n; t++) sp_ops_swiglu()(c->hb + t * ffn, c->hb + t * ffn, c->hb2 + t * ffn, ffn);
    matmul(c, &h->w2, c->hb, ffn, n, c->x2, dim);
    for (int64_t i = 0; i < n * dim; i++) c->x[i] = c->x2[i] + c->x[i];
    c->kv.n = n_past + n;

    const int32_t first = all ? 0 : n - 1, rows = n - first;
    if (prenorm) memcpy(prenorm, c->x + first * dim, (size_t)rows * (size_t)dim * sizeof(float));
    for (int32_t r = 0; r < rows; r++)
        sp_rmsnorm(c->xb + r * wide, c->x + (first + r) * dim, h->out_norm, dim, h->eps);
    const int32_t Vd = h->n_draft_vocab, V = h->V;
    matmul(c, &h->output, c->xb, wide, rows, h->d2t ? c->dlog : logits, h->d2t ? Vd : V);
    if (h->d2t)
        for (int32_t r = 0; r < rows; r++) {
            float *o = logits + (int64_t)r * V;
            const float *d = c->dlog + (int64_t)r * Vd;
            for (int32_t v = 0; v < V; v++) o[v] = -INFINITY;
            for (int32_t i = 0; i < Vd; i++) o[h->d2t[i]] = d[i];
        }
    for (int32_t r = 0; r < rows; r++)
        for (int32_t i = 0; i < Vd; i++) {
            const float v = h->d2t ? c->dlog[(int64_t)r * Vd + i] : logits[(int64_t)r * V + i];
            if (!isfinite(v))
                return sp_fail(err, SP_ERR_NUMERIC, "eagle3: the head produced a non-finite logit at row %d", r);
        }
    return SP_OK;
}
