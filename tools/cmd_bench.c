/* cmd_bench: `specula bench`, the speculation benchmark harness: every
 * configuration over every prompt in one process (models loaded once,
 * configurations interleaved per prompt so machine drift hits all alike),
 * then a table, results.json, results.csv and gnuplot plots. Exit 2 for bad
 * input, 1 for runtime failures. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "sp_file.h"
#include "cli.h"
#include "specula.h"

#define DEFAULT_PROMPTS "bench/prompts/stories.jsonl"
#define MAX_PROMPTS 100000

typedef struct bench_opts {
    const char *prompts, *configs, *out_dir;
    sp_cli_run_opts run;
    long long repeat;
    bool json;
} bench_opts;

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: specula bench -m MODEL [-z TOKENIZER] [-md DRAFT [-zd TOKENIZER]]\n"
            "         [--prompts FILE.jsonl] [--configs \"CFG;CFG;...\"] [-n N] [--repeat R]\n"
            "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [-t THREADS]\n"
            "         [-c N_CTX] [--out DIR] [--json]\n"
            "  Runs every configuration on every prompt (one JSON object with a \"prompt\"\n"
            "  field per line; default %s) and reports acceptance rate, block\n"
            "  efficiency, mean accepted length, tokens/s and speedup over plain decoding.\n"
            "  CFG: plain | key=value,... with keys draft (model|ngram|layerskip|lowbit),\n"
            "    verify, gamma, tree, adaptive, p_min, ngram_min, ngram_max, skip, lowbit,\n"
            "    lenience; e.g. \"draft=model,gamma=4;draft=layerskip,skip=1,3,gamma=4\".\n"
            "  Plain decoding is always run first. Writes results.json, results.csv and\n"
            "  PNG plots into DIR (default bench-out); --json prints results.json to stdout.\n",
            DEFAULT_PROMPTS);
}

/* Parses bench's flags; returns 0, -1 for --help, or 2 after printing the problem. */
static int parse_bench(int argc, char **argv, bench_opts *o) {
    sp_cli_run_opts_default(&o->run);
    o->repeat = 1;
    o->out_dir = "bench-out";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEXT() (i++, v)
        int shared = sp_cli_run_flag(a, v, &o->run);
        if (shared < 0) return 2;
        if (shared > 0) {
            i++;
        } else if (!strcmp(a, "--prompts")) {
            if (!(o->prompts = NEXT())) goto missing;
        } else if (!strcmp(a, "--configs")) {
            if (!(o->configs = NEXT())) goto missing;
        } else if (!strcmp(a, "--out")) {
            if (!(o->out_dir = NEXT())) goto missing;
            if (!*o->out_dir) {
                fprintf(stderr, "specula: --out needs a directory name\n");
                return 2;
            }
        } else if (!strcmp(a, "--repeat")) {
            if (sp_cli_int(a, NEXT(), 1, 10000, &o->repeat)) return 2;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return -1;
        } else {
            fprintf(stderr, "specula: unknown option '%s' for bench (try 'specula bench --help')\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "specula: %s needs a value\n", a);
        return 2;
#undef NEXT
    }
    if (!o->run.model) {
        fprintf(stderr, "specula: bench needs a model (-m MODEL)\n");
        return 2;
    }
    return 0;
}

/* ---- prompts ---- */

typedef struct prompt_set {
    char **text;
    int n;
} prompt_set;

static void prompts_free(prompt_set *p) {
    for (int i = 0; i < p->n; i++) free(p->text[i]);
    free(p->text);
}

/* The default prompt file: relative to the working directory, else to the
 * binary (build/specula -> bench/prompts beside build/). */
static const char *default_prompts(char *buf, size_t cap) {
    if (access(DEFAULT_PROMPTS, R_OK) == 0) return DEFAULT_PROMPTS;
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    const char *dir = dirname(exe);
    const char *ups[] = {"..", "../.."};
    for (int i = 0; i < 2; i++) {
        snprintf(buf, cap, "%s/%s/%s", dir, ups[i], DEFAULT_PROMPTS);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

/* Reads a JSONL prompt file; returns 0 or 2 after printing one line. */
static int load_prompts(const char *path, prompt_set *out) {
    sp_error err;
    int fd;
    uint64_t fsize;
    if (sp_file_open(path, "prompt file", &fd, &fsize, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        return 2;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        fprintf(stderr, "specula: cannot read prompt file %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0, cap_p = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t k = (size_t)len;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ' ||
                     line[k - 1] == '\t'))
            k--;
        size_t s = 0;
        while (s < k && (line[s] == ' ' || line[s] == '\t')) s++;
        if (s == k) continue; /* blank line */
        json_error_t je;
        json_t *j = json_loadb(line + s, k - s, 0, &je);
        json_t *p = j && json_is_object(j) ? json_object_get(j, "prompt") : NULL;
        if (!j || !json_is_object(j) || !json_is_string(p) || !json_string_length(p)) {
            if (!j)
                fprintf(stderr, "specula: %s:%d: not valid JSON (%s)\n", path, lineno, je.text);
            else
                fprintf(stderr, "specula: %s:%d: expected an object with a non-empty string \"prompt\"\n",
                        path, lineno);
            json_decref(j);
            rc = 2;
            break;
        }
        if (out->n == MAX_PROMPTS) {
            fprintf(stderr, "specula: %s: more than %d prompts\n", path, MAX_PROMPTS);
            json_decref(j);
            rc = 2;
            break;
        }
        if (out->n == cap_p) {
            int nc = cap_p ? cap_p * 2 : 16;
            char **nt = realloc(out->text, (size_t)nc * sizeof *nt);
            if (!nt) {
                json_decref(j);
                fprintf(stderr, "specula: out of memory reading %s\n", path);
                rc = 1;
                break;
            }
            out->text = nt;
            cap_p = nc;
        }
        out->text[out->n] = strdup(json_string_value(p));
        json_decref(j);
        if (!out->text[out->n]) {
            fprintf(stderr, "specula: out of memory reading %s\n", path);
            rc = 1;
            break;
        }
        out->n++;
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "specula: error reading %s\n", path);
        rc = 2;
    }
    if (!rc && out->n == 0) {
        fprintf(stderr, "specula: prompt file %s has no prompts\n", path);
        rc = 2;
    }
    free(line);
    fclose(f);
    return rc;
}

/* mkdir -p; returns 0 or -1 (errno set). */
static int make_dirs(const char *path) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *s = '/';
    }
    if (mkdir(p, 0755) && errno != EEXIST) return -1;
    struct stat st;
    if (stat(p, &st)) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* ---- the run ---- */

typedef struct progress {
    bool tty;
    int64_t done, total;
    double t0, t_repeat;
} progress;

static void progress_step(progress *pg, int repeat, int n_repeat) {
    pg->done++;
    if (pg->tty) {
        int width = 30, fill = (int)(width * pg->done / pg->total);
        fprintf(stderr, "\r[bench] [%.*s%*s] %lld/%lld runs, repeat %d/%d", fill,
                "##############################", width - fill, "", (long long)pg->done,
                (long long)pg->total, repeat + 1, n_repeat);
        if (pg->done == pg->total) fprintf(stderr, "\n");
        fflush(stderr);
    }
}

static void progress_repeat_done(progress *pg, int repeat, int n_repeat) {
    double now = sp_now();
    if (!pg->tty)
        fprintf(stderr, "[bench] repeat %d/%d done in %.2f s\n", repeat + 1, n_repeat,
                now - pg->t_repeat);
    pg->t_repeat = now;
}

static int bench_main(const bench_opts *o) {
    sp_error err = {0};
    sp_model *model = NULL, *dmodel = NULL;
    sp_ctx *ctx = NULL;
    sp_spec **specs = NULL;
    sp_bench_config *cfg = NULL;
    sp_bench_agg *agg = NULL;
    sp_bench_run *runs = NULL;
    prompt_set ps = {0};
    int32_t **ptok = NULL, *np = NULL, *out = NULL;
    int n_cfg = 0, rc = 2;
    size_t n_runs = 0;
    char msg[1024], pbuf[4096];
    json_t *results = NULL;

    /* everything about the input is checked before the models load */
    const char *ppath = o->prompts;
    if (!ppath && !(ppath = default_prompts(pbuf, sizeof pbuf))) {
        fprintf(stderr, "specula: no --prompts given and the default %s was not found\n",
                DEFAULT_PROMPTS);
        return 2;
    }
    if ((rc = load_prompts(ppath, &ps))) goto done;
    rc = 2;
    const char *clist = o->configs ? o->configs : sp_bench_default_configs(o->run.draft_model != NULL);
    if (sp_bench_configs_parse(clist, o->run.draft_model != NULL, &cfg, &n_cfg, msg, sizeof msg)) {
        fprintf(stderr, "specula: %s\n", msg);
        goto done;
    }
    bool uses_model = false;
    for (int c = 0; c < n_cfg; c++) {
        uses_model |= cfg[c].spec.draft.kind == SP_DRAFT_MODEL;
        if (cfg[c].spec.verifier == SP_VERIFIER_GREEDY && o->run.sampling.temperature != 0) {
            fprintf(stderr, "specula: config '%s': verify=greedy needs --temp 0\n", cfg[c].name);
            goto done;
        }
    }
    if (o->run.draft_model && !uses_model) {
        fprintf(stderr, "specula: -md given but no configuration uses draft=model\n");
        goto done;
    }
    if (sp_sampler_params_check(&o->run.sampling, &err)) goto fail;
    if (make_dirs(o->out_dir)) {
        fprintf(stderr, "specula: cannot create output directory %s: %s\n", o->out_dir,
                strerror(errno));
        goto done;
    }

    if (sp_cli_load_models(&o->run, &model, &dmodel)) goto done;
    const sp_tokenizer *tok = sp_model_tokenizer(model);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = (int32_t)o->run.n_ctx;
    cp.n_threads = (int32_t)o->run.threads;
    int32_t extra = 0;
    for (int c = 0; c < n_cfg; c++) {
        int32_t b = sp_bench_config_batch(&cfg[c]), x = sp_bench_config_extra_ctx(&cfg[c]);
        cp.max_batch = b > cp.max_batch ? b : cp.max_batch;
        extra = x > extra ? x : extra;
    }
    if (sp_ctx_init(model, &cp, &ctx, &err)) goto fail;
    /* one target context serves every configuration (reset before each run);
     * each configuration owns its drafter */
    specs = calloc((size_t)n_cfg, sizeof *specs);
    if (!specs) goto oom;
    for (int c = 0; c < n_cfg; c++) {
        cfg[c].spec.draft.draft_model = dmodel;
        if (sp_spec_init(ctx, &cfg[c].spec, &specs[c], &err)) {
            fprintf(stderr, "specula: config '%s': %s\n", cfg[c].name, err.msg);
            rc = err.code == SP_ERR_NOMEM || err.code == SP_ERR_IO ? 1 : 2;
            goto done;
        }
    }
    const int32_t n_ctx = sp_ctx_n_ctx(ctx);
    ptok = calloc((size_t)ps.n, sizeof *ptok);
    np = calloc((size_t)ps.n, sizeof *np);
    if (!ptok || !np) goto oom;
    const bool bos = sp_tokenizer_add_bos(tok);
    for (int i = 0; i < ps.n; i++) {
        if (!(ptok[i] = malloc((size_t)n_ctx * sizeof **ptok))) goto oom;
        if (sp_tokenizer_encode(tok, ps.text[i], strlen(ps.text[i]), bos, ptok[i], n_ctx, &np[i],
                                &err) ||
            np[i] < 1) {
            if (err.code == SP_ERR_RANGE || np[i] >= n_ctx)
                fprintf(stderr, "specula: prompt %d is longer than the context size %d\n", i + 1,
                        n_ctx);
            else
                fprintf(stderr, "specula: prompt %d: %s\n", i + 1,
                        np[i] < 1 ? "encodes to no tokens" : err.msg);
            goto done;
        }
        if ((int64_t)np[i] + o->run.n_predict + extra > n_ctx) {
            fprintf(stderr,
                    "specula: prompt %d (%d tokens) plus -n %lld%s exceeds the context size %d "
                    "(lower -n or raise -c)\n",
                    i + 1, np[i], o->run.n_predict, extra ? " plus the largest tree" : "", n_ctx);
            goto done;
        }
    }
    out = malloc((size_t)o->run.n_predict * sizeof *out);
    const size_t total = (size_t)o->repeat * (size_t)ps.n * (size_t)n_cfg;
    runs = calloc(total, sizeof *runs);
    if (!out || !runs) goto oom;

    sp_gen_params gp = sp_gen_default_params();
    gp.sampling = o->run.sampling;
    /* warm-up (not recorded): one short run per configuration, so the first
     * configuration timed does not pay for cold caches and page faults */
    gp.n_predict = o->run.n_predict < 16 ? (int32_t)o->run.n_predict : 16;
    gp.seed = (uint64_t)o->run.seed;
    for (int c = 0; c < n_cfg; c++) {
        if (sp_spec_reset(specs[c], &err) ||
            sp_spec_generate(specs[c], ptok[0], np[0], &gp, out, (int32_t)o->run.n_predict, NULL, NULL,
                             NULL, NULL, &err)) {
            fprintf(stderr, "specula: config '%s' (warm-up): %s\n", cfg[c].name, err.msg);
            rc = 1;
            goto done;
        }
    }
    gp.n_predict = (int32_t)o->run.n_predict;
    progress pg = {.tty = isatty(2), .total = (int64_t)total, .t0 = sp_now()};
    pg.t_repeat = pg.t0;
    for (int r = 0; r < o->repeat; r++) {
        for (int i = 0; i < ps.n; i++) {
            /* the same seed for every configuration on this (prompt, repeat) */
            gp.seed = (uint64_t)o->run.seed + (uint64_t)r * (uint64_t)ps.n + (uint64_t)i;
            for (int c = 0; c < n_cfg; c++) {
                sp_bench_run *run = &runs[n_runs];
                sp_gen_stats gs;
                *run = (sp_bench_run){.config = c, .prompt = i, .repeat = r, .seed = gp.seed,
                                      .n_prompt = np[i]};
                if (sp_spec_reset(specs[c], &err) ||
                    sp_spec_generate(specs[c], ptok[i], np[i], &gp, out, (int32_t)o->run.n_predict, &gs,
                                     &run->spec, NULL, NULL, &err)) {
                    if (pg.tty) fprintf(stderr, "\n");
                    fprintf(stderr, "specula: config '%s', prompt %d: %s\n", cfg[c].name, i + 1,
                            err.msg);
                    rc = 1;
                    goto done;
                }
                run->n_generated = gs.n_generated;
                run->t_prefill = gs.t_prefill;
                run->t_generate = gs.t_generate;
                run->hit_eog = gs.hit_eog;
                n_runs++;
                progress_step(&pg, r, (int)o->repeat);
            }
        }
        progress_repeat_done(&pg, r, (int)o->repeat);
    }

    agg = calloc((size_t)n_cfg, sizeof *agg);
    if (!agg || sp_bench_aggregate(runs, n_runs, n_cfg, (int)o->repeat, agg)) goto oom;
    json_t *meta = json_object();
    json_object_set_new(meta, "model", json_string(o->run.model));
    json_object_set_new(meta, "model_desc", json_string(sp_model_desc(model)));
    if (dmodel) {
        json_object_set_new(meta, "draft_model", json_string(o->run.draft_model));
        json_object_set_new(meta, "draft_model_desc", json_string(sp_model_desc(dmodel)));
    }
    json_object_set_new(meta, "prompts_file", json_string(ppath));
    json_object_set_new(meta, "n_prompts", json_integer(ps.n));
    json_object_set_new(meta, "n_predict", json_integer(o->run.n_predict));
    json_object_set_new(meta, "repeat", json_integer(o->repeat));
    json_object_set_new(meta, "seed", json_integer(o->run.seed));
    json_object_set_new(meta, "threads", json_integer(o->run.threads));
    json_object_set_new(meta, "n_ctx", json_integer(n_ctx));
    json_object_set_new(meta, "temperature", json_real(o->run.sampling.temperature));
    json_object_set_new(meta, "top_k", json_integer(o->run.sampling.top_k));
    json_object_set_new(meta, "top_p", json_real(o->run.sampling.top_p));
    json_object_set_new(meta, "min_p", json_real(o->run.sampling.min_p));
    json_object_set_new(meta, "wall_seconds", json_real(sp_now() - pg.t0));
    json_object_set_new(meta, "tokens_per_second_definition",
                        json_string("per repeat: generated tokens / generate seconds (prefill "
                                    "excluded) summed over prompts; mean and sample std over "
                                    "repeats. speedup: per repeat against plain decoding"));
    results = sp_bench_results_json(meta, cfg, n_cfg, agg, runs, n_runs);
    char path[4096];
    snprintf(path, sizeof path, "%s/results.json", o->out_dir);
    if (json_dump_file(results, path, JSON_INDENT(2) | JSON_ENSURE_ASCII)) {
        fprintf(stderr, "specula: cannot write %s\n", path);
        rc = 1;
        goto done;
    }
    snprintf(path, sizeof path, "%s/results.csv", o->out_dir);
    if (sp_bench_write_csv(path, cfg, n_cfg, agg)) {
        fprintf(stderr, "specula: cannot write %s: %s\n", path, strerror(errno));
        rc = 1;
        goto done;
    }
    int pr = sp_bench_plot(o->out_dir, cfg, n_cfg, agg, msg, sizeof msg);
    if (pr == 1)
        fprintf(stderr, "specula: gnuplot not found; wrote %s/results.json and results.csv but no "
                        "plots (install gnuplot-nox, then run gnuplot plots.gp in %s)\n",
                o->out_dir, o->out_dir);
    else if (pr < 0)
        fprintf(stderr, "specula: %s\n", msg); /* the table still prints; exit 1 below */
    if (o->json) {
        char *s = json_dumps(results, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (!s) goto oom;
        printf("%s\n", s);
        free(s);
    } else {
        sp_bench_print_table(stdout, cfg, n_cfg, agg);
        printf("results: %s/results.json, %s/results.csv%s\n", o->out_dir, o->out_dir,
               pr == 0 ? ", plots: tokens_per_second.png, block_efficiency.png, accept_hist.png"
                       : "");
    }
    rc = pr < 0 ? 1 : 0;
    goto done;
oom:
    fprintf(stderr, "specula: out of memory\n");
    rc = 1;
    goto done;
fail:
    fprintf(stderr, "specula: %s\n", err.msg);
    rc = err.code == SP_ERR_NOMEM ? 1 : 2;
done:
    json_decref(results);
    if (agg) sp_bench_aggs_free(agg, n_cfg);
    free(agg);
    free(runs);
    free(out);
    for (int i = 0; ptok && i < ps.n; i++) free(ptok[i]);
    free(ptok);
    free(np);
    for (int c = 0; specs && c < n_cfg; c++) sp_spec_free(specs[c]);
    free(specs);
    sp_bench_configs_free(cfg, n_cfg);
    sp_ctx_free(ctx);
    sp_model_free(dmodel);
    sp_model_free(model);
    prompts_free(&ps);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {0};
    int rc = parse_bench(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    return bench_main(&o);
}
