/* sp_chat: chat templates, messages rendered to the prompt text a chat model
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
 * Roles: system, user, assistant. Families without a system role (gemma,
 * mistral) put the system text before the first user message, as their
 * own templates do. */
#ifndef SP_CHAT_H
#define SP_CHAT_H

#include <stddef.h>

#include "sp_status.h"

typedef enum sp_chat_tmpl {
    SP_CHAT_NONE = 0,
    SP_CHAT_CHATML,
    SP_CHAT_LLAMA3,
    SP_CHAT_GEMMA,
    SP_CHAT_PHI3,
    SP_CHAT_LLAMA2,
    SP_CHAT_MISTRAL,
    SP_CHAT_HARMONY
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
/* The list of names, for messages: "chatml, llama3, gemma, phi3, llama2, mistral, gpt-oss". */
const char *sp_chat_names(void);

/* Renders n messages (n >= 1) followed by the assistant's opening, into a
 * malloc'd NUL-terminated string (*out; free it). SP_ERR_ARG for an unknown
 * role, a system message after the first position, or no messages. */
sp_status sp_chat_render(sp_chat_tmpl t, const sp_chat_msg *msgs, int n, char **out, sp_error *err);

/* The text that ends an assistant turn in this family ("<|im_end|>",
 * "<|eot_id|>", ...), also a stop sequence for generation. */
const char *sp_chat_end_of_turn(sp_chat_tmpl t);

#endif
