/* cmd_mkmodel: `specula mkmodel`, a random-weight Llama GGUF for tests and
 * benchmarks (a thin front end over sp_mkmodel). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "dev/sp_mkmodel.h"
#include "specula.h"

static void mk_usage(FILE *f) {
    fprintf(f,
            "usage: specula mkmodel --out F.gguf [--arch llama|qwen2|qwen3|phi3|gemma2|gemma3]\n"
            "         --dim D --layers L --heads H --kv-heads K\n"
            "         --ffn F [--vocab-from MODEL.gguf | --vocab N] [--pad-vocab N] [--ctx N]\n"
            "         --type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|iq4_xs|q4_K|q5_K|q6_K|q4_K_M|q5_K_M\n"
            "         --seed S\n"
            "  q4_K_M, q5_K_M: llama-quantize's mixes (Q6_K output, and attn_v and ffn_down\n"
            "  on some layers).\n"
            "  Without --vocab-from or --vocab, the vocabulary of\n"
            "  $SPECULA_SHARED/models/stories260K.gguf (default ../shared) is copied.\n"
            "  --pad-vocab N appends \"[PAD<i>]\" entries up to N ids (Qwen-style padding).\n");
}

/* Weight type from its name (any case); -1 if not one Specula writes. */
static int parse_type(const char *s) {
    for (int t = 0; s && t < SP_GGML_TYPE_COUNT; t++)
        if (sp_mkmodel_type_ok((sp_ggml_type)t) && !strcasecmp(s, sp_ggml_type_name((sp_ggml_type)t)))
            return t;
    return -1;
}

/* Default vocabulary source: the shared stories260K model, if present.
 * Writes the path into buf and returns it, or NULL. */
static const char *default_vocab(char *buf, size_t n) {
    const char *root = getenv("SPECULA_SHARED");
    snprintf(buf, n, "%s/models/stories260K.gguf", root && *root ? root : "../shared");
    return access(buf, R_OK) == 0 ? buf : NULL;
}

int cmd_mkmodel(int argc, char **argv) {
    sp_mkmodel_params p = sp_mkmodel_default_params();
    const char *out = NULL;
    long long v, dim = -1, layers = -1, heads = -1, kv_heads = -1, ffn = -1, vocab = -1, seed = -1;
    int type = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define INTFLAG(NAME, LO, HI, DST)                                   \
    else if (!strcmp(a, NAME)) {                                     \
        if (sp_cli_int(a, val, LO, HI, &v)) return 2;                \
        DST = v;                                                     \
        i++;                                                         \
    }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            mk_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--out") || !strcmp(a, "-o")) {
            if (!val) goto missing;
            out = val;
            i++;
        } else if (!strcmp(a, "--vocab-from")) {
            if (!val) goto missing;
            p.vocab_from = val;
            i++;
        } else if (!strcmp(a, "--arch")) {
            if (!val) goto missing;
            p.arch = val; /* checked by sp_mkmodel, which names the ones it writes */
            i++;
        } else if (!strcmp(a, "--type")) {
            if (!val) goto missing;
            p.mix_k_m = !strcasecmp(val, "q4_K_M") || !strcasecmp(val, "q5_K_M");
            type = p.mix_k_m ? (tolower((unsigned char)val[1]) == '4' ? SP_GGML_Q4_K : SP_GGML_Q5_K) : parse_type(val);
            if (type < 0) {
                fprintf(stderr, "specula: --type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q4_K, q5_K, q6_K, q4_K_M or q5_K_M, got '%s'\n", val);
                return 2;
            }
            i++;
        }
        INTFLAG("--dim", 2, 16384, dim)
        INTFLAG("--layers", 1, 256, layers)
        INTFLAG("--heads", 1, 1024, heads)
        INTFLAG("--kv-heads", 1, 1024, kv_heads)
        INTFLAG("--ffn", 1, 65536, ffn)
        INTFLAG("--vocab", 4, 4096, vocab)
        INTFLAG("--ctx", 1, 1 << 20, p.n_ctx)
        INTFLAG("--pad-vocab", 0, 1 << 20, p.pad_vocab)
        INTFLAG("--seed", 0, INT64_MAX, seed)
        else {
            fprintf(stderr, "specula: unknown option '%s' for mkmodel\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "specula: %s needs a value\n", a);
        return 2;
#undef INTFLAG
    }
    const char *need = !out ? "--out" : dim < 0 ? "--dim" : layers < 0 ? "--layers"
                     : heads < 0 ? "--heads" : kv_heads < 0 ? "--kv-heads" : ffn < 0 ? "--ffn"
                     : type < 0 ? "--type" : seed < 0 ? "--seed" : NULL;
    if (need) {
        fprintf(stderr, "specula: mkmodel needs %s (try 'specula mkmodel --help')\n", need);
        return 2;
    }
    if (p.vocab_from && vocab >= 0) {
        fprintf(stderr, "specula: give either --vocab-from or --vocab, not both\n");
        return 2;
    }
    char vbuf[1024];
    if (!p.vocab_from && vocab < 0 && !(p.vocab_from = default_vocab(vbuf, sizeof vbuf))) {
        fprintf(stderr, "specula: no vocabulary: give --vocab-from MODEL.gguf or --vocab N "
                        "(%s not found)\n", vbuf);
        return 2;
    }
    p.dim = (int32_t)dim;
    p.n_layers = (int32_t)layers;
    p.n_heads = (int32_t)heads;
    p.n_kv_heads = (int32_t)kv_heads;
    p.ffn_dim = (int32_t)ffn;
    if (vocab >= 0) p.n_vocab = (int32_t)vocab;
    p.type = (sp_ggml_type)type;
    p.seed = (uint64_t)seed;
    sp_error err = {0};
    if (sp_mkmodel(&p, out, &err)) {
        fprintf(stderr, "specula: mkmodel: %s\n", err.msg);
        return err.code == SP_ERR_ARG || err.code == SP_ERR_UNSUPPORTED ? 2 : 1;
    }
    return 0;
}
