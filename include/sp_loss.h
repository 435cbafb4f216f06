/* sp_loss: distillation and language-model losses over one position.
 *
 * A loss compares the target's distribution p with the draft's q =
 * softmax(z) (z: the draft's V logits) and returns its value and the
 * gradient with respect to z. Pure functions: no model, no state.
 *
 *   fkl    forward KL   D(p||q) = sum p log(p/q)          (mode covering)
 *   rkl    reverse KL   D(q||p) = sum q log(q/p)          (mode seeking)
 *   jsd    JSD[beta]    beta D(p||m) + (1-beta) D(q||m),  m = beta p + (1-beta) q
 *   tvd    total variation  1/2 sum |p - q|  (1 - TV is the acceptance rate
 *          of one token under speculative sampling, so minimising it maximises
 *          acceptance directly)
 *   ce     cross-entropy with a token y: -log q_y  (pre-training on text)
 *
 * Target rows come dense (V probabilities) or sparse: the top-k ids with
 * their probabilities plus the remaining mass `rest`. A sparse row is
 * compared on k+1 buckets: each kept id, and "everything else" whose draft
 * probability is the sum of q over the ids not kept. This coarse-grained
 * divergence never exceeds the dense one (data-processing inequality) and
 * equals it when k = V. Natural logarithms; values in nats. */
#ifndef SP_LOSS_H
#define SP_LOSS_H

#include <stdint.h>

#include "sp_status.h"

typedef enum sp_loss_kind { SP_LOSS_FKL = 0, SP_LOSS_RKL, SP_LOSS_JSD, SP_LOSS_TVD, SP_LOSS_CE } sp_loss_kind;

typedef struct sp_loss {
    sp_loss_kind kind;
    double beta; /* JSD only, in (0, 1) */
} sp_loss;

/* "fkl", "rkl", "jsd" (beta 0.5), "jsd:BETA", "tvd", "ce". SP_ERR_ARG names
 * the setting `loss` on anything else (beta outside (0, 1) included). */
sp_status sp_loss_parse(const char *s, sp_loss *out, sp_error *err);
/* "fkl", "jsd:0.5", ... into buf (at least 32 bytes); returns buf. */
const char *sp_loss_format(const sp_loss *l, char *buf, int buf_len);

/* Probabilities below this are taken as this in log p of rkl (a target row
 * with exact zeros, e.g. after top-k sampling, would make rkl infinite). */
#define SP_LOSS_P_FLOOR 1e-9

/* One position's target. Exactly one form is used:
 *   ce:     token (0 <= token < V)
 *   dense:  p != NULL, V probabilities summing to 1
 *   sparse: p == NULL, k ids (distinct, in [0, V)) with probabilities
 *           probs[k], and rest = 1 - sum(probs) >= 0 spread over the others */
typedef struct sp_loss_target {
    int32_t token;
    const float *p;
    int32_t k;
    const int32_t *ids;
    const float *probs;
    float rest;
} sp_loss_target;

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
