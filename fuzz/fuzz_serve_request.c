/* Fuzz target: the server's request side (tools/serve_request.c), as
 * `specula serve` runs it, without the HTTP server or a model. Input: a
 * 3-byte header, then the request body.
 *   byte 0: bits 0-2 the URL (the five endpoints, an unknown path, or the
 *           first line as the path), bits 3-4 the method (POST, GET, PUT),
 *           bit 5 an API key is set (the first line is the Authorization
 *           header then), bit 6 a draft model is loaded, bit 7 the body is
 *           over the server's limit (413); a first line used so is not
 *           part of the body;
 *   byte 1: the chat template (none and every family), in the low 3 bits;
 *   byte 2: the context size, 1 + 16 * byte.
 * A body the router lets through is parsed and validated against those
 * limits (sampling, stop strings, the "speculative" object through
 * sp_spec_config_json and the speculation layer, chat messages through the
 * template); a request that parses is answered with its own prompt text as
 * the generation, cut in pieces by the stop strings and streamed on UTF-8
 * boundaries as the server does, then the final objects. Every failure must
 * be an OpenAI error object; a request that parses must satisfy the limits
 * (checked here: abort otherwise). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "serve_request.h"
#include "sp_spec.h"
#include "spec_config.h"

static void dump(json_t *j) {
    if (!j) abort();
    char *t = json_dumps(j, JSON_COMPACT);
    if (!t) abort();
    free(t);
    json_decref(j);
}

/* The generation of a parsed request: its prompt text as output, in pieces
 * of 1..8 bytes, through the stop scan and the streaming boundary. */
static void answer(const serve_req *r) {
    const char *src = r->text ? r->text : "";
    const size_t n = strlen(src);
    char *text = malloc(n + 1);
    if (!text) abort();
    size_t len = 0, sent = 0, at = 0;
    bool stop = false, first = true;
    sp_spec_stats sst;
    memset(&sst, 0, sizeof sst);
    serve_out o = {.id = "cmpl-1", .model = "fuzz", .created = 1, .text = text, .finish = "length", .draft = -1,
                      .sst = &sst};
    text[0] = 0;
    while (at < n && !stop) {
        size_t k = 1 + (unsigned char)src[at] % 8;
        if (k > n - at) k = n - at;
        memcpy(text + len, src + at, k);
        at += k, len += k;
        text[len] = 0;
        stop = serve_stop_scan(r, text, &len, k, sent);
        if (len > n || sent > len) abort();
        if (stop) break; /* as the server: the rest goes out as the final chunk */
        const size_t upto = serve_ready(r, text, len, false);
        if (upto > len) abort();
        if (upto > sent) {
            o.len = len;
            dump(serve_chunk_json(r, &o, text + sent, upto - sent, first, NULL, false));
            first = false;
            sent = upto;
        }
        o.n_gen++;
    }
    if (stop) o.finish = "stop";
    o.len = len;
    const size_t upto = serve_ready(r, text, len, true);
    if (upto != len) abort();
    if (upto > sent) dump(serve_chunk_json(r, &o, text + sent, upto - sent, first, NULL, false));
    dump(serve_chunk_json(r, &o, "", 0, false, o.finish, false));
    if (r->include_usage) dump(serve_chunk_json(r, &o, "", 0, false, NULL, true));
    dump(serve_final_json(r, &o));
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const urls[] = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                       "/metrics", "/v1/nothing"};
    static const char *const methods[] = {"POST", "GET", "PUT", "POST"};
    if (size < 3) return 0;
    const uint8_t flags = data[0];
    const char *body = (const char *)data + 3;
    size_t len = size - 3;
    /* the first line, for a path or an Authorization header (the body
     * starts after it then) */
    char line[128];
    size_t ln = 0;
    if ((flags & 7) >= 6 || (flags & 32)) {
        while (ln < len && ln < sizeof line - 1 && body[ln] != '\n') line[ln] = body[ln], ln++;
        body += ln < len ? ln + 1 : ln, len -= ln < len ? ln + 1 : ln;
    }
    line[ln] = 0;

    const char *url = (flags & 7) < 6 ? urls[flags & 7] : line;
    const char *method = methods[(flags >> 3) & 3];
    const bool authorized = serve_key_ok(line, flags & 32 ? "sk-fuzz" : NULL);
    if (!(flags & 32) && !authorized) abort(); /* no key: everything is authorised */
    serve_err e;
    memset(&e, 0, sizeof e);
    const serve_ep ep = serve_endpoint(url);
    if (serve_route(ep, method, url, ep == SP_SERVE_HEALTH || authorized, flags & 128, &e)) {
        if (e.status < 400 || e.status > 599) abort();
        dump(serve_err_json(&e));
        return 0;
    }
    if (ep != SP_SERVE_COMPLETIONS && ep != SP_SERVE_CHAT) return 0;

    serve_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.n_ctx = 1 + 16 * (int32_t)data[2];
    lim.sampling = sp_sampler_default_params();
    lim.seed = 7;
    lim.has_draft = flags & 64;
    lim.tmpl = (sp_chat_tmpl)(data[1] % (SP_CHAT_MISTRAL + 1));
    lim.lowbit_types = data[1] & 1 ? 1ull << SP_GGML_Q8_0 : 0;
    sp_spec_config c;
    sp_spec_config_init(&c, NULL);
    sp_error err = {0};
    if (sp_spec_config_finish(&c, lim.has_draft, &err) != SP_OK) abort();
    lim.defaults = c.params;

    serve_req r;
    memset(&r, 0, sizeof r);
    if (serve_parse(&lim, body, len, ep, &r, &e)) {
        if (e.status != 400 && e.status != 500) abort();
        dump(serve_err_json(&e));
    } else {
        /* what the server relies on */
        if (!r.text || r.n_stop < 0 || r.n_stop > SP_SERVE_N_STOP_MAX) abort();
        if (r.max_tokens != -1 && (r.max_tokens < 1 || r.max_tokens > lim.n_ctx)) abort();
        if (sp_sampler_params_check(&r.smp, &err) != SP_OK) abort();
        if (sp_spec_config_check_params(&r.spec, &err) != SP_OK) abort();
        if (r.spec.draft.kind == SP_DRAFT_LOWBIT && !(lim.lowbit_types >> r.spec.draft.lowbit_type & 1)) abort();
        answer(&r);
    }
    serve_req_free(&r);
    return 0;
}
