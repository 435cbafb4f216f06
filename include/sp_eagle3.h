/* sp_eagle3: EAGLE-3 draft heads, as llama.cpp defines them (architecture
 * `eagle3` in GGUF, written by its converter from EAGLE-3 checkpoints).
 *
 * A head drafts from the target's own hidden states: for three target
 * layers (`eagle3.target_layers`, the residual stream entering each; the
 * target's layer count means the final pre-norm state) it fuses the rows
 * by one matrix (`fc`, optionally after an RMSNorm `enc.output_norm`) into
 * a feature g of the head's width, then runs one decoder layer over the
 * pair (next token, g): attention input [RMSNorm(embedding); RMSNorm(g)]
 * (`blk.0.attn_norm`, `blk.0.attn_norm_2`), the attention's residual g (or
 * the normed g when `eagle3.norm_before_residual`), a SwiGLU FFN, and its
 * own output head over a draft vocabulary mapped to target ids by `d2t`.
 * The token embeddings and the output matrix are the head's own where the
 * file has them, else the target's. Drafting further steps feeds the
 * layer's pre-norm output back as g. The drafter (`--draft eagle3`) is in
 * src/speculation/draft.c; the forward pass is src/engine/eagle3.c. */
#ifndef SP_EAGLE3_H
#define SP_EAGLE3_H

#include <stdint.h>

#include "sp_model.h"
#include "sp_status.h"

typedef struct sp_eagle3 sp_eagle3;

/* Loads a head for `target` (which must outlive it: the head may use its
 * embeddings and output matrix). Errors name the file and what does not
 * fit: not an eagle3 file, a tensor's shape or type, target layers outside
 * the target, a hidden size other than the target's, a vocabulary other
 * than the target's, d2t ids out of range or repeated. */
sp_status sp_eagle3_load(const char *path, const sp_model *target, sp_eagle3 **out, sp_error *err);
void sp_eagle3_free(sp_eagle3 *h);
/* e.g. "eagle3 d64 h4/2 ffn172 vocab 512->512 layers 1,2,4" */
const char *sp_eagle3_desc(const sp_eagle3 *h);
/* The three target layers whose taps the head reads. */
const int32_t *sp_eagle3_target_layers(const sp_eagle3 *h);

#endif
