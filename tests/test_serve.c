/* End-to-end tests of `specula serve` over real loopback sockets: the
 * server binary is started on a free port (--port 0; the port is read from
 * its first stderr line) and driven with raw HTTP/1.1: the OpenAI shapes of
 * completions, chat completions and streams, greedy text equal to
 * `specula generate`'s with and without speculation, stop strings, every
 * malformed-request case (4xx with an OpenAI error object), the API key,
 * concurrent requests on several slots, /metrics, and a clean exit 0 on
 * SIGTERM. The official `openai` npm client is driven by tests/js/openai_client.mjs
 * (installed by scripts/setup.sh); without node or the package that test
 * fails and says how to install them. */
#include "serve_testutil.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#if defined(__SANITIZE_ADDRESS__)
#define SP_SLOW 1
#else
#define SP_SLOW 0
#endif

static const char *stories(void) { return sp_shared("models/stories260K.gguf"); }

/* The suite's requests were written for a context of 2048 tokens; the
 * server would cap stories260K at its trained 128 (test_serve_ops). */
typedef sv_server server;

/* Starts `specula serve -m MODEL -c 2048 EXTRA... --port 0` and waits for
 * its port. */
static server start_m(const char *model, const char *const *extra) {
    const char *argv[40] = {"-c", "2048"};
    int n = 2;
    for (int i = 0; extra && extra[i] && n < 39; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    return sv_start_model(model, argv);
}

static server start(const char *const *extra) { return start_m(stories(), extra); }

static int stop(server *s) { return sv_stop(s); }

typedef struct resp {
    int status;
    char *body; /* malloc'd, NUL-terminated */
} resp;

/* One request on a new connection (Connection: close); reads to EOF.
 * The body is sent as given (may be malformed); extra: more header lines. */
static resp http(int port, const char *method, const char *path, const char *body, size_t blen,
                 const char *extra) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%sContent-Length: %zu\r\n\r\n",
                      method, path, body ? "Content-Type: application/json\r\n" : "", extra ? extra : "",
                      body ? blen : 0);
    assert_true(write(fd, head, (size_t)hn) == hn);
    for (size_t off = 0; body && off < blen;) {
        ssize_t k = write(fd, body + off, blen - off);
        if (k <= 0) break; /* the server may answer 413 and close early */
        off += (size_t)k;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = read(fd, buf + len, cap - len - 1);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = 0;
    resp r = {0};
    sscanf(buf, "HTTP/1.1 %d", &r.status);
    char *b = strstr(buf, "\r\n\r\n");
    r.body = strdup(b ? b + 4 : "");
    /* chunked transfer (streams): remove the chunk size lines */
    if (strstr(buf, "Transfer-Encoding: chunked") || strstr(buf, "transfer-encoding: chunked")) {
        char *src = b + 4, *dst = r.body;
        for (;;) {
            long sz = strtol(src, &src, 16);
            if (sz <= 0) break;
            src = strstr(src, "\r\n") + 2;
            memcpy(dst, src, (size_t)sz);
            dst += sz, src += sz + 2;
        }
        *dst = 0;
    }
    free(buf);
    return r;
}

static resp post(int port, const char *path, const char *body) {
    return http(port, "POST", path, body, strlen(body), NULL);
}

static json_t *ok_json(resp r) {
    if (r.status != 200) fail_msg("status %d: %s", r.status, r.body);
    json_error_t e;
    json_t *j = json_loads(r.body, 0, &e);
    if (!j) fail_msg("not JSON (%s): %s", e.text, r.body);
    free(r.body);
    return j;
}

/* An OpenAI error object with this status; returns its message. */
static void expect_error(resp r, int status, const char *needle) {
    if (r.status != status) fail_msg("want %d, got %d: %s", status, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j) fail_msg("error body is not JSON: %s", r.body);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_true(json_is_string(json_object_get(e, "message")));
    assert_true(json_is_string(json_object_get(e, "type")));
    assert_non_null(json_object_get(e, "param"));
    assert_non_null(json_object_get(e, "code"));
    if (needle && !strstr(json_string_value(json_object_get(e, "message")), needle))
        fail_msg("message '%s' lacks '%s'", json_string_value(json_object_get(e, "message")), needle);
    json_decref(j);
    free(r.body);
}

static const char *choice_text(json_t *j) {
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = json_object_get(c, "text");
    if (!t) t = json_object_get(json_object_get(c, "message"), "content");
    assert_true(json_is_string(t));
    return json_string_value(t);
}

/* `specula generate` greedy text after the prompt. */
static void generate_text(const char *prompt, int n, char *out, size_t cap) {
    char args[2048], buf[8192];
    snprintf(args, sizeof args, "generate -m '%s' -p '%s' -n %d --temp 0", stories(), prompt, n);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, buf, sizeof buf), 0);
    assert_true(strncmp(buf, prompt, strlen(prompt)) == 0);
    snprintf(out, cap, "%s", buf + strlen(prompt));
    size_t len = strlen(out);
    if (len && out[len - 1] == '\n') out[len - 1] = 0; /* generate ends its output with a newline */
}

static void test_completions_and_streams(void **state) {
    (void)state;
    server s = start(NULL);
    json_t *j = ok_json(http(s.port, "GET", "/health", NULL, 0, NULL));
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
    j = ok_json(http(s.port, "GET", "/v1/models", NULL, 0, NULL));
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
                        "stories260K.gguf");
    json_decref(j);

    char want[8192];
    generate_text("Once upon a time", 24, want, sizeof want);
    const char *specs[] = {"", ",\"speculative\":{\"drafter\":\"ngram\",\"n_max\":4}",
                           ",\"speculative\":{\"drafter\":\"lowbit\",\"lowbit\":\"q8_0\",\"gamma\":3}",
                           ",\"speculative\":{\"drafter\":\"layerskip\",\"skip_layers\":\"2\",\"adaptive\":true}",
                           ",\"speculative\":{\"n_max\":0}",
                           ",\"speculative\":{\"drafter\":\"suffix\",\"n_max\":8}",
                           ",\"speculative\":{\"drafter\":\"suffix\",\"n_max\":8}",
                           ",\"speculative\":{\"drafter\":\"lowbit+suffix\",\"lowbit\":\"q8_0\",\"gamma\":3}"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"x\",\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0%s}", specs[i]);
        j = ok_json(post(s.port, "/v1/completions", body));
        assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
        assert_string_equal(choice_text(j), want);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
        json_t *u = json_object_get(j, "usage");
        assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 24);
        assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 5);
        json_t *m = json_object_get(json_object_get(j, "metrics"), "speculative_decoding");
        assert_true(json_is_object(m));
        if ((i > 0 && i < 4) || i == 7)
            assert_true(json_integer_value(json_object_get(m, "num_draft_tokens")) > 0);
        if (i == 4) assert_int_equal(json_integer_value(json_object_get(m, "num_draft_tokens")), 0);
        json_decref(j);
    }

    /* the stream: deltas concatenate to the same text, then usage, then [DONE] */
    resp r = post(s.port, "/v1/completions",
                  "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0,\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true},\"speculative\":{\"drafter\":\"ngram\"}}");
    assert_int_equal(r.status, 200);
    char got[8192] = "";
    int chunks = 0, finished = 0, usage = 0;
    char *line = r.body, *next;
    for (; line && *line; line = next) {
        next = strstr(line, "\n\n");
        if (next) *next = 0, next += 2;
        assert_true(strncmp(line, "data: ", 6) == 0);
        if (!strcmp(line + 6, "[DONE]")) {
            assert_true(next == NULL || *next == 0);
            chunks = -chunks;
            break;
        }
        json_t *cj = json_loads(line + 6, 0, NULL);
        assert_non_null(cj);
        json_t *c = json_array_get(json_object_get(cj, "choices"), 0);
        if (c) {
            strcat(got, json_string_value(json_object_get(c, "text")));
            finished += json_is_string(json_object_get(c, "finish_reason"));
        } else {
            usage++;
            assert_int_equal(json_integer_value(json_object_get(json_object_get(cj, "usage"), "completion_tokens")), 24);
        }
        chunks++;
        json_decref(cj);
    }
    assert_true(chunks < -2); /* [DONE] seen after several chunks */
    assert_int_equal(finished, 1);
    assert_int_equal(usage, 1);
    assert_string_equal(got, want);
    free(r.body);

    /* a stop string cuts the text before it, finish_reason "stop" */
    j = ok_json(post(s.port, "/v1/completions",
                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0,\"stop\":[\"Lily\",\"zzz\"]}"));
    const char *lily = strstr(want, "Lily");
    assert_non_null(lily);
    assert_int_equal(strlen(choice_text(j)), (size_t)(lily - want));
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason")),
                        "stop");
    json_decref(j);
    /* sampled requests with a seed repeat */
    const char *sampled = "{\"prompt\":\"Once\",\"max_tokens\":16,\"temperature\":0.9,\"top_k\":40,\"top_p\":0.95,"
                          "\"min_p\":0.05,\"seed\":7}";
    json_t *a = ok_json(post(s.port, "/v1/completions", sampled)), *b = ok_json(post(s.port, "/v1/completions", sampled));
    assert_string_equal(choice_text(a), choice_text(b));
    json_decref(a);
    json_decref(b);

    /* metrics: the speculative counters under vLLM's names */
    r = http(s.port, "GET", "/metrics", NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "specula:spec_decode_num_drafts_total "));
    assert_non_null(strstr(r.body, "specula:spec_decode_num_draft_tokens_total "));
    assert_non_null(strstr(r.body, "specula:spec_decode_num_accepted_tokens_total "));
    assert_non_null(strstr(r.body, "specula:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}"));
    assert_non_null(strstr(r.body, "specula:requests_total{endpoint=\"/v1/completions\",status=\"200\"}"));
    assert_non_null(strstr(r.body, "specula:time_to_first_token_seconds_bucket{le=\"+Inf\"}"));
    free(r.body);
    assert_int_equal(stop(&s), 0);
}

static void test_chat(void **state) {
    (void)state;
    /* stories260K has no chat template: refused until one is forced */
    server s = start(NULL);
    expect_error(post(s.port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}"), 400,
                 "--chat-template");
    assert_int_equal(stop(&s), 0);
    const char *extra[] = {"--chat-template", "chatml", NULL};
    s = start(extra);
    json_t *j = ok_json(post(s.port, "/v1/chat/completions",
                             "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Tell stories.\"},"
                             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Once\"}]}],"
                             "\"max_completion_tokens\":12,\"temperature\":0}"));
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_true(json_is_string(json_object_get(msg, "content")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 12);
    json_decref(j);
    expect_error(post(s.port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}"), 400,
                 "role");
    expect_error(post(s.port, "/v1/chat/completions", "{\"messages\":[]}"), 400, "messages");
    assert_int_equal(stop(&s), 0);
}

static void test_bad_requests(void **state) {
    (void)state;
    server s = start(NULL);
    expect_error(post(s.port, "/v1/completions", "{\"prompt\": \"x\""), 400, "JSON");
    expect_error(post(s.port, "/v1/completions", "[1,2]"), 400, "object");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":42}"), 400, "prompt");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"temperature\":\"hot\"}"), 400, "temperature");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"temperature\":-1}"), 400, "temperature");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"top_p\":0}"), 400, "top_p");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"n\":2}"), 400, "n:");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1000000000}"), 400, "max_tokens");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":0}"), 400, "max_tokens");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"bogus_field\":1}"), 400, "bogus_field");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"stop\":[1]}"), 400, "stop");
    /* a NUL would end the stop string early (an empty one stopped every answer at once) */
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"stop\":[\"\\u0000a\"]}"), 400, "NUL");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"stream\":\"yes\"}"), 400, "stream");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"speculative\":{\"gamma\":1000}}"), 400, "gamma");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"speculative\":5}"), 400,
                 "speculative: speculative settings: expected a JSON object, got an integer");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"speculative\":{\"verifier\":\"nope\"}}"), 400,
                 "verifier");
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"speculative\":{\"drafter\":\"model\"}}"), 400,
                 "speculative");
    expect_error(post(s.port, "/v1/completions",
                      "{\"prompt\":\"x\",\"temperature\":1,\"speculative\":{\"drafter\":\"ngram\",\"verifier\":\"greedy\"}}"),
                 400, "greedy");
    /* a prompt longer than the context (2048 tokens) */
    size_t n = 40000;
    char *big = malloc(n + 64);
    strcpy(big, "{\"prompt\":\"");
    for (size_t i = strlen(big); i < n; i++) big[i] = 'a' + (char)(i % 26);
    strcpy(big + n, "\"}");
    resp r = post(s.port, "/v1/completions", big);
    expect_error(r, 400, "context");
    free(big);
    /* a body over 1 MiB */
    n = (1 << 20) + 100;
    big = malloc(n);
    memset(big, ' ', n);
    expect_error(http(s.port, "POST", "/v1/completions", big, n, NULL), 413, NULL);
    free(big);
    expect_error(http(s.port, "GET", "/v1/nothing", NULL, 0, NULL), 404, NULL);
    expect_error(http(s.port, "GET", "/v1/completions", NULL, 0, NULL), 405, NULL);
    /* still serving */
    json_t *j = ok_json(post(s.port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}"));
    json_decref(j);
    assert_int_equal(stop(&s), 0);
}

static void test_bad_flags(void **state) {
    (void)state;
    char args[1024], buf[1024];
    snprintf(args, sizeof args, "serve -m '%s' --parallel 2 --batching maybe", stories());
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 2);
    assert_non_null(strstr(buf, "--batching must be auto, on or off"));
    snprintf(args, sizeof args, "serve -m '%s' --spec-cost cheap", stories());
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 2);
    assert_non_null(strstr(buf, "--spec-cost must be share or wall"));
}

static void test_api_key(void **state) {
    (void)state;
    const char *extra[] = {"--api-key", "sekrit-123", NULL};
    server s = start(extra);
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":2}";
    expect_error(post(s.port, "/v1/completions", body), 401, "API key");
    expect_error(http(s.port, "POST", "/v1/completions", body, strlen(body), "Authorization: Bearer sekrit-12\r\n"),
                 401, NULL);
    expect_error(http(s.port, "GET", "/v1/models", NULL, 0, "Authorization: Bearer sekrit-1234\r\n"), 401, NULL);
    json_t *j = ok_json(http(s.port, "POST", "/v1/completions", body, strlen(body),
                             "Authorization: Bearer sekrit-123\r\n"));
    json_decref(j);
    j = ok_json(http(s.port, "GET", "/health", NULL, 0, NULL)); /* health needs no key */
    json_decref(j);
    assert_int_equal(stop(&s), 0);
}

/* A bounded load test: 16 clients at once on 2 slots, 1,008 requests
 * (126 under ASan), mixed streaming and not, greedy and sampled, with and
 * without speculation: every response well-formed, every greedy answer
 * equal to `specula generate`'s, and the server's resident memory flat
 * between the end of the first 112 requests and the end (within 4 MiB). */
typedef struct client {
    int port, id, n, base;
    const char *want;
    int bad;
} client;

static void *client_main(void *arg) {
    client *c = arg;
    for (int i = c->base; i < c->base + c->n; i++) {
        const bool stream = (c->id + i) % 2, sampled = i % 4 == 3;
        char body[512];
        snprintf(body, sizeof body,
                 "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":%s,\"seed\":%d,\"stream\":%s%s}",
                 sampled ? "0.8" : "0", i, stream ? "true" : "false",
                 (i % 3) == 1 ? ",\"speculative\":{\"drafter\":\"ngram\"}"
                 : (i % 3) == 2 ? ",\"speculative\":{\"drafter\":\"lowbit\",\"lowbit\":\"q8_0\",\"gamma\":2}" : "");
        resp r = post(c->port, "/v1/completions", body);
        if (r.status != 200) c->bad++;
        else if (!stream) {
            json_t *j = json_loads(r.body, 0, NULL);
            const char *t = j ? json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")) : NULL;
            if (!t || (!sampled && strcmp(t, c->want))) c->bad++;
            json_decref(j);
        } else {
            const char *done = strstr(r.body, "data: [DONE]\n\n");
            if (!done || done[14] != 0) c->bad++;
        }
        free(r.body);
    }
    return NULL;
}

static long rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

static int run_clients(int port, const char *want, int per_client, int base) {
    enum { NC = 16 };
    client c[NC];
    pthread_t th[NC];
    for (int i = 0; i < NC; i++) {
        c[i] = (client){.port = port, .id = i, .n = per_client, .base = base, .want = want};
        pthread_create(&th[i], NULL, client_main, &c[i]);
    }
    int bad = 0;
    for (int i = 0; i < NC; i++) pthread_join(th[i], NULL), bad += c[i].bad;
    return bad;
}

static void test_load(void **state) {
    (void)state;
    char want[8192];
    generate_text("Once upon a time", 24, want, sizeof want);
    /* stories260K's forward is cheaper than a hand-off, so --batching auto
     * would run the slots apart: force the shared pass under load */
    const char *extra[] = {"--parallel", "2", "-t", "2", "--batching", "on", NULL};
    server s = start(extra);
    assert_int_equal(run_clients(s.port, want, 7, 0), 0);
    const long rss1 = rss_kib(s.pid);
    assert_int_equal(run_clients(s.port, want, SP_SLOW ? 1 : 56, 7), 0);
    const long rss2 = rss_kib(s.pid);
    printf("load: %d requests, server RSS %ld KiB after 112, %ld KiB at the end\n", 16 * (SP_SLOW ? 8 : 63),
           rss1, rss2);
    assert_true(rss1 > 0 && rss2 - rss1 < 4096);
    assert_int_equal(stop(&s), 0);
}

/* Continuous batching: concurrent plain and speculative requests (greedy
 * and seeded sampled; every drafter, a chain with a fixed or adaptive
 * length and a tree) on 4 slots share the target's forward passes, and each
 * one's text is exactly what `specula generate` prints for it alone. */
typedef struct bclient {
    int port;
    char body[512];
    resp r;
} bclient;

static void *bclient_main(void *arg) {
    bclient *c = arg;
    c->r = post(c->port, "/v1/completions", c->body);
    return NULL;
}

static long metric_value(int port, const char *name) {
    resp r = http(port, "GET", "/metrics", NULL, 0, NULL);
    char key[256];
    snprintf(key, sizeof key, "\n%s ", name); /* a sample line, not its # HELP */
    const char *p = strstr(r.body, key);
    long v = p ? atol(p + strlen(key)) : -1;
    free(r.body);
    return v;
}

/* A request's speculation object and the `specula generate` flags that mean
 * the same; sampled: also run at temperature 0.8 with a seed (the adaptive
 * length follows timings, so its sampled tokens are not reproducible). */
static const struct {
    const char *json, *flags;
    bool sampled;
} BATCH_SPECS[] = {
    {"", "", true},
    {",\"speculative\":{\"drafter\":\"ngram\",\"gamma\":4}", "--draft ngram --gamma 4", true},
    {",\"speculative\":{\"drafter\":\"lowbit\",\"lowbit\":\"q8_0\",\"gamma\":3}", "--draft lowbit --lowbit q8_0 --gamma 3",
     true},
    {",\"speculative\":{\"drafter\":\"layerskip\",\"skip_layers\":\"2\",\"adaptive\":true}",
     "--draft layerskip --skip-layers 2 --adaptive", false},
    {",\"speculative\":{\"drafter\":\"layerskip\",\"skip_layers\":\"2\",\"tree\":\"2x2\"}",
     "--draft layerskip --skip-layers 2 --tree 2x2", true},
    {",\"speculative\":{\"drafter\":\"lowbit\",\"tree\":\"dyn:3:4:10\"}", "--draft lowbit --tree dyn:3:4:10", true},
    {",\"speculative\":{\"drafter\":\"lowbit\",\"adaptive\":true}", "--draft lowbit --adaptive", false},
};

static void test_batching(void **state) {
    (void)state;
    enum { NS = sizeof BATCH_SPECS / sizeof BATCH_SPECS[0], NB = 2 * NS, NTOK = 120 };
    const char *prompts[2] = {"Once upon a time", "The cat"};
    char want[NB][8192], temp[NB][8];
    for (int i = 0; i < NB; i++) {
        char args[2048], buf[8192];
        const char *pr = prompts[i % 2];
        const int k = i % NS;
        snprintf(temp[i], sizeof temp[i], "%s", i >= NS && BATCH_SPECS[k].sampled ? "0.8" : "0");
        snprintf(args, sizeof args, "generate -m '%s' -p '%s' -n %d --temp %s --seed %d %s", stories(), pr, NTOK,
                 temp[i], 100 + i, BATCH_SPECS[k].flags);
        assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, buf, sizeof buf), 0);
        snprintf(want[i], sizeof want[i], "%s", buf + strlen(pr));
        size_t len = strlen(want[i]);
        if (len && want[i][len - 1] == '\n') want[i][len - 1] = 0;
    }
    const char *extra[] = {"--parallel", "4", "--batching", "on", NULL};
    server s = start(extra);
    bclient c[NB];
    pthread_t th[NB];
    for (int i = 0; i < NB; i++) {
        c[i].port = s.port;
        snprintf(c[i].body, sizeof c[i].body,
                 "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":%s,\"seed\":%d,\"stream\":%s%s}",
                 prompts[i % 2], NTOK, temp[i], 100 + i, i % 3 == 0 ? "true" : "false", BATCH_SPECS[i % NS].json);
        pthread_create(&th[i], NULL, bclient_main, &c[i]);
    }
    for (int i = 0; i < NB; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(c[i].r.status, 200);
        char got[8192] = {0};
        if (i % 3 == 0) { /* join the stream's text pieces */
            size_t n = 0;
            for (char *line = strtok(c[i].r.body, "\n"); line; line = strtok(NULL, "\n")) {
                if (strncmp(line, "data: {", 7)) continue;
                json_t *j = json_loads(line + 6, 0, NULL);
                assert_non_null(j);
                json_t *t = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text");
                if (json_is_string(t)) n += (size_t)snprintf(got + n, sizeof got - n, "%s", json_string_value(t));
                json_decref(j);
            }
        } else {
            json_t *j = ok_json(c[i].r);
            c[i].r.body = NULL;
            snprintf(got, sizeof got, "%s", choice_text(j));
            json_decref(j);
        }
        free(c[i].r.body);
        if (strcmp(got, want[i])) fail_msg("request %d (%s):\n%s\nwant:\n%s", i, c[i].body, got, want[i]);
    }
    const long steps = metric_value(s.port, "specula:batch_steps_total");
    const long seqs = metric_value(s.port, "specula:batch_sequences_total");
    const long spec = metric_value(s.port, "specula:batch_spec_sequences_total");
    const long shared = metric_value(s.port, "specula:batch_spec_shared_total");
    printf("batching: %ld sequences in %ld forward passes (mean %.2f per pass); %ld speculative, %ld of them "
           "sharing their pass\n",
           seqs, steps, steps > 0 ? (double)seqs / (double)steps : 0.0, spec, shared);
    assert_true(steps > 0 && seqs > steps); /* some passes carried several requests */
    assert_true(spec > 0 && shared > 0);    /* speculative requests' passes joined the others */
    assert_true(metric_value(s.port, "specula:batch_tokens_total") > seqs);   /* drafted rows verified */
    assert_true(metric_value(s.port, "specula:batch_spec_tokens_total") > spec);
    assert_true(metric_value(s.port, "specula:batch_pass_row_seconds") >= 0); /* the fit is exported */
    assert_int_equal(stop(&s), 0);
}

/* --draft eagle3 -md HEAD.gguf: requests draft with the EAGLE-3 head, also
 * in passes shared with other requests (the taps of each sequence are its
 * own), and give plain decoding's text; a request may turn it off; -md
 * HEAD.gguf without --draft eagle3 is refused in one line. */
static void test_eagle3(void **state) {
    (void)state;
    enum { NB = 4, NTOK = 48 };
    const char *head = "tests/data/eagle3/stories260K-head.gguf";
    const char *prompts[2] = {"Once upon a time", "The cat"};
    char want[2][8192];
    for (int i = 0; i < 2; i++) generate_text(prompts[i], NTOK, want[i], sizeof want[i]);
    const char *extra[] = {"--draft", "eagle3", "-md", head, "--gamma", "3", "--parallel", "4", "--batching", "on", NULL};
    server s = start(extra);
    bclient c[NB];
    pthread_t th[NB];
    for (int i = 0; i < NB; i++) {
        c[i].port = s.port;
        snprintf(c[i].body, sizeof c[i].body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0%s}",
                 prompts[i % 2], NTOK, i == 3 ? ",\"speculative\":{\"drafter\":\"none\"}" : "");
        pthread_create(&th[i], NULL, bclient_main, &c[i]);
    }
    for (int i = 0; i < NB; i++) {
        pthread_join(th[i], NULL);
        json_t *j = ok_json(c[i].r);
        if (strcmp(choice_text(j), want[i % 2])) fail_msg("request %d: '%s'", i, choice_text(j));
        json_t *sd = json_object_get(json_object_get(j, "metrics"), "speculative_decoding");
        if (i < 3 && !(json_is_object(sd) && json_integer_value(json_object_get(sd, "num_draft_tokens")) > 0 &&
                       !strcmp(json_string_value(json_object_get(sd, "drafter")), "eagle3")))
            fail_msg("request %d drafted nothing", i);
        json_decref(j);
    }
    assert_int_equal(stop(&s), 0);
    char args[2048], buf[4096];
    snprintf(args, sizeof args, "serve -m '%s' -md '%s' --port 0", stories(), head);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 1);
    assert_non_null(strstr(buf, "is an EAGLE-3 head"));
}

/* The official openai npm client (tests/js/openai_client.mjs). */
static void test_openai_client(void **state) {
    (void)state;
    char script[1024], mod[1024], bin[1024];
    snprintf(bin, sizeof bin, "%s", cli_bin());
    const char *dir = dirname(bin);
    snprintf(script, sizeof script, "%s/../tests/js/openai_client.mjs", dir);
    snprintf(mod, sizeof mod, "%s/../tests/js/node_modules/openai/package.json", dir);
    if (system("node --version >/dev/null 2>&1") != 0)
        fail_msg("node is not installed: run scripts/setup.sh (Debian nodejs, npm and the openai package)");
    struct stat st;
    if (stat(mod, &st) != 0)
        fail_msg("the openai npm package is missing (%s): run scripts/setup.sh", mod);
    const char *extra[] = {"--chat-template", "chatml", NULL};
    server s = start(extra);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SPECULA_URL=http://127.0.0.1:%d/v1 node '%s' 2>&1", s.port, script);
    FILE *f = popen(cmd, "r");
    char out[8192];
    size_t len = fread(out, 1, sizeof out - 1, f);
    out[len] = 0;
    int rc = pclose(f);
    printf("%s", out);
    assert_int_equal(stop(&s), 0);
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) fail_msg("openai client failed:\n%s", out);
    assert_non_null(strstr(out, "openai client: all checks passed"));
}

/* --online: the slots' drafts learn from the requests that draft with -md
 * (stories260K drafting for itself, retrained every 16 positions) and are
 * swapped in; greedy text stays `specula
 * generate`'s on every request, plain ones included, and /metrics counts
 * the rounds and swaps. Without -md, --online is refused. */
static void test_online(void **state) {
    (void)state;
    /* inline rounds (--online-sync): on a loaded machine a background
     * round may not finish before the last request */
    const char *extra[] = {"-md", stories(), "--parallel", "2", "--online", "--online-every", "16",
                           "--online-steps", "2", "--online-sync", NULL};
    server s = start(extra);
    char want[8192];
    generate_text("Once upon a time", 32, want, sizeof want);
    const char *specs[] = {"", ",\"speculative\":{\"gamma\":3}", ",\"speculative\":{\"n_max\":0}",
                           ",\"speculative\":{\"drafter\":\"ngram\"}"};
    for (int i = 0; i < 24; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"x\",\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"temperature\":0%s}",
                 specs[i % 4]);
        json_t *j = ok_json(post(s.port, "/v1/completions", body));
        assert_string_equal(choice_text(j), want);
        json_decref(j);
    }
    long rounds = metric_value(s.port, "specula:online_rounds_total");
    long swaps = metric_value(s.port, "specula:online_swaps_total");
    long observed = metric_value(s.port, "specula:online_observed_positions_total");
    printf("online: %ld positions observed, %ld rounds, %ld swaps\n", observed, rounds, swaps);
    assert_true(observed >= 12 * 32);
    assert_true(rounds >= 1 && swaps >= 1);
    assert_int_equal(metric_value(s.port, "specula:online_errors_total"), 0);
    assert_int_equal(stop(&s), 0);
    char args[1024], buf[1024];
    snprintf(args, sizeof args, "serve -m '%s' --online", stories());
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 2);
    assert_non_null(strstr(buf, "--online"));
}

/* Several drafts: stories260K drafting for itself (always accepted at T=0)
 * and a fresh random draft (never): the router sends most requests to the
 * first, each response names its draft, the text stays `specula
 * generate`'s, and with --online each draft's learner sees only its own
 * requests. */
static long metric_label(int port, const char *name, const char *label) {
    char full[256];
    snprintf(full, sizeof full, "%s{%s}", name, label);
    return metric_value(port, full);
}

static void test_routing(void **state) {
    (void)state;
    char fresh[1024], args[2048], buf[4096];
    snprintf(fresh, sizeof fresh, "%s/serve-fresh-%d.gguf", sp_tmpdir(), (int)getpid());
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --vocab-from '%s' "
             "--type f32 --seed 3",
             fresh, stories());
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 0);
    const char *extra[] = {"-md", stories(), "-md", fresh, "--gamma", "3", "--online", "--online-sync",
                           "--online-every", "32", "--online-steps", "1", NULL};
    server s = start(extra);
    char want[8192];
    generate_text("Once upon a time", 24, want, sizeof want);
    int to_first = 0;
    for (int i = 0; i < 30; i++) {
        json_t *j = ok_json(post(s.port, "/v1/completions",
                                 "{\"model\":\"x\",\"prompt\":\"Once upon a time\",\"max_tokens\":24,"
                                 "\"temperature\":0}"));
        assert_string_equal(choice_text(j), want);
        json_t *d = json_object_get(json_object_get(json_object_get(j, "metrics"), "speculative_decoding"),
                                    "draft_model");
        assert_true(json_is_integer(d));
        if (i >= 15) to_first += json_integer_value(d) == 0;
        json_decref(j);
    }
    long d0 = metric_label(s.port, "specula:draft_requests_total", "draft=\"0\"");
    long d1 = metric_label(s.port, "specula:draft_requests_total", "draft=\"1\"");
    printf("routing: %ld requests to the good draft, %ld to the fresh one; %d of the last 15 to the good one\n", d0,
           d1, to_first);
    assert_int_equal(d0 + d1, 30);
    assert_true(d1 >= 1);       /* the optimistic start tries it */
    assert_true(to_first >= 11); /* explore 0.1: a few random picks */
    assert_true(metric_value(s.port, "specula:online_rounds_total") >= 2);
    assert_int_equal(metric_value(s.port, "specula:online_errors_total"), 0);
    assert_int_equal(stop(&s), 0);
    unlink(fresh);
}


/* `specula generate -m MODEL -p PROMPT FLAGS` text after the prompt. */
static void gen_cli(const char *model, const char *prompt, const char *flags, char *out, size_t cap) {
    char args[2048], buf[8192];
    snprintf(args, sizeof args, "generate -m '%s' -p '%s' %s", model, prompt, flags);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, buf, sizeof buf), 0);
    assert_true(strncmp(buf, prompt, strlen(prompt)) == 0);
    snprintf(out, cap, "%s", buf + strlen(prompt));
    size_t len = strlen(out);
    if (len && out[len - 1] == '\n') out[len - 1] = 0;
}

/* Runs the n bodies concurrently on /v1/completions; each text must equal want[i]. */
static void concurrent_equal(int port, int n, char body[][512], char want[][8192]) {
    bclient c[16];
    pthread_t th[16];
    assert_true(n <= 16);
    for (int i = 0; i < n; i++) {
        c[i].port = port;
        snprintf(c[i].body, sizeof c[i].body, "%s", body[i]);
        pthread_create(&th[i], NULL, bclient_main, &c[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) {
        json_t *j = ok_json(c[i].r);
        if (strcmp(choice_text(j), want[i]))
            fail_msg("request %d (%s):\n%s\nwant:\n%s", i, body[i], choice_text(j), want[i]);
        json_decref(j);
    }
}

/* A vocabulary with padding rows (Qwen-style "[PAD<i>]" ids, half of this
 * random model's 512 outputs; its 256 real tokens are printable pieces): batched sampled requests draw only real
 * tokens, exactly as `specula generate` with the same seed. (The server's
 * old copy of the generation loop sampled over all 512 ids.) */
static void test_padded_vocab(void **state) {
    (void)state;
    enum { N = 8 };
    char padded[1024], args[2048], buf[4096];
    snprintf(padded, sizeof padded, "%s/serve-padded-%d.gguf", sp_tmpdir(), (int)getpid());
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 384 --vocab 256 "
             "--pad-vocab 512 --ctx 256 --type f32 --seed 5",
             padded);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 0);
    char want[N][8192], body[N][512];
    for (int i = 0; i < N; i++) {
        char flags[128];
        snprintf(flags, sizeof flags, "-n 96 --temp 1 --seed %d", 1000 + i);
        gen_cli(padded, "Once upon a time", flags, want[i], sizeof want[i]);
        snprintf(body[i], sizeof body[i],
                 "{\"prompt\":\"Once upon a time\",\"max_tokens\":96,\"temperature\":1,\"seed\":%d}", 1000 + i);
    }
    const char *extra[] = {"--parallel", "4", "--batching", "on", NULL};
    server s = start_m(padded, extra);
    concurrent_equal(s.port, N, body, want);
    const long steps = metric_value(s.port, "specula:batch_steps_total");
    printf("padded vocabulary: %d sampled requests equal to generate's, %ld sequences in %ld passes\n", N,
           metric_value(s.port, "specula:batch_sequences_total"), steps);
    assert_true(steps > 0 && metric_value(s.port, "specula:batch_sequences_total") > steps);
    assert_int_equal(stop(&s), 0);
    unlink(padded);
}

/* One completion of body (a JSON object, stolen); returns its text
 * (malloc'd) and the usage's prompt and cached token counts. */
static char *complete(int port, json_t *body, long *n_prompt, long *n_cached) {
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    json_t *j = ok_json(post(port, "/v1/completions", b));
    free(b);
    json_t *u = json_object_get(j, "usage");
    *n_prompt = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
    json_t *c = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
    assert_true(json_is_integer(c));
    *n_cached = (long)json_integer_value(c);
    char *t = strdup(choice_text(j));
    json_decref(j);
    return t;
}

/* The prompt cache: a conversation's second turn (the first turn's prompt
 * and reply, then new text) prefills only its new tokens, on the slot that
 * holds the first turn even after an unrelated request, and its output
 * equals a cold run's (cache_prompt false): greedy, seeded sampled, and
 * speculative (n-gram, and a draft model, which keeps its cache too). */
static void test_prompt_cache(void **state) {
    (void)state;
    /* --gamma: a static draft length (the adaptive one follows timings) */
    const char *extra[] = {"--parallel", "2", "-md", stories(), "--gamma", "3", NULL};
    server s = start(extra);
    long p1, c1, pn, cn, p2, c2, pc, cc;
    char *t1 = complete(s.port, json_pack("{s:s, s:i, s:f}", "prompt", "Once upon a time", "max_tokens", 24,
                                          "temperature", 0.0), &p1, &c1);
    assert_int_equal(c1, 0);
    free(complete(s.port, json_pack("{s:s, s:i}", "prompt", "The cat", "max_tokens", 8), &pn, &cn));
    assert_int_equal(cn, 0); /* the unrelated prompt took the other slot */
    char prompt2[4096];
    snprintf(prompt2, sizeof prompt2, "Once upon a time%s One day, the little dog", t1);
    const long evaluated0 = metric_value(s.port, "specula:prompt_tokens_total") -
                            metric_value(s.port, "specula:prompt_tokens_cached_total");
    static const struct {
        double temp;
        int seed;
        const char *spec;
    } CASES[] = {{0, 1, "none"}, {0.8, 7, "none"}, {0, 1, "ngram"}, {0.8, 9, "ngram"}, {0.8, 5, "model"}};
    long evaluated = 0;
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        json_t *sp = json_pack("{s:s}", "drafter", CASES[k].spec);
        if (strcmp(CASES[k].spec, "none")) json_object_set_new(sp, "gamma", json_integer(3));
        if (!strcmp(CASES[k].spec, "model")) json_object_set_new(sp, "adaptive", json_false());
        char *warm = complete(s.port,
                              json_pack("{s:s, s:i, s:f, s:i, s:O}", "prompt", prompt2, "max_tokens", 24,
                                        "temperature", CASES[k].temp, "seed", CASES[k].seed, "speculative", sp),
                              &p2, &c2);
        evaluated += p2 - c2;
        char *cold = complete(s.port,
                              json_pack("{s:s, s:i, s:f, s:i, s:b, s:o}", "prompt", prompt2, "max_tokens",
                                        24, "temperature", CASES[k].temp, "seed", CASES[k].seed, "cache_prompt", 0,
                                        "speculative", sp),
                              &pc, &cc);
        evaluated += pc - cc;
        printf("prompt cache (T=%.1f, %s): turn 2 of %ld prompt tokens took %ld from the cache (turn 1: %ld)\n",
               CASES[k].temp, CASES[k].spec, p2, c2, p1);
        /* the first turn's prompt and reply are cached; only the new words
         * (and a token at the seam) are evaluated */
        assert_true(c2 >= p1 && c2 < p2);
        assert_true(p2 - c2 <= p2 - p1 - 8);
        assert_int_equal(cc, 0);
        if (strcmp(warm, cold)) fail_msg("cached turn 2:\n%s\ncold:\n%s", warm, cold);
        free(warm);
        free(cold);
    }
    /* the metric counts what was evaluated: the prompt tokens less the cached ones */
    assert_int_equal(metric_value(s.port, "specula:prompt_tokens_total") -
                         metric_value(s.port, "specula:prompt_tokens_cached_total") - evaluated0,
                     evaluated);
    free(t1);
    assert_int_equal(stop(&s), 0);
    /* --cache-budget-mb 0 keeps nothing */
    const char *none[] = {"--cache-budget-mb", "0", NULL};
    s = start(none);
    free(complete(s.port, json_pack("{s:s, s:i}", "prompt", "Once upon a time", "max_tokens", 8), &p1, &c1));
    free(complete(s.port, json_pack("{s:s, s:i}", "prompt", "Once upon a time there", "max_tokens", 8), &p2, &c2));
    assert_int_equal(c2, 0);
    assert_int_equal(stop(&s), 0);
}

/* The prompt cache on a hybrid recurrent model (qwen35: Gated DeltaNet
 * layers): the recurrent state cannot roll back over a whole reply, so a
 * second turn returns to the mark after the first turn's prompt
 * (sp_ctx_pin) and evaluates the rest; output equal to a cold run's. */
static void test_prompt_cache_hybrid(void **state) {
    (void)state;
    char model[1024], args[2048], buf[4096];
    snprintf(model, sizeof model, "%s/serve-hybrid-%d.gguf", sp_tmpdir(), (int)getpid());
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --arch qwen35 --dim 64 --layers 4 --heads 4 --kv-heads 2 --ffn 128 --vocab 256 "
             "--type f32 --seed 1",
             model);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 0);
    server s = start_m(model, NULL);
    long p1, c1, p2, c2, pc, cc;
    char *t1 = complete(s.port, json_pack("{s:s, s:i, s:f}", "prompt", "Once upon a time", "max_tokens", 20,
                                          "temperature", 0.0), &p1, &c1);
    char prompt2[4096];
    snprintf(prompt2, sizeof prompt2, "Once upon a time%s and then", t1);
    for (int k = 0; k < 2; k++) {
        const double temp = k ? 0.8 : 0;
        char *warm = complete(s.port, json_pack("{s:s, s:i, s:f, s:i}", "prompt", prompt2, "max_tokens", 20,
                                                "temperature", temp, "seed", 3), &p2, &c2);
        char *cold = complete(s.port, json_pack("{s:s, s:i, s:f, s:i, s:b}", "prompt", prompt2, "max_tokens", 20,
                                                "temperature", temp, "seed", 3, "cache_prompt", 0), &pc, &cc);
        printf("hybrid prompt cache (T=%.1f): turn 2 of %ld prompt tokens took %ld from the cache (turn 1: %ld)\n",
               temp, p2, c2, p1);
        assert_true(c2 >= p1 - 1 && c2 < p2);
        assert_int_equal(cc, 0);
        if (strcmp(warm, cold)) fail_msg("cached turn 2:\n%s\ncold:\n%s", warm, cold);
        free(warm);
        free(cold);
        /* the cold run left the slot at turn 2: back to turn 1 for the next round */
        free(complete(s.port, json_pack("{s:s, s:i, s:f, s:b}", "prompt", "Once upon a time", "max_tokens", 20,
                                        "temperature", 0.0, "cache_prompt", 0), &p1, &c1));
    }
    free(t1);
    assert_int_equal(stop(&s), 0);
    unlink(model);
}

/* Batched drafts: concurrent speculative requests drafting with a draft
 * model share its forward passes as they share the target's, and each
 * gives the text `specula generate` gives for it alone (greedy and seeded
 * sampled, static draft length). */
static void test_batched_drafts(void **state) {
    (void)state;
    enum { N = 6 };
    char draft[1024], args[2048], buf[4096];
    snprintf(draft, sizeof draft, "%s/serve-draft-%d.gguf", sp_tmpdir(), (int)getpid());
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --vocab-from '%s' "
             "--type f32 --seed 4",
             draft, stories());
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf), 0);
    const char *prompts[2] = {"Once upon a time", "The cat"};
    char want[N][8192], body[N][512];
    for (int i = 0; i < N; i++) {
        char flags[1200];
        const char *temp = i % 2 ? "0.8" : "0";
        snprintf(flags, sizeof flags, "-n 40 --temp %s --seed %d -md '%s' --gamma 3", temp, 200 + i, draft);
        gen_cli(stories(), prompts[i / 3 % 2], flags, want[i], sizeof want[i]);
        snprintf(body[i], sizeof body[i],
                 "{\"prompt\":\"%s\",\"max_tokens\":40,\"temperature\":%s,\"seed\":%d,"
                 "\"speculative\":{\"gamma\":3,\"adaptive\":false}}",
                 prompts[i / 3 % 2], temp, 200 + i);
    }
    const char *extra[] = {"-md", draft, "--gamma", "3", "--parallel", "4", "--batching", "on", NULL};
    server s = start(extra);
    concurrent_equal(s.port, N, body, want);
    const long steps = metric_value(s.port, "specula:batch_draft_steps_total");
    const long seqs = metric_value(s.port, "specula:batch_draft_sequences_total");
    printf("batched drafts: %ld draft-model sequences in %ld shared passes (mean %.2f)\n", seqs, steps,
           steps > 0 ? (double)seqs / (double)steps : 0.0);
    assert_true(steps > 0 && seqs > steps);
    assert_int_equal(stop(&s), 0);
    unlink(draft);
}

/* ignore_eos (llama-server's field): on a stories260K copy whose sixth
 * greedy token is an end-of-generation id, a request stops there
 * ("stop", 6 tokens) and with ignore_eos runs to max_tokens ("length", 64),
 * plain and speculative; a non-boolean is a 400. */
static void test_ignore_eos(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/specula_serve_eot_%d.gguf", sp_tmpdir(), (int)getpid());
    sp_write_eot_copy(stories(), path, 298);
    server s = start_m(path, NULL);
    for (int spec = 0; spec < 2; spec++)
        for (int ignore = 0; ignore < 2; ignore++) {
            char body[512];
            snprintf(body, sizeof body,
                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0%s%s}",
                     ignore ? ",\"ignore_eos\":true" : "",
                     spec ? ",\"speculative\":{\"drafter\":\"lowbit\",\"lowbit\":\"q8_0\",\"gamma\":4}" : "");
            json_t *j = ok_json(post(s.port, "/v1/completions", body));
            json_t *c = json_array_get(json_object_get(j, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), ignore ? "length" : "stop");
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")),
                             ignore ? 64 : 6);
            json_decref(j);
        }
    expect_error(post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"ignore_eos\":1}"), 400, "ignore_eos");
    assert_int_equal(stop(&s), 0);
    unlink(path);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_padded_vocab),
    cmocka_unit_test(test_prompt_cache),
    cmocka_unit_test(test_ignore_eos),
    cmocka_unit_test(test_prompt_cache_hybrid),
    cmocka_unit_test(test_batched_drafts),
    cmocka_unit_test(test_routing),
    cmocka_unit_test(test_online),
    cmocka_unit_test(test_completions_and_streams), cmocka_unit_test(test_chat),
    cmocka_unit_test(test_bad_requests),            cmocka_unit_test(test_api_key),
    cmocka_unit_test(test_bad_flags),
    cmocka_unit_test(test_load),              cmocka_unit_test(test_openai_client),
    cmocka_unit_test(test_batching),
    cmocka_unit_test(test_eagle3),
};
SP_TEST_MAIN(tests)
