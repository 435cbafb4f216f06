/* model_load: bind Llama weights from a GGUF file or a llama2.c checkpoint,
 * validating every shape. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "deltanet.h"
#include "model_internal.h"
#include "ops.h"
#include "file.h"
#include "quant.h"
#include "tokenizer_load.h"

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
    /* Buffers of a huge page or more (the packed weight copies) start on a
     * huge-page boundary and ask for transparent huge pages: decode streams
     * every weight once per token, and with 4 KiB pages each 4 KiB of a
     * stream is a TLB miss (the file mapping llama.cpp reads from gets huge
     * page-cache folios). Only a hint: where THP is off, nothing changes. */
    const size_t huge = (size_t)2 << 20;
    const bool big = bytes >= huge;
    void *p = NULL;
    if (posix_memalign(&p, big ? huge : 64, bytes ? bytes : 64)) return NULL;
    if (big) (void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
    m->owned[m->n_owned++] = p;
    return p;
}

void sp_model_free(sp_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->mtp);
    if (m->owns_tok) sp_tokenizer_free(m->tok);
    if (m->gguf) sp_gguf_close(m->gguf);
    sp_file_map fm = {m->map, m->map_len};
    sp_file_unmap(&fm);
    free(m);
}

const sp_model_config *sp_model_cfg(const sp_model *m) { return &m->cfg; }
const sp_tokenizer *sp_model_tokenizer(const sp_model *m) { return m->tok; }
const char *sp_model_desc(const sp_model *m) { return m->desc; }
int32_t sp_model_n_mtp(const sp_model *m) { return m->n_mtp; }

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
        if (L->dn) {
            sp_weight *dw[SP_DELTANET_N_WEIGHTS];
            sp_deltanet_weights(L->dn, dw);
            for (int i = 0; i < SP_DELTANET_N_WEIGHTS; i++) n += weight_bytes(dw[i]);
        }
    }
    return n + sp_model_expert_bytes(m);
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

void sp_model_set_desc(sp_model *m, const char *arch) {
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

/* Marks the file's tensor `name` (if there) as one the architecture reads,
 * bound or not (llama.cpp loads some it never uses, e.g. "NAME.input_scale"):
 * a tensor no architecture row claims makes llama.cpp refuse the file
 * ("wrong number of tensors"), and Specula with it (load_gguf). Every
 * tensor bound through bind_matrix is claimed there. */
static const sp_gguf_tensor *claim(sp_model *m, const char *name) {
    const sp_gguf_tensor *t = sp_gguf_find_tensor(m->gguf, name);
    if (t && m->claimed) m->claimed[t - sp_gguf_tensor_at(m->gguf, 0)] = 1; /* one array */
    return t;
}

sp_status sp_weight_from_tensor(const sp_gguf_tensor *t, const char *path, const char *name, int64_t cols,
                                int64_t rows, bool optional, sp_weight *w, sp_error *err) {
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
                       "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, mxfp4, q2_K, q3_K, q4_K, q5_K, q6_K, "
                       "iq4_xs)",
                       path, name, sp_ggml_type_name(t->type));
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = sp_ggml_row_size(t->type, cols);
    w->data = t->data;
    return SP_OK;
}

static sp_status bind_matrix(sp_model *m, const char *path, const char *name, int64_t cols,
                             int64_t rows, bool optional, sp_weight *w, sp_error *err) {
    return sp_weight_from_tensor(claim(m, name), path, name, cols, rows, optional, w, err);
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

sp_status sp_model_bind_matrix(sp_model *m, const char *path, const char *name, int64_t cols,
                               int64_t rows, bool optional, sp_weight *w, sp_error *err) {
    return bind_matrix(m, path, name, cols, rows, optional, w, err);
}

sp_status sp_model_bind_vector(sp_model *m, const char *path, const char *name, int64_t n,
                               bool optional, const float **out, sp_error *err) {
    *out = NULL;
    if (optional && !sp_gguf_find_tensor(m->gguf, name)) return SP_OK;
    return bind_vector(m, path, name, n, out, err);
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
 * these differences bound at load time. What each reads is what llama.cpp's
 * loader reads for it (src/models/ARCH.cpp, src/llama-model.cpp of
 * 2026-09), with its defaults and its readings of absent or zero values:
 *
 *  - every one: q/k/v as blk.N.attn_qkv or as attn_q/attn_k/attn_v, each
 *    with an optional bias (attn_qkv.bias, or all three separate biases
 *    with a fused matrix) and optional per-matrix "NAME.scale" [1]
 *    multiplying the matmul's output; attn_output and its optional scale.
 *    Keys, required as llama.cpp requires them: context_length,
 *    embedding_length, block_count, attention.layer_norm_rms_epsilon (and,
 *    which these architectures cannot run without, attention.head_count,
 *    feed_forward_length); optional: attention.head_count_kv,
 *    attention.key_length, attention.value_length,
 *    rope.dimension_count, rope.freq_base, rope.scaling.type (absent:
 *    linear), rope.scaling.factor (or rope.scale_linear; absent or 0: no
 *    scaling), rope.scaling.attn_factor (refused unless 1), expert_count
 *    (refused when > 0: no experts here).
 *  - the rest per row of ARCHS below. Keys a file carries that its
 *    architecture does not read (llama.cpp's test files write nearly all of
 *    them) are not read here either; a tensor it does not read refuses the
 *    file, as in llama.cpp (claim). */
typedef struct arch_info {
    const char *name;
    bool neox;           /* RoPE on halves of each head */
    bool qk_norm;        /* blk.N.attn_{q,k}_norm.weight: per-head RMSNorm before RoPE */
    bool ffn_fused;      /* blk.N.ffn_up is gate and up stacked, no ffn_gate (phi3) */
    bool q_prescale;     /* the graph scales the queries, not the scores (model_internal.h) */
    bool rope_freqs;     /* optional rope_freqs.weight (llama) */
    bool rope_longshort; /* optional rope_factors_long/short.weight (phi3) */
    bool wo_bias;        /* optional attn_output.bias (llama) */
    bool ffn_bias;       /* optional ffn_{gate,up,down}.bias (llama) */
    bool ffn_scale;      /* ffn_{gate,up,down}.scale applied (llama, qwen3) */
    bool out_bias;       /* optional output.bias (qwen2, phi3) */
    int swa;             /* attention.sliding_window: 0 not read (llama, qwen2, qwen3);
                          * 1 read and not applied (phi3: llama.cpp disables it);
                          * 2 gemma2 (default 4096; pattern default 2);
                          * 3 gemma3 (only when > 0; pattern default 6) */
    int gemma;           /* 2 or 3: embeddings x sqrt(dim), GELU gate, post-block norms */
    int moe;             /* experts (moe.h): 1 when expert_count > 0 (llama: Mixtral style), 2 always
                          * (qwen3moe, gpt-oss); their *_exps.scale applied unless oai */
    bool oai;            /* gpt-oss: attention sinks, output bias, router and expert biases,
                          * softmax over the selected experts, clamped SwiGLU, post-attention
                          * norm as the FFN norm, sliding layers by pattern (default 2) */
    int hybrid;          /* Gated DeltaNet layers (deltanet.h) beside gated attention (q
                          * projection [query | gate] per head), the FFN norm named
                          * post_attention_norm; 1 (qwen35, qwen35moe): IMRoPE sections,
                          * ssm_beta and ssm_alpha, every matrix's scale applied; 2
                          * (qwen3next): plain NeoX RoPE, one ssm_ba [beta | alpha per key
                          * head], value heads grouped per key head, no scale on
                          * attn_qkv, attn_gate, ssm_out (its graph applies none) */
    bool shexp;          /* a shared expert beside the routed ones (ffn_*_shexp, gated by
                          * sigmoid(ffn_gate_inp_shexp x)) */
} arch_info;

static const arch_info ARCHS[] = {
    /*               neox   qk_nrm fused  q_pre  freqs  lng/sh wo_b   ffn_b  ffn_s  out_b  swa gemma moe oai hybrid shexp */
    {"llama",  false, false, false, false, true,  false, true,  true,  true,  false, 0, 0, 1, false, 0, false},
    {"qwen2",  true,  false, false, false, false, false, false, false, false, true,  0, 0, 0, false, 0, false},
    {"qwen3",  true,  true,  false, false, false, false, false, false, true,  false, 0, 0, 0, false, 0, false},
    {"phi3",   true,  false, true,  true,  false, true,  false, false, false, true,  1, 0, 0, false, 0, false},
    {"gemma2", true,  false, false, true,  false, false, false, false, false, false, 2, 2, 0, false, 0, false},
    {"gemma3", true,  true,  false, false, false, false, false, false, false, false, 3, 3, 0, false, 0, false},
    {"qwen3moe", true, true, false, false, false, false, false, false, false, false, 0, 0, 2, false, 0, false},
    {"gpt-oss", true,  false, false, false, false, false, true,  false, false, false, 0, 0, 2, true, 0, false},
    {"qwen35", true,  true,  false, false, false, false, false, false, true,  false, 0, 0, 0, false, 1, false},
    {"qwen35moe", true, true, false, false, false, false, false, false, false, false, 0, 0, 2, false, 1, true},
    {"qwen3next", true, true, false, false, false, false, false, false, false, false, 0, 0, 2, false, 2, true},
};
/* gemma3: llama.cpp of 2026-09 scales its queries, that of 2025-05 (which
 * made ../shared/reference/arch) its scores; the scores' order gives both
 * references' logits exactly as printed, the queries' only the 2026 ones. */

const char *sp_model_arch_name(int32_t i) {
    return i >= 0 && (size_t)i < sizeof ARCHS / sizeof ARCHS[0] ? ARCHS[i].name : NULL;
}

size_t sp_model_arch_list(const char *sep, char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        n += (size_t)snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, "%s%s", i ? sep : "", ARCHS[i].name);
    return n;
}

static const arch_info *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
}

/* Rows [r0, r0 + n) of a matrix as a matrix of its own (bias rows with it). */
static sp_weight weight_rows(const sp_weight *w, int64_t r0, int64_t n) {
    sp_weight v = *w;
    v.rows = n;
    v.data = w->data + (size_t)r0 * w->row_bytes;
    if (w->bias) v.bias = w->bias + r0;
    return v;
}

/* rope.scaling.*: linear (positions divided by the factor), yarn and none
 * are supported; the others change the model's function and are refused by
 * name rather than silently ignored. */
static sp_status read_rope_scaling(const sp_gguf *g, const char *path, const char *a, float *scale,
                                   bool *yarn, sp_error *err) {
    char key[128];
    *scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    const sp_gguf_kv *sk = sp_gguf_find(g, key);
    char ty[32] = "linear";
    if (sk) {
        if (sk->type != SP_GGUF_STRING)
            return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is not a string", path, key);
        snprintf(ty, sizeof ty, "%.*s", (int)(sk->v.str.len < 31 ? sk->v.str.len : 31), sk->v.str.ptr);
    }
    *yarn = !strcmp(ty, "yarn"); /* ops.h, with llama.cpp's context defaults (model.c) */
    if (strcmp(ty, "none") != 0 && strcmp(ty, "linear") != 0 && !*yarn)
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "%s: RoPE scaling '%s' (%s) is not supported (supported: none, linear, yarn)", path, ty, key);
    /* rope.scaling.attn_factor multiplies llama.cpp's RoPE cos/sin: YaRN's
     * takes it (model.c), otherwise only 1 here */
    float af = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", a);
    sp_status st = get_f32_or(g, key, 1.0f, &af, err);
    if (st) return st;
    if (af != 1.0f && !*yarn)
        return sp_fail(err, SP_ERR_UNSUPPORTED, "%s: %s = %g is not supported (only 1, or with yarn)", path, key,
                       (double)af);
    if (!strcmp(ty, "none")) return SP_OK; /* llama.cpp: never scaled */
    float f = 0.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    if (!sp_gguf_find(g, key)) snprintf(key, sizeof key, "%s.rope.scale_linear", a);
    st = get_f32_or(g, key, 0.0f, &f, err);
    if (st) return st;
    if (f == 0.0f) return SP_OK; /* absent or 0: not set */
    if (!(f > 0.0f) || !isfinite(f))
        return sp_fail(err, SP_ERR_FORMAT, "%s: bad RoPE scaling factor %s = %g", path, key, (double)f);
    *scale = 1.0f / f;
    return SP_OK;
}

/* Which layers slide (gemma): attention.sliding_window_pattern as a
 * per-layer array (non-zero: sliding), or as a number n (every layer but
 * each n-th), or n_pattern when absent; llama.cpp's set_swa_pattern. */
static sp_status read_swa_pattern(sp_model *m, const char *path, const char *a, uint32_t n_pattern,
                                  bool *sliding, sp_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", a);
    const sp_gguf_kv *kv = sp_gguf_find(m->gguf, key);
    const int32_t L = m->cfg.n_layers;
    if (kv && kv->type == SP_GGUF_ARRAY) {
        if (kv->arr_type != SP_GGUF_BOOL && !(kv->arr_type <= SP_GGUF_INT32 || kv->arr_type == SP_GGUF_UINT64 ||
                                             kv->arr_type == SP_GGUF_INT64))
            return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is not an array of integers", path, key);
        for (int32_t l = 0; l < L; l++)
            sliding[l] = (uint64_t)l < kv->arr_n && sp_gguf_arr_int(kv, (uint64_t)l) != 0;
        return SP_OK;
    }
    if (kv) {
        uint32_t u;
        sp_status st = sp_gguf_get_u32(m->gguf, key, &u, err);
        if (st) return st;
        n_pattern = u;
    }
    for (int32_t l = 0; l < L; l++) sliding[l] = n_pattern == 0 || (uint32_t)l % n_pattern < n_pattern - 1;
    return SP_OK;
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
    int32_t experts = 0;
    if ((st = get_u32_or(g, KEY("expert_count"), 0, &experts, err))) return st;
    if (experts > 0 && !ai->moe)
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "%s: %s = %d: mixture-of-experts layers are not supported for architecture '%s'",
                       path, key, experts, a);
    if ((st = sp_gguf_get_u32(g, KEY("embedding_length"), &u, err))) return st;
    c->dim = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = sp_gguf_get_u32(g, KEY("block_count"), &u, err))) return st;
    c->n_layers = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if (ai->hybrid) { /* MTP blocks (qwen35, qwen35moe, qwen3next): counted in block_count, after the trunk */
        if ((st = get_u32_or(g, KEY("nextn_predict_layers"), 0, &m->n_mtp, err))) return st;
        if (m->n_mtp < 0 || m->n_mtp >= c->n_layers)
            return sp_fail(err, SP_ERR_FORMAT, "%s: %s = %d leaves no trunk of the %d blocks", path, key, m->n_mtp,
                           c->n_layers);
        c->n_layers -= m->n_mtp;
    }
    if ((st = sp_gguf_get_u32(g, KEY("attention.head_count"), &u, err))) return st;
    c->n_heads = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = get_u32_or(g, KEY("attention.head_count_kv"), u, &c->n_kv_heads, err))) return st;
    if ((st = sp_gguf_get_u32(g, KEY("feed_forward_length"), &u, err))) return st;
    c->ffn_dim = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = sp_gguf_get_u32(g, KEY("context_length"), &u, err))) return st;
    c->n_ctx_train = (int32_t)(u > INT32_MAX ? -1 : (int64_t)u);
    if ((st = get_f32_or(g, KEY("rope.freq_base"), 10000.0f, &c->rope_theta, err))) return st;
    if ((st = sp_gguf_get_f32(g, KEY("attention.layer_norm_rms_epsilon"), &c->norm_eps, err))) return st;
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
    if (!strcmp(a, "llama") && c->rot_dim != c->head_dim) /* as llama.cpp refuses it */
        return sp_fail(err, SP_ERR_FORMAT, "%s: %s = %d, expected the head size %d", path, key,
                       c->rot_dim, c->head_dim);
    m->n_ctx_orig = c->n_ctx_train;
    if ((st = get_u32_or(g, KEY("rope.scaling.original_context_length"), (uint32_t)c->n_ctx_train,
                         &m->n_ctx_orig, err)))
        return st;
    if ((st = read_rope_scaling(g, path, a, &c->rope_scale, &m->rope_yarn, err))) return st;
    m->rope_attn_factor = 1.0f;
    if (m->rope_yarn &&
        ((st = get_f32_or(g, KEY("rope.scaling.attn_factor"), 1.0f, &m->rope_attn_factor, err)) ||
         (!(m->rope_attn_factor > 0) && (st = sp_fail(err, SP_ERR_FORMAT, "%s: bad %s", path, key))) ||
         (m->n_ctx_orig <= 0 && (st = sp_fail(err, SP_ERR_FORMAT, "%s: bad YaRN original context %d", path,
                                              m->n_ctx_orig)))))
        return st;
    c->rope_neox = ai->neox;
    m->q_prescale = ai->q_prescale;
    m->q_prescale_lowp = ai->q_prescale || ai->gemma == 3;
    c->sliding_window = 0;
    if (ai->swa) {
        int32_t win = ai->swa == 2 ? 4096 : 0;
        if ((st = get_u32_or(g, KEY("attention.sliding_window"), (uint32_t)win, &win, err))) return st;
        if (ai->swa >= 2) c->sliding_window = win; /* phi3: read, not applied */
    }
    if (ai->gemma) {
        /* gemma2: both caps, defaults 50 and 30; gemma3: the final one, default 0 */
        m->attn_softcap = ai->gemma == 2 ? 50.0f : 0.0f;
        m->final_softcap = ai->gemma == 2 ? 30.0f : 0.0f;
        if ((ai->gemma == 2 && (st = get_f32_or(g, KEY("attn_logit_softcapping"), 50.0f, &m->attn_softcap, err))) ||
            (st = get_f32_or(g, KEY("final_logit_softcapping"), m->final_softcap, &m->final_softcap, err)))
            return st;
        if (!(m->attn_softcap >= 0 && m->final_softcap >= 0) || (ai->gemma == 2 && !(m->attn_softcap > 0)))
            return sp_fail(err, SP_ERR_FORMAT, "%s: bad soft-capping values (attention %g, final %g)", path,
                           (double)m->attn_softcap, (double)m->final_softcap);
        /* the sliding layers' RoPE: gemma2 the global base and scale unless
         * rope.freq_base_swa; gemma3 base 10000 unless given, unscaled */
        m->rope_theta_local = ai->gemma == 2 ? c->rope_theta : 10000.0f;
        m->rope_scale_local = ai->gemma == 2 ? c->rope_scale : 1.0f;
        if ((st = get_f32_or(g, KEY("rope.freq_base_swa"), m->rope_theta_local, &m->rope_theta_local, err)))
            return st;
        if (!(m->rope_theta_local > 0))
            return sp_fail(err, SP_ERR_FORMAT, "%s: bad %s %g", path, key, (double)m->rope_theta_local);
        m->embed_scale = sqrtf((float)c->dim);
        m->geglu = true;
        /* the 27B models scale the queries by 1/sqrt(dim / heads) */
        if (c->n_heads > 0 && ((ai->gemma == 2 && c->n_layers == 46) || (ai->gemma == 3 && c->n_layers == 62)))
            m->kq_scale = 1.0f / sqrtf((float)(c->dim / c->n_heads));
    }
    if (ai->hybrid) m->attn_gated = true;
    if (ai->hybrid == 1) {
        /* text positions in IMRoPE's first three sections, 0 in the fourth */
        const sp_gguf_kv *ks = sp_gguf_find(g, KEY("rope.dimension_sections"));
        if (ks && ks->type == SP_GGUF_ARRAY && ks->arr_type <= SP_GGUF_INT32) {
            for (uint64_t i = 0; i < 4 && i < ks->arr_n; i++) {
                const int64_t v = sp_gguf_arr_int(ks, i);
                if (v < 0 || v > 4096) return sp_fail(err, SP_ERR_FORMAT, "%s: bad %s[%d] = %lld", path, key, (int)i, (long long)v);
                m->rope_sections[i] = (int32_t)v;
            }
        } else if (ks) {
            return sp_fail(err, SP_ERR_FORMAT, "%s: metadata %s is not an array of integers", path, key);
        }
        if (m->rope_sections[0] + m->rope_sections[1] + m->rope_sections[2] + m->rope_sections[3] > c->rot_dim)
            return sp_fail(err, SP_ERR_FORMAT, "%s: %s add up to more than the %d rotated dimensions", path, key, c->rot_dim);
    }
    if (ai->oai) { /* gpt-oss: the window is required; the sliding layers' base */
        if (!sp_gguf_find(g, KEY("attention.sliding_window")))
            return sp_fail(err, SP_ERR_FORMAT, "%s: %s is missing", path, key);
        if ((st = get_u32_or(g, key, 0, &c->sliding_window, err))) return st;
        if (c->sliding_window <= 0) return sp_fail(err, SP_ERR_FORMAT, "%s: %s must be positive", path, key);
        float base_swa = c->rope_theta;
        if ((st = get_f32_or(g, KEY("rope.freq_base_swa"), c->rope_theta, &base_swa, err))) return st;
        if (base_swa != c->rope_theta) m->rope_theta_local = base_swa, m->rope_scale_local = c->rope_scale;
    }
    /* experts: the counts as llama.cpp reads them for every architecture,
     * the rest per architecture (llama, qwen3moe: softmax gating, selected
     * weights normalised; gpt-oss: softmax over the selected logits) */
    if (ai->moe && (experts > 0 || ai->moe == 2)) {
        sp_moe_cfg *mc = &m->moe;
        mc->n_expert = experts;
        if ((st = get_u32_or(g, KEY("expert_used_count"), 0, &mc->n_used, err))) return st;
        if (mc->n_expert < 1 || mc->n_expert > 256 || mc->n_used < 1 || mc->n_used > mc->n_expert)
            return sp_fail(err, SP_ERR_FORMAT,
                           "%s: bad expert counts %s.expert_count = %d, %s.expert_used_count = %d (1 <= used <= "
                           "experts <= 256)", path, a, mc->n_expert, a, mc->n_used);
        /* the experts' FFN width: expert_feed_forward_length (qwen3moe: 0 or
         * absent means feed_forward_length / used; llama: feed_forward_length) */
        mc->ffn = c->ffn_dim;
        if (ai->moe == 2) {
            if ((st = get_u32_or(g, KEY("expert_feed_forward_length"), 0, &mc->ffn, err))) return st;
            if (mc->ffn == 0 && !ai->oai) mc->ffn = c->ffn_dim / mc->n_used;
        }
        if (mc->ffn <= 0 || mc->ffn > 1 << 20)
            return sp_fail(err, SP_ERR_FORMAT, "%s: bad expert FFN length %d", path, mc->ffn);
        mc->gating = ai->oai ? SP_MOE_SOFTMAX_WEIGHT : SP_MOE_SOFTMAX;
        mc->norm_w = !ai->oai;
        mc->w_scale = 0.0f;
        mc->swiglu_oai = ai->oai;
        c->n_expert = mc->n_expert;
        c->n_expert_used = mc->n_used;
        /* the shared expert's width: expert_shared_feed_forward_length (0 or
         * absent: feed_forward_length) */
        if (ai->shexp) {
            if ((st = get_u32_or(g, KEY("expert_shared_feed_forward_length"), 0, &m->sh_ffn, err))) return st;
            if (m->sh_ffn == 0) m->sh_ffn = c->ffn_dim;
            if (m->sh_ffn <= 0 || m->sh_ffn > 1 << 20)
                return sp_fail(err, SP_ERR_FORMAT, "%s: bad shared expert FFN length %d", path, m->sh_ffn);
        }
    }
#undef KEY
    return SP_OK;
}

/* A 3-D expert tensor [cols, rows, n_expert] as n_expert matrices (owned
 * array), each a view of its slice. */
static sp_status bind_experts(sp_model *m, const char *path, const char *name, int64_t cols, int64_t rows,
                              sp_weight **out, sp_error *err) {
    const int32_t E = m->moe.n_expert;
    *out = NULL;
    const sp_gguf_tensor *t = claim(m, name);
    if (!t) return sp_fail(err, SP_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
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

/* An optional [n, E] per-expert vector tensor (biases, or with n = 1 the
 * [E] scales) as f32; absent gives NULL. */
static sp_status bind_expert_vec(sp_model *m, const char *path, const char *name, int64_t n, const float **out,
                                 sp_error *err) {
    *out = NULL;
    const sp_gguf_tensor *t = claim(m, name);
    if (!t) return SP_OK;
    const int32_t E = m->moe.n_expert;
    if (t->ne[0] != (n == 1 ? E : n) || t->ne[1] != (n == 1 ? 1 : E) || t->ne[2] != 1 || t->ne[3] != 1 ||
        !sp_quant_loadable(t->type))
        return sp_fail(err, SP_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld] type %s, expected [%lld, %d]",
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

/* Layer l's experts (model_internal.h): router, 3-D gate/up/down, their
 * scales (not gpt-oss: its graph does not apply them) or gpt-oss's biases. */
static sp_status bind_moe(sp_model *m, const char *path, const arch_info *ai, int l, sp_layer *L, sp_error *err) {
    const int64_t dim = m->cfg.dim, fe = m->moe.ffn, E = m->moe.n_expert;
    char nm[96];
    sp_status st;
#define T(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
    if ((st = bind_matrix(m, path, T("ffn_gate_inp.weight"), dim, E, false, &L->gate_inp, err)) ||
        (st = bind_experts(m, path, T("ffn_down_exps.weight"), fe, dim, &L->exp_down, err)))
        return st;
    if (!ai->oai && sp_gguf_find_tensor(m->gguf, T("ffn_gate_up_exps.weight"))) {
        /* gate and up of each expert stacked in one matrix (rows [0, fe)
         * gate, [fe, 2 fe) up); llama.cpp reads no scale for them then */
        sp_weight *gu;
        if ((st = bind_experts(m, path, nm, dim, 2 * fe, &gu, err))) return st;
        L->exp_gate = sp_model_alloc(m, (size_t)E * sizeof(sp_weight));
        L->exp_up = sp_model_alloc(m, (size_t)E * sizeof(sp_weight));
        if (!L->exp_gate || !L->exp_up) return sp_fail(err, SP_ERR_NOMEM, "out of memory binding '%s'", nm);
        for (int64_t e = 0; e < E; e++) L->exp_gate[e] = weight_rows(&gu[e], 0, fe), L->exp_up[e] = weight_rows(&gu[e], fe, fe);
        return bind_expert_vec(m, path, T("ffn_down_exps.scale"), 1, &L->exp_down_s, err);
    }
    if ((st = bind_experts(m, path, T("ffn_gate_exps.weight"), dim, fe, &L->exp_gate, err)) ||
        (st = bind_experts(m, path, T("ffn_up_exps.weight"), dim, fe, &L->exp_up, err)))
        return st;
    if (!ai->oai)
        return (st = bind_expert_vec(m, path, T("ffn_gate_exps.scale"), 1, &L->exp_gate_s, err)) ||
                       (st = bind_expert_vec(m, path, T("ffn_up_exps.scale"), 1, &L->exp_up_s, err)) ||
                       (st = bind_expert_vec(m, path, T("ffn_down_exps.scale"), 1, &L->exp_down_s, err))
                   ? st
                   : SP_OK;
    if ((st = bind_vector(m, path, T("ffn_gate_inp.bias"), E, &L->gate_inp_b, err)) ||
        (st = bind_expert_vec(m, path, T("ffn_gate_exps.bias"), fe, &L->exp_gate_b, err)) ||
        (st = bind_expert_vec(m, path, T("ffn_up_exps.bias"), fe, &L->exp_up_b, err)) ||
        (st = bind_expert_vec(m, path, T("ffn_down_exps.bias"), dim, &L->exp_down_b, err)) ||
        (st = bind_vector(m, path, T("attn_sinks.weight"), m->cfg.n_heads, &L->sinks, err)))
        return st;
    if (!L->exp_gate_b || !L->exp_up_b || !L->exp_down_b)
        return sp_fail(err, SP_ERR_FORMAT, "%s: blk.%d: an expert bias tensor is missing", path, l);
#undef T
    return SP_OK;
}

static sp_status opt_vector(sp_model *m, const char *path, const char *name, int64_t n,
                            const float **out, sp_error *err);

/* Layer l's shared expert into the dense FFN's slots (model_internal.h):
 * gate, up, down with their optional scales, and its gate vector. */
static sp_status bind_shexp(sp_model *m, const char *path, int l, sp_layer *L, sp_error *err) {
    const int64_t dim = m->cfg.dim, f = m->sh_ffn;
    char nm[96];
    sp_status st;
#define T(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
    if ((st = bind_matrix(m, path, T("ffn_gate_shexp.weight"), dim, f, false, &L->w1, err)) ||
        (st = bind_matrix(m, path, T("ffn_up_shexp.weight"), dim, f, false, &L->w3, err)) ||
        (st = bind_matrix(m, path, T("ffn_down_shexp.weight"), f, dim, false, &L->w2, err)) ||
        (st = opt_vector(m, path, T("ffn_gate_shexp.scale"), 1, &L->w1.scale, err)) ||
        (st = opt_vector(m, path, T("ffn_up_shexp.scale"), 1, &L->w3.scale, err)) ||
        (st = opt_vector(m, path, T("ffn_down_shexp.scale"), 1, &L->w2.scale, err)) ||
        (st = bind_matrix(m, path, T("ffn_gate_inp_shexp.weight"), dim, 1, false, &L->sh_gate, err)))
        return st;
#undef T
    return SP_OK;
}

/* An optional tensor as f32 (NULL when the file lacks it). */
static sp_status opt_vector(sp_model *m, const char *path, const char *name, int64_t n,
                            const float **out, sp_error *err) {
    *out = NULL;
    if (!sp_gguf_find_tensor(m->gguf, name)) return SP_OK;
    return bind_vector(m, path, name, n, out, err);
}

/* Frequency factors as RoPE divides by them: NaN, inf or 0 would make every
 * rotated position non-finite, so they are refused here (llama.cpp takes
 * any value, negative ones too, and so does Specula). */
static sp_status opt_rope_factors(sp_model *m, const char *path, const char *name, const float **out,
                                  sp_error *err) {
    const int32_t n = m->cfg.rot_dim / 2;
    sp_status st = opt_vector(m, path, name, n, out, err);
    for (int32_t i = 0; !st && *out && i < n; i++)
        if (!isfinite((*out)[i]) || (*out)[i] == 0)
            return sp_fail(err, SP_ERR_FORMAT, "%s: %s[%d] = %g is not a usable frequency factor", path, name, i,
                           (double)(*out)[i]);
    return st;
}

/* q, k, v of layer l: a fused attn_qkv (its bias, or the three separate
 * biases when all are there) or attn_q/attn_k/attn_v with a bias each; each
 * matrix's optional scale. */
static sp_status bind_qkv(sp_model *m, const char *path, int l, sp_layer *L, sp_error *err) {
    const sp_model_config *c = &m->cfg;
    const int64_t dim = c->dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t q_dim = (int64_t)c->n_heads * c->head_dim * (m->attn_gated ? 2 : 1);
    char nm[96];
    sp_status st;
#define T(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
    if (sp_gguf_find_tensor(m->gguf, T("attn_qkv.weight"))) {
        sp_weight qkv;
        const float *b = NULL, *bq = NULL, *bk = NULL, *bv = NULL;
        if ((st = bind_matrix(m, path, nm, dim, q_dim + 2 * kv_dim, false, &qkv, err)) ||
            (st = opt_vector(m, path, T("attn_qkv.scale"), 1, &qkv.scale, err)) ||
            (st = opt_vector(m, path, T("attn_qkv.bias"), q_dim + 2 * kv_dim, &b, err)))
            return st;
        if (!b && ((st = opt_vector(m, path, T("attn_q.bias"), q_dim, &bq, err)) ||
                   (st = opt_vector(m, path, T("attn_k.bias"), kv_dim, &bk, err)) ||
                   (st = opt_vector(m, path, T("attn_v.bias"), kv_dim, &bv, err))))
            return st;
        qkv.bias = b;
        L->wq = weight_rows(&qkv, 0, q_dim);
        L->wk = weight_rows(&qkv, q_dim, kv_dim);
        L->wv = weight_rows(&qkv, q_dim + kv_dim, kv_dim);
        if (!b && bq && bk && bv) L->wq.bias = bq, L->wk.bias = bk, L->wv.bias = bv;
        return SP_OK;
    }
    if ((st = bind_matrix(m, path, T("attn_q.weight"), dim, q_dim, false, &L->wq, err)) ||
        (st = bind_matrix(m, path, T("attn_k.weight"), dim, kv_dim, false, &L->wk, err)) ||
        (st = bind_matrix(m, path, T("attn_v.weight"), dim, kv_dim, false, &L->wv, err)) ||
        (st = opt_vector(m, path, T("attn_q.bias"), q_dim, &L->wq.bias, err)) ||
        (st = opt_vector(m, path, T("attn_k.bias"), kv_dim, &L->wk.bias, err)) ||
        (st = opt_vector(m, path, T("attn_v.bias"), kv_dim, &L->wv.bias, err)) ||
        (st = opt_vector(m, path, T("attn_q.scale"), 1, &L->wq.scale, err)) ||
        (st = opt_vector(m, path, T("attn_k.scale"), 1, &L->wk.scale, err)) ||
        (st = opt_vector(m, path, T("attn_v.scale"), 1, &L->wv.scale, err)))
        return st;
#undef T
    return SP_OK;
}

/* llama.cpp loads NAME.scale and NAME.input_scale of every matrix a layer
 * has, applied or not (its generic pass in load_tensors). */
static void claim_scales(sp_model *m, int l) {
    static const char *MATS[] = {"attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv",
                                 "ffn_gate", "ffn_down", "ffn_up", "ffn_gate_exps", "ffn_down_exps",
                                 "ffn_up_exps", "attn_gate", "ssm_beta", "ssm_alpha", "ssm_out",
                                 "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ssm_in",
                                 "nextn.eh_proj", "nextn.shared_head_head"};
    char nm[96];
    for (size_t i = 0; i < sizeof MATS / sizeof MATS[0]; i++) {
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, MATS[i]);
        if (!sp_gguf_find_tensor(m->gguf, nm)) continue;
        snprintf(nm, sizeof nm, "blk.%d.%s.scale", l, MATS[i]);
        claim(m, nm);
        snprintf(nm, sizeof nm, "blk.%d.%s.input_scale", l, MATS[i]);
        claim(m, nm);
    }
}

/* The MTP blocks of a qwen35, qwen35moe or qwen3next file (blk.N.*, N
 * from the trunk's n_layers on), as llama.cpp's loaders of these
 * architectures read them: a full gated-attention decoder layer (attn_norm,
 * attn_q/k/v or attn_qkv, q/k norms, attn_output, post_attention_norm) with
 * the trunk's FFN kind (qwen35: ffn_gate/up/down; qwen35moe, qwen3next: the
 * routed experts and the gated shared expert, as their trunk layers), and
 * the nextn tensors (eh_proj [2 dim -> dim], enorm, hnorm; optional
 * embed_tokens, shared_head_head, shared_head_norm). Of the eh_proj and
 * shared_head_head scales llama.cpp reads, the MTP graphs apply the eh_proj
 * one (build_lora_mm). */
static sp_status bind_mtp(sp_model *m, const char *path, const arch_info *ai, sp_error *err) {
    if (m->n_mtp == 0) return SP_OK;
    const sp_model_config *c = &m->cfg;
    const int64_t dim = c->dim, ffn = c->ffn_dim, q_dim = (int64_t)c->n_heads * c->head_dim, V = c->n_vocab;
    const bool moe = m->moe.n_expert > 0;
    m->mtp = calloc((size_t)m->n_mtp, sizeof *m->mtp);
    if (!m->mtp) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    sp_status st = SP_OK;
    for (int32_t i = 0; !st && i < m->n_mtp; i++) {
        const int l = c->n_layers + i;
        sp_layer *L = &m->layers[l];
        struct sp_mtp_block *b = &m->mtp[i];
        char nm[96];
#define T(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        if ((st = bind_vector(m, path, T("attn_norm.weight"), dim, &L->attn_norm, err)) ||
            (st = bind_vector(m, path, T("post_attention_norm.weight"), dim, &L->ffn_norm, err)) ||
            (st = bind_qkv(m, path, l, L, err)) ||
            (st = bind_matrix(m, path, T("attn_output.weight"), q_dim, dim, false, &L->wo, err)) ||
            (st = opt_vector(m, path, T("attn_output.scale"), 1, &L->wo.scale, err)) ||
            (st = bind_vector(m, path, T("attn_q_norm.weight"), c->head_dim, &L->q_norm, err)) ||
            (st = bind_vector(m, path, T("attn_k_norm.weight"), c->head_dim, &L->k_norm, err)) ||
            (moe && (st = bind_moe(m, path, ai, l, L, err))) ||
            (moe && ai->shexp && (st = bind_shexp(m, path, l, L, err))) ||
            (!moe && ((st = bind_matrix(m, path, T("ffn_gate.weight"), dim, ffn, false, &L->w1, err)) ||
                      (st = bind_matrix(m, path, T("ffn_up.weight"), dim, ffn, false, &L->w3, err)) ||
                      (st = bind_matrix(m, path, T("ffn_down.weight"), ffn, dim, false, &L->w2, err)) ||
                      (st = opt_vector(m, path, T("ffn_gate.scale"), 1, &L->w1.scale, err)) ||
                      (st = opt_vector(m, path, T("ffn_up.scale"), 1, &L->w3.scale, err)) ||
                      (st = opt_vector(m, path, T("ffn_down.scale"), 1, &L->w2.scale, err)))) ||
            (st = bind_matrix(m, path, T("nextn.eh_proj.weight"), 2 * dim, dim, false, &b->eh_proj, err)) ||
            (st = opt_vector(m, path, T("nextn.eh_proj.scale"), 1, &b->eh_proj.scale, err)) ||
            (st = bind_vector(m, path, T("nextn.enorm.weight"), dim, &b->enorm, err)) ||
            (st = bind_vector(m, path, T("nextn.hnorm.weight"), dim, &b->hnorm, err)) ||
            (st = opt_vector(m, path, T("nextn.shared_head_norm.weight"), dim, &b->head_norm, err)) ||
            (st = bind_matrix(m, path, T("nextn.embed_tokens.weight"), dim, V, true, &b->embed, err)) ||
            (st = bind_matrix(m, path, T("nextn.shared_head_head.weight"), dim, V, true, &b->head, err)) ||
            (b->head.data && (st = opt_vector(m, path, T("nextn.shared_head_head.scale"), 1, &b->head.scale, err))))
            break;
#undef T
        L->w1.bias_first = L->w2.bias_first = L->w3.bias_first = true;
        claim_scales(m, l);
    }
    return st;
}

/* Each layer's tensors (names and shapes per the architecture). */
static sp_status bind_layers(sp_model *m, const char *path, const char *a, const arch_info *ai,
                             sp_error *err) {
    const sp_model_config *c = &m->cfg;
    const int64_t dim = c->dim, ffn = c->ffn_dim;
    const int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
    sp_status st;
    m->layers = calloc((size_t)(c->n_layers + m->n_mtp), sizeof *m->layers);
    bool *sliding = calloc((size_t)c->n_layers, sizeof *sliding);
    if (!m->layers || !sliding) {
        free(sliding);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for layers");
    }
    /* sliding: the recurrent layers of a hybrid; gemma3 without a window has
     * no sliding layers (nor their RoPE); gpt-oss's pattern defaults to 2 */
    st = ai->hybrid ? sp_deltanet_config(m, path, a, sliding, err)
         : (ai->gemma || ai->oai) && c->sliding_window > 0
             ? read_swa_pattern(m, path, a, ai->gemma == 3 ? 6 : 2, sliding, err)
             : SP_OK;
    for (int l = 0; !st && l < c->n_layers; l++) {
        sp_layer *L = &m->layers[l];
        char nm[96];
        const bool rec = ai->hybrid && sliding[l];
#define T(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        const bool moe = m->moe.n_expert > 0;
        if ((st = bind_vector(m, path, T("attn_norm.weight"), dim, &L->attn_norm, err)) ||
            (st = bind_vector(m, path, ai->oai || ai->hybrid ? T("post_attention_norm.weight") : T("ffn_norm.weight"),
                              dim, &L->ffn_norm, err)) ||
            (rec && (st = sp_deltanet_bind(m, path, l, err))) ||
            (!rec && ((st = bind_qkv(m, path, l, L, err)) ||
                      (st = bind_matrix(m, path, T("attn_output.weight"), q_dim, dim, false, &L->wo, err)) ||
                      (st = opt_vector(m, path, T("attn_output.scale"), 1, &L->wo.scale, err)) ||
                      (ai->wo_bias && (st = opt_vector(m, path, T("attn_output.bias"), dim, &L->wo.bias, err))))) ||
            (moe && (st = bind_moe(m, path, ai, l, L, err))) ||
            (!moe && (st = bind_matrix(m, path, T("ffn_down.weight"), ffn, dim, false, &L->w2, err))) ||
            (ai->shexp && (st = bind_shexp(m, path, l, L, err))))
            break;
        if (ai->oai && !L->wo.bias) {
            st = sp_fail(err, SP_ERR_FORMAT, "%s: tensor 'blk.%d.attn_output.bias' is missing", path, l);
            break;
        }
        if (!moe && ai->ffn_fused) {
            /* phi3: gate and up halves of ffn_up */
            sp_weight gu;
            if ((st = bind_matrix(m, path, T("ffn_up.weight"), dim, 2 * ffn, false, &gu, err))) break;
            L->w1 = weight_rows(&gu, 0, ffn);
            L->w3 = weight_rows(&gu, ffn, ffn);
        } else if (!moe && ((st = bind_matrix(m, path, T("ffn_gate.weight"), dim, ffn, false, &L->w1, err)) ||
                            (st = bind_matrix(m, path, T("ffn_up.weight"), dim, ffn, false, &L->w3, err)))) {
            break;
        }
        if (ai->ffn_bias &&
            ((st = opt_vector(m, path, T("ffn_gate.bias"), ffn, &L->w1.bias, err)) ||
             (st = opt_vector(m, path, T("ffn_up.bias"), ffn, &L->w3.bias, err)) ||
             (st = opt_vector(m, path, T("ffn_down.bias"), dim, &L->w2.bias, err))))
            break;
        if (ai->ffn_scale &&
            ((st = opt_vector(m, path, T("ffn_gate.scale"), 1, &L->w1.scale, err)) ||
             (st = opt_vector(m, path, T("ffn_up.scale"), 1, &L->w3.scale, err)) ||
             (st = opt_vector(m, path, T("ffn_down.scale"), 1, &L->w2.scale, err))))
            break;
        L->w1.bias_first = L->w2.bias_first = L->w3.bias_first = true; /* llama.cpp's build_ffn */
        if (ai->qk_norm && !rec &&
            ((st = bind_vector(m, path, T("attn_q_norm.weight"), c->head_dim, &L->q_norm, err)) ||
             (st = bind_vector(m, path, T("attn_k_norm.weight"), c->head_dim, &L->k_norm, err))))
            break;
        claim_scales(m, l);
        if (ai->oai) {
            L->window = sliding[l] ? c->sliding_window : 0;
            L->rope_local = sliding[l] && m->rope_theta_local > 0;
        } else if (ai->gemma && !ai->hybrid) {
            if ((st = bind_vector(m, path, T("post_attention_norm.weight"), dim, &L->post_attn_norm, err)) ||
                (st = bind_vector(m, path, T("post_ffw_norm.weight"), dim, &L->post_ffn_norm, err)))
                break;
            L->window = sliding[l] ? c->sliding_window : 0;
            L->rope_local = sliding[l];
        } else if (!ai->hybrid) {
            L->window = c->sliding_window;
        }
#undef T
    }
    free(sliding);
    return st;
}

/* The vocabulary: tokenizer.ggml.model "llama" or "gpt2" gives a tokenizer
 * (its tokens one per row of token_embd); "test" (llama.cpp's test
 * vocabulary, tokenizer.ggml.tokens still one per row) and "none" /
 * "no_vocab" (ARCH.vocab_size rows if given) give none: such a model runs
 * on token ids only. */
static sp_status load_vocab(sp_model *m, const char *path, const char *a, const sp_model_params *p,
                            sp_error *err) {
    const sp_gguf *g = m->gguf;
    const int32_t V = m->cfg.n_vocab;
    const sp_gguf_kv *km = sp_gguf_find(g, "tokenizer.ggml.model");
    sp_str model = km && km->type == SP_GGUF_STRING ? km->v.str : (sp_str){"", 0};
    const bool test = model.len == 4 && !memcmp(model.ptr, "test", 4);
    const bool none = (model.len == 4 && !memcmp(model.ptr, "none", 4)) ||
                      (model.len == 8 && !memcmp(model.ptr, "no_vocab", 8));
    if (test) {
        const sp_gguf_kv *kt = sp_gguf_find(g, "tokenizer.ggml.tokens");
        if (!kt || kt->type != SP_GGUF_ARRAY || kt->arr_type != SP_GGUF_STRING)
            return sp_fail(err, SP_ERR_FORMAT, "%s: test vocabulary without a tokenizer.ggml.tokens string array", path);
        if (kt->arr_n != (uint64_t)V)
            return sp_fail(err, SP_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries but token_embd.weight has %d rows",
                           path, (unsigned long long)kt->arr_n, V);
        return SP_OK;
    }
    if (none) {
        char key[96];
        int32_t n = V;
        snprintf(key, sizeof key, "%s.vocab_size", a);
        sp_status st = get_u32_or(g, key, (uint32_t)V, &n, err);
        if (st) return st;
        if (n != V)
            return sp_fail(err, SP_ERR_FORMAT, "%s: %s = %d but token_embd.weight has %d rows", path, key, n, V);
        return SP_OK;
    }
    sp_status st = sp_tokenizer_load_gguf_pre(g, p ? p->tokenizer_pre : NULL, &m->tok, err);
    if (st) return st;
    m->owns_tok = true;
    if (sp_tokenizer_n_vocab(m->tok) != V)
        return sp_fail(err, SP_ERR_FORMAT,
                       "%s: tokenizer.ggml.tokens has %d entries but token_embd.weight has %d rows",
                       path, sp_tokenizer_n_vocab(m->tok), V);
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
    if (!ai) {
        char names[256];
        sp_model_arch_list(", ", names, sizeof names);
        return sp_fail(err, SP_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)", path, a,
                       names);
    }

    m->claimed = calloc(sp_gguf_n_tensors(g) + 1, 1);
    if (!m->claimed) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    if ((st = read_config(m, path, a, ai, err))) return st;
    sp_model_config *c = &m->cfg;
    const sp_gguf_tensor *te = sp_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return sp_fail(err, SP_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", path);
    c->n_vocab = te->ne[1] > INT32_MAX ? -1 : (int32_t)te->ne[1];
    if ((st = check_config(c, path, err))) return st;

    const int64_t dim = c->dim;
    if ((st = bind_matrix(m, path, "token_embd.weight", dim, c->n_vocab, false, &m->tok_embd, err)))
        return st;
    /* gemma2's output is always the embedding matrix, as llama.cpp binds it */
    if (ai->gemma != 2 &&
        (st = bind_matrix(m, path, "output.weight", dim, c->n_vocab, true, &m->output, err)))
        return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if (ai->out_bias && (st = opt_vector(m, path, "output.bias", c->n_vocab, &m->output.bias, err)))
        return st;
    if ((st = bind_vector(m, path, "output_norm.weight", dim, &m->out_norm, err))) return st;
    if ((ai->rope_freqs && (st = opt_rope_factors(m, path, "rope_freqs.weight", &m->rope_factors, err))) ||
        (ai->rope_longshort &&
         ((st = opt_rope_factors(m, path, "rope_factors_long.weight", &m->rope_long, err)) ||
          (st = opt_rope_factors(m, path, "rope_factors_short.weight", &m->rope_short, err)))))
        return st;
    if ((st = bind_layers(m, path, a, ai, err)) || (st = bind_mtp(m, path, ai, err))) return st;
    /* read by llama.cpp for these, unused by their causal graphs */
    if (!strcmp(a, "qwen3")) claim(m, "cls.output.weight"); /* a reranker's head */
    if (ai->gemma == 3) claim(m, "dense_2.weight"), claim(m, "dense_3.weight"); /* embedding heads */
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++)
        if (!m->claimed[i]) {
            const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
            return sp_fail(err, SP_ERR_FORMAT,
                           "%s: tensor '%.*s' is not one architecture '%s' has (llama.cpp refuses the file too)",
                           path, (int)(t->name.len > 96 ? 96 : t->name.len), t->name.ptr, a);
        }
    c->wtype = m->layers[0].wq.data ? m->layers[0].wq.type : m->layers[0].w1.type; /* qwen35: recurrent */
    sp_model_set_desc(m, a);
    return load_vocab(m, path, a, p, err);
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
    sp_model_set_desc(m, "llama2.c");
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

sp_status sp_model_pack_weights(sp_model *m, const sp_file_map *fm, sp_error *err) {
    sp_status st = pack_weight(m, &m->output, fm, err);
    for (int32_t i = 0; !st && i < m->n_mtp; i++) {
        st = pack_weight(m, &m->mtp[i].eh_proj, fm, err);
        if (!st) st = pack_weight(m, &m->mtp[i].head, fm, err);
    }
    for (int l = 0; !st && l < m->cfg.n_layers + m->n_mtp; l++) {
        sp_layer *L = &m->layers[l];
        sp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3, &L->gate_inp};
        for (size_t i = 0; !st && i < sizeof ws / sizeof ws[0]; i++) st = pack_weight(m, ws[i], fm, err);
        sp_weight *dw[SP_DELTANET_N_WEIGHTS];
        if (L->dn) sp_deltanet_weights(L->dn, dw);
        for (int i = 0; !st && L->dn && i < SP_DELTANET_N_WEIGHTS; i++) st = pack_weight(m, dw[i], fm, err);
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
    if (gguf) {
        st = load_gguf(m, path, params, err);
        free(m->claimed);
        m->claimed = NULL;
    } else
        st = load_llama2c(m, path, params, err);
    if (!st) {
        const bool prefault = !(params && params->no_prefault), lock = params && params->mlock;
        sp_file_map fm = m->gguf ? sp_gguf_mapping(m->gguf) : (sp_file_map){m->map, m->map_len};
        st = sp_file_map_resident(&fm, prefault, lock, "model", err);
    }
    if (!st) {
        const sp_file_map fm = m->gguf ? sp_gguf_mapping(m->gguf) : (sp_file_map){0};
        st = sp_model_pack_weights(m, m->gguf && !(params && params->mlock) ? &fm : NULL, err);
    }
    if (st) {
        sp_model_free(m);
        return st;
    }
    *out = m;
    return SP_OK;
}
