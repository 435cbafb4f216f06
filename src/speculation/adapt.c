/* adapt: the adaptive draft-length controller (adapt.h; ALGORITHMS.md
 * section 6): a run-aware acceptance model and measured costs give the
 * expected tokens per second of each draft length; realised rates and
 * spaced probes guard the model's choice. */
#include "adapt.h"

#include <math.h>
#include <string.h>

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
#define ADAPT_EXPLORE 0.01       /* ... and far enough apart that probes which lose cost at most
                                  * this share of the time spent decoding plainly */
#define ADAPT_CARRY 0.5          /* weight a new text gives the acceptance counts of texts
                                  * on which drafting lost */
#define ADAPT_PROBE_HOPELESS 2048 /* ... or this when no draft length could gain ADAPT_HOPE even
                                   * if every draft token were accepted (measured costs) */
#define ADAPT_HOPE 1.10          /* a draft that could not beat plain decoding by 10% with every
                                  * token accepted is not worth probing: a probe also pays the
                                  * draft's catch-up and real acceptance is lower (synth-1b's
                                  * Q4_K_M draft at depth 4000 could gain 4% and its probes cost
                                  * up to 7 one-token forwards each, catch-up included) */
#define ADAPT_LOOK_P 0.02        /* a new text after losing ones looks with one token at a time
                                  * while right; when the run of right looks had less than this
                                  * chance at the first-token rate carried over, the text starts
                                  * afresh */

/* Forget what the text decided: acceptance, realised rates, probe schedule. */
static void adapt_forget_text(sp_adapt *a) {
    a->first_a = a->first_b = a->next_a = a->next_b = 0;
    for (int32_t b = 0; b <= SP_ADAPT_DEPTHS; b++) {
        sp_adapt_costs *c = b < SP_ADAPT_DEPTHS ? &a->depth_costs[b] : &a->c;
        memset(c->real_cost, 0, sizeof c->real_cost);
        memset(c->real_tok, 0, sizeof c->real_tok);
        memset(c->real_it, 0, sizeof c->real_it);
    }
    a->plain_run = a->probe_every = 0;
    a->probe_short = false;
    a->look = 0;
}

void sp_adapt_init(sp_adapt *a) {
    memset(&a->c, 0, sizeof a->c);
    memset(a->depth_costs, 0, sizeof a->depth_costs);
    adapt_forget_text(a);
    memset(a->depth_seen, 0, sizeof a->depth_seen);
    a->bucket = 0;
    a->depth_seen[0] = true;
    a->measure_one = false;
    a->iters = 0;
    a->lag = 0;
    a->text_start = a->probe_first = a->probe_short = false;
    a->look = 0;
}

static int32_t depth_bucket(int64_t n_past) {
    int32_t b = 0;
    for (int64_t lim = 1024; b < SP_ADAPT_DEPTHS - 1 && n_past >= lim; lim *= 2) b++;
    return b;
}

void sp_adapt_set_depth(sp_adapt *a, int64_t n_past) {
    const int32_t b = depth_bucket(n_past);
    if (b == a->bucket) return;
    a->depth_costs[a->bucket] = a->c;
    a->bucket = b;
    if (a->depth_seen[b]) {
        a->c = a->depth_costs[b];
        return;
    }
    a->depth_seen[b] = true;
    /* before anything is measured there is nothing to seed from: the
     * start-up schedule measures this bucket */
    if (!(a->c.t_one > 0 && a->c.r_draft > 0)) return;
    /* seeded with the last bucket's costs, measured afresh: t_one by the
     * next (plain) iteration, each ratio when its forward next runs */
    a->c.n_one = 0;
    a->c.since_one = 0;
    memset(a->c.real_cost, 0, sizeof a->c.real_cost); /* nothing realised here yet */
    memset(a->c.real_tok, 0, sizeof a->c.real_tok);
    memset(a->c.real_it, 0, sizeof a->c.real_it);
    for (int32_t k = 2; k <= SP_SPEC_MAX_GAMMA + 1; k++) a->c.seeded[k] = a->c.r_target[k] > 0;
    a->measure_one = true;
}

/* Whether the drafting iterations so far (ADAPT_EVIDENCE of them,
 * discounted) realised fewer tokens per second than the plain ones, every
 * cost included. */
static bool drafting_lost(const sp_adapt *a) {
    return a->c.real_tok[0] > 0 && a->c.real_it[1] >= ADAPT_EVIDENCE &&
           a->c.real_tok[1] * a->c.real_cost[0] < a->c.real_tok[0] * a->c.real_cost[1];
}

/* A new prompt on the same object: the costs, kept as ratios to the
 * one-token forward, hold for any text, so they carry over and the warm-up
 * and plain measuring iterations are not repeated; what the text decides
 * (acceptance, the realised rates, the probe schedule) starts afresh
 * unless drafting has lost at its depth (adapt_text_verdict below): a
 * "plain" reached within one prompt alone would hold for the rest, and the
 * prior alone is not enough (at the prior no length may pay): the
 * prompt's first iteration drafts ADAPT_FIRST_GAMMA tokens to measure its
 * acceptance while the draft's cache is level with the prompt (the
 * cheapest probe there is; skipped when no length could pay). t_one
 * belongs to the old, longer context: until a plain step measures it
 * again, drafting iterations track it through the ratios (since_one past
 * ADAPT_FRESH). Before both costs are measured there is nothing to carry:
 * start from scratch. */
void sp_adapt_new_text(sp_adapt *a) {
    if (!(a->c.t_one > 0 && a->c.r_draft > 0)) {
        sp_adapt_init(a);
        return;
    }
    a->c.since_one = ADAPT_FRESH;
    a->lag = 0;                       /* the draft is prefilled level with the prompt */
    a->iters = ADAPT_PLAIN_FIRST + 2; /* past the first iterations' schedule */
    a->text_start = true;             /* the verdict waits for the text's depth */
}

/* A new text's first proposal, its depth known: when drafting has lost
 * there (with evidence), the text goes on with the last one's acceptance
 * (at ADAPT_CARRY weight), realised rates and probe schedule, as one
 * stream, so that a draft that loses on every request is not re-tried in
 * full at every request's start (that cost synth-1b's Q4_K_M draft for its
 * Q8_0 target 6-8% over 64-token requests); its first iteration drafts one
 * token instead (the look: sp_adapt_observe_step follows a right one up
 * with another).
 * Otherwise the text starts afresh and measures itself first. */
static void adapt_text_verdict(sp_adapt *a) {
    a->text_start = false;
    if (drafting_lost(a)) {
        a->first_a *= ADAPT_CARRY, a->first_b *= ADAPT_CARRY;
        a->next_a *= ADAPT_CARRY, a->next_b *= ADAPT_CARRY;
        a->probe_short = true;
        a->look = 0;
        return;
    }
    adapt_forget_text(a);
    a->probe_first = true;
}

/* P(first draft token accepted): the discounted count, the prior included. */
static double first_rate(const sp_adapt *a) {
    return (a->first_a + ADAPT_PRIOR_W * ADAPT_PRIOR) / (a->first_b + ADAPT_PRIOR_W);
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
static double target_cost(const sp_adapt *a, int32_t k) {
    return k == 1 ? 1 : interp_time(a->c.r_target, k, 1, (double)k);
}

/* Seconds in units of the current one-token forward (0 before one is measured). */
static double in_t_one(const sp_adapt *a, double sec) { return a->c.t_one > 0 ? sec / a->c.t_one : 0; }

/* Expected cost of an iteration drafting g tokens, in t_one. */
static double iter_cost(const sp_adapt *a, int32_t g) {
    return g * a->c.r_draft + target_cost(a, g + 1) + interp_time(a->c.r_over, g, 0, 0);
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
int32_t sp_adapt_propose(sp_adapt *a, int32_t gmax) {
    SP_ASSERT(gmax >= 0 && gmax <= SP_SPEC_MAX_GAMMA);
    /* the first iterations measure both sides (above) */
    const int64_t it = a->iters++;
    if (it == 0) return gmax < ADAPT_WARMUP_GAMMA ? gmax : ADAPT_WARMUP_GAMMA;
    if (it <= ADAPT_PLAIN_FIRST) return 0;
    if (it == ADAPT_PLAIN_FIRST + 1) return gmax < ADAPT_FIRST_GAMMA ? gmax : ADAPT_FIRST_GAMMA;
    if (a->text_start) adapt_text_verdict(a);
    if (a->measure_one) { /* a new depth bucket: t_one there first */
        a->measure_one = false;
        return 0;
    }
    double a1 = first_rate(a);
    /* an starts from a1: a draft that is rarely right first is rarely right
     * next (a hopeful an made the rarely-right n-gram drafter draft 4-8
     * tokens at 0.09 acceptance and lose 17% on synth-1b F16) */
    double an = (a->next_a + ADAPT_PRIOR_W * a1) / (a->next_b + ADAPT_PRIOR_W);
    a1 = a1 < ADAPT_RATE_MIN ? ADAPT_RATE_MIN : a1 > ADAPT_RATE_MAX ? ADAPT_RATE_MAX : a1;
    an = an < ADAPT_RATE_MIN ? ADAPT_RATE_MIN : an > ADAPT_RATE_MAX ? ADAPT_RATE_MAX : an;
    double rate[SP_SPEC_MAX_GAMMA + 1] = {0}, best_rate = -1;
    for (int32_t g = 0; g <= gmax; g++) {
        double e = 1 + a1 * (1 - pow(an, g)) / (1 - an);
        rate[g] = e / iter_cost(a, g);
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
    if (best > 0 && drafting_lost(a)) best = 0;
    if (best > 0) {
        a->plain_run = 0;
        a->probe_short = false;
        a->look = 0;
        a->probe_every = ADAPT_PROBE_MIN;
        a->probe_first = false;
        return best;
    }
    if (a->probe_every == 0) a->probe_every = ADAPT_PROBE_MIN;
    int32_t every = a->probe_every;
    bool hopeless = false;
    if (a->c.r_draft > 0) {
        /* with every draft token accepted, could any length beat plain by
         * ADAPT_HOPE? If not (measured costs), probe only every
         * ADAPT_PROBE_HOPELESS */
        double ub = 0;
        for (int32_t g = 1; g <= gmax; g++) {
            double r = (g + 1) / iter_cost(a, g);
            ub = r > ub ? r : ub;
        }
        hopeless = ub < ADAPT_HOPE * rate[0];
        if (hopeless) every = ADAPT_PROBE_HOPELESS;
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
     * so that this stays within ADAPT_EXPLORE of the plain time, the draft's
     * catch-up over the plain steps between them included: P plain steps
     * and a probe lose loss + r_catch P, within ADAPT_EXPLORE c0 P when
     * P >= loss / (ADAPT_EXPLORE c0 - r_catch). A catch-up dearer than the
     * budget itself (synth-1b's Q4_K_M draft catches up a token in 0.1 of a
     * target forward) leaves probing to the texts' starts, where the draft is
     * level and a look costs no catch-up, and to every ADAPT_PROBE_HOPELESS. */
    const double c0 = iter_cost(a, 0);
    double loss = iter_cost(a, probe) * (1 - rate[probe] / rate[0]);
    if (a->c.real_it[1] > 0 && a->c.real_tok[0] > 0) {
        const double real_loss =
            (a->c.real_cost[1] - a->c.real_tok[1] * a->c.real_cost[0] / a->c.real_tok[0]) / a->c.real_it[1];
        loss = real_loss > loss ? real_loss : loss;
    }
    if (c0 > 0 && loss > 0 && a->c.real_it[1] >= ADAPT_EVIDENCE) {
        const double budget = ADAPT_EXPLORE * c0 - a->c.r_catch;
        const double spaced = budget > 0 ? loss / budget : ADAPT_PROBE_HOPELESS;
        if (spaced > every) every = spaced < ADAPT_PROBE_HOPELESS ? (int32_t)spaced : ADAPT_PROBE_HOPELESS;
    }
    if (a->probe_first) { /* a new prompt: the first steps measure its acceptance */
        a->probe_first = false;
        if (!hopeless) return gmax < ADAPT_FIRST_GAMMA ? gmax : ADAPT_FIRST_GAMMA;
    }
    if (a->probe_short) { /* a new prompt after losing ones: one token's look */
        a->probe_short = false;
        if (!hopeless && gmax > 0) {
            a->look++;
            return 1;
        }
    }
    a->look = 0;
    if (++a->plain_run < every) return 0;
    a->plain_run = 0;
    if (a->probe_every < ADAPT_PROBE_MAX) a->probe_every *= 2;
    return probe;
}

/* Timing average; a spike (the thread was preempted, a page fault) counts
 * as at most ADAPT_SPIKE times the average, so one outlier moves it by at
 * most 20%, while a lasting rise still gets through in a few iterations. */
static void ema(double *x, double v) {
    if (*x > 0 && v > ADAPT_SPIKE * *x) v = ADAPT_SPIKE * *x;
    *x = *x > 0 ? (1 - ADAPT_EMA) * *x + ADAPT_EMA * v : v;
}

void sp_adapt_observe_target(sp_adapt *a, int32_t k, double cost) {
    a->last_cost = cost;
    if (a->iters <= 1) {
        /* the warm-up iteration: not measured */
    } else if (k == 1) {
        /* the plain mean of the first few, then the average: the ratios
         * measured next are only as good as this */
        if (a->c.n_one < 1 / ADAPT_EMA) a->c.t_one = (a->c.t_one * a->c.n_one + cost) / (a->c.n_one + 1);
        else ema(&a->c.t_one, cost);
        a->c.n_one++;
        a->c.r_target[1] = 1;
        a->c.since_one = 0;
    } else if (k <= SP_SPEC_MAX_GAMMA + 1 && a->c.t_one > 0) {
        /* soon after a one-token forward, learn the ratio; in a long run of
         * drafting iterations, let t_one follow the context through it */
        if (a->c.seeded[k]) { /* a seed from another depth: replaced, not averaged */
            a->c.seeded[k] = false;
            a->c.since_one++;
            a->c.r_target[k] = cost / a->c.t_one;
        } else if (a->c.since_one++ < ADAPT_FRESH || a->c.r_target[k] <= 0)
            ema(&a->c.r_target[k], cost / a->c.t_one);
        else
            ema(&a->c.t_one, cost / a->c.r_target[k]);
    }
}

void sp_adapt_observe_step(sp_adapt *a, const sp_adapt_step *st) {
    const int32_t nd = st->drafted;
    if (a->look) {
        /* a new text after losing ones: while its one-token looks come out
         * right, another follows (the probe_short path: a right look gains
         * about what a wrong one loses); a run of right looks unlikely at
         * the carried first-token rate and the text differs from the old
         * ones: it starts afresh from this step. (A full draft after one
         * right look cost 3.7 one-token forwards at depth 4000 when wrong,
         * as it mostly was; starting afresh after 3 right looks, when a
         * look was right 60% of the time, brought back probes with
         * catch-ups that cost 2% of the time.) */
        if (nd > 0 && st->accepted == nd) {
            if (pow(first_rate(a), a->look) > ADAPT_LOOK_P)
                a->probe_short = true;
            else
                adapt_forget_text(a);
        } else
            a->look = 0;
    }
    SP_ASSERT(nd >= 0 && nd <= SP_SPEC_MAX_GAMMA);
    if (a->iters > 1) { /* past the warm-up iteration */
        ema(&a->c.r_over[nd], in_t_one(a, st->over_seconds));
        /* realised tokens per second, by whether anything was drafted (a
         * gamma the drafter could not fill costs what plain decoding costs);
         * the forward counts at what it was charged, as in the model */
        const int arm = nd > 0;
        /* a preempted iteration counts as at most ADAPT_SPIKE times the
         * arm's average (one spike must not make drafting look lost, which
         * a new text would carry) */
        double cost = in_t_one(a, st->draft_seconds + a->last_cost + st->over_seconds);
        if (a->c.real_it[arm] >= 1) {
            const double avg = a->c.real_cost[arm] / a->c.real_it[arm];
            if (cost > ADAPT_SPIKE * avg) cost = ADAPT_SPIKE * avg;
        }
        a->c.real_cost[arm] = ADAPT_REAL_DECAY * a->c.real_cost[arm] + cost;
        a->c.real_tok[arm] = ADAPT_REAL_DECAY * a->c.real_tok[arm] + st->emitted;
        a->c.real_it[arm] = ADAPT_REAL_DECAY * a->c.real_it[arm] + 1;
    }
    if (nd > 0) {
        const int32_t tau = st->accepted;
        a->first_a = ADAPT_DECAY * a->first_a + (tau >= 1);
        a->first_b = ADAPT_DECAY * a->first_b + 1;
        if (tau >= 1 && nd > 1) {
            a->next_a = ADAPT_DECAY * a->next_a + (tau - 1);
            a->next_b = ADAPT_DECAY * a->next_b + (tau - 1) + (tau < nd ? 1 : 0);
        }
        /* per draft forward, leaving out the catch-up after plain steps (a
         * one-off when drafting resumes; the realised rate counts it) */
        if (st->draft_forwards > 0)
            ema(&a->c.r_draft, in_t_one(a, st->draft_forward_seconds / (double)st->draft_forwards));
        /* the catch-up over the plain steps since the last draft, per step */
        if (a->lag >= 2)
            ema(&a->c.r_catch, in_t_one(a, (st->draft_seconds - st->draft_forward_seconds) / a->lag));
        a->lag = 0;
    } else
        a->lag++;
}
