/* specula: the command-line front end. Each subcommand lives in its own
 * tools/cmd_*.c file and is registered in the table below; the options
 * before the command name are parsed here with getopt_long. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_command COMMANDS[] = {
    {"run", "generate from the default model (demo)", cmd_run},
    {"generate", "generate text from a model", cmd_generate},
    {"mkmodel", "write a random-weight model (tests, benchmarks)", cmd_mkmodel},
    {"bench-forward", "time the forward pass (decode rate, k-token cost)", cmd_bench_forward},
    {"bench", "benchmark speculation configurations over prompts", cmd_bench},
    {"train", "pre-train a small model on text (cross-entropy)", cmd_train},
    {"distill", "distil a draft model from a target on text", cmd_distill},
    {"train-head", "train an EAGLE-3 head for a target on text", cmd_train_head},
    {"verify-sim", "simulate the verifiers on toy models", cmd_verify_sim},
    {"tokenize", "print the token ids of a text (any GGUF, vocabulary-only too)", cmd_tokenize},
    {"logits", "print the logits of token ids, every position of one forward (compare engines)", cmd_logits},
    {"serve", "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)", cmd_serve},
    {"online", "online speculative decoding: the draft learns from verification while generating", cmd_online},
    {"version", "print the version", cmd_version},
};

static void usage(FILE *f) {
    fprintf(f, "usage: specula [--help | --version] <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-14s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n'specula <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    static const struct option LONGOPTS[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    /* '+': stop at the command name, whose options are its own */
    while ((c = getopt_long(argc, argv, "+hV", LONGOPTS, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'V': return cmd_version(0, NULL);
        default:
            fprintf(stderr, "specula: unknown option '%s' (try 'specula --help')\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(name, COMMANDS[i].name)) return COMMANDS[i].fn(argc - optind, argv + optind);
    fprintf(stderr, "specula: unknown command '%s' (try 'specula --help')\n", name);
    return 2;
}
