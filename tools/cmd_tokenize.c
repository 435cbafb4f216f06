/* cmd_tokenize: `specula tokenize`, the ids a model's tokenizer gives a
 * text, as llama.cpp's llama-tokenize prints them. Works on a full GGUF
 * model, a vocabulary-only GGUF (tokenizer metadata, no tensors: only the
 * tokenizer is read) and a llama2.c checkpoint with its tokenizer.bin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "specula.h"
#include "file.h"
#include "gguf.h"
#include "tokenizer_load.h"

static void tok_usage(FILE *f) {
    fprintf(f,
            "usage: specula tokenize -m MODEL.gguf [-z TOKENIZER.bin] (-p TEXT | -f FILE)\n"
            "         [--special] [--no-bos] [--ids | --json] [--tokenizer-pre NAME]\n"
            "  Prints one line per token, \"ID -> 'PIECE'\", or with --ids one list of ids.\n"
            "  MODEL may be a vocabulary-only GGUF. --special: control tokens written in\n"
            "  the text (e.g. <|im_start|>) become those tokens. BOS is added when the\n"
            "  vocabulary asks for it, unless --no-bos. --tokenizer-pre forces the BPE\n"
            "  pre-tokenizer (e.g. qwen2) when the file names one Specula does not know.\n");
}

int cmd_tokenize(int argc, char **argv) {
    enum { O_SPECIAL = SP_OPT_CMD, O_NO_BOS, O_IDS, O_JSON, O_PRE };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'}, {"tokenizer", required_argument, NULL, 'z'},
        {"prompt", required_argument, NULL, 'p'}, {"file", required_argument, NULL, 'f'},
        {"special", no_argument, NULL, O_SPECIAL}, {"no-bos", no_argument, NULL, O_NO_BOS},
        {"ids", no_argument, NULL, O_IDS},        {"json", no_argument, NULL, O_JSON},
        {"tokenizer-pre", required_argument, NULL, O_PRE}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *model = NULL, *tokz = NULL, *prompt = NULL, *file = NULL, *flag, *pre = NULL;
    bool special = false, no_bos = false, ids_only = false, json = false;
    int opt;
    optind = 0;
    while ((opt = cli_next(argc, argv, "m:z:p:f:h", longopts, "tokenize", &flag)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 'z': tokz = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case O_SPECIAL: special = true; break;
        case O_NO_BOS: no_bos = true; break;
        case O_IDS: ids_only = true; break;
        case O_JSON: json = true; break;
        case O_PRE:
            if (!sp_tokenizer_pre_known(optarg)) {
                fprintf(stderr, "specula: %s: unknown pre-tokenizer '%s'\n", flag, optarg);
                return 2;
            }
            pre = optarg;
            break;
        case 'h': tok_usage(stdout); return 0;
        default: return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "specula: tokenize needs a model or vocabulary (-m FILE)\n");
        return 2;
    }
    if (!prompt == !file) {
        fprintf(stderr, "specula: tokenize needs exactly one of -p TEXT and -f FILE\n");
        return 2;
    }
    sp_error err = {0};
    sp_gguf *g = NULL;
    sp_model *m = NULL;
    sp_tokenizer *own = NULL;
    const sp_tokenizer *t = NULL;
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    int rc = 1;
    /* a GGUF (full or vocabulary-only): only its tokenizer is read */
    if (cli_is_gguf(model)) {
        if (tokz) {
            fprintf(stderr, "specula: -z: %s is a GGUF model with its own tokenizer (-z is for llama2.c checkpoints)\n",
                    model);
            return 2;
        }
        if (sp_gguf_open(model, &g, &err) || sp_tokenizer_load_gguf_pre(g, pre, &own, &err)) goto fail;
        t = own;
    } else {
        sp_model_params mp = sp_model_default_params();
        mp.tokenizer_path = tokz;
        mp.no_prefault = true;
        if (sp_model_load(model, &mp, &m, &err)) goto fail;
        t = sp_model_tokenizer(m);
        if (!t) {
            sp_fail(&err, SP_ERR_ARG, "%s has no tokenizer; give one with -z tokenizer.bin", model);
            goto fail;
        }
    }
    if (file) {
        if (sp_file_read(file, "prompt file", 64u << 20, &text, &len, &err)) goto fail;
    } else {
        len = strlen(prompt);
    }
    const char *src = file ? text : prompt;
    sp_tok_encode_params ep = {.add_bos = !no_bos && sp_tokenizer_add_bos(t) && sp_tokenizer_bos(t) >= 0,
                               .parse_special = special};
    const int32_t cap = (int32_t)(len + 8);
    ids = malloc((size_t)cap * sizeof *ids);
    int32_t n = 0;
    if (!ids) {
        sp_fail(&err, SP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (sp_tokenizer_encode_ex(t, src, len, &ep, ids, cap, &n, &err)) goto fail;
    if (json) {
        /* {"ids": [...], "pieces": [...]}: pieces as bytes the token decodes
         * to (control tokens: their text), invalid UTF-8 replaced by U+FFFD */
        json_t *j = json_object(), *ja = json_array(), *jp = json_array();
        for (int32_t i = 0; i < n; i++) {
            char buf[64];
            size_t k = sp_tokenizer_decode_token(t, i ? ids[i - 1] : -1, ids[i], buf, sizeof buf);
            sp_str piece = sp_tokenizer_token_text(t, ids[i]);
            size_t bad = 0;
            json_array_append_new(ja, json_integer(ids[i]));
            json_array_append_new(jp, k || !piece.len ? cli_json_text(buf, k, &bad)
                                                      : cli_json_text(piece.ptr, (size_t)piece.len, &bad));
        }
        json_object_set_new(j, "ids", ja);
        json_object_set_new(j, "pieces", jp);
        char *js = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (js) printf("%s\n", js);
        free(js);
        json_decref(j);
    } else if (ids_only) {
        printf("[");
        for (int32_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]\n");
    } else {
        for (int32_t i = 0; i < n; i++) {
            sp_str piece = sp_tokenizer_token_text(t, ids[i]);
            char buf[64];
            size_t k = sp_tokenizer_decode_token(t, i ? ids[i - 1] : -1, ids[i], buf, sizeof buf);
            /* control tokens print their text, others their decoded bytes */
            if (!k && piece.len) printf("%6d -> '%.*s'\n", ids[i], (int)piece.len, piece.ptr);
            else printf("%6d -> '%.*s'\n", ids[i], (int)k, buf);
        }
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "specula: tokenize: %s\n", err.msg);
    free(ids);
    free(text);
    sp_tokenizer_free(own);
    sp_gguf_close(g);
    sp_model_free(m);
    return rc;
}
