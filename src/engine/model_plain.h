/* model_plain: a plain Llama model as float tensors, both ways: the
 * engine's interface to the trainer (src/train), which reads a loaded
 * model's weights and serves its own as a model. "Plain": no biases, q/k
 * or post-block norms, NeoX or scaled RoPE, sliding windows, soft caps,
 * embedding scale or GELU gate, and head_dim * n_heads == dim.
 *
 * Tensor t of every layer is stacked: layer l's copy starts at
 * t[l * size], with C = dim, KVD = n_kv_heads * head_dim, F = ffn_dim,
 * V = n_vocab; matrices are [rows][cols] as in GGUF. */
#ifndef SP_MODEL_PLAIN_H
#define SP_MODEL_PLAIN_H

#include <stdbool.h>

#include "sp_model.h"

typedef enum sp_plain_tensor {
    SP_PT_EMB,       /* [V][C] */
    SP_PT_ATTN_NORM, /* [C] per layer */
    SP_PT_WQ,        /* [C][C] per layer */
    SP_PT_WK,        /* [KVD][C] per layer */
    SP_PT_WV,        /* [KVD][C] per layer */
    SP_PT_WO,        /* [C][C] per layer */
    SP_PT_FFN_NORM,  /* [C] per layer */
    SP_PT_W1,        /* gate [F][C] per layer */
    SP_PT_W2,        /* down [C][F] per layer */
    SP_PT_W3,        /* up [F][C] per layer */
    SP_PT_OUT_NORM,  /* [C] */
    SP_PT_OUTPUT,    /* [V][C] */
    SP_PT_COUNT
} sp_plain_tensor;

/* True when m is plain (above). */
bool sp_model_is_plain(const sp_model *m);

/* Dequantises a plain model's weights into t (sizes above). */
void sp_model_read_plain(const sp_model *m, float *const t[SP_PT_COUNT]);

/* A plain F32 model holding copies of t, with like's configuration (its
 * shape must be t's), tokenizer and RoPE factors, shared (free it before
 * like), and the description desc. Errors: no memory. */
sp_status sp_model_from_plain(const sp_model *like, const float *const t[SP_PT_COUNT],
                              const char *desc, sp_model **out, sp_error *err);

#endif
