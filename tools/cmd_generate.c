/* cmd_generate: `specula generate` (text generation, streamed) and
 * `specula run` (the demo on the default model, see cmd_run.c). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_generate.h"
#include "file.h"
#include "specula.h"

static void gen_usage(FILE *f) {
    fprintf(f,
            "usage: specula generate -m MODEL [-z TOKENIZER] [-p PROMPT | -f FILE | --prompt-ids 1,2,3]\n"
            "         [-n N]\n"
            "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [-t THREADS]\n"
            "         [-c N_CTX] [-ctk f16|f32|q8_0] [-ctv f16|f32|q8_0] [--json]\n"
            "       speculation: [-md DRAFT [-zd TOKENIZER]]\n"
            "         [--draft model|ngram|layerskip|lowbit|eagle3|mtp|suffix|ngram-cache|\n"
            "                 ngram-map-k|ngram-map-k4v|ngram-mod|none]\n"
            "         [--verify block|token|greedy|lenient|mc|mc-norep|naive|gbv|traversal]\n"
            "         [--lenience L]\n"
            "         [--gamma G | --draft-max G] [--draft-min N] [--adaptive] [--draft-p-min P]\n"
            "         [--tree 4x2x2|dyn:K:D:N] [--ngram-min N] [--ngram-max N] [--skip-layers 1,3]\n"
            "         [--lowbit q4_0|q8_0|f16|bf16|f32] [--map-n N] [--map-m M] [--map-min-hits H]\n"
            "         [--mod-n-match N] [--mod-n-min N] [--mod-n-max N]\n"
            "  MODEL is a GGUF file or a llama2.c checkpoint (then -z tokenizer.bin).\n"
            "  --prompt-ids: the prompt as token ids, used as given (no BOS added); a model\n"
            "  without a usable tokenizer (llama.cpp's test vocabulary) then prints the\n"
            "  generated ids instead of text.\n"
            "  --draft mtp: the model's own multi-token-prediction block (qwen35, qwen35moe\n"
            "  and qwen3next files with nextn layers, e.g. mkmodel --mtp 1); refused for a\n"
            "  file without one.\n"
            "  Defaults: plain decoding; with -md, the draft model and block verification;\n"
            "  with --tree, mc-norep verification. --draft-max 0 turns speculation off.\n"
            SP_CLI_ONLINE_USAGE
            "  Long options also work with one dash (-md, -zd, -temp).\n");
}

void sp_gen_opts_init(sp_gen_opts *o, const sp_spec_params *base) {
    memset(o, 0, sizeof *o);
    cli_run_opts_default(&o->run);
    sp_spec_config_init(&o->cfg, base);
    cli_online_opts_default(&o->online);
}

int sp_gen_parse(int argc, char **argv, sp_gen_opts *o, const char *cmd, bool need_model) {
    static const struct option LONGOPTS[] = {
        SP_CLI_RUN_OPTIONS,
        SP_CLI_SPEC_OPTIONS,
        SP_CLI_ONLINE_OPTIONS,
        {"prompt", required_argument, NULL, 'p'},
        {"file", required_argument, NULL, 'f'},
        {"json", no_argument, NULL, SP_OPT_CMD + 0},
        {"prompt-ids", required_argument, NULL, SP_OPT_CMD + 1},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *flag;
    int c, r;
    optind = 0;
    while ((c = cli_next(argc, argv, SP_CLI_RUN_SHORTOPTS "p:f:h", LONGOPTS, cmd, &flag)) != -1) {
        if (c == '?') return 2;
        if ((r = cli_run_opt(c, flag, optarg, &o->run)) || (r = cli_spec_opt(c, optarg, &o->cfg)) ||
            (r = cli_online_opt(c, flag, optarg, &o->online))) {
            if (r < 0) return 2;
            continue;
        }
        switch (c) {
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case SP_OPT_CMD + 0: o->json = true; break;
        case SP_OPT_CMD + 1: o->prompt_ids = optarg, o->prompt_ids_flag = flag; break;
        case 'h': gen_usage(stdout); return -1;
        default: return 2; /* not reached: every id is handled above */
        }
    }
    if (!o->run.model && need_model) {
        fprintf(stderr, "specula: %s needs a model (-m MODEL)\n", cmd);
        return 2;
    }
    if ((o->prompt != NULL) + (o->prompt_file != NULL) + (o->prompt_ids != NULL) > 1) {
        fprintf(stderr, "specula: give one of -p, -f and --prompt-ids, not several\n");
        return 2;
    }
    if (o->prompt_ids) { /* the list's form now, its range once the model is loaded */
        int32_t *ids, n;
        if (cli_ids(o->prompt_ids_flag, o->prompt_ids, &ids, &n)) return 2;
        free(ids);
    }
    sp_error e = {0};
    if (sp_spec_config_finish(&o->cfg, o->run.draft_model != NULL, &e)) {
        fprintf(stderr, "specula: %s%s\n", e.msg,
                o->cfg.params.draft.kind == SP_DRAFT_MODEL && !o->run.draft_model    ? " (-md DRAFT)"
                : o->cfg.params.draft.kind == SP_DRAFT_EAGLE3 && !o->run.draft_model ? " (-md HEAD.gguf)"
                                                                                      : "");
        return 2;
    }
    o->spec = o->cfg.params;
    if (o->run.draft_model && o->spec.draft.kind != SP_DRAFT_MODEL && o->spec.draft.kind != SP_DRAFT_EAGLE3) {
        fprintf(stderr, "specula: -md is only used with the model and eagle3 drafters (--draft model|eagle3)\n");
        return 2;
    }
    if (o->online.on && ((o->spec.draft.kind != SP_DRAFT_MODEL && o->spec.draft.kind != SP_DRAFT_EAGLE3) ||
                         o->spec.tree.depth > 0)) {
        fprintf(stderr, "specula: --online trains a draft model or an EAGLE-3 head: it needs -md DRAFT (or "
                        "--draft eagle3 -md HEAD.gguf) and a chain (no --tree)\n");
        return 2;
    }
    return 0;
}

/* ---- streaming and the generated text ---- */

typedef struct stream_state {
    const sp_tokenizer *tok;
    int32_t prev;
    bool print;
    bool oom;        /* the text could not be kept */
    char *text;      /* generated text, accumulated */
    size_t len, cap;
} stream_state;

static bool on_tokens(void *ud, const int32_t *ids, int32_t n) {
    stream_state *s = ud;
    for (int32_t i = 0; i < n; i++) {
        if (!s->tok) { /* no tokenizer: the ids, space-separated */
            if (s->print) printf("%s%d", s->prev >= 0 ? " " : "", ids[i]);
            s->prev = ids[i];
            continue;
        }
        char piece[256];
        size_t k = sp_tokenizer_decode_token(s->tok, s->prev, ids[i], piece, sizeof piece);
        s->prev = ids[i];
        if (s->len + k + 1 > s->cap) {
            size_t nc = (s->cap + k + 1) * 2;
            char *nt = realloc(s->text, nc);
            if (!nt) {
                s->oom = true;
                return false;
            }
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

/* ---- the steps of one generation ---- */

/* Everything one generation holds; released by gen_free. */
typedef struct gen_run {
    sp_model *model, *dmodel;
    sp_eagle3 *head;
    sp_ctx *ctx;
    sp_spec *spec;
    sp_online *online;
    char *file_text;
    const char *text; /* the prompt text */
    size_t text_len;
    int32_t *prompt, n_prompt, *out;
    stream_state ss;
    sp_gen_stats gs;
    sp_spec_stats sst;
} gen_run;

static void gen_free(gen_run *g) {
    free(g->ss.text);
    free(g->out);
    free(g->prompt);
    free(g->file_text);
    sp_spec_free(g->spec); /* before the learner whose snapshot it may serve */
    sp_online_free(g->online);
    sp_ctx_free(g->ctx);
    sp_eagle3_free(g->head);
    sp_model_free(g->dmodel);
    sp_model_free(g->model);
}

/* Models, the prompt text, the target context (batch and size for the
 * speculation settings) and the speculation object. 0 or 1 after one line. */
static int gen_setup(const sp_gen_opts *o, gen_run *g) {
    sp_error err = {0};
    cli_run_opts run = o->run;
    run.ids_only = o->prompt_ids != NULL;
    if (cli_load_models(&run, &g->model, &g->dmodel) ||
        cli_load_head(o->run.draft_model, o->spec.draft.kind, g->model, &g->head))
        return 1;
    sp_spec_params sp = o->spec;
    sp.draft.draft_model = g->dmodel;
    sp.draft.eagle3 = g->head;
    if (sp_sampler_params_check(&o->run.sampling, &err)) goto fail;
    g->text = o->prompt ? o->prompt : "";
    g->text_len = strlen(g->text);
    if (o->prompt_file) {
        if (sp_file_read(o->prompt_file, "prompt file", 64u << 20, &g->file_text, &g->text_len, &err))
            goto fail;
        g->text = g->file_text;
    }
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = (int32_t)o->run.n_ctx;
    cp.n_threads = (int32_t)o->run.threads;
    cp.max_batch = sp_spec_config_batch(&sp);
    cli_ctx_types(&o->run, &cp);
    if (sp_ctx_init(g->model, &cp, &g->ctx, &err) || sp_spec_init(g->ctx, &sp, &g->spec, &err))
        goto fail;
    if (o->online.on &&
        cli_online_start(&o->online, o->run.draft_model, g->spec, g->dmodel, g->head, &g->online))
        return 1;
    return 0;
fail:
    fprintf(stderr, "specula: %s\n", err.msg);
    return 1;
}

/* Tokenises the prompt and checks that it and the budget fit the context. */
static int gen_prompt(const sp_gen_opts *o, gen_run *g) {
    sp_error err = {0};
    const sp_tokenizer *tok = sp_model_tokenizer(g->model);
    const int32_t n_ctx = sp_ctx_n_ctx(g->ctx);
    g->prompt = malloc((size_t)n_ctx * sizeof *g->prompt);
    g->out = malloc((size_t)o->run.n_predict * sizeof *g->out);
    if (!g->prompt || !g->out) {
        fprintf(stderr, "specula: out of memory for a context of %d tokens\n", n_ctx);
        return 1;
    }
    if (o->prompt_ids) {
        int32_t *ids, n;
        if (cli_ids(o->prompt_ids_flag, o->prompt_ids, &ids, &n)) return 1;
        const int bad = cli_ids_check(o->prompt_ids_flag, ids, n, sp_model_cfg(g->model)->n_vocab);
        if (!bad && n > n_ctx)
            fprintf(stderr, "specula: %s: %d ids, more than the context size %d\n", o->prompt_ids_flag, n, n_ctx);
        if (bad || n > n_ctx) {
            free(ids);
            return 1;
        }
        memcpy(g->prompt, ids, (size_t)n * sizeof *ids);
        g->n_prompt = n;
        free(ids);
    } else if (sp_tokenizer_encode(tok, g->text, g->text_len, sp_tokenizer_add_bos(tok), g->prompt, n_ctx,
                                   &g->n_prompt, &err)) {
        if (err.code == SP_ERR_RANGE)
            fprintf(stderr, "specula: prompt is %d tokens, longer than the context size %d\n",
                    g->n_prompt, n_ctx);
        else
            fprintf(stderr, "specula: %s\n", err.msg);
        return 1;
    }
    if (g->n_prompt == 0) {
        fprintf(stderr, "specula: the prompt is empty and the model adds no BOS token\n");
        return 1;
    }
    const int32_t extra = sp_spec_config_extra_ctx(&o->spec);
    if (g->n_prompt + o->run.n_predict + extra > n_ctx) {
        fprintf(stderr, "specula: prompt (%d tokens) plus -n %lld%s exceeds the context size %d (use -c)\n",
                g->n_prompt, o->run.n_predict, extra ? " plus the draft tree" : "", n_ctx);
        return 1;
    }
    return 0;
}

/* Generates, streaming the text to stdout unless JSON or quiet. */
static int gen_decode(const sp_gen_opts *o, gen_run *g) {
    sp_error err = {0};
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = (int32_t)o->run.n_predict;
    gp.sampling = o->run.sampling;
    gp.seed = (uint64_t)o->run.seed;
    gp.stop_at_eog = !o->run.ignore_eos;
    g->ss.tok = sp_model_tokenizer(g->model);
    g->ss.prev = g->ss.tok ? g->prompt[g->n_prompt - 1] : -1;
    g->ss.print = !o->json && !o->quiet;
    if (g->ss.print && g->ss.tok) {
        fwrite(g->text, 1, g->text_len, stdout);
        fflush(stdout);
    }
    if (sp_spec_generate(g->spec, g->prompt, g->n_prompt, &gp, g->out, gp.n_predict, &g->gs, &g->sst,
                         on_tokens, &g->ss, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        return 1;
    }
    if (g->ss.oom) {
        fprintf(stderr, "specula: out of memory keeping the generated text\n");
        return 1;
    }
    if (g->online) {
        sp_online_wait(g->online); /* the round under way, for the figures and --online-out */
        if (o->online.out && sp_online_export(g->online, o->online.out, &err)) {
            fprintf(stderr, "specula: %s\n", err.msg);
            return 1;
        }
    }
    return 0;
}

/* The --json document: always valid JSON, whatever bytes were generated. */
static int gen_print_json(const sp_gen_opts *o, const gen_run *g, double tps) {
    size_t bad = 0;
    json_t *j = json_object(), *toks = json_array();
    json_t *text = cli_json_text(g->ss.text ? g->ss.text : "", g->ss.len, &bad);
    int rc = j && toks && text ? 0 : 1;
    for (int32_t i = 0; !rc && i < g->gs.n_generated; i++)
        rc |= json_array_append_new(toks, json_integer(g->out[i]));
    rc |= json_object_set_new(j, "text", text);
    rc |= json_object_set_new(j, "text_invalid_utf8_bytes", json_integer((json_int_t)bad));
    if (bad)
        rc |= json_object_set_new(j, "text_note",
                                  json_string("bytes of the generated text that are not valid "
                                              "UTF-8 are each replaced by U+FFFD in text; the "
                                              "token ids are exact"));
    rc |= json_object_set_new(j, "tokens", toks);
    rc |= json_object_set_new(j, "n_prompt", json_integer(g->n_prompt));
    rc |= json_object_set_new(j, "n_generated", json_integer(g->gs.n_generated));
    rc |= json_object_set_new(j, "seconds", json_real(g->gs.t_generate));
    rc |= json_object_set_new(j, "prefill_seconds", json_real(g->gs.t_prefill));
    rc |= json_object_set_new(j, "tokens_per_second", json_real(tps));
    rc |= json_object_set_new(j, "stopped_at_eos", json_boolean(g->gs.hit_eog));
    rc |= json_object_set_new(j, "model", json_string(sp_model_desc(g->model)));
    rc |= json_object_set_new(j, "kv_cache", cli_kv_json(g->ctx));
    if (o->spec.draft.kind != SP_DRAFT_NONE)
        rc |= json_object_set_new(j, "spec", cli_spec_json(&g->sst));
    if (g->online) rc |= json_object_set_new(j, "online", cli_online_json(g->online));
    char *s = rc ? NULL : json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!s) {
        fprintf(stderr, "specula: out of memory writing the JSON result\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

int sp_gen_main(const sp_gen_opts *o, sp_gen_result *res) {
    gen_run g = {0};
    int rc = gen_setup(o, &g);
    if (!rc) rc = gen_prompt(o, &g);
    if (!rc) rc = gen_decode(o, &g);
    if (!rc) {
        const double secs = g.gs.t_generate, tps = secs > 0 ? g.gs.n_generated / secs : 0;
        if (res) *res = (sp_gen_result){.tokens_per_second = tps, .n_generated = g.gs.n_generated, .spec = g.sst};
        if (o->json && !o->quiet) {
            rc = gen_print_json(o, &g, tps);
        } else if (!o->quiet) {
            printf("\n");
            fprintf(stderr,
                    "\n[%s] prompt %d tokens (%.1f ms), generated %d tokens in %.3f s: %.1f tokens/s\n",
                    sp_model_desc(g.model), g.n_prompt, g.gs.t_prefill * 1e3, g.gs.n_generated, secs,
                    tps);
            if (o->spec.draft.kind != SP_DRAFT_NONE) cli_spec_print(stderr, &g.sst);
            sp_suffix_stats x;
            if (sp_spec_suffix_stats(g.spec, &x))
                fprintf(stderr,
                        "[spec suffix] %lld proposals (%lld from the corpus), trie nodes %lld request "
                        "+ %lld corpus (%lld tokens), %.1f MB reserved; %.1f us a step, longest "
                        "%.1f us\n",
                        (long long)x.proposals, (long long)x.from_corpus, (long long)x.request_nodes,
                        (long long)x.corpus_nodes, (long long)x.corpus_tokens, (double)x.bytes / 1e6,
                        x.steps ? x.seconds / (double)x.steps * 1e6 : 0.0, x.max_step_seconds * 1e6);
            cli_kv_print(g.ctx);
            if (g.online) cli_online_print(stderr, g.online);
        }
    }
    gen_free(&g);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    sp_gen_opts o;
    sp_gen_opts_init(&o, NULL);
    int rc = sp_gen_parse(argc, argv, &o, "generate", true);
    if (rc) return rc < 0 ? 0 : rc;
    return sp_gen_main(&o, NULL);
}
