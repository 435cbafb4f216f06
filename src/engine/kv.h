/* sp_kv: the key/value cache of one sequence.
 *
 * Per layer, K and V rows of kv_dim = n_kv_heads * head_dim floats, one row
 * per cached token, slots 0..n-1 in the order tokens were evaluated. K rows
 * are stored after RoPE. Speculation needs two edits besides appending:
 * truncate (roll back rejected draft tokens) and keep (after a tree pass,
 * keep only the accepted path's entries, moved to be contiguous). */
#ifndef SP_KV_H
#define SP_KV_H

#include <stdint.h>

#include "sp_status.h"

typedef struct sp_kv {
    int32_t n_layers;
    int32_t kv_dim;
    int32_t n_ctx;   /* capacity in tokens */
    int32_t n;       /* tokens cached */
    float *k;        /* [n_layers][n_ctx][kv_dim] */
    float *v;        /* [n_layers][n_ctx][kv_dim] */
} sp_kv;

sp_status sp_kv_init(sp_kv *kv, int32_t n_layers, int32_t kv_dim, int32_t n_ctx, sp_error *err);
void sp_kv_free(sp_kv *kv);

static inline float *sp_kv_k(const sp_kv *kv, int32_t layer, int32_t slot) {
    return kv->k + ((int64_t)layer * kv->n_ctx + slot) * kv->kv_dim;
}
static inline float *sp_kv_v(const sp_kv *kv, int32_t layer, int32_t slot) {
    return kv->v + ((int64_t)layer * kv->n_ctx + slot) * kv->kv_dim;
}

/* Drop every slot >= n (n <= current length). */
sp_status sp_kv_truncate(sp_kv *kv, int32_t n, sp_error *err);

/* Keep slots start + idx[0..m-1] (strictly increasing, all < kv->n) and move
 * them to start..start+m-1; the cache then holds start + m tokens. */
sp_status sp_kv_keep(sp_kv *kv, int32_t start, const int32_t *idx, int32_t m, sp_error *err);

#endif
