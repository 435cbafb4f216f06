/* specula: the command-line front end. Each subcommand lives in its own
 * tools/cmd_*.c file and is registered in the table below. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const sp_cli_command COMMANDS[] = {
    {"run", "generate from the default model (demo)", cmd_run},
    {"generate", "generate text from a model", cmd_generate},
    {"mkmodel", "write a random-weight model (tests, benchmarks)", cmd_mkmodel},
    {"bench-forward", "time the forward pass (decode rate, k-token cost)", cmd_bench_forward},
    {"bench", "benchmark speculation configurations over prompts", cmd_bench},
    {"verify-sim", "simulate the verifiers on toy models", cmd_verify_sim},
    {"version", "print the version", cmd_version},
};

static void usage(FILE *f) {
    fprintf(f, "usage: specula <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-14s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "specula: unknown command '%s' (try 'specula --help')\n", argv[1]);
    return 2;
}
