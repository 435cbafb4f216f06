/* cmd_train_head: `specula train-head`: trains an EAGLE-3 head for a target
 * on text (src/train/head.c): windows of the text go through the target
 * with hidden-state taps on the head's three layers; the head learns the
 * target's distributions (a distillation loss) over K unrolled steps of
 * the training-time test, and is written as an eagle3 GGUF that Specula
 * (--draft eagle3 -md) and llama.cpp (--spec-type draft-eagle3) load. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "head.h"
#include "model_internal.h"
#include "quant.h"
#include "sp_clock.h"
#include "sp_distill.h"
#include "sp_file.h"
#include "sp_rng.h"
#include "specula.h"

static void usage(FILE *f) {
    fprintf(f, "usage: specula train-head -m TARGET --head eagle3 --data TEXTFILE --out HEAD.gguf\n"
               "         [--layers A,B,C] [--steps N] [--batch B] [--seq T] [--unroll K] [--lr LR]\n"
               "         [--lr-min LR] [--warmup W] [--loss fkl|rkl|jsd[:BETA]|tvd] [--head-ffn F]\n"
               "         [--head-heads H,KV] [--seed S] [-t THREADS] [--quiet]\n");
}

static int parse_layers(const char *s, int32_t out[3]) {
    long a, b, c;
    char tail;
    if (sscanf(s, "%ld,%ld,%ld%c", &a, &b, &c, &tail) != 3) return -1;
    out[0] = (int32_t)a, out[1] = (int32_t)b, out[2] = (int32_t)c;
    return 0;
}

int cmd_train_head(int argc, char **argv) {
    const char *target = NULL, *data = NULL, *out = NULL, *layers_s = NULL, *kind = NULL, *heads_s = NULL;
    long long steps = 200, batch = 4, seq = 64, unroll = 3, warmup = 10, ffn = 0, threads = 1, seed = 1;
    double lr = 3e-3, lr_min = 3e-4;
    bool quiet = false;
    sp_loss loss = {.kind = SP_LOSS_FKL};
    enum { O_HEAD = SP_OPT_CMD, O_DATA, O_LAYERS, O_STEPS, O_BATCH, O_SEQ, O_UNROLL, O_LR, O_LR_MIN, O_WARMUP,
           O_LOSS, O_FFN, O_HEADS, O_SEED, O_QUIET };
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},    {"head", required_argument, NULL, O_HEAD},
        {"data", required_argument, NULL, O_DATA},  {"out", required_argument, NULL, 'o'},
        {"layers", required_argument, NULL, O_LAYERS}, {"steps", required_argument, NULL, O_STEPS},
        {"batch", required_argument, NULL, O_BATCH}, {"seq", required_argument, NULL, O_SEQ},
        {"unroll", required_argument, NULL, O_UNROLL}, {"lr", required_argument, NULL, O_LR},
        {"lr-min", required_argument, NULL, O_LR_MIN}, {"warmup", required_argument, NULL, O_WARMUP},
        {"loss", required_argument, NULL, O_LOSS},  {"head-ffn", required_argument, NULL, O_FFN},
        {"head-heads", required_argument, NULL, O_HEADS}, {"seed", required_argument, NULL, O_SEED},
        {"threads", required_argument, NULL, 't'},  {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    const char *flag;
    int opt;
    optind = 0;
    while ((opt = cli_next(argc, argv, "m:o:t:h", opts, "train-head", &flag)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'h': usage(stdout); return 0;
        case '?': return 2;
        case 'm': target = optarg; break;
        case 'o': out = optarg; break;
        case O_HEAD: kind = optarg; break;
        case O_DATA: data = optarg; break;
        case O_LAYERS: layers_s = optarg; break;
        case O_HEADS: heads_s = optarg; break;
        case O_QUIET: quiet = true; break;
        case 't': bad = cli_int(flag, optarg, 1, 256, &threads); break;
        case O_STEPS: bad = cli_int(flag, optarg, 1, 100000000, &steps); break;
        case O_BATCH: bad = cli_int(flag, optarg, 1, 4096, &batch); break;
        case O_SEQ: bad = cli_int(flag, optarg, 4, 4096, &seq); break;
        case O_UNROLL: bad = cli_int(flag, optarg, 1, 8, &unroll); break;
        case O_WARMUP: bad = cli_int(flag, optarg, 0, 100000000, &warmup); break;
        case O_FFN: bad = cli_int(flag, optarg, 1, 1 << 18, &ffn); break;
        case O_SEED: bad = cli_int(flag, optarg, 0, 1LL << 62, &seed); break;
        case O_LR: bad = cli_float(flag, optarg, 1e-8, 10, &lr); break;
        case O_LR_MIN: bad = cli_float(flag, optarg, 0, 10, &lr_min); break;
        case O_LOSS: {
            sp_error e;
            if (sp_loss_parse(optarg, &loss, &e) || loss.kind == SP_LOSS_CE) {
                fprintf(stderr, "specula: %s: %s\n", flag,
                        loss.kind == SP_LOSS_CE ? "a head distils: fkl, rkl, jsd[:BETA] or tvd" : e.msg);
                return 2;
            }
            break;
        }
        default: break;
        }
        if (bad) return 2;
    }
    if (!target || !data || !out)
        return fprintf(stderr, "specula train-head: -m TARGET, --data and --out are required\n"), 2;
    if (!kind || strcmp(kind, "eagle3"))
        return fprintf(stderr, "specula train-head: --head must be eagle3, got '%s'\n", kind ? kind : ""), 2;
    if (seq < unroll + 2)
        return fprintf(stderr, "specula train-head: --seq %lld is too short for --unroll %lld\n", seq, unroll), 2;

    int rc = 1;
    sp_error e = {0};
    sp_model *tm = NULL;
    sp_ctx *ctx = NULL;
    sp_thead *h = NULL;
    int32_t *ids = NULL, *tok = NULL;
    float *embd = NULL, *logits = NULL, *feat = NULL;
    char *buf = NULL;
    size_t len = 0;
    int64_t n = 0;
    if (sp_model_load(target, NULL, &tm, &e)) goto fail;
    const sp_model_config *tc = sp_model_cfg(tm);
    if (tm->tok_embd.cols != tc->dim) {
        sp_fail(&e, SP_ERR_UNSUPPORTED, "%s: the target's token embeddings are not %d wide", target, tc->dim);
        goto fail;
    }
    int32_t layers[3] = {2, tc->n_layers / 2, tc->n_layers - 3}; /* EAGLE-3's low, middle, high */
    if (layers_s) {
        if (parse_layers(layers_s, layers)) {
            fprintf(stderr, "specula: --layers takes three layers A,B,C, got '%s'\n", layers_s);
            rc = 2;
            goto out;
        }
        for (int i = 0; i < 3; i++)
            if (layers[i] < 0 || layers[i] > tc->n_layers) {
                fprintf(stderr, "specula: --layers: %d is outside the target's [0, %d]\n", layers[i], tc->n_layers);
                rc = 2;
                goto out;
            }
    } else {
        for (int i = 0; i < 3; i++) layers[i] = layers[i] < 0 ? 0 : layers[i] > tc->n_layers ? tc->n_layers : layers[i];
    }
    sp_thead_shape hs = {.dim = tc->dim, .n_heads = tc->n_heads, .n_kv_heads = tc->n_kv_heads,
                         .ffn_dim = ffn ? (int32_t)ffn : tc->ffn_dim, .tgt_dim = tc->dim, .n_vocab = tc->n_vocab,
                         .rope_theta = tc->rope_theta, .eps = tc->norm_eps};
    if (heads_s) {
        int a, b;
        char tail;
        if (sscanf(heads_s, "%d,%d%c", &a, &b, &tail) != 2 || a < 1 || b < 1) {
            fprintf(stderr, "specula: --head-heads takes H,KV, got '%s'\n", heads_s);
            rc = 2;
            goto out;
        }
        hs.n_heads = a, hs.n_kv_heads = b;
    }
    const int32_t D = tc->dim, V = tc->n_vocab, T = (int32_t)seq, K = (int32_t)unroll;
    embd = malloc((size_t)V * D * sizeof(float));
    logits = malloc((size_t)T * V * sizeof(float));
    feat = malloc((size_t)T * 3 * D * sizeof(float));
    tok = malloc((size_t)T * sizeof(int32_t));
    if (!embd || !logits || !feat || !tok) {
        sp_fail(&e, SP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t v = 0; v < V; v++)
        sp_dequantize_row(tm->tok_embd.type, tm->tok_embd.data + (size_t)v * tm->tok_embd.row_bytes,
                          embd + (int64_t)v * D, D);
    if (sp_thead_init(&hs, embd, (uint64_t)seed, &h, &e)) goto fail;
    if (sp_file_read(data, "training text", (uint64_t)1 << 30, &buf, &len, &e) ||
        sp_distill_tokenize(sp_model_tokenizer(tm), buf, len, &ids, &n, &e))
        goto fail;
    if (n < T + 1) {
        sp_fail(&e, SP_ERR_ARG, "%s: %lld tokens, fewer than a window of %d", data, (long long)n, T + 1);
        goto fail;
    }
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = T;
    cp.max_batch = T;
    cp.n_threads = (int32_t)threads;
    cp.type_k = cp.type_v = SP_GGML_F32;
    if (sp_ctx_init(tm, &cp, &ctx, &e) || sp_ctx_set_taps(ctx, layers, 3, &e)) goto fail;
    fprintf(stderr, "train-head: eagle3 d%d h%d/%d ffn%d over layers %d,%d,%d of %s; %lld text tokens; "
            "%lld steps of %lld windows x %d tokens, %d unrolled steps\n",
            hs.dim, hs.n_heads, hs.n_kv_heads, hs.ffn_dim, layers[0], layers[1], layers[2], target, (long long)n,
            steps, batch, T, K);
    sp_rng rng;
    sp_rng_seed(&rng, (uint64_t)seed ^ 0x9e3779b97f4a7c15ULL);
    sp_adamw_params ap = sp_adamw_default_params();
    const double t0 = sp_now();
    double first = 0, last = 0;
    const int64_t avg = steps < 20 ? 1 : 10;
    for (int64_t st = 0; st < steps; st++) {
        ap.lr = sp_train_lr(st, steps, warmup, (float)lr, (float)lr_min);
        sp_thead_zero_grad(h);
        double step_loss = 0;
        for (int64_t b = 0; b < batch; b++) {
            const int64_t start = (int64_t)sp_rng_below(&rng, (uint64_t)(n - T));
            memcpy(tok, ids + start, (size_t)T * sizeof(int32_t));
            sp_batch bt = {.tokens = tok, .n = T, .logits_all = true};
            if (sp_ctx_truncate(ctx, 0, &e) || sp_forward(ctx, &bt, logits, &e)) goto fail;
            for (int i = 0; i < 3; i++) {
                int32_t nr;
                const float *tp = sp_ctx_taps(ctx, i, &nr);
                for (int32_t t = 0; t < T; t++)
                    memcpy(feat + ((int64_t)t * 3 + i) * D, tp + (int64_t)t * D, (size_t)D * sizeof(float));
            }
            for (int32_t t = 0; t < T; t++) { /* the target's distributions at temperature 1 */
                float *row = logits + (int64_t)t * V, mx = -INFINITY, sum = 0;
                for (int32_t v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
                for (int32_t v = 0; v < V; v++) sum += row[v] = expf(row[v] - mx);
                for (int32_t v = 0; v < V; v++) row[v] /= sum;
            }
            double m;
            if (sp_thead_run(h, tok, feat, logits, T, K, &loss, true, 1.0f / (float)batch, &m, &e)) goto fail;
            step_loss += m / (double)batch;
        }
        const float gn = sp_thead_step(h, &ap);
        if (st < avg) first += step_loss / (double)avg;
        if (st >= steps - avg) last += step_loss / (double)avg;
        if (!quiet && (st % 10 == 0 || st == steps - 1))
            fprintf(stderr, "step %lld/%lld loss %.4f lr %.2g grad %.3f %.1f s\n", (long long)st + 1, steps,
                    step_loss, ap.lr, gn, sp_now() - t0);
    }
    if (sp_thead_save(h, layers, target, out, &e)) goto fail;
    char lname[32];
    printf("train-head: %s loss %.4f (first %lld steps) -> %.4f (last %lld), %.1f s; wrote %s\n",
           sp_loss_format(&loss, lname, sizeof lname), first, (long long)avg, last, (long long)avg,
           sp_now() - t0, out);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "specula: %s\n", e.msg);
out:
    sp_thead_free(h);
    sp_ctx_free(ctx);
    sp_model_free(tm);
    free(ids), free(tok), free(embd), free(logits), free(feat), free(buf);
    return rc;
}
