/* model_internal: the weight layout shared by model_load.c (binding tensors
 * from files) and model.c (the forward pass). Not a public header. */
#ifndef SP_MODEL_INTERNAL_H
#define SP_MODEL_INTERNAL_H

#include "moe.h"
#include "file.h"
#include "gguf.h"
#include "sp_model.h"

/* A matrix of `rows` rows of `cols` elements; row r starts at data + r*row_bytes.
 * packed: the same matrix in the packed layout of ops.h (groups of 16 rows
 * packed_stride bytes apart), made at load when the kernels in use compute
 * faster from it; NULL otherwise. Matmuls read it, everything else data. */
typedef struct sp_weight {
    sp_ggml_type type;
    int64_t rows, cols;
    size_t row_bytes;
    const uint8_t *data;
    const uint8_t *packed;
    size_t packed_stride;
    /* What the forward pass does to y = W x after the matmul, in llama.cpp's
     * orders: y * scale[0] + bias, or (y + bias) * scale[0] when bias_first
     * (its FFN matrices). scale: the file's per-matrix "NAME.scale" [1] that
     * the architecture's graph applies; bias [rows]; either NULL: none. */
    const float *scale;
    const float *bias;
    bool bias_first;
} sp_weight;

typedef struct sp_layer {
    const float *attn_norm; /* [dim] */
    const float *ffn_norm;  /* [dim] */
    sp_weight wq;           /* [n_heads*head_dim, dim] */
    sp_weight wk;           /* [kv_dim, dim] */
    sp_weight wv;           /* [kv_dim, dim] */
    sp_weight wo;           /* [dim, n_heads*head_dim] */
    sp_weight w1;           /* gate [ffn, dim] (with experts: the shared expert's [sh_ffn, dim]) */
    sp_weight w2;           /* down [dim, ffn] (shared expert: [dim, sh_ffn]) */
    sp_weight w3;           /* up   [ffn, dim] (shared expert: [sh_ffn, dim]) */
    const float *q_norm, *k_norm; /* per-head RMSNorm weights [head_dim] (qwen3, gemma3) or NULL */
    const float *post_attn_norm, *post_ffn_norm; /* [dim] norms of the block outputs (gemma) or NULL */
    const float *sinks;     /* per-head attention sink logits [n_heads] (gpt-oss) or NULL */
    int32_t window;         /* > 0: sliding-window layer (attends to the last `window` positions) */
    bool rope_local;        /* uses the local RoPE table (gemma3's sliding layers) */
    struct sp_deltanet *dn; /* a Gated DeltaNet layer in place of attention (deltanet.h), or NULL */
    /* mixture of experts (moe.h; exp_up NULL: the dense w1/w2/w3 FFN) */
    sp_weight gate_inp;     /* router [n_expert, dim] */
    const float *gate_inp_b; /* [n_expert] or NULL */
    sp_weight *exp_gate, *exp_up, *exp_down; /* [n_expert]: expert e's [ffn, dim], [ffn, dim],
                                              * [dim, ffn] (rows of the 3-D file tensor) */
    const float *exp_gate_b, *exp_up_b, *exp_down_b; /* [n_expert][ffn], .., [n_expert][dim] or NULL */
    const float *exp_gate_s, *exp_up_s, *exp_down_s; /* per-expert output scales [n_expert] or NULL */
    /* the shared expert beside the routed ones (qwen35moe, qwen3next; w2.data
     * NULL: none): w1/w2/w3 above, its output times sigmoid(sh_gate x) */
    sp_weight sh_gate;      /* ffn_gate_inp_shexp [1, dim] */
} sp_layer;

/* The Gated DeltaNet layers' shape (qwen35, deltanet.h); zero without them. */
typedef struct sp_dn_shape {
    int32_t n_layers;     /* recurrent layers */
    int32_t d_conv;       /* convolution width (ssm.conv_kernel) */
    int32_t hk, hv;       /* key and value head sizes (ssm.state_size; equal) */
    int32_t n_k, n_v;     /* key heads (ssm.group_count), value heads (ssm.time_step_rank) */
    int32_t conv_dim;     /* 2 n_k hk + n_v hv */
    bool grouped;         /* value head h reads key head h / (n_v / n_k) (qwen3next);
                           * else h % n_k (qwen35) */
} sp_dn_shape;

struct sp_model {
    sp_model_config cfg;
    char desc[96];
    sp_gguf *gguf;        /* owned when loaded from GGUF */
    uint8_t *claimed;     /* while a GGUF loads: [n_tensors], 1 for each tensor the
                           * architecture reads (model_load.c: claim); NULL after */
    void *map;            /* owned mapping of a llama2.c checkpoint */
    size_t map_len;
    sp_tokenizer *tok;
    bool owns_tok;
    sp_weight tok_embd;   /* [n_vocab, dim] */
    sp_weight output;     /* [n_vocab, dim]; may alias tok_embd */
    const float *out_norm;
    const float *rope_factors; /* [rot_dim/2] frequency divisors (Llama 3.1 rope_freqs), or NULL */
    /* phi3's rope_factors_long/short [rot_dim/2] (either may be NULL): a
     * context of more than n_ctx_orig tokens uses the long ones, as llama.cpp
     * picks them by its context size; rope_factors, when set, wins */
    const float *rope_long, *rope_short;
    int32_t n_ctx_orig;
    sp_layer *layers;     /* [n_layers + n_mtp]: the trunk, then the MTP blocks */
    /* MTP (nextn) blocks after the trunk (qwen35, qwen35moe, qwen3next:
     * `nextn_predict_layers`; block_count counts them, cfg.n_layers does
     * not). Each is a full gated-attention layer (layers[n_layers + i]; its
     * FFN the trunk's kind, dense or experts) entered through eh_proj
     * over [RMSNorm(embedding, enorm); RMSNorm(h, hnorm)]. */
    int32_t n_mtp;
    struct sp_mtp_block {
        sp_weight eh_proj;    /* [dim, 2 dim] */
        const float *enorm, *hnorm; /* [dim] */
        const float *head_norm; /* [dim] shared_head_norm, or NULL: out_norm */
        sp_weight embed;      /* [n_vocab, dim] embed_tokens, or zeroed: tok_embd */
        sp_weight head;       /* [n_vocab, dim] shared_head_head, or zeroed: output */
    } *mtp;               /* [n_mtp] */
    float embed_scale;    /* > 0: embeddings multiplied by it (gemma: sqrt(dim)) */
    bool geglu;           /* FFN gate through GELU (gemma) instead of SiLU */
    float attn_softcap;   /* > 0: attention scores -> cap * tanh(score / cap) (gemma2) */
    bool q_prescale;      /* queries times 1/sqrt(head_dim) before the dot, not the scores
                           * after (phi3, gemma2: as llama.cpp's graphs; other last bits) */
    bool q_prescale_lowp; /* the same when the cache is F16 or Q8_0 (the queries are then
                           * rounded after the scale, as llama.cpp 2026-09 does: gemma3) */
    float final_softcap;  /* > 0: logits -> cap * tanh(logit / cap) (gemma2) */
    float rope_theta_local; /* > 0: RoPE base of the rope_local layers (gemma2, gemma3) */
    float rope_scale_local; /* their linear position scale (0: 1) */
    float kq_scale;       /* > 0: the attention scale instead of 1/sqrt(head_dim) (gemma 27B) */
    bool attn_gated;      /* the q projection gives per head [query | gate] and the attention
                           * output is multiplied by sigmoid(gate) (qwen35) */
    int32_t rope_sections[4]; /* IMRoPE sections (qwen35; all 0: plain RoPE) */
    sp_dn_shape dn;
    sp_moe_cfg moe;       /* n_expert 0: dense FFNs */
    int32_t sh_ffn;       /* the shared expert's FFN width (0: none) */
    bool rope_yarn;       /* YaRN RoPE scaling (factor 1 / cfg.rope_scale, from n_ctx_orig) */
    float rope_attn_factor; /* rope.scaling.attn_factor (YaRN) */
    void **owned;         /* buffers made at load time (converted norms, requantised weights) */
    int n_owned, cap_owned;
};

/* Allocate a buffer owned by the model (freed with it); NULL on failure. */
void *sp_model_alloc(sp_model *m, size_t bytes);
/* m->desc from its architecture name and configuration ("llama 5L d64 ..."). */
void sp_model_set_desc(sp_model *m, const char *arch);
/* Packed copies of the matmul weights, when the kernels in use want them
 * (model_load.c); fm: the file mapping whose pages they release, or NULL. */
sp_status sp_model_pack_weights(sp_model *m, const sp_file_map *fm, sp_error *err);

/* A 2-D tensor t of a file (NULL: absent) as a weight [rows, cols]: its
 * shape and type checked, each failure one line naming path and name; an
 * absent tensor is an error unless optional (w zeroed then). */
sp_status sp_weight_from_tensor(const sp_gguf_tensor *t, const char *path, const char *name, int64_t cols,
                                int64_t rows, bool optional, sp_weight *w, sp_error *err);

/* model_load.c's tensor binding: a matrix [rows, cols] (optional: an
 * absent tensor leaves w zeroed) and an f32 vector (optional: NULL). */
sp_status sp_model_bind_matrix(sp_model *m, const char *path, const char *name, int64_t cols,
                               int64_t rows, bool optional, sp_weight *w, sp_error *err);
sp_status sp_model_bind_vector(sp_model *m, const char *path, const char *name, int64_t n,
                               bool optional, const float **out, sp_error *err);

/* model.c's matmuls for other layer files: y_i = W_i x (with each weight's
 * scale and bias, sp_weight) for up to 3 weights sharing an input of n rows
 * (ld_x apart; W_i->cols floats each), on c's pool. */
typedef struct sp_mm_out {
    const sp_weight *w;
    float *y;             /* n rows of w->rows floats, ld_y apart */
    int64_t ld_y;
} sp_mm_out;
void sp_ctx_matmul(sp_ctx *c, const sp_mm_out *mm, int n_mm, const float *x, int64_t ld_x, int32_t n);

/* The architectures of model_load.c's table (sp_model_arch_name) joined by
 * sep into buf (terminated, truncated to cap - 1); returns the length the
 * whole list needs, like snprintf. For messages. */
size_t sp_model_arch_list(const char *sep, char *buf, size_t cap);

/* The KV cache of a context. */
#include "kv.h"
sp_kv *sp_ctx_kv(sp_ctx *c);
/* The context's expert scratch (its read statistics), or NULL for a dense model. */
sp_moe_scratch *sp_ctx_moe(sp_ctx *c);

#endif
