/* sp_online: online speculative decoding (OSD, Liu et al.): the draft keeps
 * learning from the target's distributions while it serves.
 *
 * Every speculative iteration already computes the target's (adjusted)
 * distribution at each position it verified; sp_online_observe keeps them in
 * a bounded replay buffer (the newest `buffer` positions; each as its
 * preceding `window` tokens and the target row cut to its top-k entries plus
 * the remaining mass). sp_online_update runs AdamW steps of the draft's F32
 * master copy on random batches from the buffer (forward KL by default, the
 * loss at each example's last position), and sp_online_export writes the
 * trained draft as a GGUF file that replaces the served draft. The output
 * stays exactly the target's distribution at every moment: verification
 * always uses the target; only the proposals change. */
#ifndef SP_ONLINE_H
#define SP_ONLINE_H

#include <stdint.h>

#include "sp_loss.h"
#include "sp_status.h"

typedef struct sp_online_params {
    int32_t topk;       /* target row entries kept (plus the rest), 1..256; default 16 */
    int32_t buffer;     /* positions kept (newest), default 4096 */
    int32_t window;     /* context tokens per example, default 32 */
    int32_t batch;      /* examples per step, default 16 */
    float lr;           /* AdamW learning rate, default 1e-3 */
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

#endif
