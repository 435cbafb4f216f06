/* cmd_bench_forward: `specula bench-forward`, the speed of the forward pass:
 * batch-1 decode rate, the cost of one k-token forward (the verification
 * step of speculative decoding) at a fixed KV depth, and the effective
 * weight-streaming bandwidth. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ops.h"
#include "specula.h"

#define N_KS 5
static const int32_t KS[N_KS] = {1, 2, 4, 8, 16};

typedef struct bench_opts {
    const char *model;
    long long threads, reps, depth, decode;
    bool json;
} bench_opts;

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: specula bench-forward -m MODEL [-t THREADS] [--reps R] [--depth D]\n"
            "         [--decode N] [--json]\n"
            "  Decode: N single-token forwards from an empty cache (default 32), rate\n"
            "  is the median over R reps (default 5). Then, with D tokens cached\n"
            "  (default 128), the median time of one forward over k = 1, 2, 4, 8, 16\n"
            "  new tokens (all logits), the cache truncated back to D after each.\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A fixed, model-independent token stream (ids 3.. avoid the specials). */
static int32_t tok_at(int64_t i, int32_t n_vocab) {
    return n_vocab > 4 ? (int32_t)(3 + (i * 7919) % (n_vocab - 3)) : 0;
}

/* Forward n tokens starting at the cache's current end. */
static sp_status fwd(sp_ctx *c, int32_t n, int64_t seq0, bool all, float *logits, sp_error *err) {
    int32_t tok[64];
    const int32_t V = sp_model_cfg(sp_ctx_model(c))->n_vocab;
    for (int32_t i = 0; i < n; i++) tok[i] = tok_at(seq0 + i, V);
    sp_batch b = {.tokens = tok, .n = n, .logits_all = all};
    return sp_forward(c, &b, logits, err);
}

static int parse_bench(int argc, char **argv, bench_opts *o) {
    o->threads = 2;
    o->reps = 5;
    o->depth = 128;
    o->decode = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) {
                fprintf(stderr, "specula: %s needs a value\n", a);
                return 2;
            }
            o->model = v;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (sp_cli_int(a, v, 1, 256, &o->threads)) return 2;
            i++;
        } else if (!strcmp(a, "--reps")) {
            if (sp_cli_int(a, v, 1, 10000, &o->reps)) return 2;
            i++;
        } else if (!strcmp(a, "--depth")) {
            if (sp_cli_int(a, v, 0, 1 << 16, &o->depth)) return 2;
            i++;
        } else if (!strcmp(a, "--decode")) {
            if (sp_cli_int(a, v, 1, 1 << 16, &o->decode)) return 2;
            i++;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return -1;
        } else {
            fprintf(stderr, "specula: unknown option '%s' for bench-forward\n", a);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "specula: bench-forward needs a model (-m MODEL)\n");
        return 2;
    }
    return 0;
}

int cmd_bench_forward(int argc, char **argv) {
    bench_opts o = {0};
    int rc = parse_bench(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    sp_error err = {0};
    sp_model *m = NULL;
    sp_ctx *c = NULL;
    float *logits = NULL;
    double *times = NULL;
    rc = 1;
    if (sp_model_load(o.model, NULL, &m, &err)) goto fail;
    const sp_model_config *cfg = sp_model_cfg(m);
    sp_ctx_params cp = sp_ctx_default_params();
    const int64_t need = (o.decode > o.depth + KS[N_KS - 1] ? o.decode : o.depth + KS[N_KS - 1]) + 1;
    cp.n_ctx = (int32_t)need;
    cp.max_batch = 64;
    cp.n_threads = (int32_t)o.threads;
    if (sp_ctx_init(m, &cp, &c, &err)) goto fail;
    logits = malloc((size_t)64 * (size_t)cfg->n_vocab * sizeof(float));
    times = malloc((size_t)o.reps * sizeof(double));
    if (!logits || !times) {
        sp_fail(&err, SP_ERR_NOMEM, "out of memory");
        goto fail;
    }

    /* warm-up: touch every weight page once */
    if (fwd(c, 1, 0, false, logits, &err) || sp_ctx_truncate(c, 0, &err)) goto fail;

    /* batch-1 decode from an empty cache */
    for (long long r = 0; r < o.reps; r++) {
        if (sp_ctx_truncate(c, 0, &err)) goto fail;
        double t0 = now_s();
        for (long long i = 0; i < o.decode; i++)
            if (fwd(c, 1, i, false, logits, &err)) goto fail;
        times[r] = (now_s() - t0) / (double)o.decode;
    }
    const double t_decode = median(times, (int)o.reps);

    /* k-token forwards at a fixed depth */
    if (sp_ctx_truncate(c, 0, &err)) goto fail;
    for (int64_t done = 0; done < o.depth;) {
        int32_t n = o.depth - done > 64 ? 64 : (int32_t)(o.depth - done);
        if (fwd(c, n, done, false, logits, &err)) goto fail;
        done += n;
    }
    double t_k[N_KS];
    for (int ki = 0; ki < N_KS; ki++) {
        for (long long r = 0; r < o.reps; r++) {
            double t0 = now_s();
            if (fwd(c, KS[ki], o.depth, true, logits, &err)) goto fail;
            times[r] = now_s() - t0;
            if (sp_ctx_truncate(c, (int32_t)o.depth, &err)) goto fail;
        }
        t_k[ki] = median(times, (int)o.reps);
    }

    const double wbytes = (double)sp_model_weight_bytes(m);
    const double gbs = wbytes / t_decode / 1e9;
    const char *isa = sp_ops_isa_name(sp_ops_isa());
    if (o.json) {
        json_t *ks = json_array();
        for (int ki = 0; ki < N_KS; ki++)
            json_array_append_new(ks, json_pack("{s:i,s:f,s:f}", "k", KS[ki], "ms", 1e3 * t_k[ki],
                                                "ratio", t_k[ki] / t_k[0]));
        json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:o}", "model", o.model,
                              "desc", sp_model_desc(m), "isa", isa, "threads", (int)o.threads,
                              "depth", (int)o.depth, "reps", (int)o.reps, "decode_tok_s",
                              1.0 / t_decode, "weight_bytes", wbytes, "gb_s", gbs, "pct_22gb_s",
                              100.0 * gbs / 22.0, "forward", ks);
        char *s = json_dumps(j, JSON_COMPACT);
        if (s) printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("model   %s (%s)\n", o.model, sp_model_desc(m));
        printf("isa     %s, %lld threads, %.1f MB of weights\n", isa, o.threads, wbytes / 1e6);
        printf("decode  %.2f tok/s (%.3f ms/token, median of %lld reps x %lld tokens)\n",
               1.0 / t_decode, 1e3 * t_decode, o.reps, o.decode);
        printf("stream  %.2f GB/s (%.0f%% of 22 GB/s)\n", gbs, 100.0 * gbs / 22.0);
        printf("forward at depth %lld (median of %lld):\n", o.depth, o.reps);
        printf("  %3s %10s %8s\n", "k", "ms", "vs k=1");
        for (int ki = 0; ki < N_KS; ki++)
            printf("  %3d %10.3f %8.2f\n", KS[ki], 1e3 * t_k[ki], t_k[ki] / t_k[0]);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "specula: bench-forward: %s\n", err.msg);
    free(logits);
    free(times);
    sp_ctx_free(c);
    sp_model_free(m);
    return rc;
}
