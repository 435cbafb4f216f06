/* kv: key/value cache storage, rollback and path compaction. */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

sp_status sp_kv_init(sp_kv *kv, int32_t n_layers, int32_t kv_dim, int32_t n_ctx, sp_error *err) {
    memset(kv, 0, sizeof *kv);
    if (n_layers < 1 || kv_dim < 1 || n_ctx < 1)
        return sp_fail(err, SP_ERR_ARG, "bad KV cache shape (%d layers, kv_dim %d, n_ctx %d)",
                       n_layers, kv_dim, n_ctx);
    size_t elems = (size_t)n_layers * (size_t)n_ctx * (size_t)kv_dim;
    kv->k = malloc(elems * sizeof(float));
    kv->v = malloc(elems * sizeof(float));
    if (!kv->k || !kv->v) {
        sp_kv_free(kv);
        return sp_fail(err, SP_ERR_NOMEM, "cannot allocate a %.1f MiB KV cache for %d tokens",
                       2.0 * (double)elems * 4 / (1 << 20), n_ctx);
    }
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->n_ctx = n_ctx;
    return SP_OK;
}

void sp_kv_free(sp_kv *kv) {
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
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
    size_t row = (size_t)kv->kv_dim * sizeof(float);
    for (int32_t l = 0; l < kv->n_layers; l++) {
        for (int32_t i = 0; i < m; i++) {
            if (idx[i] == i) continue; /* already in place */
            memcpy(sp_kv_k(kv, l, start + i), sp_kv_k(kv, l, start + idx[i]), row);
            memcpy(sp_kv_v(kv, l, start + i), sp_kv_v(kv, l, start + idx[i]), row);
        }
    }
    kv->n = start + m;
    return SP_OK;
}
