/* serve_request.h: the OpenAI side of `specula serve` without the HTTP
 * server (cmd_serve.c) or a model: routing and authorisation of a request,
 * parsing and validating its JSON body (sampling, stop strings, the
 * "speculative" object through sp_spec_config_json_text, chat messages rendered
 * through the chat template) against the server's settings, and building
 * the response objects and stream chunks from generated text. Every input
 * gets an OpenAI error object (status, message, type, param, code), never a
 * crash; fuzz/fuzz_serve_request.c feeds it arbitrary bytes. */
#ifndef SP_SERVE_REQUEST_H
#define SP_SERVE_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_tokenizer.h"
#include "specula.h"

#define SP_SERVE_BODY_MAX (1 << 20) /* request body bytes (larger: 413) */
#define SP_SERVE_N_STOP_MAX 4
#define SP_SERVE_STOP_LEN_MAX 256

typedef enum serve_ep {
    SP_SERVE_COMPLETIONS, SP_SERVE_CHAT, SP_SERVE_MODELS, SP_SERVE_HEALTH, SP_SERVE_METRICS, SP_SERVE_TOKENIZE,
    SP_SERVE_DETOKENIZE, SP_SERVE_OTHER,
    SP_SERVE_EP_N
} serve_ep;
extern const char *const SP_SERVE_EP_NAMES[SP_SERVE_EP_N];

/* The server's settings a request is checked against and starts from. */
typedef struct serve_limits {
    int32_t n_ctx;             /* max_tokens <= n_ctx */
    sp_sampler_params sampling; /* defaults */
    uint64_t seed;
    sp_spec_params defaults;   /* speculation defaults (a request's object overrides) */
    bool has_draft;            /* a draft model is loaded */
    sp_chat_tmpl tmpl;         /* SP_CHAT_NONE: chat requests are refused */
    uint64_t lowbit_types;     /* bit t: a request may draft with a low-bit copy of type t */
} serve_limits;

typedef struct serve_req {
    serve_ep ep;
    bool stream, include_usage;
    bool cache_prompt;  /* reuse a slot's cached prefix (default true, as llama-server) */
    bool ignore_eos;    /* generate max_tokens through end-of-generation tokens (llama-server's) */
    int32_t max_tokens; /* -1: not given */
    sp_sampler_params smp;
    uint64_t seed;
    bool seed_set;      /* the request gave its seed (else the server draws one) */
    int n_stop;
    char stop[SP_SERVE_N_STOP_MAX][SP_SERVE_STOP_LEN_MAX + 1];
    sp_spec_params spec;
    char *text; /* the prompt text (rendered for chat); free with serve_req_free */
    char model[256];
} serve_req;

/* An OpenAI error: HTTP status, message, type, param (may be absent), code. */
typedef struct serve_err {
    unsigned status;
    char msg[400];
    char param[64]; /* copied: the request's JSON is freed before the reply */
    bool has_param;
    const char *type, *code; /* static strings */
} serve_err;

/* Fills e (type from the status); returns -1. */
int serve_bad(serve_err *e, unsigned status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* {"error": {message, type, param, code}}. */
json_t *serve_err_json(const serve_err *e);

/* The endpoint of a URL path (SP_SERVE_OTHER when none). */
serve_ep serve_endpoint(const char *url);
/* The checks before a body is read: 404 unknown endpoint, 405 wrong
 * method, 401 not authorised (every endpoint but /health), 413 body over
 * SP_SERVE_BODY_MAX. 0 when the request may go on, else -1 with e. */
int serve_route(serve_ep ep, const char *method, const char *url, bool authorized, bool too_big,
                   serve_err *e);
/* An Authorization header value against the API key (NULL key: anything
 * goes), in time independent of where they differ. */
bool serve_key_ok(const char *header, const char *key);

/* Parses and validates a completions or chat body (len bytes, need not be
 * terminated) into r under the limits: 0, or -1 with e (r->text is then
 * freed or NULL). Unknown fields are refused. */
int serve_parse(const serve_limits *lim, const char *body, size_t len, serve_ep ep, serve_req *r,
                   serve_err *e);
void serve_req_free(serve_req *r);

/* ---- generated text ---- */

/* Appends a decoded piece of k bytes ending at text[len) (already added):
 * if a stop string now occurs at or after `sent`, cuts text there (len and
 * text[len] = 0 updated) and returns true. */
bool serve_stop_scan(const serve_req *r, char *text, size_t *len, size_t k, size_t sent);
/* Bytes of text[0..len) that may be streamed now: those a stop string can
 * no longer cut and that end on a UTF-8 character boundary (all of them
 * when final). */
size_t serve_ready(const serve_req *r, const char *text, size_t len, bool final);

/* What a response reports about one generation. */
typedef struct serve_out {
    const char *id, *model; /* response id, model id */
    long long created;
    const char *text;       /* generated text after stop handling */
    size_t len;
    const char *finish;     /* "stop" or "length" */
    int32_t n_prompt, n_gen;
    int32_t n_cached;       /* prompt tokens taken from the slot's cache */
    const sp_spec_stats *sst;
    int draft; /* the -md index it drafted with, -1 for none */
    double t_prompt, t_gen; /* seconds of prefill and of generation (timings) */
    uint64_t seed;          /* the sampling seed used (given or drawn) */
    const char *fingerprint; /* system_fingerprint: the build and model */
} serve_out;

/* The non-streamed response object (completion or chat.completion), with
 * llama-server's "timings" (prompt_n, prompt_ms, prompt_per_token_ms,
 * prompt_per_second, predicted_n, ...), "system_fingerprint" and the
 * "seed" used. */
json_t *serve_final_json(const serve_req *r, const serve_out *o);
/* One stream chunk with text delta s[0..n) (n may be 0); first: nothing
 * sent yet (a chat delta then carries the role); finish NULL while
 * running (the finishing chunk carries timings and seed, every chunk the
 * system_fingerprint); usage_only: the final usage chunk. */
json_t *serve_chunk_json(const serve_req *r, const serve_out *o, const char *s, size_t n, bool first,
                            const char *finish, bool usage_only);

#endif
