/* ngram_mod: llama.cpp's "ngram-mod" drafter (its --spec-default), for
 * comparison in the same harness as Specula's own drafters. Internal to
 * src/speculation (draft.c).
 *
 * A fixed table of 2^22 slots maps the hash of every n_match-gram seen
 * (prompt and output) to the token that last followed it. A draft starts
 * from the last n_match tokens (the history's last n_match - 1, then the
 * sampled token) and follows the table one token at a time, up to n_max;
 * a chain that breaks before n_min tokens drafts nothing. The table is
 * cleared when a request begins with it over a quarter full, and after five
 * drafts in a row with less than a quarter of their tokens accepted. New
 * n-grams of the output join the table in chunks of 32 tokens.
 * Every rule and bound follows common/ngram-mod.cpp and the ngram-mod
 * drafter of common/speculative.cpp of llama.cpp 2026-09;
 * tests/test_ngram_map.c holds llama.cpp's drafts against this one's.
 * llama.cpp shares one table among a server's sequences; here each drafter
 * owns one (16 MiB). */
#ifndef SP_NGRAM_MOD_H
#define SP_NGRAM_MOD_H

#include <stdint.h>

#include "sp_status.h"

typedef struct sp_ngram_mod sp_ngram_mod;

/* n_match: hashed n-gram size (1..1024); drafts of n_min..n_max tokens
 * (0 <= n_min <= n_max <= 1024). */
sp_status sp_ngram_mod_new(int32_t n_match, int32_t n_min, int32_t n_max, sp_ngram_mod **out,
                           sp_error *err);
void sp_ngram_mod_free(sp_ngram_mod *md);

/* A new request whose prompt (everything before its first sampled token)
 * is h[0..len). */
void sp_ngram_mod_begin(sp_ngram_mod *md, const int32_t *h, int64_t len);

/* Draft after h[0..len) and the sampled token s: writes up to cap tokens
 * (the first cap of llama.cpp's draft) to out, returns how many. */
int32_t sp_ngram_mod_draft(sp_ngram_mod *md, const int32_t *h, int64_t len, int32_t s, int32_t *out,
                           int32_t cap);

/* n_accepted tokens of the last draft were accepted. */
void sp_ngram_mod_accept(sp_ngram_mod *md, int32_t n_accepted);

#endif
