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
    {SP_CHAT_HARMONY, "gpt-oss", "<|return|>"}, {SP_CHAT_QWEN35, "qwen3.5", "<|im_end|>"},
    {SP_CHAT_QWEN35_NOTHINK, "qwen3.5-nothink", "<|im_end|>"},
};
#define N_FAMILIES (int)(sizeof FAMILIES / sizeof FAMILIES[0])

sp_chat_tmpl sp_chat_detect(const char *s) {
    if (!s) return SP_CHAT_NONE;
    if (strstr(s, "<|im_start|>") && strstr(s, "<think>") && strstr(s, "<function=")) return SP_CHAT_QWEN35;
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

const char *sp_chat_names(void) {
    return "chatml, llama3, gemma, phi3, llama2, mistral, gpt-oss, qwen3.5, qwen3.5-nothink";
}

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

/* ---- Qwen3.5: its Jinja template's text handling (isspace trim, split) ---- */

typedef struct span {
    const char *p;
    size_t n;
} span;

static bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

static span trim(span s) {
    while (s.n && ws(s.p[0])) s.p++, s.n--;
    while (s.n && ws(s.p[s.n - 1])) s.n--;
    return s;
}

/* First occurrence of needle in s, or NULL. */
static const char *find(span s, const char *needle) {
    const size_t k = strlen(needle);
    for (size_t i = 0; i + k <= s.n; i++)
        if (!memcmp(s.p + i, needle, k)) return s.p + i;
    return NULL;
}

/* Last occurrence of needle in s, or NULL. */
static const char *rfind(span s, const char *needle) {
    const size_t k = strlen(needle);
    for (size_t i = s.n + 1; i-- > 0;)
        if (i + k <= s.n && !memcmp(s.p + i, needle, k)) return s.p + i;
    return NULL;
}

/* An assistant message as the template writes it: content trimmed; with a
 * "</think>", the reasoning is what lies between the last "<think>" before
 * the first "</think>" and that "</think>" (newlines stripped at its ends,
 * then trimmed) and the content what follows the last "</think>" (leading
 * newlines stripped). Reasoning is written only for assistant messages
 * after the last user message. */
static void qwen35_assistant(sbuf *b, const char *text, bool after_query) {
    span c = trim((span){text, strlen(text)}), r = {"", 0};
    const char *close = find(c, "</think>");
    if (close) {
        span head = {c.p, (size_t)(close - c.p)};
        while (head.n && head.p[head.n - 1] == '\n') head.n--;
        const char *open = rfind(head, "<think>");
        if (open) head = (span){open + 7, head.n - (size_t)(open + 7 - head.p)};
        while (head.n && head.p[0] == '\n') head.p++, head.n--;
        r = trim(head);
        const char *last = rfind(c, "</think>") + 8;
        c = (span){last, c.n - (size_t)(last - c.p)};
        while (c.n && c.p[0] == '\n') c.p++, c.n--;
    }
    if (after_query)
        put(b, "<|im_start|>assistant\n<think>\n%.*s\n</think>\n\n%.*s", (int)r.n, r.p, (int)c.n, c.p);
    else
        put(b, "<|im_start|>assistant\n%.*s", (int)c.n, c.p);
    put(b, "<|im_end|>\n");
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
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (role_of(msgs[i].role) == 1) last_user = i;
    if ((t == SP_CHAT_QWEN35 || t == SP_CHAT_QWEN35_NOTHINK) && last_user < 0)
        return sp_fail(err, SP_ERR_ARG, "messages: the qwen3.5 template needs a user message");
    sbuf b = {0};
    const char *sys = role_of(msgs[0].role) == 0 ? msgs[0].content : NULL;
    const int first = sys ? 1 : 0;
    switch (t) {
    case SP_CHAT_CHATML:
        for (int i = 0; i < n; i++) put(&b, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role, msgs[i].content);
        put(&b, "<|im_start|>assistant\n");
        break;
    case SP_CHAT_QWEN35:
    case SP_CHAT_QWEN35_NOTHINK:
        /* Qwen3.5's Jinja template as llama.cpp renders it (no tools):
         * contents trimmed; the generation prompt opens the reasoning, or
         * closes an empty one when thinking is off (enable_thinking=false) */
        for (int i = 0; i < n; i++) {
            const span c = trim((span){msgs[i].content, strlen(msgs[i].content)});
            if (role_of(msgs[i].role) == 2)
                qwen35_assistant(&b, msgs[i].content, i > last_user);
            else
                put(&b, "<|im_start|>%s\n%.*s<|im_end|>\n", msgs[i].role, (int)c.n, c.p);
        }
        put(&b, "<|im_start|>assistant\n%s", t == SP_CHAT_QWEN35 ? "<think>\n" : "<think>\n\n</think>\n\n");
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
