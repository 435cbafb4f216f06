/* router: the per-request draft router (see sp_spec.h). Features: one
 * bucket per token and per adjacent token pair of the prompt, hashed with a
 * 64-bit mix; a bucket hit twice counts once. */
#include "sp_spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* The prompt's features: at most MAX_FEAT distinct buckets (the prompt's
 * last tokens when it is longer). */
#define MAX_FEAT 1024

struct sp_router {
    sp_router_params p;
    double *w;    /* [n_drafts][n_buckets] */
    double *b;    /* [n_drafts] */
    uint8_t *seen; /* [n_buckets] scratch for de-duplication */
    sp_rng rng;
};

sp_router_params sp_router_default_params(int32_t n_drafts) {
    return (sp_router_params){.n_drafts = n_drafts, .n_buckets = 4096, .explore = 0.1, .lr = 0.5,
                              .prior = 1.0, .seed = 1};
}

sp_status sp_router_init(const sp_router_params *p, sp_router **out, sp_error *err) {
    *out = NULL;
    if (p->n_drafts < 1 || p->n_drafts > 64 || p->n_buckets < 16 || p->n_buckets > (1 << 20) ||
        (p->n_buckets & (p->n_buckets - 1)) || !(p->explore >= 0 && p->explore <= 1) ||
        !(p->lr > 0 && p->lr < 2) || !isfinite(p->prior))
        return sp_fail(err, SP_ERR_ARG,
                       "router: drafts 1..64, buckets a power of two 16..1048576, explore in [0, 1] "
                       "and lr in (0, 2) are needed");
    sp_router *r = calloc(1, sizeof *r);
    if (!r) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    r->p = *p;
    r->w = calloc((size_t)p->n_drafts * (size_t)p->n_buckets, sizeof *r->w);
    r->b = malloc((size_t)p->n_drafts * sizeof *r->b);
    r->seen = calloc((size_t)p->n_buckets, 1);
    if (!r->w || !r->b || !r->seen) {
        sp_router_free(r);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for the router");
    }
    for (int32_t d = 0; d < p->n_drafts; d++) r->b[d] = p->prior;
    sp_rng_seed(&r->rng, p->seed);
    *out = r;
    return SP_OK;
}

void sp_router_free(sp_router *r) {
    if (!r) return;
    free(r->w), free(r->b), free(r->seen);
    free(r);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Distinct buckets of the prompt into f[]; returns their count. The
 * feature value of each is 1/sqrt(count) (unit L2 norm). */
static int32_t features(const sp_router *r, const int32_t *t, int32_t n, int32_t *f) {
    uint8_t *seen = r->seen;
    const uint64_t mask = (uint64_t)r->p.n_buckets - 1;
    int32_t k = 0;
    const int32_t start = n > MAX_FEAT / 2 ? n - MAX_FEAT / 2 : 0;
    for (int32_t i = start; i < n && k < MAX_FEAT - 1; i++) {
        uint64_t h[2] = {mix((uint64_t)(uint32_t)t[i] * 2 + 1),
                         i > start ? mix(((uint64_t)(uint32_t)t[i - 1] << 32 | (uint32_t)t[i]) * 2) : 0};
        for (int j = 0; j < (i > start ? 2 : 1); j++) {
            const int32_t bkt = (int32_t)(h[j] & mask);
            if (!seen[bkt]) seen[bkt] = 1, f[k++] = bkt;
        }
    }
    for (int32_t j = 0; j < k; j++) seen[f[j]] = 0;
    return k;
}

static double predict_one(const sp_router *r, int32_t d, const int32_t *f, int32_t k) {
    const double *w = r->w + (size_t)d * (size_t)r->p.n_buckets;
    double s = 0;
    for (int32_t j = 0; j < k; j++) s += w[f[j]];
    return r->b[d] + (k ? s / sqrt((double)k) : 0);
}

void sp_router_predict(const sp_router *r, const int32_t *prompt, int32_t n, double *pred) {
    int32_t f[MAX_FEAT];
    const int32_t k = features(r, prompt, n, f);
    for (int32_t d = 0; d < r->p.n_drafts; d++) pred[d] = predict_one(r, d, f, k);
}

int32_t sp_router_choose(sp_router *r, const int32_t *prompt, int32_t n, bool *explored) {
    const int32_t D = r->p.n_drafts;
    /* the random numbers are drawn every time, so the sequence of choices
     * does not depend on how often exploration happened before */
    const double u = sp_rng_uniform(&r->rng);
    const int32_t pick = (int32_t)sp_rng_below(&r->rng, (uint64_t)D);
    if (explored) *explored = false;
    if (D > 1 && u < r->p.explore) {
        if (explored) *explored = true;
        return pick;
    }
    int32_t f[MAX_FEAT];
    const int32_t k = features(r, prompt, n, f);
    int32_t best = 0;
    double bv = predict_one(r, 0, f, k);
    for (int32_t d = 1; d < D; d++) {
        const double v = predict_one(r, d, f, k);
        if (v > bv) bv = v, best = d;
    }
    return best;
}

void sp_router_update(sp_router *r, const int32_t *prompt, int32_t n, int32_t draft,
                      double acceptance) {
    if (draft < 0 || draft >= r->p.n_drafts || !isfinite(acceptance)) return;
    int32_t f[MAX_FEAT];
    const int32_t k = features(r, prompt, n, f);
    const double e = acceptance - predict_one(r, draft, f, k);
    /* NLMS: the input (1, x) has squared norm 1 + |x|^2 = 2 (x is unit or empty) */
    const double step = r->p.lr * e / (k ? 2.0 : 1.0);
    r->b[draft] += step;
    double *w = r->w + (size_t)draft * (size_t)r->p.n_buckets;
    const double xv = k ? 1.0 / sqrt((double)k) : 0;
    for (int32_t j = 0; j < k; j++) w[f[j]] += step * xv;
}
