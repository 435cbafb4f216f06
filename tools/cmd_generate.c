/* cmd_generate: `specula generate` (text generation, streamed) and
 * `specula run` (the default demo on the default model). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sp_file.h"
#include "specula.h"
#include "sp_spec.h"

typedef struct gen_opts {
    const char *prompt, *prompt_file;
    sp_cli_run_opts run;
    sp_spec_params spec;
    bool drafter_given;
    bool json;
    bool quiet;  /* no text or statistics output (run's plain baseline) */
} gen_opts;

typedef struct gen_result {
    double tokens_per_second;
    int32_t n_generated;
} gen_result;

static void gen_usage(void) {
    fprintf(stderr,
            "usage: specula generate -m MODEL [-z TOKENIZER] [-p PROMPT | -f FILE] [-n N]\n"
            "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [-t THREADS]\n"
            "         [-c N_CTX] [--json]\n"
            "       speculation: [-md DRAFT [-zd TOKENIZER]] [--draft model|ngram|layerskip|lowbit|none]\n"
            "         [--verify block|token|greedy|lenient|mc|mc-norep|naive] [--lenience L]\n"
            "         [--gamma G] [--adaptive] [--draft-p-min P] [--tree 4x2x2]\n"
            "         [--ngram-min N] [--ngram-max N] [--skip-layers 1,3] [--lowbit q4_0|q8_0|f16]\n"
            "  MODEL is a GGUF file or a llama2.c checkpoint (then -z tokenizer.bin).\n"
            "  Defaults: plain decoding; with -md, the draft model and block verification.\n");
}

/* Parses generate's flags; returns 0, or 2 after printing the problem. */
static void gen_defaults(gen_opts *o) {
    sp_cli_run_opts_default(&o->run);
    o->spec = sp_spec_default_params();
}

/* Parses generate's flags over the defaults already in o. */
static int parse_gen(int argc, char **argv, gen_opts *o, bool need_model) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        long long ll;
#define NEXT() (i++, v)
        int shared = sp_cli_run_flag(a, v, &o->run);
        if (shared < 0) return 2;
        if (shared > 0) {
            i++;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(o->prompt = NEXT())) goto missing;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(o->prompt_file = NEXT())) goto missing;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--draft")) {
            sp_error e = {0};
            if (!NEXT()) goto missing;
            if (sp_drafter_parse(v, &o->spec.draft.kind, &e)) {
                fprintf(stderr, "specula: %s\n", e.msg);
                return 2;
            }
            o->drafter_given = true;
        } else if (!strcmp(a, "--verify")) {
            sp_error e = {0};
            if (!NEXT()) goto missing;
            if (sp_verifier_parse(v, &o->spec.verifier, &e)) {
                fprintf(stderr, "specula: %s\n", e.msg);
                return 2;
            }
        } else if (!strcmp(a, "--lenience")) {
            if (sp_cli_float(a, NEXT(), 1e-6, 1, &d)) return 2;
            o->spec.lenience = d;
        } else if (!strcmp(a, "--gamma")) {
            if (sp_cli_int(a, NEXT(), 1, SP_SPEC_MAX_GAMMA, &ll)) return 2;
            o->spec.gamma = (int32_t)ll;
        } else if (!strcmp(a, "--adaptive")) {
            o->spec.adaptive = true;
        } else if (!strcmp(a, "--draft-p-min")) {
            if (sp_cli_float(a, NEXT(), 0, 1, &d)) return 2;
            o->spec.draft_p_min = (float)d;
        } else if (!strcmp(a, "--tree")) {
            if (!(o->spec.tree = NEXT())) goto missing;
        } else if (!strcmp(a, "--ngram-min")) {
            if (sp_cli_int(a, NEXT(), 1, 64, &ll)) return 2;
            o->spec.draft.ngram_min = (int32_t)ll;
        } else if (!strcmp(a, "--ngram-max")) {
            if (sp_cli_int(a, NEXT(), 1, 64, &ll)) return 2;
            o->spec.draft.ngram_max = (int32_t)ll;
        } else if (!strcmp(a, "--skip-layers")) {
            if (!(o->spec.draft.skip_layers = NEXT())) goto missing;
        } else if (!strcmp(a, "--lowbit")) {
            if (!NEXT()) goto missing;
            if (!strcmp(v, "q4_0")) o->spec.draft.lowbit_type = SP_GGML_Q4_0;
            else if (!strcmp(v, "q8_0")) o->spec.draft.lowbit_type = SP_GGML_Q8_0;
            else if (!strcmp(v, "f16")) o->spec.draft.lowbit_type = SP_GGML_F16;
            else if (!strcmp(v, "bf16")) o->spec.draft.lowbit_type = SP_GGML_BF16;
            else {
                fprintf(stderr, "specula: --lowbit must be q4_0, q8_0, f16 or bf16, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage();
            exit(0);
        } else {
            fprintf(stderr, "specula: unknown option '%s' for generate\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "specula: %s needs a value\n", a);
        return 2;
#undef NEXT
    }
    if (!o->run.model && need_model) {
        fprintf(stderr, "specula: generate needs a model (-m MODEL)\n");
        return 2;
    }
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "specula: give either -p or -f, not both\n");
        return 2;
    }
    if (!o->drafter_given && o->run.draft_model) o->spec.draft.kind = SP_DRAFT_MODEL;
    if (o->spec.draft.kind == SP_DRAFT_MODEL && !o->run.draft_model) {
        fprintf(stderr, "specula: --draft model needs a draft model (-md DRAFT)\n");
        return 2;
    }
    if (o->run.draft_model && o->spec.draft.kind != SP_DRAFT_MODEL) {
        fprintf(stderr, "specula: -md is only used with --draft model\n");
        return 2;
    }
    if (o->spec.draft.ngram_min > o->spec.draft.ngram_max) {
        fprintf(stderr, "specula: --ngram-min must not exceed --ngram-max\n");
        return 2;
    }
    return 0;
}

typedef struct stream_state {
    const sp_tokenizer *tok;
    int32_t prev;
    bool print;
    char *text;      /* generated text, accumulated */
    size_t len, cap;
} stream_state;

static bool on_tokens(void *ud, const int32_t *ids, int32_t n) {
    stream_state *s = ud;
    for (int32_t i = 0; i < n; i++) {
        char piece[256];
        size_t k = sp_tokenizer_decode_token(s->tok, s->prev, ids[i], piece, sizeof piece);
        s->prev = ids[i];
        if (s->len + k + 1 > s->cap) {
            size_t nc = (s->cap + k + 1) * 2;
            char *nt = realloc(s->text, nc);
            if (!nt) return false;
            s->text = nt;
            s->cap = nc;
        }
        memcpy(s->text + s->len, piece, k);
        s->len += k;
        s->text[s->len] = 0;
        if (s->print) {
            fwrite(piece, 1, k, stdout);
            fflush(stdout);
        }
    }
    return true;
}

/* Target batch big enough for the draft budget (chain or tree). */
static int32_t batch_for(const sp_spec_params *sp) {
    int32_t need = sp->gamma + 2;
    if (sp->tree) {
        sp_tree_shape sh;
        if (sp_tree_shape_parse(sp->tree, &sh, NULL) == SP_OK) need = sh.n_nodes + 1;
    }
    return need > 64 ? need : 64;
}

static int generate_main(gen_opts *o, gen_result *res) {
    sp_error err = {0};
    sp_model *model = NULL, *dmodel = NULL;
    sp_ctx *ctx = NULL;
    sp_spec *spec = NULL;
    int32_t *prompt = NULL, *out = NULL;
    char *file_text = NULL;
    stream_state ss = {0};
    int rc = 1;
    if (sp_cli_load_models(&o->run, &model, &dmodel)) goto done;
    const sp_tokenizer *tok = sp_model_tokenizer(model);
    o->spec.draft.draft_model = dmodel;
    if (sp_sampler_params_check(&o->run.sampling, &err)) goto fail;
    const char *text = o->prompt ? o->prompt : "";
    size_t text_len = strlen(text);
    if (o->prompt_file) {
        if (sp_file_read(o->prompt_file, "prompt file", 64u << 20, &file_text, &text_len, &err))
            goto fail;
        text = file_text;
    }
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = (int32_t)o->run.n_ctx;
    cp.n_threads = (int32_t)o->run.threads;
    cp.max_batch = batch_for(&o->spec);
    if (sp_ctx_init(model, &cp, &ctx, &err)) goto fail;
    if (sp_spec_init(ctx, &o->spec, &spec, &err)) goto fail;
    int32_t n_ctx = sp_ctx_n_ctx(ctx), n_prompt = 0;
    prompt = malloc((size_t)n_ctx * sizeof *prompt);
    if (!prompt) goto done;
    bool bos = sp_tokenizer_add_bos(tok);
    if (sp_tokenizer_encode(tok, text, text_len, bos, prompt, n_ctx, &n_prompt, &err)) {
        if (err.code == SP_ERR_RANGE)
            fprintf(stderr, "specula: prompt is %d tokens, longer than the context size %d\n",
                    n_prompt, n_ctx);
        else
            fprintf(stderr, "specula: %s\n", err.msg);
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "specula: the prompt is empty and the model adds no BOS token\n");
        goto done;
    }
    if (n_prompt + o->run.n_predict > n_ctx) {
        fprintf(stderr,
                "specula: prompt (%d tokens) plus -n %lld exceeds the context size %d (use -c)\n",
                n_prompt, o->run.n_predict, n_ctx);
        goto done;
    }
    out = malloc((size_t)o->run.n_predict * sizeof *out);
    if (!out) goto done;
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = (int32_t)o->run.n_predict;
    gp.sampling = o->run.sampling;
    gp.seed = (uint64_t)o->run.seed;
    ss.tok = tok;
    ss.prev = prompt[n_prompt - 1];
    ss.print = !o->json && !o->quiet;
    if (ss.print) {
        fwrite(text, 1, text_len, stdout);
        fflush(stdout);
    }
    sp_gen_stats gs;
    sp_spec_stats sst;
    if (sp_spec_generate(spec, prompt, n_prompt, &gp, out, (int32_t)o->run.n_predict, &gs, &sst,
                         on_tokens, &ss, &err))
        goto fail;
    double secs = gs.t_generate;
    double tps = secs > 0 ? gs.n_generated / secs : 0;
    bool speculative = o->spec.draft.kind != SP_DRAFT_NONE;
    if (res) *res = (gen_result){.tokens_per_second = tps, .n_generated = gs.n_generated};
    if (o->quiet) {
    } else if (o->json) {
        json_t *j = json_object();
        json_t *toks = json_array();
        for (int32_t i = 0; i < gs.n_generated; i++) json_array_append_new(toks, json_integer(out[i]));
        json_object_set_new(j, "text", json_stringn(ss.text ? ss.text : "", ss.len));
        json_object_set_new(j, "tokens", toks);
        json_object_set_new(j, "n_prompt", json_integer(n_prompt));
        json_object_set_new(j, "n_generated", json_integer(gs.n_generated));
        json_object_set_new(j, "seconds", json_real(secs));
        json_object_set_new(j, "prefill_seconds", json_real(gs.t_prefill));
        json_object_set_new(j, "tokens_per_second", json_real(tps));
        json_object_set_new(j, "stopped_at_eos", json_boolean(gs.hit_eog));
        json_object_set_new(j, "model", json_string(sp_model_desc(model)));
        if (speculative) json_object_set_new(j, "spec", sp_cli_spec_json(&sst));
        char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (s) printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("\n");
        fprintf(stderr,
                "\n[%s] prompt %d tokens (%.1f ms), generated %d tokens in %.3f s: %.1f tokens/s\n",
                sp_model_desc(model), n_prompt, gs.t_prefill * 1e3, gs.n_generated, secs, tps);
        if (speculative) sp_cli_spec_print(stderr, &sst);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "specula: %s\n", err.msg);
done:
    free(ss.text);
    free(out);
    free(prompt);
    free(file_text);
    sp_spec_free(spec);
    sp_ctx_free(ctx);
    sp_model_free(dmodel);
    sp_model_free(model);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o = {0};
    gen_defaults(&o);
    int rc = parse_gen(argc, argv, &o, true);
    if (rc) return rc;
    return generate_main(&o, NULL);
}

/* ---- specula run: the default demo ---- */

/* The default model, stories260K. Looked up in $SPECULA_MODEL, then the user
 * cache, then a ../shared checkout beside this one; otherwise downloaded
 * from its published location into the cache. */
#define DEFAULT_URL_BASE "https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/"

static bool exists(const char *p) { return access(p, R_OK) == 0; }

static int find_default_model(char *model, char *tokz, size_t cap) {
    const char *env = getenv("SPECULA_MODEL");
    if (env && *env) {
        snprintf(model, cap, "%s", env);
        tokz[0] = 0;
        return 0;
    }
    const char *shared = getenv("SPECULA_SHARED");
    const char *cands[3] = {shared, "../shared", NULL};
    for (int i = 0; i < 2; i++) {
        if (!cands[i] || !*cands[i]) continue;
        snprintf(model, cap, "%s/models/stories260K.gguf", cands[i]);
        tokz[0] = 0;
        if (exists(model)) return 0;
    }
    const char *home = getenv("HOME");
    char dir[900];
    snprintf(dir, sizeof dir, "%s/.cache/specula", home && *home ? home : "/tmp");
    snprintf(model, cap, "%s/stories260K.bin", dir);
    snprintf(tokz, cap, "%s/tok512.bin", dir);
    if (exists(model) && exists(tokz)) return 0;
    fprintf(stderr, "specula: downloading the default model (stories260K) into %s\n", dir);
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && curl -fsSL --connect-timeout 10 -o '%s.part' '%sstories260K.bin' && "
             "curl -fsSL --connect-timeout 10 -o '%s.part' '%stok512.bin' && mv '%s.part' '%s' && "
             "mv '%s.part' '%s'",
             dir, model, DEFAULT_URL_BASE, tokz, DEFAULT_URL_BASE, model, model, tokz, tokz);
    if (system(cmd) != 0) {
        fprintf(stderr,
                "specula: could not download the default model; set SPECULA_MODEL to a GGUF file "
                "or put the shared directory beside this checkout\n");
        return -1;
    }
    return 0;
}

/* The demo: greedy speculative generation on the default model (with the
 * target's own Q8_0 copy as draft unless another drafter is given), then
 * plain decoding of the same prompt for the speedup in the same run. */
int cmd_run(int argc, char **argv) {
    char model[1024], tokz[1024];
    gen_opts o = {0};
    gen_defaults(&o);
    o.run.sampling.temperature = 0;
    int rc = parse_gen(argc, argv, &o, false);
    if (rc) return rc;
    if (!o.run.model) {
        if (find_default_model(model, tokz, sizeof model)) return 1;
        o.run.model = model;
        if (tokz[0]) o.run.tokenizer = tokz;
    }
    if (!o.prompt && !o.prompt_file) o.prompt = "Once upon a time";
    if (!o.drafter_given && !o.run.draft_model) {
        o.spec.draft.kind = SP_DRAFT_LOWBIT;
        o.spec.draft.lowbit_type = SP_GGML_Q8_0;
    }
    gen_result spec_res, plain_res;
    if ((rc = generate_main(&o, &spec_res)) || o.spec.draft.kind == SP_DRAFT_NONE || o.json) return rc;
    gen_opts plain = o;
    plain.spec = sp_spec_default_params();
    plain.run.draft_model = NULL;
    plain.quiet = true;
    if ((rc = generate_main(&plain, &plain_res))) return rc;
    fprintf(stderr, "[run] plain decoding %.1f tokens/s, speculative (%s) %.1f tokens/s: speedup %.2fx\n",
            plain_res.tokens_per_second, sp_drafter_name(o.spec.draft.kind),
            spec_res.tokens_per_second,
            plain_res.tokens_per_second > 0 ? spec_res.tokens_per_second / plain_res.tokens_per_second : 0);
    return 0;
}
