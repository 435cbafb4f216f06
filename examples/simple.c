/* simple: the library's main path on one page. Loads a target and a draft
 * model, tokenizes a prompt, generates speculatively (the draft proposes
 * tokens, the target checks them in one forward pass; at temperature 0 the
 * text is exactly the target's own greedy text) and prints it as it comes,
 * then what speculation achieved on stderr.
 * usage: simple TARGET.gguf DRAFT.gguf [PROMPT] [N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specula.h"

typedef struct printer {
    const sp_tokenizer *tok;
    int32_t prev; /* the token before (decoding depends on it) */
} printer;

/* Called with each run of new tokens: print them. Returning false stops. */
static bool print_tokens(void *ud, const int32_t *tokens, int32_t n) {
    printer *p = ud;
    char piece[256];
    for (int32_t i = 0; i < n; p->prev = tokens[i++])
        fwrite(piece, 1, sp_tokenizer_decode_token(p->tok, p->prev, tokens[i], piece, sizeof piece), stdout);
    return fflush(stdout) == 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s TARGET.gguf DRAFT.gguf [PROMPT] [N]\n", argv[0]), 2;
    const char *prompt = argc > 3 ? argv[3] : "Once upon a time";
    sp_error err = {0};
    sp_model *target = NULL, *draft = NULL;
    sp_ctx *ctx = NULL;
    sp_spec *spec = NULL;
    int32_t ids[1024], out[1024], n_ids = 0;
    if (sp_model_load(argv[1], NULL, &target, &err) || sp_model_load(argv[2], NULL, &draft, &err)) goto done;
    const sp_tokenizer *tok = sp_model_tokenizer(target);
    if (sp_tokenizer_encode(tok, prompt, strlen(prompt), sp_tokenizer_add_bos(tok), ids, 1024, &n_ids, &err))
        goto done;
    sp_ctx_params cp = sp_ctx_default_params();        /* the model's context, one thread */
    if (sp_ctx_init(target, &cp, &ctx, &err)) goto done;
    sp_spec_params sp = sp_spec_default_params();      /* block verification, 4 draft tokens */
    sp.draft.kind = SP_DRAFT_MODEL;
    sp.draft.draft_model = draft;
    if (sp_spec_init(ctx, &sp, &spec, &err)) goto done;
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = argc > 4 ? atoi(argv[4]) : 32;
    gp.sampling.temperature = 0;                       /* greedy */
    printer pr = {tok, n_ids > 0 ? ids[n_ids - 1] : -1};
    sp_spec_stats st;
    sp_gen_stats gs;
    fputs(prompt, stdout);
    if (sp_spec_generate(spec, ids, n_ids, &gp, out, 1024, &gs, &st, print_tokens, &pr, &err)) goto done;
    printf("\n");
    fprintf(stderr, "%d tokens, %lld target forwards, %.0f%% of draft tokens accepted\n",
            gs.n_generated, (long long)(st.target_forwards - st.prefill_forwards),
            100 * sp_spec_acceptance_rate(&st));
done:
    if (err.code) fprintf(stderr, "simple: %s\n", err.msg);
    sp_spec_free(spec);
    sp_ctx_free(ctx);
    sp_model_free(draft);
    sp_model_free(target);
    return err.code ? 1 : 0;
}
