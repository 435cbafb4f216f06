/* cmd_train: `specula train` (pre-training on text with cross-entropy) and
 * `specula distill` (a draft distilled from a target on text), thin front
 * ends over sp_train / sp_distill: flags, a progress bar on stderr, the loss
 * curve as CSV and PNG (gnuplot), the checkpoint as GGUF. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "sp_train.h"
#include "file.h"
#include "threadpool.h"
#include "sp_tokenizer.h"
#include "specula.h"

static void train_usage(FILE *f, bool distill) {
    if (distill)
        fprintf(f,
                "usage: specula distill -m TARGET (--draft-shape DIM,LAYERS,HEADS,KV_HEADS,FFN | --draft-init DRAFT)\n"
                "         --data TEXTFILE --out DRAFT.gguf [--loss fkl|rkl|jsd[:BETA]|tvd] [--on-policy FRAC]\n"
                "         [--topk K] [common flags]\n");
    else
        fprintf(f,
                "usage: specula train --data TEXTFILE --out MODEL.gguf (--shape DIM,LAYERS,HEADS,KV_HEADS,FFN | --init MODEL)\n"
                "         [--vocab-from MODEL.gguf] [common flags]\n");
    fprintf(f,
            "common: --steps N --batch B --seq T --accum A --lr LR --lr-min LR --warmup W\n"
            "        --weight-decay WD --clip C --seed S -t THREADS --type f32|f16|q8_0\n"
            "        --csv FILE --png FILE (default OUT.loss.csv / OUT.loss.png) --eval TEXTFILE --quiet\n");
}

typedef struct progress {
    bool quiet;
    FILE *csv;
    double last_print;
} progress;

static void on_step(const sp_distill_progress *p, void *ud) {
    progress *pg = ud;
    if (pg->csv)
        fprintf(pg->csv, "%lld,%.6f,%.6g,%.4f,%.1f,%.3f\n", (long long)p->step, p->loss, p->lr,
                p->grad_norm, p->tokens_per_s, p->elapsed);
    if (pg->quiet || (p->elapsed - pg->last_print < 0.2 && p->step != p->steps)) return;
    pg->last_print = p->elapsed;
    const int W = 24;
    int fill = (int)(W * p->step / p->steps);
    char bar[32];
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '-';
    bar[W] = 0;
    const double eta = p->elapsed / (double)p->step * (double)(p->steps - p->step);
    const int eta_s = eta >= 0 && eta < 1e8 ? (int)eta : 0; /* step 0 or a stalled clock: no estimate */
    fprintf(stderr, "\r[%s] step %lld/%lld loss %.4f %.0f tok/s ETA %d:%02d ", bar, (long long)p->step,
            (long long)p->steps, p->loss, p->tokens_per_s, eta_s / 60, eta_s % 60);
    if (p->step == p->steps) fputc('\n', stderr);
    fflush(stderr);
}

/* gnuplot over the CSV into png, without a shell; 0 ok, 1 gnuplot missing, -1 failed. */
static int plot_curve(const char *csv, const char *png, const char *title) {
    char gp[4096];
    snprintf(gp, sizeof gp,
             "set terminal pngcairo size 800,480\nset output '%s'\nset datafile separator ','\n"
             "set xlabel 'optimizer step'\nset ylabel 'loss (nats)'\nset title '%s'\nset grid\n"
             "plot '%s' every ::1 using 1:2 with lines title 'training loss'\n",
             png, title, csv);
    if (strchr(png, '\'') || strchr(csv, '\'')) return -1;
    int fds[2];
    if (pipe(fds)) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[0], 0);
        close(fds[0]);
        close(fds[1]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 1), dup2(null, 2);
        execlp("gnuplot", "gnuplot", (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    ssize_t w = write(fds[1], gp, strlen(gp));
    close(fds[1]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (w < 0) return -1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) return 1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int read_tokens(const char *path, const sp_tokenizer *tok, int32_t **ids, int64_t *n) {
    char *buf = NULL;
    size_t len = 0;
    sp_error e;
    if (sp_file_read(path, "training text", (uint64_t)1 << 30, &buf, &len, &e) ||
        sp_distill_tokenize(tok, buf, len, ids, n, &e)) {
        free(buf);
        fprintf(stderr, "specula: %s\n", e.msg);
        return -1;
    }
    free(buf);
    return 0;
}

static int run(int argc, char **argv, bool distill) {
    const char *cmd = distill ? "distill" : "train";
    const char *target = NULL, *data = NULL, *out = NULL, *init = NULL, *shape_s = NULL;
    const char *vocab = NULL, *csv = NULL, *png = NULL, *eval = NULL;
    char vbuf[1024], csvbuf[1100], pngbuf[1100];
    sp_distill_params p = sp_distill_default_params();
    long long v, threads = 1;
    double d;
    bool quiet = false;
    sp_ggml_type type = SP_GGML_F32;
    if (distill) {
        p.loss.kind = SP_LOSS_FKL;
        p.lr = 3e-3f;
    }
    enum { O_DATA = SP_OPT_CMD, O_CSV, O_PNG, O_EVAL, O_VOCAB_FROM, O_STEPS, O_BATCH, O_SEQ, O_ACCUM,
           O_WARMUP, O_SEED, O_LR, O_LR_MIN, O_WD, O_CLIP, O_QUIET, O_TYPE, O_SHAPE, O_INIT, O_LOSS,
           O_ON_POLICY, O_TOPK };
#define COMMON_OPTIONS                                                                               \
    {"data", required_argument, NULL, O_DATA}, {"out", required_argument, NULL, 'o'},               \
        {"csv", required_argument, NULL, O_CSV}, {"png", required_argument, NULL, O_PNG},           \
        {"eval", required_argument, NULL, O_EVAL}, {"vocab-from", required_argument, NULL, O_VOCAB_FROM}, \
        {"steps", required_argument, NULL, O_STEPS}, {"batch", required_argument, NULL, O_BATCH},   \
        {"seq", required_argument, NULL, O_SEQ}, {"accum", required_argument, NULL, O_ACCUM},       \
        {"warmup", required_argument, NULL, O_WARMUP}, {"seed", required_argument, NULL, O_SEED},   \
        {"threads", required_argument, NULL, 't'}, {"lr", required_argument, NULL, O_LR},           \
        {"lr-min", required_argument, NULL, O_LR_MIN}, {"weight-decay", required_argument, NULL, O_WD}, \
        {"clip", required_argument, NULL, O_CLIP}, {"quiet", no_argument, NULL, O_QUIET},           \
        {"type", required_argument, NULL, O_TYPE}, {"help", no_argument, NULL, 'h'}
    static const struct option train_opts[] = {
        COMMON_OPTIONS, {"shape", required_argument, NULL, O_SHAPE}, {"init", required_argument, NULL, O_INIT},
        {NULL, 0, NULL, 0}};
    static const struct option distill_opts[] = {
        COMMON_OPTIONS,
        {"draft-shape", required_argument, NULL, O_SHAPE},
        {"draft-init", required_argument, NULL, O_INIT},
        {"model", required_argument, NULL, 'm'},
        {"loss", required_argument, NULL, O_LOSS},
        {"on-policy", required_argument, NULL, O_ON_POLICY},
        {"topk", required_argument, NULL, O_TOPK},
        {NULL, 0, NULL, 0}};
#undef COMMON_OPTIONS
    /* numeric settings: id, range, destination (one of the three) */
    const struct {
        int id;
        double lo, hi;
        int64_t *i64;
        int32_t *i32;
        float *f32;
    } nums[] = {
        {O_STEPS, 1, 100000000, &p.steps, NULL, NULL},   {O_BATCH, 1, 4096, NULL, &p.batch, NULL},
        {O_SEQ, 2, 4096, NULL, &p.seq_len, NULL},         {O_ACCUM, 1, 4096, NULL, &p.accum, NULL},
        {O_WARMUP, 0, 100000000, &p.warmup, NULL, NULL}, {O_TOPK, 0, 1 << 20, NULL, &p.topk, NULL},
        {O_LR, 1e-8, 10, NULL, NULL, &p.lr},              {O_LR_MIN, 0, 10, NULL, NULL, &p.lr_min},
        {O_WD, 0, 10, NULL, NULL, &p.adamw.weight_decay}, {O_CLIP, 0, 1e9, NULL, NULL, &p.adamw.clip}};
    const char *flag;
    int opt;
    optind = 0;
    while ((opt = cli_next(argc, argv, distill ? "m:o:t:h" : "o:t:h", distill ? distill_opts : train_opts,
                              cmd, &flag)) != -1) {
        switch (opt) {
        case 'h': train_usage(stdout, distill); return 0;
        case '?': return 2;
        case O_DATA: data = optarg; break;
        case 'o': out = optarg; break;
        case O_CSV: csv = optarg; break;
        case O_PNG: png = optarg; break;
        case O_EVAL: eval = optarg; break;
        case O_VOCAB_FROM: vocab = optarg; break;
        case O_SHAPE: shape_s = optarg; break;
        case O_INIT: init = optarg; break;
        case 'm': target = optarg; break;
        case O_QUIET: quiet = true; break;
        case 't':
            if (cli_int(flag, optarg, 1, 256, &threads)) return 2;
            break;
        case O_SEED:
            if (cli_int(flag, optarg, 0, 1LL << 62, &v)) return 2;
            p.seed = (uint64_t)v;
            break;
        case O_ON_POLICY:
            if (cli_float(flag, optarg, 0, 1, &p.on_policy)) return 2;
            break;
        case O_TYPE:
            if (!strcasecmp(optarg, "f32")) type = SP_GGML_F32;
            else if (!strcasecmp(optarg, "f16")) type = SP_GGML_F16;
            else if (!strcasecmp(optarg, "q8_0")) type = SP_GGML_Q8_0;
            else {
                fprintf(stderr, "specula: %s must be f32, f16 or q8_0, got '%s'\n", flag, optarg);
                return 2;
            }
            break;
        case O_LOSS: {
            sp_error e;
            if (sp_loss_parse(optarg, &p.loss, &e) || p.loss.kind == SP_LOSS_CE) {
                fprintf(stderr, "specula: %s: %s\n", flag,
                        p.loss.kind == SP_LOSS_CE ? "distillation takes fkl, rkl, jsd[:BETA] or tvd" : e.msg);
                return 2;
            }
            break;
        }
        default:
            for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
                if (nums[i].id != opt) continue;
                if (nums[i].f32) {
                    if (cli_float(flag, optarg, nums[i].lo, nums[i].hi, &d)) return 2;
                    *nums[i].f32 = (float)d;
                } else {
                    if (cli_int(flag, optarg, (long long)nums[i].lo, (long long)nums[i].hi, &v)) return 2;
                    if (nums[i].i64) *nums[i].i64 = v;
                    else *nums[i].i32 = (int32_t)v;
                }
            }
            break;
        }
    }
    if (distill && !target) return fprintf(stderr, "specula distill: -m TARGET is required\n"), 2;
    if (!data || !out) return fprintf(stderr, "specula %s: --data and --out are required\n", cmd), 2;
    if (!!init == !!shape_s)
        return fprintf(stderr, "specula %s: give exactly one of %s and %s\n", cmd,
                       distill ? "--draft-shape" : "--shape", distill ? "--draft-init" : "--init"), 2;
    if (!vocab) {
        if (distill) vocab = target;
        else if (init) vocab = init;
        else {
            const char *root = getenv("SPECULA_SHARED");
            snprintf(vbuf, sizeof vbuf, "%s/models/stories260K.gguf", root && *root ? root : "../shared");
            vocab = vbuf;
        }
    }
    p.vocab_from = vocab;
    if (!csv) snprintf(csvbuf, sizeof csvbuf, "%s.loss.csv", out), csv = csvbuf;
    if (!png) snprintf(pngbuf, sizeof pngbuf, "%s.loss.png", out), png = pngbuf;

    int rc = 1;
    sp_error e;
    sp_model *tm = NULL, *vm = NULL;
    sp_tmodel *sm = NULL;
    sp_pool *pool = NULL;
    int32_t *ids = NULL, *eids = NULL;
    int64_t n = 0, en = 0;
    FILE *cf = NULL;
    /* the tokenizer: the target's (distill) or the vocabulary file's */
    if (sp_model_load(vocab, NULL, distill ? &tm : &vm, &e)) goto fail;
    const sp_model *tokm = distill ? tm : vm;
    if (!sp_model_tokenizer(tokm)) {
        sp_fail(&e, SP_ERR_ARG, "%s has no vocabulary to tokenize the text with", vocab);
        goto fail;
    }
    if (read_tokens(data, sp_model_tokenizer(tokm), &ids, &n)) goto out;
    if (eval && read_tokens(eval, sp_model_tokenizer(tokm), &eids, &en)) goto out;
    if (init) {
        if (sp_tmodel_load(init, &sm, &e)) goto fail;
    } else {
        sp_train_shape s = sp_train_default_shape();
        s.n_vocab = sp_model_cfg(tokm)->n_vocab;
        if (sp_train_shape_parse(shape_s, &s, &e) || sp_tmodel_init(&s, p.seed, &sm, &e)) goto fail;
    }
    if (sp_tmodel_shape(sm)->n_vocab != sp_model_cfg(tokm)->n_vocab) {
        sp_fail(&e, SP_ERR_ARG, "the model has %d tokens, the vocabulary %d",
                 sp_tmodel_shape(sm)->n_vocab, sp_model_cfg(tokm)->n_vocab);
        goto fail;
    }
    if (sp_pool_init((int)threads, &pool, &e)) goto fail;
    sp_tmodel_set_pool(sm, pool);
    cf = fopen(csv, "w");
    if (!cf) {
        sp_fail(&e, SP_ERR_ARG, "cannot write %s: %s", csv, strerror(errno));
        goto fail;
    }
    fprintf(cf, "step,loss,lr,grad_norm,tokens_per_s,seconds\n");
    char lname[32];
    sp_loss_format(&p.loss, lname, sizeof lname);
    const sp_train_shape *sh = sp_tmodel_shape(sm);
    fprintf(stderr, "%s: %lld parameters (dim %d, %d layers, %d/%d heads, ffn %d), %lld text tokens, loss %s, %lld steps of %d x %d x %d tokens\n",
            cmd, (long long)sp_tmodel_n_params(sm), sh->dim, sh->n_layers, sh->n_heads, sh->n_kv_heads,
            sh->ffn_dim, (long long)n, lname, (long long)p.steps, p.accum, p.batch, p.seq_len);
    double before = 0, after = 0;
    const int32_t ew = 32, eseq = p.seq_len < 64 ? p.seq_len : 64;
    if (eids && sp_distill_eval(sm, tm, eids, en, &p.loss, eseq, ew, &before, &e)) goto fail;
    progress pg = {.quiet = quiet, .csv = cf, .last_print = -1};
    if (sp_distill_run(sm, tm, ids, n, &p, on_step, &pg, &e)) goto fail;
    if (fclose(cf)) {
        cf = NULL;
        sp_fail(&e, SP_ERR_ARG, "cannot write %s", csv);
        goto fail;
    }
    cf = NULL;
    if (eids) {
        if (sp_distill_eval(sm, tm, eids, en, &p.loss, eseq, ew, &after, &e)) goto fail;
        printf("held-out %s loss: %.4f before, %.4f after\n", lname, before, after);
    }
    if (sp_tmodel_save(sm, out, type, vocab, &e)) goto fail;
    char title[128];
    snprintf(title, sizeof title, "specula %s, loss %s", cmd, lname);
    int pr = plot_curve(csv, png, title);
    if (pr == 1) fprintf(stderr, "specula: gnuplot not installed; no %s (scripts/setup.sh installs it)\n", png);
    else if (pr < 0) fprintf(stderr, "specula: gnuplot failed to draw %s\n", png);
    printf("wrote %s (%s), loss curve %s%s%s\n", out, sp_ggml_type_name(type), csv, pr == 0 ? ", " : "", pr == 0 ? png : "");
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "specula: %s\n", e.msg);
out:
    if (cf) fclose(cf);
    sp_tmodel_free(sm);
    sp_pool_free(pool);
    sp_model_free(tm);
    sp_model_free(vm);
    free(ids);
    free(eids);
    return rc;
}

int cmd_train(int argc, char **argv) { return run(argc, argv, false); }
int cmd_distill(int argc, char **argv) { return run(argc, argv, true); }
