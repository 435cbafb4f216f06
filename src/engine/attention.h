/* attention: scaled dot-product attention of a batch's new tokens over one
 * sequence's KV cache (kv.h), in any of the cache's element types, under a
 * causal or tree mask, a sliding window and soft-capping. Internal to the
 * engine (model.c runs it as a pool job).
 *
 * Grouped: one task per (KV head, chunk of new tokens) computes every query
 * row that reads that KV head (the group's query heads x the chunk's
 * tokens), walking the cache in blocks of SP_ATT_BLOCK slots: each block of
 * K rows is read once for all the task's rows (their scores), then, after
 * each row's softmax, each block of V rows once (the rows' mixes
 * accumulate block by block, ops.h sp_att_mix_acc_fn). Every row's
 * arithmetic is the per-row one of ops.h in the same order (llama.cpp's
 * batched non-flash bits), only the memory traffic changes: K and V are
 * streamed once per task instead of once per query row. Over an F16 cache
 * a token's query heads go through ops.h's grouped kernels together, so
 * each key and value is also converted once per token, and the keys of a
 * head-major K cache (kv.h SP_KV_K_BY_HEAD) are read from consecutive
 * bytes.
 *
 * Split (sp_att_run): with fewer tasks than threads (a decode or a few
 * tokens of a model with few KV heads) one task's work is cut three ways
 * instead, so that every thread streams part of K and of V: the scores by
 * slot blocks, the softmaxes by rows, the mixes by value dims (pieces of
 * 16 dims, 32 for Q8_0). Each of those keeps every row's arithmetic
 * (scores are per slot, a row's softmax is whole, a dim's mix chain is
 * whole), so the split gives the unsplit bits, whatever the thread
 * count. */
#ifndef SP_ATTENTION_H
#define SP_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kv.h"
#include "threadpool.h"

/* Cache slots per block (a block of F16 K rows of head size 128: 64 KiB). */
#define SP_ATT_BLOCK 256
/* Most query rows of one task (a group of up to 16 query heads x 16 tokens). */
#define SP_ATT_ROWS_CAP 256

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
    const float *sinks;         /* [n_heads] attention sinks (gpt-oss: one more logit per
                                 * head that weighs no value row), or NULL */
    float *out;                 /* [n] rows of n_heads * head_dim, out_stride floats apart */
    int64_t out_stride;
    /* per-thread scratch for rows_max query rows (sp_att_scratch_bytes) */
    int32_t rows_max;
    uint8_t *scratch;
} sp_att_job;

/* Query rows per task for a context: the group (n_heads / n_kv_heads)
 * times up to 16 tokens, fewer tokens when the scores of n_ctx slots would
 * pass 8 MiB, but at least one group. */
int32_t sp_att_rows_max(int32_t n_heads, int32_t n_kv_heads, int32_t max_batch, int32_t n_ctx);
/* Bytes of one thread's scratch for rows_max rows (64-byte multiple). */
size_t sp_att_scratch_bytes(int32_t rows_max, int32_t n_ctx, int32_t head_dim);

/* Pool job (sp_pool_run); thread ith of nth takes a share of the tasks. */
void sp_att_job_run(void *arg, int ith, int nth);
/* The job on a pool: sp_att_job_run's tasks, or, with fewer tasks than
 * threads, the split (its three phases as three pool jobs); the same bits
 * either way. The scratch must hold a share for every thread. */
void sp_att_run(sp_att_job *a, sp_pool *pool);

#endif
