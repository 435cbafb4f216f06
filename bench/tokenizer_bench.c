/* tokenizer_bench: encode speed of the SentencePiece tokenizer on the
 * TinyStories sample (a benchmark, not a test: speed targets live here).
 * usage: build/bench/tokenizer_bench [SHARED_DIR]   (default ../shared) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specula.h"
#include "clock.h"
#include "tokenizer_load.h"

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    char path[512], tpath[512];
    snprintf(path, sizeof path, "%s/data/tinystories_val_sample.txt", shared);
    snprintf(tpath, sizeof tpath, "%s/models/tok512.bin", shared);
    sp_error err = {0};
    sp_tokenizer *t = NULL;
    if (sp_tokenizer_load_llama2c(tpath, 512, &t, &err)) {
        fprintf(stderr, "tokenizer_bench: %s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tokenizer_bench: cannot open %s\n", path);
        return 1;
    }
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    int32_t *ids = malloc((len + 2) * sizeof *ids), n = 0;
    const int reps = 5;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = sp_now();
        if (sp_tokenizer_encode(t, text, len, true, ids, (int32_t)len + 2, &n, &err)) {
            fprintf(stderr, "tokenizer_bench: %s\n", err.msg);
            return 1;
        }
        double dt = sp_now() - t0;
        if (dt < best) best = dt;
    }
    printf("encode: %zu bytes -> %d tokens, %.4f ms per KB (best of %d), %.1f MB/s\n", len, (int)n,
           best / ((double)len / 1024) * 1e3, reps, (double)len / best / 1e6);
    free(ids);
    sp_tokenizer_free(t);
    return 0;
}
