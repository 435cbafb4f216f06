/* tokenizer_gguf: builds a tokenizer from the tokenizer.ggml.* keys of a GGUF
 * file (model, tokens, scores, token_type, merges, special ids, add_bos_token,
 * add_space_prefix, pre), validating array types, lengths and ids. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "gguf.h"
#include "tokenizer_load.h"

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

/* tokenizer.ggml.pre values and the splitting rules Specula applies for
 * them: the names llama.cpp maps to the same regex lists (llama-vocab.cpp).
 * Names llama.cpp knows with rules Specula lacks are refused. */
static const struct {
    const char *name;
    sp_tok_pre pre;
} PRE_NAMES[] = {
    {"default", SP_PRE_DEFAULT},     {"gpt-2", SP_PRE_GPT2},          {"phi-2", SP_PRE_GPT2},
    {"jina-es", SP_PRE_GPT2},        {"jina-de", SP_PRE_GPT2},        {"jina-v1-en", SP_PRE_GPT2},
    {"jina-v2-es", SP_PRE_GPT2},     {"jina-v2-de", SP_PRE_GPT2},     {"jina-v2-code", SP_PRE_GPT2},
    {"gigachat", SP_PRE_GPT2},       {"roberta-bpe", SP_PRE_GPT2},    {"a.x-4.0", SP_PRE_GPT2},
    {"mellum", SP_PRE_GPT2},         {"modern-bert", SP_PRE_GPT2},    {"mpt", SP_PRE_GPT2},
    {"olmo", SP_PRE_GPT2},           {"jais", SP_PRE_GPT2},           {"trillion", SP_PRE_GPT2},
    {"granite-docling", SP_PRE_GPT2}, {"llama-bpe", SP_PRE_LLAMA3},   {"llama3", SP_PRE_LLAMA3},
    {"llama-v3", SP_PRE_LLAMA3},     {"falcon3", SP_PRE_LLAMA3},      {"qwen2", SP_PRE_QWEN2},
    {"stablelm2", SP_PRE_QWEN2},     {"starcoder", SP_PRE_DIGITS},    {"refact", SP_PRE_DIGITS},
    {"command-r", SP_PRE_DIGITS},    {"smollm", SP_PRE_DIGITS},       {"codeshell", SP_PRE_DIGITS},
    {"exaone", SP_PRE_DIGITS},       {"minerva-7b", SP_PRE_DIGITS},   {"deepseek-coder", SP_PRE_DEEPSEEK_CODER},
    {"deepseek-llm", SP_PRE_DEEPSEEK_LLM}, {"falcon", SP_PRE_FALCON},
    {"gpt-4o", SP_PRE_O200K},        {"llama4", SP_PRE_O200K},        {"kanana2", SP_PRE_O200K},
    {"talkie", SP_PRE_O200K},        {"qwen35", SP_PRE_QWEN35},
};

bool sp_tokenizer_pre_known(const char *name) {
    for (size_t i = 0; name && i < sizeof PRE_NAMES / sizeof PRE_NAMES[0]; i++)
        if (!strcmp(PRE_NAMES[i].name, name)) return true;
    return false;
}

/* The pre-tokeniser: the override if given, else tokenizer.ggml.pre, else
 * llama.cpp's "default". An unknown name is refused, never guessed. */
static sp_status pick_pre(const sp_gguf *g, const char *override, sp_tok_pre *out, sp_error *err) {
    sp_str name = {"default", 7};
    const char *from = "tokenizer.ggml.pre";
    if (override) {
        name = (sp_str){override, strlen(override)};
        from = "tokenizer_pre";
    } else {
        const sp_gguf_kv *kpre = sp_gguf_find(g, "tokenizer.ggml.pre");
        if (kpre && kpre->type != SP_GGUF_STRING)
            return sp_fail(err, SP_ERR_FORMAT, "gguf tokenizer: tokenizer.ggml.pre has the wrong type");
        if (kpre) name = kpre->v.str;
    }
    for (size_t i = 0; i < sizeof PRE_NAMES / sizeof PRE_NAMES[0]; i++)
        if (str_eq(name, PRE_NAMES[i].name)) {
            *out = PRE_NAMES[i].pre;
            return SP_OK;
        }
    return sp_fail(err, SP_ERR_UNSUPPORTED,
                   "gguf tokenizer: pre-tokenizer \"%.*s\" (%s) is not supported; set tokenizer_pre "
                   "to a supported one with the same rules (gpt-2, llama-bpe, qwen2, qwen35, starcoder, "
                   "deepseek-llm, falcon, default, ...)",
                   (int)(name.len > 64 ? 64 : name.len), name.ptr, from);
}

sp_status sp_tokenizer_load_gguf(const sp_gguf *g, sp_tokenizer **out, sp_error *err) {
    return sp_tokenizer_load_gguf_pre(g, NULL, out, err);
}

sp_status sp_tokenizer_load_gguf_pre(const sp_gguf *g, const char *pre_override, sp_tokenizer **out,
                                     sp_error *err) {
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
    } else if (str_eq(model, "test") || str_eq(model, "none") || str_eq(model, "no_vocab")) {
        return sp_fail(err, SP_ERR_UNSUPPORTED,
                       "gguf tokenizer: tokenizer.ggml.model \"%.*s\" has no tokenizer (a model with it "
                       "runs on token ids only)",
                       (int)model.len, model.ptr);
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
    if (spec.kind == SP_TOK_BPE && (st = pick_pre(g, pre_override, &spec.pre, err)) != SP_OK)
        return st;

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
