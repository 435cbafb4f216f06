/* deltanet: the Gated DeltaNet layers of hybrid recurrent models (llama.cpp's
 * qwen35: three of every four layers), their per-sequence recurrent state
 * with rollback, and the small pieces of the same models' gated attention
 * (output gate, text-only IMRoPE). Internal (model_load.c binds, model.c
 * calls); not a public header.
 *
 * A recurrent layer, for each token x (normed, [dim]):
 *   qkv = Wqkv x [conv_dim = 2 n_k hk + n_v hv], z = Wz x [n_v hv],
 *   b = sigmoid(Wbeta x) [n_v], g = softplus(Walpha x + dt_bias) * a [n_v]
 *   c = silu(causal depthwise conv1d of qkv over the last d_conv inputs)
 *   q, k = L2-normed heads of c (n_k heads of hk), v = n_v heads of hv
 *   per value head h (key head h % n_k; qwen3next h / (n_v / n_k)), state S_h [hv][hk]:
 *     S = exp(g_h) S;  d_j = b_h (v_j - S_j . k);  S_j += d_j k;
 *     y_j = (S_j . q) / sqrt(hk)
 *   out = Wout (RMSNorm(y_h) * ssm_norm * silu(z_h), per head).
 * The recurrent state of a layer is the conv window (the last d_conv - 1
 * qkv rows) and the n_v matrices S. */
#ifndef SP_DELTANET_H
#define SP_DELTANET_H

#include "model_internal.h"

/* One recurrent layer's weights (model_internal.h's sp_layer.dn). */
typedef struct sp_deltanet {
    int32_t index;      /* among the model's recurrent layers: its state's slot */
    sp_weight wqkv;     /* attn_qkv  [conv_dim, dim] */
    sp_weight wz;       /* attn_gate [n_v hv, dim] */
    sp_weight wbeta;    /* ssm_beta  [n_v, dim] */
    sp_weight walpha;   /* ssm_alpha [n_v, dim] */
    sp_weight wba;      /* qwen3next's ssm_ba [2 n_v, dim] in place of the two: per key
                         * head g, the betas then the alphas of its n_v / n_k value
                         * heads (wbeta, walpha unused) */
    sp_weight wout;     /* ssm_out   [dim, n_v hv] */
    const float *conv;  /* ssm_conv1d [conv_dim][d_conv], oldest input first */
    const float *dt_bias; /* ssm_dt.bias [n_v] */
    const float *a;     /* ssm_a [n_v]: -exp(A_log) */
    const float *norm;  /* ssm_norm [hv] */
} sp_deltanet;

/* Reads the shape keys (ARCH.ssm.*) into m->dn and which layers are
 * recurrent (ARCH.attention.recurrent_layers, else every layer but each
 * full_attention_interval-th, default 4) into recurrent[n_layers]. */
sp_status sp_deltanet_config(sp_model *m, const char *path, const char *arch, bool *recurrent,
                             sp_error *err);
/* Binds layer l's recurrent tensors into m->layers[l].dn (model-owned). */
sp_status sp_deltanet_bind(sp_model *m, const char *path, int32_t l, sp_error *err);
/* The matrices of a recurrent layer (for packing, sizes, requantising). */
#define SP_DELTANET_N_WEIGHTS 6
void sp_deltanet_weights(sp_deltanet *dn, sp_weight *out[SP_DELTANET_N_WEIGHTS]);

/* ---- the recurrent state of one sequence ---- */

/* Snapshot slots: the state after each of the last SP_RSTATE_SLOTS - 1
 * forwards is kept (a forward reads one slot and writes another, so a
 * snapshot costs no copy), and the recurrence inputs of the tokens since a
 * forward's start (qkv rows, decay, beta: conv_dim + 2 n_v floats per token
 * and layer) are logged, with each token's parent (the previous token, or
 * under a tree mask the nearest earlier token it sees). Rolling back to a
 * forward's boundary restores its slot; to a position inside the last
 * forward (accepting j of k draft tokens), or keeping a tree path, replays
 * the logged recurrence of those tokens from the slot the log starts at:
 * no matmuls, the recurrence's share of one forward of those tokens. A
 * forward whose tree mask reaches back into earlier forwards (a drafter
 * growing a tree level by level) appends to the log; each of its nodes is
 * computed from the log's start along its own path. The log holds up to
 * 2 x max_batch tokens. */
#define SP_RSTATE_SLOTS 10

typedef struct sp_rstate sp_rstate;

/* A zero state (position 0) for m's recurrent layers, batches up to
 * max_batch tokens, n_threads workers. */
sp_status sp_rstate_init(const sp_model *m, int32_t max_batch, int n_threads, sp_rstate **out,
                         sp_error *err);
void sp_rstate_free(sp_rstate *rs);

/* Whether a batch can run on this state: a tree mask reaching below n_past
 * (mask_from_past) must stay within the logged tokens, and the log must
 * have room for the batch (SP_ERR_UNSUPPORTED otherwise). */
sp_status sp_rstate_check(const sp_rstate *rs, const sp_batch *b, int32_t n_past, sp_error *err);
/* Starts a forward of b at n_past (after sp_rstate_check): the token
 * parents (a tree mask's nearest visible earlier token; a chain's previous
 * one) and the slot to write. sp_rstate_end makes it current. */
void sp_rstate_begin(sp_rstate *rs, const sp_batch *b, int32_t n_past);
void sp_rstate_end(sp_rstate *rs);
/* The state after the first n tokens (sp_ctx_truncate). SP_ERR_UNSUPPORTED
 * when n is neither 0, a kept boundary of a forward, nor inside the logged
 * chain of tokens. */
sp_status sp_rstate_truncate(sp_rstate *rs, int32_t n, sp_error *err);
/* Keeps the current state (of a chain of tokens) out of the slots'
 * rotation, so that sp_rstate_truncate to its length works however many
 * forwards later (a prompt cache), until a truncate below it or the next
 * pin. */
void sp_rstate_pin(sp_rstate *rs);
/* The state after positions [0, start) and then start + idx[0..m-1]
 * (sp_ctx_keep): those tokens must be logged and form a path of the tree
 * (each one's parent the one before; SP_ERR_ARG otherwise). */
sp_status sp_rstate_keep(sp_rstate *rs, int32_t start, const int32_t *idx, int32_t m, sp_error *err);

/* ---- the layer ---- */

/* A forward's chain of at least sp_deltanet_chunk_min() tokens from one
 * state (a prefill) runs the recurrence chunk by chunk (64 tokens: the
 * chunked form of the gated delta rule, deltanet.c), equal to token steps up
 * to float rounding; shorter batches (verification), trees and rollbacks
 * step token by token, bit for bit as single-token forwards. n > 0 sets the
 * threshold (default 64; tests and benchmarks) and returns the old one;
 * n <= 0 returns it. */
int32_t sp_deltanet_chunk_min(int32_t n);

/* One sequence's rows of a forward. */
typedef struct sp_dn_seq {
    sp_rstate *rs;
    int32_t row0, n;
} sp_dn_seq;

/* out[t] (dim floats, stride dim) = the recurrent mix of layer l for the
 * n rows in[t] (normed inputs, stride ld_in) of every sequence; advances
 * each sequence's state (begun by sp_rstate_begin). c: the lead context
 * (its matmuls, pool and scratch). */
void sp_deltanet_forward(sp_ctx *c, const sp_dn_seq *sq, int n_seq, int32_t l, int32_t n,
                         const float *in, int64_t ld_in, float *out);

/* ---- the gated attention of the same models ---- */

/* q holds n rows of n_heads x [query (hd) | gate (hd)]: moves the queries
 * to the first n_heads*hd floats of each row (rows then q_dim apart, the
 * layout attention reads) and the gates to gate[t][q_dim]. */
void sp_gated_attn_split(float *q, float *gate, int32_t n, int32_t n_heads, int32_t hd);
/* out[t][i] *= sigmoid(gate[t][i]) for n rows of q_dim (out rows ld apart). */
void sp_gated_attn_apply(float *out, int64_t ld, const float *gate, int32_t n, int64_t q_dim);
/* IMRoPE for text positions (llama.cpp gives a text token its position in
 * the three first sections and 0 in the fourth): the pairs of a cs table
 * (ops.h's sp_rope_cs) that the sections give position 0 get angle 0. */
void sp_imrope_text(float *cs, const int32_t sections[4], int32_t rot_dim);

#endif
