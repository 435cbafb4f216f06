/* model_load: bind Llama weights from a GGUF file or a llama2.c checkpoint,
 * validating every shape, and make re-quantised copies for self-drafting. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model_internal.h"
#include "ops.h"
#include "sp_file.h"
#include "quant.h"

sp_model_params sp_model_default_params(void) {
    sp_model_params p = {0};
    return p;
}

void *sp_model_alloc(sp_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 16;
        void **n = realloc(m->owned, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        m->owned = n;
        m->cap_owned = cap;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    m->owned[m->n_owned++] = p;
    return p;
}

void sp_model_free(sp_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    if (m->owns_tok) sp_tokenizer_free(m->tok);
    if (m->gguf) sp_gguf_close(m->gguf);
    sp_file_map fm = {m->map, m->map_len};
    sp_file_unmap(&fm);
    free(m);
}

const sp_model_config *sp_model_cfg(const sp_model *m) { return &m->cfg; }
const sp_tokenizer *sp_model_tokenizer(const sp_model *m) { return m->tok; }
const char *sp_model_desc(const sp_model *m) { return m->desc; }
int32_t sp_model_n_valid_vocab(const sp_model *m) {
    return m->tok ? sp_tokenizer_n_unpadded(m->tok) : m->cfg.n_vocab;
}

static uint64_t weight_bytes(const sp_weight *w) { return (uint64_t)w->rows * w->row_bytes; }


uint64_t sp_model_weight_bytes(const sp_model *m) {
    uint64_t n = weight_bytes(&m->output); /* one embedding row is negligible */
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const sp_layer *L = &m->layers[l];
        n += weight_bytes(&L->wq) + weight_bytes(&L->wk) + weight_bytes(&L->wv) +
             weight_bytes(&L->wo) + weight_bytes(&L->w1) + weight_bytes(&L->w2) +
             weight_bytes(&L->w3) + weight_bytes(&L->gate_inp);
        for (int e = 0; L->exp_up && e < m->moe.n_expert; e++)
            n += weight_bytes(&L->exp_gate[e]) + weight_bytes(&L->exp_up[e]) + weight_bytes(&L->exp_down[e]);
    }
    return n;
}

uint64_t sp_model_expert_bytes(const sp_model *m) {
    uint64_t n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const sp_layer *L = &m->layers[l];
        for (int e = 0; L->exp_up && e < m->moe.n_expert; e++)
            n += weight_bytes(&L->exp_gate[e]) + weight_bytes(&L->exp_up[e]) + weight_bytes(&L->exp_down[e]);
    }
    return n;
}

static void set_desc(sp_model *m, const char *arch) {
    const sp_model_config *c = &m->cfg;
    if (m->moe.n_expert)
        snprintf(m->desc, sizeof m->desc, "%s %dL d%d h%d/%d e%d/%d ffn%d v%d %s", arch, c->n_layers, c->dim,
                 c->n_heads, c->n_kv_heads, m->moe.n_used, m->moe.n_expert, m->moe.ffn, c->n_vocab,
                 sp_ggml_type_name(c->wtype));
    else
        snprintf(m->desc, sizeof m->desc, "%s %dL d%d h%d/%d ffn%d v%d %s", arch, c->n_layers, c->dim,
                 c->n_heads, c->n_kv_heads, c->ffn_dim, c->n_vocab, sp_ggml_type_name(c->wtype));
}

/* Shape and derived-size checks common to both formats. */
static sp_status check_config(const sp_model_config *c, const char *path, sp_error *err) {
    if (c->dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
        c->ffn_dim <= 0 || c->n_vocab <= 0 || c->dim > 65536 || c->n_layers > 1024 ||
        c->ffn_dim > 1 << 20 || c->n_vocab > 1 << 22)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: implausible model shape (dim %d, layers %d, heads %d/%d, ffn %d, "
                       "vocab %d)",
                       path, c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn_dim,
                       c->n_vocab);
    /* the head size is dim / heads unless the file gives key_length */
    if (c->n_heads % c->n_kv_heads || c->head_dim <= 0 || c->head_dim > 4096 ||
        (c->head_dim == c->dim / c->n_heads && c->dim % c->n_heads))
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: dim %d / heads %d / kv heads %d / head size %d do not divide evenly", path,
                       c->dim, c->n_heads, c->n_kv_heads, c->head_dim);
    if (c->head_dim % 2 || c->rot_dim % 2 || c->rot_dim > c->head_dim || c->rot_dim <= 0)
        return sp_fail(err, SP_ERR_FORMAT, "%s: bad RoPE dimensions (head %d, rope %d)", path,
                       c->head_dim, c->rot_dim);
    if (!(c->rope_theta > 0) || !(c->norm_eps > 0) || c->norm_eps > 1)
        return sp_fail(err, SP_ERR_FORMAT, "%s: bad rope theta %g or norm epsilon %g", path,
                       (double)c->rope_theta, (double)c->norm_eps);
    return SP_OK;
}

/* ------------------------------------------------------------------ GGUF */

static sp_status bind_matrix(sp_model *m, const char *path, const char *name, int64_t cols,
                             int64_t rows, bool optional, sp_weight *w, sp_error *err) {
    const sp_gguf_tensor *t = sp_gguf_find_tensor(m->gguf, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional) return SP_OK;
        return sp_fail(err, SP_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)cols, (long long)rows);
    if (!sp_quant_loadable(t->type))
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has type %s, which Specula does not support (supported: "
                       "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, mxfp4)",
                       path, name, sp_ggml_type_name(t->type));
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = sp_ggml_row_size(t->type, cols);
    w->data = t->data;
    return SP_OK;
}

/* Norm weights are used as f32; convert other types into an owned copy. */
static sp_status bind_vector(sp_model *m, const char *path, const char *name, int64_t n,
                             const float **out, sp_error *err) {
    sp_weight w;
    sp_status st = bind_matrix(m, path, name, n, 1, false, &w, err);
    if (st) return st;
    if (w.type == SP_GGML_F32) {
        *out = (const float *)w.data;
        return SP_OK;
    }
    float *buf = sp_model_alloc(m, (size_t)n * sizeof(float));
    if (!buf) return sp_fail(err, SP_ERR_NOMEM, "out of memory converting '%s'", name);
    sp_dequantize_row(w.type, w.data, buf, n);
    *out = buf;
    return SP_OK;
}

static sp_status get_u32_or(const sp_gguf *g, const char *key, uint32_t def, int32_t *out,
                            sp_error *err) {
    uint32_t v = def;
    if (sp_gguf_find(g, key)) {
        sp_status st = sp_gguf_get_u32(g, key, &v, err);
        if (st) return st;
    }
    if (v > INT32_MAX) return sp_fail(err, SP_ERR_FORMAT, "metadata %s = %u is too large", key, v);
    *out = (int32_t)v;
    return SP_OK;
}

static sp_status get_f32_or(const sp_gguf *g, const char *key, float def, float *out,
                            sp_error *err) {
    *out = def;
    if (!sp_gguf_find(g, key)) return SP_OK;
    return sp_gguf_get_f32(g, key, out, err);
}

/* The architectures Specula runs: one generic forward pass (model.c), with
 * these differences bound at load time. */
typedef struct arch_info {
    const char *name;
    bool neox;     /* RoPE on halves of each head */
    bool qkv_bias; /* blk.N.attn_{q,k,v}.bias */
    bool qk_norm;  /* blk.N.attn_{q,k}_norm.weight: per-head RMSNorm before RoPE */
    bool fused;    /* blk.N.attn_qkv and a gate+up ffn_up (phi3) */
    int gemma;     /* 2 or 3: embeddings x sqrt(dim), GELU gate, post-block norms,
                    * sliding layers (gemma2: even ones; gemma3: all but every 6th) */
    int moe;       /* experts (moe.h): 1 when expert_count > 0 (llama: Mixtral style),
                    * 2 always (qwen3moe, gpt-oss) */
    bool oai;      /* gpt-oss: attention sinks and output bias, router and expert biases,
                    * softmax over the selected experts, clamped SwiGLU, post-attention
                    * norm as the FFN norm, sliding layers by pattern (default: even ones) */
} arch_info;

static const arch_info ARCHS[] = {
    {"llama", false, false, false, false, 0, 1, false},
    {"qwen2", true, true, false, false, 0, 0, false},
    {"qwen3", true, false, true, false, 0, 0, false},
    {"phi3", true, false, false, true, 0, 0, false},
    {"gemma2", true, false, false, false, 2, 0, false},
    {"gemma3", true, false, true, false, 3, 0, false},
    {"qwen3moe", true, false, true, false, 0, 2, false},
    {"gpt-oss", true, true, false, false, 0, 2, true},
};

static const arch_info *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
}

/* Rows [r0, r0 + n) of a matrix as a matrix of its own. */
static sp_weight weight_rows(const sp_weight *w, int64_t r0, int64_t n) {
    sp_weight v = *w;
    v.rows = n;
    v.data = w->data + (size_t)r0 * w->row_bytes;
    return v;
}

/* The hyperparameters under the architecture's key prefix. */
static sp_status read_config(sp_model *m, const char *path, const char *a, const arch_info *ai,
                             sp_error *err) {
    const sp_gguf *g = m->gguf;
    sp_status st;
    sp_model_config *c = &m->cfg;
    char key[128];
#define KEY(s) (snprintf(key, sizeof key, "%s." s, a), key)
    uint32_t u;
    if ((st = sp_gguf_get_u32(g, KEY("embedding_length"), &u, err))) return st;
    c->dim = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = sp_gguf_get_u32(g, KEY("block_count"), &u, err))) return st;
    c->n_layers = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = sp_gguf_get_u32(g, KEY("attention.head_count"), &u, err))) return st;
    c->n_heads = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = get_u32_or(g, KEY("attention.head_count_kv"), u, &c->n_kv_heads, err))) return st;
    if ((st = sp_gguf_get_u32(g, KEY("feed_forward_length"), &u, err))) return st;
    c->ffn_dim = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = get_u32_or(g, KEY("context_length"), 2048, &c->n_ctx_train, err))) return st;
    if ((st = get_f32_or(g, KEY("rope.freq_base"), 10000.0f, &c->rope_theta, err))) return st;
    if ((st = get_f32_or(g, KEY("attention.layer_norm_rms_epsilon"), 1e-5f, &c->norm_eps, err)))
        return st;
    c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    /* key_length: a head size other than dim / heads (Mistral-NeMo, Qwen3) */
    if ((st = get_u32_or(g, KEY("attention.key_length"), (uint32_t)c->head_dim, &c->head_dim, err)))
        return st;
    int32_t vlen = c->head_dim;
    if ((st = get_u32_or(g, KEY("attention.value_length"), (uint32_t)c->head_dim, &vlen, err)))
        return st;
    if (vlen != c->head_dim)
        return sp_fail(err, SP_ERR_UNSUPPORTED, "%s: value length %d differs from key length %d", path,
                       vlen, c->head_dim);
    if ((st = get_u32_or(g, KEY("rope.dimension_count"), (uint32_t)c->head_dim, &c->rot_dim, err)))
        return st;
    if ((st = get_u32_or(g, KEY("attention.sliding_window"), 0, &c->sliding_window, err))) return st;
    if (ai->oai) { /* gpt-oss: required, as llama.cpp reads it */
        if (!sp_gguf_find(g, KEY("attention.sliding_window")))
            return sp_fail(err, SP_ERR_FORMAT, "%s: %s is missing", path, key);
        if (c->sliding_window <= 0)
            return sp_fail(err, SP_ERR_FORMAT, "%s: %s must be positive", path, key);
        float base_swa = c->rope_theta;
        if ((st = get_f32_or(g, KEY("rope.freq_base_swa"), c->rope_theta, &base_swa, err))) return st;
        if (base_swa != c->rope_theta) m->rope_theta_local = base_swa; /* the sliding layers' base */
    }
    if (ai->gemma) {
        if ((st = get_f32_or(g, KEY("attn_logit_softcapping"), 0.0f, &m->attn_softcap, err)) ||
            (st = get_f32_or(g, KEY("final_logit_softcapping"), 0.0f, &m->final_softcap, err)))
            return st;
        if (ai->gemma == 3) {
            m->attn_softcap = m->final_softcap = 0; /* gemma3 has none */
            m->rope_theta_local = 10000.0f;         /* its sliding layers' base, unscaled */
        }
        if (!(m->attn_softcap >= 0 && m->final_softcap >= 0))
            return sp_fail(err, SP_ERR_FORMAT, "%s: bad soft-capping values", path);
        m->embed_scale = sqrtf((float)c->dim);
        m->geglu = true;
    }
    /* llama.cpp's phi3 and gemma2 graphs scale the queries; its gemma3 and
     * the others scale the scores (model_internal.h) */
    m->q_prescale = ai->fused || ai->gemma == 2;
    c->rope_neox = ai->neox;
    c->rope_scale = 1.0f;
    /* RoPE scaling: linear (positions divided by the factor) is supported;
     * the others change the model's function and are refused by name
     * rather than silently ignored. Llama 3.1's per-frequency factors come
     * as the rope_freqs.weight tensor (bound below). */
    const sp_gguf_kv *sk = sp_gguf_find(g, KEY("rope.scaling.type"));
    if (sk && sk->type == SP_GGUF_STRING) {
        char ty[32];
        snprintf(ty, sizeof ty, "%.*s", (int)(sk->v.str.len < 31 ? sk->v.str.len : 31), sk->v.str.ptr);
        if (!strcmp(ty, "linear") || !strcmp(ty, "yarn")) {
            float f = 1.0f;
            if ((st = get_f32_or(g, KEY("rope.scaling.factor"), 1.0f, &f, err))) return st;
            if (f == 0.0f) f = 1.0f; /* llama.cpp: 0 is "not set" */
            if (!(f >= 1.0f && f <= 1024.0f))
                return sp_fail(err, SP_ERR_FORMAT, "%s: bad RoPE scaling factor %g", path, (double)f);
            c->rope_scale = 1.0f / f;
            /* YaRN (ops.h), with llama.cpp's defaults where it reads no key:
             * original context = context_length, attention factor 1 */
            m->rope_yarn = !strcmp(ty, "yarn");
            if (m->rope_yarn &&
                ((st = get_u32_or(g, KEY("rope.scaling.original_context_length"), (uint32_t)c->n_ctx_train,
                                  &m->yarn_orig_ctx, err)) ||
                 (st = get_f32_or(g, KEY("rope.scaling.attn_factor"), 1.0f, &m->rope_attn_factor, err))))
                return st;
            if (m->rope_yarn && (m->yarn_orig_ctx <= 0 || !(m->rope_attn_factor > 0)))
                return sp_fail(err, SP_ERR_FORMAT, "%s: bad YaRN original context %d or attention factor %g", path,
                               m->yarn_orig_ctx, (double)m->rope_attn_factor);
        } else if (strcmp(ty, "none") != 0) {
            return sp_fail(err, SP_ERR_UNSUPPORTED,
                           "%s: RoPE scaling '%s' is not supported (supported: none, linear, yarn)", path, ty);
        }
    }
    /* experts: counts as llama.cpp reads them for every architecture, the
     * rest per architecture (llama, qwen3moe: softmax gating, selected
     * weights normalised, no scale) */
    if (ai->moe) {
        sp_moe_cfg *mc = &m->moe;
        if ((st = get_u32_or(g, KEY("expert_count"), 0, &mc->n_expert, err)) ||
            (st = get_u32_or(g, KEY("expert_used_count"), 0, &mc->n_used, err)))
            return st;
        if (mc->n_expert > 0 || ai->moe == 2) {
            if (mc->n_expert < 1 || mc->n_expert > 256 || mc->n_used < 1 || mc->n_used > mc->n_expert)
                return sp_fail(err, SP_ERR_FORMAT, "%s: bad expert counts: %d experts, %d used (1 <= used <= experts <= 256)",
                               path, mc->n_expert, mc->n_used);
            /* the experts' FFN width: expert_feed_forward_length (qwen3moe:
             * default feed_forward_length / used; llama: feed_forward_length) */
            mc->ffn = c->ffn_dim;
            if (ai->moe == 2 && c->ffn_dim > 0) mc->ffn = c->ffn_dim / mc->n_used;
            if (ai->moe == 2 && (st = get_u32_or(g, KEY("expert_feed_forward_length"), (uint32_t)mc->ffn, &mc->ffn, err)))
                return st;
            if (mc->ffn == 0 && ai->moe == 2) mc->ffn = c->ffn_dim / mc->n_used; /* 0: not set */
            if (mc->ffn <= 0 || mc->ffn > 1 << 20)
                return sp_fail(err, SP_ERR_FORMAT, "%s: bad expert FFN length %d", path, mc->ffn);
            mc->gating = ai->oai ? SP_MOE_SOFTMAX_WEIGHT : SP_MOE_SOFTMAX;
            mc->norm_w = !ai->oai;
            mc->w_scale = 0.0f;
            mc->swiglu_oai = ai->oai;
            c->n_expert = mc->n_expert;
            c->n_expert_used = mc->n_used;
        } else {
            mc->n_expert = mc->n_used = 0;
        }
    }
#undef KEY
    return SP_OK;
}

/* A 3-D expert tensor [cols, rows, n_expert] as n_expert matrices (owned
 * array), each a view of its slice; optional: absent gives *out = NULL. */
static sp_status bind_experts(sp_model *m, const char *path, const char *name, int64_t cols, int64_t rows,
                              bool optional, sp_weight **out, sp_error *err) {
    const int32_t E = m->moe.n_expert;
    *out = NULL;
    const sp_gguf_tensor *t = sp_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (optional) return SP_OK;
        return sp_fail(err, SP_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E || t->ne[3] != 1)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %d]", path, name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)cols, (long long)rows, E);
    if (!sp_quant_loadable(t->type))
        return sp_fail(err, SP_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which Specula does not support", path,
                       name, sp_ggml_type_name(t->type));
    sp_weight *w = sp_model_alloc(m, (size_t)E * sizeof *w);
    if (!w) return sp_fail(err, SP_ERR_NOMEM, "out of memory binding '%s'", name);
    const size_t rb = sp_ggml_row_size(t->type, cols);
    for (int32_t e = 0; e < E; e++)
        w[e] = (sp_weight){.type = t->type, .rows = rows, .cols = cols, .row_bytes = rb,
                           .data = (const uint8_t *)t->data + (size_t)e * (size_t)rows * rb};
    *out = w;
    return SP_OK;
}

/* A [n, E] per-expert vector tensor (biases, or scales with n = 1) as f32
 * (optional: absent gives NULL). */
static sp_status bind_expert_vec(sp_model *m, const char *path, const char *name, int64_t n, const float **out,
                                 sp_error *err) {
    *out = NULL;
    const sp_gguf_tensor *t = sp_gguf_find_tensor(m->gguf, name);
    if (!t) return SP_OK;
    const int32_t E = m->moe.n_expert;
    if (t->ne[0] != (n == 1 ? E : n) || t->ne[1] != (n == 1 ? 1 : E) || t->ne[2] != 1 || t->ne[3] != 1 ||
        !sp_quant_loadable(t->type))
        return sp_fail(err, SP_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld] type %s, expected [%lld, %d] f32",
                       path, name, (long long)t->ne[0], (long long)t->ne[1], sp_ggml_type_name(t->type),
                       (long long)(n == 1 ? E : n), n == 1 ? 1 : E);
    if (t->type == SP_GGML_F32) {
        *out = (const float *)t->data;
        return SP_OK;
    }
    float *buf = sp_model_alloc(m, (size_t)n * (size_t)E * sizeof(float));
    if (!buf) return sp_fail(err, SP_ERR_NOMEM, "out of memory converting '%s'", name);
    sp_dequantize_row(t->type, t->data, buf, n * E);
    *out = buf;
    return SP_OK;
}

/* gpt-oss: whether layer l slides, as llama.cpp's load_swa_pattern reads
 * it: attention.sliding_window_pattern as one flag per layer, or as a
 * period n (the first n - 1 of every n layers slide), by default 2. */
static bool oai_swa(const sp_model *m, int32_t l) {
    char key[96];
    snprintf(key, sizeof key, "gpt-oss.attention.sliding_window_pattern");
    const sp_gguf_kv *kv = sp_gguf_find(m->gguf, key);
    if (kv && kv->type == SP_GGUF_ARRAY && (uint64_t)l < kv->arr_n) return sp_gguf_arr_int(kv, (uint64_t)l) != 0;
    int64_t n = 2;
    if (kv && (kv->type == SP_GGUF_UINT32 || kv->type == SP_GGUF_INT32)) n = kv->type == SP_GGUF_UINT32 ? (int64_t)kv->v.u64 : kv->v.i64;
    return n == 0 || l % n < n - 1;
}

/* Each layer's tensors (names and shapes per the architecture). */
static sp_status bind_layers(sp_model *m, const char *path, const arch_info *ai, sp_error *err) {
    const sp_model_config *c = &m->cfg;
    const int64_t dim = c->dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
    sp_status st;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return sp_fail(err, SP_ERR_NOMEM, "out of memory for layers");
    for (int l = 0; l < c->n_layers; l++) {
        sp_layer *L = &m->layers[l];
        char nm[96];
#define T(s) (snprintf(nm, sizeof nm, "blk.%d." s ".weight", l), nm)
#define B(s) (snprintf(nm, sizeof nm, "blk.%d." s ".bias", l), nm)
        const bool moe = m->moe.n_expert > 0;
        if ((st = bind_vector(m, path, T("attn_norm"), dim, &L->attn_norm, err)) ||
            (st = bind_vector(m, path, ai->oai ? T("post_attention_norm") : T("ffn_norm"), dim, &L->ffn_norm, err)) ||
            (st = bind_matrix(m, path, T("attn_output"), q_dim, dim, false, &L->wo, err)) ||
            (!moe && (st = bind_matrix(m, path, T("ffn_down"), c->ffn_dim, dim, false, &L->w2, err))))
            return st;
        if (moe) {
            const int64_t fe = m->moe.ffn, E = m->moe.n_expert;
            if ((st = bind_matrix(m, path, T("ffn_gate_inp"), dim, E, false, &L->gate_inp, err)) ||
                (st = bind_experts(m, path, T("ffn_gate_exps"), dim, fe, false, &L->exp_gate, err)) ||
                (st = bind_experts(m, path, T("ffn_up_exps"), dim, fe, false, &L->exp_up, err)) ||
                (st = bind_experts(m, path, T("ffn_down_exps"), fe, dim, false, &L->exp_down, err)))
                return st;
#define S(s) (snprintf(nm, sizeof nm, "blk.%d." s ".scale", l), nm)
            /* per-expert output scales (llama.cpp reads them for every
             * architecture; its llama and qwen3moe graphs apply them, its
             * gpt-oss graph does not) */
            if (!ai->oai &&
                ((st = bind_expert_vec(m, path, S("ffn_gate_exps"), 1, &L->exp_gate_s, err)) ||
                 (st = bind_expert_vec(m, path, S("ffn_up_exps"), 1, &L->exp_up_s, err)) ||
                 (st = bind_expert_vec(m, path, S("ffn_down_exps"), 1, &L->exp_down_s, err))))
                return st;
#undef S
            /* gpt-oss: router and expert biases, all required */
            if (ai->oai &&
                ((st = bind_vector(m, path, B("ffn_gate_inp"), E, &L->gate_inp_b, err)) ||
                 (st = bind_expert_vec(m, path, B("ffn_gate_exps"), fe, &L->exp_gate_b, err)) ||
                 (st = bind_expert_vec(m, path, B("ffn_up_exps"), fe, &L->exp_up_b, err)) ||
                 (st = bind_expert_vec(m, path, B("ffn_down_exps"), dim, &L->exp_down_b, err))))
                return st;
            if (ai->oai && (!L->exp_gate_b || !L->exp_up_b || !L->exp_down_b))
                return sp_fail(err, SP_ERR_FORMAT, "%s: blk.%d: an expert bias tensor is missing", path, l);
        }
        if (ai->oai && ((st = bind_vector(m, path, B("attn_output"), dim, &L->bo, err)) ||
                        (st = bind_vector(m, path, T("attn_sinks"), c->n_heads, &L->sinks, err))))
            return st;
        if (ai->fused) {
            /* phi3: q, k, v are row ranges of attn_qkv; gate and up halves of ffn_up */
            sp_weight qkv, gu;
            if ((st = bind_matrix(m, path, T("attn_qkv"), dim, q_dim + 2 * kv_dim, false, &qkv, err)) ||
                (st = bind_matrix(m, path, T("ffn_up"), dim, 2 * (int64_t)c->ffn_dim, false, &gu, err)))
                return st;
            L->wq = weight_rows(&qkv, 0, q_dim);
            L->wk = weight_rows(&qkv, q_dim, kv_dim);
            L->wv = weight_rows(&qkv, q_dim + kv_dim, kv_dim);
            L->w1 = weight_rows(&gu, 0, c->ffn_dim);
            L->w3 = weight_rows(&gu, c->ffn_dim, c->ffn_dim);
        } else if ((st = bind_matrix(m, path, T("attn_q"), dim, q_dim, false, &L->wq, err)) ||
                   (st = bind_matrix(m, path, T("attn_k"), dim, kv_dim, false, &L->wk, err)) ||
                   (st = bind_matrix(m, path, T("attn_v"), dim, kv_dim, false, &L->wv, err)) ||
                   (!moe && (st = bind_matrix(m, path, T("ffn_gate"), dim, c->ffn_dim, false, &L->w1, err))) ||
                   (!moe && (st = bind_matrix(m, path, T("ffn_up"), dim, c->ffn_dim, false, &L->w3, err)))) {
            return st;
        }
        if (ai->qkv_bias &&
            ((st = bind_vector(m, path, B("attn_q"), q_dim, &L->bq, err)) ||
             (st = bind_vector(m, path, B("attn_k"), kv_dim, &L->bk, err)) ||
             (st = bind_vector(m, path, B("attn_v"), kv_dim, &L->bv, err))))
            return st;
        if (ai->qk_norm &&
            ((st = bind_vector(m, path, T("attn_q_norm"), c->head_dim, &L->q_norm, err)) ||
             (st = bind_vector(m, path, T("attn_k_norm"), c->head_dim, &L->k_norm, err))))
            return st;
        if (ai->gemma) {
            if ((st = bind_vector(m, path, T("post_attention_norm"), dim, &L->post_attn_norm, err)) ||
                (st = bind_vector(m, path, T("post_ffw_norm"), dim, &L->post_ffn_norm, err)))
                return st;
            const bool sliding = ai->gemma == 2 ? l % 2 == 0 : (l + 1) % 6 != 0;
            L->window = sliding ? c->sliding_window : 0;
            L->rope_local = ai->gemma == 3 && sliding;
        } else if (ai->oai) {
            L->window = oai_swa(m, l) ? c->sliding_window : 0;
            L->rope_local = L->window > 0 && m->rope_theta_local > 0;
        } else {
            L->window = c->sliding_window;
        }
#undef T
#undef B
    }
    return SP_OK;
}

static sp_status load_gguf(sp_model *m, const char *path, const sp_model_params *p, sp_error *err) {
    sp_status st = sp_gguf_open(path, &m->gguf, err);
    if (st) return st;
    const sp_gguf *g = m->gguf;
    sp_str arch;
    if ((st = sp_gguf_get_str(g, "general.architecture", &arch, err))) return st;
    char a[64];
    snprintf(a, sizeof a, "%.*s", (int)(arch.len < 63 ? arch.len : 63), arch.ptr);
    const arch_info *ai = arch_find(a);
    if (!ai)
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not supported (supported: llama, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe, gpt-oss)",
                       path, a);

    if ((st = read_config(m, path, a, ai, err))) return st;
    sp_model_config *c = &m->cfg;
    const sp_gguf_tensor *te = sp_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return sp_fail(err, SP_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", path);
    c->n_vocab = te->ne[1] > INT32_MAX ? -1 : (int32_t)te->ne[1];
    if ((st = check_config(c, path, err))) return st;

    const int64_t dim = c->dim;
    if ((st = bind_matrix(m, path, "token_embd.weight", dim, c->n_vocab, false, &m->tok_embd, err)))
        return st;
    if ((st = bind_matrix(m, path, "output.weight", dim, c->n_vocab, true, &m->output, err)))
        return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if ((st = bind_vector(m, path, "output_norm.weight", dim, &m->out_norm, err))) return st;
    if (sp_gguf_find_tensor(g, "rope_freqs.weight")) {
        if ((st = bind_vector(m, path, "rope_freqs.weight", c->rot_dim / 2, &m->rope_factors, err)))
            return st;
        for (int32_t i = 0; i < c->rot_dim / 2; i++)
            if (!(m->rope_factors[i] > 0))
                return sp_fail(err, SP_ERR_FORMAT, "%s: rope_freqs.weight[%d] is not positive", path, i);
    }
    if ((st = bind_layers(m, path, ai, err))) return st;
    c->wtype = m->layers[0].wq.type;
    set_desc(m, a);
    if ((st = sp_tokenizer_load_gguf_pre(g, p ? p->tokenizer_pre : NULL, &m->tok, err))) return st;
    m->owns_tok = true;
    if (sp_tokenizer_n_vocab(m->tok) != c->n_vocab)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: tokenizer.ggml.tokens has %d entries but token_embd.weight has %d rows",
                       path, sp_tokenizer_n_vocab(m->tok), c->n_vocab);
    return SP_OK;
}

/* ------------------------------------------------------------- llama2.c */

/* llama2.c "version 0" checkpoint: 7 int32 header (dim, hidden_dim, n_layers,
 * n_heads, n_kv_heads, vocab_size, seq_len; vocab_size < 0 means a separate
 * classifier), then f32 tensors in the order bound below. */
static sp_status load_llama2c(sp_model *m, const char *path, const sp_model_params *p,
                              sp_error *err) {
    sp_file_map fm;
    sp_status fs = sp_file_map_open(path, "model", 28, &fm, err);
    if (fs) return fs;
    m->map = (void *)fm.data;
    m->map_len = (size_t)fm.size;
    int32_t h[7];
    memcpy(h, m->map, sizeof h);
    if (!memcmp(m->map, "24ka", 4))
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "%s: llama2.c checkpoint version 1+ ('ak42' header) is not supported; "
                       "export with the legacy (version 0) format or convert to GGUF", path);
    sp_model_config *c = &m->cfg;
    c->dim = h[0];
    c->ffn_dim = h[1];
    c->n_layers = h[2];
    c->n_heads = h[3];
    c->n_kv_heads = h[4];
    bool shared = h[5] > 0;
    c->n_vocab = h[5] < 0 ? (h[5] == INT32_MIN ? -1 : -h[5]) : h[5];
    c->n_ctx_train = h[6];
    c->rope_theta = 10000.0f;
    c->rope_scale = 1.0f;
    c->norm_eps = 1e-5f;
    c->rope_neox = false;
    c->wtype = SP_GGML_F32;
    if (c->n_heads <= 0 || c->dim <= 0 || c->n_ctx_train <= 0 || c->n_ctx_train > 1 << 24)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: not a GGUF file and not a valid llama2.c checkpoint (header dim %d, "
                       "heads %d, seq_len %d)",
                       path, h[0], h[3], h[6]);
    c->head_dim = c->dim / c->n_heads;
    c->rot_dim = c->head_dim;
    sp_status st = check_config(c, path, err);
    if (st) return st;

    const int64_t dim = c->dim, L = c->n_layers, hd = c->head_dim;
    const int64_t kv_dim = (int64_t)c->n_kv_heads * hd, ffn = c->ffn_dim, V = c->n_vocab;
    /* Count floats first and compare with the file size before binding. */
    int64_t need = V * dim + L * dim + L * dim * dim + 2 * L * kv_dim * dim + L * dim * dim +
                   L * dim + 3 * L * ffn * dim + dim + (int64_t)c->n_ctx_train * hd;
    if (!shared) need += V * dim;
    if ((uint64_t)need * 4 + 28 > m->map_len)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: truncated llama2.c checkpoint: header needs %lld bytes, file has %zu",
                       path, (long long)need * 4 + 28, m->map_len);

    const float *f = (const float *)((const uint8_t *)m->map + 28);
#define MAT(w, r, cc)                                                                        \
    ((w).type = SP_GGML_F32, (w).rows = (r), (w).cols = (cc), (w).row_bytes = 4 * (size_t)(cc), \
     (w).data = (const uint8_t *)f, f += (r) * (cc))
    MAT(m->tok_embd, V, dim);
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return sp_fail(err, SP_ERR_NOMEM, "out of memory for layers");
    for (int l = 0; l < L; l++) m->layers[l].attn_norm = f, f += dim;
    for (int l = 0; l < L; l++) MAT(m->layers[l].wq, dim, dim);
    for (int l = 0; l < L; l++) MAT(m->layers[l].wk, kv_dim, dim);
    for (int l = 0; l < L; l++) MAT(m->layers[l].wv, kv_dim, dim);
    for (int l = 0; l < L; l++) MAT(m->layers[l].wo, dim, dim);
    for (int l = 0; l < L; l++) m->layers[l].ffn_norm = f, f += dim;
    for (int l = 0; l < L; l++) MAT(m->layers[l].w1, ffn, dim);
    for (int l = 0; l < L; l++) MAT(m->layers[l].w2, dim, ffn);
    for (int l = 0; l < L; l++) MAT(m->layers[l].w3, ffn, dim);
    m->out_norm = f;
    f += dim;
    f += (int64_t)c->n_ctx_train * hd; /* freq_cis_real + freq_cis_imag (unused) */
    if (shared)
        m->output = m->tok_embd;
    else
        MAT(m->output, V, dim);
#undef MAT
    set_desc(m, "llama2.c");
    if (p && p->tokenizer_path) {
        st = sp_tokenizer_load_llama2c(p->tokenizer_path, c->n_vocab, &m->tok, err);
        if (st) return st;
        m->owns_tok = true;
    }
    return SP_OK;
}

/* Once the forward pass reads the packed copies, the file pages of those
 * matrices (the whole pages inside each) leave this process's resident set
 * (MADV_DONTNEED on the read-only private mapping): the copy replaces them
 * rather than doubling the model's memory. They stay in the page cache and
 * fault back in if read (e.g. to make a requantised draft). Not done for
 * locked mappings, nor for tied embeddings (the token lookup reads them). */
static void release_pages(const sp_model *m, const sp_file_map *fm, const sp_weight *w) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)fm->data,
                    hi = lo + (uintptr_t)fm->size;
    const uintptr_t a = (uintptr_t)w->data, e = a + (uintptr_t)w->rows * w->row_bytes;
    if (!w->packed || a < lo || e > hi || w->data == m->tok_embd.data) return;
    const uintptr_t pa = (a + page - 1) / page * page, pe = e / page * page;
    if (pe > pa) (void)madvise((void *)pa, pe - pa, MADV_DONTNEED);
}

/* The packed copy of a matmul weight (model_internal.h), when the kernels
 * in use want one: a buffer of the matrix's size, whose file pages are then
 * released when fm (the mapping) is given (see above). */
static sp_status pack_weight(sp_model *m, sp_weight *w, const sp_file_map *fm, sp_error *err) {
    w->packed = NULL;
    if (!w->data || !sp_ops_packs(w->type)) return SP_OK;
    uint8_t *buf = sp_model_alloc(m, sp_ops_pack_bytes(w->type, w->rows, w->cols));
    if (!buf) return sp_fail(err, SP_ERR_NOMEM, "out of memory packing weights");
    sp_ops_pack(w->type, w->data, w->row_bytes, w->rows, w->cols, buf);
    w->packed = buf;
    w->packed_stride = sp_ops_pack_stride(w->type, w->cols);
    if (fm) release_pages(m, fm, w);
    return SP_OK;
}

/* fm: the file mapping whose pages packed matrices release, or NULL. */
static sp_status pack_weights(sp_model *m, const sp_file_map *fm, sp_error *err) {
    sp_status st = pack_weight(m, &m->output, fm, err);
    for (int l = 0; !st && l < m->cfg.n_layers; l++) {
        sp_layer *L = &m->layers[l];
        sp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3, &L->gate_inp};
        for (size_t i = 0; !st && i < sizeof ws / sizeof ws[0]; i++) st = pack_weight(m, ws[i], fm, err);
        /* F16 experts are read unpacked (moe.h: ggml's vec_dot_f16 order) */
        for (int e = 0; !st && L->exp_up && L->exp_up[0].type != SP_GGML_F16 && e < m->moe.n_expert; e++) {
            st = pack_weight(m, &L->exp_gate[e], fm, err);
            if (!st) st = pack_weight(m, &L->exp_up[e], fm, err);
            if (!st) st = pack_weight(m, &L->exp_down[e], fm, err);
        }
    }
    return st;
}

sp_status sp_model_load(const char *path, const sp_model_params *params, sp_model **out,
                        sp_error *err) {
    *out = NULL;
    if (!path) return sp_fail(err, SP_ERR_ARG, "no model path given");
    int fd;
    uint64_t fsize;
    sp_status fs = sp_file_open(path, "model", &fd, &fsize, err);
    if (fs) return fs;
    char magic[4] = {0};
    ssize_t got = fsize >= 4 ? pread(fd, magic, 4, 0) : 0;
    close(fd);
    const bool gguf = got == 4 && !memcmp(magic, "GGUF", 4);
    /* a tokenizer given for a GGUF model would be ignored (the file has its own): refused */
    if (gguf && params && params->tokenizer_path)
        return sp_fail(err, SP_ERR_ARG,
                       "tokenizer_path: %s is a GGUF model, whose tokenizer is in the file (a separate "
                       "tokenizer is for llama2.c checkpoints)", path);
    sp_model *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    sp_status st;
    if (gguf)
        st = load_gguf(m, path, params, err);
    else
        st = load_llama2c(m, path, params, err);
    if (!st) {
        const bool prefault = !(params && params->no_prefault), lock = params && params->mlock;
        sp_file_map fm = m->gguf ? sp_gguf_mapping(m->gguf) : (sp_file_map){m->map, m->map_len};
        st = sp_file_map_resident(&fm, prefault, lock, "model", err);
    }
    if (!st) {
        const sp_file_map fm = m->gguf ? sp_gguf_mapping(m->gguf) : (sp_file_map){0};
        st = pack_weights(m, m->gguf && !(params && params->mlock) ? &fm : NULL, err);
    }
    if (st) {
        sp_model_free(m);
        return st;
    }
    *out = m;
    return SP_OK;
}

/* ------------------------------------------------------------ requantise */

/* Rows whose length is not a multiple of the block size (e.g. stories260K's
 * FFN of 172) cannot hold a block format; those matrices become F16, the
 * nearest lower-precision type that fits any length. */
static sp_status requant_matrix(sp_model *dst, const sp_weight *src, sp_ggml_type type,
                                sp_weight *out, float *row, sp_error *err) {
    if (sp_ggml_blck_size(type) > 1 && src->cols % sp_ggml_blck_size(type)) type = SP_GGML_F16;
    *out = *src;
    out->packed = NULL;
    out->type = type;
    out->row_bytes = sp_ggml_row_size(type, src->cols);
    uint8_t *buf = sp_model_alloc(dst, out->row_bytes * (size_t)src->rows);
    if (!buf) return sp_fail(err, SP_ERR_NOMEM, "out of memory re-quantising weights");
    for (int64_t r = 0; r < src->rows; r++) {
        sp_dequantize_row(src->type, src->data + r * src->row_bytes, row, src->cols);
        sp_quantize_row(type, row, buf + r * out->row_bytes, src->cols);
    }
    out->data = buf;
    return SP_OK;
}

sp_status sp_model_requantize(const sp_model *src, sp_ggml_type type, sp_model **out,
                              sp_error *err) {
    *out = NULL;
    if (!sp_quant_supported(type))
        return sp_fail(err, SP_ERR_UNSUPPORTED, "cannot re-quantise to type %s",
                       sp_ggml_type_name(type));
    sp_model *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    m->cfg = src->cfg;
    m->cfg.wtype = type;
    m->tok = src->tok;
    m->owns_tok = false;
    m->tok_embd = src->tok_embd;
    m->out_norm = src->out_norm;
    m->rope_factors = src->rope_factors;
    m->embed_scale = src->embed_scale;
    m->geglu = src->geglu;
    m->q_prescale = src->q_prescale;
    m->attn_softcap = src->attn_softcap;
    m->final_softcap = src->final_softcap;
    m->rope_theta_local = src->rope_theta_local;
    m->rope_yarn = src->rope_yarn;
    m->yarn_orig_ctx = src->yarn_orig_ctx;
    m->rope_attn_factor = src->rope_attn_factor;
    m->moe = src->moe;
    m->layers = calloc((size_t)src->cfg.n_layers, sizeof *m->layers);
    int64_t maxc = src->cfg.dim > src->cfg.ffn_dim ? src->cfg.dim : src->cfg.ffn_dim;
    if (m->moe.ffn > maxc) maxc = m->moe.ffn;
    if ((int64_t)src->cfg.n_heads * src->cfg.head_dim > maxc)
        maxc = (int64_t)src->cfg.n_heads * src->cfg.head_dim;
    float *row = malloc((size_t)maxc * sizeof(float));
    sp_status st = (!m->layers || !row) ? sp_fail(err, SP_ERR_NOMEM, "out of memory") : SP_OK;
    for (int l = 0; !st && l < src->cfg.n_layers; l++) {
        const sp_layer *S = &src->layers[l];
        sp_layer *D = &m->layers[l];
        *D = *S; /* norms, biases, q/k norms; the matrices are replaced below */
        if ((st = requant_matrix(m, &S->wq, type, &D->wq, row, err)) ||
            (st = requant_matrix(m, &S->wk, type, &D->wk, row, err)) ||
            (st = requant_matrix(m, &S->wv, type, &D->wv, row, err)) ||
            (st = requant_matrix(m, &S->wo, type, &D->wo, row, err)) ||
            (st = requant_matrix(m, &S->w1, type, &D->w1, row, err)) ||
            (st = requant_matrix(m, &S->w2, type, &D->w2, row, err)) ||
            (st = requant_matrix(m, &S->w3, type, &D->w3, row, err)))
            break;
        if (S->exp_up) { /* the router stays as it is (its choices are the target's) */
            const size_t bytes = (size_t)m->moe.n_expert * sizeof(sp_weight);
            D->exp_gate = sp_model_alloc(m, bytes), D->exp_up = sp_model_alloc(m, bytes);
            D->exp_down = sp_model_alloc(m, bytes);
            if (!D->exp_gate || !D->exp_up || !D->exp_down) {
                st = sp_fail(err, SP_ERR_NOMEM, "out of memory re-quantising experts");
                break;
            }
            for (int e = 0; !st && e < m->moe.n_expert; e++) {
                st = requant_matrix(m, &S->exp_gate[e], type, &D->exp_gate[e], row, err);
                if (!st) st = requant_matrix(m, &S->exp_up[e], type, &D->exp_up[e], row, err);
                if (!st) st = requant_matrix(m, &S->exp_down[e], type, &D->exp_down[e], row, err);
            }
        }
    }
    if (!st) st = requant_matrix(m, &src->output, type, &m->output, row, err);
    free(row);
    if (!st) st = pack_weights(m, NULL, err);
    if (st) {
        sp_model_free(m);
        return st;
    }
    char base[sizeof src->desc];
    snprintf(base, sizeof base, "%s", src->desc);
    char *sp = strchr(base, ' ');
    if (sp) *sp = 0;
    set_desc(m, base);
    *out = m;
    return SP_OK;
}
