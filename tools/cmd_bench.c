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
#include "cli.h"
#include "file.h"
#include "specula.h"
#include "clock.h"

#define DEFAULT_PROMPTS "bench/prompts/stories.jsonl"
#define MAX_PROMPTS 100000

typedef struct bench_opts {
    const char *prompts, *configs, *out_dir;
    cli_run_opts run;
    cli_online_opts online; /* the learner's settings for online=1 configurations */
    long long repeat, block;
    double explore;            /* route=auto: exploration probability */
    bool json;
} bench_opts;

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: specula bench -m MODEL [-z TOKENIZER] [-md DRAFT|HEAD.gguf [-zd TOKENIZER]]\n"
            "         [--prompts FILE.jsonl] [--configs \"CFG;CFG;...\"] [-n N] [--repeat R]\n"
            "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [-t THREADS]\n"
            "         [-c N_CTX] [-ctk T] [-ctv T] [--out DIR] [--json]\n"
            "  Runs every configuration on every prompt (one JSON object with a \"prompt\"\n"
            "  field per line; default %s) and reports acceptance rate, block\n"
            "  efficiency, mean accepted length, tokens/s and speedup over plain decoding.\n"
            "  CFG: plain | key=value,... with the speculation settings drafter (or draft:\n"
            "    model|ngram|layerskip|lowbit|eagle3|mtp|suffix|ngram-cache|ngram-map-k|ngram-map-k4v|\n"
            "    ngram-mod, or model+suffix etc.:\n"
            "    arbitrated per step),\n"
            "    verifier (or verify), gamma (or n_max), n_min,\n"
            "    p_min, tree, adaptive, ngram_min, ngram_max, skip_layers (or skip), lowbit,\n"
            "    lenience, map_n, map_m, map_min_hits, mod_n_match, mod_n_min, mod_n_max;\n"
            "    e.g. \"draft=model,gamma=4;draft=layerskip,skip=1,3,gamma=4\".\n"
            "  With an EAGLE-3 head as -md: draft=eagle3 configurations draft with it.\n"
            "  Plain decoding is always run first. Writes results.json, results.csv and\n"
            "  PNG plots into DIR (default bench-out); --json prints results.json to stdout.\n"
            "  Streams (online speculative decoding): prompts are processed in file order;\n"
            "  a prompt line may carry a \"domain\" label. Bench's own config keys:\n"
            "    online=1   the draft (or eagle3 head) learns from the target while the stream runs\n"
            "    route=K    use the K-th -md (default 0); route=auto: a router picks a draft\n"
            "               per prompt among all -md (each learns only from its own prompts)\n"
            "  e.g. -md A.gguf -md B.gguf --configs \"gamma=4;gamma=4,online=1;gamma=4,online=1,route=auto\"\n"
            "  The acceptance per block of --block N prompts (default 10) and per domain goes\n"
            "  to stream.csv and stream.png. [--explore E (0.1)] and the learner's settings:\n"
            "    [--online-every N] [--online-steps S] [--online-lr LR] [--online-topk K]\n"
            "    [--online-buffer N] [--online-sync]\n",
            DEFAULT_PROMPTS);
}

/* Parses bench's flags; returns 0, -1 for --help, or 2 after printing the problem. */
static int parse_bench(int argc, char **argv, bench_opts *o) {
    static const struct option LONGOPTS[] = {
        SP_CLI_RUN_OPTIONS,
        {"prompts", required_argument, NULL, SP_OPT_CMD + 0},
        {"configs", required_argument, NULL, SP_OPT_CMD + 1},
        {"out", required_argument, NULL, SP_OPT_CMD + 2},
        {"repeat", required_argument, NULL, SP_OPT_CMD + 3},
        {"json", no_argument, NULL, SP_OPT_CMD + 4},
        {"block", required_argument, NULL, SP_OPT_CMD + 5},
        {"explore", required_argument, NULL, SP_OPT_CMD + 6},
        SP_CLI_ONLINE_TUNING,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cli_run_opts_default(&o->run);
    o->run.multi_draft = true;
    cli_online_opts_default(&o->online);
    o->repeat = 1;
    o->block = 10;
    o->explore = 0.1;
    o->out_dir = "bench-out";
    const char *flag;
    int c, r;
    optind = 0;
    while ((c = cli_next(argc, argv, SP_CLI_RUN_SHORTOPTS "h", LONGOPTS, "bench", &flag)) != -1) {
        if (c == '?') return 2;
        if ((r = cli_run_opt(c, flag, optarg, &o->run)) ||
            (r = cli_online_opt(c, flag, optarg, &o->online))) {
            if (r < 0) return 2;
            continue;
        }
        switch (c) {
        case SP_OPT_CMD + 0: o->prompts = optarg; break;
        case SP_OPT_CMD + 5:
            if (cli_int(flag, optarg, 1, 1000000, &o->block)) return 2;
            break;
        case SP_OPT_CMD + 6:
            if (cli_float(flag, optarg, 0, 1, &o->explore)) return 2;
            break;
        case SP_OPT_CMD + 1: o->configs = optarg; break;
        case SP_OPT_CMD + 2:
            if (!*optarg) {
                fprintf(stderr, "specula: %s needs a directory name\n", flag);
                return 2;
            }
            o->out_dir = optarg;
            break;
        case SP_OPT_CMD + 3:
            if (cli_int(flag, optarg, 1, 10000, &o->repeat)) return 2;
            break;
        case SP_OPT_CMD + 4: o->json = true; break;
        case 'h': bench_usage(stdout); return -1;
        default: return 2;
        }
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
    char **domain; /* [n]: the line's "domain" label, or NULL */
    int n;
} prompt_set;

static void prompts_free(prompt_set *p) {
    for (int i = 0; i < p->n; i++) free(p->text[i]), free(p->domain[i]);
    free(p->text);
    free(p->domain);
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
        json_t *dom = j && json_is_object(j) ? json_object_get(j, "domain") : NULL;
        if (dom && !json_is_string(dom)) {
            fprintf(stderr, "specula: %s:%d: \"domain\" must be a string\n", path, lineno);
            json_decref(j);
            rc = 2;
            break;
        }
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
            if (nt) out->text = nt;
            char **nd = nt ? realloc(out->domain, (size_t)nc * sizeof *nd) : NULL;
            if (nd) out->domain = nd;
            if (!nt || !nd) {
                json_decref(j);
                fprintf(stderr, "specula: out of memory reading %s\n", path);
                rc = 1;
                break;
            }
            cap_p = nc;
        }
        out->text[out->n] = strdup(json_string_value(p));
        out->domain[out->n] = dom ? strdup(json_string_value(dom)) : NULL;
        json_decref(j);
        if (!out->text[out->n] || (dom && !out->domain[out->n])) {
            free(out->text[out->n]), free(out->domain[out->n]);
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

/* Everything one bench run holds; released by bench_free. */
/* What one configuration runs on: one speculation object per draft it uses
 * (all on the one target context), their learners, its router. */
typedef struct cfg_state {
    int n;                               /* drafts used */
    int draft[SP_CLI_MAX_DRAFTS];        /* -md index of each */
    sp_spec *spec[SP_CLI_MAX_DRAFTS];
    sp_online *on[SP_CLI_MAX_DRAFTS];    /* online=1 */
    sp_router *router;                   /* route=auto */
} cfg_state;

typedef struct bench_state {
    const char *prompts_path;
    char pbuf[4096];
    prompt_set ps;
    bench_config *cfg;
    int n_cfg;
    sp_model *model, *dmodel;            /* dmodel: the first draft */
    sp_eagle3 *head;                     /* -md was an EAGLE-3 head */
    sp_model *dmodels[SP_CLI_MAX_DRAFTS];
    int n_dm;
    sp_ctx *ctx;
    cfg_state *cs;         /* [n_cfg] */
    int32_t **ptok, *np;   /* [ps.n] tokenised prompts */
    int32_t *out;          /* [n_predict] */
    bench_run *runs;
    size_t n_runs;
    bench_agg *agg;
    json_t *results;
    double t0;
} bench_state;

static void bench_free(bench_state *b) {
    json_decref(b->results);
    if (b->agg) bench_aggs_free(b->agg, b->n_cfg);
    free(b->agg);
    free(b->runs);
    free(b->out);
    for (int i = 0; b->ptok && i < b->ps.n; i++) free(b->ptok[i]);
    free(b->ptok);
    free(b->np);
    for (int c = 0; b->cs && c < b->n_cfg; c++) {
        for (int k = 0; k < b->cs[c].n; k++) {
            sp_spec_free(b->cs[c].spec[k]); /* before its learner: it may serve a snapshot */
            sp_online_free(b->cs[c].on[k]);
        }
        sp_router_free(b->cs[c].router);
    }
    free(b->cs);
    bench_configs_free(b->cfg, b->n_cfg);
    sp_ctx_free(b->ctx);
    sp_eagle3_free(b->head);
    for (int d = 0; d < SP_CLI_MAX_DRAFTS; d++) sp_model_free(b->dmodels[d]); /* NULL after a failed load */
    sp_model_free(b->model);
    prompts_free(&b->ps);
}

static int oom(void) {
    fprintf(stderr, "specula: out of memory\n");
    return 1;
}

/* Everything about the input, checked before the models load: prompts,
 * configurations (each against the sampler settings), the output
 * directory. 0 or 2 after one line. */
static int bench_inputs(const bench_opts *o, bench_state *b) {
    char msg[1024];
    sp_error err = {0};
    b->prompts_path = o->prompts;
    if (!b->prompts_path && !(b->prompts_path = default_prompts(b->pbuf, sizeof b->pbuf))) {
        fprintf(stderr, "specula: no --prompts given and the default %s was not found\n",
                DEFAULT_PROMPTS);
        return 2;
    }
    int rc = load_prompts(b->prompts_path, &b->ps);
    if (rc) return rc;
    const bool has_draft = o->run.draft_model != NULL;
    const bool head = has_draft && cli_is_eagle3(o->run.draft_model);
    const char *clist = o->configs                 ? o->configs
                        : head ? "plain;draft=eagle3,gamma=4;draft=ngram,gamma=4;draft=layerskip,gamma=4;"
                                 "draft=lowbit,gamma=4"
                               : bench_default_configs(has_draft);
    if (head && o->run.n_draft_models > 1) {
        fprintf(stderr, "specula: %s is an EAGLE-3 head: give it as the only -md\n", o->run.draft_model);
        return 2;
    }
    if (bench_configs_parse(clist, has_draft, &b->cfg, &b->n_cfg, msg, sizeof msg)) {
        fprintf(stderr, "specula: %s\n", msg);
        return 2;
    }
    if (sp_sampler_params_check(&o->run.sampling, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        return 2;
    }
    bool uses_model = false;
    for (int c = 0; c < b->n_cfg; c++) {
        const sp_drafter_kind kind = b->cfg[c].spec.draft.kind;
        uses_model |= kind == (head ? SP_DRAFT_EAGLE3 : SP_DRAFT_MODEL);
        if ((kind == SP_DRAFT_MODEL && head) || (kind == SP_DRAFT_EAGLE3 && has_draft && !head)) {
            fprintf(stderr, "specula: config '%s': %s is %san EAGLE-3 head (draft=%s)\n", b->cfg[c].name,
                    o->run.draft_model, head ? "" : "not ", head ? "eagle3" : "model");
            return 2;
        }
        if (sp_spec_config_check_sampling(&b->cfg[c].spec, &o->run.sampling, &err)) {
            fprintf(stderr, "specula: config '%s': %s (--temp)\n", b->cfg[c].name, err.msg);
            return 2;
        }
    }
    if (has_draft && !uses_model) {
        fprintf(stderr, "specula: -md given but no configuration uses draft=%s\n", head ? "eagle3" : "model");
        return 2;
    }
    for (int c = 0; c < b->n_cfg; c++) {
        const bench_config *k = &b->cfg[c];
        if (k->route >= o->run.n_draft_models && k->route != 0) {
            fprintf(stderr, "specula: config '%s': route=%d but only %d draft models (-md) were given\n",
                    k->name, k->route, o->run.n_draft_models);
            return 2;
        }
    }
    if (cli_make_dirs(o->out_dir)) {
        fprintf(stderr, "specula: cannot create output directory %s: %s\n", o->out_dir,
                strerror(errno));
        return 2;
    }
    return 0;
}

/* Models, the target context sized for every configuration (largest batch
 * and extra context), and one speculation object per configuration. */
static int bench_setup(const bench_opts *o, bench_state *b) {
    sp_error err = {0};
    if (cli_load_models(&o->run, &b->model, &b->dmodel)) return 2;
    if (o->run.draft_model && cli_is_eagle3(o->run.draft_model) &&
        cli_load_head(o->run.draft_model, SP_DRAFT_EAGLE3, b->model, &b->head))
        return 2;
    b->dmodels[0] = b->dmodel;
    if (cli_load_more_drafts(&o->run, b->dmodels)) return 2;
    b->n_dm = o->run.n_draft_models;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = (int32_t)o->run.n_ctx;
    cp.n_threads = (int32_t)o->run.threads;
    cli_ctx_types(&o->run, &cp);
    for (int c = 0; c < b->n_cfg; c++) {
        int32_t need = sp_spec_config_batch(&b->cfg[c].spec);
        cp.max_batch = need > cp.max_batch ? need : cp.max_batch;
    }
    if (sp_ctx_init(b->model, &cp, &b->ctx, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        return err.code == SP_ERR_NOMEM ? 1 : 2;
    }
    if (!(b->cs = calloc((size_t)b->n_cfg, sizeof *b->cs))) return oom();
    for (int c = 0; c < b->n_cfg; c++) {
        cfg_state *cs = &b->cs[c];
        const bench_config *k = &b->cfg[c];
        const bool model = k->spec.draft.kind == SP_DRAFT_MODEL;
        cs->n = model && k->route == SP_BENCH_ROUTE_AUTO ? b->n_dm : 1;
        for (int j = 0; j < cs->n; j++) {
            cs->draft[j] = !model ? -1 : k->route == SP_BENCH_ROUTE_AUTO ? j : k->route;
            sp_spec_params sp = k->spec;
            sp.draft.draft_model = cs->draft[j] >= 0 ? b->dmodels[cs->draft[j]] : b->dmodel;
            sp.draft.eagle3 = b->head;
            if (sp_spec_init(b->ctx, &sp, &cs->spec[j], &err)) {
                fprintf(stderr, "specula: config '%s': %s\n", k->name, err.msg);
                return err.code == SP_ERR_NOMEM || err.code == SP_ERR_IO ? 1 : 2;
            }
        }
        if (model && k->route == SP_BENCH_ROUTE_AUTO) {
            sp_router_params rp = sp_router_default_params(cs->n);
            rp.explore = o->explore;
            rp.seed = (uint64_t)o->run.seed;
            if (sp_router_init(&rp, &cs->router, &err)) {
                fprintf(stderr, "specula: config '%s': %s\n", k->name, err.msg);
                return 2;
            }
        }
    }
    return 0;
}

/* Learners for the online=1 configurations, one per draft they use, seeded
 * alike; started after the warm-up so they learn from the stream only. */
static int bench_start_learners(const bench_opts *o, bench_state *b) {
    for (int c = 0; c < b->n_cfg; c++) {
        if (!b->cfg[c].online) continue;
        cfg_state *cs = &b->cs[c];
        for (int j = 0; j < cs->n; j++) {
            cli_online_opts oo = o->online;
            oo.p.seed = (uint64_t)o->run.seed + (uint64_t)j;
            const bool head = b->cfg[c].spec.draft.kind == SP_DRAFT_EAGLE3; /* the head given as -md */
            if (cli_online_start(&oo, head ? o->run.draft_model : o->run.draft_models[cs->draft[j]], cs->spec[j],
                                 head ? NULL : b->dmodels[cs->draft[j]], head ? b->head : NULL, &cs->on[j]))
                return 2;
        }
    }
    return 0;
}

/* Tokenises every prompt; each plus -n (plus the largest tree) must fit. */
static int bench_encode(const bench_opts *o, bench_state *b) {
    sp_error err = {0};
    const int32_t n_ctx = sp_ctx_n_ctx(b->ctx);
    const sp_tokenizer *tok = sp_model_tokenizer(b->model);
    const bool bos = sp_tokenizer_add_bos(tok);
    int32_t extra = 0;
    for (int c = 0; c < b->n_cfg; c++) {
        int32_t x = sp_spec_config_extra_ctx(&b->cfg[c].spec);
        extra = x > extra ? x : extra;
    }
    b->ptok = calloc((size_t)b->ps.n, sizeof *b->ptok);
    b->np = calloc((size_t)b->ps.n, sizeof *b->np);
    if (!b->ptok || !b->np) return oom();
    for (int i = 0; i < b->ps.n; i++) {
        if (!(b->ptok[i] = malloc((size_t)n_ctx * sizeof **b->ptok))) return oom();
        if (sp_tokenizer_encode(tok, b->ps.text[i], strlen(b->ps.text[i]), bos, b->ptok[i], n_ctx,
                                &b->np[i], &err) ||
            b->np[i] < 1) {
            if (err.code == SP_ERR_RANGE || b->np[i] >= n_ctx)
                fprintf(stderr, "specula: prompt %d is longer than the context size %d\n", i + 1,
                        n_ctx);
            else
                fprintf(stderr, "specula: prompt %d: %s\n", i + 1,
                        b->np[i] < 1 ? "encodes to no tokens" : err.msg);
            return 2;
        }
        if ((int64_t)b->np[i] + o->run.n_predict + extra > n_ctx) {
            fprintf(stderr,
                    "specula: prompt %d (%d tokens) plus -n %lld%s exceeds the context size %d "
                    "(lower -n or raise -c)\n",
                    i + 1, b->np[i], o->run.n_predict, extra ? " plus the largest tree" : "", n_ctx);
            return 2;
        }
    }
    return 0;
}

/* One generation of configuration c on prompt i (the caches reset first).
 * run (NULL for the warm-up) gets the draft used; the router learns from
 * the acceptance reached, and an online learner's round under way is
 * waited for after the run (timed apart from the generation). */
static sp_status bench_generate(bench_state *b, int c, int i, const sp_gen_params *gp,
                                sp_gen_stats *gs, sp_spec_stats *st, bench_run *run, sp_error *err) {
    cfg_state *cs = &b->cs[c];
    sp_spec_stats local;
    if (!st) st = &local;
    bool explored = false;
    const int j = run && cs->router ? sp_router_choose(cs->router, b->ptok[i], b->np[i], &explored) : 0;
    sp_status rc = sp_spec_reset(cs->spec[j], err);
    if (!rc)
        rc = sp_spec_generate(cs->spec[j], b->ptok[i], b->np[i], gp, b->out, gp->n_predict, gs, st,
                              NULL, NULL, err);
    if (rc || !run) return rc;
    run->draft = cs->draft[j];
    run->explored = explored;
    if (cs->router && st->drafted > 0)
        sp_router_update(cs->router, b->ptok[i], b->np[i], j, sp_spec_acceptance_rate(st));
    if (cs->on[j]) {
        const double t0 = sp_now();
        sp_online_wait(cs->on[j]);
        run->t_learn_wait = sp_now() - t0;
    }
    return SP_OK;
}

/* A short warm-up per configuration (not recorded, so the first one timed
 * does not pay for cold caches and page faults), then every (repeat,
 * prompt, configuration), configurations interleaved per prompt, the same
 * seed for every configuration on one (prompt, repeat). */
static int bench_measure(const bench_opts *o, bench_state *b) {
    sp_error err = {0};
    const size_t total = (size_t)o->repeat * (size_t)b->ps.n * (size_t)b->n_cfg;
    b->out = malloc((size_t)o->run.n_predict * sizeof *b->out);
    b->runs = calloc(total, sizeof *b->runs);
    if (!b->out || !b->runs) return oom();
    sp_gen_params gp = sp_gen_default_params();
    gp.sampling = o->run.sampling;
    gp.stop_at_eog = !o->run.ignore_eos;
    gp.n_predict = o->run.n_predict < 16 ? (int32_t)o->run.n_predict : 16;
    gp.seed = (uint64_t)o->run.seed;
    for (int c = 0; c < b->n_cfg; c++)
        if (bench_generate(b, c, 0, &gp, NULL, NULL, NULL, &err)) {
            fprintf(stderr, "specula: config '%s' (warm-up): %s\n", b->cfg[c].name, err.msg);
            return 1;
        }
    int rc = bench_start_learners(o, b);
    if (rc) return rc;
    gp.n_predict = (int32_t)o->run.n_predict;
    progress pg = {.tty = isatty(2), .total = (int64_t)total, .t0 = sp_now()};
    pg.t_repeat = b->t0 = pg.t0;
    for (int r = 0; r < o->repeat; r++) {
        for (int i = 0; i < b->ps.n; i++) {
            gp.seed = (uint64_t)o->run.seed + (uint64_t)r * (uint64_t)b->ps.n + (uint64_t)i;
            for (int c = 0; c < b->n_cfg; c++) {
                bench_run *run = &b->runs[b->n_runs];
                sp_gen_stats gs;
                *run = (bench_run){.config = c, .prompt = i, .repeat = r, .seed = gp.seed,
                                      .n_prompt = b->np[i]};
                if (bench_generate(b, c, i, &gp, &gs, &run->spec, run, &err)) {
                    if (pg.tty) fprintf(stderr, "\n");
                    fprintf(stderr, "specula: config '%s', prompt %d: %s\n", b->cfg[c].name, i + 1,
                            err.msg);
                    return 1;
                }
                run->n_generated = gs.n_generated;
                run->t_prefill = gs.t_prefill;
                run->t_generate = gs.t_generate;
                run->hit_eog = gs.hit_eog;
                b->n_runs++;
                progress_step(&pg, r, (int)o->repeat);
            }
        }
        progress_repeat_done(&pg, r, (int)o->repeat);
    }
    return 0;
}

/* The "meta" part of results.json: what was run, where, how. */
static json_t *bench_meta(const bench_opts *o, const bench_state *b) {
    json_t *meta = json_object();
    json_object_set_new(meta, "model", json_string(o->run.model));
    json_object_set_new(meta, "model_desc", json_string(sp_model_desc(b->model)));
    if (b->dmodel) {
        json_object_set_new(meta, "draft_model", json_string(o->run.draft_model));
        json_object_set_new(meta, "draft_model_desc", json_string(sp_model_desc(b->dmodel)));
    }
    if (b->head) {
        json_object_set_new(meta, "draft_model", json_string(o->run.draft_model));
        json_object_set_new(meta, "draft_model_desc", json_string(sp_eagle3_desc(b->head)));
    }
    json_object_set_new(meta, "prompts_file", json_string(b->prompts_path));
    json_object_set_new(meta, "n_prompts", json_integer(b->ps.n));
    json_object_set_new(meta, "n_predict", json_integer(o->run.n_predict));
    json_object_set_new(meta, "repeat", json_integer(o->repeat));
    json_object_set_new(meta, "seed", json_integer(o->run.seed));
    json_object_set_new(meta, "threads", json_integer(o->run.threads));
    json_object_set_new(meta, "n_ctx", json_integer(sp_ctx_n_ctx(b->ctx)));
    json_object_set_new(meta, "kv_cache", cli_kv_json(b->ctx));
    json_object_set_new(meta, "ignore_eos", json_boolean(o->run.ignore_eos));
    json_object_set_new(meta, "temperature", json_real(o->run.sampling.temperature));
    json_object_set_new(meta, "top_k", json_integer(o->run.sampling.top_k));
    json_object_set_new(meta, "top_p", json_real(o->run.sampling.top_p));
    json_object_set_new(meta, "min_p", json_real(o->run.sampling.min_p));
    json_object_set_new(meta, "wall_seconds", json_real(sp_now() - b->t0));
    json_object_set_new(meta, "tokens_per_second_definition",
                        json_string("per repeat: generated tokens / generate seconds (prefill "
                                    "excluded) summed over prompts; mean and sample std over "
                                    "repeats. speedup: per repeat against plain decoding"));
    return meta;
}

/* Aggregates, writes results.json, results.csv and the plots, prints the
 * table (or the JSON with --json). */
static int bench_report(const bench_opts *o, bench_state *b) {
    char msg[1024], path[4096];
    b->agg = calloc((size_t)b->n_cfg, sizeof *b->agg);
    if (!b->agg || bench_aggregate(b->runs, b->n_runs, b->n_cfg, (int)o->repeat, b->agg))
        return oom();
    b->results = bench_results_json(bench_meta(o, b), b->cfg, b->n_cfg, b->agg, b->runs, b->n_runs);
    snprintf(path, sizeof path, "%s/results.json", o->out_dir);
    if (!b->results || json_dump_file(b->results, path, JSON_INDENT(2) | JSON_ENSURE_ASCII)) {
        fprintf(stderr, "specula: cannot write %s\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "%s/results.csv", o->out_dir);
    if (bench_write_csv(path, b->cfg, b->n_cfg, b->agg)) {
        fprintf(stderr, "specula: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    int pr = bench_plot(o->out_dir, b->cfg, b->n_cfg, b->agg, msg, sizeof msg);
    if (pr == 1)
        fprintf(stderr, "specula: gnuplot not found; wrote %s/results.json and results.csv but no "
                        "plots (install gnuplot-nox, then run gnuplot plots.gp in %s)\n",
                o->out_dir, o->out_dir);
    else if (pr < 0)
        fprintf(stderr, "specula: %s\n", msg); /* the table still prints; exit 1 below */
    /* a stream: online learning, routing or domain labels */
    bool stream = false;
    for (int c = 0; c < b->n_cfg; c++) stream |= b->cfg[c].online || b->cs[c].router;
    for (int i = 0; i < b->ps.n; i++) stream |= b->ps.domain[i] != NULL;
    int sr = 0;
    if (stream) {
        sr = bench_write_stream(o->out_dir, b->cfg, b->n_cfg, b->runs, b->n_runs, b->ps.domain, b->ps.n,
                                   (int)o->repeat, (int)o->block, o->json ? NULL : stdout, msg, sizeof msg);
        if (sr < 0) fprintf(stderr, "specula: %s\n", msg);
        if (!o->json)
            for (int c = 0; c < b->n_cfg; c++)
                for (int j = 0; j < b->cs[c].n; j++)
                    if (b->cs[c].on[j]) {
                        if (b->cs[c].draft[j] < 0) printf("%s, the head: ", b->cfg[c].name);
                        else printf("%s, draft %d: ", b->cfg[c].name, b->cs[c].draft[j]);
                        cli_online_print(stdout, b->cs[c].on[j]);
                    }
    }
    if (o->json) {
        char *s = json_dumps(b->results, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (!s) return oom();
        printf("%s\n", s);
        free(s);
    } else {
        bench_print_table(stdout, b->cfg, b->n_cfg, b->agg);
        printf("results: %s/results.json, %s/results.csv%s\n", o->out_dir, o->out_dir,
               pr == 0 ? ", plots: tokens_per_second.png, block_efficiency.png, accept_hist.png"
                       : "");
    }
    if (stream && !o->json)
        printf("stream: %s/stream.csv%s\n", o->out_dir, sr == 0 ? ", stream.png" : "");
    return pr < 0 || sr < 0 ? 1 : 0;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {0};
    int rc = parse_bench(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    bench_state b = {0};
    rc = bench_inputs(&o, &b);
    if (!rc) rc = bench_setup(&o, &b);
    if (!rc) rc = bench_encode(&o, &b);
    if (!rc) rc = bench_measure(&o, &b);
    if (!rc) rc = bench_report(&o, &b);
    bench_free(&b);
    return rc;
}
