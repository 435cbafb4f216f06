#!/usr/bin/env python3
"""mkmtp.py: write a small random-weight qwen35 (Qwen3.5 dense), qwen35moe
(Qwen3.5 MoE) or qwen3next (Qwen3-Next) GGUF with MTP (nextn) layers, in the
layout llama.cpp 2026-09's loaders of these architectures read
(src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp): block_count counts
the trunk and the MTP blocks, `ARCH.nextn_predict_layers` the MTP blocks,
which follow the trunk as blk.N.* (a full gated-attention decoder layer
with the trunk's FFN plus nextn.eh_proj [2 dim -> dim], nextn.enorm,
nextn.hnorm, nextn.shared_head_norm and, with --own-head,
nextn.shared_head_head and nextn.embed_tokens). The trunk alternates Gated
DeltaNet layers with gated attention (`attention.recurrent_layers`). The
MoE architectures' FFNs (trunk and MTP block alike) are routed experts
(softmax router, top --used of --experts, weights normalised) plus a
shared expert gated by sigmoid(ffn_gate_inp_shexp x); qwen35moe stores
each expert's gate and up in one ffn_gate_up_exps, qwen3next separately.
qwen3next's recurrent layers carry one ssm_ba [beta | alpha] matrix
instead of ssm_beta and ssm_alpha, and its attention a plain NeoX RoPE
over --rope-dim dimensions (IMRoPE sections for the qwen35 ones). The vocabulary is llama.cpp's test
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
    ap.add_argument("--arch", default="qwen35", choices=["qwen35", "qwen35moe", "qwen3next"])
    ap.add_argument("--experts", type=int, default=4, help="routed experts (qwen35moe, qwen3next)")
    ap.add_argument("--used", type=int, default=2, help="experts used per token")
    ap.add_argument("--exp-ffn", type=int, default=32, help="each routed expert's FFN width")
    ap.add_argument("--sh-ffn", type=int, default=48, help="the shared expert's FFN width")
    ap.add_argument("--rope-dim", type=int, default=0, help="rotated dimensions per head (0: the head size)")
    ap.add_argument("--own-head", action="store_true", help="MTP blocks with their own embed_tokens and shared_head_head")
    ap.add_argument("--f16", action="store_true", help="matrices as F16 (norms and recurrent vectors stay F32)")
    ap.add_argument("--gain", type=float, default=1.0, help="scale of the random matrices")
    ap.add_argument("--out-gain", type=float, default=1.0,
                    help="extra scale of the blocks' output matrices (attn_output, ssm_out, ffn_down): below 1 the "
                         "model leans on the current token's embedding, so a head can guess its next tokens")
    ap.add_argument("--mtp-ffn-gain", type=float, default=None,
                    help="the MTP blocks' FFN output matrices' scale instead of --out-gain (their FFN then "
                         "moves the drafts more)")
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
    arch = a.arch
    moe = arch != "qwen35"
    rope_dim = a.rope_dim or HD
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
    w.add_rope_dimension_count(rope_dim)
    if arch != "qwen3next":
        w.add_array(f"{arch}.rope.dimension_sections", [rope_dim // 8] * 4)
    if moe:
        w.add_expert_count(a.experts)
        w.add_expert_used_count(a.used)
        w.add_expert_feed_forward_length(a.exp_ffn)
        w.add_expert_shared_feed_forward_length(a.sh_ffn)
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

    def experts(name, rows, cols, gain=1.0):  # [E, rows, cols]: ggml's [cols, rows, E]
        x = (rng.standard_normal((a.experts, rows, cols)) * (a.gain * gain / np.sqrt(cols))).astype(np.float32)
        if a.f16:
            w.add_tensor(name, x.astype(np.float16), raw_dtype=GGMLQuantizationType.F16)
        else:
            w.add_tensor(name, x)

    def ffn(p, out_gain):
        if not moe:
            mat(p + "ffn_gate.weight", F, D)
            mat(p + "ffn_up.weight", F, D)
            mat(p + "ffn_down.weight", D, F, out_gain)
            return
        # the router stays F32 (as llama.cpp's converters keep it), scaled up
        # so that the top experts differ clearly between tokens
        w.add_tensor(p + "ffn_gate_inp.weight",
                     (rng.standard_normal((a.experts, D)) * (3.0 / np.sqrt(D))).astype(np.float32))
        if arch == "qwen35moe":
            experts(p + "ffn_gate_up_exps.weight", 2 * a.exp_ffn, D)  # rows [0, f) gate, [f, 2 f) up
        else:
            experts(p + "ffn_gate_exps.weight", a.exp_ffn, D)
            experts(p + "ffn_up_exps.weight", a.exp_ffn, D)
        experts(p + "ffn_down_exps.weight", D, a.exp_ffn, out_gain)
        w.add_tensor(p + "ffn_gate_inp_shexp.weight", (rng.standard_normal(D) / np.sqrt(D)).astype(np.float32))
        mat(p + "ffn_gate_shexp.weight", a.sh_ffn, D)
        mat(p + "ffn_up_shexp.weight", a.sh_ffn, D)
        mat(p + "ffn_down_shexp.weight", D, a.sh_ffn, out_gain)

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
            if arch == "qwen3next":
                mat(p + "ssm_ba.weight", 2 * NV, D)
            else:
                mat(p + "ssm_beta.weight", NV, D)
                mat(p + "ssm_alpha.weight", NV, D)
            vec(p + "ssm_norm.weight", S)
            mat(p + "ssm_out.weight", D, inner, a.out_gain)
        else:
            attention(p)
        ffn(p, a.out_gain)
    for i in range(a.mtp):
        p = f"blk.{a.layers + i}."
        attention(p)
        ffn(p, a.out_gain if a.mtp_ffn_gain is None else a.mtp_ffn_gain)
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
