/* chat: chat template families and their rendering (see sp_tokenizer.h). The
 * layouts are the ones the families' own templates produce (role headers,
 * turn ends, where the system text goes). */
#include "sp_tokenizer.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    sp_chat_tmpl t;
    const char *name;
    const char *eot;
} FAMILIES[] = {
    {SP_CHAT_CHATML, "chatml", "<|im_end|>"}, {SP_CHAT_LLAMA3, "llama3", "<|eot_id|>"},
    {SP_CHAT_GEMMA, "gemma", "<end_of_turn>"}, {SP_CHAT_PHI3, "phi3", "<|end|>"},
    {SP_CHAT_LLAMA2, "llama2", "</s>"},        {SP_CHAT_MISTRAL, "mistral", "</s>"},
    {SP_CHAT_HARMONY, "gpt-oss", "<|return|>"},
};
#define N_FAMILIES (int)(sizeof FAMILIES / sizeof FAMILIES[0])

sp_chat_tmpl sp_chat_detect(const char *s) {
    if (!s) return SP_CHAT_NONE;
    if (strstr(s, "<|im_start|>")) return SP_CHAT_CHATML;
    if (strstr(s, "<|start_header_id|>")) return SP_CHAT_LLAMA3;
    if (strstr(s, "<start_of_turn>")) return SP_CHAT_GEMMA;
    if (strstr(s, "<|start|>") && strstr(s, "<|channel|>")) return SP_CHAT_HARMONY;
    if (strstr(s, "<|assistant|>") && strstr(s, "<|end|>")) return SP_CHAT_PHI3;
    if (strstr(s, "[INST]")) return strstr(s, "<<SYS>>") ? SP_CHAT_LLAMA2 : SP_CHAT_MISTRAL;
    return SP_CHAT_NONE;
}

sp_chat_tmpl sp_chat_by_name(const char *name) {
    for (int i = 0; name && i < N_FAMILIES; i++)
        if (!strcmp(FAMILIES[i].name, name)) return FAMILIES[i].t;
    return SP_CHAT_NONE;
}

const char *sp_chat_name(sp_chat_tmpl t) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (FAMILIES[i].t == t) return FAMILIES[i].name;
    return "none";
}

const char *sp_chat_names(void) { return "chatml, llama3, gemma, phi3, llama2, mistral, gpt-oss"; }

const char *sp_chat_end_of_turn(sp_chat_tmpl t) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (FAMILIES[i].t == t) return FAMILIES[i].eot;
    return "";
}

/* A growing string; on allocation failure `failed` is set and nothing more
 * is written. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
        b->failed = true;
        return;
    }
    if (b->n + (size_t)need + 1 > b->cap) {
        size_t cap = (b->n + (size_t)need + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)need;
}

static int role_of(const char *r) {
    if (!r) return -1;
    if (!strcmp(r, "system")) return 0;
    if (!strcmp(r, "user")) return 1;
    if (!strcmp(r, "assistant")) return 2;
    return -1;
}

sp_status sp_chat_render(sp_chat_tmpl t, const sp_chat_msg *msgs, int n, char **out, sp_error *err) {
    *out = NULL;
    if (t == SP_CHAT_NONE) return sp_fail(err, SP_ERR_ARG, "chat template: none chosen");
    if (n < 1) return sp_fail(err, SP_ERR_ARG, "messages: at least one message is needed");
    for (int i = 0; i < n; i++) {
        int r = role_of(msgs[i].role);
        if (r < 0)
            return sp_fail(err, SP_ERR_ARG, "messages[%d].role: must be system, user or assistant", i);
        if (r == 0 && i > 0)
            return sp_fail(err, SP_ERR_ARG, "messages[%d]: a system message must come first", i);
        if (!msgs[i].content) return sp_fail(err, SP_ERR_ARG, "messages[%d].content: missing", i);
    }
    sbuf b = {0};
    const char *sys = role_of(msgs[0].role) == 0 ? msgs[0].content : NULL;
    const int first = sys ? 1 : 0;
    switch (t) {
    case SP_CHAT_CHATML:
        for (int i = 0; i < n; i++) put(&b, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role, msgs[i].content);
        put(&b, "<|im_start|>assistant\n");
        break;
    case SP_CHAT_LLAMA3:
        for (int i = 0; i < n; i++)
            put(&b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", msgs[i].role, msgs[i].content);
        put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case SP_CHAT_HARMONY:
        /* harmony as llama.cpp's built-in gpt-oss template writes it: every
         * message one <|start|>ROLE<|message|>TEXT, ended by <|return|> for
         * the assistant and <|end|> otherwise */
        for (int i = 0; i < n; i++)
            put(&b, "<|start|>%s<|message|>%s%s", msgs[i].role, msgs[i].content,
                role_of(msgs[i].role) == 2 ? "<|return|>" : "<|end|>");
        put(&b, "<|start|>assistant");
        break;
    case SP_CHAT_PHI3:
        for (int i = 0; i < n; i++) put(&b, "<|%s|>\n%s<|end|>\n", msgs[i].role, msgs[i].content);
        put(&b, "<|assistant|>\n");
        break;
    case SP_CHAT_GEMMA: {
        bool sys_done = sys == NULL;
        for (int i = first; i < n; i++) {
            bool user = role_of(msgs[i].role) == 1;
            put(&b, "<start_of_turn>%s\n", user ? "user" : "model");
            if (user && !sys_done) put(&b, "%s\n\n", sys), sys_done = true;
            put(&b, "%s<end_of_turn>\n", msgs[i].content);
        }
        if (!sys_done) put(&b, "<start_of_turn>user\n%s<end_of_turn>\n", sys);
        put(&b, "<start_of_turn>model\n");
        break;
    }
    case SP_CHAT_LLAMA2:
    case SP_CHAT_MISTRAL: {
        /* [INST] user [/INST] assistant</s>; the system text opens the first
         * user turn (llama2 wraps it in <<SYS>>). Later turns start with the
         * BOS text, as the templates write it. */
        bool sys_done = sys == NULL, any = false;
        for (int i = first; i < n; i++) {
            if (role_of(msgs[i].role) == 1) {
                put(&b, "%s[INST] ", any ? "<s>" : "");
                if (!sys_done) {
                    if (t == SP_CHAT_LLAMA2) put(&b, "<<SYS>>\n%s\n<</SYS>>\n\n", sys);
                    else put(&b, "%s\n\n", sys);
                    sys_done = true;
                }
                put(&b, "%s [/INST]", msgs[i].content);
            } else {
                put(&b, " %s</s>", msgs[i].content);
            }
            any = true;
        }
        if (!sys_done) put(&b, "[INST] %s [/INST]", sys);
        break;
    }
    default: break;
    }
    if (b.failed || !b.p) {
        free(b.p);
        return sp_fail(err, SP_ERR_NOMEM, "chat template: out of memory");
    }
    *out = b.p;
    return SP_OK;
}
