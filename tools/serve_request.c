/* serve_request: the request and response side of `specula serve`
 * (serve_request.h): routing, the OpenAI request bodies, stop strings and
 * streaming boundaries, the response objects. No HTTP server, no model, no
 * globals: the server's settings come in an serve_limits. */
#include "serve_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "serve_compat.h"

const char *const SP_SERVE_EP_NAMES[SP_SERVE_EP_N] = {"/v1/completions", "/v1/chat/completions", "/v1/models",
                                                      "/health", "/metrics", "/tokenize", "/detokenize", "other"};

int serve_bad(serve_err *e, unsigned status, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->status = status;
    e->type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
    e->has_param = param != NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code = code;
    return -1;
}

json_t *serve_err_json(const serve_err *e) {
    json_t *o = json_object();
    json_object_set_new(o, "message", json_string(e->msg));
    json_object_set_new(o, "type", json_string(e->type));
    json_object_set_new(o, "param", e->has_param ? json_string(e->param) : json_null());
    json_object_set_new(o, "code", e->code ? json_string(e->code) : json_null());
    json_t *r = json_object();
    json_object_set_new(r, "error", o);
    return r;
}

static bool num(const json_t *v, double *out) {
    if (json_is_integer(v)) *out = (double)json_integer_value(v);
    else if (json_is_real(v)) *out = json_real_value(v);
    else return false;
    return true;
}

/* Text of a chat message's content: a string, or an array of
 * {"type": "text", "text": ...} parts (joined). NULL if neither. */
static char *content_text(const json_t *c) {
    if (json_is_string(c)) return strdup(json_string_value(c));
    if (!json_is_array(c)) return NULL;
    size_t n = 0, i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const json_t *t = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(t)) return NULL;
        n += json_string_length(t);
    }
    char *s = malloc(n + 1), *w = s;
    if (!s) return NULL;
    json_array_foreach(c, i, p) {
        const json_t *t = json_object_get(p, "text");
        memcpy(w, json_string_value(t), json_string_length(t));
        w += json_string_length(t);
    }
    *w = 0;
    return s;
}

static int parse_messages(const serve_limits *L, const json_t *msgs, serve_req *r, serve_err *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return serve_bad(e, 400, "messages", NULL, "messages: must be a non-empty array");
    size_t n = json_array_size(msgs);
    if (n > 4096) return serve_bad(e, 400, "messages", NULL, "messages: at most 4096 messages");
    sp_chat_msg *cm = calloc(n, sizeof *cm);
    char **texts = calloc(n, sizeof *texts);
    int rc = 0;
    for (size_t i = 0; cm && texts && i < n && !rc; i++) {
        const json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            rc = serve_bad(e, 400, "messages", NULL, "messages[%zu]: needs a string role", i);
            break;
        }
        cm[i].role = json_string_value(role);
        if (!strcmp(cm[i].role, "developer")) cm[i].role = "system"; /* OpenAI's newer name */
        if (!(texts[i] = content_text(json_object_get(m, "content"))))
            rc = serve_bad(e, 400, "messages", NULL, "messages[%zu].content: must be a string or text parts", i);
        cm[i].content = texts[i];
    }
    if (!cm || !texts) rc = serve_bad(e, 500, NULL, NULL, "out of memory");
    if (!rc) {
        sp_error se = {0};
        if (sp_chat_render(L->tmpl, cm, (int)n, &r->text, &se))
            rc = serve_bad(e, 400, "messages", NULL, "%s", se.msg);
    }
    for (size_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(cm);
    return rc;
}

/* Fields every endpoint accepts besides its prompt. Unknown fields are
 * refused (a misspelt parameter must not be silently ignored), except
 * "user" and penalties/logprobs at their neutral values. */
static int parse_common(const serve_limits *L, const json_t *j, serve_req *r, serve_err *e) {
    const char *key;
    json_t *v;
    double d;
    json_object_foreach((json_t *)j, key, v) {
        if (!strcmp(key, "model")) {
            if (!json_is_string(v)) return serve_bad(e, 400, key, NULL, "model: must be a string");
            snprintf(r->model, sizeof r->model, "%s", json_string_value(v));
        } else if (!strcmp(key, "prompt") || !strcmp(key, "messages") || !strcmp(key, "user")) {
            continue; /* prompt/messages: per endpoint */
        } else if (!strcmp(key, "max_tokens") || !strcmp(key, "max_completion_tokens")) {
            if (json_is_null(v)) continue;
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > L->n_ctx)
                return serve_bad(e, 400, key, NULL, "%s: must be an integer in [1, %d] (the context size)", key,
                           L->n_ctx);
            r->max_tokens = (int32_t)json_integer_value(v);
        } else if (!strcmp(key, "temperature")) {
            if (json_is_null(v)) continue;
            if (!num(v, &d) || !(d >= 0 && d <= 2))
                return serve_bad(e, 400, key, NULL, "temperature: must be a number in [0, 2]");
            r->smp.temperature = (float)d;
        } else if (!strcmp(key, "top_p")) {
            if (json_is_null(v)) continue;
            if (!num(v, &d) || !(d > 0 && d <= 1)) return serve_bad(e, 400, key, NULL, "top_p: must be in (0, 1]");
            r->smp.top_p = (float)d;
        } else if (!strcmp(key, "min_p")) {
            if (json_is_null(v)) continue;
            if (!num(v, &d) || !(d >= 0 && d <= 1)) return serve_bad(e, 400, key, NULL, "min_p: must be in [0, 1]");
            r->smp.min_p = (float)d;
        } else if (!strcmp(key, "top_k")) {
            if (json_is_null(v)) continue;
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24))
                return serve_bad(e, 400, key, NULL, "top_k: must be an integer >= 0");
            r->smp.top_k = (int32_t)json_integer_value(v);
        } else if (!strcmp(key, "seed")) {
            if (json_is_null(v)) continue;
            if (!json_is_integer(v)) return serve_bad(e, 400, key, NULL, "seed: must be an integer");
            r->seed = (uint64_t)json_integer_value(v);
            r->seed_set = true;
        } else if (!strcmp(key, "n")) {
            if (!json_is_integer(v) || json_integer_value(v) != 1)
                return serve_bad(e, 400, key, NULL, "n: only 1 is supported");
        } else if (!strcmp(key, "stream")) {
            if (json_is_null(v)) continue;
            if (!json_is_boolean(v)) return serve_bad(e, 400, key, NULL, "stream: must be a boolean");
            r->stream = json_is_true(v);
        } else if (!strcmp(key, "ignore_eos")) {
            if (json_is_null(v)) continue;
            if (!json_is_boolean(v)) return serve_bad(e, 400, key, NULL, "ignore_eos: must be a boolean");
            r->ignore_eos = json_is_true(v);
        } else if (!strcmp(key, "cache_prompt")) {
            if (json_is_null(v)) continue;
            if (!json_is_boolean(v)) return serve_bad(e, 400, key, NULL, "cache_prompt: must be a boolean");
            r->cache_prompt = json_is_true(v);
        } else if (!strcmp(key, "stream_options")) {
            if (json_is_null(v)) continue;
            const json_t *u = json_object_get(v, "include_usage");
            if (!json_is_object(v) || (u && !json_is_boolean(u)))
                return serve_bad(e, 400, key, NULL,
                                    "stream_options: must be an object with a boolean include_usage");
            r->include_usage = json_is_true(u);
        } else if (!strcmp(key, "stop")) {
            if (json_is_null(v)) continue;
            size_t i;
            json_t *s;
            if (json_is_string(v)) {
                v = json_pack("[O]", v);
                if (!v) return serve_bad(e, 500, NULL, NULL, "out of memory");
            } else {
                json_incref(v);
            }
            int rc = 0;
            if (!json_is_array(v) || json_array_size(v) > SP_SERVE_N_STOP_MAX)
                rc = serve_bad(e, 400, key, NULL, "stop: must be a string or a list of at most %d strings",
                                  SP_SERVE_N_STOP_MAX);
            json_array_foreach(v, i, s) {
                if (rc) break;
                if (!json_is_string(s) || json_string_length(s) == 0 || json_string_length(s) > SP_SERVE_STOP_LEN_MAX)
                    rc = serve_bad(e, 400, key, NULL, "stop: each entry must be a string of 1 to %d bytes",
                                      SP_SERVE_STOP_LEN_MAX);
                else if (strlen(json_string_value(s)) != json_string_length(s)) /* "\u0000" */
                    rc = serve_bad(e, 400, key, NULL, "stop: an entry holds a NUL character");
                else
                    memcpy(r->stop[r->n_stop++], json_string_value(s), json_string_length(s) + 1);
            }
            json_decref(v);
            if (rc) return rc;
        } else if (!strcmp(key, "speculative")) {
            if (json_is_null(v)) continue;
            sp_spec_config c;
            sp_spec_config_init(&c, &L->defaults);
            sp_error se = {0};
            char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!txt) return serve_bad(e, 500, "speculative", NULL, "speculative: out of memory");
            sp_status st = sp_spec_config_json_text(&c, txt, strlen(txt), &se);
            free(txt);
            if (st || sp_spec_config_finish(&c, L->has_draft, &se))
                return serve_bad(e, 400, "speculative", NULL, "speculative: %s", se.msg);
            r->spec = c.params;
            if (c.off_by_n_max) r->spec.draft.kind = SP_DRAFT_NONE;
            /* a low-bit copy of the model only of a type the operator allowed */
            const sp_ggml_type lt = r->spec.draft.lowbit_type;
            if (r->spec.draft.kind == SP_DRAFT_LOWBIT && ((unsigned)lt >= 64 || !(L->lowbit_types >> lt & 1)))
                return serve_bad(e, 400, "speculative", NULL,
                                 "speculative: lowbit: %s is not a type this server allows (--lowbit-types)",
                                 sp_ggml_type_name(lt));
        } else if (!strcmp(key, "frequency_penalty") || !strcmp(key, "presence_penalty")) {
            if (!json_is_null(v) && (!num(v, &d) || d != 0))
                return serve_bad(e, 400, key, NULL, "%s: not supported (only 0)", key);
        } else if (!strcmp(key, "logprobs") || !strcmp(key, "echo")) {
            if (!json_is_null(v) && !json_is_false(v))
                return serve_bad(e, 400, key, NULL, "%s: not supported", key);
        } else {
            return serve_bad(e, 400, key, NULL, "unrecognized request argument: %s", key);
        }
    }
    sp_error se = {0};
    if (sp_sampler_params_check(&r->smp, &se) || sp_spec_config_check_sampling(&r->spec, &r->smp, &se))
        return serve_bad(e, 400, NULL, NULL, "%s", se.msg);
    return 0;
}

int serve_parse(const serve_limits *L, const char *body, size_t len, serve_ep ep, serve_req *r,
                   serve_err *e) {
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    if (!j) return serve_bad(e, 400, NULL, NULL, "could not parse the JSON body: %s (line %d)", je.text, je.line);
    int rc = 0;
    if (!json_is_object(j)) rc = serve_bad(e, 400, NULL, NULL, "the body must be a JSON object");
    r->ep = ep;
    r->max_tokens = -1;
    r->cache_prompt = true;
    r->smp = L->sampling;
    r->seed = L->seed;
    r->seed_set = false;
    r->spec = L->defaults;
    if (!rc) rc = serve_spec_flat_merge(j, e);
    if (!rc) rc = parse_common(L, j, r, e);
    if (!rc && ep == SP_SERVE_CHAT) {
        if (L->tmpl == SP_CHAT_NONE)
            rc = serve_bad(e, 400, "messages", NULL,
                              "this model has no chat template Specula recognises; start the server with "
                              "--chat-template NAME (%s)", sp_chat_names());
        else
            rc = parse_messages(L, json_object_get(j, "messages"), r, e);
        /* the family's end-of-turn text also ends the answer, should the
         * vocabulary not mark it as an end-of-generation token */
        const char *eot = sp_chat_end_of_turn(L->tmpl);
        if (!rc && r->n_stop < SP_SERVE_N_STOP_MAX && *eot)
            snprintf(r->stop[r->n_stop++], SP_SERVE_STOP_LEN_MAX + 1, "%s", eot);
    } else if (!rc) {
        const json_t *p = json_object_get(j, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!json_is_string(p))
            rc = serve_bad(e, 400, "prompt", NULL, "prompt: must be a string (or a list of one string)");
        else if (!(r->text = strdup(json_string_value(p))))
            rc = serve_bad(e, 500, NULL, NULL, "out of memory");
    }
    json_decref(j);
    return rc;
}

void serve_req_free(serve_req *r) {
    free(r->text);
    r->text = NULL;
}

serve_ep serve_endpoint(const char *url) {
    for (int ep = 0; ep < SP_SERVE_OTHER; ep++)
        if (!strcmp(url, SP_SERVE_EP_NAMES[ep])) return (serve_ep)ep;
    return SP_SERVE_OTHER;
}

int serve_route(serve_ep ep, const char *method, const char *url, bool authorized, bool too_big,
                   serve_err *e) {
    const bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
    const bool wants_post = ep <= SP_SERVE_CHAT || ep == SP_SERVE_TOKENIZE || ep == SP_SERVE_DETOKENIZE;
    if (ep == SP_SERVE_OTHER) return serve_bad(e, 404, NULL, "not_found", "no such endpoint: %s %s", method, url);
    if ((wants_post && !post) || (!wants_post && !get))
        return serve_bad(e, 405, NULL, "method_not_allowed", "%s needs %s", url, wants_post ? "POST" : "GET");
    if (ep != SP_SERVE_HEALTH && !authorized)
        return serve_bad(e, 401, NULL, "invalid_api_key", "a valid API key is needed (Authorization: Bearer KEY)");
    if (too_big)
        return serve_bad(e, 413, NULL, "request_too_large", "the request body is larger than %d bytes",
                            SP_SERVE_BODY_MAX);
    return 0;
}

bool serve_key_ok(const char *h, const char *key) {
    if (!key) return true;
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(key), n = a > b ? a : b;
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)((i < a ? (unsigned char)h[i] : 0) ^ (i < b ? (unsigned char)key[i] : 0));
    return diff == 0;
}

/* ---- generated text ---- */

bool serve_stop_scan(const serve_req *r, char *text, size_t *len, size_t k, size_t sent) {
    bool hit_any = false;
    for (int s = 0; s < r->n_stop; s++) {
        size_t sl = strlen(r->stop[s]);
        size_t from = *len >= k + sl ? *len - k - sl : 0;
        char *hit = strstr(text + from, r->stop[s]);
        if (hit && (size_t)(hit - text) >= sent) {
            *len = (size_t)(hit - text);
            text[*len] = 0;
            hit_any = true;
        }
    }
    return hit_any;
}

/* Length of the longest prefix of text[0..n) that ends on a UTF-8
 * character boundary (an incomplete trailing sequence is held back). */
static size_t utf8_complete(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i == 0) return n;
    unsigned char c = (unsigned char)s[i - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return back + 1 >= need ? n : i - 1;
}

size_t serve_ready(const serve_req *r, const char *text, size_t len, bool final) {
    if (final) return len;
    size_t hold = 0;
    for (int i = 0; i < r->n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        for (size_t k = sl ? sl - 1 : 0; k > hold; k--) /* longest text suffix that starts stop i */
            if (k <= len && !memcmp(text + len - k, r->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return utf8_complete(text, len - hold);
}

static json_t *text_json(const char *s, size_t n) {
    size_t badn = 0;
    return cli_json_text(s, n, &badn);
}

static json_t *spec_metrics(const serve_out *o) {
    json_t *m = json_object(), *pos = json_array();
    const sp_spec_stats *s = o->sst;
    /* accepted tokens per draft position: position i accepted when tau > i */
    for (int i = 0; i < SP_SPEC_MAX_GAMMA; i++) {
        int64_t c = 0;
        for (int t = i + 1; t < SP_SPEC_MAX_GAMMA + 2; t++) c += s->accept_hist[t];
        if (i >= 1 && c == 0) break;
        json_array_append_new(pos, json_integer(c));
    }
    int64_t drafts = s->iterations - s->gamma_hist[0];
    json_object_set_new(m, "drafter", json_string(s->drafter ? s->drafter : "none"));
    json_object_set_new(m, "verifier", json_string(s->verifier ? s->verifier : "none"));
    json_object_set_new(m, "num_drafts", json_integer(drafts));
    json_object_set_new(m, "num_draft_tokens", json_integer(s->drafted));
    json_object_set_new(m, "num_accepted_tokens", json_integer(s->accepted));
    json_object_set_new(m, "acceptance_rate", json_real(sp_spec_acceptance_rate(s)));
    json_object_set_new(m, "mean_acceptance_length", json_real(drafts ? (double)s->accepted / drafts : 0));
    json_object_set_new(m, "num_accepted_tokens_per_pos", pos);
    if (o->draft >= 0) json_object_set_new(m, "draft_model", json_integer(o->draft));
    json_t *w = json_object();
    json_object_set_new(w, "speculative_decoding", m);
    return w;
}

/* llama-server's timings object (milliseconds and tokens per second). */
static json_t *timings_json(const serve_out *o) {
    const double pms = o->t_prompt * 1e3, gms = o->t_gen * 1e3;
    return json_pack("{s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "prompt_n", o->n_prompt, "prompt_ms", pms,
                     "prompt_per_token_ms", o->n_prompt ? pms / o->n_prompt : 0.0, "prompt_per_second",
                     pms > 0 ? o->n_prompt * 1e3 / pms : 0.0, "predicted_n", o->n_gen, "predicted_ms", gms,
                     "predicted_per_token_ms", o->n_gen ? gms / o->n_gen : 0.0, "predicted_per_second",
                     gms > 0 ? o->n_gen * 1e3 / gms : 0.0);
}

static void add_extras(json_t *j, const serve_out *o, bool finished) {
    json_object_set_new(j, "system_fingerprint", json_string(o->fingerprint ? o->fingerprint : "specula"));
    if (!finished) return;
    json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(j, "timings", timings_json(o));
}

static json_t *usage_json(const serve_out *o) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", o->n_prompt, "completion_tokens", o->n_gen,
                     "total_tokens", o->n_prompt + o->n_gen, "prompt_tokens_details", "cached_tokens", o->n_cached);
}

json_t *serve_final_json(const serve_req *r, const serve_out *o) {
    const bool chat = r->ep == SP_SERVE_CHAT;
    json_t *j = json_object(), *choices = json_array(), *ch = json_object();
    json_object_set_new(j, "id", json_string(o->id));
    json_object_set_new(j, "object", json_string(chat ? "chat.completion" : "text_completion"));
    json_object_set_new(j, "created", json_integer(o->created));
    json_object_set_new(j, "model", json_string(o->model));
    json_object_set_new(ch, "index", json_integer(0));
    if (chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", text_json(o->text ? o->text : "", o->len));
        json_object_set_new(ch, "message", msg);
    } else {
        json_object_set_new(ch, "text", text_json(o->text ? o->text : "", o->len));
        json_object_set_new(ch, "logprobs", json_null());
    }
    json_object_set_new(ch, "finish_reason", json_string(o->finish));
    json_array_append_new(choices, ch);
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "usage", usage_json(o));
    json_object_set_new(j, "metrics", spec_metrics(o));
    add_extras(j, o, true);
    return j;
}

json_t *serve_chunk_json(const serve_req *r, const serve_out *o, const char *s, size_t n, bool first,
                            const char *finish, bool usage_only) {
    const bool chat = r->ep == SP_SERVE_CHAT;
    json_t *c = json_object(), *choices = json_array();
    json_object_set_new(c, "id", json_string(o->id));
    json_object_set_new(c, "object", json_string(chat ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(c, "created", json_integer(o->created));
    json_object_set_new(c, "model", json_string(o->model));
    if (!usage_only) {
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(0));
        if (chat) {
            json_t *delta = json_object();
            if (first && !finish) json_object_set_new(delta, "role", json_string("assistant"));
            if (n) json_object_set_new(delta, "content", text_json(s, n));
            json_object_set_new(ch, "delta", delta);
        } else {
            json_object_set_new(ch, "text", text_json(s, n));
            json_object_set_new(ch, "logprobs", json_null());
        }
        json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
        json_array_append_new(choices, ch);
    }
    json_object_set_new(c, "choices", choices);
    if (usage_only) json_object_set_new(c, "usage", usage_json(o));
    if (finish) json_object_set_new(c, "metrics", spec_metrics(o));
    add_extras(c, o, finish != NULL);
    return c;
}
