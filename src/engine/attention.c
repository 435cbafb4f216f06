/* attention: the per-(head, token) attention of a batch over a typed KV
 * cache, with llama.cpp's arithmetic (ops.h, attention kernels). */
#include "attention.h"

#include <math.h>
#include <stdbool.h>

#include "ops.h"

static inline bool visible(const sp_att_job *a, int32_t t, int32_t slot) {
    if (slot < a->mask_base) return true;
    if (!a->mask) return slot - a->n_past <= t;
    return a->mask[(int64_t)t * a->mask_w + (slot - a->mask_base)] != 0;
}

/* Byte offset of element e of a row of type t (e a multiple of 32 for Q8_0). */
static size_t elem_offset(sp_ggml_type t, int64_t e) {
    switch (t) {
    case SP_GGML_F16: return (size_t)e * 2;
    case SP_GGML_Q8_0: return (size_t)e / 32 * 34;
    default: return (size_t)e * 4;
    }
}

void sp_att_job_run(void *arg, int ith, int nth) {
    const sp_att_job *a = arg;
    const sp_kv *kv = a->kv;
    const int32_t hd = a->head_dim, H = a->n_heads, group = a->n_heads / a->n_kv_heads;
    const int64_t q_dim = (int64_t)H * hd;
    float *att = a->scores + (size_t)ith * (size_t)kv->n_ctx;
    uint8_t *qconv = a->qbuf + (size_t)ith * (size_t)hd * 4;
    const int64_t tasks = (int64_t)a->n * H;
    const int32_t end = a->n_past + a->n;
    const sp_att_scores_kv_fn scores = sp_ops_att_scores_kv(kv->type_k);
    const sp_att_mix_kv_fn mix = sp_ops_att_mix_kv(kv->type_v);
    const sp_softmax_fn softmax = sp_ops_softmax();
    /* head-major: a head's tokens follow each other, so its K and V rows
     * (a few tens of KiB) are read from memory once and from L2 for the
     * other tokens, rather than the whole layer's cache once per token */
    for (int64_t task = tasks * ith / nth; task < tasks * (ith + 1) / nth; task++) {
        int32_t h = (int32_t)(task / a->n), t = (int32_t)(task % a->n);
        const float *q = a->q + t * q_dim + (int64_t)h * hd;
        const int64_t e0 = (int64_t)(h / group) * hd;
        /* the query as the cache's dot type wants it (ggml converts src1) */
        const void *qk = q;
        if (kv->type_k != SP_GGML_F32) {
            sp_ops_att_query(kv->type_k, q, hd, qconv);
            qk = qconv;
        }
        /* causal: slots after the token's own are never seen */
        const int32_t ns = a->mask ? end : a->n_past + t + 1;
        scores(qk, sp_kv_k(kv, a->layer, 0) + elem_offset(kv->type_k, e0), kv->k_row, ns, hd, a->scale, att);
        if (a->softcap > 0) /* as ggml: scale by 1/cap, tanh, scale by cap (before masking) */
            for (int32_t s = 0; s < ns; s++) att[s] = tanhf(att[s] * (1.0f / a->softcap)) * a->softcap;
        /* sliding window: the slots before it get -inf in place (weight
         * exactly 0; they keep their lanes, as in ggml, where the mask does
         * this); slots below mask_base / n_past hold positions equal to
         * their index, newer slots the positions of this batch */
        if (a->window > 0) {
            const int32_t lo = a->pos[t] - a->window + 1;
            for (int32_t s = 0; s < ns; s++)
                if ((s < a->n_past ? s : a->pos[s - a->n_past]) < lo) att[s] = -INFINITY;
        }
        /* a tree mask: the slots it lets the token see, in slot order,
         * become ranks 0..nv-1 (ops.h): for a tree node, its positions */
        int32_t nv = ns, *idx = NULL;
        if (a->mask) {
            idx = a->idx + (size_t)ith * (size_t)kv->n_ctx;
            nv = 0;
            for (int32_t s = 0; s < ns; s++)
                if (visible(a, t, s)) {
                    idx[nv] = s;
                    att[nv++] = att[s];
                }
        }
        softmax(att, nv);
        mix(att, idx, sp_kv_v(kv, a->layer, 0) + elem_offset(kv->type_v, e0), kv->v_row, nv, hd,
            a->out + t * a->out_stride + (int64_t)h * hd);
    }
}
