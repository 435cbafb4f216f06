#!/bin/sh
# Mixture-of-experts speed, Specula and llama.cpp's llama-bench side by side
# in one run on the same files (issue 19's benchmark; docs/RESULTS.md):
#   decode       tokens/s of single-token forwards from an empty cache
#   k=8          one forward of 8 new tokens at cache depth DEPTH, in ms and
#                as a multiple of one token's (llama.cpp: pp8 over pp1 at the
#                same depth); Specula also prints the experts per layer the 8
#                tokens select (the union its grouped expert matmuls read)
#   prefill      tokens/s over a PROMPT-token prompt (llama.cpp: pp512)
# then speculative against plain decoding on the same target in the same
# run (Specula's generate, greedy, the same prompt ids): n-gram drafting on
# a repetitive prompt and the low-bit self-draft (a Q4_0 copy of the target;
# it needs as much memory again as the target's weights). The files are
# random-weight models (specula mkmodel), so a draft model's acceptance
# would mean nothing; n-gram and low-bit acceptance only say how often the
# draft's argmax equals the random target's.
# usage: bench/moe_vs_llamacpp.sh MODEL.gguf [MODEL.gguf ...]
# Environment: LLAMA_BENCH (/work/ref/llama.cpp/build/bin/llama-bench),
#   THREADS (2), REPS (3), DEPTH (128), DECODE (32 tokens), PROMPT (512),
#   GEN (64 tokens generated per speculation row), CTK / CTV (f16),
#   DRAFTS ("ngram lowbit"; "ngram" alone skips the low-bit copy).
# Smoke test (seconds): PROMPT=32 GEN=8 DECODE=4 REPS=1 DEPTH=16 on a tiny file.
# The issue's two models (random weights; made one at a time, mkmodel holds
# the file in memory while writing it):
#   Qwen3-30B-A3B shape, 24 of its 48 layers (48 would be about 18.6 GB with
#   llama-quantize's Q4_K_M mix; 24 fit the 24 GB machine beside llama.cpp):
#   specula mkmodel --out qwen3moe-30b-a3b-shape-24l-q4_K_M.gguf --arch qwen3moe --dim 2048 --layers 24 \
#     --heads 32 --kv-heads 4 --head-dim 128 --ffn 768 --experts 128 --experts-used 8 --type q4_K_M \
#     --vocab-from ../shared/reference/tokenizers/qwen3-vocab.gguf --ctx 40960 --seed 30
#   gpt-oss-20b shape (llama.cpp's openai-moe hparams: 24 layers, 64/8 heads of 64, 32 experts of
#   2880, 4 used, SWA 128 on alternate layers, YaRN 32 from 4096), o200k vocabulary:
#   specula mkmodel --out gpt-oss-20b-shape-mxfp4.gguf --arch gpt-oss --dim 2880 --layers 24 \
#     --heads 64 --kv-heads 8 --head-dim 64 --ffn 2880 --experts 32 --experts-used 4 \
#     --sliding-window 128 --yarn 32 --ctx 131072 --type mxfp4 \
#     --vocab-from ../shared/reference/tokenizers/gptoss-vocab.gguf --seed 20
set -eu
L=${LLAMA_BENCH:-/work/ref/llama.cpp/build/bin/llama-bench}
S="$(dirname "$0")/../build/specula"
T=${THREADS:-2}; R=${REPS:-3}; D=${DEPTH:-128}; N=${DECODE:-32}; P=${PROMPT:-512}; G=${GEN:-64}
K=${CTK:-f16}; V=${CTV:-f16}; DR=${DRAFTS:-ngram lowbit}
[ $# -ge 1 ] || { echo "usage: $0 MODEL.gguf [MODEL.gguf ...]" >&2; exit 2; }
[ -x "$S" ] || { echo "$S not built (make build/specula)" >&2; exit 2; }
[ -x "$L" ] || { echo "llama-bench not found at $L (set LLAMA_BENCH)" >&2; exit 2; }
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# prompt ids: a 16-id phrase repeated (n-gram drafting has something to find)
python3 -c "print(','.join(str(3 + 3 * (i % 16)) for i in range($P)))" > "$W/ids"
IDS=$(cat "$W/ids")
i=0
for f in "$@"; do
  i=$((i + 1))
  echo "model $i: $f" >&2
  "$S" bench-forward -m "$f" -t "$T" --reps "$R" --decode "$N" --depth "$D" -ctk "$K" -ctv "$V" --json \
    > "$W/sp$i.json"
  "$S" generate -m "$f" -t "$T" --prompt-ids "$IDS" -n 1 --temp 0 -ctk "$K" -ctv "$V" --json > "$W/pf$i.json"
  "$L" -m "$f" -t "$T" -r "$R" -p "$P" -n "$N" -d 0 -ctk "$K" -ctv "$V" -o json > "$W/lb$i.json" 2>/dev/null
  "$L" -m "$f" -t "$T" -r "$R" -p 1,8 -n 0 -d "$D" -ctk "$K" -ctv "$V" -o json > "$W/lk$i.json" 2>/dev/null
  "$S" generate -m "$f" -t "$T" --prompt-ids "$IDS" -n "$G" --temp 0 -ctk "$K" -ctv "$V" --json > "$W/g$i-plain.json"
  for d in $DR; do
    case $d in
      ngram) a="--draft ngram" ;;
      lowbit) a="--draft lowbit --lowbit q4_0" ;;
      *) echo "DRAFTS: ngram or lowbit, got '$d'" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    "$S" generate -m "$f" -t "$T" --prompt-ids "$IDS" -n "$G" --temp 0 -ctk "$K" -ctv "$V" $a --json \
      > "$W/g$i-$d.json"
  done
done
python3 - "$W" "$#" "$D" "$P" "$DR" "$@" <<'EOF'
import json, os, sys
w, n, depth, prompt, drafts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split()
files = sys.argv[6:]
ld = lambda p: json.load(open(os.path.join(w, p)))
print(f"| model | engine | decode tok/s | k=8 at depth {depth}: ms | k=8 / k=1 | experts/layer (k=1, k=8) | prefill {prompt} tok/s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for i, f in enumerate(files, 1):
    name = os.path.basename(f)
    sp, pf = ld(f"sp{i}.json"), ld(f"pf{i}.json")
    fw = {r["k"]: r for r in sp["forward"]}
    print(f"| {name} | Specula | {sp['decode_tok_s']:.2f} | {fw[8]['ms']:.1f} | {fw[8]['ms'] / fw[1]['ms']:.2f} | "
          f"{fw[1]['experts_per_layer']:.1f}, {fw[8]['experts_per_layer']:.1f} | {pf['n_prompt'] / pf['prefill_seconds']:.1f} |")
    lb, lk = ld(f"lb{i}.json"), ld(f"lk{i}.json")
    tg = next(r["avg_ts"] for r in lb if r["n_gen"] > 0)
    pp = next(r["avg_ts"] for r in lb if r["n_prompt"] > 0)
    ms = {r["n_prompt"]: r["avg_ns"] / 1e6 for r in lk}
    print(f"| {name} | llama.cpp | {tg:.2f} | {ms[8]:.1f} | {ms[8] / ms[1]:.2f} | | {pp:.1f} |")
    print(f"| {name} | Specula / llama.cpp | {sp['decode_tok_s'] / tg:.2f}x | {fw[8]['ms'] / ms[8]:.2f}x | | | "
          f"{pf['n_prompt'] / pf['prefill_seconds'] / pp:.2f}x |")
print()
print("Ratio rows: decode and prefill are Specula's speed over llama.cpp's (> 1: Specula faster); "
      "k=8 is Specula's time over llama.cpp's (< 1: Specula faster).")
print()
print("| model | decoding (greedy) | tok/s | drafted | accepted | speed-up over plain |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for i, f in enumerate(files, 1):
    name = os.path.basename(f)
    plain = ld(f"g{i}-plain.json")
    print(f"| {name} | plain | {plain['tokens_per_second']:.2f} | | | 1.00x |")
    for d in drafts:
        g = ld(f"g{i}-{d}.json")
        s = g.get("spec", {})
        same = "" if g["tokens"] == plain["tokens"] else " (OUTPUT DIFFERS FROM PLAIN)"
        print(f"| {name} | {d}{same} | {g['tokens_per_second']:.2f} | {s.get('drafted', 0)} | {s.get('accepted', 0)} | "
              f"{g['tokens_per_second'] / plain['tokens_per_second']:.2f}x |")
EOF
