#!/usr/bin/env python3
"""mkmtp.py: write a small random-weight qwen35 (Qwen3.5 dense) GGUF with MTP
(nextn) layers, in the layout llama.cpp 2026-09's qwen35 loader reads
(src/models/qwen35.cpp): block_count counts the trunk and the MTP blocks,
`qwen35.nextn_predict_layers` the MTP blocks, which follow the trunk as
blk.N.* (a full gated-attention decoder layer plus nextn.eh_proj
[2 dim -> dim], nextn.enorm, nextn.hnorm, nextn.shared_head_norm and,
with --own-head, nextn.shared_head_head and nextn.embed_tokens). The trunk
alternates Gated DeltaNet layers with gated attention
(`attention.recurrent_layers`). The vocabulary is llama.cpp's test
tokenizer (`tokenizer.ggml.model` "test": 5-byte chunks hashed to ids), as
tests/test-llama-archs writes it. Tests and the llama.cpp comparison use
these files (tests/data/mtp/README.md).

Run with Debian's python3 and gguf-py from a llama.cpp tree:
  PYTHONPATH=/work/ref/llama.cpp/gguf-py /usr/bin/python3 scripts/mkmtp.py --out m.gguf
"""
import argparse

import numpy as np

from gguf import GGUFWriter, GGMLQuantizationType


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2, help="trunk layers (every second one attention)")
    ap.add_argument("--mtp", type=int, default=1, help="MTP blocks")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--own-head", action="store_true", help="MTP blocks with their own embed_tokens and shared_head_head")
    ap.add_argument("--f16", action="store_true", help="matrices as F16 (norms and recurrent vectors stay F32)")
    ap.add_argument("--gain", type=float, default=1.0, help="scale of the random matrices")
    ap.add_argument("--out-gain", type=float, default=1.0,
                    help="extra scale of the blocks' output matrices (attn_output, ssm_out, ffn_down): below 1 the "
                         "model leans on the current token's embedding, so a head can guess its next tokens")
    ap.add_argument("--route", type=float, default=0.0,
                    help="eh_proj = ROUTE x [I, 0] + the random matrix: the MTP block passes the token's normed "
                         "embedding on (with --out-gain < 1 its drafts then agree with the target now and then)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    D, H, KV, HD, F, V = a.dim, a.heads, a.kv_heads, a.head_dim, a.ffn, a.vocab
    S, NK, NV, CONV = 16, 2, 4, 4  # recurrent head size, key heads, value heads, conv width
    inner = NV * S
    conv_dim = 2 * NK * S + inner
    n_all = a.layers + a.mtp
    arch = "qwen35"
    w = GGUFWriter(a.out, arch)
    w.add_uint32(f"{arch}.vocab_size", V)
    w.add_context_length(256)
    w.add_embedding_length(D)
    w.add_block_count(n_all)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(HD)
    w.add_array(f"{arch}.rope.dimension_sections", [HD // 8, HD // 8, HD // 8, HD // 8])
    w.add_rope_freq_base(10000000.0)
    w.add_uint32(f"{arch}.ssm.conv_kernel", CONV)
    w.add_uint32(f"{arch}.ssm.inner_size", inner)
    w.add_uint32(f"{arch}.ssm.state_size", S)
    w.add_uint32(f"{arch}.ssm.time_step_rank", NV)
    w.add_uint32(f"{arch}.ssm.group_count", NK)
    w.add_array(f"{arch}.attention.recurrent_layers", [1 if (i < a.layers and i % 2 == 0) else 0 for i in range(n_all)])
    w.add_uint32(f"{arch}.nextn_predict_layers", a.mtp)
    w.add_string("tokenizer.ggml.model", "test")
    w.add_array("tokenizer.ggml.tokens", [f"tok_{i}" for i in range(V)])
    w.add_array("tokenizer.ggml.scores", [0.0] * V)
    w.add_array("tokenizer.ggml.token_type", [1] * V)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_bool("tokenizer.ggml.add_eos_token", False)

    def mat(name, rows, cols, gain=1.0):
        x = (rng.standard_normal((rows, cols)) * (a.gain * gain / np.sqrt(cols))).astype(np.float32)
        if a.f16:
            w.add_tensor(name, x.astype(np.float16), raw_dtype=GGMLQuantizationType.F16)
        else:
            w.add_tensor(name, x)

    def vec(name, n, mean=1.0, sd=0.1):
        w.add_tensor(name, (mean + sd * rng.standard_normal(n)).astype(np.float32))

    w.add_tensor("token_embd.weight", rng.standard_normal((V, D)).astype(np.float32) * 0.5)
    vec("output_norm.weight", D)
    mat("output.weight", V, D, 2.0)

    def attention(p):
        vec(p + "attn_norm.weight", D)
        vec(p + "post_attention_norm.weight", D)
        mat(p + "attn_q.weight", 2 * H * HD, D)
        mat(p + "attn_k.weight", KV * HD, D)
        mat(p + "attn_v.weight", KV * HD, D)
        vec(p + "attn_q_norm.weight", HD)
        vec(p + "attn_k_norm.weight", HD)
        mat(p + "attn_output.weight", D, H * HD, a.out_gain)

    def ffn(p):
        mat(p + "ffn_gate.weight", F, D)
        mat(p + "ffn_up.weight", F, D)
        mat(p + "ffn_down.weight", D, F, a.out_gain)

    for l in range(a.layers):
        p = f"blk.{l}."
        if l % 2 == 0:  # Gated DeltaNet
            vec(p + "attn_norm.weight", D)
            vec(p + "post_attention_norm.weight", D)
            mat(p + "attn_qkv.weight", conv_dim, D)
            mat(p + "attn_gate.weight", inner, D)
            w.add_tensor(p + "ssm_conv1d.weight", (rng.standard_normal((conv_dim, CONV)) * 0.5).astype(np.float32))
            vec(p + "ssm_dt.bias", NV, 0.0, 0.5)
            w.add_tensor(p + "ssm_a", (-rng.uniform(0.5, 1.5, NV)).astype(np.float32))
            mat(p + "ssm_beta.weight", NV, D)
            mat(p + "ssm_alpha.weight", NV, D)
            vec(p + "ssm_norm.weight", S)
            mat(p + "ssm_out.weight", D, inner, a.out_gain)
        else:
            attention(p)
        ffn(p)
    for i in range(a.mtp):
        p = f"blk.{a.layers + i}."
        attention(p)
        ffn(p)
        eh = (rng.standard_normal((D, 2 * D)) * (a.gain / np.sqrt(2 * D))).astype(np.float32)
        eh[:, :D] += a.route * np.eye(D, dtype=np.float32)
        w.add_tensor(p + "nextn.eh_proj.weight", eh.astype(np.float16) if a.f16 else eh,
                     raw_dtype=GGMLQuantizationType.F16 if a.f16 else None)
        vec(p + "nextn.enorm.weight", D)
        vec(p + "nextn.hnorm.weight", D)
        vec(p + "nextn.shared_head_norm.weight", D)
        if a.own_head:
            w.add_tensor(p + "nextn.embed_tokens.weight", rng.standard_normal((V, D)).astype(np.float32) * 0.5)
            mat(p + "nextn.shared_head_head.weight", V, D, 2.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
