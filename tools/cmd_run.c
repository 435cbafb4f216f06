/* cmd_run: `specula run`, the demo: greedy speculative generation on the
 * default model (stories260K) with its own Q8_0 copy as the draft unless
 * another drafter is given, then plain decoding of the same prompt for the
 * speedup measured in the same run.
 *
 * The default model is looked up in $SPECULA_MODEL, then
 * $SPECULA_SHARED/models and ../shared/models, then ~/.cache/specula;
 * otherwise its llama2.c files are downloaded into that cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_generate.h"
#include "specula.h"

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

int cmd_run(int argc, char **argv) {
    char model[4096], tokz[4096];
    /* the demo's defaults: greedy, the target's Q8_0 copy as the draft */
    sp_spec_params base = sp_spec_default_params();
    base.draft.kind = SP_DRAFT_LOWBIT;
    base.draft.lowbit_type = SP_GGML_Q8_0;
    sp_gen_opts o;
    sp_gen_opts_init(&o, &base);
    o.run.sampling.temperature = 0;
    int rc = sp_gen_parse(argc, argv, &o, "run", false);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.run.model) {
        if (find_default_model(model, tokz, sizeof model)) return 1;
        o.run.model = model;
        if (tokz[0]) o.run.tokenizer = tokz;
    }
    if (!o.prompt && !o.prompt_file) o.prompt = "Once upon a time";
    sp_gen_result spec_res, plain_res;
    if ((rc = sp_gen_main(&o, &spec_res)) || o.spec.draft.kind == SP_DRAFT_NONE || o.json) return rc;
    sp_gen_opts plain = o;
    plain.spec = sp_spec_default_params();
    plain.run.draft_model = NULL;
    plain.quiet = true;
    if ((rc = sp_gen_main(&plain, &plain_res))) return rc;
    fprintf(stderr, "[run] plain decoding %.1f tokens/s, speculative (%s) %.1f tokens/s: speedup %.2fx\n",
            plain_res.tokens_per_second, sp_drafter_name(o.spec.draft.kind),
            spec_res.tokens_per_second,
            plain_res.tokens_per_second > 0 ? spec_res.tokens_per_second / plain_res.tokens_per_second : 0);
    return 0;
}
