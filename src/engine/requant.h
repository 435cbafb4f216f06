/* requant.h: re-quantised copies of a model in memory (the low-bit self-draft).
 * Internal: the lowbit drafter and its settings use it. */
#ifndef SP_REQUANT_H
#define SP_REQUANT_H

#include <stdbool.h>

#include "sp_model.h"

/* A copy of `src` whose matrices are re-quantised to `type` (one that
 * sp_model_requantize_supported accepts) in memory: the low-precision
 * self-draft. Shares the tokenizer (the copy must be freed before src). */
sp_status sp_model_requantize(const sp_model *src, sp_ggml_type type, sp_model **out,
                              sp_error *err);
/* True for the types sp_model_requantize can make (the weight types Specula
 * can write as well as compute with). */
bool sp_model_requantize_supported(sp_ggml_type type);

#endif
