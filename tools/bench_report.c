/* bench_report: what `specula bench` writes: the stdout table, results.json,
 * results.csv, and the gnuplot data, script and PNG plots. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

static json_t *dbl_array(const double *x, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(x[i]));
    return a;
}

static json_t *config_json(const bench_config *c, const bench_agg *a) {
    json_t *j = json_object();
    json_object_set_new(j, "name", json_string(c->name));
    json_object_set_new(j, "plain", json_boolean(c->plain));
    json_object_set_new(j, "drafter", json_string(sp_drafter_name(c->spec.draft.kind)));
    if (!c->plain) {
        json_object_set_new(j, "verifier", json_string(sp_verifier_name(c->spec.verifier)));
        if (c->spec.tree.depth > 0) {
            char shape[256];
            sp_tree_shape_format(&c->spec.tree, shape, sizeof shape);
            json_object_set_new(j, "tree", json_string(shape));
        } else {
            json_object_set_new(j, "gamma", json_integer(c->spec.gamma));
        }
        json_object_set_new(j, "adaptive", json_boolean(c->spec.adaptive));
    }
    json_object_set_new(j, "runs", json_integer(a->n_runs));
    json_object_set_new(j, "tokens", json_integer(a->tokens));
    json_object_set_new(j, "seconds", json_real(a->seconds));
    json_object_set_new(j, "tokens_per_second", json_real(a->tps_mean));
    json_object_set_new(j, "tokens_per_second_std", json_real(a->tps_std));
    json_object_set_new(j, "tokens_per_second_by_repeat", dbl_array(a->tps, a->n_repeats));
    json_object_set_new(j, "speedup", json_real(a->speedup_mean));
    json_object_set_new(j, "speedup_std", json_real(a->speedup_std));
    json_object_set_new(j, "speedup_by_repeat", dbl_array(a->speedup, a->n_repeats));
    json_object_set_new(j, "block_efficiency", json_real(bench_block_efficiency(c, a)));
    if (!c->plain) {
        json_object_set_new(j, "acceptance_rate", json_real(sp_spec_acceptance_rate(&a->sum)));
        json_object_set_new(j, "mean_accepted", json_real(sp_spec_mean_accepted(&a->sum)));
        /* counters and accepted-length histogram summed over runs */
        json_object_set_new(j, "spec", cli_spec_json(&a->sum));
    }
    return j;
}

json_t *bench_results_json(json_t *meta, const bench_config *cfg, int n_cfg,
                              const bench_agg *agg, const bench_run *runs, size_t n_runs) {
    json_t *j = meta ? meta : json_object();
    json_t *cs = json_array();
    for (int i = 0; i < n_cfg; i++) json_array_append_new(cs, config_json(&cfg[i], &agg[i]));
    json_object_set_new(j, "configs", cs);
    json_t *rs = json_array();
    for (size_t i = 0; i < n_runs; i++) {
        const bench_run *r = &runs[i];
        json_t *o = json_object();
        json_object_set_new(o, "config", json_string(cfg[r->config].name));
        json_object_set_new(o, "prompt", json_integer(r->prompt));
        json_object_set_new(o, "repeat", json_integer(r->repeat));
        json_object_set_new(o, "seed", json_integer((json_int_t)r->seed));
        json_object_set_new(o, "n_prompt", json_integer(r->n_prompt));
        json_object_set_new(o, "n_generated", json_integer(r->n_generated));
        json_object_set_new(o, "prefill_seconds", json_real(r->t_prefill));
        json_object_set_new(o, "seconds", json_real(r->t_generate));
        json_object_set_new(o, "tokens_per_second",
                            json_real(r->t_generate > 0 ? r->n_generated / r->t_generate : 0));
        json_object_set_new(o, "stopped_at_eos", json_boolean(r->hit_eog));
        if (r->draft >= 0) json_object_set_new(o, "draft", json_integer(r->draft));
        if (r->explored) json_object_set_new(o, "explored", json_true());
        if (cfg[r->config].online) json_object_set_new(o, "learn_wait_seconds", json_real(r->t_learn_wait));
        if (!cfg[r->config].plain) json_object_set_new(o, "spec", cli_spec_json(&r->spec));
        json_array_append_new(rs, o);
    }
    json_object_set_new(j, "runs", rs);
    return j;
}

void bench_print_table(FILE *f, const bench_config *cfg, int n_cfg, const bench_agg *agg) {
    int w = 13;
    for (int i = 0; i < n_cfg; i++) {
        int l = (int)strlen(cfg[i].name);
        w = l > w ? l : w;
    }
    fprintf(f, "%-*s  %10s  %9s  %9s  %10s  %15s\n", w, "configuration", "acceptance", "block eff",
            "mean acc", "tokens/s", "speedup");
    for (int i = 0; i < n_cfg; i++) {
        const bench_agg *a = &agg[i];
        char acc[32] = "-", mean[32] = "-", sp[48];
        if (!cfg[i].plain) {
            snprintf(acc, sizeof acc, "%.3f", sp_spec_acceptance_rate(&a->sum));
            snprintf(mean, sizeof mean, "%.2f", sp_spec_mean_accepted(&a->sum));
        }
        snprintf(sp, sizeof sp, "%.2f +- %.2f", a->speedup_mean, a->speedup_std);
        fprintf(f, "%-*s  %10s  %9.2f  %9s  %10.1f  %15s\n", w, cfg[i].name, acc,
                bench_block_efficiency(&cfg[i], a), mean, a->tps_mean, sp);
    }
}

/* RFC 4180 field: quoted when it holds a comma, quote or newline. */
static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int bench_write_csv(const char *path, const bench_config *cfg, int n_cfg,
                       const bench_agg *agg) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "configuration,acceptance_rate,block_efficiency,mean_accepted,tokens_per_second,"
               "tokens_per_second_std,speedup,speedup_std\n");
    for (int i = 0; i < n_cfg; i++) {
        const bench_agg *a = &agg[i];
        csv_field(f, cfg[i].name);
        if (cfg[i].plain) fprintf(f, ",");
        else fprintf(f, ",%.6f", sp_spec_acceptance_rate(&a->sum));
        fprintf(f, ",%.6f", bench_block_efficiency(&cfg[i], a));
        if (cfg[i].plain) fprintf(f, ",");
        else fprintf(f, ",%.6f", sp_spec_mean_accepted(&a->sum));
        fprintf(f, ",%.3f,%.3f,%.6f,%.6f\n", a->tps_mean, a->tps_std, a->speedup_mean,
                a->speedup_std);
    }
    int bad = ferror(f);
    if (fclose(f) || bad) return -1;
    return 0;
}

/* ------------------------------------------------------------------ plots */

/* A config name as a gnuplot double-quoted string (data files and titles):
 * backslashes and double quotes become single quotes; gnuplot's enhanced
 * text mode is off in the script, so _ and ^ print as themselves. */
static void gp_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) fputc(*s == '"' || *s == '\\' || *s == '\n' ? '\'' : *s, f);
    fputc('"', f);
}

static bool gnuplot_installed(void) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/bin:/bin";
    char *dup = strdup(path), *save = NULL;
    bool found = false;
    for (char *d = dup ? strtok_r(dup, ":", &save) : NULL; d && !found; d = strtok_r(NULL, ":", &save)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/gnuplot", *d ? d : ".");
        found = access(p, X_OK) == 0;
    }
    free(dup);
    return found;
}

static FILE *open_in(const char *dir, const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return fopen(p, "w");
}

static int write_data(const char *dir, const bench_config *cfg, int n_cfg,
                      const bench_agg *agg, int *max_tau, int *n_spec) {
    FILE *f = open_in(dir, "bench_configs.dat");
    if (!f) return -1;
    fprintf(f, "# index name tokens_per_second tokens_per_second_std block_efficiency\n");
    for (int i = 0; i < n_cfg; i++) {
        fprintf(f, "%d ", i);
        gp_string(f, cfg[i].name);
        fprintf(f, " %.6g %.6g %.6g\n", agg[i].tps_mean, agg[i].tps_std,
                bench_block_efficiency(&cfg[i], &agg[i]));
    }
    if (fclose(f)) return -1;
    /* accepted-length histogram: one column per speculative config, as the
     * fraction of that config's iterations */
    *max_tau = 0;
    *n_spec = 0;
    for (int i = 0; i < n_cfg; i++) {
        if (cfg[i].plain) continue;
        (*n_spec)++;
        for (int t = 0; t < SP_SPEC_MAX_GAMMA + 2; t++)
            if (agg[i].sum.accept_hist[t] && t > *max_tau) *max_tau = t;
    }
    f = open_in(dir, "accept_hist.dat");
    if (!f) return -1;
    fprintf(f, "tau");
    for (int i = 0; i < n_cfg; i++)
        if (!cfg[i].plain) {
            fputc(' ', f);
            gp_string(f, cfg[i].name);
        }
    fputc('\n', f);
    for (int t = 0; t <= *max_tau; t++) {
        fprintf(f, "%d", t);
        for (int i = 0; i < n_cfg; i++)
            if (!cfg[i].plain) {
                int64_t it = agg[i].sum.iterations;
                fprintf(f, " %.6g", it ? (double)agg[i].sum.accept_hist[t] / (double)it : 0.0);
            }
        fputc('\n', f);
    }
    return fclose(f) ? -1 : 0;
}

/* Horizontal bars (config names on the y axis, first at the top), so long
 * names need no rotation; gnuplot sizes the left margin to them. */
static const char GP_SCRIPT[] =
    "# Plots for `specula bench`; run in this directory: gnuplot plots.gp\n"
    "set terminal pngcairo size 800,%d noenhanced\n"
    "set style fill solid 0.7 border -1\n"
    "set grid xtics\n"
    "set key off\n"
    "set yrange [%d.6:-0.6]\n"
    "set xrange [0:*]\n"
    "set output 'tokens_per_second.png'\n"
    "set title 'Tokens per second (mean +- std over repeats)'\n"
    "set xlabel 'tokens/s'\n"
    "plot 'bench_configs.dat' using ($3/2):1:($3/2):(0.35):ytic(2) with boxxyerror lc rgb '#4477aa', \\\n"
    "     '' using 3:1:4 with xerrorbars lc rgb 'black' ps 0\n"
    "set output 'block_efficiency.png'\n"
    "set title 'Block efficiency (tokens per target forward)'\n"
    "set xlabel 'block efficiency'\n"
    "plot 'bench_configs.dat' using ($5/2):1:($5/2):(0.35):ytic(2) with boxxyerror lc rgb '#228833'\n";

static const char GP_HIST[] =
    "set terminal pngcairo size 800,%d noenhanced\n"
    "set output 'accept_hist.png'\n"
    "set title 'Accepted draft tokens per iteration'\n"
    "set xlabel 'accepted length'\n"
    "set ylabel 'fraction of iterations'\n"
    "unset ytics\n"
    "set ytics\n"
    "set grid noxtics ytics\n"
    "set autoscale x\n"
    "set yrange [0:*]\n"
    "set key below\n"
    "set style data histograms\n"
    "set style histogram clustered gap 1\n"
    "set boxwidth 0.9 relative\n"
    "plot for [i=2:%d] 'accept_hist.dat' using i:xtic(1) title columnheader(i)\n";

static const char GP_NO_HIST[] =
    "set output 'accept_hist.png'\n"
    "set title 'Accepted draft tokens per iteration (no speculative configuration)'\n"
    "set xrange [0:1]\n"
    "set yrange [0:1]\n"
    "unset xtics\n"
    "unset ytics\n"
    "plot -1 notitle\n";

/* Runs `gnuplot script` in dir without a shell, its output to gnuplot.log.
 * 0, 1 when gnuplot is not installed, -1 with a message. */
static int run_gnuplot(const char *dir, const char *script, char *msg, size_t msg_cap) {
    if (!gnuplot_installed()) return 1;
    /* run gnuplot in dir without a shell, its output to gnuplot.log */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, msg_cap, "cannot start gnuplot: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        if (chdir(dir)) _exit(126);
        int fd = open("gnuplot.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(msg, msg_cap, "waiting for gnuplot: %s", strerror(errno));
            return -1;
        }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(msg, msg_cap, "gnuplot failed (exit %d); see %s/gnuplot.log",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, dir);
        return -1;
    }
    return 0;
}

int bench_plot(const char *dir, const bench_config *cfg, int n_cfg, const bench_agg *agg,
                  char *msg, size_t msg_cap) {
    int max_tau, n_spec;
    if (write_data(dir, cfg, n_cfg, agg, &max_tau, &n_spec)) {
        snprintf(msg, msg_cap, "cannot write plot data in %s: %s", dir, strerror(errno));
        return -1;
    }
    FILE *f = open_in(dir, "plots.gp");
    if (!f) {
        snprintf(msg, msg_cap, "cannot write %s/plots.gp: %s", dir, strerror(errno));
        return -1;
    }
    fprintf(f, GP_SCRIPT, 160 + 40 * (n_cfg < 5 ? 5 : n_cfg), n_cfg - 1);
    if (n_spec) fprintf(f, GP_HIST, 440 + 20 * n_spec, n_spec + 1);
    else fputs(GP_NO_HIST, f);
    if (fclose(f)) {
        snprintf(msg, msg_cap, "cannot write %s/plots.gp: %s", dir, strerror(errno));
        return -1;
    }
    return run_gnuplot(dir, "plots.gp", msg, msg_cap);
}

/* ------------------------------------------------------------------ streams */

/* Runs of config c in stream order (repeat-major, then prompt). */
static int stream_index(const bench_run *r, int n_prompts) { return r->repeat * n_prompts + r->prompt; }

int bench_write_stream(const char *dir, const bench_config *cfg, int n_cfg, const bench_run *runs,
                          size_t n_runs, char *const *domains, int n_prompts, int n_repeats, int block,
                          FILE *table, char *msg, size_t msg_cap) {
    const int n_stream = n_prompts * n_repeats, n_blocks = (n_stream + block - 1) / block;
    /* per (config, block): drafted and accepted */
    int64_t *dr = calloc((size_t)n_cfg * (size_t)n_blocks, sizeof *dr);
    int64_t *ac = calloc((size_t)n_cfg * (size_t)n_blocks, sizeof *ac);
    if (!dr || !ac) {
        free(dr), free(ac);
        snprintf(msg, msg_cap, "out of memory");
        return -1;
    }
    FILE *f = open_in(dir, "stream.csv");
    if (!f) goto io;
    fprintf(f, "config,stream_index,repeat,prompt,domain,draft,explored,drafted,accepted,acceptance,"
               "n_generated,seconds,learn_wait_seconds\n");
    for (size_t i = 0; i < n_runs; i++) {
        const bench_run *r = &runs[i];
        const int si = stream_index(r, n_prompts);
        dr[(size_t)r->config * (size_t)n_blocks + (size_t)(si / block)] += r->spec.drafted;
        ac[(size_t)r->config * (size_t)n_blocks + (size_t)(si / block)] += r->spec.accepted;
        csv_field(f, cfg[r->config].name);
        fprintf(f, ",%d,%d,%d,", si, r->repeat, r->prompt);
        csv_field(f, domains[r->prompt] ? domains[r->prompt] : "");
        fprintf(f, ",%d,%d,%lld,%lld,%.6g,%d,%.6g,%.6g\n", r->draft, r->explored ? 1 : 0,
                (long long)r->spec.drafted, (long long)r->spec.accepted,
                r->spec.drafted ? (double)r->spec.accepted / (double)r->spec.drafted : 0.0, r->n_generated,
                r->t_generate, r->t_learn_wait);
    }
    if (fclose(f)) goto io;
    f = open_in(dir, "stream_blocks.dat");
    if (!f) goto io;
    fprintf(f, "first_prompt");
    for (int c = 1; c < n_cfg; c++) {
        fputc(' ', f);
        gp_string(f, cfg[c].name);
    }
    fputc('\n', f);
    for (int k = 0; k < n_blocks; k++) {
        fprintf(f, "%d", k * block);
        for (int c = 1; c < n_cfg; c++) {
            const size_t at = (size_t)c * (size_t)n_blocks + (size_t)k;
            if (dr[at]) fprintf(f, " %.6g", (double)ac[at] / (double)dr[at]);
            else fprintf(f, " NaN");
        }
        fputc('\n', f);
    }
    if (fclose(f)) goto io;
    /* the plot: one line per speculative configuration, a vertical line
     * where the domain label changes */
    f = open_in(dir, "stream.gp");
    if (!f) goto io;
    fprintf(f, "# `specula bench` stream plot; run in this directory: gnuplot stream.gp\n"
               "set terminal pngcairo size 900,480 noenhanced\n"
               "set output 'stream.png'\n"
               "set title 'Acceptance rate over the prompt stream (blocks of %d prompts)'\n"
               "set xlabel 'prompt (stream order)'\n"
               "set ylabel 'acceptance rate'\n"
               "set yrange [0:*]\n"
               "set grid\n"
               "set key below\n",
            block);
    for (int si = 1; si < n_stream; si++) {
        const char *a = domains[(si - 1) % n_prompts], *b = domains[si % n_prompts];
        if ((a || b) && (!a || !b || strcmp(a, b)))
            fprintf(f, "set arrow from %d, graph 0 to %d, graph 1 nohead dt 2 lc rgb 'gray'\n", si, si);
    }
    fprintf(f, "plot for [i=2:%d] 'stream_blocks.dat' using ($1+%g):i with linespoints title columnheader(i)\n",
            n_cfg, block / 2.0);
    if (fclose(f)) goto io;
    /* the table: acceptance per domain, then per block */
    if (table) {
        int n_dom = 0;
        const char *dom[64];
        for (int i = 0; i < n_prompts && n_dom < 64; i++) {
            const char *d = domains[i] ? domains[i] : "(none)";
            bool seen = false;
            for (int k = 0; k < n_dom && !seen; k++) seen = !strcmp(dom[k], d);
            if (!seen) dom[n_dom++] = d;
        }
        int wn = 13;
        for (int c = 1; c < n_cfg; c++) wn = (int)strlen(cfg[c].name) > wn ? (int)strlen(cfg[c].name) : wn;
        fprintf(table, "stream: acceptance by domain\n%-*s", wn, "configuration");
        for (int k = 0; k < n_dom; k++) fprintf(table, "  %12.12s", dom[k]);
        fputc('\n', table);
        for (int c = 1; c < n_cfg; c++) {
            fprintf(table, "%-*s", wn, cfg[c].name);
            for (int k = 0; k < n_dom; k++) {
                int64_t d = 0, a = 0;
                for (size_t i = 0; i < n_runs; i++) {
                    const bench_run *r = &runs[i];
                    const char *rd = domains[r->prompt] ? domains[r->prompt] : "(none)";
                    if (r->config == c && !strcmp(rd, dom[k])) d += r->spec.drafted, a += r->spec.accepted;
                }
                if (d) fprintf(table, "  %12.3f", (double)a / (double)d);
                else fprintf(table, "  %12s", "-");
            }
            fputc('\n', table);
        }
        fprintf(table, "stream: acceptance per block of %d prompts\n%-10s", block, "prompts");
        int w[256];
        for (int c = 1; c < n_cfg && c < 256; c++) {
            w[c] = (int)strlen(cfg[c].name);
            if (w[c] < 10) w[c] = 10;
            fprintf(table, "  %*s", w[c], cfg[c].name);
        }
        fputc('\n', table);
        for (int k = 0; k < n_blocks; k++) {
            char lab[32];
            snprintf(lab, sizeof lab, "%d-%d", k * block, (k + 1) * block > n_stream ? n_stream - 1 : (k + 1) * block - 1);
            fprintf(table, "%-10s", lab);
            for (int c = 1; c < n_cfg; c++) {
                const size_t at = (size_t)c * (size_t)n_blocks + (size_t)k;
                const int cw = c < 256 ? w[c] : 10;
                if (dr[at]) fprintf(table, "  %*.3f", cw, (double)ac[at] / (double)dr[at]);
                else fprintf(table, "  %*s", cw, "-");
            }
            const char *d0 = domains[(k * block) % n_prompts];
            fprintf(table, "  %s\n", d0 ? d0 : "");
        }
    }
    free(dr), free(ac);
    return run_gnuplot(dir, "stream.gp", msg, msg_cap);
io:
    snprintf(msg, msg_cap, "cannot write the stream report in %s: %s", dir, strerror(errno));
    free(dr), free(ac);
    return -1;
}
