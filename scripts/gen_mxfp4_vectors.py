#!/usr/bin/env python3
"""Writes tests/vectors/mxfp4.txt: MXFP4 facts from gguf-py (llama.cpp's
Python GGUF library, an implementation independent of Specula's), read by
tests/test_quant.c.

  quant N            then N lines "x0 .. x31 : 34 hex digits": 32 floats
                     and the 17-byte block gguf-py's MXFP4.quantize_blocks
                     makes of them (ggml's quantize_row_mxfp4_ref)
  dequant TENSOR R K then R lines of K floats: the first R rows of TENSOR in
                     reference/arch2026/models/gpt-oss-moe-mxfp4.gguf (made by
                     llama-quantize), dequantised by gguf-py

usage: PYTHONPATH=/work/ref/llama.cpp/gguf-py python3 scripts/gen_mxfp4_vectors.py SHARED_DIR
"""
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import MXFP4, dequantize

shared = sys.argv[1]
rng = np.random.default_rng(20261126)
out = []
# blocks of several magnitudes, with exact ties, zeros and an all-zero block
xs = []
for i in range(24):
    scale = 10.0 ** rng.uniform(-4, 3)
    x = (rng.standard_normal(32) * scale).astype(np.float32)
    if i % 6 == 1:
        x[:8] = 0
    if i % 6 == 2:  # values on table points and midpoints of a power-of-two scale
        x = (rng.integers(-24, 25, 32) * 0.25).astype(np.float32)
    if i == 5:
        x[:] = 0
    xs.append(x)
xs = np.stack(xs)
q = MXFP4.quantize_blocks(xs.copy()).reshape(len(xs), 17)
out.append(f"quant {len(xs)}")
for x, b in zip(xs, q):
    out.append(" ".join(f"{v:.9g}" for v in x) + " : " + bytes(b).hex())

r = GGUFReader(f"{shared}/reference/arch2026/models/gpt-oss-moe-mxfp4.gguf")
for name in ("blk.0.ffn_gate_exps.weight", "blk.1.ffn_down_exps.weight"):
    t = next(t for t in r.tensors if t.name == name)
    assert t.tensor_type == GGMLQuantizationType.MXFP4
    k = int(t.shape[0])
    rows = dequantize(t.data, t.tensor_type).reshape(-1, k)[:3]
    out.append(f"dequant {name} {len(rows)} {k}")
    for row in rows:
        out.append(" ".join(f"{v:.9g}" for v in row))
open("tests/vectors/mxfp4.txt", "w").write("\n".join(out) + "\n")
