/* moe: the mixture-of-experts feed-forward block (router, top-k, expert
 * FFNs grouped by expert) called from model.c's FFN block. Not a public
 * header: the layer's expert tensors live in model_internal.h.
 *
 * For each of n tokens (rows of normed input x):
 *   logits = W_router x (+ router bias)
 *   probs  = softmax(logits) | sigmoid(logits) | logits (SP_MOE_SOFTMAX_WEIGHT)
 *   sel    = the K largest probs, in descending order, equal values by
 *            lower expert index first (llama.cpp's argsort on <= 16
 *            experts; with more, its std::sort leaves exact ties unordered)
 *   w_j    = probs[sel_j]; SP_MOE_SOFTMAX_WEIGHT: softmax of the K selected
 *            logits; norm_w: w_j / max(sum_j w_j, 2^-14) (the sum in double,
 *            as ggml's sum_rows); w_scale not 0 or 1: w_j * w_scale
 *   y_j    = down_e(act(gate_e(x), up_e(x))) with e = sel_j, each matmul's
 *            output times the expert's scale and plus its bias where the
 *            file has them; act = SwiGLU (silu(g) u, ggml's row kernel) or
 *            gpt-oss's clamped form (min(g, L) / (1 + exp(-a min(g, L))) *
 *            (clamp(u, -L, L) + 1), a = 1.702, L = 7)
 *   out    = ((w_0 y_0 + w_1 y_1) + w_2 y_2) + ...
 * as llama.cpp's build_moe_ffn computes it. Expert matmuls of F16/BF16
 * weights read their input rounded to that type (ggml's mul_mat_id converts
 * it to the weight's vec_dot type); quantised ones the usual q8 rows.
 *
 * The rows of a batch are grouped by expert: every expert some token
 * selects is applied, by one matmul per matrix, to all the rows that chose
 * it, so its weights are read once per forward (per chunk of SP_MOE_CHUNK
 * tokens). Each row's value does not depend on the batch (the kernels'
 * per-row arithmetic is fixed), so a token's output is the same alone or
 * among k draft tokens. */
#ifndef SP_MOE_H
#define SP_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_status.h"
#include "threadpool.h"

typedef enum sp_moe_gating { SP_MOE_SOFTMAX = 0, SP_MOE_SIGMOID = 1, SP_MOE_SOFTMAX_WEIGHT = 2 } sp_moe_gating;

/* A model's expert configuration (n_expert 0: dense FFN). */
typedef struct sp_moe_cfg {
    int32_t n_expert, n_used; /* experts per layer, selected per token */
    int32_t ffn;              /* rows of each expert's gate/up matrices */
    sp_moe_gating gating;
    bool norm_w;              /* selected weights divided by their sum */
    float w_scale;            /* weights times this unless 0 or 1 */
    bool swiglu_oai;          /* gpt-oss's clamped SwiGLU */
} sp_moe_cfg;

/* Tokens whose experts are applied together (bounds the scratch memory). */
#define SP_MOE_CHUNK 256

typedef struct sp_moe_scratch sp_moe_scratch;
struct sp_layer;
struct sp_model;

/* Scratch for forwards of up to max_batch tokens; NULL for a dense model
 * (*out stays NULL, SP_OK). */
sp_status sp_moe_scratch_init(const struct sp_model *m, int32_t max_batch, sp_moe_scratch **out,
                              sp_error *err);
void sp_moe_scratch_free(sp_moe_scratch *s);

/* out[t] (dim floats, out_stride apart) = the MoE block of x[t] (dim floats,
 * x_stride apart) for layer L, t < n. pool: the context's workers. */
void sp_moe_ffn(sp_moe_scratch *s, sp_pool *pool, const struct sp_model *m, const struct sp_layer *L,
                const float *x, int64_t x_stride, int32_t n, float *out, int64_t out_stride);

/* Experts applied so far: sum over layers and forwards of the number of
 * distinct experts a forward's chunk selected (the weights it read), and
 * the number of (layer, chunk) steps; reset to 0 by sp_moe_stats_reset. */
void sp_moe_stats(const sp_moe_scratch *s, uint64_t *experts_read, uint64_t *steps);
void sp_moe_stats_reset(sp_moe_scratch *s);

#endif
