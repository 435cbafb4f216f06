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
    fprintf(f, "usage: specula mkmodel --out F.gguf [--arch ");
    for (int32_t i = 0; sp_model_arch_name(i); i++) fprintf(f, "%s%s", i ? "|" : "", sp_model_arch_name(i));
    fprintf(f,
            "]\n"
            "         --dim D --layers L --heads H --kv-heads K\n"
            "         --ffn F [--vocab-from MODEL.gguf | --vocab N] [--pad-vocab N] [--ctx N]\n"
            "         --type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|iq4_xs|q4_K|q5_K|q6_K|q4_K_M|q5_K_M|mxfp4\n"
            "         [--experts E --experts-used K] [--sliding-window W] [--yarn F] [--mtp N]\n"
            "         [--head-dim H] --seed S\n"
            "  q4_K_M, q5_K_M: llama-quantize's mixes (Q6_K output, and attn_v and ffn_down\n"
            "  on some layers).\n"
            "  --experts E: mixture-of-experts FFNs of E experts of --ffn each, K per token\n"
            "  (llama: Mixtral style; qwen3moe, gpt-oss, qwen35moe and qwen3next need them;\n"
            "  the last two also get a shared expert of --ffn). mxfp4: the experts in\n"
            "  MXFP4, the other matrices Q8_0 (llama-quantize's MXFP4_MOE).\n"
            "  --sliding-window W: the sliding layers' window (gpt-oss: 128, gemma: 4096).\n"
            "  --yarn F: YaRN RoPE scaling by F (> 1) from an original context of --ctx / F.\n"
            "  --mtp N: qwen35, qwen35moe or qwen3next with N multi-token-prediction (nextn)\n"
            "  blocks after the --layers of the trunk, each with the trunk's FFN (random,\n"
            "  like the rest: their drafts are rarely accepted).\n"
            "  --head-dim H: attention heads of H (heads x H may differ from --dim, as in\n"
            "  Qwen3-30B-A3B and gpt-oss); default dim / heads.\n"
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
    long long dim = -1, layers = -1, heads = -1, kv_heads = -1, ffn = -1, vocab = -1, seed = -1,
              n_ctx = -1, pad = -1, experts = 0, experts_used = -1, swa = 0, mtp = 0,
              head_dim = 0;
    int type = -1;
    enum { O_VOCAB_FROM = SP_OPT_CMD, O_ARCH, O_TYPE, O_DIM, O_LAYERS, O_HEADS, O_KV_HEADS, O_FFN,
           O_VOCAB, O_CTX, O_PAD_VOCAB, O_SEED, O_EXPERTS, O_EXPERTS_USED, O_SWA, O_YARN, O_MTP,
           O_HEAD_DIM };
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'},        {"vocab-from", required_argument, NULL, O_VOCAB_FROM},
        {"arch", required_argument, NULL, O_ARCH},    {"type", required_argument, NULL, O_TYPE},
        {"dim", required_argument, NULL, O_DIM},      {"layers", required_argument, NULL, O_LAYERS},
        {"heads", required_argument, NULL, O_HEADS},  {"kv-heads", required_argument, NULL, O_KV_HEADS},
        {"ffn", required_argument, NULL, O_FFN},      {"vocab", required_argument, NULL, O_VOCAB},
        {"ctx", required_argument, NULL, O_CTX},      {"pad-vocab", required_argument, NULL, O_PAD_VOCAB},
        {"seed", required_argument, NULL, O_SEED},    {"help", no_argument, NULL, 'h'},
        {"experts", required_argument, NULL, O_EXPERTS}, {"experts-used", required_argument, NULL, O_EXPERTS_USED},
        {"sliding-window", required_argument, NULL, O_SWA}, {"yarn", required_argument, NULL, O_YARN},
        {"mtp", required_argument, NULL, O_MTP},      {"head-dim", required_argument, NULL, O_HEAD_DIM},
        {NULL, 0, NULL, 0}};
    /* integer options: id, range, destination */
    const struct {
        int id;
        long long lo, hi, *dst;
    } ints[] = {{O_DIM, 2, 16384, &dim},        {O_LAYERS, 1, 256, &layers},     {O_HEADS, 1, 1024, &heads},
                {O_KV_HEADS, 1, 1024, &kv_heads}, {O_FFN, 1, 65536, &ffn},       {O_VOCAB, 4, 4096, &vocab},
                {O_CTX, 1, 1 << 20, &n_ctx},    {O_PAD_VOCAB, 0, 1 << 20, &pad}, {O_SEED, 0, INT64_MAX, &seed},
                {O_EXPERTS, 1, 256, &experts},  {O_EXPERTS_USED, 1, 256, &experts_used},
                {O_SWA, 1, 1 << 20, &swa},      {O_MTP, 0, 8, &mtp},
                {O_HEAD_DIM, 2, 1024, &head_dim}};
    const char *flag;
    int opt;
    optind = 0;
    while ((opt = cli_next(argc, argv, "o:h", longopts, "mkmodel", &flag)) != -1) {
        switch (opt) {
        case 'h': mk_usage(stdout); return 0;
        case 'o': out = optarg; break;
        case O_VOCAB_FROM: p.vocab_from = optarg; break;
        case O_ARCH: p.arch = optarg; break; /* checked by sp_mkmodel, which names the ones it writes */
        case O_TYPE:
            p.mix_k_m = !strcasecmp(optarg, "q4_K_M") || !strcasecmp(optarg, "q5_K_M");
            type = p.mix_k_m ? (tolower((unsigned char)optarg[1]) == '4' ? SP_GGML_Q4_K : SP_GGML_Q5_K)
                             : parse_type(optarg);
            if (type < 0) {
                fprintf(stderr, "specula: %s must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q4_K, q5_K, q6_K, q4_K_M, q5_K_M or mxfp4, got '%s'\n", flag, optarg);
                return 2;
            }
            break;
        case O_YARN: {
            char *end;
            const double f = strtod(optarg, &end);
            if (end == optarg || *end || !(f > 1 && f <= 1024)) {
                fprintf(stderr, "specula: %s must be a number in (1, 1024], got '%s'\n", flag, optarg);
                return 2;
            }
            p.yarn_factor = (float)f;
            break;
        }
        case '?': return 2;
        default:
            for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
                if (ints[i].id == opt && cli_int(flag, optarg, ints[i].lo, ints[i].hi, ints[i].dst)) return 2;
            break;
        }
    }
    if (n_ctx >= 0) p.n_ctx = (int32_t)n_ctx;
    if (pad >= 0) p.pad_vocab = (int32_t)pad;
    const char *need = !out ? "--out" : dim < 0 ? "--dim" : layers < 0 ? "--layers"
                     : heads < 0 ? "--heads" : kv_heads < 0 ? "--kv-heads" : ffn < 0 ? "--ffn"
                     : type < 0 ? "--type" : seed < 0 ? "--seed" : NULL;
    if (need) {
        fprintf(stderr, "specula: mkmodel needs %s (try 'specula mkmodel --help')\n", need);
        return 2;
    }
    if ((experts > 0) != (experts_used > 0)) {
        fprintf(stderr, "specula: --experts and --experts-used go together\n");
        return 2;
    }
    p.n_expert = (int32_t)experts;
    p.sliding_window = (int32_t)swa;
    p.n_mtp = (int32_t)mtp;
    p.head_dim = (int32_t)head_dim;
    p.n_expert_used = experts_used > 0 ? (int32_t)experts_used : 0;
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
