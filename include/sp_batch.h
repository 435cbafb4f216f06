/* sp_batch: continuous batching in the library. Many threads, each
 * generating one sequence on its own context of one model, hand their
 * forwards to a batcher, which evaluates the waiting ones together in one
 * shared pass (sp_forward_multi: one read of the weights for all of them,
 * each sequence in its own KV cache under its own positions and mask).
 * Each sequence's logits equal sp_forward's over its context alone, bit
 * for bit, so output does not depend on what else runs.
 *
 * sp_batch_forward has the forward hook's signature (sp_forward_fn,
 * sp_generate.h) with the batcher as ud: give it to sp_gen_params.forward,
 * sp_spec_set_forward (the target's forwards) or sp_spec_set_draft_forward
 * (a draft model's forwards: a batcher of the draft model). A thread that
 * decodes step after step joins (sp_batch_join) before and leaves after,
 * so a pass waits for every joined sequence's forward (or, for a
 * straggler, half the last pass's time, 20 us to 1 ms) before it runs.
 * There is no batcher thread: the caller whose forward completes the set
 * runs the pass (flat combining).
 *
 * Cost attribution (the adaptive draft length's cost model): a pass of R
 * rows for N sequences is modelled as T(R) = a + b R, b fitted over recent
 * passes by exponentially weighted least squares; a sequence of n rows is
 * charged (T - b R) / N + b n, which add up to T (alone: all of T). Before
 * the fit has two distinct batch sizes, b = T / R. */
#ifndef SP_BATCH_H
#define SP_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_model.h"
#include "sp_status.h"

typedef struct sp_batcher sp_batcher;

/* A batcher for contexts of model m whose passes carry at most max_rows
 * tokens (at most the contexts' max batch; >= 1). */
sp_status sp_batch_init(const sp_model *m, int32_t max_rows, sp_batcher **out, sp_error *err);
void sp_batch_free(sp_batcher *b);

/* One forward of batch on c (a context of the batcher's model) in the next
 * shared pass, exactly as sp_forward(c, batch, logits, err). A batch that
 * fails the shared pass is retried alone, so only its own sequence fails.
 * *cost (may be NULL; left negative when none): the seconds of the pass
 * charged to it. tag 1 counts it as a speculative sequence's in the
 * statistics, 0 as a plain one's. */
sp_status sp_batch_submit(sp_batcher *b, sp_ctx *c, const sp_batch *batch, int tag, float *logits,
                          double *cost, sp_error *err);
/* sp_batch_submit with tag 0, as a forward hook (ud: the sp_batcher). */
sp_status sp_batch_forward(void *ud, sp_ctx *c, const sp_batch *batch, float *logits, double *cost,
                           sp_error *err);

/* A sequence starts (+1) or stops (-1) decoding through the batcher. */
void sp_batch_join(sp_batcher *b, int delta);

typedef struct sp_batch_stats {
    uint64_t passes, seqs, tokens;   /* passes run, sequences and tokens they carried */
    uint64_t spec_seqs, spec_tokens; /* of them, tag 1's */
    uint64_t spec_shared;            /* tag 1 sequences that shared their pass */
    double fit_a, fit_b;             /* the pass-time fit T = a + b R (0 before one exists) */
} sp_batch_stats;
sp_batch_stats sp_batch_get_stats(sp_batcher *b);

#endif
