/* attention: scaled dot-product attention of a batch's new tokens over one
 * sequence's KV cache (kv.h), in any of the cache's element types, under a
 * causal or tree mask, a sliding window and soft-capping. Internal to the
 * engine (model.c runs it as a pool job). */
#ifndef SP_ATTENTION_H
#define SP_ATTENTION_H

#include <stdint.h>

#include "kv.h"

typedef struct sp_att_job {
    const sp_kv *kv;
    int32_t layer;
    int32_t n, n_past;          /* new tokens; cached before them (their slots follow) */
    int32_t n_heads, n_kv_heads, head_dim;
    float scale;                /* score scale (1 when the queries were prescaled) */
    const float *q;             /* [n][n_heads * head_dim] queries after RoPE */
    const int32_t *pos;         /* [n] positions of the new tokens */
    /* mask over slots [mask_base, n_past + n): row-major n x mask_w, as
     * sp_batch's (NULL: causal over the new tokens) */
    int32_t mask_base, mask_w;
    const uint8_t *mask;
    int32_t window;             /* > 0: sliding window of this layer */
    float softcap;              /* > 0: scores -> cap * tanh(score / cap) */
    float *out;                 /* [n] rows of n_heads * head_dim, out_stride floats apart */
    int64_t out_stride;
    /* per-thread scratch: scores and idx hold kv->n_ctx entries per
     * thread, qbuf head_dim * 4 bytes */
    float *scores;
    int32_t *idx;
    uint8_t *qbuf;
} sp_att_job;

/* Pool job (sp_pool_run) over (head, token) tasks; thread ith of nth. */
void sp_att_job_run(void *arg, int ith, int nth);

#endif
