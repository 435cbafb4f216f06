#!/usr/bin/env python3
"""Writes fuzz/gguf.dict, the libFuzzer dictionary of fuzz_gguf, from the
sources: the GGUF keys the loaders read (KEY("...") of model_load.c under
every architecture of its ARCHS table, and the literal general.* and
tokenizer.* keys), the tensor names (T("...") / B("...") as block 0's,
the literal *.weight names), the architecture and tokenizer model names,
the GGUF value type ids and the ggml tensor type ids (include/sp_gguf.h),
each key also as GGUF writes it (u64 length, bytes). Deterministic; run
from the repository root after the loaders learn new keys or types."""
import glob
import re
import struct


def src(path):
    return open(path, encoding="utf-8").read()


loaders = {p: src(p) for p in sorted(glob.glob("src/engine/*.c") + glob.glob("src/text/*.c"))}
header = src("include/sp_gguf.h")

archs = []
for text in loaders.values():
    archs += re.findall(r'^\s*\{"([a-z0-9_]+)",\s*(?:true|false)', text, re.M)
archs = sorted(set(archs))

keys, tensors, words = set(), set(), set()
for text in loaders.values():
    for k in re.findall(r'\bKEY\("([a-z0-9_.]+)"\)', text):
        keys.add(k)
        keys.update(f"{a}.{k}" for a in archs)
    for k in re.findall(r'"((?:general|tokenizer|split)\.[a-z0-9_.]+)"', text):
        keys.add(k)
    for t in re.findall(r'\bT\("([a-z0-9_]+)"\)', text):
        tensors.add(f"blk.0.{t}.weight")
    for t in re.findall(r'\bB\("([a-z0-9_]+)"\)', text):
        tensors.add(f"blk.0.{t}.bias")
    for t in re.findall(r'"([a-z0-9_.]+\.(?:weight|bias))"', text):
        tensors.add(t)
for text in (loaders.get("src/text/tokenizer_gguf.c", ""),):
    words.update(re.findall(r'"(llama|gpt2|bert|t5|rwkv|none|no_vocab|default|[a-z0-9-]{3,16})"', text))
words.update(archs)


def enum_values(prefix):
    return sorted({int(v) for v in re.findall(prefix + r'[A-Z0-9_]+\s*=\s*(\d+)', header)})


def esc(b):
    return "".join(chr(c) if 32 <= c < 127 and chr(c) not in '"\\' else "\\x%02X" % c for c in b)


lines = ["# libFuzzer dictionary of fuzz_gguf, written by scripts/gen_fuzz_dict.py: do not edit.",
         'magic="GGUF"', 'version3="\\x03\\x00\\x00\\x00"']
for i, k in enumerate(sorted(keys)):
    kb = k.encode()
    lines.append(f'key_{i}="{esc(kb)}"')
    lines.append(f'lkey_{i}="{esc(struct.pack("<Q", len(kb)) + kb)}"')
for i, t in enumerate(sorted(tensors)):
    tb = t.encode()
    lines.append(f'tensor_{i}="{esc(tb)}"')
    lines.append(f'ltensor_{i}="{esc(struct.pack("<Q", len(tb)) + tb)}"')
for i, w in enumerate(sorted(words)):
    wb = w.encode()
    lines.append(f'word_{i}="{esc(struct.pack("<Q", len(wb)) + wb)}"')
for v in enum_values("SP_GGUF_"):
    if v <= 12:
        lines.append(f'gguf_type_{v}="{esc(struct.pack("<I", v))}"')
for v in enum_values("SP_GGML_"):
    if v < 64:
        lines.append(f'ggml_type_{v}="{esc(struct.pack("<I", v))}"')
open("fuzz/gguf.dict", "w", encoding="utf-8").write("\n".join(lines) + "\n")
print(f"fuzz/gguf.dict: {len(keys)} keys, {len(tensors)} tensor names, {len(words)} names, "
      f"{len(lines) - 3} entries")
