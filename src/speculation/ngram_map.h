/* ngram_map: llama.cpp's n-gram map drafters (speculative types
 * "ngram-map-k" and "ngram-map-k4v"), for comparison in the same harness as
 * Specula's own drafters. Internal to src/speculation (draft.c).
 *
 * Over a token history h[0..len) and the just-sampled token s, the key is
 * the last n tokens of h + [s] (h[len-n+1..len) then s). The map finds an
 * earlier occurrence of the key (a hash of n-grams to their first-seen
 * index, then backward scans: first the prompt part, then the generated
 * part) and drafts the tokens that followed it:
 *   k     (key_only): up to min(m, accepted at this key's last draft)
 *         tokens; a key whose draft was fully rejected drafts nothing again.
 *   k4v   counts up to 4 distinct m-grams that followed the key; drafts only
 *         when the key was seen min_hits times and the most frequent m-gram
 *         occurred at least twice as often as the others together (the
 *         drafted tokens are those after the matched occurrence, as
 *         llama.cpp does).
 * Every rule, bound and counter cap follows common/ngram-map.cpp of
 * llama.cpp 2026-09; tests/test_ngram_map.c holds drafts of that code
 * (scripts/ref_ngram_map.cpp) against this one token for token.
 *
 * Memory: 1 MiB of hash slots plus 64 bytes per distinct matched key. */
#ifndef SP_NGRAM_MAP_H
#define SP_NGRAM_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_status.h"

typedef struct sp_ngram_map sp_ngram_map;

/* n: key size (1..1024), m: value size (1..1024), key_only: the "k" type
 * (else "k4v"), min_hits: key hits before k4v drafts (>= 1). */
sp_status sp_ngram_map_new(int32_t n, int32_t m, bool key_only, int32_t min_hits,
                           sp_ngram_map **out, sp_error *err);
void sp_ngram_map_free(sp_ngram_map *mp);

/* A new request whose prompt (everything before its first sampled token) is
 * h[0..len): forgets keys, values and hashes that point at or past the
 * point where this history may differ from the previous one. */
void sp_ngram_map_begin(sp_ngram_map *mp, const int32_t *h, int64_t len);

/* Draft after h[0..len) and the sampled token s: writes up to cap tokens to
 * out and returns how many (0: no draft). len must not shrink below the
 * previous call's without a begin. */
int32_t sp_ngram_map_draft(sp_ngram_map *mp, const int32_t *h, int64_t len, int32_t s,
                           int32_t *out, int32_t cap);

/* The last draft had n_accepted tokens accepted. */
void sp_ngram_map_accept(sp_ngram_map *mp, int32_t n_accepted);

#endif
