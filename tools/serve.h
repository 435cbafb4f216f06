/* serve.h: the state of `specula serve` shared by its files, passed as one
 * struct (no globals):
 *   cmd_serve.c      options, loading, start and stop of the daemon;
 *   serve_http.c     libmicrohttpd handlers, replies, streaming (SSE);
 *   serve_request.c  the OpenAI request/response side (no model, no HTTP);
 *   serve_slots.c    slots and their queue, the shared-pass batcher and the
 *                    generation of a request on its slot;
 *   serve_metrics.c  counters and histograms, /metrics text. */
#ifndef SP_SERVE_H
#define SP_SERVE_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "serve_lowbit.h"
#include "serve_request.h"
#include "sp_tokenizer.h"
#include "sp_batch.h"
#include "specula.h"

/* A slot's speculation objects are kept for reuse (building one can mean
 * re-quantising the whole model for a low-bit self-draft): the last
 * SERVE_SPEC_CACHE settings used, so plain and speculative requests
 * alternating do not rebuild them. */
#define SERVE_SPEC_CACHE 2
typedef struct serve_slot {
    sp_ctx *ctx;
    sp_spec *plain;                  /* plain decoding (drafter none) */
    sp_spec *spec[SERVE_SPEC_CACHE];
    sp_spec_params sp[SERVE_SPEC_CACHE];
    uint64_t used[SERVE_SPEC_CACHE]; /* last use (request counter), for eviction */
    uint64_t uses;
    bool busy;
    /* --online: the slot's learner of each draft (per slot: a slot runs one
     * request at a time; per draft: each draft learns from its requests) */
    sp_online *on[SP_CLI_MAX_DRAFTS];
    sp_spec *attached[SP_CLI_MAX_DRAFTS]; /* the spec each learner observes, or NULL */
    /* the prompt cache: the tokens the context holds after its last request
     * (toks[0..n_toks), n_ctx places), kept for the next request that
     * shares a prefix; last: when it was last used (S->clock) */
    int32_t *toks, n_toks;
    int32_t pin;          /* the context's mark (sp_ctx_pin): a length it can return to */
    uint64_t last;
} serve_slot;

#define SERVE_NB 11 /* histogram buckets */

/* Counters and histograms (serve_metrics.c), under mu. */
typedef struct serve_metrics {
    pthread_mutex_t mu;
    uint64_t req[SP_SERVE_EP_N][600];
    uint64_t tok_in, tok_cached, tok_out, drafts, draft_tokens, accepted, acc_pos[SP_SPEC_MAX_GAMMA + 2];
    uint64_t ttft[SERVE_NB + 1], tpot[SERVE_NB + 1];
    double ttft_sum, tpot_sum;
    uint64_t ttft_n, tpot_n;
} serve_metrics;

typedef struct server {
    sp_model *m, *dm;                    /* dm: the first draft, dms[0] */
    sp_eagle3 *head;                     /* -md was an EAGLE-3 head (--draft eagle3) */
    sp_model *dms[SP_CLI_MAX_DRAFTS];    /* every -md */
    int n_dm;
    sp_router *router;                   /* several drafts: one is chosen per request */
    pthread_mutex_t rmu;                 /* router and routed[] */
    uint64_t routed[SP_CLI_MAX_DRAFTS], explored;
    cli_online_opts online;
    const sp_tokenizer *tok;
    char model_id[256];
    sp_spec_params defaults;
    sp_sampler_params sampling;
    uint64_t seed;
    sp_chat_tmpl tmpl;
    const char *api_key;
    int32_t n_ctx, parallel, queue_max, threads;
    serve_slot *slots;
    pthread_mutex_t mu;                  /* slots' busy flags and waiting */
    pthread_cond_t cv;
    int waiting;
    atomic_bool stopping;
    bool batching;          /* plain requests share forward passes (continuous batching) */
    bool spec_batching;     /* ... and speculative requests' target forwards too */
    bool spec_cost_wall;    /* adaptive draft length: charge a shared pass's wall time, not the share */
    sp_pool *pool;          /* batching: the one pool every slot computes on */
    sp_batcher *bat;        /* batching: the target's shared pass (sp_batch.h) */
    sp_batcher *dbat[SP_CLI_MAX_DRAFTS]; /* ... and each draft model's (NULL: drafts unbatched) */
    int64_t cache_budget;   /* bytes of KV cache kept for prompt caching (all slots) */
    uint64_t clock;         /* requests started (under mu), for the caches' LRU */
    sp_suffix_corpus *suffix_corpus; /* earlier outputs, shared by every slot's suffix drafter */
    serve_metrics met;
    serve_lowbit *lowbit;   /* the low-bit copies requests may draft with (--lowbit-types) */
    uint64_t lowbit_mask;
    atomic_bool draining;   /* SIGTERM/SIGINT: no new requests, running ones finish */
    atomic_int inflight;    /* generation requests not yet answered in full */
    unsigned http_timeout;  /* seconds a connection may sit idle (headers, keep-alive) */
    char fingerprint[32];   /* system_fingerprint */
} server;

/* The learners per slot (--online): one per draft model, or one for the
 * EAGLE-3 head (slot on[0]). */
static inline int serve_n_learners(const server *S) { return S->head ? 1 : S->n_dm; }

/* One request being served. */
typedef struct serve_run {
    server *srv;
    serve_req r;
    serve_slot *sl;
    int32_t *prompt, n_prompt, *out;
    int32_t n_cached;       /* prompt tokens the slot's cache already held */
    char *text;             /* generated text after stop handling */
    size_t len, cap, sent;  /* sent: bytes streamed so far */
    int32_t prev, n_gen;
    bool stop_hit, failed;
    atomic_bool cancel;
    int wfd, rfd;           /* streaming pipe (-1 when not streaming) */
    int sock;               /* not streaming: the client's socket, watched for a hang-up (-1: none) */
    double t_watch;         /* when the socket was last looked at */
    bool client_gone;       /* the client hung up: cancelled, counted as 499 */
    bool stream_done;       /* the stream reached its end (counted as a 200) */
    pthread_t thread;
    bool thread_started;
    double t0, t_first, t_last;
    sp_gen_stats gst;
    sp_spec_stats sst;
    int draft;               /* the -md index it drafted with, -1 for none */
    char id[40];
    long long created;
    serve_err err;
} serve_run;

/* serve_http.c */
/* The daemon on addr serving s (thread per connection, at most max_conn);
 * NULL when it cannot listen. */
struct MHD_Daemon *serve_http_start(server *s, const struct sockaddr_in *addr, unsigned max_conn);
/* sp_generate's token callback: appends the text, applies stop strings,
 * streams what is ready; false stops the generation. */
bool serve_on_tokens(void *ud, const int32_t *ids, int32_t n);

/* serve_slots.c */
/* Runs the generation of g on its slot (prompt already tokenised). */
void serve_generate(serve_run *g);
/* Tokenises the prompt and checks the budget against the context: 0, or -1 with g->err. */
int serve_prepare(serve_run *g);
/* Takes a free slot for the prompt, waiting in the queue: the one whose
 * cache shares the longest prefix with it (cache: use the caches), else
 * the least recently used; NULL (and 503 in e) when the queue is full. */
serve_slot *serve_slot_acquire(server *s, const int32_t *prompt, int32_t n_prompt, bool cache, serve_err *e);
void serve_slot_release(server *s, serve_slot *sl);

/* serve_metrics.c */
void serve_metrics_init(serve_metrics *mt);
void serve_metrics_free(serve_metrics *mt);
/* A finished request's tokens, drafts and latencies. */
void serve_metrics_record(serve_metrics *mt, const serve_run *g);
/* One reply of status on endpoint ep. */
void serve_metrics_count(serve_metrics *mt, int ep, unsigned status);
/* The Prometheus text of the server's metrics (malloc'd; NULL when out of memory). */
char *serve_metrics_text(server *s);

#endif
