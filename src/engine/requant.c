/* requant: a model's copy with its matrices re-quantised in memory to
 * another weight type, the low-bit self-draft (sp_model_requantize in
 * sp_model.h). The copy shares everything else with its source. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltanet.h"
#include "model_internal.h"
#include "quant.h"

bool sp_model_requantize_supported(sp_ggml_type type) { return sp_quant_supported(type) != 0; }

/* Rows whose length is not a multiple of the block size (e.g. stories260K's
 * FFN of 172) cannot hold a block format; those matrices become F16, the
 * nearest lower-precision type that fits any length. */
static sp_status requant_matrix(sp_model *dst, const sp_weight *src, sp_ggml_type type,
                                sp_weight *out, float *row, sp_error *err) {
    *out = *src;
    if (!src->data) return SP_OK; /* absent (a recurrent layer's attention) */
    if (sp_ggml_blck_size(type) > 1 && src->cols % sp_ggml_blck_size(type)) type = SP_GGML_F16;
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
    sp_model *m = malloc(sizeof *m);
    if (!m) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    /* Every field is shared with src (configuration, tokenizer, embeddings,
     * norms, architecture switches) except those that own memory, which the
     * copy starts without: a field that owns memory is reset here too. */
    *m = *src;
    m->cfg.wtype = type;
    m->gguf = NULL;
    m->map = NULL;
    m->map_len = 0;
    m->owns_tok = false;
    m->owned = NULL;
    m->n_owned = m->cap_owned = 0;
    m->n_mtp = 0; /* the copy drafts for nothing: no MTP blocks */
    m->mtp = NULL;
    m->layers = calloc((size_t)src->cfg.n_layers, sizeof *m->layers);
    int64_t maxc = src->cfg.dim > src->cfg.ffn_dim ? src->cfg.dim : src->cfg.ffn_dim;
    if (src->moe.ffn > maxc) maxc = src->moe.ffn;
    if ((int64_t)src->cfg.n_heads * src->cfg.head_dim > maxc)
        maxc = (int64_t)src->cfg.n_heads * src->cfg.head_dim;
    if ((int64_t)src->dn.n_v * src->dn.hv > maxc) maxc = (int64_t)src->dn.n_v * src->dn.hv;
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
        if (S->dn) { /* a recurrent layer: its own copy with requantised matrices */
            sp_deltanet *dn = sp_model_alloc(m, sizeof *dn);
            if (!dn) {
                st = sp_fail(err, SP_ERR_NOMEM, "out of memory");
                break;
            }
            *dn = *S->dn;
            sp_weight *sw[SP_DELTANET_N_WEIGHTS], *dw[SP_DELTANET_N_WEIGHTS];
            sp_deltanet_weights(S->dn, sw);
            sp_deltanet_weights(dn, dw);
            for (int i = 0; !st && i < SP_DELTANET_N_WEIGHTS; i++) st = requant_matrix(m, sw[i], type, dw[i], row, err);
            D->dn = dn;
        }
        if (S->exp_up) { /* experts too; the router stays (its choices are the target's) */
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
    if (!st) st = sp_model_pack_weights(m, NULL, err);
    if (st) {
        sp_model_free(m);
        return st;
    }
    char base[sizeof src->desc];
    snprintf(base, sizeof base, "%s", src->desc);
    char *sp = strchr(base, ' ');
    if (sp) *sp = 0;
    sp_model_set_desc(m, base);
    *out = m;
    return SP_OK;
}
