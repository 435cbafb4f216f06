/* cli_util: strict flag-value parsing shared by all subcommands. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "cli.h"

int sp_cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    if (!s) {
        fprintf(stderr, "specula: %s needs a value\n", flag);
        return -1;
    }
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "specula: %s must be an integer in [%lld, %lld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int sp_cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    if (!s) {
        fprintf(stderr, "specula: %s needs a value\n", flag);
        return -1;
    }
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "specula: %s must be a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

void sp_cli_run_opts_default(sp_cli_run_opts *r) {
    r->model = r->tokenizer = r->draft_model = r->draft_tokenizer = NULL;
    r->n_predict = 128;
    r->seed = 42;
    r->threads = 1;
    r->n_ctx = 0;
    r->sampling = sp_sampler_default_params();
}

int sp_cli_run_flag(const char *a, const char *v, sp_cli_run_opts *r) {
    double d;
    long long ll;
    const char **path = !strcmp(a, "-m") || !strcmp(a, "--model")             ? &r->model
                        : !strcmp(a, "-z") || !strcmp(a, "--tokenizer")       ? &r->tokenizer
                        : !strcmp(a, "-md") || !strcmp(a, "--model-draft")    ? &r->draft_model
                        : !strcmp(a, "-zd") || !strcmp(a, "--tokenizer-draft") ? &r->draft_tokenizer
                                                                               : NULL;
    if (path) {
        if (!v) {
            fprintf(stderr, "specula: %s needs a value\n", a);
            return -1;
        }
        *path = v;
        return 1;
    }
    if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
        return sp_cli_int(a, v, 1, 1 << 20, &r->n_predict) ? -1 : 1;
    if (!strcmp(a, "--seed") || !strcmp(a, "-s"))
        return sp_cli_int(a, v, 0, INT64_MAX, &r->seed) ? -1 : 1;
    if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        return sp_cli_int(a, v, 1, 256, &r->threads) ? -1 : 1;
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
        return sp_cli_int(a, v, 1, 1 << 20, &r->n_ctx) ? -1 : 1;
    if (!strcmp(a, "--temp")) {
        if (sp_cli_float(a, v, 0, 100, &d)) return -1;
        r->sampling.temperature = (float)d;
        return 1;
    }
    if (!strcmp(a, "--top-k")) {
        if (sp_cli_int(a, v, 0, 1 << 24, &ll)) return -1;
        r->sampling.top_k = (int32_t)ll;
        return 1;
    }
    if (!strcmp(a, "--top-p")) {
        if (sp_cli_float(a, v, 1e-9, 1, &d)) return -1;
        r->sampling.top_p = (float)d;
        return 1;
    }
    if (!strcmp(a, "--min-p")) {
        if (sp_cli_float(a, v, 0, 1, &d)) return -1;
        r->sampling.min_p = (float)d;
        return 1;
    }
    return 0;
}

int sp_cli_load_models(const sp_cli_run_opts *r, sp_model **model, sp_model **dmodel) {
    sp_error err = {0};
    *model = *dmodel = NULL;
    sp_model_params mp = sp_model_default_params();
    mp.tokenizer_path = r->tokenizer;
    if (sp_model_load(r->model, &mp, model, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        return 1;
    }
    if (!sp_model_tokenizer(*model)) {
        fprintf(stderr, "specula: %s has no tokenizer; give one with -z tokenizer.bin\n", r->model);
        sp_model_free(*model);
        *model = NULL;
        return 1;
    }
    if (r->draft_model) {
        mp.tokenizer_path = r->draft_tokenizer ? r->draft_tokenizer : r->tokenizer;
        if (sp_model_load(r->draft_model, &mp, dmodel, &err)) {
            fprintf(stderr, "specula: %s\n", err.msg);
            sp_model_free(*model);
            *model = NULL;
            return 1;
        }
    }
    return 0;
}

int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("specula 0.1.0\n");
    return 0;
}
