/* bench.h: internals of `specula bench` shared by its files: configuration
 * strings (bench_config.c), per-run records and their aggregation
 * (bench_config.c), and the reports (bench_report.c). Library-free apart
 * from the public parameter/stat types. */
#ifndef SP_BENCH_H
#define SP_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "sp_spec.h"

/* One configuration under test: a configuration string in the text form of
 * sp_spec.h (configs are separated by ';'), e.g.
 * "draft=layerskip,skip=1,3,gamma=2" or "plain". Without a drafter key the
 * drafter is `model` when a draft model was given (-md), as in `specula
 * generate`; with a tree and no verifier key the verifier is mc-norep.
 * Keys that the chosen drafter/verifier would ignore are errors, so a typo
 * cannot silently measure the wrong thing. The display name is the string
 * as given, trimmed. */
/* Two keys are bench's own, for draft models: online=1 (the draft learns
 * while the prompts are processed in order, sp_train.h) and route=K (use
 * the K-th -md, default 0) or route=auto (a router, sp_spec.h, picks a
 * draft per prompt among all -md; each draft learns only from its own
 * prompts when online). */
#define SP_BENCH_ROUTE_AUTO (-1)
typedef struct bench_config {
    char *name;          /* owned */
    bool plain;          /* plain decoding (drafter NONE) */
    bool online;
    int route;           /* draft index, or SP_BENCH_ROUTE_AUTO */
    sp_spec_params spec; /* draft.draft_model is set by the caller */
} bench_config;

/* Parse one configuration string. has_draft_model: -md was given (n_drafts
 * of them; route=K needs K < n_drafts, checked by the caller). On error
 * returns -1 with a one-line message (naming the config and key) in msg. */
int bench_config_parse(const char *text, bool has_draft_model, bench_config *out,
                          char *msg, size_t msg_cap);
void bench_config_free(bench_config *c);

/* Parse a ';'-separated list into a new array. Plain decoding is always
 * config 0 (added when absent; "plain" and "draft=none" are moved there);
 * empty items are skipped, but a list with no configuration at all is an
 * error, as is a name listed twice. Returns 0, or -1 with a message. Free
 * with bench_configs_free. */
int bench_configs_parse(const char *list, bool has_draft_model, bench_config **out,
                           int *n_out, char *msg, size_t msg_cap);
void bench_configs_free(bench_config *c, int n);

/* The default --configs list. */
const char *bench_default_configs(bool has_draft_model);

/* One generation: configuration `config` on prompt `prompt` in repeat `repeat`. */
typedef struct bench_run {
    int config, prompt, repeat;
    int draft;                    /* the draft model used (-md index), -1 for none */
    bool explored;                /* route=auto chose it at random */
    double t_learn_wait;          /* online: seconds waiting for the round under way after the run */
    uint64_t seed;
    int32_t n_prompt, n_generated;
    double t_prefill, t_generate; /* seconds */
    bool hit_eog;
    sp_spec_stats spec;
} bench_run;

/* Per-configuration aggregates over all its runs. */
typedef struct bench_agg {
    int n_runs, n_repeats;
    int64_t tokens;           /* generated, over all runs */
    double seconds;           /* generate seconds, over all runs */
    sp_spec_stats sum;        /* counters and histograms summed over runs */
    double *tps;              /* [n_repeats]: tokens / generate seconds of that repeat */
    double *speedup;          /* [n_repeats]: tps / plain tps of the same repeat */
    double tps_mean, tps_std; /* over repeats (sample std; 0 for one repeat) */
    double speedup_mean, speedup_std;
} bench_agg;

/* Aggregate runs (any order) into agg[n_configs], config 0 being plain
 * decoding. Allocates the per-repeat arrays; returns -1 when out of memory.
 * Free with bench_aggs_free. */
int bench_aggregate(const bench_run *runs, size_t n_runs, int n_configs, int n_repeats,
                       bench_agg *agg);
void bench_aggs_free(bench_agg *agg, int n_configs);

/* Summary figures of an aggregate: plain decoding has block efficiency 1 by
 * definition (one token per target forward) and no acceptance figures. */
double bench_block_efficiency(const bench_config *c, const bench_agg *a);

/* ---- reports (bench_report.c) ---- */

/* The results document: meta (owned by the caller, stolen), configs, runs. */
json_t *bench_results_json(json_t *meta, const bench_config *cfg, int n_cfg,
                              const bench_agg *agg, const bench_run *runs, size_t n_runs);
/* The table for stdout. */
void bench_print_table(FILE *f, const bench_config *cfg, int n_cfg, const bench_agg *agg);
/* results.csv: header + one row per configuration. Returns 0 or -1 (errno set). */
int bench_write_csv(const char *path, const bench_config *cfg, int n_cfg,
                       const bench_agg *agg);
/* Writes the data files and plots.gp into dir and runs gnuplot there, making
 * tokens_per_second.png, block_efficiency.png and accept_hist.png. Returns 0
 * on success, 1 when gnuplot is not installed, -1 on failure (one line in
 * msg). */
int bench_plot(const char *dir, const bench_config *cfg, int n_cfg, const bench_agg *agg,
                  char *msg, size_t msg_cap);

/* The stream report (prompts in order, online learning, routing):
 * stream.csv (one row per run), stream_blocks.dat and stream.gp ->
 * stream.png (acceptance per block of `block` prompts per speculative
 * configuration, dashed lines where the domain label changes), and, when
 * table is not NULL, acceptance by domain and per block printed to it.
 * domains[n_prompts] may hold NULLs. Returns as bench_plot. */
int bench_write_stream(const char *dir, const bench_config *cfg, int n_cfg, const bench_run *runs,
                          size_t n_runs, char *const *domains, int n_prompts, int n_repeats, int block,
                          FILE *table, char *msg, size_t msg_cap);

#endif
