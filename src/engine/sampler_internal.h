/* sampler_internal.h: the sampler's inverse-CDF draw over double weights,
 * shared inside the library (multi-candidate residuals, the toy simulator).
 * Not part of the public API. */
#ifndef SP_SAMPLER_INTERNAL_H
#define SP_SAMPLER_INTERNAL_H

#include <stdint.h>

#include "rng.h"
#include "sp_sampler.h"

/* Inverse-CDF draw of index i with probability w[i] / sum(w) from n weights
 * w[i] >= 0 (unnormalised) and a uniform u in [0, 1): the same routine as
 * sp_sample_from_probs. Never returns a zero-weight index; -1 when no
 * weight is positive. */
int32_t sp_sample_from_weights(const double *w, int32_t n, double u);

/* Convenience: probs + draw. probs_out may be NULL (then internal scratch).
 * Always consumes exactly one sp_rng_uniform, also when greedy. */
int32_t sp_sampler_sample(sp_sampler *s, const float *logits, sp_rng *rng, float *probs_out);

const sp_sampler_params *sp_sampler_params_of(const sp_sampler *s);

#endif
