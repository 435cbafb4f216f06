/* spec_testutil.h: helpers for the speculation tests (test_spec.c,
 * test_spec_config.c): small random-weight models written to the scratch
 * directory, loading, and configurations from their text form. */
#ifndef SP_SPEC_TESTUTIL_H
#define SP_SPEC_TESTUTIL_H

#include "testutil.h"

#include <stdbool.h>
#include <unistd.h>

#include "specula.h"
#include "sp_spec.h"

/* Writes a 3-layer random model (dim 32, vocabulary `vocab`, padded with
 * "[PAD<i>]" entries up to `pad` ids when pad > vocab) into scratch slot
 * `which` (0..3) and returns its path (unlink it when done). */
static inline const char *tiny_model_pad(int which, int32_t vocab, int32_t pad, uint64_t seed,
                                         float scale) {
    static char paths[4][512];
    char *p = paths[which & 3];
    snprintf(p, sizeof paths[0], "%s/specula_spec_%d_%d.gguf", sp_tmpdir(), which, (int)getpid());
    sp_mkmodel_params mp = sp_mkmodel_default_params();
    mp.dim = 32;
    mp.n_layers = 3;
    mp.n_heads = 2;
    mp.n_kv_heads = 1;
    mp.ffn_dim = 64;
    mp.n_vocab = vocab;
    mp.seed = seed;
    mp.logit_scale = scale;
    mp.pad_vocab = pad;
    sp_error err = {0};
    if (sp_mkmodel(&mp, p, &err)) fail_msg("mkmodel: %s", err.msg);
    return p;
}

static inline const char *tiny_model(int which, int32_t vocab, uint64_t seed, float scale) {
    return tiny_model_pad(which, vocab, 0, seed, scale);
}

static inline sp_model *load(const char *path) {
    sp_error err = {0};
    sp_model *m = NULL;
    if (sp_model_load(path, NULL, &m, &err)) fail_msg("load %s: %s", path, err.msg);
    return m;
}

/* A configuration from its text form over the defaults, finished; fails the
 * test on error. */
static inline sp_spec_params parse_ok(const char *text, bool has_draft_model) {
    sp_spec_config c;
    sp_spec_config_init(&c, NULL);
    sp_error e = {0};
    if (sp_spec_config_parse(&c, text, &e) || sp_spec_config_finish(&c, has_draft_model, &e))
        fail_msg("'%s': %s", text, e.msg);
    return c.params;
}

#endif
