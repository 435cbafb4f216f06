/* Operations tests of `specula serve` (issue 22) over real loopback sockets:
 * HTTP framing strictness on raw sockets (conflicting or unknown framing is
 * a 400 and a closed connection, never a smuggled second request or a hang),
 * 512 idle connections not blocking /health or a completion, a client that
 * disconnects cancelling its request and freeing its slot (not counted as a
 * 200), low-bit drafts only of the types the operator allows (one copy per
 * server), draining shutdown on SIGTERM, static draft lengths and fresh
 * seeds, the context capped at the model's trained length, and llama.cpp /
 * Prometheus compatibility (flat speculative.* keys, _total counters,
 * timings, system_fingerprint, /tokenize and /detokenize). */
#include "serve_testutil.h"

#include <pthread.h>
#include <sys/resource.h>

static const char *stories(void) { return sp_shared("models/stories260K.gguf"); }

static sv_server start(const char *const *extra) { return sv_start_model(stories(), extra); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Sends raw bytes on a new connection and reads what comes back within ms. */
static sv_resp raw(int port, const char *bytes, int ms) {
    int fd = sv_connect(port, ms);
    assert_true(fd >= 0);
    sv_write_all(fd, bytes, strlen(bytes));
    bool eof;
    char *all = sv_read_all(fd, &eof);
    close(fd);
    sv_resp r = sv_parse(all, eof);
    /* a second status line: the server answered a smuggled request */
    if (r.status && strstr(strstr(all, "HTTP/1.1") + 8, "HTTP/1.1 ")) r.status = -1;
    free(all);
    return r;
}

static void expect_refused(int port, const char *what, const char *bytes) {
    const double t0 = now_s();
    sv_resp r = raw(port, bytes, 5000);
    if (r.status != 400 || !r.closed)
        fail_msg("%s: want 400 and a closed connection, got status %d (%s) after %.1f s: %s", what, r.status,
                 r.closed ? "closed" : "still open", now_s() - t0, r.head);
    sv_resp_free(&r);
}

static void test_framing(void **state) {
    (void)state;
    sv_server s = start(NULL);
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":2}";
    char req[1024];
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), strlen(body) + 5, body);
    expect_refused(s.port, "two Content-Lengths", req);
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), strlen(body), body);
    expect_refused(s.port, "two equal Content-Lengths", req);
    /* the classic smuggling shape: a chunked body whose end hides a request */
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
             "%zx\r\n%s\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
             strlen(body), body);
    expect_refused(s.port, "Content-Length with Transfer-Encoding", req);
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
             strlen(body), body);
    expect_refused(s.port, "an unknown transfer coding", req);
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
             strlen(body), body);
    expect_refused(s.port, "a malformed Transfer-Encoding", req);
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
             "%zx\r\n%s\r\n0\r\n\r\n",
             strlen(body), body);
    expect_refused(s.port, "two Transfer-Encodings", req);
    /* well-formed chunked and plain requests are still served */
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
             "%zx\r\n%s\r\n0\r\n\r\n",
             strlen(body), body);
    sv_resp r = raw(s.port, req, 10000);
    assert_int_equal(r.status, 200);
    sv_resp_free(&r);
    json_decref(sv_ok_json(sv_post(s.port, "/v1/completions", body)));
    assert_int_equal(sv_stop(&s), 0);
}

/* 512 idle connections (no bytes sent) must not keep /health or a
 * completion waiting; a connection that sends nothing is closed after the
 * header timeout. */
static void test_idle_connections(void **state) {
    (void)state;
    enum { N = 512 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < N + 64 && rl.rlim_max >= N + 64) {
        rl.rlim_cur = N + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    const char *extra[] = {"--http-timeout", "2", NULL};
    sv_server s = start(extra);
    static int fds[N];
    int open_n = 0;
    for (int i = 0; i < N; i++)
        if ((fds[i] = sv_connect(s.port, 100)) >= 0) open_n++;
    assert_int_equal(open_n, N);
    usleep(200000); /* the server has accepted them */
    double t0 = now_s();
    sv_resp h = raw(s.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5000);
    const double t_health = now_s() - t0;
    t0 = now_s();
    sv_resp c = raw(s.port,
                    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 32\r\n\r\n"
                    "{\"prompt\":\"Once\",\"max_tokens\":8}",
                    5000);
    const double t_comp = now_s() - t0;
    printf("idle: %d idle connections; /health %d in %.3f s, completion %d in %.3f s\n", N, h.status, t_health,
           c.status, t_comp);
    assert_int_equal(h.status, 200);
    assert_int_equal(c.status, 200);
    assert_true(t_health < 1.0 && t_comp < 1.0);
    sv_resp_free(&h);
    sv_resp_free(&c);
    /* the header timeout closes one that never sends a request */
    t0 = now_s();
    char b;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t k = read(fds[0], &b, 1);
    const double t_close = now_s() - t0;
    printf("idle: an idle connection closed after %.1f s more (--http-timeout 2)\n", t_close);
    assert_true(k <= 0 && t_close < 6);
    /* and one that stops in the middle of a completion's body */
    int slow = sv_connect(s.port, 10000);
    const char *part = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":";
    assert_true(sv_write_all(slow, part, strlen(part)));
    t0 = now_s();
    const ssize_t k2 = read(slow, &b, 1);
    const double t_slow = now_s() - t0;
    printf("idle: a half-sent body closed after %.1f s\n", t_slow);
    assert_true(k2 <= 0 && t_slow < 6);
    close(slow);
    for (int i = 0; i < N; i++) close(fds[i]);
    assert_int_equal(sv_stop(&s), 0);
}

/* Long greedy requests on stories260K (no EOS at temperature 0 for
 * thousands of tokens; about 0.5 ms a token, more under sanitizers). */
#define LONG_BODY(stream) \
    "{\"prompt\":\"Once upon a time\",\"max_tokens\":3000,\"temperature\":0,\"stream\":" stream "}"

/* Sends a request and returns the open connection without reading. */
static int send_req(int port, const char *body) {
    int fd = sv_connect(port, 30000);
    assert_true(fd >= 0);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     strlen(body));
    assert_true(sv_write_all(fd, head, (size_t)n) && sv_write_all(fd, body, strlen(body)));
    return fd;
}

static double running(int port) { return sv_metric(port, "specula:num_requests_running"); }

static double count_status(int port, const char *status) {
    char k[128];
    snprintf(k, sizeof k, "specula:requests_total{endpoint=\"/v1/completions\",status=\"%s\"}", status);
    const double v = sv_metric(port, k);
    return v < 0 ? 0 : v;
}

/* A client that goes away cancels its request, streamed or not: the slot
 * is free again at once (the long request would hold it for seconds), and
 * the request is counted as 499 (client closed), not as a 200. */
static void test_disconnect(void **state) {
    (void)state;
    const char *extra[] = {"--parallel", "1", "-c", "4096", NULL};
    sv_server s = start(extra);
    const char *bodies[2] = {LONG_BODY("false"), LONG_BODY("true")};
    for (int i = 0; i < 2; i++) {
        int fd = send_req(s.port, bodies[i]);
        double t0 = now_s();
        while (running(s.port) < 1 && now_s() - t0 < 5) usleep(10000);
        assert_int_equal((int)running(s.port), 1);
        if (i == 1) { /* the stream has started */
            char buf[256];
            assert_true(read(fd, buf, sizeof buf) > 0);
        }
        close(fd);
        t0 = now_s();
        while (running(s.port) > 0 && now_s() - t0 < 5) usleep(10000);
        const double t_free = now_s() - t0;
        t0 = now_s();
        json_t *j = sv_ok_json(sv_post(s.port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}"));
        json_decref(j);
        const double t_next = now_s() - t0;
        printf("disconnect (%s): slot free %.3f s after the client left, next request %.3f s\n",
               i ? "streamed" : "not streamed", t_free, t_next);
        assert_true(t_free < 1.0 && t_next < 1.0);
    }
    assert_int_equal((int)count_status(s.port, "499"), 2);
    assert_int_equal((int)count_status(s.port, "200"), 2); /* the two short requests only */
    assert_int_equal(sv_stop(&s), 0);
}

/* Low-bit self-drafts only of the types the operator allows, one copy per
 * server shared by the slots; any other type is a 400 before any memory. */
static void test_lowbit_types(void **state) {
    (void)state;
    const char *extra[] = {"--parallel", "2", "--lowbit-types", "q8_0", NULL};
    sv_server s = start(extra);
    json_t *plain = sv_ok_json(sv_post(s.port, "/v1/completions",
                                       "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":0}"));
    const char *lb = "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":0,"
                     "\"speculative\":{\"drafter\":\"lowbit\",\"lowbit\":\"q8_0\",\"gamma\":3}}";
    for (int i = 0; i < 3; i++) {
        json_t *j = sv_ok_json(sv_post(s.port, "/v1/completions", lb));
        assert_string_equal(sv_choice_text(j), sv_choice_text(plain));
        json_decref(j);
    }
    sv_expect_error(sv_post(s.port, "/v1/completions",
                            "{\"prompt\":\"x\",\"speculative\":{\"drafter\":\"lowbit\",\"lowbit\":\"f32\"}}"),
                    400, "--lowbit-types");
    sv_expect_error(sv_post(s.port, "/v1/completions",
                            "{\"prompt\":\"x\",\"speculative\":{\"drafter\":\"lowbit\",\"lowbit\":\"q4_0\"}}"),
                    400, "--lowbit-types");
    sv_expect_error(sv_post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"speculative\":{\"drafter\":\"lowbit\"}}"),
                    400, "--lowbit-types"); /* the default type, q4_0, is not allowed here */
    assert_int_equal((int)sv_metric(s.port, "specula:lowbit_models"), 1);
    json_decref(plain);
    assert_int_equal(sv_stop(&s), 0);
    /* a bad flag value is one clear line and exit 2 */
    char args[1024], buf[2048];
    snprintf(args, sizeof args, "serve -m '%s' --lowbit-types q8_0,nope", stories());
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 2);
    assert_non_null(strstr(buf, "--lowbit-types"));
}

typedef struct bg {
    int port;
    const char *body;
    sv_resp r;
    double t;
} bg;

static void *bg_main(void *arg) {
    bg *b = arg;
    const double t0 = now_s();
    b->r = sv_post(b->port, "/v1/completions", b->body);
    b->t = now_s() - t0;
    return NULL;
}

/* Draining shutdown: SIGTERM stops accepting, answers the queued request
 * with 503 shutting_down and Retry-After, lets the running stream finish
 * (within --shutdown-grace: here cut at the grace, ending with a final
 * chunk and [DONE]), then exits 0. */
static void test_drain(void **state) {
    (void)state;
    const char *extra[] = {"--parallel", "1", "-c", "4096", "--shutdown-grace", "1", NULL};
    sv_server s = start(extra);
    bg run = {.port = s.port, .body = LONG_BODY("true")}, queued = {.port = s.port, .body = LONG_BODY("false")};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, bg_main, &run);
    double t0 = now_s();
    while (running(s.port) < 1 && now_s() - t0 < 5) usleep(10000);
    pthread_create(&t2, NULL, bg_main, &queued);
    t0 = now_s();
    while (sv_metric(s.port, "specula:num_requests_waiting") < 1 && now_s() - t0 < 5) usleep(10000);
    assert_int_equal((int)sv_metric(s.port, "specula:num_requests_waiting"), 1);
    kill(s.pid, SIGTERM);
    pthread_join(t2, NULL);
    pthread_join(t1, NULL);
    int st;
    waitpid(s.pid, &st, 0);
    close(s.err_fd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the queued one: 503 shutting_down with Retry-After */
    if (queued.r.status != 503 || !strstr(queued.r.body, "shutting_down") ||
        !strcasestr(queued.r.head, "Retry-After:"))
        fail_msg("queued: %d %s %s", queued.r.status, queued.r.head, queued.r.body);
    /* the running stream: cut at the grace with a final chunk and [DONE] */
    assert_int_equal(run.r.status, 200);
    const char *done = strstr(run.r.body, "data: [DONE]\n\n");
    if (!done || done[14]) fail_msg("stream does not end with [DONE]: ...%s", run.r.body + strlen(run.r.body) - 200);
    assert_non_null(strstr(run.r.body, "\"finish_reason\":\"length\""));
    printf("drain: queued answered 503 after %.2f s, stream ended after %.2f s\n", queued.t, run.t);
    assert_true(run.t < 8);
    sv_resp_free(&run.r);
    sv_resp_free(&queued.r);
    /* a running request finishes whole within the grace (and, running
     * longer than --http-timeout, still gets its reply) */
    const char *extra2[] = {"--parallel", "1", "-c", "1024", "--shutdown-grace", "30", "--http-timeout", "1", NULL};
    s = start(extra2);
    bg shortr = {.port = s.port, .body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":1000,\"temperature\":0}"};
    pthread_create(&t1, NULL, bg_main, &shortr);
    t0 = now_s();
    while (running(s.port) < 1 && now_s() - t0 < 5) usleep(1000);
    kill(s.pid, SIGTERM);
    pthread_join(t1, NULL);
    waitpid(s.pid, &st, 0);
    close(s.err_fd);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    json_t *j = sv_ok_json(shortr.r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 1000);
    printf("drain: a running request of 1000 tokens finished whole in %.2f s\n", shortr.t);
    json_decref(j);
}

/* A request that sets gamma (or n_max) drafts that static length, so
 * seeded sampled requests reproduce exactly under load; requests without
 * a seed draw a fresh one, reported in the response, which replays them. */
static void test_sampling(void **state) {
    (void)state;
    const char *extra[] = {"-md", stories(), "--parallel", "2", "--adaptive", NULL};
    sv_server s = start(extra);
    enum { N = 4 };
    const char *bodies[2] = {
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":1,\"seed\":7,"
        "\"speculative\":{\"gamma\":3}}",
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":1,\"seed\":7,"
        "\"speculative\":{\"n_max\":5}}"};
    for (int b = 0; b < 2; b++) {
        bg c[N];
        pthread_t th[N];
        for (int i = 0; i < N; i++) c[i] = (bg){.port = s.port, .body = bodies[b]}, pthread_create(&th[i], NULL, bg_main, &c[i]);
        for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
        json_t *first = sv_ok_json(c[0].r);
        for (int i = 1; i < N; i++) {
            json_t *j = sv_ok_json(c[i].r);
            assert_string_equal(sv_choice_text(j), sv_choice_text(first));
            json_decref(j);
        }
        json_decref(first);
    }
    const char *unseeded =
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"temperature\":1,\"speculative\":{\"gamma\":3}}";
    json_t *a = sv_ok_json(sv_post(s.port, "/v1/completions", unseeded));
    json_t *b = sv_ok_json(sv_post(s.port, "/v1/completions", unseeded));
    json_t *sa = json_object_get(a, "seed"), *sb = json_object_get(b, "seed");
    assert_true(json_is_integer(sa) && json_is_integer(sb));
    assert_true(json_integer_value(sa) != json_integer_value(sb));
    char replay[256];
    snprintf(replay, sizeof replay,
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"temperature\":1,\"seed\":%lld,"
             "\"speculative\":{\"gamma\":3}}",
             (long long)json_integer_value(sa));
    json_t *r = sv_ok_json(sv_post(s.port, "/v1/completions", replay));
    assert_string_equal(sv_choice_text(r), sv_choice_text(a));
    assert_int_equal(json_integer_value(json_object_get(r, "seed")), json_integer_value(sa));
    json_decref(a), json_decref(b), json_decref(r);
    assert_int_equal(sv_stop(&s), 0);
}

/* The context is capped at the model's trained length (128 for
 * stories260K: llama.context_length) with a warning, unless --ctx-size
 * says otherwise (then a warning that it is beyond). */
static void test_ctx_cap(void **state) {
    (void)state;
    sv_server s = start(NULL);
    if (!strstr(s.log, "capped at the model's trained length, 128")) fail_msg("no capping warning: %s", s.log);
    sv_expect_error(sv_post(s.port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":200}"), 400, "128");
    assert_int_equal(sv_stop(&s), 0);
    const char *extra[] = {"-c", "1024", NULL};
    s = start(extra);
    if (!strstr(s.log, "trained")) fail_msg("no warning about the trained length: %s", s.log);
    json_t *j = sv_ok_json(sv_post(s.port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":600,\"temperature\":0}"));
    json_decref(j);
    assert_int_equal(sv_stop(&s), 0);
}

/* llama.cpp and Prometheus compatibility. */
static void test_compat(void **state) {
    (void)state;
    sv_server s = start(NULL);
    /* flat speculative.* keys as aliases of the nested object */
    json_t *nested = sv_ok_json(sv_post(s.port, "/v1/completions",
                                        "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0,"
                                        "\"speculative\":{\"drafter\":\"ngram\",\"n_max\":4,\"n_min\":1}}"));
    json_t *flat = sv_ok_json(sv_post(s.port, "/v1/completions",
                                      "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0,"
                                      "\"speculative\":{\"drafter\":\"ngram\"},"
                                      "\"speculative.n_max\":4,\"speculative.n_min\":1,\"speculative.p_min\":0.5}"));
    assert_string_equal(sv_choice_text(flat), sv_choice_text(nested));
    sv_expect_error(sv_post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"speculative.n_max\":\"four\"}"), 400,
                    "n_max");
    sv_expect_error(sv_post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"speculative.bogus\":1}"), 400,
                    "speculative.bogus");
    /* timings and system_fingerprint */
    json_t *t = json_object_get(flat, "timings");
    assert_true(json_is_object(t));
    const char *tk[] = {"prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                        "predicted_per_second"};
    for (size_t i = 0; i < sizeof tk / sizeof tk[0]; i++) (void)sp_json_num(t, tk[i]);
    assert_int_equal((int)sp_json_num(t, "predicted_n"), 24);
    assert_int_equal((int)sp_json_num(t, "prompt_n"),
                     (int)json_integer_value(json_object_get(json_object_get(flat, "usage"), "prompt_tokens")));
    assert_true(json_is_string(json_object_get(flat, "system_fingerprint")));
    json_decref(nested), json_decref(flat);
    /* the stream's last chunk carries them too */
    sv_resp r = sv_post(s.port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4,\"stream\":true}");
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"timings\""));
    assert_non_null(strstr(r.body, "\"system_fingerprint\""));
    sv_resp_free(&r);
    /* counters carry _total after the vLLM names */
    assert_true(sv_metric(s.port, "specula:spec_decode_num_drafts_total") > 0);
    assert_true(sv_metric(s.port, "specula:spec_decode_num_draft_tokens_total") > 0);
    assert_true(sv_metric(s.port, "specula:spec_decode_num_accepted_tokens_total") >= 0);
    assert_true(sv_metric(s.port, "specula:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}") >= 0);
    /* /tokenize and /detokenize as llama-server's */
    json_t *tok = sv_ok_json(sv_post(s.port, "/tokenize", "{\"content\":\"Once upon a time\"}"));
    json_t *ids = json_object_get(tok, "tokens");
    assert_true(json_is_array(ids) && json_array_size(ids) > 1 && json_is_integer(json_array_get(ids, 0)));
    json_t *bos = sv_ok_json(sv_post(s.port, "/tokenize", "{\"content\":\"Once upon a time\",\"add_special\":true}"));
    assert_int_equal(json_array_size(json_object_get(bos, "tokens")), json_array_size(ids) + 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(bos, "tokens"), 0)), 1); /* BOS */
    json_t *pieces = sv_ok_json(sv_post(s.port, "/tokenize", "{\"content\":\"Once upon\",\"with_pieces\":true}"));
    json_t *p0 = json_array_get(json_object_get(pieces, "tokens"), 0);
    assert_true(json_is_integer(json_object_get(p0, "id")) && json_is_string(json_object_get(p0, "piece")));
    char *idtxt = json_dumps(ids, JSON_COMPACT), body[4096];
    snprintf(body, sizeof body, "{\"tokens\":%s}", idtxt);
    free(idtxt);
    json_t *detok = sv_ok_json(sv_post(s.port, "/detokenize", body));
    const char *content = json_string_value(json_object_get(detok, "content"));
    assert_non_null(content);
    assert_non_null(strstr(content, "Once upon a time"));
    sv_expect_error(sv_post(s.port, "/detokenize", "{\"tokens\":[1,999999]}"), 400, "tokens");
    sv_expect_error(sv_post(s.port, "/tokenize", "{\"content\":5}"), 400, "content");
    json_decref(tok), json_decref(bos), json_decref(pieces), json_decref(detok);
    assert_int_equal(sv_stop(&s), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_framing),   cmocka_unit_test(test_idle_connections), cmocka_unit_test(test_disconnect),
    cmocka_unit_test(test_lowbit_types), cmocka_unit_test(test_drain),     cmocka_unit_test(test_sampling),
    cmocka_unit_test(test_ctx_cap),   cmocka_unit_test(test_compat),
};

SP_TEST_MAIN(tests)
