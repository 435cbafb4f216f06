/* cli.h: subcommand table entries and small shared helpers for the CLI.
 *
 * Option parsing: every command parses with getopt_long_only
 * (cli_next), so every long option may be written with
 * two dashes or with one, the way llama.cpp spells its multi-letter flags
 * (-md, -zd); a single letter after one dash is always the short option
 * (-m, -n, -t, ...), and "--" ends the options. Values follow as the next
 * argument or after '=' (--gamma=4). Errors are one line on stderr naming
 * the option as it was written, and exit code 2. */
#ifndef SP_CLI_H
#define SP_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "sp_train.h"
#include "sp_spec.h"

typedef int (*cli_fn)(int argc, char **argv);
typedef struct cli_command {
    const char *name;
    const char *help;
    cli_fn fn;
} cli_command;

/* Strict numeric flag parsing: the whole string must be a number within
 * [lo, hi]; otherwise print one line naming the flag and return -1. */
int cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
int cli_float(const char *flag, const char *s, double lo, double hi, double *out);

/* Option ids above the character range, one block per group. */
enum {
    SP_OPT_RUN = 0x100,  /* cli_run_opts flags */
    SP_OPT_SPEC = 0x200, /* speculation settings (SP_CLI_SPEC_OPTIONS) */
    SP_OPT_CMD = 0x300,  /* a command's own long-only options */
    SP_OPT_ONLINE = 0x400 /* online learning (SP_CLI_ONLINE_OPTIONS) */
};

/* The next option of argv, like getopt_long_only (call with optind = 0
 * first; shortopts need not start with ':'). Returns the option's id, -1
 * at the end of the options, or '?' after printing one line for an unknown
 * option, a missing value or a stray argument (`cmd` names the command in
 * the message). *flag receives the option as written (for messages). */
int cli_next(int argc, char **argv, const char *shortopts, const struct option *longopts,
                const char *cmd, const char **flag);

/* Flags shared by generate and bench: -m, -z, -md, -zd, -n, -s/--seed, -t,
 * -c, --temp, --top-k, --top-p, --min-p, --mlock, --no-prefault,
 * --tokenizer-pre, -ctk/--cache-type-k, -ctv/--cache-type-v, --ignore-eos. */
#define SP_CLI_MAX_DRAFTS 8
typedef struct cli_run_opts {
    const char *model, *tokenizer, *draft_model, *draft_tokenizer;
    /* every -md given, in order (draft_model is the first); only commands
     * that set multi_draft take more than one */
    const char *draft_models[SP_CLI_MAX_DRAFTS];
    int n_draft_models;
    bool multi_draft;
    long long n_predict, seed, threads, n_ctx;
    bool mlock, no_prefault; /* weight residency (sp_model_params) */
    sp_ggml_type type_k, type_v; /* -ctk / -ctv: KV cache types (sp_ctx_params) */
    const char *tokenizer_pre; /* --tokenizer-pre: forced BPE pre-tokeniser, or NULL */
    bool ids_only; /* the input is token ids: a model without a tokenizer is fine */
    bool ignore_eos; /* --ignore-eos: generate all -n tokens through end-of-generation ones */
    sp_sampler_params sampling;
} cli_run_opts;
void cli_run_opts_default(cli_run_opts *r);

#define SP_CLI_RUN_SHORTOPTS "m:z:n:s:t:c:"
#define SP_CLI_RUN_OPTIONS                                                                     \
    {"model", required_argument, NULL, 'm'}, {"tokenizer", required_argument, NULL, 'z'},     \
        {"model-draft", required_argument, NULL, SP_OPT_RUN + 0},                              \
        {"md", required_argument, NULL, SP_OPT_RUN + 0},                                       \
        {"tokenizer-draft", required_argument, NULL, SP_OPT_RUN + 1},                          \
        {"zd", required_argument, NULL, SP_OPT_RUN + 1},                                       \
        {"n-predict", required_argument, NULL, 'n'}, {"seed", required_argument, NULL, 's'},   \
        {"threads", required_argument, NULL, 't'}, {"ctx-size", required_argument, NULL, 'c'}, \
        {"temp", required_argument, NULL, SP_OPT_RUN + 2},                                     \
        {"top-k", required_argument, NULL, SP_OPT_RUN + 3},                                    \
        {"top-p", required_argument, NULL, SP_OPT_RUN + 4},                                    \
        {"min-p", required_argument, NULL, SP_OPT_RUN + 5},                                    \
        {"mlock", no_argument, NULL, SP_OPT_RUN + 6},                                          \
        {"no-prefault", no_argument, NULL, SP_OPT_RUN + 7},                                    \
        {"tokenizer-pre", required_argument, NULL, SP_OPT_RUN + 8},                            \
        {"ctk", required_argument, NULL, SP_OPT_RUN + 9},                                      \
        {"cache-type-k", required_argument, NULL, SP_OPT_RUN + 9},                             \
        {"ctv", required_argument, NULL, SP_OPT_RUN + 10},                                     \
        {"cache-type-v", required_argument, NULL, SP_OPT_RUN + 10},                            \
        {"ignore-eos", no_argument, NULL, SP_OPT_RUN + 11}

/* Applies option `opt` (an id from SP_CLI_RUN_OPTIONS) with value arg.
 * Returns 1 if it was one of them, 0 if not, -1 after printing what is
 * wrong with the value. */
int cli_run_opt(int opt, const char *flag, const char *arg, cli_run_opts *r);

/* Speculation flags: each one sets the speculation setting of the same
 * meaning (sp_spec.h), so flags and configuration strings share
 * one parser and one set of messages. */
#define SP_CLI_SPEC_OPTIONS                                                                  \
    {"draft", required_argument, NULL, SP_OPT_SPEC + 0},                                     \
        {"verify", required_argument, NULL, SP_OPT_SPEC + 1},                                \
        {"lenience", required_argument, NULL, SP_OPT_SPEC + 2},                              \
        {"gamma", required_argument, NULL, SP_OPT_SPEC + 3},                                 \
        {"draft-max", required_argument, NULL, SP_OPT_SPEC + 4},                             \
        {"draft-min", required_argument, NULL, SP_OPT_SPEC + 5},                             \
        {"draft-p-min", required_argument, NULL, SP_OPT_SPEC + 6},                           \
        {"adaptive", no_argument, NULL, SP_OPT_SPEC + 7},                                    \
        {"tree", required_argument, NULL, SP_OPT_SPEC + 8},                                  \
        {"ngram-min", required_argument, NULL, SP_OPT_SPEC + 9},                             \
        {"ngram-max", required_argument, NULL, SP_OPT_SPEC + 10},                            \
        {"skip-layers", required_argument, NULL, SP_OPT_SPEC + 11},                          \
        {"lowbit", required_argument, NULL, SP_OPT_SPEC + 12},                               \
        {"map-n", required_argument, NULL, SP_OPT_SPEC + 13},                                \
        {"map-m", required_argument, NULL, SP_OPT_SPEC + 14},                                \
        {"map-min-hits", required_argument, NULL, SP_OPT_SPEC + 15},                         \
        {"mod-n-match", required_argument, NULL, SP_OPT_SPEC + 16},                          \
        {"mod-n-min", required_argument, NULL, SP_OPT_SPEC + 17},                            \
        {"mod-n-max", required_argument, NULL, SP_OPT_SPEC + 18}

/* Applies a speculation flag to the configuration layer c. Returns 1 if
 * opt was one, 0 if not, -1 after printing the setting's message. */
int cli_spec_opt(int opt, const char *arg, sp_spec_config *c);

/* Online learning of the draft model while generating (sp_train.h). */
typedef struct cli_online_opts {
    bool on;
    sp_online_params p;
    sp_online_schedule sch;
    const char *out; /* write the learned draft here at the end, or NULL */
} cli_online_opts;
void cli_online_opts_default(cli_online_opts *o);

#define SP_CLI_ONLINE_OPTIONS {"online", no_argument, NULL, SP_OPT_ONLINE + 0}, SP_CLI_ONLINE_TUNING
/* the settings of the learner without the switch (bench turns learning on
 * per configuration) */
#define SP_CLI_ONLINE_TUNING                                                 \
    {"online-every", required_argument, NULL, SP_OPT_ONLINE + 1},            \
        {"online-steps", required_argument, NULL, SP_OPT_ONLINE + 2},        \
        {"online-lr", required_argument, NULL, SP_OPT_ONLINE + 3},           \
        {"online-topk", required_argument, NULL, SP_OPT_ONLINE + 4},         \
        {"online-sync", no_argument, NULL, SP_OPT_ONLINE + 5},               \
        {"online-out", required_argument, NULL, SP_OPT_ONLINE + 6},          \
        {"online-buffer", required_argument, NULL, SP_OPT_ONLINE + 7}

#define SP_CLI_ONLINE_USAGE                                                                     \
    "  online learning (draft model or eagle3 head): --online [--online-every POSITIONS (256)]\n" \
    "    [--online-steps STEPS (32)] [--online-lr LR (0.0003)] [--online-topk K (16)]\n"         \
    "    [--online-buffer POSITIONS (4096)] [--online-sync] [--online-out DRAFT.gguf]\n"        \
    "    the draft (a head: with the target's hidden states) trains on the target's\n"        \
    "    distributions of the text it verifies (on a\n"                                      \
    "    background thread; --online-sync: inline, reproducible) and is swapped in as it\n"    \
    "    learns; the output stays exactly the target's.\n"

/* Applies an online option. Returns 1 if opt was one, 0 if not, -1 after
 * printing what is wrong with the value. Any of them turns learning on. */
int cli_online_opt(int opt, const char *flag, const char *arg, cli_online_opts *o);

/* Starts a learner for the draft file draft_path serving spec (whose draft
 * model dm was loaded from that file; or, head not NULL, whose EAGLE-3 head
 * was). Prints one line and returns 1 on failure. */
int cli_online_start(const cli_online_opts *o, const char *draft_path, sp_spec *spec,
                        const sp_model *dm, const sp_eagle3 *head, sp_online **out);

/* The learner's figures as a JSON object / one line of text. */
json_t *cli_online_json(sp_online *on);
void cli_online_print(FILE *f, sp_online *on);

/* Token ids written as a comma-separated list ("5,17,99"): at least one,
 * each a whole number in [0, 2^31). *ids (n of them) is malloc'd. Prints
 * one line naming the flag and returns -1 when the list is not that. */
int cli_ids(const char *flag, const char *s, int32_t **ids, int32_t *n);
/* Prints one line naming the flag and the first id that is not below
 * n_vocab, and returns -1; 0 when all are. */
int cli_ids_check(const char *flag, const int32_t *ids, int32_t n, int32_t n_vocab);

/* Loads r->model (which must come with a tokenizer unless r->ids_only) and, if given,
 * r->draft_model (several -md are refused unless r->multi_draft). Prints one line and returns 1 on failure (nothing is left
 * loaded then); 0 on success. */
int cli_load_models(const cli_run_opts *r, sp_model **model, sp_model **dmodel);
/* Whether path is a GGUF file (its magic); false when it cannot be read. */
bool cli_is_gguf(const char *path);
/* Whether path is a GGUF file of architecture eagle3 (an EAGLE-3 head). */
bool cli_is_eagle3(const char *path);
/* The -md file for the drafter `kind`: with eagle3, loads it as an EAGLE-3
 * head for `target` into *head; otherwise refuses a head given as a draft
 * model (naming --draft eagle3). Prints one line and returns 1 on failure. */
int cli_load_head(const char *path, sp_drafter_kind kind, const sp_model *target, sp_eagle3 **head);

/* Loads the drafts after the first (r->draft_models[1..]) into dms[1..]
 * (dms[0] is the one cli_load_models loaded). Prints one line and
 * returns 1 on failure (what was loaded stays in dms for the caller to
 * free). */
int cli_load_more_drafts(const cli_run_opts *r, sp_model **dms);

/* mkdir -p with mode 0755 (less the umask); the last component must end up
 * a directory. Returns 0 or -1 (errno set). */
int cli_make_dirs(const char *path);

/* The speculation statistics as a JSON object / a short text summary. */
json_t *cli_spec_json(const sp_spec_stats *s);
/* The KV cache of a context as JSON: {"type_k", "type_v", "n_ctx", "bytes"
 * (when full), "bytes_allocated"}; and as one line on stderr (at load). */
json_t *cli_kv_json(const sp_ctx *c);
void cli_kv_print(const sp_ctx *c);
/* Sets the KV cache types of -ctk / -ctv in context parameters. */
void cli_ctx_types(const cli_run_opts *r, sp_ctx_params *cp);
void cli_spec_print(FILE *f, const sp_spec_stats *s);

/* A JSON string of n bytes of generated text that may not be valid UTF-8
 * (a token can end inside a character): valid sequences are kept, every
 * byte of an invalid one becomes U+FFFD. *replaced (if not NULL) is set to
 * the number of bytes replaced. NULL only when out of memory. */
json_t *cli_json_text(const char *s, size_t n, size_t *replaced);

int cmd_version(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_verify_sim(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_distill(int argc, char **argv);
int cmd_train_head(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench_forward(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_online(int argc, char **argv);
int cmd_logits(int argc, char **argv);

#endif
