/* sp_distill: training loops over text for sp_train models.
 *
 * Pre-training (loss ce): windows of the token stream, next-token
 * cross-entropy. Distillation (fkl, rkl, jsd, tvd): windows of the text
 * scored by a teacher model (its row at position t is the distribution of
 * token t+1), compared with the student's at every position; a fraction of
 * the sequences is on-policy (DistillSpec, OSD): their first half comes from
 * the text and the second half is sampled from the student (temperature 1),
 * then scored by the teacher. Teacher rows may be cut to the top-k entries
 * plus the remaining mass. Deterministic given the seed. */
#ifndef SP_DISTILL_H
#define SP_DISTILL_H

#include <stdint.h>

#include "sp_loss.h"
#include "sp_model.h"
#include "sp_train.h"

typedef struct sp_distill_params {
    sp_loss loss;
    int64_t steps;          /* optimizer steps */
    int32_t batch;          /* sequences per micro-batch */
    int32_t seq_len;        /* tokens per sequence */
    int32_t accum;          /* micro-batches per step */
    float lr, lr_min;       /* cosine from lr to lr_min after warm-up */
    int64_t warmup;         /* warm-up steps */
    sp_adamw_params adamw;  /* its lr is set by the schedule */
    double on_policy;       /* fraction of sequences sampled from the student, [0, 1] */
    int32_t on_policy_refresh; /* steps between refreshes of the sampling copy */
    int32_t topk;           /* > 0: teacher rows as top-k + rest; 0: dense */
    uint64_t seed;
    const char *vocab_from; /* GGUF with the vocabulary (on-policy sampling copies) */
} sp_distill_params;

/* ce: batch 8, seq 64, accum 1, lr 3e-3 -> 3e-4, warm-up 10 steps, dense rows. */
sp_distill_params sp_distill_default_params(void);

typedef struct sp_distill_progress {
    int64_t step, steps;    /* step just done (1-based), total */
    double loss;            /* mean loss of the step */
    float lr, grad_norm;
    double tokens_per_s;    /* student tokens trained per second so far */
    double elapsed;         /* seconds */
} sp_distill_progress;
typedef void (*sp_distill_cb)(const sp_distill_progress *p, void *ud);

/* Trains `student` for p->steps steps on data[0..n) (token ids). teacher is
 * required unless the loss is ce; its vocabulary must match the student's.
 * cb (may be NULL) is called after every step. */
sp_status sp_distill_run(sp_tmodel *student, const sp_model *teacher, const int32_t *data, int64_t n,
                         const sp_distill_params *p, sp_distill_cb cb, void *ud, sp_error *err);

/* Mean loss of `student` on `windows` windows of seq_len tokens spread
 * evenly over data (ce: next token; else against the teacher's dense rows). */
sp_status sp_distill_eval(sp_tmodel *student, const sp_model *teacher, const int32_t *data, int64_t n,
                          const sp_loss *loss, int32_t seq_len, int32_t windows, double *mean,
                          sp_error *err);

/* EAGLE-3 heads (`specula train-head`, src/train/head.c): windows of
 * seq_len tokens of data go through the target with hidden-state taps on
 * `layers`; a head of the target's width (its embeddings, frozen; an output
 * over the full vocabulary) learns the target's distributions at
 * temperature 1 under `loss` over `unroll` steps of EAGLE-3's
 * training-time test (later steps read the head's own pre-norm output),
 * `batch` windows per AdamW step; the result is written to out_path as an
 * eagle3 GGUF with the tokenizer of target_path (the target's file).
 * Deterministic given the seed. */
typedef struct sp_head_params {
    int32_t layers[3];      /* target layers read (0..n_layers) */
    int32_t ffn_dim;        /* 0: the target's */
    int32_t n_heads, n_kv_heads; /* 0: the target's */
    int64_t steps, warmup;
    int32_t batch, seq_len, unroll;
    float lr, lr_min;
    sp_loss loss;           /* not ce */
    uint64_t seed;
    int32_t threads;        /* the target's forward passes */
} sp_head_params;

/* EAGLE-3's default layers 2, n/2, n-3 (clamped to [0, n]); 200 steps of
 * 4 x 64 tokens, 3 unrolled steps, lr 3e-3 -> 3e-4 after 10 warm-up steps,
 * forward KL. */
sp_head_params sp_head_default_params(int32_t target_layers);
/* cb gets each step's mean loss; *first and *last (may be NULL) the mean
 * loss of the first and last min(10, steps) steps. */
sp_status sp_distill_head(const sp_model *target, const char *target_path, const int32_t *data, int64_t n,
                          const sp_head_params *p, const char *out_path, sp_distill_cb cb, void *ud,
                          double *first, double *last, sp_error *err);

/* Token ids of a text: paragraphs (separated by blank lines) each encoded
 * with BOS in front, concatenated. *ids is malloc'd. */
sp_status sp_distill_tokenize(const sp_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                              int64_t *n, sp_error *err);

#endif
