/* cmd_serve: `specula serve`, an OpenAI-compatible HTTP server on
 * libmicrohttpd (one thread per connection) with jansson for JSON.
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions, GET
 * /v1/models, GET /health, GET /metrics (Prometheus text). A request's
 * "speculative" object goes through the speculation configuration layer
 * (sp_spec_config_json_text over the server's defaults), so it is validated with
 * the CLI's messages. Requests run on --parallel slots, each with its own
 * KV cache and speculation state; beyond them requests wait in a queue of
 * --queue places, then get 503. With --parallel above 1, requests are
 * batched continuously (see "batching" below: one forward pass of the
 * target per step for all of them, speculative requests' verification
 * passes included; their drafts run on their slots), unless a forward of
 * the model is too cheap for that to pay (--batching auto). A streamed
 * response is written by a generation thread into a pipe that the
 * connection's reader drains; a client that
 * disconnects closes the pipe, which cancels its generation. SIGINT and
 * SIGTERM drain the server: it stops accepting, answers queued requests
 * 503 shutting_down, lets running ones finish within --shutdown-grace
 * (then cuts them, streams still ending with [DONE]), frees everything,
 * exit 0. This file holds the
 * options, loading and the daemon's start and stop; serve.h lists the
 * others (HTTP, requests, slots and batcher, metrics). The request side
 * is tools/serve_request.c, which fuzz/fuzz_serve_request.c drives alone. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "serve.h"
#include "clock.h"
#include "gguf.h"
#include "threadpool.h"

/* ------------------------------------------------------------------ main */

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: specula serve -m MODEL [-md DRAFT | --draft eagle3 -md HEAD.gguf | --draft mtp] [--host 127.0.0.1] [--port 8080] [--parallel N]\n"
            "         [--queue N] [-c CTX] [-t THREADS] [--api-key KEY] [--chat-template NAME]\n"
            "         [--alias NAME] [--batching auto|on|off] [--no-batching] [--no-spec-batching]\n"
            "         [--spec-cost share|wall] [--cache-budget-mb MB] [--lowbit-types LIST]\n"
            "         [--shutdown-grace S] [--http-timeout S]\n"
            "         [sampling and speculation defaults as for generate]\n"
            "  OpenAI-compatible endpoints: POST /v1/completions, POST /v1/chat/completions,\n"
            "  GET /v1/models, GET /health, GET /metrics, POST /tokenize, POST /detokenize (as\n"
            "  llama-server's). --port 0 picks a free port (printed). -c: the context per slot,\n"
            "  by default 2048 capped at the model's trained length (with a warning).\n"
            "  --lowbit-types: the weight types a request's low-bit self-draft may use\n"
            "  (default " SP_SERVE_LOWBIT_DEFAULT ", or none); each is built once, when first asked for,\n"
            "  and shared by all slots; others are refused with 400.\n"
            "  SIGTERM/SIGINT drain: no new connections, queued requests get 503 shutting_down\n"
            "  with Retry-After, running ones finish within --shutdown-grace seconds (default\n"
            "  30; then cut, streams ending with a final chunk and [DONE]); exit 0.\n"
            "  A connection idle for --http-timeout seconds (default 10; headers not sent, or\n"
            "  between keep-alive requests) is closed; requests with ambiguous framing (two\n"
            "  Content-Lengths, Content-Length with Transfer-Encoding, a coding other than\n"
            "  chunked) get 400 and a closed connection. A request without a seed gets a\n"
            "  fresh one (reported as \"seed\"); one that sets gamma or n_max drafts that\n"
            "  static length.\n"
            "  With --parallel above 1, requests share forward passes (continuous batching:\n"
            "  one pass over the target's weights per step for all of them, speculative\n"
            "  requests' verification passes included). --batching auto (the default) does\n"
            "  so when a one-token forward takes 0.5 ms or more (below, a hand-off costs\n"
            "  more than sharing saves); on forces it; off (--no-batching) runs each slot\n"
            "  on its own; --no-spec-batching keeps only the speculative requests apart.\n"
            "  Prompt cache: each slot keeps its KV cache after a request; a request goes to the\n"
            "  free slot sharing the longest prefix with its prompt and evaluates only the rest\n"
            "  (\"cache_prompt\": false in a request opts out; usage.prompt_tokens_details.\n"
            "  cached_tokens reports it). --cache-budget-mb bounds the KV bytes kept over all\n"
            "  slots (default 4096; least recently used first; 0 keeps nothing).\n"
            "  --spec-cost: what the adaptive draft length is charged for a shared pass: its\n"
            "  share (the default: an equal part of the pass's fixed cost plus its rows'\n"
            "  marginal cost) or, for comparison, the pass's whole wall time.\n"
            "  Chat templates: %s (default: recognised from the model's\n"
            "  tokenizer.chat_template). A request's \"speculative\" object overrides the\n"
            "  speculation defaults (n_max, n_min, p_min, drafter, verifier, gamma, tree, adaptive, ...).\n"
            SP_CLI_ONLINE_USAGE
            "  In the server each slot has its own learner per draft (or of the head), fed by the requests that\n"
            "  draft with it in a chain; /metrics reports specula:online_*.\n"
            "  Several -md: a router picks the draft per request from its prompt, learning from\n"
            "  the acceptance each request reached ([--explore E], default 0.1; responses name\n"
            "  metrics.speculative_decoding.draft_model, /metrics specula:draft_requests_total).\n",
            sp_chat_names());
}

/* --batching auto: share passes only when a one-token forward takes at
 * least this long. Below it (a model of a few MB, whose weights stay in
 * cache) a pass saves next to nothing while handing each forward to a
 * shared pass costs thread wake-ups and serialises the slots onto one
 * pass at a time (stories260K: ~0.02 ms per forward, 2-3x the throughput
 * unbatched; synth-110m: ~4 ms, 1.7x batched at 4 slots). */
#define BATCH_AUTO_MIN 0.5e-3

/* Seconds of a one-token forward of m with `threads` threads, the best of
 * 5 after a warm-up, on a context of its own. */
static sp_status one_token_seconds(const sp_model *m, int32_t threads, double *out, sp_error *e) {
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 8;
    cp.max_batch = 1;
    cp.n_threads = threads;
    sp_ctx *c = NULL;
    sp_status st = sp_ctx_init(m, &cp, &c, e);
    float *logits = st ? NULL : malloc((size_t)sp_model_cfg(m)->n_vocab * sizeof(float));
    if (!st && !logits) st = sp_fail(e, SP_ERR_NOMEM, "out of memory");
    double best = 1e9;
    const int32_t tok = 0;
    for (int i = 0; !st && i < 6; i++) {
        const sp_batch b = {.tokens = &tok, .n = 1};
        const double t0 = sp_now();
        st = sp_forward(c, &b, logits, e);
        const double t = sp_now() - t0;
        if (i > 0 && t < best) best = t;
        if (!st) st = sp_ctx_truncate(c, 0, e);
    }
    free(logits);
    sp_ctx_free(c);
    *out = best;
    return st;
}

static sp_chat_tmpl model_template(const char *path) {
    sp_gguf *g = NULL;
    sp_error e = {0};
    sp_chat_tmpl t = SP_CHAT_NONE;
    if (sp_gguf_open(path, &g, &e)) return t; /* llama2.c checkpoints have none */
    sp_str s;
    if (!sp_gguf_get_str(g, "tokenizer.chat_template", &s, &e)) {
        char *z = strndup(s.ptr, s.len);
        if (z) t = sp_chat_detect(z);
        free(z);
    }
    sp_gguf_close(g);
    return t;
}

int cmd_serve(int argc, char **argv) {
    enum { O_HOST = SP_OPT_CMD, O_PORT, O_PAR, O_QUEUE, O_KEY, O_TMPL, O_ALIAS, O_NOBATCH, O_BATCH, O_NOSPECBATCH, O_EXPLORE,
           O_SPECCOST, O_CACHEMB, O_LOWBIT_TYPES, O_GRACE, O_HTTP_TIMEOUT };
    static const struct option LONGOPTS[] = {
        SP_CLI_RUN_OPTIONS,
        SP_CLI_SPEC_OPTIONS,
        SP_CLI_ONLINE_OPTIONS,
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {"parallel", required_argument, NULL, O_PAR},
        {"np", required_argument, NULL, O_PAR},
        {"queue", required_argument, NULL, O_QUEUE},
        {"api-key", required_argument, NULL, O_KEY},
        {"chat-template", required_argument, NULL, O_TMPL},
        {"alias", required_argument, NULL, O_ALIAS},
        {"no-batching", no_argument, NULL, O_NOBATCH},
        {"batching", required_argument, NULL, O_BATCH},
        {"no-spec-batching", no_argument, NULL, O_NOSPECBATCH},
        {"explore", required_argument, NULL, O_EXPLORE},
        {"spec-cost", required_argument, NULL, O_SPECCOST},
        {"lowbit-types", required_argument, NULL, O_LOWBIT_TYPES},
        {"shutdown-grace", required_argument, NULL, O_GRACE},
        {"http-timeout", required_argument, NULL, O_HTTP_TIMEOUT},
        {"cache-budget-mb", required_argument, NULL, O_CACHEMB},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    server srv = {0}, *S = &srv;
    cli_run_opts run;
    cli_run_opts_default(&run); /* n_ctx 0: not given (capped at the trained length below) */
    run.multi_draft = true;
    double explore = 0.1;
    sp_spec_config cfg;
    sp_spec_config_init(&cfg, NULL);
    cli_online_opts_default(&S->online);
    const char *host = "127.0.0.1", *tmpl_name = NULL, *alias = NULL, *flag;
    long long port = 8080, par = 1, queue = 64, cache_mb = 4096, http_timeout = 10;
    double grace = 30;
    const char *lowbit_types = SP_SERVE_LOWBIT_DEFAULT;
    enum { B_AUTO, B_ON, B_OFF } batch_mode = B_AUTO;
    bool no_spec_batching = false;
    int c, r;
    optind = 0;
    while ((c = cli_next(argc, argv, SP_CLI_RUN_SHORTOPTS "h", LONGOPTS, "serve", &flag)) != -1) {
        if (c == '?') return 2;
        if ((r = cli_run_opt(c, flag, optarg, &run)) || (r = cli_spec_opt(c, optarg, &cfg)) ||
            (r = cli_online_opt(c, flag, optarg, &S->online))) {
            if (r < 0) return 2;
            continue;
        }
        switch (c) {
        case O_HOST: host = optarg; break;
        case O_PORT: if (cli_int(flag, optarg, 0, 65535, &port)) return 2; break;
        case O_PAR: if (cli_int(flag, optarg, 1, 64, &par)) return 2; break;
        case O_QUEUE: if (cli_int(flag, optarg, 0, 4096, &queue)) return 2; break;
        case O_KEY: S->api_key = optarg; break;
        case O_TMPL: tmpl_name = optarg; break;
        case O_ALIAS: alias = optarg; break;
        case O_NOBATCH: batch_mode = B_OFF; break;
        case O_BATCH:
            if (!strcmp(optarg, "auto")) batch_mode = B_AUTO;
            else if (!strcmp(optarg, "on")) batch_mode = B_ON;
            else if (!strcmp(optarg, "off")) batch_mode = B_OFF;
            else {
                fprintf(stderr, "specula: %s must be auto, on or off, got '%s'\n", flag, optarg);
                return 2;
            }
            break;
        case O_NOSPECBATCH: no_spec_batching = true; break;
        case O_EXPLORE:
            if (cli_float(flag, optarg, 0, 1, &explore)) return 2;
            break;
        case O_SPECCOST:
            if (strcmp(optarg, "share") && strcmp(optarg, "wall")) {
                fprintf(stderr, "specula: %s must be share or wall, got '%s'\n", flag, optarg);
                return 2;
            }
            S->spec_cost_wall = !strcmp(optarg, "wall");
            break;
        case O_CACHEMB:
            if (cli_int(flag, optarg, 0, 1 << 24, &cache_mb)) return 2;
            break;
        case O_LOWBIT_TYPES: lowbit_types = optarg; break;
        case O_GRACE:
            if (cli_float(flag, optarg, 0, 86400, &grace)) return 2;
            break;
        case O_HTTP_TIMEOUT:
            if (cli_int(flag, optarg, 1, 3600, &http_timeout)) return 2;
            break;
        case 'h': serve_usage(stdout); return 0;
        default: return 2;
        }
    }
    if (!run.model) {
        fprintf(stderr, "specula: serve needs a model (-m MODEL)\n");
        return 2;
    }
    if (S->api_key && !*S->api_key) {
        fprintf(stderr, "specula: --api-key must not be empty\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "specula: --host must be an IPv4 address, got '%s'\n", host);
        return 2;
    }
    sp_error e = {0};
    if (sp_spec_config_finish(&cfg, run.draft_model != NULL, &e) || sp_sampler_params_check(&run.sampling, &e) ||
        serve_lowbit_parse(lowbit_types, &S->lowbit_mask, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        return 2;
    }
    /* the server's own low-bit default is the operator's choice too */
    if (cfg.params.draft.kind == SP_DRAFT_LOWBIT) S->lowbit_mask |= 1ull << cfg.params.draft.lowbit_type;
    S->http_timeout = (unsigned)http_timeout;
    if (tmpl_name && sp_chat_by_name(tmpl_name) == SP_CHAT_NONE) {
        fprintf(stderr, "specula: --chat-template must be one of %s, got '%s'\n", sp_chat_names(), tmpl_name);
        return 2;
    }
    const bool head = run.draft_model && cli_is_eagle3(run.draft_model);
    if (S->online.on && !run.draft_model) {
        fprintf(stderr, "specula: --online trains a draft model or an EAGLE-3 head: give one with -md DRAFT "
                        "(or --draft eagle3 -md HEAD.gguf)\n");
        return 2;
    }
    if (head && run.n_draft_models > 1) {
        fprintf(stderr, "specula: %s is an EAGLE-3 head: give it as the only -md\n", run.draft_model);
        return 2;
    }
    if (cli_load_models(&run, &S->m, &S->dm)) return 1;
    /* the context: the model's trained length unless -c says otherwise */
    const int32_t n_train = sp_model_cfg(S->m)->n_ctx_train;
    if (run.n_ctx == 0) {
        run.n_ctx = 2048;
        if (n_train > 0 && n_train < run.n_ctx) {
            run.n_ctx = n_train;
            fprintf(stderr, "specula: warning: the context is capped at the model's trained length, %d tokens "
                            "(-c N to serve more)\n", n_train);
        }
    } else if (n_train > 0 && run.n_ctx > n_train) {
        fprintf(stderr, "specula: warning: -c %lld is beyond the model's trained length, %d tokens: "
                        "output past it may degrade\n", run.n_ctx, n_train);
    }
    if (head && cli_load_head(run.draft_model, cfg.params.draft.kind, S->m, &S->head)) {
        sp_model_free(S->m);
        return 1;
    }
    S->dms[0] = S->dm;
    S->n_dm = S->dm ? run.n_draft_models : 0;
    if (cli_load_more_drafts(&run, S->dms)) {
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S->dms[d]);
        sp_model_free(S->m);
        return 1;
    }
    pthread_mutex_init(&S->rmu, NULL);
    if (S->n_dm > 1) {
        sp_router_params rp = sp_router_default_params(S->n_dm);
        rp.explore = explore;
        rp.seed = (uint64_t)run.seed;
        if (sp_router_init(&rp, &S->router, &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            return 1;
        }
    }
    S->tok = sp_model_tokenizer(S->m);
    if (serve_lowbit_init(S->m, S->lowbit_mask, &S->lowbit, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        return 1;
    }
    S->defaults = cfg.params;
    S->defaults.draft.draft_model = S->dm;
    S->defaults.draft.eagle3 = S->head;
    if (S->defaults.draft.kind == SP_DRAFT_MTP && sp_model_n_mtp(S->m) == 0) {
        fprintf(stderr, "specula: drafter: 'mtp' needs a model with MTP (nextn) layers, and this one has none\n");
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S->dms[d]);
        sp_model_free(S->m);
        return 2;
    }
    if (sp_suffix_corpus_init(0, &S->suffix_corpus, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S->dms[d]);
        sp_model_free(S->m);
        return 1;
    }
    S->sampling = run.sampling;
    S->seed = (uint64_t)run.seed;
    S->tmpl = tmpl_name ? sp_chat_by_name(tmpl_name) : model_template(run.model);
    const char *base = strrchr(run.model, '/');
    snprintf(S->model_id, sizeof S->model_id, "%s", alias ? alias : base ? base + 1 : run.model);
    { /* system_fingerprint: the build and the model served (FNV-1a) */
        uint64_t h = 1469598103934665603ull;
        const char *parts[] = {S->model_id, sp_model_desc(S->m), __DATE__ " " __TIME__};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
            for (const char *p = parts[i]; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
        snprintf(S->fingerprint, sizeof S->fingerprint, "specula-%016llx", (unsigned long long)h);
    }
    S->parallel = (int32_t)par;
    S->cache_budget = (int64_t)cache_mb << 20;
    S->queue_max = (int32_t)queue;
    S->threads = (int32_t)run.threads;
    S->spec_batching = !no_spec_batching;
    double t_one = 0; /* auto: seconds of a one-token forward */
    if (S->parallel > 1 && batch_mode == B_AUTO && one_token_seconds(S->m, S->threads, &t_one, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        return 1;
    }
    S->batching = S->parallel > 1 && (batch_mode == B_ON || (batch_mode == B_AUTO && t_one >= BATCH_AUTO_MIN));
    pthread_mutex_init(&S->mu, NULL);
    serve_metrics_init(&S->met);
    pthread_cond_init(&S->cv, NULL);
    S->slots = calloc((size_t)S->parallel, sizeof *S->slots);
    int rc = S->slots ? 0 : 1;
    if (!rc && S->batching && sp_pool_init(S->threads, &S->pool, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        rc = 1;
    }
    for (int i = 0; !rc && i < S->parallel; i++) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = (int32_t)run.n_ctx;
        cp.max_batch = 128;
        /* batching: every slot computes on one pool of all the threads (the
         * shared pass and speculative slots take turns per job); else the
         * threads are split between the slots */
        cp.n_threads = S->threads / S->parallel > 0 ? S->threads / S->parallel : 1;
        cp.pool = S->pool;
        cli_ctx_types(&run, &cp);
        if (sp_ctx_init(S->m, &cp, &S->slots[i].ctx, &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            rc = 1;
        }
    }
    for (int i = 0; !rc && S->online.on && i < S->parallel; i++)
        for (int d = 0; !rc && d < S->n_dm; d++) {
            sp_online_params op = S->online.p;
            op.seed = (uint64_t)run.seed + (uint64_t)(i * SP_CLI_MAX_DRAFTS + d);
            if (sp_online_init(run.draft_models[d], &op, &S->slots[i].on[d], &e) ||
                sp_online_serve(S->slots[i].on[d], NULL, S->dms[d], &S->online.sch, &e)) {
                fprintf(stderr, "specula: online learning: %s\n", e.msg);
                rc = 1;
            }
        }
    for (int i = 0; !rc && S->online.on && S->head && i < S->parallel; i++) { /* the head's, per slot */
        sp_online_params op = S->online.p;
        op.seed = (uint64_t)run.seed + (uint64_t)i;
        if (sp_online_init_head(run.draft_model, S->head, &op, &S->slots[i].on[0], &e) ||
            sp_online_serve(S->slots[i].on[0], NULL, NULL, &S->online.sch, &e)) {
            fprintf(stderr, "specula: online learning: %s\n", e.msg);
            rc = 1;
        }
    }
    if (!rc) S->n_ctx = sp_ctx_n_ctx(S->slots[0].ctx);
    for (int i = 0; !rc && i < S->parallel; i++)
        if (!(S->slots[i].toks = malloc((size_t)S->n_ctx * sizeof *S->slots[i].toks))) {
            fprintf(stderr, "specula: out of memory for the prompt caches\n");
            rc = 1;
        }
    /* the shared passes: the target's; each draft model's too, unless
     * --online swaps the drafts for snapshots (other weights) */
    if (!rc && S->batching && sp_batch_init(S->m, 128, &S->bat, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        rc = 1;
    }
    for (int d = 0; !rc && S->batching && S->spec_batching && !S->online.on && d < S->n_dm; d++)
        if (sp_batch_init(S->dms[d], SP_CTX_DEFAULT_BATCH, &S->dbat[d], &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            rc = 1;
        }
    /* SIGINT/SIGTERM are taken by sigwait below; every thread inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = NULL;
    /* connections: up to what the descriptor limit allows (raised to its
     * hard limit, at most 8192) less a reserve, and at most 4096 */
    struct rlimit nofile;
    unsigned max_conn = 1024;
    if (!getrlimit(RLIMIT_NOFILE, &nofile)) {
        if (nofile.rlim_cur < nofile.rlim_max) {
            nofile.rlim_cur = nofile.rlim_max > 8192 ? 8192 : nofile.rlim_max;
            setrlimit(RLIMIT_NOFILE, &nofile);
            getrlimit(RLIMIT_NOFILE, &nofile);
        }
        max_conn = nofile.rlim_cur > 4096 + 128 ? 4096 : nofile.rlim_cur > 256 ? (unsigned)nofile.rlim_cur - 128 : 128;
    }
    if (!rc) {
        d = serve_http_start(S, &addr, max_conn);
        if (!d) {
            fprintf(stderr, "specula: cannot listen on %s:%lld (in use, or not allowed)\n", host, port);
            rc = 1;
        }
    }
    if (!rc) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        char how[96] = "";
        if (S->parallel > 1)
            snprintf(how, sizeof how, ", %s%s", S->batching ? "continuous batching" : "no batching",
                     t_one > 0 ? (S->batching ? " (auto)" : " (auto: a forward is cheaper than a hand-off)") : "");
        fprintf(stderr, "specula: serving %s (%s, chat template %s, %d slot%s, speculation %s%s) on http://%s:%u\n",
                S->model_id, sp_model_desc(S->m), sp_chat_name(S->tmpl), S->parallel, S->parallel > 1 ? "s" : "",
                S->defaults.draft.kind == SP_DRAFT_NONE ? "off" : sp_drafter_name(S->defaults.draft.kind), how,
                host, di ? (unsigned)di->port : (unsigned)port);
        cli_kv_print(S->slots[0].ctx); /* per slot */
        int sig = 0;
        sigwait(&set, &sig);
        /* draining: stop accepting, answer the queue 503 shutting_down,
         * let running requests finish within the grace, then cut them
         * (streams still end with a final chunk and [DONE]) */
        fprintf(stderr, "specula: %s: draining (%d running, up to %g s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                atomic_load(&S->inflight), grace);
        atomic_store(&S->draining, true);
        const MHD_socket lfd = MHD_quiesce_daemon(d);
        if (lfd != MHD_INVALID_SOCKET) close(lfd);
        pthread_mutex_lock(&S->mu);
        pthread_cond_broadcast(&S->cv);
        pthread_mutex_unlock(&S->mu);
        const double t_end = sp_now() + grace;
        while (atomic_load(&S->inflight) > 0 && sp_now() < t_end) usleep(5000);
        if (atomic_load(&S->inflight) > 0) {
            fprintf(stderr, "specula: grace over: cutting %d running requests\n", atomic_load(&S->inflight));
            atomic_store(&S->stopping, true);
            const double t_cut = sp_now() + 10; /* their final replies */
            while (atomic_load(&S->inflight) > 0 && sp_now() < t_cut) usleep(5000);
        }
        atomic_store(&S->stopping, true);
        MHD_stop_daemon(d);
    }
    sp_batch_free(S->bat);
    for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_batch_free(S->dbat[d]);
    serve_metrics_free(&S->met);
    for (int i = 0; S->slots && i < S->parallel; i++) {
        sp_spec_free(S->slots[i].plain);
        for (int j = 0; j < SERVE_SPEC_CACHE; j++) sp_spec_free(S->slots[i].spec[j]);
        free(S->slots[i].toks);
        for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++)
            sp_online_free(S->slots[i].on[d]); /* after the specs: one of them may draft with its snapshot */
        sp_ctx_free(S->slots[i].ctx);
    }
    free(S->slots);
    sp_pool_free(S->pool);
    sp_router_free(S->router);
    sp_suffix_corpus_free(S->suffix_corpus);
    serve_lowbit_free(S->lowbit); /* after the slots' specs, which draft with its copies */
    for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(S->dms[d]); /* dms[0] is dm */
    sp_eagle3_free(S->head);
    sp_model_free(S->m);
    return rc;
}
