#!/bin/sh
# Writes tests/vectors/moe_ref.txt: llama.cpp's logits for small
# mixture-of-experts models that `specula mkmodel` makes (tests/test_moe.c
# makes the same files again from the same flags and seed, and holds
# Specula's logits to these). Reference side only: needs a llama.cpp build
# and scripts/ref_logits.sh.
# usage: scripts/gen_moe_vectors.sh LLAMA_CPP_DIR
# Record format: "model NAME FLAGS..." (the mkmodel flags), then
# "logits ROWS COLS" and ROWS lines of %.6g (ids IDS, all in one batch),
# then "greedy N" and a line of N greedy ids continuing them.
set -eu
L=${1:?llama.cpp directory}
cd "$(dirname "$0")/.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
sh scripts/ref_logits.sh "$L" "$T/ref_logits"
IDS=5,17,33,3,60,12,47,41,8,20,33,56,9,2,51,15
OUT=tests/vectors/moe_ref.txt
echo "ids $IDS" > "$OUT"
while read -r name flags; do
  # shellcheck disable=SC2086
  build/specula mkmodel --out "$T/m.gguf" $flags
  "$T/ref_logits" -m "$T/m.gguf" --ids "$IDS" --greedy 32 > "$T/out.txt"
  echo "model $name $flags" >> "$OUT"
  echo "logits 16 $(head -1 "$T/out.txt" | wc -w)" >> "$OUT"
  head -16 "$T/out.txt" >> "$OUT"
  echo "greedy 32" >> "$OUT"
  tail -1 "$T/out.txt" >> "$OUT"
done <<MODELS
qwen3moe-f16 --arch qwen3moe --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 64 --experts 8 --experts-used 2 --vocab 64 --type f16 --seed 7
llama-moe-q8_0 --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --experts 4 --experts-used 2 --vocab 64 --type q8_0 --seed 8
qwen3moe-mxfp4 --arch qwen3moe --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 64 --experts 8 --experts-used 3 --vocab 64 --type mxfp4 --seed 9
llama-moe-q4_K --dim 256 --layers 2 --heads 4 --kv-heads 4 --ffn 256 --experts 6 --experts-used 2 --vocab 64 --type q4_K --seed 10
gpt-oss-f16 --arch gpt-oss --dim 128 --layers 3 --heads 4 --kv-heads 2 --ffn 64 --experts 8 --experts-used 2 --vocab 64 --sliding-window 12 --type f16 --seed 11
qwen3moe-yarn-f16 --arch qwen3moe --dim 128 --layers 3 --heads 2 --kv-heads 1 --ffn 64 --experts 8 --experts-used 2 --vocab 64 --type f16 --yarn 4 --ctx 256 --seed 13
gpt-oss-yarn-f16 --arch gpt-oss --dim 128 --layers 3 --heads 2 --kv-heads 1 --ffn 64 --experts 8 --experts-used 2 --vocab 64 --type f16 --yarn 8 --ctx 256 --sliding-window 10 --seed 14
gpt-oss-mxfp4 --arch gpt-oss --dim 128 --layers 3 --heads 4 --kv-heads 2 --ffn 64 --experts 8 --experts-used 4 --vocab 64 --sliding-window 20 --type mxfp4 --seed 12
MODELS
