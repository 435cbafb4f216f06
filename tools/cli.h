/* cli.h: subcommand table entries and small shared helpers for the CLI. */
#ifndef SP_CLI_H
#define SP_CLI_H

#include <stdint.h>

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

int cmd_version(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench_forward(int argc, char **argv);

#endif
