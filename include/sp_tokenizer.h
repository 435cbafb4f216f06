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

#include "sp_status.h"

typedef enum sp_tokenizer_kind { SP_TOK_SPM = 1, SP_TOK_BPE = 2 } sp_tokenizer_kind;

typedef struct sp_tokenizer sp_tokenizer;

/* True for the tokenizer.ggml.pre names Specula tokenises by. */
bool sp_tokenizer_pre_known(const char *name);
void sp_tokenizer_free(sp_tokenizer *t);

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

/* ---- chat templates, messages rendered to the prompt text a chat model
 * was trained on.
 *
 * Specula does not run Jinja: it recognises the template families of the
 * models it loads from the text of tokenizer.chat_template (or takes one by
 * name) and renders them itself. The rendered text holds the family's
 * special tokens as text ("<|im_start|>", ...); tokenise it with special
 * tokens recognised (sp_tokenizer_encode_ex) so each becomes one token.
 * The BOS token is not written: the tokenizer adds it when the vocabulary
 * asks for it.
 *
 * Families (name: what is recognised in a template text):
 *   chatml  (Qwen, many fine-tunes)  "<|im_start|>"
 *   llama3                           "<|start_header_id|>"
 *   gemma                            "<start_of_turn>"
 *   phi3                             "<|assistant|>" and "<|end|>"
 *   llama2                           "[INST]" and "<<SYS>>"
 *   mistral                          "[INST]" without "<<SYS>>"
 *   gpt-oss (harmony)                "<|start|>" and "<|channel|>"; rendered as
 *                                    llama.cpp's built-in gpt-oss template (no
 *                                    Jinja system preamble); the model answers
 *                                    "<|channel|>final<|message|>...<|return|>"
 *   qwen3.5 (Qwen3.5/3.6)            "<|im_start|>", "<think>" and "<function=";
 *                                    rendered as llama.cpp renders its Jinja
 *                                    template (no tools): contents trimmed of
 *                                    ASCII white space, earlier answers' reasoning
 *                                    dropped, a user message required, and the
 *                                    answer opened with "<think>\n" (thinking on,
 *                                    llama.cpp's default)
 *   qwen3.5-nothink                  by name only: qwen3.5 with thinking off
 *                                    (enable_thinking=false: an empty
 *                                    "<think>\n\n</think>\n\n" opens the answer)
 * Roles: system, user, assistant. Families without a system role (gemma,
 * mistral) put the system text before the first user message, as their
 * own templates do. */
typedef enum sp_chat_tmpl {
    SP_CHAT_NONE = 0,
    SP_CHAT_CHATML,
    SP_CHAT_LLAMA3,
    SP_CHAT_GEMMA,
    SP_CHAT_PHI3,
    SP_CHAT_LLAMA2,
    SP_CHAT_MISTRAL,
    SP_CHAT_HARMONY,
    SP_CHAT_QWEN35,
    SP_CHAT_QWEN35_NOTHINK
} sp_chat_tmpl;

typedef struct sp_chat_msg {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8, NUL-terminated */
} sp_chat_msg;

/* The family of a tokenizer.chat_template text; SP_CHAT_NONE if none of the
 * above is recognised (or text is NULL). */
sp_chat_tmpl sp_chat_detect(const char *text);
/* A family by name (the names above); SP_CHAT_NONE for an unknown name. */
sp_chat_tmpl sp_chat_by_name(const char *name);
const char *sp_chat_name(sp_chat_tmpl t);
/* The names above, comma separated, for messages. */
const char *sp_chat_names(void);

/* Renders n messages (n >= 1) followed by the assistant's opening, into a
 * malloc'd NUL-terminated string (*out; free it). SP_ERR_ARG for an unknown
 * role, a system message after the first position, or no messages. */
sp_status sp_chat_render(sp_chat_tmpl t, const sp_chat_msg *msgs, int n, char **out, sp_error *err);

/* The text that ends an assistant turn in this family ("<|im_end|>",
 * "<|eot_id|>", ...), also a stop sequence for generation. */
const char *sp_chat_end_of_turn(sp_chat_tmpl t);

#endif
