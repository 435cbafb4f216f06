/* sp_mkmodel: write a GGUF model with random weights, of any architecture
 * the loader reads (sp_model_arch_name; llama by default), with the biases,
 * norms, fused and tied tensors its files have; mixture-of-experts llama
 * (Mixtral style), qwen3moe and gpt-oss with n_expert experts, type MXFP4
 * for the experts with Q8_0 elsewhere.
 *
 * Used for tests (tiny models with exactly computable distributions) and for
 * benchmarks (realistic 100M-1B parameter shapes in every weight type). The
 * file follows llama.cpp's naming and layout, so llama.cpp loads it too. The
 * vocabulary is copied from another GGUF model (tokenizer.* keys), or made up
 * (n_vocab single-character pieces, SPM style, ids 0/1/2 = unk/BOS/EOS). */
#ifndef SP_MKMODEL_H
#define SP_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "sp_status.h"

typedef struct sp_mkmodel_params {
    int32_t dim, n_layers, n_heads, n_kv_heads, ffn_dim;
    int32_t n_ctx;            /* context_length written to the file */
    int32_t n_vocab;          /* used when vocab_from is NULL (4..4096) */
    const char *vocab_from;   /* GGUF file whose tokenizer to copy, or NULL */
    int32_t pad_vocab;        /* > the vocabulary's size: append "[PAD<i>]" entries up to this many ids, as
                                 converters do for Qwen (0: none) */
    sp_ggml_type type;        /* matrices: any type sp_mkmodel_type_ok accepts */
    bool mix_k_m;             /* type Q4_K or Q5_K: llama-quantize's Q4_K_M / Q5_K_M mix, i.e. Q6_K
                                 for output.weight and for attn_v and ffn_down (ffn_down_exps too) on the
                                 layers it gives
                                 more bits (the first and last eighth, every third in between) */
    uint64_t seed;
    float logit_scale;        /* std of the output logits (default 1) */
    const char *arch;         /* any sp_model_arch_name; NULL: llama */
    int32_t n_expert;         /* > 0: mixture-of-experts FFNs (llama: Mixtral style; qwen3moe and
                                 gpt-oss need it), each expert of ffn_dim */
    int32_t n_expert_used;    /* experts per token (1..n_expert) */
    int32_t sliding_window;   /* gpt-oss, gemma2, gemma3: the sliding layers' window (0: 128 for
                                 gpt-oss as its files have, 4096 for gemma) */
    int32_t head_dim;         /* > 0: the attention head size (key_length = value_length), so that
                                 heads * head_dim may differ from dim (Qwen3-30B-A3B: 32 x 128 over
                                 2048); 0: dim / heads. Not for qwen35 or phi3. */
    float yarn_factor;        /* > 1: YaRN RoPE scaling by this factor from an original context of
                                 n_ctx / factor (gpt-oss's files: 32 from 4096); 0: none */
    int32_t n_mtp;            /* qwen35, qwen35moe, qwen3next: multi-token-prediction (nextn) blocks
                                 after the n_layers of the trunk, as llama.cpp's loaders of these read
                                 them (gated attention and the trunk's FFN: dense, or the experts and
                                 the shared expert; nextn.eh_proj/enorm/hnorm/shared_head_norm; the
                                 model's embeddings and output); 0: none */
} sp_mkmodel_params;

sp_mkmodel_params sp_mkmodel_default_params(void);
/* True for the weight types mkmodel writes (those Specula quantises to). */
bool sp_mkmodel_type_ok(sp_ggml_type t);
sp_status sp_mkmodel(const sp_mkmodel_params *p, const char *out_path, sp_error *err);

#endif
