/* train.h: the training model's steps (forward, loss, backward, AdamW),
 * its tensors, and conversions; internal to training (distillation, online
 * learning) and the tests. sp_train.h has the public part: shapes, making,
 * loading and saving a draft, distillation, online learning. */
#ifndef SP_TRAIN_INTERNAL_H
#define SP_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_train.h"

/* Checks a shape: heads | dim, kv heads | heads, even head size, sizes in range. */
sp_status sp_train_shape_check(const sp_train_shape *s, sp_error *err);
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
sp_adamw_params sp_adamw_default_params(void); /* 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0 */
/* One AdamW update from the accumulated gradients at learning rate p->lr;
 * returns the gradient norm before clipping. */
float sp_tmodel_step(sp_tmodel *m, const sp_adamw_params *p);
/* Linear warm-up over `warmup` steps to lr_max, then cosine decay to lr_min
 * at step `total` (steps count from 0). */
float sp_train_lr(int64_t step, int64_t total, int64_t warmup, float lr_max, float lr_min);
/* An inference model (sp_model.h) holding a copy of the current weights as
 * F32, for serving without a file round trip. `like` is the model the
 * weights came from (or one of the same shape): the snapshot borrows its
 * tokenizer and settings, so `like` must outlive it. SP_ERR_ARG when the
 * shapes differ. Free with sp_model_free. */
sp_status sp_tmodel_to_model(const sp_tmodel *t, const sp_model *like, sp_model **out,
                             sp_error *err);
/* A copy of the weights (gradients and optimizer state zero/fresh): the
 * online learner trains a copy while the served draft stays fixed. */
sp_status sp_tmodel_clone(const sp_tmodel *m, sp_tmodel **out, sp_error *err);
/* Copies the weights (and optimizer state) of src into dst of the same shape. */
void sp_tmodel_copy_weights(sp_tmodel *dst, const sp_tmodel *src);

#endif
