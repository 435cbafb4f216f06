/* bench_config: `specula bench` configuration lists ("plain;draft=model,
 * gamma=4"), each configuration read by the library's speculation-config
 * layer (sp_spec.h), and the aggregation of per-run records into
 * per-configuration figures. What needs the model (layer lists against the
 * layer count, batch limits) is checked by sp_spec_init. */
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

void bench_config_free(bench_config *c) {
    if (!c) return;
    free(c->name);
    memset(c, 0, sizeof *c);
}

int bench_config_parse(const char *text, bool has_draft_model, bench_config *out,
                          char *msg, size_t msg_cap) {
    memset(out, 0, sizeof *out);
    char *buf = dup_range(text, strlen(text));
    if (!buf) return failf(msg, msg_cap, "out of memory");
    const char *name = trim(buf);
    out->name = dup_range(name, strlen(name));
    free(buf);
    if (!out->name) return failf(msg, msg_cap, "out of memory");
    /* bench's own keys out; the rest is the speculation settings' text
     * (whose values may hold commas: "skip=1,3" splits into pieces that are
     * put back together unchanged) */
    char *spec_text = malloc(strlen(out->name) + 1), *work = dup_range(out->name, strlen(out->name));
    if (!spec_text || !work) {
        free(spec_text), free(work);
        bench_config_free(out);
        return failf(msg, msg_cap, "out of memory");
    }
    spec_text[0] = 0;
    bool route_given = false, first = true;
    int bad = 0;
    /* split at every comma, empty pieces kept (they are the settings
     * parser's to refuse) */
    for (char *tok = work, *next; tok && !bad; tok = next) {
        char *comma = strchr(tok, ',');
        next = comma ? comma + 1 : NULL;
        if (comma) *comma = 0;
        char *t = trim(tok);
        if (!strncmp(t, "online=", 7)) {
            const char *v = trim(t + 7);
            if (!strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "true")) out->online = true;
            else if (!strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "false")) out->online = false;
            else bad = failf(msg, msg_cap, "config '%s': online must be 1 or 0, got '%s'", out->name, v);
        } else if (!strncmp(t, "route=", 6)) {
            const char *v = trim(t + 6);
            char *end;
            long k = strtol(v, &end, 10);
            route_given = true;
            if (!strcmp(v, "auto")) out->route = SP_BENCH_ROUTE_AUTO;
            else if (*v && !*end && k >= 0 && k < 64) out->route = (int)k;
            else bad = failf(msg, msg_cap, "config '%s': route must be auto or a draft index, got '%s'", out->name, v);
        } else {
            if (!first) strcat(spec_text, ",");
            strcat(spec_text, t);
            first = false;
        }
    }
    free(work);
    sp_spec_config c;
    sp_spec_config_init(&c, NULL);
    sp_error e = {0};
    if (!bad && (sp_spec_config_parse(&c, spec_text, &e) || sp_spec_config_finish(&c, has_draft_model, &e)))
        bad = failf(msg, msg_cap, "config '%s': %s", out->name, e.msg);
    free(spec_text);
    if (!bad && (out->online || route_given) &&
        ((c.params.draft.kind != SP_DRAFT_MODEL && (route_given || c.params.draft.kind != SP_DRAFT_EAGLE3)) ||
         c.params.tree.depth > 0))
        bad = failf(msg, msg_cap, "config '%s': online needs the model or eagle3 drafter and route the model drafter, "
                    "with a chain (no tree)", out->name);
    if (bad) {
        bench_config_free(out);
        return -1;
    }
    out->spec = c.params;
    out->plain = c.params.draft.kind == SP_DRAFT_NONE;
    return 0;
}

void bench_configs_free(bench_config *c, int n) {
    for (int i = 0; c && i < n; i++) bench_config_free(&c[i]);
    free(c);
}

int bench_configs_parse(const char *list, bool has_draft_model, bench_config **out,
                           int *n_out, char *msg, size_t msg_cap) {
    *out = NULL;
    *n_out = 0;
    size_t cap = 2;
    for (const char *p = list; *p; p++) cap += *p == ';';
    bench_config *c = calloc(cap, sizeof *c);
    if (!c) return failf(msg, msg_cap, "out of memory");
    int n = 1, given = 0; /* slot 0: plain */
    if (bench_config_parse("plain", false, &c[0], msg, msg_cap)) goto fail;
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
            bench_config cfg;
            int r = bench_config_parse(t, has_draft_model, &cfg, msg, msg_cap);
            free(item);
            if (r) goto fail;
            given++;
            if (cfg.plain) { /* plain is already config 0 */
                bench_config_free(&cfg);
            } else {
                for (int i = 0; i < n; i++)
                    if (!strcmp(c[i].name, cfg.name)) {
                        failf(msg, msg_cap, "config '%s' is listed twice", cfg.name);
                        bench_config_free(&cfg);
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
    if (!given) {
        failf(msg, msg_cap, "no configuration in '%s' (configs are separated by ';')", list);
        goto fail;
    }
    *out = c;
    *n_out = n;
    return 0;
fail:
    bench_configs_free(c, n);
    return -1;
}

const char *bench_default_configs(bool has_draft_model) {
    return has_draft_model
               ? "plain;draft=model,gamma=4;draft=ngram,gamma=4;draft=layerskip,gamma=4;"
                 "draft=lowbit,gamma=4"
               : "plain;draft=ngram,gamma=4;draft=layerskip,gamma=4;draft=lowbit,gamma=4";
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

void bench_aggs_free(bench_agg *agg, int n_configs) {
    for (int i = 0; agg && i < n_configs; i++) {
        free(agg[i].tps);
        free(agg[i].speedup);
        agg[i].tps = agg[i].speedup = NULL;
    }
}

int bench_aggregate(const bench_run *runs, size_t n_runs, int n_configs, int n_repeats,
                       bench_agg *agg) {
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
        bench_aggs_free(agg, n_configs);
        return -1;
    }
    for (size_t i = 0; i < n_runs; i++) {
        const bench_run *r = &runs[i];
        SP_ASSERT(r->config >= 0 && r->config < n_configs && r->repeat >= 0 && r->repeat < n_repeats);
        bench_agg *a = &agg[r->config];
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

double bench_block_efficiency(const bench_config *c, const bench_agg *a) {
    return c->plain ? 1.0 : sp_spec_block_efficiency(&a->sum);
}
