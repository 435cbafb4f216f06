/* bench_config: `specula bench` configuration strings ("draft=model,gamma=4")
 * parsed into sp_spec_params, and the aggregation of per-run records into
 * per-configuration figures. No model access: what needs the model (layer
 * lists against the layer count, batch limits) is checked by sp_spec_init. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int failf(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failf(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static char *dup_range(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Trim spaces in place; returns the start. */
static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

static bool parse_ll(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_dbl(const char *s, double lo, double hi, bool lo_open, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
        return false;
    *out = v;
    return true;
}

enum {
    K_DRAFT, K_VERIFY, K_GAMMA, K_TREE, K_ADAPTIVE, K_PMIN, K_NGMIN, K_NGMAX, K_SKIP, K_LOWBIT,
    K_LENIENCE, K_COUNT
};
static const char *const KEYS[K_COUNT] = {"draft", "verify", "gamma", "tree", "adaptive", "p_min",
                                          "ngram_min", "ngram_max", "skip", "lowbit", "lenience"};

void sp_bench_config_free(sp_bench_config *c) {
    if (!c) return;
    free(c->name);
    free(c->tree);
    free(c->skip);
    memset(c, 0, sizeof *c);
}

int sp_bench_config_parse(const char *text, bool has_draft_model, sp_bench_config *out,
                          char *msg, size_t msg_cap) {
    memset(out, 0, sizeof *out);
    char *buf = dup_range(text, strlen(text));
    if (!buf) return failf(msg, msg_cap, "out of memory");
    char *name = trim(buf);
    int rc = -1;
    bool seen[K_COUNT] = {0};
    sp_spec_params sp = sp_spec_default_params();
    out->name = dup_range(name, strlen(name));
    if (!out->name) {
        failf(msg, msg_cap, "out of memory");
        goto done;
    }
    if (!*name) {
        failf(msg, msg_cap, "empty config");
        goto done;
    }
    if (!strcmp(name, "plain")) {
        sp.draft.kind = SP_DRAFT_NONE;
        seen[K_DRAFT] = true;
    } else {
        /* Split on commas by hand: skip=1,3 continues into the next items. */
        char *save = NULL;
        int last_key = -1;
        for (char *item = strtok_r(name, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            item = trim(item);
            char *eq = strchr(item, '=');
            if (!eq && last_key == K_SKIP && isdigit((unsigned char)*item)) {
                size_t n = strlen(out->skip), m = strlen(item);
                char *ns = realloc(out->skip, n + m + 2);
                if (!ns) {
                    failf(msg, msg_cap, "out of memory");
                    goto done;
                }
                ns[n] = ',';
                memcpy(ns + n + 1, item, m + 1);
                out->skip = ns;
                continue;
            }
            const char *key = item, *val = eq ? trim(eq + 1) : NULL;
            if (eq) *eq = 0;
            key = trim((char *)key);
            int k = 0;
            while (k < K_COUNT && strcmp(key, KEYS[k])) k++;
            if (k == K_COUNT) {
                failf(msg, msg_cap,
                      "config '%s': unknown key '%s' (draft, verify, gamma, tree, adaptive, p_min, "
                      "ngram_min, ngram_max, skip, lowbit, lenience)",
                      out->name, key);
                goto done;
            }
            if (seen[k]) {
                failf(msg, msg_cap, "config '%s': key '%s' given twice", out->name, key);
                goto done;
            }
            seen[k] = true;
            last_key = k;
            if (!val && k != K_ADAPTIVE) {
                failf(msg, msg_cap, "config '%s': key '%s' needs a value (%s=...)", out->name, key,
                      key);
                goto done;
            }
            if (val && !*val) {
                failf(msg, msg_cap, "config '%s': key '%s' has an empty value", out->name, key);
                goto done;
            }
            long long ll;
            double d;
            sp_error e = {0};
            switch (k) {
            case K_DRAFT:
                if (sp_drafter_parse(val, &sp.draft.kind, &e)) {
                    failf(msg, msg_cap, "config '%s': key draft: %s", out->name, e.msg);
                    goto done;
                }
                break;
            case K_VERIFY:
                if (sp_verifier_parse(val, &sp.verifier, &e)) {
                    failf(msg, msg_cap, "config '%s': key verify: %s", out->name, e.msg);
                    goto done;
                }
                break;
            case K_GAMMA:
                if (!parse_ll(val, 1, SP_SPEC_MAX_GAMMA, &ll)) {
                    failf(msg, msg_cap, "config '%s': gamma must be an integer in [1, %d], got '%s'",
                          out->name, SP_SPEC_MAX_GAMMA, val);
                    goto done;
                }
                sp.gamma = (int32_t)ll;
                break;
            case K_TREE: {
                sp_tree_shape sh;
                if (sp_tree_shape_parse(val, &sh, &e)) {
                    failf(msg, msg_cap, "config '%s': key tree: %s", out->name, e.msg);
                    goto done;
                }
                if (!(out->tree = dup_range(val, strlen(val)))) {
                    failf(msg, msg_cap, "out of memory");
                    goto done;
                }
                break;
            }
            case K_ADAPTIVE:
                if (!val || !strcmp(val, "1") || !strcmp(val, "true")) sp.adaptive = true;
                else if (!strcmp(val, "0") || !strcmp(val, "false")) sp.adaptive = false;
                else {
                    failf(msg, msg_cap, "config '%s': adaptive must be 0, 1, true or false, got '%s'",
                          out->name, val);
                    goto done;
                }
                break;
            case K_PMIN:
                if (!parse_dbl(val, 0, 1, false, &d)) {
                    failf(msg, msg_cap, "config '%s': p_min must be a number in [0, 1], got '%s'",
                          out->name, val);
                    goto done;
                }
                sp.draft_p_min = (float)d;
                break;
            case K_NGMIN:
            case K_NGMAX:
                if (!parse_ll(val, 1, 64, &ll)) {
                    failf(msg, msg_cap, "config '%s': %s must be an integer in [1, 64], got '%s'",
                          out->name, key, val);
                    goto done;
                }
                *(k == K_NGMIN ? &sp.draft.ngram_min : &sp.draft.ngram_max) = (int32_t)ll;
                break;
            case K_SKIP:
                if (!isdigit((unsigned char)*val)) {
                    failf(msg, msg_cap, "config '%s': skip must be a layer list like 1,3,5-7, got '%s'",
                          out->name, val);
                    goto done;
                }
                if (!(out->skip = dup_range(val, strlen(val)))) {
                    failf(msg, msg_cap, "out of memory");
                    goto done;
                }
                break;
            case K_LOWBIT:
                if (!strcmp(val, "q4_0")) sp.draft.lowbit_type = SP_GGML_Q4_0;
                else if (!strcmp(val, "q8_0")) sp.draft.lowbit_type = SP_GGML_Q8_0;
                else if (!strcmp(val, "f16")) sp.draft.lowbit_type = SP_GGML_F16;
                else if (!strcmp(val, "bf16")) sp.draft.lowbit_type = SP_GGML_BF16;
                else {
                    failf(msg, msg_cap, "config '%s': lowbit must be q4_0, q8_0, f16 or bf16, got '%s'",
                          out->name, val);
                    goto done;
                }
                break;
            case K_LENIENCE:
                if (!parse_dbl(val, 0, 1, true, &d)) {
                    failf(msg, msg_cap, "config '%s': lenience must be a number in (0, 1], got '%s'",
                          out->name, val);
                    goto done;
                }
                sp.lenience = d;
                break;
            default: break;
            }
        }
    }
    if (!seen[K_DRAFT]) {
        if (!has_draft_model) {
            failf(msg, msg_cap,
                  "config '%s': no drafter: add draft=ngram|layerskip|lowbit, or give -md DRAFT "
                  "for draft=model",
                  out->name);
            goto done;
        }
        sp.draft.kind = SP_DRAFT_MODEL;
    }
    const sp_drafter_kind kind = sp.draft.kind;
    out->plain = kind == SP_DRAFT_NONE;
    /* keys the chosen drafter/verifier would ignore */
    struct {
        int key;
        bool bad;
        const char *why;
    } unused[] = {
        {K_VERIFY, out->plain, "plain decoding has no verifier"},
        {K_GAMMA, out->plain, "plain decoding drafts nothing"},
        {K_ADAPTIVE, out->plain, "plain decoding drafts nothing"},
        {K_PMIN, out->plain, "plain decoding drafts nothing"},
        {K_TREE, out->plain || kind == SP_DRAFT_NGRAM, "trees need draft=model, layerskip or lowbit"},
        {K_NGMIN, kind != SP_DRAFT_NGRAM, "only used with draft=ngram"},
        {K_NGMAX, kind != SP_DRAFT_NGRAM, "only used with draft=ngram"},
        {K_SKIP, kind != SP_DRAFT_LAYERSKIP, "only used with draft=layerskip"},
        {K_LOWBIT, kind != SP_DRAFT_LOWBIT, "only used with draft=lowbit"},
        {K_LENIENCE, sp.verifier != SP_VERIFIER_LENIENT, "only used with verify=lenient"},
    };
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++)
        if (seen[unused[i].key] && unused[i].bad) {
            failf(msg, msg_cap, "config '%s': key %s: %s", out->name, KEYS[unused[i].key],
                  unused[i].why);
            goto done;
        }
    if (kind == SP_DRAFT_MODEL && !has_draft_model) {
        failf(msg, msg_cap, "config '%s': draft=model needs a draft model (-md DRAFT)", out->name);
        goto done;
    }
    if (sp.draft.ngram_min > sp.draft.ngram_max) {
        failf(msg, msg_cap, "config '%s': key ngram_min: %d exceeds ngram_max %d", out->name,
              sp.draft.ngram_min, sp.draft.ngram_max);
        goto done;
    }
    if (seen[K_TREE] && !seen[K_VERIFY]) sp.verifier = SP_VERIFIER_MC_NOREP;
    const bool mc = sp.verifier == SP_VERIFIER_MC || sp.verifier == SP_VERIFIER_MC_NOREP ||
                    sp.verifier == SP_VERIFIER_NAIVE;
    if (mc && !seen[K_TREE]) {
        failf(msg, msg_cap, "config '%s': key verify: %s verifies a draft tree; add tree=SHAPE",
              out->name, sp_verifier_name(sp.verifier));
        goto done;
    }
    if (seen[K_TREE] && !mc && sp.verifier != SP_VERIFIER_GREEDY) {
        failf(msg, msg_cap, "config '%s': key tree: trees are verified with verify=mc, mc-norep, "
              "naive or greedy, not %s", out->name, sp_verifier_name(sp.verifier));
        goto done;
    }
    if (seen[K_TREE] && seen[K_GAMMA]) {
        failf(msg, msg_cap, "config '%s': key gamma: a tree's shape sets the draft length", out->name);
        goto done;
    }
    sp.tree = out->tree;
    sp.draft.skip_layers = out->skip;
    out->spec = sp;
    rc = 0;
done:
    free(buf);
    if (rc) sp_bench_config_free(out);
    return rc;
}

void sp_bench_configs_free(sp_bench_config *c, int n) {
    for (int i = 0; c && i < n; i++) sp_bench_config_free(&c[i]);
    free(c);
}

int sp_bench_configs_parse(const char *list, bool has_draft_model, sp_bench_config **out,
                           int *n_out, char *msg, size_t msg_cap) {
    *out = NULL;
    *n_out = 0;
    size_t cap = 2;
    for (const char *p = list; *p; p++) cap += *p == ';';
    sp_bench_config *c = calloc(cap, sizeof *c);
    if (!c) return failf(msg, msg_cap, "out of memory");
    int n = 1; /* slot 0: plain */
    if (sp_bench_config_parse("plain", false, &c[0], msg, msg_cap)) goto fail;
    const char *p = list;
    for (;;) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        char *item = dup_range(p, len);
        if (!item) {
            failf(msg, msg_cap, "out of memory");
            goto fail;
        }
        char *t = trim(item);
        if (*t) {
            sp_bench_config cfg;
            int r = sp_bench_config_parse(t, has_draft_model, &cfg, msg, msg_cap);
            free(item);
            if (r) goto fail;
            if (cfg.plain) { /* plain is already config 0 */
                sp_bench_config_free(&cfg);
            } else {
                for (int i = 0; i < n; i++)
                    if (!strcmp(c[i].name, cfg.name)) {
                        failf(msg, msg_cap, "config '%s' is listed twice", cfg.name);
                        sp_bench_config_free(&cfg);
                        goto fail;
                    }
                c[n++] = cfg;
            }
        } else {
            free(item);
        }
        if (!semi) break;
        p = semi + 1;
    }
    *out = c;
    *n_out = n;
    return 0;
fail:
    sp_bench_configs_free(c, n);
    return -1;
}

const char *sp_bench_default_configs(bool has_draft_model) {
    return has_draft_model
               ? "plain;draft=model,gamma=4;draft=ngram,gamma=4;draft=layerskip,gamma=4;"
                 "draft=lowbit,gamma=4"
               : "plain;draft=ngram,gamma=4;draft=layerskip,gamma=4;draft=lowbit,gamma=4";
}

static int32_t tree_nodes(const sp_bench_config *c) {
    sp_tree_shape sh;
    if (c->tree && sp_tree_shape_parse(c->tree, &sh, NULL) == SP_OK) return sh.n_nodes;
    return 0;
}

int32_t sp_bench_config_batch(const sp_bench_config *c) {
    int32_t nodes = tree_nodes(c);
    int32_t need = nodes ? nodes + 1 : c->spec.gamma + 2;
    return need > 64 ? need : 64;
}

int32_t sp_bench_config_extra_ctx(const sp_bench_config *c) {
    int32_t nodes = tree_nodes(c);
    return nodes ? nodes : 0;
}

/* ------------------------------------------------------------ aggregation */

static void stats_add(sp_spec_stats *a, const sp_spec_stats *b) {
    if (!a->drafter) a->drafter = b->drafter;
    if (!a->verifier) a->verifier = b->verifier;
    a->iterations += b->iterations;
    a->drafted += b->drafted;
    a->accepted += b->accepted;
    a->emitted += b->emitted;
    a->target_forwards += b->target_forwards;
    a->prefill_forwards += b->prefill_forwards;
    a->draft_forwards += b->draft_forwards;
    for (int i = 0; i < SP_SPEC_MAX_GAMMA + 2; i++) {
        a->accept_hist[i] += b->accept_hist[i];
        a->gamma_hist[i] += b->gamma_hist[i];
    }
    a->t_draft += b->t_draft;
    a->t_target += b->t_target;
    a->t_verify += b->t_verify;
    a->t_sample += b->t_sample;
}

static void mean_std(const double *x, int n, double *mean, double *sd) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = n ? s / n : 0;
    for (int i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
}

void sp_bench_aggs_free(sp_bench_agg *agg, int n_configs) {
    for (int i = 0; agg && i < n_configs; i++) {
        free(agg[i].tps);
        free(agg[i].speedup);
        agg[i].tps = agg[i].speedup = NULL;
    }
}

int sp_bench_aggregate(const sp_bench_run *runs, size_t n_runs, int n_configs, int n_repeats,
                       sp_bench_agg *agg) {
    memset(agg, 0, (size_t)n_configs * sizeof *agg);
    /* per (config, repeat): tokens and seconds */
    double *tok = calloc((size_t)n_configs * (size_t)n_repeats, sizeof *tok);
    double *sec = calloc((size_t)n_configs * (size_t)n_repeats, sizeof *sec);
    int rc = tok && sec ? 0 : -1;
    for (int c = 0; !rc && c < n_configs; c++) {
        agg[c].n_repeats = n_repeats;
        agg[c].tps = calloc((size_t)n_repeats, sizeof(double));
        agg[c].speedup = calloc((size_t)n_repeats, sizeof(double));
        if (!agg[c].tps || !agg[c].speedup) rc = -1;
    }
    if (rc) {
        free(tok);
        free(sec);
        sp_bench_aggs_free(agg, n_configs);
        return -1;
    }
    for (size_t i = 0; i < n_runs; i++) {
        const sp_bench_run *r = &runs[i];
        SP_ASSERT(r->config >= 0 && r->config < n_configs && r->repeat >= 0 && r->repeat < n_repeats);
        sp_bench_agg *a = &agg[r->config];
        a->n_runs++;
        a->tokens += r->n_generated;
        a->seconds += r->t_generate;
        stats_add(&a->sum, &r->spec);
        tok[r->config * n_repeats + r->repeat] += r->n_generated;
        sec[r->config * n_repeats + r->repeat] += r->t_generate;
    }
    for (int c = 0; c < n_configs; c++) {
        for (int k = 0; k < n_repeats; k++) {
            double s = sec[c * n_repeats + k];
            agg[c].tps[k] = s > 0 ? tok[c * n_repeats + k] / s : 0;
        }
    }
    for (int c = 0; c < n_configs; c++) {
        for (int k = 0; k < n_repeats; k++)
            agg[c].speedup[k] = agg[0].tps[k] > 0 ? agg[c].tps[k] / agg[0].tps[k] : 0;
        mean_std(agg[c].tps, n_repeats, &agg[c].tps_mean, &agg[c].tps_std);
        mean_std(agg[c].speedup, n_repeats, &agg[c].speedup_mean, &agg[c].speedup_std);
    }
    free(tok);
    free(sec);
    return 0;
}

double sp_bench_block_efficiency(const sp_bench_config *c, const sp_bench_agg *a) {
    return c->plain ? 1.0 : sp_spec_block_efficiency(&a->sum);
}
