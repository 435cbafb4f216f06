#!/bin/sh
# Hybrid-model speed (Qwen3.5: Gated DeltaNet layers and gated attention),
# Specula and llama.cpp side by side in one run on the same files, same
# threads, same KV cache type (issue 21's benchmark; docs/RESULTS.md):
#   decode     tokens/s of single-token forwards from an empty cache
#              (Specula bench-forward; llama-bench tg DECODE)
#   k=4        one forward of 4 new tokens at cache depth DEPTH, in ms and as
#              a multiple of one token's (llama-bench pp4 over pp1 at -d DEPTH):
#              the cost of verifying a 4-token draft
#   rollback   Specula: truncating that 4-token forward back to keep 3 tokens
#              (the recurrent state replayed over the kept tokens from its
#              snapshot), in ms and as a share of the k=4 forward
#   prefill    tokens/s over a PROMPT-token prompt in forwards of UBATCH
#              (llama-bench pp PROMPT, its ubatch 512)
# then MTP speculation against plain decoding, each engine against itself in
# the same run, greedy, GEN tokens after the same text prompt (both engines
# tokenise it with the file's qwen35 pre-tokeniser; no BOS): Specula's
# generate with --draft mtp --draft-max DRAFT and without; llama.cpp's
# llama-speculative-simple with --spec-type draft-mtp --spec-draft-n-max
# DRAFT, against llama-bench's plain decoding of GEN tokens at the prompt's
# depth (tg GEN at -d the prompt's token count; llama-speculative-simple
# refuses --spec-type none).
# The files are random-weight models (specula mkmodel --mtp 1): the MTP
# block is random too, so its drafts are rarely accepted, and the rows
# measure what a rejected draft costs each engine (its verification and
# rollback), not what a trained MTP head gains.
# usage: bench/hybrid_vs_llamacpp.sh MODEL.gguf [MODEL.gguf ...]
# Environment: LLAMA_BIN (/work/ref/llama.cpp/build/bin: llama-bench and
#   llama-speculative-simple), THREADS (2), REPS (3), DEPTH (128), DECODE (32),
#   PROMPT (512), UBATCH (512), GEN (64), DRAFT (4), CTK / CTV (f16).
# Runtime with REPS=2 on the two 2B-shaped files below, 2 threads: estimated
# at about 6 minutes on a quiet machine (llama-speculative-simple's 64 tokens
# dominate when its drafts are all rejected); under a load of 15 on 2 cores
# the Q4_K_M file alone took 48 minutes. Smoke test: PROMPT=32 GEN=8 DECODE=4 REPS=1 DEPTH=16 on a tiny
# `mkmodel --arch qwen35 --mtp 1` file with a real vocabulary.
# The issue's model: Qwen3.5-2B's shape (hidden 2048, 24 layers, every fourth
# gated attention with 8 query / 2 KV heads of 256, Gated DeltaNet with 16
# key and 16 value heads of 128 and a 4-wide convolution, FFN 6144, one MTP
# block, vocabulary padded to 248,320; the output matrix is written apart
# from the embeddings, which Qwen3.5-2B ties: a decode step reads the same
# bytes), F16 by mkmodel, then llama-quantize's Q4_K_M and Q8_0:
#   specula mkmodel --out q35-2b-shape-f16.gguf --arch qwen35 --dim 2048 --layers 24 --heads 8 \
#     --kv-heads 2 --ffn 6144 --ssm-groups 16 --mtp 1 --ctx 8192 --type f16 --seed 35 \
#     --vocab-from ../shared/reference/tokenizers/qwen35-vocab.gguf --pad-vocab 248320
#   llama-quantize q35-2b-shape-f16.gguf q35-2b-shape-q4_K_M.gguf Q4_K_M
#   llama-quantize q35-2b-shape-f16.gguf q35-2b-shape-q8_0.gguf Q8_0
set -eu
B=${LLAMA_BIN:-/work/ref/llama.cpp/build/bin}
L=$B/llama-bench; LS=$B/llama-speculative-simple
S="$(dirname "$0")/../build/specula"
T=${THREADS:-2}; R=${REPS:-3}; D=${DEPTH:-128}; N=${DECODE:-32}; P=${PROMPT:-512}; U=${UBATCH:-512}
G=${GEN:-64}; K4=${DRAFT:-4}; K=${CTK:-f16}; V=${CTV:-f16}
[ $# -ge 1 ] || { echo "usage: $0 MODEL.gguf [MODEL.gguf ...]" >&2; exit 2; }
[ -x "$S" ] || { echo "$S not built (make build/specula)" >&2; exit 2; }
[ -x "$L" ] || { echo "llama-bench not found at $L (set LLAMA_BIN)" >&2; exit 2; }
[ -x "$LS" ] || { echo "llama-speculative-simple not found at $LS (set LLAMA_BIN)" >&2; exit 2; }
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; trap 'exit 130' INT TERM
TEXT="The history of the printing press begins in the fifteenth century, when Johannes Gutenberg \
combined movable metal type, oil-based ink and a wooden press adapted from those used for wine. \
Within fifty years presses were running in more than two hundred cities across Europe, and"
CTX=$((G + 256))
i=0
for f in "$@"; do
  i=$((i + 1))
  echo "model $i: $f" >&2
  "$S" bench-forward -m "$f" -t "$T" --reps "$R" --decode "$N" --depth "$D" --prefill "$P" --ubatch "$U" \
    -ctk "$K" -ctv "$V" --json > "$W/sp$i.json"
  "$L" -m "$f" -t "$T" -r "$R" -p "$P" -n "$N" -d 0 -ctk "$K" -ctv "$V" -o json > "$W/lb$i.json" 2>/dev/null
  "$L" -m "$f" -t "$T" -r "$R" -p 1,4 -n 0 -d "$D" -ctk "$K" -ctv "$V" -o json > "$W/lk$i.json" 2>/dev/null
  "$S" generate -m "$f" -t "$T" -p "$TEXT" -n "$G" --temp 0 -c "$CTX" -ctk "$K" -ctv "$V" --json \
    > "$W/g$i-plain.json"
  "$S" generate -m "$f" -t "$T" -p "$TEXT" -n "$G" --temp 0 -c "$CTX" -ctk "$K" -ctv "$V" \
    --draft mtp --draft-max "$K4" --json > "$W/g$i-mtp.json"
  NP=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["n_prompt"])' "$W/g$i-plain.json")
  "$L" -m "$f" -t "$T" -r "$R" -p 0 -n "$G" -d "$NP" -ctk "$K" -ctv "$V" -o json > "$W/lg$i.json" 2>/dev/null
  "$LS" -m "$f" -t "$T" -p "$TEXT" -n "$G" --temp 0 -c "$CTX" -ctk "$K" -ctv "$V" -fa off \
    --spec-type draft-mtp --spec-draft-n-max "$K4" > "$W/ls$i.log" 2>&1 ||
    { echo "llama-speculative-simple failed on $f:" >&2; tail -3 "$W/ls$i.log" >&2; exit 1; }
done
python3 - "$W" "$D" "$P" "$G" "$K4" "$@" <<'EOF'
import json, os, re, sys
w, depth, prompt, gen, k = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
files = sys.argv[6:]
ld = lambda p: json.load(open(os.path.join(w, p)))
def spec_log(p):
    t = open(os.path.join(w, p), errors="replace").read()
    num = lambda key: float(re.search(key + r"\s*=\s*([0-9.]+)", t).group(1)) if re.search(key + r"\s*=", t) else 0.0
    m = re.search(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds", t)
    return {"tok_s": int(m.group(1)) / float(m.group(2)), "drafted": int(num("n_drafted")),
            "accepted": int(num("n_accept"))}
print(f"| model | engine | decode tok/s | k=4 at depth {depth}: ms | k=4 / k=1 | rollback ms (share of k=4) | prefill {prompt} tok/s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for i, f in enumerate(files, 1):
    name = os.path.basename(f)
    sp = ld(f"sp{i}.json")
    fw = {r["k"]: r for r in sp["forward"]}
    rb, pf = sp["rollback"], sp["prefill"]
    print(f"| {name} | Specula | {sp['decode_tok_s']:.2f} | {fw[4]['ms']:.1f} | {fw[4]['ms'] / fw[1]['ms']:.2f} | "
          f"{rb['ms']:.2f} ({100 * rb['of_forward']:.1f}%) | {pf['tok_s']:.1f} |")
    lb, lk = ld(f"lb{i}.json"), ld(f"lk{i}.json")
    tg = next(r["avg_ts"] for r in lb if r["n_gen"] > 0)
    pp = next(r["avg_ts"] for r in lb if r["n_prompt"] > 0)
    ms = {r["n_prompt"]: r["avg_ns"] / 1e6 for r in lk}
    print(f"| {name} | llama.cpp | {tg:.2f} | {ms[4]:.1f} | {ms[4] / ms[1]:.2f} | | {pp:.1f} |")
    print(f"| {name} | Specula / llama.cpp | {sp['decode_tok_s'] / tg:.2f}x | {fw[4]['ms'] / ms[4]:.2f}x | | | "
          f"{pf['tok_s'] / pp:.2f}x |")
print()
print("Ratio rows: decode and prefill are Specula's speed over llama.cpp's (> 1: Specula faster); "
      "k=4 is Specula's time over llama.cpp's (< 1: Specula faster).")
print()
print(f"| model | engine | decoding (greedy, {gen} tokens, drafts of {k}) | tok/s | drafted | accepted | speed-up over plain |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
for i, f in enumerate(files, 1):
    name = os.path.basename(f)
    plain, mtp = ld(f"g{i}-plain.json"), ld(f"g{i}-mtp.json")
    s = mtp.get("spec", {})
    same = "" if mtp["tokens"] == plain["tokens"] else " (OUTPUT DIFFERS FROM PLAIN)"
    print(f"| {name} | Specula | plain | {plain['tokens_per_second']:.2f} | | | 1.00x |")
    print(f"| {name} | Specula | mtp{same} | {mtp['tokens_per_second']:.2f} | {s.get('drafted', 0)} | "
          f"{s.get('accepted', 0)} | {mtp['tokens_per_second'] / plain['tokens_per_second']:.2f}x |")
    lp = next(r["avg_ts"] for r in ld(f"lg{i}.json") if r["n_gen"] > 0)
    lm = spec_log(f"ls{i}.log")
    print(f"| {name} | llama.cpp | plain (llama-bench tg {gen} at the prompt's depth) | {lp:.2f} | | | 1.00x |")
    print(f"| {name} | llama.cpp | draft-mtp | {lm['tok_s']:.2f} | {lm['drafted']} | {lm['accepted']} | "
          f"{lm['tok_s'] / lp:.2f}x |")
EOF
