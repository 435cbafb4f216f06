/* ref_tokenize: llama.cpp's token ids for test strings, the reference side
 * of Specula's tokenizer vector tests. Not part of Specula's build: it links
 * libllama of the llama.cpp being compared (scripts/ref_tokenize.sh builds
 * and runs it).
 *
 *   ref-tokenize VOCAB.gguf < STRINGS.inp > IDS.out
 *
 * STRINGS.inp holds strings separated by the line "__ggml_vocab_test__"
 * (llama.cpp's vocabulary test format); each gives one output line of ids,
 * space-separated, from a vocabulary-only load with llama_tokenize (no BOS,
 * special tokens not parsed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ref-tokenize VOCAB.gguf < STRINGS.inp > IDS.out\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) {
        fprintf(stderr, "ref-tokenize: cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, stdin)) > 0) n += r;
    buf[n] = 0;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    static llama_token ids[65536];
    for (char *s = buf; *s;) {
        char *e = strstr(s, sep);
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int k = llama_tokenize(v, s, (int32_t)len, ids, 65536, false, false);
        if (k < 0) {
            fprintf(stderr, "ref-tokenize: string too long\n");
            return 1;
        }
        for (int i = 0; i < k; i++) printf(" %d", ids[i]);
        printf("\n");
        if (!e) break;
        s = e + strlen(sep);
    }
    free(buf);
    llama_model_free(m);
    llama_backend_free();
    return 0;
}
