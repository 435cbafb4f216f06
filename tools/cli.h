/* cli.h: subcommand table entries and small shared helpers for the CLI. */
#ifndef SP_CLI_H
#define SP_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "sp_spec.h"

typedef int (*sp_cli_fn)(int argc, char **argv);
typedef struct sp_cli_command {
    const char *name;
    const char *help;
    sp_cli_fn fn;
} sp_cli_command;

/* Strict numeric flag parsing: the whole string must be a number within
 * [lo, hi]; otherwise print one line naming the flag and return -1. */
int sp_cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
int sp_cli_float(const char *flag, const char *s, double lo, double hi, double *out);

/* Flags shared by generate and bench: -m, -z, -md, -zd, -n, -s/--seed, -t,
 * -c, --temp, --top-k, --top-p, --min-p. */
typedef struct sp_cli_run_opts {
    const char *model, *tokenizer, *draft_model, *draft_tokenizer;
    long long n_predict, seed, threads, n_ctx;
    sp_sampler_params sampling;
} sp_cli_run_opts;
void sp_cli_run_opts_default(sp_cli_run_opts *r);
/* 1 if flag a is one of the shared ones (value v consumed), 0 if not, -1
 * after printing what is wrong with v. */
int sp_cli_run_flag(const char *a, const char *v, sp_cli_run_opts *r);

/* Loads r->model (which must come with a tokenizer) and, if given,
 * r->draft_model. Prints one line and returns 1 on failure (nothing is left
 * loaded then); 0 on success. */
int sp_cli_load_models(const sp_cli_run_opts *r, sp_model **model, sp_model **dmodel);

/* The speculation statistics as a JSON object / a short text summary. */
json_t *sp_cli_spec_json(const sp_spec_stats *s);
void sp_cli_spec_print(FILE *f, const sp_spec_stats *s);

int cmd_version(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_verify_sim(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench_forward(int argc, char **argv);

#endif
