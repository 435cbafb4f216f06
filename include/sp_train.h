/* sp_train: training drafts. Sections, in order: losses (by name), the
 * trainer of small Llama drafts (shapes, making, loading, saving; its steps
 * are internal, src/train/train.h), warm-up distillation from a target,
 * online learning of the draft while serving.
 *
 * The trainer follows llm.c's train_gpt2.c: every layer is a pair of free
 * functions <layer>_forward / <layer>_backward over raw float arrays with
 * explicit shapes (train.c), composed into one forward and one backward pass
 * over B sequences of T tokens; F32 master weights, AdamW, global-norm
 * gradient clipping, linear warm-up then cosine learning rate, gradient
 * accumulation (backward adds into the gradients until zeroed). Results are
 * deterministic given the seed: threads own disjoint outputs and every sum
 * runs in a fixed order, so the thread count does not change a bit.
 *
 * Architecture (the subset of sp_model the draft needs): token embedding,
 * per layer RMSNorm -> q,k,v (GQA) -> RoPE (adjacent pairs, as llama) ->
 * causal softmax attention -> wo, residual; RMSNorm -> SwiGLU FFN, residual;
 * final RMSNorm; separate output matrix. Positions of a sequence are 0..T-1.
 *
 * Checkpoints are GGUF files (F32, F16 or Q8_0 matrices) with the vocabulary
 * copied from another GGUF file, loadable by sp_model_load and as a draft. */
#ifndef SP_TRAIN_H
#define SP_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_model.h"
#include "sp_status.h"

/* ---- losses: distillation and language-model losses over one position.
 *
 * A loss compares the target's distribution p with the draft's q =
 * softmax(z) (z: the draft's V logits) and returns its value and the
 * gradient with respect to z. Pure functions: no model, no state.
 *
 *   fkl    forward KL   D(p||q) = sum p log(p/q)          (mode covering)
 *   rkl    reverse KL   D(q||p) = sum q log(q/p)          (mode seeking)
 *   jsd    JSD[beta]    beta D(p||m) + (1-beta) D(q||m),  m = beta p + (1-beta) q
 *   tvd    total variation  1/2 sum |p - q|  (1 - TV is the acceptance rate
 *          of one token under speculative sampling, so minimising it maximises
 *          acceptance directly)
 *   ce     cross-entropy with a token y: -log q_y  (pre-training on text)
 *
 * Target rows come dense (V probabilities) or sparse: the top-k ids with
 * their probabilities plus the remaining mass `rest`. A sparse row is
 * compared on k+1 buckets: each kept id, and "everything else" whose draft
 * probability is the sum of q over the ids not kept. This coarse-grained
 * divergence never exceeds the dense one (data-processing inequality) and
 * equals it when k = V. Natural logarithms; values in nats. */
typedef enum sp_loss_kind { SP_LOSS_FKL = 0, SP_LOSS_RKL, SP_LOSS_JSD, SP_LOSS_TVD, SP_LOSS_CE } sp_loss_kind;

typedef struct sp_loss {
    sp_loss_kind kind;
    double beta; /* JSD only, in (0, 1) */
} sp_loss;

/* "fkl", "rkl", "jsd" (beta 0.5), "jsd:BETA", "tvd", "ce". SP_ERR_ARG names
 * the setting `loss` on anything else (beta outside (0, 1) included). */
sp_status sp_loss_parse(const char *s, sp_loss *out, sp_error *err);
/* "fkl", "jsd:0.5", ... into buf (at least 32 bytes); returns buf. */
const char *sp_loss_format(const sp_loss *l, char *buf, int buf_len);

/* Probabilities below this are taken as this in log p of rkl (a target row
 * with exact zeros, e.g. after top-k sampling, would make rkl infinite). */
#define SP_LOSS_P_FLOOR 1e-9

/* One position's target. Exactly one form is used:
 *   ce:     token (0 <= token < V)
 *   dense:  p != NULL, V probabilities summing to 1
 *   sparse: p == NULL, k ids (distinct, in [0, V)) with probabilities
 *           probs[k], and rest = 1 - sum(probs) >= 0 spread over the others */
typedef struct sp_loss_target {
    int32_t token;
    const float *p;
    int32_t k;
    const int32_t *ids;
    const float *probs;
    float rest;
} sp_loss_target;

typedef struct sp_train_shape {
    int32_t dim, n_layers, n_heads, n_kv_heads, ffn_dim, n_vocab;
    float rope_theta; /* default 10000 */
    float norm_eps;   /* default 1e-5 */
} sp_train_shape;

/* dim 64, 2 layers, 4 heads, 2 kv heads, ffn 128, vocabulary 512. */
sp_train_shape sp_train_default_shape(void);
/* Parses "DIM,LAYERS,HEADS,KV_HEADS,FFN" (the vocabulary is left as is).
 * SP_ERR_ARG naming the setting `draft_shape` on bad syntax or shapes. */
sp_status sp_train_shape_parse(const char *s, sp_train_shape *shape, sp_error *err);

typedef struct sp_tmodel sp_tmodel;

/* A fresh model of this shape, weights drawn from N(0, 1/fan_in) (residual
 * outputs wo, w2 also scaled by 1/sqrt(2 layers)), norms 1, from seed. */
sp_status sp_tmodel_init(const sp_train_shape *s, uint64_t seed, sp_tmodel **out, sp_error *err);
/* Weights of a GGUF/llama2.c model (any weight type, dequantised to F32; a
 * tied output matrix becomes its own copy). SP_ERR_UNSUPPORTED for models
 * outside the architecture above (biases, q/k norms, NeoX RoPE, ...). */
sp_status sp_tmodel_load(const char *path, sp_tmodel **out, sp_error *err);
void sp_tmodel_free(sp_tmodel *m);
const sp_train_shape *sp_tmodel_shape(const sp_tmodel *m);
uint64_t sp_tmodel_n_params(const sp_tmodel *m);
/* Threads used by forward/backward (a pool shared with others; NULL = 1). */
void sp_tmodel_set_pool(sp_tmodel *m, sp_pool *pool);

/* Writes the weights as GGUF (matrices in `type`: F32, F16 or Q8_0; norms
 * F32), vocabulary keys (tokenizer.*) copied from the GGUF file vocab_from
 * whose vocabulary size must match. SP_ERR_ARG for Q8_0 with dim or ffn not
 * multiples of 32. */
sp_status sp_tmodel_save(const sp_tmodel *m, const char *path, sp_ggml_type type,
                         const char *vocab_from, sp_error *err);

typedef struct sp_adamw_params {
    float lr, beta1, beta2, eps, weight_decay; /* decay on matrices only */
    float clip;                                /* global gradient norm cap; 0 = off */
} sp_adamw_params;

/* ---- distillation: training loops over text for sp_train models.
 *
 * Pre-training (loss ce): windows of the token stream, next-token
 * cross-entropy. Distillation (fkl, rkl, jsd, tvd): windows of the text
 * scored by a teacher model (its row at position t is the distribution of
 * token t+1), compared with the student's at every position; a fraction of
 * the sequences is on-policy (DistillSpec, OSD): their first half comes from
 * the text and the second half is sampled from the student (temperature 1),
 * then scored by the teacher. Teacher rows may be cut to the top-k entries
 * plus the remaining mass. Deterministic given the seed. */
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
    bool norm_before_fc;    /* an RMSNorm over the three taps before fc (eagle3.norm_before_fc) */
    int32_t draft_vocab;    /* > 0: the output covers the draft_vocab most frequent tokens of data (ties:
                             * lower id), written as d2t; the target's rows are restricted to them and
                             * renormalised. 0 (or >= the vocabulary): the full vocabulary */
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

/* ---- online learning: online speculative decoding (OSD, Liu et al.): the draft keeps
 * learning from the target's distributions while it serves.
 *
 * Every speculative iteration already computes the target's (adjusted)
 * distribution at each position it verified; sp_online_observe keeps them in
 * a bounded replay buffer (the newest `buffer` positions; each as its
 * first token and the preceding `window` - 1 tokens and the target row cut to its top-k entries plus
 * the remaining mass). sp_online_update runs AdamW steps of the draft's F32
 * master copy on random batches from the buffer (forward KL by default, the
 * loss at each example's last position), and sp_online_export writes the
 * trained draft as a GGUF file that replaces the served draft. The output
 * stays exactly the target's distribution at every moment: verification
 * always uses the target; only the proposals change. */
typedef struct sp_online_params {
    int32_t topk;       /* target row entries kept (plus the rest), 1..256; default 16 */
    int32_t buffer;     /* positions kept (newest), default 4096 */
    int32_t window;     /* context tokens per example, default 32 */
    int32_t batch;      /* examples per step, default 16 */
    float lr;           /* AdamW learning rate, default 3e-4 */
    int32_t warmup;     /* steps over which the rate ramps up from lr/warmup, default 64 */
    int32_t unroll;     /* heads: unrolled steps of the training-time test, 1..8, default 3 */
    sp_loss loss;       /* default forward KL */
    uint64_t seed;
} sp_online_params;

sp_online_params sp_online_default_params(void);

typedef struct sp_online sp_online;

/* Loads the draft's weights (a GGUF the trainer supports, sp_train.h) as the
 * master copy; vocab_from (usually the same file) provides the vocabulary
 * written into exported drafts. */
sp_status sp_online_init(const char *draft_path, const sp_online_params *p, sp_online **out,
                         sp_error *err);
void sp_online_free(sp_online *o);

/* An EAGLE-3 head learning online (OSD for heads): its F32 master copy is
 * head_path's weights, trained by the head trainer (train-head's loss and
 * step, src/train/head.h). `head` is the same file loaded for its target
 * (sp_eagle3_load), the head first served; snapshots are copies of it with
 * the trained weights (sp_spec_set_eagle3 swaps them in). The buffer keeps
 * each verified position's token, the target's three tapped hidden states
 * there (sp_spec_observed_taps: the learner must know the spec, through
 * sp_online_listen or sp_online_serve) and the top-k row of the next token;
 * an update step trains on `batch` windows of up to `window` consecutive
 * positions of one text, `unroll` steps each, as train-head does.
 * SP_ERR_UNSUPPORTED for heads the trainer does not model (e.g.
 * norm_before_residual); exports are eagle3 GGUF files with head_path's
 * tokenizer. */
sp_status sp_online_init_head(const char *head_path, const sp_eagle3 *head, const sp_online_params *p,
                              sp_online **out, sp_error *err);

/* Observes `rows` target rows of vocabulary V: row j is the distribution of
 * the token at position first + j given hist[0 .. first + j). hist holds at
 * least first + rows tokens. Matches the sp_spec observer signature. */
void sp_online_observe(void *online, const int32_t *hist, int32_t first, const float *p,
                       int32_t rows, int32_t V);

/* Makes the learner s's observer (sp_online_observe) without serving:
 * the rows of s's chain iterations go into the buffer (a head's also need
 * s's taps). */
typedef struct sp_spec sp_spec;
void sp_online_listen(sp_online *o, sp_spec *s);

/* Positions in the buffer, and positions observed in all. */
int64_t sp_online_buffered(const sp_online *o);
int64_t sp_online_observed(const sp_online *o);

/* `steps` AdamW steps on batches drawn from the buffer (nothing when it is
 * empty); *mean_loss (may be NULL) gets the mean loss of the steps. */
sp_status sp_online_update(sp_online *o, int32_t steps, double *mean_loss, sp_error *err);

/* Writes the current draft (F32) as GGUF to path. */
sp_status sp_online_export(sp_online *o, const char *path, sp_error *err);

/* ---- Serving: learning while a speculation object generates.
 *
 * sp_online_serve makes the learner the spec's observer: it keeps the
 * target's rows of every committed position, and after every `every` new
 * positions it runs `steps` optimizer steps on the buffer (on a background
 * thread unless background is false), snapshots the weights as an F32
 * sp_model and swaps it into the spec between two speculative iterations
 * (sp_spec_set_draft_model: the draft cache is rebuilt with the new
 * weights). Generation never waits for training in background mode; a
 * round starts only when the previous one has finished. Without the thread
 * the rounds run inline in the observer and the whole run is deterministic
 * given the seeds. The output stays exactly the target's distribution.
 *
 * `like` is the draft model first served (same shape as the learner's
 * weights; snapshots borrow its tokenizer and settings); a head learner
 * serves the head given at init and takes `like` NULL. s may be NULL:
 * learn for specs attached later. Free the spec (or detach it) before the
 * learner: an attached spec drafts with the learner's snapshot. */
typedef struct sp_online_schedule {
    int32_t every;    /* positions observed between training rounds (default 256) */
    int32_t steps;    /* optimizer steps per round (default 32) */
    bool background;  /* train on a thread (default true) */
} sp_online_schedule;

sp_online_schedule sp_online_default_schedule(void);

typedef struct sp_spec sp_spec;
typedef struct sp_model sp_model;
sp_status sp_online_serve(sp_online *o, sp_spec *s, const sp_model *like,
                          const sp_online_schedule *sch, sp_error *err);

/* Waits for a running round to finish and serves its snapshot now (a
 * checkpoint between requests, or the end of a stream). */
void sp_online_wait(sp_online *o);

/* One learner, several speculation objects in turn (a server slot whose
 * requests use different settings): attach makes s (drafting with `like`)
 * the one observed and gives it the newest snapshot; detach gives the
 * attached spec `like` back and stops observing it, so it may outlive the
 * learner. Only one spec is attached at a time; call both from the
 * generating thread, between generations. */
sp_status sp_online_attach(sp_online *o, sp_spec *s, sp_error *err);
void sp_online_detach(sp_online *o);

/* The draft the learner serves now: its newest snapshot, or `like` (NULL
 * for a head). */
const sp_model *sp_online_model(const sp_online *o);
/* The head the learner serves now: its newest snapshot, or the head given
 * at init (NULL for a draft model). */
const sp_eagle3 *sp_online_head(const sp_online *o);

typedef struct sp_online_stats {
    int64_t observed, buffered; /* positions seen, positions in the buffer */
    int64_t rounds, steps;      /* training rounds and optimizer steps done */
    int64_t swaps;              /* snapshots served */
    int64_t errors;             /* rounds or swaps that failed (last message in last_err) */
    double last_loss;           /* mean loss of the last round */
    double t_train;             /* seconds spent training (all threads' wall time) */
} sp_online_stats;

sp_online_stats sp_online_get_stats(sp_online *o, sp_error *last_err);

#endif
