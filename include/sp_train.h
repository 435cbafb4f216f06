/* sp_train: a training engine for small Llama-architecture models (drafts).
 *
 * The pattern of llm.c's train_gpt2.c: every layer is a pair of free
 * functions <layer>_forward / <layer>_backward over raw float arrays with
 * explicit shapes (train.c), composed into one forward and one backward pass
 * over B sequences of T tokens; F32 master weights, AdamW, global-norm
 * gradient clipping, linear warm-up then cosine learning rate, gradient
 * accumulation (backward adds into the gradients until zeroed). Results are
 * deterministic given the seed: threads own disjoint outputs and every sum
 * runs in a fixed order, so the thread count does not change a bit.
 *
 * Architecture (the subset of sp_model the draft needs): token embedding,
 * per layer RMSNorm -> q,k,v (GQA) -> RoPE (adjacent pairs, as llama) ->
 * causal softmax attention -> wo, residual; RMSNorm -> SwiGLU FFN, residual;
 * final RMSNorm; separate output matrix. Positions of a sequence are 0..T-1.
 *
 * Checkpoints are GGUF files (F32, F16 or Q8_0 matrices) with the vocabulary
 * copied from another GGUF file, loadable by sp_model_load and as a draft. */
#ifndef SP_TRAIN_H
#define SP_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_gguf.h"
#include "sp_loss.h"
#include "sp_model.h"
#include "sp_status.h"
#include "sp_threadpool.h"

typedef struct sp_train_shape {
    int32_t dim, n_layers, n_heads, n_kv_heads, ffn_dim, n_vocab;
    float rope_theta; /* default 10000 */
    float norm_eps;   /* default 1e-5 */
} sp_train_shape;

/* dim 64, 2 layers, 4 heads, 2 kv heads, ffn 128, vocabulary 512. */
sp_train_shape sp_train_default_shape(void);
/* Parses "DIM,LAYERS,HEADS,KV_HEADS,FFN" (the vocabulary is left as is).
 * SP_ERR_ARG naming the setting `draft_shape` on bad syntax or shapes. */
sp_status sp_train_shape_parse(const char *s, sp_train_shape *shape, sp_error *err);
/* Checks a shape: heads | dim, kv heads | heads, even head size, sizes in range. */
sp_status sp_train_shape_check(const sp_train_shape *s, sp_error *err);

typedef struct sp_tmodel sp_tmodel;

/* A fresh model of this shape, weights drawn from N(0, 1/fan_in) (residual
 * outputs wo, w2 also scaled by 1/sqrt(2 layers)), norms 1, from seed. */
sp_status sp_tmodel_init(const sp_train_shape *s, uint64_t seed, sp_tmodel **out, sp_error *err);
/* Weights of a GGUF/llama2.c model (any weight type, dequantised to F32; a
 * tied output matrix becomes its own copy). SP_ERR_UNSUPPORTED for models
 * outside the architecture above (biases, q/k norms, NeoX RoPE, ...). */
sp_status sp_tmodel_load(const char *path, sp_tmodel **out, sp_error *err);
void sp_tmodel_free(sp_tmodel *m);
const sp_train_shape *sp_tmodel_shape(const sp_tmodel *m);
uint64_t sp_tmodel_n_params(const sp_tmodel *m);
/* Threads used by forward/backward (a pool shared with others; NULL = 1). */
void sp_tmodel_set_pool(sp_tmodel *m, sp_pool *pool);

/* Parameter tensors, for checks and tools: count, name (GGUF name), element
 * count, and the value and gradient arrays. */
int32_t sp_tmodel_n_tensors(const sp_tmodel *m);
const char *sp_tmodel_tensor(sp_tmodel *m, int32_t i, int64_t *n, float **value, float **grad);

/* Forward over B sequences of T tokens (tokens[b*T + t]); logits [B*T][V]
 * stay in the model (sp_tmodel_logits) with everything backward needs.
 * Buffers grow on demand (SP_ERR_NOMEM). */
sp_status sp_tmodel_forward(sp_tmodel *m, const int32_t *tokens, int32_t B, int32_t T, sp_error *err);
float *sp_tmodel_logits(sp_tmodel *m);

/* Losses of the last forward against targets[B*T] (a target with token < 0,
 * p NULL and k 0 is skipped): returns the sum over the used positions, their
 * count in *n_used, and sets dlogits = grad_scale * dL/dlogits (0 at skipped
 * positions). For a mean over N positions and A accumulated micro-batches,
 * grad_scale = 1 / (N A). */
double sp_tmodel_loss(sp_tmodel *m, const sp_loss *loss, const sp_loss_target *targets,
                      double grad_scale, int64_t *n_used);
/* Backward of the last forward from the dlogits of sp_tmodel_loss; adds
 * into the parameter gradients. */
void sp_tmodel_backward(sp_tmodel *m);
void sp_tmodel_zero_grad(sp_tmodel *m);

typedef struct sp_adamw_params {
    float lr, beta1, beta2, eps, weight_decay; /* decay on matrices only */
    float clip;                                /* global gradient norm cap; 0 = off */
} sp_adamw_params;
sp_adamw_params sp_adamw_default_params(void); /* 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0 */

/* One AdamW update from the accumulated gradients at learning rate p->lr;
 * returns the gradient norm before clipping. */
float sp_tmodel_step(sp_tmodel *m, const sp_adamw_params *p);

/* Linear warm-up over `warmup` steps to lr_max, then cosine decay to lr_min
 * at step `total` (steps count from 0). */
float sp_train_lr(int64_t step, int64_t total, int64_t warmup, float lr_max, float lr_min);

/* Writes the weights as GGUF (matrices in `type`: F32, F16 or Q8_0; norms
 * F32), vocabulary keys (tokenizer.*) copied from the GGUF file vocab_from
 * whose vocabulary size must match. SP_ERR_ARG for Q8_0 with dim or ffn not
 * multiples of 32. */
sp_status sp_tmodel_save(const sp_tmodel *m, const char *path, sp_ggml_type type,
                         const char *vocab_from, sp_error *err);

/* A copy of the weights (gradients and optimizer state zero/fresh): the
 * online learner trains a copy while the served draft stays fixed. */
/* An inference model (sp_model.h) holding a copy of the current weights as
 * F32, for serving without a file round trip. `like` is the model the
 * weights came from (or one of the same shape): the snapshot borrows its
 * tokenizer and settings, so `like` must outlive it. SP_ERR_ARG when the
 * shapes differ. Free with sp_model_free. */
sp_status sp_tmodel_to_model(const sp_tmodel *t, const sp_model *like, sp_model **out,
                             sp_error *err);
sp_status sp_tmodel_clone(const sp_tmodel *m, sp_tmodel **out, sp_error *err);
/* Copies the weights (and optimizer state) of src into dst of the same shape. */
void sp_tmodel_copy_weights(sp_tmodel *dst, const sp_tmodel *src);

#endif
