/* kv: key/value cache storage (typed rows, grown in chunks), rollback and
 * path compaction. */
#include "kv.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "toint.h"
#include "sp_model.h"

/* Slots allocated at init and the granularity of growth. */
#define KV_CHUNK 256

int sp_kv_type_ok(sp_ggml_type t) { return t == SP_GGML_F32 || t == SP_GGML_F16 || t == SP_GGML_Q8_0; }

bool sp_kv_type_parse(const char *name, sp_ggml_type *out) {
    static const struct { const char *name; sp_ggml_type t; } names[] = {
        {"f32", SP_GGML_F32}, {"f16", SP_GGML_F16}, {"q8_0", SP_GGML_Q8_0}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].t;
            return true;
        }
    return false;
}

static size_t row_bytes(sp_ggml_type t, int32_t kv_dim) {
    switch (t) {
    case SP_GGML_F16: return (size_t)kv_dim * 2;
    case SP_GGML_Q8_0: return (size_t)kv_dim / SP_QK * sizeof(sp_block_q8_0);
    default: return (size_t)kv_dim * 4;
    }
}

uint64_t sp_kv_bytes(sp_ggml_type type_k, sp_ggml_type type_v, int32_t n_layers, int32_t kv_dim,
                     int32_t n_ctx) {
    return (uint64_t)n_layers * (uint64_t)n_ctx * (row_bytes(type_k, kv_dim) + row_bytes(type_v, kv_dim));
}

sp_status sp_kv_init(sp_kv *kv, int32_t n_layers, int32_t kv_dim, int32_t head_dim, int32_t n_ctx,
                     sp_ggml_type type_k, sp_ggml_type type_v, unsigned flags, sp_error *err) {
    memset(kv, 0, sizeof *kv);
    if (n_layers < 1 || kv_dim < 1 || n_ctx < 1 || head_dim < 1 || kv_dim % head_dim)
        return sp_fail(err, SP_ERR_ARG, "bad KV cache shape (%d layers, kv_dim %d, n_ctx %d)",
                       n_layers, kv_dim, n_ctx);
    for (int i = 0; i < 2; i++) {
        const sp_ggml_type t = i ? type_v : type_k;
        if (!sp_kv_type_ok(t))
            return sp_fail(err, SP_ERR_ARG, "KV cache type %s is not supported (f32, f16, q8_0)",
                           sp_ggml_type_name(t));
        if (t == SP_GGML_Q8_0 && head_dim % SP_QK)
            return sp_fail(err, SP_ERR_ARG,
                           "a q8_0 %s cache needs a head size that is a multiple of 32 (this model's is %d)",
                           i ? "V" : "K", head_dim);
    }
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->head_dim = head_dim;
    kv->n_ctx = n_ctx;
    kv->k_by_head = (flags & SP_KV_K_BY_HEAD) != 0;
    kv->type_k = type_k;
    kv->type_v = type_v;
    kv->k_row = row_bytes(type_k, kv_dim);
    kv->v_row = row_bytes(type_v, kv_dim);
    kv->k_hrow = row_bytes(type_k, head_dim);
    if (type_k == SP_GGML_Q8_0 && head_dim % 64 == 0) {
        kv->rot_k = 64;
        while (head_dim % (kv->rot_k * 2) == 0) kv->rot_k *= 2;
    }
    if (type_v == SP_GGML_Q8_0 && head_dim % 64 == 0) kv->rot_v = 64;
    kv->k = calloc((size_t)n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        sp_kv_free(kv);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for the KV cache");
    }
    return sp_kv_reserve(kv, n_ctx < KV_CHUNK ? n_ctx : KV_CHUNK, err);
}

void sp_kv_free(sp_kv *kv) {
    for (int32_t l = 0; l < kv->n_layers; l++) {
        if (kv->k) free(kv->k[l]);
        if (kv->v) free(kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

sp_status sp_kv_reserve(sp_kv *kv, int32_t n, sp_error *err) {
    if (n <= kv->n_alloc) return SP_OK;
    if (n > kv->n_ctx)
        return sp_fail(err, SP_ERR_RANGE, "KV cache of %d tokens cannot hold %d", kv->n_ctx, n);
    int64_t want = (int64_t)kv->n_alloc * 2;
    if (want < n) want = n;
    want = (want + KV_CHUNK - 1) / KV_CHUNK * KV_CHUNK;
    if (want > kv->n_ctx) want = kv->n_ctx;
    /* every layer's pair first, then commit: on failure the grown buffers
     * (realloc keeps contents) are simply larger than n_alloc says */
    for (int32_t l = 0; l < kv->n_layers; l++) {
        for (int i = 0; i < 2; i++) {
            uint8_t **slot = i ? &kv->v[l] : &kv->k[l];
            const size_t row = i ? kv->v_row : kv->k_row;
            uint8_t *p = realloc(*slot, (size_t)want * row);
            if (!p)
                return sp_fail(err, SP_ERR_NOMEM, "cannot grow the KV cache to %lld tokens (%.1f MiB)",
                               (long long)want,
                               (double)sp_kv_bytes(kv->type_k, kv->type_v, kv->n_layers, kv->kv_dim,
                                                   (int32_t)want) / (1 << 20));
            *slot = p;
        }
    }
    if (kv->k_by_head) /* head h moves from h * n_alloc rows to h * want, the last first */
        for (int32_t l = 0; l < kv->n_layers; l++)
            for (int32_t h = kv->kv_dim / kv->head_dim - 1; h > 0; h--)
                memmove(kv->k[l] + (size_t)h * (size_t)want * kv->k_hrow,
                        kv->k[l] + (size_t)h * (size_t)kv->n_alloc * kv->k_hrow, (size_t)kv->n_alloc * kv->k_hrow);
    kv->n_alloc = (int32_t)want;
    return SP_OK;
}

void sp_kv_convert_row(sp_ggml_type t, const float *x, void *dst, int64_t n) {
    if (t == SP_GGML_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
    } else if (t == SP_GGML_F16) {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = sp_fp32_to_fp16(x[i]);
    } else {
        SP_ASSERT(t == SP_GGML_Q8_0 && n % SP_QK == 0);
        sp_block_q8_0 *b = dst;
        for (int64_t j = 0; j < n / SP_QK; j++) {
            const float *xb = x + j * SP_QK;
            float amax = 0;
            int finite = 1;
            for (int i = 0; i < SP_QK; i++) {
                finite &= isfinite(xb[i]) != 0;
                amax = fmaxf(amax, fabsf(xb[i]));
            }
            if (!finite) { /* a NaN scale: the block reads back as NaN */
                b[j].d = 0x7e00;
                memset(b[j].qs, 0, SP_QK);
                continue;
            }
            /* a block below 2^-64 is scaled up first, so 127 / amax cannot
             * overflow (the same real products: the same bits otherwise) */
            const float up = amax < 0x1p-64f ? 0x1p64f : 1.0f;
            const float id = amax != 0 ? 127.0f / (amax * up) : 0.0f;
            for (int i = 0; i < SP_QK; i++) b[j].qs[i] = (int8_t)sp_toint_rne(xb[i] * up * id, -127, 127);
            b[j].d = sp_fp32_to_fp16(amax / 127.0f);
        }
    }
}

void sp_kv_store(sp_kv *kv, int32_t layer, int32_t slot, const float *k, const float *v,
                 int64_t stride, int32_t n) {
    SP_ASSERT(slot >= 0 && slot + n <= kv->n_alloc);
    const int32_t heads = kv->kv_dim / kv->head_dim;
    for (int32_t t = 0; t < n; t++) {
        if (kv->k_by_head) /* heads are whole Q8_0 blocks: the same bytes as the row's */
            for (int32_t h = 0; h < heads; h++)
                sp_kv_convert_row(kv->type_k, k + t * stride + (int64_t)h * kv->head_dim,
                                  sp_kv_kh(kv, layer, h, slot + t), kv->head_dim);
        else
            sp_kv_convert_row(kv->type_k, k + t * stride, sp_kv_k(kv, layer, slot + t), kv->kv_dim);
        sp_kv_convert_row(kv->type_v, v + t * stride, sp_kv_v(kv, layer, slot + t), kv->kv_dim);
    }
}

sp_status sp_kv_truncate(sp_kv *kv, int32_t n, sp_error *err) {
    if (n < 0 || n > kv->n)
        return sp_fail(err, SP_ERR_ARG, "cannot truncate KV cache of %d tokens to %d", kv->n, n);
    kv->n = n;
    return SP_OK;
}

sp_status sp_kv_keep(sp_kv *kv, int32_t start, const int32_t *idx, int32_t m, sp_error *err) {
    if (start < 0 || start > kv->n || m < 0)
        return sp_fail(err, SP_ERR_ARG, "bad KV keep range (start %d, %d entries, cache %d)",
                       start, m, kv->n);
    for (int32_t i = 0; i < m; i++) {
        if (idx[i] < 0 || start + idx[i] >= kv->n || (i > 0 && idx[i] <= idx[i - 1]))
            return sp_fail(err, SP_ERR_ARG, "KV keep index %d (%d) out of order or range", i,
                           idx[i]);
    }
    for (int32_t l = 0; l < kv->n_layers; l++) {
        for (int32_t i = 0; i < m; i++) {
            if (idx[i] == i) continue; /* already in place */
            for (int32_t h = 0; h < (kv->k_by_head ? kv->kv_dim / kv->head_dim : 1); h++)
                memcpy(sp_kv_kh(kv, l, h, start + i), sp_kv_kh(kv, l, h, start + idx[i]),
                       kv->k_by_head ? kv->k_hrow : kv->k_row);
            memcpy(sp_kv_v(kv, l, start + i), sp_kv_v(kv, l, start + idx[i]), kv->v_row);
        }
    }
    kv->n = start + m;
    return SP_OK;
}
