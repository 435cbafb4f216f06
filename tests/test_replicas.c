/* Scale-out end to end: scripts/replicas.sh starts 3 `specula serve`
 * replicas (stories260K, 2 slots each) behind nginx on loopback; 16
 * clients send 1,000 mixed requests (completions and chat, streamed and
 * not, 40 conversations named by X-Conversation-Id) through nginx; one
 * replica is killed (SIGKILL, a crash) a third of the way in and another
 * stopped (SIGTERM: it drains) two thirds in. Counted: every request
 * succeeds, at once or when retried; the only failures are requests in
 * flight on the stopped replicas (at most the 16 in flight each), and each
 * fails cleanly (a 5xx, or a stream cut before [DONE], never a hang);
 * before the first stop every conversation stayed on one replica (session
 * affinity, so its prompt cache hits). Needs nginx (scripts/setup.sh
 * installs it). */
#include "serve_testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>

#if defined(__SANITIZE_ADDRESS__)
#define SP_SLOW 1
#else
#define SP_SLOW 0
#endif

enum { NREP = 3, NCLIENT = 16, NCONV = 40, MAXREQ = 1000 };

typedef struct rec {
    int first_status;  /* first attempt: HTTP status, 0 when none */
    bool first_ok;
    int first_port;    /* replica port of the first attempt (X-Specula-Upstream), 0 if unknown */
    int attempts;
    bool ok;
    bool after_kill;   /* started after the SIGKILL */
} rec;

static struct {
    int port, total;
    atomic_int next, done;
    atomic_bool killed, drained;
    rec r[MAXREQ];
} R;

/* The last replica port named in X-Specula-Upstream ("a:p, b:q" when nginx
 * tried several). */
static int upstream_port(const char *head) {
    const char *h = strcasestr(head, "X-Specula-Upstream:");
    if (!h) return 0;
    const char *end = strstr(h, "\r\n"), *colon = NULL;
    for (const char *p = h + 19; *p && (!end || p < end); p++)
        if (*p == ':') colon = p;
    return colon ? atoi(colon + 1) : 0;
}

/* One attempt of request i; true when complete and well-formed. */
static bool attempt(int i, int *status, int *port) {
    const bool chat = i % 4 >= 2, stream = i % 2;
    char body[512], extra[128];
    const int n = 8 + i % 8;
    if (chat)
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell story %d\"}],\"max_tokens\":%d,"
                 "\"temperature\":0,\"stream\":%s}",
                 i % NCONV, n, stream ? "true" : "false");
    else
        snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time %d\",\"max_tokens\":%d,\"temperature\":0,\"stream\":%s}",
                 i % NCONV, n, stream ? "true" : "false");
    snprintf(extra, sizeof extra, "X-Conversation-Id: conv-%d\r\n", i % NCONV);
    sv_resp r = sv_http(R.port, "POST", chat ? "/v1/chat/completions" : "/v1/completions", body, extra);
    *status = r.status;
    *port = upstream_port(r.head);
    bool ok = r.status == 200;
    if (ok && stream) {
        const char *done = strstr(r.body, "data: [DONE]\n\n");
        ok = done && !done[14];
    } else if (ok) {
        json_t *j = json_loads(r.body, 0, NULL);
        json_t *u = json_object_get(json_object_get(j, "usage"), "completion_tokens");
        ok = j && json_is_integer(u) && json_integer_value(u) <= n;
        json_decref(j);
    } else if (r.status == 0 || !r.closed) {
        printf("replicas: request %d: no clean failure (status %d, %s)\n", i, r.status,
               r.closed ? "closed" : "timed out");
    }
    sv_resp_free(&r);
    return ok;
}

static void *client_main(void *arg) {
    (void)arg;
    int i;
    while ((i = atomic_fetch_add(&R.next, 1)) < R.total) {
        rec *c = &R.r[i];
        c->after_kill = atomic_load(&R.killed);
        int status, port;
        c->first_ok = c->ok = attempt(i, &status, &port);
        c->first_status = status, c->first_port = port, c->attempts = 1;
        while (!c->ok && c->attempts < 4) {
            usleep(100000);
            c->ok = attempt(i, &status, &port);
            c->attempts++;
        }
        atomic_fetch_add(&R.done, 1);
    }
    return NULL;
}

static bool have_nginx(void) {
    char buf[256];
    return sh_capture("command -v nginx || ls /usr/sbin/nginx", buf, sizeof buf) == 0 && buf[0];
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static int read_int_file(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    int v = 0;
    if (!f || fscanf(f, "%d", &v) != 1) fail_msg("cannot read %s", path);
    fclose(f);
    return v;
}

static void test_replicas(void **state) {
    (void)state;
    if (!have_nginx()) fail_msg("nginx is not installed: run scripts/setup.sh (Debian package nginx)");
    char dir[300], port_s[16];
    snprintf(dir, sizeof dir, "%s/replicas", sp_tmpdir());
    R.port = free_port();
    R.total = SP_SLOW ? 200 : MAXREQ;
    snprintf(port_s, sizeof port_s, "%d", R.port);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl("/bin/bash", "bash", "scripts/replicas.sh", "3", "--port", port_s, "--state", dir, "--bin", cli_bin(), "--",
              "-m", sp_shared("models/stories260K.gguf"), "--parallel", "2", "--chat-template", "chatml", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[1024];
    size_t len = 0;
    while (len < sizeof line - 1 && read(p[0], line + len, 1) == 1 && line[len] != '\n') len++;
    line[len] = 0;
    if (!strstr(line, "nginx on http://127.0.0.1:")) fail_msg("replicas.sh did not start: '%s'", line);
    int rep_port[NREP];
    pid_t rep_pid[NREP];
    for (int i = 0; i < NREP; i++) {
        char name[32];
        snprintf(name, sizeof name, "replica-%d.port", i + 1);
        rep_port[i] = read_int_file(dir, name);
        snprintf(name, sizeof name, "replica-%d.pid", i + 1);
        rep_pid[i] = read_int_file(dir, name);
    }
    pthread_t th[NCLIENT];
    for (int i = 0; i < NCLIENT; i++) pthread_create(&th[i], NULL, client_main, NULL);
    while (atomic_load(&R.done) < R.total / 3) usleep(1000);
    const int victim = 1, drained = 2;
    kill(rep_pid[victim], SIGKILL);
    atomic_store(&R.killed, true);
    while (atomic_load(&R.done) < 2 * R.total / 3) usleep(1000);
    kill(rep_pid[drained], SIGTERM);
    atomic_store(&R.drained, true);
    for (int i = 0; i < NCLIENT; i++) pthread_join(th[i], NULL);

    int failed_first = 0, lost = 0, wrong_replica = 0, to_victim_after = 0, per_rep[NREP] = {0};
    int on_killed = 0, on_drained = 0, drained_unclean = 0, no_answer = 0;
    int conv_port[NCONV] = {0}, affinity_broken = 0, n502 = 0, n503 = 0, cut = 0;
    for (int i = 0; i < R.total; i++) {
        const rec *c = &R.r[i];
        lost += !c->ok;
        if (!c->first_ok) {
            failed_first++;
            no_answer += c->first_status == 0; /* nginx always answers: a 5xx at least */
            n502 += c->first_status == 502, n503 += c->first_status == 503, cut += c->first_status == 200;
            if (c->first_port && c->first_port != rep_port[victim] && c->first_port != rep_port[drained])
                wrong_replica++;
            on_killed += c->first_port == rep_port[victim];
            if (c->first_port == rep_port[drained]) /* its answer: 503 shutting_down, or 502 once it is gone */
                on_drained++, drained_unclean += c->first_status != 503 && c->first_status != 502;
        } else {
            for (int k = 0; k < NREP; k++) per_rep[k] += c->first_port == rep_port[k];
            if (c->after_kill && c->first_port == rep_port[victim]) to_victim_after++;
        }
        if (c->first_ok && !c->after_kill && i < R.total / 3 - NCLIENT) { /* well before the kill */
            int *cp = &conv_port[i % NCONV];
            if (!*cp) *cp = c->first_port;
            else if (*cp != c->first_port) affinity_broken++;
        }
    }
    printf("replicas: %d requests through nginx to 3 replicas (answered %d/%d/%d), replica 2 killed after %d, "
           "replica 3 drained after %d: %d failed at first (%d 502, %d 503, %d streams cut; all on them: %s), %d lost "
           "after 3 retries, "
           "%d affinity breaks before the kill\n",
           R.total, per_rep[0], per_rep[1], per_rep[2], R.total / 3, 2 * R.total / 3, failed_first, n502,
           n503, cut, wrong_replica ? "no" : "yes", lost, affinity_broken);
    assert_int_equal(lost, 0);
    assert_int_equal(wrong_replica, 0);
    /* the killed replica: at most the requests in flight (one per client);
     * the draining one also answers 503 on nginx's idle keep-alive
     * connections to it (at most 32, each closed after that answer) */
    assert_true(on_killed <= NCLIENT);
    assert_true(on_drained <= NCLIENT + 32);
    assert_int_equal(drained_unclean, 0);
    assert_int_equal(no_answer, 0);
    assert_int_equal(to_victim_after, 0);
    assert_int_equal(affinity_broken, 0);
    for (int k = 0; k < NREP; k++) assert_true(per_rep[k] > 0);
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    close(p[0]);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static const struct CMUnitTest tests[] = {cmocka_unit_test(test_replicas)};

SP_TEST_MAIN(tests)
