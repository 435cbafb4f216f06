/* cmd_generate.h: the generation front end shared by `specula generate`
 * and `specula run` (flags, one generation with its output). */
#ifndef SP_CMD_GENERATE_H
#define SP_CMD_GENERATE_H

#include <stdbool.h>

#include "cli.h"

typedef struct sp_gen_opts {
    const char *prompt, *prompt_file;
    const char *prompt_ids;     /* --prompt-ids as written ("5,17,99"), or NULL */
    const char *prompt_ids_flag; /* the flag as written, for messages */
    sp_cli_run_opts run;
    sp_spec_config cfg;  /* the speculation flags as given */
    sp_spec_params spec; /* the finished configuration (after sp_gen_parse) */
    sp_cli_online_opts online;
    bool json;
    bool quiet;          /* no text or statistics output (run's plain baseline) */
} sp_gen_opts;

typedef struct sp_gen_result {
    double tokens_per_second;
    int32_t n_generated;
    sp_spec_stats spec; /* zero for plain decoding */
} sp_gen_result;

/* Defaults, with the speculation settings starting from base (NULL: plain
 * decoding). */
void sp_gen_opts_init(sp_gen_opts *o, const sp_spec_params *base);

/* Parses the generate flags of argv into o and finishes the speculation
 * configuration. Returns 0, -1 after printing the help, or 2 after
 * printing one line. cmd names the command in messages. */
int sp_gen_parse(int argc, char **argv, sp_gen_opts *o, const char *cmd, bool need_model);

/* One generation as the options say; res (may be NULL) gets its speed.
 * Returns 0, or 1 after printing one line. */
int sp_gen_main(const sp_gen_opts *o, sp_gen_result *res);

#endif
