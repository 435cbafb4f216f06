/* cli_util: option parsing shared by the subcommands (getopt_long_only with
 * one-line errors, strict numbers, the flags generate and bench share, the
 * speculation flags), model loading, and JSON text that is always valid. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "file.h"
#include "utf8.h"
#include "gguf.h"

int cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
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

int cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
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

/* The option just parsed as the user wrote it: the argument before a
 * separate value, else the current argument up to '=' or the value glued
 * to a short option ("-n8"). */
static const char *written_flag(char **argv, char *buf, size_t cap) {
    const char *a = argv[optind - 1];
    if (optarg && optind >= 2 && optarg == a) return argv[optind - 2];
    size_t n = strlen(a);
    if (optarg && optarg > a && optarg <= a + n) n = (size_t)(optarg - a);
    if (n && a[n - 1] == '=') n--;
    snprintf(buf, cap, "%.*s", (int)n, a);
    return buf;
}

int cli_next(int argc, char **argv, const char *shortopts, const struct option *longopts,
                const char *cmd, const char **flag) {
    static char buf[256];
    char opts[128];
    snprintf(opts, sizeof opts, ":%s", shortopts); /* ':' reports a missing value */
    opterr = 0;
    int c = getopt_long_only(argc, argv, opts, longopts, NULL);
    if (c == -1) {
        if (optind < argc) {
            fprintf(stderr, "specula: %s: unexpected argument '%s' (try 'specula %s --help')\n",
                    cmd, argv[optind], cmd);
            return '?';
        }
        return -1;
    }
    *flag = written_flag(argv, buf, sizeof buf);
    if (c == ':') {
        fprintf(stderr, "specula: %s needs a value\n", *flag);
        return '?';
    }
    if (c == '?') {
        if (optopt && optopt < 0x100 && argv[optind - 1][0] == '-' && argv[optind - 1][1] != '-' &&
            strlen(argv[optind - 1]) == 2)
            fprintf(stderr, "specula: unknown option '-%c' for %s (try 'specula %s --help')\n",
                    optopt, cmd, cmd);
        else
            fprintf(stderr, "specula: unknown option '%s' for %s (try 'specula %s --help')\n",
                    argv[optind - 1], cmd, cmd);
        return '?';
    }
    return c;
}

void cli_run_opts_default(cli_run_opts *r) {
    memset(r, 0, sizeof *r);
    r->model = r->tokenizer = r->draft_model = r->draft_tokenizer = r->tokenizer_pre = NULL;
    r->n_predict = 128;
    r->seed = 42;
    r->threads = 1;
    r->n_ctx = 0;
    const sp_ctx_params cp = sp_ctx_default_params();
    r->type_k = cp.type_k;
    r->type_v = cp.type_v;
    r->sampling = sp_sampler_default_params();
}

int cli_run_opt(int opt, const char *flag, const char *arg, cli_run_opts *r) {
    double d;
    long long ll;
    switch (opt) {
    case 'm': r->model = arg; return 1;
    case 'z': r->tokenizer = arg; return 1;
    case SP_OPT_RUN + 0:
        if (r->n_draft_models == SP_CLI_MAX_DRAFTS) {
            fprintf(stderr, "specula: at most %d draft models (%s)\n", SP_CLI_MAX_DRAFTS, flag);
            return -1;
        }
        r->draft_models[r->n_draft_models++] = arg;
        r->draft_model = r->draft_models[0];
        return 1;
    case SP_OPT_RUN + 1: r->draft_tokenizer = arg; return 1;
    case 'n': return cli_int(flag, arg, 1, 1 << 20, &r->n_predict) ? -1 : 1;
    case 's': return cli_int(flag, arg, 0, INT64_MAX, &r->seed) ? -1 : 1;
    case 't': return cli_int(flag, arg, 1, 256, &r->threads) ? -1 : 1;
    case 'c': return cli_int(flag, arg, 1, 1 << 20, &r->n_ctx) ? -1 : 1;
    case SP_OPT_RUN + 2:
        if (cli_float(flag, arg, 0, 100, &d)) return -1;
        r->sampling.temperature = (float)d;
        return 1;
    case SP_OPT_RUN + 3:
        if (cli_int(flag, arg, 0, 1 << 24, &ll)) return -1;
        r->sampling.top_k = (int32_t)ll;
        return 1;
    case SP_OPT_RUN + 4:
        if (cli_float(flag, arg, 1e-9, 1, &d)) return -1;
        r->sampling.top_p = (float)d;
        return 1;
    case SP_OPT_RUN + 5:
        if (cli_float(flag, arg, 0, 1, &d)) return -1;
        r->sampling.min_p = (float)d;
        return 1;
    case SP_OPT_RUN + 6: r->mlock = true; return 1;
    case SP_OPT_RUN + 7: r->no_prefault = true; return 1;
    case SP_OPT_RUN + 11: r->ignore_eos = true; return 1;
    case SP_OPT_RUN + 8:
        if (!sp_tokenizer_pre_known(arg)) {
            fprintf(stderr, "specula: %s: unknown pre-tokenizer '%s'\n", flag, arg);
            return -1;
        }
        r->tokenizer_pre = arg;
        return 1;
    case SP_OPT_RUN + 9:
    case SP_OPT_RUN + 10:
        if (!sp_kv_type_parse(arg, opt == SP_OPT_RUN + 9 ? &r->type_k : &r->type_v)) {
            fprintf(stderr, "specula: %s: unknown KV cache type '%s' (f32, f16 or q8_0)\n", flag, arg);
            return -1;
        }
        return 1;
    default: return 0;
    }
}

/* The setting each speculation flag sets, by SP_OPT_SPEC offset. */
static const char *const SPEC_KEYS[] = {"drafter",   "verifier",  "lenience",    "gamma",
                                        "n_max",     "n_min",     "p_min",       "adaptive",
                                        "tree",      "ngram_min", "ngram_max",   "skip_layers",
                                        "lowbit",    "map_n",     "map_m",       "map_min_hits",
                                        "mod_n_match", "mod_n_min", "mod_n_max"};

int cli_spec_opt(int opt, const char *arg, sp_spec_config *c) {
    int k = opt - SP_OPT_SPEC;
    if (k < 0 || k >= (int)(sizeof SPEC_KEYS / sizeof SPEC_KEYS[0])) return 0;
    sp_error e = {0};
    if (sp_spec_config_set(c, SPEC_KEYS[k], arg, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        return -1;
    }
    return 1;
}

bool cli_is_gguf(const char *path) {
    int fd;
    uint64_t size;
    sp_error e;
    char magic[4] = {0};
    if (sp_file_open(path, "model", &fd, &size, &e)) return false; /* the load will say why */
    const ssize_t got = size >= 4 ? pread(fd, magic, 4, 0) : 0;
    close(fd);
    return got == 4 && !memcmp(magic, "GGUF", 4);
}

/* Load settings of the target (draft false) or of the draft model `path`:
 * the tokenizer is -z's (the target's), -zd's (a draft's), or for a
 * llama2.c draft without -zd the target's -z. Prints one line naming the
 * flag and returns -1 when a tokenizer flag is given for a GGUF model
 * (which has its own, and would ignore it). */
static int load_params(const cli_run_opts *r, bool draft, const char *path, sp_model_params *mp) {
    *mp = sp_model_default_params();
    const char *tok = draft ? r->draft_tokenizer : r->tokenizer;
    if (tok && cli_is_gguf(path)) {
        fprintf(stderr, "specula: %s: %s is a GGUF model with its own tokenizer (%s is for llama2.c checkpoints)\n",
                draft ? "-zd" : "-z", path, draft ? "-zd" : "-z");
        return -1;
    }
    if (draft && !tok && r->tokenizer && !cli_is_gguf(path)) tok = r->tokenizer;
    mp->tokenizer_path = tok;
    mp->mlock = r->mlock;
    mp->no_prefault = r->no_prefault;
    mp->tokenizer_pre = r->tokenizer_pre;
    return 0;
}

int cli_load_models(const cli_run_opts *r, sp_model **model, sp_model **dmodel) {
    sp_error err = {0};
    *model = *dmodel = NULL;
    sp_model_params mp;
    if (load_params(r, false, r->model, &mp)) return 1;
    if (sp_model_load(r->model, &mp, model, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        return 1;
    }
    if (!sp_model_tokenizer(*model) && !r->ids_only) {
        if (cli_is_gguf(r->model))
            fprintf(stderr, "specula: %s has no usable tokenizer (e.g. llama.cpp's test vocabulary): it runs "
                            "on token ids only (generate --prompt-ids 1,2,3, specula logits)\n", r->model);
        else
            fprintf(stderr, "specula: %s has no tokenizer; give one with -z tokenizer.bin\n", r->model);
        sp_model_free(*model);
        *model = NULL;
        return 1;
    }
    if (r->n_draft_models > 1 && !r->multi_draft) {
        fprintf(stderr, "specula: only one draft model (-md) here; several are for bench (route=auto) and serve\n");
        sp_model_free(*model);
        *model = NULL;
        return 1;
    }
    if (r->draft_model && !cli_is_eagle3(r->draft_model)) { /* a head loads with its target: cli_load_head */
        if (load_params(r, true, r->draft_model, &mp) || sp_model_load(r->draft_model, &mp, dmodel, &err)) {
            if (err.msg[0]) fprintf(stderr, "specula: %s\n", err.msg);
            sp_model_free(*model);
            *model = NULL;
            return 1;
        }
    }
    return 0;
}

bool cli_is_eagle3(const char *path) {
    if (!path || !cli_is_gguf(path)) return false;
    sp_gguf *g = NULL;
    sp_error err = {0};
    if (sp_gguf_open(path, &g, &err)) return false;
    sp_str a = {0};
    const bool yes = !sp_gguf_get_str(g, "general.architecture", &a, &err) && a.len == 6 && !memcmp(a.ptr, "eagle3", 6);
    sp_gguf_close(g);
    return yes;
}

int cli_load_head(const char *path, sp_drafter_kind kind, const sp_model *target, sp_eagle3 **head) {
    *head = NULL;
    if (kind != SP_DRAFT_EAGLE3) {
        if (path && cli_is_eagle3(path)) {
            fprintf(stderr, "specula: %s is an EAGLE-3 head: draft with it by --draft eagle3 (drafter=eagle3)\n", path);
            return 1;
        }
        return 0;
    }
    sp_error err = {0};
    if (sp_eagle3_load(path, target, head, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int cli_load_more_drafts(const cli_run_opts *r, sp_model **dms) {
    sp_error err = {0};
    for (int d = 1; d < r->n_draft_models; d++) {
        sp_model_params mp;
        if (load_params(r, true, r->draft_models[d], &mp)) return 1;
        if (sp_model_load(r->draft_models[d], &mp, &dms[d], &err)) {
            fprintf(stderr, "specula: %s\n", err.msg);
            return 1;
        }
    }
    return 0;
}

int cli_ids(const char *flag, const char *s, int32_t **ids, int32_t *n) {
    *ids = NULL;
    *n = 0;
    if (!s || !*s) {
        fprintf(stderr, "specula: %s needs a comma-separated list of token ids (e.g. 5,17,99)\n", flag);
        return -1;
    }
    int32_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) {
        fprintf(stderr, "specula: out of memory for %s\n", flag);
        return -1;
    }
    const char *p = s;
    for (int32_t i = 0; i < cap; i++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char buf[24];
        long long x = -1;
        char *e = NULL;
        if (len > 0 && len < sizeof buf && p[0] >= '0' && p[0] <= '9') {
            memcpy(buf, p, len);
            buf[len] = 0;
            errno = 0;
            x = strtoll(buf, &e, 10);
            if (errno || *e) x = -1;
        }
        if (x < 0 || x > INT32_MAX) {
            fprintf(stderr, "specula: %s: '%.*s' (entry %d) is not a token id (a whole number in [0, %d])\n", flag,
                    (int)(len > 32 ? 32 : len), p, i + 1, INT32_MAX);
            free(v);
            return -1;
        }
        v[i] = (int32_t)x;
        p = end ? end + 1 : p + len;
    }
    *ids = v;
    *n = cap;
    return 0;
}

int cli_ids_check(const char *flag, const int32_t *ids, int32_t n, int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= n_vocab) {
            fprintf(stderr, "specula: %s: token id %d (entry %d) is out of range: the vocabulary has %d ids\n",
                    flag, ids[i], i + 1, n_vocab);
            return -1;
        }
    return 0;
}

int cli_make_dirs(const char *path) {
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

json_t *cli_json_text(const char *s, size_t n, size_t *replaced) {
    const size_t bad = sp_utf8_invalid_bytes(s, n);
    if (replaced) *replaced = bad;
    if (!bad) return json_stringn(s ? s : "", n);
    char *out = malloc(n + 2 * bad);
    if (!out) return NULL;
    json_t *j = json_stringn(out, sp_utf8_repair(s, n, out));
    free(out);
    return j;
}

int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("specula 0.1.0\n");
    return 0;
}

/* ---- online learning ---- */

void cli_online_opts_default(cli_online_opts *o) {
    memset(o, 0, sizeof *o);
    o->p = sp_online_default_params();
    o->sch = sp_online_default_schedule();
}

int cli_online_opt(int opt, const char *flag, const char *arg, cli_online_opts *o) {
    long long ll;
    double d;
    switch (opt) {
    case SP_OPT_ONLINE + 0: break;
    case SP_OPT_ONLINE + 1:
        if (cli_int(flag, arg, 1, 1 << 24, &ll)) return -1;
        o->sch.every = (int32_t)ll;
        break;
    case SP_OPT_ONLINE + 2:
        if (cli_int(flag, arg, 1, 1 << 20, &ll)) return -1;
        o->sch.steps = (int32_t)ll;
        break;
    case SP_OPT_ONLINE + 3:
        if (cli_float(flag, arg, 1e-7, 0.5, &d)) return -1;
        o->p.lr = (float)d;
        break;
    case SP_OPT_ONLINE + 4:
        if (cli_int(flag, arg, 1, 256, &ll)) return -1;
        o->p.topk = (int32_t)ll;
        break;
    case SP_OPT_ONLINE + 5: o->sch.background = false; break;
    case SP_OPT_ONLINE + 6: o->out = arg; break;
    case SP_OPT_ONLINE + 7:
        if (cli_int(flag, arg, 1, 1 << 22, &ll)) return -1;
        o->p.buffer = (int32_t)ll;
        break;
    default: return 0;
    }
    o->on = true;
    return 1;
}

int cli_online_start(const cli_online_opts *o, const char *draft_path, sp_spec *spec,
                        const sp_model *dm, const sp_eagle3 *head, sp_online **out) {
    sp_error e = {0};
    *out = NULL;
    if ((head ? sp_online_init_head(draft_path, head, &o->p, out, &e) : sp_online_init(draft_path, &o->p, out, &e)) ||
        sp_online_serve(*out, spec, head ? NULL : dm, &o->sch, &e)) {
        fprintf(stderr, "specula: online learning: %s\n", e.msg);
        sp_online_free(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}

json_t *cli_online_json(sp_online *on) {
    sp_online_stats s = sp_online_get_stats(on, NULL);
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "observed", json_integer(s.observed));
    json_object_set_new(o, "rounds", json_integer(s.rounds));
    json_object_set_new(o, "steps", json_integer(s.steps));
    json_object_set_new(o, "swaps", json_integer(s.swaps));
    json_object_set_new(o, "errors", json_integer(s.errors));
    json_object_set_new(o, "last_loss", json_real(s.last_loss));
    json_object_set_new(o, "train_seconds", json_real(s.t_train));
    return o;
}

void cli_online_print(FILE *f, sp_online *on) {
    sp_error le = {0};
    sp_online_stats s = sp_online_get_stats(on, &le);
    fprintf(f, "online: %lld positions observed, %lld rounds (%lld steps, %.2f s), %lld drafts (or heads) swapped in, "
               "last loss %.3f\n",
            (long long)s.observed, (long long)s.rounds, (long long)s.steps, s.t_train,
            (long long)s.swaps, s.last_loss);
    if (s.errors) fprintf(f, "online: %lld rounds failed: %s\n", (long long)s.errors, le.msg);
}
