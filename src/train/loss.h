/* loss.h: the distillation losses over one row (internal: the trainer,
 * online learning and the tests use them; sp_train.h names the losses). */
#ifndef SP_LOSS_H
#define SP_LOSS_H

#include <stdint.h>

#include "sp_train.h"

/* Loss of draft logits z[V] against target t; writes dL/dz into dz[V] when
 * dz is not NULL (dz is overwritten, not accumulated). scratch holds 2*V
 * doubles. The value is computed in double from a stable softmax. */
double sp_loss_row(const sp_loss *l, const sp_loss_target *t, const float *z, int32_t V,
                   double *scratch, float *dz);
/* The k largest entries of p[V] (ties: lower id first) into ids/probs in
 * decreasing order, and their complement mass; k is clamped to V. Returns the
 * number kept. */
int32_t sp_loss_topk(const float *p, int32_t V, int32_t k, int32_t *ids, float *probs, float *rest);

#endif
