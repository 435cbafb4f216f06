#!/usr/bin/env python3
"""mkeagle3.py: write a random-weight EAGLE-3 draft head for a target GGUF,
in the layout llama.cpp's converter (convert_hf_to_gguf.py, class LlamaModel
with is_eagle3) writes: architecture `eagle3`, one block, the target's
tokenizer, `eagle3.target_layers` (3 ints), `eagle3.target_hidden_size`,
`eagle3.norm_before_residual`, `eagle3.norm_before_fc`, tensors fc.weight
[3*target_dim -> dim], blk.0.attn_norm / attn_norm_2 (the hidden norm) /
attn_{q,k,v} over 2*dim inputs / attn_output / ffn_*, output_norm, output
over the draft vocabulary, d2t (i64, absolute target ids), and optionally
token_embd and enc.output_norm. Tests and llama.cpp comparisons use these
heads (tests/data/eagle3/README.md).

Run with Debian's python3 and gguf-py from a llama.cpp tree:
  PYTHONPATH=/work/ref/llama.cpp/gguf-py /usr/bin/python3 scripts/mkeagle3.py \
      --target ../shared/models/stories260K.gguf --layers 1,2,4 --draft-vocab 256 \
      --seed 1 --out head.gguf
"""
import argparse
import sys

import numpy as np

import gguf
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.contents()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, help="target model GGUF (llama-family)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", default=None, help="three target layers a,b,c (default 2,n/2,n-3 clamped)")
    ap.add_argument("--dim", type=int, default=0, help="head width (default: the target's)")
    ap.add_argument("--heads", type=int, default=0, help="attention heads (default: the target's)")
    ap.add_argument("--kv-heads", type=int, default=0, help="key/value heads (default: the target's)")
    ap.add_argument("--ffn", type=int, default=0, help="FFN width (default: the target's)")
    ap.add_argument("--draft-vocab", type=int, default=0, help="draft vocabulary size with a d2t map (0: none)")
    ap.add_argument("--d2t-ids", default=None, help="the draft vocabulary as target ids a,b,... (sets --draft-vocab)")
    ap.add_argument("--own-embd", action="store_true", help="write the head's own token_embd")
    ap.add_argument("--no-output", action="store_true", help="no output.weight (the target's is used)")
    ap.add_argument("--norm-before-residual", action="store_true")
    ap.add_argument("--norm-before-fc", action="store_true")
    ap.add_argument("--f16", action="store_true", help="matrices as F16 (norms stay F32)")
    ap.add_argument("--gain", type=float, default=1.0, help="scale of the random matrices")
    a = ap.parse_args()
    d2t_ids = None
    if a.d2t_ids:
        d2t_ids = [int(x) for x in a.d2t_ids.split(",")]
        a.draft_vocab = len(d2t_ids)

    r = GGUFReader(a.target)
    arch = field(r, "general.architecture")
    tdim = int(field(r, f"{arch}.embedding_length"))
    tlayers = int(field(r, f"{arch}.block_count"))
    theads = int(field(r, f"{arch}.attention.head_count"))
    tkv = int(field(r, f"{arch}.attention.head_count_kv", theads))
    tffn = int(field(r, f"{arch}.feed_forward_length"))
    toks = field(r, "tokenizer.ggml.tokens")
    V = len(toks)
    dim = a.dim or tdim
    heads = a.heads or theads
    kvh = a.kv_heads or tkv
    ffn = a.ffn or tffn
    hd = dim // heads
    if a.layers:
        layers = [int(x) for x in a.layers.split(",")]
    else:  # the converter's default for checkpoints without eagle_aux_hidden_state_layer_ids
        layers = [2, tlayers // 2, tlayers - 3]
    if len(layers) != 3 or any(l < 0 or l > tlayers for l in layers):
        sys.exit(f"mkeagle3: need three layers in [0, {tlayers}], got {layers}")
    if (a.no_output or not a.own_embd) and dim != tdim:
        sys.exit("mkeagle3: a head without its own embeddings or output must have the target's width")
    if a.no_output and a.draft_vocab:
        sys.exit("mkeagle3: a draft vocabulary needs the head's own output")

    rng = np.random.default_rng(a.seed)
    wt = np.float16 if a.f16 else np.float32

    def mat(rows, cols):  # ggml shape [cols, rows]: numpy (rows, cols)
        return (rng.standard_normal((rows, cols)) * (a.gain / np.sqrt(cols))).astype(wt)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = GGUFWriter(a.out, "eagle3")
    w.add_name(f"specula-eagle3-random-{a.seed}")
    w.add_context_length(int(field(r, f"{arch}.context_length", 2048)))
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_block_count(1)
    w.add_head_count(heads)
    w.add_head_count_kv(kvh)
    w.add_rope_freq_base(float(field(r, f"{arch}.rope.freq_base", 10000.0)))
    w.add_layer_norm_rms_eps(float(field(r, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)))
    w.add_file_type(1 if a.f16 else 0)
    w.add_vocab_size(V)
    w.add_rope_dimension_count(hd)
    w.add_target_layers(layers)
    w.add_target_hidden_size(tdim)
    w.add_norm_before_residual(a.norm_before_residual)
    w.add_norm_before_fc(a.norm_before_fc)
    # the target's tokenizer, as the converter copies it
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_array(key, f.contents())
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(key, f.contents())
        else:
            w.add_key_value(key, f.contents(), vt)

    Vd = a.draft_vocab or V
    if a.own_embd:
        w.add_tensor("token_embd.weight", (rng.standard_normal((V, dim)) * 0.5).astype(wt))
    w.add_tensor("fc.weight", mat(dim, 3 * tdim))
    if a.norm_before_fc:
        w.add_tensor("enc.output_norm.weight", norm(3 * tdim))
    w.add_tensor("output_norm.weight", norm(dim))
    if not a.no_output:
        w.add_tensor("output.weight", mat(Vd, dim))
    w.add_tensor("blk.0.attn_norm.weight", norm(dim))
    w.add_tensor("blk.0.attn_norm_2.weight", norm(dim))
    w.add_tensor("blk.0.attn_q.weight", mat(heads * hd, 2 * dim))
    w.add_tensor("blk.0.attn_k.weight", mat(kvh * hd, 2 * dim))
    w.add_tensor("blk.0.attn_v.weight", mat(kvh * hd, 2 * dim))
    w.add_tensor("blk.0.attn_output.weight", mat(dim, heads * hd))
    w.add_tensor("blk.0.ffn_norm.weight", norm(dim))
    w.add_tensor("blk.0.ffn_gate.weight", mat(ffn, dim))
    w.add_tensor("blk.0.ffn_up.weight", mat(ffn, dim))
    w.add_tensor("blk.0.ffn_down.weight", mat(dim, ffn))
    if a.draft_vocab:
        # d2t as the converter writes it: absolute target ids (its offsets
        # plus their index), here a random increasing subset
        if d2t_ids is not None:
            if len(set(d2t_ids)) != Vd or any(i < 0 or i >= V for i in d2t_ids):
                sys.exit("mkeagle3: --d2t-ids must be distinct target ids")
            ids = np.array(d2t_ids, dtype=np.int64)
        else:
            ids = np.sort(rng.choice(V, size=Vd, replace=False)).astype(np.int64)
        w.add_tensor("d2t", ids, raw_dtype=GGMLQuantizationType.I64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"mkeagle3: wrote {a.out}: dim {dim}, heads {heads}/{kvh}, ffn {ffn}, layers {layers}, "
          f"draft vocab {Vd} of {V}")


if __name__ == "__main__":
    main()
