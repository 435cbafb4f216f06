/* cmd_logits: `specula logits`, the logits a model gives a sequence of
 * token ids, all evaluated in one forward pass with the logits of every
 * position: the Specula side of a comparison with another engine (llama.cpp's
 * scripts/ref_logits.c prints the same format). Needs no tokenizer. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "specula.h"

static void logits_usage(FILE *f) {
    fprintf(f,
            "usage: specula logits -m MODEL --ids 5,17,99 [--json] [-t THREADS] [-c N_CTX]\n"
            "  Evaluates the ids (no BOS added) in one forward pass and prints the logits\n"
            "  of every position: one line per position, the values space-separated in\n"
            "  %%.6g, or with --json one line {\"logits\": [[...], ...]} (%%.9g: the exact\n"
            "  floats). -c: the context size (default: the training context clamped to\n"
            "  [512, 4096]; it decides phi3's long or short RoPE factors, as llama.cpp's\n"
            "  context size does).\n");
}

int cmd_logits(int argc, char **argv) {
    enum { O_IDS = SP_OPT_CMD, O_JSON };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'},     {"ids", required_argument, NULL, O_IDS},
        {"json", no_argument, NULL, O_JSON},         {"threads", required_argument, NULL, 't'},
        {"ctx-size", required_argument, NULL, 'c'},  {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *model = NULL, *ids_s = NULL, *flag, *ids_flag = "--ids";
    bool json = false;
    long long threads = 1, n_ctx = 0;
    int opt;
    optind = 0;
    while ((opt = sp_cli_next(argc, argv, "m:t:c:h", longopts, "logits", &flag)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case O_IDS: ids_s = optarg, ids_flag = flag; break;
        case O_JSON: json = true; break;
        case 't':
            if (sp_cli_int(flag, optarg, 1, 512, &threads)) return 2;
            break;
        case 'c':
            if (sp_cli_int(flag, optarg, 1, 1 << 24, &n_ctx)) return 2;
            break;
        case 'h': logits_usage(stdout); return 0;
        default: return 2;
        }
    }
    if (!model || !ids_s) {
        fprintf(stderr, "specula: logits needs a model and token ids (-m MODEL --ids 5,17,99)\n");
        return 2;
    }
    int32_t *ids = NULL, n = 0;
    if (sp_cli_ids(ids_flag, ids_s, &ids, &n)) return 2;
    sp_error err = {0};
    sp_model *m = NULL;
    sp_ctx *c = NULL;
    float *logits = NULL;
    int rc = 1;
    sp_model_params mp = sp_model_default_params();
    mp.no_prefault = true;
    if (sp_model_load(model, &mp, &m, &err)) goto fail;
    const int32_t V = sp_model_cfg(m)->n_vocab;
    if (sp_cli_ids_check(ids_flag, ids, n, V)) {
        rc = 2;
        goto done;
    }
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = (int32_t)n_ctx;
    cp.n_threads = (int32_t)threads;
    cp.max_batch = n;
    if (sp_ctx_init(m, &cp, &c, &err)) goto fail;
    if (n > sp_ctx_n_ctx(c)) {
        fprintf(stderr, "specula: %s: %d ids do not fit the context size %d (use -c)\n", ids_flag, n,
                sp_ctx_n_ctx(c));
        rc = 2;
        goto done;
    }
    logits = malloc((size_t)n * (size_t)V * sizeof *logits);
    if (!logits) {
        sp_fail(&err, SP_ERR_NOMEM, "out of memory for %d x %d logits", n, V);
        goto fail;
    }
    sp_batch b = {.tokens = ids, .n = n, .logits_all = true};
    if (sp_forward(c, &b, logits, &err)) goto fail;
    if (json) printf("{\"logits\": [");
    for (int32_t t = 0; t < n; t++) {
        if (json) printf(t ? ", [" : "[");
        for (int32_t v = 0; v < V; v++)
            printf(v ? (json ? ", %.9g" : " %.6g") : (json ? "%.9g" : "%.6g"), (double)logits[(size_t)t * V + v]);
        printf(json ? "]" : "\n");
    }
    if (json) printf("]}\n");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "specula: logits: %s\n", err.msg);
done:
    free(logits);
    free(ids);
    sp_ctx_free(c);
    sp_model_free(m);
    return rc;
}
