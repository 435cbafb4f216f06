/* eagle3.h: the EAGLE-3 head's forward pass (internal; loading is public,
 * sp_model.h). A context holds the head's KV cache (one layer) and its
 * scratch; the drafter (src/speculation/draft.c) keeps it in step with the text.
 *
 * Pair convention (llama.cpp's): the cache slot P holds the pair
 * (token at P + 1, g of the target's row at P), at RoPE position P; its
 * output predicts the token at P + 2. */
#ifndef SP_EAGLE3_INTERNAL_H
#define SP_EAGLE3_INTERNAL_H

#include <stdbool.h>

#include "sp_model.h"
#include "threadpool.h"

typedef struct sp_eagle3_ctx sp_eagle3_ctx;

/* The model the head was loaded for. */
const sp_model *sp_eagle3_target(const sp_eagle3 *h);
/* Width of g (the head's hidden size) and of a target tap row. */
int32_t sp_eagle3_dim(const sp_eagle3 *h);
int32_t sp_eagle3_target_dim(const sp_eagle3 *h);

/* A context of n_ctx slots taking up to max_batch rows per call, running
 * on pool (not owned; NULL: the calling thread). */
sp_status sp_eagle3_ctx_init(const sp_eagle3 *h, int32_t n_ctx, int32_t max_batch, sp_pool *pool,
                             sp_eagle3_ctx **out, sp_error *err);
void sp_eagle3_ctx_free(sp_eagle3_ctx *c);
int32_t sp_eagle3_ctx_n_past(const sp_eagle3_ctx *c);
/* Keep the first n slots (n <= n_past). */
sp_status sp_eagle3_ctx_truncate(sp_eagle3_ctx *c, int32_t n, sp_error *err);

/* The encoder: g[t] (dim floats, rows dim apart) = fc([norm]([tap0[t];
 * tap1[t]; tap2[t]])) for t < n (n <= max_batch), taps[i] holding n rows
 * of the target's width in the order of sp_eagle3_target_layers. */
sp_status sp_eagle3_encode(sp_eagle3_ctx *c, const float *const taps[3], int32_t n, float *g,
                           sp_error *err);

/* The decoder over n pairs (tokens[t], g[t]) appended at slots n_past..
 * (positions the same). logits: target-vocabulary rows (ids outside the
 * draft vocabulary get -inf) for every row when all, else the last;
 * prenorm: the same rows' pre-norm outputs (dim floats each; the next
 * step's g), or NULL. */
sp_status sp_eagle3_decode(sp_eagle3_ctx *c, const int32_t *tokens, const float *g, int32_t n,
                           bool all, float *logits, float *prenorm, sp_error *err);

/* The same over a draft tree level: explicit positions (NULL: n_past + t)
 * and, when mask is not NULL, a mask over slots [mask_base, n_past + n)
 * (row-major, n_past + n - mask_base wide; slots below mask_base are
 * visible), as sp_batch's with mask_from_past. */
sp_status sp_eagle3_decode_tree(sp_eagle3_ctx *c, const int32_t *tokens, const float *g, const int32_t *pos,
                                int32_t n, const uint8_t *mask, int32_t mask_base, bool all, float *logits,
                                float *prenorm, sp_error *err);

/* The head's width, heads, key/value heads, FFN width, RoPE base and norm
 * epsilon. */
sp_status sp_eagle3_shape(const sp_eagle3 *h, int32_t *dim, int32_t *n_heads, int32_t *n_kv_heads, int32_t *ffn_dim,
                          float *rope_theta, float *eps);
/* Whether the taps are RMS-normed before fc (eagle3.norm_before_fc). */
bool sp_eagle3_norm_before_fc(const sp_eagle3 *h);
/* NULL when the head trainer (src/train/head.h) and the online learner
 * model this head: the target's width, full-width RoPE, the target's
 * embeddings, its own output over the full vocabulary, no
 * norm_before_residual; else what they do not model. */
const char *sp_eagle3_trainable(const sp_eagle3 *h);

/* A trainable head's weights as F32 arrays in the file's shapes. */
typedef struct sp_eagle3_f32 {
    const float *fc, *enc_norm /* norm_before_fc */, *attn_norm, *hidden_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w3, *w2, *out_norm, *output;
} sp_eagle3_f32;
/* A copy of `like` (trainable) with the weights w (copied, packed): a
 * snapshot of a head learning online. Needs no file; `like`'s target must
 * outlive it. */
sp_status sp_eagle3_with_weights(const sp_eagle3 *like, const sp_eagle3_f32 *w, sp_eagle3 **out, sp_error *err);
/* Drafts with h from now on (same shape and layers as the context's head);
 * the cache keeps what the old weights computed. */
sp_status sp_eagle3_ctx_set_head(sp_eagle3_ctx *c, const sp_eagle3 *h, sp_error *err);

/* The three target layers whose taps the head reads. */
const int32_t *sp_eagle3_target_layers(const sp_eagle3 *h);

#endif
