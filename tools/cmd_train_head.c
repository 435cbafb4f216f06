/* cmd_train_head: `specula train-head`, a thin front end over
 * sp_distill_head (sp_train.h): flags, progress on stderr, and the head
 * written as an eagle3 GGUF that Specula (--draft eagle3 -md) and
 * llama.cpp (--spec-type draft-eagle3) load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "clock.h"
#include "sp_train.h"
#include "file.h"
#include "specula.h"

static void usage(FILE *f) {
    fprintf(f, "usage: specula train-head -m TARGET --head eagle3 --data TEXTFILE --out HEAD.gguf\n"
               "         [--layers A,B,C] [--steps N] [--batch B] [--seq T] [--unroll K] [--lr LR]\n"
               "         [--lr-min LR] [--warmup W] [--loss fkl|rkl|jsd[:BETA]|tvd] [--head-ffn F]\n"
               "         [--head-heads H,KV] [--norm-before-fc] [--draft-vocab N] [--seed S] [-t THREADS]\n"
               "         [--quiet]\n"
               "  --norm-before-fc: an RMSNorm over the three taps before fc (llama.cpp's\n"
               "  eagle3.norm_before_fc); --draft-vocab N: the head's output covers the N most\n"
               "  frequent tokens of the text, written with the d2t map (0: the full vocabulary).\n");
}

static void on_step(const sp_distill_progress *p, void *ud) {
    if (*(const bool *)ud) return;
    if (p->step % 10 == 1 || p->step == p->steps)
        fprintf(stderr, "step %lld/%lld loss %.4f lr %.2g grad %.3f %.1f s\n", (long long)p->step,
                (long long)p->steps, p->loss, p->lr, p->grad_norm, p->elapsed);
}

int cmd_train_head(int argc, char **argv) {
    const char *target = NULL, *data = NULL, *out = NULL, *layers_s = NULL, *kind = NULL, *heads_s = NULL;
    long long steps = -1, batch = -1, seq = -1, unroll = -1, warmup = -1, ffn = 0, threads = 1, seed = 1;
    long long draft_vocab = 0;
    bool norm_before_fc = false;
    double lr = -1, lr_min = -1;
    bool quiet = false, loss_set = false;
    sp_loss loss = {.kind = SP_LOSS_FKL};
    enum { O_HEAD = SP_OPT_CMD, O_DATA, O_LAYERS, O_STEPS, O_BATCH, O_SEQ, O_UNROLL, O_LR, O_LR_MIN, O_WARMUP,
           O_LOSS, O_FFN, O_HEADS, O_SEED, O_QUIET, O_NBF, O_DVOCAB };
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
        {"norm-before-fc", no_argument, NULL, O_NBF}, {"draft-vocab", required_argument, NULL, O_DVOCAB},
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
        case O_NBF: norm_before_fc = true; break;
        case O_DVOCAB: bad = cli_int(flag, optarg, 0, 1 << 24, &draft_vocab); break;
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
            loss_set = true;
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
    const sp_head_params dp = sp_head_default_params(1);
    if ((seq > 0 ? seq : dp.seq_len) < (unroll > 0 ? unroll : dp.unroll) + 2)
        return fprintf(stderr, "specula train-head: --seq %lld is too short for --unroll %lld\n",
                       seq > 0 ? seq : (long long)dp.seq_len, unroll > 0 ? unroll : (long long)dp.unroll), 2;
    int layers[3] = {0, 0, 0};
    char tail;
    if (layers_s && sscanf(layers_s, "%d,%d,%d%c", &layers[0], &layers[1], &layers[2], &tail) != 3)
        return fprintf(stderr, "specula: --layers takes three layers A,B,C, got '%s'\n", layers_s), 2;
    int hh = 0, kv = 0;
    if (heads_s && (sscanf(heads_s, "%d,%d%c", &hh, &kv, &tail) != 2 || hh < 1 || kv < 1))
        return fprintf(stderr, "specula: --head-heads takes H,KV, got '%s'\n", heads_s), 2;

    int rc = 1;
    sp_error e = {0};
    sp_model *tm = NULL;
    int32_t *ids = NULL;
    char *buf = NULL;
    size_t len = 0;
    int64_t n = 0;
    if (sp_model_load(target, NULL, &tm, &e)) goto fail;
    sp_head_params p = sp_head_default_params(sp_model_cfg(tm)->n_layers);
    if (layers_s)
        for (int i = 0; i < 3; i++) p.layers[i] = layers[i];
    if (steps > 0) p.steps = steps;
    if (batch > 0) p.batch = (int32_t)batch;
    if (seq > 0) p.seq_len = (int32_t)seq;
    if (unroll > 0) p.unroll = (int32_t)unroll;
    if (warmup >= 0) p.warmup = warmup;
    if (lr > 0) p.lr = (float)lr;
    if (lr_min >= 0) p.lr_min = (float)lr_min;
    if (loss_set) p.loss = loss;
    p.ffn_dim = (int32_t)ffn;
    p.n_heads = hh, p.n_kv_heads = kv;
    p.seed = (uint64_t)seed;
    p.threads = (int32_t)threads;
    p.norm_before_fc = norm_before_fc;
    if (draft_vocab == 1) {
        fprintf(stderr, "specula: --draft-vocab: 1 token is no vocabulary (2 or more; 0: the target's)\n");
        rc = 2;
        goto out;
    }
    p.draft_vocab = draft_vocab < sp_model_cfg(tm)->n_vocab ? (int32_t)draft_vocab : 0;
    for (int i = 0; i < 3; i++)
        if (p.layers[i] < 0 || p.layers[i] > sp_model_cfg(tm)->n_layers) {
            fprintf(stderr, "specula: --layers: %d is outside the target's [0, %d]\n", p.layers[i],
                    sp_model_cfg(tm)->n_layers);
            rc = 2;
            goto out;
        }
    if (sp_file_read(data, "training text", (uint64_t)1 << 30, &buf, &len, &e) ||
        sp_distill_tokenize(sp_model_tokenizer(tm), buf, len, &ids, &n, &e))
        goto fail;
    if (!quiet)
        fprintf(stderr, "train-head: eagle3 over layers %d,%d,%d of %s; %lld text tokens; %lld steps of %d windows x "
                "%d tokens, %d unrolled steps\n", p.layers[0], p.layers[1], p.layers[2], target, (long long)n,
                (long long)p.steps, p.batch, p.seq_len, p.unroll);
    const double t0 = sp_now();
    double first = 0, last = 0;
    if (sp_distill_head(tm, target, ids, n, &p, out, on_step, &quiet, &first, &last, &e)) goto fail;
    char lname[32];
    const long long avg = p.steps < 10 ? p.steps : 10;
    printf("train-head: %s loss %.4f (first %lld steps) -> %.4f (last %lld), %.1f s; wrote %s\n",
           sp_loss_format(&p.loss, lname, sizeof lname), first, avg, last, avg, sp_now() - t0, out);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "specula: %s\n", e.msg);
out:
    sp_model_free(tm);
    free(ids), free(buf);
    return rc;
}
