/* tokenizer_load.h: tokenizers from files (an open GGUF file's metadata, as
 * the model loader reads it and the tokenize tool with a forced
 * pre-tokeniser; a llama2.c tokenizer.bin), and the raw vocabulary string of
 * a token. Internal: users load a model (sp_model.h) and take its tokenizer. */
#ifndef SP_TOKENIZER_LOAD_H
#define SP_TOKENIZER_LOAD_H

#include "gguf.h"
#include "sp_tokenizer.h"

/* From the tokenizer.ggml.* keys of an open GGUF file. A BPE vocabulary's
 * pre-tokeniser comes from tokenizer.ggml.pre (llama.cpp's "default" when
 * absent); a name Specula has no rules for is SP_ERR_UNSUPPORTED. */
sp_status sp_tokenizer_load_gguf(const sp_gguf *g, sp_tokenizer **out, sp_error *err);
/* The same with the pre-tokeniser forced to `pre_override` (NULL: from the
 * file), for files whose name is unknown but whose rules are known. */
sp_status sp_tokenizer_load_gguf_pre(const sp_gguf *g, const char *pre_override, sp_tokenizer **out,
                                     sp_error *err);

/* The raw vocabulary string of a token (for debugging/tests). */
sp_str sp_tokenizer_token_text(const sp_tokenizer *t, int32_t id);

/* From a llama2.c tokenizer.bin (int32 max_token_length, then per token:
 * f32 score, int32 len, bytes). vocab_size comes from the checkpoint header.
 * Ids 0/1/2 are unk/BOS/EOS as in llama2.c. */
sp_status sp_tokenizer_load_llama2c(const char *path, int32_t vocab_size, sp_tokenizer **out,
                                    sp_error *err);

#endif
