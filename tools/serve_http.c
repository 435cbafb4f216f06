/* serve_http.c: the HTTP side of `specula serve` on libmicrohttpd (one
 * thread per connection): routing and authorisation of each request
 * (through serve_request.c), JSON replies, and streamed responses, which a
 * generation thread writes into a pipe that the connection's reader
 * drains; a client that disconnects closes the pipe, which cancels its
 * generation (a non-streamed request's socket is watched for a hang-up
 * while it generates). Idle connections time out after --http-timeout;
 * requests with ambiguous framing get 400 and a closed connection
 * (serve_framing.c). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"
#include "serve_compat.h"
#include "serve_framing.h"
#include "clock.h"

static bool write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

static const char *finish_reason(const serve_run *g) {
    return g->stop_hit || g->gst.hit_eog ? "stop" : "length";
}

/* What the response objects report about g. */
static serve_out out_of(const serve_run *g) {
    const server *S = g->srv;
    return (serve_out){.id = g->id, .model = S->model_id, .created = g->created, .text = g->text, .len = g->len,
                          .finish = finish_reason(g), .n_prompt = g->n_prompt, .n_gen = g->n_gen, .n_cached = g->n_cached,
                          .sst = &g->sst, .draft = g->draft, .t_prompt = g->gst.t_prefill, .t_gen = g->gst.t_generate,
                          .seed = g->r.seed, .fingerprint = S->fingerprint};
}

/* The server's settings requests are checked against. */
static serve_limits limits(const server *S) {
    return (serve_limits){.n_ctx = S->n_ctx, .sampling = S->sampling, .seed = S->seed, .defaults = S->defaults,
                             .has_draft = S->dm != NULL || S->head != NULL, .tmpl = S->tmpl,
                             .lowbit_types = S->lowbit_mask};
}

/* One SSE chunk with text delta s[0..n) (n may be 0) and finish (NULL while running). */
static bool send_chunk(serve_run *g, const char *s, size_t n, const char *finish, bool usage_only) {
    const serve_out o = out_of(g);
    json_t *c = serve_chunk_json(&g->r, &o, s, n, g->sent == 0, finish, usage_only);
    if (!c) return false;
    char *txt = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    if (!txt) return false;
    bool ok = write_all(g->wfd, "data: ", 6) && write_all(g->wfd, txt, strlen(txt)) && write_all(g->wfd, "\n\n", 2);
    free(txt);
    return ok;
}

/* Streams the text that can no longer be cut by a stop string. */
static bool stream_ready(serve_run *g, bool final) {
    const size_t upto = serve_ready(&g->r, g->text, g->len, final);
    if (upto <= g->sent) return true;
    bool ok = send_chunk(g, g->text + g->sent, upto - g->sent, NULL, false);
    g->sent = upto;
    return ok;
}

bool serve_on_tokens(void *ud, const int32_t *ids, int32_t n) {
    serve_run *g = ud;
    const server *S = g->srv;
    const double now = sp_now();
    for (int32_t i = 0; i < n; i++) {
        if (g->n_gen == 0) g->t_first = now;
        g->n_gen++;
        char piece[256];
        size_t k = sp_tokenizer_decode_token(S->tok, g->prev, ids[i], piece, sizeof piece);
        g->prev = ids[i];
        if (g->len + k + 1 > g->cap) {
            size_t nc = (g->cap + k + 1) * 2;
            char *t = realloc(g->text, nc);
            if (!t) {
                g->failed = true;
                return false;
            }
            g->text = t, g->cap = nc;
        }
        memcpy(g->text + g->len, piece, k);
        g->len += k;
        g->text[g->len] = 0;
        if (serve_stop_scan(&g->r, g->text, &g->len, k, g->sent)) g->stop_hit = true;
        if (g->stop_hit) break;
    }
    g->t_last = now;
    if (g->wfd >= 0 && !g->stop_hit && !stream_ready(g, false)) return false; /* client gone */
    if (g->sock >= 0 && now - g->t_watch > 0.02) { /* a non-streamed request's client hung up? */
        g->t_watch = now;
        struct pollfd pf = {.fd = g->sock, .events = POLLRDHUP};
        if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            g->client_gone = true;
            return false;
        }
    }
    return !g->stop_hit && !atomic_load(&g->cancel) && !atomic_load(&S->stopping);
}

static void run_free(serve_run *g) {
    serve_req_free(&g->r);
    free(g->prompt);
    free(g->out);
    free(g->text);
    free(g);
}

static json_t *final_json(serve_run *g) {
    const serve_out o = out_of(g);
    return serve_final_json(&g->r, &o);
}

static void *stream_thread(void *arg) {
    serve_run *g = arg;
    serve_generate(g);
    if (g->err.status) {
        json_t *e = serve_err_json(&g->err);
        char *t = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        if (t) write_all(g->wfd, "data: ", 6), write_all(g->wfd, t, strlen(t)), write_all(g->wfd, "\n\n", 2);
        free(t);
    } else if (stream_ready(g, true) && send_chunk(g, "", 0, finish_reason(g), false) &&
               (!g->r.include_usage || send_chunk(g, "", 0, NULL, true))) {
    }
    write_all(g->wfd, "data: [DONE]\n\n", 14);
    close(g->wfd);
    g->wfd = -1;
    return NULL;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    serve_run *g = cls;
    for (;;) {
        ssize_t k = read(g->rfd, buf, max);
        if (k > 0) return k;
        if (k == 0) {
            g->stream_done = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (errno != EINTR) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* Called by libmicrohttpd when the streamed response ends or the client
 * goes away: cancel, wait for the generation, release the slot. */
static void stream_free(void *cls) {
    serve_run *g = cls;
    serve_metrics_count(&g->srv->met, g->r.ep, g->stream_done ? 200 : 499); /* 499: the client went away first */
    atomic_store(&g->cancel, true);
    close(g->rfd); /* a blocked writer gets EPIPE and stops */
    if (g->thread_started) pthread_join(g->thread, NULL);
    if (g->wfd >= 0) close(g->wfd);
    serve_slot_release(g->srv, g->sl);
    run_free(g);
}

/* close: the connection closes after the reply (ambiguous framing; and
 * every reply while draining). */
static enum MHD_Result reply_json_ex(server *S, struct MHD_Connection *c, unsigned status, json_t *j, int ep,
                                     bool close) {
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!txt) return MHD_NO;
    size_t n = strlen(txt);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, txt, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (close || atomic_load(&S->draining)) MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    serve_metrics_count(&S->met, ep, status);
    return ret;
}

static enum MHD_Result reply_json(server *S, struct MHD_Connection *c, unsigned status, json_t *j, int ep) {
    return reply_json_ex(S, c, status, j, ep, false);
}

static enum MHD_Result reply_err(server *S, struct MHD_Connection *c, const serve_err *e, int ep) {
    return reply_json(S, c, e->status, serve_err_json(e), ep);
}

static enum MHD_Result reply_text(server *S, struct MHD_Connection *c, unsigned status, char *txt, const char *type, int ep) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    serve_metrics_count(&S->met, ep, status);
    return ret;
}

/* The Authorization header against the key, in time independent of where
 * they differ. */
static bool authorized(const server *S, struct MHD_Connection *c) {
    return serve_key_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), S->api_key);
}

typedef struct conn {
    char *body;
    size_t len;
    bool too_big;
    bool generation; /* a generation request: counted in S->inflight until answered */
} conn;

static void conn_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)t;
    server *S = cls;
    conn *k = *con_cls;
    if (k && k->generation) {
        atomic_fetch_sub(&S->inflight, 1);
        /* back to the short idle timeout for keep-alive */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, S->http_timeout);
    }
    if (k) free(k->body), free(k);
    *con_cls = NULL;
}

/* A fresh sampling seed for a request that gave none (below 2^53, exact
 * in every JSON reader). */
static uint64_t fresh_seed(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        static atomic_ullong ctr;
        x = ((uint64_t)time(NULL) << 20) ^ (uint64_t)(sp_now() * 1e9) ^ atomic_fetch_add(&ctr, 0x9E3779B97F4A7C15ull);
    }
    return x & ((1ull << 53) - 1);
}

static enum MHD_Result handle_generate(server *S, struct MHD_Connection *c, conn *k, int ep) {
    serve_run *g = calloc(1, sizeof *g);
    if (!g) return MHD_NO;
    g->srv = S;
    g->wfd = g->rfd = g->sock = -1;
    g->t0 = sp_now();
    g->created = (long long)time(NULL);
    static atomic_ullong next_id;
    snprintf(g->id, sizeof g->id, "%s-%llu", ep == SP_SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&next_id, 1) + 1);
    const serve_limits lim = limits(S);
    if (serve_parse(&lim, k->body ? k->body : "", k->len, (serve_ep)ep, &g->r, &g->err) || serve_prepare(g) ||
        !(g->sl = serve_slot_acquire(S, g->prompt, g->n_prompt, g->r.cache_prompt, &g->err))) {
        enum MHD_Result ret = reply_err(S, c, &g->err, ep);
        run_free(g);
        return ret;
    }
    if (!g->r.seed_set) g->r.seed = fresh_seed();
    /* the whole body is in: no idle timeout while it generates (the reply
     * may come long after the last byte read) */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    k->generation = true; /* answered in full before a draining server stops */
    atomic_fetch_add(&S->inflight, 1);
    if (!g->r.stream) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        g->sock = ci ? ci->connect_fd : -1;
        serve_generate(g);
        serve_slot_release(S, g->sl);
        enum MHD_Result ret;
        if (g->client_gone) { /* nobody to answer: close, count as 499 (client closed request) */
            serve_metrics_count(&S->met, ep, 499);
            ret = MHD_NO;
        } else {
            ret = g->err.status ? reply_err(S, c, &g->err, ep) : reply_json(S, c, 200, final_json(g), ep);
        }
        run_free(g);
        return ret;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        serve_slot_release(S, g->sl);
        serve_bad(&g->err, 500, NULL, NULL, "cannot create a pipe");
        enum MHD_Result ret = reply_err(S, c, &g->err, ep);
        run_free(g);
        return ret;
    }
    g->rfd = fds[0], g->wfd = fds[1];
    if (pthread_create(&g->thread, NULL, stream_thread, g) == 0) g->thread_started = true;
    else close(g->wfd), g->wfd = -1;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, stream_reader, g, stream_free);
    if (!r) {
        stream_free(g);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret; /* counted when the stream ends (stream_free) */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *S = cls;
    conn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        const serve_ep ep = serve_endpoint(url);
        const char *bad = serve_framing_error(c);
        if (bad) { /* answered before any body is read; the connection closes */
            serve_err e = {0};
            serve_bad(&e, 400, NULL, "bad_framing", "%s", bad);
            return reply_json_ex(S, c, 400, serve_err_json(&e), ep, true);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!k->too_big && k->len + *upload_size <= SP_SERVE_BODY_MAX) {
            char *b = realloc(k->body, k->len + *upload_size + 1);
            if (b) {
                memcpy(b + k->len, upload, *upload_size);
                k->body = b, k->len += *upload_size, b[k->len] = 0;
            } else {
                k->too_big = true;
            }
        } else {
            k->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const serve_ep ep = serve_endpoint(url);
    serve_err e = {0};
    if (serve_route(ep, method, url, ep == SP_SERVE_HEALTH || authorized(S, c), k->too_big, &e))
        return reply_err(S, c, &e, ep);
    if (ep == SP_SERVE_HEALTH) return reply_json(S, c, 200, json_pack("{s:s}", "status", "ok"), ep);
    if (ep == SP_SERVE_MODELS)
        return reply_json(S, c, 200,
                          json_pack("{s:s, s:[{s:s, s:s, s:i, s:s}]}", "object", "list", "data", "id", S->model_id,
                                    "object", "model", "created", 0, "owned_by", "specula"),
                          ep);
    if (ep == SP_SERVE_METRICS) {
        char *t = serve_metrics_text(S);
        if (!t) return MHD_NO;
        return reply_text(S, c, 200, t, "text/plain; version=0.0.4", ep);
    }
    if (ep == SP_SERVE_TOKENIZE || ep == SP_SERVE_DETOKENIZE) {
        json_t *j = (ep == SP_SERVE_TOKENIZE ? serve_tokenize : serve_detokenize)(S->tok, k->body ? k->body : "",
                                                                                 k->len, &e);
        return j ? reply_json(S, c, 200, j, ep) : reply_err(S, c, &e, ep);
    }
    if (atomic_load(&S->draining)) {
        serve_bad(&e, 503, NULL, "shutting_down", "the server is shutting down");
        return reply_err(S, c, &e, ep);
    }
    return handle_generate(S, c, k, ep);
}

/* Connections: one thread each (a generation blocks its connection's
 * thread), up to max_conn; an idle connection (headers not sent, or
 * keep-alive between requests) is closed after S->http_timeout seconds, so
 * idle clients hold no more than their descriptors, briefly. MHD_USE_ITC:
 * the daemon can be quiesced (stop accepting) when draining. */
struct MHD_Daemon *serve_http_start(server *S, const struct sockaddr_in *addr, unsigned max_conn) {
    return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                                MHD_USE_ITC,
                            0, NULL, NULL, on_request, S, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)addr,
                            MHD_OPTION_NOTIFY_COMPLETED, conn_done, S, MHD_OPTION_CONNECTION_TIMEOUT,
                            S->http_timeout, MHD_OPTION_CONNECTION_LIMIT, max_conn, MHD_OPTION_STRICT_FOR_CLIENT, 1,
                            MHD_OPTION_END);
}
