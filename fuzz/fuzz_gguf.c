/* Fuzz target: the GGUF reader, model loading from it (every tensor type,
 * shape and metadata check) and, when a model loads, a two-token forward
 * pass. Any input must load cleanly or fail with a message: no crash, no
 * sanitizer report, no hang. Seeds: fuzz/corpus/gguf (small generated models). */
#include "fuzz_util.h"
#include "specula.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size, "a");
    sp_error err = {0};
    sp_model *m = NULL;
    sp_model_params mp = sp_model_default_params();
    if (sp_model_load(path, &mp, &m, &err) != SP_OK) return 0;
    const sp_model_config *cfg = sp_model_cfg(m);
    /* keep each execution cheap: forward only small models */
    if ((int64_t)cfg->dim * cfg->n_layers * (cfg->ffn_dim + cfg->n_vocab) < (1 << 22)) {
        sp_ctx *c = NULL;
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = 8;
        if (sp_ctx_init(m, &cp, &c, &err) == SP_OK) {
            float *lg = malloc((size_t)cfg->n_vocab * 2 * sizeof(float));
            int32_t toks[2] = {0, cfg->n_vocab - 1};
            sp_batch b = {.tokens = toks, .n = 2, .logits_all = true};
            if (lg) (void)sp_forward(c, &b, lg, &err);
            free(lg);
            sp_ctx_free(c);
        }
    }
    sp_model_free(m);
    return 0;
}
