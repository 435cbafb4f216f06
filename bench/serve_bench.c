/* serve_bench: a load generator for `specula serve` on loopback.
 *
 *   serve_bench PORT CLIENTS REQUESTS MAX_TOKENS [SPECULATIVE_JSON [WARMUP]]
 *
 * SERVE_BENCH_MIX=1 in the environment sends every other request plainly
 * (a mixed load). WARMUP requests are first sent all at once and not counted (one per slot
 * builds the slots' drafters, e.g. a low-bit copy of the model, which
 * would otherwise fall into the measured time).
 * CLIENTS threads each send streamed completions ("Once upon a time", T=0,
 * MAX_TOKENS tokens, the optional "speculative" object) one after another
 * until REQUESTS have been sent in all. Prints requests/s, generated tokens/s,
 * time to first token and per-token latency (p50 / p95 over requests), and
 * the number of failed requests; then, from the server's /metrics, the
 * batcher's passes and mean batch (when it ran) and the drafts' acceptance. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

static int port, max_tokens, total;
static const char *spec = "";
static int mix; /* SERVE_BENCH_MIX=1: every other request without the speculative object */
static atomic_int next, failed;
static double *ttft, *tpot;

static void one(int i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    char body[1024], req[2048];
    int bn = snprintf(body, sizeof body,
                      "{\"prompt\":\"Once upon a time\",\"max_tokens\":%d,\"temperature\":0,\"stream\":true%s%s}",
                      max_tokens, *spec && !(mix && i % 2) ? ",\"speculative\":" : "",
                      mix && i % 2 ? "" : spec);
    int rn = snprintf(req, sizeof req,
                      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                      bn, body);
    double t0 = sp_now(), t_first = 0;
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) || write(fd, req, (size_t)rn) != rn) {
        atomic_fetch_add(&failed, 1);
        if (fd >= 0) close(fd);
        return;
    }
    char buf[65536];
    size_t len = 0;
    for (;;) {
        ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
        buf[len] = 0;
        if (!t_first && strstr(buf, "\"text\"")) t_first = sp_now();
        if (len > sizeof buf / 2) { /* keep the tail only */
            memmove(buf, buf + len - 64, 64);
            len = 64;
        }
    }
    close(fd);
    double t1 = sp_now();
    if (!strstr(buf, "[DONE]") || !t_first) {
        atomic_fetch_add(&failed, 1);
        return;
    }
    ttft[i] = t_first - t0;
    tpot[i] = max_tokens > 1 ? (t1 - t_first) / (max_tokens - 1) : 0;
}

static void *client(void *arg) {
    (void)arg;
    for (int i; (i = atomic_fetch_add(&next, 1)) < total;) one(i);
    return NULL;
}

/* The value of sample line `name` in the server's /metrics (-1 if absent). */
static double metric(const char *name) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    static char buf[1 << 17];
    size_t len = 0;
    if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a) && write(fd, req, sizeof req - 1) == sizeof req - 1)
        for (ssize_t k; len < sizeof buf - 1 && (k = read(fd, buf + len, sizeof buf - 1 - len)) > 0;) len += (size_t)k;
    if (fd >= 0) close(fd);
    buf[len] = 0;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(buf, key);
    return p ? atof(p + strlen(key)) : -1;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: serve_bench PORT CLIENTS REQUESTS MAX_TOKENS [SPECULATIVE_JSON [WARMUP]]\n");
        return 2;
    }
    port = atoi(argv[1]);
    int clients = atoi(argv[2]);
    total = atoi(argv[3]);
    max_tokens = atoi(argv[4]);
    if (argc > 5) spec = argv[5];
    const int warmup = argc > 6 ? atoi(argv[6]) : 0;
    if (port <= 0 || clients < 1 || clients > 256 || total < 1 || max_tokens < 1 || warmup < 0 || warmup > 256)
        return 2;
    pthread_t th[256];
    if (warmup) { /* the same requests, all at once, not counted */
        const int n = total;
        total = warmup;
        ttft = calloc((size_t)warmup, sizeof *ttft);
        tpot = calloc((size_t)warmup, sizeof *tpot);
        for (int i = 0; i < warmup; i++) pthread_create(&th[i], NULL, client, NULL);
        for (int i = 0; i < warmup; i++) pthread_join(th[i], NULL);
        free(ttft);
        free(tpot);
        total = n;
        atomic_store(&next, 0);
        atomic_store(&failed, 0);
    }
    mix = getenv("SERVE_BENCH_MIX") && atoi(getenv("SERVE_BENCH_MIX")) == 1; /* after the warm-up: it builds drafters */
    const double steps0 = metric("specula:batch_steps_total"), seqs0 = metric("specula:batch_sequences_total");
    const double toks0 = metric("specula:batch_tokens_total");
    const double acc0 = metric("specula:spec_decode_num_accepted_tokens_total");
    const double drafted0 = metric("specula:spec_decode_num_draft_tokens_total");
    ttft = calloc((size_t)total, sizeof *ttft);
    tpot = calloc((size_t)total, sizeof *tpot);
    double t0 = sp_now();
    for (int i = 0; i < clients; i++) pthread_create(&th[i], NULL, client, NULL);
    for (int i = 0; i < clients; i++) pthread_join(th[i], NULL);
    double el = sp_now() - t0;
    int ok = total - atomic_load(&failed);
    qsort(ttft, (size_t)total, sizeof *ttft, cmp);
    qsort(tpot, (size_t)total, sizeof *tpot, cmp);
    const int off = total - ok; /* failed requests sort first (zeros) */
#define PCT(a, p) (ok ? (a)[off + (int)((p) * (ok - 1))] * 1e3 : 0)
    printf("clients %d requests %d failed %d: %.2f req/s, %.1f tok/s, TTFT p50 %.1f p95 %.1f ms, "
           "per token p50 %.1f p95 %.1f ms\n",
           clients, total, total - ok, ok / el, (double)ok * max_tokens / el, PCT(ttft, 0.5), PCT(ttft, 0.95),
           PCT(tpot, 0.5), PCT(tpot, 0.95));
    const double steps = metric("specula:batch_steps_total") - steps0;
    const double seqs = metric("specula:batch_sequences_total") - seqs0;
    const double toks = metric("specula:batch_tokens_total") - toks0;
    const double acc = metric("specula:spec_decode_num_accepted_tokens_total") - acc0;
    const double drafted = metric("specula:spec_decode_num_draft_tokens_total") - drafted0;
    if (steps > 0) printf("  shared passes: %.0f, %.2f sequences and %.2f tokens per pass\n", steps, seqs / steps, toks / steps);
    if (drafted > 0) printf("  drafts: %.0f of %.0f drafted tokens accepted\n", acc, drafted);
    free(ttft);
    free(tpot);
    return total - ok ? 1 : 0;
}
