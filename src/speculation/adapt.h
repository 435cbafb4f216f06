/* adapt: the adaptive draft-length controller of the speculative chain loop
 * (ALGORITHMS.md section 6). It observes each iteration's measured costs
 * and acceptances and proposes the next draft length, 0 (decode plainly)
 * included, maximising expected tokens per second. Internal to src/speculation.
 *
 * Per iteration, in this order: sp_adapt_propose, then (when the target
 * forward ran) sp_adapt_observe_target, then sp_adapt_observe_step. Costs
 * are kept as ratios to t_one, the time of a one-token target forward now,
 * so they stay valid as the context (and t_one with it) grows. */
#ifndef SP_ADAPT_H
#define SP_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_spec.h"

/* Buckets of depths (tokens in the context: below 1024, then each doubling
 * up to 32768, then beyond), each with its own measured costs: a k-token
 * forward's cost relative to a one-token one grows with the depth
 * (attention's share grows), so ratios measured at one depth misprice
 * verification at another. */
#define SP_ADAPT_DEPTHS 7

/* The measured costs of one depth bucket. */
typedef struct sp_adapt_costs {
    double t_one;            /* EMA seconds per one-token target forward */
    int32_t since_one;       /* iterations since t_one was last measured directly */
    int32_t n_one;           /* direct measurements of t_one so far */
    double r_draft;          /* EMA draft forward / t_one */
    double r_catch;          /* EMA a draft's catch-up after plain steps, per step / t_one */
    double r_target[SP_SPEC_MAX_GAMMA + 2]; /* EMA k-token target forward / t_one ([1] = 1) */
    double r_over[SP_SPEC_MAX_GAMMA + 2];   /* EMA rest of an iteration (verification,
                                             * sampling) / t_one, by draft length */
    /* a bucket entered with another's costs as its seed: k-token ratios
     * not yet measured here (the first measurement replaces the seed) */
    bool seeded[SP_SPEC_MAX_GAMMA + 2];
    double real_cost[2], real_tok[2], real_it[2]; /* realised at this depth: discounted cost
                                       * (in t_one), tokens and count of the iterations
                                       * that decoded plainly [0] / drafted [1] */
} sp_adapt_costs;

typedef struct sp_adapt {
    /* Acceptance comes in runs, so two rates are tracked (discounted
     * counts): a1 = P(first draft token accepted), an = P(next accepted |
     * previous accepted). */
    double first_a, first_b, next_a, next_b;
    sp_adapt_costs c;        /* the costs at the current depth */
    sp_adapt_costs depth_costs[SP_ADAPT_DEPTHS]; /* every bucket's (c is the current
                                                  * one's, saved when the depth moves) */
    bool depth_seen[SP_ADAPT_DEPTHS];
    int32_t bucket;          /* the current depth's bucket */
    bool measure_one;        /* a bucket entered unmeasured: its next iteration decodes
                              * plainly, measuring t_one there */
    double last_cost;        /* what the last target forward was charged (seconds) */
    int32_t plain_run;       /* iterations decoded plainly since speculation last ran */
    bool text_start;         /* a new prompt whose first proposal has not been made */
    bool probe_first;        /* a new prompt with carried costs: its first iteration drafts
                              * a few tokens (unless drafting is hopeless) */
    bool probe_short;        /* a new prompt after prompts on which drafting lost: its first
                              * iteration drafts one token (unless drafting is hopeless) */
    int8_t look;             /* the one-token looks proposed in a row on this text, the
                              * last one included (0: the last proposal was no look) */
    int32_t probe_every;     /* ... after which speculation is probed again */
    int64_t iters;           /* proposals since the last reset */
    int32_t lag;             /* plain iterations since the last drafting one (what the
                              * draft's cache catches up at the next) */
} sp_adapt;

/* What one iteration measured besides its target forward. */
typedef struct sp_adapt_step {
    int32_t drafted;         /* tokens drafted (<= the proposal; 0: decoded plainly) */
    int32_t accepted;        /* of which accepted */
    int32_t emitted;         /* tokens the iteration produced */
    double draft_seconds;    /* drafting, catch-up included */
    double over_seconds;     /* the rest besides the target forward (verification, sampling) */
    int64_t draft_forwards;  /* draft forwards, catch-up after plain steps left out */
    double draft_forward_seconds; /* their time */
} sp_adapt_step;

/* A fresh controller: no estimates. */
void sp_adapt_init(sp_adapt *a);

/* A new text on the same target and draft: measured costs carry over (the
 * warm-up and measuring iterations are not repeated); what the text decided
 * (acceptance, realised rates, probe schedule) starts afresh, unless
 * drafting has lost at the new text's depth (adapt.c). */
void sp_adapt_new_text(sp_adapt *a);

/* The context now holds n_past tokens: from here on the costs of that
 * depth's bucket are used (and measured). A bucket not seen before starts
 * from the current costs, measures t_one with one plain iteration and
 * replaces each k-token ratio at its first measurement. Call before
 * sp_adapt_propose; never calling it keeps one bucket for every depth. */
void sp_adapt_set_depth(sp_adapt *a, int64_t n_past);
/* The next draft length in [0, gmax] (gmax <= SP_SPEC_MAX_GAMMA). */
int32_t sp_adapt_propose(sp_adapt *a, int32_t gmax);

/* The iteration's target forward: k tokens, charged cost seconds. */
void sp_adapt_observe_target(sp_adapt *a, int32_t k, double cost);

/* The rest of the iteration (after sp_adapt_observe_target). */
void sp_adapt_observe_step(sp_adapt *a, const sp_adapt_step *st);

#endif
