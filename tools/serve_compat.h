/* serve_compat.h: llama-server compatibility of `specula serve` beyond the
 * OpenAI shapes (serve_request.h): llama.cpp's flat "speculative.n_max",
 * "speculative.n_min" and "speculative.p_min" request keys folded into the
 * "speculative" object, and the bodies of POST /tokenize ({"content",
 * "add_special" (default false), "parse_special" (default true),
 * "with_pieces" (default false)} -> {"tokens": [ids] or [{"id", "piece"}]},
 * a piece that is not valid UTF-8 given as its byte values) and POST
 * /detokenize ({"tokens": [ids]} -> {"content"}). Every input gets an
 * OpenAI error object, never a crash. */
#ifndef SP_SERVE_COMPAT_H
#define SP_SERVE_COMPAT_H

#include "serve_request.h"

/* Moves the flat speculative.* keys of request object j into its
 * "speculative" object (made when absent): 0, or -1 with e for a flat key
 * llama.cpp does not have, a "speculative" that is not an object, or a
 * setting given both ways. */
int serve_spec_flat_merge(json_t *j, serve_err *e);

/* POST /tokenize: the response object for body[0..len) (NULL and e set
 * when the body is bad). */
json_t *serve_tokenize(const sp_tokenizer *tok, const char *body, size_t len, serve_err *e);

/* POST /detokenize: as serve_tokenize; ids outside the vocabulary are a 400. */
json_t *serve_detokenize(const sp_tokenizer *tok, const char *body, size_t len, serve_err *e);

#endif
