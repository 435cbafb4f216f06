/* Fuzz target: the llama2.c loaders. The first input byte chooses what the
 * rest is: even, a checkpoint (loaded with the real tok512.bin tokenizer from
 * ../shared); odd, a tokenizer.bin (loaded for a vocabulary of 512 and used
 * to encode and decode a short text). */
#include "fuzz_util.h"
#include "specula.h"
#include "tokenizer_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    sp_error err = {0};
    if (data[0] % 2 == 0) {
        const char *path = fuzz_file(data + 1, size - 1, "a");
        sp_model *m = NULL;
        sp_model_params mp = sp_model_default_params();
        mp.tokenizer_path = fuzz_shared("models/tok512.bin");
        if (sp_model_load(path, &mp, &m, &err) == SP_OK) sp_model_free(m);
        return 0;
    }
    const char *path = fuzz_file(data + 1, size - 1, "b");
    sp_tokenizer *t = NULL;
    if (sp_tokenizer_load_llama2c(path, 512, &t, &err) != SP_OK) return 0;
    int32_t ids[64], n = 0;
    if (sp_tokenizer_encode(t, "Once upon a time\xff\xc3 x", 20, true, ids, 64, &n, &err) == SP_OK) {
        char buf[256];
        (void)sp_tokenizer_decode(t, ids, n, buf, sizeof buf);
    }
    sp_tokenizer_free(t);
    return 0;
}
