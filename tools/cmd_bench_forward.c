/* cmd_bench_forward: `specula bench-forward`, the speed of the forward pass:
 * batch-1 decode rate, the cost of one k-token forward (the verification
 * step of speculative decoding) at a fixed KV depth, and the effective
 * weight-streaming bandwidth as a percentage of the read bandwidth measured
 * in the same run (a streaming read over a buffer well beyond the LLC, with
 * the same thread count), so figures from different machines and days say
 * how close decode is to the bound (for a mixture of experts, of the weights
 * a token reads: the selected experts' share), and for a mixture of experts
 * the experts per layer a k-token forward reads (the union of its tokens'
 * selections). Load and warm-up times are reported;
 * every timed figure comes after one forward has touched every weight. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "clock.h"
#include "dev/sp_sysinfo.h"
#include "specula.h"

#define N_KS 5
static const int32_t KS[N_KS] = {1, 2, 4, 8, 16};
/* tokens per forward when filling the cache to the depth (the library's default batch) */
#define FILL SP_CTX_DEFAULT_BATCH
#define MAX_DEPTHS 8
/* most tokens per forward of the prefill (--ubatch) */
#define MAX_UBATCH 512

typedef struct bench_opts {
    const char *model;
    long long threads, reps, decode, bound_mb, prefill, ubatch;
    long long depths[MAX_DEPTHS]; /* increasing */
    int n_depths;
    sp_ggml_type type_k, type_v;
    bool json;
} bench_opts;

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: specula bench-forward -m MODEL [-t THREADS] [--reps R] [--depth D | --depths D1,D2,..]\n"
            "         [--decode N] [--prefill P [--ubatch U]] [--bound-mb MB] [-ctk f16|f32|q8_0]\n"
            "         [-ctv f16|f32|q8_0] [--json]\n"
            "  Bound: read bandwidth over an MB-megabyte buffer (default 1024 or 4x the\n"
            "  last-level cache, whichever is larger) with the\n"
            "  same threads, best of 5 passes. Decode: N single-token forwards from an\n"
            "  empty cache (default 32), rate is the median over R reps (default 5).\n"
            "  Then, with D tokens cached (default 128), the median time of one forward\n"
            "  over k = 1, 2, 4, 8, 16 new tokens (all logits; the cache first grown\n"
            "  untimed to hold them), the cache truncated back\n"
            "  to D after each; --depths: the same at each depth (up to 8, increasing),\n"
            "  one table. -ctk / -ctv: KV cache types (default f16). --prefill: also\n"
            "  the median time to process a P-token prompt from an empty cache in\n"
            "  forwards of up to U tokens (default and at most 512), the last token's\n"
            "  logits only (llama-bench -p P). Rollback: after a k = 4 forward at the\n"
            "  first depth, the median time to truncate the cache to depth + 3 (keeping\n"
            "  three of the four tokens: a rejected last draft; a hybrid model replays\n"
            "  its recurrence over the kept tokens), also as a share of that forward.\n");
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
    int32_t tok[MAX_UBATCH > FILL ? MAX_UBATCH : FILL];
    const int32_t V = sp_model_cfg(sp_ctx_model(c))->n_vocab;
    for (int32_t i = 0; i < n; i++) tok[i] = tok_at(seq0 + i, V);
    sp_batch b = {.tokens = tok, .n = n, .logits_all = all};
    return sp_forward(c, &b, logits, err);
}

static int parse_bench(int argc, char **argv, bench_opts *o) {
    /* the bound's buffer: 1 GiB, or 4x the last-level cache if that is larger */
    const long long llc_mb = (long long)(sp_sysinfo_llc_bytes() >> 20);
    const sp_ctx_params dp = sp_ctx_default_params();
    *o = (bench_opts){.threads = 2, .reps = 5, .depths = {128}, .n_depths = 1, .decode = 32,
                      .bound_mb = 4 * llc_mb > 1024 ? 4 * llc_mb : 1024, .type_k = dp.type_k,
                      .type_v = dp.type_v, .ubatch = FILL};
    enum { O_REPS = SP_OPT_CMD, O_DEPTH, O_DECODE, O_BOUND, O_JSON, O_DEPTHS, O_CTK, O_CTV, O_PREFILL, O_UBATCH };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'},     {"threads", required_argument, NULL, 't'},
        {"reps", required_argument, NULL, O_REPS},   {"depth", required_argument, NULL, O_DEPTH},
        {"decode", required_argument, NULL, O_DECODE}, {"bound-mb", required_argument, NULL, O_BOUND},
        {"json", no_argument, NULL, O_JSON},         {"help", no_argument, NULL, 'h'},
        {"depths", required_argument, NULL, O_DEPTHS}, {"ctk", required_argument, NULL, O_CTK},
        {"cache-type-k", required_argument, NULL, O_CTK}, {"ctv", required_argument, NULL, O_CTV},
        {"cache-type-v", required_argument, NULL, O_CTV}, {"prefill", required_argument, NULL, O_PREFILL},
        {"ubatch", required_argument, NULL, O_UBATCH},
        {NULL, 0, NULL, 0}};
    const char *flag;
    int opt;
    optind = 0;
    while ((opt = cli_next(argc, argv, "m:t:h", longopts, "bench-forward", &flag)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'm': o->model = optarg; break;
        case 't': bad = cli_int(flag, optarg, 1, 256, &o->threads); break;
        case O_REPS: bad = cli_int(flag, optarg, 1, 10000, &o->reps); break;
        case O_DEPTH:
            bad = cli_int(flag, optarg, 0, 1 << 20, &o->depths[0]);
            o->n_depths = 1;
            break;
        case O_DEPTHS: {
            /* comma-separated, increasing */
            char buf[256];
            snprintf(buf, sizeof buf, "%s", optarg);
            o->n_depths = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && !bad; t = strtok_r(NULL, ",", &save)) {
                if (o->n_depths == MAX_DEPTHS) {
                    fprintf(stderr, "specula: %s: at most %d depths\n", flag, MAX_DEPTHS);
                    return 2;
                }
                bad = cli_int(flag, t, 0, 1 << 20, &o->depths[o->n_depths]);
                if (!bad && o->n_depths > 0 && o->depths[o->n_depths] <= o->depths[o->n_depths - 1]) {
                    fprintf(stderr, "specula: %s: depths must increase (%s)\n", flag, optarg);
                    return 2;
                }
                o->n_depths++;
            }
            if (!bad && o->n_depths == 0) {
                fprintf(stderr, "specula: %s: no depth given\n", flag);
                return 2;
            }
            break;
        }
        case O_CTK:
        case O_CTV:
            if (!sp_kv_type_parse(optarg, opt == O_CTK ? &o->type_k : &o->type_v)) {
                fprintf(stderr, "specula: %s: unknown KV cache type '%s' (f32, f16 or q8_0)\n", flag, optarg);
                return 2;
            }
            break;
        case O_DECODE: bad = cli_int(flag, optarg, 1, 1 << 16, &o->decode); break;
        case O_PREFILL: bad = cli_int(flag, optarg, 1, 1 << 20, &o->prefill); break;
        case O_UBATCH: bad = cli_int(flag, optarg, 1, MAX_UBATCH, &o->ubatch); break;
        case O_BOUND: bad = cli_int(flag, optarg, 1, 1 << 16, &o->bound_mb); break;
        case O_JSON: o->json = true; break;
        case 'h': bench_usage(stdout); return -1;
        default: return 2;
        }
        if (bad) return 2;
    }
    if (!o->model) {
        fprintf(stderr, "specula: bench-forward needs a model (-m MODEL)\n");
        return 2;
    }
    return 0;
}

/* Prints the table (or one JSON object) of one bench-forward run: t_k[d][ki]
 * is the forward of KS[ki] tokens at depth o.depths[d]; k_experts[ki] the
 * experts read per layer by that forward at the first depth (mixtures). */
static void report(const bench_opts *po, const sp_model *m, const sp_ctx *c, double bound, double load_ms,
                   double warm_ms, double t_decode, double (*t_k)[N_KS], double decode_experts,
                   const double *k_experts, double t_prefill, double t_rollback) {
    const bench_opts o = *po;
    /* a mixture of experts reads only the selected experts: the weights a
     * decode step streams are the rest plus that share of the experts */
    const sp_model_config *cfg = sp_model_cfg(m);
    const double ebytes = (double)sp_model_expert_bytes(m);
    const double wbytes = (double)sp_model_weight_bytes(m) - ebytes +
                          (cfg->n_expert ? ebytes * decode_experts / cfg->n_expert : 0);
    const double gbs = wbytes / t_decode / 1e9, pct = bound > 0 ? 100.0 * gbs / bound : 0;
    const char *isa = sp_sysinfo_isa();
    const char *tk = sp_ggml_type_name(o.type_k), *tv = sp_ggml_type_name(o.type_v);
    char cpu[128];
    sp_sysinfo_cpu(cpu, sizeof cpu);
    if (o.json) {
        /* "forward": the first depth's (as before --depths); "depths": all */
        json_t *ks = json_array(), *ds = json_array();
        for (int d = 0; d < o.n_depths; d++) {
            json_t *row = json_array();
            for (int ki = 0; ki < N_KS; ki++) {
                json_t *e = json_pack("{s:i,s:f,s:f,s:f}", "k", KS[ki], "ms", 1e3 * t_k[d][ki], "ratio",
                                      t_k[d][ki] / t_k[d][0], "experts_per_layer",
                                      d == 0 ? k_experts[ki] : 0.0);
                if (d == 0) json_array_append(ks, e);
                json_array_append_new(row, e);
            }
            json_array_append_new(ds, json_pack("{s:i,s:o}", "depth", (int)o.depths[d], "forward", row));
        }
        json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:o,s:o,s:o}", "model",
                              o.model, "desc", sp_model_desc(m), "cpu", cpu, "isa", isa, "threads",
                              (int)o.threads, "depth", (int)o.depths[0], "reps", (int)o.reps,
                              "decode_tok_s", 1.0 / t_decode, "weight_bytes", wbytes, "gb_s", gbs,
                              "bound_gb_s", bound, "pct_of_bound", pct, "load_ms", load_ms,
                              "warm_ms", warm_ms, "forward", ks, "depths", ds, "kv_cache", cli_kv_json(c));
        json_object_set_new(j, "rollback", json_pack("{s:i,s:i,s:f,s:f}", "k", 4, "kept", 3, "ms", 1e3 * t_rollback,
                                                     "of_forward", t_rollback / t_k[0][2]));
        if (o.prefill)
            json_object_set_new(j, "prefill", json_pack("{s:i,s:i,s:f,s:f}", "tokens", (int)o.prefill, "ubatch",
                                                        (int)o.ubatch, "ms", 1e3 * t_prefill, "tok_s",
                                                        (double)o.prefill / t_prefill));
        char *js = json_dumps(j, JSON_COMPACT);
        if (js) printf("%s\n", js);
        free(js);
        json_decref(j);
    } else {
        printf("model   %s (%s)\n", o.model, sp_model_desc(m));
        printf("cpu     %s, isa %s, %lld threads, %.1f MB of weights\n", cpu, isa, o.threads, wbytes / 1e6);
        printf("kv      K %s, V %s: %.1f MiB at the largest depth's context (%d tokens)\n", tk, tv,
               (double)sp_ctx_kv_bytes(c) / (1 << 20), sp_ctx_n_ctx(c));
        printf("scratch %.1f MiB for forwards of up to %d tokens\n", (double)sp_ctx_scratch_bytes(c) / (1 << 20),
               sp_ctx_max_batch(c));
        printf("bound   %.2f GB/s read bandwidth measured now (%lld MB buffer, %lld threads)\n", bound,
               o.bound_mb, o.threads);
        printf("load    %.1f ms, first forward (warm-up) %.1f ms\n", load_ms, warm_ms);
        printf("decode  %.2f tok/s (%.3f ms/token, median of %lld reps x %lld tokens)\n",
               1.0 / t_decode, 1e3 * t_decode, o.reps, o.decode);
        if (cfg->n_expert)
            printf("experts %d of %d per token; decode reads %.2f per layer (%.1f MB of weights per token)\n",
                   cfg->n_expert_used, cfg->n_expert, decode_experts, wbytes / 1e6);
        printf("stream  %.2f GB/s of weights = %.0f%% of the bound\n", gbs, pct);
        if (o.prefill)
            printf("prefill %.2f tok/s (%lld tokens in forwards of %lld: %.1f ms, median of %lld)\n",
                   (double)o.prefill / t_prefill, o.prefill, o.ubatch, 1e3 * t_prefill, o.reps);
        printf("rollback %.3f ms to keep 3 of a k=4 forward's tokens at depth %lld (%.1f%% of that forward)\n",
               1e3 * t_rollback, o.depths[0], 100.0 * t_rollback / t_k[0][2]);
        if (o.n_depths == 1) {
            printf("forward at depth %lld (median of %lld):\n", o.depths[0], o.reps);
            /* mixtures: the union of the experts the k tokens select, read once per layer */
            printf("  %3s %10s %8s%s\n", "k", "ms", "vs k=1", cfg->n_expert ? "  experts/layer" : "");
            for (int ki = 0; ki < N_KS; ki++) {
                printf("  %3d %10.3f %8.2f", KS[ki], 1e3 * t_k[0][ki], t_k[0][ki] / t_k[0][0]);
                if (cfg->n_expert) printf(" %14.2f", k_experts[ki]);
                printf("\n");
            }
        } else {
            printf("forward ms at each depth (median of %lld), KV K %s V %s:\n", o.reps, tk, tv);
            printf("  %7s", "depth");
            for (int ki = 0; ki < N_KS; ki++) printf("  k=%-6d", KS[ki]);
            printf("  %6s %6s %10s\n", "k8/k1", "k16/k1", "decode/s");
            for (int d = 0; d < o.n_depths; d++) {
                printf("  %7lld", o.depths[d]);
                for (int ki = 0; ki < N_KS; ki++) printf("  %8.3f", 1e3 * t_k[d][ki]);
                printf("  %6.2f %6.2f %10.2f\n", t_k[d][3] / t_k[d][0], t_k[d][4] / t_k[d][0], 1.0 / t_k[d][0]);
            }
        }
    }
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
    double(*t_k)[N_KS] = NULL;
    rc = 1;
    double bound = 0;
    if (sp_sysinfo_read_bandwidth((int)o.threads, (size_t)o.bound_mb << 20, 5, &bound, &err)) goto fail;
    const double t_load0 = sp_now();
    if (sp_model_load(o.model, NULL, &m, &err)) goto fail;
    const double load_ms = 1e3 * (sp_now() - t_load0);
    const sp_model_config *cfg = sp_model_cfg(m);
    sp_ctx_params cp = sp_ctx_default_params();
    const long long deepest = o.depths[o.n_depths - 1];
    int64_t need = (o.decode > deepest + KS[N_KS - 1] ? o.decode : deepest + KS[N_KS - 1]) + 1;
    if (o.prefill + 1 > need) need = o.prefill + 1;
    cp.n_ctx = (int32_t)need;
    cp.type_k = o.type_k;
    cp.type_v = o.type_v;
    cp.max_batch = o.ubatch > FILL ? (int32_t)o.ubatch : FILL;
    cp.n_threads = (int32_t)o.threads;
    if (sp_ctx_init(m, &cp, &c, &err)) goto fail;
    logits = malloc((size_t)cp.max_batch * (size_t)cfg->n_vocab * sizeof(float));
    times = malloc((size_t)o.reps * sizeof(double));
    t_k = malloc((size_t)o.n_depths * sizeof *t_k);
    if (!logits || !times || !t_k) {
        sp_fail(&err, SP_ERR_NOMEM, "out of memory");
        goto fail;
    }

    /* warm-up: touch every weight page once (timed: a cold mapping is read
     * from disk or the page cache here, not during the measurements) */
    const double t_warm0 = sp_now();
    if (fwd(c, 1, 0, false, logits, &err) || sp_ctx_truncate(c, 0, &err)) goto fail;
    const double warm_ms = 1e3 * (sp_now() - t_warm0);

    /* batch-1 decode from an empty cache */
    uint64_t reads, steps;
    sp_ctx_expert_reads_reset(c);
    for (long long r = 0; r < o.reps; r++) {
        if (sp_ctx_truncate(c, 0, &err)) goto fail;
        double t0 = sp_now();
        for (long long i = 0; i < o.decode; i++)
            if (fwd(c, 1, i, false, logits, &err)) goto fail;
        times[r] = (sp_now() - t0) / (double)o.decode;
    }
    const double t_decode = median(times, (int)o.reps);
    sp_ctx_expert_reads(c, &reads, &steps);
    const double decode_experts = steps ? (double)reads / (double)steps : 0;

    /* prefill: the prompt from an empty cache, the last token's logits */
    double t_prefill = 0;
    if (o.prefill) {
        for (long long r = 0; r < o.reps; r++) {
            if (sp_ctx_truncate(c, 0, &err)) goto fail;
            double t0 = sp_now();
            for (int64_t done = 0; done < o.prefill;) {
                const int32_t n = o.prefill - done > o.ubatch ? (int32_t)o.ubatch : (int32_t)(o.prefill - done);
                if (fwd(c, n, done, false, logits, &err)) goto fail;
                done += n;
            }
            times[r] = sp_now() - t0;
        }
        t_prefill = median(times, (int)o.reps);
    }

    /* k-token forwards at each depth, the cache filled on from the last */
    if (sp_ctx_truncate(c, 0, &err)) goto fail;
    double k_experts[N_KS] = {0}, t_rollback = 0;
    int64_t done = 0;
    for (int d = 0; d < o.n_depths; d++) {
        const int64_t depth = o.depths[d];
        while (done < depth) {
            int32_t n = depth - done > FILL ? FILL : (int32_t)(depth - done);
            if (fwd(c, n, done, false, logits, &err)) goto fail;
            done += n;
        }
        /* untimed: the cache grows (lazily, kv.h) to hold the largest k
         * here, not inside a timed forward */
        if (fwd(c, KS[N_KS - 1], depth, true, logits, &err) || sp_ctx_truncate(c, (int32_t)depth, &err)) goto fail;
        for (int ki = 0; ki < N_KS; ki++) {
            sp_ctx_expert_reads_reset(c);
            for (long long r = 0; r < o.reps; r++) {
                double t0 = sp_now();
                if (fwd(c, KS[ki], depth, true, logits, &err)) goto fail;
                times[r] = sp_now() - t0;
                if (sp_ctx_truncate(c, (int32_t)depth, &err)) goto fail;
            }
            t_k[d][ki] = median(times, (int)o.reps);
            sp_ctx_expert_reads(c, &reads, &steps);
            if (d == 0) k_experts[ki] = steps ? (double)reads / (double)steps : 0;
        }
        if (d == 0) { /* rollback of the last of 4 tokens (KS[2] == 4) */
            for (long long r = 0; r < o.reps; r++) {
                if (fwd(c, KS[2], depth, true, logits, &err)) goto fail;
                double t0 = sp_now();
                if (sp_ctx_truncate(c, (int32_t)depth + KS[2] - 1, &err)) goto fail;
                times[r] = sp_now() - t0;
                if (sp_ctx_truncate(c, (int32_t)depth, &err)) goto fail;
            }
            t_rollback = median(times, (int)o.reps);
        }
    }

    report(&o, m, c, bound, load_ms, warm_ms, t_decode, t_k, decode_experts, k_experts, t_prefill, t_rollback);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "specula: bench-forward: %s\n", err.msg);
    free(logits);
    free(times);
    free(t_k);
    sp_ctx_free(c);
    sp_model_free(m);
    return rc;
}
