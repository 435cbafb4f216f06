/* sp_tokenizer: text <-> token ids for the two tokenizer families of the
 * llama ecosystem:
 *   SPM   SentencePiece-style BPE over scored pieces with byte fallback
 *         (<0xNN> tokens), "\u2581" for space, a leading space added to the
 *         text (GGUF tokenizer.ggml.model = "llama"; llama2.c tokenizer.bin).
 *   BPE   GPT-2 byte-level BPE with ranked merges and the byte-to-unicode map
 *         (tokenizer.ggml.model = "gpt2"; Llama 3, Qwen), pre-tokenised by a
 *         regex-equivalent splitter.
 * BOS/EOS ids and whether BOS is added come from the model metadata. */
#ifndef SP_TOKENIZER_H
#define SP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_gguf.h"
#include "sp_status.h"

typedef enum sp_tokenizer_kind { SP_TOK_SPM = 1, SP_TOK_BPE = 2 } sp_tokenizer_kind;

typedef struct sp_tokenizer sp_tokenizer;

/* From the tokenizer.ggml.* keys of an open GGUF file. A BPE vocabulary's
 * pre-tokeniser comes from tokenizer.ggml.pre (llama.cpp's "default" when
 * absent); a name Specula has no rules for is SP_ERR_UNSUPPORTED. */
sp_status sp_tokenizer_load_gguf(const sp_gguf *g, sp_tokenizer **out, sp_error *err);
/* The same with the pre-tokeniser forced to `pre_override` (NULL: from the
 * file), for files whose name is unknown but whose rules are known. */
sp_status sp_tokenizer_load_gguf_pre(const sp_gguf *g, const char *pre_override, sp_tokenizer **out,
                                     sp_error *err);
/* True for the tokenizer.ggml.pre names Specula tokenises by. */
bool sp_tokenizer_pre_known(const char *name);
/* From a llama2.c tokenizer.bin (int32 max_token_length, then per token:
 * f32 score, int32 len, bytes). vocab_size comes from the checkpoint header.
 * Ids 0/1/2 are unk/BOS/EOS as in llama2.c. */
sp_status sp_tokenizer_load_llama2c(const char *path, int32_t vocab_size, sp_tokenizer **out,
                                    sp_error *err);
void sp_tokenizer_free(sp_tokenizer *t);

sp_tokenizer_kind sp_tokenizer_kind_of(const sp_tokenizer *t);
int32_t sp_tokenizer_n_vocab(const sp_tokenizer *t);
int32_t sp_tokenizer_bos(const sp_tokenizer *t);   /* -1 if none */
int32_t sp_tokenizer_eos(const sp_tokenizer *t);   /* -1 if none */
bool sp_tokenizer_add_bos(const sp_tokenizer *t);  /* metadata default */
/* True for the padding entries converters add when a model's embedding
 * matrix is larger than its tokenizer (Qwen pads to a multiple of 128): the
 * piece of id i is exactly "[PAD<i>]". */
bool sp_tokenizer_is_padding(const sp_tokenizer *t, int32_t id);
/* n_vocab minus the trailing run of padding entries: ids at or above this
 * are never real tokens. */
int32_t sp_tokenizer_n_unpadded(const sp_tokenizer *t);
/* True for end-of-generation tokens (EOS, and EOT-like control tokens). */
bool sp_tokenizer_is_eog(const sp_tokenizer *t, int32_t id);

/* Encode `len` bytes of text (need not be NUL-terminated). Writes at most
 * `cap` ids; *n_out is the number produced. SP_ERR_RANGE if cap is too small
 * (then *n_out is the number needed). BOS is prepended when add_bos
 * (SP_ERR_STATE if the vocabulary has none). The text is plain: control
 * tokens written in it (e.g. "<|endoftext|>") are not recognised, while
 * user-defined tokens (token_type 4) are matched literally, longest first.
 * Empty text gives no tokens besides BOS. Any bytes, including invalid
 * UTF-8, round-trip through decode (SPM via <0xNN> tokens). */
sp_status sp_tokenizer_encode(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                              int32_t *out, int32_t cap, int32_t *n_out, sp_error *err);

/* Encoding options: add_bos as above; parse_special: control and
 * user-defined token texts written in the text ("<|im_start|>",
 * "<|begin_of_text|>") become those single tokens, as chat templates need
 * (llama.cpp's parse_special). sp_tokenizer_encode is this with
 * parse_special false. */
typedef struct sp_tok_encode_params {
    bool add_bos;
    bool parse_special;
} sp_tok_encode_params;
sp_status sp_tokenizer_encode_ex(const sp_tokenizer *t, const char *text, size_t len,
                                 const sp_tok_encode_params *p, int32_t *out, int32_t cap,
                                 int32_t *n_out, sp_error *err);

/* Bytes of one token as it appears in generated text, given the previous
 * token (SPM drops the leading space of the first piece after BOS; control
 * tokens such as BOS/EOS decode to nothing; byte tokens to their raw byte).
 * Returns the number of bytes written into buf (at most cap; pieces are
 * short), so streaming output is just the concatenation. */
size_t sp_tokenizer_decode_token(const sp_tokenizer *t, int32_t prev, int32_t id, char *buf,
                                 size_t cap);

/* Decode a whole sequence into buf (NUL-terminated, truncated to cap-1);
 * returns the full length the text needs (like snprintf). */
size_t sp_tokenizer_decode(const sp_tokenizer *t, const int32_t *ids, int32_t n, char *buf,
                           size_t cap);

/* The raw vocabulary string of a token (for debugging/tests). */
sp_str sp_tokenizer_token_text(const sp_tokenizer *t, int32_t id);

#endif
