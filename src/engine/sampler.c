/* sampler: logits -> adjusted next-token distribution (temperature, top-k,
 * top-p, min-p, renormalise) and inverse-CDF draws from it.
 *
 * The kept set is carried as an index array over preallocated scratch. Every
 * ordering uses one strict total order, "higher probability first, then lower
 * id", so boundary ties resolve deterministically to the lowest ids. Top-k is
 * an O(V) quickselect; top-p selects a growing prefix (64, 256, ...) of the
 * kept set by quickselect and sorts only that prefix, so a full O(V log V)
 * sort happens only when the nucleus really is most of the vocabulary. */
#include "sp_sampler.h"
#include "sampler_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct sp_sampler {
    sp_sampler_params p;
    int32_t n_vocab;
    int32_t n_valid; /* ids >= n_valid get probability 0 (vocabulary padding) */
    float *val;   /* [n_vocab] unnormalised probabilities exp((l - max)/T) */
    int32_t *idx; /* [n_vocab] kept token ids; order is scratch */
    float *probs; /* [n_vocab] output scratch for sp_sampler_sample(probs_out = NULL) */
};

sp_sampler_params sp_sampler_default_params(void) {
    sp_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
    return p;
}

sp_status sp_sampler_params_check(const sp_sampler_params *p, sp_error *err) {
    if (!p) return sp_fail(err, SP_ERR_ARG, "sampler params: NULL");
    if (!isfinite(p->temperature) || p->temperature < 0.0f)
        return sp_fail(err, SP_ERR_ARG, "sampler: temperature must be finite and >= 0 (got %g)",
                       (double)p->temperature);
    if (p->top_k < 0)
        return sp_fail(err, SP_ERR_ARG, "sampler: top_k must be >= 0 (got %d)", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return sp_fail(err, SP_ERR_ARG, "sampler: top_p must be in (0, 1] (got %g)",
                       (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return sp_fail(err, SP_ERR_ARG, "sampler: min_p must be in [0, 1] (got %g)",
                       (double)p->min_p);
    return SP_OK;
}

sp_status sp_sampler_init(const sp_sampler_params *p, int32_t n_vocab, sp_sampler **out,
                          sp_error *err) {
    if (!out) return sp_fail(err, SP_ERR_ARG, "sampler: out is NULL");
    *out = NULL;
    sp_status st = sp_sampler_params_check(p, err);
    if (st != SP_OK) return st;
    if (n_vocab <= 0) return sp_fail(err, SP_ERR_ARG, "sampler: n_vocab must be > 0 (got %d)",
                                     (int)n_vocab);
    sp_sampler *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SP_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->n_valid = n_vocab;
    s->val = malloc((size_t)n_vocab * sizeof *s->val);
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    if (!s->val || !s->idx || !s->probs) {
        sp_sampler_free(s);
        return sp_fail(err, SP_ERR_NOMEM, "sampler: out of memory for %d-token scratch",
                       (int)n_vocab);
    }
    *out = s;
    return SP_OK;
}

void sp_sampler_free(sp_sampler *s) {
    if (!s) return;
    free(s->val);
    free(s->idx);
    free(s->probs);
    free(s);
}

const sp_sampler_params *sp_sampler_params_of(const sp_sampler *s) { return &s->p; }

sp_status sp_sampler_set_n_valid(sp_sampler *s, int32_t n_valid, sp_error *err) {
    if (n_valid < 1 || n_valid > s->n_vocab)
        return sp_fail(err, SP_ERR_ARG, "sampler: valid ids must be 1..%d (got %d)", (int)s->n_vocab,
                       (int)n_valid);
    s->n_valid = n_valid;
    return SP_OK;
}

int32_t sp_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

/* The strict total order of the sampler: a before b when val[a] > val[b], or
 * equal values and a < b. */
static inline bool before(const float *val, int32_t a, int32_t b) {
    return val[a] > val[b] || (val[a] == val[b] && a < b);
}

static inline void swap_i32(int32_t *a, int32_t *b) {
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Partition idx[lo..hi] (inclusive) around a median-of-three pivot; returns
 * the pivot's final position p (everything left of p is before it). */
static int32_t partition(const float *val, int32_t *idx, int32_t lo, int32_t hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (before(val, idx[mid], idx[lo])) swap_i32(&idx[mid], &idx[lo]);
    if (before(val, idx[hi], idx[lo])) swap_i32(&idx[hi], &idx[lo]);
    if (before(val, idx[hi], idx[mid])) swap_i32(&idx[hi], &idx[mid]);
    /* idx[mid] is the median; move it to hi and Lomuto-partition. */
    swap_i32(&idx[mid], &idx[hi]);
    int32_t pv = idx[hi], store = lo;
    for (int32_t i = lo; i < hi; i++)
        if (before(val, idx[i], pv)) swap_i32(&idx[i], &idx[store++]);
    swap_i32(&idx[store], &idx[hi]);
    return store;
}

/* Rearrange idx[0..n) so its first k entries are the k first in the order
 * (in no particular order among themselves). Expected O(n). */
static void select_top(const float *val, int32_t *idx, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    if (k <= 0 || k >= n) return;
    while (lo < hi) {
        int32_t p = partition(val, idx, lo, hi);
        if (p == k || p == k - 1) return;
        if (p < k) lo = p + 1;
        else hi = p - 1;
    }
}

/* Sort idx[lo..hi] (inclusive) in the sampler order. */
static void sort_range(const float *val, int32_t *idx, int32_t lo, int32_t hi) {
    while (hi - lo > 16) {
        int32_t p = partition(val, idx, lo, hi);
        /* Recurse into the smaller side to bound the stack depth. */
        if (p - lo < hi - p) {
            sort_range(val, idx, lo, p - 1);
            lo = p + 1;
        } else {
            sort_range(val, idx, p + 1, hi);
            hi = p - 1;
        }
    }
    for (int32_t i = lo + 1; i <= hi; i++) {
        int32_t x = idx[i], j = i - 1;
        while (j >= lo && before(val, x, idx[j])) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = x;
    }
}

static void one_hot(float *probs, int32_t n, int32_t id) {
    memset(probs, 0, (size_t)n * sizeof *probs);
    probs[id] = 1.0f;
}

static void probs_valid(sp_sampler *s, const float *logits, float *probs);

void sp_sampler_probs(sp_sampler *s, const float *logits, float *probs) {
    probs_valid(s, logits, probs);
    if (s->n_valid < s->n_vocab)
        memset(probs + s->n_valid, 0, (size_t)(s->n_vocab - s->n_valid) * sizeof *probs);
}

/* The distribution over ids [0, n_valid): the rest of probs is not written. */
static void probs_valid(sp_sampler *s, const float *logits, float *probs) {
    const int32_t n = s->n_valid;
    const sp_sampler_params *p = &s->p;
    float *val = s->val;
    int32_t *idx = s->idx;

    int32_t amax = sp_argmax(logits, n);
    float mx = logits[amax];
    /* Greedy, or logits a softmax cannot normalise (+inf / all -inf / NaN):
     * one-hot on the argmax. */
    if (p->temperature == 0.0f || !isfinite(mx)) {
        one_hot(probs, n, amax);
        return;
    }

    /* Temperature + softmax numerator; NaN logits get probability 0. */
    const float inv_t = 1.0f / p->temperature;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        float e = isnan(l) ? 0.0f : expf((l - mx) * inv_t);
        val[i] = e;
        total += e;
        idx[i] = i;
    }
    int32_t n_keep = n;

    /* Top-k. */
    if (p->top_k > 0 && p->top_k < n_keep) {
        select_top(val, idx, n_keep, p->top_k);
        n_keep = p->top_k;
        total = 0.0;
        for (int32_t i = 0; i < n_keep; i++) total += val[idx[i]];
    }

    /* Top-p: the smallest prefix (in the sampler order) with mass >= top_p of
     * the kept mass. Sort a growing prefix until it holds enough mass. */
    if (p->top_p < 1.0f && n_keep > 1) {
        const double target = (double)p->top_p * total;
        int32_t m = n_keep < 64 ? n_keep : 64, sorted = 0;
        double cum = 0.0;
        int32_t cut = n_keep;
        for (;;) {
            select_top(val, idx + sorted, n_keep - sorted, m - sorted);
            sort_range(val, idx, sorted, m - 1);
            for (int32_t i = sorted; i < m; i++) {
                cum += val[idx[i]];
                if (cum >= target) {
                    cut = i + 1;
                    break;
                }
            }
            if (cut < n_keep || m == n_keep) break;
            sorted = m;
            m = (n_keep / 4 < m) ? n_keep : m * 4;
        }
        n_keep = cut;
        total = 0.0;
        for (int32_t i = 0; i < n_keep; i++) total += val[idx[i]];
    }

    /* Min-p relative to the largest probability (the argmax always survives
     * top-k and top-p, and its numerator is exp(0) = 1). */
    if (p->min_p > 0.0f) {
        const float thr = p->min_p * val[amax];
        int32_t w = 0;
        total = 0.0;
        for (int32_t i = 0; i < n_keep; i++) {
            if (val[idx[i]] >= thr) {
                idx[w++] = idx[i];
                total += val[idx[i]];
            }
        }
        n_keep = w;
    }

    memset(probs, 0, (size_t)n * sizeof *probs);
    if (!(total > 0.0)) { /* cannot happen: val[amax] = 1 is kept */
        probs[amax] = 1.0f;
        return;
    }
    const double inv = 1.0 / total;
    for (int32_t i = 0; i < n_keep; i++) probs[idx[i]] = (float)(val[idx[i]] * inv);
}

/* The one inverse-CDF draw, for float and double weights alike: total = the
 * sum of the positive entries (in index order, in double), then the first
 * positive index whose running sum exceeds u * total; when rounding leaves
 * u * total at or past the final running sum, the last positive entry.
 * Never returns a zero-weight index; -1 when no entry is positive. */
#define DEFINE_INVERSE_CDF(NAME, T)                                   \
    static int32_t NAME(const T *w, int32_t n, double u) {           \
        double total = 0.0;                                           \
        int32_t last = -1;                                            \
        for (int32_t i = 0; i < n; i++)                               \
            if (w[i] > 0) {                                           \
                total += (double)w[i];                                \
                last = i;                                             \
            }                                                         \
        if (last < 0) return -1;                                      \
        const double target = u * total;                              \
        double cum = 0.0;                                             \
        for (int32_t i = 0; i < last; i++)                            \
            if (w[i] > 0) {                                           \
                cum += (double)w[i];                                  \
                if (target < cum) return i;                           \
            }                                                         \
        return last;                                                  \
    }
DEFINE_INVERSE_CDF(inverse_cdf_f32, float)
DEFINE_INVERSE_CDF(inverse_cdf_f64, double)

int32_t sp_sample_from_probs(const float *probs, int32_t n, double u) {
    int32_t i = inverse_cdf_f32(probs, n, u);
    return i >= 0 ? i : sp_argmax(probs, n); /* no positive mass: degenerate input */
}

int32_t sp_sample_from_weights(const double *w, int32_t n, double u) {
    return inverse_cdf_f64(w, n, u);
}

int32_t sp_sampler_sample(sp_sampler *s, const float *logits, sp_rng *rng, float *probs_out) {
    float *probs = probs_out ? probs_out : s->probs;
    sp_sampler_probs(s, logits, probs);
    /* Always consume one uniform so the RNG stream does not depend on params. */
    double u = sp_rng_uniform(rng);
    return sp_sample_from_probs(probs, s->n_vocab, u);
}
