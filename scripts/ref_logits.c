/* ref_logits: llama.cpp's logits for given token ids, the reference side of
 * Specula's exactness tests. Not part of Specula's build: it links libllama
 * of the llama.cpp being compared (scripts/ref_logits.sh builds it).
 *
 *   ref-logits -m FILE --ids 1,2,3 [-ctk f32|f16|q8_0] [-ctv f32|f16|q8_0]
 *              [-fa on|off] [-t THREADS] [-c CTX] [--greedy N]
 *
 * Evaluates all ids in one llama_decode with logits for every position and
 * prints one line per position (%.6g, space-separated, position 0 first).
 * With --greedy N it then prints one more line: N greedy ids continuing the
 * sequence, one llama_decode per token. No BOS is added. Defaults: F32 cache,
 * flash attention off (it is turned on when V is quantised, as llama.cpp
 * requires), 1 thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int parse_type(const char *s, enum ggml_type *t) {
    if (!strcmp(s, "f32")) *t = GGML_TYPE_F32;
    else if (!strcmp(s, "f16")) *t = GGML_TYPE_F16;
    else if (!strcmp(s, "q8_0")) *t = GGML_TYPE_Q8_0;
    else if (!strcmp(s, "bf16")) *t = GGML_TYPE_BF16;
    else return -1;
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: ref-logits -m FILE --ids 1,2,3 [-ctk T] [-ctv T] [-fa on|off] [-t N] "
                    "[-c CTX] [--greedy N]   (T: f32 f16 q8_0 bf16)\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *path = NULL, *ids_s = NULL;
    enum ggml_type tk = GGML_TYPE_F32, tv = GGML_TYPE_F32;
    int fa = -1, threads = 1, n_ctx = 512, greedy = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(a, "-m")) path = v;
        else if (!strcmp(a, "--ids")) ids_s = v;
        else if (!strcmp(a, "-ctk")) { if (parse_type(v, &tk)) return usage(); }
        else if (!strcmp(a, "-ctv")) { if (parse_type(v, &tv)) return usage(); }
        else if (!strcmp(a, "-fa")) fa = !strcmp(v, "on");
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-c")) n_ctx = atoi(v);
        else if (!strcmp(a, "--greedy")) greedy = atoi(v);
        else return usage();
        i++;
    }
    if (!path || !ids_s || threads < 1 || n_ctx < 1 || greedy < 0) return usage();
    int32_t ids[4096];
    int n = 0;
    for (const char *p = ids_s; *p && n < 4096;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) return usage();
        ids[n++] = (int32_t)x;
        p = *end == ',' ? end + 1 : end;
    }
    if (n == 0 || n + greedy > n_ctx) return usage();

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) {
        fprintf(stderr, "ref-logits: cannot load %s\n", path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = tk;
    cp.type_v = tv;
    if (fa < 0) fa = tv != GGML_TYPE_F32 && tv != GGML_TYPE_F16 && tv != GGML_TYPE_BF16;
    cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "ref-logits: cannot make a context\n");
        return 1;
    }
    const int32_t V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch b = llama_batch_init(n_ctx, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) {
        fprintf(stderr, "ref-logits: decode failed\n");
        return 1;
    }
    int32_t last = 0;
    for (int i = 0; i < n; i++) {
        const float *l = llama_get_logits_ith(ctx, i);
        for (int32_t v = 0; v < V; v++) printf(v ? " %.6g" : "%.6g", l[v]);
        printf("\n");
        if (i == n - 1)
            for (int32_t v = 1; v < V; v++)
                if (l[v] > l[last]) last = v;
    }
    for (int g = 0; g < greedy; g++) {
        printf(g ? " %d" : "%d", last);
        b.token[0] = last;
        b.pos[0] = n + g;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        b.n_tokens = 1;
        if (g + 1 == greedy) break;
        if (llama_decode(ctx, b)) {
            fprintf(stderr, "ref-logits: decode failed\n");
            return 1;
        }
        const float *l = llama_get_logits_ith(ctx, 0);
        last = 0;
        for (int32_t v = 1; v < V; v++)
            if (l[v] > l[last]) last = v;
    }
    if (greedy) printf("\n");
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
