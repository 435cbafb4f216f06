#!/usr/bin/env python3
"""Writes the small hand-made seeds of fuzz/corpus (the GGUF seeds are made
with `specula mkmodel`, see fuzz/README.md). Deterministic; run from the
repository root."""
import random
import struct

random.seed(20261124)

def f32s(n, scale=0.1):
    return b"".join(struct.pack("<f", random.uniform(-scale, scale)) for _ in range(n))

# llama2.c checkpoint (first byte 0 selects the checkpoint loader): header of
# 7 int32 (dim, hidden, layers, heads, kv_heads, vocab, seq_len), then the
# float arrays in llama2.c's order; vocab > 0 means a shared classifier.
dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 1, 512, 16
hs = dim // heads
body = f32s(vocab * dim) + f32s(layers * dim, 1) + f32s(layers * dim * dim) + f32s(layers * dim * kv * hs) \
    + f32s(layers * dim * kv * hs) + f32s(layers * dim * dim) + f32s(layers * dim, 1) \
    + f32s(layers * hidden * dim) + f32s(layers * dim * hidden) + f32s(layers * hidden * dim) \
    + f32s(dim, 1) + f32s(seq * hs // 2) + f32s(seq * hs // 2)
open("fuzz/corpus/llama2c/ckpt-tiny", "wb").write(b"\x00" + struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + body)

# llama2.c tokenizer.bin (first byte 1): int32 max_token_length, then per
# token a float score, an int32 length and the bytes. 512 tokens: <unk>,
# <s>, </s>, the 256 byte tokens <0xNN>, then short pieces.
toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
pieces = [" ", "e", "t", "a", "o", " the", " a", "n", "s", "h", "in", "er", " t", "on", "an"]
i = 0
while len(toks) < 512:
    toks.append(pieces[i % len(pieces)] + ("" if i < len(pieces) else str(i)))
    i += 1
out = struct.pack("<i", max(len(t.encode()) for t in toks))
for k, t in enumerate(toks):
    b = t.encode()
    out += struct.pack("<fi", -float(k), len(b)) + b
open("fuzz/corpus/llama2c/tok-tiny", "wb").write(b"\x01" + out)

# tokenizer texts (first byte: bit 0 picks the vocabulary, bit 1 BOS)
for name, first, text in [("ascii", 2, b"Once upon a time, there was a little girl."),
                          ("bytes", 0, b"\xc3 x\xe4 \xff\xfe\xe2\x96\x81 tab\tnew\nline"),
                          ("bpe", 1, b"Hello world! 12345 don't  spaces   \xe4\xbd\xa0\xe5\xa5\xbd")]:
    open("fuzz/corpus/tokenizer/" + name, "wb").write(bytes([first]) + text)

# verifier rows: V = 2 + b0 % 14, gamma = 1 + b1 % 4, b2 bit 0 normalises
for n, (b0, b1, b2) in enumerate([(2, 1, 1), (6, 3, 1), (0, 0, 0)]):
    V, gamma = 2 + b0 % 14, 1 + b1 % 4
    rows = 2 * gamma + 1
    data = bytes([b0, b1, b2]) + bytes(random.randrange(V) for _ in range(gamma)) + f32s(rows * V, 1.0)
    open("fuzz/corpus/verify/seed%d" % n, "wb").write(data)

# speculation configs (first byte: bit 0 JSON, bit 1 a draft model is given)
for name, data in [("kv", b"\x00draft=ngram,gamma=4,verifier=block"),
                   ("kv2", b"\x02draft=model,tree=4x2x2,verifier=mc-norep"),
                   ("json", b'\x01{"n_max": 8, "n_min": 2, "p_min": 0.5}'),
                   ("json2", b'\x03{"drafter": "layerskip", "skip": "1,3", "gamma": 3, "adaptive": true}')]:
    open("fuzz/corpus/spec_config/" + name, "wb").write(data)

# fuzz_serve_request: 3 header bytes (flags: URL in bits 0-2, method in 3-4,
# API key set in 5, draft model in 6, body too big in 7; chat template;
# context size 1 + 16 * byte), an optional first line (path or
# Authorization header), then the request body.
import json
import os
os.makedirs("fuzz/corpus/serve_request", exist_ok=True)
def serve_seed(name, flags, tmpl, ctx, body, line=None):
    head = bytes([flags, tmpl, ctx]) + ((line + "\n").encode() if line is not None else b"")
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    open("fuzz/corpus/serve_request/" + name, "wb").write(head + data)
serve_seed("completion", 0, 1, 16, {"model": "m", "prompt": "Once upon a time", "max_tokens": 16,
           "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3, "stop": ["\n\n", "The end"],
           "stream": True, "stream_options": {"include_usage": True}, "n": 1, "user": "u",
           "frequency_penalty": 0, "presence_penalty": 0, "logprobs": False, "echo": False})
serve_seed("chat", 1, 1, 32, {"messages": [{"role": "system", "content": "Be brief."},
           {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]},
           {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More."}],
           "max_completion_tokens": 8, "stop": "<|im_end|>", "stream": True})
for t in range(2, 7):
    serve_seed("chat-t%d" % t, 1, t, 64, {"messages": [{"role": "user", "content": "Tell me a story. \u00e9\u4e2d"}],
               "temperature": 0, "stop": ["\u4e2d", "y."]})
serve_seed("speculative", 0x40, 0, 32, {"prompt": ["abc abc abc"], "temperature": 0,
           "speculative": {"drafter": "ngram", "gamma": 4, "n_min": 2, "p_min": 0.5, "adaptive": True,
                           "ngram_min": 1, "ngram_max": 3}})
serve_seed("speculative-draft", 0x41, 3, 32, {"messages": [{"role": "user", "content": "q"}], "seed": 1,
           "speculative": {"drafter": "model", "verifier": "mc", "tree": "2x2"}})
serve_seed("speculative-lowbit", 0x41, 4, 64, {"messages": [{"role": "developer", "content": "s"},
           {"role": "user", "content": "q"}],
           "speculative": {"drafter": "lowbit", "n_max": 6}})
serve_seed("auth", 0x20, 0, 8, {"prompt": "p", "max_tokens": 1}, line="Bearer sk-fuzz")
serve_seed("path", 0x0E, 0, 8, b"", line="/v1/completions?x=1")
serve_seed("get-models", 0x0A, 0, 8, b"")
serve_seed("bad-json", 0, 0, 8, b'{"prompt": "a", "max_tokens": 1e400, "stop": [1]')
serve_seed("unknown-key", 0, 0, 8, {"prompt": "a", "best_of": 2})
