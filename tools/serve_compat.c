/* serve_compat: llama-server's flat speculative keys and its /tokenize and
 * /detokenize bodies (see serve_compat.h). */
#include "serve_compat.h"

#include <stdlib.h>
#include <string.h>

#include "utf8.h"

static const char *const FLAT[] = {"n_max", "n_min", "p_min"};
#define FLAT_PREFIX "speculative."

int serve_spec_flat_merge(json_t *j, serve_err *e) {
    const char *key;
    json_t *v;
    void *tmp;
    json_t *spec = json_object_get(j, "speculative");
    json_object_foreach_safe(j, tmp, key, v) {
        if (strncmp(key, FLAT_PREFIX, strlen(FLAT_PREFIX))) continue;
        const char *name = key + strlen(FLAT_PREFIX);
        bool known = false;
        for (size_t i = 0; i < sizeof FLAT / sizeof FLAT[0]; i++) known |= !strcmp(name, FLAT[i]);
        if (!known) return serve_bad(e, 400, key, NULL, "unrecognized request argument: %s", key);
        if (!spec || json_is_null(spec)) {
            spec = json_object();
            if (!spec || json_object_set_new(j, "speculative", spec))
                return serve_bad(e, 500, NULL, NULL, "out of memory");
        }
        if (!json_is_object(spec))
            return serve_bad(e, 400, "speculative", NULL, "speculative: expected a JSON object with %s", key);
        if (json_object_get(spec, name))
            return serve_bad(e, 400, key, NULL, "%s: given both flat and in the speculative object", key);
        if (json_object_set(spec, name, v) || json_object_del(j, key))
            return serve_bad(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

/* A JSON object parsed from body[0..len), or NULL with e. */
static json_t *body_object(const char *body, size_t len, serve_err *e) {
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    if (!j) {
        serve_bad(e, 400, NULL, NULL, "the body is not valid JSON: %s", je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        serve_bad(e, 400, NULL, NULL, "the body must be a JSON object");
    }
    return json_is_object(j) ? j : NULL;
}

static int get_bool(json_t *j, const char *key, bool def, bool *out, serve_err *e) {
    json_t *v = json_object_get(j, key);
    *out = def;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return serve_bad(e, 400, key, NULL, "%s: must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* Appends the tokens of text s to *ids (growing it). */
static int encode_append(const sp_tokenizer *tok, const char *s, size_t n, bool bos, bool special, int32_t **ids,
                         int32_t *n_ids, serve_err *e) {
    const sp_tok_encode_params p = {.add_bos = bos, .parse_special = special};
    int32_t need = 0;
    sp_error se = {0};
    const int32_t cap = (int32_t)n + 2; /* a token covers at least one byte */
    int32_t *grown = realloc(*ids, (size_t)(*n_ids + cap) * sizeof *grown);
    if (!grown) return serve_bad(e, 500, NULL, NULL, "out of memory");
    *ids = grown;
    if (sp_tokenizer_encode_ex(tok, s, n, &p, grown + *n_ids, cap, &need, &se))
        return serve_bad(e, 400, "content", NULL, "content: %s", se.msg);
    *n_ids += need;
    return 0;
}

json_t *serve_tokenize(const sp_tokenizer *tok, const char *body, size_t len, serve_err *e) {
    json_t *j = body_object(body, len, e);
    if (!j) return NULL;
    bool add_special, parse_special, with_pieces;
    int32_t *ids = NULL, n = 0;
    json_t *out = NULL;
    json_t *content = json_object_get(j, "content");
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v)
        if (strcmp(key, "content") && strcmp(key, "add_special") && strcmp(key, "parse_special") &&
            strcmp(key, "with_pieces")) {
            serve_bad(e, 400, key, NULL, "unrecognized request argument: %s", key);
            goto done;
        }
    if (get_bool(j, "add_special", false, &add_special, e) || get_bool(j, "parse_special", true, &parse_special, e) ||
        get_bool(j, "with_pieces", false, &with_pieces, e))
        goto done;
    const int32_t V = sp_tokenizer_n_vocab(tok);
    if (add_special && sp_tokenizer_bos(tok) < 0) add_special = false; /* no BOS to add */
    if (json_is_string(content)) {
        if (encode_append(tok, json_string_value(content), json_string_length(content), add_special, parse_special,
                          &ids, &n, e))
            goto done;
    } else if (json_is_array(content)) { /* strings and ids mixed, as llama-server's */
        size_t i;
        json_t *x;
        json_array_foreach(content, i, x) {
            if (json_is_string(x)) {
                if (encode_append(tok, json_string_value(x), json_string_length(x), add_special && i == 0,
                                  parse_special, &ids, &n, e))
                    goto done;
            } else if (json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) < V) {
                int32_t *g = realloc(ids, (size_t)(n + 1) * sizeof *g);
                if (!g) {
                    serve_bad(e, 500, NULL, NULL, "out of memory");
                    goto done;
                }
                ids = g;
                ids[n++] = (int32_t)json_integer_value(x);
            } else {
                serve_bad(e, 400, "content", NULL, "content: array items must be strings or token ids in [0, %d)", V);
                goto done;
            }
        }
    } else if (content && !json_is_null(content)) {
        serve_bad(e, 400, "content", NULL, "content: must be a string or an array of strings and token ids");
        goto done;
    }
    json_t *tokens = json_array();
    for (int32_t i = 0; tokens && i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(tokens, json_integer(ids[i]));
            continue;
        }
        char piece[256];
        const size_t k = sp_tokenizer_decode_token(tok, -1, ids[i], piece, sizeof piece);
        json_t *pj;
        if (sp_utf8_invalid_bytes(piece, k) == 0) {
            pj = json_stringn(piece, k);
        } else { /* as llama-server: the bytes */
            pj = json_array();
            for (size_t b = 0; b < k; b++) json_array_append_new(pj, json_integer((unsigned char)piece[b]));
        }
        json_array_append_new(tokens, json_pack("{s:i,s:o}", "id", (json_int_t)ids[i], "piece", pj));
    }
    out = json_pack("{s:o}", "tokens", tokens);
done:
    free(ids);
    json_decref(j);
    if (!out && !e->status) serve_bad(e, 500, NULL, NULL, "out of memory");
    return out;
}

json_t *serve_detokenize(const sp_tokenizer *tok, const char *body, size_t len, serve_err *e) {
    json_t *j = body_object(body, len, e);
    if (!j) return NULL;
    json_t *out = NULL, *tokens = json_object_get(j, "tokens");
    int32_t *ids = NULL;
    char *text = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v)
        if (strcmp(key, "tokens")) {
            serve_bad(e, 400, key, NULL, "unrecognized request argument: %s", key);
            goto done;
        }
    const int32_t V = sp_tokenizer_n_vocab(tok);
    const size_t n = json_is_array(tokens) ? json_array_size(tokens) : 0;
    if (tokens && !json_is_null(tokens) && !json_is_array(tokens)) {
        serve_bad(e, 400, "tokens", NULL, "tokens: must be an array of token ids");
        goto done;
    }
    if (n > (size_t)SP_SERVE_BODY_MAX) goto done;
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) goto done;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(tokens, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= V) {
            serve_bad(e, 400, "tokens", NULL, "tokens: item %zu is not a token id in [0, %d)", i, V);
            goto done;
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    const size_t need = sp_tokenizer_decode(tok, ids, (int32_t)n, NULL, 0);
    text = malloc(4 * need + 1); /* the text, then its UTF-8 repair (invalid bytes become U+FFFD) */
    if (!text) goto done;
    sp_tokenizer_decode(tok, ids, (int32_t)n, text, need + 1);
    const size_t k = sp_utf8_repair(text, need, text + need + 1);
    out = json_pack("{s:s%}", "content", text + need + 1, k);
done:
    free(ids);
    free(text);
    json_decref(j);
    if (!out && !e->status) serve_bad(e, 500, NULL, NULL, "out of memory");
    return out;
}
