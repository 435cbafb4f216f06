#!/bin/sh
# Forward cost of k = 1, 8, 16 new tokens at cache depths, Specula and
# llama.cpp's llama-bench side by side in one run, same files, same threads,
# same KV cache type (docs/RESULTS.md, "Forward cost at depth").
# usage: bench/depth_vs_llamacpp.sh LLAMA_BENCH DEPTHS MODEL.gguf [MODEL.gguf ...]
#   e.g. bench/depth_vs_llamacpp.sh ../llama.cpp/build/bin/llama-bench 128,4096 l1b-q4_K_M.gguf
# Environment: THREADS (2), REPS (3), CTK / CTV (f16).
set -eu
L=${1:?llama-bench binary}; D=${2:?depths}; shift 2
S="$(dirname "$0")/../build/specula"
T=${THREADS:-2}; R=${REPS:-3}; K=${CTK:-f16}; V=${CTV:-f16}
for f in "$@"; do
  echo "=== $f: specula"
  "$S" bench-forward -m "$f" -t "$T" --reps "$R" --depths "$D" -ctk "$K" -ctv "$V" 2>&1 | tail -n 9
  echo "=== $f: llama.cpp"
  "$L" -m "$f" -t "$T" -p 1,8,16 -n 0 -d "$D" -r "$R" -ctk "$K" -ctv "$V" 2>&1 | grep '|'
done
