/* attention: grouped attention of a batch over a typed KV cache, with
 * llama.cpp's per-row arithmetic (ops.h, attention kernels); see
 * attention.h for the blocking. */
#include "attention.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

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

int32_t sp_att_rows_max(int32_t n_heads, int32_t n_kv_heads, int32_t max_batch, int32_t n_ctx) {
    const int32_t g = n_heads / n_kv_heads;
    int32_t tok = max_batch < 16 ? max_batch : 16;
    while (tok > 1 && g * tok > SP_ATT_ROWS_CAP) tok--;
    while (tok > 1 && (int64_t)g * tok * n_ctx * 4 > (8 << 20)) tok--;
    return g * tok;
}

static size_t up64(size_t b) { return (b + 63) / 64 * 64; }

/* One thread's scratch: scores and visible slots [rows][n_ctx], queries in
 * the dot type [rows][head_dim * 4 bytes], mix accumulators [rows][16][hd]. */
size_t sp_att_scratch_bytes(int32_t rows, int32_t n_ctx, int32_t hd) {
    return up64((size_t)rows * (size_t)n_ctx * 4) * 2 + up64((size_t)rows * (size_t)hd * 4) +
           up64((size_t)rows * 16 * (size_t)hd * 4);
}

void sp_att_job_run(void *arg, int ith, int nth) {
    const sp_att_job *a = arg;
    const sp_kv *kv = a->kv;
    const int32_t hd = a->head_dim, H = a->n_heads, G = a->n_heads / a->n_kv_heads;
    const int64_t q_dim = (int64_t)H * hd;
    const int32_t n_ctx = kv->n_ctx, end = a->n_past + a->n;
    /* scratch of this thread */
    const int32_t R = a->rows_max;
    uint8_t *base = a->scratch + (size_t)ith * sp_att_scratch_bytes(R, n_ctx, hd);
    float *S = (float *)base;
    int32_t *IDX = (int32_t *)(base + up64((size_t)R * (size_t)n_ctx * 4));
    uint8_t *QB = base + 2 * up64((size_t)R * (size_t)n_ctx * 4);
    float *ACC = (float *)(QB + up64((size_t)R * (size_t)hd * 4));
    const sp_att_scores_kv_fn scores = sp_ops_att_scores_kv(kv->type_k);
    const sp_att_mix_acc_fn mix = sp_ops_att_mix_acc(kv->type_v);
    const sp_softmax_fn softmax = sp_ops_softmax();
    /* tasks: (KV head, chunk of tc tokens), KV-head major; fewer tasks than
     * threads (one KV head, one token): each cut into `parts` runs of its
     * rows, so that every thread works (K and V then read once per part) */
    const int32_t tc = R / G, chunks = (a->n + tc - 1) / tc;
    const int64_t whole = (int64_t)a->n_kv_heads * chunks;
    const int32_t parts = whole >= nth ? 1 : (int32_t)((nth + whole - 1) / whole);
    const int64_t tasks = whole * parts;
    for (int64_t task = tasks * ith / nth; task < tasks * (ith + 1) / nth; task++) {
        const int64_t wt = task / parts;
        const int32_t part = (int32_t)(task % parts);
        const int32_t g = (int32_t)(wt / chunks), t0 = (int32_t)(wt % chunks) * tc;
        const int32_t nt = a->n - t0 < tc ? a->n - t0 : tc, all = nt * G;
        /* this part's rows: [r_lo, r_lo + rows) of the task's */
        const int32_t r_lo = (int32_t)((int64_t)all * part / parts);
        const int32_t rows = (int32_t)((int64_t)all * (part + 1) / parts) - r_lo;
        if (rows == 0) continue;
        const uint8_t *K = sp_kv_k(kv, a->layer, 0) + elem_offset(kv->type_k, (int64_t)g * hd);
        const uint8_t *V = sp_kv_v(kv, a->layer, 0) + elem_offset(kv->type_v, (int64_t)g * hd);
        /* row r: token t0 + (r_lo + r) / G, query head g * G + (r_lo + r) % G */
        const void *qk[SP_ATT_ROWS_CAP];
        int32_t ns[SP_ATT_ROWS_CAP], nv[SP_ATT_ROWS_CAP], cur[SP_ATT_ROWS_CAP];
        int32_t nmax = 0;
        for (int32_t r = 0; r < rows; r++) {
            const int32_t t = t0 + (r + r_lo) / G, h = g * G + (r + r_lo) % G;
            const float *q = a->q + t * q_dim + (int64_t)h * hd;
            qk[r] = q;
            if (kv->type_k != SP_GGML_F32) { /* the query as the cache's dot type wants it */
                sp_ops_att_query(kv->type_k, q, hd, QB + (size_t)r * hd * 4);
                qk[r] = QB + (size_t)r * hd * 4;
            }
            /* causal: slots after the token's own are never seen */
            ns[r] = a->mask ? end : a->n_past + t + 1;
            nmax = ns[r] > nmax ? ns[r] : nmax;
        }
        /* scores, K block by block */
        for (int32_t s0 = 0; s0 < nmax; s0 += SP_ATT_BLOCK)
            for (int32_t r = 0; r < rows; r++) {
                if (s0 >= ns[r]) continue;
                const int32_t cnt = ns[r] - s0 < SP_ATT_BLOCK ? ns[r] - s0 : SP_ATT_BLOCK;
                scores(qk[r], K + (size_t)s0 * kv->k_row, kv->k_row, cnt, hd, a->scale,
                       S + (size_t)r * n_ctx + s0);
            }
        /* each row's softmax */
        for (int32_t r = 0; r < rows; r++) {
            const int32_t t = t0 + (r + r_lo) / G;
            float *att = S + (size_t)r * n_ctx;
            if (a->softcap > 0) /* as ggml: scale by 1/cap, tanh, scale by cap (before masking) */
                for (int32_t s = 0; s < ns[r]; s++) att[s] = tanhf(att[s] * (1.0f / a->softcap)) * a->softcap;
            /* sliding window: the slots before it get -inf in place (weight
             * exactly 0; they keep their lanes, as in ggml, where the mask
             * does this); slots below n_past hold positions equal to their
             * index, newer slots the positions of this batch */
            if (a->window > 0) {
                const int32_t lo = a->pos[t] - a->window + 1;
                for (int32_t s = 0; s < ns[r]; s++)
                    if ((s < a->n_past ? s : a->pos[s - a->n_past]) < lo) att[s] = -INFINITY;
            }
            /* a tree mask: the slots it lets the token see, in slot order,
             * become ranks 0..nv-1 (ops.h): for a tree node, its positions */
            nv[r] = ns[r];
            if (a->mask) {
                int32_t *idx = IDX + (size_t)r * n_ctx;
                nv[r] = 0;
                for (int32_t s = 0; s < ns[r]; s++)
                    if (visible(a, t, s)) {
                        idx[nv[r]] = s;
                        att[nv[r]++] = att[s];
                    }
            }
            if (a->sinks)
                sp_softmax_sink(att, nv[r], a->sinks[g * G + (r + r_lo) % G]);
            else
                softmax(att, nv[r]);
            cur[r] = 0;
        }
        /* the mixes, V block by block: each row takes its ranks whose slots
         * lie in the block */
        memset(ACC, 0, (size_t)rows * 16 * (size_t)hd * sizeof(float));
        for (int32_t s0 = 0; s0 < nmax; s0 += SP_ATT_BLOCK)
            for (int32_t r = 0; r < rows; r++) {
                const int32_t *idx = a->mask ? IDX + (size_t)r * n_ctx : NULL;
                int32_t e = cur[r];
                if (idx)
                    while (e < nv[r] && idx[e] < s0 + SP_ATT_BLOCK) e++;
                else
                    e = nv[r] < s0 + SP_ATT_BLOCK ? nv[r] : s0 + SP_ATT_BLOCK;
                if (e > cur[r])
                    mix(S + (size_t)r * n_ctx, idx, V, kv->v_row, cur[r], e, hd, ACC + (size_t)r * 16 * hd, hd);
                cur[r] = e;
            }
        for (int32_t r = 0; r < rows; r++) {
            const int32_t t = t0 + (r + r_lo) / G, h = g * G + (r + r_lo) % G;
            sp_att_mix_finish(ACC + (size_t)r * 16 * hd, hd, hd, a->out + t * a->out_stride + (int64_t)h * hd);
        }
    }
}
