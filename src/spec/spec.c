/* spec: the speculative generation loop: draft, one batched target forward,
 * verify, commit, roll back. Orchestration only; drafting is in draft.c,
 * verification in verify*.c, arithmetic in model.c. */
#include "sp_spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "draft.h"
#include "sp_clock.h"
#include "sp_spec_config.h"

struct sp_spec {
    sp_spec_params prm;
    sp_ctx *target;
    sp_drafter *drafter;     /* NULL for plain decoding */
    sp_verify_ws *ws;
    sp_tree_shape shape;
    bool is_tree;
    int32_t V;
    int32_t max_nodes;       /* chain: gamma + 1; tree: shape nodes */
    /* buffers sized at init */
    float *q;                /* [max_nodes][V] draft distributions */
    float *p;                /* [max_nodes][V] target distributions */
    float *logits;           /* [batch][V] target logits */
    int32_t *batch_tok, *batch_pos;
    uint8_t *mask;           /* [batch][batch] */
    int32_t *draft;          /* [max_nodes] */
    sp_draft_tree tree;
    int32_t batch_cap;
    /* adaptive gamma state */
    /* Acceptance comes in runs, so two rates are tracked (discounted
     * counts): a1 = P(first draft token accepted), an = P(next accepted |
     * previous accepted). */
    double first_a, first_b, next_a, next_b;
    /* Costs are kept in units of t_one, the time of a one-token target
     * forward now: it grows with the context (attention), and a cost
     * measured 200 tokens ago, compared with today's in seconds, would
     * mislead; as a ratio to the one-token forward of its time it stays
     * valid. */
    double t_one;            /* EMA seconds per one-token target forward */
    double last_cost;        /* what the last target forward was charged (seconds) */
    int32_t since_one;       /* iterations since t_one was last measured directly */
    int32_t n_one;           /* direct measurements of t_one so far */
    double r_draft;          /* EMA draft forward / t_one */
    double r_target[SP_SPEC_MAX_GAMMA + 2]; /* EMA k-token target forward / t_one ([1] = 1) */
    double r_over[SP_SPEC_MAX_GAMMA + 2];   /* EMA rest of an iteration (verification,
                                             * sampling) / t_one, by draft length */
    double real_cost[2], real_tok[2], real_it[2]; /* realised: discounted cost (in t_one),
                                       * tokens and count of the iterations that decoded
                                       * plainly [0] / drafted [1] */
    int32_t plain_run;       /* iterations decoded plainly since speculation last ran */
    bool probe_first;        /* a new prompt with carried costs: its first iteration drafts
                              * ADAPT_FIRST_GAMMA tokens (unless drafting is hopeless) */
    int32_t probe_every;     /* ... after which speculation is probed again */
    int64_t iters;           /* chain iterations since the last reset */
    sp_spec_observer observer; /* sees the target rows of verified positions */
    void *observer_ud;
    int64_t draft_fwd_carry; /* draft forwards of drafters replaced by sp_spec_set_draft_model */
    bool draft_stale;        /* a new draft model was swapped in: prefill it before drafting */
    sp_spec_forward_fn forward; /* target forwards; NULL = sp_forward */
    void *forward_ud;
};

/* Total draft forwards of this object's drafters (the current one's
 * counter restarts when a new draft model is swapped in). */
static int64_t draft_forwards(const sp_spec *s) {
    return s->draft_fwd_carry + sp_drafter_counters(s->drafter)->forwards;
}

const sp_model *sp_spec_draft_model(const sp_spec *s) {
    return s->drafter && s->prm.draft.kind == SP_DRAFT_MODEL ? s->prm.draft.draft_model : NULL;
}

/* A drafter for s's settings drafting with model m (its batch sized for
 * the widest tree level). */
static sp_status drafter_for(const sp_spec *s, const sp_model *m, sp_drafter **out, sp_error *err) {
    sp_drafter_params dp = s->prm.draft;
    dp.draft_model = m;
    int32_t level = s->is_tree ? sp_tree_shape_max_level(&s->shape) : 1;
    dp.max_batch = level > SP_CTX_DEFAULT_BATCH ? level : SP_CTX_DEFAULT_BATCH;
    return sp_drafter_init(&dp, s->target, out, err);
}

sp_status sp_spec_set_draft_model(sp_spec *s, const sp_model *m, sp_error *err) {
    if (!s->drafter || s->prm.draft.kind != SP_DRAFT_MODEL)
        return sp_fail(err, SP_ERR_ARG, "drafter: only a draft-model drafter can take a new draft model");
    sp_drafter *d = NULL;
    sp_status st = drafter_for(s, m, &d, err);
    if (st) return st;
    /* the new drafter's cache is empty: the loop prefills it with the
     * committed text before its next draft (draft_stale) */
    s->draft_fwd_carry += sp_drafter_counters(s->drafter)->forwards;
    sp_drafter_free(s->drafter);
    s->drafter = d;
    s->prm.draft.draft_model = m;
    s->draft_stale = true;
    return SP_OK;
}

void sp_spec_set_forward(sp_spec *s, sp_spec_forward_fn fn, void *ud) {
    s->forward = fn;
    s->forward_ud = ud;
}

/* One target forward through the hook (sp_spec_set_forward) or sp_forward;
 * *cost: the seconds the adaptive controller charges for it (the hook's
 * figure, else the wall time). */
static sp_status target_forward(sp_spec *s, const sp_batch *b, float *logits, double *cost,
                                sp_error *err) {
    const double t0 = sp_now();
    *cost = -1;
    sp_status rc = s->forward ? s->forward(s->forward_ud, s->target, b, logits, cost, err)
                              : sp_forward(s->target, b, logits, err);
    if (*cost < 0) *cost = sp_now() - t0;
    return rc;
}

void sp_spec_set_observer(sp_spec *s, sp_spec_observer fn, void *ud) {
    s->observer = fn;
    s->observer_ud = ud;
}

sp_spec_params sp_spec_default_params(void) {
    sp_spec_params p = {.draft = sp_drafter_default_params(), .verifier = SP_VERIFIER_BLOCK,
                        .lenience = 1.0, .gamma = 4, .draft_n_min = 1, .adaptive = false,
                        .draft_p_min = 0, .tree = {0}};
    return p;
}

double sp_spec_acceptance_rate(const sp_spec_stats *s) {
    return s->drafted ? (double)s->accepted / (double)s->drafted : 0;
}
double sp_spec_block_efficiency(const sp_spec_stats *s) {
    int64_t f = s->target_forwards - s->prefill_forwards;
    return f ? (double)s->emitted / (double)f : 0;
}
double sp_spec_mean_accepted(const sp_spec_stats *s) {
    return s->iterations ? (double)s->accepted / (double)s->iterations : 0;
}

void sp_spec_free(sp_spec *s) {
    if (!s) return;
    sp_drafter_free(s->drafter);
    sp_verify_ws_free(s->ws);
    free(s->q);
    free(s->p);
    free(s->logits);
    free(s->batch_tok);
    free(s->batch_pos);
    free(s->mask);
    free(s->draft);
    free(s->tree.parent);
    free(s->tree.token);
    free(s->tree.depth);
    free(s);
}

sp_status sp_spec_init(sp_ctx *target, const sp_spec_params *p, sp_spec **out, sp_error *err) {
    *out = NULL;
    sp_status st = sp_spec_config_check(p, target, err);
    if (st) return st;
    sp_spec *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    s->prm = *p;
    s->target = target;
    s->V = sp_model_cfg(sp_ctx_model(target))->n_vocab;
    s->is_tree = p->draft.kind != SP_DRAFT_NONE && p->tree.depth > 0;
    s->shape = p->tree;
    /* nodes with a target row: the root plus the budget */
    s->max_nodes = sp_spec_config_budget(p) + 1;
    /* the uncommitted tail (normally 1 token) plus every drafted node */
    s->batch_cap = s->max_nodes + 1;
    if (p->draft.kind != SP_DRAFT_NONE) st = drafter_for(s, p->draft.draft_model, &s->drafter, err);
    if (!st) st = sp_verify_ws_init(s->V, &s->ws, err);
    if (!st) {
        size_t V = (size_t)s->V, N = (size_t)s->max_nodes, B = (size_t)s->batch_cap;
        s->q = malloc(N * V * sizeof(float));
        s->p = malloc(N * V * sizeof(float));
        s->logits = malloc(B * V * sizeof(float));
        s->batch_tok = malloc(B * sizeof(int32_t));
        s->batch_pos = malloc(B * sizeof(int32_t));
        s->mask = malloc(B * B);
        s->draft = malloc(N * sizeof(int32_t));
        s->tree.parent = malloc(N * sizeof(int32_t));
        s->tree.token = malloc(N * sizeof(int32_t));
        s->tree.depth = malloc(N * sizeof(int32_t));
        s->tree.q = s->q;
        if (!s->q || !s->p || !s->logits || !s->batch_tok || !s->batch_pos || !s->mask ||
            !s->draft || !s->tree.parent || !s->tree.token || !s->tree.depth)
            st = sp_fail(err, SP_ERR_NOMEM, "out of memory for speculation buffers (%zu x %zu)", N, V);
    }
    if (st) {
        sp_spec_free(s);
        return st;
    }
    *out = s;
    return SP_OK;
}

/* Forget what the text decided: acceptance, realised rates, probe schedule. */
static void adapt_forget_text(sp_spec *s) {
    s->first_a = s->first_b = s->next_a = s->next_b = 0;
    memset(s->real_cost, 0, sizeof s->real_cost);
    memset(s->real_tok, 0, sizeof s->real_tok);
    memset(s->real_it, 0, sizeof s->real_it);
    s->plain_run = s->probe_every = 0;
}

/* Forget every adaptive estimate (a new object's state). */
static void adapt_forget(sp_spec *s) {
    adapt_forget_text(s);
    s->t_one = s->r_draft = 0;
    s->since_one = s->n_one = 0;
    memset(s->r_target, 0, sizeof s->r_target);
    memset(s->r_over, 0, sizeof s->r_over);
    s->iters = 0;
    s->probe_first = false;
}

/* ---------------------------------------------------------- adaptive gamma */

/* Parameters of the adaptive draft length (ALGORITHMS.md section 6). */
#define ADAPT_DECAY 0.9          /* weight of the past in the acceptance counts, per iteration */
#define ADAPT_PRIOR 0.75         /* acceptance rates start from this guess ... */
#define ADAPT_PRIOR_W 2.0        /* ... worth this many observations: hopeful, so that one
                                  * early rejection does not stop a good draft for long */
#define ADAPT_RATE_MIN 0.01      /* rates are clamped to [MIN, MAX] so the model stays finite */
#define ADAPT_RATE_MAX 0.99
#define ADAPT_FLAT 0.98          /* take the longest gamma within 2% of the best rate */
#define ADAPT_EMA 0.2            /* weight of a new measurement in the timing averages */
#define ADAPT_SPIKE 2.0          /* a timing above this multiple of its average counts as this
                                  * multiple (a preempted call must not steer the choice) */
#define ADAPT_REAL_DECAY 0.9     /* weight of the past in the realised-rate sums, per iteration
                                  * of the same kind */
#define ADAPT_WARMUP_GAMMA 2     /* the first iteration's draft length (a warm-up: first-touch
                                  * costs make its timings worthless, so they are not kept) */
#define ADAPT_PLAIN_FIRST 2      /* then this many plain iterations (t_one) ... */
#define ADAPT_FIRST_GAMMA 4      /* ... and one drafting this many tokens */
#define ADAPT_FRESH 4            /* a k-token forward within this many iterations of a one-token
                                  * one measures the ratio; later ones track t_one through it */
#define ADAPT_PROBE_MIN 8        /* plain iterations before speculation is probed again ... */
#define ADAPT_PROBE_MAX 256      /* ... doubling, up to this, while it keeps losing */
#define ADAPT_EVIDENCE 3.0       /* drafting iterations (discounted) before what drafting has
                                  * realised may overrule the model or space the probes out */
#define ADAPT_EXPLORE 0.03       /* ... and far enough apart that probes which lose cost at most
                                  * this share of the time spent decoding plainly */
#define ADAPT_PROBE_HOPELESS 2048 /* ... or this when no draft length could pay even if every
                                   * draft token were accepted (measured costs) */

/* A new prompt on the same object (sp_spec_reset): the costs, kept as
 * ratios to the one-token forward, hold for any text, so they carry over
 * and the warm-up and plain measuring iterations are not repeated; what the
 * text decides (acceptance, the realised rates, the probe schedule) starts
 * afresh, and the prompt's first iteration drafts ADAPT_FIRST_GAMMA tokens
 * to measure it while the draft's cache is level with the prompt (the
 * cheapest probe there is; skipped when no length could pay). Measured side
 * by side on synth-1b, 8 prompts x 48 tokens (adaptive / best static gamma):
 * F16 + Q4_K self-draft, T=1: 1.38x / 1.39x (before the carry-over 1.32x /
 * 1.63x); F16 + Q8_0, T=1: 1.14x / 1.18x (before 1.34x / 1.38x); Q8_0 + Q4_K,
 * T=0, where no static length wins: 0.90x (before 0.85x). Carrying the
 * verdict as well lost where drafting paid (F16 + Q4_K, T=1: 0.93x against
 * 1.30x): the first prompt's "plain" held for the rest; starting from the
 * prior without the first draft lost too (F16 + Q8_0, T=1: 0.99x against
 * 1.29x: at the prior no length pays). t_one belongs to the old, longer
 * context: until a plain step measures it again, drafting iterations track
 * it through the ratios (since_one past ADAPT_FRESH). Before both costs are
 * measured there is nothing to carry: start from scratch. */
static void adapt_carry(sp_spec *s) {
    if (!(s->n_one > 0 && s->r_draft > 0)) {
        adapt_forget(s);
        return;
    }
    adapt_forget_text(s); /* the costs stay */
    s->since_one = ADAPT_FRESH;
    s->iters = ADAPT_PLAIN_FIRST + 2; /* past the first iterations' schedule */
    s->probe_first = true;
}

sp_status sp_spec_reset(sp_spec *s, sp_error *err) {
    adapt_carry(s);
    sp_status st = sp_ctx_truncate(s->target, 0, err);
    if (!st && s->drafter) st = sp_drafter_reset(s->drafter, err);
    return st;
}

/* Cost t[k] for a batch size k (k = from .. SP_SPEC_MAX_GAMMA + 1): measured,
 * else linear between the nearest measured sizes; above the largest
 * measured size, extended along the slope of the two largest (or, with one
 * measurement, in proportion to size: a pessimistic guess that makes long
 * drafts earn their place by being measured); below the smallest, that
 * one; with none, `guess`. */
static double interp_time(const double *t, int32_t k, int32_t from, double guess) {
    if (t[k] > 0) return t[k];
    int32_t lo = k - 1, hi = k + 1;
    while (lo >= from && t[lo] <= 0) lo--;
    while (hi <= SP_SPEC_MAX_GAMMA + 1 && t[hi] <= 0) hi++;
    bool has_lo = lo >= from, has_hi = hi <= SP_SPEC_MAX_GAMMA + 1;
    if (has_lo && has_hi) return t[lo] + (t[hi] - t[lo]) * (k - lo) / (double)(hi - lo);
    if (has_hi) return t[hi];
    if (!has_lo) return guess;
    int32_t lo2 = lo - 1;
    while (lo2 >= from && t[lo2] <= 0) lo2--;
    if (lo2 >= from) {
        double slope = (t[lo] - t[lo2]) / (double)(lo - lo2);
        return t[lo] + (slope > 0 ? slope : 0) * (k - lo);
    }
    return t[lo] * (k + 1) / (double)(lo + 1);
}

/* Target forward cost for k tokens, in t_one. */
static double target_cost(const sp_spec *s, int32_t k) {
    return k == 1 ? 1 : interp_time(s->r_target, k, 1, (double)k);
}

/* Seconds in units of the current one-token forward (0 before one is measured). */
static double in_t_one(const sp_spec *s, double sec) { return s->t_one > 0 ? sec / s->t_one : 0; }

/* Expected cost of an iteration drafting g tokens, in t_one. */
static double iter_cost(const sp_spec *s, int32_t g) {
    return g * s->r_draft + target_cost(s, g + 1) + interp_time(s->r_over, g, 0, 0);
}

/* Draft length maximising expected tokens per second (ALGORITHMS.md
 * section 6, with the run-aware acceptance model), 0 (plain decoding)
 * included: E[tokens](g) = 1 + a1 (1 - an^g) / (1 - an), time(g) =
 * g t_draft + t_target(g + 1) + t_over(g), all measured in this run (as
 * ratios to the one-token forward, see t_one). When plain decoding wins,
 * speculation is probed again after probe_every plain iterations (doubling
 * while it keeps losing), so a change in acceptance (the text turned
 * repetitive, say) is noticed. After a short warm-up iteration whose
 * timings are not kept, ADAPT_PLAIN_FIRST iterations decode plainly and
 * one drafts ADAPT_FIRST_GAMMA tokens, so both costs are measured before
 * the model decides. */
static int32_t choose_gamma(sp_spec *s, int32_t gmax) {
    /* the first two iterations measure both sides: one speculative (a
     * middling length), one plain */
    const int64_t it = s->iters++;
    if (it == 0) return gmax < ADAPT_WARMUP_GAMMA ? gmax : ADAPT_WARMUP_GAMMA;
    if (it <= ADAPT_PLAIN_FIRST) return 0;
    if (it == ADAPT_PLAIN_FIRST + 1) return gmax < ADAPT_FIRST_GAMMA ? gmax : ADAPT_FIRST_GAMMA;
    double a1 = (s->first_a + ADAPT_PRIOR_W * ADAPT_PRIOR) / (s->first_b + ADAPT_PRIOR_W);
    /* an starts from a1: a draft that is rarely right first is rarely right
     * next (a hopeful an made the rarely-right n-gram drafter draft 4-8
     * tokens at 0.09 acceptance and lose 17% on synth-1b F16) */
    double an = (s->next_a + ADAPT_PRIOR_W * a1) / (s->next_b + ADAPT_PRIOR_W);
    a1 = a1 < ADAPT_RATE_MIN ? ADAPT_RATE_MIN : a1 > ADAPT_RATE_MAX ? ADAPT_RATE_MAX : a1;
    an = an < ADAPT_RATE_MIN ? ADAPT_RATE_MIN : an > ADAPT_RATE_MAX ? ADAPT_RATE_MAX : an;
    double rate[SP_SPEC_MAX_GAMMA + 1] = {0}, best_rate = -1;
    for (int32_t g = 0; g <= gmax; g++) {
        double e = 1 + a1 * (1 - pow(an, g)) / (1 - an);
        rate[g] = e / iter_cost(s, g);
        if (rate[g] > best_rate) best_rate = rate[g];
    }
    /* the optimum is usually flat: prefer the longest gamma within 2% */
    int32_t best = 0;
    for (int32_t g = 0; g <= gmax; g++)
        if (rate[g] >= ADAPT_FLAT * best_rate) best = g;
    if (best > 0 && rate[0] > rate[best]) best = 0; /* never give up a measured win for flatness */
    /* the model's choice is checked against what drafting has realised: when
     * the drafting iterations so far gave fewer tokens per second (every cost
     * included: draft catch-up, verification, bookkeeping) than the plain
     * ones, decode plainly and leave drafting to the probes below */
    if (best > 0 && s->real_tok[0] > 0 && s->real_it[1] >= ADAPT_EVIDENCE &&
        s->real_tok[1] * s->real_cost[0] < s->real_tok[0] * s->real_cost[1])
        best = 0;
    if (best > 0) {
        s->plain_run = 0;
        s->probe_every = ADAPT_PROBE_MIN;
        s->probe_first = false;
        return best;
    }
    if (s->probe_every == 0) s->probe_every = ADAPT_PROBE_MIN;
    int32_t every = s->probe_every;
    if (s->r_draft > 0) {
        /* with every draft token accepted, could any length beat plain?
         * If not (measured costs), probe only every ADAPT_PROBE_HOPELESS */
        double ub = 0;
        for (int32_t g = 1; g <= gmax; g++) {
            double r = (g + 1) / iter_cost(s, g);
            ub = r > ub ? r : ub;
        }
        if (ub < rate[0]) every = ADAPT_PROBE_HOPELESS;
    }
    /* probe: the best speculative length under the current estimates */
    int32_t probe = 1;
    for (int32_t g = 1; g <= gmax; g++)
        if (rate[g] > rate[probe]) probe = g;
    /* if nothing has changed, a probe loses what it costs beyond the plain
     * steps its tokens would have taken: by the model, or (when the guard
     * above overruled it) as drafting iterations have realised it. Once
     * there is evidence (a couple of drafting iterations are no verdict: one
     * rejected first token makes any draft look hopeless), space the probes
     * so that this stays within ADAPT_EXPLORE of the plain time. */
    const double c0 = iter_cost(s, 0);
    double loss = iter_cost(s, probe) * (1 - rate[probe] / rate[0]);
    if (s->real_it[1] > 0 && s->real_tok[0] > 0) {
        const double real_loss =
            (s->real_cost[1] - s->real_tok[1] * s->real_cost[0] / s->real_tok[0]) / s->real_it[1];
        loss = real_loss > loss ? real_loss : loss;
    }
    if (c0 > 0 && loss > 0 && s->real_it[1] >= ADAPT_EVIDENCE) {
        const double spaced = loss / (ADAPT_EXPLORE * c0);
        if (spaced > every) every = spaced < ADAPT_PROBE_HOPELESS ? (int32_t)spaced : ADAPT_PROBE_HOPELESS;
    }
    if (s->probe_first) { /* a new prompt: the first steps measure its acceptance */
        s->probe_first = false;
        if (every != ADAPT_PROBE_HOPELESS) return gmax < ADAPT_FIRST_GAMMA ? gmax : ADAPT_FIRST_GAMMA;
    }
    if (++s->plain_run < every) return 0;
    s->plain_run = 0;
    if (s->probe_every < ADAPT_PROBE_MAX) s->probe_every *= 2;
    return probe;
}

/* Timing average; a spike (the thread was preempted, a page fault) counts
 * as at most ADAPT_SPIKE times the average, so one outlier moves it by at
 * most 20%, while a lasting rise still gets through in a few iterations. */
static void ema(double *x, double v) {
    if (*x > 0 && v > ADAPT_SPIKE * *x) v = ADAPT_SPIKE * *x;
    *x = *x > 0 ? (1 - ADAPT_EMA) * *x + ADAPT_EMA * v : v;
}

/* ------------------------------------------------------------------ loop */

typedef struct emit_state {
    int32_t *out, cap, n;
    int32_t budget;
    const sp_tokenizer *tok;
    bool stop_at_eog, hit_eog, stop;
    sp_token_cb cb;
    void *ud;
} emit_state;

/* Appends tokens to the output (and the history), honouring the budget and
 * EOS; returns how many were taken. */
static int32_t emit(emit_state *e, int32_t *hist, int32_t *n_hist, const int32_t *t, int32_t k) {
    int32_t taken = 0;
    for (int32_t i = 0; i < k && e->n < e->budget && !e->stop; i++) {
        e->out[e->n++] = t[i];
        hist[(*n_hist)++] = t[i];
        taken++;
        if (e->stop_at_eog && e->tok && sp_tokenizer_is_eog(e->tok, t[i])) e->hit_eog = e->stop = true;
    }
    if (taken && e->cb && !e->cb(e->ud, t, taken)) e->stop = true;
    if (e->n >= e->budget) e->stop = true;
    return taken;
}

/* One target forward over the uncommitted tail hist[T.n_past..n) and the
 * drafted nodes; tree mask when parent != NULL. Writes p rows (adjusted)
 * for the last tail token and each node. */
static sp_status target_pass(sp_spec *s, const int32_t *hist, int32_t n, const int32_t *nodes,
                             const int32_t *parent, const int32_t *depth, int32_t n_nodes,
                             sp_sampler *smp, sp_spec_stats *st, sp_error *err) {
    const int32_t V = s->V, past = sp_ctx_n_past(s->target), tail = n - past;
    const int32_t B = tail + n_nodes;
    SP_ASSERT(tail >= 1 && B <= s->batch_cap);
    for (int32_t i = 0; i < tail; i++) {
        s->batch_tok[i] = hist[past + i];
        s->batch_pos[i] = past + i;
    }
    for (int32_t i = 0; i < n_nodes; i++) {
        s->batch_tok[tail + i] = nodes[i];
        s->batch_pos[tail + i] = n - 1 + (depth ? depth[i + 1] : i + 1);
    }
    const uint8_t *mask = NULL;
    if (parent) { /* the tail is causal; each node sees the tail and its ancestors */
        memset(s->mask, 0, (size_t)tail * (size_t)B);
        for (int32_t i = 0; i < tail; i++) memset(s->mask + (int64_t)i * B, 1, (size_t)i + 1);
        sp_tree_ancestor_mask(parent, 1, n_nodes, tail, B, s->mask + (int64_t)tail * B);
        mask = s->mask;
    }
    sp_batch b = {.tokens = s->batch_tok, .pos = s->batch_pos, .n = B, .mask = mask,
                  .logits_all = true};
    double t0 = sp_now(), cost;
    sp_status rc = target_forward(s, &b, s->logits, &cost, err);
    double t1 = sp_now();
    st->t_target += t1 - t0;
    st->target_forwards++;
    s->last_cost = cost;
    if (s->iters <= 1) {
        /* the adaptive controller's warm-up iteration: not measured */
    } else if (B == 1) {
        /* the plain mean of the first few, then the average: the ratios
         * measured next are only as good as this */
        if (s->n_one < 1 / ADAPT_EMA) s->t_one = (s->t_one * s->n_one + cost) / (s->n_one + 1);
        else ema(&s->t_one, cost);
        s->n_one++;
        s->r_target[1] = 1;
        s->since_one = 0;
    } else if (B <= SP_SPEC_MAX_GAMMA + 1 && s->t_one > 0) {
        /* soon after a one-token forward, learn the ratio; in a long run of
         * drafting iterations, let t_one follow the context through it */
        if (s->since_one++ < ADAPT_FRESH || s->r_target[B] <= 0)
            ema(&s->r_target[B], cost / s->t_one);
        else
            ema(&s->t_one, cost / s->r_target[B]);
    }
    if (rc) return rc;
    for (int32_t j = 0; j <= n_nodes; j++)
        sp_sampler_probs(smp, s->logits + (int64_t)(tail - 1 + j) * V, s->p + (int64_t)j * V);
    st->t_sample += sp_now() - t1;
    return SP_OK;
}

/* State of one generation shared by the step functions. */
typedef struct gen_run {
    sp_spec *s;
    sp_sampler *smp;
    sp_rng rng;
    int32_t *hist, n;     /* committed text */
    bool greedy_t;        /* temperature 0 */
    sp_mc_mode mode;      /* trees: how children are drawn/verified */
    sp_spec_stats *stats;
    /* result of a step */
    int32_t emitted[SP_TREE_MAX_DEPTH + SP_SPEC_MAX_GAMMA + 2];
    int32_t n_emit, tau;
} gen_run;

/* One tree iteration: grow the draft tree (trimmed to the token budget),
 * verify it in one target pass, keep the accepted path in both caches. */
static sp_status step_tree(gen_run *g, int32_t remaining, sp_error *err) {
    sp_spec *s = g->s;
    sp_spec_stats *st = g->stats;
    int32_t depth = remaining - 1 < s->shape.depth ? remaining - 1 : s->shape.depth, nn = 1;
    double t0 = sp_now();
    sp_status rc = SP_OK;
    if (depth >= 1) {
        rc = sp_drafter_tree(s->drafter, g->hist, g->n, &s->shape, depth, g->greedy_t, g->mode,
                             g->smp, &g->rng, &s->tree, err);
        nn = s->tree.n_nodes;
    }
    st->t_draft += sp_now() - t0;
    if (rc) return rc;
    st->drafted += nn - 1;
    rc = target_pass(s, g->hist, g->n, s->tree.token + 1, nn > 1 ? s->tree.parent : NULL,
                     s->tree.depth, nn - 1, g->smp, st, err);
    if (rc) return rc;
    int32_t path[SP_TREE_MAX_DEPTH + 1], n_path = 0, y;
    double tv = sp_now();
    if (nn == 1) {
        y = sp_sample_from_probs(s->p, s->V, sp_rng_uniform(&g->rng));
    } else {
        sp_verify_tree vt = {.n_nodes = nn, .parent = s->tree.parent, .token = s->tree.token,
                             .p = s->p, .q = s->q};
        const bool trav = s->prm.verifier == SP_VERIFIER_GBV ||
                          s->prm.verifier == SP_VERIFIER_TRAVERSAL;
        rc = g->greedy_t ? sp_verify_tree_greedy(s->ws, &vt, path, SP_TREE_MAX_DEPTH + 1, &n_path,
                                                 &y, err)
             : trav      ? sp_verify_tree_traversal(s->ws, &vt, g->mode, &g->rng, path,
                                                    SP_TREE_MAX_DEPTH + 1, &n_path, &y, err)
                         : sp_verify_tree_walk(s->ws, &vt, g->mode, &g->rng, path,
                                               SP_TREE_MAX_DEPTH + 1, &n_path, &y, err);
    }
    st->t_verify += sp_now() - tv;
    if (rc) return rc;
    g->tau = n_path;
    g->n_emit = 0;
    for (int32_t i = 0; i < n_path; i++) g->emitted[g->n_emit++] = s->tree.token[path[i]];
    g->emitted[g->n_emit++] = y;
    /* roll back: keep the tail plus the accepted path */
    int32_t idx[SP_TREE_MAX_DEPTH + 1];
    for (int32_t i = 0; i < n_path; i++) idx[i] = path[i] - 1;
    rc = sp_ctx_keep(s->target, g->n, idx, n_path, err);
    if (!rc) rc = sp_drafter_accept_tree(s->drafter, g->n, &s->tree, path, n_path, err);
    return rc;
}

/* One chain iteration: draft up to gamma tokens, verify them in one target
 * pass, truncate both caches to the accepted prefix. */
static sp_status step_chain(gen_run *g, int32_t remaining, sp_error *err) {
    sp_spec *s = g->s;
    sp_spec_stats *st = g->stats;
    const sp_draft_counters *dc = sp_drafter_counters(s->drafter);
    double t0 = sp_now(), dsec0 = dc->seconds, dgap0 = dc->gap_seconds;
    const double t_fwd0 = st->t_target;
    int64_t dfw0 = dc->forwards, dgapf0 = dc->gap_forwards;
    int32_t gamma = s->prm.adaptive ? choose_gamma(s, s->prm.gamma) : s->prm.gamma;
    if (gamma > remaining - 1) gamma = remaining - 1;
    int32_t nd = 0;
    sp_status rc = SP_OK;
    if (gamma >= 1)
        rc = sp_drafter_chain(s->drafter, g->hist, g->n, gamma, s->prm.draft_n_min,
                              s->prm.draft_p_min, g->smp, &g->rng, s->draft, s->q, &nd, err);
    st->t_draft += sp_now() - t0;
    if (rc) return rc;
    st->drafted += nd;
    rc = target_pass(s, g->hist, g->n, s->draft, NULL, NULL, nd, g->smp, st, err);
    if (rc) return rc;
    sp_verify_result vr = {0, 0};
    double tv = sp_now();
    if (nd == 0)
        vr.token = sp_sample_from_probs(s->p, s->V, sp_rng_uniform(&g->rng));
    else if (s->prm.verifier == SP_VERIFIER_GREEDY)
        rc = sp_verify_greedy(s->ws, nd, s->draft, s->p, &vr, err);
    else
        rc = sp_verify_chain(s->ws, s->prm.verifier, s->prm.lenience, nd, s->draft, s->q, s->p,
                             &g->rng, &vr, err);
    st->t_verify += sp_now() - tv;
    if (rc) return rc;
    g->tau = vr.n_accepted;
    memcpy(g->emitted, s->draft, (size_t)g->tau * sizeof *g->emitted);
    g->n_emit = g->tau;
    g->emitted[g->n_emit++] = vr.token;
    /* the rest of the iteration's time (verification, sampling) */
    const double t_draft_it = dc->seconds - dsec0;
    st->gamma_hist[nd < SP_SPEC_MAX_GAMMA + 1 ? nd : SP_SPEC_MAX_GAMMA + 1]++;
    if (s->iters > 1) { /* past the warm-up iteration */
        const double over = sp_now() - t0 - t_draft_it - (st->t_target - t_fwd0);
        ema(&s->r_over[nd], in_t_one(s, over));
        /* realised tokens per second, by whether anything was drafted (a
         * gamma the drafter could not fill costs what plain decoding costs);
         * the forward counts at what it was charged, as in the model */
        const int arm = nd > 0;
        s->real_cost[arm] =
            ADAPT_REAL_DECAY * s->real_cost[arm] + in_t_one(s, t_draft_it + s->last_cost + over);
        s->real_tok[arm] = ADAPT_REAL_DECAY * s->real_tok[arm] + g->n_emit;
        s->real_it[arm] = ADAPT_REAL_DECAY * s->real_it[arm] + 1;
    }
    if (nd > 0) {
        s->first_a = ADAPT_DECAY * s->first_a + (g->tau >= 1);
        s->first_b = ADAPT_DECAY * s->first_b + 1;
        if (g->tau >= 1 && nd > 1) {
            s->next_a = ADAPT_DECAY * s->next_a + (g->tau - 1);
            s->next_b = ADAPT_DECAY * s->next_b + (g->tau - 1) + (g->tau < nd ? 1 : 0);
        }
        /* per draft forward, leaving out the catch-up after plain steps (a
         * one-off when drafting resumes; the realised rate counts it) */
        int64_t df = (dc->forwards - dfw0) - (dc->gap_forwards - dgapf0);
        double dsec = (dc->seconds - dsec0) - (dc->gap_seconds - dgap0);
        if (df > 0) ema(&s->r_draft, in_t_one(s, dsec / (double)df));
    }
    rc = sp_ctx_truncate(s->target, g->n + g->tau, err);
    if (!rc) rc = sp_drafter_accept_chain(s->drafter, g->n, g->tau, err);
    return rc;
}

/* Checks generate-time arguments against the spec object and the context. */
static sp_status check_generate(const sp_spec *s, int32_t n_prompt, const sp_gen_params *gp,
                                int32_t cap, sp_error *err) {
    sp_status st = sp_spec_config_check_sampling(&s->prm, &gp->sampling, err);
    if (st) return st;
    if (n_prompt < 1) return sp_fail(err, SP_ERR_ARG, "empty prompt (need at least one token)");
    if (gp->n_predict < 1 || gp->n_predict > cap)
        return sp_fail(err, SP_ERR_ARG, "token budget %d must be in [1, %d]", gp->n_predict, cap);
    if (sp_ctx_n_past(s->target) != 0) return sp_fail(err, SP_ERR_STATE, "context is not empty");
    const int32_t n_ctx = sp_ctx_n_ctx(s->target);
    if ((int64_t)n_prompt + gp->n_predict > n_ctx)
        return sp_fail(err, SP_ERR_RANGE,
                       "prompt (%d tokens) plus %d new tokens exceed the context size %d", n_prompt,
                       gp->n_predict, n_ctx);
    if (s->is_tree && (int64_t)n_prompt + gp->n_predict + s->max_nodes > n_ctx)
        return sp_fail(err, SP_ERR_RANGE,
                       "tree: %d nodes do not fit the context: prompt %d + %d new + tree > %d",
                       s->max_nodes, n_prompt, gp->n_predict, n_ctx);
    return SP_OK;
}

sp_status sp_spec_generate(sp_spec *s, const int32_t *prompt, int32_t n_prompt,
                           const sp_gen_params *gp, int32_t *out, int32_t cap,
                           sp_gen_stats *gstats, sp_spec_stats *stats, sp_token_cb cb, void *ud,
                           sp_error *err) {
    sp_spec_stats st_local;
    sp_gen_stats gs_local;
    if (!stats) stats = &st_local;
    if (!gstats) gstats = &gs_local;
    memset(stats, 0, sizeof *stats);
    stats->drafter = sp_drafter_name(s->prm.draft.kind);
    stats->verifier = s->drafter ? sp_verifier_name(s->prm.verifier) : "none";
    if (!s->drafter) {
        sp_status rc = sp_generate(s->target, prompt, n_prompt, gp, out, cap, gstats, cb, ud, err);
        stats->target_forwards = gstats->target_forwards;
        return rc;
    }
    *gstats = (sp_gen_stats){.n_prompt = n_prompt};
    sp_status rc = check_generate(s, n_prompt, gp, cap, err);
    if (rc) return rc;
    gen_run g = {.s = s, .stats = stats, .greedy_t = gp->sampling.temperature == 0,
                 .mode = s->prm.verifier == SP_VERIFIER_MC ||
                                 s->prm.verifier == SP_VERIFIER_GBV
                             ? SP_MC_REPLACE
                         : s->prm.verifier == SP_VERIFIER_NAIVE ? SP_MC_NAIVE
                                                                : SP_MC_NOREPLACE};
    if ((rc = sp_sampler_init(&gp->sampling, s->V, &g.smp, err))) return rc;
    if ((rc = sp_sampler_set_n_valid(g.smp, sp_model_n_valid_vocab(sp_ctx_model(s->target)), err))) {
        sp_sampler_free(g.smp);
        return rc;
    }
    g.hist = malloc(((size_t)n_prompt + (size_t)gp->n_predict + 1) * sizeof *g.hist);
    if (!g.hist) {
        sp_sampler_free(g.smp);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    memcpy(g.hist, prompt, (size_t)n_prompt * sizeof *g.hist);
    g.n = n_prompt;
    sp_rng_seed(&g.rng, gp->seed);
    emit_state e = {.out = out, .cap = cap, .budget = gp->n_predict,
                    .tok = sp_model_tokenizer(sp_ctx_model(s->target)),
                    .stop_at_eog = gp->stop_at_eog, .cb = cb, .ud = ud};
    const int64_t dc_f0 = draft_forwards(s);

    /* Prefill everything but the last prompt token (the first iteration
     * evaluates it together with the first draft). */
    double t0 = sp_now();
    s->draft_stale = false;
    if (g.n > 1) {
        /* sp_prefill's chunks, each through the forward hook */
        const int32_t mb = sp_ctx_max_batch(s->target);
        for (int32_t i = 0; !rc && i < g.n - 1; i += mb) {
            sp_batch b = {.tokens = g.hist + i, .n = g.n - 1 - i < mb ? g.n - 1 - i : mb};
            double cost;
            rc = target_forward(s, &b, s->logits, &cost, err);
            if (!rc) stats->prefill_forwards++;
        }
        if (!rc) rc = sp_drafter_prefill(s->drafter, g.hist, g.n - 1, err);
    }
    stats->target_forwards = stats->prefill_forwards;
    gstats->t_prefill = sp_now() - t0;
    double t1 = sp_now();
    while (!rc && !e.stop) {
        const int32_t remaining = e.budget - e.n;
        if (s->draft_stale) { /* swapped in by the observer: the whole text, new weights */
            s->draft_stale = false;
            double td = sp_now();
            rc = sp_drafter_prefill(s->drafter, g.hist, g.n - 1, err);
            stats->t_draft += sp_now() - td;
            if (rc) break;
        }
        rc = s->is_tree ? step_tree(&g, remaining, err) : step_chain(&g, remaining, err);
        if (rc) break;
        stats->iterations++;
        stats->accepted += g.tau;
        stats->accept_hist[g.tau < SP_SPEC_MAX_GAMMA + 1 ? g.tau : SP_SPEC_MAX_GAMMA + 1]++;
        const int32_t n_before = g.n;
        stats->emitted += emit(&e, g.hist, &g.n, g.emitted, g.n_emit);
        /* chain steps: target rows 0..tau are the distributions of the
         * tokens just committed at positions n_before.. (tree rows follow
         * the tree's node order and are not passed on) */
        if (s->observer && !s->is_tree && g.n > n_before) {
            const int32_t rows = g.tau + 1 < g.n - n_before ? g.tau + 1 : g.n - n_before;
            s->observer(s->observer_ud, g.hist, n_before, s->p, rows, s->V);
        }
    }
    gstats->t_generate = sp_now() - t1;
    gstats->n_generated = e.n;
    gstats->hit_eog = e.hit_eog;
    gstats->target_forwards = stats->target_forwards;
    stats->draft_forwards = draft_forwards(s) - dc_f0;
    free(g.hist);
    sp_sampler_free(g.smp);
    return rc;
}
