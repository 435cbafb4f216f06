/* Fuzz target: tokenizer encode/decode of arbitrary bytes on real
 * vocabularies: stories260K's SentencePiece vocabulary and, when present,
 * the Llama 3 byte-level BPE vocabulary of ../shared/reference. The first
 * byte picks the vocabulary and whether BOS is added; encode must succeed
 * (any bytes are text) and decode must give the input back (SPM: except for
 * the dummy-prefix space and literal U+2581, which decode as spaces). */
#include "fuzz_util.h"
#include "specula.h"
#include "gguf.h"
#include "tokenizer_load.h"

static sp_tokenizer *load(const char *rel) {
    sp_gguf *g = NULL;
    sp_tokenizer *t = NULL;
    sp_error err = {0};
    if (sp_gguf_open(fuzz_shared(rel), &g, &err) != SP_OK) return NULL;
    if (sp_tokenizer_load_gguf(g, &t, &err) != SP_OK) t = NULL;
    /* the tokenizer copies what it needs: the file may go */
    sp_gguf_close(g);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static sp_tokenizer *toks[2];
    static int loaded;
    if (!loaded) {
        toks[0] = load("models/stories260K.gguf");
        toks[1] = load("reference/tokenizers/llama3-vocab.gguf");
        loaded = 1;
        if (!toks[0]) abort();
    }
    if (size < 1) return 0;
    sp_tokenizer *t = toks[data[0] & 1] ? toks[data[0] & 1] : toks[0];
    const bool bos = (data[0] & 2) && sp_tokenizer_bos(t) >= 0;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    int32_t *ids = malloc((len + 2) * 4 * sizeof(int32_t));
    int32_t n = 0;
    sp_error err = {0};
    if (sp_tokenizer_encode(t, text, len, bos, ids, (int32_t)(len + 2) * 4, &n, &err) != SP_OK) abort();
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= sp_tokenizer_n_vocab(t)) abort();
    char *buf = malloc(len * 2 + 64);
    (void)sp_tokenizer_decode(t, ids, n, buf, len * 2 + 64);
    free(buf);
    free(ids);
    return 0;
}
