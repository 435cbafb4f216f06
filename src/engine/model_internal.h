/* model_internal: the weight layout shared by model_load.c (binding tensors
 * from files) and model.c (the forward pass). Not a public header. */
#ifndef SP_MODEL_INTERNAL_H
#define SP_MODEL_INTERNAL_H

#include "sp_file.h"
#include "sp_gguf.h"
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
    sp_weight w1;           /* gate [ffn, dim] */
    sp_weight w2;           /* down [dim, ffn] */
    sp_weight w3;           /* up   [ffn, dim] */
    const float *q_norm, *k_norm; /* per-head RMSNorm weights [head_dim] (qwen3, gemma3) or NULL */
    const float *post_attn_norm, *post_ffn_norm; /* [dim] norms of the block outputs (gemma) or NULL */
    int32_t window;         /* > 0: sliding-window layer (attends to the last `window` positions) */
    bool rope_local;        /* uses the local RoPE table (gemma3's sliding layers) */
} sp_layer;

struct sp_model {
    sp_model_config cfg;
    char desc[96];
    sp_gguf *gguf;        /* owned when loaded from GGUF */
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
    sp_layer *layers;
    float embed_scale;    /* > 0: embeddings multiplied by it (gemma: sqrt(dim)) */
    bool geglu;           /* FFN gate through GELU (gemma) instead of SiLU */
    float attn_softcap;   /* > 0: attention scores -> cap * tanh(score / cap) (gemma2) */
    bool q_prescale;      /* queries times 1/sqrt(head_dim) before the dot, not the scores
                           * after (phi3, gemma2: as llama.cpp's graphs; other last bits) */
    float final_softcap;  /* > 0: logits -> cap * tanh(logit / cap) (gemma2) */
    float rope_theta_local; /* > 0: RoPE base of the rope_local layers (gemma2, gemma3) */
    float rope_scale_local; /* their linear position scale (0: 1) */
    float kq_scale;       /* > 0: the attention scale instead of 1/sqrt(head_dim) (gemma 27B) */
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

/* The KV cache of a context. */
#include "kv.h"
sp_kv *sp_ctx_kv(sp_ctx *c);

#endif
