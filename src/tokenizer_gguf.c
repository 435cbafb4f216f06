/* tokenizer_gguf: builds a tokenizer from the tokenizer.ggml.* keys of a GGUF
 * file (model, tokens, scores, token_type, merges, special ids, add_bos_token,
 * add_space_prefix, pre), validating array types, lengths and ids. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static bool str_eq(sp_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* Optional token id key: *out keeps its default when absent; 0xFFFFFFFF (and
 * -1) mean "none"; other values must be < n_vocab. */
static sp_status get_id(const sp_gguf *g, const char *key, int32_t n_vocab, int32_t *out,
                        sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv) return SP_OK;
    int64_t v;
    switch (kv->type) {
    case SP_GGUF_UINT8: case SP_GGUF_UINT16: case SP_GGUF_UINT32: case SP_GGUF_UINT64:
        v = kv->v.u64 == 0xFFFFFFFFull || kv->v.u64 == UINT64_MAX ? -1
            : kv->v.u64 > INT32_MAX ? INT64_MAX : (int64_t)kv->v.u64;
        break;
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32: case SP_GGUF_INT64:
        v = kv->v.i64;
        break;
    default:
        return sp_fail(err, SP_ERR_FORMAT, "gguf tokenizer: %s is not an integer", key);
    }
    if (v < -1 || v >= n_vocab)
        return sp_fail(err, SP_ERR_FORMAT, "gguf tokenizer: %s = %lld out of range [0, %d)", key,
                       (long long)v, (int)n_vocab);
    *out = (int32_t)v;
    return SP_OK;
}

static sp_status get_bool(const sp_gguf *g, const char *key, bool *out, sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv) return SP_OK;
    if (kv->type != SP_GGUF_BOOL)
        return sp_fail(err, SP_ERR_FORMAT, "gguf tokenizer: %s is not a bool", key);
    *out = kv->v.b;
    return SP_OK;
}

/* Array key of element type `want` (SP_GGUF_INT32 accepts any integer
 * type) and, if n >= 0, length n; NULL kv when absent and optional. */
static sp_status get_arr(const sp_gguf *g, const char *key, sp_gguf_type want, int64_t n,
                         bool required, const sp_gguf_kv **out, sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    *out = NULL;
    if (!kv) {
        if (required) return sp_fail(err, SP_ERR_FORMAT, "gguf tokenizer: missing %s", key);
        return SP_OK;
    }
    bool is_int = kv->arr_type <= SP_GGUF_INT32 || kv->arr_type == SP_GGUF_UINT64 ||
                  kv->arr_type == SP_GGUF_INT64;
    bool ok = kv->arr_type == want || (want == SP_GGUF_INT32 && is_int);
    if (kv->type != SP_GGUF_ARRAY || !ok)
        return sp_fail(err, SP_ERR_FORMAT, "gguf tokenizer: %s has the wrong type", key);
    if (n >= 0 && kv->arr_n != (uint64_t)n)
        return sp_fail(err, SP_ERR_FORMAT,
                       "gguf tokenizer: %s has %llu entries but the vocabulary has %lld", key,
                       (unsigned long long)kv->arr_n, (long long)n);
    *out = kv;
    return SP_OK;
}

sp_status sp_tokenizer_load_gguf(const sp_gguf *g, sp_tokenizer **out, sp_error *err) {
    if (!g || !out) return sp_fail(err, SP_ERR_ARG, "gguf tokenizer: NULL argument");
    *out = NULL;
    sp_str model;
    sp_status st = sp_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st != SP_OK) return st;
    sp_tokenizer_spec spec = {.bos = -1, .eos = -1, .unk = -1, .eot = -1, .eom = -1};
    if (str_eq(model, "llama")) {
        spec.kind = SP_TOK_SPM;
        spec.bos = 1, spec.eos = 2, spec.unk = 0; /* SentencePiece defaults */
        spec.add_bos = true;
        spec.add_space_prefix = true;
    } else if (str_eq(model, "gpt2")) {
        spec.kind = SP_TOK_BPE;
        spec.add_bos = false;
    } else {
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "gguf tokenizer: tokenizer.ggml.model \"%.*s\" is not supported "
                       "(only \"llama\" and \"gpt2\")",
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }

    const sp_gguf_kv *ktok, *kscore, *ktype, *kmerge;
    if ((st = get_arr(g, "tokenizer.ggml.tokens", SP_GGUF_STRING, -1, true, &ktok, err)) != SP_OK)
        return st;
    if (ktok->arr_n == 0 || ktok->arr_n > INT32_MAX / 2)
        return sp_fail(err, SP_ERR_FORMAT, "gguf tokenizer: tokenizer.ggml.tokens has %llu entries",
                       (unsigned long long)ktok->arr_n);
    const int32_t nv = (int32_t)ktok->arr_n;
    spec.n_vocab = nv;
    if ((st = get_arr(g, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, nv, false, &kscore, err)) != SP_OK ||
        (st = get_arr(g, "tokenizer.ggml.token_type", SP_GGUF_INT32, nv, false, &ktype, err)) != SP_OK ||
        (st = get_arr(g, "tokenizer.ggml.merges", SP_GGUF_STRING, -1, spec.kind == SP_TOK_BPE,
                      &kmerge, err)) != SP_OK)
        return st;

    if ((st = get_id(g, "tokenizer.ggml.bos_token_id", nv, &spec.bos, err)) != SP_OK ||
        (st = get_id(g, "tokenizer.ggml.eos_token_id", nv, &spec.eos, err)) != SP_OK ||
        (st = get_id(g, "tokenizer.ggml.unknown_token_id", nv, &spec.unk, err)) != SP_OK ||
        (st = get_id(g, "tokenizer.ggml.eot_token_id", nv, &spec.eot, err)) != SP_OK ||
        (st = get_id(g, "tokenizer.ggml.eom_token_id", nv, &spec.eom, err)) != SP_OK ||
        (st = get_bool(g, "tokenizer.ggml.add_bos_token", &spec.add_bos, err)) != SP_OK ||
        (st = get_bool(g, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix, err)) != SP_OK)
        return st;
    if (spec.kind == SP_TOK_BPE) {
        const sp_gguf_kv *kpre = sp_gguf_find(g, "tokenizer.ggml.pre");
        if (kpre && kpre->type == SP_GGUF_STRING) {
            if (str_eq(kpre->v.str, "llama-bpe") || str_eq(kpre->v.str, "llama3") ||
                str_eq(kpre->v.str, "llama-v3") || str_eq(kpre->v.str, "falcon3"))
                spec.pre = SP_PRE_LLAMA3;
            else if (str_eq(kpre->v.str, "qwen2")) spec.pre = SP_PRE_QWEN2;
            else if (str_eq(kpre->v.str, "starcoder") || str_eq(kpre->v.str, "refact") ||
                     str_eq(kpre->v.str, "deepseek-coder"))
                spec.pre = SP_PRE_DIGITS;
            else if (str_eq(kpre->v.str, "deepseek-llm"))
                spec.pre = SP_PRE_NUMRUN;
            else if (str_eq(kpre->v.str, "falcon"))
                spec.pre = SP_PRE_FALCON;
        }
    }

    sp_str *toks = malloc((size_t)nv * sizeof *toks);
    float *scores = kscore ? malloc((size_t)nv * sizeof *scores) : NULL;
    int32_t *types = ktype ? malloc((size_t)nv * sizeof *types) : NULL;
    int64_t nm = kmerge ? (int64_t)kmerge->arr_n : 0;
    sp_str *merges = nm ? malloc((size_t)nm * sizeof *merges) : NULL;
    if (!toks || (kscore && !scores) || (ktype && !types) || (nm && !merges)) {
        st = sp_fail(err, SP_ERR_NOMEM, "gguf tokenizer: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < nv; i++) toks[i] = sp_gguf_arr_str(ktok, (uint64_t)i);
    for (int32_t i = 0; scores && i < nv; i++) scores[i] = sp_gguf_arr_f32(kscore, (uint64_t)i);
    for (int32_t i = 0; types && i < nv; i++) {
        int64_t ty = sp_gguf_arr_int(ktype, (uint64_t)i);
        types[i] = ty < 0 || ty > SP_TOKT_BYTE ? -1 : (int32_t)ty; /* rejected by init_spec */
    }
    for (int64_t i = 0; i < nm; i++) merges[i] = sp_gguf_arr_str(kmerge, (uint64_t)i);
    spec.tokens = toks;
    spec.scores = scores;
    spec.types = types;
    spec.merges = merges;
    spec.n_merges = nm;
    st = sp_tokenizer_init_spec(&spec, out, err);
done:
    free(toks);
    free(scores);
    free(types);
    free(merges);
    return st;
}
