/* sp_sampler: logits -> the adjusted next-token distribution, and drawing a
 * token from it with a caller-supplied uniform.
 *
 * The adjustment is applied in a fixed order: temperature, then top-k, then
 * top-p (nucleus, smallest set with mass >= p), then min-p (drop tokens whose
 * probability is below min_p times the largest), then renormalise. The
 * speculative loop applies the same sampler to draft and target so the output
 * is distributed exactly as sampling the adjusted target. Temperature 0 means
 * greedy: a one-hot distribution on the argmax (lowest id on ties). */
#ifndef SP_SAMPLER_H
#define SP_SAMPLER_H

#include <stdint.h>

#include "sp_status.h"

typedef struct sp_sampler_params {
    float temperature; /* 0 = greedy; default 1 */
    int32_t top_k;     /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
} sp_sampler_params;

sp_sampler_params sp_sampler_default_params(void);
/* SP_ERR_ARG with a message for temperature < 0 or non-finite, top_k < 0,
 * top_p outside (0, 1], min_p outside [0, 1]. */
sp_status sp_sampler_params_check(const sp_sampler_params *p, sp_error *err);

typedef struct sp_sampler sp_sampler;

/* Scratch for vocabularies up to n_vocab is allocated here, once. */
sp_status sp_sampler_init(const sp_sampler_params *p, int32_t n_vocab, sp_sampler **out,
                          sp_error *err);
void sp_sampler_free(sp_sampler *s);
/* Restrict sampling to ids [0, n_valid) (default n_vocab): the rest get
 * probability 0 and are never the argmax. Used for a model's vocabulary
 * padding (sp_model_n_valid_vocab). SP_ERR_ARG outside 1..n_vocab. */
sp_status sp_sampler_set_n_valid(sp_sampler *s, int32_t n_valid, sp_error *err);

/* Full adjusted distribution of n_vocab floats (sums to 1, zeros outside the
 * kept set). logits are not modified. No allocation. NaN logits get
 * probability 0; logits whose maximum is not finite (+inf, all -inf) give the
 * one-hot argmax, as temperature 0 does. */
void sp_sampler_probs(sp_sampler *s, const float *logits, float *probs);

/* Inverse-CDF draw from probs with uniform u in [0, 1); never returns a
 * zero-probability token (u is scaled by the actual sum, so rounding near
 * u = 1 lands on the last positive entry). If no entry is positive the input
 * is degenerate and the argmax is returned. */
int32_t sp_sample_from_probs(const float *probs, int32_t n, double u);
int32_t sp_argmax(const float *x, int32_t n);

#endif
