/* model_plain: a plain Llama model's weights as float tensors and back
 * (model_plain.h). */
#include "model_plain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "quant.h"

bool sp_model_is_plain(const sp_model *m) {
    const sp_model_config *cfg = &m->cfg;
    bool plain = !cfg->rope_neox && cfg->rope_scale == 1.0f && !m->rope_factors && !m->rope_long &&
                 !m->rope_short && !m->output.bias && !m->output.scale && !(m->kq_scale > 0) &&
                 cfg->head_dim * cfg->n_heads == cfg->dim && cfg->rot_dim == cfg->head_dim &&
                 !(m->embed_scale > 0 && m->embed_scale != 1.0f) && !m->geglu &&
                 !(m->attn_softcap > 0) && !(m->final_softcap > 0);
    for (int32_t l = 0; plain && l < cfg->n_layers; l++) {
        const sp_layer *L = &m->layers[l];
        const sp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) plain = plain && !ws[i]->bias && !ws[i]->scale;
        plain = plain && !L->q_norm && !L->k_norm && !L->post_attn_norm &&
                !L->post_ffn_norm && L->window <= 0 && !L->rope_local;
    }
    return plain;
}

static void dequant_weight(const sp_weight *w, float *dst) {
    for (int64_t r = 0; r < w->rows; r++)
        sp_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst + r * w->cols, w->cols);
}

void sp_model_read_plain(const sp_model *m, float *const t[SP_PT_COUNT]) {
    const sp_model_config *c = &m->cfg;
    const int64_t C = c->dim, F = c->ffn_dim, KVD = (int64_t)c->n_kv_heads * c->head_dim;
    dequant_weight(&m->tok_embd, t[SP_PT_EMB]);
    dequant_weight(&m->output, t[SP_PT_OUTPUT]);
    memcpy(t[SP_PT_OUT_NORM], m->out_norm, (size_t)C * sizeof(float));
    for (int32_t l = 0; l < c->n_layers; l++) {
        const sp_layer *L = &m->layers[l];
        memcpy(t[SP_PT_ATTN_NORM] + l * C, L->attn_norm, (size_t)C * sizeof(float));
        memcpy(t[SP_PT_FFN_NORM] + l * C, L->ffn_norm, (size_t)C * sizeof(float));
        dequant_weight(&L->wq, t[SP_PT_WQ] + l * C * C);
        dequant_weight(&L->wk, t[SP_PT_WK] + l * KVD * C);
        dequant_weight(&L->wv, t[SP_PT_WV] + l * KVD * C);
        dequant_weight(&L->wo, t[SP_PT_WO] + l * C * C);
        dequant_weight(&L->w1, t[SP_PT_W1] + l * F * C);
        dequant_weight(&L->w2, t[SP_PT_W2] + l * C * F);
        dequant_weight(&L->w3, t[SP_PT_W3] + l * F * C);
    }
}

static sp_weight f32_weight(sp_model *m, const float *src, int64_t rows, int64_t cols) {
    sp_weight w = {.type = SP_GGML_F32, .rows = rows, .cols = cols,
                   .row_bytes = (size_t)cols * sizeof(float)};
    float *buf = sp_model_alloc(m, (size_t)(rows * cols) * sizeof(float));
    if (buf) memcpy(buf, src, (size_t)(rows * cols) * sizeof(float));
    w.data = (const uint8_t *)buf;
    return w;
}

static const float *f32_vector(sp_model *m, const float *src, int64_t n) {
    float *buf = sp_model_alloc(m, (size_t)n * sizeof(float));
    if (buf) memcpy(buf, src, (size_t)n * sizeof(float));
    return buf;
}

sp_status sp_model_from_plain(const sp_model *like, const float *const t[SP_PT_COUNT],
                              const char *desc, sp_model **out, sp_error *err) {
    *out = NULL;
    const sp_model_config *c = &like->cfg;
    sp_model *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    m->cfg = *c;
    m->cfg.wtype = SP_GGML_F32;
    m->tok = like->tok;
    m->owns_tok = false;
    m->rope_factors = like->rope_factors;
    snprintf(m->desc, sizeof m->desc, "%s", desc);
    const int64_t C = c->dim, F = c->ffn_dim, KVD = (int64_t)c->n_kv_heads * c->head_dim,
                  V = c->n_vocab;
    bool ok = (m->layers = calloc((size_t)c->n_layers, sizeof *m->layers)) != NULL;
    if (ok) {
        m->tok_embd = f32_weight(m, t[SP_PT_EMB], V, C);
        m->output = f32_weight(m, t[SP_PT_OUTPUT], V, C);
        m->out_norm = f32_vector(m, t[SP_PT_OUT_NORM], C);
        ok = m->tok_embd.data && m->output.data && m->out_norm;
    }
    for (int32_t l = 0; ok && l < c->n_layers; l++) {
        sp_layer *L = &m->layers[l];
        L->attn_norm = f32_vector(m, t[SP_PT_ATTN_NORM] + l * C, C);
        L->ffn_norm = f32_vector(m, t[SP_PT_FFN_NORM] + l * C, C);
        L->wq = f32_weight(m, t[SP_PT_WQ] + l * C * C, C, C);
        L->wk = f32_weight(m, t[SP_PT_WK] + l * KVD * C, KVD, C);
        L->wv = f32_weight(m, t[SP_PT_WV] + l * KVD * C, KVD, C);
        L->wo = f32_weight(m, t[SP_PT_WO] + l * C * C, C, C);
        L->w1 = f32_weight(m, t[SP_PT_W1] + l * F * C, F, C);
        L->w2 = f32_weight(m, t[SP_PT_W2] + l * C * F, C, F);
        L->w3 = f32_weight(m, t[SP_PT_W3] + l * F * C, F, C);
        ok = L->attn_norm && L->ffn_norm && L->wq.data && L->wk.data && L->wv.data &&
             L->wo.data && L->w1.data && L->w2.data && L->w3.data;
    }
    if (!ok) {
        sp_model_free(m);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for a draft snapshot");
    }
    *out = m;
    return SP_OK;
}
