/* head.h: training EAGLE-3 heads (internal; the head's inference is
 * src/engine/eagle3.c). llm.c-style forward/backward over float arrays for
 * one head: fc fusion of three target taps into g, one decoder layer over
 * [RMSNorm(embedding); RMSNorm(g)] (the target's embeddings, frozen), a
 * SwiGLU FFN, the output norm and an output matrix over the full target
 * vocabulary or a draft vocabulary (written with its d2t map), optionally
 * an RMSNorm over the three taps before fc (norm_before_fc);
 * norm_before_residual is off.
 *
 * Training-time test (EAGLE-3): a window of T tokens gives K unrolled
 * steps. Step 1 at slot s pairs (token s+1, g = fc(taps[s])); step k > 1 at
 * slot s+k-1 pairs (token s+k, the pre-norm output of step k-1 of the same
 * chain) and attends to the step-1 slots 0..s and its own chain's earlier
 * steps, exactly what drafting sees. Step k of chain s is scored against the
 * target's row at s+k (the distribution of token s+k+1), s + k <= T - 1. */
#ifndef SP_TRAIN_HEAD_H
#define SP_TRAIN_HEAD_H

#include <stdint.h>

#include "gguf.h"
#include "loss.h"
#include "sp_status.h"
#include "sp_train.h"

typedef struct sp_thead_shape {
    int32_t dim, n_heads, n_kv_heads, ffn_dim, tgt_dim, n_vocab;
    int32_t n_draft;     /* output rows: a draft vocabulary of n_draft target ids; 0: all n_vocab */
    bool norm_before_fc; /* an RMSNorm (enc.output_norm) over the three taps before fc */
    float rope_theta, eps;
} sp_thead_shape;

typedef struct sp_thead sp_thead;

/* A fresh head (N(0, 1/fan_in) matrices, norms 1) drawing token embeddings
 * from embd [n_vocab][dim] (copied); d2t: the n_draft target ids of the
 * draft vocabulary, ascending (NULL with n_draft 0: the full vocabulary). */
sp_status sp_thead_init(const sp_thead_shape *s, const float *embd, const int32_t *d2t, uint64_t seed,
                        sp_thead **out, sp_error *err);
void sp_thead_free(sp_thead *h);
int32_t sp_thead_n_tensors(const sp_thead *h);
const char *sp_thead_tensor(sp_thead *h, int32_t i, int64_t *n, float **value, float **grad);

/* Forward over one window: tokens[T], feat[T][3 tgt_dim] (the three taps
 * side by side), target rows p[T][n_vocab]; K unrolled steps (1..8). With a
 * draft vocabulary the logits are over it and each target row is
 * restricted to it and renormalised (as EAGLE-3 trains; ce skips next
 * tokens outside it).
 * Returns the mean loss over the scored (chain, step) pairs; when backward
 * is true, adds grad_scale * d(mean loss)/d(params) into the gradients. */
sp_status sp_thead_run(sp_thead *h, const int32_t *tokens, const float *feat, const float *p, int32_t T,
                       int32_t K, const sp_loss *loss, bool backward, float grad_scale, double *mean,
                       sp_error *err);
/* The same with each row's target as a loss target (dense .p, or sparse
 * top-k ids and probabilities plus the rest): rows[t] is the distribution
 * of token t + 1. With loss ce the window's next tokens are the targets. */
sp_status sp_thead_run_rows(sp_thead *h, const int32_t *tokens, const float *feat, const sp_loss_target *rows,
                            int32_t T, int32_t K, const sp_loss *loss, bool backward, float grad_scale,
                            double *mean, sp_error *err);

/* One window of training data: T tokens, feat [T][3 tgt_dim], rows[T]. */
typedef struct sp_thead_window {
    const int32_t *tokens;
    const float *feat;
    const sp_loss_target *rows;
    int32_t T;
} sp_thead_window;

/* One AdamW step at ap->lr over n windows, each window's mean loss weighted
 * 1/n: the step of train-head and of the online learner. *mean (may be
 * NULL): the mean loss; *gnorm (may be NULL): the gradient norm. */
sp_status sp_thead_train_step(sp_thead *h, const sp_thead_window *w, int32_t n, int32_t K, const sp_loss *loss,
                              const sp_adamw_params *ap, double *mean, float *gnorm, sp_error *err);

/* The target's token embeddings as its forward pass reads them, [V][dim]
 * (malloc'd): the frozen embeddings of a head. */
sp_status sp_thead_target_embd(const sp_model *target, float **embd, sp_error *err);

/* The weights of an eagle3 file (any loadable type, as F32) for training
 * further, with embd from sp_thead_target_embd; layers gets its target
 * layers. SP_ERR_UNSUPPORTED for heads outside what the trainer models
 * (sp_eagle3_trainable). */
sp_status sp_thead_load(const char *path, const sp_model *target, const float *embd, int32_t layers[3],
                        sp_thead **out, sp_error *err);

/* A head for drafting with the current weights: `like` (a head of the same
 * shape loaded for the target) with the trainer's weights, packed anew. */
sp_status sp_thead_to_eagle3(const sp_thead *h, const sp_eagle3 *like, sp_eagle3 **out, sp_error *err);

/* Logits of the last run: step k (1-based), chain s, n_draft (or n_vocab) floats. */
const float *sp_thead_logits(const sp_thead *h, int32_t T, int32_t k, int32_t s);
void sp_thead_zero_grad(sp_thead *h);
float sp_thead_step(sp_thead *h, const sp_adamw_params *p);

/* Writes the head as llama.cpp's converter lays an eagle3 file out (F32):
 * target layers, target hidden size, the tokenizer.* keys of target_path. */
sp_status sp_thead_save(const sp_thead *h, const int32_t layers[3], const char *target_path,
                        const char *path, sp_error *err);

#endif
