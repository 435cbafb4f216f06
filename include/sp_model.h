/* sp_model: Llama-family transformer weights and the forward pass.
 *
 * A model is loaded once (weights are views into the mmap'd file, except
 * tensors converted at load time) and is read-only afterwards, so several
 * contexts can share it (e.g. a layer-skipping self-draft). A context owns a
 * KV cache and all scratch memory, sized at init; sp_forward allocates
 * nothing. Architectures: the Llama family and its relatives
 * (sp_model_arch_name lists them; an unsupported one is named in the load
 * error); weight
 * types: the float and ggml block formats README.md lists. */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_status.h"
#include "sp_tokenizer.h"

/* The worker pool contexts compute on (created by the tools; NULL in
 * sp_ctx_params makes one per context). */
typedef struct sp_pool sp_pool;

typedef struct sp_model_config {
    int32_t dim;         /* embedding width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t rot_dim;     /* RoPE dimensions per head (<= head_dim) */
    int32_t ffn_dim;
    int32_t n_vocab;
    int32_t n_ctx_train;
    float rope_theta;
    float rope_scale;    /* linear position scaling: angle = pos * rope_scale * freq */
    float norm_eps;
    bool rope_neox;      /* false: adjacent pairs (llama); true: halves (NeoX style, e.g. qwen2) */
    int32_t sliding_window; /* > 0: a token attends to the last this-many positions only */
    sp_ggml_type wtype;  /* type of the attention/FFN matrices (of layer 0's wq) */
    int32_t n_expert;    /* > 0: mixture-of-experts FFNs of this many experts (0: dense) */
    int32_t n_expert_used; /* experts each token is routed to */
} sp_model_config;

typedef struct sp_model sp_model;

/* Default max batch of a context: prompt tokens evaluated per forward
 * (llama.cpp's default ubatch). The context's scratch grows with it (about
 * 200 KB a row for a 1B Llama, 100 MB at 512; sp_ctx_scratch_bytes), and
 * pages of it are only touched by batches that long. */
#define SP_CTX_DEFAULT_BATCH 512

typedef struct sp_model_params {
    /* llama2.c checkpoints need their tokenizer.bin; NULL: no tokenizer.
     * A GGUF model carries its own: SP_ERR_ARG if this is set for one. */
    const char *tokenizer_path;
    /* Weights stay resident: by default every page of the mapping is read
     * in at load (a cold or evicted mapping would otherwise be read from
     * disk during the first forward passes); no_prefault skips that. mlock
     * also locks the pages (SP_ERR_RANGE when RLIMIT_MEMLOCK refuses). */
    bool no_prefault;
    bool mlock;
    /* GGUF BPE vocabularies: the pre-tokeniser to use instead of the
     * file's tokenizer.ggml.pre (NULL: the file's). */
    const char *tokenizer_pre;
} sp_model_params;

sp_model_params sp_model_default_params(void);

/* Loads a GGUF file, or a llama2.c checkpoint (detected by the absence of the
 * GGUF magic). A GGUF file is read as llama.cpp reads it: for its
 * architecture, the keys and tensors llama.cpp's loader reads, with its
 * defaults (model_load.c: ARCHS). Every problem is reported as one line in
 * err, naming the key or tensor. */
sp_status sp_model_load(const char *path, const sp_model_params *params, sp_model **out,
                        sp_error *err);
void sp_model_free(sp_model *m);
/* The architectures sp_model_load reads (general.architecture), by index
 * from 0: "llama", "qwen2", ...; NULL past the last. The one list every
 * tool and message takes them from. */
const char *sp_model_arch_name(int32_t i);

const sp_model_config *sp_model_cfg(const sp_model *m);
/* NULL when the model has none: a llama2.c checkpoint loaded without
 * tokenizer_path, or a GGUF whose tokenizer.ggml.model is "test" (llama.cpp's
 * test vocabulary) or "none"; such a model runs on token ids only. */
const sp_tokenizer *sp_model_tokenizer(const sp_model *m);
uint64_t sp_model_weight_bytes(const sp_model *m);
/* The part of sp_model_weight_bytes in expert matrices (0 for a dense model):
 * a forward reads only the experts its tokens select. */
uint64_t sp_model_expert_bytes(const sp_model *m);
const char *sp_model_desc(const sp_model *m); /* e.g. "llama 5L d64 f32" */
/* Ids below this can be sampled; the rest are the tokenizer's trailing
 * padding entries ("[PAD<i>]", see sp_tokenizer_n_unpadded), which every
 * sampler of the model gives probability 0, in plain and speculative
 * decoding alike. n_vocab when there is no padding or no tokenizer. */
int32_t sp_model_n_valid_vocab(const sp_model *m);
/* Multi-token-prediction (nextn) blocks the file carries after its trunk
 * (qwen35's `nextn_predict_layers`; 0: none). They draft for the model
 * itself (sp_forward_mtp, the mtp drafter); plain forwards never run them. */
int32_t sp_model_n_mtp(const sp_model *m);
/* out[t] = the output norm of x[t] for n rows of dim floats: the target's
 * normed final state (taps of layer n_layers, normed), the h an MTP block
 * takes. */
void sp_model_final_norm(const sp_model *m, const float *x, int32_t n, float *out);

/* ---- contexts ---- */
typedef struct sp_ctx sp_ctx;

typedef struct sp_ctx_params {
    int32_t n_ctx;      /* KV capacity in tokens; 0 = train context clamped to [512, 4096] */
    int32_t max_batch;  /* most tokens per sp_forward call; default SP_CTX_DEFAULT_BATCH */
    int32_t n_threads;  /* used when pool is NULL; default 1 */
    sp_pool *pool;      /* shared worker pool (not owned), or NULL */
    /* KV cache element types: SP_GGML_F32, SP_GGML_F16 (the default, as
     * llama.cpp's) or SP_GGML_Q8_0 (needs a head size multiple of 32).
     * The cache grows in chunks as tokens arrive, up to n_ctx. */
    sp_ggml_type type_k, type_v;
    /* A context of the model's first MTP block (sp_model_n_mtp > 0): its
     * cache holds that block's layer only, sp_forward_mtp evaluates it and
     * sp_forward refuses it. */
    bool mtp;
} sp_ctx_params;

sp_ctx_params sp_ctx_default_params(void);
sp_status sp_ctx_init(const sp_model *m, const sp_ctx_params *p, sp_ctx **out, sp_error *err);
void sp_ctx_free(sp_ctx *c);

const sp_model *sp_ctx_model(const sp_ctx *c);
int32_t sp_ctx_n_ctx(const sp_ctx *c);
int32_t sp_ctx_max_batch(const sp_ctx *c);
/* Bytes the KV cache takes when full (n_ctx tokens), and now. */
uint64_t sp_ctx_kv_bytes(const sp_ctx *c);
uint64_t sp_ctx_kv_bytes_allocated(const sp_ctx *c);
/* Bytes of the context's scratch (activations of max_batch rows, attention
 * work space), allocated at sp_ctx_init; resident only as far as used. */
uint64_t sp_ctx_scratch_bytes(const sp_ctx *c);
sp_ggml_type sp_ctx_type_k(const sp_ctx *c);
sp_ggml_type sp_ctx_type_v(const sp_ctx *c);
/* Parses a KV cache type name ("f32", "f16", "q8_0"); false if unknown. */
bool sp_kv_type_parse(const char *name, sp_ggml_type *out);
/* The worker pool the context computes on: the params' pool, or the one it
 * made for n_threads (a context sharing its pool, e.g. a draft's, passes it). */
sp_pool *sp_ctx_pool(sp_ctx *c);
/* Tokens currently in the KV cache. */
int32_t sp_ctx_n_past(const sp_ctx *c);
/* Mixture-of-experts models: the experts this context's forwards have read
 * since the last reset, summed over layers (each forward reads the union of
 * the experts its tokens select, once), and the number of (layer, forward)
 * steps; 0 and 0 for a dense model. */
void sp_ctx_expert_reads(const sp_ctx *c, uint64_t *experts, uint64_t *steps);
void sp_ctx_expert_reads_reset(sp_ctx *c);
/* Roll back: keep only the first n cached tokens. */
sp_status sp_ctx_truncate(sp_ctx *c, int32_t n, sp_error *err);
/* A prompt cache's mark: sp_ctx_truncate back to the current length keeps
 * working however many forwards later, until a truncate below it or the
 * next mark (a hybrid model's recurrent state keeps this snapshot out of
 * its rotation; attention-only caches can always truncate). Returns the
 * current length. */
int32_t sp_ctx_pin(sp_ctx *c);
/* Keep cached slots start+idx[i] (increasing) as start..start+m-1. */
sp_status sp_ctx_keep(sp_ctx *c, int32_t start, const int32_t *idx, int32_t m, sp_error *err);
/* Layers to skip (self-speculation): skip[l] true bypasses layer l. NULL
 * restores the full model. The array is copied. */
sp_status sp_ctx_set_skip_layers(sp_ctx *c, const bool *skip, sp_error *err);

/* Hidden-state taps: after this, every forward over the context records,
 * for each of the n layers (each in [0, n_layers]), the residual stream
 * entering that layer for every evaluated row (prompt chunks, draft chains,
 * tree nodes, in batch order): layer 0 is the token embedding (scaled where
 * the architecture scales it), n_layers the final state before the output
 * norm. Layer l is the input of layer l whether or not it is skipped. The
 * rows are copies of the pass's own activations (no extra weight reads);
 * sp_forward_multi records each sequence's rows in its own context. n = 0
 * (layers may be NULL) turns taps off. The list is copied. */
#define SP_MAX_TAPS 8
sp_status sp_ctx_set_taps(sp_ctx *c, const int32_t *layers, int32_t n, sp_error *err);
int32_t sp_ctx_n_taps(const sp_ctx *c);
/* Tap i (in sp_ctx_set_taps' order) of the last forward: *n_rows rows of
 * dim floats, row t for the batch's token t; NULL before any forward or for
 * an i out of range. Valid until the next forward or sp_ctx_set_taps. */
const float *sp_ctx_taps(const sp_ctx *c, int32_t i, int32_t *n_rows);

typedef struct sp_batch {
    const int32_t *tokens; /* n token ids */
    const int32_t *pos;    /* n positions; NULL = n_past + i */
    int32_t n;
    /* Attention mask over cache slots [mask_base, n_past + n): row-major
     * n x (n_past + n - mask_base), mask[i * w + (s - mask_base)] != 0 if new
     * token i sees slot s. Slots below mask_base are always visible. When
     * mask_from_past is false, mask_base is n_past: the mask covers only the
     * new tokens (w = n), mask[i*n + j] for new token j. NULL = causal over
     * the new tokens. Trees use it: each node sees the
     * committed prefix and its own ancestors (which may be earlier cached
     * tree levels when mask_from_past is set, as a draft tree grows). */
    const uint8_t *mask;
    bool mask_from_past;   /* if true, mask_base below applies */
    int32_t mask_base;
    bool logits_all;       /* logits for all n rows; else only the last */
} sp_batch;

/* Evaluates the batch, appending its n tokens to the KV cache, and writes
 * logits (n_vocab floats per row; n rows if logits_all else 1). Errors: bad
 * token ids or positions, n > max_batch, cache full (SP_ERR_RANGE). */
sp_status sp_forward(sp_ctx *c, const sp_batch *b, float *logits, sp_error *err);

/* Several sequences in one forward (continuous batching): sequence i is
 * batches[i] over context ctxs[i], which keeps its own KV cache. The rows of
 * all sequences go through every matmul together, so the weights are read
 * once for all of them; attention is per sequence over its own cache, under
 * its own batch's mask. Each sequence's logits equal those of sp_forward
 * over its context alone, bit for bit. logits: the rows that want logits
 * (all of a sequence's when logits_all, else its last), sequence after
 * sequence. The contexts are distinct, of one model, without skipped
 * layers, with the same KV cache types, and have at least as many threads as ctxs[0], whose pool and
 * scratch do the work: the total of the batches' tokens is at most
 * ctxs[0]'s max batch. Errors as sp_forward's, naming the sequence; on an
 * error no cache has changed unless SP_ERR_NUMERIC. */
#define SP_FORWARD_MAX_SEQS 256
sp_status sp_forward_multi(sp_ctx *const *ctxs, const sp_batch *batches, int32_t n_seq,
                           float *logits, sp_error *err);
/* An MTP context's forward over n pairs (b->tokens[t], h[t]) appended at
 * b's positions (under b's mask as sp_forward's): h rows of dim floats, the normed final
 * state of the target at the position before each token
 * (sp_model_final_norm; zeros before the first) or, drafting further, the
 * previous pair's h_out. logits as sp_forward's (rows: all when
 * b->logits_all, else the last); h_out (or NULL): the same rows' normed
 * outputs, dim floats each (the next draft step's h). */
sp_status sp_forward_mtp(sp_ctx *c, const sp_batch *b, const float *h, float *logits, float *h_out,
                         sp_error *err);

/* ---- EAGLE-3 draft heads, as llama.cpp defines them (architecture
 * `eagle3` in GGUF, written by its converter from EAGLE-3 checkpoints).
 *
 * A head drafts from the target's own hidden states: for three target
 * layers (`eagle3.target_layers`, the residual stream entering each; the
 * target's layer count means the final pre-norm state) it fuses the rows
 * by one matrix (`fc`, optionally after an RMSNorm `enc.output_norm`) into
 * a feature g of the head's width, then runs one decoder layer over the
 * pair (next token, g): attention input [RMSNorm(embedding); RMSNorm(g)]
 * (`blk.0.attn_norm`, `blk.0.attn_norm_2`), the attention's residual g (or
 * the normed g when `eagle3.norm_before_residual`), a SwiGLU FFN, and its
 * own output head over a draft vocabulary mapped to target ids by `d2t`.
 * The token embeddings and the output matrix are the head's own where the
 * file has them, else the target's. Drafting further steps feeds the
 * layer's pre-norm output back as g. The drafter (`--draft eagle3`) is in
 * src/speculation/draft.c; the forward pass is src/engine/eagle3.c. */
typedef struct sp_eagle3 sp_eagle3;

/* Loads a head for `target` (which must outlive it: the head may use its
 * embeddings and output matrix). Errors name the file and what does not
 * fit: not an eagle3 file, a tensor's shape or type, target layers outside
 * the target, a hidden size other than the target's, a vocabulary other
 * than the target's, d2t ids out of range or repeated. */
sp_status sp_eagle3_load(const char *path, const sp_model *target, sp_eagle3 **out, sp_error *err);
void sp_eagle3_free(sp_eagle3 *h);
/* e.g. "eagle3 d64 h4/2 ffn172 vocab 512->512 layers 1,2,4" */
const char *sp_eagle3_desc(const sp_eagle3 *h);

#endif
