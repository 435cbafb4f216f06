/* sp_online: online speculative decoding (OSD, Liu et al.): the draft keeps
 * learning from the target's distributions while it serves.
 *
 * Every speculative iteration already computes the target's (adjusted)
 * distribution at each position it verified; sp_online_observe keeps them in
 * a bounded replay buffer (the newest `buffer` positions; each as its
 * first token and the preceding `window` - 1 tokens and the target row cut to its top-k entries plus
 * the remaining mass). sp_online_update runs AdamW steps of the draft's F32
 * master copy on random batches from the buffer (forward KL by default, the
 * loss at each example's last position), and sp_online_export writes the
 * trained draft as a GGUF file that replaces the served draft. The output
 * stays exactly the target's distribution at every moment: verification
 * always uses the target; only the proposals change. */
#ifndef SP_ONLINE_H
#define SP_ONLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_loss.h"
#include "sp_status.h"

typedef struct sp_online_params {
    int32_t topk;       /* target row entries kept (plus the rest), 1..256; default 16 */
    int32_t buffer;     /* positions kept (newest), default 4096 */
    int32_t window;     /* context tokens per example, default 32 */
    int32_t batch;      /* examples per step, default 16 */
    float lr;           /* AdamW learning rate, default 3e-4 */
    int32_t warmup;     /* steps over which the rate ramps up from lr/warmup, default 64 */
    sp_loss loss;       /* default forward KL */
    uint64_t seed;
} sp_online_params;

sp_online_params sp_online_default_params(void);

typedef struct sp_online sp_online;

/* Loads the draft's weights (a GGUF the trainer supports, sp_train.h) as the
 * master copy; vocab_from (usually the same file) provides the vocabulary
 * written into exported drafts. */
sp_status sp_online_init(const char *draft_path, const sp_online_params *p, sp_online **out,
                         sp_error *err);
void sp_online_free(sp_online *o);

/* Observes `rows` target rows of vocabulary V: row j is the distribution of
 * the token at position first + j given hist[0 .. first + j). hist holds at
 * least first + rows tokens. Matches the sp_spec observer signature. */
void sp_online_observe(void *online, const int32_t *hist, int32_t first, const float *p,
                       int32_t rows, int32_t V);

/* Positions in the buffer, and positions observed in all. */
int64_t sp_online_buffered(const sp_online *o);
int64_t sp_online_observed(const sp_online *o);

/* `steps` AdamW steps on batches drawn from the buffer (nothing when it is
 * empty); *mean_loss (may be NULL) gets the mean loss of the steps. */
sp_status sp_online_update(sp_online *o, int32_t steps, double *mean_loss, sp_error *err);

/* Writes the current draft (F32) as GGUF to path. */
sp_status sp_online_export(sp_online *o, const char *path, sp_error *err);

/* ---- Serving: learning while a speculation object generates.
 *
 * sp_online_serve makes the learner the spec's observer: it keeps the
 * target's rows of every committed position, and after every `every` new
 * positions it runs `steps` optimizer steps on the buffer (on a background
 * thread unless background is false), snapshots the weights as an F32
 * sp_model and swaps it into the spec between two speculative iterations
 * (sp_spec_set_draft_model: the draft cache is rebuilt with the new
 * weights). Generation never waits for training in background mode; a
 * round starts only when the previous one has finished. Without the thread
 * the rounds run inline in the observer and the whole run is deterministic
 * given the seeds. The output stays exactly the target's distribution.
 *
 * `like` is the draft model first served (same shape as the learner's
 * weights; snapshots borrow its tokenizer and settings). s may be NULL:
 * learn for specs attached later. Free the spec (or detach it) before the
 * learner: an attached spec drafts with the learner's snapshot. */
typedef struct sp_online_schedule {
    int32_t every;    /* positions observed between training rounds (default 256) */
    int32_t steps;    /* optimizer steps per round (default 32) */
    bool background;  /* train on a thread (default true) */
} sp_online_schedule;

sp_online_schedule sp_online_default_schedule(void);

typedef struct sp_spec sp_spec;
typedef struct sp_model sp_model;
sp_status sp_online_serve(sp_online *o, sp_spec *s, const sp_model *like,
                          const sp_online_schedule *sch, sp_error *err);

/* Waits for a running round to finish and serves its snapshot now (a
 * checkpoint between requests, or the end of a stream). */
void sp_online_wait(sp_online *o);

/* One learner, several speculation objects in turn (a server slot whose
 * requests use different settings): attach makes s (drafting with `like`)
 * the one observed and gives it the newest snapshot; detach gives the
 * attached spec `like` back and stops observing it, so it may outlive the
 * learner. Only one spec is attached at a time; call both from the
 * generating thread, between generations. */
sp_status sp_online_attach(sp_online *o, sp_spec *s, sp_error *err);
void sp_online_detach(sp_online *o);

/* The draft the learner serves now: its newest snapshot, or `like`. */
const sp_model *sp_online_model(const sp_online *o);

typedef struct sp_online_stats {
    int64_t observed, buffered; /* positions seen, positions in the buffer */
    int64_t rounds, steps;      /* training rounds and optimizer steps done */
    int64_t swaps;              /* snapshots served */
    int64_t errors;             /* rounds or swaps that failed (last message in last_err) */
    double last_loss;           /* mean loss of the last round */
    double t_train;             /* seconds spent training (all threads' wall time) */
} sp_online_stats;

sp_online_stats sp_online_get_stats(sp_online *o, sp_error *last_err);

#endif
