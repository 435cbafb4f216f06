/* cmd_online: `specula online`, online speculative decoding on a stream of
 * generations: rounds of generation with a draft model (or an EAGLE-3 head,
 * --draft eagle3) while an online
 * learner (sp_train.h) observes the target's distributions at every
 * verified position; after each round the draft takes some training steps
 * and the served draft is replaced by the trained one. Prints the
 * acceptance per round, so the effect of learning is measured where it
 * happens; the output is the target's distribution throughout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "specula.h"

static void online_usage(FILE *f) {
    fprintf(f,
            "usage: specula online -m TARGET [--draft model|eagle3] -md DRAFT.gguf --out TRAINED.gguf\n"
            "         [-p PROMPT] [-n N] [--rounds R] [--gens G] [--steps S] [--lr LR] [--topk K]\n"
            "         [--gamma G] [--temp T] [--seed S] [-t THREADS]\n"
            "  R rounds (default 5) of G generations (default 4) of N tokens (default 128) from\n"
            "  PROMPT with new seeds; the learner keeps the target's rows of every verified\n"
            "  position and trains the draft S steps (default 100) after each round; the\n"
            "  trained draft is written to --out and served in the next round. With\n"
            "  --draft eagle3, DRAFT.gguf is an EAGLE-3 head: the learner also keeps the\n"
            "  target's hidden states there and trains the head as train-head does.\n");
}

int cmd_online(int argc, char **argv) {
    enum { O_OUT = SP_OPT_CMD, O_ROUNDS, O_GENS, O_STEPS, O_LR, O_TOPK, O_GAMMA, O_DRAFT };
    static const struct option LONGOPTS[] = {
        SP_CLI_RUN_OPTIONS,
        {"prompt", required_argument, NULL, 'p'},
        {"out", required_argument, NULL, O_OUT},
        {"rounds", required_argument, NULL, O_ROUNDS},
        {"gens", required_argument, NULL, O_GENS},
        {"steps", required_argument, NULL, O_STEPS},
        {"lr", required_argument, NULL, O_LR},
        {"topk", required_argument, NULL, O_TOPK},
        {"gamma", required_argument, NULL, O_GAMMA},
        {"draft", required_argument, NULL, O_DRAFT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cli_run_opts run;
    cli_run_opts_default(&run);
    run.sampling.temperature = 1.0f;
    const char *prompt = "Once upon a time", *out = NULL, *flag;
    long long rounds = 5, gens = 4, steps = 100, topk = 16, gamma = 4;
    double lr = 3e-3;
    bool head = false;
    int c, r;
    optind = 0;
    while ((c = cli_next(argc, argv, SP_CLI_RUN_SHORTOPTS "p:h", LONGOPTS, "online", &flag)) != -1) {
        if (c == '?') return 2;
        if ((r = cli_run_opt(c, flag, optarg, &run))) {
            if (r < 0) return 2;
            continue;
        }
        switch (c) {
        case 'p': prompt = optarg; break;
        case O_OUT: out = optarg; break;
        case O_ROUNDS: if (cli_int(flag, optarg, 1, 1000, &rounds)) return 2; break;
        case O_GENS: if (cli_int(flag, optarg, 1, 10000, &gens)) return 2; break;
        case O_STEPS: if (cli_int(flag, optarg, 0, 1000000, &steps)) return 2; break;
        case O_TOPK: if (cli_int(flag, optarg, 1, 256, &topk)) return 2; break;
        case O_GAMMA: if (cli_int(flag, optarg, 1, SP_SPEC_MAX_GAMMA, &gamma)) return 2; break;
        case O_LR: if (cli_float(flag, optarg, 1e-7, 0.5, &lr)) return 2; break;
        case O_DRAFT:
            if (strcmp(optarg, "model") && strcmp(optarg, "eagle3")) {
                fprintf(stderr, "specula: online learns a draft model or an EAGLE-3 head (--draft model|eagle3), "
                                "not '%s'\n", optarg);
                return 2;
            }
            head = !strcmp(optarg, "eagle3");
            break;
        case 'h': online_usage(stdout); return 0;
        default: return 2;
        }
    }
    if (!run.model || !run.draft_model || !out) {
        fprintf(stderr, "specula: online needs -m TARGET, -md DRAFT.gguf and --out TRAINED.gguf\n");
        return 2;
    }
    sp_error e = {0};
    sp_online_params op = sp_online_default_params();
    op.topk = (int32_t)topk;
    op.lr = (float)lr;
    op.seed = (uint64_t)run.seed;
    sp_online *on = NULL;
    sp_model *tm = NULL, *dm = NULL;
    sp_eagle3 *hd0 = NULL, *hd = NULL; /* --draft eagle3: the given head (the learner's), this round's */
    sp_ctx *ctx = NULL;
    sp_spec *s = NULL;
    int32_t *ids = NULL, *outt = NULL, n_prompt = 0;
    int rc = 1;
    cli_run_opts tr = run;
    tr.draft_model = NULL;
    if (cli_load_models(&tr, &tm, &dm)) goto done;
    if (head) {
        if (cli_load_head(run.draft_model, SP_DRAFT_EAGLE3, tm, &hd0)) goto done;
        if (sp_online_init_head(run.draft_model, hd0, &op, &on, &e)) goto fail;
    } else if (cli_is_eagle3(run.draft_model)) {
        fprintf(stderr, "specula: %s is an EAGLE-3 head: learn it with --draft eagle3\n", run.draft_model);
        goto done;
    } else if (sp_online_init(run.draft_model, &op, &on, &e)) {
        goto fail;
    }
    if (sp_online_export(on, out, &e)) goto fail;
    const sp_tokenizer *tok = sp_model_tokenizer(tm);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = run.n_ctx > 0 ? (int32_t)run.n_ctx : 1024;
    cp.n_threads = (int32_t)run.threads;
    cli_ctx_types(&run, &cp);
    if (sp_ctx_init(tm, &cp, &ctx, &e)) goto fail;
    ids = malloc((size_t)cp.n_ctx * sizeof *ids);
    outt = malloc((size_t)run.n_predict * sizeof *outt);
    if (!ids || !outt) {
        sp_fail(&e, SP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (sp_tokenizer_encode(tok, prompt, strlen(prompt), sp_tokenizer_add_bos(tok), ids, cp.n_ctx, &n_prompt, &e))
        goto fail;
    if (n_prompt < 1 || n_prompt + run.n_predict > sp_ctx_n_ctx(ctx)) {
        sp_fail(&e, SP_ERR_RANGE, "the prompt (%d tokens) plus %lld new tokens do not fit the context %d", n_prompt,
                run.n_predict, sp_ctx_n_ctx(ctx));
        goto fail;
    }
    printf("round  acceptance  mean accepted  tokens/s  buffer  loss after update\n");
    for (long long rd = 0; rd < rounds; rd++) {
        /* serve the draft as trained so far */
        sp_spec_free(s);
        s = NULL;
        sp_model_free(dm);
        dm = NULL;
        sp_spec_params sp = sp_spec_default_params();
        if (head) { /* the trained head as written (the first round: the given one) */
            sp_eagle3_free(hd);
            hd = NULL;
            if (sp_eagle3_load(out, tm, &hd, &e)) goto fail;
            sp.draft.kind = SP_DRAFT_EAGLE3;
            sp.draft.eagle3 = hd;
        } else {
            if (sp_model_load(out, NULL, &dm, &e)) goto fail;
            sp.draft.kind = SP_DRAFT_MODEL;
            sp.draft.draft_model = dm;
        }
        sp.gamma = (int32_t)gamma;
        if (sp_spec_init(ctx, &sp, &s, &e)) goto fail;
        sp_online_listen(on, s);
        int64_t drafted = 0, accepted = 0, iters = 0, toks = 0;
        double secs = 0;
        for (long long g = 0; g < gens; g++) {
            sp_gen_params gp = sp_gen_default_params();
            gp.n_predict = (int32_t)run.n_predict;
            gp.sampling = run.sampling;
            gp.stop_at_eog = !run.ignore_eos;
            gp.seed = (uint64_t)run.seed + (uint64_t)(rd * gens + g);
            sp_gen_stats gs;
            sp_spec_stats st;
            if (sp_spec_reset(s, &e) ||
                sp_spec_generate(s, ids, n_prompt, &gp, outt, gp.n_predict, &gs, &st, NULL, NULL, &e))
                goto fail;
            drafted += st.drafted, accepted += st.accepted, iters += st.iterations;
            toks += gs.n_generated, secs += gs.t_generate;
        }
        double loss = 0;
        if (sp_online_update(on, (int32_t)steps, &loss, &e) || sp_online_export(on, out, &e)) goto fail;
        printf("%5lld  %10.3f  %13.2f  %8.1f  %6lld  %.3f\n", rd, drafted ? (double)accepted / drafted : 0,
               iters ? (double)accepted / iters : 0, secs > 0 ? toks / secs : 0,
               (long long)sp_online_buffered(on), loss);
        fflush(stdout);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "specula: %s\n", e.msg);
done:
    sp_spec_free(s);
    sp_ctx_free(ctx);
    sp_model_free(dm);
    sp_eagle3_free(hd);
    sp_online_free(on);
    on = NULL;
    sp_eagle3_free(hd0);
    sp_model_free(tm);
    sp_online_free(on);
    free(ids);
    free(outt);
    return rc;
}
