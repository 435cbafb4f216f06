/* serve_testutil.h: helpers for tests that drive `specula serve` over real
 * loopback sockets: start a server on a free port (--port 0; the port is read
 * from its "serving ... on http://127.0.0.1:PORT" line, the lines before it
 * kept as its start-up log), stop it with a signal and read its exit code,
 * one HTTP/1.1 request per connection (reads to EOF, chunked bodies
 * de-chunked), raw bytes on a socket with a read timeout. */
#ifndef SP_SERVE_TESTUTIL_H
#define SP_SERVE_TESTUTIL_H

#include "cli_testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>

typedef struct sv_server {
    pid_t pid;
    int port;
    int err_fd;     /* the rest of its stderr */
    char log[4096]; /* its stderr up to and including the serving line */
} sv_server;

/* Starts `specula serve -m MODEL --port 0 EXTRA...` and waits for its port;
 * fails the test with the server's stderr when it does not start. */
static inline sv_server sv_start_model(const char *model, const char *const *extra) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    const char *argv[48] = {cli_bin(), "serve", "-m", model, "--port", "0"};
    int n = 6;
    for (int i = 0; extra && extra[i] && n < 47; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves no server behind */
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    sv_server s = {.pid = pid, .err_fd = p[0]};
    size_t len = 0;
    const char *at = NULL;
    while (len < sizeof s.log - 1) {
        ssize_t k = read(p[0], s.log + len, 1);
        if (k <= 0) break;
        if (s.log[len++] != '\n') continue;
        s.log[len] = 0;
        if ((at = strstr(s.log, "http://127.0.0.1:"))) break;
    }
    s.log[len] = 0;
    if (!at) fail_msg("server did not start: %s", s.log);
    s.port = atoi(at + strlen("http://127.0.0.1:"));
    return s;
}

/* Sends sig and waits; returns the exit code (128 + signal when killed). */
static inline int sv_signal_wait(sv_server *s, int sig) {
    kill(s->pid, sig);
    int st;
    waitpid(s->pid, &st, 0);
    close(s->err_fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline int sv_stop(sv_server *s) { return sv_signal_wait(s, SIGTERM); }

/* A TCP connection to 127.0.0.1:port whose reads time out after ms. */
static inline int sv_connect(int port, int ms) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static inline bool sv_write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k <= 0) return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

/* Reads fd until EOF, an error or the read timeout; *eof: the peer closed
 * (not a timeout). Returns a malloc'd NUL-terminated buffer. */
static inline char *sv_read_all(int fd, bool *eof) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    bool closed = false;
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = read(fd, buf + len, cap - len - 1);
        if (k > 0) {
            len += (size_t)k;
            continue;
        }
        closed = k == 0 || errno == ECONNRESET;
        break;
    }
    buf[len] = 0;
    if (eof) *eof = closed;
    return buf;
}

typedef struct sv_resp {
    int status;     /* 0: no status line (connection refused, closed or timed out) */
    char *head;     /* the status line and headers, malloc'd */
    char *body;     /* malloc'd, NUL-terminated, de-chunked */
    bool closed;    /* the server closed the connection (not a read timeout) */
} sv_resp;

/* Splits a raw response (the first one in raw) into status, head and body. */
static inline sv_resp sv_parse(char *raw, bool closed) {
    sv_resp r = {.closed = closed};
    sscanf(raw, "HTTP/1.1 %d", &r.status);
    char *b = strstr(raw, "\r\n\r\n");
    r.head = strndup(raw, b ? (size_t)(b - raw) : strlen(raw));
    r.body = strdup(b ? b + 4 : "");
    if (b && (strcasestr(r.head, "Transfer-Encoding: chunked"))) {
        char *src = b + 4, *dst = r.body;
        for (;;) {
            long sz = strtol(src, &src, 16);
            char *nl = strstr(src, "\r\n");
            if (sz <= 0 || !nl || (size_t)sz > strlen(nl + 2)) break;
            src = nl + 2;
            memmove(dst, src, (size_t)sz);
            dst += sz, src += sz + 2;
        }
        *dst = 0;
    }
    return r;
}

static inline void sv_resp_free(sv_resp *r) {
    free(r->head);
    free(r->body);
    r->head = r->body = NULL;
}

/* One request on a new connection (Connection: close), the body as given;
 * extra: more header lines ("Name: value\r\n"...). Times out after 60 s. */
static inline sv_resp sv_http(int port, const char *method, const char *path, const char *body, const char *extra) {
    int fd = sv_connect(port, 60000);
    if (fd < 0) return (sv_resp){.head = strdup(""), .body = strdup("")};
    const size_t blen = body ? strlen(body) : 0;
    char head[2048];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%sContent-Length: %zu\r\n\r\n",
                      method, path, body ? "Content-Type: application/json\r\n" : "", extra ? extra : "", blen);
    sv_write_all(fd, head, (size_t)hn);
    if (body) sv_write_all(fd, body, blen);
    bool eof;
    char *raw = sv_read_all(fd, &eof);
    close(fd);
    sv_resp r = sv_parse(raw, eof);
    free(raw);
    return r;
}

static inline sv_resp sv_post(int port, const char *path, const char *body) {
    return sv_http(port, "POST", path, body, NULL);
}

/* The JSON body of a 200 response (fails the test otherwise); frees r. */
static inline json_t *sv_ok_json(sv_resp r) {
    if (r.status != 200) fail_msg("status %d: %s", r.status, r.body);
    json_error_t e;
    json_t *j = json_loads(r.body, 0, &e);
    if (!j) fail_msg("not JSON (%s): %s", e.text, r.body);
    sv_resp_free(&r);
    return j;
}

/* An OpenAI error object with this status whose message contains needle
 * (NULL: any); returns its code field's text ("" when null); frees r. */
static inline void sv_expect_error(sv_resp r, int status, const char *needle) {
    if (r.status != status) fail_msg("want %d, got %d: %s", status, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j) fail_msg("error body is not JSON: %s", r.body);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    const char *msg = json_string_value(json_object_get(e, "message"));
    assert_non_null(msg);
    if (needle && !strstr(msg, needle) && !strstr(r.body, needle)) fail_msg("error '%s' lacks '%s'", r.body, needle);
    json_decref(j);
    sv_resp_free(&r);
}

/* The first choice's text (completions) or message content (chat). */
static inline const char *sv_choice_text(json_t *j) {
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = json_object_get(c, "text");
    if (!t) t = json_object_get(json_object_get(c, "message"), "content");
    assert_true(json_is_string(t));
    return json_string_value(t);
}

/* The value of sample line `name VALUE` in /metrics (-1 when absent). */
static inline double sv_metric(int port, const char *name) {
    sv_resp r = sv_http(port, "GET", "/metrics", NULL, NULL);
    char key[512];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(r.body, key);
    double v = p ? atof(p + strlen(key)) : -1;
    sv_resp_free(&r);
    return v;
}

#endif
