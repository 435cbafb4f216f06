/* sp_router: chooses one of several drafts for each request from its
 * prompt (online speculative decoding with per-domain drafts, OSD section
 * 4.2). A light contextual bandit: the prompt's tokens and token pairs are
 * hashed into a sparse binary feature vector x (L2-normalised); each draft d
 * has a linear predictor a_d(x) = b_d + w_d . x of the acceptance rate it
 * would reach on the request. The router picks the draft with the highest
 * prediction, or with probability `explore` a uniformly random one, and
 * after the request learns from the acceptance the chosen draft achieved
 * (normalised least-mean-squares on that draft's predictor only). Biases
 * start at `prior` (optimistic by default, so every draft is tried early).
 * Deterministic given the seed and the sequence of calls. Routing never
 * changes the output distribution: every draft is verified by the target. */
#ifndef SP_ROUTER_H
#define SP_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_status.h"

typedef struct sp_router_params {
    int32_t n_drafts;  /* 1..64 */
    int32_t n_buckets; /* hashed features, power of two 16..1<<20 (default 4096) */
    double explore;    /* probability of a random choice, [0, 1] (default 0.1) */
    double lr;         /* NLMS step in (0, 2) (default 0.5) */
    double prior;      /* initial predicted acceptance (default 1.0) */
    uint64_t seed;
} sp_router_params;

sp_router_params sp_router_default_params(int32_t n_drafts);

typedef struct sp_router sp_router;

sp_status sp_router_init(const sp_router_params *p, sp_router **out, sp_error *err);
void sp_router_free(sp_router *r);

/* Predicted acceptance of each draft for this prompt (pred[n_drafts]). */
void sp_router_predict(const sp_router *r, const int32_t *prompt, int32_t n, double *pred);

/* The draft for this prompt; *explored (may be NULL) tells whether it was
 * a random choice. */
int32_t sp_router_choose(sp_router *r, const int32_t *prompt, int32_t n, bool *explored);

/* Learns that `draft` reached acceptance rate `acceptance` (0..1) on this
 * prompt. Out-of-range drafts and non-finite rates are ignored. */
void sp_router_update(sp_router *r, const int32_t *prompt, int32_t n, int32_t draft,
                      double acceptance);

#endif
